//! Sharing a CPU with a host on the same machine. Between two of its sends a camera with time
//! to spare gives its CPU to a thread waiting there (`sched_yield`), so that a host woken by
//! the camera's packets onto the camera's own CPU reads each GSO run as it arrives instead of
//! after the camera's burst (at 100 fps over loopback the host waited out ~300 µs of sends for
//! each frame's last packets: frame latency p99 ~250 µs, now ~50; docs/BENCHMARKS.md). With no
//! thread waiting, the call returns at once.
//!
//! Two things make it cost: a camera that needs its CPU (flat out, where a yield hands the host
//! the camera's CPU and the two then run one after the other on it instead of side by side),
//! and a thread beside it that never sleeps (a busy loop, which takes a whole scheduler slice
//! of the camera's each time). So the camera yields only while its thread used at most a
//! quarter of a CPU over the last [`WINDOW`] (at 100 fps of 1920x1080 it uses ~10 %; at
//! 1000 fps, beside a busy loop or not, ~60 %), and a yield that kept it away [`LONG_AWAY`] or
//! more stops the yielding for a while: [`FIRST_PAUSE`], twice as long after each next one up
//! to [`MAX_PAUSE`], from the first again once [`QUIET`] passed without one.

use std::time::{Duration, Instant as StdInstant};

/// The span over which the camera's CPU use is measured.
pub(super) const WINDOW: Duration = Duration::from_millis(10);
/// A yield this long gave the CPU to a thread that does not sleep soon: a busy loop keeps a
/// scheduler slice (1.5 ms with 2 CPUs), a host drains one GSO run in ~25 µs and a whole
/// frame's backlog (2 MB) in ~0.7 ms. (At 200 µs, 100 fps saw ten long yields in 300 frames:
/// each pause left the host a backlog that made the next yield long too.)
pub(super) const LONG_AWAY: Duration = Duration::from_millis(1);
/// How long yielding stops after a long yield (the first in a while).
pub(super) const FIRST_PAUSE: Duration = Duration::from_millis(1);
/// The longest pause, after a run of long yields (a busy loop on the camera's CPU: one slice
/// of the camera's a second).
pub(super) const MAX_PAUSE: Duration = Duration::from_secs(1);
/// After this long without a long yield, the next one pauses [`FIRST_PAUSE`] again.
pub(super) const QUIET: Duration = Duration::from_secs(2);

/// When the camera yields its CPU between sends (see the module's docs).
#[derive(Debug)]
pub(super) struct CpuShare {
    enabled: bool,
    window_start: StdInstant,
    /// The thread's CPU time when the window started.
    cpu_at_start: Duration,
    /// Whether the thread used at most a quarter of the last whole window (at first: a camera
    /// that just started had nothing to do).
    spare: bool,
    /// When the last long yield ended.
    last_long: Option<StdInstant>,
    /// No yields before this (after a long one).
    paused_until: Option<StdInstant>,
    /// The pause the next long yield starts.
    next_pause: Duration,
    /// Yields made.
    pub(super) yields: u64,
    /// Yields that kept the camera away [`LONG_AWAY`] or more.
    pub(super) long_yields: u64,
}

impl CpuShare {
    /// `cpu`: the thread's CPU time now.
    pub(super) fn new(enabled: bool, now: StdInstant, cpu: Duration) -> Self {
        CpuShare {
            enabled,
            window_start: now,
            cpu_at_start: cpu,
            spare: true,
            last_long: None,
            paused_until: None,
            next_pause: FIRST_PAUSE,
            yields: 0,
            long_yields: 0,
        }
    }

    /// Yield now? `cpu` reads the thread's CPU time (asked once a window).
    pub(super) fn due(&mut self, now: StdInstant, cpu: impl FnOnce() -> Duration) -> bool {
        if !self.enabled {
            return false;
        }
        let span = now.saturating_duration_since(self.window_start);
        if span >= WINDOW {
            let c = cpu();
            self.spare = c.saturating_sub(self.cpu_at_start) * 4 <= span;
            self.window_start = now;
            self.cpu_at_start = c;
        }
        self.spare && self.paused_until.is_none_or(|t| now >= t)
    }

