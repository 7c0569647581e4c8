//! What the machine takes away from a thread that never gives up its CPU: a loop that reads
//! CLOCK_MONOTONIC and counts the gaps between two readings, for SECS seconds (default 10).
//! On bare metal a gap is an interrupt (a few us); in a VM it is also the hypervisor running
//! something else on the physical core. Frame latency cannot be lower than what these gaps
//! allow (docs/BENCHMARKS.md, the latency figures).
//!
//! `cargo run --release -p rdmacam-io --example stalls -- [SECS]`, pinned with `taskset -c N`
//! to look at one CPU.

use rdmacam_io::clock::monotonic_ns;

/// Upper bounds of the gap classes, ns.
const CLASSES: [(u64, &str); 6] = [
    (20_000, "20-50us"),
    (50_000, "50-100us"),
    (100_000, "0.1-1ms"),
    (1_000_000, "1-5ms"),
    (5_000_000, "5ms-"),
    (u64::MAX, ""),
];

fn main() {
    let secs: f64 = std::env::args()
        .nth(1)
        .map(|a| a.parse().expect("SECS: a number of seconds"))
        .unwrap_or(10.0);
    let end = monotonic_ns() + (secs * 1e9) as u64;
    let mut counts = [0u64; 5];
    let (mut prev, mut worst, mut lost) = (monotonic_ns(), 0u64, 0u64);
    while prev < end {
        let now = monotonic_ns();
        let gap = now - prev;
        if gap >= CLASSES[0].0 {
            let class = CLASSES.windows(2).position(|w| gap < w[1].0).unwrap_or(4);
            counts[class] += 1;
            worst = worst.max(gap);
            lost += gap;
        }
        prev = now;
    }
    let classes: Vec<String> = CLASSES[..5]
        .iter()
        .zip(counts)
        .map(|((_, name), n)| format!("{name}={n}"))
        .collect();
    println!(
        "stalls secs={secs} {} worst_us={:.1} lost_share={:.5}",
        classes.join(" "),
        worst as f64 / 1e3,
        lost as f64 / (secs * 1e9)
    );
}
