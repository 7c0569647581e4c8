//! What the host did wrong: the camera checks what it receives as the real peer would (an RDMA
//! NIC drops a packet with a bad ICRC, a foreign P_Key, an ACK for nothing outstanding), and
//! beyond the NIC it names each violation: its kind, how often, the first one's numbers, and the
//! section of docs/orsp-spec.md that states the rule.
//!
//! The layers that check ([`Requester`](crate::rc::Requester),
//! [`Responder`](crate::rc::Responder), the [`Device`](crate::device::Device)) leave one
//! [`Violation`] per packet for the camera to [`record`](Violations::record); the camera's log
//! names the first of each kind ([`Violations::take_new`]) and its summary lists them all.

use core::fmt;

/// A kind of rule the host broke.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[repr(u8)]
pub enum ViolationKind {
    /// A RoCEv2 packet whose ICRC is wrong (dropped unread). `expected`/`got` unused.
    BadIcrc,
    /// BTH P_Key not the default partition 0xFFFF (dropped).
    PKey,
    /// BTH TVer not 0 (dropped).
    TVer,
    /// BTH destination QP not the camera's queue pair (dropped).
    DestQp,
    /// An opcode the camera's RC queue pair does not take: READ, atomics, UC or UD to the RC
    /// QP, an ACK without an AETH. `got` is the opcode byte.
    Opcode,
    /// An AETH syndrome IBTA reserves (dropped). `got` is the syndrome byte.
    Syndrome,
    /// An ACK or NAK naming a PSN the camera never sent (dropped). `expected` is the last PSN
    /// sent, `got` the PSN named.
    AckUnsent,
    /// An ACK that covers a packet the camera never let onto the wire (a loss it injected, not
    /// yet sent again): the host acknowledged what it did not receive. `expected` is the PSN
    /// held back, `got` the PSN acknowledged.
    AckUndelivered,
    /// The AETH's MSN is not the number of the camera's messages the ACK completes.
    Msn,
    /// A host SEND the camera's queue pair cannot take: out of opcode sequence, longer than a
    /// receive, wrong length for its position. `got` is its length.
    Request,
    /// An ORSP message that breaks the spec's rules: malformed, an unknown or repeated buffer,
    /// out of place. `got` is its seq.
    OrspMessage,
    /// The host in control let GevHeartbeatTimeout pass without a command: it lost control.
    /// `expected` is the timeout in ms.
    HeartbeatLate,
    /// As `HeartbeatLate`, while commands from the host's address came from another UDP port:
    /// heartbeats count only from the port that took control. `expected` is that port, `got`
    /// the other.
    HeartbeatPort,
    /// A GVCP command breaking the protocol's header rules: malformed, request id 0, an
    /// unknown command. `got` is the command code.
    GvcpHeader,
}

/// Number of [`ViolationKind`]s.
pub const KINDS: usize = 14;

impl ViolationKind {
    /// Every kind, in order.
    pub const ALL: [ViolationKind; KINDS] = [
        ViolationKind::BadIcrc,
        ViolationKind::PKey,
        ViolationKind::TVer,
        ViolationKind::DestQp,
        ViolationKind::Opcode,
        ViolationKind::Syndrome,
        ViolationKind::AckUnsent,
        ViolationKind::AckUndelivered,
        ViolationKind::Msn,
        ViolationKind::Request,
        ViolationKind::OrspMessage,
        ViolationKind::HeartbeatLate,
        ViolationKind::HeartbeatPort,
        ViolationKind::GvcpHeader,
    ];

    /// The name in logs, summaries and JSON (`kind`).
    pub const fn name(self) -> &'static str {
        match self {
            ViolationKind::BadIcrc => "bad_icrc",
            ViolationKind::PKey => "p_key",
            ViolationKind::TVer => "t_ver",
            ViolationKind::DestQp => "dest_qp",
            ViolationKind::Opcode => "opcode",
            ViolationKind::Syndrome => "aeth_syndrome",
            ViolationKind::AckUnsent => "ack_unsent",
            ViolationKind::AckUndelivered => "ack_undelivered",
            ViolationKind::Msn => "aeth_msn",
            ViolationKind::Request => "host_request",
            ViolationKind::OrspMessage => "orsp_message",
            ViolationKind::HeartbeatLate => "heartbeat_late",
            ViolationKind::HeartbeatPort => "heartbeat_port",
            ViolationKind::GvcpHeader => "gvcp_header",
        }
    }

    /// Where the rule is written: a section of docs/orsp-spec.md (`spec`).
    pub const fn spec(self) -> &'static str {
        match self {
            ViolationKind::BadIcrc
            | ViolationKind::PKey
            | ViolationKind::TVer
            | ViolationKind::DestQp
            | ViolationKind::Opcode => "orsp-spec 8, The host's packets",
            ViolationKind::Syndrome
            | ViolationKind::AckUnsent
            | ViolationKind::AckUndelivered
            | ViolationKind::Msn => "orsp-spec 8, Acknowledging the camera's packets",
            ViolationKind::Request => "orsp-spec 5, Host to camera; 9, Errors",
            ViolationKind::OrspMessage => "orsp-spec 5, Messages; 9, Errors",
            ViolationKind::HeartbeatLate | ViolationKind::HeartbeatPort => {
                "orsp-spec 8, The host's packets (heartbeats)"
            }
            ViolationKind::GvcpHeader => "GigE Vision 2.2, GVCP header (docs/gvcp.md)",
        }
    }
}

