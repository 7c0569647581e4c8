//! ORSP/1 messages (`docs/orsp-spec.md` §5): SEND payloads, big-endian, 16-byte common header.
//!
//! The GVSP part of LEADER and TRAILER (from offset 32) is byte-identical to a GEV 2.x
//! extended-ID leader/trailer packet, so existing GVSP parsers can be reused by host teams.

use crate::gev::gvsp::{self, Format, Header, ImageLeader};
use crate::wire::field::{put_u16, put_u32, put_u64, u16_at, u32_at, u64_at};
use crate::wire::{Error, Result};

/// "ORSP".
pub const MAGIC: u32 = 0x4F52_5350;
/// Protocol version carried in every header.
pub const VERSION: u8 = 1;
/// Common header length.
pub const HEADER_LEN: usize = 16;
/// Header flag: the receiver may ignore this message if it does not know the type.
pub const FLAG_OPTIONAL: u16 = 0x0001;
/// Header flag of a RELEASED: another RELEASED answering the same FLUSH follows (a FLUSH that
/// gives back more ids than one message carries is answered in parts; the last has it clear).
pub const FLAG_MORE: u16 = 0x0002;
/// The most buffer ids one RELEASED carries: what fits in the longest device message (512
/// bytes) after its 20 bytes of header and count.
pub const RELEASED_MAX_IDS: usize = (512 - 20) / 4;
/// Bytes per buffer descriptor in ANNOUNCE.
pub const DESCRIPTOR_LEN: usize = 24;
/// ANNOUNCE flag: queue the announced buffers at once.
pub const ANNOUNCE_QUEUE: u32 = 0x1;
/// FLUSH flag: also forget every announced buffer.
pub const FLUSH_FORGET: u32 = 0x2;
/// LEADER length for an image (16 header + 16 + 20 GVSP header + 36 image leader).
pub const LEADER_LEN: usize = 88;
/// TRAILER length for an image without chunks.
pub const TRAILER_LEN: usize = 60;
/// TRAILER length for an image with chunk data (the GVSP trailer's chunk information).
pub const TRAILER_CHUNK_LEN: usize = 68;

/// Message types.
pub mod kind {
    /// Device → host: a frame begins.
    pub const LEADER: u8 = 0x01;
    /// Device → host: a frame is complete (solicited).
    pub const TRAILER: u8 = 0x02;
    /// Device → host: an error or notice.
    pub const EVENT: u8 = 0x03;
    /// Device → host: acquisition stopped, nothing more follows.
    pub const STREAM_END: u8 = 0x04;
    /// Device → host: buffers given back after FLUSH.
    pub const RELEASED: u8 = 0x05;
    /// Device → host: the connection works; the device's parameters.
    pub const HELLO: u8 = 0x06;
    /// Host → device: buffer descriptors.
    pub const ANNOUNCE: u8 = 0x81;
    /// Host → device: buffers returned for reuse.
    pub const QUEUE: u8 = 0x82;
    /// Host → device: give back every queued buffer.
    pub const FLUSH: u8 = 0x83;
}

/// ORSP event codes (§8) carried in EVENT messages and in STATUS bits 31..16.
pub mod event {
    /// ACK timeout, retry count exhausted.
    pub const RETRY_EXCEEDED: u16 = 0x9001;
    /// Remote access or invalid request NAK (detail = buffer id).
    pub const REMOTE_ERROR: u16 = 0x9002;
    /// Heartbeat expiry or control released.
    pub const CONTROL_LOST: u16 = 0x9003;
    /// A malformed host message was ignored (detail = its seq).
    pub const MALFORMED_MESSAGE: u16 = 0x9004;
    /// A host SEND the camera's queue pair could not take (longer than DEV_RECV_SIZE, or out
    /// of sequence): it was answered with an invalid-request NAK, which ends the connection
    /// (STATUS shows this code).
    pub const HOST_MESSAGE_REFUSED: u16 = 0x9005;
}

/// The common header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MsgHeader {
    /// Message type.
    pub kind: u8,
    /// Flags.
    pub flags: u16,
    /// Total length in bytes, header included.
    pub length: u32,
    /// Per-direction sequence number from 0 at CONNECT.
    pub seq: u32,
}

