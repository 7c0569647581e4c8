//! The ORSP stream channel of the device: registers, connection state, buffers and credits,
//! and the per-frame work requests (LEADER SEND, payload WRITEs, TRAILER SEND).

use heapless::{Deque, Vec};

use super::msg::{self, Descriptor, HostMessage, event};
use super::regs;
use crate::gev::gvsp::{ImageLeader, ImageTrailer, TrailerChunks};
use crate::gev::status;
use crate::rc::{Completion, PayloadRef, WcStatus, WorkRequest};
use crate::secret::Secret;
use crate::wire::pmtu::Pmtu;

mod registers;

/// TX_TUNING's default: DSCP 0, ECN-capable transport ECT(0).
pub const ECT0: u32 = 0b10;

/// Payload handles at and above this name the channel's own message slots; below are frames.
pub const MSG_HANDLE_BASE: u32 = 0x8000_0000;
/// Largest device → host message (MAX_CTRL_MSG).
pub const MAX_CTRL_MSG: usize = 512;
/// Receives the device keeps posted for host messages (DEV_RECV_DEPTH).
pub const DEV_RECV_DEPTH: u32 = 16;
/// Largest host → device message (DEV_RECV_SIZE).
pub const DEV_RECV_SIZE: u32 = 1024;
const SLOTS: usize = 16;
const MAX_IN_FLIGHT: usize = 4;
/// Work requests the channel queues for the transport.
const PENDING: usize = 64;
/// The most payload WRITE messages one frame is split into: with its LEADER and TRAILER a frame
/// always fits the room [`OrspChannel::ready_for_frame`] asks for, whatever OrspWriteChunk says.
pub const MAX_WRITES_PER_FRAME: u64 = 32;
/// The default OrspWriteChunk, and what it returns to when the host that set it loses control.
pub const DEFAULT_WRITE_CHUNK: u32 = 1 << 20;

const TAG_MSG: u64 = 1 << 48;
const TAG_TRAILER: u64 = 2 << 48;
const TAG_WRITE: u64 = 3 << 48;

/// Channel states (STATUS bits 3..0, `docs/orsp-spec.md` §4).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    /// Nothing configured.
    Idle = 0,
    /// HOST_QPN written.
    Configured = 1,
    /// CONNECT accepted; HELLO sent.
    Connected = 2,
    /// Acquisition running.
    Streaming = 3,
    /// Acquisition stopped, frames in flight finishing; STREAM_END follows.
    Draining = 4,
    /// A fatal transport error; the code is in STATUS bits 31..16.
    Error = 15,
}

impl State {
    /// The state a STATUS register word shows (bits 3..0); `None` for a value no state has.
    pub const fn of_status(status: u32) -> Option<State> {
        Some(match status & 0xf {
            0 => State::Idle,
            1 => State::Configured,
            2 => State::Connected,
            3 => State::Streaming,
            4 => State::Draining,
            15 => State::Error,
            _ => return None,
        })
    }

    /// Connected, streaming or draining: a connection the camera holds and sends on.
    pub const fn holds_connection(self) -> bool {
        matches!(self, State::Connected | State::Streaming | State::Draining)
    }
}

/// ORSP counters (COUNTERS registers and the host's statistics).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct OrspCounters {
    /// Frames whose TRAILER was sent.
    pub frames_sent: u32,
    /// Frames dropped for want of a queued buffer.
    pub frames_dropped: u32,
    /// Frames larger than their buffer, truncated.
    pub frames_truncated: u32,
    /// Malformed host messages ignored.
    pub bad_messages: u32,
}

/// The transport's counters that the COUNTERS registers show beside the channel's own (a
/// transport's view: the soft queue pair's requester, or what a NIC reports).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TransportCounters {
    /// RoCEv2 packets sent again.
    pub retransmitted: u32,
    /// RNR NAKs received.
    pub rnr_naks: u32,
    /// PSN sequence error NAKs received.
    pub seq_naks: u32,
    /// CNPs received.
    pub cnps: u32,
    /// Local ACK timeouts that sent outstanding packets again (waits that resent nothing are
    /// not counted).
    pub ack_timeouts: u32,
}

/// What the transport needs to bring its queue pair up after CONNECT.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectParams {
    /// The host's QP.
    pub host_qpn: u32,
    /// The host's first send PSN (the device's expected receive PSN).
    pub host_sq_psn: u32,
    /// The device's QP.
    pub device_qpn: u32,
    /// The device's first send PSN.
    pub device_sq_psn: u32,
    /// Path MTU.
    pub pmtu: Pmtu,
    /// retry_cnt.
    pub retry_cnt: u8,
    /// rnr_retry.
    pub rnr_retry: u8,
    /// Local ACK timeout exponent.
    pub timeout: u8,
    /// DSCP/ECN byte.
    pub tos: u8,
    /// UDP source port the host asked for (TX_TUNING bits 31..16; 0 = the device's choice).
    pub src_port: u16,
    /// Most the stream may send, Mbit/s (RATE_LIMIT; 0 = the link speed).
    pub rate_limit_mbps: u32,
    /// DCQCN reacts to CNPs (CONGESTION_CONTROL 0).
    pub dcqcn: bool,
    /// Most packets the host holds unread (HOST_RX_WINDOW; 0 = no limit from the host).
    pub host_rx_window: u32,
    /// The host's GID (zero = derive `::ffff:` + SCDA).
    pub host_gid: [u8; 16],
}

/// What happened to a frame handed to [`OrspChannel::send_frame`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FrameOutcome {
    /// Its work requests are queued; the frame memory is released by a later completion.
    Sent,
    /// No buffer was queued: dropped, block id advanced. The frame memory is free now.
    Dropped,
    /// The channel is not streaming. The frame memory is free now.
    NotStreaming,
}

#[derive(Debug, Clone, Copy)]
struct InFlight {
    frame_handle: u32,
}

