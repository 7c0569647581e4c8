//! Sharing a CPU between a camera and a host on one machine. A thread with time to spare
//! gives its CPU to a thread waiting there (`sched_yield`; with none waiting the call returns
//! at once): the camera between its sends (after every second GSO run, and each near a
//! TRAILER), the soft host between two looks at its socket while it polls. On a small machine
//! the scheduler puts the two on one CPU (each one's packets wake the other there, even with
//! another CPU idle), and then:
//! - a camera that sent on held off the host, which read a frame's last packets after the
//!   camera's burst (at 100 fps over loopback TRAILER latency p99 ~250 µs; ~35-50 with the
//!   camera yielding);
//! - a host that polled for the TRAILER held off the camera that was to send it (~20 µs
//!   with the host yielding too; docs/BENCHMARKS.md).
//!
//! Two things make a yield cost: a thread that needs its CPU (flat out, where a yield hands
//! the peer the CPU and the two then run one after the other on it instead of side by side),
//! and a thread beside it that never sleeps (a busy loop, which takes a whole scheduler slice
//! each time). So a thread yields only while it used at most a quarter of a CPU over the last
//! [`WINDOW`] (the camera at 100 fps of 1920x1080 ~10 %, the host ~12 %; at 1000 fps, beside
//! a busy loop or not, the camera ~60 % and the host ~70 %), and a yield that kept it away
//! [`LONG_AWAY`] or more stops the yielding for a while ([`YieldPause`]).

use std::time::{Duration, Instant};

/// The span over which a thread's CPU use is measured.
pub const WINDOW: Duration = Duration::from_millis(10);

/// A yield this long gave the CPU to a thread that does not sleep soon: a busy loop keeps a
/// scheduler slice (1.5 ms with 2 CPUs), where a host drains one GSO run in ~25 µs, a whole
/// frame's backlog (2 MB) in ~0.7 ms, and a camera sends one run in ~20 µs.
pub const LONG_AWAY: Duration = Duration::from_millis(1);
/// How long yielding stops after a long yield (the first in a while).
pub const FIRST_PAUSE: Duration = Duration::from_millis(1);
/// The longest pause, after a run of long yields (a busy loop on the caller's CPU: one slice
/// of the caller's a second).
pub const MAX_PAUSE: Duration = Duration::from_secs(1);
/// After this long without a long yield, the next one pauses [`FIRST_PAUSE`] again.
pub const QUIET: Duration = Duration::from_secs(2);

/// Yields of the CPU to a peer on the same machine ([`crate::sched::yield_cpu`]), stopped for
/// a while after one that kept the caller away [`LONG_AWAY`] or more: [`FIRST_PAUSE`], twice
/// as long after each next one up to [`MAX_PAUSE`], from the first again once [`QUIET`]
/// passed without one.
/// A yield helps when the thread waiting on the caller's CPU is the peer (the camera and the
/// host on one CPU, each one's packets waking the other there) and costs a scheduler slice
/// when it is a thread that never sleeps (a busy loop).
#[derive(Debug, Clone)]
pub struct YieldPause {
    /// When the last long yield ended.
    last_long: Option<Instant>,
    /// No yields before this (after a long one).
    paused_until: Option<Instant>,
    /// The pause the next long yield starts.
    next_pause: Duration,
    /// Yields made.
    pub yields: u64,
    /// Yields that kept the caller away [`LONG_AWAY`] or more.
    pub long_yields: u64,
}

impl Default for YieldPause {
    fn default() -> Self {
        YieldPause {
            last_long: None,
            paused_until: None,
            next_pause: FIRST_PAUSE,
            yields: 0,
            long_yields: 0,
        }
    }
}

impl YieldPause {
    /// Whether yields are paused at `now` (a long one ended less than its pause ago).
    pub fn paused(&self, now: Instant) -> bool {
        self.paused_until.is_some_and(|t| now < t)
    }

