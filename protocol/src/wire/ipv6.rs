//! IPv6 headers (RFC 8200), also the layout of the InfiniBand GRH that RoCEv1 carries.
//!
//! RoCEv2 over IPv6 puts UDP straight after the 40-byte fixed header; the ICRC masks the
//! traffic class, the flow label and the hop limit.

use core::net::Ipv6Addr;

use super::field::{put_u16, u16_at, u32_at};
use super::{Error, Result};

/// Length of the fixed IPv6 header (and of the GRH).
pub const HEADER_LEN: usize = 40;
/// Next-header value of UDP.
pub const NEXT_HEADER_UDP: u8 = 17;
/// Next-header value the GRH carries before an IBA transport header (`IB_GRH_NEXT_HDR`).
pub const NEXT_HEADER_IBA: u8 = 0x1b;

mod field {
    pub const VER_TC_FL: usize = 0;
    pub const PAYLOAD_LEN: usize = 4;
    pub const NEXT_HEADER: usize = 6;
    pub const HOP_LIMIT: usize = 7;
    pub const SRC: usize = 8;
    pub const DST: usize = 24;
}

/// A checked view of an IPv6 packet (or a GRH and what follows it).
#[derive(Debug, Clone)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// Wrap a buffer without checking it.
    pub const fn new_unchecked(buffer: T) -> Self {
        Packet { buffer }
    }

    /// Wrap a buffer, checking the header and the payload length fit.
    pub fn new_checked(buffer: T) -> Result<Self> {
        let p = Self::new_unchecked(buffer);
        p.check_len()?;
        Ok(p)
    }

    /// Check that the fixed header and the payload it announces are in the buffer.
    pub fn check_len(&self) -> Result<()> {
        let len = self.buffer.as_ref().len();
        if len < HEADER_LEN || len < HEADER_LEN + usize::from(self.payload_len()) {
            return Err(Error::Truncated);
        }
        Ok(())
    }

    fn word0(&self) -> u32 {
        u32_at(self.buffer.as_ref(), field::VER_TC_FL)
    }
    /// IP version (6; the GRH's IPVer is 6 too).
    pub fn version(&self) -> u8 {
        (self.word0() >> 28) as u8
    }
    /// Traffic class (DSCP << 2 | ECN).
    pub fn traffic_class(&self) -> u8 {
        (self.word0() >> 20) as u8
    }
    /// Flow label (20 bits).
    pub fn flow_label(&self) -> u32 {
        self.word0() & 0x000f_ffff
    }
    /// Payload length (bytes after the fixed header).
    pub fn payload_len(&self) -> u16 {
        u16_at(self.buffer.as_ref(), field::PAYLOAD_LEN)
    }
    /// Next header.
    pub fn next_header(&self) -> u8 {
        self.buffer.as_ref()[field::NEXT_HEADER]
    }
    /// Hop limit.
    pub fn hop_limit(&self) -> u8 {
        self.buffer.as_ref()[field::HOP_LIMIT]
    }
    /// Source address (the SGID in a GRH).
    pub fn src_addr(&self) -> Ipv6Addr {
        let mut a = [0u8; 16];
        a.copy_from_slice(&self.buffer.as_ref()[field::SRC..field::SRC + 16]);
        Ipv6Addr::from(a)
    }
    /// Destination address (the DGID in a GRH).
    pub fn dst_addr(&self) -> Ipv6Addr {
        let mut a = [0u8; 16];
        a.copy_from_slice(&self.buffer.as_ref()[field::DST..field::DST + 16]);
        Ipv6Addr::from(a)
    }
    /// The payload, up to the payload length.
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[HEADER_LEN..HEADER_LEN + usize::from(self.payload_len())]
    }
}

/// The contents of an IPv6 fixed header (or a GRH).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ipv6Repr {
    /// Source address.
    pub src_addr: Ipv6Addr,
    /// Destination address.
    pub dst_addr: Ipv6Addr,
    /// Next header (17 UDP for RoCEv2, 0x1B for a RoCEv1 GRH).
    pub next_header: u8,
    /// Payload length in bytes.
    pub payload_len: usize,
    /// Traffic class: DSCP << 2 | ECN.
    pub traffic_class: u8,
    /// Flow label (20 bits).
    pub flow_label: u32,
    /// Hop limit.
    pub hop_limit: u8,
}

