//! The RC send queue: work requests in, RoCEv2 packets out, made reliable.

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

/// Static settings of a requester (the QP attributes of `ibv_modify_qp` RTR/RTS).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RequesterConfig {
    /// This side's QP number (24 bits).
    pub local_qpn: u32,
    /// The peer's QP number: destination of every packet.
    pub remote_qpn: u32,
    /// Path MTU; must equal the responder's.
    pub pmtu: Pmtu,
    /// First PSN (`sq_psn`); the responder's `rq_psn` must match.
    pub start_psn: u32,
    /// Local ACK timeout code: 4.096 µs × 2^timeout; 0 = wait forever. The longest the
    /// requester waits for an ACK before going back; once round trips have been measured it
    /// goes back sooner, after an RTT-based timeout (RFC 6298, at least 500 µs).
    pub timeout: u8,
    /// How long the requester keeps trying without progress: the oldest request fails once
    /// no ACK has advanced for (`retry_cnt` + 1) local ACK timeouts (0..=7; unlike rxe, 7 is
    /// not infinite). With the timer at its configured value this is IBTA's count of
    /// timeouts; retransmissions triggered sooner (a sequence NAK, the RTT-based timer) do not
    /// use the budget up, and any ACK that advances restores it.
    pub retry_cnt: u8,
    /// Retries after RNR NAKs (0..=7; 7 = forever).
    pub rnr_retry: u8,
    /// Request an ACK at least every this many packets (and always on a message's last packet).
    pub ack_req_every: u32,
    /// Most packets in flight without an ACK (must stay well below 2^23): the largest the
    /// loss-adaptive window grows to (see [`Requester::window`]).
    pub max_unacked: u32,
    /// Addresses, DSCP, ECN, TTL.
    pub path: Path,
    /// Static limit and DCQCN.
    pub rate: RateConfig,
    /// A round trip more than twice the shortest plus this many ns means packets queue: the
    /// window stops growing ([`Requester::window`]). 20 µs by default, for a NIC or an FPGA
    /// whose round trips are steady; a userspace stack on shared cores, whose round trips
    /// jitter with scheduling, needs more.
    pub queue_slack_ns: u64,
    /// The shortest RTT-based retransmission timeout ([`MIN_RTO`] by default, for a NIC or an
    /// FPGA whose answers come within microseconds). A peer in software on shared cores may
    /// pause for milliseconds with nothing lost; the estimator learns such pauses, but a floor
    /// that suits the peer spares the first one. Half of it applies within [`LOSS_MEMORY`] of a
    /// sequence NAK.
    pub min_rto: Duration,
    /// A data mover (an FPGA DMA engine) builds the packets: the requester never reads a
    /// payload byte, leaves the ICRC to the mover (its four bytes zero, `icrc_pending` set) and
    /// only checks that the payload's range exists ([`PayloadSource::contains`]). Each packet
    /// becomes a [`TxDescriptor`](super::offload::TxDescriptor); docs/firmware.md.
    pub icrc_offload: bool,
}

impl RequesterConfig {
    /// Defaults: PMTU 4096, timeout 14 (67 ms), retry_cnt 6, rnr_retry 7, AckReq every 64
    /// packets, window 1024 packets, no rate limit.
    pub const fn new(local_qpn: u32, remote_qpn: u32, start_psn: u32, path: Path) -> Self {
        RequesterConfig {
            local_qpn,
            remote_qpn,
            pmtu: Pmtu::Mtu4096,
            start_psn,
            timeout: 14,
            retry_cnt: 6,
            rnr_retry: 7,
            ack_req_every: 64,
            max_unacked: 1024,
            path,
            rate: RateConfig {
                static_limit: None,
                dcqcn: None,
            },
            queue_slack_ns: QUEUE_SLACK_NS,
            min_rto: MIN_RTO,
            icrc_offload: false,
        }
    }
}

