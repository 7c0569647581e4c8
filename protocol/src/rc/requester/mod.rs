//! The RC send queue: work requests in, RoCEv2 packets out, made reliable.
//!
//! This file posts work requests and builds packets (a window's worth, go-backs, probes);
//! [`acks`] takes the responder's answers, [`timers`] runs the ACK timeout and the loss
//! window's reaction, and [`types`] holds what callers configure, post and read back.

use core::time::Duration;

use heapless::Deque;

use super::rate::{RateConfig, RateController};
use super::rtt::{MIN_RTO, RttEstimator};
use super::window::LossWindow;
use super::{Instant, Path, PayloadRef, PayloadSource, local_ack_timeout, local_ack_timeout_ns};
use crate::wire::aeth::{AethSyndrome, NakCode, rnr_timer_micros};
use crate::wire::bth::{psn_add, psn_diff};
use crate::wire::opcode::Transport;
use crate::wire::pmtu::{MessageKind, Pmtu, Segment, packet_count, segment};
use crate::wire::roce::MAX_HEADER_LEN;
use crate::wire::{BthRepr, HeaderTemplate, IbRepr, Opcode, PacketFields, RethRepr, RoceV2Repr};

mod acks;
mod timers;
mod types;

pub use types::{
    Completion, PostError, RequesterConfig, RequesterCounters, TxPacket, WcStatus, WorkRequest,
};

/// Bursts that must wait to go before the next solicited packet for a paced sender to sleep
/// through one burst's time ([`Requester::pace_lull_ns`]): the two it then sends together, and
/// two more that go one at a time before the solicited packet.
pub const LULL_BURSTS: u32 = 4;

#[derive(Debug, Clone, Copy)]
struct Wqe {
    wr: WorkRequest,
    first_psn: u32,
    npkts: u32,
}

impl Wqe {
    fn last_psn(&self) -> u32 {
        psn_add(self.first_psn, self.npkts - 1)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Ready,
    Error,
}

/// The trailer of a packet whose ICRC a data mover computes: the pad of a `payload_len`-byte
/// payload, then four zero bytes; returns its length.
fn zero_trailer(payload_len: usize, trailer: &mut [u8; 7]) -> usize {
    let tl = crate::wire::roce::pad_len(payload_len) + crate::wire::icrc::ICRC_LEN;
    trailer[..tl].fill(0);
    tl
}

/// What a [`HeaderTemplate`] is valid for: packets of one opcode, payload length and solicited
/// bit on a path with one ECN codepoint (the rest of the headers is fixed for a queue pair).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct TemplateKey {
    opcode: u8,
    solicited: bool,
    ecn: u8,
    len: u32,
}

/// Header templates kept per queue pair, one slot per opcode modulo this: a stream's FIRST,
/// MIDDLE, LAST and ONLY opcodes of WRITE and SEND land in different slots.
const TEMPLATE_SLOTS: usize = 8;

/// How long after a loss tail-loss probes stay armed. A probe guesses that silence means the
/// tail of what was sent is lost; on a path that has lost nothing lately a late answer (a peer
/// off its core for a while) is the likelier cause, and the RTT-based ACK timeout, which waits
/// out recent delays, covers a real tail loss there. On a lossy path probes recover tails
/// within two round trips.
pub const LOSS_MEMORY: Duration = Duration::from_secs(1);

/// Whether `t` lies within [`LOSS_MEMORY`] before `now`.
fn recent(now: Instant, t: Instant) -> bool {
    now.0.saturating_sub(t.0) < LOSS_MEMORY.as_nanos() as u64
}

/// Timeouts in a row on a clean path answered by a new-data probe, or with nothing new to send
/// by waiting again, before one goes back: the timer doubles with each, so a go-back waits out
/// 1 + 2 + 4 + 8 timeouts of silence, 7.5 ms at the 500 us floor. (Beside a busy loop, where a
/// host thread waits up to a 4 ms tick for its core, a 60 s soak at 1000 fps went back 3 times
/// with one probe, each time for a pause. With two, 1 + 2 + 4 timeouts, a stream at a 1024
/// path MTU across a veth went back once in about 40 runs of 300 frames, each time for a
/// 4-6 ms silence of the host: this VM's hypervisor takes a vCPU away for up to 7 ms.) Each
/// probe goes beyond the window: a host's count of what it holds leaves room for them.
pub const NEW_DATA_PROBES: u32 = 3;