/// The ORSP side of one stream channel. `BUFS` bounds announced buffers.
#[derive(Debug)]
pub struct OrspChannel<const BUFS: usize> {
    state: State,
    last_error: u16,
    device_qpn: u32,
    device_sq_psn: u32,
    /// The generator the device's QPN, first PSN and CM communication IDs are drawn from;
    /// the I/O layer stirs in real entropy ([`Self::reseed`]) so none can be guessed by
    /// another host.
    rng: Secret,
    /// A transport (verbs) set the real QPN: never draw one.
    qpn_fixed: bool,
    host_sq_psn: u32,
    host_qpn: u32,
    host_gid: [u8; 16],
    host_mac: [u32; 2],
    path_mtu: u32,
    max_pmtu: u32,
    retry: u32,
    tx_tuning: u32,
    tos_capable: bool,
    rate_limit: u32,
    congestion_control: u32,
    host_rx_window: u32,
    rx_window_capable: bool,
    write_chunk: u32,
    cm_port: u32,
    announced: Vec<Descriptor, BUFS>,
    queued: Deque<u32, BUFS>,
    slots: [[u8; MAX_CTRL_MSG]; SLOTS],
    slot_len: [u16; SLOTS],
    slot_busy: u32,
    pending: Deque<WorkRequest, PENDING>,
    in_flight: Deque<InFlight, MAX_IN_FLIGHT>,
    tx_seq: u32,
    rx_seq: u32,
    block_id: u64,
    previous_dropped: bool,
    stop_requested: bool,
    released_frames: Deque<u32, MAX_IN_FLIGHT>,
    /// A FLUSH answered in part: the queued buffers its RELEASED parts still owe.
    flush_left: Option<usize>,
    counters: OrspCounters,
    /// The seq of a host message refused since [`Self::take_refused`] last looked.
    refused: Option<u32>,
}

impl<const BUFS: usize> OrspChannel<BUFS> {
    /// A channel in state idle. `device_qpn` is the QP the device sends from until the first
    /// [`Self::reseed`] or disconnect draws another; `entropy` seeds the first PSN (pass real
    /// randomness: the OS's, or the board's).
    pub fn new(device_qpn: u32, entropy: u64, max_pmtu: Pmtu) -> Self {
        let mut rng = Secret::new(entropy);
        let first_psn = rng.next_u32() & 0x00ff_ffff;
        OrspChannel {
            state: State::Idle,
            last_error: 0,
            device_qpn: device_qpn & 0x00ff_ffff,
            device_sq_psn: first_psn,
            rng,
            qpn_fixed: false,
            host_sq_psn: 0,
            host_qpn: 0,
            host_gid: [0; 16],
            host_mac: [0; 2],
            path_mtu: max_pmtu as u32,
            max_pmtu: max_pmtu as u32,
            retry: 6 | (7 << 4) | (14 << 8),
            // ECN-capable (ECT(0)) unless the host says otherwise: switches mark it instead of
            // dropping, and the host's CNPs drive DCQCN
            tx_tuning: ECT0,
            tos_capable: true,
            rate_limit: 0,
            congestion_control: 0,
            host_rx_window: 0,
            rx_window_capable: true,
            write_chunk: DEFAULT_WRITE_CHUNK,
            cm_port: 0,
            announced: Vec::new(),
            queued: Deque::new(),
            slots: [[0; MAX_CTRL_MSG]; SLOTS],
            slot_len: [0; SLOTS],
            slot_busy: 0,
            pending: Deque::new(),
            in_flight: Deque::new(),
            tx_seq: 0,
            rx_seq: 0,
            block_id: 0,
            previous_dropped: false,
            stop_requested: false,
            released_frames: Deque::new(),
            flush_left: None,
            counters: OrspCounters::default(),
            refused: None,
        }
    }

    /// Current state.
    pub fn state(&self) -> State {
        self.state
    }
    /// The code of the last fatal error (STATUS bits 31..16).
    pub fn last_error(&self) -> u16 {
        self.last_error
    }
    /// Counters.
    pub fn counters(&self) -> OrspCounters {
        self.counters
    }
    /// Buffers queued and not yet used.
    pub fn queued_buffers(&self) -> usize {
        self.queued.len()
    }
    /// Whether a connection is up (connected, streaming or draining).
    pub fn is_connected(&self) -> bool {
        matches!(
            self.state,
            State::Connected | State::Streaming | State::Draining
        )
    }

    // ------------------------------------------------------------- registers

    /// The host GID the controlling application wrote to HOST_GID (zero if none).
    pub fn host_gid(&self) -> [u8; 16] {
        self.host_gid
    }

    /// CONNECT: validate, queue HELLO, go to connected.
    pub fn connect(&mut self) -> Result<ConnectParams, u16> {
        if self.state != State::Configured || self.host_qpn == 0 {
            return Err(status::INVALID_PARAMETER);
        }
        let pmtu = Pmtu::from_code(self.path_mtu as u8).ok_or(status::INVALID_PARAMETER)?;
        let params = self.enter_connected(pmtu);
        let hello = self.hello(pmtu.bytes());
        self.send_message(true, |b, seq| hello.emit(b, seq).map_err(|_| ()));
        Ok(params)
    }

    /// Connect through the RDMA CM (on RTU): the host's QPN, our send PSN and the path MTU came
    /// in the REQ, the host's send PSN in our REP, which also carried the HELLO, so no HELLO SEND
    /// follows. DEVICE_SQ_PSN becomes `device_sq_psn`.
    pub fn connect_cm(
        &mut self,
        host_qpn: u32,
        host_sq_psn: u32,
        device_sq_psn: u32,
        pmtu: Pmtu,
        host_gid: [u8; 16],
    ) -> Result<ConnectParams, u16> {
        if self.is_connected() || pmtu as u32 > self.max_pmtu {
            return Err(status::BUSY);
        }
        self.host_qpn = host_qpn & 0x00ff_ffff;
        self.host_sq_psn = host_sq_psn & 0x00ff_ffff;
        self.device_sq_psn = device_sq_psn & 0x00ff_ffff;
        self.host_gid = host_gid;
        self.path_mtu = pmtu as u32;
        Ok(self.enter_connected(pmtu))
    }

