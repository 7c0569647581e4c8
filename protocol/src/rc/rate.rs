//! Rate control for the requester: a static rate limit (GigE Vision's packet delay, expressed as
//! bytes per second) and a DCQCN reaction point (Zhu et al., SIGCOMM 2015) driven by CNPs.
//!
//! The sending rate is the smaller of the two; packets are paced so that the wire bytes of each
//! packet take `bytes / rate` seconds, with a small burst allowance so that a caller that polls
//! late does not lose throughput.

use core::time::Duration;

use super::Instant;

/// One in Q16 fixed point (α and g are fractions of this).
const Q16: u64 = 1 << 16;

/// DCQCN reaction point parameters. Defaults follow the DCQCN paper's evaluation settings; tune
/// them to the fabric (NVIDIA NICs expose the same knobs as `rpg_*`/`dce_tcp_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DcqcnConfig {
    /// Rate before any congestion, bytes/s (the link speed).
    pub line_rate: u64,
    /// Floor of the current rate, bytes/s (default 1 Mbit/s, like NVIDIA's `rpg_min_rate`).
    pub min_rate: u64,
    /// EWMA gain g in Q16 (default 256 = 1/256).
    pub g: u32,
    /// α at start, Q16 (default 65536 = 1.0, so the first cut halves the rate).
    pub initial_alpha: u32,
    /// α decays by (1 − g) every this long without a CNP (default 55 µs).
    pub alpha_update_period: Duration,
    /// CNPs closer together than this cause one cut only (default 4 µs).
    pub rate_reduce_monitor_period: Duration,
    /// Rate-increase timer T (default 55 µs).
    pub rate_increase_period: Duration,
    /// Rate-increase byte counter B (default 10 MiB).
    pub byte_counter: u64,
    /// Fast-recovery steps F before additive increase (default 5).
    pub fast_recovery_steps: u32,
    /// Additive increase R_AI, bytes/s (default 40 Mbit/s).
    pub additive_increase: u64,
    /// Hyper increase R_HAI, bytes/s (default 400 Mbit/s).
    pub hyper_increase: u64,
}

impl DcqcnConfig {
    /// Defaults for a link of `line_rate` bytes/s.
    pub const fn new(line_rate: u64) -> Self {
        DcqcnConfig {
            line_rate,
            min_rate: 125_000,
            g: 256,
            initial_alpha: 65_536,
            alpha_update_period: Duration::from_micros(55),
            rate_reduce_monitor_period: Duration::from_micros(4),
            rate_increase_period: Duration::from_micros(55),
            byte_counter: 10 << 20,
            fast_recovery_steps: 5,
            additive_increase: 5_000_000,
            hyper_increase: 50_000_000,
        }
    }
}

/// How fast the requester may send.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RateConfig {
    /// A fixed ceiling in bytes per second of wire bytes (IP packet lengths); `None` = no limit.
    pub static_limit: Option<u64>,
    /// A DCQCN reaction point; `None` = CNPs are counted but do not change the rate.
    pub dcqcn: Option<DcqcnConfig>,
}

/// The state of the rate controller.
#[derive(Debug, Clone)]
pub struct RateController {
    cfg: RateConfig,
    next_allowed: Instant,
    /// The least a paced burst carries, bytes (0: every packet goes as soon as its time comes).
    min_burst: u32,
    /// Between bursts with a minimum burst set: the next packet waits for a whole burst's
    /// credit (false while a burst is under way, or with no minimum: each packet at its time).
    holding: bool,
    /// Bytes sent in the burst under way: a burst ends before the packet that would take it
    /// past `min_burst`, even when a late poll has credit for more (the rest goes as whole
    /// bursts too, one after the other).
    burst_sent: u32,
    // DCQCN state
    rc: u64,
    rt: u64,
    alpha: u64,
    last_cut: Option<Instant>,
    next_alpha_update: Option<Instant>,
    next_increase: Option<Instant>,
    bytes_since_increase: u64,
    t_count: u32,
    b_count: u32,
    cnps_handled: u64,
    cnps_ignored: u64,
}

impl RateController {
    /// A controller with no history.
    pub fn new(cfg: RateConfig) -> Self {
        let line = cfg.dcqcn.map(|d| d.line_rate).unwrap_or(0);
        RateController {
            cfg,
            next_allowed: Instant::ZERO,
            min_burst: 0,
            holding: false,
            burst_sent: 0,
            rc: line,
            rt: line,
            alpha: cfg.dcqcn.map(|d| u64::from(d.initial_alpha)).unwrap_or(0),
            last_cut: None,
            next_alpha_update: None,
            next_increase: None,
            bytes_since_increase: 0,
            t_count: 0,
            b_count: 0,
            cnps_handled: 0,
            cnps_ignored: 0,
        }
    }