/// First transmissions whose send times are kept for round-trip samples (at least one per
/// ACK request of a full window).
const SENT_TIMES: usize = 64;

/// Round-trip time above twice the shortest that is taken for noise, not queueing (the
/// default of [`RequesterConfig::queue_slack_ns`]).
/// 50 µs let the queue (and so the go-back-N of each loss) grow to ~29 packets of 4 KiB at
/// 10 Gbit/s in the simulator: goodput 0.78 of lossless at 1 % loss; 20 µs gives 0.83 (5 %:
/// 0.42 -> 0.46), the lossless rate unchanged.
pub const QUEUE_SLACK_NS: u64 = 20_000;

/// The RC requester. `SQ` bounds outstanding work requests, `CQ` unread completions.
#[derive(Debug)]
pub struct Requester<const SQ: usize, const CQ: usize> {
    cfg: RequesterConfig,
    state: State,
    sq: Deque<Wqe, SQ>,
    cq: Deque<Completion, CQ>,
    /// PSN the next posted work request will start at.
    next_post_psn: u32,
    /// Oldest unacknowledged PSN.
    una: u32,
    /// Next PSN to transmit (moves back on go-back-N).
    send_psn: u32,
    /// One past the highest PSN ever transmitted.
    sent_end: u32,
    packets_since_ackreq: u32,
    /// The newest packet sent asking for an ACK: once it is acknowledged, what is still
    /// outstanding has asked for nothing yet.
    ackreq_psn: u32,
    retry_left: u8,
    rnr_left: u8,
    /// PSN a NAK-triggered go-back started from, until an ACK passes it.
    retrying_from: Option<u32>,
    ack_deadline: Option<Instant>,
    /// When to send a loss probe (the oldest unacknowledged packet again, ACK requested) if
    /// nothing was acknowledged and nothing new asked for an ACK by then.
    probe_at: Option<Instant>,
    /// A timeout on a clean path taken for a pause (a new-data probe, or a quiet wait): when the
    /// packet that armed that timer left (the answer's delay is a round trip to learn), until an
    /// ACK or NAK answers it.
    pause_armed_at: Option<Instant>,
    /// A new-data probe is still to be sent (one packet beyond the window).
    probe_new_due: bool,
    /// When a loss was last seen (a sequence NAK, an ACK timeout): tail-loss probes are armed
    /// only within [`LOSS_MEMORY`] of one.
    loss_seen: Option<Instant>,
    /// The loss seen before `loss_seen`.
    earlier_loss: Option<Instant>,
    /// When the responder last reported a gap (a sequence NAK): a loss the peer saw, where a
    /// timeout may only have been a pause.
    nak_seen: Option<Instant>,
    /// A tail-loss probe due: the PSN to send again.
    probe_psn: Option<u32>,
    /// The PSN the last tail-loss probe sent again, until an ACK or NAK answers.
    probed: Option<u32>,
    /// The last ACK timeout, to tell a spurious one: when it fired, when the packet that armed
    /// it left, and the window before it.
    last_timeout: Option<(Instant, Instant, (u32, u32))>,
    rnr_until: Option<Instant>,
    /// The loss-adaptive window.
    window: LossWindow,
    /// Round trips measured, and the timers they set.
    rtt: RttEstimator,
    /// First transmissions that asked for an ACK, and when they left, oldest first: each ACK
    /// that covers one gives a round-trip sample (Karn: none from what is sent again, so a
    /// go-back forgets them).
    sent_times: Deque<(u32, Instant), SENT_TIMES>,
    /// Timeouts in a row: the RTT-based timer doubles with each.
    backoff: u32,
    /// When the oldest unacknowledged packet started waiting (last progress).
    waiting_since: Instant,
    /// Why the queue pair went to the error state.
    failure: Option<WcStatus>,
    rate: RateController,
    src_port: u16,
    ipv4_ident: u16,
    /// Headers of the packet shapes sent last, patched per packet (slot: opcode modulo
    /// [`TEMPLATE_SLOTS`]).
    templates: [Option<(TemplateKey, HeaderTemplate)>; TEMPLATE_SLOTS],
    /// The send-queue entry of the last packet sent ([`Self::wqe_of`]).
    last_wqe: Option<Wqe>,
    /// Where `last_wqe` was in the send queue, counted in entries ever removed from its front
    /// plus its position then: the entry after it is the next message's, found without a
    /// search while messages go out in order.
    last_wqe_at: u64,
    /// Entries ever removed from the front of the send queue.
    sq_popped: u64,
    counters: RequesterCounters,
    /// The oldest packet the caller held back on purpose (an injected loss) and the requester
    /// has not sent again: an ACK past it acknowledges what the peer never received.
    held_back: Option<u32>,
    /// One past the highest PSN ever sent again: a packet below it may have reached the peer
    /// in another copy, so holding one back proves nothing.
    resent_end: u32,
    /// What the last packet received broke ([`Self::take_violation`]).
    violation: Option<crate::judge::Violation>,
}