/// One message to send.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WorkRequest {
    /// The caller's identifier, returned in the completion.
    pub wr_id: u64,
    /// SEND, SEND with immediate, WRITE, WRITE with immediate.
    pub kind: MessageKind,
    /// Where the bytes live.
    pub payload: PayloadRef,
    /// Message length in bytes (at most 2^31 for WRITEs).
    pub len: u32,
    /// Remote virtual address (WRITE only).
    pub remote_va: u64,
    /// Remote key (WRITE only).
    pub rkey: u32,
    /// Immediate data (the "with immediate" kinds).
    pub imm: u32,
    /// Ask for a solicited event at the peer on the last packet.
    pub solicited: bool,
}

/// How a work request ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WcStatus {
    /// Acknowledged: the peer placed every byte.
    Success,
    /// `retry_cnt` timeouts or sequence NAKs in a row (`IBV_WC_RETRY_EXC_ERR`).
    RetryExceeded,
    /// `rnr_retry` RNR NAKs in a row (`IBV_WC_RNR_RETRY_EXC_ERR`).
    RnrRetryExceeded,
    /// The peer answered NAK invalid request (`IBV_WC_REM_INV_REQ_ERR`).
    RemoteInvalidRequest,
    /// The peer answered NAK remote access error: bad R_Key or range (`IBV_WC_REM_ACCESS_ERR`).
    RemoteAccessError,
    /// The peer answered NAK remote operational error (`IBV_WC_REM_OP_ERR`).
    RemoteOperationalError,
    /// The payload could not be read from the caller's buffer (`IBV_WC_LOC_PROT_ERR`).
    LocalProtectionError,
    /// Flushed because the queue pair went to the error state (`IBV_WC_WR_FLUSH_ERR`).
    Flushed,
}

/// A finished work request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Completion {
    /// The work request's identifier.
    pub wr_id: u64,
    /// Outcome.
    pub status: WcStatus,
    /// What it was.
    pub kind: MessageKind,
    /// Message length.
    pub len: u32,
}

/// Why [`Requester::post`] refused a work request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PostError {
    /// The send queue is full; poll completions first.
    QueueFull,
    /// The queue pair is in the error state.
    QpError,
    /// A WRITE longer than 2^31 bytes.
    TooLong,
}

/// Counters a host team can compare with their NIC's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RequesterCounters {
    /// Packets sent, retransmissions included.
    pub packets_sent: u64,
    /// Payload bytes sent, retransmissions included.
    pub payload_bytes_sent: u64,
    /// IP bytes sent (headers, payload, pad, ICRC).
    pub wire_bytes_sent: u64,
    /// Packets sent again (after a NAK, RNR NAK or timeout).
    pub retransmitted_packets: u64,
    /// PSN sequence error NAKs acted on.
    pub seq_naks: u64,
    /// RNR NAKs received.
    pub rnr_naks: u64,
    /// Local ACK timeouts.
    pub timeouts: u64,
    /// ACKs that moved the window.
    pub acks: u64,
    /// Times the window was cut (a loss: a sequence NAK or an ACK timeout).
    pub window_cuts: u64,
    /// The window now, packets (a gauge, not a count).
    pub window: u64,
    /// Smoothed round trip, ns (0 until measured; a gauge).
    pub srtt_ns: u64,
    /// Shortest round trip seen, ns (0 until measured; a gauge).
    pub min_rtt_ns: u64,
    /// ACK/NAKs ignored as duplicate, stale or for PSNs never sent.
    pub stale_acks: u64,
    /// CNPs received.
    pub cnps: u64,
    /// Loss probes sent (the oldest unacknowledged packet again after a round trip of silence
    /// on a lossy path).
    pub tail_probes: u64,
    /// Loss probes answered by an ACK for the probed packet alone, with more sent after it: the
    /// responder had dropped what followed, and sending went back to the packet after it.
    pub probe_gobacks: u64,
    /// ACK timeouts found spurious (an ACK for packets sent before the timeout came after it):
    /// their window cut was undone.
    pub spurious_timeouts: u64,
    /// ACK timeouts on a path that lost nothing lately answered by sending the next new packet
    /// instead of going back (a late peer then acknowledges everything; nothing is sent twice).
    pub new_data_probes: u64,
    /// ACK timeouts on a path that lost nothing lately, with nothing new to send, answered by
    /// waiting a doubled timeout instead of going back (a late peer then acknowledges the tail;
    /// nothing is sent twice).
    pub quiet_waits: u64,
    /// Work requests completed successfully.
    pub completed: u64,
    /// Work requests completed with an error.
    pub failed: u64,
}