    /// The rate in force, bytes/s; `None` when nothing limits it.
    #[inline]
    pub fn current_rate(&self) -> Option<u64> {
        match (self.cfg.static_limit, self.cfg.dcqcn.is_some()) {
            (Some(s), true) => Some(s.min(self.rc)),
            (Some(s), false) => Some(s),
            (None, true) => Some(self.rc),
            (None, false) => None,
        }
    }

    /// DCQCN's α in Q16 (65536 = 1.0).
    pub fn alpha(&self) -> u32 {
        self.alpha as u32
    }

    /// CNPs that cut the rate.
    pub fn cnps_handled(&self) -> u64 {
        self.cnps_handled
    }

    /// CNPs that arrived within the rate-reduce monitor period of a cut and were ignored.
    pub fn cnps_ignored(&self) -> u64 {
        self.cnps_ignored
    }

    /// Earliest time the next packet may leave.
    pub fn next_send_time(&self) -> Instant {
        self.next_allowed
    }

    /// Send paced packets in bursts of at least `bytes` (at most 1 MiB; the credit the pacer
    /// keeps for a late poll grows from 64 KiB to match): once a burst's credit runs out the
    /// next one waits until `bytes` are due, or all that is ready to go. The average rate is the same; a sender that sleeps between bursts
    /// wakes once per burst instead of once per packet (a software camera paced at 10 Gbit/s:
    /// a wake-up every 3.3 us otherwise). 0, the default, sends each packet at its time.
    pub fn set_min_burst(&mut self, bytes: u32) {
        self.min_burst = bytes.min(1 << 20);
        self.burst_sent = 0;
        // nothing to hold back when nothing limits the rate
        self.holding = self.min_burst > 0 && self.current_rate().is_some();
    }

    /// The least a paced burst carries, bytes ([`Self::set_min_burst`]).
    pub fn min_burst(&self) -> u32 {
        self.min_burst
    }

    /// The time the link's rate gives one burst of [`Self::set_min_burst`]'s size, ns; `None`
    /// without a minimum burst or a rate.
    pub fn burst_ns(&self) -> Option<u64> {
        let rate = self.current_rate().filter(|r| *r > 0)?;
        (self.min_burst > 0).then(|| u64::from(self.min_burst) * 1_000_000_000 / rate)
    }

    /// Earliest time the next packet may leave when `ready` bytes (at least one packet) wait
    /// to go: [`Self::next_send_time`], held back between bursts until a burst of
    /// [`Self::set_min_burst`]'s size (or `ready`, if less) is due.
    #[inline(always)]
    pub fn next_send_time_for(&self, ready: impl FnOnce() -> (u64, u64)) -> Instant {
        if !self.holding {
            return self.next_allowed;
        }
        self.hold_until(ready())
    }

    #[cold]
    fn hold_until(&self, (ready, packet): (u64, u64)) -> Instant {
        let Some(rate) = self.current_rate().filter(|r| *r > 0) else {
            return self.next_allowed;
        };
        // the credit for the burst but its first packet (which next_allowed already counts)
        let burst = ready.min(u64::from(self.min_burst)).saturating_sub(packet);
        Instant(self.next_allowed.0 + burst * 1_000_000_000 / rate)
    }

    /// Account for `wire_bytes` sent at `now`.
    #[inline]
    pub fn on_sent(&mut self, now: Instant, wire_bytes: usize) {
        if self.cfg.static_limit.is_none() && self.cfg.dcqcn.is_none() {
            return; // nothing limits the rate: nothing to account
        }
        self.on_sent_limited(now, wire_bytes);
    }