impl<const SQ: usize, const CQ: usize> Requester<SQ, CQ> {
    /// A requester in the ready-to-send state.
    pub fn new(cfg: RequesterConfig) -> Self {
        let start = cfg.start_psn & 0x00ff_ffff;
        Requester {
            cfg,
            state: State::Ready,
            sq: Deque::new(),
            cq: Deque::new(),
            next_post_psn: start,
            una: start,
            send_psn: start,
            sent_end: start,
            packets_since_ackreq: 0,
            ackreq_psn: start.wrapping_sub(1) & 0x00ff_ffff,
            retry_left: cfg.retry_cnt,
            rnr_left: cfg.rnr_retry,
            retrying_from: None,
            ack_deadline: None,
            probe_at: None,
            probe_psn: None,
            probed: None,
            pause_armed_at: None,
            probe_new_due: false,
            loss_seen: None,
            earlier_loss: None,
            nak_seen: None,
            last_timeout: None,
            rnr_until: None,
            window: LossWindow::new(cfg.max_unacked, start),
            rtt: RttEstimator::new(),
            sent_times: Deque::new(),
            backoff: 0,
            waiting_since: Instant::ZERO,
            failure: None,
            rate: RateController::new(cfg.rate),
            src_port: cfg.path.source_port(cfg.local_qpn, cfg.remote_qpn),
            ipv4_ident: 0,
            templates: [const { None }; TEMPLATE_SLOTS],
            last_wqe: None,
            last_wqe_at: 0,
            sq_popped: 0,
            held_back: None,
            resent_end: start,
            violation: None,
            counters: RequesterCounters::default(),
        }
    }

    /// The configuration.
    pub fn config(&self) -> &RequesterConfig {
        &self.cfg
    }

    /// Counters so far.
    pub fn counters(&self) -> RequesterCounters {
        let mut c = self.counters;
        c.window = u64::from(self.window());
        c.srtt_ns = self.rtt.smoothed().unwrap_or(0);
        c.min_rtt_ns = self.rtt.min().unwrap_or(0);
        c
    }

    /// What the last packet received broke, once: an ACK for a PSN never sent, past a packet
    /// held back, or with a wrong MSN ([`crate::judge`]).
    pub fn take_violation(&mut self) -> Option<crate::judge::Violation> {
        self.violation.take()
    }

    /// The caller did not put packet `psn` on the wire (a loss it injects): until it is sent
    /// again, an ACK past it is a violation (`ack_undelivered`). Only a packet never sent
    /// again counts (an earlier copy of one may have arrived), and only the oldest is kept.
    pub fn held_back(&mut self, psn: u32) {
        if psn_diff(psn, self.resent_end) >= 0
            && self.held_back.is_none_or(|h| psn_diff(psn, h) < 0)
        {
            self.held_back = Some(psn);
        }
    }

