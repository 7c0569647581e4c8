//! RoCE framing: RoCEv2 (IPv4 or IPv6, UDP to port 4791) and RoCEv1 (EtherType 0x8915, GRH).
//!
//! A packet is `net headers ‖ BTH ‖ extension headers ‖ payload ‖ pad ‖ ICRC`. The emit side is
//! split so that payload bytes are never copied: [`RoceV2Repr::emit_header`] writes the headers,
//! the caller hands the payload slices to [`RoceV2Repr::emit_trailer`] (which streams them through
//! the ICRC) and sends `header ‖ payload ‖ trailer` with gather I/O.

use core::net::{Ipv4Addr, Ipv6Addr};
use core::ops::Range;

use super::icrc::{ICRC_LEN, Icrc};
use super::ipv4::{self, Ipv4Repr};
use super::ipv6::{self, Ipv6Repr};
use super::opcode::Opcode;
use super::udp::{self, UdpRepr};
use super::{AethRepr, BthRepr, DethRepr, Error, Result, RethRepr, bth, immdt};

/// The IANA UDP port of RoCEv2.
pub const ROCEV2_PORT: u16 = 4791;
/// The lowest UDP source port of the RoCEv2 entropy range.
pub const ENTROPY_PORT_MIN: u16 = 0xc000;
/// The longest header block (IPv6 + UDP + BTH + RETH + ImmDt) this module emits.
pub const MAX_HEADER_LEN: usize = 40 + 8 + 12 + 28 + 4;

/// The 20-bit flow label of an RC connection, as the Linux IB core derives it
/// (`rdma_calc_flow_label(lqpn, rqpn)`).
pub const fn flow_label(local_qpn: u32, remote_qpn: u32) -> u32 {
    let mut v = local_qpn as u64 * remote_qpn as u64;
    v ^= v >> 20;
    v ^= v >> 40;
    (v & 0xf_ffff) as u32
}

/// The UDP source port of a connection's packets: constant per QP pair, in 0xC000..=0xFFFF, the
/// way Linux picks it (`rdma_flow_label_to_udp_sport`), so ECMP and RSS spread QPs.
pub const fn udp_source_port(local_qpn: u32, remote_qpn: u32) -> u16 {
    let fl = flow_label(local_qpn, remote_qpn);
    let low = (fl & 0x3fff) ^ ((fl & 0xf_c000) >> 14);
    (low as u16) | ENTROPY_PORT_MIN
}

/// Pad bytes that follow a payload of `len` bytes so that payload + pad is a multiple of 4.
#[inline]
pub const fn pad_len(len: usize) -> usize {
    len.wrapping_neg() & 3
}

/// The InfiniBand part of a packet: the BTH and the extension headers its opcode calls for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IbRepr {
    /// Base transport header. Its pad count is derived from the payload length on emit.
    pub bth: BthRepr,
    /// DETH (UD opcodes).
    pub deth: Option<DethRepr>,
    /// RETH (WRITE FIRST / ONLY, READ REQUEST).
    pub reth: Option<RethRepr>,
    /// AETH (ACKNOWLEDGE, READ RESPONSE FIRST/LAST/ONLY).
    pub aeth: Option<AethRepr>,
    /// Immediate data (the "with immediate" opcodes).
    pub immdt: Option<u32>,
    /// R_Key to invalidate (SEND with invalidate).
    pub ieth: Option<u32>,
}

impl IbRepr {
    /// A BTH-only representation; set the extension headers the opcode needs.
    pub const fn new(bth: BthRepr) -> Self {
        IbRepr {
            bth,
            deth: None,
            reth: None,
            aeth: None,
            immdt: None,
            ieth: None,
        }
    }