    /// Both ways of connecting end here: sequence numbers from 0, state connected.
    fn enter_connected(&mut self, pmtu: Pmtu) -> ConnectParams {
        self.tx_seq = 0;
        self.rx_seq = 0;
        self.state = State::Connected;
        self.last_error = 0;
        ConnectParams {
            host_qpn: self.host_qpn,
            host_sq_psn: self.host_sq_psn,
            device_qpn: self.device_qpn,
            device_sq_psn: self.device_sq_psn,
            pmtu,
            retry_cnt: (self.retry & 7) as u8,
            rnr_retry: ((self.retry >> 4) & 7) as u8,
            timeout: ((self.retry >> 8) & 0x1f) as u8,
            tos: self.tx_tuning as u8,
            src_port: (self.tx_tuning >> 16) as u16,
            rate_limit_mbps: self.rate_limit,
            dcqcn: self.congestion_control == 0,
            host_rx_window: self.host_rx_window,
            host_gid: self.host_gid,
        }
    }

    /// The HELLO this channel sends (CONNECT) or puts in its CM REP.
    fn hello(&self, path_mtu: u32) -> msg::Hello {
        msg::Hello {
            orsp_version: 0x0001_0000,
            caps: self.caps(),
            max_ctrl_msg: MAX_CTRL_MSG as u32,
            dev_recv_depth: DEV_RECV_DEPTH,
            max_buffers: BUFS as u32,
            path_mtu,
        }
    }

    /// The HELLO message (40 bytes) the RDMA CM REP carries as private data; its path MTU is
    /// the current PATH_MTU (the device patches in the REQ's once it is known).
    pub fn hello_body(&self, out: &mut [u8; msg::HELLO_LEN]) {
        let pmtu = Pmtu::from_code(self.path_mtu as u8).map_or(0, |p| p.bytes());
        let _ = self.hello(pmtu).emit(out, 0);
    }

    /// Device QPN and current starting PSN (for the CM REP).
    pub fn device_qp(&self) -> (u32, u32) {
        (self.device_qpn, self.device_sq_psn)
    }

    /// ORSP_CAPS.
    fn caps(&self) -> u32 {
        let tos = if self.tos_capable { regs::CAP_TOS } else { 0 };
        regs::CAP_RC
            | regs::CAP_CHUNKS
            | regs::CAP_CM
            | tos
            | if self.rx_window_capable {
                regs::CAP_RX_WINDOW
            } else {
                0
            }
            | (self.max_pmtu << 8)
    }

    /// Whether the transport keeps HOST_RX_WINDOW (default yes: the requester of this crate
    /// does). A transport whose NIC decides what is in flight (verbs) says no: CAPS bit 7
    /// clears, and a host knows its window is not kept.
    pub fn set_rx_window_capable(&mut self, capable: bool) {
        self.rx_window_capable = capable;
    }

    /// Whether the transport puts TX_TUNING's DSCP/ECN byte on the wire (default yes). A
    /// device on an IP stack that writes its own TOS says no: CAPS bit 6 clears and the byte
    /// reads back 0.
    pub fn set_tos_capable(&mut self, capable: bool) {
        self.tos_capable = capable;
        if !capable {
            self.tx_tuning &= !0xff;
        }
    }

    /// Use `qpn` as the device QP from now on (a transport whose QP numbers a NIC assigns sets
    /// the real one before each connection; DEVICE_QPN reads it).
    pub fn set_device_qpn(&mut self, qpn: u32) {
        self.device_qpn = qpn & 0x00ff_ffff;
        self.qpn_fixed = true;
    }

    /// Stir fresh entropy (from the OS, or the board's source) into the generator and, while
    /// no connection is up, draw a new device QPN and first PSN with it: the I/O layer calls
    /// this at start-up and after every connection ends, so a host that is not in control
    /// cannot predict the numbers of the next connection.
    pub fn reseed(&mut self, entropy: u64) {
        self.rng.stir(entropy);
        if !self.is_connected() {
            self.draw_numbers();
        }
    }

    /// A QPN (24 bits, never the reserved 0 and 1, never below 0x100) and a first PSN.
    fn draw_numbers(&mut self) {
        let r = self.rng.next_u64();
        self.device_sq_psn = r as u32 & 0x00ff_ffff;
        if !self.qpn_fixed {
            self.device_qpn = 0x100 + ((r >> 32) as u32 % (0x0100_0000 - 0x100));
        }
    }

    /// A key for the RDMA CM's communication IDs, from the same secret generator.
    pub fn draw_secret(&mut self) -> u64 {
        self.rng.next_u64()
    }

    /// Lower the largest path MTU the camera takes (ORSP_CAPS bits 11..8, and the limit of a
    /// PATH_MTU write) to what its link carries, such as a verbs port's active MTU, so a host
    /// asking for more gets INVALID_PARAMETER at once instead of a QP that cannot connect.
    pub fn set_max_pmtu(&mut self, pmtu: Pmtu) {
        self.max_pmtu = pmtu as u32;
        self.path_mtu = self.path_mtu.min(self.max_pmtu);
    }

    /// Set the CM listener port (the CM_PORT register's power-on value).
    pub fn set_cm_port(&mut self, port: u16) {
        self.cm_port = u32::from(port);
    }

    /// The CM listener port (CM_PORT register; 0 = no listener).
    pub fn cm_port(&self) -> u16 {
        self.cm_port as u16
    }

