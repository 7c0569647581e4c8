//! GVSP: the GigE Vision stream protocol (UDP), device side. Header formats from aravis
//! `arvgvspprivate.h` and Wireshark `packet-gvsp.c` (`reference/gev.md` §2).
//!
//! Standard header (8 bytes): status (2) · block id (2) · EI=0 | format (7 bits) | packet id
//! (24). Extended-ID header (20 bytes, GEV 2.0): status (2) · flags (2) · EI=1 | format (7) |
//! reserved (24) · block id (8) · packet id (4).

use super::super::wire::field::{put_u16, put_u32, put_u64, u16_at, u32_at, u64_at};
use super::super::wire::{Error, Result};

/// Standard header length.
pub const HEADER_LEN: usize = 8;
/// Extended-ID header length.
pub const EXTENDED_HEADER_LEN: usize = 20;
/// IP + UDP header bytes in front of every GVSP packet (IPv4).
pub const IP_UDP_OVERHEAD: usize = 28;
/// Image leader payload length.
pub const IMAGE_LEADER_LEN: usize = 36;
/// Image trailer payload length (without chunk information).
pub const IMAGE_TRAILER_LEN: usize = 8;
/// Image trailer payload length with chunk information (payload length, layout ID).
pub const IMAGE_TRAILER_CHUNK_LEN: usize = 16;
/// Payload type of an image.
pub const PAYLOAD_TYPE_IMAGE: u16 = 0x0001;
/// Payload type flag (GEV 2.0): chunk data follows the image.
pub const PAYLOAD_TYPE_CHUNK_FLAG: u16 = 0x4000;
/// Extended-ID flag (GVSP flags field): packet resent.
pub const FLAG_PACKET_RESEND: u16 = 0x0001;
/// Extended-ID flag: a previous block was dropped.
pub const FLAG_PREVIOUS_BLOCK_DROPPED: u16 = 0x0002;

/// Packet formats (bits 30..24 of the packet-info word).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// Leader: the block's description.
    Leader = 1,
    /// Trailer: the block is complete.
    Trailer = 2,
    /// Generic payload.
    Payload = 3,
    /// Leader, payload and trailer in one packet.
    AllIn = 4,
}

impl Format {
    fn from_bits(b: u8) -> Option<Self> {
        Some(match b {
            1 => Format::Leader,
            2 => Format::Trailer,
            3 => Format::Payload,
            4 => Format::AllIn,
            _ => return None,
        })
    }
}

/// A GVSP packet header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// Status (0 success, 0x0100 resent packet, ...).
    pub status: u16,
    /// Flags (extended-ID packets only).
    pub flags: u16,
    /// Whether the packet uses the extended-ID (64-bit block id) header.
    pub extended: bool,
    /// Packet format.
    pub format: Format,
    /// Block (frame) id; 16 bits in the standard header.
    pub block_id: u64,
    /// Packet id within the block: 0 leader, 1..=N payload, N+1 trailer.
    pub packet_id: u32,
}

impl Header {
    /// Header length on the wire.
    pub const fn buffer_len(&self) -> usize {
        if self.extended {
            EXTENDED_HEADER_LEN
        } else {
            HEADER_LEN
        }
    }

    /// Write the header at the start of `buf`.
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize> {
        let n = self.buffer_len();
        let b = buf.get_mut(..n).ok_or(Error::Truncated)?;
        put_u16(b, 0, self.status);
        if self.extended {
            put_u16(b, 2, self.flags);
            put_u32(b, 4, 0x8000_0000 | ((self.format as u32) << 24));
            put_u64(b, 8, self.block_id);
            put_u32(b, 16, self.packet_id);
        } else {
            if self.block_id > 0xffff || self.packet_id > 0x00ff_ffff {
                return Err(Error::BadLength);
            }
            put_u16(b, 2, self.block_id as u16);
            put_u32(b, 4, ((self.format as u32) << 24) | self.packet_id);
        }
        Ok(n)
    }

    /// Parse a header (host side, tests).
    pub fn parse(buf: &[u8]) -> Result<(Self, usize)> {
        if buf.len() < HEADER_LEN {
            return Err(Error::Truncated);
        }
        let info = u32_at(buf, 4);
        let extended = info & 0x8000_0000 != 0;
        let format = Format::from_bits(((info >> 24) & 0x7f) as u8).ok_or(Error::Unsupported)?;
        if extended {
            if buf.len() < EXTENDED_HEADER_LEN {
                return Err(Error::Truncated);
            }
            Ok((
                Header {
                    status: u16_at(buf, 0),
                    flags: u16_at(buf, 2),
                    extended,
                    format,
                    block_id: u64_at(buf, 8),
                    packet_id: u32_at(buf, 16),
                },
                EXTENDED_HEADER_LEN,
            ))
        } else {
            Ok((
                Header {
                    status: u16_at(buf, 0),
                    flags: 0,
                    extended,
                    format,
                    block_id: u64::from(u16_at(buf, 2)),
                    packet_id: info & 0x00ff_ffff,
                },
                HEADER_LEN,
            ))
        }
    }
}

/// The image leader's payload (36 bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ImageLeader {
    /// Device timestamp (ticks).
    pub timestamp: u64,
    /// PFNC pixel format.
    pub pixel_format: u32,
    /// Width in pixels.
    pub width: u32,
    /// Height in lines.
    pub height: u32,
    /// X offset.
    pub offset_x: u32,
    /// Y offset.
    pub offset_y: u32,
    /// Chunk data follows the image (payload type 0x4001).
    pub chunks: bool,
}