    /// A yield that began at `at` kept the camera away `d`.
    pub(super) fn away(&mut self, d: Duration, at: StdInstant) {
        self.yields += 1;
        if d < LONG_AWAY {
            return;
        }
        let end = at + d;
        self.long_yields += 1;
        if self
            .last_long
            .is_none_or(|t| end.saturating_duration_since(t) >= QUIET)
        {
            self.next_pause = FIRST_PAUSE;
        }
        self.paused_until = Some(end + self.next_pause);
        self.next_pause = (self.next_pause * 2).min(MAX_PAUSE);
        self.last_long = Some(end);
    }

    /// Between two sends: yield if due.
    pub(super) fn between_sends(&mut self) {
        let at = StdInstant::now();
        if self.due(at, rdmacam_io::sched::thread_cpu_time) {
            rdmacam_io::sched::yield_cpu();
            self.away(at.elapsed(), at);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);
    const US: Duration = Duration::from_micros(1);

    #[test]
    fn a_camera_that_used_a_quarter_of_a_cpu_or_less_yields_a_busier_one_does_not() {
        let t0 = StdInstant::now();
        let mut s = CpuShare::new(true, t0, 5 * MS);
        // it just started: nothing to do until now
        assert!(s.due(t0 + MS, || unreachable!("not a whole window yet")));
        // 100 fps: 1 ms of CPU in 10
        assert!(s.due(t0 + 10 * MS, || 6 * MS));
        assert!(s.due(t0 + 11 * MS, || unreachable!()));
        // 1000 fps: 6 ms in 10
        assert!(!s.due(t0 + 20 * MS, || 12 * MS));
        assert!(!s.due(t0 + 25 * MS, || unreachable!()));
        // exactly a quarter
        assert!(s.due(t0 + 30 * MS, || 14500 * US));
        // flat out
        assert!(!s.due(t0 + 40 * MS, || 24500 * US));
        assert_eq!(s.yields, 0, "deciding is not yielding");
    }

    #[test]
    fn long_yields_pause_yielding_longer_each_time_and_a_quiet_spell_ends_that() {
        let t0 = StdInstant::now();
        let mut s = CpuShare::new(true, t0, Duration::ZERO);
        // a camera that stays idle: only pauses stop its yields
        let idle = || Duration::ZERO;
        let mut at = t0 + MS;
        assert!(s.due(at, idle));
        // the host read one GSO run: no pause
        s.away(30 * US, at);
        assert!(s.due(at + 31 * US, idle));
        // a busy loop kept a scheduler slice, again and again: 1, 2, 4 ... ms without yields
        let mut pause = FIRST_PAUSE;
        for _ in 0..12 {
            at += 100 * US;
            s.away(3 * MS, at);
            let end = at + 3 * MS + pause;
            assert!(!s.due(end - US, idle), "paused for {pause:?}");
            assert!(s.due(end, idle));
            at = end;
            pause = (pause * 2).min(MAX_PAUSE);
        }
        assert_eq!(pause, MAX_PAUSE);
        assert_eq!((s.yields, s.long_yields), (13, 12));
        // short yields do not end that
        s.away(20 * US, at);
        s.away(3 * MS, at);
        assert!(!s.due(at + 3 * MS + MAX_PAUSE - US, idle));
        // a quiet spell does
        at += QUIET + 3 * MS;
        s.away(3 * MS, at);
        assert!(!s.due(at + 3 * MS + FIRST_PAUSE - US, idle));
        assert!(s.due(at + 3 * MS + FIRST_PAUSE, idle));
    }

    #[test]
    fn disabled_it_never_yields() {
        let t0 = StdInstant::now();
        let mut s = CpuShare::new(false, t0, Duration::ZERO);
        assert!(!s.due(t0 + 11 * MS, || Duration::ZERO));
    }
}
