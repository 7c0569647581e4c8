//! One camera on real sockets, as a loop with named steps: [`CameraLoop::setup`] binds its
//! sockets and boots the device, [`CameraLoop::turn`] runs one turn (faults, GVCP, the message
//! channel, Line0, timers, RoCEv2 or verbs, GVSP, then sleep or busy-poll when idle), and
//! [`CameraLoop::finish`] adds up what it did.

use std::io::Write as _;
use std::net::{SocketAddr, SocketAddrV4, UdpSocket};
use std::os::fd::AsFd;
use std::time::{Duration, Instant as StdInstant};

use anyhow::{Context, Result, bail};
use rdmacam_io::gso::{GSO_MAX_SEGMENTS, TX_BATCH};
use rdmacam_io::roce::{RecvBatch, RoceSocket};
use rdmacam_io::sched::thread_cpu_time;
use rdmacam_io::share::CpuShare;
use rdmacam_protocol::device::faults::FaultKind;
use rdmacam_protocol::device::{DeviceConfig, DeviceEvent};
use rdmacam_protocol::gev::gvcp;
use rdmacam_protocol::rc::{Instant, TxPacket};
use rdmacam_protocol::wire::pmtu::Pmtu;
use socket2::{Domain, Protocol, Socket, Type};
use tracing::{info, warn};

use super::RunOptions;
use super::boot::{boot, refuse_faults_the_transport_lacks};
use super::gvsp_tx::GvspBatch;
use super::idle::{BUSY_POLL, SpinBackoff};
use super::log::{log_event, log_failure, log_rc};
use super::sockets::{control_socket, discovery_sockets};
use super::summary::{CameraSummary, HostViolation, device_summary};
use crate::camera::CameraCore;
use crate::fault::FaultEngine;
use rdmacam_protocol::judge::Violations;

mod notices;
mod roce;
/// The longest an idle camera sleeps without a timer due: how soon it sees the stop flag
/// (Ctrl-C, another camera of the rig failing).
const IDLE_MAX: Duration = Duration::from_millis(50);

/// While a stall or silence fault holds the stream back, the longest the camera sleeps when
/// something is already due (the stream it may not send).
const STALLED_LOOK: Duration = Duration::from_millis(5);

/// How often a camera on the verbs transport looks for completions while idle.
#[cfg(feature = "verbs")]
const VERBS_POLL: Duration = Duration::from_micros(500);

/// The camera's RoCEv2 socket and what its transmit paths keep between turns.
struct RoceLink {
    socket: RoceSocket,
    rx: RecvBatch,
    /// Packet buffers for `sendmmsg` batches (and the fault path's one packet).
    tx: Vec<Vec<u8>>,
    tx_len: [usize; TX_BATCH],
    /// The packets of the UDP GSO run being built.
    gso_batch: Vec<TxPacket>,
    /// A packet held back by a reorder fault, sent after the next one.
    held: Option<Vec<u8>>,
    /// When the last `send_roce` that sent anything finished sending: no packet read later
    /// counts as received before it (its timers were armed meanwhile).
    sent_at: Instant,
    /// The largest path MTU the interface of the RoCEv2 address carries (None: no interface
    /// here holds it, so no limit is known).
    max_pmtu: Option<Pmtu>,
}

/// One camera: its sockets, device and transports, and what it counted.
pub(super) struct CameraLoop {
    opts: RunOptions,
    /// The device's configuration at power-up (a reboot fault boots it again).
    cfg: DeviceConfig,
    cam: CameraCore,
    control: UdpSocket,
    discovery: Vec<UdpSocket>,
    /// The message channel: events leave from here (MCSP), hosts acknowledge to it.
    message_sock: UdpSocket,
    stream_sock: UdpSocket,
    /// The Don't Fragment setting last put on the stream socket.
    stream_df: Option<bool>,
    /// Whether the log has said that frames fell behind AcquisitionFrameRate.
    told_behind: bool,
    /// A frame dropped for want of a host buffer was logged.
    told_no_buffer: bool,
    /// ORSP frames dropped and FrameDrop faults injected, as last seen.
    drops_seen: (u64, u64),
    roce: Option<RoceLink>,
    #[cfg(feature = "verbs")]
    verbs: Option<crate::verbs::VerbsLink>,
    faults: FaultEngine,
    gvsp: GvspBatch,
    /// A GVSP packet held back by a reorder fault, and its destination.
    held_gvsp: Option<(Vec<u8>, SocketAddrV4)>,
    summary: CameraSummary,
    /// What the host did wrong to cameras that rebooted since.
    violations_before: Violations,
    /// An RC connection is up whose counters are not yet in `summary`.
    rc_connected: bool,
    /// The loop's epoch (device ticks count from it) and the same moment on CLOCK_MONOTONIC.
    t0: StdInstant,
    mono_t0: u64,
    latency_log: Option<std::io::BufWriter<std::fs::File>>,
    line0: bool,
    rx: Vec<u8>,
    tx: Vec<u8>,
    busy_poll: Duration,
    spin: SpinBackoff,
    share: CpuShare,
    last_busy: StdInstant,
    /// What the last idle wait found readable, so the next turn need not ask again.
    ready: Option<Ready>,
}