    /// Parse the BTH and extension headers at the start of `buf`; returns the header length.
    /// Atomic opcodes are `Unsupported` (this crate neither sends nor answers them).
    pub fn parse(buf: &[u8]) -> Result<(Self, usize)> {
        let bth = BthRepr::parse(&bth::Packet::new_checked(buf)?)?;
        let h = bth.opcode.headers();
        if h.atomic_eth || h.atomic_ack_eth {
            return Err(Error::Unsupported);
        }
        let len = bth::HEADER_LEN + h.len();
        if buf.len() < len {
            return Err(Error::Truncated);
        }
        let ext = &buf[bth::HEADER_LEN..len];
        let mut r = IbRepr::new(bth);
        if h.deth {
            r.deth = Some(DethRepr::parse(ext)?);
        }
        if h.reth {
            r.reth = Some(RethRepr::parse(&ext[h.reth_offset()..])?);
        }
        if h.aeth {
            r.aeth = Some(AethRepr::parse(&ext[h.aeth_offset()..])?);
        }
        if h.immdt {
            r.immdt = Some(immdt::parse(&ext[h.immdt_offset()..])?);
        }
        if h.ieth {
            r.ieth = Some(immdt::parse(&ext[h.immdt_offset()..])?);
        }
        Ok((r, len))
    }

    /// Length of the BTH and extension headers.
    #[inline]
    pub const fn buffer_len(&self) -> usize {
        bth::HEADER_LEN + self.bth.opcode.headers().len()
    }

    /// Write the BTH (with `pad_count`) and extension headers at the start of `buf`. Each
    /// extension header must be present exactly when the opcode calls for it.
    #[inline]
    pub fn emit(&self, buf: &mut [u8], pad_count: u8) -> Result<usize> {
        let Some(info) = self.bth.opcode.info() else {
            return Err(Error::UnknownOpcode(self.bth.opcode.0));
        };
        let h = info.headers;
        if h.deth != self.deth.is_some()
            || h.reth != self.reth.is_some()
            || h.aeth != self.aeth.is_some()
            || h.immdt != self.immdt.is_some()
            || h.ieth != self.ieth.is_some()
            || h.atomic_eth
            || h.atomic_ack_eth
        {
            return Err(Error::Unsupported);
        }
        let len = self.buffer_len();
        if buf.len() < len {
            return Err(Error::Truncated);
        }
        let mut b = self.bth;
        b.pad_count = pad_count;
        b.emit(buf)?;
        let ext = &mut buf[bth::HEADER_LEN..len];
        ext.fill(0);
        if let Some(d) = self.deth {
            d.emit(ext)?;
        }
        if let Some(r) = self.reth {
            r.emit(&mut ext[h.reth_offset()..])?;
        }
        if let Some(a) = self.aeth {
            a.emit(&mut ext[h.aeth_offset()..])?;
        }
        if let Some(i) = self.immdt.or(self.ieth) {
            immdt::emit(i, &mut ext[h.immdt_offset()..])?;
        }
        Ok(len)
    }
}

/// The network layer under RoCEv2.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IpRepr {
    /// IPv4. This project sends identification 0 with DF set, so the ICRC is known up front.
    V4 {
        /// Source address.
        src: Ipv4Addr,
        /// Destination address.
        dst: Ipv4Addr,
        /// DSCP (6 bits).
        dscp: u8,
        /// ECN (2 bits).
        ecn: u8,
        /// Time to live.
        ttl: u8,
        /// Identification (covered by the ICRC).
        ident: u16,
        /// Don't-Fragment.
        dont_frag: bool,
    },
    /// IPv6.
    V6 {
        /// Source address.
        src: Ipv6Addr,
        /// Destination address.
        dst: Ipv6Addr,
        /// Traffic class (DSCP << 2 | ECN).
        traffic_class: u8,
        /// Flow label (20 bits).
        flow_label: u32,
        /// Hop limit.
        hop_limit: u8,
    },
}

impl IpRepr {
    /// IPv4 with this project's defaults: DSCP 0, Not-ECT, TTL 64, identification 0, DF.
    pub const fn v4(src: Ipv4Addr, dst: Ipv4Addr) -> Self {
        IpRepr::V4 {
            src,
            dst,
            dscp: 0,
            ecn: 0,
            ttl: 64,
            ident: 0,
            dont_frag: true,
        }
    }

    /// IPv6 with traffic class 0, flow label 0, hop limit 64.
    pub const fn v6(src: Ipv6Addr, dst: Ipv6Addr) -> Self {
        IpRepr::V6 {
            src,
            dst,
            traffic_class: 0,
            flow_label: 0,
            hop_limit: 64,
        }
    }

    /// Length of the IP header.
    #[inline]
    pub const fn buffer_len(&self) -> usize {
        match self {
            IpRepr::V4 { .. } => ipv4::HEADER_LEN,
            IpRepr::V6 { .. } => ipv6::HEADER_LEN,
        }
    }

