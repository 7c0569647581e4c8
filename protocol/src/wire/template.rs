//! Headers built once per message shape, patched per packet.
//!
//! Consecutive MIDDLE packets of a long WRITE (or SEND) differ in three header fields only:
//! the PSN, the AckReq bit and the IPv4 identification (with the header checksum that covers
//! it). A [`HeaderTemplate`] holds the headers of such a packet with those fields zero, and the
//! same bytes with the fields the ICRC masks already masked; [`HeaderTemplate::emit`] copies
//! both, writes the three fields (the checksum updated incrementally, RFC 1624) and runs the
//! ICRC over the masked copy and the payload. The bytes are those [`RoceV2Repr::emit_header`]
//! and [`RoceV2Repr::emit_trailer`] write for the same packet (property-tested in
//! `tests/template.rs`).

use super::icrc::{Icrc, mask_bth, mask_ipv4, mask_ipv6, mask_udp};
use super::roce::{IpRepr, MAX_HEADER_LEN, RoceV2Repr, pad_len};
use super::{Error, Result, bth, udp};

/// The headers of one message shape (opcode, payload length, path), PSN, AckReq and IPv4
/// identification left to [`emit`](Self::emit).
#[derive(Debug, Clone)]
pub struct HeaderTemplate {
    header: [u8; MAX_HEADER_LEN],
    /// `header` with the ICRC's masked fields set to all-ones.
    masked: [u8; MAX_HEADER_LEN],
    header_len: u8,
    /// Offset of the BTH.
    bth_at: u8,
    /// IPv4: the header checksum with identification 0 (`None` for IPv6).
    ipv4_checksum: Option<u16>,
    payload_len: u32,
}

impl HeaderTemplate {
    /// The template of `repr`'s shape; its PSN, AckReq and IPv4 identification are ignored.
    pub fn new(repr: &RoceV2Repr) -> Result<Self> {
        let mut r = *repr;
        r.ib.bth.psn = 0;
        r.ib.bth.ack_req = false;
        if let IpRepr::V4 { ident, .. } = &mut r.ip {
            *ident = 0;
        }
        let mut header = [0u8; MAX_HEADER_LEN];
        let hl = r.emit_header(&mut header)?;
        let ip_len = r.ip.buffer_len();
        let bth_at = ip_len + udp::HEADER_LEN;
        let mut masked = header;
        let ipv4_checksum = match r.ip {
            IpRepr::V4 { .. } => {
                mask_ipv4(&mut masked[..ip_len]);
                Some(u16::from_be_bytes([header[10], header[11]]))
            }
            IpRepr::V6 { .. } => {
                mask_ipv6(&mut masked[..ip_len]);
                None
            }
        };
        mask_udp(&mut masked[ip_len..bth_at]);
        mask_bth(&mut masked[bth_at..bth_at + bth::HEADER_LEN]);
        Ok(HeaderTemplate {
            header,
            masked,
            header_len: hl as u8,
            bth_at: bth_at as u8,
            ipv4_checksum,
            payload_len: repr.payload_len as u32,
        })
    }

    /// Payload bytes of the packets this template builds.
    #[inline]
    pub fn payload_len(&self) -> u32 {
        self.payload_len
    }

    /// Write only the headers of the packet with `psn`, `ack_req` and IPv4 identification
    /// `ident` into `header` (for a data mover that computes the ICRC); returns their length.
    pub fn emit_header(
        &self,
        psn: u32,
        ack_req: bool,
        ident: u16,
        header: &mut [u8],
    ) -> Result<usize> {
        let hl = usize::from(self.header_len);
        if header.len() < hl {
            return Err(Error::Truncated);
        }
        header[..hl].copy_from_slice(&self.header[..hl]);
        let b = usize::from(self.bth_at);
        let a_psn = (u32::from(ack_req) << 31 | (psn & bth::PSN_MASK)).to_be_bytes();
        header[b + 8..b + 12].copy_from_slice(&a_psn);
        if let Some(c0) = self.ipv4_checksum {
            header[4..6].copy_from_slice(&ident.to_be_bytes());
            header[10..12].copy_from_slice(&checksum_with(c0, ident).to_be_bytes());
        }
        Ok(hl)
    }

    /// Write the headers of the packet with `psn`, `ack_req` and IPv4 identification `ident`
    /// into `header` and, the payload streamed through the ICRC, pad and ICRC into `trailer`;
    /// returns both lengths.
    #[inline]
    pub fn emit<'a>(
        &self,
        psn: u32,
        ack_req: bool,
        ident: u16,
        payload: impl IntoIterator<Item = &'a [u8]>,
        header: &mut [u8],
        trailer: &mut [u8],
    ) -> Result<(usize, usize)> {
        let hl = usize::from(self.header_len);
        let pad = pad_len(self.payload_len as usize);
        let tl = pad + super::icrc::ICRC_LEN;
        if header.len() < hl || trailer.len() < tl {
            return Err(Error::Truncated);
        }
        let mut masked = self.masked;
        header[..hl].copy_from_slice(&self.header[..hl]);
        let b = usize::from(self.bth_at);
        let a_psn = (u32::from(ack_req) << 31 | (psn & bth::PSN_MASK)).to_be_bytes();
        header[b + 8..b + 12].copy_from_slice(&a_psn);
        masked[b + 8..b + 12].copy_from_slice(&a_psn);
        if let Some(c0) = self.ipv4_checksum {
            let id = ident.to_be_bytes();
            header[4..6].copy_from_slice(&id);
            masked[4..6].copy_from_slice(&id);
            header[10..12].copy_from_slice(&checksum_with(c0, ident).to_be_bytes());
        }
        let mut c = Icrc::new();
        c.update(&masked[..hl]);
        let mut seen = 0usize;
        for s in payload {
            seen += s.len();
            c.update(s);
        }
        if seen != self.payload_len as usize {
            return Err(Error::BadLength);
        }
        if pad > 0 {
            c.pad(pad);
        }
        trailer[..pad].fill(0);
        trailer[pad..tl].copy_from_slice(&c.finish().to_le_bytes());
        Ok((hl, tl))
    }
}

/// The IPv4 header checksum after the identification goes from 0 (checksum `c0`) to `ident`:
/// RFC 1624, the sum without the checksum field plus the new identification, folded.
#[inline]
fn checksum_with(c0: u16, ident: u16) -> u16 {
    let mut sum = u32::from(!c0) + u32::from(ident);
    sum = (sum & 0xffff) + (sum >> 16);
    !(sum as u16)
}