/// Which of the camera's sockets have something to read.
#[derive(Debug, Clone, Copy)]
struct Ready {
    /// The GVCP socket and the broadcast listeners.
    gvcp: bool,
    /// The message channel's socket.
    message: bool,
    /// The RoCEv2 socket.
    roce: bool,
}

impl Ready {
    fn from(r: [bool; 5]) -> Self {
        Ready {
            gvcp: r[0] || r[1] || r[2],
            message: r[3],
            roce: r[4],
        }
    }
}

impl CameraLoop {
    /// Check the options, bind every socket (clear errors for an address not on this host or
    /// already served), and boot the camera.
    pub(super) fn setup(opts: RunOptions) -> Result<Self> {
        opts.validate()?;
        let faults = FaultEngine::new(&opts.faults, opts.index, opts.seed);
        refuse_faults_the_transport_lacks(&opts)?;
        let ip = opts.ip();
        if ip.is_unspecified() || ip.is_broadcast() || ip.is_multicast() {
            bail!("--ip must be one local unicast address, not {ip}");
        }
        if let Ok(Some(dev)) = rdmacam_io::link::subnet_broadcast_of(ip) {
            bail!(
                "--ip {ip} is the broadcast address of {dev}'s subnet, not one camera's: give \
                 a unicast address"
            );
        }
        let control = control_socket(SocketAddrV4::new(ip, opts.gvcp_port))?;
        let discovery = discovery_sockets(ip, opts.gvcp_port)?;
        // an ACTION_CMD fires at its arrival, as a camera's hardware latches it: the cameras of
        // a rig on one busy machine otherwise fire when each next gets a CPU, milliseconds apart
        for s in std::iter::once(&control).chain(&discovery) {
            if let Err(e) = rdmacam_io::arrival::stamp_arrivals(s) {
                warn!("no receive times on the GVCP sockets ({e}): actions fire when read");
            }
        }
        if opts.verbs.is_some() && opts.roce {
            bail!("choose one ORSP transport: udp or verbs");
        }
        let roce = if opts.roce {
            Some(Self::roce_link(&opts)?)
        } else {
            None
        };
        let stream_sock = {
            let s = Socket::new(Domain::IPV4, Type::DGRAM, Some(Protocol::UDP))?;
            s.set_send_buffer_size(8 << 20).ok();
            s.bind(&SocketAddr::V4(SocketAddrV4::new(ip, 0)).into())?;
            let u: UdpSocket = s.into();
            u
        };
        let message_sock = UdpSocket::bind(SocketAddrV4::new(ip, 0))?;
        message_sock.set_nonblocking(true)?;
        let mut cfg = opts.device.clone();
        cfg.stream_source_port = stream_sock.local_addr()?.port();
        cfg.orsp_offered = opts.roce || opts.verbs.is_some();
        cfg.message_source_port = message_sock.local_addr()?.port();
        // Device ticks are the machine's real-time clock in ns, read once here and advanced by
        // the monotonic clock: every camera on this machine shares one time base (a stand-in
        // for IEEE 1588, which the emulator does not run), so an action command fired on
        // several of them stamps their frames alike.
        let t0 = StdInstant::now();
        // the same moment on CLOCK_MONOTONIC, for --latency-log
        let mono_t0 = rdmacam_io::clock::monotonic_ns();
        cfg.tick_offset = rdmacam_io::clock::realtime_ns();
        let latency_log = match &opts.latency_log {
            Some(p) => {
                let mut f = std::io::BufWriter::new(
                    std::fs::File::create(p)
                        .with_context(|| format!("cannot write {}", p.display()))?,
                );
                f.write_all(b"block_id,trailer_sent_ns\n")?;
                Some(f)
            }
            None => None,
        };
        #[allow(unused_mut)] // the verbs transport takes the queue pair over
        let mut cam = boot(
            &opts,
            &cfg,
            &faults,
            roce.as_ref().map_or(0, |r| r.socket.tx_port()),
            roce.as_ref().and_then(|r| r.max_pmtu),
        );
        #[cfg(feature = "verbs")]
        let verbs = match &opts.verbs {
            Some(device) => {
                cam = cam.with_external_transport();
                let roce_ip = opts.roce_ip.unwrap_or(std::net::IpAddr::V4(ip));
                Some(crate::verbs::VerbsLink::open(
                    device.as_deref(),
                    roce_ip,
                    &mut cam,
                )?)
            }
            None => None,
        };
        #[cfg(not(feature = "verbs"))]
        if opts.verbs.is_some() {
            bail!("this build has no verbs transport: rebuild with `--features verbs`");
        }
        let this = CameraLoop {
            cam,
            violations_before: Violations::new(),
            summary: CameraSummary {
                ip: ip.to_string(),
                serial: opts.device.serial.to_string(),
                ..CameraSummary::default()
            },
            busy_poll: opts.busy_poll.unwrap_or(BUSY_POLL),
            gvsp: GvspBatch::new(opts.gvsp_gso),
            share: CpuShare::new(opts.share_cpu, StdInstant::now(), thread_cpu_time()),
            opts,
            cfg,
            control,
            discovery,
            message_sock,
            stream_sock,
            stream_df: None,
            told_behind: false,
            told_no_buffer: false,
            drops_seen: (0, 0),
            roce,
            #[cfg(feature = "verbs")]
            verbs,
            faults,
            held_gvsp: None,
            rc_connected: false,
            t0,
            mono_t0,
            latency_log,
            line0: false,
            rx: vec![0u8; 2048],
            tx: vec![0u8; 2048],
            spin: SpinBackoff::default(),
            last_busy: StdInstant::now(),
            ready: None,
        };
        this.log_start();
        Ok(this)
    }

