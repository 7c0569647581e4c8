//! The requester's round-trip estimate and the timers it sets, as RFC 6298 and QUIC's loss
//! recovery (RFC 9002) keep them: a smoothed round trip and its variation for the
//! retransmission timeout, the shortest round trip seen for telling queueing from the path, and
//! the tail-loss probe timeout.
//!
//! A peer in software on shared cores (a host process, a host's kernel) answers late now and
//! then, by as long as the scheduler keeps it off a core, with nothing lost. Samples come from
//! every ACK (not one per round trip), so such delays reach the variation; and a slowly fading
//! maximum of recent round trips keeps both timers above the longest delay lately seen, so a
//! scheduling delay like the last one is waited out instead of taken for a loss.

use core::time::Duration;

use super::Instant;

/// The retransmission timeout before any round trip has been measured (doubled per timeout in
/// a row, never beyond the configured one).
pub const INITIAL_RTO: Duration = Duration::from_millis(20);

/// The shortest RTT-based retransmission timeout.
pub const MIN_RTO: Duration = Duration::from_micros(500);

/// The shortest wait before a tail-loss probe: a few of a NIC's round trips, and about the
/// shortest round trip a host process answers in over loopback.
pub const MIN_PTO: Duration = Duration::from_micros(30);

/// Round-trip samples of one connection, ns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RttEstimator {
    /// Smoothed round trip and its mean deviation, once measured.
    smoothed: Option<(u64, u64)>,
    /// The shortest sample (`u64::MAX` until one came).
    min: u64,
    /// The latest sample (0 until one came).
    latest: u64,
    /// The longest recent sample (0 until one came), fading by 1/8 per [`FADE_STEP_NS`]
    /// since `faded_at`: a delay is remembered for about a second.
    recent_max: u64,
    faded_at: Instant,
}

/// How often the longest recent round trip fades by 1/8, ns (about 67 ms: it halves in about a
/// third of a second).
pub const FADE_STEP_NS: u64 = 1 << 26;

impl Default for RttEstimator {
    fn default() -> Self {
        Self::new()
    }
}

impl RttEstimator {
    /// No sample yet.
    pub const fn new() -> Self {
        RttEstimator {
            smoothed: None,
            min: u64::MAX,
            latest: 0,
            recent_max: 0,
            faded_at: Instant::ZERO,
        }
    }

    /// Take a sample of `ns`, measured at `now` (RFC 6298 §2: the first sets srtt = r,
    /// rttvar = r/2; later ones move them by 1/8 and 1/4).
    pub fn sample(&mut self, now: Instant, ns: u64) {
        self.min = self.min.min(ns);
        self.latest = ns;
        let steps = now.0.saturating_sub(self.faded_at.0) / FADE_STEP_NS;
        for _ in 0..steps.min(64) {
            self.recent_max -= self.recent_max / 8;
        }
        if steps > 0 || self.smoothed.is_none() {
            self.faded_at = now;
        }
        self.recent_max = self.recent_max.max(ns);
        self.smoothed = Some(match self.smoothed {
            None => (ns, ns / 2),
            Some((srtt, var)) => {
                let var = (3 * var + srtt.abs_diff(ns)) / 4;
                ((7 * srtt + ns) / 8, var)
            }
        });
    }

    /// The smoothed round trip, once measured.
    pub fn smoothed(&self) -> Option<u64> {
        self.smoothed.map(|(s, _)| s)
    }

    /// The longest recent round trip (fading with time), once measured.
    pub fn recent_max(&self) -> Option<u64> {
        self.smoothed.map(|_| self.recent_max)
    }

    /// The shortest round trip seen, once measured.
    pub fn min(&self) -> Option<u64> {
        (self.min != u64::MAX).then_some(self.min)
    }

    /// Whether the latest round trip says packets queue somewhere: more than twice the
    /// shortest plus `slack_ns` (round trips that jitter by less are noise, not a queue).
    pub fn queueing(&self, slack_ns: u64) -> bool {
        self.min().is_some_and(|m| self.latest > m * 2 + slack_ns)
    }

    /// The retransmission timeout after `backoff` timeouts in a row: srtt + 4·rttvar, at least
    /// `floor`, and with `patient` (a path that has lost nothing lately, where a late answer is
    /// likelier than a loss) at least 5/4 of the longest recent round trip, once measured;
    /// [`INITIAL_RTO`] before; doubled per backoff step, never longer than `max` (the configured
    /// local ACK timeout).
    pub fn rto(&self, backoff: u32, floor: Duration, max: Duration, patient: bool) -> Duration {
        Duration::from_nanos(self.rto_ns(
            backoff,
            floor.as_nanos() as u64,
            max.as_nanos() as u64,
            patient,
        ))
    }