    /// The rate controller (current rate, α, CNPs handled).
    pub fn rate(&self) -> &RateController {
        &self.rate
    }

    /// Why the queue pair went to the error state: the status of the request that failed.
    pub fn last_failure(&self) -> Option<WcStatus> {
        self.failure
    }

    /// Whether the queue pair is in the error state.
    pub fn is_error(&self) -> bool {
        self.state == State::Error
    }

    /// Whether every packet of the posted requests went out at least once and no probe waits:
    /// an ACK can complete requests but let nothing new go.
    pub fn all_sent(&self) -> bool {
        psn_diff(self.send_psn, self.next_post_psn) >= 0 && self.probe_psn.is_none()
    }

    /// Work requests posted and not yet completed.
    pub fn outstanding(&self) -> usize {
        self.sq.len()
    }

    /// The oldest PSN not yet acknowledged.
    pub fn oldest_unacked_psn(&self) -> u32 {
        self.una
    }

    /// Retransmissions left before the oldest request fails (`retry_cnt` minus retries since
    /// the last progress).
    pub fn retries_left(&self) -> u8 {
        self.retry_left
    }

    /// The next PSN a new work request will get.
    pub fn next_psn(&self) -> u32 {
        self.next_post_psn
    }

    /// Queue a work request.
    pub fn post(&mut self, wr: WorkRequest) -> Result<(), PostError> {
        if self.state == State::Error {
            return Err(PostError::QpError);
        }
        if wr.kind.is_write() && wr.len > 1 << 31 {
            return Err(PostError::TooLong);
        }
        let npkts = packet_count(wr.len, self.cfg.pmtu);
        let wqe = Wqe {
            wr,
            first_psn: self.next_post_psn,
            npkts,
        };
        self.sq.push_back(wqe).map_err(|_| PostError::QueueFull)?;
        self.next_post_psn = psn_add(self.next_post_psn, npkts);
        Ok(())
    }

    /// Take the next completion.
    pub fn poll_completion(&mut self) -> Option<Completion> {
        self.cq.pop_front()
    }

    /// When the pacer lets the next packet go ([`RateController::next_send_time_for`]): with a
    /// minimum burst, held back between bursts until one is due, or all that the window and
    /// the posted requests let go now, if less.
    #[inline(always)]
    fn send_time(&self) -> Instant {
        self.rate.next_send_time_for(|| {
            let left = self.window().saturating_sub(self.unacked(self.send_psn));
            let posted = psn_diff(self.next_post_psn, self.send_psn).max(0) as u32;
            let packet =
                u64::from(self.cfg.pmtu.bytes()) + crate::wire::roce::MAX_HEADER_LEN as u64;
            (u64::from(posted.min(left).max(1)) * packet, packet)
        })
    }

    /// Send paced packets in bursts of at least `bytes` ([`RateController::set_min_burst`]).
    pub fn set_min_burst(&mut self, bytes: u32) {
        self.rate.set_min_burst(bytes);
    }

    fn unacked(&self, psn: u32) -> u32 {
        psn_diff(psn, self.una) as u32
    }

    /// Packets that may be in flight unacknowledged now: the loss-adaptive window
    /// ([`LossWindow`]), never above `max_unacked`.
    pub fn window(&self) -> u32 {
        self.window.get()
    }

    /// The IPv4 identification of the packets [`poll_transmit`](Self::poll_transmit) builds
    /// from now on (0 unless set: what Linux writes on an unconnected socket with DF, and what
    /// smoltcp writes). A transport that hands the kernel a batch for UDP segmentation offload
    /// sets the segment's index in the batch: the kernel numbers GSO segments 0, 1, 2, ...
    pub fn set_ipv4_ident(&mut self, ident: u16) {
        self.ipv4_ident = ident;
    }