    /// The RoCEv2 socket of `--transport udp`, with its capture and GSO settings.
    fn roce_link(opts: &RunOptions) -> Result<RoceLink> {
        let roce_ip = opts.roce_ip.unwrap_or(std::net::IpAddr::V4(opts.ip()));
        let mut socket =
            RoceSocket::bind(roce_ip, opts.roce_port, 0, opts.loss, opts.seed ^ 0xca11)?;
        // a data mover builds each packet whole: no GSO runs of packets sealed for their place
        socket.set_gso(opts.gso && !opts.data_mover);
        if let Some(p) = &opts.pcap {
            socket
                .capture_to(p)
                .with_context(|| format!("cannot write {}", p.display()))?;
        }
        // as an RDMA NIC's port does: a path MTU whose packets the interface carries whole
        // (RoCEv2 sets Don't Fragment; a 4096 path MTU on a 1500-byte link sends nothing)
        let max_pmtu = match rdmacam_io::link::interface_mtu(roce_ip)
            .with_context(|| format!("cannot read the MTU of the interface of {roce_ip}"))?
        {
            Some(mtu) => {
                let p = rdmacam_io::link::pmtu_for(mtu, &format!("the interface of {roce_ip}"))?;
                info!(
                    "RoCEv2 interface MTU {mtu}: path MTU up to {} (OrspCaps)",
                    p.bytes()
                );
                Some(p)
            }
            None => None,
        };
        Ok(RoceLink {
            socket,
            rx: RecvBatch::default(),
            tx: vec![vec![0u8; 9216]; TX_BATCH],
            tx_len: [0; TX_BATCH],
            gso_batch: Vec::with_capacity(GSO_MAX_SEGMENTS),
            held: None,
            sent_at: Instant::ZERO,
            max_pmtu,
        })
    }

