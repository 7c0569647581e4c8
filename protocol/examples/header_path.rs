//! Builds packets through the requester, for instruction counts under callgrind (this machine
//! has no hardware counters): `scripts/callgrind-header-path.sh` runs it with two packet counts
//! and divides the difference.
//!
//! `header_path N LEN` sends N messages of LEN bytes (LEN ≤ 4096 = one packet each); LEN 0 is the
//! pure header path (segmentation, headers, ICRC over headers only).

use std::hint::black_box;
use std::net::{IpAddr, Ipv4Addr};

use rdmacam_protocol::rc::{Instant, Path, PayloadRef, Requester, RequesterConfig, WorkRequest};
use rdmacam_protocol::wire::pmtu::{MessageKind, Pmtu};

fn main() {
    let mut args = std::env::args().skip(1);
    let n: u32 = args.next().and_then(|a| a.parse().ok()).unwrap_or(1000);
    let len: u32 = args.next().and_then(|a| a.parse().ok()).unwrap_or(0);
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
    cfg.timeout = 0;
    let bufs = [vec![0x5au8; 4096]];
    let mut rq: Requester<64, 64> = Requester::new(cfg);
    let mut sent = 0u32;
    let mut posted = 0u32;
    while sent < n {
        while posted < n && rq.outstanding() < 64 {
            rq.post(WorkRequest {
                wr_id: u64::from(posted),
                kind: MessageKind::Write,
                payload: PayloadRef {
                    handle: 0,
                    offset: 0,
                },
                len,
                remote_va: 0x1000,
                rkey: 1,
                imm: 0,
                solicited: false,
            })
            .unwrap();
            posted += 1;
        }
        while let Some(p) = rq.poll_transmit(Instant::ZERO, &bufs[..]) {
            black_box(p.header());
            black_box(p.trailer());
            sent += 1;
        }
        // acknowledge everything sent so the send queue drains (synthetic ACK, no ICRC check)
        let mut ack = [0u8; 20];
        ack[0] = 0x11;
        ack[2] = 0xff;
        ack[3] = 0xff;
        ack[5..8].copy_from_slice(&0x22u32.to_be_bytes()[1..]);
        ack[9..12].copy_from_slice(&(sent - 1).to_be_bytes()[1..]);
        ack[12] = 0x1f;
        rq.handle_ib(Instant::ZERO, &ack);
        while rq.poll_completion().is_some() {}
    }
    println!("{sent} packets");
}