    fn on_sent_limited(&mut self, now: Instant, wire_bytes: usize) {
        if let Some(rate) = self.current_rate().filter(|r| *r > 0) {
            let cost = Duration::from_nanos(wire_bytes as u64 * 1_000_000_000 / rate);
            // allow a burst of 64 KiB worth of time so a late poll does not lose throughput;
            // sending whole bursts only, a late poll may leave up to a burst's credit unspent
            // as well: twice that
            let credit = if self.min_burst > 0 {
                2 * u64::from(self.min_burst.max(64 << 10))
            } else {
                64 << 10
            };
            let burst = Duration::from_nanos(credit * 1_000_000_000 / rate);
            let floor = Instant(now.0.saturating_sub(burst.as_nanos() as u64));
            self.next_allowed = self.next_allowed.max(floor) + cost;
            // the burst goes on while the credit covers the next packet now and the packet
            // (the size of this one, as a burst's are) still fits in it: a burst of whole
            // packets that fits one UDP GSO send (64 KiB: 15 packets of 4 KiB) is sent whole
            // and alone, where a late poll's extra credit made a second send of a packet or
            // two, a system call and a wake-up of the receiver each
            if self.min_burst > 0 {
                let sent = self.burst_sent.saturating_add(wire_bytes as u32);
                let full = sent.saturating_add(wire_bytes as u32) > self.min_burst;
                self.holding = full || self.next_allowed > now;
                self.burst_sent = if self.holding { 0 } else { sent };
            }
        }
        if let Some(d) = self.cfg.dcqcn
            && self.rc < d.line_rate
        {
            self.bytes_since_increase += wire_bytes as u64;
            if self.bytes_since_increase >= d.byte_counter {
                self.bytes_since_increase = 0;
                self.b_count += 1;
                self.increase(d);
            }
        }
    }

    /// A CNP arrived at `now`. Returns whether it cut the rate.
    pub fn on_cnp(&mut self, now: Instant) -> bool {
        let Some(d) = self.cfg.dcqcn else {
            self.cnps_ignored += 1;
            return false;
        };
        if let Some(t) = self.last_cut
            && now < t + d.rate_reduce_monitor_period
        {
            self.cnps_ignored += 1;
            return false;
        }
        self.rt = self.rc;
        let cut = self.rc * self.alpha / (2 * Q16);
        self.rc = (self.rc - cut).max(d.min_rate);
        self.alpha += (Q16 - self.alpha) * u64::from(d.g) / Q16;
        self.last_cut = Some(now);
        self.t_count = 0;
        self.b_count = 0;
        self.bytes_since_increase = 0;
        self.next_alpha_update = Some(now + d.alpha_update_period);
        self.next_increase = Some(now + d.rate_increase_period);
        self.cnps_handled += 1;
        true
    }

