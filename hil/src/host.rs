//! The reference ORSP host, without I/O: what a host SDK does once the GVCP register exchange
//! has connected the queue pair. It owns the frame buffers (one registered region), a soft RC
//! responder for what the camera sends (LEADER/TRAILER SENDs, payload WRITEs), an RC requester
//! for its own SENDs (ANNOUNCE, QUEUE, FLUSH), and checks every frame against the synthetic
//! pattern. The UDP transport and the deterministic simulator drive this one type.

use std::collections::HashMap;
use std::net::IpAddr;

use rdmacam_protocol::device::frame::FrameSource;
use rdmacam_protocol::device::frame::{Frame, FrameSpec};
use rdmacam_protocol::device::pattern::SyntheticSource;
use rdmacam_protocol::gev::PixelFormat;
use rdmacam_protocol::orsp::msg::{self, Descriptor, DeviceMessage, Hello};
use rdmacam_protocol::rc::{
    Instant, Path, PayloadRef, RecvStatus, Requester, RequesterConfig, ResponderConfig, WcStatus,
    WorkRequest, split_rocev2,
};
use rdmacam_protocol::wire::Opcode;
use rdmacam_protocol::wire::pmtu::Pmtu;

use crate::place::Memory;
use crate::soft::{Place, SoftHost};

mod misbehave;
mod types;
pub use misbehave::Misbehaviour;
pub use types::{FrameFormat, HostConfig, HostRoceCounters, Stats, Summary};

/// Remote key of the frame-buffer region.
pub const FRAME_RKEY: u32 = 0x0000_5a01;
/// Virtual address the frame-buffer region is registered at.
pub const FRAME_VA: u64 = 0x7f10_0000_0000;
/// Receive buffer size (≥ the camera's MAX_CTRL_MSG).
pub const RECV_SIZE: u32 = 512;

/// What every ORSP host does whatever its transport: the message exchange of
/// `docs/orsp-spec.md` (ANNOUNCE, QUEUE, FLUSH out; HELLO, LEADER, TRAILER, EVENT, RELEASED,
/// STREAM_END in), frame accounting, and the byte-for-byte check of each frame. The soft host
/// ([`OrspHost`]) and the verbs host (`crate::verbs_host`) wrap it.
pub struct HostCore {
    cfg: HostConfig,
    tx_seq: u32,
    last_block: u64,
    leaders: HashMap<u32, (u64, rdmacam_protocol::gev::gvsp::ImageLeader)>,
    stats: Stats,
    scratch: Vec<u8>,
    /// When the kernel received the packet being handled (CLOCK_MONOTONIC ns, 0 unknown), for
    /// the latency log.
    arrived_ns: u64,
    /// The synthetic frame `expected_bytes` holds: the next frame of a static pattern needs
    /// only its counter rewritten ([`FrameSource::refresh`]), not every byte generated again.
    expected: Option<Frame>,
    expected_bytes: Vec<u8>,
    /// How many bytes of `expected_bytes` hold `expected`'s image so far.
    expected_valid: usize,
    images: Option<std::sync::Arc<rdmacam_io::images::ImageSet>>,
    /// The image the last good replayed frame was.
    last_image: Option<usize>,
    /// Frames whose bytes are still being compared, oldest first (deferred checks only).
    pending: std::collections::VecDeque<PendingCheck>,
    /// Bytes compared per [`HostCore::verify`] step; `None` = each frame at its TRAILER.
    check_slice: Option<usize>,
    /// Per buffer, the frame being written into it and how much of it was compared as it was
    /// placed (the soft host's [`Place`]); the rest is compared after its TRAILER.
    placing: Vec<Option<Placing>>,
}

/// A frame compared as its payload is placed: the bytes before `compared` were written in
/// order from the buffer's start, each compared with `frame`'s image as it landed.
#[derive(Debug, Clone, Copy)]
struct Placing {
    frame: Frame,
    compared: usize,
    /// No byte compared so far differed.
    same: bool,
}

/// A frame whose byte comparison with the pattern runs in slices.
#[derive(Debug, Clone, Copy)]
struct PendingCheck {
    buffer_id: u32,
    /// Where its buffer starts in the region.
    start: usize,
    /// Bytes to compare, and how many are done.
    size: usize,
    done: usize,
    /// The synthetic frame it must equal.
    frame: Frame,
}

/// What the checks at a TRAILER found.
enum Checked {
    /// Good or bad, known now.
    Done(bool),
    /// Everything but the pattern's bytes is right; they are compared later.
    Pending(PendingCheck),
}

impl HostCore {
    /// Compare frames in slices of `slice` bytes, one slice per [`verify`](Self::verify) call,
    /// instead of whole at their TRAILER: a soft host that answers like a NIC sends its ACKs
    /// between the slices rather than after a whole frame's comparison (a 2 MB frame takes
    /// hundreds of microseconds, long enough for the camera's window to fill and its ACK timer
    /// to fire). A finished frame's buffer is then returned by `verify`, not by `on_message`.
    pub fn defer_checks(&mut self, slice: usize) {
        self.check_slice = Some(slice.max(1));
    }

    /// Frames whose check is not finished.
    pub fn checks_pending(&self) -> usize {
        self.pending.len()
    }

