//! One session with a camera this host controls, in named steps: [`configure`] the camera,
//! open the data plane ([`Plane::open`]), [`Session::connect`] (RDMA CM or registers, HELLO,
//! ANNOUNCE), [`Session::stream`] until the stream ends, [`Session::finish`].

use std::io::IsTerminal;
use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant as StdInstant};

use anyhow::{Context, Result, bail};
use indicatif::{ProgressBar, ProgressStyle};
use rdmacam_protocol::device::features::acquisition::{command, mode};
use rdmacam_protocol::device::frame::Pattern;
use rdmacam_protocol::device::regs;
use rdmacam_protocol::orsp::State;
use rdmacam_protocol::orsp::regs as oregs;
use rdmacam_protocol::wire::pmtu::Pmtu;

use super::camera_regs::{
    camera_gives_up, connect_registers, destroy_qp, inject, no_hello_cause, since, stall_cause,
    write_host_gid,
};
use super::plane::{CameraFacts, CmConn, Plane};
use super::{HostOptions, HostTransport, StreamFailed};
use crate::gvcp::GvcpClient;
use crate::host::Summary;

/// Everything after taking control.
pub(super) fn session(
    o: &HostOptions,
    stop: &Arc<AtomicBool>,
    gvcp: &mut GvcpClient,
) -> Result<Summary> {
    // set-up may block longer than the camera's heartbeat timeout (gigabytes of buffers to
    // zero or register, a HELLO on a lossy link, a stream that starts stalled): a thread keeps
    // control meanwhile; the stream loop beats on its own
    let keeper = gvcp
        .keep_control(HEARTBEAT_PERIOD)
        .context("cannot start the GVCP heartbeat thread")?;
    let camera = configure(o, gvcp)?;
    let mut s = Session::open(o, gvcp, &camera)?;
    s.connect()?;
    s.start()?;
    drop(keeper);
    s.stream(stop)?;
    s.finish()
}

/// How often the host sends a heartbeat: a sixth of the camera's default timeout (3 s).
const HEARTBEAT_PERIOD: Duration = Duration::from_millis(500);

/// No frame for this long: the host asks the camera whether it is idle or stuck.
const NO_FRAME_LOOK: Duration = Duration::from_secs(10);

/// Then it looks again this often, and a camera that resent packets in between without a frame
/// arriving is stuck.
const QUIET_WATCH: Duration = Duration::from_secs(2);

/// What frames are checked against: `--images` needs the camera to replay them (TestPattern
/// Off, written here; a camera without images refuses it), and without `--images` the camera
/// must show a test pattern. The pattern the checks use when no images are given.
fn check_what_the_camera_shows(o: &HostOptions, gvcp: &mut GvcpClient) -> Result<Pattern> {
    if o.images.is_some() {
        gvcp.write(regs::TEST_PATTERN, regs::TEST_PATTERN_OFF)
            .context(
                "the camera refused TestPattern Off: it has no images to replay (start it with \
                 rdmacam run --images, the files given to --images here)",
            )?;
        return Ok(Pattern::Gradient);
    }
    let v = gvcp.read(regs::TEST_PATTERN)?;
    if v == regs::TEST_PATTERN_OFF {
        bail!(
            "the camera shows its sensor's images (TestPattern Off), not a test pattern: give \
             --images with the files it replays to check every frame against them"
        );
    }
    Pattern::from_u32(v).with_context(|| {
        format!("the camera's TestPattern is {v}, none this host knows: it cannot check frames")
    })
}