    /// Build the next packet to send at `now`, if the window, the rate and RNR waits allow.
    #[inline]
    pub fn poll_transmit<S: PayloadSource + ?Sized>(
        &mut self,
        now: Instant,
        src: &S,
    ) -> Option<TxPacket> {
        // the steady state inline in the caller's loop, everything else out of line
        let mut p = TxPacket::EMPTY;
        if self.poll_middle_into(now, src, &mut p) {
            return Some(p);
        }
        self.poll_transmit_general(now, src)
    }

    /// [`poll_transmit`](Self::poll_transmit) into a slot the caller keeps (a transmit ring's
    /// entry, a batch being filled): the steady state writes the packet's fields in place
    /// instead of moving a 128-byte packet twice, which on a Cortex-A9 is a tenth of a MIDDLE
    /// packet's cost beyond its CRC. Returns whether a packet was written; the slot's contents
    /// are unspecified when not.
    #[inline]
    pub fn poll_transmit_into<S: PayloadSource + ?Sized>(
        &mut self,
        now: Instant,
        src: &S,
        slot: &mut TxPacket,
    ) -> bool {
        if self.poll_middle_into(now, src, slot) {
            return true;
        }
        match self.poll_transmit_general(now, src) {
            Some(p) => {
                *slot = p;
                true
            }
            None => false,
        }
    }

    /// [`poll_transmit`](Self::poll_transmit) for every packet but a MIDDLE in the steady
    /// state: FIRST, LAST and ONLY packets, retransmissions, probes, and the packets that close
    /// a window or ask for an ACK out of turn.
    #[inline(never)]
    fn poll_transmit_general<S: PayloadSource + ?Sized>(
        &mut self,
        now: Instant,
        src: &S,
    ) -> Option<TxPacket> {
        if self.state != State::Ready {
            return None;
        }
        if let Some(t) = self.rnr_until {
            if now < t {
                return None;
            }
            self.rnr_until = None;
        }
        // a probe of the packet a go-back sends next anyway would send it twice
        let probe = self.probe_psn.take().filter(|p| {
            psn_diff(*p, self.una) >= 0 && psn_diff(*p, self.sent_end) < 0 && *p != self.send_psn
        });
        let psn = match probe {
            Some(p) => p,
            None => {
                if psn_diff(self.send_psn, self.next_post_psn) >= 0 {
                    return None; // nothing posted beyond what was sent
                }
                if self.unacked(self.send_psn) >= self.window() && !self.probe_new_due {
                    return None;
                }
                if now < self.send_time() {
                    return None;
                }
                self.send_psn
            }
        };
        let wqe = self.wqe_of(psn)?;
        let index = psn_diff(psn, wqe.first_psn) as u32;
        let seg = segment(wqe.wr.kind, wqe.wr.len, self.cfg.pmtu, index, false);
        let last = index + 1 == wqe.npkts;
        let retransmission = psn_diff(psn, self.sent_end) < 0;
        let window = self.window();
        let ack_req = probe.is_some()
            || self.probe_new_due
            || last
            || self.unacked(psn) + 1 >= window
            || self.ack_req_spacing_due(window);
        let solicited = last && wqe.wr.solicited;
        let payload = PayloadRef {
            handle: wqe.wr.payload.handle,
            offset: wqe.wr.payload.offset + u64::from(seg.offset),
        };
        let len = seg.len as usize;
        let bytes = if self.cfg.icrc_offload {
            src.contains(payload.handle, payload.offset, len)
                .then_some(None)
        } else {
            src.payload(payload.handle, payload.offset, len).map(Some)
        };
        let Some(bytes) = bytes else {
            self.fail_from(psn, WcStatus::LocalProtectionError);
            return None;
        };
        let mut pkt = TxPacket {
            header: [0; MAX_HEADER_LEN],
            header_len: 0,
            trailer: [0; 7],
            trailer_len: 0,
            payload,
            payload_len: seg.len,
            psn,
            retransmission,
            icrc_pending: bytes.is_none(),
        };
        let (hl, tl) = self.emit(&wqe, seg, psn, ack_req, solicited, bytes, &mut pkt)?;
        pkt.header_len = hl as u8;
        pkt.trailer_len = tl as u8;
        self.counters.tail_probes += u64::from(probe.is_some());
        self.probe_new_due = false;
        if probe.is_some() {
            self.probed = probe;
            self.count_sent(now, &pkt);
            // a probe changes nothing of what is sent next; its answer (an ACK, a re-ACK of a
            // duplicate, or a NAK for what is missing) does. That answer cannot tell which send
            // of the probed packet it follows (Karn): no round-trip sample from it.
            self.sent_times.clear();
            return Some(pkt);
        }
        self.sent(now, &pkt, ack_req);
        Some(pkt)
    }

