//! A soft RoCEv2 host: an RC (or UC) responder with registered memory and posted receives.

use std::collections::BTreeMap;

use rdmacam_protocol::rc::{
    Instant, MemoryRegion, Placement, RecvCompletion, RecvStatus, Responder, ResponderConfig,
    ResponderCounters, split_rocev2,
};
use rdmacam_protocol::wire;

use crate::place::Memory;

/// Posted receives the soft host can hold.
pub const RQ_DEPTH: usize = 1024;
const MRS: usize = 16;
const CQ_DEPTH: usize = 4096;

/// A received SEND (or WRITE with immediate): its completion and, for SENDs, the bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Received {
    /// The completion as the responder reported it.
    pub completion: RecvCompletion,
    /// The message bytes (SEND only; empty for WRITE with immediate and flushed receives).
    pub data: Vec<u8>,
}

/// Why the soft host dropped a packet before the responder saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct InputCounters {
    /// Bad ICRC, bad IPv4 header checksum or bad non-zero UDP checksum.
    pub checksum_drops: u64,
    /// Unparseable or non-RoCEv2 packets.
    pub malformed_drops: u64,
}

/// Where a WRITE's payload goes: the soft host hands each one over with its region, as a NIC
/// would DMA it. [`PlainCopy`] writes it; the reference host also compares it as it places it
/// (`crate::host`).
pub trait Place {
    /// Write `data` into `region` (the memory registered under `rkey`) at `at`; the responder
    /// has checked that it fits.
    fn place(&mut self, rkey: u32, region: &mut Memory, at: usize, data: &[u8]);
}

/// Placement as a plain copy.
#[derive(Debug, Clone, Copy, Default)]
pub struct PlainCopy;

impl Place for PlainCopy {
    fn place(&mut self, _rkey: u32, region: &mut Memory, at: usize, data: &[u8]) {
        region.copy(at, data);
    }
}

/// A host QP with its memory: what a host application would have set up through verbs.
#[derive(Debug)]
pub struct SoftHost {
    responder: Responder<RQ_DEPTH, MRS, CQ_DEPTH>,
    regions: BTreeMap<u32, (u64, Memory)>,
    recv_bufs: BTreeMap<u64, Vec<u8>>,
    received: Vec<Received>,
    input: InputCounters,
}

impl SoftHost {
    /// A host QP in RTR with no memory registered and no receives posted.
    pub fn new(cfg: ResponderConfig) -> Self {
        SoftHost {
            responder: Responder::new(cfg),
            regions: BTreeMap::new(),
            recv_bufs: BTreeMap::new(),
            received: Vec::new(),
            input: InputCounters::default(),
        }
    }

    /// Register `len` zeroed bytes at virtual address `va` for RDMA WRITE under `rkey`.
    pub fn register(&mut self, rkey: u32, va: u64, len: usize) {
        assert!(
            self.responder.register(MemoryRegion {
                rkey,
                va,
                len: len as u64
            }),
            "memory region table full"
        );
        self.regions.insert(rkey, (va, Memory::zeroed(len)));
    }

    /// The bytes of the region registered under `rkey`.
    pub fn region(&self, rkey: u32) -> &[u8] {
        self.regions[&rkey].1.bytes()
    }

    /// Post a receive buffer of `len` bytes.
    pub fn post_recv(&mut self, wr_id: u64, len: u32) -> bool {
        let ok = self.responder.post_recv(wr_id, len);
        if ok {
            self.recv_bufs.insert(wr_id, vec![0; len as usize]);
        }
        ok
    }

    /// Receives posted and not yet consumed.
    pub fn posted_receives(&self) -> usize {
        self.responder.posted_receives()
    }

    /// Handle a received IP packet. Returns whether it reached the responder.
    pub fn handle_packet(&mut self, now: Instant, packet: &[u8]) -> bool {
        match split_rocev2(packet) {
            Ok((src, dst, ecn, ib)) => {
                self.handle_ib(now, src, dst, ecn, ib);
                true
            }
            Err(wire::Error::Checksum) => {
                self.input.checksum_drops += 1;
                false
            }
            Err(_) => {
                self.input.malformed_drops += 1;
                false
            }
        }
    }

    /// Handle the InfiniBand part of a packet whose IP header was already taken apart (a UDP
    /// socket delivers it this way; its ICRC cannot be checked without the IP header).
    pub fn handle_ib(
        &mut self,
        now: Instant,
        src: std::net::IpAddr,
        dst: std::net::IpAddr,
        ecn: u8,
        ib: &[u8],
    ) {
        self.handle_ib_placing(now, src, dst, ecn, ib, &mut PlainCopy);
    }

    /// [`handle_ib`](Self::handle_ib), with a WRITE's payload placed by `place`.
    pub fn handle_ib_placing(
        &mut self,
        now: Instant,
        src: std::net::IpAddr,
        dst: std::net::IpAddr,
        ecn: u8,
        ib: &[u8],
        place: &mut impl Place,
    ) {
        match self.responder.handle_ib(now, src, dst, ecn, ib) {
            Some(Placement::Write { rkey, va, data }) => {
                let (base, mem) = self.regions.get_mut(&rkey).expect("responder checked rkey");
                place.place(rkey, mem, (va - *base) as usize, data);
            }
            Some(Placement::Recv {
                wr_id,
                offset,
                data,
            }) => {
                let buf = self.recv_bufs.get_mut(&wr_id).expect("posted");
                let at = offset as usize;
                buf[at..at + data.len()].copy_from_slice(data);
            }
            None => {}
        }
        while let Some(c) = self.responder.poll_completion() {
            let mut data = self.recv_bufs.remove(&c.wr_id).unwrap_or_default();
            if c.status == RecvStatus::Success && c.opcode == rdmacam_protocol::rc::RecvOpcode::Recv
            {
                data.truncate(c.byte_len as usize);
            } else {
                data.clear();
            }
            self.received.push(Received {
                completion: c,
                data,
            });
        }
    }

    /// Write the next ACK/NAK/CNP into `buf`; returns its length.
    pub fn poll_transmit(&mut self, buf: &mut [u8]) -> Option<usize> {
        self.responder.poll_transmit(buf)
    }

    /// Whether a NAK is waiting to be sent ([`Responder::nak_pending`]).
    pub fn nak_pending(&self) -> bool {
        self.responder.nak_pending()
    }

    /// Receive completions so far, in order.
    pub fn received(&self) -> &[Received] {
        &self.received
    }

    /// Take the receive completions so far (a long-running host keeps none).
    pub fn take_received(&mut self) -> Vec<Received> {
        std::mem::take(&mut self.received)
    }

    /// Whether the QP is in the error state.
    pub fn is_error(&self) -> bool {
        self.responder.is_error()
    }

    /// The responder's counters (rxe names).
    pub fn counters(&self) -> ResponderCounters {
        self.responder.counters()
    }

    /// Drops before the responder.
    pub fn input_counters(&self) -> InputCounters {
        self.input
    }

    /// The protocol responder inside (for inspection).
    pub fn responder(&self) -> &Responder<RQ_DEPTH, MRS, CQ_DEPTH> {
        &self.responder
    }

    /// The next PSN the responder expects.
    pub fn expected_psn(&self) -> u32 {
        self.responder.expected_psn()
    }
}
