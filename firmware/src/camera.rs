//! The camera without I/O, for a `no_std`, no-alloc firmware: the GigE Vision [`Device`], the RC
//! queue pair ORSP streams on, frame memory the board lends it, and receive buffers for host
//! messages. The embassy application ([`crate::app`]) feeds it datagrams and sends what it
//! produces; a board supplies the [`FrameSource`] (sensor DMA, or the synthetic patterns).
//!
//! It mirrors the emulator's `CameraCore` with fixed capacities (heapless) and one UDP port
//! for RoCEv2 both ways: the UDP source port is covered by the ICRC, so the firmware sends from
//! the port it is bound to, 4791, instead of a per-QP entropy port.

use core::net::{IpAddr, Ipv4Addr, SocketAddrV4};
use core::ops::Range;

use heapless::{Deque, Vec};
use rdmacam_protocol::cm;
use rdmacam_protocol::device::pattern::{Frame, FrameSource};
use rdmacam_protocol::device::stream::StreamPacket;
use rdmacam_protocol::device::{Device, DeviceEvent, GvcpReply, ORSP_BUFFERS, regs};
use rdmacam_protocol::orsp::channel::{DEV_RECV_DEPTH, DEV_RECV_SIZE, MSG_HANDLE_BASE};
use rdmacam_protocol::orsp::msg::event;
use rdmacam_protocol::orsp::{ConnectParams, FrameOutcome, OrspChannel};
use rdmacam_protocol::rc::{
    Instant, Path, PayloadSource, Placement, QueuePair, RecvStatus, RequesterConfig,
    ResponderConfig, WcStatus, WorkRequest,
};
use rdmacam_protocol::wire::Opcode;

/// The RoCEv2 UDP port (both directions).
pub const ROCE_PORT: u16 = 4791;
/// Frame slots: one being written and the ones not yet acknowledged.
pub const FRAME_SLOTS: usize = 3;
/// IPv4 + UDP header bytes in front of every packet the queue pair emits.
const IP_UDP: usize = 28;
/// A CM MAD packet: IPv4, UDP, BTH, DETH, MAD, ICRC.
const MAD_PACKET: usize = 20 + 8 + 12 + 8 + cm::MAD_LEN + 4;

type Qp = QueuePair<256, 256, 32, 1>;

/// What the camera did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Counters {
    /// Frames handed to ORSP.
    pub frames_offered: u64,
    /// Frames too large for a frame slot (not sent).
    pub frames_too_large: u64,
    /// Host messages received.
    pub host_messages: u64,
    /// RoCEv2 datagrams dropped (no connection, not for us).
    pub dropped: u64,
}

/// A RoCEv2 datagram to send: `payload` of the buffer given to
/// [`Camera::poll_transmit`] is the UDP payload, for `dst`:`dst_port`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Datagram {
    /// Bytes of the buffer to send (the IP and UDP headers left out).
    pub payload: Range<usize>,
    /// Destination.
    pub dst: Ipv4Addr,
    /// Destination UDP port.
    pub dst_port: u16,
}

struct Payloads<'a> {
    frames: &'a [u8],
    slot_len: usize,
    orsp: &'a OrspChannel<ORSP_BUFFERS>,
}

impl PayloadSource for Payloads<'_> {
    fn payload(&self, handle: u32, offset: u64, len: usize) -> Option<&[u8]> {
        if handle >= MSG_HANDLE_BASE {
            return self.orsp.message(handle, offset, len);
        }
        let slot = self.slot_len.checked_mul(handle as usize)?;
        let start = slot.checked_add(usize::try_from(offset).ok()?)?;
        let end = start.checked_add(len)?;
        if end > slot + self.slot_len {
            return None;
        }
        self.frames.get(start..end)
    }
}

/// The camera: device, queue pair, frame memory.
pub struct Camera<'m, S: FrameSource> {
    device: Device,
    source: S,
    ip: Ipv4Addr,
    qp: Option<Qp>,
    host_ip: Option<Ipv4Addr>,
    frames: &'m mut [u8],
    slot_len: usize,
    free: Vec<u32, FRAME_SLOTS>,
    recv: [[u8; DEV_RECV_SIZE as usize]; DEV_RECV_DEPTH as usize],
    backlog: Deque<WorkRequest, 64>,
    cm_out: Deque<(Ipv4Addr, [u8; MAD_PACKET], usize), 4>,
    cm_psn: u32,
    cm_peer: Option<Ipv4Addr>,
    counters: Counters,
}