/// A packet ready to leave, in gather form: headers, the payload as a reference into the
/// caller's buffer, then pad and ICRC. Send `header() ‖ payload bytes ‖ trailer()`.
#[derive(Debug, Clone)]
pub struct TxPacket {
    header: [u8; MAX_HEADER_LEN],
    header_len: u8,
    trailer: [u8; 7],
    trailer_len: u8,
    /// Where the payload bytes are.
    pub payload: PayloadRef,
    /// Payload length.
    pub payload_len: u32,
    /// The packet's PSN.
    pub psn: u32,
    /// Whether this PSN was sent before.
    pub retransmission: bool,
    /// The ICRC is left to a data mover ([`RequesterConfig::icrc_offload`]): the trailer's
    /// last four bytes are zero until it computes them.
    pub icrc_pending: bool,
}

impl TxPacket {
    /// A packet slot to fill with [`Requester::poll_transmit_into`]: no headers, no payload.
    pub const EMPTY: TxPacket = TxPacket {
        header: [0; MAX_HEADER_LEN],
        header_len: 0,
        trailer: [0; 7],
        trailer_len: 0,
        payload: PayloadRef {
            handle: 0,
            offset: 0,
        },
        payload_len: 0,
        psn: 0,
        retransmission: false,
        icrc_pending: false,
    };

    /// IP, UDP and InfiniBand headers.
    #[inline]
    pub fn header(&self) -> &[u8] {
        &self.header[..usize::from(self.header_len)]
    }
    /// Pad and ICRC.
    #[inline]
    pub fn trailer(&self) -> &[u8] {
        &self.trailer[..usize::from(self.trailer_len)]
    }
    /// Whole IP packet length.
    #[inline]
    pub fn len(&self) -> usize {
        usize::from(self.header_len) + self.payload_len as usize + usize::from(self.trailer_len)
    }
    /// Whether the packet is empty (never: it has headers).
    pub fn is_empty(&self) -> bool {
        false
    }
    /// The UDP payload (what a UDP socket sends): headers after IP and UDP, the payload, pad
    /// and ICRC; its length.
    pub fn udp_len(&self) -> usize {
        let ip = match self.header.first().map(|b| b >> 4) {
            Some(6) => 40,
            _ => 20,
        };
        self.len() - ip - crate::wire::udp::HEADER_LEN
    }

    /// Give an IPv4 packet another IPv4 identification: the header checksum and the ICRC
    /// (which covers the identification) are recomputed over `payload`, the packet's payload
    /// bytes. UDP segmentation offload numbers the segments of one send 0, 1, 2, ...; a packet
    /// built for one place in a batch and sent at another needs this. IPv6 packets have no
    /// identification: unchanged.
    pub fn set_ipv4_ident(&mut self, ident: u16, payload: &[u8]) -> Result<(), crate::wire::Error> {
        let hl = usize::from(self.header_len);
        if self.header[0] >> 4 != 4 {
            return Ok(());
        }
        if payload.len() != self.payload_len as usize || self.trailer_len < 4 {
            return Err(crate::wire::Error::Truncated);
        }
        let h = &mut self.header[..hl];
        h[4..6].copy_from_slice(&ident.to_be_bytes());
        h[10..12].copy_from_slice(&[0, 0]);
        let sum = crate::wire::ipv4::checksum(&h[..20]);
        h[10..12].copy_from_slice(&sum.to_be_bytes());
        let (ip, rest) = h.split_at(20);
        let (udp_hdr, rest) = rest.split_at(crate::wire::udp::HEADER_LEN);
        let (bth_hdr, ext) = rest.split_at(crate::wire::bth::HEADER_LEN);
        let mut c = crate::wire::icrc::Icrc::rocev2_ipv4(ip, udp_hdr, bth_hdr)?;
        c.update(ext);
        c.update(payload);
        let tl = usize::from(self.trailer_len);
        c.update(&self.trailer[..tl - 4]);
        self.trailer[tl - 4..tl].copy_from_slice(&c.finish().to_le_bytes());
        Ok(())
    }

