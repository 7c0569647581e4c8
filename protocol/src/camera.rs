//! The camera without I/O: the GigE Vision [`Device`], the RC queue pair ORSP streams on,
//! frame memory (a [`FrameMemory`] the caller lends), and receive buffers for host messages.
//! `no_std`, no allocator: the emulator drives it over UDP sockets (and, for its verbs
//! transport, as an external queue pair), the firmware over embassy-net, the simulator over a
//! virtual link.

use core::net::{IpAddr, Ipv4Addr, SocketAddrV4};

use heapless::{Deque, Vec};

use crate::cm;
use crate::device::ORSP_BUFFERS;
use crate::device::frame::{Frame, FrameSource, read_payload, refresh_payload};
use crate::device::stream::StreamPacket;
use crate::device::{Device, DeviceEvent, GvcpReply, regs};
use crate::judge::{self, Violation, ViolationKind};
use crate::orsp::channel::{DEV_RECV_DEPTH, DEV_RECV_SIZE, MSG_HANDLE_BASE, failure_code};
use crate::orsp::msg::event;
use crate::orsp::{ConnectParams, FrameOutcome, OrspChannel, TransportCounters};
use crate::rc::{
    Completion, DcqcnConfig, Instant, NEW_DATA_PROBES, Path, PayloadSource, Placement, QueuePair,
    RateConfig, RecvStatus, RequesterConfig, RequesterCounters, ResponderConfig, TxPacket,
    WcStatus, WorkRequest, split_rocev2,
};
use crate::wire::Opcode;

/// The PSN of a packet's BTH (`ib` from the BTH on), if it is long enough to have one.
fn bth_psn(ib: &[u8]) -> Option<u32> {
    let b = ib.get(..crate::wire::bth::HEADER_LEN)?;
    Some(crate::wire::bth::Packet::new_unchecked(b).psn())
}

/// Most frame slots a [`FrameMemory`] may have.
pub const MAX_SLOTS: usize = 8;
/// A CM MAD packet: IPv6 (the larger), UDP, BTH, DETH, MAD, ICRC.
pub const MAD_PACKET: usize = 40 + 8 + 12 + 8 + cm::MAD_LEN + 4;
/// The most packets the camera keeps unacknowledged, as rxe does: a loss costs at most this
/// many packets of go-back-N. A host's HOST_RX_WINDOW may lower it.
pub const MAX_UNACKED: u32 = 128;

type Qp = QueuePair<256, 256, 32, 1>;

/// Where frames are rendered and stay until their TRAILER completes: a board's frame buffers,
/// or the emulator's heap.
pub trait FrameMemory {
    /// Number of frame slots (at most [`MAX_SLOTS`]).
    fn slots(&self) -> usize;
    /// The frame in `slot`, as long as that frame.
    fn frame(&self, slot: u32) -> &[u8];
    /// Room for a frame of `len` bytes in `slot`; `None` when the slot cannot hold it.
    fn frame_mut(&mut self, slot: u32, len: usize) -> Option<&mut [u8]>;
}

/// Frame memory in one borrowed slice cut into `SLOTS` equal slots (a firmware's static).
#[derive(Debug)]
pub struct SliceFrames<'m, const SLOTS: usize> {
    mem: &'m mut [u8],
    len: [usize; SLOTS],
}

impl<'m, const SLOTS: usize> SliceFrames<'m, SLOTS> {
    /// `mem` in `SLOTS` slots of `mem.len() / SLOTS` bytes.
    pub fn new(mem: &'m mut [u8]) -> Self {
        SliceFrames {
            mem,
            len: [0; SLOTS],
        }
    }

    /// The largest frame a slot holds.
    pub fn slot_len(&self) -> usize {
        self.mem.len() / SLOTS
    }
}

impl<const SLOTS: usize> FrameMemory for SliceFrames<'_, SLOTS> {
    fn slots(&self) -> usize {
        SLOTS
    }

    fn frame(&self, slot: u32) -> &[u8] {
        let start = slot as usize * self.slot_len();
        &self.mem[start..start + self.len[slot as usize]]
    }

    fn frame_mut(&mut self, slot: u32, len: usize) -> Option<&mut [u8]> {
        let size = self.slot_len();
        if len > size || slot as usize >= SLOTS {
            return None;
        }
        self.len[slot as usize] = len;
        let start = slot as usize * size;
        Some(&mut self.mem[start..start + len])
    }
}