/// Chunk mode and the frame rate as the options ask; what the camera offers (ORSP version,
/// path MTU) and what a frame will be.
fn configure(o: &HostOptions, gvcp: &mut GvcpClient) -> Result<CameraFacts> {
    if o.chunks {
        use rdmacam_protocol::device::features::chunks::CHUNKS;
        for c in CHUNKS {
            gvcp.write(regs::CHUNK_ENABLE + 4 * c.selector, 1)?;
        }
        gvcp.write(regs::CHUNK_MODE_ACTIVE, 1)
            .context("the camera refused chunk mode (ChunkModeActive)")?;
    }
    // with chunks, the payload (and the buffers) hold the image and its chunk data
    let payload = gvcp.read(regs::PAYLOAD_SIZE)? as usize;
    let pattern = check_what_the_camera_shows(o, gvcp)?;
    let major = gvcp.read(oregs::BASE + oregs::ORSP_VERSION)? >> 16;
    if major == 0 {
        bail!(
            "this camera offers no ORSP (OrspVersion reads 0): it streams GVSP only (an \
             rdmacam camera started with --transport gvsp; use --transport udp or verbs)"
        );
    }
    if major != 1 {
        bail!("camera speaks ORSP {major}, this host speaks 1");
    }
    // the largest path MTU the camera takes (ORSP_CAPS bits 11..8)
    let caps = gvcp.read(oregs::BASE + oregs::ORSP_CAPS)?;
    let pmtu = Pmtu::from_code(((caps >> 8) & 0xf) as u8).unwrap_or(Pmtu::Mtu1024);
    if let Some(fps) = o.fps {
        // a frame period holds one exposure (AcquisitionFrameRate's maximum follows
        // ExposureTime): shorten the exposure first when it is too long for the rate
        let exposure_us = f32::from_bits(gvcp.read(regs::EXPOSURE_TIME)?);
        let longest = 1e6 / fps;
        if exposure_us > longest {
            gvcp.write(regs::EXPOSURE_TIME, longest.max(1.0).to_bits())?;
        }
        gvcp.write(regs::FRAME_RATE, fps.to_bits())
            .with_context(|| format!("the camera refused AcquisitionFrameRate {fps}"))?;
    }
    Ok(CameraFacts {
        payload,
        pattern,
        pmtu,
        keeps_rx_window: caps & oregs::CAP_RX_WINDOW != 0,
    })
}

/// Refuse frame buffers this machine cannot hold: every page of them is put in place before
/// the stream (or pinned by a verbs registration), and more than there is ends in an abort or
/// the OOM killer, not in an error a user can act on.
fn check_memory(buffers: u32, payload: usize) -> Result<()> {
    let need = u64::from(buffers) * payload as u64;
    if let Some(available) = rdmacam_io::mem::available_bytes()
        && need > available
    {
        let gib = |b: u64| b as f64 / f64::from(1u32 << 30);
        bail!(
            "{buffers} frame buffers of {payload} bytes need {:.1} GiB, more than the {:.1} GiB \
             this machine has available: fewer --buffers, or a smaller frame",
            gib(need),
            gib(available)
        );
    }
    Ok(())
}

/// The camera's frame and retransmission counters (OrspCounters) at one moment.
#[derive(Debug, Default, Clone, Copy)]
struct CameraCounts {
    sent: u32,
    dropped: u32,
    retransmitted: u32,
}

impl CameraCounts {
    /// Read them; `None` when the camera does not answer (after one read's retries).
    fn read(gvcp: &mut GvcpClient) -> Option<Self> {
        let mut r = |off: u32| gvcp.read(oregs::BASE + off).ok();
        Some(CameraCounts {
            sent: r(oregs::COUNTER_FRAMES_SENT)?,
            dropped: r(oregs::COUNTER_FRAMES_DROPPED)?,
            retransmitted: r(oregs::COUNTER_RETRANSMITTED)?,
        })
    }
}

/// A session from the open data plane on.
struct Session<'a> {
    o: &'a HostOptions,
    gvcp: &'a mut GvcpClient,
    roce_local: IpAddr,
    camera_roce: IpAddr,
    plane: Plane,
    pmtu: Pmtu,
    /// The camera keeps OrspHostRxWindow.
    keeps_rx_window: bool,
    /// The OrspHostRxWindow written (0: none).
    rx_window: u32,
    cm: Option<CmConn>,
    /// The camera's counters when this host started acquisition: they count every host's
    /// frames since the camera started, and this host reports its own.
    base: CameraCounts,
    /// When acquisition started.
    start: StdInstant,
    /// This thread's CPU time then.
    cpu_start: Duration,
}

