//! rdmacam's protocol core: everything a RoCEv2 camera says on the wire, with no I/O.
//!
//! `no_std`, no allocator, no `unsafe`. Every state machine here is sans-IO: it is fed the bytes
//! that arrived and the time, and asked what to send. The firmware, the Linux emulator and the
//! deterministic simulator all drive the same code.
//!
//! * [`wire`] — zero-copy packet views (`Packet<T>`) and plain representations (`Repr`) for
//!   Ethernet, IPv4, IPv6, UDP and the InfiniBand transport headers, RoCEv1/v2 framing, the ICRC
//!   and the path-MTU segmentation rules.
#![no_std]
#![forbid(unsafe_code)]
#![deny(missing_docs)]

#[cfg(any(test, feature = "std"))]
extern crate std;

pub mod camera;
pub mod cm;
pub mod device;
pub mod gev;
pub mod judge;
pub mod orsp;
pub mod rc;
pub mod secret;
pub mod splitmix;
pub mod wire;

/// Parse a whitespace-separated hex dump (test helper for the vectors in the reference notes).
#[cfg(test)]
pub(crate) fn hex(s: &str) -> std::vec::Vec<u8> {
    s.split_whitespace()
        .map(|b| u8::from_str_radix(b, 16).expect("hex byte"))
        .collect()
}
