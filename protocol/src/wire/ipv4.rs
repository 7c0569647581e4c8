//! IPv4 headers (RFC 791), as RoCEv2 uses them: 20 bytes, no options, never fragmented.
//!
//! The ICRC covers the identification field, so a RoCE sender fixes it before computing the ICRC;
//! this project sends identification 0 with Don't-Fragment set (see `reference/rocev2.md` §1.7).

use core::net::Ipv4Addr;

use super::field::{put_u16, u16_at};
use super::{Error, Result};

/// Length of an IPv4 header without options.
pub const HEADER_LEN: usize = 20;
/// IP protocol number of UDP.
pub const PROTOCOL_UDP: u8 = 17;

mod field {
    pub const VER_IHL: usize = 0;
    pub const DSCP_ECN: usize = 1;
    pub const TOTAL_LEN: usize = 2;
    pub const IDENT: usize = 4;
    pub const FLAGS_FRAG: usize = 6;
    pub const TTL: usize = 8;
    pub const PROTOCOL: usize = 9;
    pub const CHECKSUM: usize = 10;
    pub const SRC: usize = 12;
    pub const DST: usize = 16;
}

const FLAG_DF: u16 = 0x4000;
const FLAG_MF: u16 = 0x2000;
const FRAG_OFFSET_MASK: u16 = 0x1fff;

/// The Internet checksum (RFC 1071) of `data`, as it goes into the header field.
#[inline]
pub fn checksum(data: &[u8]) -> u16 {
    let mut sum: u32 = 0;
    let mut chunks = data.chunks_exact(2);
    for c in &mut chunks {
        sum += u32::from(u16::from_be_bytes([c[0], c[1]]));
    }
    if let [last] = chunks.remainder() {
        sum += u32::from(*last) << 8;
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// A checked view of an IPv4 packet.
#[derive(Debug, Clone)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// Wrap a buffer without checking it.
    pub const fn new_unchecked(buffer: T) -> Self {
        Packet { buffer }
    }

    /// Wrap a buffer, checking the header length and total length against it.
    pub fn new_checked(buffer: T) -> Result<Self> {
        let p = Self::new_unchecked(buffer);
        p.check_len()?;
        Ok(p)
    }

    /// Check IHL and total length against the buffer. Trailing bytes (Ethernet padding) are fine.
    pub fn check_len(&self) -> Result<()> {
        let len = self.buffer.as_ref().len();
        if len < HEADER_LEN {
            return Err(Error::Truncated);
        }
        let hl = self.header_len();
        if hl < HEADER_LEN {
            return Err(Error::BadLength);
        }
        if len < hl {
            return Err(Error::Truncated);
        }
        let total = usize::from(self.total_len());
        if total < hl {
            return Err(Error::BadLength);
        }
        if len < total {
            return Err(Error::Truncated);
        }
        Ok(())
    }

    /// Give back the buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// IP version (4 for a valid packet).
    pub fn version(&self) -> u8 {
        self.buffer.as_ref()[field::VER_IHL] >> 4
    }
    /// Header length in bytes (IHL × 4).
    pub fn header_len(&self) -> usize {
        usize::from(self.buffer.as_ref()[field::VER_IHL] & 0x0f) * 4
    }
    /// Differentiated services code point (6 bits).
    pub fn dscp(&self) -> u8 {
        self.buffer.as_ref()[field::DSCP_ECN] >> 2
    }
    /// ECN codepoint (2 bits): 0 Not-ECT, 1 ECT(1), 2 ECT(0), 3 CE.
    pub fn ecn(&self) -> u8 {
        self.buffer.as_ref()[field::DSCP_ECN] & 3
    }
    /// Total length of header and payload.
    pub fn total_len(&self) -> u16 {
        u16_at(self.buffer.as_ref(), field::TOTAL_LEN)
    }
    /// Identification.
    pub fn ident(&self) -> u16 {
        u16_at(self.buffer.as_ref(), field::IDENT)
    }
    /// Don't-Fragment flag.
    pub fn dont_frag(&self) -> bool {
        u16_at(self.buffer.as_ref(), field::FLAGS_FRAG) & FLAG_DF != 0
    }
    /// More-Fragments flag.
    pub fn more_frags(&self) -> bool {
        u16_at(self.buffer.as_ref(), field::FLAGS_FRAG) & FLAG_MF != 0
    }
    /// Fragment offset in 8-byte units.
    pub fn frag_offset(&self) -> u16 {
        u16_at(self.buffer.as_ref(), field::FLAGS_FRAG) & FRAG_OFFSET_MASK
    }
    /// Time to live.
    pub fn ttl(&self) -> u8 {
        self.buffer.as_ref()[field::TTL]
    }
    /// Payload protocol number.
    pub fn protocol(&self) -> u8 {
        self.buffer.as_ref()[field::PROTOCOL]
    }
    /// Header checksum field.
    pub fn checksum(&self) -> u16 {
        u16_at(self.buffer.as_ref(), field::CHECKSUM)
    }
    /// Source address.
    pub fn src_addr(&self) -> Ipv4Addr {
        let b = self.buffer.as_ref();
        Ipv4Addr::new(
            b[field::SRC],
            b[field::SRC + 1],
            b[field::SRC + 2],
            b[field::SRC + 3],
        )
    }
    /// Destination address.
    pub fn dst_addr(&self) -> Ipv4Addr {
        let b = self.buffer.as_ref();
        Ipv4Addr::new(
            b[field::DST],
            b[field::DST + 1],
            b[field::DST + 2],
            b[field::DST + 3],
        )
    }
    /// Whether the header checksum is right.
    pub fn verify_checksum(&self) -> bool {
        checksum(&self.buffer.as_ref()[..self.header_len()]) == 0
    }
    /// The header bytes.
    pub fn header(&self) -> &[u8] {
        &self.buffer.as_ref()[..self.header_len()]
    }
    /// The payload, up to the total length (Ethernet padding excluded).
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[self.header_len()..usize::from(self.total_len())]
    }
}

