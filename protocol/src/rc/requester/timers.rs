//! The requester's timers: the local ACK timeout (RTT-based, patient on a path that lost
//! nothing lately, where it first takes silence for a pause), the window's reaction to a loss,
//! and `retry_cnt`.

use super::*;

impl<const SQ: usize, const CQ: usize> Requester<SQ, CQ> {
    /// A loss at `psn` was detected: cut the window (once per window of packets).
    pub(super) fn on_loss(&mut self, now: Instant, psn: u32, timeout: bool) {
        // the loss before this one, for telling a spurious timeout on a clean path
        self.earlier_loss = self.loss_seen;
        self.loss_seen = Some(now);
        let nak_lately = self.nak_lately(now);
        if !timeout {
            self.nak_seen = Some(now);
        }
        if self.window.on_loss(psn, timeout, self.sent_end) {
            self.counters.window_cuts += 1;
        }
        if timeout && !nak_lately {
            // A timeout where the responder has reported no gap lately is as likely a pause
            // (a host thread off its core) as a lost tail: go back one packet at a time, as
            // TCP's retransmission timeout restarts from a loss window of one segment. A late
            // ACK then finds one packet sent twice, not a window (the cut is undone as
            // spurious); a real loss is resent as the window grows back from ACKs.
            self.window.collapse();
        }
    }