impl ImageLeader {
    /// Write the 36-byte leader payload.
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize> {
        let b = buf.get_mut(..IMAGE_LEADER_LEN).ok_or(Error::Truncated)?;
        b[0] = 0; // field info
        b[1] = 0;
        put_u16(b, 2, payload_type(self.chunks));
        put_u64(b, 4, self.timestamp);
        put_u32(b, 12, self.pixel_format);
        put_u32(b, 16, self.width);
        put_u32(b, 20, self.height);
        put_u32(b, 24, self.offset_x);
        put_u32(b, 28, self.offset_y);
        put_u16(b, 32, 0); // padding x
        put_u16(b, 34, 0); // padding y
        Ok(IMAGE_LEADER_LEN)
    }

    /// Parse a leader payload of payload type image.
    pub fn parse(b: &[u8]) -> Result<Self> {
        if b.len() < IMAGE_LEADER_LEN {
            return Err(Error::Truncated);
        }
        if u16_at(b, 2) & 0x3fff != PAYLOAD_TYPE_IMAGE {
            return Err(Error::Unsupported);
        }
        Ok(ImageLeader {
            timestamp: u64_at(b, 4),
            pixel_format: u32_at(b, 12),
            width: u32_at(b, 16),
            height: u32_at(b, 20),
            offset_x: u32_at(b, 24),
            offset_y: u32_at(b, 28),
            chunks: u16_at(b, 2) & PAYLOAD_TYPE_CHUNK_FLAG != 0,
        })
    }
}

const fn payload_type(chunks: bool) -> u16 {
    if chunks {
        PAYLOAD_TYPE_IMAGE | PAYLOAD_TYPE_CHUNK_FLAG
    } else {
        PAYLOAD_TYPE_IMAGE
    }
}

/// Chunk information an image trailer carries when chunk data follows the image.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TrailerChunks {
    /// Bytes of the whole payload: image and chunk data.
    pub payload_len: u32,
    /// ChunkLayoutID.
    pub layout_id: u32,
}

/// An image trailer's contents.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ImageTrailer {
    /// Lines sent.
    pub size_y: u32,
    /// Chunk information, when chunk data follows the image.
    pub chunks: Option<TrailerChunks>,
}

impl ImageTrailer {
    /// Bytes [`emit`](Self::emit) writes.
    pub const fn buffer_len(&self) -> usize {
        match self.chunks {
            Some(_) => IMAGE_TRAILER_CHUNK_LEN,
            None => IMAGE_TRAILER_LEN,
        }
    }

    /// Write the image trailer payload: reserved, payload type, lines sent (8 bytes); with
    /// chunk data, payload type 0x4001 and the chunk data payload length and layout ID (16
    /// bytes).
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize> {
        let len = self.buffer_len();
        let b = buf.get_mut(..len).ok_or(Error::Truncated)?;
        put_u16(b, 0, 0);
        put_u16(b, 2, payload_type(self.chunks.is_some()));
        put_u32(b, 4, self.size_y);
        if let Some(c) = self.chunks {
            put_u32(b, 8, c.payload_len);
            put_u32(b, 12, c.layout_id);
        }
        Ok(len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hex;

    // Layout of reference/gev.md §2.1: status 0, block id 1, EI 0, format 1 (leader), packet id 0.
    #[test]
    fn standard_leader_header_layout() {
        let h = Header {
            status: 0,
            flags: 0,
            extended: false,
            format: Format::Leader,
            block_id: 1,
            packet_id: 0,
        };
        let mut b = [0u8; 8];
        h.emit(&mut b).unwrap();
        assert_eq!(b, [0, 0, 0, 1, 1, 0, 0, 0]);
        assert_eq!(Header::parse(&b).unwrap(), (h, 8));
    }

    #[test]
    fn extended_header_layout() {
        let h = Header {
            status: 0x0100,
            flags: FLAG_PACKET_RESEND,
            extended: true,
            format: Format::Payload,
            block_id: 0x1_0000_0002,
            packet_id: 77,
        };
        let mut b = [0u8; 20];
        h.emit(&mut b).unwrap();
        assert_eq!(
            &b[..],
            &hex("01 00 00 01 83 00 00 00 00 00 00 01 00 00 00 02 00 00 00 4d")[..]
        );
        assert_eq!(Header::parse(&b).unwrap(), (h, 20));
    }

    #[test]
    fn leader_and_trailer_payloads() {
        let l = ImageLeader {
            timestamp: 0x0102_0304_0506_0708,
            pixel_format: 0x0108_0001,
            width: 512,
            height: 256,
            offset_x: 0,
            offset_y: 0,
            chunks: false,
        };
        let mut b = [0u8; 36];
        l.emit(&mut b).unwrap();
        assert_eq!(
            &b[..16],
            &hex("00 00 00 01 01 02 03 04 05 06 07 08 01 08 00 01")[..]
        );
        assert_eq!(ImageLeader::parse(&b).unwrap(), l);
        let mut t = [0u8; 8];
        ImageTrailer {
            size_y: 256,
            chunks: None,
        }
        .emit(&mut t)
        .unwrap();
        assert_eq!(t, [0, 0, 0, 1, 0, 0, 1, 0]);
        let c = ImageLeader { chunks: true, ..l };
        c.emit(&mut b).unwrap();
        assert_eq!(&b[2..4], &[0x40, 0x01]);
        assert_eq!(ImageLeader::parse(&b).unwrap(), c);
        let mut t = [0u8; 16];
        let info = TrailerChunks {
            payload_len: 0x0002_0010,
            layout_id: 0xabcd_0001,
        };
        let with_chunks = ImageTrailer {
            size_y: 256,
            chunks: Some(info),
        };
        assert_eq!(with_chunks.emit(&mut t), Ok(16));
        assert_eq!(
            t,
            [0, 0, 0x40, 1, 0, 0, 1, 0, 0, 2, 0, 0x10, 0xab, 0xcd, 0, 1]
        );
    }
}
