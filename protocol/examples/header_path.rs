//! Builds packets through the requester, for instruction counts under callgrind (this machine
//! has no hardware counters): `scripts/packet-cost.sh` runs it with two packet counts and
//! divides the difference, so start-up costs cancel.
//!
//! `header_path N LEN` sends N packets as messages of LEN bytes at PMTU 4096: LEN 0 is a
//! one-packet WRITE's whole life without payload (post, segmentation, headers, ICRC over the
//! headers, ACK, completion); LEN 4096 the same with a payload; LEN 4194304 sends MIDDLE packets
//! of 4 MiB WRITEs (one FIRST and one LAST per 1,024 packets).
//!
//! `header_path N LEN floor` computes only what no packet path can avoid for N such packets: the
//! ICRC (crc32fast) over 48 bytes of masked headers and the payload, for the "beyond the CRC"
//! figures.

use std::net::{IpAddr, Ipv4Addr};

use rdmacam_protocol::rc::workload::{icrc_floor, stream};
use rdmacam_protocol::rc::{Path, Requester, RequesterConfig};
use rdmacam_protocol::wire::pmtu::Pmtu;

const PMTU: u32 = 4096;

fn main() {
    let mut args = std::env::args().skip(1);
    let n: u32 = args.next().and_then(|a| a.parse().ok()).unwrap_or(1000);
    let len: u32 = args.next().and_then(|a| a.parse().ok()).unwrap_or(0);
    let payload = vec![0x5au8; len.max(1) as usize];
    if args.next().as_deref() == Some("floor") {
        println!(
            "{:08x}",
            icrc_floor(&payload[..len as usize], PMTU as usize, n)
        );
        return;
    }
    let mut cfg = RequesterConfig::new(
        0x22,
        0x11,
        0,
        Path::new(
            IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)),
            IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)),
        ),
    );
    cfg.pmtu = Pmtu::Mtu4096;
    cfg.max_unacked = 1 << 22;
    // the camera's local ACK timeout (the default): armed per ACK request, never firing here
    let mut rq: Requester<64, 64> = Requester::new(cfg);
    let sent = stream(&mut rq, &[&payload[..]][..], n, len);
    println!("{sent} packets");
}