    /// Compare the next slice of the oldest pending frame; returns its buffer when its check
    /// finished (good or bad, counted in the stats), to re-queue.
    pub fn verify(&mut self, frames: &[u8]) -> Option<u32> {
        let slice = self.check_slice.unwrap_or(usize::MAX);
        let c = *self.pending.front()?;
        let n = slice.min(c.size - c.done);
        self.expect(&c.frame, c.done + n);
        let at = c.start + c.done;
        let same = frames[at..at + n] == self.expected_bytes[c.done..c.done + n];
        let c = self.pending.front_mut().expect("front exists");
        c.done += n;
        if same && c.done < c.size {
            return None;
        }
        let c = self.pending.pop_front().expect("front exists");
        self.count(same);
        Some(c.buffer_id)
    }

    /// Make `expected_bytes[..upto]` hold the image of `frame` (`upto` within it): a static
    /// pattern's next frame is the frame held with its counter rewritten; any other frame is
    /// generated as far as asked, so no one check step generates a whole frame (1.5 ms for
    /// 2 MB, during which a TRAILER would wait).
    fn expect(&mut self, frame: &Frame, upto: usize) {
        let src = SyntheticSource::new(self.cfg.seed);
        let size = frame.image_size();
        if self.expected != Some(*frame) {
            match self.expected {
                Some(held)
                    if self.expected_valid == held.image_size()
                        && held.image_size() == size
                        && src.shares_pixels(&held, frame) =>
                {
                    src.refresh(&held, frame, &mut self.expected_bytes);
                }
                _ => {
                    self.expected_bytes.resize(size, 0);
                    self.expected_valid = 0;
                }
            }
            self.expected = Some(*frame);
        }
        let upto = upto.min(size);
        if self.expected_valid < upto {
            let from = self.expected_valid;
            src.read(frame, from, &mut self.expected_bytes[from..upto]);
            self.expected_valid = upto;
        }
    }

    fn count(&mut self, good: bool) {
        if good {
            self.stats.good += 1;
        } else {
            self.stats.bad += 1;
        }
    }

    /// Check frames against these replayed images (`rdmacam run --images`) instead of the
    /// synthetic pattern: each frame must equal one of them, converted as the camera does.
    pub fn set_images(&mut self, images: Option<std::sync::Arc<rdmacam_io::images::ImageSet>>) {
        self.images = images;
    }

    /// A host that has seen nothing yet.
    pub fn new(cfg: HostConfig) -> Self {
        let buffers = cfg.buffers as usize;
        HostCore {
            cfg,
            tx_seq: 0,
            last_block: 0,
            leaders: HashMap::new(),
            images: None,
            last_image: None,
            stats: Stats::default(),
            scratch: Vec::new(),
            arrived_ns: 0,
            expected: None,
            expected_bytes: Vec::new(),
            expected_valid: 0,
            pending: std::collections::VecDeque::new(),
            check_slice: None,
            placing: vec![None; buffers],
        }
    }

    /// The configuration.
    pub fn config(&self) -> &HostConfig {
        &self.cfg
    }

    /// Statistics so far.
    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    /// The descriptors of every buffer of a region registered at `va` with `rkey`.
    pub fn descriptors(&self, rkey: u32, va: u64) -> Vec<Descriptor> {
        (0..self.cfg.buffers)
            .map(|i| Descriptor {
                buffer_id: i,
                rkey,
                addr: va + u64::from(i) * self.cfg.buffer_size as u64,
                length: self.cfg.buffer_size as u64,
            })
            .collect()
    }

    /// ANNOUNCE messages (with QUEUE) for every buffer of the region at `va`/`rkey`.
    pub fn announce_messages(&mut self, rkey: u32, va: u64) -> Vec<Vec<u8>> {
        let d = self.descriptors(rkey, va);
        let mut out = Vec::new();
        for part in d.chunks(40) {
            self.tx_seq += 1;
            let mut b = vec![0u8; 24 + 24 * part.len()];
            let n =
                msg::emit_announce(&mut b, self.tx_seq, msg::ANNOUNCE_QUEUE, part).expect("sized");
            b.truncate(n);
            out.push(b);
        }
        out
    }

    /// A FLUSH message (the camera answers RELEASED).
    pub fn flush_message(&mut self, forget: bool) -> Vec<u8> {
        self.tx_seq += 1;
        let mut b = vec![0u8; 20];
        msg::emit_flush(
            &mut b,
            self.tx_seq,
            if forget { msg::FLUSH_FORGET } else { 0 },
        )
        .expect("sized");
        b
    }

    /// A QUEUE message giving `ids` back to the camera.
    pub fn queue_message(&mut self, ids: &[u32]) -> Vec<u8> {
        self.tx_seq += 1;
        let mut b = vec![0u8; 20 + 4 * ids.len()];
        let n = msg::emit_queue(&mut b, self.tx_seq, ids).expect("sized");
        b.truncate(n);
        b
    }

    /// Count a raw message the caller sends itself (tests send malformed ones).
    pub fn count_raw(&mut self) {
        self.tx_seq += 1;
    }

    /// Whether finished buffers go back to the camera at once.
    pub fn requeue(&self) -> bool {
        self.cfg.requeue
    }

    /// Stop giving buffers back (a host that never re-queues).
    pub fn stop_requeue(&mut self) {
        self.cfg.requeue = false;
    }