impl<'m, S: FrameSource> Camera<'m, S> {
    /// A camera with `device`, frames from `source`, and `frames` as frame memory (split into
    /// [`FRAME_SLOTS`] equal slots; a frame larger than a slot is not sent).
    pub fn new(device: Device, source: S, frames: &'m mut [u8]) -> Self {
        let ip = device.ip();
        let slot_len = frames.len() / FRAME_SLOTS;
        let mut free = Vec::new();
        for s in (0..FRAME_SLOTS as u32).rev() {
            let _ = free.push(s);
        }
        Camera {
            device,
            source,
            ip,
            qp: None,
            host_ip: None,
            frames,
            slot_len,
            free,
            recv: [[0; DEV_RECV_SIZE as usize]; DEV_RECV_DEPTH as usize],
            backlog: Deque::new(),
            cm_out: Deque::new(),
            cm_psn: 0,
            cm_peer: None,
            counters: Counters::default(),
        }
    }

    /// The device (registers, counters).
    pub fn device(&mut self) -> &mut Device {
        &mut self.device
    }

    /// Counters.
    pub fn counters(&self) -> Counters {
        self.counters
    }

    /// Whether an ORSP connection is up.
    pub fn connected(&self) -> bool {
        self.qp.is_some()
    }

    /// The largest frame a slot holds.
    pub fn slot_len(&self) -> usize {
        self.slot_len
    }

    /// A GVCP datagram from `src`; the acknowledge (if any) is written to `out`.
    pub fn handle_gvcp(
        &mut self,
        now: Instant,
        src: SocketAddrV4,
        datagram: &[u8],
        out: &mut [u8],
    ) -> Option<GvcpReply> {
        let r = self.device.handle_gvcp(now, src, datagram, out);
        self.process_events();
        r
    }

    /// The next GVSP packet (classic streaming, when no ORSP host is connected).
    pub fn poll_gvsp(&mut self, now: Instant, buf: &mut [u8]) -> Option<StreamPacket> {
        self.device.poll_stream(now, &mut self.source, buf)
    }

    /// Events since the last call are handled here (connect, disconnect); the application
    /// may log them.
    fn process_events(&mut self) {
        while let Some(ev) = self.device.poll_event() {
            match ev {
                DeviceEvent::OrspConnect(p) => self.connect(p),
                DeviceEvent::OrspDisconnected => self.disconnect(),
                _ => {}
            }
            crate::log_event(&ev);
        }
    }

    fn connect(&mut self, p: ConnectParams) {
        // OrspHostGid when it is an IPv4-mapped GID, else GevSCDA, else the controller
        let gid = core::net::Ipv6Addr::from(p.host_gid);
        let scda = self.device.read_reg(regs::SCDA0).unwrap_or(0);
        let host = if let Some(v4) = gid.to_ipv4_mapped() {
            v4
        } else if scda != 0 {
            Ipv4Addr::from(scda)
        } else if let Some(c) = self.device.controller() {
            *c.ip()
        } else {
            return;
        };
        if !gid.is_unspecified() && gid.to_ipv4_mapped().is_none() {
            // an IPv6 host: this firmware speaks RoCEv2 over IPv4 only
            self.device.orsp_failed(event::REMOTE_ERROR);
            return;
        }
        let mut path = Path::new(IpAddr::V4(self.ip), IpAddr::V4(host));
        path.src_port = ROCE_PORT;
        path.dst_port = ROCE_PORT;
        // smoltcp writes DSCP and ECN 0 whatever we ask (ORSP caps say so)
        path.dscp = 0;
        path.ecn = 0;
        let mut rq = RequesterConfig::new(p.device_qpn, p.host_qpn, p.device_sq_psn, path);
        rq.pmtu = p.pmtu;
        rq.timeout = p.timeout;
        rq.retry_cnt = p.retry_cnt;
        rq.rnr_retry = p.rnr_retry;
        rq.ack_req_every = 64;
        rq.max_unacked = 128;
        let mut rs = ResponderConfig::new(p.device_qpn, p.host_qpn, p.host_sq_psn, path);
        rs.pmtu = p.pmtu;
        let mut qp = Qp::new(rq, rs);
        for id in 0..DEV_RECV_DEPTH {
            qp.responder.post_recv(u64::from(id), DEV_RECV_SIZE);
        }
        self.qp = Some(qp);
        self.host_ip = Some(host);
        self.backlog.clear();
    }

