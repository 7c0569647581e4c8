//! The RC (or UC) receive side, in the order Linux rxe checks things (`rxe_recv.c`,
//! `rxe_resp.c`): addresses, P_Key and QP; PSN; opcode sequence; lengths; R_Key and bounds;
//! receive queue; then placement, completion and acknowledgement.
//!
//! The responder owns no memory: it validates and returns a [`Placement`] naming where the
//! packet's payload goes, and the caller copies it.

use core::net::IpAddr;
use core::time::Duration;

use heapless::{Deque, Vec};

use super::{Instant, Path};
use crate::wire::aeth::{AethRepr, AethSyndrome, CREDITS_UNLIMITED, NakCode};
use crate::wire::bth::{DEFAULT_PKEY, psn_add, psn_diff};
use crate::wire::icrc::ICRC_LEN;
use crate::wire::opcode::{Operation, Position, Transport};
use crate::wire::pmtu::Pmtu;

use crate::wire::{BthRepr, IbRepr, Opcode, RoceV2Repr, bth, cnp};

/// Static settings of a responder (the RTR attributes of the QP).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResponderConfig {
    /// This side's QP number.
    pub local_qpn: u32,
    /// The peer's QP number: destination of ACKs.
    pub remote_qpn: u32,
    /// Path MTU; must equal the requester's.
    pub pmtu: Pmtu,
    /// First PSN expected (`rq_psn`).
    pub expected_psn: u32,
    /// RNR timer code put in RNR NAKs (`min_rnr_timer`; 12 = 0.64 ms).
    pub min_rnr_timer: u8,
    /// Unreliable connected: no ACKs, resynchronise on the next FIRST/ONLY after a loss.
    pub uc: bool,
    /// At most one CNP per this interval (the notification point's `min_time_between_cnps`).
    pub cnp_interval: Duration,
    /// Addresses; packets from any other source are dropped.
    pub path: Path,
}

impl ResponderConfig {
    /// RC defaults: PMTU 4096, RNR timer code 12, one CNP per 50 µs.
    pub const fn new(local_qpn: u32, remote_qpn: u32, expected_psn: u32, path: Path) -> Self {
        ResponderConfig {
            local_qpn,
            remote_qpn,
            pmtu: Pmtu::Mtu4096,
            expected_psn,
            min_rnr_timer: 12,
            uc: false,
            cnp_interval: Duration::from_micros(50),
            path,
        }
    }
}

/// A registered memory region the peer may RDMA WRITE into.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoryRegion {
    /// Remote key.
    pub rkey: u32,
    /// Virtual address of the first byte.
    pub va: u64,
    /// Length in bytes.
    pub len: u64,
}

/// Where a packet's payload goes; the caller copies `data` there.
#[derive(Debug, PartialEq, Eq)]
pub enum Placement<'a> {
    /// RDMA WRITE: into the region of `rkey` at virtual address `va`.
    Write {
        /// Remote key of the region (already checked).
        rkey: u32,
        /// Destination address (already bounds-checked).
        va: u64,
        /// The payload.
        data: &'a [u8],
    },
    /// SEND: into the posted receive `wr_id` at byte `offset`.
    Recv {
        /// The receive work request.
        wr_id: u64,
        /// Byte offset within its buffer (already checked against its length).
        offset: u32,
        /// The payload.
        data: &'a [u8],
    },
}

/// What a receive completion reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecvOpcode {
    /// A SEND arrived (`IBV_WC_RECV`).
    Recv,
    /// An RDMA WRITE with immediate arrived (`IBV_WC_RECV_RDMA_WITH_IMM`).
    RecvRdmaWithImm,
}

/// Status of a receive completion.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecvStatus {
    /// Done.
    Success,
    /// Flushed: the QP went to the error state (`IBV_WC_WR_FLUSH_ERR`).
    Flushed,
}

/// A finished receive work request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecvCompletion {
    /// The receive's identifier.
    pub wr_id: u64,
    /// Outcome.
    pub status: RecvStatus,
    /// SEND or WRITE with immediate.
    pub opcode: RecvOpcode,
    /// Bytes received (SEND) or written (WRITE with immediate).
    pub byte_len: u32,
    /// Immediate data, if any.
    pub imm: Option<u32>,
    /// Whether the last packet asked for a solicited event.
    pub solicited: bool,
}

