//! A reliable-connected (RC) queue pair, sans-IO: a requester for what this side sends and a
//! responder for what it receives, both modelled on Linux rxe and IBTA semantics
//! (`reference/rocev2.md` §3).
//!
//! * [`Requester`] turns work requests (WRITE, WRITE with immediate, SEND, SEND with immediate)
//!   into RoCEv2 packets at the path MTU, and makes them reliable: PSNs with 24-bit wrap,
//!   AckReq policy, cumulative ACKs, go-back-N on sequence NAKs (also from the middle of a
//!   message), RNR waits, the local ACK timeout with `retry_cnt`, fatal NAKs, rate limiting and a
//!   DCQCN reaction point.
//! * [`Responder`] checks and places what arrives: PSN order with one NAK per gap, duplicates
//!   re-ACKed, opcode sequence and length rules, R_Key and bounds checks, receive queue with RNR
//!   NAK, completions with immediate data, CNPs for ECN-CE marked packets.
//!
//! Neither touches memory it does not own: payload bytes are named by handle and offset and read
//! through [`PayloadSource`] when a packet is built; placements are returned to the caller.

pub mod offload;
mod rate;
mod requester;
mod responder;
pub mod rtt;
pub mod window;
pub mod workload;

use core::net::IpAddr;
use core::ops::{Add, Sub};
use core::time::Duration;

pub use rate::{DcqcnConfig, RateConfig, RateController};

/// A burst size for [`Requester::set_min_burst`] for a software sender paced to a link: one
/// UDP segmentation-offload send of 64 KiB per wake-up (52 us at 10 Gbit/s). Larger bursts
/// cost less CPU still (256 KiB: a fifth less again) but make a frame's TRAILER wait behind
/// the burst in the host's socket: what a host sees of a frame comes later (docs/BENCHMARKS.md).
/// Mid-frame such a sender may wake once per two bursts instead
/// ([`Requester::poll_timeout_lulled`]), the last [`LULL_BURSTS`] before a TRAILER one each.
pub const PACE_BURST: u32 = 64 << 10;
pub use requester::{
    Completion, LOSS_MEMORY, LULL_BURSTS, NEW_DATA_PROBES, PostError, QUEUE_SLACK_NS, Requester,
    RequesterConfig, RequesterCounters, TxPacket, WcStatus, WorkRequest,
};
pub use responder::{
    MAX_REPLY_LEN, MemoryRegion, Placement, RecvCompletion, RecvOpcode, RecvStatus, Responder,
    ResponderConfig, ResponderCounters,
};

/// A point in time, in nanoseconds since an arbitrary epoch chosen by the caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Instant(pub u64);

impl Instant {
    /// The epoch.
    pub const ZERO: Instant = Instant(0);
    /// From nanoseconds.
    pub const fn from_nanos(ns: u64) -> Self {
        Instant(ns)
    }
    /// From microseconds.
    pub const fn from_micros(us: u64) -> Self {
        Instant(us * 1_000)
    }
    /// From milliseconds.
    pub const fn from_millis(ms: u64) -> Self {
        Instant(ms * 1_000_000)
    }
    /// Nanoseconds since the epoch.
    pub const fn as_nanos(self) -> u64 {
        self.0
    }
    /// Time from `earlier` to `self`, zero if `earlier` is later.
    pub const fn saturating_since(self, earlier: Instant) -> Duration {
        Duration::from_nanos(self.0.saturating_sub(earlier.0))
    }
}

impl Add<Duration> for Instant {
    type Output = Instant;
    fn add(self, d: Duration) -> Instant {
        Instant(self.0.saturating_add(d.as_nanos() as u64))
    }
}

impl Sub<Instant> for Instant {
    type Output = Duration;
    fn sub(self, rhs: Instant) -> Duration {
        self.saturating_since(rhs)
    }
}

/// The IP-level path of a connection: addresses and the traffic class this side sends with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Path {
    /// This side's IP address (its RoCEv2 GID).
    pub local_ip: IpAddr,
    /// The peer's IP address.
    pub remote_ip: IpAddr,
    /// DSCP of sent packets.
    pub dscp: u8,
    /// ECN codepoint of sent data packets: 0 Not-ECT, or 2 ECT(0) when a DCQCN reaction point
    /// is active so that switches mark instead of dropping.
    pub ecn: u8,
    /// IPv4 TTL / IPv6 hop limit.
    pub ttl: u8,
    /// UDP source port; 0 = the QP pair's entropy port (`udp_source_port`).
    pub src_port: u16,
    /// UDP destination port: where the peer listens for RoCEv2 (4791 unless a test moves it).
    pub dst_port: u16,
}

