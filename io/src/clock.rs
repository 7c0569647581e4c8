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

/// CLOCK_REALTIME in nanoseconds since the Unix epoch (0 before it).
pub fn realtime_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// The longest `--duration` the binaries take: a year.
pub const MAX_DURATION_S: f64 = 365.0 * 86_400.0;

/// A command-line duration in seconds (`--duration 2.5`): more than 0 and at most a year, so
/// `-1`, `nan`, `inf` and `1e30` are refused with a reason (as clap's value parser) instead of
/// panicking in `Duration::from_secs_f64`.
pub fn parse_seconds(s: &str) -> Result<std::time::Duration, String> {
    let v: f64 = s
        .parse()
        .map_err(|_| format!("{s:?} is not a number of seconds"))?;
    if !(v > 0.0 && v <= MAX_DURATION_S) {
        return Err(format!(
            "{s} seconds is out of range: more than 0, at most {MAX_DURATION_S} (a year)"
        ));
    }
    Ok(std::time::Duration::from_secs_f64(v))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_out_of_range_are_refused_not_panicked_on() {
        assert_eq!(
            parse_seconds("2.5"),
            Ok(std::time::Duration::from_millis(2500))
        );
        for bad in ["-1", "0", "nan", "NaN", "inf", "1e30", "31536001", "2s", ""] {
            assert!(parse_seconds(bad).is_err(), "{bad}");
        }
        assert!(parse_seconds("1e30").unwrap_err().contains("out of range"));
    }
}