    /// A yield that began at `at` kept the caller away `d`.
    pub fn away(&mut self, d: Duration, at: Instant) {
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

    /// Yield now unless paused; whether it did.
    pub fn yield_cpu(&mut self) -> bool {
        let at = Instant::now();
        if self.paused(at) {
            return false;
        }
        crate::sched::yield_cpu();
        self.away(at.elapsed(), at);
        true
    }
}

/// When a thread with time to spare yields its CPU (see the module's docs).
#[derive(Debug)]
pub struct CpuShare {
    enabled: bool,
    window_start: Instant,
    /// The thread's CPU time when the window started.
    cpu_at_start: Duration,
    /// Whether the thread used at most a quarter of the last whole window (at first: a thread
    /// that just started had nothing to do).
    spare: bool,
    /// The yields made, and their pause after a long one.
    pub pause: YieldPause,
}

impl CpuShare {
    /// `cpu`: the thread's CPU time now.
    pub fn new(enabled: bool, now: Instant, cpu: Duration) -> Self {
        CpuShare {
            enabled,
            window_start: now,
            cpu_at_start: cpu,
            spare: true,
            pause: YieldPause::default(),
        }
    }

    /// Yield now? `cpu` reads the thread's CPU time (asked once a window).
    pub fn due(&mut self, now: Instant, cpu: impl FnOnce() -> Duration) -> bool {
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
        self.spare && !self.pause.paused(now)
    }

    /// Yield if due; whether it did.
    pub fn yield_if_due(&mut self) -> bool {
        self.due(Instant::now(), crate::sched::thread_cpu_time) && self.pause.yield_cpu()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);
    const US: Duration = Duration::from_micros(1);

    #[test]
    fn long_yields_pause_yielding_longer_each_time_and_a_quiet_spell_ends_that() {
        let t0 = Instant::now();
        let mut p = YieldPause::default();
        let mut at = t0 + MS;
        assert!(!p.paused(at));
        // the peer read one GSO run: no pause
        p.away(30 * US, at);
        assert!(!p.paused(at + 31 * US));
        // a busy loop kept a scheduler slice, again and again: 1, 2, 4 ... ms without yields
        let mut pause = FIRST_PAUSE;
        for _ in 0..12 {
            at += 100 * US;
            p.away(3 * MS, at);
            let end = at + 3 * MS + pause;
            assert!(p.paused(end - US), "paused for {pause:?}");
            assert!(!p.paused(end));
            at = end;
            pause = (pause * 2).min(MAX_PAUSE);
        }
        assert_eq!(pause, MAX_PAUSE);
        assert_eq!((p.yields, p.long_yields), (13, 12));
        // short yields do not end that
        p.away(20 * US, at);
        p.away(3 * MS, at);
        assert!(p.paused(at + 3 * MS + MAX_PAUSE - US));
        // a quiet spell does
        at += QUIET + 3 * MS;
        p.away(3 * MS, at);
        assert!(p.paused(at + 3 * MS + FIRST_PAUSE - US));
        assert!(!p.paused(at + 3 * MS + FIRST_PAUSE));
    }

    #[test]
    fn yields_are_counted_and_a_paused_one_is_not_made() {
        let mut p = YieldPause::default();
        assert!(p.yield_cpu());
        assert_eq!(p.yields, 1);
        p.away(5 * MS, Instant::now());
        assert!(!p.yield_cpu());
        assert_eq!(p.yields, 2);
        assert!(p.long_yields >= 1);
    }

    #[test]
    fn a_camera_that_used_a_quarter_of_a_cpu_or_less_yields_a_busier_one_does_not() {
        let t0 = Instant::now();
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
        assert_eq!(s.pause.yields, 0, "deciding is not yielding");
    }

    #[test]
    fn a_long_yield_pauses_yielding() {
        let t0 = Instant::now();
        let mut s = CpuShare::new(true, t0, Duration::ZERO);
        let idle = || Duration::ZERO;
        let at = t0 + MS;
        assert!(s.due(at, idle));
        // the host read one GSO run
        s.pause.away(30 * US, at);
        assert!(s.due(at + 31 * US, idle));
        // a busy loop kept a scheduler slice (how the pauses grow: the test above)
        s.pause.away(3 * MS, at);
        assert!(!s.due(at + 3 * MS + FIRST_PAUSE - US, idle));
        assert!(s.due(at + 3 * MS + FIRST_PAUSE, idle));
    }

    #[test]
    fn disabled_it_never_yields() {
        let t0 = Instant::now();
        let mut s = CpuShare::new(false, t0, Duration::ZERO);
        assert!(!s.due(t0 + 11 * MS, || Duration::ZERO));
    }
}