    /// A message the camera SENT; `frames` is the whole frame-buffer region. Returns the
    /// buffer a TRAILER finished (to re-queue); with [`defer_checks`](Self::defer_checks) a
    /// good-looking frame's buffer comes from [`verify`](Self::verify) once its bytes are
    /// compared.
    pub fn on_message(&mut self, data: &[u8], frames: &[u8]) -> Option<u32> {
        match msg::parse_device(data) {
            Ok((_, DeviceMessage::Hello(h))) => self.stats.hello = Some(h),
            Ok((
                _,
                DeviceMessage::Leader {
                    buffer_id,
                    block_id,
                    previous_dropped,
                    leader,
                    ..
                },
            )) => {
                // a gap since this host's previous LEADER; before its first one the block ids
                // may be another host's (they run on across connections), and the camera's
                // FRAMES_DROPPED says what this host missed there
                if previous_dropped && self.last_block != 0 {
                    self.stats.dropped += block_id.saturating_sub(self.last_block + 1);
                }
                self.last_block = block_id;
                self.stats.format = Some((leader.width, leader.height, leader.pixel_format));
                self.leaders.insert(buffer_id, (block_id, leader));
                // a new frame in this buffer: nothing of it compared yet
                if let Some(p) = self.placing.get_mut(buffer_id as usize) {
                    *p = None;
                }
            }
            Ok((
                _,
                DeviceMessage::Trailer {
                    buffer_id,
                    status,
                    valid_size,
                    block_id,
                    chunks,
                },
            )) => {
                let seen = rdmacam_io::clock::monotonic_ns();
                self.stats.bytes += valid_size;
                push_bounded(&mut self.stats.block_ids, block_id);
                push_bounded(
                    &mut self.stats.trailers_seen,
                    (block_id, seen, self.arrived_ns),
                );
                let checked = (status == 0)
                    .then(|| self.check_frame(buffer_id, block_id, valid_size, chunks, frames))
                    .flatten()
                    .unwrap_or(Checked::Done(false));
                match checked {
                    Checked::Done(good) => self.count(good),
                    Checked::Pending(c) => {
                        self.pending.push_back(c);
                        if self.check_slice.is_some() {
                            return None;
                        }
                        return self.verify(frames);
                    }
                }
                return Some(buffer_id);
            }
            Ok((
                _,
                DeviceMessage::StreamEnd {
                    last_block_id,
                    frames_sent,
                    frames_dropped,
                },
            )) => {
                // the last message: every frame before it is judged before the stream counts
                // as ended (their buffers stay with the host)
                while !self.pending.is_empty() {
                    self.verify(frames);
                }
                self.stats.stream_end = Some((last_block_id, frames_sent, frames_dropped));
            }
            Ok((
                _,
                DeviceMessage::Event {
                    event_id, detail, ..
                },
            )) => push_bounded(&mut self.stats.events, (event_id, detail)),
            Ok((_, DeviceMessage::Released { count, .. })) => self.stats.released += count,
            Err(_) => self.stats.garbled += 1,
        }
        None
    }

    /// Set the HELLO (a CM REP carried it).
    pub fn set_hello(&mut self, hello: Hello) {
        self.stats.hello = Some(hello);
    }

    /// Check a finished buffer against its LEADER, its TRAILER and (replayed images) its bytes;
    /// a synthetic frame's bytes are left to [`verify`](Self::verify). `None` = bad.
    fn check_frame(
        &mut self,
        buffer_id: u32,
        block_id: u64,
        valid: u64,
        chunks: Option<rdmacam_protocol::gev::gvsp::TrailerChunks>,
        frames: &[u8],
    ) -> Option<Checked> {
        let (leader_block, leader) = self.leaders.remove(&buffer_id)?;
        let placed = self
            .placing
            .get_mut(buffer_id as usize)
            .and_then(Option::take);
        let spec = self.spec(&leader)?;
        let size = spec.payload_size();
        let start = buffer_id as usize * self.cfg.buffer_size;
        let mem = frames.get(start..start + self.cfg.buffer_size)?;
        // with chunk data the trailer says so, and the leader did too
        if chunks.is_some() != leader.chunks {
            return None;
        }
        let payload = match chunks {
            Some(c) if c.payload_len as u64 == valid => valid as usize,
            Some(_) => return None,
            None => size,
        };
        if leader_block != block_id || valid as usize != payload || payload > mem.len() || size < 8
        {
            return None;
        }
        if chunks.is_some() {
            match parse_chunks(&mem[..payload]) {
                Some(list)
                    if list
                        .first()
                        .is_some_and(|&(_, at, len)| at == 0 && len == size) =>
                {
                    self.stats.chunk_frames += 1;
                    let value = |id: u32| {
                        list.iter()
                            .find(|c| c.0 == id)
                            .map(|&(_, at, len)| &mem[at..at + len])
                    };
                    // ChunkFrameID, when present, is the block id; ChunkWidth the leader's
                    if value(0x5243_0001).is_some_and(|v| v != block_id.to_be_bytes())
                        || value(0x5243_0003).is_some_and(|v| v != leader.width.to_be_bytes())
                    {
                        return None;
                    }
                }
                _ => return None,
            }
        }
        if let Some(set) = self.images.clone() {
            // a replayed image carries no counter: it must be one of the set's images, most
            // likely the one after the last (one conversion per frame, not one per image)
            let next = self.last_image.map_or(0, |i| i + 1);
            let found = (0..set.len()).map(|k| (next + k) % set.len()).find(|&i| {
                set.render(i, &spec, &mut self.scratch);
                mem[..size] == self.scratch[..]
            });
            if let Some(i) = found {
                self.last_image = Some(i);
                push_bounded(&mut self.stats.frame_numbers, i as u64);
            }
            return Some(Checked::Done(found.is_some()));
        }
        let number = u64::from_be_bytes(mem[..8].try_into().expect("8 bytes"));
        push_bounded(&mut self.stats.frame_numbers, number);
        let frame = Frame::new(number, spec, 0);
        // what was compared as it was placed is not compared again
        let done = match placed {
            Some(p) if p.frame == frame && !p.same => return Some(Checked::Done(false)),
            Some(p) if p.frame == frame => p.compared.min(size),
            _ => 0,
        };
        if done == size {
            return Some(Checked::Done(true));
        }
        Some(Checked::Pending(PendingCheck {
            buffer_id,
            start,
            size,
            done,
            frame,
        }))
    }

