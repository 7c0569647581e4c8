//! What the machine takes away from a thread: for SECS seconds (default 10), either a loop
//! that never gives up its CPU and counts the gaps between two readings of CLOCK_MONOTONIC
//! (`spin`, the default), or one that sleeps 20 us at a time, its timer slack at 1 ns, and
//! counts how late it wakes (`sleep`). On bare metal a gap is an interrupt (a few us); in a VM
//! it is also the hypervisor running something else on the physical core, and a late wake-up
//! is also the halted vCPU being woken. Frame latency cannot be lower than what these allow
//! (docs/BENCHMARKS.md, the latency figures).
//!
//! `cargo run --release -p rdmacam-io --example stalls -- [SECS] [spin|sleep]`, pinned with
//! `taskset -c N` to look at one CPU.

use rdmacam_io::clock::monotonic_ns;

/// Lower bounds of the classes counted, ns, and their names.
const CLASSES: [(u64, &str); 6] = [
    (0, "0-20us"),
    (20_000, "20-50us"),
    (50_000, "50-100us"),
    (100_000, "0.1-1ms"),
    (1_000_000, "1-5ms"),
    (5_000_000, "5ms-"),
];

/// How long the `sleep` mode asks to sleep each time.
const NAP_NS: u64 = 20_000;

fn main() {
    let mut args = std::env::args().skip(1);
    let secs: f64 = match args.next().map(|a| a.parse()) {
        None => 10.0,
        Some(Ok(s)) if s > 0.0 => s,
        Some(_) => fail("SECS: a number of seconds above 0"),
    };
    let sleep = match args.next().as_deref() {
        None | Some("spin") => false,
        Some("sleep") => true,
        Some(other) => fail(&format!("{other:?} is not a mode (spin or sleep)")),
    };
    if sleep {
        // SAFETY: prctl with PR_SET_TIMERSLACK takes one integer argument.
        unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1) };
    }
    let end = monotonic_ns() + (secs * 1e9) as u64;
    let mut counts = [0u64; CLASSES.len()];
    let (mut prev, mut worst, mut lost) = (monotonic_ns(), 0u64, 0u64);
    while prev < end {
        let late = if sleep {
            std::thread::sleep(std::time::Duration::from_nanos(NAP_NS));
            let now = monotonic_ns();
            let late = (now - prev).saturating_sub(NAP_NS);
            prev = now;
            late
        } else {
            let now = monotonic_ns();
            let gap = now - prev;
            prev = now;
            if gap < CLASSES[1].0 {
                continue;
            }
            gap
        };
        let class = CLASSES.iter().rposition(|c| late >= c.0).unwrap_or(0);
        counts[class] += 1;
        worst = worst.max(late);
        lost += late;
    }
    // spinning, only gaps of 20 us or more are counted: the rest is the loop itself
    let first = if sleep { 0 } else { 1 };
    let classes: Vec<String> = CLASSES[first..]
        .iter()
        .zip(&counts[first..])
        .map(|((_, name), n)| format!("{name}={n}"))
        .collect();
    println!(
        "stalls mode={} secs={secs} {} worst_us={:.1} lost_share={:.5}",
        if sleep { "sleep" } else { "spin" },
        classes.join(" "),
        worst as f64 / 1e3,
        lost as f64 / (secs * 1e9)
    );
}

fn fail(why: &str) -> ! {
    eprintln!("stalls: {why}");
    std::process::exit(2)
}