impl<'a> Session<'a> {
    /// Open the data plane for frames as the camera describes them.
    fn open(o: &'a HostOptions, gvcp: &'a mut GvcpClient, camera: &CameraFacts) -> Result<Self> {
        let (roce_local, camera_roce) = o.roce_addresses();
        check_memory(o.buffers, camera.payload)?;
        let (mut plane, pmtu) = Plane::open(o, roce_local, camera_roce, camera)?;
        plane.set_images(o.images.clone());
        Ok(Session {
            o,
            gvcp,
            roce_local,
            camera_roce,
            plane,
            pmtu,
            keeps_rx_window: camera.keeps_rx_window,
            rx_window: 0,
            cm: None,
            base: CameraCounts::default(),
            start: StdInstant::now(),
            cpu_start: rdmacam_io::sched::thread_cpu_time(),
        })
    }

    /// The camera's RoCEv2 address and port, for error messages.
    fn camera_roce_addr(&self) -> std::net::SocketAddr {
        std::net::SocketAddr::new(self.camera_roce, self.o.camera_rx_port)
    }

    /// Connect (RDMA CM or the register exchange), wait for the HELLO, announce the buffers and
    /// wait until the camera holds them.
    fn connect(&mut self) -> Result<()> {
        let o = self.o;
        if let Some(port) = o.cm_port
            && self.gvcp.read(oregs::BASE + oregs::CM_PORT)? == 0
        {
            self.gvcp
                .write(oregs::BASE + oregs::CM_PORT, u32::from(port))?;
        }
        // the camera admits CM requests from its controlling application only: GVCP is IPv4, so
        // an IPv6 host names its RoCE address in OrspHostGid first
        if let (Some(_), IpAddr::V6(gid)) = (o.cm_port, self.roce_local) {
            write_host_gid(self.gvcp, gid)?;
        }
        self.limit_window()?;
        // the camera's resends before it takes the connection: a HELLO that never arrives is
        // then told apart from one that was never sent
        let resent_before = self
            .gvcp
            .read(oregs::BASE + oregs::COUNTER_RETRANSMITTED)
            .ok();
        self.cm = match o.cm_port {
            Some(port) => Some(self.connect_cm(port)?),
            None => {
                connect_registers(o, self.gvcp, &mut self.plane, self.roce_local, self.pmtu)?;
                None
            }
        };
        let t0 = StdInstant::now();
        while self.plane.stats().hello.is_none() {
            // a lossy link may take a few resends of the HELLO
            if t0.elapsed() > Duration::from_secs(5) {
                let soft = o.transport == HostTransport::Soft;
                let listen = std::net::SocketAddr::new(self.roce_local, o.rx_port);
                let camera = self.camera_roce_addr();
                bail!(
                    "{}",
                    no_hello_cause(self.gvcp, resent_before, listen, (soft, o.loss), camera)
                );
            }
            if !self.plane.pump()? {
                std::thread::sleep(Duration::from_micros(100));
            }
        }
        self.plane.announce()?;
        // Start only once the camera holds the buffers: frames due before the ANNOUNCE arrives
        // (lost and sent again on a lossy link) find no buffer and are dropped, as a camera must.
        let t0 = StdInstant::now();
        loop {
            // the host's queue pair gives up after 4 s without an ACK (its messages flushed,
            // so none is outstanding), before the 5 s below; its failure here is a path that
            // does not carry the host's messages, not a stream that broke, so it is said as
            // such and not connected again
            if self.plane.retries_exhausted() {
                bail!(
                    "the camera acknowledged none of the buffer ANNOUNCE: the host's queue pair \
                     gave up after 4 s without an ACK. Does the camera receive RoCEv2 on {} \
                     (--camera-rx-port; rdmacam run --roce-port), reachable from {}?",
                    self.camera_roce_addr(),
                    self.roce_local
                );
            }
            if let Some(why) = self.plane.transport_error() {
                bail!("{why}");
            }
            if self.plane.sends_done() {
                break;
            }
            if t0.elapsed() > Duration::from_secs(5) {
                bail!(
                    "the camera did not acknowledge the buffer ANNOUNCE within 5 s: is {} \
                     reachable from {}?",
                    self.camera_roce_addr(),
                    self.roce_local
                );
            }
            if !self.plane.pump()? {
                self.plane.wait()?;
            }
        }
        Ok(())
    }