    /// The frame a LEADER describes, as the synthetic pattern draws it.
    fn spec(&self, leader: &rdmacam_protocol::gev::gvsp::ImageLeader) -> Option<FrameSpec> {
        Some(FrameSpec {
            width: leader.width,
            height: leader.height,
            offset_x: leader.offset_x,
            offset_y: leader.offset_y,
            pixel_format: PixelFormat::from_pfnc(leader.pixel_format)?,
            pattern: self.cfg.pattern,
            sensor: false,
        })
    }

    /// Whether a frame being placed has at most `bytes` of its image left: its TRAILER is due
    /// within a few packets.
    pub fn trailer_due(&self, bytes: usize) -> bool {
        self.placing
            .iter()
            .flatten()
            .any(|p| p.frame.image_size() - p.compared.min(p.frame.image_size()) <= bytes)
    }

    /// How much of the frame in `buffer_id` was compared as it was placed.
    #[cfg(test)]
    fn compared_while_placed(&self, buffer_id: u32) -> Option<usize> {
        self.placing
            .get(buffer_id as usize)
            .copied()
            .flatten()
            .map(|p| p.compared)
    }
}

/// The reference host places a WRITE's payload and compares it with the expected image in one
/// pass ([`Memory::copy_compare`]) when it continues its buffer's frame in order from the
/// start, the way a camera writes; any other write (out of order, a second write of bytes
/// already compared, a replayed image, chunk data) is copied and its frame's bytes from there
/// on are compared after the TRAILER, as before.
impl Place for HostCore {
    fn place(&mut self, rkey: u32, region: &mut Memory, at: usize, data: &[u8]) {
        let size = self.cfg.buffer_size;
        if rkey != FRAME_RKEY || self.images.is_some() || size == 0 {
            region.copy(at, data);
            return;
        }
        let (b, o) = (at / size, at % size);
        if o + data.len() > size || b >= self.placing.len() {
            // across two buffers (no camera writes so) or past them: compared after the TRAILERs
            for p in self.placing.iter_mut().skip(b).take(2) {
                *p = None;
            }
            region.copy(at, data);
            return;
        }
        let mut p = self.placing[b].take();
        if p.is_some_and(|p| o < p.compared) {
            // bytes compared already are written again: compare the frame after its TRAILER
            p = None;
        }
        if p.is_none() && o == 0 && data.len() >= 8 {
            // the frame's number is its first 8 bytes, its size and format the LEADER's
            let number = u64::from_be_bytes(data[..8].try_into().expect("8 bytes"));
            p = self
                .leaders
                .get(&(b as u32))
                .and_then(|(_, l)| self.spec(l))
                .map(|spec| Placing {
                    frame: Frame::new(number, spec, 0),
                    compared: 0,
                    same: true,
                });
        }
        match p {
            Some(mut p) if o == p.compared && o + data.len() <= p.frame.image_size() => {
                self.expect(&p.frame, o + data.len());
                p.same &= region.copy_compare(at, data, &self.expected_bytes[o..o + data.len()]);
                p.compared += data.len();
                self.placing[b] = Some(p);
            }
            // a gap before it, or chunk data after the image: from `compared` on, later
            p => {
                region.copy(at, data);
                self.placing[b] = p;
            }
        }
    }
}

/// The chunks of a payload, parsed from its end as the GenICam chunk format for GigE Vision
/// lays them out (each chunk's data, then its ID and length, big-endian): (ID, offset, length)
/// from the first chunk (the image, at offset 0) to the last. `None` if the chain does not end
/// exactly at offset 0.
pub fn parse_chunks(payload: &[u8]) -> Option<Vec<(u32, usize, usize)>> {
    let mut out = Vec::new();
    let mut end = payload.len();
    while end > 0 {
        let tag = payload.get(end.checked_sub(8)?..end)?;
        let id = u32::from_be_bytes(tag[..4].try_into().ok()?);
        let len = u32::from_be_bytes(tag[4..].try_into().ok()?) as usize;
        let start = (end - 8).checked_sub(len)?;
        out.push((id, start, len));
        end = start;
    }
    out.reverse();
    Some(out)
}

/// Per-frame records ([`Stats::block_ids`], [`Stats::frame_numbers`], [`Stats::trailers_seen`],
/// [`Stats::events`]) keep at most the newest this many, so a host that streams for days holds
/// bounded memory (it grew about 30 bytes a frame); counts are kept in full.
pub const HISTORY: usize = 65_536;

fn push_bounded<T>(v: &mut Vec<T>, x: T) {
    if v.len() >= 2 * HISTORY {
        v.drain(..v.len() - HISTORY);
    }
    v.push(x);
}

/// The local ACK timeout code the reference host uses for its own SENDs and asks the camera to
/// use (OrspRetry): 537 ms, so either side survives the other pausing for a second or more.
pub const HOST_ACK_TIMEOUT: u8 = 17;

/// The host on the soft RoCEv2 stack ([`SoftHost`] responder, [`Requester`] for its SENDs).
pub struct OrspHost {
    core: HostCore,
    soft: Option<SoftHost>,
    requester: Option<Requester<128, 128>>,
    msgs: Vec<Vec<u8>>,
    free_msgs: Vec<u32>,
    next_recv: u64,
    /// SENDs the send queue had no room for yet: posted as it drains, never dropped.
    backlog: std::collections::VecDeque<WorkRequest>,
    /// A rule this host breaks on purpose.
    misbehave: Option<Misbehaviour>,
}

