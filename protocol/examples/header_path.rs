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

use std::hint::black_box;
use std::net::{IpAddr, Ipv4Addr};

use rdmacam_protocol::rc::{
    Instant, Path, PayloadRef, Requester, RequesterConfig, TxPacket, WorkRequest,
};
use rdmacam_protocol::wire::pmtu::{MessageKind, Pmtu};

const PMTU: u32 = 4096;

fn main() {
    let mut args = std::env::args().skip(1);
    let n: u32 = args.next().and_then(|a| a.parse().ok()).unwrap_or(1000);
    let len: u32 = args.next().and_then(|a| a.parse().ok()).unwrap_or(0);
    let payload = vec![0x5au8; len.max(1) as usize];
    if args.next().as_deref() == Some("floor") {
        floor(n, &payload[..len as usize]);
        return;
    }
    let sent = requester_path(n, len, &payload);
    println!("{sent} packets");
}

/// The ICRC of `n` packets of `payload` (in PMTU-sized pieces): a fresh CRC over a masked
/// header, then the payload bytes.
fn floor(n: u32, payload: &[u8]) {
    let masked = [0xffu8; 48];
    let mut acc = 0u32;
    let mut chunks = payload.chunks(PMTU as usize).cycle();
    for _ in 0..n {
        let mut h = crc32fast::Hasher::new();
        h.update(black_box(&masked));
        if let Some(c) = chunks.next() {
            h.update(black_box(c));
        }
        acc ^= h.finalize();
    }
    println!("{acc:08x}");
}

/// Send `n` packets of messages of `len` bytes; returns how many were sent.
fn requester_path(n: u32, len: u32, payload: &[u8]) -> u32 {
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
    let bufs = [payload];
    let mut rq: Requester<64, 64> = Requester::new(cfg);
    let mut sent = 0u32;
    let mut slot = TxPacket::EMPTY;
    let mut posted_packets = 0u32;
    let mut posted = 0u64;
    let per_message = len.div_ceil(PMTU).max(1);
    while sent < n {
        while posted_packets < n && rq.outstanding() < 64 {
            rq.post(WorkRequest {
                wr_id: posted,
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
            posted_packets += per_message;
        }
        let mut burst = 0;
        while burst < 64 {
            // the transmitter's slot, filled in place
            if !rq.poll_transmit_into(Instant::ZERO, &bufs[..], &mut slot) {
                break;
            }
            let p = &slot;
            black_box(p.header());
            black_box(p.trailer());
            sent += 1;
            burst += 1;
        }
        // acknowledge everything sent so the send queue drains (synthetic ACK, no ICRC check),
        // once per 64 packets as a host acknowledges a burst
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
    sent
}