    fn log_start(&self) {
        let (o, d) = (&self.opts, &self.cfg);
        let (ip, stream_port) = (d.ip, d.stream_source_port);
        info!(
            %ip, serial = %d.serial, width = d.width, height = d.height,
            pixel_format = d.pixel_format.name(), pattern = if o.images.is_some() { "Off (--images)" } else { d.pattern.name() }, fps = d.frame_rate,
            gev = format!("{}.{}", d.gev_version.0, d.gev_version.1),
            stream_source_port = stream_port,
            // LOCAL_NICE on loopback (`--nice`)
            nice = rdmacam_io::sched::thread_nice(),
            "virtual camera up: GVCP on {ip}:{}, GVSP from {ip}:{stream_port}{}",
            o.gvcp_port,
            if o.roce {
                let roce_ip = o.roce_ip.unwrap_or(std::net::IpAddr::V4(ip));
                format!(", ORSP (RoCEv2) on {}", SocketAddr::new(roce_ip, o.roce_port))
            } else if o.verbs.is_some() {
                ", ORSP on verbs".to_owned()
            } else {
                // a newcomer reading the README's RDMA pitch tries `rdmacam run` first
                "; ORSP (RDMA) off: --transport udp streams it over UDP sockets (no RDMA NIC), \
                 --transport verbs through an RDMA NIC or Soft-RoCE"
                    .to_owned()
            }
        );
    }

    /// The camera's clock: nanoseconds since setup.
    fn now(&self) -> Instant {
        Instant::from_nanos(self.t0.elapsed().as_nanos() as u64)
    }

    /// Whether `--duration` has passed.
    pub(super) fn expired(&self) -> bool {
        self.opts.duration.is_some_and(|d| self.t0.elapsed() >= d)
    }

    /// One turn of the loop: everything that arrived, everything due, then an idle wait if
    /// nothing moved.
    pub(super) fn turn(&mut self) {
        self.run_faults();
        if self.faults.silent() {
            self.stay_silent();
            return;
        }
        let ready = match self.ready.take() {
            Some(r) => r,
            None => self.readiness(Duration::ZERO),
        };
        let mut busy = ready.gvcp && self.serve_gvcp();
        busy |= self.serve_message_channel(ready.message);
        self.drive_line0();
        // what arrived before the timers run: an ACK in the socket answers its deadline
        let received = self.receive_roce(ready.roce);
        self.cam.handle_timeout(self.now());
        self.handle_events();
        notices::tell_violations(&mut self.cam);
        let roce = self.send_roce() | received;
        busy |= self.pump_verbs();
        self.log_latency();
        busy |= self.send_gvsp();
        self.tell_frames_behind();
        if busy || roce {
            self.last_busy = StdInstant::now();
        }
        // A burst went and the pacer holds the next: nothing else moved, so the wait for the
        // next burst (or a command) starts now, not after a look at every socket that finds
        // nothing (a `ppoll` per burst)
        if !busy && (!roce || self.cam.pace_bound()) {
            self.idle();
        }
    }

    /// The camera's sockets, for one `ppoll`: GVCP, two broadcast listeners (the first again
    /// when there is one only), the message channel, RoCEv2 (GVCP again without it, or when
    /// `roce` is false).
    fn fds(&self, roce: bool) -> [std::os::fd::BorrowedFd<'_>; 5] {
        let c = self.control.as_fd();
        let d0 = self.discovery[0].as_fd();
        let d1 = self.discovery.get(1).map_or(d0, |d| d.as_fd());
        let r = match &self.roce {
            Some(r) if roce => r.socket.as_fd(),
            _ => c,
        };
        [c, d0, d1, self.message_sock.as_fd(), r]
    }

    /// Which sockets have something to read, waiting at most `wait` for one to.
    fn readiness(&self, wait: Duration) -> Ready {
        self.readiness_of(wait, true)
    }

    /// [`readiness`](Self::readiness), waking for RoCEv2 packets only if `roce`; without, the
    /// RoCEv2 socket counts as readable when the wait ends (whatever came is read then).
    fn readiness_of(&self, wait: Duration, roce: bool) -> Ready {
        match rdmacam_io::poll::readable(self.fds(roce), wait) {
            Ok(r) => {
                let mut ready = Ready::from(r);
                ready.roce |= !roce && self.roce.is_some();
                ready
            }
            Err(e) => {
                warn!("poll failed: {e}");
                std::thread::sleep(wait);
                // look at everything rather than miss a packet
                Ready {
                    gvcp: true,
                    message: true,
                    roce: true,
                }
            }
        }
    }

    /// Faults: hosts' requests, windows opening and closing, a reboot coming back.
    fn run_faults(&mut self) {
        while let Some(r) = self.cam.device_mut().faults().poll_request() {
            let kind = self.faults.request(StdInstant::now(), r);
            info!(
                fault = kind.cli_name(),
                count = r.count,
                duration_ms = r.duration_ms,
                "fault injected on request"
            );
        }
        if self.faults.tick(StdInstant::now()).reboot_now {
            self.reboot();
        }
        for (k, n) in self.faults.wire_counts().into_iter().enumerate() {
            let kind = FaultKind::ALL[k];
            if !kind.in_device() {
                self.cam.device_mut().faults().set_counted(kind, n);
            }
        }
    }