    /// A soft host whose receive buffer holds fewer packets than the camera keeps in flight
    /// says so (OrspHostRxWindow, taken at CONNECT by either way of connecting): otherwise
    /// what the buffer cannot hold is dropped by the kernel and resent, on a link that loses
    /// nothing. The count is what the buffer holds: the camera keeps its window and the
    /// new-data probes it sends beyond it during a silence within that.
    fn limit_window(&mut self) -> Result<()> {
        let Some((bytes, held)) = self.plane.rx_capacity() else {
            return Ok(());
        };
        let most = (rdmacam_protocol::camera::MAX_UNACKED + rdmacam_protocol::rc::NEW_DATA_PROBES)
            as usize;
        if held >= most {
            return Ok(());
        }
        let window = held.max(1) as u32;
        if !self.keeps_rx_window {
            eprintln!(
                "rdmacam-host: warning: the receive buffer ({bytes} bytes) holds {held} packets, \
                 fewer than a camera keeps in flight, and this camera takes no OrspHostRxWindow: \
                 expect packets dropped and resent (raise net.core.rmem_max, or run with \
                 CAP_NET_ADMIN)"
            );
            return Ok(());
        }
        self.gvcp
            .write(oregs::BASE + oregs::HOST_RX_WINDOW, window)
            .context("the camera refused OrspHostRxWindow")?;
        self.rx_window = window;
        if self.o.progress {
            eprintln!(
                "receive buffer {bytes} bytes holds {held} packets: OrspHostRxWindow {window}, \
                 the camera keeps what it has in flight within it (net.core.rmem_max or \
                 CAP_NET_ADMIN give more)"
            );
        }
        Ok(())
    }

    /// `rdma_connect()` to the camera's CM `port`: the soft host's own IB CM, or librdmacm.
    fn connect_cm(&mut self, port: u16) -> Result<CmConn> {
        let (o, pmtu) = (self.o, self.pmtu);
        match &mut self.plane {
            Plane::Soft(p) => {
                let super::plane::SoftPlane { host, roce, .. } = &mut **p;
                let (host_qpn, host_psn) = host.qp_numbers();
                let c = crate::cm::connect(
                    roce,
                    self.roce_local,
                    self.camera_roce,
                    o.camera_rx_port,
                    port,
                    host_qpn,
                    host_psn,
                    pmtu,
                )?;
                host.connect_cm(c.device_qpn, c.device_sq_psn, c.host_sq_psn, pmtu, c.hello);
                Ok(CmConn::Soft(c))
            }
            #[cfg(feature = "verbs")]
            Plane::Verbs(v) => {
                let c = crate::verbs_cm::connect(v, self.camera_roce, port)?;
                // the REP carried the HELLO; sideway 0.4 hides private data, so read the same
                // fields from the registers
                let gvcp = &mut *self.gvcp;
                let mut r = |off: u32| gvcp.read(oregs::BASE + off);
                let hello = rdmacam_protocol::orsp::msg::Hello {
                    orsp_version: r(oregs::ORSP_VERSION)?,
                    caps: r(oregs::ORSP_CAPS)?,
                    max_ctrl_msg: r(oregs::MAX_CTRL_MSG)?,
                    dev_recv_depth: r(oregs::DEV_RECV_DEPTH)?,
                    max_buffers: r(oregs::MAX_BUFFERS)?,
                    path_mtu: Pmtu::from_code(r(oregs::PATH_MTU)? as u8).map_or(0, |p| p.bytes()),
                };
                if o.progress {
                    eprintln!(
                        "rdma_connect: established, path MTU {} (OrspPathMtu)",
                        hello.path_mtu
                    );
                }
                v.set_hello(hello);
                Ok(CmConn::Verbs(c))
            }
        }
    }

    /// AcquisitionStart: MultiFrame of the frames asked for, else Continuous.
    fn start(&mut self) -> Result<()> {
        match self.o.frames {
            Some(n) => {
                let Ok(count) = u32::try_from(n) else {
                    bail!(
                        "--frames {n} is more than a camera's AcquisitionFrameCount holds (4294967295)"
                    );
                };
                self.gvcp.write(regs::ACQUISITION_MODE, mode::MULTI_FRAME)?;
                self.gvcp
                    .write(regs::FRAME_COUNT, count)
                    .with_context(|| format!("the camera refused AcquisitionFrameCount {n}"))?;
            }
            None => self.gvcp.write(regs::ACQUISITION_MODE, mode::CONTINUOUS)?,
        }
        self.base = CameraCounts::read(self.gvcp).unwrap_or_default();
        self.gvcp.write(regs::ACQUISITION_COMMAND, command::START)?;
        self.start = StdInstant::now();
        self.cpu_start = rdmacam_io::sched::thread_cpu_time();
        Ok(())
    }

