//! The data-mover contract: the CPU decides, a data mover (an FPGA's DMA engine) moves payload
//! and computes the ICRC.
//!
//! With [`RequesterConfig::icrc_offload`](super::RequesterConfig::icrc_offload) the requester
//! never reads a payload byte. Each packet it sends becomes a [`TxDescriptor`]: the packet's
//! headers as they go on the wire, where its payload lies in frame memory, and what the mover
//! must append (pad, ICRC). [`TxDescriptor::to_bytes`] is the 128-byte layout a mover reads,
//! specified byte by byte in docs/firmware.md; [`move_packet`] is a mover in software, which the
//! tests hold to the requester's own packets byte for byte.
//!
//! A retransmission is a new descriptor over the same frame memory: a frame's memory is held
//! until the requester completes its message (every packet acknowledged).

use super::{PayloadRef, PayloadSource, TxPacket};
use crate::wire::icrc::{ICRC_LEN, Icrc};
use crate::wire::roce::MAX_HEADER_LEN;
use crate::wire::{Error, Result, bth, udp};

/// Bytes of a descriptor as a data mover reads it.
pub const DESCRIPTOR_LEN: usize = 128;
/// Layout version in byte 0.
pub const DESCRIPTOR_VERSION: u8 = 1;
/// Where the header bytes start in a descriptor.
pub const HEADER_AT: usize = 32;

/// Flag: the mover computes the ICRC (always set by this crate).
pub const FLAG_ICRC: u8 = 0x01;
/// Flag: the headers start with IPv6 (else IPv4).
pub const FLAG_IPV6: u8 = 0x02;
/// Flag: the packet was sent before (informational).
pub const FLAG_RETRANSMISSION: u8 = 0x04;

/// One packet for a data mover.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxDescriptor {
    /// [`FLAG_ICRC`], [`FLAG_IPV6`], [`FLAG_RETRANSMISSION`].
    pub flags: u8,
    /// IP, UDP and InfiniBand headers, exactly as they go on the wire.
    pub header: [u8; MAX_HEADER_LEN],
    /// Bytes of `header` used.
    pub header_len: u8,
    /// Zero bytes after the payload (0-3).
    pub pad: u8,
    /// Payload bytes.
    pub payload_len: u32,
    /// Where the payload lies: frame-memory region and offset in it.
    pub payload: PayloadRef,
    /// The packet's PSN (informational: it is in the header).
    pub psn: u32,
}

impl TxDescriptor {
    /// The descriptor of `pkt`, a packet the requester built with `icrc_offload`.
    pub fn of(pkt: &TxPacket) -> TxDescriptor {
        let h = pkt.header();
        let mut header = [0u8; MAX_HEADER_LEN];
        header[..h.len()].copy_from_slice(h);
        let mut flags = FLAG_ICRC;
        if h.first().is_some_and(|b| b >> 4 == 6) {
            flags |= FLAG_IPV6;
        }
        if pkt.retransmission {
            flags |= FLAG_RETRANSMISSION;
        }
        TxDescriptor {
            flags,
            header,
            header_len: h.len() as u8,
            pad: (pkt.trailer().len() - ICRC_LEN) as u8,
            payload_len: pkt.payload_len,
            payload: pkt.payload,
            psn: pkt.psn,
        }
    }

    /// The 128 bytes a data mover reads (docs/firmware.md): version, flags, header length, pad,
    /// payload length, region, PSN, payload offset (integers little-endian), then the headers
    /// from byte 32.
    pub fn to_bytes(&self) -> [u8; DESCRIPTOR_LEN] {
        let mut b = [0u8; DESCRIPTOR_LEN];
        b[0] = DESCRIPTOR_VERSION;
        b[1] = self.flags;
        b[2] = self.header_len;
        b[3] = self.pad;
        b[4..8].copy_from_slice(&self.payload_len.to_le_bytes());
        b[8..12].copy_from_slice(&self.payload.handle.to_le_bytes());
        b[12..16].copy_from_slice(&self.psn.to_le_bytes());
        b[16..24].copy_from_slice(&self.payload.offset.to_le_bytes());
        let hl = usize::from(self.header_len);
        b[HEADER_AT..HEADER_AT + hl].copy_from_slice(&self.header[..hl]);
        b
    }

    /// Read a descriptor back; refuses an unknown version or impossible lengths.
    pub fn from_bytes(b: &[u8; DESCRIPTOR_LEN]) -> Result<TxDescriptor> {
        let hl = usize::from(b[2]);
        let min = 20 + udp::HEADER_LEN + bth::HEADER_LEN;
        if b[0] != DESCRIPTOR_VERSION {
            return Err(Error::BadVersion);
        }
        if hl < min || hl > MAX_HEADER_LEN || b[3] > 3 {
            return Err(Error::BadLength);
        }
        let word = |at: usize| u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]]);
        let mut header = [0u8; MAX_HEADER_LEN];
        header[..hl].copy_from_slice(&b[HEADER_AT..HEADER_AT + hl]);
        let mut off = [0u8; 8];
        off.copy_from_slice(&b[16..24]);
        Ok(TxDescriptor {
            flags: b[1],
            header,
            header_len: b[2],
            pad: b[3],
            payload_len: word(4),
            payload: PayloadRef {
                handle: word(8),
                offset: u64::from_le_bytes(off),
            },
            psn: word(12),
        })
    }
}

/// A data mover in software: the packet of descriptor `d` into `out` — headers, the payload from
/// `memory`, pad, and the ICRC over the masked headers, payload and pad (the masking rules of
/// docs/firmware.md). Returns the packet's length.
pub fn move_packet<M: PayloadSource + ?Sized>(
    d: &TxDescriptor,
    memory: &M,
    out: &mut [u8],
) -> Result<usize> {
    let hl = usize::from(d.header_len);
    let (len, pad) = (d.payload_len as usize, usize::from(d.pad));
    let total = hl + len + pad + ICRC_LEN;
    if out.len() < total {
        return Err(Error::Truncated);
    }
    let payload = memory
        .payload(d.payload.handle, d.payload.offset, len)
        .ok_or(Error::BadLength)?;
    let header = &d.header[..hl];
    let ip_len = if d.flags & FLAG_IPV6 != 0 { 40 } else { 20 };
    if hl < ip_len + udp::HEADER_LEN + bth::HEADER_LEN {
        return Err(Error::BadLength);
    }
    let (ip, rest) = header.split_at(ip_len);
    let (udp_hdr, rest) = rest.split_at(udp::HEADER_LEN);
    let (bth_hdr, ext) = rest.split_at(bth::HEADER_LEN);
    let mut c = if d.flags & FLAG_IPV6 != 0 {
        Icrc::rocev2_ipv6(ip, udp_hdr, bth_hdr)?
    } else {
        Icrc::rocev2_ipv4(ip, udp_hdr, bth_hdr)?
    };
    c.update(ext);
    c.update(payload);
    c.pad(pad);
    out[..hl].copy_from_slice(header);
    out[hl..hl + len].copy_from_slice(payload);
    out[hl + len..hl + len + pad].fill(0);
    out[hl + len + pad..total].copy_from_slice(&c.finish().to_le_bytes());
    Ok(total)
}