    /// Back from the dead with every setting lost; what the old camera did stays counted.
    /// Never inlined: a new camera is built on the stack (80 KiB), and a caller that inlined
    /// it probed that much stack on every turn of the loop.
    #[cold]
    #[inline(never)]
    fn reboot(&mut self) {
        self.violations_before.merge(self.cam.device().violations());
        self.take_rc_counters();
        self.summary.add(&device_summary(&self.cam));
        let before = self.cam.device().faults_injected();
        let tx_port = self.roce.as_ref().map_or(0, |r| r.socket.tx_port());
        let max_pmtu = self.roce.as_ref().and_then(|r| r.max_pmtu);
        self.cam = boot(&self.opts, &self.cfg, &self.faults, tx_port, max_pmtu);
        for k in [FaultKind::FrameDrop, FaultKind::ResendUnavailable] {
            self.cam
                .device_mut()
                .faults()
                .counted(k, before[k as usize]);
        }
        if let Some(r) = self.roce.as_mut() {
            r.held = None;
        }
        self.held_gvsp = None;
        // no host holds control of the new camera
        self.faults.host_control_ended(StdInstant::now());
        warn!("fault: the camera rebooted (settings lost, hosts must take control again)");
    }

    /// A pulled cable: whatever arrives is lost, nothing leaves; the camera's own clock runs on
    /// (a host's heartbeat may expire meanwhile).
    fn stay_silent(&mut self) {
        let mut lost = 0u64;
        for sock in std::iter::once(&self.control)
            .chain(self.discovery.iter())
            .chain(std::iter::once(&self.message_sock))
        {
            while sock.recv_from(&mut self.rx).is_ok() {
                lost += 1;
            }
        }
        if let Some(r) = self.roce.as_mut() {
            loop {
                let n = r.socket.recv_batch(&mut r.rx);
                lost += n as u64;
                if n < rdmacam_io::roce::RECV_BATCH {
                    break;
                }
            }
        }
        self.summary.silenced += lost;
        self.cam.handle_timeout(self.now());
        self.handle_events();
        if !self.faults.silent() {
            return;
        }
        let wait = self
            .faults
            .next_change(StdInstant::now())
            .unwrap_or(Duration::from_millis(1))
            .min(Duration::from_millis(1));
        std::thread::sleep(wait);
    }

    /// GVCP commands on the camera's own socket, and broadcast DISCOVERY and ACTION_CMD on the
    /// shared listeners; each acknowledge leaves from the camera's socket.
    fn serve_gvcp(&mut self) -> bool {
        let mut busy = false;
        let now = self.now();
        let listeners =
            std::iter::once((&self.control, false)).chain(self.discovery.iter().map(|d| (d, true)));
        for (sock, only_discovery) in listeners {
            loop {
                match rdmacam_io::arrival::recv_from_aged(sock, &mut self.rx) {
                    Ok((n, SocketAddr::V4(src), age)) => {
                        busy = true;
                        let datagram = &self.rx[..n];
                        let command = gvcp::Command::parse(datagram).map(|c| c.command);
                        // broadcast carries DISCOVERY and ACTION_CMD (a rig fires at once)
                        if only_discovery
                            && command.map_or(true, |c| {
                                c != gvcp::cmd::DISCOVERY && c != gvcp::cmd::ACTION
                            })
                        {
                            continue;
                        }
                        // an action fires at the command's arrival (its trigger's timestamp);
                        // everything else is handled at the turn's time
                        let at = match (command, age) {
                            (Ok(gvcp::cmd::ACTION), Some(age)) => Instant::from_nanos(
                                self.now().as_nanos().saturating_sub(age.as_nanos() as u64),
                            ),
                            _ => now,
                        };
                        if let Some(reply) = self.cam.handle_gvcp(at, src, datagram, &mut self.tx)
                            && let Err(e) = self.control.send_to(&self.tx[..reply.len], src)
                        {
                            warn!(%src, "GVCP reply failed: {e}");
                        }
                    }
                    Ok(_) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                    Err(e) => {
                        warn!("GVCP receive failed: {e}");
                        break;
                    }
                }
            }
        }
        busy
    }

