//! Clocks.

/// CLOCK_MONOTONIC in nanoseconds: one clock for every process on the machine (and every
/// network namespace), so a camera's and a host's logs line up (latency measurements).
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid timespec out-pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}
