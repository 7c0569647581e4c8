//! Headers built once per packet shape, patched per packet.
//!
//! Packets of one shape (opcode, payload length, solicited bit, path) differ in a few header
//! fields only: the PSN and AckReq bit, the IPv4 identification (with the header checksum that
//! covers it), and the RETH and immediate data where the opcode carries them. A
//! [`HeaderTemplate`] holds the headers of the shape with those fields zero, and the ICRC of
//! everything before the PSN word, masked as the ICRC masks it. [`HeaderTemplate::emit`]
//! copies the headers, writes the packet's fields (the IPv4 checksum updated incrementally,
//! RFC 1624), and resumes the ICRC from the stored value: the identification enters through a
//! table (the CRC is linear, so a field's contribution can be added afterwards), the PSN word
//! and extension headers (4 to 24 bytes) through a byte loop, then the payload. The bytes are
//! those [`RoceV2Repr::emit_header`] and [`RoceV2Repr::emit_trailer`] write for the same packet
//! (property-tested in `tests/template.rs` and against the captured vectors).

use super::icrc::{
    CRC_TABLE, Icrc, mask_bth, mask_ipv4, mask_ipv6, mask_udp, register_update,
    register_update_words,
};
use super::reth::RethRepr;
use super::roce::{IpRepr, MAX_HEADER_LEN, RoceV2Repr, pad_len};
use super::{Error, Result, bth, udp};

/// What one packet of a template's shape has of its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PacketFields {
    /// Packet sequence number.
    pub psn: u32,
    /// The BTH AckReq bit.
    pub ack_req: bool,
    /// IPv4 identification (no field over IPv6).
    pub ident: u16,
    /// The RETH, for shapes whose opcode carries one (ignored otherwise).
    pub reth: RethRepr,
    /// Immediate data, for shapes whose opcode carries it (ignored otherwise).
    pub imm: u32,
}

/// The headers of one packet shape; the fields of [`PacketFields`] are left to
/// [`emit`](Self::emit).
#[derive(Debug, Clone)]
pub struct HeaderTemplate {
    header: [u8; MAX_HEADER_LEN],
    header_len: u8,
    /// Offset of the BTH's AckReq/PSN word: the ICRC's fixed part ends here.
    psn_at: u8,
    /// Offset of the RETH (0: none).
    reth_at: u8,
    /// Offset of the immediate data (0: none).
    immdt_at: u8,
    /// IPv4: the header checksum with identification 0 (`None` for IPv6).
    ipv4_checksum: Option<u16>,
    /// ICRC (finalised form) of the LRH stand-in and the masked headers up to `psn_at`,
    /// identification 0.
    prefix_crc: u32,
    payload_len: u32,
}

/// The header bytes a template copies per packet, 16 at a time: room for the longest headers
/// it takes (IPv6, UDP, BTH, RETH and immediate data: 80 bytes).
const COPIED: usize = MAX_HEADER_LEN / 16 * 16;

/// Offset of the AckReq/PSN word in an IPv4 RoCEv2 packet (20-byte IP header, UDP, 8 bytes of
/// BTH); the identification (bytes 4 and 5) is followed by this many bytes up to it.
const IPV4_PSN_AT: usize = 20 + udp::HEADER_LEN + 8;
const IDENT_TRAILING: usize = IPV4_PSN_AT - 6;

/// The CRC register's change after the ICRC's fixed part when the identification's nibble `n`
/// (most significant first) is `v` rather than 0: the CRC is linear over GF(2), so a field's
/// contribution is the register of the field alone, from a zero register, run on through the
/// zero bytes that follow it.
const IDENT_DELTA: [[u32; 16]; 4] = {
    let mut t = [[0u32; 16]; 4];
    let mut n = 0;
    while n < 4 {
        let mut v = 0;
        while v < 16 {
            let field = ((v as u16) << (12 - 4 * n)).to_be_bytes();
            let mut reg = register_update(0, &field);
            let mut z = 0;
            while z < IDENT_TRAILING {
                reg = (reg >> 8) ^ CRC_TABLE[(reg & 0xff) as usize];
                z += 1;
            }
            t[n][v] = reg;
            v += 1;
        }
        n += 1;
    }
    t
};