impl std::fmt::Debug for OrspHost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OrspHost")
            .field("stats", &self.core.stats)
            .finish_non_exhaustive()
    }
}

impl OrspHost {
    /// A host not yet connected.
    pub fn new(cfg: HostConfig) -> Self {
        OrspHost {
            core: HostCore::new(cfg),
            soft: None,
            requester: None,
            msgs: Vec::new(),
            free_msgs: Vec::new(),
            next_recv: 0,
            backlog: std::collections::VecDeque::new(),
            misbehave: None,
        }
    }

    /// This host's QPN and the PSN it sends with.
    pub fn qp_numbers(&self) -> (u32, u32) {
        (self.core.cfg.host_qpn, self.core.cfg.host_sq_psn)
    }

    /// Statistics so far.
    pub fn stats(&self) -> &Stats {
        &self.core.stats
    }

    /// The soft responder's counters (none before it is connected).
    pub fn responder_counters(&self) -> Option<rdmacam_protocol::rc::ResponderCounters> {
        self.soft.as_ref().map(|s| s.counters())
    }

    /// Check frames against replayed images ([`HostCore::set_images`]).
    pub fn set_images(&mut self, images: Option<std::sync::Arc<rdmacam_io::images::ImageSet>>) {
        self.core.set_images(images);
    }

    /// Bring the host QP up after an RDMA CM exchange: the camera's QPN from the REP, the PSN
    /// it sends with (our REQ's), the one we send with (its REP's), and the HELLO the REP carried.
    pub fn connect_cm(
        &mut self,
        device_qpn: u32,
        device_sq_psn: u32,
        host_sq_psn: u32,
        pmtu: Pmtu,
        hello: Hello,
    ) {
        self.core.cfg.host_sq_psn = host_sq_psn;
        self.connect(device_qpn, device_sq_psn, pmtu);
        self.core.set_hello(hello);
    }

    /// Bring the host QP up for a camera whose DEVICE_QPN/DEVICE_SQ_PSN were read over GVCP.
    pub fn connect(&mut self, device_qpn: u32, device_sq_psn: u32, pmtu: Pmtu) {
        let c = &self.core.cfg;
        let mut path = Path::new(c.host_ip, c.camera_ip);
        path.src_port = c.tx_port;
        path.dst_port = c.camera_rx_port;
        let mut rs = ResponderConfig::new(c.host_qpn, device_qpn, device_sq_psn, path);
        rs.pmtu = pmtu;
        rs.min_rnr_timer = 1;
        let mut soft = SoftHost::new(rs);
        soft.register(FRAME_RKEY, FRAME_VA, c.buffers as usize * c.buffer_size);
        let depth = (2 * c.buffers + 8).min(crate::soft::RQ_DEPTH as u32);
        for _ in 0..depth {
            soft.post_recv(self.next_recv, RECV_SIZE);
            self.next_recv += 1;
        }
        let mut rq = RequesterConfig::new(c.host_qpn, device_qpn, c.host_sq_psn, path);
        rq.pmtu = pmtu;
        // a long ACK timeout costs nothing on loss (the timer is RTT-based below it) and lets a
        // stalled camera come back: no progress for 8 x 537 ms = 4.3 s before the QP gives up
        rq.timeout = HOST_ACK_TIMEOUT;
        rq.retry_cnt = 7;
        rq.rnr_retry = 7;
        rq.ack_req_every = 1;
        // a lost QUEUE is sent again at the first timeout, not after a pause's doubled waits:
        // a buffer held back is a frame the camera drops for want of it (at 20 % loss, 32 of
        // 100 in a demo), and a spurious resend of a 24-byte message costs nothing
        rq.pause_waits = 0;
        self.soft = Some(soft);
        self.requester = Some(Requester::new(rq));
    }

    /// The descriptors of every buffer.
    pub fn descriptors(&self) -> Vec<Descriptor> {
        self.core.descriptors(FRAME_RKEY, FRAME_VA)
    }

    /// SEND ANNOUNCE with every buffer, queued at once.
    pub fn announce(&mut self) {
        for m in self.core.announce_messages(FRAME_RKEY, FRAME_VA) {
            self.send(m);
        }
    }

    /// SEND FLUSH (the camera answers RELEASED).
    pub fn flush(&mut self, forget: bool) {
        let m = self.core.flush_message(forget);
        self.send(m);
    }

    /// SEND raw bytes as a host message (tests use it to send malformed messages).
    pub fn send_raw(&mut self, bytes: Vec<u8>) {
        self.core.count_raw();
        self.send(bytes);
    }

    fn send(&mut self, bytes: Vec<u8>) {
        let len = bytes.len() as u32;
        let handle = match self.free_msgs.pop() {
            Some(h) => {
                self.msgs[h as usize] = bytes;
                h
            }
            None => {
                self.msgs.push(bytes);
                self.msgs.len() as u32 - 1
            }
        };
        self.backlog.push_back(WorkRequest::send(
            u64::from(handle),
            PayloadRef::new(handle, 0),
            len,
        ));
        self.post_backlog();
    }

    /// Post what waits, as far as the send queue has room.
    fn post_backlog(&mut self) {
        let Some(rq) = self.requester.as_mut() else {
            return;
        };
        while let Some(wr) = self.backlog.front() {
            if rq.post(*wr).is_err() {
                break;
            }
            self.backlog.pop_front();
        }
    }