    /// Hosts' acknowledges of events, until the message socket is empty; whether one came.
    fn read_message_acks(&mut self) -> bool {
        let mut any = false;
        loop {
            match self.message_sock.recv_from(&mut self.rx) {
                Ok((n, from)) => {
                    any = true;
                    if let std::net::SocketAddr::V4(from) = from {
                        self.cam.device_mut().handle_message(from, &self.rx[..n]);
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return any,
                Err(e) => {
                    warn!("message channel receive failed: {e}");
                    return any;
                }
            }
        }
    }

    /// The message channel: acknowledges in (when `readable`), events (and their resends) out.
    fn serve_message_channel(&mut self, readable: bool) -> bool {
        let mut busy = readable && self.read_message_acks();
        let now = self.now();
        while let Some(m) = self.cam.device_mut().poll_message(now, &mut self.tx) {
            busy = true;
            let dst = SocketAddrV4::new(m.dst_ip, m.dst_port);
            if let Err(e) = self.message_sock.send_to(&self.tx[..m.len], dst) {
                warn!("event send failed: {e}");
            }
        }
        busy
    }

    /// Line0: a square wave of `--trigger-hz`, high for the first half of each period. The
    /// device sees each edge at the time it happened, as an input latched in hardware, not when
    /// this loop woke to notice it: on a loaded machine a wake-up can come milliseconds late,
    /// and the frame's trigger time and timestamp would move with it.
    fn drive_line0(&mut self) {
        if let Some(hz) = self.opts.trigger_hz {
            let halves = (self.t0.elapsed().as_secs_f64() * hz * 2.0).floor();
            let level = halves % 2.0 == 0.0;
            if level != self.line0 {
                self.line0 = level;
                let edge = Instant::from_nanos((halves / (2.0 * hz) * 1e9) as u64);
                self.cam.device_mut().set_line0(edge, level);
            }
        }
    }

    /// Device events: logged; an ORSP connection's DSCP/ECN goes on the socket, its end adds
    /// its transport counters to the summary.
    fn handle_events(&mut self) {
        while let Some(ev) = self.cam.poll_event() {
            log_event(&ev);
            // ORSP TX_TUNING's DSCP/ECN byte goes on the socket (the kernel writes the header)
            if let (DeviceEvent::OrspConnect(p), Some(r)) = (&ev, self.roce.as_mut())
                && let Err(e) = r.socket.set_tos(p.tos)
            {
                warn!(
                    "cannot set the RoCEv2 socket's DSCP/ECN to {:#04x}: {e}",
                    p.tos
                );
            }
            match ev {
                DeviceEvent::OrspConnect(_) => {
                    self.rc_connected = true;
                    self.summary.orsp_connections += 1;
                }
                DeviceEvent::OrspDisconnected => {
                    log_failure(&self.cam);
                    log_rc(&self.cam);
                    self.take_rc_counters();
                }
                DeviceEvent::ControlReleased(_) | DeviceEvent::HeartbeatExpired(_)
                    if self.faults.host_control_ended(StdInstant::now()) =>
                {
                    info!("the faults that host asked for end with its control");
                }
                _ => {}
            }
        }
    }

    /// The live RC connection's counters into the summary (once per connection).
    fn take_rc_counters(&mut self) {
        if self.rc_connected
            && let Some(rc) = self.cam.rc_counters()
        {
            self.summary.add_rc(&rc);
        }
        self.rc_connected = false;
    }

    /// The verbs transport: completions and receives in, work requests posted.
    fn pump_verbs(&mut self) -> bool {
        #[cfg(feature = "verbs")]
        if let Some(v) = self.verbs.as_mut() {
            let mut busy = false;
            for _ in 0..64 {
                let now = Instant::from_nanos(self.t0.elapsed().as_nanos() as u64);
                if !v.step(&mut self.cam, now) {
                    break;
                }
                busy = true;
            }
            return busy;
        }
        false
    }

    /// GVSP: what is due, a bounded batch so GVCP stays responsive; runs of equal-size packets
    /// to one destination may leave in one UDP GSO send (`--gvsp-gso`). With packet faults,
    /// each packet passes the fault engine (lost, corrupted, duplicated or held back).
    fn send_gvsp(&mut self) -> bool {
        // GevSCPSDoNotFragment reaches the stream socket before anything is sent with it
        let df = self.cam.device().stream_do_not_fragment();
        if self.stream_df != Some(df) {
            if let Err(e) = rdmacam_io::sockopt::set_dont_fragment(&self.stream_sock, df) {
                warn!("cannot set Don't Fragment to {df} on the GVSP socket: {e}");
            }
            self.stream_df = Some(df);
        }
        let mut busy = false;
        let packet_faults = self.faults.packet_faults();
        for _ in 0..256 {
            if self.faults.stalled() {
                break;
            }
            let now = self.now();
            let Some(p) = self.cam.poll_gvsp(now, self.gvsp.slot()) else {
                break;
            };
            busy = true;
            let dst = SocketAddrV4::new(p.dst_ip, p.dst_port);
            if packet_faults {
                self.send_gvsp_with_faults(p.len, dst);
            } else {
                self.gvsp.push(&self.stream_sock, p.len, dst);
            }
        }
        // a held packet never waits for more than this round
        if let Some((h, to)) = self.held_gvsp.take() {
            self.gvsp.slot()[..h.len()].copy_from_slice(&h);
            self.gvsp.push(&self.stream_sock, h.len(), to);
        }
        self.gvsp.flush(&self.stream_sock);
        busy
    }

    /// One GVSP packet of `len` bytes, just written into the batch's slot, through the fault
    /// engine.
    fn send_gvsp_with_faults(&mut self, len: usize, dst: SocketAddrV4) {
        let payload_at = crate::fault::gvsp_payload_at(&self.gvsp.slot()[..len]);
        let v = self.faults.packet(payload_at.is_some(), false);
        if v.drop {
            return;
        }
        if let (true, Some(at)) = (v.corrupt, payload_at) {
            crate::fault::flip_bytes(&mut self.gvsp.slot()[at..len]);
        }
        if v.hold {
            // one packet held at a time: one already waiting goes now
            let packet = self.gvsp.slot()[..len].to_vec();
            if let Some((h, to)) = self.held_gvsp.replace((packet, dst)) {
                self.gvsp.slot()[..h.len()].copy_from_slice(&h);
                self.gvsp.push(&self.stream_sock, h.len(), to);
            }
            return;
        }
        let copy = v.duplicate.then(|| (self.gvsp.slot()[..len].to_vec(), dst));
        self.gvsp.push(&self.stream_sock, len, dst);
        for (extra, to) in copy.into_iter().chain(self.held_gvsp.take()) {
            self.gvsp.slot()[..extra.len()].copy_from_slice(&extra);
            self.gvsp.push(&self.stream_sock, extra.len(), to);
        }
    }

    /// Nothing moved this turn: wait for a packet (an ACK, a command) or the next timer.
    fn idle(&mut self) {
        let now = self.now();
        // asleep until a packet arrives or a timer is due: the device's timers (frames,
        // heartbeat, events, actions, the RC transport) say when; an idle camera used to wake
        // every 500 us regardless (6 % of a core each, 300 saturated two cores)
        //
        // Held back by the pacer mid-frame, it wakes once for two bursts (each wake-up of a
        // sleeping camera costs a context switch and a look at every socket); near a TRAILER
        // each burst goes at its time (`poll_timeout_lulled`)
        let mut wait = self
            .cam
            .poll_timeout_lulled()
            .map(|t| Duration::from_nanos(t.0.saturating_sub(now.0)))
            .unwrap_or(IDLE_MAX)
            .min(IDLE_MAX);
        if let Some(d) = self.opts.duration {
            wait = wait.min(d.saturating_sub(self.t0.elapsed()));
        }
        #[cfg(feature = "verbs")]
        if self.verbs.is_some() {
            // completions have no descriptor here: look for them often
            wait = wait.min(VERBS_POLL);
        }
        if self.faults.stalled() {
            // what is due is the stream the stall holds back: look at the timers that still
            // run (heartbeat expiry, events) now and then, not at once (a stalled camera used
            // to spin a whole core until the stall ended)
            wait = wait.max(STALLED_LOOK);
        }
        if let Some(d) = self.faults.next_change(StdInstant::now()) {
            wait = wait.min(d);
        }
        if let Some(hz) = self.opts.trigger_hz {
            // wake for Line0's next edge
            let half = 0.5 / hz;
            let into = self.t0.elapsed().as_secs_f64() % half;
            wait = wait.min(Duration::from_secs_f64(half - into));
        }
        // RoCEv2 traffic just moved: the ACK that opens the window is due within a round trip,
        // so poll for it a little before sleeping (`busy_poll`, never past the next timer);
        // not when everything went out (a frame's tail: an ACK lets nothing go, and the polls
        // took 50 us of CPU per frame)
        if !self.busy_poll.is_zero()
            && !wait.is_zero()
            && !self.cam.pace_bound()
            && !self.cam.all_sent()
            && self.last_busy.elapsed() < rdmacam_io::poll::BUSY_POLL_WHILE
            && let Some(r) = self.roce.as_ref()
            && self.spin.ready()
        {
            let t = StdInstant::now();
            let arrived = rdmacam_io::poll::busy_poll(r.socket.as_fd(), self.busy_poll.min(wait))
                .unwrap_or(false);
            self.spin.outcome(arrived);
            wait = if arrived {
                Duration::ZERO
            } else {
                wait.saturating_sub(t.elapsed())
            };
        }
        // Block on the sockets until a packet (an ACK, a command) arrives or a timer is due;
        // spin no longer than above (a spinning camera starves the host's receive thread on a
        // small machine), and never sleep blind (an ACK would wait out the whole sleep). The
        // verbs transport's completions have no descriptor here and wait out the timeout.
        //
        // Held back by the pacer alone (the window open), the camera sleeps through ACKs: one
        // cannot send anything sooner, and each used to wake it (the host ACKs every 8
        // packets: two wake-ups per 64 KiB run at the default pace). What came is read when
        // the run is due, each packet at its kernel receive time (`receive_roce`); a NAK waits at
        // most one run's time on the link.
        if !wait.is_zero() {
            let pace_bound = self.cam.pace_bound();
            self.ready = Some(self.readiness_of(wait, !pace_bound));
            self.summary.idle_wakeups += 1;
        }
    }

    /// The camera stops: flush the latency log, add up the counters, log them.
    pub(super) fn finish(mut self) -> Result<CameraSummary> {
        if let Some(mut f) = self.latency_log.take()
            && let Err(e) = f.flush()
        {
            self.latency_log_failed(&e);
        }
        // a connection still up: its transport line is due (one that ended was logged then)
        let live = self.rc_connected;
        self.take_rc_counters();
        self.summary.add(&device_summary(&self.cam));
        let mut injected = self.faults.wire_counts();
        let device_counts = self.cam.device().faults_injected();
        for k in [FaultKind::FrameDrop, FaultKind::ResendUnavailable] {
            injected[k as usize] = device_counts[k as usize];
        }
        self.summary.faults = crate::fault::FaultCounts(injected);
        self.summary.bad_icrc = self.roce.as_ref().map_or(0, |r| r.socket.icrc_drops);
        notices::tell_violations(&mut self.cam);
        self.violations_before.merge(self.cam.device().violations());
        self.summary.host_violations = HostViolation::list(&self.violations_before);
        let d = self.cam.device();
        let (s, g, ev, ac) = (
            d.stream_counters(),
            d.gvcp_counters(),
            d.event_counters(),
            d.action_counters(),
        );
        let missed = d.frame_triggers_missed();
        if live {
            log_rc(&self.cam);
        }
        if self.share.pause.yields > 0 {
            info!(
                yields = self.share.pause.yields,
                long_yields = self.share.pause.long_yields,
                "CPU shared between sends"
            );
        }
        info!(
            frame_triggers_missed = missed,
            events_sent = ev.sent,
            events_resent = ev.resent,
            events_acknowledged = ev.acknowledged,
            events_unacknowledged = ev.unacknowledged,
            events_dropped = ev.dropped,
            event_acks_foreign = ev.foreign_acks,
            actions_fired = ac.fired,
            actions_late = ac.late,
            actions_refused = ac.refused,
            actions_displaced = ac.displaced,
            "triggers, events and actions"
        );
        // what ran, once: GVSP's counters when it streamed, ORSP's when a host connected
        let mut ran = Vec::new();
        if s.frames_sent > 0 || s.resend_requests > 0 {
            ran.push(format!(
                "GVSP {} frames, {} packets, {} resent of {} resend requests ({} unavailable)",
                s.frames_sent,
                s.packets_sent,
                s.packets_resent,
                s.resend_requests,
                s.resend_unavailable
            ));
        }
        let sum = &self.summary;
        if sum.orsp_connections > 0 {
            ran.push(format!(
                "ORSP {} frames, {} dropped, {} connections",
                sum.orsp_frames, sum.orsp_frames_dropped, sum.orsp_connections
            ));
        }
        if ran.is_empty() {
            ran.push("no frames streamed".into());
        }
        info!(
            gvcp_commands = g.commands,
            gvcp_errors = g.errors,
            "camera stopped: {}",
            ran.join("; ")
        );
        Ok(self.summary)
    }
}