    /// Write this IP header and a UDP header (checksum 0) for `udp_payload_len` bytes of UDP
    /// payload at the start of `buf`; returns their length.
    #[inline]
    pub fn emit_udp_header(
        &self,
        buf: &mut [u8],
        src_port: u16,
        dst_port: u16,
        udp_payload_len: usize,
    ) -> Result<usize> {
        let ip_len = self.buffer_len();
        if buf.len() < ip_len + udp::HEADER_LEN {
            return Err(Error::Truncated);
        }
        self.emit(buf, udp::HEADER_LEN + udp_payload_len)?;
        UdpRepr {
            src_port,
            dst_port,
            payload_len: udp_payload_len,
        }
        .emit(&mut buf[ip_len..])?;
        Ok(ip_len + udp::HEADER_LEN)
    }

    fn emit(&self, buf: &mut [u8], payload_len: usize) -> Result<()> {
        match *self {
            IpRepr::V4 {
                src,
                dst,
                dscp,
                ecn,
                ttl,
                ident,
                dont_frag,
            } => Ipv4Repr {
                src_addr: src,
                dst_addr: dst,
                protocol: ipv4::PROTOCOL_UDP,
                payload_len,
                dscp,
                ecn,
                ident,
                dont_frag,
                ttl,
            }
            .emit(buf),
            IpRepr::V6 {
                src,
                dst,
                traffic_class,
                flow_label,
                hop_limit,
            } => Ipv6Repr {
                src_addr: src,
                dst_addr: dst,
                next_header: ipv6::NEXT_HEADER_UDP,
                payload_len,
                traffic_class,
                flow_label,
                hop_limit,
            }
            .emit(buf),
        }
    }
}

/// A RoCEv2 packet from the IP header on: IP, UDP, InfiniBand headers and payload length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RoceV2Repr {
    /// IP header.
    pub ip: IpRepr,
    /// UDP source port (see [`udp_source_port`]).
    pub src_port: u16,
    /// UDP destination port (4791).
    pub dst_port: u16,
    /// BTH and extension headers.
    pub ib: IbRepr,
    /// Payload bytes (without pad and ICRC).
    pub payload_len: usize,
}

impl RoceV2Repr {
    /// Bytes of IP, UDP and InfiniBand headers.
    #[inline]
    pub const fn header_len(&self) -> usize {
        self.ip.buffer_len() + udp::HEADER_LEN + self.ib.buffer_len()
    }

    /// Bytes of pad and ICRC after the payload.
    #[inline]
    pub const fn trailer_len(&self) -> usize {
        pad_len(self.payload_len) + ICRC_LEN
    }

    /// The whole IP packet's length.
    #[inline]
    pub const fn buffer_len(&self) -> usize {
        self.header_len() + self.payload_len + self.trailer_len()
    }

    /// Write IP, UDP and InfiniBand headers at the start of `buf`; returns their length.
    #[inline]
    pub fn emit_header(&self, buf: &mut [u8]) -> Result<usize> {
        let hl = self.header_len();
        if buf.len() < hl {
            return Err(Error::Truncated);
        }
        let udp_payload = self.ib.buffer_len() + self.payload_len + self.trailer_len();
        let l4 = self
            .ip
            .emit_udp_header(buf, self.src_port, self.dst_port, udp_payload)?;
        self.ib
            .emit(&mut buf[l4..], pad_len(self.payload_len) as u8)?;
        Ok(hl)
    }