    /// Why the host's own queue pair failed (its SENDs to the camera: QUEUE, ANNOUNCE,
    /// FLUSH), if it did: the camera stopped acknowledging, or refused a message.
    pub fn transport_error(&self) -> Option<WcStatus> {
        let rq = self.requester.as_ref()?;
        rq.is_error()
            .then(|| rq.last_failure().unwrap_or(WcStatus::RetryExceeded))
    }

    /// A received RoCEv2 IP packet (ICRC checked).
    pub fn handle_datagram(&mut self, now: Instant, packet: &[u8]) {
        if let Ok((src, dst, ecn, ib)) = split_rocev2(packet) {
            self.handle_ib(now, src, dst, ecn, ib);
        }
    }

    /// When the kernel received the packet about to be handled (CLOCK_MONOTONIC ns; 0 when
    /// unknown): a TRAILER's is logged beside the time the host saw it.
    pub fn set_arrival(&mut self, ns: u64) {
        self.core.arrived_ns = ns;
    }

    /// The InfiniBand part of a received packet.
    pub fn handle_ib(&mut self, now: Instant, src: IpAddr, dst: IpAddr, ecn: u8, ib: &[u8]) {
        let Some(op) = ib.first().map(|b| Opcode(*b)) else {
            return;
        };
        if op == Opcode::RC_ACK || op == Opcode::CNP {
            if let Some(rq) = self.requester.as_mut() {
                rq.handle_ib(now, ib);
                while let Some(c) = rq.poll_completion() {
                    self.free_msgs.push(c.wr_id as u32);
                }
            }
            return;
        }
        if let Some(soft) = self.soft.as_mut() {
            soft.handle_ib_placing(now, src, dst, ecn, ib, &mut self.core);
        }
        self.process();
    }

    fn process(&mut self) {
        let Some(soft) = self.soft.as_mut() else {
            return;
        };
        let received = soft.take_received();
        let mut requeue = Vec::new();
        for r in received {
            if r.completion.status != RecvStatus::Success {
                continue;
            }
            let Some(soft) = self.soft.as_mut() else {
                return;
            };
            soft.post_recv(self.next_recv, RECV_SIZE);
            self.next_recv += 1;
            if let Some(done) = self.core.on_message(&r.data, soft.region(FRAME_RKEY)) {
                requeue.push(done);
            }
        }
        if self.core.requeue() && !requeue.is_empty() {
            let m = self.core.queue_message(&requeue);
            self.send(m);
        }
    }

    /// Compare frames in slices between receive batches ([`HostCore::defer_checks`]): the
    /// caller sends its ACKs, then calls [`verify`](Self::verify).
    pub fn defer_checks(&mut self, slice: usize) {
        self.core.defer_checks(slice);
    }

    /// The application's share of the work, after the ACKs are out: one slice of the oldest
    /// pending frame check; a finished frame's buffer goes back to the camera. Returns whether
    /// there was a check to work on.
    pub fn verify(&mut self) -> bool {
        let Some(soft) = self.soft.as_ref() else {
            return false;
        };
        if self.core.checks_pending() == 0 {
            return false;
        }
        if let Some(done) = self.core.verify(soft.region(FRAME_RKEY))
            && self.core.requeue()
        {
            let m = self.core.queue_message(&[done]);
            self.send(m);
        }
        true
    }

    /// Frames whose byte check is not finished.
    pub fn checks_pending(&self) -> usize {
        self.core.checks_pending()
    }

    /// Whether a frame being received has at most `bytes` of its image left to arrive, so
    /// its TRAILER is due within a few packets.
    pub fn trailer_due(&self, bytes: usize) -> bool {
        self.core.trailer_due(bytes)
    }

    /// Re-queue buffers by hand (tests that starve the camera, then recover).
    pub fn queue(&mut self, ids: &[u32]) {
        let m = self.core.queue_message(ids);
        self.send(m);
    }

    /// Break `m` on purpose from now on (`rdmacam-host --misbehave`; the heartbeat is the
    /// caller's).
    pub fn misbehave(&mut self, m: Misbehaviour) {
        self.misbehave = Some(m);
        if m == Misbehaviour::NoRequeue {
            self.core.stop_requeue();
        }
    }

    /// The next RoCEv2 IP packet to send into `out`.
    pub fn poll_transmit(&mut self, now: Instant, out: &mut Vec<u8>) -> Option<usize> {
        let n = self.next_packet(now, out)?;
        if let Some(m) = self.misbehave {
            misbehave::apply(m, &mut out[..n]);
        }
        Some(n)
    }

    fn next_packet(&mut self, now: Instant, out: &mut Vec<u8>) -> Option<usize> {
        out.resize(128, 0);
        if let Some(n) = self.soft.as_mut().and_then(|s| s.poll_transmit(out)) {
            return Some(n);
        }
        self.post_backlog();
        let rq = self.requester.as_mut()?;
        let p = rq.poll_transmit(now, &self.msgs[..])?;
        out.resize(p.len(), 0);
        p.copy_to(&self.msgs[..], out)
    }

    /// Whether a NAK waits to be sent: send it before reading on.
    pub fn nak_pending(&self) -> bool {
        self.soft.as_ref().is_some_and(|s| s.nak_pending())
    }

    /// When the host next needs [`handle_timeout`](Self::handle_timeout).
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.requester.as_ref().and_then(|r| r.poll_timeout())
    }

    /// Run the requester's timers.
    pub fn handle_timeout(&mut self, now: Instant) {
        if let Some(rq) = self.requester.as_mut() {
            rq.handle_timeout(now);
            while let Some(c) = rq.poll_completion() {
                self.free_msgs.push(c.wr_id as u32);
            }
        }
    }

    /// Whether the host's own SENDs have all been acknowledged.
    pub fn idle(&self) -> bool {
        self.backlog.is_empty() && self.requester.as_ref().is_none_or(|r| r.outstanding() == 0)
    }
}