impl Ipv6Repr {
    /// Parse a checked packet (version must be 6).
    pub fn parse<T: AsRef<[u8]>>(p: &Packet<T>) -> Result<Self> {
        p.check_len()?;
        if p.version() != 6 {
            return Err(Error::BadVersion);
        }
        Ok(Ipv6Repr {
            src_addr: p.src_addr(),
            dst_addr: p.dst_addr(),
            next_header: p.next_header(),
            payload_len: usize::from(p.payload_len()),
            traffic_class: p.traffic_class(),
            flow_label: p.flow_label(),
            hop_limit: p.hop_limit(),
        })
    }

    /// Header length (always 40).
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Write the 40-byte header at the start of `buf`.
    pub fn emit(&self, buf: &mut [u8]) -> Result<()> {
        if buf.len() < HEADER_LEN {
            return Err(Error::Truncated);
        }
        if self.payload_len > usize::from(u16::MAX) || self.flow_label > 0xf_ffff {
            return Err(Error::BadLength);
        }
        let w0 = (6u32 << 28) | (u32::from(self.traffic_class) << 20) | self.flow_label;
        buf[0..4].copy_from_slice(&w0.to_be_bytes());
        put_u16(buf, field::PAYLOAD_LEN, self.payload_len as u16);
        buf[field::NEXT_HEADER] = self.next_header;
        buf[field::HOP_LIMIT] = self.hop_limit;
        buf[field::SRC..field::SRC + 16].copy_from_slice(&self.src_addr.octets());
        buf[field::DST..field::DST + 16].copy_from_slice(&self.dst_addr.octets());
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hex;

    // IPv6 header of vector G (rocev2.md §2.4 c): fd00::2 -> fd00::1, TC 0, FL 0, hop 64, UDP,
    // payload 0x68.
    const G_IP: &str = "60 00 00 00 00 68 11 40 fd 00 00 00 00 00 00 00 00 00 00 00 00 00 00 02 \
                        fd 00 00 00 00 00 00 00 00 00 00 00 00 00 00 01";

    #[test]
    fn parses_and_emits_vector_g_header() {
        let mut bytes = hex(G_IP);
        bytes.resize(40 + 0x68, 0);
        let p = Packet::new_checked(&bytes[..]).unwrap();
        let r = Ipv6Repr::parse(&p).unwrap();
        assert_eq!(r.src_addr, "fd00::2".parse::<Ipv6Addr>().unwrap());
        assert_eq!(r.dst_addr, "fd00::1".parse::<Ipv6Addr>().unwrap());
        assert_eq!((r.next_header, r.payload_len, r.hop_limit), (17, 0x68, 64));
        assert_eq!((r.traffic_class, r.flow_label), (0, 0));
        let mut out = [0u8; 40];
        r.emit(&mut out).unwrap();
        assert_eq!(&out[..], &bytes[..40]);
    }

    #[test]
    fn reads_traffic_class_and_flow_label() {
        // TC 0x68 (DSCP 26, Not-ECT), flow label 0xabcde.
        let mut bytes = hex(G_IP);
        bytes[0..4].copy_from_slice(&[0x66, 0x8a, 0xbc, 0xde]);
        bytes.resize(40 + 0x68, 0);
        let p = Packet::new_checked(&bytes[..]).unwrap();
        assert_eq!((p.traffic_class(), p.flow_label()), (0x68, 0xabcde));
    }

    #[test]
    fn rejects_short_payload_and_wrong_version() {
        let bytes = hex(G_IP);
        assert_eq!(
            Packet::new_checked(&bytes[..]).err(),
            Some(Error::Truncated)
        );
        let mut v4 = hex(G_IP);
        v4[0] = 0x40;
        v4[4..6].copy_from_slice(&[0, 0]);
        let p = Packet::new_checked(&v4[..]).unwrap();
        assert_eq!(Ipv6Repr::parse(&p), Err(Error::BadVersion));
    }
}