    /// Copy the whole packet into `buf` (for transports without gather I/O); returns its length.
    pub fn copy_to<S: PayloadSource + ?Sized>(&self, src: &S, buf: &mut [u8]) -> Option<usize> {
        let n = self.len();
        let h = usize::from(self.header_len);
        let p = self.payload_len as usize;
        let out = buf.get_mut(..n)?;
        out[..h].copy_from_slice(self.header());
        out[h..h + p].copy_from_slice(src.payload(self.payload.handle, self.payload.offset, p)?);
        out[h + p..].copy_from_slice(self.trailer());
        Some(n)
    }
}

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
/// 1 + 2 + 4 timeouts of silence (beside a busy loop, where a host thread waits up to a 4 ms
/// tick for its core, a 60 s soak at 1000 fps went back 3 times with one probe, each time for
/// a pause).
const NEW_DATA_PROBES: u32 = 2;

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
    retry_left: u8,
    rnr_left: u8,
    /// PSN a NAK-triggered go-back started from, until an ACK passes it.
    retrying_from: Option<u32>,
    ack_deadline: Option<Instant>,
    /// When to send a loss probe (the oldest unacknowledged packet again, ACK requested) if
    /// nothing was acknowledged and nothing new asked for an ACK by then.
    probe_at: Option<Instant>,
    /// A timeout on a clean path waited out (a new-data probe, or a quiet wait): when the packet
    /// that armed that timer left (the answer's delay is a round trip to learn), until an ACK or
    /// NAK answers it.
    probe_new: Option<Instant>,
    /// That probe is still to be sent (one packet beyond the window).
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
            retry_left: cfg.retry_cnt,
            rnr_left: cfg.rnr_retry,
            retrying_from: None,
            ack_deadline: None,
            probe_at: None,
            probe_psn: None,
            probed: None,
            probe_new: None,
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

    fn unacked(&self, psn: u32) -> u32 {
        psn_diff(psn, self.una) as u32
    }

    /// Packets that may be in flight unacknowledged now: the loss-adaptive window
    /// ([`LossWindow`]), never above `max_unacked`.
    pub fn window(&self) -> u32 {
        self.window.get()
    }

    /// A loss at `psn` was detected: cut the window (once per window of packets).
    fn on_loss(&mut self, now: Instant, psn: u32, timeout: bool) {
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
                if now < self.rate.next_send_time() {
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
        // slowly cannot fire it while ACKs are still due.
        if self.ack_deadline.is_none() || ack_req {
            (self.ack_deadline, self.probe_at) = self.timers(now);
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
            || now < self.rate.next_send_time()
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

    /// When [`handle_timeout`](Self::handle_timeout) or [`poll_transmit`](Self::poll_transmit)
    /// next has something to do; `None` when only a received packet or a post can change that.
    pub fn poll_timeout(&self) -> Option<Instant> {
        if self.state != State::Ready {
            return None;
        }
        let mut t = self.rate.poll_timeout();
        let mut earliest = |x: Option<Instant>| {
            if let Some(x) = x {
                t = Some(t.map_or(x, |t| t.min(x)));
            }
        };
        earliest(self.ack_deadline);
        earliest(self.probe_at);
        earliest(self.rnr_until);
        if self.probe_psn.is_some() && self.rnr_until.is_none() {
            earliest(Some(Instant::ZERO));
        }
        let can_send = psn_diff(self.send_psn, self.next_post_psn) < 0
            && (self.unacked(self.send_psn) < self.window() || self.probe_new_due);
        if can_send && self.rnr_until.is_none() {
            earliest(Some(self.rate.next_send_time()));
        }
        t
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
        let before = self.window.snapshot();
        // the packet that armed the timer left one timeout before now
        let armed_at = Instant(now.0.saturating_sub(self.rto_ns(now).unwrap_or(0)));
        self.on_loss(now, self.una, true);
        self.last_timeout = Some((now, armed_at, before));
        self.retry_left = self.retry_left.saturating_sub(1);
        // random loss, not congestion, is what times out here: back off twice at most
        self.backoff = (self.backoff + 1).min(2);
        self.sent_times.clear(); // Karn: no sample from what is sent again
        self.probe_new = None;
        self.probe_new_due = false;
        self.retrying_from = None;
        self.send_psn = self.una;
        self.probe_psn = None;
        self.probed = None;
        self.ack_deadline = self.deadline(now);
        self.probe_at = None;
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
    fn wait_out_a_pause(&mut self, now: Instant) -> bool {
        if self.lossy(now)
            || self.backoff >= NEW_DATA_PROBES
            || self.rnr_until.is_some()
            || self.send_psn != self.sent_end
        {
            return false;
        }
        let armed_at = Instant(now.0.saturating_sub(self.rto_ns(now).unwrap_or(0)));
        if psn_diff(self.sent_end, self.next_post_psn) < 0 {
            self.counters.new_data_probes += 1;
            self.probe_new_due = true;
        } else {
            self.counters.quiet_waits += 1;
        }
        if self.probe_new.is_none() {
            self.probe_new = Some(armed_at);
        }
        self.backoff += 1;
        self.ack_deadline = self.deadline(now);
        self.probe_at = None;
        true
    }

    /// Feed the InfiniBand part (BTH to ICRC) of a packet addressed to this QP: ACK/NAK or CNP.
    /// The ICRC has been checked by the caller (or cannot be, on a UDP socket). Returns false
    /// when the packet was not for the requester.
    pub fn handle_ib(&mut self, now: Instant, ib: &[u8]) -> bool {
        let Ok((repr, _)) = IbRepr::parse(ib) else {
            return false;
        };
        if repr.bth.dest_qp != self.cfg.local_qpn {
            return false;
        }
        match repr.bth.opcode.info().map(|i| i.transport) {
            Some(Transport::Cnp) => {
                self.counters.cnps += 1;
                self.rate.on_cnp(now);
                true
            }
            Some(Transport::Rc) if repr.bth.opcode == Opcode::RC_ACK => {
                if let Some(aeth) = repr.aeth {
                    self.handle_ack(now, repr.bth.psn, aeth.syndrome);
                }
                true
            }
            _ => false,
        }
    }

    fn handle_ack(&mut self, now: Instant, psn: u32, syndrome: AethSyndrome) {
        if self.state != State::Ready {
            return;
        }
        // An ACK covers `psn`; a NAK names the PSN it expects (everything before is acked).
        let acked_end = match syndrome {
            AethSyndrome::Ack { .. } => psn_add(psn, 1),
            _ => psn,
        };
        if psn_diff(acked_end, self.una) < 0 || psn_diff(acked_end, self.sent_end) > 0 {
            self.counters.stale_acks += 1;
            return;
        }
        if matches!(syndrome, AethSyndrome::Ack { .. }) && acked_end == self.una {
            // duplicate ACK of what is already acknowledged
            self.counters.stale_acks += 1;
            return;
        }
        if !matches!(syndrome, AethSyndrome::Ack { .. }) {
            // a NAK answers a new-data probe with a loss: no round trip to learn
            self.probe_new = None;
        }
        let probed = self.probed.take();
        self.advance_una(now, acked_end);
        match syndrome {
            AethSyndrome::Ack { .. } => {
                self.counters.acks += 1;
                if probed.is_some_and(|p| psn_add(p, 1) == acked_end)
                    && psn_diff(acked_end, self.send_psn) < 0
                {
                    // The probe found the responder waiting for the probed packet: it NAKs a
                    // gap once and then drops what follows in silence, so that NAK or the first
                    // resend after it was lost, and everything sent after the probed packet,
                    // before the probe, was dropped. Go back now, not a round trip later on the
                    // NAK new data would bring (`rdmacam demo` at 20 % loss: goodput x1.3, half
                    // the timeouts; at 1 and 5 % the timeouts drop 4-6x, goodput stays).
                    self.counters.probe_gobacks += 1;
                    self.go_back_from(acked_end);
                }
            }
            AethSyndrome::Nak(NakCode::PsnSequenceError) => {
                if psn_diff(psn, self.sent_end) >= 0 {
                    return; // expects what we have not sent yet: nothing to resend
                }
                if self.retrying_from == Some(psn) {
                    self.counters.stale_acks += 1;
                    return; // already going back from there
                }
                self.counters.seq_naks += 1;
                // the responder is alive and says what it misses: a loss signal, not a retry
                // that uses the budget up (only time without progress does)
                if self.out_of_retries(now) {
                    self.fail_from(psn, WcStatus::RetryExceeded);
                    return;
                }
                self.on_loss(now, psn, false);
                self.go_back_from(psn);
            }
            AethSyndrome::RnrNak { timer } => {
                self.counters.rnr_naks += 1;
                if self.cfg.rnr_retry != 7 {
                    if self.rnr_left == 0 {
                        self.fail_from(psn, WcStatus::RnrRetryExceeded);
                        return;
                    }
                    self.rnr_left -= 1;
                }
                self.rnr_until =
                    Some(now + Duration::from_micros(u64::from(rnr_timer_micros(timer))));
                self.send_psn = psn;
                // The responder also NAKs the next packet for a sequence error at this PSN
                // (rxe does); that NAK belongs to this retry and must not use up retry_cnt.
                self.retrying_from = Some(psn);
                // the ACK timer restarts when sending resumes
                self.ack_deadline = None;
            }
            AethSyndrome::Nak(code) => {
                let status = match code {
                    NakCode::InvalidRequest | NakCode::InvalidRdRequest => {
                        WcStatus::RemoteInvalidRequest
                    }
                    NakCode::RemoteAccessError => WcStatus::RemoteAccessError,
                    _ => WcStatus::RemoteOperationalError,
                };
                self.fail_from(psn, status);
            }
        }
    }

    /// Everything before `end` is acknowledged.
    fn advance_una(&mut self, now: Instant, end: u32) {
        if psn_diff(end, self.una) <= 0 {
            return;
        }
        // An ACK after a timeout that covers packets not yet sent again, or that comes sooner
        // than any answer to what was sent again could, answers the packets sent before it:
        // the timeout was spurious (a host or a scheduler that paused, not a loss). Undo its
        // window cut; sending resumes from what is acknowledged.
        if let Some((at, armed_at, before)) = self.last_timeout.take() {
            let too_soon = self
                .rtt
                .min()
                .is_some_and(|m| now.0.saturating_sub(at.0) < m);
            if psn_diff(end, self.send_psn) > 0 || too_soon {
                self.window.restore(before);
                self.counters.spurious_timeouts += 1;
                // and what was sent after the acknowledged packets most likely arrived too:
                // resume with new data, not the go-back (F-RTO, RFC 5682); a packet that was
                // lost after all draws a sequence NAK once new data follows it, or the next
                // timeout
                self.send_psn = self.sent_end;
                self.retrying_from = None;
                // nor was anything lost
                self.loss_seen = self.earlier_loss;
                // On a path that lost nothing else lately the peer was slow, not the link
                // lossy: what it took is a round trip the timers must wait out next time. Amid
                // losses the wait also holds recovery, and learning it would only lengthen the
                // next timeout.
                if !self.lossy_before(now, at) {
                    self.rtt.sample(now, now.0.saturating_sub(armed_at.0));
                }
            }
        }
        let queueing = self.rtt.queueing(self.cfg.queue_slack_ns);
        self.window
            .on_acked(psn_diff(end, self.una) as u32, queueing);
        if let Some(armed_at) = self.probe_new.take() {
            // the peer was slow, not the link lossy: what it took is a round trip the timers
            // must wait out next time
            self.rtt.sample(now, now.0.saturating_sub(armed_at.0));
        }
        let mut newest = None;
        while let Some(&(p, sent)) = self.sent_times.front()
            && psn_diff(end, p) > 0
        {
            newest = Some(sent);
            self.sent_times.pop_front();
        }
        if let Some(sent) = newest {
            self.rtt.sample(now, now.0.saturating_sub(sent.0));
        }
        self.backoff = 0;
        self.waiting_since = now;
        self.una = end;
        if psn_diff(self.send_psn, end) < 0 {
            self.send_psn = end;
        }
        if let Some(r) = self.retrying_from
            && psn_diff(end, r) > 0
        {
            self.retrying_from = None;
        }
        while let Some(w) = self.sq.front() {
            if psn_diff(w.last_psn(), end) >= 0 {
                break;
            }
            let w = self.sq.pop_front().expect("front exists");
            self.sq_popped += 1;
            self.complete(w.wr, WcStatus::Success);
        }
        self.retry_left = self.cfg.retry_cnt;
        self.rnr_left = self.cfg.rnr_retry;
        (self.ack_deadline, self.probe_at) = if psn_diff(self.una, self.sent_end) < 0 {
            self.timers(now)
        } else {
            (None, None)
        };
    }

    /// Resend from `psn`, which the responder is known to miss: a NAK-started go-back (a second
    /// NAK for `psn` belongs to it) with no round-trip sample from what goes again (Karn).
    fn go_back_from(&mut self, psn: u32) {
        self.sent_times.clear();
        self.retrying_from = Some(psn);
        self.send_psn = psn;
    }

    /// Whether the responder reported a gap (a sequence NAK) within [`LOSS_MEMORY`] of now.
    #[inline(always)]
    fn nak_lately(&self, now: Instant) -> bool {
        self.nak_seen.is_some_and(|t| recent(now, t))
    }

    /// Whether a loss (a sequence NAK, an ACK timeout) was seen within [`LOSS_MEMORY`] of now.
    #[inline]
    fn lossy(&self, now: Instant) -> bool {
        self.loss_seen.is_some_and(|t| recent(now, t))
    }

    /// The retransmission timeout now, ns ([`RttEstimator::rto_ns`] after the timeouts in a
    /// row), never longer than the configured local ACK timeout; `None` when that is infinite.
    #[inline]
    fn rto_ns(&self, now: Instant) -> Option<u64> {
        let (lossy, nak) = self.losses(now);
        self.rto_ns_on(lossy, nak)
    }

    /// Whether a loss was seen within [`LOSS_MEMORY`] of now ([`lossy`](Self::lossy)), and
    /// whether a sequence NAK was (only asked on a lossy path: a NAK is a loss).
    #[inline(always)]
    fn losses(&self, now: Instant) -> (bool, bool) {
        let lossy = self.lossy(now);
        (lossy, lossy && self.nak_lately(now))
    }

    /// [`rto_ns`](Self::rto_ns) on a path that has (`lossy`) or has not lost packets lately,
    /// and whose responder reported a gap lately (`nak`).
    #[inline(always)]
    fn rto_ns_on(&self, lossy: bool, nak: bool) -> Option<u64> {
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

    /// The ACK deadline of a packet asking for an ACK at `now`.
    fn deadline(&self, now: Instant) -> Option<Instant> {
        self.rto_ns(now).map(|t| Instant(now.0 + t))
    }

    /// The ACK deadline and the tail-loss probe time ([`RttEstimator::pto_ns`], armed only
    /// on a lossy path; it sends a probe only within a second of a sequence NAK) of a packet
    /// asking for an ACK at `now`: one timeout computed for both.
    #[inline(always)]
    fn timers(&self, now: Instant) -> (Option<Instant>, Option<Instant>) {
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
    fn lossy_before(&self, now: Instant, timeout_at: Instant) -> bool {
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
    fn out_of_retries(&self, now: Instant) -> bool {
        local_ack_timeout(self.cfg.timeout).is_some_and(|t| {
            now.0.saturating_sub(self.waiting_since.0)
                >= (t.as_nanos() as u64) * (u64::from(self.cfg.retry_cnt) + 1)
        })
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