    fn disconnect(&mut self) {
        self.qp = None;
        self.backlog.clear();
        self.reclaim_frames();
    }

    fn reclaim_frames(&mut self) {
        while let Some(h) = self.device.orsp().poll_released_frame() {
            if !self.free.contains(&h) {
                let _ = self.free.push(h);
            }
        }
        let free = !self.free.is_empty();
        self.device.set_orsp_frame_memory_free(free);
    }

    /// A RoCEv2 UDP payload from `src` (a UDP socket hides the IP header, so the ICRC cannot
    /// be checked: `design/ORSP.md` §12).
    pub fn handle_roce(&mut self, now: Instant, src: Ipv4Addr, ib: &[u8]) {
        let (src, dst) = (IpAddr::V4(src), IpAddr::V4(self.ip));
        if ib.first() == Some(&Opcode::UD_SEND_ONLY.0) {
            self.handle_gsi(now, src, ib);
            return;
        }
        // a packet from the CM peer before its RTU: the RTU was lost, the connection is up
        if self.qp.is_none()
            && self.cm_peer.map(IpAddr::V4) == Some(src)
            && self.device.cm_comm_established()
        {
            self.process_events();
        }
        let Some(qp) = self.qp.as_mut() else {
            self.counters.dropped += 1;
            return;
        };
        if let Some(Placement::Recv {
            wr_id,
            offset,
            data,
        }) = qp.handle_ib(now, src, dst, 0, ib)
        {
            if let Some(buf) = self.recv.get_mut(wr_id as usize) {
                let at = offset as usize;
                if at + data.len() <= buf.len() {
                    buf[at..at + data.len()].copy_from_slice(data);
                }
            }
        }
        while let Some(c) = qp.responder.poll_completion() {
            if c.status == RecvStatus::Success {
                self.counters.host_messages += 1;
                let len = (c.byte_len as usize).min(DEV_RECV_SIZE as usize);
                let msg = &self.recv[c.wr_id as usize][..len];
                self.device.orsp().on_host_message(msg);
                qp.responder.post_recv(c.wr_id, DEV_RECV_SIZE);
            }
        }
        self.drain_completions();
    }

    fn handle_gsi(&mut self, now: Instant, src: IpAddr, ib: &[u8]) {
        let (Some(mad), IpAddr::V4(src)) = (cm::mad_of(ib), src) else {
            self.counters.dropped += 1;
            return;
        };
        let mut out = [0u8; cm::MAD_LEN];
        if self.device.handle_cm(now, mad, &mut out) {
            self.cm_peer = Some(src);
            self.queue_mad(src, &out);
        }
        self.process_events();
    }

    fn queue_mad(&mut self, dst: Ipv4Addr, mad: &[u8; cm::MAD_LEN]) {
        let path = Path::new(IpAddr::V4(self.ip), IpAddr::V4(dst));
        let Some(ip) = path.ip_repr(0) else { return };
        let r = cm::mad_packet(ip, ROCE_PORT, ROCE_PORT, self.cm_psn);
        self.cm_psn = (self.cm_psn + 1) & 0x00ff_ffff;
        let mut pkt = [0u8; MAD_PACKET];
        let n = r.buffer_len();
        if n <= pkt.len() && r.emit(&mut pkt[..n], mad).is_ok() {
            let _ = self.cm_out.push_back((dst, pkt, n));
        }
    }