    /// Given the headers written by [`emit_header`](Self::emit_header) and the payload as any
    /// number of slices (streamed, not copied), write pad and ICRC into `out`; returns their
    /// length.
    #[inline]
    pub fn emit_trailer<'a>(
        &self,
        header: &[u8],
        payload: impl IntoIterator<Item = &'a [u8]>,
        out: &mut [u8],
    ) -> Result<usize> {
        let ip_len = self.ip.buffer_len();
        let hl = self.header_len();
        let tl = self.trailer_len();
        if header.len() < hl || out.len() < tl {
            return Err(Error::Truncated);
        }
        let (ip, rest) = header.split_at(ip_len);
        let (udp_hdr, rest) = rest.split_at(udp::HEADER_LEN);
        let (bth_hdr, ext) = rest.split_at(bth::HEADER_LEN);
        let mut c = match self.ip {
            IpRepr::V4 { .. } => Icrc::rocev2_ipv4(ip, udp_hdr, bth_hdr)?,
            IpRepr::V6 { .. } => Icrc::rocev2_ipv6(ip, udp_hdr, bth_hdr)?,
        };
        let ext = &ext[..hl - ip_len - udp::HEADER_LEN - bth::HEADER_LEN];
        if !ext.is_empty() {
            c.update(ext);
        }
        let mut seen = 0;
        for s in payload {
            seen += s.len();
            c.update(s);
        }
        if seen != self.payload_len {
            return Err(Error::BadLength);
        }
        let pad = pad_len(self.payload_len);
        if pad > 0 {
            c.pad(pad);
        }
        out[..pad].fill(0);
        out[pad..tl].copy_from_slice(&c.finish().to_le_bytes());
        Ok(tl)
    }

    /// Write the whole packet (payload copied) into `buf`; returns its length.
    pub fn emit(&self, buf: &mut [u8], payload: &[u8]) -> Result<usize> {
        let total = self.buffer_len();
        if buf.len() < total || payload.len() != self.payload_len {
            return Err(if buf.len() < total {
                Error::Truncated
            } else {
                Error::BadLength
            });
        }
        let hl = self.emit_header(buf)?;
        let (head, tail) = buf.split_at_mut(hl);
        tail[..payload.len()].copy_from_slice(payload);
        let (_, trailer) = tail.split_at_mut(payload.len());
        self.emit_trailer(head, [payload], trailer)?;
        Ok(total)
    }

    /// Parse an IP packet carrying RoCEv2 and verify its ICRC. Returns the representation and
    /// where the payload sits in `packet`.
    pub fn parse(packet: &[u8]) -> Result<(Self, Range<usize>)> {
        let (ip, ip_len, udp_bytes) = match packet.first().map(|b| b >> 4) {
            Some(4) => {
                let p = ipv4::Packet::new_checked(packet)?;
                let r = Ipv4Repr::parse(&p)?;
                if r.protocol != ipv4::PROTOCOL_UDP {
                    return Err(Error::Unsupported);
                }
                let ip = IpRepr::V4 {
                    src: r.src_addr,
                    dst: r.dst_addr,
                    dscp: r.dscp,
                    ecn: r.ecn,
                    ttl: r.ttl,
                    ident: r.ident,
                    dont_frag: r.dont_frag,
                };
                let end = usize::from(p.total_len());
                (ip, ipv4::HEADER_LEN, &packet[ipv4::HEADER_LEN..end])
            }
            Some(6) => {
                let p = ipv6::Packet::new_checked(packet)?;
                let r = Ipv6Repr::parse(&p)?;
                if r.next_header != ipv6::NEXT_HEADER_UDP {
                    return Err(Error::Unsupported);
                }
                let ip = IpRepr::V6 {
                    src: r.src_addr,
                    dst: r.dst_addr,
                    traffic_class: r.traffic_class,
                    flow_label: r.flow_label,
                    hop_limit: r.hop_limit,
                };
                let end = ipv6::HEADER_LEN + r.payload_len;
                (ip, ipv6::HEADER_LEN, &packet[ipv6::HEADER_LEN..end])
            }
            Some(_) => return Err(Error::BadVersion),
            None => return Err(Error::Truncated),
        };
        let u = udp::Packet::new_checked(udp_bytes)?;
        let ur = UdpRepr::parse(&u)?;
        let dgram = &udp_bytes[..udp::HEADER_LEN + ur.payload_len];
        let (ib, ib_len) = IbRepr::parse(u.payload())?;
        let pad = usize::from(ib.bth.pad_count);
        let payload_len = ur
            .payload_len
            .checked_sub(ib_len + pad + ICRC_LEN)
            .ok_or(Error::BadLength)?;
        let (computed, carried) =
            super::icrc::raw_rocev2(&packet[..ip_len], ip_len == ipv6::HEADER_LEN, dgram)?;
        if computed != carried {
            return Err(Error::Checksum);
        }
        let start = ip_len + udp::HEADER_LEN + ib_len;
        Ok((
            RoceV2Repr {
                ip,
                src_port: ur.src_port,
                dst_port: ur.dst_port,
                ib,
                payload_len,
            },
            start..start + payload_len,
        ))
    }
}

