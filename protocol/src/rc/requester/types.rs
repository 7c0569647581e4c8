//! What a requester is configured with, takes, reports and emits: its settings, work requests,
//! completions, counters, and the packets it builds.

use super::*;

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
    /// becomes a [`TxDescriptor`](crate::rc::offload::TxDescriptor); docs/firmware.md.
    pub icrc_offload: bool,
    /// How many ACK timeouts in a row, on a path that lost nothing lately, are taken for a
    /// pause of the peer and waited out (doubled, sending nothing again or only the next new
    /// packet) before the requester goes back ([`NEW_DATA_PROBES`](super::NEW_DATA_PROBES) by
    /// default: a camera's window is costly to send twice). 0 goes back at the first timeout:
    /// for a sender of a few small messages, to whom a spurious resend costs nothing and a
    /// wait costs the peer (a host's QUEUE held back is a frame the camera drops).
    pub pause_waits: u32,
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
            pause_waits: super::NEW_DATA_PROBES,
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

impl WorkRequest {
    /// An RDMA WRITE of `len` bytes from `payload` to `remote_va` under `rkey`: no immediate
    /// data, no solicited event.
    pub const fn write(
        wr_id: u64,
        payload: PayloadRef,
        len: u32,
        remote_va: u64,
        rkey: u32,
    ) -> Self {
        WorkRequest {
            wr_id,
            kind: MessageKind::Write,
            payload,
            len,
            remote_va,
            rkey,
            imm: 0,
            solicited: false,
        }
    }

    /// A SEND of `len` bytes from `payload`: no immediate data, no solicited event.
    pub const fn send(wr_id: u64, payload: PayloadRef, len: u32) -> Self {
        WorkRequest {
            wr_id,
            kind: MessageKind::Send,
            payload,
            len,
            remote_va: 0,
            rkey: 0,
            imm: 0,
            solicited: false,
        }
    }

    /// The same request, asking the peer for a solicited event on its last packet.
    pub const fn solicited(self) -> Self {
        WorkRequest {
            solicited: true,
            ..self
        }
    }
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
    /// Local ACK timeouts: every time the ACK timer fired with packets outstanding, the
    /// waits that sent nothing again included ([`Self::quiet_waits`],
    /// [`Self::new_data_probes`]).
    pub timeouts: u64,
    /// ACK timeouts that went back and sent outstanding packets again (ORSP's ACK_TIMEOUTS):
    /// [`Self::timeouts`] without the waits that resent nothing.
    pub go_backs: u64,
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
    /// ACK/NAKs ignored as duplicate, stale, for PSNs never sent, or NAKs naming no packet
    /// outstanding.
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
    /// The headers (Ethernet to RETH), `header_len` of them used; the requester writes them.
    pub(super) header: [u8; MAX_HEADER_LEN],
    pub(super) header_len: u8,
    /// Pad and ICRC, `trailer_len` of them used.
    pub(super) trailer: [u8; 7],
    pub(super) trailer_len: u8,
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