    /// Whether the next packet asks for an ACK by spacing alone: every `ack_req_every` packets,
    /// and at least four times per `window`, so ACKs keep a small window moving.
    #[inline(always)]
    fn ack_req_spacing_due(&self, window: u32) -> bool {
        self.packets_since_ackreq + 1 >= self.cfg.ack_req_every.min((window / 4).max(1))
    }

    /// The counters and the rate controller's share of sending `pkt` at `now`.
    #[inline(always)]
    fn count_sent(&mut self, now: Instant, pkt: &TxPacket) {
        if pkt.retransmission {
            if self.held_back == Some(pkt.psn) {
                self.held_back = None; // sent again
            }
            let end = psn_add(pkt.psn, 1);
            if psn_diff(end, self.resent_end) > 0 {
                self.resent_end = end;
            }
        }
        let c = &mut self.counters;
        c.packets_sent += 1;
        c.payload_bytes_sent += u64::from(pkt.payload_len);
        c.wire_bytes_sent += pkt.len() as u64;
        c.retransmitted_packets += u64::from(pkt.retransmission);
        self.rate.on_sent(now, pkt.len());
    }

    /// The bookkeeping of sending `pkt` (not a probe) at `now`: counters, ACK-request spacing,
    /// round-trip samples, the next PSN, the ACK timer.
    #[inline(always)]
    fn sent(&mut self, now: Instant, pkt: &TxPacket, ack_req: bool) {
        self.count_sent(now, pkt);
        let (psn, retransmission) = (pkt.psn, pkt.retransmission);
        self.packets_since_ackreq = if ack_req {
            self.ackreq_psn = psn;
            0
        } else {
            self.packets_since_ackreq + 1
        };
        if psn_diff(self.una, self.sent_end) >= 0 {
            self.waiting_since = now; // nothing was outstanding: the wait starts now
        }
        if ack_req && !retransmission {
            if self.sent_times.is_full() {
                self.sent_times.pop_front();
            }
            let _ = self.sent_times.push_back((psn, now));
        }
        self.send_psn = psn_add(psn, 1);
        if !retransmission {
            self.sent_end = self.send_psn;
        }
        // The timer runs from the newest ACK-requesting packet, so pacing a long window out
        // slowly cannot fire it while ACKs are still due. Armed by a packet that asks for no
        // ACK (the first after a quiet spell), it waits for the request the pacer still holds.
        if ack_req {
            (self.ack_deadline, self.probe_at) = self.timers(now);
        } else if self.ack_deadline.is_none() {
            self.arm_before_ack_request(now);
        }
    }