/// Counters named like rxe's `hw_counters`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ResponderCounters {
    /// Packets that passed address, P_Key and QP checks (`rcvd_pkts`).
    pub rcvd_pkts: u64,
    /// Packets dropped before the PSN check (wrong address, P_Key, QP, state).
    pub dropped: u64,
    /// Out-of-order requests (`out_of_seq_request`).
    pub out_of_seq_request: u64,
    /// Duplicate requests re-ACKed (`duplicate_request`).
    pub duplicate_request: u64,
    /// RNR NAKs sent (`send_rnr_err`).
    pub send_rnr_err: u64,
    /// Receives consumed (`rdma_recvs`).
    pub rdma_recvs: u64,
    /// ACK/NAK packets sent.
    pub acks_sent: u64,
    /// ECN-CE marked packets seen.
    pub ecn_marked: u64,
    /// CNPs sent.
    pub cnps_sent: u64,
    /// Payload bytes placed.
    pub bytes_placed: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Reply {
    Ack { psn: u32, syndrome: AethSyndrome },
    Cnp,
}

#[derive(Debug, Clone, Copy)]
struct RecvWr {
    wr_id: u64,
    len: u32,
}

#[derive(Debug, Clone, Copy)]
enum InMsg {
    None,
    Send {
        wr: RecvWr,
        offset: u32,
    },
    Write {
        rkey: u32,
        va: u64,
        resid: u32,
        dma_len: u32,
    },
}

/// Outcome of the checks, before placement.
enum Verdict {
    Drop,
    Fatal(NakCode),
    Rnr,
}

/// The responder. `RQ` bounds posted receives, `MR` registered regions, `CQ` unread completions.
#[derive(Debug)]
pub struct Responder<const RQ: usize, const MR: usize, const CQ: usize> {
    cfg: ResponderConfig,
    error: bool,
    expected: u32,
    msn: u32,
    nak_sent: bool,
    uc_dropping: bool,
    in_msg: InMsg,
    last_op: Option<Operation>,
    rq: Deque<RecvWr, RQ>,
    mrs: Vec<MemoryRegion, MR>,
    cq: Deque<RecvCompletion, CQ>,
    replies: Deque<Reply, 8>,
    last_cnp: Option<Instant>,
    src_port: u16,
    counters: ResponderCounters,
}

impl<const RQ: usize, const MR: usize, const CQ: usize> Responder<RQ, MR, CQ> {
    /// A responder in RTR, expecting `cfg.expected_psn`.
    pub fn new(cfg: ResponderConfig) -> Self {
        Responder {
            cfg,
            error: false,
            expected: cfg.expected_psn & 0x00ff_ffff,
            msn: 0,
            nak_sent: false,
            uc_dropping: false,
            in_msg: InMsg::None,
            last_op: None,
            rq: Deque::new(),
            mrs: Vec::new(),
            cq: Deque::new(),
            replies: Deque::new(),
            last_cnp: None,
            src_port: cfg.path.source_port(cfg.local_qpn, cfg.remote_qpn),
            counters: ResponderCounters::default(),
        }
    }

    /// The configuration.
    pub fn config(&self) -> &ResponderConfig {
        &self.cfg
    }

    /// Whether the QP is in the error state (a fatal NAK was sent; everything else is dropped).
    pub fn is_error(&self) -> bool {
        self.error
    }

    /// The next PSN expected.
    pub fn expected_psn(&self) -> u32 {
        self.expected
    }

    /// Counters so far.
    pub fn counters(&self) -> ResponderCounters {
        self.counters
    }

    /// Receives posted and not yet consumed.
    pub fn posted_receives(&self) -> usize {
        self.rq.len()
    }

    /// Register a region for RDMA WRITE. Returns false when the table is full.
    pub fn register(&mut self, mr: MemoryRegion) -> bool {
        self.mrs.push(mr).is_ok()
    }

    /// Post a receive of `len` bytes. Returns false when the queue is full or the QP is in error.
    pub fn post_recv(&mut self, wr_id: u64, len: u32) -> bool {
        !self.error && self.rq.push_back(RecvWr { wr_id, len }).is_ok()
    }

    /// Take the next receive completion.
    pub fn poll_completion(&mut self) -> Option<RecvCompletion> {
        self.cq.pop_front()
    }