    /// DISCONNECT: back to idle from any state, buffers forgotten, HOST_QPN cleared, a new
    /// device PSN. Frames in flight are released (see [`Self::poll_released_frame`]).
    pub fn disconnect(&mut self) {
        self.reset_connection();
        self.host_qpn = 0;
        self.state = State::Idle;
    }

    /// Heartbeat expiry or loss of control: an implicit DISCONNECT that leaves code 0x9003 in
    /// STATUS for the next host to read.
    pub fn control_lost(&mut self) {
        let was_idle = self.state == State::Idle;
        self.disconnect();
        // settings of the host that is gone do not outlive it
        self.write_chunk = DEFAULT_WRITE_CHUNK;
        self.tx_tuning = if self.tos_capable { ECT0 } else { 0 };
        self.rate_limit = 0;
        self.congestion_control = 0;
        self.host_rx_window = 0;
        if !was_idle {
            self.last_error = event::CONTROL_LOST;
        }
    }

    fn reset_connection(&mut self) {
        while let Some(f) = self.in_flight.pop_front() {
            let _ = self.released_frames.push_back(f.frame_handle);
        }
        self.pending.clear();
        self.slot_busy = 0;
        self.announced.clear();
        self.queued.clear();
        self.flush_left = None;
        self.draw_numbers();
        self.stop_requested = false;
    }

    /// The connection is broken beyond repair (retry exhaustion, fatal NAK): go to error.
    pub fn fail(&mut self, code: u16) {
        self.reset_connection();
        self.last_error = code;
        self.state = State::Error;
    }

    // ------------------------------------------------------------- acquisition

    /// AcquisitionStart: frames go out from now on.
    pub fn start_acquisition(&mut self) {
        if self.state == State::Connected {
            self.state = State::Streaming;
            self.stop_requested = false;
        }
    }

    /// AcquisitionStop: finish the frame in flight, then STREAM_END.
    pub fn stop_acquisition(&mut self) {
        if self.state == State::Streaming {
            self.state = State::Draining;
            self.stop_requested = true;
            self.maybe_stream_end();
        }
    }

    fn maybe_stream_end(&mut self) {
        if self.state == State::Draining && self.in_flight.is_empty() && self.stop_requested {
            let (last, sent, dropped) = (
                self.block_id,
                self.counters.frames_sent,
                self.counters.frames_dropped,
            );
            if self.send_message(true, |b, seq| {
                msg::emit_stream_end(b, seq, last, sent, dropped).map_err(|_| ())
            }) {
                self.stop_requested = false;
                self.state = State::Connected;
            }
        }
    }

    /// Whether a new frame can be taken now (streaming, and room for its messages).
    pub fn ready_for_frame(&self) -> bool {
        self.state == State::Streaming
            && !self.in_flight.is_full()
            && self.free_slots() >= 2
            && self.pending.capacity() - self.pending.len() >= MAX_WRITES_PER_FRAME as usize + 2
    }

    /// The block id [`send_frame`](Self::send_frame) gives the next frame (the frame's
    /// ChunkFrameID).
    pub fn next_block_id(&self) -> u64 {
        self.block_id + 1
    }

    /// Skip a frame the camera dropped before sending it (a fault on demand): its block id is
    /// used up and counted dropped, and the next LEADER says a frame was dropped before it.
    pub fn skip_frame(&mut self) {
        self.block_id += 1;
        self.counters.frames_dropped += 1;
        self.previous_dropped = true;
    }

    /// Send a frame of `size` payload bytes described by its GVSP `leader` and `trailer` (as the
    /// frame built them), whose bytes the caller keeps at payload handle `frame_handle` until
    /// the handle comes back from [`Self::poll_released_frame`] (when the TRAILER completed).
    /// A frame larger than its buffer is truncated: the TRAILER then says OVERFLOW and carries
    /// the length delivered.
    pub fn send_frame(
        &mut self,
        leader: &ImageLeader,
        trailer: &ImageTrailer,
        size: u64,
        frame_handle: u32,
    ) -> FrameOutcome {
        if !self.ready_for_frame() {
            return FrameOutcome::NotStreaming;
        }
        self.block_id += 1;
        let Some(buffer_id) = self.queued.pop_front() else {
            self.counters.frames_dropped += 1;
            self.previous_dropped = true;
            return FrameOutcome::Dropped;
        };
        let Some(desc) = self
            .announced
            .iter()
            .find(|d| d.buffer_id == buffer_id)
            .copied()
        else {
            self.counters.frames_dropped += 1;
            self.previous_dropped = true;
            return FrameOutcome::Dropped;
        };
        let valid = size.min(desc.length);
        let truncated = valid < size;
        let block_id = self.block_id;
        let previous_dropped = core::mem::take(&mut self.previous_dropped);
        self.send_message(false, |b, seq| {
            msg::emit_leader(b, seq, buffer_id, valid, block_id, previous_dropped, leader)
                .map_err(|_| ())
        });
        // OrspWriteChunk is the largest WRITE message the host wants; a frame is never split
        // into more than MAX_WRITES_PER_FRAME, so its work requests always fit the queue
        let chunk = if self.write_chunk == 0 {
            valid.max(1)
        } else {
            u64::from(self.write_chunk).max(valid.div_ceil(MAX_WRITES_PER_FRAME))
        };
        let mut off = 0u64;
        while off < valid {
            let n = chunk.min(valid - off);
            self.push_work(WorkRequest::write(
                TAG_WRITE | block_id,
                PayloadRef::new(frame_handle, off),
                n as u32,
                desc.addr + off,
                desc.rkey,
            ));
            off += n;
        }
        let st = if truncated {
            self.counters.frames_truncated += 1;
            status::OVERFLOW
        } else {
            status::SUCCESS
        };
        // what the host gets: the lines and, with chunks, the payload length delivered
        let trailer = ImageTrailer {
            chunks: trailer.chunks.map(|c| TrailerChunks {
                payload_len: valid as u32,
                ..c
            }),
            ..*trailer
        };
        let slot = self.alloc_slot().expect("ready_for_frame checked slots");
        let n = msg::emit_trailer(
            &mut self.slots[slot],
            self.tx_seq,
            buffer_id,
            st,
            valid,
            block_id,
            trailer,
        )
        .expect("trailer fits a slot");
        self.tx_seq += 1;
        self.slot_len[slot] = n as u16;
        self.push_work(
            WorkRequest::send(
                TAG_TRAILER | slot as u64,
                PayloadRef::new(MSG_HANDLE_BASE + slot as u32, 0),
                n as u32,
            )
            .solicited(),
        );
        let _ = self.in_flight.push_back(InFlight { frame_handle });
        FrameOutcome::Sent
    }