    /// When the controller next needs [`handle_timeout`](Self::handle_timeout).
    pub fn poll_timeout(&self) -> Option<Instant> {
        match (self.next_alpha_update, self.next_increase) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Run the α-decay and rate-increase timers up to `now`.
    pub fn handle_timeout(&mut self, now: Instant) {
        let Some(d) = self.cfg.dcqcn else { return };
        while let Some(t) = self.next_alpha_update.filter(|t| *t <= now) {
            let dec = (self.alpha * u64::from(d.g)).div_ceil(Q16);
            self.alpha = self.alpha.saturating_sub(dec);
            self.next_alpha_update = (self.alpha > 0).then(|| t + d.alpha_update_period);
        }
        while let Some(t) = self.next_increase.filter(|t| *t <= now) {
            self.t_count += 1;
            self.increase(d);
            self.next_increase = (self.rc < d.line_rate).then(|| t + d.rate_increase_period);
        }
    }

    fn increase(&mut self, d: DcqcnConfig) {
        let f = d.fast_recovery_steps;
        if self.t_count.max(self.b_count) < f {
            // fast recovery: move half way back to the target
        } else if self.t_count.min(self.b_count) > f {
            let i = u64::from(self.t_count.min(self.b_count) - f);
            self.rt += i * d.hyper_increase;
        } else {
            self.rt += d.additive_increase;
        }
        self.rt = self.rt.min(d.line_rate);
        self.rc = (self.rt + self.rc).div_ceil(2).min(d.line_rate);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GBIT10: u64 = 1_250_000_000;

    #[test]
    fn static_limit_paces_packets() {
        let mut r = RateController::new(RateConfig {
            static_limit: Some(1_000_000), // 1 MB/s: 1000 bytes take 1 ms
            dcqcn: None,
        });
        let t0 = Instant::from_millis(100);
        r.on_sent(t0, 1000);
        // a burst of 64 KiB is allowed, then pacing at 1 ms per 1000 bytes
        for _ in 0..70 {
            r.on_sent(t0, 1000);
        }
        assert!(r.next_send_time() > t0 + Duration::from_millis(5));
        assert_eq!(r.current_rate(), Some(1_000_000));
    }

    /// With a minimum burst, packets go in runs of that size and the pacer holds the next run
    /// back until all of it is due, not each packet until its own slot: the same average rate,
    /// one wake-up per run. Less than a run ready (a frame's tail) goes as soon as it is due.
    #[test]
    fn a_minimum_burst_sends_runs_at_the_same_average_rate() {
        let mut r = RateController::new(RateConfig {
            static_limit: Some(GBIT10),
            dcqcn: None,
        });
        r.set_min_burst(256 << 10);
        let (pkt, lots) = (4156u64, (1u64 << 30, 4156u64));
        let mut now = Instant::from_millis(10);
        let (mut sent, mut wakes) = (0u64, 0u32);
        while sent < 100 << 20 {
            let mut run = 0;
            while now >= r.next_send_time_for(|| lots) {
                r.on_sent(now, pkt as usize);
                sent += pkt;
                run += 1;
            }
            if wakes > 0 {
                // a whole run each time, never a packet or two
                assert!((61..=64).contains(&run), "run of {run} packets");
            }
            wakes += 1;
            now = r.next_send_time_for(|| lots);
        }
        // 100 MiB at 10 Gbit/s: 83.9 ms, in ~400 wake-ups instead of ~25,000
        let took = now.0 - Instant::from_millis(10).0;
        assert!((83_000_000..85_000_000).contains(&took), "{took} ns");
        assert!(wakes < 420, "{wakes} wake-ups");
        // a tail of two packets waits for two packets' time only
        let tail = r.next_send_time_for(|| (2 * pkt, pkt));
        assert!(tail.0 - r.next_send_time().0 <= 4_000, "{:?}", tail);
    }

    /// A poll that comes late (a sleeping sender's timer slack: 50 us by default on Linux)
    /// sends whole bursts, one after the other, never a burst and a packet or two: each burst
    /// is one UDP GSO send, and a packet or two more was a second send and a second wake-up of
    /// the receiver. The average rate stays the link's.
    #[test]
    fn a_late_poll_sends_whole_bursts() {
        let mut r = RateController::new(RateConfig {
            static_limit: Some(GBIT10),
            dcqcn: None,
        });
        r.set_min_burst(64 << 10);
        let (pkt, lots) = (4140u64, (1u64 << 30, 4140u64));
        let start = Instant::from_millis(10);
        let mut now = start;
        let mut sent = 0u64;
        for wake in 0..2000u64 {
            let mut run = 0u64;
            // a burst is 15 packets (16 would pass 64 KiB): what a wake sends is whole bursts
            while now >= r.next_send_time_for(|| lots) {
                r.on_sent(now, pkt as usize);
                sent += pkt;
                run += 1;
            }
            if wake > 0 {
                assert!(run > 0 && run % 15 == 0, "a run of {run} packets");
            }
            // the next wake-up 0-60 us past its time
            now = r.next_send_time_for(|| lots) + Duration::from_micros(wake * 7919 % 61);
        }
        let rate = sent as f64 / ((now.0 - start.0) as f64 / 1e9);
        assert!((0.97..=1.0).contains(&(rate / GBIT10 as f64)), "{rate} B/s");
    }

    #[test]
    fn first_cnp_halves_the_rate_then_it_recovers() {
        let mut r = RateController::new(RateConfig {
            static_limit: None,
            dcqcn: Some(DcqcnConfig::new(GBIT10)),
        });
        let t0 = Instant::from_millis(1);
        assert!(r.on_cnp(t0));
        assert_eq!(r.current_rate(), Some(GBIT10 / 2));
        // a second CNP inside the 4 µs monitor period is ignored
        assert!(!r.on_cnp(t0 + Duration::from_micros(2)));
        assert_eq!(r.cnps_ignored(), 1);
        // α was raised towards 1 then decays; the rate climbs back with the timer
        let mut now = t0;
        for _ in 0..2000 {
            now = r.poll_timeout().unwrap_or(now + Duration::from_micros(55));
            r.handle_timeout(now);
            if r.current_rate() == Some(GBIT10) {
                break;
            }
        }
        assert_eq!(r.current_rate(), Some(GBIT10));
        assert!(r.alpha() < 65_536);
    }

    #[test]
    fn cnp_storm_drives_rate_to_floor_not_below() {
        let d = DcqcnConfig::new(GBIT10);
        let mut r = RateController::new(RateConfig {
            static_limit: None,
            dcqcn: Some(d),
        });
        for i in 0..200 {
            r.on_cnp(Instant::from_micros(10 * i));
        }
        assert_eq!(r.current_rate(), Some(d.min_rate));
        assert_eq!(r.cnps_handled(), 200);
    }

    #[test]
    fn without_dcqcn_cnps_are_counted_only() {
        let mut r = RateController::new(RateConfig::default());
        assert!(!r.on_cnp(Instant::ZERO));
        assert_eq!(r.current_rate(), None);
        assert_eq!(r.cnps_ignored(), 1);
    }
}