#[cfg(test)]
mod bounded {
    use super::*;

    #[test]
    fn per_frame_records_stay_bounded() {
        let mut v = Vec::new();
        for i in 0..(5 * HISTORY) as u64 {
            push_bounded(&mut v, i);
        }
        assert!(v.len() <= 2 * HISTORY);
        assert_eq!(
            v.last(),
            Some(&(5 * HISTORY as u64 - 1)),
            "the newest are kept"
        );
        assert!(v.windows(2).all(|w| w[1] == w[0] + 1));
    }
}

#[cfg(test)]
mod deferred {
    use super::*;
    use rdmacam_protocol::device::chunks::Chunks;
    use rdmacam_protocol::device::frame::Pattern;
    use rdmacam_protocol::device::pattern;
    use rdmacam_protocol::gev::gvsp::{ImageLeader, ImageTrailer};

    const W: u32 = 320;
    const H: u32 = 200;
    const SIZE: usize = (W * H) as usize;

    fn core() -> HostCore {
        HostCore::new(HostConfig {
            host_ip: IpAddr::from([10, 0, 0, 1]),
            camera_ip: IpAddr::from([10, 0, 0, 2]),
            host_qpn: 0x11,
            host_sq_psn: 0,
            buffers: 4,
            buffer_size: SIZE,
            tx_port: 0xc002,
            camera_rx_port: 4791,
            seed: 7,
            pattern: Pattern::Gradient,
            requeue: true,
        })
    }

    fn spec() -> FrameSpec {
        FrameSpec {
            width: W,
            height: H,
            offset_x: 0,
            offset_y: 0,
            pixel_format: PixelFormat::Mono8,
            pattern: Pattern::Gradient,
            sensor: false,
        }
    }

    /// Buffer `i` holds frame `i` as the camera writes it (what is under test is when and in
    /// what pieces the host compares, not the pattern), with one byte flipped if asked.
    fn write_frame(mem: &mut [u8], i: u32, flip: Option<usize>) {
        let frame = Frame {
            number: u64::from(i),
            spec: spec(),
            timestamp: 0,
            chunks: Chunks::NONE,
        };
        let buf = &mut mem[i as usize * SIZE..][..SIZE];
        pattern::fill(7, &frame, 0, buf);
        if let Some(at) = flip {
            buf[at] ^= 0x40;
        }
    }

    fn leader(i: u32) -> Vec<u8> {
        let l = ImageLeader {
            timestamp: 0,
            pixel_format: PixelFormat::Mono8.pfnc(),
            width: W,
            height: H,
            offset_x: 0,
            offset_y: 0,
            chunks: false,
        };
        let mut b = vec![0; 256];
        let n = msg::emit_leader(&mut b, 2 * i, i, SIZE as u64, u64::from(i) + 1, false, &l)
            .expect("fits");
        b.truncate(n);
        b
    }

    fn trailer(i: u32) -> Vec<u8> {
        let t = ImageTrailer {
            size_y: H,
            chunks: None,
        };
        let mut b = vec![0; 256];
        let n = msg::emit_trailer(&mut b, 2 * i + 1, i, 0, SIZE as u64, u64::from(i) + 1, t)
            .expect("fits");
        b.truncate(n);
        b
    }

    /// Frames 0 and 3 intact, 1 wrong in its first slice, 2 in its very last byte.
    const FLIPS: [Option<usize>; 4] = [None, Some(9), Some(SIZE - 1), None];

    #[test]
    fn sliced_checks_judge_frames_as_whole_ones_do() {
        for sliced in [false, true] {
            let mut core = core();
            if sliced {
                core.defer_checks(1000);
            }
            let mut mem = vec![0u8; 4 * SIZE];
            for (i, flip) in (0..4).zip(FLIPS) {
                write_frame(&mut mem, i, flip);
                assert_eq!(core.on_message(&leader(i), &mem), None);
                let done = core.on_message(&trailer(i), &mem);
                // inline, the TRAILER judges the frame; sliced, it only queues the comparison
                assert_eq!(done, (!sliced).then_some(i), "sliced {sliced}");
            }
            if sliced {
                assert_eq!(core.checks_pending(), 4);
                assert_eq!((core.stats().good, core.stats().bad), (0, 0));
                let (mut done, mut steps) = (Vec::new(), 0);
                while core.checks_pending() > 0 {
                    steps += 1;
                    done.extend(core.verify(&mem));
                }
                assert_eq!(done, [0, 1, 2, 3], "buffers come back in TRAILER order");
                // 64 slices of 1000 bytes per intact frame; a wrong byte ends its frame's check
                assert_eq!(steps, 64 + 1 + 64 + 64);
            }
            let s = core.stats();
            assert_eq!((s.good, s.bad), (2, 2), "sliced {sliced}");
            assert_eq!(s.frame_numbers, [0, 1, 2, 3]);
            assert_eq!(s.bytes, 4 * SIZE as u64, "bytes count at the TRAILER");
        }
    }

    /// Frame `i` as the camera sends it, one byte flipped if asked.
    fn frame_bytes(i: u32, flip: Option<usize>) -> Vec<u8> {
        let mut mem = vec![0u8; 4 * SIZE];
        write_frame(&mut mem, i, flip);
        mem[i as usize * SIZE..][..SIZE].to_vec()
    }