    /// Queue a work request whose room [`Self::ready_for_frame`] made sure of. Should the
    /// queue be full all the same, the connection fails with a code the host can read rather
    /// than lose the request.
    fn push_work(&mut self, wr: WorkRequest) {
        if self.pending.push_back(wr).is_err() {
            self.fail(event::RETRY_EXCEEDED);
        }
    }

    // ------------------------------------------------------------- transport side

    /// Whether work requests wait for [`poll_work`](Self::poll_work).
    pub fn work_pending(&self) -> bool {
        !self.pending.is_empty()
    }

    /// The next work request to post to the queue pair.
    pub fn poll_work(&mut self) -> Option<WorkRequest> {
        self.pending.pop_front()
    }

    /// A frame handle whose memory may be reused (its TRAILER completed, or the connection went
    /// away).
    pub fn poll_released_frame(&mut self) -> Option<u32> {
        self.released_frames.pop_front()
    }

    /// Feed a send completion of a work request this channel produced.
    pub fn on_completion(&mut self, c: &Completion) {
        if c.status != WcStatus::Success {
            if self.is_connected() {
                self.fail(failure_code(c.status));
            }
            return;
        }
        let tag = c.wr_id & (0xffff << 48);
        let low = (c.wr_id & 0xffff_ffff) as usize;
        if (tag == TAG_MSG || tag == TAG_TRAILER) && low < SLOTS {
            self.slot_busy &= !(1 << low);
            if self.flush_left.is_some() {
                self.release_flushed();
            }
        }
        if tag == TAG_TRAILER {
            if let Some(f) = self.in_flight.pop_front() {
                let _ = self.released_frames.push_back(f.frame_handle);
            }
            self.counters.frames_sent += 1;
            self.maybe_stream_end();
        }
    }

    /// Feed a message the host SENT (a complete receive).
    pub fn on_host_message(&mut self, bytes: &[u8]) {
        let parsed = msg::parse_host(bytes);
        let (h, m) = match parsed {
            Ok(x) => x,
            Err(_) => {
                let seq = msg::MsgHeader::parse(bytes)
                    .map(|h| h.seq)
                    .unwrap_or(u32::MAX);
                self.bad_message(seq);
                return;
            }
        };
        self.rx_seq = h.seq.wrapping_add(1);
        match m {
            HostMessage::Announce { flags, descriptors } => {
                for d in msg::descriptors(descriptors) {
                    // a buffer must lie inside the 64-bit address space: addr + length is
                    // computed for every WRITE into it
                    if d.length == 0
                        || d.addr.checked_add(d.length).is_none()
                        || self.announced.iter().any(|a| a.buffer_id == d.buffer_id)
                    {
                        self.bad_message(h.seq);
                        continue;
                    }
                    if self.announced.push(d).is_err() {
                        self.bad_message(h.seq);
                        break;
                    }
                    if flags & msg::ANNOUNCE_QUEUE != 0 {
                        let _ = self.queued.push_back(d.buffer_id);
                    }
                }
            }
            HostMessage::Queue { ids } => {
                for id in msg::ids(ids) {
                    let known = self.announced.iter().any(|a| a.buffer_id == id);
                    if !known
                        || self.queued.iter().any(|q| *q == id)
                        || self.queued.push_back(id).is_err()
                    {
                        self.bad_message(h.seq);
                    }
                }
            }
            HostMessage::Flush { flags } => {
                // every buffer queued now goes back, in as many RELEASED as it takes: one
                // carried at most 120 ids, and the rest were neither given back nor queued
                // (a host with 121 buffers lost one per FLUSH)
                if flags & msg::FLUSH_FORGET != 0 {
                    self.announced.clear();
                }
                self.flush_left = Some(self.flush_left.unwrap_or(0) + self.queued.len());
                self.release_flushed();
            }
        }
    }

    /// Send the RELEASED parts a FLUSH still owes, as message slots allow (the rest when a
    /// slot frees: [`Self::on_completion`]).
    fn release_flushed(&mut self) {
        while let Some(left) = self.flush_left {
            let n = left.min(msg::RELEASED_MAX_IDS).min(self.queued.len());
            let mut ids: Vec<u32, { msg::RELEASED_MAX_IDS }> = Vec::new();
            for id in self.queued.iter().take(n) {
                let _ = ids.push(*id);
            }
            let more = left > n && n == msg::RELEASED_MAX_IDS;
            if !self.send_message(true, |b, seq| {
                msg::emit_released(b, seq, &ids, more).map_err(|_| ())
            }) {
                return;
            }
            for _ in 0..n {
                self.queued.pop_front();
            }
            self.flush_left = more.then_some(left - n);
        }
    }

    /// The seq of a host message refused (EVENT 0x9004) since the last call, if any: for the
    /// camera's list of what the host did wrong ([`crate::judge`]).
    pub fn take_refused(&mut self) -> Option<u32> {
        self.refused.take()
    }

