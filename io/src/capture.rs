//! pcapng captures of what a RoCEv2 socket sent and received (link type raw IP), as
//! `--pcap` writes them for `rdmacam inspect`, tshark and Wireshark.

use std::net::IpAddr;
use std::time::Instant as StdInstant;

/// A pcapng capture of a socket's RoCEv2 traffic (link type raw IPv4).
pub(crate) struct Capture {
    pub(crate) w: pcap_file::pcapng::PcapNgWriter<std::io::BufWriter<std::fs::File>>,
    pub(crate) t0: StdInstant,
}

/// A copy of an IPv4 or IPv6 UDP packet with its UDP checksum filled in (RFC 768 / RFC 8200),
/// as the kernel writes it on the wire: the queue pair builds its headers with checksum 0 (the
/// ICRC protects RoCEv2), and a capture should show what left, not what was handed over.
pub fn with_udp_checksum(packet: &[u8]) -> Vec<u8> {
    use rdmacam_protocol::wire::ipv4::checksum;
    let mut p = packet.to_vec();
    let (hl, mut pseudo) = match p.first().map(|b| b >> 4) {
        Some(4) if p.len() >= 20 => {
            let hl = usize::from(p[0] & 0xf) * 4;
            let mut ph = Vec::with_capacity(12);
            ph.extend_from_slice(&p[12..20]);
            ph.extend_from_slice(&[0, 17]);
            (hl, ph)
        }
        Some(6) if p.len() >= 40 => {
            let mut ph = Vec::with_capacity(40);
            ph.extend_from_slice(&p[8..40]);
            ph.extend_from_slice(&[0, 0]);
            (40, ph)
        }
        _ => return p,
    };
    if p.len() < hl + 8 {
        return p;
    }
    let udp_len = p.len() - hl;
    pseudo.extend_from_slice(&(udp_len as u16).to_be_bytes());
    if p[0] >> 4 == 6 {
        // IPv6: the 32-bit length, then three zero bytes and the next header
        pseudo.extend_from_slice(&[0, 0, 0, 17]);
    }
    p[hl + 6..hl + 8].copy_from_slice(&[0, 0]);
    pseudo.extend_from_slice(&p[hl..]);
    let c = match checksum(&pseudo) {
        0 => 0xffff,
        c => c,
    };
    p[hl + 6..hl + 8].copy_from_slice(&c.to_be_bytes());
    p
}

impl Capture {
    pub(crate) fn write(&mut self, packet: &[u8], comment: Option<&'static str>) {
        let packet = &with_udp_checksum(packet)[..];
        use pcap_file::pcapng::blocks::enhanced_packet::{
            EnhancedPacketBlock, EnhancedPacketOption,
        };
        let options = comment
            .map(|c| vec![EnhancedPacketOption::Comment(std::borrow::Cow::Borrowed(c))])
            .unwrap_or_default();
        let _ = self.w.write_pcapng_block(EnhancedPacketBlock {
            interface_id: 0,
            timestamp: self.t0.elapsed(),
            original_len: packet.len() as u32,
            data: std::borrow::Cow::Borrowed(packet),
            options,
        });
    }
}

/// Comment on received packets in a capture.
pub const RECONSTRUCTED: &str = "received on a UDP socket: IPv4/UDP header reconstructed by rdmacam (identification 0 assumed, TTL/TOS unknown; UDP checksum recomputed)";

/// The IP and UDP headers a received datagram most likely had (IPv4: identification 0 and DF,
/// as RoCEv2 senders that follow the project's rule send; TTL/hop limit 64; checksum 0).
pub(crate) fn reconstruct(
    src: IpAddr,
    sport: u16,
    dst: IpAddr,
    dport: u16,
    payload: &[u8],
) -> Vec<u8> {
    use rdmacam_protocol::wire::IpRepr;
    let ip = match (src, dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => IpRepr::v4(s, d),
        (s, d) => {
            let v6 = |a: IpAddr| match a {
                IpAddr::V6(a) => a,
                IpAddr::V4(a) => a.to_ipv6_mapped(),
            };
            IpRepr::v6(v6(s), v6(d))
        }
    };
    let mut p = vec![0u8; ip.buffer_len() + 8 + payload.len()];
    let hl = ip
        .emit_udp_header(&mut p, sport, dport, payload.len())
        .expect("sized for the headers");
    p[hl..].copy_from_slice(payload);
    p
}
