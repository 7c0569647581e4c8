//! The requester's packet path at PMTU 4096: segmentation, headers and ICRC over every payload
//! byte (zero-copy: the payload is read in place), against the two things it cannot beat in
//! the same run: `crc32fast` alone over the same bytes, and `memcpy` of the same bytes.
//!
//! `cargo bench -p rdmacam-protocol --bench packet_path`; numbers in docs/BENCHMARKS.md.

use std::hint::black_box;
use std::net::{IpAddr, Ipv4Addr};

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use rdmacam_protocol::rc::{
    Instant, Path, PayloadRef, Requester, RequesterConfig, TxPacket, WorkRequest,
};
use rdmacam_protocol::wire::pmtu::Pmtu;

const FRAME: usize = 16 << 20;

fn requester() -> Requester<4, 4> {
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
    cfg.max_unacked = 1 << 20;
    cfg.timeout = 0;
    Requester::new(cfg)
}

/// A cumulative ACK of `psn` for QP 0x22, as a host sends it when the window fills (the ICRC is
/// not checked on this path, so it is left out).
fn ack(psn: u32) -> [u8; 16] {
    let mut a = [0u8; 16];
    a[0] = 0x11; // RC ACKNOWLEDGE
    a[2..4].copy_from_slice(&0xffffu16.to_be_bytes()); // P_Key
    a[5..8].copy_from_slice(&0x22u32.to_be_bytes()[1..]);
    a[9..12].copy_from_slice(&psn.to_be_bytes()[1..]);
    a[12] = 0x1f; // AETH: ACK, unlimited credits
    a
}

fn frame_write() -> WorkRequest {
    WorkRequest::write(
        1,
        PayloadRef::new(0, 0),
        FRAME as u32,
        0x7f00_0000_0000,
        0x1234,
    )
}

fn packet_path(c: &mut Criterion) {
    let frame: Vec<u8> = (0..FRAME).map(|i| (i * 31) as u8).collect();
    let bufs = [frame.clone()];
    let mut g = c.benchmark_group("pmtu4096_16MiB");
    g.throughput(Throughput::Bytes(FRAME as u64));
    g.sample_size(20);
    // the packets of one 16 MiB WRITE, acknowledged each time the window fills (the requester
    // starts with a small window and opens it as ACKs come, as on a real link)
    g.bench_function("requester_packets", |b| {
        b.iter(|| {
            let mut rq = requester();
            rq.post(frame_write()).unwrap();
            let mut n = 0u32;
            // the transmitter's slot, filled in place (Requester::poll_transmit_into)
            let mut p = TxPacket::EMPTY;
            loop {
                while rq.poll_transmit_into(Instant::ZERO, &bufs[..], &mut p) {
                    black_box(p.header());
                    black_box(p.trailer());
                    n += 1;
                }
                if n as usize == FRAME / 4096 {
                    break;
                }
                rq.handle_ib(Instant::ZERO, &ack(n - 1));
            }
            assert!(
                rq.poll_completion().is_none(),
                "the last packet is not yet acknowledged"
            );
        })
    });
    g.bench_function("crc32fast_only", |b| {
        b.iter(|| {
            let mut acc = 0u32;
            for chunk in frame.chunks(4096) {
                acc ^= crc32fast::hash(black_box(chunk));
            }
            acc
        })
    });
    // The least any ICRC over these packets costs with crc32fast: per packet a hasher started
    // after the LRH stand-in, 40 bytes of masked IPv4/UDP/BTH, then the 4 KiB payload. No
    // headers are built; the gap between this and crc32fast_only is the CRC's own per-packet
    // cost, the gap to requester_packets is ours.
    let masked = [0x5au8; 40];
    g.bench_function("icrc_floor", |b| {
        b.iter(|| {
            let mut acc = 0u32;
            for chunk in frame.chunks(4096) {
                let mut h = crc32fast::Hasher::new_with_initial(0x2144_df1c);
                h.update(black_box(&masked));
                h.update(black_box(chunk));
                acc ^= h.finalize();
            }
            acc
        })
    });
    let mut dst = vec![0u8; FRAME];
    g.bench_function("memcpy", |b| {
        b.iter(|| {
            dst.copy_from_slice(black_box(&frame));
            black_box(&dst);
        })
    });
    g.finish();
}

criterion_group!(benches, packet_path);
criterion_main!(benches);