    /// The next packet when it is the MIDDLE packet of a long message, sent for the first time
    /// with nothing else pending (no probe, RNR wait or go-back; window and rate open), through
    /// the template of the message's MIDDLE packets: the steady state of streaming a frame,
    /// with nothing worked out again that depends only on the message. `None` hands over to
    /// the general path, which sends the same bytes.
    #[inline(always)]
    fn poll_middle_into<S: PayloadSource + ?Sized>(
        &mut self,
        now: Instant,
        src: &S,
        pkt: &mut TxPacket,
    ) -> bool {
        let psn = self.send_psn;
        if self.state != State::Ready
            || self.rnr_until.is_some()
            || self.probe_psn.is_some()
            || self.probe_new_due
            || psn != self.sent_end
        {
            return false;
        }
        let Some(w) = self.last_wqe else {
            return false;
        };
        let index = psn_diff(psn, w.first_psn);
        let window = self.window();
        let unacked = self.unacked(psn);
        if index <= 0
            || index as u32 + 1 >= w.npkts
            || unacked + 1 >= window
            || now < self.send_time()
        {
            return false;
        }
        let opcode = match w.wr.kind {
            MessageKind::Write | MessageKind::WriteImm => Opcode::RC_WRITE_MIDDLE,
            MessageKind::Send | MessageKind::SendImm => Opcode::RC_SEND_MIDDLE,
        };
        let len = self.cfg.pmtu.bytes();
        let Some((key, t)) = self.templates[usize::from(opcode.0) % TEMPLATE_SLOTS].as_ref() else {
            return false;
        };
        if key.opcode != opcode.0 || key.len != len || key.ecn != self.cfg.path.ecn || key.solicited
        {
            return false;
        }
        let ack_req = self.ack_req_spacing_due(window);
        let payload = PayloadRef {
            handle: w.wr.payload.handle,
            offset: w.wr.payload.offset + u64::from(index as u32) * u64::from(len),
        };
        let f = PacketFields {
            psn,
            ack_req,
            ident: self.ipv4_ident,
            ..PacketFields::default()
        };
        // the slot's fields one by one: no packet-sized temporary to copy
        pkt.header_len = t.emit_header(&f, &mut pkt.header) as u8;
        pkt.trailer_len = if self.cfg.icrc_offload {
            if !src.contains(payload.handle, payload.offset, len as usize) {
                return false; // the general path fails the request
            }
            zero_trailer(len as usize, &mut pkt.trailer)
        } else {
            let Some(b) = src.payload(payload.handle, payload.offset, len as usize) else {
                return false;
            };
            let Ok(tl) = t.trailer(&f, &pkt.header, [b], &mut pkt.trailer) else {
                return false;
            };
            tl
        } as u8;
        pkt.payload = payload;
        pkt.payload_len = len;
        pkt.psn = psn;
        pkt.retransmission = false;
        pkt.icrc_pending = self.cfg.icrc_offload;
        self.sent(now, pkt, ack_req);
        true
    }

    /// The send-queue entry whose PSN range holds `psn`: the one found last (the packets of a
    /// long message), else a binary search of the queue's two slices, whose entries are in PSN
    /// order (a linear scan of 64 one-packet WRITEs cost ~300 instructions a packet). Entries
    /// never change once posted, so the copy kept stays right while its PSNs are sent.
    fn wqe_of(&mut self, psn: u32) -> Option<Wqe> {
        if let Some(w) = self.last_wqe {
            if psn_diff(psn, w.first_psn) >= 0 && psn_diff(psn, w.last_psn()) <= 0 {
                return Some(w);
            }
            // the next message's entry, the common case of sending in order
            if psn == psn_add(w.last_psn(), 1)
                && let Some(pos) = (self.last_wqe_at + 1).checked_sub(self.sq_popped)
                && let Some(next) = self.sq_entry(pos as usize)
                && next.first_psn == psn
            {
                self.last_wqe = Some(next);
                self.last_wqe_at += 1;
                return Some(next);
            }
        }
        let (w, pos) = self.search_wqe(psn)?;
        self.last_wqe = Some(w);
        self.last_wqe_at = self.sq_popped + pos as u64;
        Some(w)
    }

    /// The send-queue entry at `pos` from the front.
    #[inline]
    fn sq_entry(&self, pos: usize) -> Option<Wqe> {
        let (a, b) = self.sq.as_slices();
        match a.get(pos) {
            Some(w) => Some(*w),
            None => b.get(pos - a.len()).copied(),
        }
    }

    /// The entry holding `psn` and its position from the front of the queue.
    fn search_wqe(&self, psn: u32) -> Option<(Wqe, usize)> {
        let (a, b) = self.sq.as_slices();
        let mut base = 0;
        for part in [a, b] {
            // the first entry whose last PSN is not before `psn`
            let i = part.partition_point(|w| psn_diff(w.last_psn(), psn) < 0);
            if let Some(w) = part.get(i)
                && psn_diff(psn, w.first_psn) >= 0
            {
                return Some((*w, base + i));
            }
            base += part.len();
        }
        None
    }