    /// Handle a request packet. `src`/`dst`/`ecn` come from its IP header, `ib` runs from the
    /// BTH to the end of the ICRC (already verified, or unverifiable on a UDP socket).
    pub fn handle_ib<'a>(
        &mut self,
        now: Instant,
        src: IpAddr,
        dst: IpAddr,
        ecn: u8,
        ib: &'a [u8],
    ) -> Option<Placement<'a>> {
        let Ok((repr, hlen)) = IbRepr::parse(ib) else {
            self.counters.dropped += 1;
            return None;
        };
        let b = repr.bth;
        let transport = if self.cfg.uc {
            Transport::Uc
        } else {
            Transport::Rc
        };
        let info = b.opcode.info()?;
        if src != self.cfg.path.remote_ip
            || dst != self.cfg.path.local_ip
            || b.pkey != DEFAULT_PKEY
            || b.dest_qp != self.cfg.local_qpn
            || info.transport != transport
            || self.error
        {
            self.counters.dropped += 1;
            return None;
        }
        let Some(payload_len) = ib
            .len()
            .checked_sub(hlen + usize::from(b.pad_count) + ICRC_LEN)
        else {
            self.counters.dropped += 1;
            return None;
        };
        let payload = &ib[hlen..hlen + payload_len];
        self.counters.rcvd_pkts += 1;
        if ecn == 3 {
            self.counters.ecn_marked += 1;
            if self
                .last_cnp
                .is_none_or(|t| now >= t + self.cfg.cnp_interval)
            {
                self.last_cnp = Some(now);
                self.queue(Reply::Cnp);
            }
        }
        if !matches!(info.operation, Operation::Send | Operation::RdmaWrite) {
            // READ and atomics are not supported by this responder.
            return self.fatal(b.psn, NakCode::InvalidRequest);
        }

        // PSN
        let d = psn_diff(b.psn, self.expected);
        if self.cfg.uc {
            // UC: no ACKs; after a gap, drop until the next message start and resynchronise.
            let starts = matches!(info.position, Position::First | Position::Only);
            if starts {
                if d != 0 {
                    self.in_msg = InMsg::None;
                    self.last_op = None;
                    self.expected = b.psn;
                }
                self.uc_dropping = false;
            } else if d != 0 || self.uc_dropping {
                self.uc_dropping = true;
                self.in_msg = InMsg::None;
                self.last_op = None;
                self.expected = psn_add(b.psn, 1);
                return None;
            }
        } else if d > 0 {
            if !self.nak_sent {
                self.nak_sent = true;
                self.counters.out_of_seq_request += 1;
                let psn = self.expected;
                self.queue(Reply::Ack {
                    psn,
                    syndrome: AethSyndrome::Nak(NakCode::PsnSequenceError),
                });
            }
            return None;
        } else if d < 0 {
            self.counters.duplicate_request += 1;
            let psn = psn_add(self.expected, 0x00ff_ffff);
            self.queue(Reply::Ack {
                psn,
                syndrome: AethSyndrome::Ack {
                    credits: CREDITS_UNLIMITED,
                },
            });
            return None;
        } else {
            self.nak_sent = false;
        }

        match self.check(&repr, info.operation, info.position, payload_len as u32) {
            Ok(()) => {}
            Err(Verdict::Drop) => return None,
            Err(Verdict::Rnr) => {
                self.counters.send_rnr_err += 1;
                let timer = self.cfg.min_rnr_timer;
                self.queue(Reply::Ack {
                    psn: b.psn,
                    syndrome: AethSyndrome::RnrNak { timer },
                });
                return None;
            }
            Err(Verdict::Fatal(code)) => return self.fatal(b.psn, code),
        }
        self.execute(&repr, info.operation, info.position, payload)
    }

    /// Opcode sequence, lengths, R_Key/bounds, receive queue. On success `in_msg` describes the
    /// message the packet belongs to.
    fn check(
        &mut self,
        repr: &IbRepr,
        op: Operation,
        pos: Position,
        len: u32,
    ) -> Result<(), Verdict> {
        let fail = |uc: bool, code| {
            if uc {
                Verdict::Drop
            } else {
                Verdict::Fatal(code)
            }
        };
        let uc = self.cfg.uc;
        let continues = matches!(pos, Position::Middle | Position::Last);
        let open = self.last_op.is_some() && !matches!(self.in_msg, InMsg::None);
        let seq_ok = if continues {
            open && self.last_op == Some(op)
        } else {
            !open
        };
        if !seq_ok {
            if uc {
                self.in_msg = InMsg::None;
                self.last_op = None;
                self.uc_dropping = true;
            }
            return Err(fail(uc, NakCode::InvalidRequest));
        }
        let pmtu = self.cfg.pmtu.bytes();
        let len_ok = match pos {
            Position::First | Position::Middle => len == pmtu,
            Position::Last => len >= 1 && len <= pmtu,
            Position::Only => len <= pmtu,
        };
        if !len_ok {
            return Err(fail(uc, NakCode::InvalidRequest));
        }
        let imm = repr.immdt.is_some();
        match (op, pos) {
            (Operation::RdmaWrite, Position::First | Position::Only) => {
                let r = repr.reth.expect("opcode carries a RETH");
                if r.dma_len > 1 << 31 || (pos == Position::Only && len != r.dma_len) {
                    return Err(fail(uc, NakCode::InvalidRequest));
                }
                if pos == Position::First && r.dma_len <= pmtu {
                    return Err(fail(uc, NakCode::InvalidRequest));
                }
                if r.dma_len > 0 && !self.in_bounds(r.rkey, r.va, r.dma_len) {
                    return Err(fail(uc, NakCode::RemoteAccessError));
                }
                if imm && self.rq.is_empty() {
                    return Err(if uc { Verdict::Drop } else { Verdict::Rnr });
                }
                self.in_msg = InMsg::Write {
                    rkey: r.rkey,
                    va: r.va,
                    resid: r.dma_len,
                    dma_len: r.dma_len,
                };
            }
            (Operation::RdmaWrite, _) => {
                let InMsg::Write { resid, .. } = self.in_msg else {
                    return Err(fail(uc, NakCode::InvalidRequest));
                };
                let fits = if pos == Position::Last {
                    len == resid
                } else {
                    resid > pmtu
                };
                if !fits {
                    return Err(fail(uc, NakCode::InvalidRequest));
                }
                if imm && self.rq.is_empty() {
                    return Err(if uc { Verdict::Drop } else { Verdict::Rnr });
                }
            }
            (Operation::Send, Position::First | Position::Only) => {
                let Some(wr) = self.rq.front().copied() else {
                    return Err(if uc { Verdict::Drop } else { Verdict::Rnr });
                };
                if len > wr.len {
                    return Err(fail(uc, NakCode::InvalidRequest));
                }
                let _ = self.rq.pop_front();
                self.counters.rdma_recvs += 1;
                self.in_msg = InMsg::Send { wr, offset: 0 };
            }
            (Operation::Send, _) => {
                let InMsg::Send { wr, offset } = self.in_msg else {
                    return Err(fail(uc, NakCode::InvalidRequest));
                };
                if u64::from(offset) + u64::from(len) > u64::from(wr.len) {
                    return Err(fail(uc, NakCode::InvalidRequest));
                }
            }
            _ => return Err(fail(uc, NakCode::InvalidRequest)),
        }
        Ok(())
    }

    fn in_bounds(&self, rkey: u32, va: u64, len: u32) -> bool {
        self.mrs.iter().any(|m| {
            m.rkey == rkey
                && va >= m.va
                && va
                    .checked_add(u64::from(len))
                    .is_some_and(|end| end <= m.va + m.len)
        })
    }

    fn execute<'a>(
        &mut self,
        repr: &IbRepr,
        op: Operation,
        pos: Position,
        payload: &'a [u8],
    ) -> Option<Placement<'a>> {
        let b = repr.bth;
        let ends = matches!(pos, Position::Last | Position::Only);
        self.expected = psn_add(b.psn, 1);
        self.last_op = if ends { None } else { Some(op) };
        let len = payload.len() as u32;
        self.counters.bytes_placed += u64::from(len);
        let placement = match self.in_msg {
            InMsg::Write {
                rkey,
                va,
                resid,
                dma_len,
            } => {
                self.in_msg = InMsg::Write {
                    rkey,
                    va: va + u64::from(len),
                    resid: resid - len,
                    dma_len,
                };
                if ends && repr.immdt.is_some() {
                    let wr = self.rq.pop_front().expect("checked non-empty");
                    self.counters.rdma_recvs += 1;
                    self.push_completion(RecvCompletion {
                        wr_id: wr.wr_id,
                        status: RecvStatus::Success,
                        opcode: RecvOpcode::RecvRdmaWithImm,
                        byte_len: dma_len,
                        imm: repr.immdt,
                        solicited: b.solicited,
                    });
                }
                (len > 0).then_some(Placement::Write {
                    rkey,
                    va,
                    data: payload,
                })
            }
            InMsg::Send { wr, offset } => {
                self.in_msg = InMsg::Send {
                    wr,
                    offset: offset + len,
                };
                if ends {
                    self.push_completion(RecvCompletion {
                        wr_id: wr.wr_id,
                        status: RecvStatus::Success,
                        opcode: RecvOpcode::Recv,
                        byte_len: offset + len,
                        imm: repr.immdt,
                        solicited: b.solicited,
                    });
                }
                Some(Placement::Recv {
                    wr_id: wr.wr_id,
                    offset,
                    data: payload,
                })
            }
            InMsg::None => None,
        };
        if ends {
            self.in_msg = InMsg::None;
            self.msn = (self.msn + 1) & 0x00ff_ffff;
        }
        if b.ack_req && !self.cfg.uc {
            self.queue(Reply::Ack {
                psn: b.psn,
                syndrome: AethSyndrome::Ack {
                    credits: CREDITS_UNLIMITED,
                },
            });
        }
        placement
    }

    fn fatal(&mut self, psn: u32, code: NakCode) -> Option<Placement<'static>> {
        if self.cfg.uc {
            return None;
        }
        self.queue(Reply::Ack {
            psn,
            syndrome: AethSyndrome::Nak(code),
        });
        self.error = true;
        if let InMsg::Send { wr, offset } = self.in_msg {
            self.push_completion(RecvCompletion {
                wr_id: wr.wr_id,
                status: RecvStatus::Flushed,
                opcode: RecvOpcode::Recv,
                byte_len: offset,
                imm: None,
                solicited: false,
            });
        }
        self.in_msg = InMsg::None;
        while let Some(wr) = self.rq.pop_front() {
            self.push_completion(RecvCompletion {
                wr_id: wr.wr_id,
                status: RecvStatus::Flushed,
                opcode: RecvOpcode::Recv,
                byte_len: 0,
                imm: None,
                solicited: false,
            });
        }
        None
    }

    fn push_completion(&mut self, c: RecvCompletion) {
        if self.cq.push_back(c).is_err() {
            let _ = self.cq.pop_front();
            let _ = self.cq.push_back(c);
        }
    }

    fn queue(&mut self, r: Reply) {
        // ACKs are cumulative: a newer one replaces an unsent older one (coalescing); NAKs,
        // RNR NAKs and CNPs are kept.
        if let Reply::Ack {
            syndrome: AethSyndrome::Ack { .. },
            ..
        } = r
            && let Some(Reply::Ack {
                syndrome: AethSyndrome::Ack { .. },
                ..
            }) = self.replies.back()
        {
            let _ = self.replies.pop_back();
        }
        if self.replies.push_back(r).is_err() {
            let _ = self.replies.pop_front();
            let _ = self.replies.push_back(r);
        }
    }

    /// Whether an ACK, NAK or CNP is waiting to be sent.
    pub fn has_reply(&self) -> bool {
        !self.replies.is_empty()
    }

    /// Whether a NAK (sequence error, RNR, fatal) is waiting to be sent: a NIC sends it at
    /// once, while ACKs may wait to be coalesced.
    pub fn nak_pending(&self) -> bool {
        self.replies.iter().any(|r| {
            matches!(
                r,
                Reply::Ack {
                    syndrome: AethSyndrome::Nak(_) | AethSyndrome::RnrNak { .. },
                    ..
                }
            )
        })
    }

    /// Write the next ACK/NAK/CNP as an IP packet into `buf`; returns its length.
    pub fn poll_transmit(&mut self, buf: &mut [u8]) -> Option<usize> {
        let r = self.replies.pop_front()?;
        let ib = match r {
            Reply::Ack { psn, syndrome } => {
                let mut ib = IbRepr::new(BthRepr::new(Opcode::RC_ACK, self.cfg.remote_qpn, psn));
                ib.aeth = Some(AethRepr {
                    syndrome,
                    msn: self.msn,
                });
                self.counters.acks_sent += 1;
                ib
            }
            Reply::Cnp => {
                self.counters.cnps_sent += 1;
                IbRepr::new(cnp::bth(self.cfg.remote_qpn))
            }
        };
        let repr = RoceV2Repr {
            ip: self.cfg.path.ip_repr(0)?,
            src_port: self.src_port,
            dst_port: self.cfg.path.dst_port,
            ib,
            payload_len: 0,
        };
        let n = repr.buffer_len();
        repr.emit(buf.get_mut(..n)?, &[]).ok()
    }
}

/// Length of the longest reply packet (IPv6 CNP).
pub const MAX_REPLY_LEN: usize = 40 + 8 + bth::HEADER_LEN + 16 + ICRC_LEN;