    /// Receive until the camera ends the stream. A failure here still reports what arrived
    /// ([`StreamFailed`]).
    fn stream(&mut self, stop: &Arc<AtomicBool>) -> Result<()> {
        let mut progress = Progress::new(self.o);
        let mut run = StreamState::new(self.o);
        let r = self.stream_until_end(stop, &mut progress, &mut run);
        if let Err(cause) = r {
            progress.abandon();
            // a camera that went away costs one read's retries here, not one per counter
            let (retransmitted, camera_dropped, camera_sent) = CameraCounts::read(self.gvcp)
                .map_or((0, 0, 0), |now| {
                    (
                        since(self.base.retransmitted, now.retransmitted),
                        since(self.base.dropped, now.dropped),
                        since(self.base.sent, now.sent),
                    )
                });
            let stats = self.plane.stats();
            let dropped = stats.dropped.max(u64::from(camera_dropped));
            // without --frames, this connection's share is what the camera sent and dropped in
            // it (its counters, when it still answers), and never less than what arrived: it
            // was 0, and a run that reconnected printed "237 of 147 frames received"
            let acquired = (u64::from(camera_sent) + u64::from(camera_dropped))
                .max(stats.good + stats.bad + dropped);
            let summary = self.summary(
                self.o.frames.unwrap_or(acquired),
                dropped,
                retransmitted,
                self.since_start(),
            );
            // the frames that did arrive keep their rows (a reconnection adds its own)
            if let Err(e) = self.log_latency() {
                eprintln!("rdmacam-host: {e:#}");
            }
            return Err(anyhow::Error::new(StreamFailed { summary, cause }));
        }
        progress.finish(self.plane.stats().good + self.plane.stats().bad);
        Ok(())
    }

    /// `--latency-log`: this connection's TRAILERs appended to the file [`super::run_host`]
    /// started with its header.
    fn log_latency(&self) -> Result<()> {
        let Some(path) = &self.o.latency_log else {
            return Ok(());
        };
        let rows: String = self
            .plane
            .stats()
            .trailers_seen
            .iter()
            .map(|(b, seen, arrived)| format!("{b},{seen},{arrived}\n"))
            .collect();
        std::fs::OpenOptions::new()
            .append(true)
            .open(path)
            .and_then(|mut f| std::io::Write::write_all(&mut f, rows.as_bytes()))
            .with_context(|| format!("cannot write {}", path.display()))
    }

    /// The packets the camera retransmitted since this host started acquisition
    /// (OrspCounters), 0 when it does not answer.
    fn camera_retransmitted(&mut self) -> u32 {
        self.gvcp
            .read(oregs::BASE + oregs::COUNTER_RETRANSMITTED)
            .map_or(0, |now| since(self.base.retransmitted, now))
    }

    fn stream_until_end(
        &mut self,
        stop: &Arc<AtomicBool>,
        progress: &mut Progress,
        run: &mut StreamState,
    ) -> Result<()> {
        while self.plane.stats().stream_end.is_none() {
            self.inject_due(run)?;
            if self.destroy_qp_due(run)? {
                continue;
            }
            self.check_moving(run)?;
            self.stop_when_asked(stop, run)?;
            // a pump that left the socket empty waits at once: a second would find nothing
            if !self.plane.pump()? || self.plane.drained() {
                self.plane.wait()?;
            }
            let beats = self.o.misbehave != Some(crate::host::Misbehaviour::NoHeartbeat);
            if beats && run.last_beat.elapsed() > HEARTBEAT_PERIOD {
                self.gvcp.heartbeat();
                run.last_beat = StdInstant::now();
            }
            if beats && progress.due() {
                // the camera's retransmission counter; the read doubles as the heartbeat
                let retransmitted = self.camera_retransmitted();
                run.last_beat = StdInstant::now();
                progress.show(self.plane.stats(), self.start, retransmitted);
            }
        }
        Ok(())
    }