/// Where the camera's RoCEv2 traffic goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RocePorts {
    /// UDP port the camera sends from; 0 = its QP's entropy port (`udp_source_port`).
    pub camera_tx: u16,
    /// UDP port the host listens on for RoCEv2 (4791 normally).
    pub host_rx: u16,
}

/// What the camera did, for logs and summaries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CameraCounters {
    /// Frames handed to ORSP.
    pub frames_offered: u64,
    /// Host messages received.
    pub host_messages: u64,
    /// Received packets dropped (no connection, bad checksum).
    pub dropped: u64,
    /// Frames too large for a frame slot (not sent).
    pub frames_too_large: u64,
    /// RoCEv2 packets received with a wrong ICRC, dropped unread as an RDMA NIC drops them
    /// ([`Camera::handle_udp`]).
    pub bad_icrc: u64,
}

/// Payload bytes for the requester: frame memory below [`MSG_HANDLE_BASE`], message slots above.
struct Payloads<'a, M: FrameMemory> {
    frames: &'a M,
    orsp: &'a OrspChannel<ORSP_BUFFERS>,
}

impl<M: FrameMemory> PayloadSource for Payloads<'_, M> {
    fn payload(&self, handle: u32, offset: u64, len: usize) -> Option<&[u8]> {
        self.get(handle, offset, len)
    }
}

impl<'a, M: FrameMemory> Payloads<'a, M> {
    /// The bytes at `offset..offset + len` of `handle`, borrowed from the memory itself.
    fn get(&self, handle: u32, offset: u64, len: usize) -> Option<&'a [u8]> {
        if handle >= MSG_HANDLE_BASE {
            self.orsp.message(handle, offset, len)
        } else if (handle as usize) < self.frames.slots() {
            let start = usize::try_from(offset).ok()?;
            self.frames
                .frame(handle)
                .get(start..start.checked_add(len)?)
        } else {
            None
        }
    }
}

/// What [`Camera::poll_packet`] produced.
#[derive(Debug)]
pub enum Tx {
    /// A whole IP packet of this length in the caller's buffer.
    Bytes(usize),
    /// A queue-pair packet in pieces (headers, payload in frame memory, ICRC).
    Packet(TxPacket),
}

/// The camera: device, queue pair, frame memory.
pub struct Camera<S: FrameSource, M: FrameMemory> {
    device: Device,
    source: S,
    local_ip: IpAddr,
    ports: RocePorts,
    qp: Option<Qp>,
    host_ip: Option<IpAddr>,
    frames: M,
    free_frames: Vec<u32, MAX_SLOTS>,
    /// The frame each slot of `frames` holds, so the next one there is a refresh.
    held: [Option<Frame>; MAX_SLOTS],
    recv_bufs: [[u8; DEV_RECV_SIZE as usize]; DEV_RECV_DEPTH as usize],
    backlog: Deque<WorkRequest, 128>,
    cm_out: Deque<([u8; MAD_PACKET], usize), 4>,
    cm_psn: u32,
    cm_peer: Option<IpAddr>,
    /// The previous connection's QP number: packets still in flight to it are not the host's
    /// fault.
    last_qpn: Option<u32>,
    last_rc: Option<RequesterCounters>,
    counters: CameraCounters,
    events: Deque<DeviceEvent, 32>,
    trailers_sent: Deque<(u64, Instant), 32>,
    /// A transport outside this type (verbs) runs the queue pair: connects and disconnects are
    /// handed to it instead of building the soft QP.
    external: bool,
    external_connect: Option<(ConnectParams, IpAddr)>,
    external_disconnect: bool,
    /// Real randomness for the device's QPN and first PSN (the OS's, the board's).
    entropy: Option<fn() -> u64>,
    queue_slack_ns: u64,
    /// Packets are built by a data mover from descriptors ([`crate::rc::offload`]).
    icrc_offload: bool,
    /// The least a paced burst of the stream carries, bytes ([`Self::set_pace_burst`]).
    pace_burst: u32,
    /// The ICRC check of what arrives on a UDP socket ([`Camera::handle_udp`]).
    icrc_check: crate::wire::socket_icrc::SocketIcrcCheck,
}

impl<S: FrameSource, M: FrameMemory> core::fmt::Debug for Camera<S, M> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Camera")
            .field("local_ip", &self.local_ip)
            .field("connected", &self.qp.is_some())
            .field("counters", &self.counters)
            .finish_non_exhaustive()
    }
}