impl MsgHeader {
    /// Parse and check magic, version and length against `buf`.
    pub fn parse(buf: &[u8]) -> Result<Self> {
        if buf.len() < HEADER_LEN {
            return Err(Error::Truncated);
        }
        if u32_at(buf, 0) != MAGIC || buf[4] != VERSION {
            return Err(Error::BadVersion);
        }
        let h = MsgHeader {
            kind: buf[5],
            flags: u16_at(buf, 6),
            length: u32_at(buf, 8),
            seq: u32_at(buf, 12),
        };
        let len = h.length as usize;
        if len < HEADER_LEN || len % 4 != 0 || len > buf.len() {
            return Err(Error::BadLength);
        }
        Ok(h)
    }

    fn emit(&self, buf: &mut [u8]) {
        put_u32(buf, 0, MAGIC);
        buf[4] = VERSION;
        buf[5] = self.kind;
        put_u16(buf, 6, self.flags);
        put_u32(buf, 8, self.length);
        put_u32(buf, 12, self.seq);
    }
}

fn start(buf: &mut [u8], kind: u8, len: usize, seq: u32) -> Result<&mut [u8]> {
    let b = buf.get_mut(..len).ok_or(Error::Truncated)?;
    b.fill(0);
    MsgHeader {
        kind,
        flags: 0,
        length: len as u32,
        seq,
    }
    .emit(b);
    Ok(b)
}

/// Write a LEADER for an image frame; returns its length.
pub fn emit_leader(
    buf: &mut [u8],
    seq: u32,
    buffer_id: u32,
    planned_size: u64,
    block_id: u64,
    previous_dropped: bool,
    leader: &ImageLeader,
) -> Result<usize> {
    let b = start(buf, kind::LEADER, LEADER_LEN, seq)?;
    put_u32(b, 16, buffer_id);
    put_u64(b, 24, planned_size);
    Header {
        status: 0,
        flags: if previous_dropped {
            gvsp::FLAG_PREVIOUS_BLOCK_DROPPED
        } else {
            0
        },
        extended: true,
        format: Format::Leader,
        block_id,
        packet_id: 0,
    }
    .emit(&mut b[32..])?;
    leader.emit(&mut b[52..])?;
    Ok(LEADER_LEN)
}

/// Write a TRAILER for an image frame; returns its length.
pub fn emit_trailer(
    buf: &mut [u8],
    seq: u32,
    buffer_id: u32,
    status: u16,
    valid_size: u64,
    block_id: u64,
    trailer: gvsp::ImageTrailer,
) -> Result<usize> {
    let len = if trailer.chunks.is_some() {
        TRAILER_CHUNK_LEN
    } else {
        TRAILER_LEN
    };
    let b = start(buf, kind::TRAILER, len, seq)?;
    put_u32(b, 16, buffer_id);
    put_u16(b, 20, status);
    put_u64(b, 24, valid_size);
    Header {
        status,
        flags: 0,
        extended: true,
        format: Format::Trailer,
        block_id,
        packet_id: 1,
    }
    .emit(&mut b[32..])?;
    trailer.emit(&mut b[52..])?;
    Ok(len)
}

/// Write an EVENT; returns its length.
pub fn emit_event(
    buf: &mut [u8],
    seq: u32,
    event_id: u16,
    detail: u32,
    block_id: u64,
    timestamp: u64,
) -> Result<usize> {
    let b = start(buf, kind::EVENT, 40, seq)?;
    put_u16(b, 16, event_id);
    put_u32(b, 20, detail);
    put_u64(b, 24, block_id);
    put_u64(b, 32, timestamp);
    Ok(40)
}

/// Write a STREAM_END; returns its length.
pub fn emit_stream_end(
    buf: &mut [u8],
    seq: u32,
    last_block_id: u64,
    frames_sent: u32,
    frames_dropped: u32,
) -> Result<usize> {
    let b = start(buf, kind::STREAM_END, 32, seq)?;
    put_u64(b, 16, last_block_id);
    put_u32(b, 24, frames_sent);
    put_u32(b, 28, frames_dropped);
    Ok(32)
}

/// Write a RELEASED listing `ids` (at most [`RELEASED_MAX_IDS`]); `more` says another part
/// of the same answer follows ([`FLAG_MORE`]). Returns its length.
pub fn emit_released(buf: &mut [u8], seq: u32, ids: &[u32], more: bool) -> Result<usize> {
    if ids.len() > RELEASED_MAX_IDS {
        return Err(Error::Truncated);
    }
    let len = 20 + 4 * ids.len();
    let b = start(buf, kind::RELEASED, len, seq)?;
    if more {
        b[6..8].copy_from_slice(&FLAG_MORE.to_be_bytes());
    }
    put_u32(b, 16, ids.len() as u32);
    for (i, id) in ids.iter().enumerate() {
        put_u32(b, 20 + 4 * i, *id);
    }
    Ok(len)
}