    /// [`rto`](Self::rto) in nanoseconds (what the requester arms per ACK request, without
    /// `Duration`'s seconds-and-nanoseconds arithmetic).
    #[inline]
    pub fn rto_ns(&self, backoff: u32, floor_ns: u64, max_ns: u64, patient: bool) -> u64 {
        let base = match self.smoothed {
            None => INITIAL_RTO.as_nanos() as u64,
            Some((srtt, var)) => {
                let longest = if patient {
                    self.recent_max + self.recent_max / 4
                } else {
                    0
                };
                (srtt + 4 * var).max(longest).max(floor_ns)
            }
        };
        base.saturating_mul(1 << backoff.min(16)).min(max_ns)
    }

    /// The tail-loss probe timeout: one smoothed round trip (at least [`MIN_PTO`]), when that
    /// is shorter than `rto`; `None` before a round trip was measured. A probe sends one packet
    /// again; a timeout sends the window again, so only the timeout waits out the longest recent
    /// delay. One round trip, not TCP's two: a responder that lost a packet NAKs it once and
    /// drops what follows in silence, so on a lossy path (the only one probes are armed on) a
    /// lost NAK or a lost first resend leaves nothing but silence, and a probe that comes
    /// early costs one packet and one ACK (5 % loss in `rdmacam demo`: timeouts ~820 -> ~140 per
    /// 300 frames, with the go-back on a probe's answer).
    pub fn pto(&self, rto: Duration) -> Option<Duration> {
        self.pto_ns(rto.as_nanos() as u64).map(Duration::from_nanos)
    }

    /// [`pto`](Self::pto) in nanoseconds.
    #[inline]
    pub fn pto_ns(&self, rto_ns: u64) -> Option<u64> {
        let pto = self.smoothed()?.max(MIN_PTO.as_nanos() as u64);
        (pto < rto_ns).then_some(pto)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_sample_sets_srtt_and_half_of_it_as_variation() {
        let mut r = RttEstimator::new();
        let (floor, max) = (MIN_RTO, Duration::from_secs(1));
        assert_eq!(r.rto(0, floor, max, true), INITIAL_RTO);
        assert_eq!(r.pto(INITIAL_RTO), None);
        let t = Instant::from_nanos(1_000_000);
        r.sample(t, 100_000);
        // 100 us + 4 * 50 us
        assert_eq!(r.rto(0, floor, max, true), Duration::from_micros(500));
        assert_eq!(r.rto(2, floor, max, true), Duration::from_millis(2));
        assert_eq!(
            r.rto(2, floor, Duration::from_micros(700), true),
            Duration::from_micros(700)
        );
        assert_eq!(
            r.rto(0, Duration::from_millis(3), max, true),
            Duration::from_millis(3)
        );
        assert_eq!(
            r.pto(Duration::from_millis(1)),
            Some(Duration::from_micros(100)),
            "one smoothed round trip"
        );
        assert_eq!(
            r.pto(Duration::from_micros(100)),
            None,
            "not as long as the timeout"
        );
        r.sample(t, 20_000);
        assert_eq!((r.min(), r.smoothed()), (Some(20_000), Some(90_000)));
        assert!(!r.queueing(20_000));
        r.sample(t, 61_000);
        assert!(r.queueing(20_000), "61 us > 2 * 20 us + 20 us");
        let mut fast = RttEstimator::new();
        fast.sample(t, 5_000);
        assert_eq!(
            fast.pto(Duration::from_millis(1)),
            Some(MIN_PTO),
            "a NIC's 5 us: the floor"
        );
    }

    #[test]
    fn a_long_delay_holds_both_timers_above_it_for_about_a_second() {
        let mut r = RttEstimator::new();
        let ms = |n: u64| Instant::from_nanos(n * 1_000_000);
        // a sample every 10 us: calm at 30 us for 50 ms
        for i in 0..5_000 {
            r.sample(Instant::from_nanos(i * 10_000), 30_000);
        }
        let (floor, max) = (MIN_RTO, Duration::from_secs(1));
        assert_eq!(
            r.rto(0, floor, max, true),
            MIN_RTO,
            "steady 30 us: the floor"
        );
        // the host was off a core for 4 ms once; thousands of calm samples follow
        r.sample(ms(50), 4_000_000);
        for i in 0..20_000 {
            r.sample(Instant::from_nanos(50_000_000 + i * 10_000), 30_000);
        }
        let rto = r.rto(0, floor, max, true);
        assert!(rto > Duration::from_millis(3), "200 ms on: {rto:?}");
        assert_eq!(
            r.rto(0, floor, max, false),
            MIN_RTO,
            "amid losses: RFC 6298 alone"
        );
        // two seconds on, it has faded
        r.sample(ms(2_300), 30_000);
        assert_eq!(r.rto(0, floor, max, true), MIN_RTO);
    }
}