/// A RoCEv1 packet from the GRH on (EtherType 0x8915): L2 only, not routable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RoceV1Repr {
    /// Source GID.
    pub src_gid: Ipv6Addr,
    /// Destination GID.
    pub dst_gid: Ipv6Addr,
    /// GRH traffic class.
    pub traffic_class: u8,
    /// GRH flow label.
    pub flow_label: u32,
    /// GRH hop limit.
    pub hop_limit: u8,
    /// BTH and extension headers.
    pub ib: IbRepr,
    /// Payload bytes (without pad and ICRC).
    pub payload_len: usize,
}

impl RoceV1Repr {
    /// Bytes of GRH and InfiniBand headers.
    #[inline]
    pub const fn header_len(&self) -> usize {
        ipv6::HEADER_LEN + self.ib.buffer_len()
    }

    /// The whole packet's length after the Ethernet header.
    #[inline]
    pub const fn buffer_len(&self) -> usize {
        self.header_len() + self.payload_len + pad_len(self.payload_len) + ICRC_LEN
    }

    /// Write GRH, headers, payload, pad and ICRC into `buf`; returns the length.
    pub fn emit(&self, buf: &mut [u8], payload: &[u8]) -> Result<usize> {
        let total = self.buffer_len();
        if buf.len() < total {
            return Err(Error::Truncated);
        }
        if payload.len() != self.payload_len {
            return Err(Error::BadLength);
        }
        Ipv6Repr {
            src_addr: self.src_gid,
            dst_addr: self.dst_gid,
            next_header: ipv6::NEXT_HEADER_IBA,
            payload_len: total - ipv6::HEADER_LEN,
            traffic_class: self.traffic_class,
            flow_label: self.flow_label,
            hop_limit: self.hop_limit,
        }
        .emit(buf)?;
        let pad = pad_len(self.payload_len);
        let hl = self.header_len();
        self.ib.emit(&mut buf[ipv6::HEADER_LEN..], pad as u8)?;
        buf[hl..hl + payload.len()].copy_from_slice(payload);
        buf[hl + payload.len()..hl + payload.len() + pad].fill(0);
        let icrc_at = total - ICRC_LEN;
        let (grh, ib) = buf[..icrc_at].split_at(ipv6::HEADER_LEN);
        let mut c = Icrc::rocev1(grh, &ib[..bth::HEADER_LEN])?;
        c.update(&ib[bth::HEADER_LEN..]);
        buf[icrc_at..total].copy_from_slice(&c.finish().to_le_bytes());
        Ok(total)
    }

    /// Parse a GRH-led packet and verify its ICRC; returns the representation and the payload
    /// range within `packet`.
    pub fn parse(packet: &[u8]) -> Result<(Self, Range<usize>)> {
        let p = ipv6::Packet::new_checked(packet)?;
        let g = Ipv6Repr::parse(&p)?;
        if g.next_header != ipv6::NEXT_HEADER_IBA {
            return Err(Error::BadVersion);
        }
        let ib_bytes = p.payload();
        let (ib, ib_len) = IbRepr::parse(ib_bytes)?;
        let payload_len = ib_bytes
            .len()
            .checked_sub(ib_len + usize::from(ib.bth.pad_count) + ICRC_LEN)
            .ok_or(Error::BadLength)?;
        let (computed, carried) = super::icrc::raw_rocev1(&packet[..ipv6::HEADER_LEN], ib_bytes)?;
        if computed != carried {
            return Err(Error::Checksum);
        }
        let start = ipv6::HEADER_LEN + ib_len;
        Ok((
            RoceV1Repr {
                src_gid: g.src_addr,
                dst_gid: g.dst_addr,
                traffic_class: g.traffic_class,
                flow_label: g.flow_label,
                hop_limit: g.hop_limit,
                ib,
                payload_len,
            },
            start..start + payload_len,
        ))
    }
}