/// The HELLO body (also the RDMA CM REP private data).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hello {
    /// ORSP version, major << 16 | minor.
    pub orsp_version: u32,
    /// ORSP_CAPS.
    pub caps: u32,
    /// Largest device→host message.
    pub max_ctrl_msg: u32,
    /// Receives the device keeps posted.
    pub dev_recv_depth: u32,
    /// Buffers the device can track.
    pub max_buffers: u32,
    /// Path MTU in bytes.
    pub path_mtu: u32,
}

/// Length of a HELLO message.
pub const HELLO_LEN: usize = 40;
/// Offset of the HELLO's path_mtu field (bytes, u32).
pub const HELLO_PATH_MTU_OFFSET: usize = 36;

impl Hello {
    /// Write a HELLO message; returns its length.
    pub fn emit(&self, buf: &mut [u8], seq: u32) -> Result<usize> {
        let b = start(buf, kind::HELLO, HELLO_LEN, seq)?;
        for (i, v) in [
            self.orsp_version,
            self.caps,
            self.max_ctrl_msg,
            self.dev_recv_depth,
            self.max_buffers,
            self.path_mtu,
        ]
        .into_iter()
        .enumerate()
        {
            put_u32(b, 16 + 4 * i, v);
        }
        Ok(HELLO_LEN)
    }
    /// Parse a HELLO message.
    pub fn parse(buf: &[u8]) -> Result<Self> {
        let h = MsgHeader::parse(buf)?;
        if h.kind != kind::HELLO || (h.length as usize) < HELLO_LEN {
            return Err(Error::Unsupported);
        }
        Ok(Hello {
            orsp_version: u32_at(buf, 16),
            caps: u32_at(buf, 20),
            max_ctrl_msg: u32_at(buf, 24),
            dev_recv_depth: u32_at(buf, 28),
            max_buffers: u32_at(buf, 32),
            path_mtu: u32_at(buf, 36),
        })
    }
}

/// A host buffer as ANNOUNCE describes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Descriptor {
    /// Host-chosen id.
    pub buffer_id: u32,
    /// Remote key of its registration.
    pub rkey: u32,
    /// Virtual address.
    pub addr: u64,
    /// Length in bytes.
    pub length: u64,
}

/// A parsed host → device message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HostMessage<'a> {
    /// Descriptors (raw, 24 bytes each) and flags.
    Announce {
        /// Flags (bit0 queue now).
        flags: u32,
        /// `count` × 24 bytes.
        descriptors: &'a [u8],
    },
    /// Buffer ids (raw, 4 bytes each).
    Queue {
        /// `count` × 4 bytes.
        ids: &'a [u8],
    },
    /// Give back queued buffers.
    Flush {
        /// Flags (bit1 forget).
        flags: u32,
    },
}

/// Iterate the descriptors of an ANNOUNCE.
pub fn descriptors(raw: &[u8]) -> impl Iterator<Item = Descriptor> + '_ {
    raw.chunks_exact(DESCRIPTOR_LEN).map(|d| Descriptor {
        buffer_id: u32_at(d, 0),
        rkey: u32_at(d, 4),
        addr: u64_at(d, 8),
        length: u64_at(d, 16),
    })
}

/// Iterate the ids of a QUEUE.
pub fn ids(raw: &[u8]) -> impl Iterator<Item = u32> + '_ {
    raw.chunks_exact(4).map(|w| u32_at(w, 0))
}

/// Parse a host → device message: header, type and counts must agree with the length.
pub fn parse_host(buf: &[u8]) -> Result<(MsgHeader, HostMessage<'_>)> {
    let h = MsgHeader::parse(buf)?;
    let body = &buf[..h.length as usize];
    let need = |n: usize| {
        if body.len() >= n {
            Ok(())
        } else {
            Err(Error::Truncated)
        }
    };
    let m = match h.kind {
        kind::ANNOUNCE => {
            need(24)?;
            let count = u32_at(body, 16) as usize;
            let end = count
                .checked_mul(DESCRIPTOR_LEN)
                .and_then(|n| n.checked_add(24))
                .ok_or(Error::BadLength)?;
            if end != body.len() {
                return Err(Error::BadLength);
            }
            HostMessage::Announce {
                flags: u32_at(body, 20),
                descriptors: &body[24..end],
            }
        }
        kind::QUEUE => {
            need(20)?;
            let count = u32_at(body, 16) as usize;
            let end = count
                .checked_mul(4)
                .and_then(|n| n.checked_add(20))
                .ok_or(Error::BadLength)?;
            if end != body.len() {
                return Err(Error::BadLength);
            }
            HostMessage::Queue {
                ids: &body[20..end],
            }
        }
        kind::FLUSH => {
            need(20)?;
            HostMessage::Flush {
                flags: u32_at(body, 16),
            }
        }
        _ => return Err(Error::Unsupported),
    };
    Ok((h, m))
}