    /// Faults whose frame count has arrived go to the camera.
    fn inject_due(&mut self, run: &mut StreamState) -> Result<()> {
        let s = self.plane.stats();
        let arrived = s.good + s.bad + s.dropped;
        while run
            .injections
            .first()
            .is_some_and(|i| arrived >= i.after_frames)
        {
            let i = run.injections.remove(0);
            inject(self.gvcp, &i)?;
        }
        Ok(())
    }

    /// `--destroy-qp-after`: destroy the QP once, then watch the camera give up. Returns
    /// whether the QP is gone (the stream then only waits for the camera).
    fn destroy_qp_due(&mut self, run: &mut StreamState) -> Result<bool> {
        if let Some(n) = run.destroy_after
            && run.destroyed.is_none()
            && self.plane.stats().good + self.plane.stats().bad >= n
        {
            destroy_qp(&mut self.plane, n);
            run.destroyed = Some(StdInstant::now());
        }
        let Some(at) = run.destroyed else {
            return Ok(false);
        };
        camera_gives_up(self.gvcp, at)?;
        std::thread::sleep(Duration::from_millis(20));
        Ok(true)
    }

    /// A stream that stops moving, a failed queue pair or lost control is an error, not a
    /// wait without end.
    fn check_moving(&mut self, run: &mut StreamState) -> Result<()> {
        let s = self.plane.stats();
        let seen = s.good + s.bad + s.dropped;
        if seen != run.seen {
            (run.seen, run.moved) = (seen, StdInstant::now());
            run.quiet = None;
        } else if run
            .quiet
            .map_or(run.moved.elapsed() > NO_FRAME_LOOK, |(_, at)| {
                at.elapsed() > QUIET_WATCH
            })
        {
            self.look_at_quiet_camera(run)?;
        }
        if let Some(why) = self.plane.transport_error() {
            bail!("{why} ({seen} frames so far)");
        }
        if self.gvcp.control_lost() {
            bail!(
                "the camera dropped this host's control ({seen} frames so far): it rebooted, or \
                 did not hear the heartbeat in time"
            );
        }
        Ok(())
    }

    /// No frame for [`NO_FRAME_LOOK`]: is the camera idle or stuck? One that answers, streams
    /// without an error, has sent no frame this host missed and resends nothing (looked at
    /// again every [`QUIET_WATCH`]) has no frame to send yet: a slow frame rate, a trigger that
    /// has not come, a stall. The host waits on; it used to give up after 10 s, so a camera at
    /// 0.1 frames/s lost its connection at every frame. Anything else ends the stream with the
    /// camera's account of it.
    fn look_at_quiet_camera(&mut self, run: &mut StreamState) -> Result<()> {
        let quiet_s = run.moved.elapsed().as_secs();
        let counts = CameraCounts::read(self.gvcp);
        let status = self.gvcp.read(oregs::BASE + oregs::STATUS).ok();
        // a frame the camera counted sent before that read had its TRAILER acknowledged by
        // this host: a pump now takes it from the queue it may still wait in
        self.plane.pump()?;
        let s = self.plane.stats();
        let (seen, frames) = (s.good + s.bad + s.dropped, s.good + s.bad);
        if seen != run.seen {
            return Ok(());
        }
        let stuck = match (counts, status) {
            // connected, streaming or draining (OrspStatus 2..=4)
            (Some(c), Some(st)) if State::of_status(st).is_some_and(State::holds_connection) => {
                let unseen = u64::from(since(self.base.sent, c.sent)).saturating_sub(frames);
                let resent = run
                    .quiet
                    .map_or(0, |(q, _)| since(q.retransmitted, c.retransmitted));
                run.quiet = Some((c, StdInstant::now()));
                if unseen > 0 {
                    Some(format!(
                        "the camera counts {unseen} frame(s) sent that never arrived here; "
                    ))
                } else if resent > 0 {
                    Some(format!(
                        "the camera resent {resent} packets in the last {} s and no frame \
                         arrived; ",
                        QUIET_WATCH.as_secs()
                    ))
                } else {
                    None
                }
            }
            // no answer, an ORSP error, no connection: stall_cause says which
            _ => Some(String::new()),
        };
        if let Some(what) = stuck {
            let roce = self.camera_roce_addr();
            bail!(
                "no frame from the camera for {quiet_s} s ({seen} so far): {what}{}",
                stall_cause(self.gvcp, roce, self.roce_local)
            );
        }
        if !run.said_waiting && self.o.progress {
            eprintln!(
                "rdmacam-host: no frame for {quiet_s} s; the camera streams, resends nothing and \
                 has sent nothing this host missed: waiting (a slow frame rate, or a trigger \
                 that has not come)"
            );
        }
        run.said_waiting = true;
        Ok(())
    }

