//! The soft host's placement of WRITE payloads: 4 KiB payloads of a 1920x1080 Mono8 frame
//! copied from a 64 KiB receive buffer (a GRO batch, still in the cache) into frame buffers
//! that rotate through 32 MB (no cache holds them), each compared with the expected image on
//! the way, as `HostCore` places a frame in order. Against what it cannot beat in the same run:
//! `memcpy` of the same bytes into the same buffers, with no comparison.
//!
//! `cargo bench -p rdmacam-hil --bench place`; numbers in docs/BENCHMARKS.md.

use std::hint::black_box;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use rdmacam_hil::place::Memory;

const FRAME: usize = 1920 * 1080 / 4096 * 4096;
const PAYLOAD: usize = 4096;
const BUFFERS: usize = 16;

/// One way of placing a payload: (memory, where, payload, expected) -> whether it matched.
type Placer = dyn Fn(&mut Memory, usize, &[u8], &[u8]) -> bool;

fn frames(c: &mut Criterion) {
    let expected: Vec<u8> = (0..FRAME).map(|i| (i * 7 + i / 4096) as u8).collect();
    // the receive buffer holds the packets' payloads as they arrived: the expected bytes
    let rx = expected[..65536].to_vec();
    let mut mem = Memory::zeroed(FRAME * BUFFERS);
    let mut plain = Memory::zeroed(FRAME * BUFFERS);
    let mut g = c.benchmark_group("place_frame");
    g.throughput(Throughput::Bytes(FRAME as u64));
    let mut frame = 0;
    let mut place = |mem: &mut Memory, how: &Placer| {
        frame = (frame + 1) % BUFFERS;
        let mut same = true;
        for o in (0..FRAME).step_by(PAYLOAD) {
            let src = &rx[o % 65536..o % 65536 + PAYLOAD];
            same &= how(mem, frame * FRAME + o, src, &expected[o..o + PAYLOAD]);
        }
        black_box(same)
    };
    g.bench_function("copy_compare", |b| {
        b.iter(|| place(&mut mem, &|m, at, s, e| m.copy_compare(at, s, e)))
    });
    #[cfg(target_arch = "x86_64")]
    g.bench_function("copy_compare_sse2", |b| {
        b.iter(|| place(&mut mem, &|m, at, s, e| m.copy_compare_sse2(at, s, e)))
    });
    g.bench_function("memcpy", |b| {
        b.iter(|| {
            place(&mut plain, &|m, at, s, _| {
                m.copy(at, s);
                true
            })
        })
    });
    g.finish();
}

criterion_group!(benches, frames);
criterion_main!(benches);
