//! The receive side's ICRC check on a UDP socket, which hands over no IP header.

use std::net::{IpAddr, SocketAddr};

use crate::gso::GSO_MAX_SEGMENTS;

/// Checks the ICRC of RoCEv2 packets received on a UDP socket, which hands over the UDP
/// payload only: the IP and UDP headers are rebuilt from the addresses, ports and length. All
/// the fields the ICRC covers are known then (DF set, as RoCEv2 senders send) except the IPv4
/// identification, which a sender using UDP segmentation offload numbers 0, 1, 2, ... within a
/// send. The CRC is affine in those bits, so a packet is good when its carried ICRC differs
/// from the one computed with identification 0 by the contribution of an identification below
/// [`GSO_MAX_SEGMENTS`]; those contributions depend only on the packet's length and are
/// cached per length. IPv6 has no such field: its ICRC is checked exactly.
#[derive(Debug, Default)]
pub struct IcrcCheck {
    /// Per CRC-covered length: the contribution of each identification 0..GSO_MAX_SEGMENTS.
    deltas: std::collections::HashMap<usize, Box<[u32; GSO_MAX_SEGMENTS]>>,
}

impl IcrcCheck {
    /// Whether `ib` (BTH to ICRC) arriving from `src` at `dst` carries a good ICRC.
    pub fn ok(&mut self, src: SocketAddr, dst: SocketAddr, ib: &[u8]) -> bool {
        use rdmacam_protocol::wire::IpRepr;
        use rdmacam_protocol::wire::icrc::{ICRC_LEN, Icrc};
        const BTH: usize = 12;
        if ib.len() < BTH + ICRC_LEN {
            return false;
        }
        let ip = match (src.ip(), dst.ip()) {
            (IpAddr::V4(s), IpAddr::V4(d)) => IpRepr::v4(s, d),
            (IpAddr::V6(s), IpAddr::V6(d)) => IpRepr::v6(s, d),
            _ => return false,
        };
        let mut hdr = [0u8; 48];
        let Ok(hl) = ip.emit_udp_header(&mut hdr, src.port(), dst.port(), ib.len()) else {
            return false;
        };
        let ip_len = hl - 8;
        let (bth, rest) = ib.split_at(BTH);
        let (covered, carried) = rest.split_at(rest.len() - ICRC_LEN);
        let start = if src.is_ipv4() {
            Icrc::rocev2_ipv4(&hdr[..ip_len], &hdr[ip_len..hl], bth)
        } else {
            Icrc::rocev2_ipv6(&hdr[..ip_len], &hdr[ip_len..hl], bth)
        };
        let Ok(mut c) = start else {
            return false;
        };
        c.update(covered);
        let carried = u32::from_le_bytes([carried[0], carried[1], carried[2], carried[3]]);
        let diff = c.finish() ^ carried;
        if diff == 0 {
            return true;
        }
        if !src.is_ipv4() {
            return false;
        }
        // the CRC runs over 8 bytes of 0xFF, the IP header (identification at 4..6), UDP,
        // and the rest up to the ICRC
        let len = 8 + hl + ib.len() - ICRC_LEN;
        let deltas = self.deltas.entry(len).or_insert_with(|| {
            let crc = |ident: u16| {
                let mut m = vec![0u8; len];
                m[12..14].copy_from_slice(&ident.to_be_bytes());
                crc32fast::hash(&m)
            };
            let zero = crc(0);
            let basis: Vec<u32> = (0..6).map(|b| crc(1 << b) ^ zero).collect();
            let mut d = Box::new([0u32; GSO_MAX_SEGMENTS]);
            for (id, v) in d.iter_mut().enumerate() {
                *v = (0..6)
                    .filter(|b| id & (1 << b) != 0)
                    .fold(0, |a, b| a ^ basis[b]);
            }
            d
        });
        deltas[1..].contains(&diff)
    }
}