    /// AcquisitionStop on Ctrl-C or when the duration is up; the camera must then end the
    /// stream within 5 s.
    fn stop_when_asked(&mut self, stop: &Arc<AtomicBool>, run: &mut StreamState) -> Result<()> {
        let o = self.o;
        if !run.stopping
            && (stop.load(Ordering::SeqCst)
                || o.duration.is_some_and(|d| self.start.elapsed() >= d))
        {
            self.gvcp.write(regs::ACQUISITION_COMMAND, command::STOP)?;
            run.stopping = true;
        }
        if run.stopping
            && self.start.elapsed() > o.duration.unwrap_or_default() + Duration::from_secs(5)
        {
            bail!("camera did not end the stream after AcquisitionStop");
        }
        Ok(())
    }

    /// Settle the last ACKs, disconnect, give control back, write the latency log, summarise.
    fn finish(mut self) -> Result<Summary> {
        let span = self.since_start();
        for _ in 0..20 {
            self.plane.pump()?;
            std::thread::sleep(Duration::from_millis(1));
        }
        let retransmitted = self.camera_retransmitted();
        self.disconnect();
        let _ = self.gvcp.write(regs::CCP, 0);
        self.log_latency()?;
        let s = self.plane.stats();
        // STREAM_END's counts are the camera's since it started: this host's are the difference
        let (sent, dropped) = s.stream_end.map_or((0, 0), |(_, sent, dropped)| {
            (
                since(self.base.sent, sent),
                since(self.base.dropped, dropped),
            )
        });
        let dropped = u64::from(dropped).max(s.dropped);
        // never fewer expected than came (a STREAM_END lost, or counters that restarted)
        let acquired = (u64::from(sent) + dropped).max(s.good + s.bad + dropped);
        Ok(self.summary(
            self.o.frames.unwrap_or(acquired),
            dropped,
            retransmitted,
            span,
        ))
    }

    /// Seconds since acquisition started: wall time, and this thread's CPU time.
    fn since_start(&self) -> (f64, f64) {
        let cpu = rdmacam_io::sched::thread_cpu_time().saturating_sub(self.cpu_start);
        (self.start.elapsed().as_secs_f64(), cpu.as_secs_f64())
    }

    /// What arrived, for the summary: the host's counts, the camera's retransmissions, over
    /// `(seconds, cpu_seconds)` ([`since_start`](Self::since_start)).
    fn summary(
        &self,
        expected: u64,
        dropped: u64,
        retransmitted: u32,
        (seconds, cpu_seconds): (f64, f64),
    ) -> Summary {
        let s = self.plane.stats();
        let (rx_bytes, rx_packets) = self.plane.rx_capacity().unwrap_or((0, 0));
        Summary {
            frames_expected: expected,
            frames_received: s.good + s.bad,
            frames_bad: s.bad,
            frames_dropped: dropped,
            bytes_received: s.bytes,
            retransmitted_packets: u64::from(retransmitted),
            gbit_per_s: s.bytes as f64 * 8.0 / seconds.max(1e-9) / 1e9,
            seconds,
            cpu_seconds,
            frames_with_chunks: s.chunk_frames,
            reconnects: 0,
            host_roce: self.plane.host_roce(),
            rx_buffer_bytes: rx_bytes as u64,
            rx_buffer_packets: rx_packets as u64,
            rx_window: self.rx_window,
            format: s
                .format
                .map(|(w, h, pf)| crate::host::FrameFormat::new(w, h, pf)),
        }
    }