/// Write an ANNOUNCE (host side); returns its length.
pub fn emit_announce(buf: &mut [u8], seq: u32, flags: u32, descs: &[Descriptor]) -> Result<usize> {
    let len = 24 + DESCRIPTOR_LEN * descs.len();
    let b = start(buf, kind::ANNOUNCE, len, seq)?;
    put_u32(b, 16, descs.len() as u32);
    put_u32(b, 20, flags);
    for (i, d) in descs.iter().enumerate() {
        let o = 24 + DESCRIPTOR_LEN * i;
        put_u32(b, o, d.buffer_id);
        put_u32(b, o + 4, d.rkey);
        put_u64(b, o + 8, d.addr);
        put_u64(b, o + 16, d.length);
    }
    Ok(len)
}

/// Write a QUEUE (host side); returns its length.
pub fn emit_queue(buf: &mut [u8], seq: u32, ids: &[u32]) -> Result<usize> {
    let len = 20 + 4 * ids.len();
    let b = start(buf, kind::QUEUE, len, seq)?;
    put_u32(b, 16, ids.len() as u32);
    for (i, id) in ids.iter().enumerate() {
        put_u32(b, 20 + 4 * i, *id);
    }
    Ok(len)
}

/// Write a FLUSH (host side); returns its length.
pub fn emit_flush(buf: &mut [u8], seq: u32, flags: u32) -> Result<usize> {
    let b = start(buf, kind::FLUSH, 20, seq)?;
    put_u32(b, 16, flags);
    Ok(20)
}

/// A parsed device → host message (host side).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeviceMessage {
    /// A frame begins in `buffer_id`.
    Leader {
        /// Buffer.
        buffer_id: u32,
        /// Bytes the device will write.
        planned_size: u64,
        /// Block id.
        block_id: u64,
        /// GVSP flag 0x0002: frames were dropped before this one.
        previous_dropped: bool,
        /// The image description.
        leader: ImageLeader,
    },
    /// A frame is complete.
    Trailer {
        /// Buffer.
        buffer_id: u32,
        /// Status (0, 0x8015 overflow, 0x8FFF abort, ...).
        status: u16,
        /// Bytes written.
        valid_size: u64,
        /// Block id.
        block_id: u64,
        /// Chunk data follows the image in the buffer: the payload length and layout ID.
        chunks: Option<gvsp::TrailerChunks>,
    },
    /// An event.
    Event {
        /// Event id.
        event_id: u16,
        /// Detail.
        detail: u32,
        /// Block id it concerns.
        block_id: u64,
    },
    /// Acquisition stopped.
    StreamEnd {
        /// Last block id.
        last_block_id: u64,
        /// Frames sent.
        frames_sent: u32,
        /// Frames dropped for want of a buffer.
        frames_dropped: u32,
    },
    /// Buffers given back (count; ids at offset 20 of the message).
    Released {
        /// How many.
        count: u32,
        /// Another RELEASED answering the same FLUSH follows ([`FLAG_MORE`]).
        more: bool,
    },
    /// Connection works.
    Hello(Hello),
}

