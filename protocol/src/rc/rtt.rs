//! The requester's round-trip estimate and the timers it sets, as RFC 6298 and QUIC's loss
//! recovery (RFC 9002) keep them: a smoothed round trip and its variation for the
//! retransmission timeout, the shortest round trip seen for telling queueing from the path, and
//! the tail-loss probe timeout.

use core::time::Duration;

/// The retransmission timeout before any round trip has been measured (doubled per timeout in
/// a row, never beyond the configured one).
pub const INITIAL_RTO: Duration = Duration::from_millis(20);

/// The shortest RTT-based retransmission timeout.
pub const MIN_RTO: Duration = Duration::from_micros(500);

/// The shortest wait before a tail-loss probe.
pub const MIN_PTO: Duration = Duration::from_micros(100);

/// Round-trip samples of one connection, ns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RttEstimator {
    /// Smoothed round trip and its mean deviation, once measured.
    smoothed: Option<(u64, u64)>,
    /// The shortest sample (`u64::MAX` until one came).
    min: u64,
    /// The latest sample (0 until one came).
    latest: u64,
}

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
        }
    }

    /// Take a sample of `ns` (RFC 6298 §2: the first sets srtt = r, rttvar = r/2; later ones
    /// move them by 1/8 and 1/4).
    pub fn sample(&mut self, ns: u64) {
        self.min = self.min.min(ns);
        self.latest = ns;
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

    /// The shortest round trip seen, once measured.
    pub fn min(&self) -> Option<u64> {
        (self.min != u64::MAX).then_some(self.min)
    }

    /// Whether the latest round trip says packets queue somewhere: more than twice the
    /// shortest plus `slack_ns` (round trips that jitter by less are noise, not a queue).
    pub fn queueing(&self, slack_ns: u64) -> bool {
        self.min().is_some_and(|m| self.latest > m * 2 + slack_ns)
    }

    /// The retransmission timeout after `backoff` timeouts in a row: srtt + 4·rttvar (at least
    /// [`MIN_RTO`]) once measured, [`INITIAL_RTO`] before, doubled per backoff step, never
    /// longer than `max` (the configured local ACK timeout).
    pub fn rto(&self, backoff: u32, max: Duration) -> Duration {
        let base = match self.smoothed {
            None => INITIAL_RTO,
            Some((srtt, var)) => Duration::from_nanos(srtt + 4 * var).max(MIN_RTO),
        };
        base.saturating_mul(1 << backoff.min(16)).min(max)
    }

    /// The tail-loss probe timeout: two smoothed round trips (at least [`MIN_PTO`]), when that
    /// is shorter than `rto`; `None` before a round trip was measured.
    pub fn pto(&self, rto: Duration) -> Option<Duration> {
        let pto = Duration::from_nanos(2 * self.smoothed()?).max(MIN_PTO);
        (pto < rto).then_some(pto)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_sample_sets_srtt_and_half_of_it_as_variation() {
        let mut r = RttEstimator::new();
        assert_eq!(r.rto(0, Duration::from_secs(1)), INITIAL_RTO);
        assert_eq!(r.pto(INITIAL_RTO), None);
        r.sample(100_000);
        // 100 us + 4 * 50 us
        assert_eq!(r.rto(0, Duration::from_secs(1)), Duration::from_micros(500));
        assert_eq!(r.rto(2, Duration::from_secs(1)), Duration::from_millis(2));
        assert_eq!(
            r.rto(2, Duration::from_micros(700)),
            Duration::from_micros(700)
        );
        assert_eq!(
            r.pto(Duration::from_millis(1)),
            Some(Duration::from_micros(200))
        );
        r.sample(20_000);
        assert_eq!((r.min(), r.smoothed()), (Some(20_000), Some(90_000)));
        assert!(!r.queueing(20_000));
        r.sample(61_000);
        assert!(r.queueing(20_000), "61 us > 2 * 20 us + 20 us");
    }
}