    fn bad_message(&mut self, seq: u32) {
        self.counters.bad_messages += 1;
        self.refused.get_or_insert(seq);
        let block = self.block_id;
        self.send_message(true, |b, s| {
            msg::emit_event(b, s, event::MALFORMED_MESSAGE, seq, block, 0).map_err(|_| ())
        });
    }

    /// The bytes of a message slot (for the transport's payload source).
    pub fn message(&self, handle: u32, offset: u64, len: usize) -> Option<&[u8]> {
        let slot = handle.checked_sub(MSG_HANDLE_BASE)? as usize;
        let start = usize::try_from(offset).ok()?;
        self.slots.get(slot)?.get(start..start + len)
    }

    fn free_slots(&self) -> u32 {
        SLOTS as u32 - self.slot_busy.count_ones()
    }

    fn alloc_slot(&mut self) -> Option<usize> {
        let free = (!self.slot_busy).trailing_zeros() as usize;
        if free >= SLOTS {
            return None;
        }
        self.slot_busy |= 1 << free;
        Some(free)
    }

    /// Build a message in a free slot and queue its SEND. Returns false if no slot was free.
    fn send_message(
        &mut self,
        solicited: bool,
        build: impl FnOnce(&mut [u8], u32) -> Result<usize, ()>,
    ) -> bool {
        let Some(slot) = self.alloc_slot() else {
            return false;
        };
        let Ok(n) = build(&mut self.slots[slot], self.tx_seq) else {
            self.slot_busy &= !(1 << slot);
            return false;
        };
        self.tx_seq += 1;
        self.slot_len[slot] = n as u16;
        let wr = WorkRequest {
            solicited,
            ..WorkRequest::send(
                TAG_MSG | slot as u64,
                PayloadRef::new(MSG_HANDLE_BASE + slot as u32, 0),
                n as u32,
            )
        };
        self.pending.push_back(wr).is_ok()
    }
}