    /// When [`handle_timeout`](Self::handle_timeout) or [`poll_transmit`](Self::poll_transmit)
    /// next has something to do; `None` when only a received packet or a post can change that.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.poll_timeout_pacing_later(0)
    }

    /// [`poll_timeout`](Self::poll_timeout) for a sender that sleeps until it: the pacer's
    /// time for the next burst moved on by [`pace_lull_ns`](Self::pace_lull_ns) (mid-frame,
    /// one wake-up for two bursts). An ACK deadline before that wake-up waits for it: a sender
    /// reads what arrived before it runs its timers, so the ACK is seen then, and a lost one
    /// is found at most two bursts' time after its deadline (the pacer holds at most one, the
    /// lull adds one; about one at 1 Gbit/s, where a burst takes 524 us and the deadline, 500 us
    /// at least, woke the camera once more for every two bursts). No other timer moves.
    pub fn poll_timeout_lulled(&self) -> Option<Instant> {
        // the pacer's time counts only while it alone holds a packet back (can_send)
        self.poll_timeout_pacing_later(self.pace_lull_ns())
    }

    fn poll_timeout_pacing_later(&self, lull_ns: u64) -> Option<Instant> {
        if self.state != State::Ready {
            return None;
        }
        let mut t = self.rate.poll_timeout();
        let mut earliest = |x: Option<Instant>| {
            if let Some(x) = x {
                t = Some(t.map_or(x, |t| t.min(x)));
            }
        };
        let wake = self
            .can_send()
            .then(|| Instant(self.send_time().0 + lull_ns));
        earliest(match (self.ack_deadline, wake) {
            (Some(d), Some(w)) if lull_ns > 0 => Some(d.max(w)),
            (d, _) => d,
        });
        earliest(self.probe_at);
        earliest(self.rnr_until);
        if self.probe_psn.is_some() && self.rnr_until.is_none() {
            earliest(Some(Instant::ZERO));
        }
        earliest(wake);
        t
    }

    /// Packets still to go out before the last packet of the next solicited request (a
    /// frame's TRAILER: what a host waits for) leaves; `None` when none is posted unsent.
    pub fn packets_to_solicited(&self) -> Option<u32> {
        self.sq
            .iter()
            .filter(|w| w.wr.solicited)
            .map(|w| psn_diff(w.last_psn(), self.send_psn))
            .find(|d| *d >= 0)
            .map(|d| d as u32)
    }

    /// How much longer than [`poll_timeout`](Self::poll_timeout) a sender whose pacer holds it
    /// back ([`can_send`](Self::can_send)) may sleep, ns: one more burst's time
    /// ([`set_min_burst`](Self::set_min_burst)) while at least [`LULL_BURSTS`] bursts wait to
    /// go before the next solicited packet, so it wakes once for two bursts; else 0. Near a
    /// solicited packet each burst goes at its own time, and what leaves just before it is
    /// one burst, not two: a frame's TRAILER reaches the host no later than before.
    pub fn pace_lull_ns(&self) -> u64 {
        let Some(burst_ns) = self.rate.burst_ns() else {
            return 0;
        };
        let packet = self.cfg.pmtu.bytes() + crate::wire::roce::MAX_HEADER_LEN as u32;
        let burst = self.rate.min_burst().div_ceil(packet).max(1);
        let need = burst.saturating_mul(LULL_BURSTS);
        let left = self.window().saturating_sub(self.unacked(self.send_psn));
        let posted = psn_diff(self.next_post_psn, self.send_psn).max(0) as u32;
        let far = self.packets_to_solicited().is_none_or(|n| n >= need);
        if posted.min(left) >= need && far {
            burst_ns
        } else {
            0
        }
    }

    /// Whether a packet waits to go and the window lets it: only the pacer holds it back, and
    /// no ACK can send it sooner (a caller need not poll for one).
    pub fn can_send(&self) -> bool {
        self.state == State::Ready
            && self.rnr_until.is_none()
            && psn_diff(self.send_psn, self.next_post_psn) < 0
            && (self.unacked(self.send_psn) < self.window() || self.probe_new_due)
    }

    /// Run timers: the local ACK timeout (go back to the oldest unacknowledged PSN, or fail the
    /// request when `retry_cnt` is used up) and DCQCN's rate timers.
    pub fn handle_timeout(&mut self, now: Instant) {
        self.rate.handle_timeout(now);
        if self.state != State::Ready {
            return;
        }
        if let Some(p) = self.probe_at
            && now >= p
        {
            self.probe_at = None;
            // probes only where the responder reported gaps lately: after timeouts alone (a
            // paused peer) a probe a round trip into the next pause only sends a packet twice.
            // (Decided here, not where the timer is armed: that is on every ACK request, and
            // the test there cost the Cortex-A9 13 instructions per packet.)
            if psn_diff(self.una, self.sent_end) < 0
                && self.rnr_until.is_none()
                && self.nak_lately(now)
            {
                // the oldest unacknowledged packet, not the newest as TCP probes: a responder
                // that lost a packet NAKs once and then drops what follows in silence (rxe
                // does), so only the missing packet gets an answer; if it was not lost, the
                // duplicate is acknowledged again and says how far the responder got
                self.probe_psn = Some(self.una);
            }
        }
        let Some(deadline) = self.ack_deadline else {
            return;
        };
        if now < deadline {
            return;
        }
        if psn_diff(self.una, self.sent_end) >= 0 {
            self.ack_deadline = None; // nothing outstanding
            return;
        }
        self.counters.timeouts += 1;
        if self.out_of_retries(now) {
            self.fail_from(self.una, WcStatus::RetryExceeded);
            return;
        }
        if self.wait_out_a_pause(now) {
            return;
        }
        self.counters.go_backs += 1;
        let before = self.window.snapshot();
        let armed_at = self.timer_armed_at(now);
        let loss_before = self.earlier_loss;
        self.on_loss(now, self.una, true);
        // A go-back while an earlier one of the same silence is still unanswered: an ACK that
        // shows this one spurious shows them all, so undoing it must give back the window and
        // the loss memory from before the first. (Kept per timeout, the second one's snapshot
        // was the window the first had collapsed, and its "loss before" the first timeout
        // itself: beside a busy loop a stall of a few timeouts left the path counted lossy for
        // a second, and each later pause went back at once, 362 packets in a 60 s soak.)
        self.last_timeout = Some(match self.last_timeout {
            Some((_, _, first)) => {
                self.earlier_loss = loss_before;
                (now, armed_at, first)
            }
            None => (now, armed_at, before),
        });
        self.retry_left = self.retry_left.saturating_sub(1);
        // random loss, not congestion, is what times out here: back off twice at most
        self.backoff = (self.backoff + 1).min(2);
        self.sent_times.clear(); // Karn: no sample from what is sent again
        self.pause_armed_at = None;
        self.probe_new_due = false;
        self.retrying_from = None;
        self.send_psn = self.una;
        self.probe_psn = None;
        self.probed = None;
        self.ack_deadline = self.deadline(now);
        self.probe_at = None;
    }

    /// When the packet that armed the ACK timer firing at `now` left: one timeout before.
    fn timer_armed_at(&self, now: Instant) -> Instant {
        Instant(now.0.saturating_sub(self.rto_ns(now).unwrap_or(0)))
    }

    /// A timeout on a path that has lost nothing lately is taken for a pause of the peer (a
    /// host off its core), not a loss, [`NEW_DATA_PROBES`] times in a row before it goes back.
    /// With new data waiting, the next new packet goes (ACK requested) beyond the window, as
    /// RACK-TLP (RFC 8985) probes with new data: a peer that was only slow answers it with an
    /// ACK for everything, and a lost tail shows as a sequence NAK for the gap. With nothing
    /// new to send (a frame's last packets, the camera idle until the next frame), nothing
    /// goes: the timer, doubled, waits again, and a lost tail draws a sequence NAK as soon as
    /// the next frame's packets follow it. Either way the answer's delay is a round trip to
    /// learn, and nothing was sent twice. Returns whether it waited.
    pub(super) fn wait_out_a_pause(&mut self, now: Instant) -> bool {
        if self.lossy(now)
            || self.backoff >= self.cfg.pause_waits
            || self.rnr_until.is_some()
            || self.send_psn != self.sent_end
        {
            return false;
        }
        let armed_at = self.timer_armed_at(now);
        if psn_diff(self.sent_end, self.next_post_psn) < 0 {
            self.counters.new_data_probes += 1;
            self.probe_new_due = true;
        } else {
            self.counters.quiet_waits += 1;
        }
        if self.pause_armed_at.is_none() {
            self.pause_armed_at = Some(armed_at);
        }
        self.backoff += 1;
        self.ack_deadline = self.deadline(now);
        self.probe_at = None;
        true
    }

    /// Whether the responder reported a gap (a sequence NAK) within [`LOSS_MEMORY`] of now.
    #[inline(always)]
    pub(super) fn nak_lately(&self, now: Instant) -> bool {
        self.nak_seen.is_some_and(|t| recent(now, t))
    }

    /// Whether a loss (a sequence NAK, an ACK timeout) was seen within [`LOSS_MEMORY`] of now.
    #[inline]
    pub(super) fn lossy(&self, now: Instant) -> bool {
        self.loss_seen.is_some_and(|t| recent(now, t))
    }

    /// The retransmission timeout now, ns ([`RttEstimator::rto_ns`] after the timeouts in a
    /// row), never longer than the configured local ACK timeout; `None` when that is infinite.
    #[inline]
    pub(super) fn rto_ns(&self, now: Instant) -> Option<u64> {
        let (lossy, nak) = self.losses(now);
        self.rto_ns_on(lossy, nak)
    }

    /// Whether a loss was seen within [`LOSS_MEMORY`] of now ([`lossy`](Self::lossy)), and
    /// whether a sequence NAK was (only asked on a lossy path: a NAK is a loss).
    #[inline(always)]
    pub(super) fn losses(&self, now: Instant) -> (bool, bool) {
        let lossy = self.lossy(now);
        (lossy, lossy && self.nak_lately(now))
    }

    /// [`rto_ns`](Self::rto_ns) on a path that has (`lossy`) or has not lost packets lately,
    /// and whose responder reported a gap lately (`nak`).
    #[inline(always)]
    pub(super) fn rto_ns_on(&self, lossy: bool, nak: bool) -> Option<u64> {
        let max = local_ack_timeout_ns(self.cfg.timeout)?;
        // where the responder itself reported gaps lately, the link loses packets and the
        // peer answers promptly: half the floor (5 % loss: goodput +8-17 %). Not after
        // timeouts alone, which a pause causes as well (beside a busy loop, half the floor
        // made a 60 s soak resend 345 packets).
        let floor = self.cfg.min_rto.as_nanos() as u64 >> u32::from(nak);
        // on a path without recent losses a late answer is likelier than a loss: wait out the
        // longest recent round trip too
        Some(self.rtt.rto_ns(self.backoff, floor, max, !lossy))
    }

    /// Arm the ACK timer for outstanding packets that asked for no ACK yet: a round trip's
    /// timeout after the request the pacer still holds. Off the per-packet path (the first
    /// packet after a quiet spell).
    #[cold]
    #[inline(never)]
    pub(super) fn arm_before_ack_request(&mut self, now: Instant) {
        let (deadline, probe) = self.timers(now);
        let wait = self.pacing_to_next_ack_request(now);
        self.ack_deadline = deadline.map(|d| Instant(d.0 + wait));
        self.probe_at = probe;
    }

    /// How long, ns, the pacer holds back the next packet that asks for an ACK: the wait for
    /// the next packet's slot, then the pacing of the packets up to that one (its ACK-request
    /// spacing). A few microseconds at 10 Gbit/s; 0 when nothing limits the rate.
    #[inline(never)]
    pub(super) fn pacing_to_next_ack_request(&self, now: Instant) -> u64 {
        let Some(rate) = self.rate.current_rate().filter(|r| *r > 0) else {
            return 0;
        };
        let spacing = self.cfg.ack_req_every.min((self.window() / 4).max(1));
        let packets = u64::from(spacing.saturating_sub(self.packets_since_ackreq));
        // a full packet of the path MTU as the pacer counts it: its headers at their longest,
        // then pad and ICRC
        let wire = u64::from(self.cfg.pmtu.bytes()) + crate::wire::roce::MAX_HEADER_LEN as u64 + 7;
        let queued = self.send_time().0.saturating_sub(now.0);
        queued + packets * wire * 1_000_000_000 / rate
    }

    /// The ACK deadline of a packet asking for an ACK at `now`.
    pub(super) fn deadline(&self, now: Instant) -> Option<Instant> {
        self.rto_ns(now).map(|t| Instant(now.0 + t))
    }

    /// The ACK deadline and the tail-loss probe time ([`RttEstimator::pto_ns`], armed only
    /// on a lossy path; it sends a probe only within a second of a sequence NAK) of a packet
    /// asking for an ACK at `now`: one timeout computed for both.
    #[inline(always)]
    pub(super) fn timers(&self, now: Instant) -> (Option<Instant>, Option<Instant>) {
        let (lossy, nak) = self.losses(now);
        let Some(rto) = self.rto_ns_on(lossy, nak) else {
            return (None, None);
        };
        let probe = if lossy { self.rtt.pto_ns(rto) } else { None };
        (
            Some(Instant(now.0 + rto)),
            probe.map(|p| Instant(now.0 + p)),
        )
    }

    /// Whether a loss other than the timeout at `timeout_at` was seen within [`LOSS_MEMORY`]
    /// of now (the timeout itself counts as one: `loss_seen` after it is not evidence).
    pub(super) fn lossy_before(&self, now: Instant, timeout_at: Instant) -> bool {
        self.earlier_loss
            .is_some_and(|t| t < timeout_at && recent(now, t))
    }

    /// The retransmission timeout now ([`RttEstimator::rto`] after the timeouts in a row), never
    /// longer than the configured local ACK timeout; `None` when that is infinite.
    pub fn rto(&self, now: Instant) -> Option<Duration> {
        self.rto_ns(now).map(Duration::from_nanos)
    }

    /// Whether the oldest request has waited (`retry_cnt` + 1) local ACK timeouts without an
    /// ACK advancing: then it fails with `RetryExceeded`.
    pub(super) fn out_of_retries(&self, now: Instant) -> bool {
        local_ack_timeout(self.cfg.timeout).is_some_and(|t| {
            now.0.saturating_sub(self.waiting_since.0)
                >= (t.as_nanos() as u64) * (u64::from(self.cfg.retry_cnt) + 1)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rc::{RateConfig, Requester, RequesterConfig, WorkRequest};
    use crate::wire::pmtu::Pmtu;
    use core::net::{IpAddr, Ipv4Addr};
    use std::vec;

    const GBIT10: u64 = 1_250_000_000;
    const GBIT1: u64 = 125_000_000;

    /// A camera's requester paced to 10 Gbit/s in bursts of 64 KiB, a window of at most
    /// `window` packets.
    fn paced(window: u32) -> Requester<16, 16> {
        paced_at(window, GBIT10)
    }

    /// [`paced`] at `rate` bytes a second.
    fn paced_at(window: u32, rate: u64) -> Requester<16, 16> {
        let path = Path::new(
            IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)),
            IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)),
        );
        let mut cfg = RequesterConfig::new(0x100, 0x11, 0x10, path);
        cfg.pmtu = Pmtu::Mtu4096;
        cfg.max_unacked = window;
        cfg.rate = RateConfig {
            static_limit: Some(rate),
            dcqcn: None,
        };
        let mut rq = Requester::new(cfg);
        rq.set_min_burst(64 << 10);
        rq
    }

    /// Send everything posted as the pacer lets it, each packet acknowledged at once; after
    /// each packet, `look` at the requester.
    fn send_all(
        rq: &mut Requester<16, 16>,
        bufs: &[&[u8]],
        mut look: impl FnMut(&Requester<16, 16>),
    ) {
        let mut now = rq.poll_timeout().unwrap_or(Instant::ZERO);
        while let Some(p) = rq.poll_transmit(now, bufs) {
            rq.handle_ib(now, &crate::rc::workload::ack(0x100, p.psn));
            look(rq);
            now = now.max(rq.poll_timeout().unwrap_or(now));
        }
    }

    /// Post a frame: a WRITE of `packets` full packets (buffer 0) and, with `trailer`, its
    /// TRAILER (a solicited 64-byte SEND from buffer 1); work request IDs from `id`.
    fn post_frame(rq: &mut Requester<16, 16>, id: u64, packets: u32, trailer: bool) {
        rq.post(WorkRequest::write(
            id,
            PayloadRef::new(0, 0),
            packets * 4096,
            0x1000,
            7,
        ))
        .unwrap();
        if trailer {
            rq.post(WorkRequest::send(id + 1, PayloadRef::new(1, 0), 64).solicited())
                .unwrap();
        }
    }

    #[test]
    fn a_paced_sender_sleeps_through_one_burst_only_while_the_trailer_is_far() {
        let mut rq = paced(128);
        let frame = vec![0x5au8; 200 * 4096];
        let trailer = [0x7eu8; 64];
        let bufs: [&[u8]; 2] = [&frame, &trailer];
        // a first frame opens the window (16 packets at first: no lull while it limits)
        post_frame(&mut rq, 1, 200, false);
        assert!(rq.window() < 64);
        assert_eq!(
            rq.pace_lull_ns(),
            0,
            "the window, not the pacer, holds this back"
        );
        send_all(&mut rq, &bufs, |_| ());
        assert_eq!(rq.window(), 128);
        assert_eq!(rq.packets_to_solicited(), None);
        // a frame: 100 packets of WRITE, then its TRAILER (a solicited SEND)
        post_frame(&mut rq, 2, 100, true);
        assert_eq!(rq.packets_to_solicited(), Some(100));
        // one burst: 64 KiB at 10 Gbit/s
        let burst_ns = (64u64 << 10) * 1_000_000_000 / GBIT10;
        assert_eq!(rq.pace_lull_ns(), burst_ns);
        // a sender that sleeps until the next timer wakes one burst later; no other timer moves
        let (paced, lulled) = (
            rq.poll_timeout().unwrap(),
            rq.poll_timeout_lulled().unwrap(),
        );
        assert_eq!(lulled.0 - paced.0, burst_ns);
        let mut lulls = vec![];
        send_all(&mut rq, &bufs, |rq| {
            lulls.push((rq.packets_to_solicited(), rq.pace_lull_ns()))
        });
        assert_eq!(lulls.len(), 101, "every packet went");
        let packet = 4096 + crate::wire::roce::MAX_HEADER_LEN as u32;
        let need = (64u32 << 10).div_ceil(packet) * LULL_BURSTS;
        for (k, &(to_trailer, lull)) in lulls.iter().enumerate() {
            let k = k as u32;
            // after packet k: 99 - k packets before the TRAILER, 100 - k unsent with it
            let to_go = 99u32.checked_sub(k);
            assert_eq!(to_trailer, to_go, "after packet {k}");
            let far = to_go.is_some_and(|n| n >= need);
            assert_eq!(lull, if far { burst_ns } else { 0 }, "after packet {k}");
        }
        // the lull ends LULL_BURSTS bursts before the TRAILER: those go one burst a wake-up
        assert_eq!(lulls.iter().filter(|l| l.1 > 0).count() as u32, 100 - need);
        assert_eq!(rq.packets_to_solicited(), None, "the TRAILER went");
    }

    #[test]
    fn no_lull_without_bursts_or_room_for_four() {
        let frame = vec![0x5au8; 300 * 4096];
        let bufs: [&[u8]; 1] = [&frame];
        for (window, min_burst) in [(48, 64 << 10), (128, 0)] {
            let mut rq = paced(window);
            rq.set_min_burst(min_burst);
            post_frame(&mut rq, 1, 300, false);
            let mut lulls = 0;
            send_all(&mut rq, &bufs, |rq| lulls += rq.pace_lull_ns());
            assert_eq!(lulls, 0, "window {window}, bursts of {min_burst}");
        }
    }

    #[test]
    fn a_lulled_sleep_lets_an_ack_deadline_wait_for_its_wake_up_and_still_finds_a_loss() {
        let mut rq = paced_at(128, GBIT1);
        let frame = vec![0x5au8; 200 * 4096];
        let trailer = [0x7eu8; 64];
        let bufs: [&[u8]; 2] = [&frame, &trailer];
        // a first frame, acknowledged, opens the window
        post_frame(&mut rq, 1, 200, false);
        send_all(&mut rq, &bufs, |_| ());
        assert_eq!(rq.window(), 128);
        // a frame of 200 packets and its TRAILER; bursts go until one packet asks for an ACK
        // (one in 32 packets: every other burst), and no ACK comes
        post_frame(&mut rq, 2, 200, true);
        let mut now = rq.poll_timeout().unwrap();
        let mut asked = false;
        while !asked {
            now = now.max(rq.send_time());
            let mut burst = 0;
            while let Some(p) = rq.poll_transmit(now, &bufs[..]) {
                // the BTH after the IPv4 and UDP headers
                let bth =
                    &p.header()[crate::wire::ipv4::HEADER_LEN + crate::wire::udp::HEADER_LEN..];
                asked |= crate::wire::bth::Packet::new_checked(bth)
                    .unwrap()
                    .ack_req();
                burst += 1;
            }
            assert!(burst > 0, "the pacer lets a burst go at its time");
        }
        let burst_ns = (64u64 << 10) * 1_000_000_000 / GBIT1;
        assert_eq!(rq.pace_lull_ns(), burst_ns);
        let deadline = rq.ack_deadline.expect("the burst waits for its ACK");
        let pacer = rq.send_time();
        let lulled = Instant(pacer.0 + burst_ns);
        assert!(deadline < lulled, "at 1 Gbit/s the deadline comes first");
        // awake for every timer, the deadline counts; asleep through a burst, it waits
        assert_eq!(rq.poll_timeout(), Some(deadline.min(pacer)));
        assert_eq!(rq.poll_timeout_lulled(), Some(lulled));
        // nothing came by then: the timeout fires at that wake-up, at most two bursts late
        assert!(lulled.0 - deadline.0 <= 2 * burst_ns);
        let before = rq.counters().timeouts;
        rq.handle_timeout(lulled);
        assert_eq!(rq.counters().timeouts, before + 1, "the loss is found");
    }
}