impl<S: FrameSource, M: FrameMemory> Camera<S, M> {
    /// A camera with `device`, frames from `source` rendered into `frames`, sending RoCEv2 as
    /// `ports` say.
    pub fn new(device: Device, source: S, frames: M, ports: RocePorts) -> Self {
        let local_ip = IpAddr::V4(device.ip());
        let mut free_frames = Vec::new();
        for s in (0..frames.slots().min(MAX_SLOTS) as u32).rev() {
            let _ = free_frames.push(s);
        }
        Camera {
            device,
            source,
            local_ip,
            ports,
            qp: None,
            host_ip: None,
            frames,
            free_frames,
            held: [None; MAX_SLOTS],
            recv_bufs: [[0; DEV_RECV_SIZE as usize]; DEV_RECV_DEPTH as usize],
            backlog: Deque::new(),
            cm_out: Deque::new(),
            cm_psn: 0,
            cm_peer: None,
            last_qpn: None,
            last_rc: None,
            counters: CameraCounters::default(),
            events: Deque::new(),
            trailers_sent: Deque::new(),
            external: false,
            external_connect: None,
            external_disconnect: false,
            entropy: None,
            queue_slack_ns: crate::rc::QUEUE_SLACK_NS,
            icrc_offload: false,
            pace_burst: 0,
            icrc_check: crate::wire::socket_icrc::SocketIcrcCheck::new(),
        }
    }

    /// Round trips more than twice the shortest plus `ns` count as queueing for the
    /// requester's window (default [`crate::rc::QUEUE_SLACK_NS`], for steady
    /// hardware round trips). The emulator's userspace stack on shared cores sets more.
    pub fn with_queue_slack(mut self, ns: u64) -> Self {
        self.queue_slack_ns = ns;
        self
    }

    /// Leave payload and ICRC to a data mover ([`crate::rc::offload`]): the queue pair's
    /// packets come out of [`poll_packet`](Self::poll_packet) with `icrc_pending`, and
    /// [`poll_transmit`](Self::poll_transmit) builds them with the software mover. From the next
    /// connection on.
    pub fn set_icrc_offload(&mut self, on: bool) {
        self.icrc_offload = on;
    }

    /// Pace the stream in bursts of at least `bytes` (at most 64 KiB), from the next
    /// connection on: the average rate stays the link's, and a camera that sleeps between
    /// bursts wakes once per burst rather than once per packet
    /// ([`RateController::set_min_burst`](crate::rc::RateController::set_min_burst)). 0, the
    /// default, sends each packet at its time (a NIC or an FPGA paces per packet for free).
    pub fn set_pace_burst(&mut self, bytes: u32) {
        self.pace_burst = bytes;
    }

    /// Draw the device's QPN and first PSN with `entropy` (the OS's random source in the
    /// emulator, the board's in the firmware): now, and again after every connection ends, so
    /// no other host can predict the numbers of the next connection.
    pub fn with_entropy(mut self, entropy: fn() -> u64) -> Self {
        self.entropy = Some(entropy);
        self.device.orsp_mut().reseed(entropy());
        self
    }

    /// Leave the queue pair to an external transport (the verbs transport): ORSP connects and
    /// disconnects are queued for [`take_connect`](Self::take_connect) and
    /// [`take_disconnect`](Self::take_disconnect), and that transport posts the work requests
    /// of [`poll_work`](Self::poll_work) and feeds back completions and host messages.
    pub fn with_external_transport(mut self) -> Self {
        self.external = true;
        // the NIC decides how much is in flight: a host's HOST_RX_WINDOW would not be kept
        self.device.orsp_mut().set_rx_window_capable(false);
        self
    }

    /// An ORSP connection to bring up on the external transport, with the host's address.
    pub fn take_connect(&mut self) -> Option<(ConnectParams, IpAddr)> {
        self.process_events();
        self.external_connect.take()
    }

    /// Whether the ORSP connection went away since the last call (tear the QP down).
    pub fn take_disconnect(&mut self) -> bool {
        self.process_events();
        core::mem::take(&mut self.external_disconnect)
    }

    /// A frame due now and the free frame slot to render it into (then
    /// [`render`](Self::render) and [`offer_frame`](Self::offer_frame)).
    pub fn next_frame(&mut self, now: Instant) -> Option<(Frame, u32)> {
        let slot = *self.free_frames.last()?;
        let frame = self.device.poll_orsp_frame(now, &mut self.source)?;
        Some((frame, slot))
    }

    /// The synthetic pixels of `frame`.
    pub fn render(&mut self, frame: &Frame, buf: &mut [u8]) {
        read_payload(&self.source, frame, 0, buf);
    }