/// One violation: its kind and what was expected and what came, as the kind's docs say.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Violation {
    /// What rule.
    pub kind: ViolationKind,
    /// What the rule wants (see the kind).
    pub expected: u32,
    /// What the host sent (see the kind).
    pub got: u32,
    /// The packet's PSN, for RoCEv2 kinds.
    pub psn: Option<u32>,
}

impl Violation {
    /// A violation of `kind`.
    pub const fn new(kind: ViolationKind, expected: u32, got: u32, psn: Option<u32>) -> Self {
        Violation {
            kind,
            expected,
            got,
            psn,
        }
    }
}

impl fmt::Display for Violation {
    /// What was expected and what came, in words.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (e, g) = (self.expected, self.got);
        match self.kind {
            ViolationKind::BadIcrc => write!(f, "a RoCEv2 packet whose ICRC is wrong")?,
            ViolationKind::PKey => write!(f, "expected P_Key 0xffff, got {g:#06x}")?,
            ViolationKind::TVer => write!(f, "expected TVer 0, got {g}")?,
            ViolationKind::DestQp => write!(
                f,
                "expected destination QP {e:#08x} (DEVICE_QPN), got {g:#08x}"
            )?,
            ViolationKind::Opcode => write!(
                f,
                "expected RC ACKNOWLEDGE or RC SEND, got opcode {g:#04x} (the camera's queue \
                 pair takes no other)"
            )?,
            ViolationKind::Syndrome => {
                write!(f, "expected an AETH syndrome IBTA defines, got {g:#04x}")?
            }
            ViolationKind::AckUnsent => write!(
                f,
                "an ACK or NAK for PSN {g:#08x}, never sent (the last sent was {e:#08x})"
            )?,
            ViolationKind::AckUndelivered => write!(
                f,
                "an ACK through PSN {g:#08x}, while PSN {e:#08x} never reached the host (the \
                 camera held it back)"
            )?,
            ViolationKind::Msn => {
                write!(f, "expected MSN {e} (messages this ACK completes), got {g}")?
            }
            ViolationKind::Request => write!(
                f,
                "a SEND of {g} bytes the camera's receive side cannot take (out of sequence, or \
                 more than 1024 bytes)"
            )?,
            ViolationKind::OrspMessage => write!(
                f,
                "ORSP message seq {g} refused (malformed, an unknown or repeated buffer id, or \
                 out of place; EVENT 0x9004)"
            )?,
            ViolationKind::HeartbeatLate => write!(
                f,
                "expected a command within the heartbeat timeout ({e} ms), got none: control \
                 lost"
            )?,
            ViolationKind::HeartbeatPort => write!(
                f,
                "expected heartbeats from UDP port {e} (which took control), got commands from \
                 port {g}: control lost"
            )?,
            ViolationKind::GvcpHeader => write!(
                f,
                "a GVCP command breaking the header rules (malformed, req_id 0 or unknown \
                 command {g:#06x})"
            )?,
        }
        if let Some(p) = self.psn {
            write!(f, " (PSN {p:#08x})")?;
        }
        Ok(())
    }
}