impl Path {
    /// A path with DSCP 0, Not-ECT and TTL 64.
    pub const fn new(local_ip: IpAddr, remote_ip: IpAddr) -> Self {
        Path {
            local_ip,
            remote_ip,
            dscp: 0,
            ecn: 0,
            ttl: 64,
            src_port: 0,
            dst_port: crate::wire::roce::ROCEV2_PORT,
        }
    }

    /// The UDP source port packets of the QP pair `local`/`remote` leave from.
    pub const fn source_port(&self, local_qpn: u32, remote_qpn: u32) -> u16 {
        if self.src_port != 0 {
            self.src_port
        } else {
            crate::wire::roce::udp_source_port(local_qpn, remote_qpn)
        }
    }

    /// The IP header representation for a packet from this side (identification 0, DF).
    pub fn ip_repr(&self, ecn: u8) -> Option<crate::wire::IpRepr> {
        use crate::wire::IpRepr;
        match (self.local_ip, self.remote_ip) {
            (IpAddr::V4(src), IpAddr::V4(dst)) => Some(IpRepr::V4 {
                src,
                dst,
                dscp: self.dscp,
                ecn,
                ttl: self.ttl,
                ident: 0,
                dont_frag: true,
            }),
            (IpAddr::V6(src), IpAddr::V6(dst)) => Some(IpRepr::V6 {
                src,
                dst,
                traffic_class: (self.dscp << 2) | (ecn & 3),
                flow_label: 0,
                hop_limit: self.ttl,
            }),
            _ => None,
        }
    }
}

/// The local ACK timeout an IB `timeout` code asks for: 4.096 µs × 2^code; `None` for code 0
/// (infinite).
pub const fn local_ack_timeout(code: u8) -> Option<Duration> {
    match local_ack_timeout_ns(code) {
        Some(ns) => Some(Duration::from_nanos(ns)),
        None => None,
    }
}

/// [`local_ack_timeout`] in nanoseconds.
#[inline]
pub const fn local_ack_timeout_ns(code: u8) -> Option<u64> {
    if code == 0 {
        None
    } else {
        Some(4096u64 << (code as u32 & 31))
    }
}

/// Where a work request's payload lives: an opaque handle the caller resolves (a frame buffer, a
/// message buffer) and a byte offset within it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PayloadRef {
    /// Which buffer.
    pub handle: u32,
    /// Byte offset of the message's first byte in that buffer.
    pub offset: u64,
}

impl PayloadRef {
    /// `offset` bytes into buffer `handle`.
    pub const fn new(handle: u32, offset: u64) -> Self {
        PayloadRef { handle, offset }
    }
}

/// Resolves payload references to bytes when a packet is built; asked again for the same bytes
/// on retransmission, so the bytes must stay put until the work request completes.
pub trait PayloadSource {
    /// `len` bytes of buffer `handle` from `offset`; `None` if the range does not exist.
    fn payload(&self, handle: u32, offset: u64, len: usize) -> Option<&[u8]>;

    /// Whether `len` bytes of buffer `handle` from `offset` exist, without reading them (frame
    /// memory a data mover reads and the CPU may not); by default through
    /// [`payload`](Self::payload).
    fn contains(&self, handle: u32, offset: u64, len: usize) -> bool {
        self.payload(handle, offset, len).is_some()
    }
}

impl<T: AsRef<[u8]>> PayloadSource for [T] {
    fn payload(&self, handle: u32, offset: u64, len: usize) -> Option<&[u8]> {
        let b = self.get(handle as usize)?.as_ref();
        let start = usize::try_from(offset).ok()?;
        b.get(start..start.checked_add(len)?)
    }
}