/// The ORSP error (STATUS, EVENT) a failed send completion ends a connection with: 0x9002 for
/// the peer's fatal NAKs, 0x9001 for retries exhausted and everything else.
pub fn failure_code(s: WcStatus) -> u16 {
    match s {
        WcStatus::RemoteAccessError
        | WcStatus::RemoteInvalidRequest
        | WcStatus::RemoteOperationalError => event::REMOTE_ERROR,
        _ => event::RETRY_EXCEEDED,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_status_word_names_its_state() {
        for st in [
            State::Idle,
            State::Configured,
            State::Connected,
            State::Streaming,
            State::Draining,
            State::Error,
        ] {
            assert_eq!(State::of_status(0x9001_0000 | st as u32), Some(st));
        }
        assert_eq!(State::of_status(7), None);
        let held =
            [0, 1, 2, 3, 4, 15].map(|v| State::of_status(v).is_some_and(State::holds_connection));
        assert_eq!(held, [false, false, true, true, true, false]);
    }
    use crate::orsp::msg::{DeviceMessage, parse_device};
    use crate::wire::pmtu::MessageKind;
    use std::vec::Vec as StdVec;

    /// Frame `n`: 100x50 Mono8 (5000 bytes), no chunks, as the device's frame describes it.
    fn send(c: &mut OrspChannel<8>, n: u64, handle: u32) -> FrameOutcome {
        let leader = ImageLeader {
            timestamp: n,
            pixel_format: crate::gev::PixelFormat::Mono8.pfnc(),
            width: 100,
            height: 50,
            offset_x: 0,
            offset_y: 0,
            chunks: false,
        };
        let trailer = ImageTrailer {
            size_y: 50,
            chunks: None,
        };
        c.send_frame(&leader, &trailer, 5000, handle)
    }

    fn connected() -> OrspChannel<8> {
        let mut c: OrspChannel<8> = OrspChannel::new(0x100, 1, Pmtu::Mtu4096);
        assert_eq!(
            c.write_reg(regs::CONTROL, regs::CONTROL_CONNECT),
            Err(status::INVALID_PARAMETER),
            "idle"
        );
        c.write_reg(regs::HOST_QPN, 0x11).unwrap();
        assert_eq!(c.state(), State::Configured);
        c.write_reg(regs::WRITE_CHUNK, 4096).unwrap();
        let p = c
            .write_reg(regs::CONTROL, regs::CONTROL_CONNECT)
            .unwrap()
            .unwrap();
        assert_eq!(
            (
                p.host_qpn,
                p.device_qpn,
                p.pmtu,
                p.retry_cnt,
                p.rnr_retry,
                p.timeout
            ),
            (0x11, 0x100, Pmtu::Mtu4096, 6, 7, 14)
        );
        c
    }

    fn drain(c: &mut OrspChannel<8>) -> StdVec<WorkRequest> {
        std::iter::from_fn(|| c.poll_work()).collect()
    }

    fn complete_all(c: &mut OrspChannel<8>, wrs: &[WorkRequest]) {
        for w in wrs {
            c.on_completion(&Completion {
                wr_id: w.wr_id,
                status: WcStatus::Success,
                kind: w.kind,
                len: w.len,
            });
        }
    }

    /// The host announces one buffer (ANNOUNCE, queue), as message `seq`.
    fn announce(
        c: &mut OrspChannel<8>,
        seq: u32,
        buffer_id: u32,
        rkey: u32,
        addr: u64,
        length: u64,
    ) {
        let d = [msg::Descriptor {
            buffer_id,
            rkey,
            addr,
            length,
        }];
        let mut b = [0u8; 128];
        let n = msg::emit_announce(&mut b, seq, msg::ANNOUNCE_QUEUE, &d).unwrap();
        c.on_host_message(&b[..n]);
    }

    fn sent_message(c: &OrspChannel<8>, w: &WorkRequest) -> DeviceMessage {
        parse_device(c.message(w.payload.handle, 0, w.len as usize).unwrap())
            .unwrap()
            .1
    }

    #[test]
    fn host_rx_window_is_offered_checked_taken_at_connect_and_forgotten_with_control() {
        let mut c: OrspChannel<8> = OrspChannel::new(0x100, 1, Pmtu::Mtu4096);
        let t = TransportCounters::default();
        let read = |c: &OrspChannel<8>, at| c.read_reg(at, &t).unwrap();
        assert_ne!(read(&c, regs::ORSP_CAPS) & regs::CAP_RX_WINDOW, 0);
        assert_eq!(
            read(&c, regs::HOST_RX_WINDOW),
            0,
            "no limit until a host sets one"
        );
        assert_eq!(
            c.write_reg(regs::HOST_RX_WINDOW, regs::MAX_HOST_RX_WINDOW + 1),
            Err(status::INVALID_PARAMETER),
            "beyond half the PSN space"
        );
        c.write_reg(regs::HOST_RX_WINDOW, 48).unwrap();
        c.write_reg(regs::HOST_QPN, 0x11).unwrap();
        let p = c
            .write_reg(regs::CONTROL, regs::CONTROL_CONNECT)
            .unwrap()
            .unwrap();
        assert_eq!(p.host_rx_window, 48);
        assert_eq!(
            c.write_reg(regs::HOST_RX_WINDOW, 100),
            Err(status::WRITE_PROTECT),
            "taken at CONNECT, fixed while connected"
        );
        assert_eq!(read(&c, regs::HOST_RX_WINDOW), 48);
        c.control_lost();
        assert_eq!(
            read(&c, regs::HOST_RX_WINDOW),
            0,
            "the next host starts afresh"
        );
        // a NIC decides what is in flight on the verbs transport: not offered there
        c.set_rx_window_capable(false);
        assert_eq!(read(&c, regs::ORSP_CAPS) & regs::CAP_RX_WINDOW, 0);
    }

    #[test]
    fn frame_is_leader_chunked_writes_trailer_and_buffer_credit_is_spent() {
        let mut c = connected();
        let hello = drain(&mut c);
        assert!(
            matches!(sent_message(&c, &hello[0]), DeviceMessage::Hello(h) if h.path_mtu == 4096 && h.max_buffers == 8)
        );
        complete_all(&mut c, &hello);
        let mut b = [0u8; 128];
        announce(&mut c, 0, 7, 0x55, 0x9000_0000, 8192);
        c.start_acquisition();
        assert_eq!(send(&mut c, 0, 3), FrameOutcome::Sent);
        let wrs = drain(&mut c);
        let kinds: StdVec<(MessageKind, u32, u64)> =
            wrs.iter().map(|w| (w.kind, w.len, w.remote_va)).collect();
        assert_eq!(
            kinds,
            [
                (MessageKind::Send, 88, 0),
                (MessageKind::Write, 4096, 0x9000_0000),
                (MessageKind::Write, 904, 0x9000_1000),
                (MessageKind::Send, 60, 0)
            ]
        );
        assert!(
            wrs[3].solicited && !wrs[0].solicited,
            "only the TRAILER wakes the host"
        );
        assert!(matches!(
            sent_message(&c, &wrs[3]),
            DeviceMessage::Trailer {
                buffer_id: 7,
                status: 0,
                valid_size: 5000,
                block_id: 1,
                chunks: None,
            }
        ));
        // no buffer left: the next frame is dropped and the one after says so in its leader
        assert_eq!(send(&mut c, 1, 4), FrameOutcome::Dropped);
        complete_all(&mut c, &wrs);
        assert_eq!(c.poll_released_frame(), Some(3));
        let n = msg::emit_queue(&mut b, 1, &[7]).unwrap();
        c.on_host_message(&b[..n]);
        assert_eq!(send(&mut c, 2, 5), FrameOutcome::Sent);
        let wrs = drain(&mut c);
        assert!(matches!(
            sent_message(&c, &wrs[0]),
            DeviceMessage::Leader {
                block_id: 3,
                previous_dropped: true,
                ..
            }
        ));
        assert_eq!(c.counters().frames_dropped, 1);
        // stop: STREAM_END after the in-flight frame's trailer completes
        c.stop_acquisition();
        assert_eq!(c.state(), State::Draining);
        complete_all(&mut c, &wrs);
        let end = drain(&mut c);
        assert!(matches!(
            sent_message(&c, &end[0]),
            DeviceMessage::StreamEnd {
                last_block_id: 3,
                frames_sent: 2,
                frames_dropped: 1
            }
        ));
        assert_eq!(c.state(), State::Connected);
    }

    #[test]
    fn oversized_frame_is_truncated_with_overflow_status() {
        let mut c = connected();
        let hello = drain(&mut c);
        complete_all(&mut c, &hello);
        announce(&mut c, 0, 1, 1, 0, 1000);
        c.start_acquisition();
        send(&mut c, 0, 0);
        let wrs = drain(&mut c);
        assert_eq!(
            wrs.iter()
                .filter(|w| w.kind == MessageKind::Write)
                .map(|w| w.len)
                .sum::<u32>(),
            1000
        );
        assert!(matches!(
            sent_message(&c, wrs.last().unwrap()),
            DeviceMessage::Trailer {
                status: 0x8015,
                valid_size: 1000,
                ..
            }
        ));
        assert_eq!(c.counters().frames_truncated, 1);
    }

    #[test]
    fn bad_host_messages_raise_an_event_and_are_ignored() {
        let mut c = connected();
        let hello = drain(&mut c);
        complete_all(&mut c, &hello);
        let mut b = [0u8; 128];
        let n = msg::emit_queue(&mut b, 4, &[99]).unwrap(); // never announced
        c.on_host_message(&b[..n]);
        c.on_host_message(b"garbage that is not ORSP");
        let ev = drain(&mut c);
        assert_eq!(ev.len(), 2);
        assert!(matches!(
            sent_message(&c, &ev[0]),
            DeviceMessage::Event {
                event_id: 0x9004,
                detail: 4,
                ..
            }
        ));
        assert_eq!(c.queued_buffers(), 0);
        assert_eq!(c.counters().bad_messages, 2);
        // FLUSH gives back queued buffers in RELEASED
        announce(&mut c, 5, 2, 1, 0, 10);
        let n = msg::emit_flush(&mut b, 6, msg::FLUSH_FORGET).unwrap();
        c.on_host_message(&b[..n]);
        let r = drain(&mut c);
        assert!(matches!(
            sent_message(&c, &r[0]),
            DeviceMessage::Released {
                count: 1,
                more: false
            }
        ));
        assert_eq!(c.queued_buffers(), 0);
    }

    #[test]
    fn a_link_with_a_smaller_mtu_lowers_caps_and_refuses_a_larger_path_mtu() {
        let mut c = OrspChannel::<8>::new(0x11, 7, Pmtu::Mtu4096);
        c.set_max_pmtu(Pmtu::Mtu1024);
        let caps = c
            .read_reg(regs::ORSP_CAPS, &TransportCounters::default())
            .unwrap();
        assert_eq!((caps >> 8) & 0xf, Pmtu::Mtu1024 as u32);
        assert_eq!(
            c.read_reg(regs::PATH_MTU, &TransportCounters::default()),
            Some(Pmtu::Mtu1024 as u32)
        );
        c.write_reg(regs::HOST_QPN, 0x22).unwrap();
        assert_eq!(
            c.write_reg(regs::PATH_MTU, Pmtu::Mtu4096 as u32),
            Err(status::INVALID_PARAMETER)
        );
        assert_eq!(c.write_reg(regs::PATH_MTU, Pmtu::Mtu512 as u32), Ok(None));
    }

    #[test]
    fn a_device_without_tos_control_says_so_and_ignores_the_byte() {
        let mut c = OrspChannel::<8>::new(0x11, 7, Pmtu::Mtu4096);
        assert_ne!(
            c.read_reg(regs::ORSP_CAPS, &TransportCounters::default())
                .unwrap()
                & regs::CAP_TOS,
            0
        );
        c.set_tos_capable(false);
        assert_eq!(
            c.read_reg(regs::ORSP_CAPS, &TransportCounters::default())
                .unwrap()
                & regs::CAP_TOS,
            0
        );
        c.write_reg(regs::TX_TUNING, 0x12b8_0000 | 0xb8).unwrap();
        assert_eq!(
            c.read_reg(regs::TX_TUNING, &TransportCounters::default()),
            Some(0x12b8_0000)
        );
    }

    #[test]
    fn a_transport_sets_the_real_device_qpn() {
        let mut c = OrspChannel::<8>::new(0x11, 7, Pmtu::Mtu4096);
        c.set_device_qpn(0x0100_0023);
        assert_eq!(
            c.read_reg(regs::DEVICE_QPN, &TransportCounters::default()),
            Some(0x23)
        );
        assert_eq!(c.device_qp().0, 0x23);
    }

    #[test]
    fn disconnect_and_failure_release_frames_and_renew_the_psn() {
        let mut c = connected();
        let psn = c
            .read_reg(regs::DEVICE_SQ_PSN, &TransportCounters::default())
            .unwrap();
        c.fail(event::RETRY_EXCEEDED);
        assert_eq!(
            c.read_reg(regs::STATUS, &TransportCounters::default()),
            Some(0x9001_000f)
        );
        c.disconnect();
        assert_eq!(c.state(), State::Idle, "idle from any state");
        assert_ne!(
            c.read_reg(regs::DEVICE_SQ_PSN, &TransportCounters::default())
                .unwrap(),
            psn
        );
    }

    #[test]
    fn qpn_and_first_psn_come_from_the_entropy_and_change_per_connection() {
        let numbers = |c: &OrspChannel<8>| {
            (
                c.read_reg(regs::DEVICE_QPN, &TransportCounters::default())
                    .unwrap(),
                c.read_reg(regs::DEVICE_SQ_PSN, &TransportCounters::default())
                    .unwrap(),
            )
        };
        // the same camera (same MAC and address, same constructor seed), different entropy
        let mut a = OrspChannel::<8>::new(0x123, 7, Pmtu::Mtu4096);
        let mut b = OrspChannel::<8>::new(0x123, 7, Pmtu::Mtu4096);
        a.reseed(0x0123_4567_89ab_cdef);
        b.reseed(0xfedc_ba98_7654_3210);
        let (qa, pa) = numbers(&a);
        let (qb, pb) = numbers(&b);
        assert_ne!((qa, pa), (qb, pb));
        for (q, p) in [(qa, pa), (qb, pb)] {
            assert!((0x100..0x0100_0000).contains(&q), "QPN {q:#x}");
            assert!(p < 0x0100_0000, "PSN {p:#x}");
        }
        // a connection ends: new numbers, even before fresh entropy comes
        a.write_reg(regs::HOST_QPN, 0x22).unwrap();
        a.write_reg(regs::CONTROL, regs::CONTROL_CONNECT).unwrap();
        assert_eq!(
            numbers(&a),
            (qa, pa),
            "the connection uses what the host read"
        );
        a.reseed(42);
        assert_eq!(numbers(&a), (qa, pa), "no change while connected");
        a.write_reg(regs::CONTROL, regs::CONTROL_DISCONNECT)
            .unwrap();
        let after = numbers(&a);
        assert!(
            after.0 != qa && after.1 != pa,
            "{after:?} vs {:?}",
            (qa, pa)
        );
        // a transport that owns the QPN (verbs) keeps it
        a.set_device_qpn(0x0100_0023 & 0xff_ffff);
        a.reseed(9);
        assert_eq!(numbers(&a).0, 0x23);
    }
}
