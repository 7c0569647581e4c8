//! The receive side's ICRC check on a UDP socket, which hands over no IP header.

/// Checks the ICRC of RoCEv2 packets received on a UDP socket, which hands over the UDP
/// payload only: the protocol crate's [`SocketIcrcCheck`](rdmacam_protocol::wire::socket_icrc::SocketIcrcCheck) (any IPv4 identification, either
/// DF value; IPv6 exactly), shared with the firmware.
pub type IcrcCheck = rdmacam_protocol::wire::socket_icrc::SocketIcrcCheck;

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{IpAddr, Ipv4Addr, SocketAddr};

    /// The RoCEv2 packets of a capture (IPv4 frames): (source, destination, UDP payload).
    fn packets(pcap: &str) -> Vec<(SocketAddr, SocketAddr, Vec<u8>)> {
        let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../testdata")
            .join(pcap);
        let bytes = std::fs::read(p).unwrap();
        // classic pcap: 24-byte file header, then 16-byte record headers
        let mut at = 24;
        let mut v = Vec::new();
        while at + 16 <= bytes.len() {
            let n = u32::from_le_bytes(bytes[at + 8..at + 12].try_into().unwrap()) as usize;
            let f = &bytes[at + 16..at + 16 + n];
            at += 16 + n;
            let ip = &f[14..];
            if ip[0] >> 4 != 4 || ip[9] != 17 {
                continue;
            }
            let hl = usize::from(ip[0] & 0xf) * 4;
            let a = |o: usize| Ipv4Addr::new(ip[o], ip[o + 1], ip[o + 2], ip[o + 3]);
            let port = |o: usize| u16::from_be_bytes([ip[hl + o], ip[hl + o + 1]]);
            let len = usize::from(u16::from_be_bytes([ip[2], ip[3]]));
            v.push((
                SocketAddr::new(a(12).into(), port(0)),
                SocketAddr::new(a(16).into(), port(2)),
                ip[hl + 8..len].to_vec(),
            ));
        }
        v
    }

    /// Linux rxe numbers its IPv4 identifications by hash (0xd4c4, 0xd5c0, ... in the lab):
    /// its ACKs were dropped as bad by a check that took only 0..63, the numbers of a UDP
    /// segmentation offload run. Every packet rxe sent passes; the same packets with one bit
    /// flipped in a header or the ICRC, or from another port, do not.
    #[test]
    fn every_packet_rxe_sent_passes_whatever_its_identification_and_a_damaged_one_does_not() {
        for pcap in ["rxe-6.1-handbuilt.pcap", "rxe-6.12-handbuilt.pcap"] {
            // rxe's own packets (the lab's include ICRCs spoilt on purpose)
            let rxe: IpAddr = Ipv4Addr::new(198, 18, 0, 1).into();
            let ps: Vec<_> = packets(pcap)
                .into_iter()
                .filter(|p| p.0.ip() == rxe)
                .collect();
            assert!(ps.len() > 10, "{pcap}");
            let mut check = IcrcCheck::default();
            for (i, (src, dst, ib)) in ps.iter().enumerate() {
                assert!(check.ok(*src, *dst, ib), "{pcap} rxe packet {}", i + 1);
                for at in [5, 12, ib.len() - 1] {
                    let mut bad = ib.clone();
                    bad[at] ^= 0x10;
                    assert!(
                        !check.ok(*src, *dst, &bad),
                        "{pcap} packet {} at {at}",
                        i + 1
                    );
                }
                // from another port: the UDP header the ICRC covers is another
                let moved = SocketAddr::new(src.ip(), src.port() ^ 1);
                assert!(!check.ok(moved, *dst, ib), "{pcap} packet {}", i + 1);
            }
        }
    }
}