    /// Hand a rendered frame in `slot` to ORSP; the slot stays taken while it is in flight.
    pub fn offer_frame(&mut self, frame: &Frame, slot: u32) -> FrameOutcome {
        self.counters.frames_offered += 1;
        let outcome = self.device.orsp_send_frame(frame, slot);
        if outcome == FrameOutcome::Sent {
            self.free_frames.retain(|&s| s != slot);
            self.device
                .set_orsp_frame_memory_free(!self.free_frames.is_empty());
        }
        outcome
    }

    /// The next work request for the send queue (external transport).
    pub fn poll_work(&mut self) -> Option<WorkRequest> {
        self.process_events();
        self.device.orsp_mut().poll_work()
    }

    /// The bytes of a message work request (`handle` at or above `MSG_HANDLE_BASE`).
    pub fn message(&self, handle: u32, offset: u64, len: usize) -> Option<&[u8]> {
        self.device.orsp().message(handle, offset, len)
    }

    /// A send completion from the external transport.
    pub fn complete(&mut self, c: &Completion) {
        // the first failure of a live connection ends it (the rest are flushes)
        let failed = c.status != WcStatus::Success && self.device.orsp().is_connected();
        self.device.orsp_mut().on_completion(c);
        if failed {
            self.device.orsp_failed(failure_code(c.status));
            self.process_events();
        }
        self.reclaim_frames();
    }

    /// A message the host SENT, received by the external transport.
    pub fn host_message(&mut self, bytes: &[u8]) {
        self.counters.host_messages += 1;
        self.device.orsp_host_message(bytes);
        self.process_events();
    }

    /// Use `ip` (for example an IPv6 address) for RoCEv2 instead of the GigE Vision address. A
    /// host then writes its own address of that family to OrspHostGid.
    pub fn with_roce_address(mut self, ip: IpAddr) -> Self {
        self.local_ip = ip;
        self
    }

    /// The device (registers, counters).
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// The device, to drive it (faults, Line0, the message channel).
    pub fn device_mut(&mut self) -> &mut Device {
        &mut self.device
    }

    /// Counters.
    pub fn counters(&self) -> CameraCounters {
        self.counters
    }

    /// Whether an ORSP connection is up.
    pub fn connected(&self) -> bool {
        self.qp.is_some()
    }

    /// The RC requester's counters: of the live connection, else of the last one.
    pub fn rc_counters(&self) -> Option<RequesterCounters> {
        self.qp
            .as_ref()
            .map(|q| q.requester.counters())
            .or(self.last_rc)
    }

    /// A TRAILER that left for the first time: its block id and when (it follows the frame's
    /// last payload packet at once, so this is when the frame's last byte left). The 32 newest
    /// are kept; for latency measurements.
    pub fn poll_trailer_sent(&mut self) -> Option<(u64, Instant)> {
        self.trailers_sent.pop_front()
    }

    /// The next device event since the last call (for logging; the 32 newest are kept).
    pub fn poll_event(&mut self) -> Option<DeviceEvent> {
        self.events.pop_front()
    }