/// The contents of an IPv4 header as RoCEv2 uses it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ipv4Repr {
    /// Source address.
    pub src_addr: Ipv4Addr,
    /// Destination address.
    pub dst_addr: Ipv4Addr,
    /// Payload protocol (17 for UDP).
    pub protocol: u8,
    /// Payload length in bytes.
    pub payload_len: usize,
    /// DSCP (6 bits); RoCE classes commonly use 26, CNPs 48.
    pub dscp: u8,
    /// ECN codepoint (2 bits).
    pub ecn: u8,
    /// Identification; covered by the ICRC.
    pub ident: u16,
    /// Don't-Fragment flag.
    pub dont_frag: bool,
    /// Time to live.
    pub ttl: u8,
}

impl Ipv4Repr {
    /// Parse a checked packet: version 4, no options, not a fragment, checksum right.
    pub fn parse<T: AsRef<[u8]>>(p: &Packet<T>) -> Result<Self> {
        p.check_len()?;
        if p.version() != 4 {
            return Err(Error::BadVersion);
        }
        if p.header_len() != HEADER_LEN || p.more_frags() || p.frag_offset() != 0 {
            return Err(Error::Unsupported);
        }
        if !p.verify_checksum() {
            return Err(Error::Checksum);
        }
        Ok(Ipv4Repr {
            src_addr: p.src_addr(),
            dst_addr: p.dst_addr(),
            protocol: p.protocol(),
            payload_len: usize::from(p.total_len()) - HEADER_LEN,
            dscp: p.dscp(),
            ecn: p.ecn(),
            ident: p.ident(),
            dont_frag: p.dont_frag(),
            ttl: p.ttl(),
        })
    }

