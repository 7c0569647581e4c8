//! UDP headers (RFC 768). RoCEv2 goes to port 4791 from a per-QP entropy source port, with
//! checksum 0 (the ICRC protects the payload; the field is masked in the ICRC).

use super::field::{put_u16, u16_at};
use super::{Error, Result};

/// Length of a UDP header.
pub const HEADER_LEN: usize = 8;

mod field {
    pub const SRC_PORT: usize = 0;
    pub const DST_PORT: usize = 2;
    pub const LENGTH: usize = 4;
    pub const CHECKSUM: usize = 6;
}

/// A checked view of a UDP datagram.
#[derive(Debug, Clone)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// Wrap a buffer without checking it.
    pub const fn new_unchecked(buffer: T) -> Self {
        Packet { buffer }
    }

    /// Wrap a buffer, checking that the length field fits it.
    pub fn new_checked(buffer: T) -> Result<Self> {
        let p = Self::new_unchecked(buffer);
        p.check_len()?;
        Ok(p)
    }

    /// Check the header and the length field against the buffer.
    pub fn check_len(&self) -> Result<()> {
        let len = self.buffer.as_ref().len();
        if len < HEADER_LEN {
            return Err(Error::Truncated);
        }
        let l = usize::from(self.len());
        if l < HEADER_LEN {
            return Err(Error::BadLength);
        }
        if len < l {
            return Err(Error::Truncated);
        }
        Ok(())
    }

    /// Source port.
    pub fn src_port(&self) -> u16 {
        u16_at(self.buffer.as_ref(), field::SRC_PORT)
    }
    /// Destination port.
    pub fn dst_port(&self) -> u16 {
        u16_at(self.buffer.as_ref(), field::DST_PORT)
    }
    /// Length of header and payload.
    pub fn len(&self) -> u16 {
        u16_at(self.buffer.as_ref(), field::LENGTH)
    }
    /// Whether the length field says the datagram is a bare header.
    pub fn is_empty(&self) -> bool {
        self.len() as usize <= HEADER_LEN
    }
    /// Checksum field (0 = none, the RoCE convention).
    pub fn checksum(&self) -> u16 {
        u16_at(self.buffer.as_ref(), field::CHECKSUM)
    }
    /// The payload, up to the length field.
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[HEADER_LEN..usize::from(self.len())]
    }
}

/// The contents of a UDP header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UdpRepr {
    /// Source port.
    pub src_port: u16,
    /// Destination port.
    pub dst_port: u16,
    /// Payload length in bytes.
    pub payload_len: usize,
}

impl UdpRepr {
    /// Parse a checked datagram. The checksum is not verified here: the kernel already did for
    /// a socket, and RoCE senders put 0.
    pub fn parse<T: AsRef<[u8]>>(p: &Packet<T>) -> Result<Self> {
        p.check_len()?;
        Ok(UdpRepr {
            src_port: p.src_port(),
            dst_port: p.dst_port(),
            payload_len: usize::from(p.len()) - HEADER_LEN,
        })
    }

    /// Header length (always 8).
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Write the header with checksum 0 at the start of `buf`.
    #[inline]
    pub fn emit(&self, buf: &mut [u8]) -> Result<()> {
        if buf.len() < HEADER_LEN {
            return Err(Error::Truncated);
        }
        let l = HEADER_LEN + self.payload_len;
        if l > usize::from(u16::MAX) {
            return Err(Error::BadLength);
        }
        put_u16(buf, field::SRC_PORT, self.src_port);
        put_u16(buf, field::DST_PORT, self.dst_port);
        put_u16(buf, field::LENGTH, l as u16);
        put_u16(buf, field::CHECKSUM, 0);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hex;

    // UDP header of vector A: 49443 -> 4791, length 0x68, checksum 0.
    #[test]
    fn parses_and_emits_vector_a_udp_header() {
        let mut bytes = hex("c1 23 12 b7 00 68 00 00");
        bytes.resize(0x68, 0xaa);
        let p = Packet::new_checked(&bytes[..]).unwrap();
        let r = UdpRepr::parse(&p).unwrap();
        assert_eq!(
            r,
            UdpRepr {
                src_port: 0xc123,
                dst_port: 4791,
                payload_len: 0x60
            }
        );
        assert_eq!(p.checksum(), 0);
        let mut out = [0xffu8; 8];
        r.emit(&mut out).unwrap();
        assert_eq!(&out[..], &bytes[..8]);
    }

    #[test]
    fn rejects_length_below_header_and_beyond_buffer() {
        let bytes = hex("c1 23 12 b7 00 07 00 00");
        assert_eq!(
            Packet::new_checked(&bytes[..]).err(),
            Some(Error::BadLength)
        );
        let bytes = hex("c1 23 12 b7 00 09 00 00");
        assert_eq!(
            Packet::new_checked(&bytes[..]).err(),
            Some(Error::Truncated)
        );
    }
}