/// Parse a device → host message.
pub fn parse_device(buf: &[u8]) -> Result<(MsgHeader, DeviceMessage)> {
    let h = MsgHeader::parse(buf)?;
    let b = &buf[..h.length as usize];
    let need = |n: usize| {
        if b.len() >= n {
            Ok(())
        } else {
            Err(Error::Truncated)
        }
    };
    let m = match h.kind {
        kind::LEADER => {
            need(LEADER_LEN)?;
            let (g, _) = Header::parse(&b[32..])?;
            DeviceMessage::Leader {
                buffer_id: u32_at(b, 16),
                planned_size: u64_at(b, 24),
                block_id: g.block_id,
                previous_dropped: g.flags & gvsp::FLAG_PREVIOUS_BLOCK_DROPPED != 0,
                leader: ImageLeader::parse(&b[52..])?,
            }
        }
        kind::TRAILER => {
            need(TRAILER_LEN)?;
            let (g, _) = Header::parse(&b[32..])?;
            DeviceMessage::Trailer {
                buffer_id: u32_at(b, 16),
                status: u16_at(b, 20),
                valid_size: u64_at(b, 24),
                block_id: g.block_id,
                chunks: (u16_at(b, 54) & gvsp::PAYLOAD_TYPE_CHUNK_FLAG != 0
                    && b.len() >= TRAILER_CHUNK_LEN)
                    .then(|| gvsp::TrailerChunks {
                        payload_len: u32_at(b, 60),
                        layout_id: u32_at(b, 64),
                    }),
            }
        }
        kind::EVENT => {
            need(40)?;
            DeviceMessage::Event {
                event_id: u16_at(b, 16),
                detail: u32_at(b, 20),
                block_id: u64_at(b, 24),
            }
        }
        kind::STREAM_END => {
            need(32)?;
            DeviceMessage::StreamEnd {
                last_block_id: u64_at(b, 16),
                frames_sent: u32_at(b, 24),
                frames_dropped: u32_at(b, 28),
            }
        }
        kind::RELEASED => {
            need(20)?;
            DeviceMessage::Released {
                count: u32_at(b, 16),
                more: h.flags & FLAG_MORE != 0,
            }
        }
        kind::HELLO => DeviceMessage::Hello(Hello::parse(b)?),
        _ => return Err(Error::Unsupported),
    };
    Ok((h, m))
}

#[cfg(test)]
mod tests {
    use super::*;

    // The GVSP part of a LEADER is a GEV extended-ID leader packet: compare it with the layout of
    // reference/gev.md §2.1/2.5 written out by hand.
    #[test]
    fn leader_carries_a_gvsp_extended_leader_at_offset_32() {
        let mut b = [0u8; 128];
        let l = ImageLeader {
            timestamp: 5,
            pixel_format: 0x0108_0001,
            width: 1920,
            height: 1080,
            offset_x: 0,
            offset_y: 0,
            chunks: false,
        };
        let n = emit_leader(&mut b, 7, 3, 1920 * 1080, 42, true, &l).unwrap();
        assert_eq!(n, 88);
        assert_eq!(
            &b[..16],
            &[0x4f, 0x52, 0x53, 0x50, 1, 1, 0, 0, 0, 0, 0, 88, 0, 0, 0, 7]
        );
        let gvsp_part: [u8; 20] = [
            0, 0, 0, 2, // status, flags: previous block dropped
            0x81, 0, 0, 0, // EI | format leader
            0, 0, 0, 0, 0, 0, 0, 42, // block id
            0, 0, 0, 0, // packet id 0
        ];
        assert_eq!(&b[32..52], &gvsp_part);
        assert_eq!(&b[52..56], &[0, 0, 0, 1], "payload type image");
        match parse_device(&b[..n]).unwrap().1 {
            DeviceMessage::Leader {
                buffer_id,
                block_id,
                previous_dropped,
                leader,
                ..
            } => {
                assert_eq!(
                    (buffer_id, block_id, previous_dropped, leader),
                    (3, 42, true, l)
                );
            }
            m => panic!("{m:?}"),
        }
    }

    #[test]
    fn host_messages_round_trip_and_bad_counts_are_rejected() {
        let mut b = [0u8; 256];
        let d = [Descriptor {
            buffer_id: 1,
            rkey: 0x99,
            addr: 0x1000,
            length: 4096,
        }];
        let n = emit_announce(&mut b, 0, ANNOUNCE_QUEUE, &d).unwrap();
        let (_, m) = parse_host(&b[..n]).unwrap();
        let HostMessage::Announce {
            flags,
            descriptors: raw,
        } = m
        else {
            panic!()
        };
        assert_eq!(flags, 1);
        assert_eq!(descriptors(raw).collect::<std::vec::Vec<_>>(), d);
        b[19] = 2; // count 2, length still for 1
        assert_eq!(parse_host(&b[..n]).err(), Some(Error::BadLength));
        let n = emit_queue(&mut b, 1, &[5, 6]).unwrap();
        let (h, HostMessage::Queue { ids: raw }) = parse_host(&b[..n]).unwrap() else {
            panic!()
        };
        assert_eq!(
            (h.seq, ids(raw).collect::<std::vec::Vec<_>>()),
            (1, std::vec![5, 6])
        );
        b[0] = 0;
        assert_eq!(parse_host(&b[..n]).err(), Some(Error::BadVersion));
    }
}
