//! The host side of rdmacam: what a host with an RDMA NIC does, in software or on real verbs.
//!
//! * [`soft`] — a soft RoCEv2 host: the protocol crate's RC responder plus real memory regions
//!   and receive buffers, behaving like a host NIC's receive queue (rxe is the model).
//! * [`place`] — registered memory that payloads are placed into, and placing a payload while
//!   comparing it with the expected bytes in one pass (the reference host's frame check).
//! * [`sim`] — a deterministic lossy link and a virtual clock that joins a camera's requester to
//!   a soft host, for tests that control every packet and microsecond.
//! * [`host`] and [`run`] — the reference ORSP host and its GVCP/CM connection sequence.
//! * [`gvcp`] — a GVCP client: register reads and writes with retries, and the heartbeat.
//! * `verbs_host` and `verbs_cm` (cargo feature `verbs`) — the same host on libibverbs through
//!   sideway (the verbs plumbing it shares with the camera is `rdmacam_io::verbs`).
//!
//! Sockets, capture, polling and image loading, which the camera uses too, are `rdmacam_io`'s.

pub mod cm;
pub mod gvcp;
pub mod host;
pub mod place;
pub mod run;
pub mod sim;
pub mod soft;
#[cfg(feature = "verbs")]
pub mod verbs_cm;
#[cfg(feature = "verbs")]
pub mod verbs_host;

/// `n` and the noun that goes with it: "1 packet", "2 packets", "0 packets".
pub fn plural(n: impl Into<u64>, one: &str, many: &str) -> String {
    let n = n.into();
    format!("{n} {}", if n == 1 { one } else { many })
}