/// Split a received IP packet (RoCEv2) into what the RC state machines need, verifying the ICRC.
/// Returns `(src, dst, ecn, ib)` where `ib` runs from the BTH to the end of the ICRC.
pub fn split_rocev2(packet: &[u8]) -> crate::wire::Result<(IpAddr, IpAddr, u8, &[u8])> {
    use crate::wire::{Error, icrc, ipv4, ipv6, udp};
    let (src, dst, ecn, ip_len, l4_len) = match packet.first().map(|b| b >> 4) {
        Some(4) => {
            let p = ipv4::Packet::new_checked(packet)?;
            let r = ipv4::Ipv4Repr::parse(&p)?;
            if r.protocol != ipv4::PROTOCOL_UDP {
                return Err(Error::Unsupported);
            }
            (
                IpAddr::V4(r.src_addr),
                IpAddr::V4(r.dst_addr),
                r.ecn,
                ipv4::HEADER_LEN,
                r.payload_len,
            )
        }
        Some(6) => {
            let p = ipv6::Packet::new_checked(packet)?;
            let r = ipv6::Ipv6Repr::parse(&p)?;
            if r.next_header != ipv6::NEXT_HEADER_UDP {
                return Err(Error::Unsupported);
            }
            (
                IpAddr::V6(r.src_addr),
                IpAddr::V6(r.dst_addr),
                r.traffic_class & 3,
                ipv6::HEADER_LEN,
                r.payload_len,
            )
        }
        Some(_) => return Err(Error::BadVersion),
        None => return Err(Error::Truncated),
    };
    let l4 = &packet[ip_len..ip_len + l4_len];
    let u = udp::Packet::new_checked(l4)?;
    if u.checksum() != 0 && !udp_checksum_ok(&packet[..ip_len], &l4[..usize::from(u.len())]) {
        return Err(Error::Checksum);
    }
    let dgram = &l4[..usize::from(u.len())];
    let (computed, carried) = icrc::raw_rocev2(&packet[..ip_len], ip_len == 40, dgram)?;
    if computed != carried {
        return Err(Error::Checksum);
    }
    Ok((src, dst, ecn, &dgram[udp::HEADER_LEN..]))
}

/// A whole queue pair: the requester for what this side sends, the responder for what it
/// receives, on one QPN. Received ACK/NAKs and CNPs go to the requester, requests to the
/// responder.
#[derive(Debug)]
pub struct QueuePair<const SQ: usize, const CQ: usize, const RQ: usize, const MR: usize> {
    /// The send side.
    pub requester: Requester<SQ, CQ>,
    /// The receive side.
    pub responder: Responder<RQ, MR, CQ>,
}

impl<const SQ: usize, const CQ: usize, const RQ: usize, const MR: usize> QueuePair<SQ, CQ, RQ, MR> {
    /// Both halves, which must name the same QPs and path.
    pub fn new(requester: RequesterConfig, responder: ResponderConfig) -> Self {
        QueuePair {
            requester: Requester::new(requester),
            responder: Responder::new(responder),
        }
    }

    /// Handle a received IP packet: ICRC, then ACK/NAK/CNP to the requester or a request to
    /// the responder (whose placement, if any, is returned). Packets with a bad ICRC or
    /// checksum are an `Err` and change nothing.
    pub fn handle_datagram<'a>(
        &mut self,
        now: Instant,
        packet: &'a [u8],
    ) -> crate::wire::Result<Option<Placement<'a>>> {
        let (src, dst, ecn, ib) = split_rocev2(packet)?;
        Ok(self.handle_ib(now, src, dst, ecn, ib))
    }

    /// Handle the InfiniBand part of a received packet (BTH to ICRC) with its IP addresses.
    pub fn handle_ib<'a>(
        &mut self,
        now: Instant,
        src: IpAddr,
        dst: IpAddr,
        ecn: u8,
        ib: &'a [u8],
    ) -> Option<Placement<'a>> {
        let op = crate::wire::Opcode(*ib.first()?);
        if op == crate::wire::Opcode::RC_ACK || op == crate::wire::Opcode::CNP {
            if src == self.requester.config().path.remote_ip {
                self.requester.handle_ib(now, ib);
            }
            None
        } else {
            self.responder.handle_ib(now, src, dst, ecn, ib)
        }
    }
}

/// Whether a non-zero UDP checksum is right (Linux drops the datagram otherwise).
fn udp_checksum_ok(ip: &[u8], dgram: &[u8]) -> bool {
    let mut sum: u32 = 0;
    let mut add = |b: &[u8]| {
        let mut c = b.chunks_exact(2);
        for w in &mut c {
            sum += u32::from(u16::from_be_bytes([w[0], w[1]]));
        }
        if let [x] = c.remainder() {
            sum += u32::from(*x) << 8;
        }
    };
    if ip.len() == 40 {
        add(&ip[8..40]);
    } else {
        add(&ip[12..20]);
    }
    add(&[0, 17]);
    add(&(dgram.len() as u16).to_be_bytes());
    add(dgram);
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    sum == 0xffff
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn local_ack_timeout_follows_ibta_formula() {
        // rocev2.md §3.1: 14 => 67.1 ms, 18 => 1.07 s, 0 => infinite.
        assert_eq!(local_ack_timeout(0), None);
        assert_eq!(local_ack_timeout(14).unwrap().as_micros(), 67_108);
        assert_eq!(local_ack_timeout(18).unwrap().as_millis(), 1_073);
    }
}