    /// The headers and trailer of `wqe`'s packet `seg` with `psn` into `pkt`, through the
    /// header template of the packet's shape (built from the plain path's headers when the
    /// shape is new). Without `bytes` (a data mover computes the ICRC) the trailer is the pad
    /// and four zero bytes. Returns the header and trailer lengths.
    #[allow(clippy::too_many_arguments)]
    #[inline]
    fn emit(
        &mut self,
        wqe: &Wqe,
        seg: Segment,
        psn: u32,
        ack_req: bool,
        solicited: bool,
        bytes: Option<&[u8]>,
        pkt: &mut TxPacket,
    ) -> Option<(usize, usize)> {
        let shape = TemplateKey {
            opcode: seg.opcode.0,
            solicited,
            ecn: self.cfg.path.ecn,
            len: seg.len,
        };
        let slot = usize::from(seg.opcode.0) % TEMPLATE_SLOTS;
        let t = match &self.templates[slot] {
            Some((k, t)) if *k == shape => t,
            _ => {
                let t = self.template_for(shape)?;
                &self.templates[slot].insert((shape, t)).1
            }
        };
        let f = PacketFields {
            psn,
            ack_req,
            ident: self.ipv4_ident,
            reth: RethRepr {
                va: wqe.wr.remote_va,
                rkey: wqe.wr.rkey,
                dma_len: wqe.wr.len,
            },
            imm: wqe.wr.imm,
        };
        match bytes {
            Some(b) => t.emit(&f, [b], &mut pkt.header, &mut pkt.trailer).ok(),
            None => {
                let hl = t.emit_header(&f, &mut pkt.header);
                Some((hl, zero_trailer(seg.len as usize, &mut pkt.trailer)))
            }
        }
    }

    /// The header template of packets of `shape`, from the plain path's headers.
    #[cold]
    fn template_for(&self, shape: TemplateKey) -> Option<HeaderTemplate> {
        let opcode = Opcode(shape.opcode);
        let h = opcode.headers();
        let mut bth = BthRepr::new(opcode, self.cfg.remote_qpn, 0);
        bth.solicited = shape.solicited;
        let mut ib = IbRepr::new(bth);
        if h.reth {
            ib.reth = Some(RethRepr::default());
        }
        if h.immdt {
            ib.immdt = Some(0);
        }
        let repr = RoceV2Repr {
            ip: self.cfg.path.ip_repr(shape.ecn)?,
            src_port: self.src_port,
            dst_port: self.cfg.path.dst_port,
            ib,
            payload_len: shape.len as usize,
        };
        HeaderTemplate::new(&repr).ok()
    }

    fn complete(&mut self, wr: WorkRequest, status: WcStatus) {
        if status == WcStatus::Success {
            self.counters.completed += 1;
        } else {
            self.counters.failed += 1;
        }
        let c = Completion {
            wr_id: wr.wr_id,
            status,
            kind: wr.kind,
            len: wr.len,
        };
        if self.cq.push_back(c).is_err() {
            // A full completion queue is a caller bug; keep the newest error visible.
            let _ = self.cq.pop_front();
            let _ = self.cq.push_back(c);
        }
    }

    /// Move to the error state: the request holding `psn` fails with `status`, the rest flush.
    fn fail_from(&mut self, psn: u32, status: WcStatus) {
        self.state = State::Error;
        self.failure.get_or_insert(status);
        self.ack_deadline = None;
        self.rnr_until = None;
        while let Some(w) = self.sq.pop_front() {
            let holds = psn_diff(psn, w.first_psn) >= 0 && psn_diff(psn, w.last_psn()) <= 0;
            self.sq_popped += 1;
            let s = if holds { status } else { WcStatus::Flushed };
            self.complete(w.wr, s);
        }
    }
}