#[inline]
fn ident_delta(ident: u16) -> u32 {
    let i = usize::from(ident);
    IDENT_DELTA[0][i >> 12]
        ^ IDENT_DELTA[1][(i >> 8) & 15]
        ^ IDENT_DELTA[2][(i >> 4) & 15]
        ^ IDENT_DELTA[3][i & 15]
}

impl HeaderTemplate {
    /// The template of `repr`'s shape; its PSN, AckReq, IPv4 identification, RETH and
    /// immediate data are ignored. Only the extension headers a requester sends (RETH,
    /// immediate data) are supported.
    pub fn new(repr: &RoceV2Repr) -> Result<Self> {
        let mut r = *repr;
        let ib = &mut r.ib;
        if ib.deth.is_some() || ib.aeth.is_some() || ib.ieth.is_some() {
            return Err(Error::Unsupported);
        }
        ib.bth.psn = 0;
        ib.bth.ack_req = false;
        if let Some(reth) = &mut ib.reth {
            *reth = RethRepr::default();
        }
        if let Some(imm) = &mut ib.immdt {
            *imm = 0;
        }
        if let IpRepr::V4 { ident, .. } = &mut r.ip {
            *ident = 0;
        }
        let mut header = [0u8; MAX_HEADER_LEN];
        let hl = r.emit_header(&mut header)?;
        if hl > COPIED {
            return Err(Error::Unsupported);
        }
        let ip_len = r.ip.buffer_len();
        let bth_at = ip_len + udp::HEADER_LEN;
        let psn_at = bth_at + 8;
        let mut masked = header;
        let ipv4_checksum = match r.ip {
            IpRepr::V4 { .. } => {
                if psn_at != IPV4_PSN_AT {
                    return Err(Error::Unsupported);
                }
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
        let mut c = Icrc::new();
        c.update(&masked[..psn_at]);
        let h = r.ib.bth.opcode.headers();
        let ext_at = bth_at + bth::HEADER_LEN;
        Ok(HeaderTemplate {
            header,
            header_len: hl as u8,
            psn_at: psn_at as u8,
            reth_at: if h.reth {
                (ext_at + h.reth_offset()) as u8
            } else {
                0
            },
            immdt_at: if h.immdt {
                (ext_at + h.immdt_offset()) as u8
            } else {
                0
            },
            ipv4_checksum,
            prefix_crc: c.finish(),
            payload_len: repr.payload_len as u32,
        })
    }

    /// Payload bytes of the packets this template builds.
    #[inline]
    pub fn payload_len(&self) -> u32 {
        self.payload_len
    }

    /// Length of the headers this template writes.
    #[inline]
    pub fn header_len(&self) -> usize {
        usize::from(self.header_len)
    }

    /// Write the headers of the packet with `f` into `header` (alone: for a data mover that
    /// computes the ICRC); returns their length. The bytes past them are left as they are.
    #[inline(always)]
    pub fn emit_header(&self, f: &PacketFields, header: &mut [u8; MAX_HEADER_LEN]) -> usize {
        self.copy_unpatched(header);
        self.patch(f, header);
        usize::from(self.header_len)
    }

    /// Copy the shape's headers (per-packet fields zero) into `out` 16 bytes at a time:
    /// fixed-size copies the compiler turns into a few loads and stores (a call to `memcpy`
    /// for the whole buffer costs ~5 instructions a byte on a Cortex-A9 without an optimised C
    /// library).
    #[inline(always)]
    fn copy_unpatched(&self, out: &mut [u8; MAX_HEADER_LEN]) {
        let hl = usize::from(self.header_len);
        for at in (0..COPIED).step_by(16) {
            if at >= hl {
                break;
            }
            out[at..at + 16].copy_from_slice(&self.header[at..at + 16]);
        }
    }

    /// Write the fields of the packet with `f` into `h`, the shape's headers as
    /// [`copy_unpatched`](Self::copy_unpatched) left them.
    #[inline(always)]
    fn patch(&self, f: &PacketFields, h: &mut [u8; MAX_HEADER_LEN]) {
        let p = usize::from(self.psn_at);
        let a_psn = (u32::from(f.ack_req) << 31 | (f.psn & bth::PSN_MASK)).to_be_bytes();
        h[p..p + 4].copy_from_slice(&a_psn);
        if self.reth_at != 0 {
            let r = usize::from(self.reth_at);
            h[r..r + 8].copy_from_slice(&f.reth.va.to_be_bytes());
            h[r + 8..r + 12].copy_from_slice(&f.reth.rkey.to_be_bytes());
            h[r + 12..r + 16].copy_from_slice(&f.reth.dma_len.to_be_bytes());
        }
        if self.immdt_at != 0 {
            let i = usize::from(self.immdt_at);
            h[i..i + 4].copy_from_slice(&f.imm.to_be_bytes());
        }
        if let Some(c0) = self.ipv4_checksum {
            h[4..6].copy_from_slice(&f.ident.to_be_bytes());
            h[10..12].copy_from_slice(&checksum_with(c0, f.ident).to_be_bytes());
        }
    }

    /// The ICRC of the headers `emit_header` wrote into `header` for `f`, to go on with the
    /// payload.
    #[inline(always)]
    fn header_icrc(&self, f: &PacketFields, header: &[u8]) -> Icrc {
        let mut reg = !self.prefix_crc;
        if self.ipv4_checksum.is_some() && f.ident != 0 {
            reg ^= ident_delta(f.ident);
        }
        let hl = usize::from(self.header_len);
        reg = register_update_words(reg, &header[usize::from(self.psn_at)..hl]);
        Icrc::resume(!reg)
    }

    /// Write the headers of the packet with `f` into `header` and, the payload streamed
    /// through the ICRC, pad and ICRC into `trailer`; returns both lengths.
    #[inline]
    pub fn emit<'a>(
        &self,
        f: &PacketFields,
        payload: impl IntoIterator<Item = &'a [u8]>,
        header: &mut [u8; MAX_HEADER_LEN],
        trailer: &mut [u8],
    ) -> Result<(usize, usize)> {
        let hl = self.emit_header(f, header);
        let tl = self.trailer(f, header, payload, trailer)?;
        Ok((hl, tl))
    }

    /// Given the headers [`emit_header`](Self::emit_header) wrote for `f`, and the payload streamed
    /// through the ICRC, write pad and ICRC into `trailer`; returns its length.
    #[inline(always)]
    pub fn trailer<'a>(
        &self,
        f: &PacketFields,
        header: &[u8; MAX_HEADER_LEN],
        payload: impl IntoIterator<Item = &'a [u8]>,
        trailer: &mut [u8],
    ) -> Result<usize> {
        let pad = pad_len(self.payload_len as usize);
        let tl = pad + super::icrc::ICRC_LEN;
        let Some(out) = trailer.get_mut(..tl) else {
            return Err(Error::Truncated);
        };
        let mut c = self.header_icrc(f, header);
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
        if pad > 0 {
            out[..pad].fill(0);
        }
        out[pad..].copy_from_slice(&c.finish().to_le_bytes());
        Ok(tl)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_identification_table_is_the_crc_of_the_field_run_on() {
        // against crc32fast over the whole fixed part, for identifications spanning all nibbles
        let zero = [0u8; IPV4_PSN_AT];
        for ident in [0x0001u16, 0x8000, 0x1234, 0xffff, 0x0f0f] {
            let mut with = zero;
            with[4..6].copy_from_slice(&ident.to_be_bytes());
            let mut a = crc32fast::Hasher::new_with_initial(0x1234_5678);
            a.update(&with);
            let mut b = crc32fast::Hasher::new_with_initial(0x1234_5678);
            b.update(&zero);
            assert_eq!(
                a.finalize() ^ b.finalize(),
                ident_delta(ident),
                "{ident:#x}"
            );
        }
    }
}
