//! Wire formats in the smoltcp style: a checked `Packet<T: AsRef<[u8]>>` view with getters (and
//! setters when `T: AsMut<[u8]>`), and a plain `Repr` with `parse`, `emit` and `buffer_len`.
//!
//! All multi-byte fields are big-endian (network order) except the ICRC, which is sent least
//! significant byte first. Malformed input is an [`Error`], never a panic.

pub mod aeth;
pub mod bth;
pub mod cnp;
pub mod deth;
pub mod ethernet;
pub mod icrc;
pub mod immdt;
pub mod ipv4;
pub mod ipv6;
pub mod opcode;
pub mod pmtu;
pub mod reth;
pub mod roce;
pub mod socket_icrc;
pub mod template;
pub mod udp;

pub use aeth::{AethRepr, AethSyndrome, NakCode};
pub use bth::BthRepr;
pub use deth::DethRepr;
pub use ethernet::{EthernetAddress, EthernetRepr, VlanTag};
pub use icrc::Icrc;
pub use opcode::Opcode;
pub use pmtu::Pmtu;
pub use reth::RethRepr;
pub use roce::{IbRepr, IpRepr, RoceV1Repr, RoceV2Repr};
pub use template::{HeaderTemplate, PacketFields};

/// Why a buffer could not be parsed or emitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Error {
    /// The buffer is shorter than the header or the length fields say it must be.
    Truncated,
    /// A length, offset or count field contradicts the buffer or the format.
    BadLength,
    /// A version field (IP version, BTH TVer, GRH next header) is not the one this format needs.
    BadVersion,
    /// The BTH opcode is not one this crate knows.
    UnknownOpcode(u8),
    /// A header checksum (IPv4) or the ICRC does not match.
    Checksum,
    /// Well-formed, but a feature RoCE never uses (IP options, fragments, reserved codes).
    Unsupported,
}

impl core::fmt::Display for Error {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Error::Truncated => f.write_str("truncated packet"),
            Error::BadLength => f.write_str("inconsistent length field"),
            Error::BadVersion => f.write_str("wrong version field"),
            Error::UnknownOpcode(op) => write!(f, "unknown BTH opcode 0x{op:02x}"),
            Error::Checksum => f.write_str("checksum mismatch"),
            Error::Unsupported => f.write_str("unsupported header feature"),
        }
    }
}

impl core::error::Error for Error {}

/// Result of a parse or emit.
pub type Result<T> = core::result::Result<T, Error>;

/// Big-endian field helpers shared by the header views.
pub(crate) mod field {
    #![allow(dead_code)]
    /// A byte range inside a header.
    pub type Field = core::ops::Range<usize>;

    pub fn u16_at(b: &[u8], at: usize) -> u16 {
        u16::from_be_bytes([b[at], b[at + 1]])
    }
    pub fn u24_at(b: &[u8], at: usize) -> u32 {
        u32::from_be_bytes([0, b[at], b[at + 1], b[at + 2]])
    }
    pub fn u32_at(b: &[u8], at: usize) -> u32 {
        u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
    }
    pub fn u64_at(b: &[u8], at: usize) -> u64 {
        let mut v = [0u8; 8];
        v.copy_from_slice(&b[at..at + 8]);
        u64::from_be_bytes(v)
    }
    #[inline]
    pub fn put_u16(b: &mut [u8], at: usize, v: u16) {
        b[at..at + 2].copy_from_slice(&v.to_be_bytes());
    }
    pub fn put_u24(b: &mut [u8], at: usize, v: u32) {
        b[at..at + 3].copy_from_slice(&v.to_be_bytes()[1..]);
    }
    pub fn put_u32(b: &mut [u8], at: usize, v: u32) {
        b[at..at + 4].copy_from_slice(&v.to_be_bytes());
    }
    pub fn put_u64(b: &mut [u8], at: usize, v: u64) {
        b[at..at + 8].copy_from_slice(&v.to_be_bytes());
    }
}