impl Opcode {
    /// Whether packets with this opcode carry payload bytes at all.
    pub const fn carries_payload(self) -> bool {
        use super::opcode::Operation::*;
        match self.info() {
            Some(i) => matches!(i.operation, Send | RdmaWrite | RdmaReadResponse),
            None => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::aeth::{AethSyndrome, NakCode};
    use crate::wire::cnp;
    use std::vec;
    use std::vec::Vec;

    fn vector(name: char) -> Vec<u8> {
        crate::wire::icrc::tests::vectors()
            .into_iter()
            .find(|(n, _)| *n == name)
            .unwrap()
            .1
    }

    const CAM: Ipv4Addr = Ipv4Addr::new(192, 168, 10, 2);
    const HOST: Ipv4Addr = Ipv4Addr::new(192, 168, 10, 1);

    fn cam_to_host(ib: IbRepr, payload_len: usize) -> RoceV2Repr {
        RoceV2Repr {
            ip: IpRepr::V4 {
                src: CAM,
                dst: HOST,
                dscp: 0,
                ecn: 0,
                ttl: 64,
                ident: 0x1234,
                dont_frag: true,
            },
            src_port: 0xc123,
            dst_port: ROCEV2_PORT,
            ib,
            payload_len,
        }
    }

    fn host_to_cam(ib: IbRepr) -> RoceV2Repr {
        let mut r = cam_to_host(ib, 0);
        r.ip = IpRepr::V4 {
            src: HOST,
            dst: CAM,
            dscp: 0,
            ecn: 0,
            ttl: 64,
            ident: 0x1234,
            dont_frag: true,
        };
        r.src_port = 0xd000;
        r
    }

    fn reth(len: u32) -> Option<RethRepr> {
        Some(RethRepr {
            va: 0x7f00_0000_1000 + if len == 13 { 0x1000 } else { 0 },
            rkey: 0x1234,
            dma_len: len,
        })
    }

    fn check_emit(repr: RoceV2Repr, payload: &[u8], expected_frame: &[u8]) {
        let mut buf = vec![0u8; repr.buffer_len()];
        let n = repr.emit(&mut buf, payload).unwrap();
        assert_eq!(n, expected_frame.len() - 14);
        assert_eq!(&buf[..], &expected_frame[14..]);
        let (parsed, range) = RoceV2Repr::parse(&expected_frame[14..]).unwrap();
        let mut want = repr;
        want.ib.bth.pad_count = pad_len(payload.len()) as u8;
        assert_eq!(parsed, want);
        assert_eq!(&expected_frame[14..][range], payload);
    }

    // Vectors A-F of rocev2.md §2.4 (c): our emitter reproduces every byte, ICRC included, and
    // the parser reads back the same representation.
    #[test]
    fn emits_vector_a_write_only() {
        let payload: Vec<u8> = (0..64).collect();
        let mut bth = BthRepr::new(Opcode::RC_WRITE_ONLY, 0x11, 0x100);
        bth.ack_req = true;
        let mut ib = IbRepr::new(bth);
        ib.reth = reth(64);
        check_emit(cam_to_host(ib, 64), &payload, &vector('A'));
    }

    #[test]
    fn emits_vector_b_write_only_imm_with_pad() {
        let mut bth = BthRepr::new(Opcode::RC_WRITE_ONLY_IMM, 0x11, 0x101);
        bth.ack_req = true;
        bth.solicited = true;
        let mut ib = IbRepr::new(bth);
        ib.reth = reth(13);
        ib.immdt = Some(0xdead_beef);
        check_emit(cam_to_host(ib, 13), b"camera-frame!", &vector('B'));
    }

    #[test]
    fn emits_vector_c_send_only_imm_empty() {
        let mut bth = BthRepr::new(Opcode::RC_SEND_ONLY_IMM, 0x11, 0x102);
        bth.ack_req = true;
        bth.solicited = true;
        let mut ib = IbRepr::new(bth);
        ib.immdt = Some(1);
        check_emit(cam_to_host(ib, 0), &[], &vector('C'));
    }

    #[test]
    fn emits_vectors_d_e_ack_and_nak() {
        let mut ib = IbRepr::new(BthRepr::new(Opcode::RC_ACK, 0x22, 0x102));
        ib.aeth = Some(AethRepr {
            syndrome: AethSyndrome::Ack { credits: 0x1f },
            msn: 3,
        });
        check_emit(host_to_cam(ib), &[], &vector('D'));
        let mut ib = IbRepr::new(BthRepr::new(Opcode::RC_ACK, 0x22, 0x101));
        ib.aeth = Some(AethRepr {
            syndrome: AethSyndrome::Nak(NakCode::PsnSequenceError),
            msn: 1,
        });
        check_emit(host_to_cam(ib), &[], &vector('E'));
    }

    #[test]
    fn emits_vector_f_cnp() {
        check_emit(host_to_cam(IbRepr::new(cnp::bth(0x22))), &[], &vector('F'));
    }

    #[test]
    fn emits_vector_g_over_ipv6() {
        let payload: Vec<u8> = (0..64).collect();
        let mut bth = BthRepr::new(Opcode::RC_WRITE_ONLY, 0x11, 0x100);
        bth.ack_req = true;
        let mut ib = IbRepr::new(bth);
        ib.reth = reth(64);
        let mut r = cam_to_host(ib, 64);
        r.ip = IpRepr::v6("fd00::2".parse().unwrap(), "fd00::1".parse().unwrap());
        check_emit(r, &payload, &vector('G'));
    }

    #[test]
    fn trailer_streams_payload_from_many_slices() {
        let payload: Vec<u8> = (0..64).collect();
        let mut bth = BthRepr::new(Opcode::RC_WRITE_ONLY, 0x11, 0x100);
        bth.ack_req = true;
        let mut ib = IbRepr::new(bth);
        ib.reth = reth(64);
        let r = cam_to_host(ib, 64);
        let mut head = [0u8; MAX_HEADER_LEN];
        let hl = r.emit_header(&mut head).unwrap();
        let mut trailer = [0u8; 7];
        let tl = r
            .emit_trailer(&head[..hl], payload.chunks(5), &mut trailer)
            .unwrap();
        assert_eq!(&trailer[..tl], &vector('A')[138 - 4..]);
        assert_eq!(
            r.emit_trailer(&head[..hl], [&payload[..63]], &mut trailer),
            Err(Error::BadLength)
        );
    }

    #[test]
    fn emit_refuses_headers_the_opcode_does_not_carry() {
        let mut ib = IbRepr::new(BthRepr::new(Opcode::RC_WRITE_MIDDLE, 0x11, 1));
        ib.reth = reth(64);
        let mut buf = [0u8; 64];
        assert_eq!(ib.emit(&mut buf, 0), Err(Error::Unsupported));
        let ib = IbRepr::new(BthRepr::new(Opcode::RC_WRITE_FIRST, 0x11, 1));
        assert_eq!(ib.emit(&mut buf, 0), Err(Error::Unsupported));
    }

    #[test]
    fn parse_rejects_flipped_icrc() {
        let mut a = vector('A');
        let last = a.len() - 1;
        a[last] ^= 0x80;
        assert_eq!(RoceV2Repr::parse(&a[14..]).err(), Some(Error::Checksum));
    }

    // rxe 6.12's ACKs in shared/lab/rxe/results (tshark-fields.tsv) left host QPs 0x11, 0x12 and
    // 0x13 (peer QP 0xc4d) from UDP ports 53534, 56681 and 59828.
    #[test]
    fn entropy_port_matches_what_rxe_sent() {
        assert_eq!(udp_source_port(0x11, 0xc4d), 53534);
        assert_eq!(udp_source_port(0x12, 0xc4d), 56681);
        assert_eq!(udp_source_port(0x13, 0xc4d), 59828);
    }

    #[test]
    fn rocev1_round_trip_and_icrc_masks() {
        let payload: Vec<u8> = (0..13).collect();
        let mut bth = BthRepr::new(Opcode::RC_SEND_ONLY, 0x11, 7);
        bth.ack_req = true;
        let r = RoceV1Repr {
            src_gid: "fe80::2".parse().unwrap(),
            dst_gid: "fe80::1".parse().unwrap(),
            traffic_class: 0,
            flow_label: 0,
            hop_limit: 1,
            ib: IbRepr::new(bth),
            payload_len: 13,
        };
        let mut buf = vec![0u8; r.buffer_len()];
        r.emit(&mut buf, &payload).unwrap();
        let (p, range) = RoceV1Repr::parse(&buf).unwrap();
        assert_eq!(&buf[range], &payload[..]);
        assert_eq!(p.ib.bth.pad_count, 3);
        // GRH traffic class, flow label and hop limit are masked; the DGID is not.
        buf[1] = 0xab;
        buf[7] = 9;
        assert!(RoceV1Repr::parse(&buf).is_ok());
        buf[39] ^= 1;
        assert_eq!(RoceV1Repr::parse(&buf).err(), Some(Error::Checksum));
    }
}