    /// End the ORSP connection the way it was made: `rdma_disconnect()` (DREQ; the camera
    /// answers DREP and goes idle) or DISCONNECT in OrspControl.
    fn disconnect(&mut self) {
        match (self.cm.take(), &mut self.plane) {
            (Some(CmConn::Soft(c)), Plane::Soft(p)) => {
                let _ = crate::cm::disconnect(
                    &mut p.roce,
                    self.roce_local,
                    self.camera_roce,
                    self.o.camera_rx_port,
                    &c,
                );
            }
            #[cfg(feature = "verbs")]
            (Some(CmConn::Verbs(c)), _) => {
                if let Err(e) = c.disconnect() {
                    eprintln!("rdmacam-host: {e:#}");
                }
            }
            _ => {
                let _ = self
                    .gvcp
                    .write(oregs::BASE + oregs::CONTROL, oregs::CONTROL_DISCONNECT);
            }
        }
    }
}

/// What the stream loop keeps between turns.
struct StreamState {
    injections: Vec<super::Injection>,
    destroy_after: Option<u64>,
    destroyed: Option<StdInstant>,
    stopping: bool,
    /// Frames seen, and when that last changed.
    seen: u64,
    moved: StdInstant,
    /// While no frame arrives (after [`NO_FRAME_LOOK`]): the camera's counters at the last
    /// look, and when.
    quiet: Option<(CameraCounts, StdInstant)>,
    /// The wait for a quiet camera was reported.
    said_waiting: bool,
    last_beat: StdInstant,
}

impl StreamState {
    fn new(o: &HostOptions) -> Self {
        let mut injections = o.inject.clone();
        injections.sort_by_key(|i| i.after_frames);
        let destroy_after = match &o.transport {
            HostTransport::Verbs {
                destroy_qp_after, ..
            } => *destroy_qp_after,
            HostTransport::Soft => None,
        };
        let now = StdInstant::now();
        StreamState {
            injections,
            destroy_after,
            destroyed: None,
            stopping: false,
            seen: 0,
            moved: now,
            quiet: None,
            said_waiting: false,
            last_beat: now,
        }
    }
}

/// Live statistics on stderr (`--progress`): a bar on a terminal (a spinner when the frame
/// count is open), plain lines otherwise, once a second.
struct Progress {
    on: bool,
    bar: Option<ProgressBar>,
    last_print: StdInstant,
}

impl Progress {
    fn new(o: &HostOptions) -> Self {
        let bar = (o.progress && std::io::stderr().is_terminal()).then(|| {
            let (b, template) = match o.frames {
                Some(n) => (ProgressBar::new(n), "{bar:30} {pos}/{len} frames  {msg}"),
                None => (ProgressBar::new_spinner(), "{spinner} {pos} frames  {msg}"),
            };
            if let Ok(style) = ProgressStyle::with_template(template) {
                b.set_style(style);
            }
            b
        });
        Progress {
            on: o.progress,
            bar,
            last_print: StdInstant::now(),
        }
    }

    /// Whether a line is due.
    fn due(&self) -> bool {
        self.on && self.last_print.elapsed() > Duration::from_secs(1)
    }

    fn show(&mut self, s: &crate::host::Stats, start: StdInstant, retransmitted: u32) {
        let secs = start.elapsed().as_secs_f64();
        let stats = format!(
            "({} bad, {} dropped) {:.1} frames/s {:.2} Gbit/s, {retransmitted} packets retransmitted",
            s.bad,
            s.dropped,
            (s.good + s.bad) as f64 / secs,
            s.bytes as f64 * 8.0 / secs / 1e9
        );
        match &self.bar {
            Some(b) => {
                b.set_position(s.good + s.bad);
                b.set_message(stats);
            }
            None => eprintln!("{} frames {stats}", s.good + s.bad),
        }
        self.last_print = StdInstant::now();
    }

    fn abandon(&self) {
        if let Some(b) = &self.bar {
            b.abandon();
        }
    }

    fn finish(self, frames: u64) {
        if let Some(b) = self.bar {
            b.set_position(frames);
            b.finish();
        }
    }
}