    /// The next GVSP packet (classic streaming, when no ORSP host is connected).
    pub fn poll_gvsp(&mut self, now: Instant, buf: &mut [u8]) -> Option<StreamPacket> {
        self.device.poll_stream(now, &mut self.source, buf)
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

    fn process_events(&mut self) {
        while let Some(ev) = self.device.poll_event() {
            match ev {
                DeviceEvent::OrspConnect(p) => self.connect(p),
                DeviceEvent::OrspDisconnected => self.disconnect(),
                _ => {}
            }
            if self.events.is_full() {
                self.events.pop_front();
            }
            let _ = self.events.push_back(ev);
        }
    }

    /// Never inlined: it builds a queue pair on the stack (52 KiB), and
    /// [`process_events`](Self::process_events), run before every packet, probed that much
    /// stack each time when it held it inline.
    #[cold]
    #[inline(never)]
    fn connect(&mut self, p: ConnectParams) {
        // The host's RoCEv2 address: OrspHostGid when it is a real IPv6 GID, else GevSCDA.
        let gid = core::net::Ipv6Addr::from(p.host_gid);
        let scda = self.device.read_reg(regs::SCDA0).unwrap_or(0);
        let host_ip = if !gid.is_unspecified() && gid.to_ipv4_mapped().is_none() {
            IpAddr::V6(gid)
        } else if let Some(v4) = gid.to_ipv4_mapped() {
            IpAddr::V4(v4)
        } else if scda != 0 {
            IpAddr::V4(Ipv4Addr::from(scda))
        } else if let Some(c) = self.device.controller() {
            IpAddr::V4(*c.ip())
        } else {
            return;
        };
        if host_ip.is_ipv6() != self.local_ip.is_ipv6() {
            // the host's address family is not the one this camera streams on
            self.device.orsp_failed(event::REMOTE_ERROR);
            return;
        }
        if self.external {
            self.external_connect = Some((p, host_ip));
            self.host_ip = Some(host_ip);
            return;
        }
        let mut path = Path::new(self.local_ip, host_ip);
        // TX_TUNING's source port when the host chose one (ECMP entropy), else the transport's
        path.src_port = match p.src_port {
            0 => self.ports.camera_tx,
            port => port,
        };
        path.dst_port = self.ports.host_rx;
        path.dscp = p.tos >> 2;
        path.ecn = p.tos & 3;
        let mut rq = RequesterConfig::new(p.device_qpn, p.host_qpn, p.device_sq_psn, path);
        rq.pmtu = p.pmtu;
        rq.timeout = p.timeout;
        rq.retry_cnt = p.retry_cnt;
        rq.rnr_retry = p.rnr_retry;
        rq.ack_req_every = 64;
        // like rxe: a loss costs at most 128 packets of go-back-N; fewer when the host says it
        // holds fewer unread (a software host's socket buffer: more would overflow it, and be
        // resent, on a link that loses nothing). The new-data probes a silence draws go beyond
        // the window: they too must fit in what the host holds.
        rq.max_unacked = match p.host_rx_window {
            0 => MAX_UNACKED,
            w => w.saturating_sub(NEW_DATA_PROBES).clamp(1, MAX_UNACKED),
        };
        rq.queue_slack_ns = self.queue_slack_ns;
        rq.icrc_offload = self.icrc_offload;
        // the link speed (or the host's RATE_LIMIT) caps the rate; DCQCN cuts it on CNPs, as
        // RoCE NICs do, from that line rate
        let line = u64::from(p.rate_limit_mbps) * 1_000_000 / 8;
        rq.rate = RateConfig {
            static_limit: (line > 0).then_some(line),
            dcqcn: (p.dcqcn && line > 0).then(|| DcqcnConfig::new(line)),
        };
        let mut rs = ResponderConfig::new(p.device_qpn, p.host_qpn, p.host_sq_psn, path);
        rs.pmtu = p.pmtu;
        let mut qp = Qp::new(rq, rs);
        qp.requester.set_min_burst(self.pace_burst);
        for id in 0..DEV_RECV_DEPTH {
            qp.responder.post_recv(u64::from(id), DEV_RECV_SIZE);
        }
        self.qp = Some(qp);
        self.host_ip = Some(host_ip);
        self.backlog.clear();
    }

    fn disconnect(&mut self) {
        if self.external {
            self.external_connect = None;
            self.external_disconnect = true;
        }
        if let Some(q) = &self.qp {
            self.last_qpn = Some(q.requester.config().local_qpn);
        }
        self.last_rc = self.qp.take().map(|q| q.requester.counters());
        self.backlog.clear();
        self.reclaim_frames();
        if let Some(e) = self.entropy {
            self.device.orsp_mut().reseed(e());
        }
    }

    fn reclaim_frames(&mut self) {
        while let Some(h) = self.device.orsp_mut().poll_released_frame() {
            if !self.free_frames.contains(&h) {
                let _ = self.free_frames.push(h);
            }
        }
        self.device
            .set_orsp_frame_memory_free(!self.free_frames.is_empty());
    }

    /// The I/O layer kept `ip_packet`, one this camera sent (IPv4 or IPv6, UDP, BTH ...), off
    /// the wire on purpose (an injected loss or corruption): an ACK past it, before it goes
    /// again, acknowledges what the host never received (`ack_undelivered`).
    pub fn held_back(&mut self, ip_packet: &[u8]) {
        let ip_len = match ip_packet.first().map(|b| b >> 4) {
            Some(4) => usize::from(ip_packet[0] & 0x0f) * 4,
            Some(6) => 40,
            _ => return,
        };
        let Some(bth) = ip_packet.get(ip_len + 8..ip_len + 8 + 12) else {
            return;
        };
        if bth[0] == Opcode::UD_SEND_ONLY.0 {
            return; // a CM MAD, not the QP's
        }
        if let (Some(qp), Some(psn)) = (self.qp.as_mut(), bth_psn(bth)) {
            qp.requester.held_back(psn);
        }
    }

    /// [`Self::held_back`] for a packet known by its PSN.
    pub fn held_back_psn(&mut self, psn: u32) {
        if let Some(qp) = self.qp.as_mut() {
            qp.requester.held_back(psn);
        }
    }

    /// A received RoCEv2 IP packet (ICRC checked).
    pub fn handle_datagram(&mut self, now: Instant, packet: &[u8]) {
        match split_rocev2(packet) {
            Ok((src, dst, ecn, ib)) => self.handle_ib(now, src, dst, ecn, ib),
            Err(crate::wire::Error::Checksum) => {
                // an ICRC (or UDP checksum) that does not match: dropped unread, named
                self.counters.bad_icrc += 1;
                let v = Violation::new(ViolationKind::BadIcrc, 0, 0, None);
                self.device.violations_mut().record(v);
            }
            Err(_) => self.counters.dropped += 1,
        }
    }

    /// A RoCEv2 datagram received on a UDP socket from `src` at `dst` (BTH to ICRC): its ICRC
    /// is checked against the headers it must have had, as an RDMA NIC checks it, and a packet
    /// whose ICRC is wrong is dropped unread and counted (`bad_icrc`); the rest goes to
    /// [`Self::handle_ib`]. Returns whether the packet was taken.
    pub fn handle_udp(
        &mut self,
        now: Instant,
        src: core::net::SocketAddr,
        dst: core::net::SocketAddr,
        ib: &[u8],
    ) -> bool {
        if !self.icrc_check.ok(src, dst, ib) {
            self.counters.bad_icrc += 1;
            let psn = bth_psn(ib);
            let v = Violation::new(ViolationKind::BadIcrc, 0, 0, psn);
            self.device.violations_mut().record(v);
            return false;
        }
        self.handle_ib(now, src.ip(), dst.ip(), 0, ib);
        true
    }

    /// The InfiniBand part of a received packet whose ICRC was checked (or could not be: a
    /// verbs NIC checks it itself): [`Self::handle_udp`] for what a UDP socket hands over.
    pub fn handle_ib(&mut self, now: Instant, src: IpAddr, dst: IpAddr, ecn: u8, ib: &[u8]) {
        if ib.first() == Some(&Opcode::UD_SEND_ONLY.0) {
            self.handle_gsi(now, src, ib);
            return;
        }
        // a packet from the CM peer before its RTU: the RTU was lost, the connection is up
        if self.qp.is_none() && self.cm_peer == Some(src) && self.device.cm_comm_established() {
            self.process_events();
        }
        let Some(qp) = self.qp.as_mut() else {
            self.counters.dropped += 1;
            return;
        };
        // checked as the host's RNIC would check it, and named when wrong ([`judge`]); a
        // packet from elsewhere is a bystander's, not the host's, and the QP drops it
        if src == qp.requester.config().path.remote_ip
            && let Some(v) = judge::check_header(ib, qp.requester.config().local_qpn)
        {
            if !(v.kind == ViolationKind::DestQp && Some(v.got) == self.last_qpn) {
                self.device.violations_mut().record(v);
            }
            // an opcode the QP does not take still reaches it, to be NAKed as a NIC NAKs it
            if v.kind != ViolationKind::Opcode {
                self.counters.dropped += 1;
                return;
            }
        }
        let placed = qp.handle_ib(now, src, dst, ecn, ib);
        if let Some(v) = qp.requester.take_violation() {
            self.device.violations_mut().record(v);
        }
        if let Some(Placement::Recv {
            wr_id,
            offset,
            data,
        }) = placed
        {
            if let Some(buf) = self.recv_bufs.get_mut(wr_id as usize) {
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
                let msg = &self.recv_bufs[c.wr_id as usize][..len];
                self.device.orsp_host_message(msg);
                qp.responder.post_recv(c.wr_id, DEV_RECV_SIZE);
            }
        }
        // the host sent what the receive side cannot take (a SEND longer than DEV_RECV_SIZE):
        // the responder NAKed it and went to the error state, so the connection is over; say
        // so in STATUS instead of streaming on with a dead receive side
        if qp.responder.is_error() && self.device.orsp().is_connected() {
            let len = ib.len().saturating_sub(16) as u32;
            let psn = bth_psn(ib);
            let v = Violation::new(ViolationKind::Request, 0, len, psn);
            self.device.violations_mut().record(v);
            self.device.orsp_failed(event::HOST_MESSAGE_REFUSED);
            self.process_events();
            return;
        }
        self.drain_completions();
    }

    /// A UD SEND ONLY to QP1 with the GSI Q_Key: an RDMA CM MAD. Replies go back to the
    /// sender's QP1 from ours.
    fn handle_gsi(&mut self, now: Instant, src: IpAddr, ib: &[u8]) {
        let Some(mad) = cm::mad_of(ib) else {
            self.counters.dropped += 1;
            return;
        };
        let mut out = [0u8; cm::MAD_LEN];
        if self.device.handle_cm(now, src, mad, &mut out) {
            self.cm_peer = Some(src);
            self.queue_mad(src, &out);
        }
        self.process_events();
    }

    /// Queue a CM MAD as a UD SEND ONLY from our QP1 to `dst`'s QP1 (GSI Q_Key).
    fn queue_mad(&mut self, dst: IpAddr, mad: &[u8; cm::MAD_LEN]) {
        let path = Path::new(self.local_ip, dst);
        let Some(ip) = path.ip_repr(0) else { return };
        // from the camera's fixed RoCEv2 port if it has one, else the GSI QP pair's entropy port
        let src_port = match self.ports.camera_tx {
            0 => path.source_port(1, 1),
            p => p,
        };
        let r = cm::mad_packet(ip, src_port, self.ports.host_rx, self.cm_psn);
        self.cm_psn = (self.cm_psn + 1) & 0x00ff_ffff;
        let mut pkt = [0u8; MAD_PACKET];
        let n = r.buffer_len();
        if n <= pkt.len() && r.emit(&mut pkt[..n], mad).is_ok() {
            let _ = self.cm_out.push_back((pkt, n));
        }
    }

    fn drain_completions(&mut self) {
        let Some(qp) = self.qp.as_mut() else { return };
        let mut failed = None;
        while let Some(c) = qp.requester.poll_completion() {
            if c.status != WcStatus::Success && failed.is_none() {
                failed = Some(failure_code(c.status));
            }
            self.device.orsp_mut().on_completion(&c);
        }
        let rc = qp.requester.counters();
        self.device.set_transport_counters(TransportCounters {
            retransmitted: rc.retransmitted_packets as u32,
            rnr_naks: rc.rnr_naks as u32,
            seq_naks: rc.seq_naks as u32,
            cnps: rc.cnps as u32,
            // the timeouts that sent something again: a wait that resent nothing (a late
            // ACK on a clean path) read as "the host's ACKs are late" to host authors
            ack_timeouts: rc.go_backs as u32,
        });
        if let Some(code) = failed {
            self.device.orsp_failed(code);
            self.process_events();
        }
        self.reclaim_frames();
    }

    /// The next RoCEv2 IP packet to send at `now` into `out`; returns its length.
    /// `out` must hold a whole packet (path MTU + 100 bytes, and [`MAD_PACKET`]).
    pub fn poll_transmit(&mut self, now: Instant, out: &mut [u8]) -> Option<usize> {
        match self.poll_packet(now, 0, out)? {
            Tx::Bytes(n) => Some(n),
            Tx::Packet(p) => self.write_packet(&p, out),
        }
    }

    /// A packet [`poll_packet`](Self::poll_packet) returned in pieces, written whole into
    /// `out` (for a transmitter without gather I/O); returns its length.
    pub fn write_packet(&self, p: &TxPacket, out: &mut [u8]) -> Option<usize> {
        if p.icrc_pending {
            // what an FPGA's data mover does with the descriptor, in software
            let d = crate::rc::offload::TxDescriptor::of(p);
            crate::rc::offload::move_packet(&d, &self.payloads(), out).ok()
        } else {
            p.copy_to(&self.payloads(), out)
        }
    }

    /// The next thing to send at `now`: small packets (ACKs, CM MADs) built in `out`, or a
    /// queue-pair packet in pieces whose payload stays in frame memory ([`payload`](Self::payload))
    /// for gather I/O. `ipv4_ident` is the IPv4 identification the kernel will write (its
    /// index in a GSO send); the ICRC is computed with it.
    pub fn poll_packet(&mut self, now: Instant, ipv4_ident: u16, out: &mut [u8]) -> Option<Tx> {
        self.process_events();
        if let Some((pkt, n)) = self.cm_out.pop_front() {
            out.get_mut(..n)?.copy_from_slice(&pkt[..n]);
            return Some(Tx::Bytes(n));
        }
        let qp = self.qp.as_mut()?;
        // ACK/NAKs for the host's SENDs first: they are small and unblock the host.
        if let Some(n) = qp.responder.poll_transmit(out) {
            return Some(Tx::Bytes(n));
        }
        // A due frame into free frame memory, then its work requests to the send queue.
        if let Some((frame, slot)) = self.next_frame(now) {
            match self.frames.frame_mut(slot, frame.size()) {
                Some(buf) => {
                    let held = &mut self.held[slot as usize];
                    match held {
                        Some(h) if h.size() == buf.len() => {
                            refresh_payload(&self.source, h, &frame, buf)
                        }
                        _ => read_payload(&self.source, &frame, 0, buf),
                    }
                    *held = Some(frame);
                    self.offer_frame(&frame, slot);
                }
                None => self.counters.frames_too_large += 1,
            }
        }
        while !self.backlog.is_full() {
            let Some(wr) = self.device.orsp_mut().poll_work() else {
                break;
            };
            let _ = self.backlog.push_back(wr);
        }
        let qp = self.qp.as_mut()?;
        while let Some(wr) = self.backlog.front().copied() {
            if qp.requester.post(wr).is_err() {
                break;
            }
            self.backlog.pop_front();
        }
        let src = Payloads {
            frames: &self.frames,
            orsp: self.device.orsp(),
        };
        qp.requester.set_ipv4_ident(ipv4_ident);
        let pkt = qp.requester.poll_transmit(now, &src);
        self.drain_completions();
        if let Some(p) = &pkt
            && !p.retransmission
            && p.payload.handle >= MSG_HANDLE_BASE
            && let Some(bytes) = self.device.orsp().message(
                p.payload.handle,
                p.payload.offset,
                p.payload_len as usize,
            )
            && let Ok((_, crate::orsp::msg::DeviceMessage::Trailer { block_id, .. })) =
                crate::orsp::msg::parse_device(bytes)
        {
            if self.trailers_sent.is_full() {
                self.trailers_sent.pop_front();
            }
            let _ = self.trailers_sent.push_back((block_id, now));
        }
        pkt.map(Tx::Packet)
    }

    fn payloads(&self) -> Payloads<'_, M> {
        Payloads {
            frames: &self.frames,
            orsp: self.device.orsp(),
        }
    }