    /// Place `bytes` into buffer `i` as 4 KiB WRITE packets, in the order `packets` gives.
    fn place_packets(
        core: &mut HostCore,
        mem: &mut Memory,
        i: u32,
        bytes: &[u8],
        packets: &[usize],
    ) {
        for &k in packets {
            let at = k * 4096;
            let end = (at + 4096).min(bytes.len());
            core.place(FRAME_RKEY, mem, i as usize * SIZE + at, &bytes[at..end]);
        }
    }

    const PACKETS: usize = SIZE.div_ceil(4096);

    #[test]
    fn frames_placed_in_order_are_judged_at_their_trailer() {
        let mut core = core();
        core.defer_checks(1000);
        let mut mem = Memory::zeroed(4 * SIZE);
        let in_order: Vec<usize> = (0..PACKETS).collect();
        for (i, flip) in (0..4).zip(FLIPS) {
            assert_eq!(core.on_message(&leader(i), mem.bytes()), None);
            let bytes = frame_bytes(i, flip);
            place_packets(&mut core, &mut mem, i, &bytes, &in_order[..PACKETS - 2]);
            assert!(!core.trailer_due(4096), "two packets to go");
            assert!(core.trailer_due(2 * 4096));
            place_packets(&mut core, &mut mem, i, &bytes, &in_order[PACKETS - 2..]);
            assert!(core.trailer_due(0), "every byte placed, the TRAILER next");
            if flip.is_none() {
                assert_eq!(core.compared_while_placed(i), Some(SIZE));
            }
            // compared as it was placed: the TRAILER judges it, nothing is left to verify
            assert_eq!(core.on_message(&trailer(i), mem.bytes()), Some(i));
            assert_eq!(core.checks_pending(), 0);
            assert!(!core.trailer_due(SIZE), "no frame in flight");
        }
        let s = core.stats();
        assert_eq!((s.good, s.bad), (2, 2));
        assert_eq!(s.frame_numbers, [0, 1, 2, 3]);
        let mut whole = vec![0u8; 4 * SIZE];
        for (i, flip) in (0..4).zip(FLIPS) {
            write_frame(&mut whole, i, flip);
        }
        assert!(
            mem.bytes() == &whole[..],
            "every byte placed where a copy puts it"
        );
    }

    #[test]
    fn writes_out_of_order_or_again_are_compared_after_the_trailer() {
        let good = frame_bytes(0, None);
        let mut bad = good.clone();
        bad[4096 + 5] ^= 1;
        // wrong beyond the gap of the first two cases (a wrong byte compared as it is placed
        // judges the frame at its TRAILER, as `frames_placed_in_order_...` shows)
        let mut bad_late = good.clone();
        bad_late[3 * 4096 + 5] ^= 1;
        let all: Vec<usize> = (0..PACKETS).collect();
        // (what is written, in what order, then written again; compared while placed; good)
        type Case<'a> = (&'a [u8], Vec<usize>, Option<&'a [u8]>, usize, bool);
        let cases: [Case; 5] = [
            // a gap after the first packet: from there on after the TRAILER
            (
                &good,
                [0, 2, 1].into_iter().chain(3..PACKETS).collect(),
                None,
                4096,
                true,
            ),
            (
                &bad_late,
                [0, 2, 1].into_iter().chain(3..PACKETS).collect(),
                None,
                4096,
                false,
            ),
            // the second packet written again, right or wrong: the whole frame after it
            (&good, all.clone(), Some(&good), 0, true),
            (&good, all.clone(), Some(&bad), 0, false),
            // nothing from the start: nothing compared while placed
            (&good, (1..PACKETS).chain([0]).collect(), None, 0, true),
        ];
        for (n, (bytes, order, again, compared, good_frame)) in cases.into_iter().enumerate() {
            let mut core = core();
            core.defer_checks(1000);
            let mut mem = Memory::zeroed(4 * SIZE);
            core.on_message(&leader(0), mem.bytes());
            place_packets(&mut core, &mut mem, 0, bytes, &order);
            if let Some(again) = again {
                place_packets(&mut core, &mut mem, 0, again, &[1]);
            }
            let placed = core.compared_while_placed(0).unwrap_or(0);
            assert_eq!(placed.min(compared), compared, "case {n}");
            assert!(placed < SIZE, "case {n}: not all compared while placed");
            assert_eq!(core.on_message(&trailer(0), mem.bytes()), None, "case {n}");
            assert_eq!(core.checks_pending(), 1, "case {n}");
            while core.checks_pending() > 0 {
                core.verify(mem.bytes());
            }
            let s = core.stats();
            assert_eq!(
                (s.good, s.bad),
                (good_frame as u64, !good_frame as u64),
                "case {n}"
            );
        }
    }

    #[test]
    fn stream_end_waits_for_the_checks_still_pending() {
        let mut core = core();
        core.defer_checks(1000);
        let mut mem = vec![0u8; 4 * SIZE];
        for (i, flip) in (0..4).zip(FLIPS) {
            write_frame(&mut mem, i, flip);
            core.on_message(&leader(i), &mem);
            core.on_message(&trailer(i), &mem);
        }
        core.verify(&mem);
        let mut b = vec![0; 64];
        let n = msg::emit_stream_end(&mut b, 9, 4, 4, 0).expect("fits");
        assert_eq!(core.on_message(&b[..n], &mem), None);
        let s = core.stats();
        assert_eq!(s.stream_end, Some((4, 4, 0)));
        assert_eq!((s.good, s.bad, core.checks_pending()), (2, 2, 0));
    }
}