    /// Header length (always 20).
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Write the 20-byte header, checksum included, at the start of `buf`.
    #[inline]
    pub fn emit(&self, buf: &mut [u8]) -> Result<()> {
        let total = HEADER_LEN + self.payload_len;
        if buf.len() < HEADER_LEN {
            return Err(Error::Truncated);
        }
        if total > usize::from(u16::MAX) {
            return Err(Error::BadLength);
        }
        let b = &mut buf[..HEADER_LEN];
        b[field::VER_IHL] = 0x45;
        b[field::DSCP_ECN] = (self.dscp << 2) | (self.ecn & 3);
        put_u16(b, field::TOTAL_LEN, total as u16);
        put_u16(b, field::IDENT, self.ident);
        put_u16(
            b,
            field::FLAGS_FRAG,
            if self.dont_frag { FLAG_DF } else { 0 },
        );
        b[field::TTL] = self.ttl;
        b[field::PROTOCOL] = self.protocol;
        put_u16(b, field::CHECKSUM, 0);
        b[field::SRC..field::SRC + 4].copy_from_slice(&self.src_addr.octets());
        b[field::DST..field::DST + 4].copy_from_slice(&self.dst_addr.octets());
        let c = checksum(b);
        put_u16(b, field::CHECKSUM, c);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hex;

    // IPv4 header of vector A (rocev2.md §2.4 c): 192.168.10.2 -> 192.168.10.1, ID 0x1234, DF,
    // TTL 64, UDP, total length 0x7c, checksum 0x92e9 (as tshark validated it).
    const A_IP: &str = "45 00 00 7c 12 34 40 00 40 11 92 e9 c0 a8 0a 02 c0 a8 0a 01";

    fn with_payload(h: &str, n: usize) -> std::vec::Vec<u8> {
        let mut v = hex(h);
        v.resize(v.len() + n, 0);
        v
    }

    #[test]
    fn parses_vector_a_header() {
        let bytes = with_payload(A_IP, 0x7c - 20);
        let p = Packet::new_checked(&bytes[..]).unwrap();
        assert!(p.verify_checksum());
        let r = Ipv4Repr::parse(&p).unwrap();
        assert_eq!(r.src_addr, Ipv4Addr::new(192, 168, 10, 2));
        assert_eq!(r.dst_addr, Ipv4Addr::new(192, 168, 10, 1));
        assert_eq!(r.ident, 0x1234);
        assert!(r.dont_frag);
        assert_eq!((r.ttl, r.protocol, r.dscp, r.ecn), (64, 17, 0, 0));
        assert_eq!(r.payload_len, 0x7c - 20);
    }

    #[test]
    fn emits_vector_a_header_with_checksum() {
        let r = Ipv4Repr {
            src_addr: Ipv4Addr::new(192, 168, 10, 2),
            dst_addr: Ipv4Addr::new(192, 168, 10, 1),
            protocol: PROTOCOL_UDP,
            payload_len: 0x7c - 20,
            dscp: 0,
            ecn: 0,
            ident: 0x1234,
            dont_frag: true,
            ttl: 64,
        };
        let mut out = [0u8; 20];
        r.emit(&mut out).unwrap();
        assert_eq!(&out[..], &hex(A_IP)[..]);
    }

    // The ConnectX-4 Lx CNP capture cited in rocev2.md §4.1 has TOS 0xC2: DSCP 48, ECT(0).
    #[test]
    fn splits_tos_into_dscp_and_ecn() {
        let mut bytes = with_payload(A_IP, 0x7c - 20);
        bytes[1] = 0xc2;
        let p = Packet::new_unchecked(&bytes[..]);
        assert_eq!((p.dscp(), p.ecn()), (48, 2));
    }

    #[test]
    fn rejects_bad_checksum_version_and_lengths() {
        let mut bytes = with_payload(A_IP, 0x7c - 20);
        bytes[11] ^= 1;
        let p = Packet::new_checked(&bytes[..]).unwrap();
        assert_eq!(Ipv4Repr::parse(&p), Err(Error::Checksum));
        bytes[0] = 0x65;
        assert_eq!(
            Ipv4Repr::parse(&Packet::new_unchecked(&bytes[..])),
            Err(Error::BadVersion)
        );
        bytes[0] = 0x44;
        assert_eq!(
            Packet::new_checked(&bytes[..]).err(),
            Some(Error::BadLength)
        );
        let short = with_payload(A_IP, 10);
        assert_eq!(
            Packet::new_checked(&short[..]).err(),
            Some(Error::Truncated)
        );
    }
}