    /// The payload bytes of a packet [`poll_packet`](Self::poll_packet) returned.
    pub fn payload(&self, p: &TxPacket) -> &[u8] {
        self.payloads()
            .get(p.payload.handle, p.payload.offset, p.payload_len as usize)
            .expect("a packet's payload stays in memory until its work request completes")
    }

    /// When the camera next needs [`handle_timeout`](Self::handle_timeout) or
    /// [`poll_transmit`](Self::poll_transmit).
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.next_timer(false)
    }

    /// [`Self::poll_timeout`] for a caller that sleeps until it: the pacer's next burst moved
    /// on by one burst's time while a frame's TRAILER is still several bursts away, so a caller
    /// the pacer alone holds back wakes once for two bursts
    /// ([`Requester::pace_lull_ns`](crate::rc::Requester::pace_lull_ns)); every other timer
    /// as it is.
    pub fn poll_timeout_lulled(&self) -> Option<Instant> {
        self.next_timer(true)
    }

    fn next_timer(&self, lulled: bool) -> Option<Instant> {
        let rc = self.qp.as_ref().and_then(|q| {
            if lulled {
                q.requester.poll_timeout_lulled()
            } else {
                q.requester.poll_timeout()
            }
        });
        [
            self.device.poll_timeout(),
            self.device.cm_poll_timeout(),
            rc,
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// Whether everything the stream has to send went out (what is left waits for ACKs only to
    /// complete): then no ACK lets a packet go, and the caller need not poll for one (the tail
    /// of each frame, and a camera between frames).
    pub fn all_sent(&self) -> bool {
        self.backlog.is_empty()
            && !self.device.orsp().work_pending()
            && self.qp.as_ref().is_none_or(|q| q.requester.all_sent())
    }

    /// Packets the stream still sends before the last packet of its next solicited request (a
    /// frame's TRAILER, what a host waits for) leaves; `None` when none is posted unsent.
    pub fn packets_to_solicited(&self) -> Option<u32> {
        self.qp
            .as_ref()
            .and_then(|q| q.requester.packets_to_solicited())
    }

    /// Whether the stream has a packet due that only the pacer holds back (the window is open):
    /// then an ACK cannot send anything sooner, and the caller may sleep until
    /// [`Self::poll_timeout`] instead of polling for one.
    pub fn pace_bound(&self) -> bool {
        self.qp.as_ref().is_some_and(|q| q.requester.can_send())
    }

    /// Run timers: heartbeat, ACK timeout, rate, CM REP resend.
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