/// What an RDMA NIC checks in a packet's BTH (and an ACK's AETH syndrome) before its queue pair
/// sees it, for a packet to the camera's RC queue pair `qpn` (the bytes from the BTH on, ICRC
/// checked): TVer 0, an opcode the QP takes (RC SEND, RC ACKNOWLEDGE, CNP), the default
/// partition (0xFFFF, or 0x7FFF: one side a full member, as rxe matches), the destination QP,
/// a syndrome IBTA defines. `None` when the packet passes.
pub fn check_header(ib: &[u8], qpn: u32) -> Option<Violation> {
    use crate::wire::{Opcode, bth};
    let Some(head) = ib.get(..bth::HEADER_LEN) else {
        return Some(Violation::new(
            ViolationKind::Opcode,
            0,
            ib.first().copied().unwrap_or(0).into(),
            None,
        ));
    };
    let p = bth::Packet::new_unchecked(head);
    let psn = Some(p.psn());
    let v = |kind, expected, got| Some(Violation::new(kind, expected, got, psn));
    if p.tver() != 0 {
        return v(ViolationKind::TVer, 0, p.tver().into());
    }
    let op = p.opcode();
    let send = (Opcode::RC_SEND_FIRST.0..=Opcode::RC_SEND_ONLY_IMM.0).contains(&op.0);
    if !(send || op == Opcode::RC_ACK || op == Opcode::CNP) {
        return v(ViolationKind::Opcode, 0, op.0.into());
    }
    if p.pkey() & 0x7fff != 0x7fff {
        return v(ViolationKind::PKey, 0xffff, p.pkey().into());
    }
    if p.dest_qp() != qpn {
        return v(ViolationKind::DestQp, qpn, p.dest_qp());
    }
    if op == Opcode::RC_ACK {
        // an AETH (4 bytes) and the ICRC must follow
        let Some(&syndrome) = ib
            .get(bth::HEADER_LEN)
            .filter(|_| ib.len() >= bth::HEADER_LEN + 8)
        else {
            return v(ViolationKind::Opcode, 0, op.0.into());
        };
        let defined = match syndrome >> 5 {
            0 | 1 => true,             // ACK (credits), RNR NAK (timer)
            3 => syndrome & 0x1f <= 4, // NAK codes 0..4
            _ => false,                // reserved, and bit 7
        };
        if !defined {
            return v(ViolationKind::Syndrome, 0, syndrome.into());
        }
    }
    None
}

/// Every kind's count and first violation, and which firsts have not been logged yet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violations {
    count: [u64; KINDS],
    first: [Option<Violation>; KINDS],
    unlogged: u32,
}

impl Default for Violations {
    fn default() -> Self {
        Self::new()
    }
}

impl Violations {
    /// None yet.
    pub const fn new() -> Self {
        Violations {
            count: [0; KINDS],
            first: [None; KINDS],
            unlogged: 0,
        }
    }

    /// Count `v`; the first of its kind is kept (and handed once to [`Self::take_new`]).
    pub fn record(&mut self, v: Violation) {
        let i = v.kind as usize;
        self.count[i] += 1;
        if self.first[i].is_none() {
            self.first[i] = Some(v);
            self.unlogged |= 1 << i;
        }
    }

    /// Add `n` violations of `kind` counted elsewhere (a socket's ICRC drops); the first, if
    /// new, is `first`.
    pub fn record_many(&mut self, first: Violation, n: u64) {
        if n == 0 {
            return;
        }
        self.record(first);
        self.count[first.kind as usize] += n - 1;
    }

    /// How many of `kind`.
    pub fn count(&self, kind: ViolationKind) -> u64 {
        self.count[kind as usize]
    }

    /// The first violation of each kind not yet handed out: for the log.
    pub fn take_new(&mut self) -> Option<Violation> {
        if self.unlogged == 0 {
            return None;
        }
        let i = self.unlogged.trailing_zeros() as usize;
        self.unlogged &= !(1 << i);
        self.first[i]
    }

    /// Every kind seen: (first, count), in kind order.
    pub fn iter(&self) -> impl Iterator<Item = (Violation, u64)> + '_ {
        (0..KINDS).filter_map(|i| self.first[i].map(|v| (v, self.count[i])))
    }

    /// No violation at all.
    pub fn is_empty(&self) -> bool {
        self.count.iter().all(|&c| c == 0)
    }

    /// Add another list (a previous connection's, a second camera's).
    pub fn merge(&mut self, other: &Violations) {
        for (v, n) in other.iter() {
            self.record_many(v, n);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::string::ToString;

    #[test]
    fn each_kind_keeps_its_first_and_counts_the_rest() {
        let mut v = Violations::new();
        v.record(Violation::new(ViolationKind::PKey, 0xffff, 0x1234, Some(7)));
        v.record(Violation::new(ViolationKind::PKey, 0xffff, 0x4321, Some(8)));
        v.record(Violation::new(ViolationKind::TVer, 0, 1, Some(9)));
        assert_eq!(v.count(ViolationKind::PKey), 2);
        let first = v.take_new().unwrap();
        assert_eq!(first.got, 0x1234);
        assert_eq!(
            first.to_string(),
            "expected P_Key 0xffff, got 0x1234 (PSN 0x000007)"
        );
        assert_eq!(v.take_new().unwrap().kind, ViolationKind::TVer);
        assert_eq!(v.take_new(), None);
        v.record(Violation::new(ViolationKind::TVer, 0, 2, None));
        assert_eq!(v.take_new(), None, "a kind is logged once");
        let all: std::vec::Vec<_> = v.iter().map(|(f, n)| (f.kind.name(), n)).collect();
        assert_eq!(all, [("p_key", 2), ("t_ver", 2)]);
    }

    #[test]
    fn names_are_unique_and_in_order() {
        for (i, k) in ViolationKind::ALL.iter().enumerate() {
            assert_eq!(*k as usize, i);
            for l in &ViolationKind::ALL[..i] {
                assert_ne!(k.name(), l.name());
            }
        }
    }
}