    fn drain_completions(&mut self) {
        let Some(qp) = self.qp.as_mut() else { return };
        let mut failed = None;
        while let Some(c) = qp.requester.poll_completion() {
            if c.status != WcStatus::Success && failed.is_none() {
                failed = Some(match c.status {
                    WcStatus::RemoteAccessError
                    | WcStatus::RemoteInvalidRequest
                    | WcStatus::RemoteOperationalError => event::REMOTE_ERROR,
                    _ => event::RETRY_EXCEEDED,
                });
            }
            self.device.orsp().on_completion(&c);
        }
        let rc = qp.requester.counters();
        self.device.set_rc_counters([
            rc.retransmitted_packets as u32,
            rc.rnr_naks as u32,
            rc.seq_naks as u32,
            rc.cnps as u32,
            rc.timeouts as u32,
        ]);
        if let Some(code) = failed {
            self.device.orsp_failed(code);
            self.process_events();
        }
        self.reclaim_frames();
    }

    /// The next RoCEv2 datagram to send at `now`, built in `out` (at least PMTU + 100 bytes).
    pub fn poll_transmit(&mut self, now: Instant, out: &mut [u8]) -> Option<Datagram> {
        self.process_events();
        if let Some((dst, pkt, n)) = self.cm_out.pop_front() {
            out[..n].copy_from_slice(&pkt[..n]);
            return Some(Datagram {
                payload: IP_UDP..n,
                dst,
                dst_port: ROCE_PORT,
            });
        }
        let host = self.host_ip?;
        let qp = self.qp.as_mut()?;
        // ACK/NAKs for the host's SENDs first: they are small and unblock the host
        if let Some(n) = qp.responder.poll_transmit(out) {
            return Some(Datagram {
                payload: IP_UDP..n,
                dst: host,
                dst_port: ROCE_PORT,
            });
        }
        // a due frame into a free slot, then its work requests to the send queue
        if let Some(&slot) = self.free.last()
            && let Some(frame) = self.device.poll_orsp_frame(now, &mut self.source)
        {
            self.offer(&frame, slot);
        }
        while let Some(wr) = self.device.orsp().poll_work() {
            if self.backlog.push_back(wr).is_err() {
                break;
            }
        }
        let qp = self.qp.as_mut()?;
        while let Some(wr) = self.backlog.front().copied() {
            if qp.requester.post(wr).is_err() {
                break;
            }
            self.backlog.pop_front();
        }
        let src = Payloads {
            frames: self.frames,
            slot_len: self.slot_len,
            orsp: self.device.orsp_channel(),
        };
        let n = qp
            .requester
            .poll_transmit(now, &src)
            .and_then(|p| p.copy_to(&src, out));
        self.drain_completions();
        n.map(|n| Datagram {
            payload: IP_UDP..n,
            dst: host,
            dst_port: ROCE_PORT,
        })
    }

    fn offer(&mut self, frame: &Frame, slot: u32) {
        let size = frame.size();
        if size > self.slot_len {
            self.counters.frames_too_large += 1;
            return;
        }
        let start = slot as usize * self.slot_len;
        self.source
            .read(frame, 0, &mut self.frames[start..start + size]);
        self.counters.frames_offered += 1;
        if self.device.orsp_send_frame(frame, slot) == FrameOutcome::Sent {
            self.free.retain(|&s| s != slot);
            let free = !self.free.is_empty();
            self.device.set_orsp_frame_memory_free(free);
        }
    }

    /// When [`handle_timeout`](Self::handle_timeout) or
    /// [`poll_transmit`](Self::poll_transmit) next has something to do.
    pub fn poll_timeout(&self) -> Option<Instant> {
        [
            self.device.poll_timeout(),
            self.device.cm_poll_timeout(),
            self.qp.as_ref().and_then(|q| q.requester.poll_timeout()),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// Run timers: heartbeat, ACK timeout, pacing, CM REP resend.
    pub fn handle_timeout(&mut self, now: Instant) {
        self.device.handle_timeout(now);
        let mut mad = [0u8; cm::MAD_LEN];
        if self.device.cm_handle_timeout(now, &mut mad)
            && let Some(peer) = self.cm_peer
        {
            self.queue_mad(peer, &mad);
        }
        if let Some(qp) = self.qp.as_mut() {
            qp.requester.handle_timeout(now);
        }
        self.process_events();
        self.drain_completions();
    }
}
