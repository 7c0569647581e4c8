//! `rdmacam run`: the virtual camera on real sockets.
//!
//! GVCP: one socket bound to ADDR:3956, without SO_REUSEADDR, answers what is sent to the
//! camera's address: a second camera on the same address cannot start (it gets a clear error
//! instead of silently taking half the answers). Broadcast DISCOVERY and ACTION_CMD are heard on
//! sockets bound
//! to 255.255.255.255:3956 and to the subnet's broadcast address, shared (SO_REUSEADDR and
//! SO_REUSEPORT, as aravis's fake camera binds them) so other GigE Vision devices on the same
//! machine hear it too; nothing is bound to 0.0.0.0:3956, which would block them and would hear
//! unicast DISCOVERY meant for other addresses. Answers leave from ADDR:3956. GVSP leaves from
//! ADDR on an ephemeral port (reported in SCSP).

use std::io::{ErrorKind, Write as _};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, UdpSocket};
use std::os::fd::AsFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant as StdInstant};

use crate::camera::{CameraCore, EmuSource, ImageSource, RocePorts, Tx, new_camera_with};
use anyhow::{Context, Result, bail};
use rdmacam_io::gso::{GSO_MAX_SEGMENTS, Gather, TX_BATCH, gso_segments};
use rdmacam_io::roce::RoceSocket;
use rdmacam_protocol::device::faults::FaultKind;
use rdmacam_protocol::device::frame::Pattern;
use rdmacam_protocol::device::pattern::SyntheticSource;
use rdmacam_protocol::device::{Device, DeviceConfig, DeviceEvent};
use rdmacam_protocol::gev::PixelFormat;
use rdmacam_protocol::gev::gvcp;
use rdmacam_protocol::rc::Instant;
use rdmacam_protocol::rc::TxPacket;
use socket2::{Domain, Protocol, Socket, Type};
use tracing::{info, warn};

/// Everything `rdmacam run` needs.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// Local address the camera answers on.
    pub ip: Ipv4Addr,
    /// Sensor width in pixels (the largest Width a host may set).
    pub sensor_width: u32,
    /// Sensor height in lines.
    pub sensor_height: u32,
    /// Initial image width.
    pub width: u32,
    /// Initial image height.
    pub height: u32,
    /// Initial pixel format.
    pub pixel_format: PixelFormat,
    /// Initial test pattern.
    pub pattern: Pattern,
    /// Initial frame rate.
    pub fps: f32,
    /// Serial number (also the GenICam DeviceID).
    pub serial: String,
    /// Reported GigE Vision version.
    pub gev_version: (u16, u16),
    /// Seed of the noise pattern.
    pub seed: u64,
    /// Stop after this many seconds (tests); None = until Ctrl-C.
    pub duration: Option<Duration>,
    /// Link speed the stream is paced to, Mbit/s.
    pub link_mbps: u32,
    /// Rate of each acquisition's first frame, Mbit/s (0 = link speed).
    pub first_frame_mbps: u32,
    /// ORSP over a UDP RoCEv2 socket as well as GVSP.
    pub roce: bool,
    /// UDP port the camera receives RoCEv2 on.
    pub roce_port: u16,
    /// UDP port hosts receive RoCEv2 on.
    pub host_roce_port: u16,
    /// GVCP port (3956; the demo moves it to stay clear of real cameras).
    pub gvcp_port: u16,
    /// Drop this share of outgoing RoCEv2 packets (reproducible from `seed`).
    pub loss: f64,
    /// Write every RoCEv2 packet sent and received to this pcapng file.
    pub pcap: Option<std::path::PathBuf>,
    /// RoCEv2 address if not `ip` (IPv6 allowed).
    pub roce_ip: Option<std::net::IpAddr>,
    /// Port the RDMA CM listener answers on from the start (the ORSP CM_PORT register; 0 = none
    /// until a host writes one).
    pub cm_port: u16,
    /// ORSP on an RDMA device's RC QP instead of the userspace RoCEv2 socket: `Some(None)` =
    /// the device that owns the RoCEv2 address, `Some(Some(name))` = that device. Needs the
    /// `verbs` cargo feature.
    pub verbs: Option<Option<String>>,
    /// Send runs of equal-size RoCEv2 packets with UDP segmentation offload and gather I/O
    /// (default); off: one datagram per packet, copied, `sendmmsg` in batches.
    pub gso: bool,
    /// GVSP payload packets leave in UDP GSO runs. Off by default: on loopback and veth a
    /// packet socket (aravis as root, arv-viewer, tcpdump) sees each run as one oversized
    /// datagram, and aravis then assembles garbled frames; only a NIC that segments in
    /// hardware delivers the runs as separate packets to every receiver.
    pub gvsp_gso: bool,
    /// While RoCEv2 packets flow, poll the RoCEv2 socket this long for an ACK before sleeping
    /// (an RDMA NIC's requester never sleeps; a sleeping camera pays a wake-up per window,
    /// which on a lossy link, where the window is small, halves its goodput). Polls that catch
    /// nothing back off (`SpinBackoff`: on a busy machine the spinning would take the peer's
    /// core). `None` = [`BUSY_POLL`] for a camera alone in its process, 0 when several share
    /// it (they would spin against each other).
    pub busy_poll: Option<Duration>,
    /// Write each TRAILER's block id and first send time (CLOCK_MONOTONIC ns) here as CSV.
    pub latency_log: Option<std::path::PathBuf>,
    /// Replay these images instead of the synthetic patterns (`--images`).
    pub images: Option<Arc<rdmacam_io::images::ImageSet>>,
    /// Drive input Line0 with a square wave of this frequency (rising edges per second), for
    /// hosts that set TriggerSource Line0; None = Line0 stays low.
    pub trigger_hz: Option<f64>,
    /// Faults on demand (`--fault`), for every camera of the run; each applies to the camera
    /// it names or to all.
    pub faults: Vec<crate::fault::FaultSpec>,
    /// This camera's place in the run (0 for the first), for `--fault camN:`.
    pub index: usize,
}

/// What one camera did, printed when it stops (text, or JSON with `--json`).
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct CameraSummary {
    /// Its address.
    pub ip: String,
    /// Its serial number.
    pub serial: String,
    /// Frames sent over GVSP (trailer out).
    pub gvsp_frames: u64,
    /// GVSP packets sent, resends included.
    pub gvsp_packets: u64,
    /// GVSP packets resent on request.
    pub gvsp_resent: u64,
    /// PACKETRESEND requests received.
    pub resend_requests: u64,
    /// Resend requests answered PACKET_UNAVAILABLE.
    pub resend_unavailable: u64,
    /// Frames sent over ORSP (TRAILER sent).
    pub orsp_frames: u64,
    /// Frames ORSP dropped (no host buffer queued, or a drop-frame fault).
    pub orsp_frames_dropped: u64,
    /// RoCE: packets sent, retransmissions included.
    pub roce_packets: u64,
    /// RoCE: packets retransmitted.
    pub retransmitted: u64,
    /// RoCE: PSN sequence error NAKs received.
    pub seq_naks: u64,
    /// RoCE: RNR NAKs received.
    pub rnr_naks: u64,
    /// RoCE: CNPs received.
    pub cnps: u64,
    /// RoCE: ACK timeouts.
    pub timeouts: u64,
    /// ORSP connections made.
    pub orsp_connections: u64,
    /// Faults injected, by kind.
    pub faults: crate::fault::FaultCounts,
    /// Datagrams that arrived while the camera was silent (a silence or reboot fault) and were
    /// lost with it, as on a pulled cable.
    pub silenced: u64,
}

impl CameraSummary {
    /// One human line.
    pub fn line(&self) -> String {
        format!(
            "camera {} ({}): GVSP {} frames, {} packets, {} resent, {} of {} resend requests unavailable; \
             ORSP {} frames, {} dropped, {} connections; RoCE {} packets, {} retransmitted, {} sequence NAKs, \
             {} RNR NAKs, {} CNPs, {} timeouts; faults: {}{}",
            self.ip,
            self.serial,
            self.gvsp_frames,
            self.gvsp_packets,
            self.gvsp_resent,
            self.resend_unavailable,
            self.resend_requests,
            self.orsp_frames,
            self.orsp_frames_dropped,
            self.orsp_connections,
            self.roce_packets,
            self.retransmitted,
            self.seq_naks,
            self.rnr_naks,
            self.cnps,
            self.timeouts,
            self.faults.line(),
            if self.silenced > 0 {
                format!(" ({} datagrams lost while silent)", self.silenced)
            } else {
                String::new()
            }
        )
    }

    /// Add what a camera did before a reboot (counters of the one before).
    fn add(&mut self, o: &CameraSummary) {
        self.gvsp_frames += o.gvsp_frames;
        self.gvsp_packets += o.gvsp_packets;
        self.gvsp_resent += o.gvsp_resent;
        self.resend_requests += o.resend_requests;
        self.resend_unavailable += o.resend_unavailable;
        self.orsp_frames += o.orsp_frames;
        self.orsp_frames_dropped += o.orsp_frames_dropped;
    }

    /// Add an RC connection's counters.
    fn add_rc(&mut self, rc: &rdmacam_protocol::rc::RequesterCounters) {
        self.roce_packets += rc.packets_sent;
        self.retransmitted += rc.retransmitted_packets;
        self.seq_naks += rc.seq_naks;
        self.rnr_naks += rc.rnr_naks;
        self.cnps += rc.cnps;
        self.timeouts += rc.timeouts;
    }
}

/// The stream counters of the camera as it is now (not RoCE, not faults).
fn device_summary(cam: &CameraCore) -> CameraSummary {
    let s = cam.device_ref().stream_counters();
    let o = cam.device_ref().orsp_channel().counters();
    CameraSummary {
        gvsp_frames: s.frames_sent,
        gvsp_packets: s.packets_sent,
        gvsp_resent: s.packets_resent,
        resend_requests: s.resend_requests,
        resend_unavailable: s.resend_unavailable,
        orsp_frames: u64::from(o.frames_sent),
        orsp_frames_dropped: u64::from(o.frames_dropped),
        ..CameraSummary::default()
    }
}

/// The camera's own GVCP socket: exclusive, so one address is one camera.
fn control_socket(addr: SocketAddrV4) -> Result<UdpSocket> {
    let s = Socket::new(Domain::IPV4, Type::DGRAM, Some(Protocol::UDP))?;
    s.set_broadcast(true)?;
    if let Err(e) = s.bind(&SocketAddr::V4(addr).into()) {
        if e.kind() == ErrorKind::AddrInUse {
            bail!(
                "{addr} is already served by another camera or GigE Vision device (UDP port {} \
                 on that address is taken): give this camera another --ip",
                addr.port()
            );
        }
        return Err(anyhow::Error::new(e).context(format!(
            "cannot bind UDP {addr}: is {} an address of this host (or of this network namespace)?",
            addr.ip()
        )));
    }
    let u: UdpSocket = s.into();
    u.set_nonblocking(true)?;
    Ok(u)
}

/// A broadcast listener on `addr`, shared with every other device on this machine.
fn broadcast_socket(addr: SocketAddrV4) -> std::io::Result<UdpSocket> {
    let s = Socket::new(Domain::IPV4, Type::DGRAM, Some(Protocol::UDP))?;
    s.set_reuse_address(true)?;
    s.set_reuse_port(true)?;
    s.bind(&SocketAddr::V4(addr).into())?;
    let u: UdpSocket = s.into();
    u.set_nonblocking(true)?;
    Ok(u)
}

/// The broadcast address of the subnet `ip` is on, if its interface has one (loopback has none).
fn subnet_broadcast(ip: Ipv4Addr) -> Option<Ipv4Addr> {
    let addrs = nix::ifaddrs::getifaddrs().ok()?;
    for a in addrs {
        let here = a
            .address
            .as_ref()
            .and_then(|s| s.as_sockaddr_in())
            .map(|s| s.ip());
        if here == Some(ip) {
            // the interface's broadcast address; without one (`ip addr add` without `brd +`),
            // the subnet's, from the mask: hosts still send there
            let from_mask = a
                .netmask
                .as_ref()
                .and_then(|m| m.as_sockaddr_in())
                .map(|m| Ipv4Addr::from(u32::from(ip) | !u32::from(m.ip())));
            let usable = |b: &Ipv4Addr| *b != ip && !b.is_unspecified() && !b.is_broadcast();
            return a
                .broadcast
                .as_ref()
                .and_then(|b| b.as_sockaddr_in())
                .map(|b| b.ip())
                .filter(usable)
                .or(from_mask.filter(usable));
        }
    }
    None
}

/// The sockets that hear broadcast DISCOVERY for a camera at `ip`.
fn discovery_sockets(ip: Ipv4Addr, port: u16) -> Result<Vec<UdpSocket>> {
    let global = SocketAddrV4::new(Ipv4Addr::BROADCAST, port);
    let mut socks = vec![broadcast_socket(global).with_context(|| {
        format!(
            "cannot listen for broadcast discovery on {global}: another program holds it \
             without sharing (SO_REUSEADDR)"
        )
    })?];
    if let Some(b) = subnet_broadcast(ip) {
        let subnet = SocketAddrV4::new(b, port);
        match broadcast_socket(subnet) {
            Ok(s) => socks.push(s),
            // aravis's fake camera holds its subnet's broadcast address alone; hosts send to
            // 255.255.255.255 as well, which every device hears
            Err(e) => warn!("not listening on {subnet} ({e}): discovery by limited broadcast only"),
        }
    }
    Ok(socks)
}

/// A locally administered MAC derived from the address, so each emulated camera differs.
fn mac_for(ip: Ipv4Addr) -> [u8; 6] {
    let o = ip.octets();
    [0x02, 0x52, o[0], o[1], o[2], o[3]]
}

impl RunOptions {
    /// Refuse settings the camera's own feature table would refuse from a host: an image
    /// larger than the sensor, a frame rate outside AcquisitionFrameRate's range.
    pub fn validate(&self) -> Result<()> {
        use rdmacam_protocol::device::features::{Kind, Limit, by_name};
        let fixed_min = |name: &str| match by_name(name).map(|f| f.kind) {
            Some(Kind::Int {
                min: Limit::Fixed(m),
                ..
            }) => m as u32,
            _ => 1,
        };
        if !(16..=MAX_SENSOR).contains(&self.sensor_width)
            || !(1..=MAX_SENSOR).contains(&self.sensor_height)
        {
            bail!(
                "the sensor must be 16..{MAX_SENSOR} pixels wide and 1..{MAX_SENSOR} lines high, \
                 not {}x{}",
                self.sensor_width,
                self.sensor_height
            );
        }
        for (what, v, min, max, sensor_flag) in [
            (
                "--width",
                self.width,
                fixed_min("Width"),
                self.sensor_width,
                "--sensor-width",
            ),
            (
                "--height",
                self.height,
                fixed_min("Height"),
                self.sensor_height,
                "--sensor-height",
            ),
        ] {
            if v < min {
                bail!("{what} {v} is too small: at least {min}");
            }
            if v > max {
                bail!(
                    "{what} {v} is larger than the sensor ({max}): pass {sensor_flag} {v} (or larger)"
                );
            }
        }
        if let Some(hz) = self.trigger_hz
            && !(hz > 0.0 && hz <= 10_000.0)
        {
            bail!("--trigger-hz {hz} is out of range: more than 0, at most 10000");
        }
        // the camera shortens its exposure to fit the frame rate: the bound is 1 / 1 us, capped
        if let Some(Kind::Float { min, unit, .. }) = by_name("AcquisitionFrameRate").map(|f| f.kind)
        {
            let max = rdmacam_protocol::device::acquisition::frame_rate_limit(1.0) as f32;
            if !(min..=max).contains(&self.fps) {
                bail!("--fps {} is out of range: {min}..{max} {unit}", self.fps);
            }
        }
        Ok(())
    }
}

/// How long a camera alone in its process polls for an ACK before it sleeps
/// ([`RunOptions::busy_poll`]): about two loopback round trips. Measured in `rdmacam demo`
/// (docs/BENCHMARKS.md): 30-75 µs give the same goodput at 1 % and 5 % loss, none a third less.
pub const BUSY_POLL: Duration = Duration::from_micros(50);

/// Whether the camera busy-polls before its next sleep: only while polling pays. A poll that
/// ends with nothing arrived says the peer is not answering within a round trip (descheduled
/// on a busy machine, where the camera's spinning would take the very core the peer waits
/// for): the next 1, 2, 4, ... 64 idle waits sleep at once; a poll that catches a packet
/// resets that.
#[derive(Debug)]
struct SpinBackoff {
    /// Idle waits still to sleep through without polling.
    skip: u32,
    /// How many the next miss skips.
    next: u32,
}

impl Default for SpinBackoff {
    fn default() -> Self {
        SpinBackoff { skip: 0, next: 1 }
    }
}

impl SpinBackoff {
    /// Poll before this wait? (Counts a skipped wait.)
    fn ready(&mut self) -> bool {
        if self.skip == 0 {
            return true;
        }
        self.skip -= 1;
        false
    }

    /// What the poll found.
    fn outcome(&mut self, arrived: bool) {
        if arrived {
            self.next = 1;
        } else {
            self.skip = self.next;
            self.next = (self.next * 2).min(64);
        }
    }
}

/// The largest sensor the emulator offers, per side (a 16k x 16k Mono8 frame is 256 MiB).
pub const MAX_SENSOR: u32 = 16_384;

/// Run the camera until `stop` is set (or `duration` passes); what it did.
pub fn run(opts: RunOptions, stop: Arc<AtomicBool>) -> Result<CameraSummary> {
    opts.validate()?;
    let mut faults = crate::fault::FaultEngine::new(&opts.faults, opts.index, opts.seed);
    if opts.verbs.is_some()
        && opts.faults.iter().any(|f| {
            f.camera.is_none_or(|c| c == opts.index)
                && !f.kind.in_device()
                && f.kind != rdmacam_protocol::device::faults::FaultKind::Silence
                && f.kind != rdmacam_protocol::device::faults::FaultKind::Stall
        })
    {
        bail!(
            "with --transport verbs the RDMA device sends the packets: packet faults and reboot \
             need --transport udp or gvsp (drop-frame, resend-unavailable, stall and silence work)"
        );
    }
    let ip = opts.ip;
    if ip.is_unspecified() || ip.is_broadcast() || ip.is_multicast() {
        bail!("--ip must be one local unicast address, not {ip}");
    }
    // Binding ADDR fails clearly when the address is not on this host or is already served.
    let control = control_socket(SocketAddrV4::new(ip, opts.gvcp_port))?;
    let discovery = discovery_sockets(ip, opts.gvcp_port)?;
    if opts.verbs.is_some() && opts.roce {
        bail!("choose one ORSP transport: udp or verbs");
    }
    let mut roce = if opts.roce {
        let roce_ip = opts.roce_ip.unwrap_or(std::net::IpAddr::V4(ip));
        let mut r = RoceSocket::bind(roce_ip, opts.roce_port, 0, opts.loss, opts.seed ^ 0xca11)?;
        r.set_gso(opts.gso);
        if let Some(p) = &opts.pcap {
            r.capture_to(p)
                .with_context(|| format!("cannot write {}", p.display()))?;
        }
        Some(r)
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
    let stream_port = stream_sock.local_addr()?.port();
    // the message channel: events leave from here (MCSP), hosts acknowledge to it
    let message_sock = UdpSocket::bind(SocketAddrV4::new(ip, 0))?;
    message_sock.set_nonblocking(true)?;
    let message_port = message_sock.local_addr()?.port();

    let mut cfg = DeviceConfig::new(ip, mac_for(ip), &opts.serial);
    cfg.sensor_width = opts.sensor_width;
    cfg.sensor_height = opts.sensor_height;
    cfg.width = opts.width;
    cfg.height = opts.height;
    cfg.pixel_format = opts.pixel_format;
    cfg.pattern = opts.pattern;
    cfg.frame_rate = opts.fps;
    cfg.gev_version = opts.gev_version;
    cfg.stream_source_port = stream_port;
    cfg.link_speed_mbps = opts.link_mbps;
    cfg.first_frame_mbps = opts.first_frame_mbps;
    cfg.orsp_offered = opts.roce || opts.verbs.is_some();
    cfg.message_source_port = message_port;
    // Device ticks are the machine's real-time clock in ns, read once here and advanced by the
    // monotonic clock: every camera on this machine shares one time base (a stand-in for
    // IEEE 1588, which the emulator does not run), so an action command fired on several of
    // them stamps their frames alike.
    let t0 = StdInstant::now();
    // the same moment on CLOCK_MONOTONIC, for --latency-log
    let mono_t0 = rdmacam_io::clock::monotonic_ns();
    cfg.tick_offset = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let ports = RocePorts {
        // The socket's own ephemeral port, not the QP's entropy port: that one (0xC000 and up)
        // lies in Linux's ephemeral range, and when another socket on the machine holds it the
        // camera cannot send at all (seen in CI: EADDRINUSE, frames dropped).
        camera_tx: roce.as_ref().map_or(0, |r| r.tx_port()),

        host_rx: opts.host_roce_port,
    };
    let frame_drop = faults.rule(FaultKind::FrameDrop);
    let resend_unavailable = faults.rule(FaultKind::ResendUnavailable);
    // power-up: also after a reboot fault, which loses every setting
    let boot = |cfg: &DeviceConfig| {
        let mut device = Device::new(cfg.clone());
        device.orsp().set_cm_port(opts.cm_port);
        let f = device.faults();
        f.set_io(true);
        f.set_seed(opts.seed ^ 0xd3 ^ ((opts.index as u64) << 32));
        f.set_frame_drop(frame_drop);
        f.set_resend_unavailable(resend_unavailable);
        // the QPN and first PSN of every connection come from the OS's randomness, so a host
        // that is not in control cannot predict them
        let source = match &opts.images {
            Some(set) => EmuSource::Images(ImageSource::new(set.clone())),
            None => EmuSource::Synthetic(SyntheticSource::new(opts.seed)),
        };
        let mut cam = new_camera_with(device, source, ports).with_entropy(rand::random::<u64>);
        if let Some(a) = opts.roce_ip {
            cam = cam.with_roce_address(a);
        }
        cam
    };
    let mut cam = boot(&cfg);
    let mut summary = CameraSummary {
        ip: ip.to_string(),
        serial: opts.serial.clone(),
        ..CameraSummary::default()
    };
    let mut rc_connected = false;
    // a packet held back by a reorder fault, sent after the next one (RoCEv2; GVSP with its
    // destination)
    let mut held: Option<Vec<u8>> = None;
    let mut held_gvsp: Option<(Vec<u8>, SocketAddrV4)> = None;
    #[cfg(feature = "verbs")]
    let mut verbs = match &opts.verbs {
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
    info!(
        %ip, serial = %opts.serial, width = opts.width, height = opts.height,
        pixel_format = opts.pixel_format.name(), pattern = opts.pattern.name(), fps = opts.fps,
        gev = format!("{}.{}", opts.gev_version.0, opts.gev_version.1),
        stream_source_port = stream_port,
        "virtual camera up: GVCP on {ip}:{}, GVSP from {ip}:{stream_port}{}",
        opts.gvcp_port,
        if opts.roce {
            let roce_ip = opts.roce_ip.unwrap_or(std::net::IpAddr::V4(ip));
            format!(
                ", ORSP (RoCEv2) on {}",
                SocketAddr::new(roce_ip, opts.roce_port)
            )
        } else if opts.verbs.is_some() {
            ", ORSP on verbs".to_owned()
        } else {
            String::new()
        }
    );

    let now = || Instant::from_nanos(t0.elapsed().as_nanos() as u64);
    let mut latency_log = match &opts.latency_log {
        Some(p) => {
            let mut f = std::io::BufWriter::new(
                std::fs::File::create(p)
                    .with_context(|| format!("cannot write {}", p.display()))?,
            );
            std::io::Write::write_all(&mut f, b"block_id,trailer_sent_ns\n")?;
            Some(f)
        }
        None => None,
    };
    let mut rx = vec![0u8; 2048];
    let mut tx = vec![0u8; 2048];
    let mut gvsp = GvspBatch::new(opts.gvsp_gso);
    let mut stream_df = None;
    let mut line0 = false;
    let mut roce_rx = vec![0u8; 65536];
    let mut roce_tx = vec![vec![0u8; 9216]; TX_BATCH];
    let mut tx_len = [0usize; TX_BATCH];
    let mut gso_batch: Vec<TxPacket> = Vec::with_capacity(GSO_MAX_SEGMENTS);
    let busy_poll = opts.busy_poll.unwrap_or(BUSY_POLL);
    let mut spin = SpinBackoff::default();
    let mut last_busy = StdInstant::now();
    while !stop.load(Ordering::SeqCst) {
        if opts.duration.is_some_and(|d| t0.elapsed() >= d) {
            break;
        }
        let mut busy = false;
        // faults: hosts' requests, windows opening and closing, a reboot coming back
        while let Some(r) = cam.device().faults().poll_request() {
            let kind = faults.request(StdInstant::now(), r);
            info!(
                fault = kind.cli_name(),
                count = r.count,
                duration_ms = r.duration_ms,
                "fault injected on request"
            );
        }
        if faults.tick(StdInstant::now()).reboot_now {
            // back from the dead with every setting lost; what the old one did stays counted
            if rc_connected && let Some(rc) = cam.rc_counters() {
                summary.add_rc(&rc);
            }
            rc_connected = false;
            summary.add(&device_summary(&cam));
            let before = cam.device_ref().faults_injected();
            cam = boot(&cfg);
            for k in [FaultKind::FrameDrop, FaultKind::ResendUnavailable] {
                cam.device().faults().counted(k, before[k as usize]);
            }
            held = None;
            held_gvsp = None;
            warn!("fault: the camera rebooted (settings lost, hosts must take control again)");
        }
        for (k, n) in faults.wire_counts().into_iter().enumerate() {
            let kind = FaultKind::ALL[k];
            if !kind.in_device() {
                cam.device().faults().set_counted(kind, n);
            }
        }
        if faults.silent() {
            // a pulled cable: whatever arrives is lost, nothing leaves; the camera's own
            // clock runs on (a host's heartbeat may expire meanwhile)
            let mut lost = 0u64;
            for sock in std::iter::once(&control)
                .chain(discovery.iter())
                .chain(std::iter::once(&message_sock))
            {
                while sock.recv_from(&mut rx).is_ok() {
                    lost += 1;
                }
            }
            if let Some(r) = roce.as_mut() {
                while r.recv(&mut roce_rx).is_some() {
                    lost += 1;
                }
            }
            summary.silenced += lost;
            cam.handle_timeout(now());
            while let Some(ev) = cam.poll_event() {
                log_event(&ev);
            }
            let wait = faults
                .next_change(StdInstant::now())
                .unwrap_or(Duration::from_millis(1))
                .min(Duration::from_millis(1));
            std::thread::sleep(wait);
            continue;
        }
        let listeners =
            std::iter::once((&control, false)).chain(discovery.iter().map(|d| (d, true)));
        for (sock, only_discovery) in listeners {
            loop {
                match sock.recv_from(&mut rx) {
                    Ok((n, SocketAddr::V4(src))) => {
                        busy = true;
                        let datagram = &rx[..n];
                        // broadcast carries DISCOVERY and ACTION_CMD (a rig fires at once)
                        if only_discovery
                            && gvcp::Command::parse(datagram).map_or(true, |c| {
                                c.command != gvcp::cmd::DISCOVERY && c.command != gvcp::cmd::ACTION
                            })
                        {
                            continue;
                        }
                        if let Some(reply) = cam.handle_gvcp(now(), src, datagram, &mut tx) {
                            if let Err(e) = control.send_to(&tx[..reply.len], src) {
                                warn!(%src, "GVCP reply failed: {e}");
                            }
                        }
                    }
                    Ok(_) => {}
                    Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                    Err(e) => {
                        warn!("GVCP receive failed: {e}");
                        break;
                    }
                }
            }
        }
        // the message channel: acknowledges in, events (and their resends) out
        loop {
            match message_sock.recv_from(&mut rx) {
                Ok((n, _)) => {
                    busy = true;
                    cam.device().handle_message(&rx[..n]);
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) => {
                    warn!("message channel receive failed: {e}");
                    break;
                }
            }
        }
        while let Some(m) = cam.device().poll_message(now(), &mut tx) {
            busy = true;
            if let Err(e) =
                message_sock.send_to(&tx[..m.len], SocketAddrV4::new(m.dst_ip, m.dst_port))
            {
                warn!("event send failed: {e}");
            }
        }
        // Line0: a square wave, high for the first half of each period
        if let Some(hz) = opts.trigger_hz {
            let phase = (t0.elapsed().as_secs_f64() * hz).fract();
            let level = phase < 0.5;
            if level != line0 {
                line0 = level;
                cam.device().set_line0(now(), level);
            }
        }
        cam.handle_timeout(now());
        while let Some(ev) = cam.poll_event() {
            log_event(&ev);
            // ORSP TX_TUNING's DSCP/ECN byte goes on the socket (the kernel writes the header)
            if let (DeviceEvent::OrspConnect(p), Some(r)) = (&ev, roce.as_mut())
                && let Err(e) = r.set_tos(p.tos)
            {
                warn!(
                    "cannot set the RoCEv2 socket's DSCP/ECN to {:#04x}: {e}",
                    p.tos
                );
            }
            if matches!(ev, DeviceEvent::OrspConnect(_)) {
                rc_connected = true;
                summary.orsp_connections += 1;
            }
            if matches!(ev, DeviceEvent::OrspDisconnected) {
                log_failure(&cam);
                log_rc(&cam);
                if rc_connected && let Some(rc) = cam.rc_counters() {
                    summary.add_rc(&rc);
                }
                rc_connected = false;
            }
        }
        if let Some(r) = roce.as_mut() {
            for _ in 0..4096 {
                let Some((src, dst, ib)) = r.recv(&mut roce_rx) else {
                    break;
                };
                busy = true;
                cam.handle_ib(now(), src, dst, 0, ib);
            }
            let packet_faults = faults.packet_faults();
            if faults.stalled() {
                // a stream stall: nothing leaves until it ends
            } else if r.gso() && !packet_faults {
                // UDP segmentation offload with gather I/O: runs of equal-size packets in one
                // send, payload straight from frame memory
                busy |= send_segmented(&mut cam, r, now, &mut gso_batch, &mut roce_tx[0][..]);
            } else if packet_faults {
                // faults on demand: each packet on its own
                for _ in 0..1024 {
                    let Some(n) = cam.poll_transmit(now(), &mut roce_tx[0][..]) else {
                        break;
                    };
                    busy = true;
                    send_with_faults(&mut faults, r, &mut roce_tx[0][..n], &mut held);
                }
                if let Some(h) = held.take()
                    && let Err(e) = r.send(&h)
                {
                    warn!("RoCEv2 send failed: {e}");
                }
            } else {
                // up to 1024 packets, handed to the kernel TX_BATCH at a time (sendmmsg)
                for _ in 0..1024 / TX_BATCH {
                    let mut k = 0;
                    while k < TX_BATCH {
                        let Some(n) = cam.poll_transmit(now(), &mut roce_tx[k][..]) else {
                            break;
                        };
                        tx_len[k] = n;
                        k += 1;
                    }
                    if k == 0 {
                        break;
                    }
                    busy = true;
                    if let Err(e) = r.send_many((0..k).map(|i| &roce_tx[i][..tx_len[i]])) {
                        warn!("RoCEv2 send failed: {e}");
                    }
                    if k < TX_BATCH {
                        break;
                    }
                }
            }
        }
        #[cfg(feature = "verbs")]
        if let Some(v) = verbs.as_mut() {
            for _ in 0..64 {
                if !v.step(&mut cam, now()) {
                    break;
                }
                busy = true;
            }
        }
        while let Some((block, at)) = cam.poll_trailer_sent() {
            if let Some(f) = latency_log.as_mut() {
                let _ = writeln!(f, "{block},{}", mono_t0 + at.0);
            }
        }
        // GevSCPSDoNotFragment reaches the stream socket before anything is sent with it
        let df = cam.device_ref().stream_do_not_fragment();
        if stream_df != Some(df) {
            if let Err(e) = rdmacam_io::sockopt::set_dont_fragment(&stream_sock, df) {
                warn!("cannot set Don't Fragment to {df} on the GVSP socket: {e}");
            }
            stream_df = Some(df);
        }
        // Stream: send what is due, a bounded batch so GVCP stays responsive; runs of equal-size
        // packets to one destination leave in one UDP GSO send (a frame's payload packets).
        let packet_faults = faults.packet_faults();
        for _ in 0..256 {
            if faults.stalled() {
                break;
            }
            let Some(p) = cam.poll_gvsp(now(), gvsp.slot()) else {
                break;
            };
            busy = true;
            let dst = SocketAddrV4::new(p.dst_ip, p.dst_port);
            if !packet_faults {
                gvsp.push(&stream_sock, p.len, dst);
                continue;
            }
            let payload_at = crate::fault::gvsp_payload_at(&gvsp.slot()[..p.len]);
            let v = faults.packet(payload_at.is_some(), false);
            if v.drop {
                continue;
            }
            if let (true, Some(at)) = (v.corrupt, payload_at) {
                crate::fault::flip_bytes(&mut gvsp.slot()[at..p.len]);
            }
            if v.hold {
                // one packet held at a time: one already waiting goes now
                let packet = gvsp.slot()[..p.len].to_vec();
                if let Some((h, to)) = held_gvsp.replace((packet, dst)) {
                    gvsp.slot()[..h.len()].copy_from_slice(&h);
                    gvsp.push(&stream_sock, h.len(), to);
                }
                continue;
            }
            let copy = v.duplicate.then(|| (gvsp.slot()[..p.len].to_vec(), dst));
            gvsp.push(&stream_sock, p.len, dst);
            for (extra, to) in copy.into_iter().chain(held_gvsp.take()) {
                gvsp.slot()[..extra.len()].copy_from_slice(&extra);
                gvsp.push(&stream_sock, extra.len(), to);
            }
        }
        // a held packet never waits for more than this round
        if let Some((h, to)) = held_gvsp.take() {
            gvsp.slot()[..h.len()].copy_from_slice(&h);
            gvsp.push(&stream_sock, h.len(), to);
        }
        gvsp.flush(&stream_sock);
        if busy {
            last_busy = StdInstant::now();
        } else {
            let mut wait = cam
                .poll_timeout()
                .map(|t| Duration::from_nanos(t.0.saturating_sub(now().0)))
                .unwrap_or(Duration::from_millis(1))
                .min(Duration::from_micros(500));
            if let Some(d) = faults.next_change(StdInstant::now()) {
                wait = wait.min(d);
            }
            if let Some(hz) = opts.trigger_hz {
                // wake for Line0's next edge
                let half = 0.5 / hz;
                let into = t0.elapsed().as_secs_f64() % half;
                wait = wait.min(Duration::from_secs_f64(half - into));
            }
            // RoCEv2 traffic just moved: the ACK that opens the window is due within a round
            // trip, so poll for it a little before sleeping (`busy_poll`, never past the next
            // timer)
            if !busy_poll.is_zero()
                && !wait.is_zero()
                && last_busy.elapsed() < rdmacam_io::poll::BUSY_POLL_WHILE
                && let Some(r) = roce.as_ref()
                && spin.ready()
            {
                let t = StdInstant::now();
                let arrived =
                    rdmacam_io::poll::busy_poll(r.as_fd(), busy_poll.min(wait)).unwrap_or(false);
                spin.outcome(arrived);
                wait = if arrived {
                    Duration::ZERO
                } else {
                    wait.saturating_sub(t.elapsed())
                };
            }
            // Block on the sockets until a packet (an ACK, a command) arrives or a timer is
            // due; spin no longer than above (a spinning camera starves the host's receive
            // thread on a small machine), and never sleep blind (an ACK would wait out the whole
            // sleep). The verbs transport's completions have no descriptor here and wait out
            // the timeout.
            if !wait.is_zero() {
                let c = control.as_fd();
                let d0 = discovery[0].as_fd();
                let d1 = discovery.get(1).map_or(d0, |d| d.as_fd());
                let m = message_sock.as_fd();
                let r = match roce.as_ref() {
                    Some(r) => rdmacam_io::poll::wait_readable([c, d0, d1, m, r.as_fd()], wait),
                    None => rdmacam_io::poll::wait_readable([c, d0, d1, m], wait),
                };
                if let Err(e) = r {
                    warn!("poll failed: {e}");
                    std::thread::sleep(wait);
                }
            }
        }
    }
    if let Some(mut f) = latency_log {
        std::io::Write::flush(&mut f)?;
    }
    if rc_connected && let Some(rc) = cam.rc_counters() {
        summary.add_rc(&rc);
    }
    summary.add(&device_summary(&cam));
    let mut injected = faults.wire_counts();
    let device_counts = cam.device_ref().faults_injected();
    for k in [FaultKind::FrameDrop, FaultKind::ResendUnavailable] {
        injected[k as usize] = device_counts[k as usize];
    }
    summary.faults = crate::fault::FaultCounts(injected);
    let s = cam.device().stream_counters();
    let g = cam.device().gvcp_counters();
    let ev = cam.device().event_counters();
    let ac = cam.device().action_counters();
    let missed = cam.device().frame_triggers_missed();
    log_rc(&cam);
    info!(
        frame_triggers_missed = missed,
        events_sent = ev.sent,
        events_resent = ev.resent,
        events_acknowledged = ev.acknowledged,
        events_unacknowledged = ev.unacknowledged,
        events_dropped = ev.dropped,
        actions_fired = ac.fired,
        actions_late = ac.late,
        actions_refused = ac.refused,
        "triggers, events and actions"
    );
    info!(
        frames = s.frames_sent,
        packets = s.packets_sent,
        resent = s.packets_resent,
        resend_requests = s.resend_requests,
        resend_unavailable = s.resend_unavailable,
        gvcp_commands = g.commands,
        gvcp_errors = g.errors,
        "camera stopped"
    );
    Ok(summary)
}

/// Send one RoCEv2 packet through the fault engine: lost, corrupted (bad ICRC), marked
/// Congestion Experienced, duplicated or held back to follow the next one.
fn send_with_faults(
    faults: &mut crate::fault::FaultEngine,
    r: &mut RoceSocket,
    packet: &mut [u8],
    held: &mut Option<Vec<u8>>,
) {
    let request = crate::fault::is_rc_request(packet);
    let v = if request {
        faults.packet(true, true)
    } else {
        crate::fault::Verdict::default()
    };
    if v.drop {
        return;
    }
    if v.corrupt {
        // a request (checked above): its ICRC is the last byte
        let icrc_last = packet.len() - 1;
        crate::fault::flip_bytes(&mut packet[icrc_last..]);
    }
    if v.hold {
        if let Some(h) = held.replace(packet.to_vec())
            && let Err(e) = r.send(&h)
        {
            warn!("RoCEv2 send failed: {e}");
        }
        return;
    }
    let copies = if v.duplicate { 2 } else { 1 };
    for _ in 0..copies {
        let sent = if v.ecn {
            r.send_congested(packet)
        } else {
            r.send(packet)
        };
        if let Err(e) = sent {
            warn!("RoCEv2 send failed: {e}");
        }
    }
    if let Some(h) = held.take()
        && let Err(e) = r.send(&h)
    {
        warn!("RoCEv2 send failed: {e}");
    }
}

/// The addresses of the cameras `rdmacam run` serves: the `--ip` list, or `--cameras N`
/// consecutive addresses from the first.
pub fn camera_addresses(ips: &[Ipv4Addr], cameras: Option<u32>) -> Result<Vec<Ipv4Addr>> {
    let out: Vec<Ipv4Addr> = match (ips, cameras) {
        ([], _) => bail!("--ip needs at least one address"),
        (_, Some(0)) | (_, Some(257..)) => bail!("--cameras must be 1..=256"),
        ([one], Some(n)) => {
            let first = u32::from(*one);
            (0..n)
                .map(|k| first.checked_add(k).map(Ipv4Addr::from))
                .collect::<Option<_>>()
                .context("--cameras runs past 255.255.255.255")?
        }
        (list, Some(n)) if list.len() != n as usize => {
            bail!(
                "--cameras {n} with {} addresses in --ip: give one or the other",
                list.len()
            )
        }
        (list, _) => list.to_vec(),
    };
    let mut seen = std::collections::HashSet::new();
    if let Some(dup) = out.iter().find(|ip| !seen.insert(**ip)) {
        bail!("{dup} is listed twice in --ip: one address, one camera");
    }
    Ok(out)
}

/// Serve one camera per address in `ips`, each on its own thread with `opts` and its own
/// address, serial (`opts.serial` with `-1`, `-2`, ... appended when there are several), MAC
/// and ports. The first camera that fails to start or fails stops them all, and its error is
/// returned.
pub fn run_cameras(
    opts: RunOptions,
    ips: &[Ipv4Addr],
    stop: Arc<AtomicBool>,
) -> Result<Vec<CameraSummary>> {
    fault_targets_exist(&opts.faults, ips.len())?;
    if let [ip] = ips {
        return Ok(vec![run(RunOptions { ip: *ip, ..opts }, stop)?]);
    }
    let longest = format!("{}-{}", opts.serial, ips.len());
    if longest.len() > 16 {
        bail!(
            "serial {longest:?} would be longer than a GigE Vision serial (16 bytes): a shorter --serial"
        );
    }
    let all = ips
        .iter()
        .enumerate()
        .map(|(k, ip)| RunOptions {
            ip: *ip,
            serial: format!("{}-{}", opts.serial, k + 1),
            index: k,
            ..opts.clone()
        })
        .collect();
    run_all(all, stop)
}

/// Refuse a `--fault camN:` for a camera the run does not have.
fn fault_targets_exist(faults: &[crate::fault::FaultSpec], cameras: usize) -> Result<()> {
    if let Some(f) = faults
        .iter()
        .find(|f| f.camera.is_some_and(|c| c >= cameras))
    {
        bail!(
            "--fault names cam{} but the run has {cameras} camera(s)",
            f.camera.unwrap_or(0) + 1
        );
    }
    Ok(())
}

/// Serve one camera per entry of `all`, each on its own thread. The first camera that fails to
/// start or fails stops them all, and its error is returned.
pub fn run_all(all: Vec<RunOptions>, stop: Arc<AtomicBool>) -> Result<Vec<CameraSummary>> {
    let several = all.len() > 1;
    let all: Vec<RunOptions> = all
        .into_iter()
        .enumerate()
        .map(|(index, o)| RunOptions {
            index,
            // cameras sharing a process (and its cores) sleep rather than spin
            busy_poll: o.busy_poll.or(several.then_some(Duration::ZERO)),
            ..o
        })
        .collect();
    fault_targets_exist(&all[0].faults, all.len())?;
    if all.len() > 1
        && all
            .iter()
            .any(|o| o.pcap.is_some() || o.latency_log.is_some())
    {
        bail!("--pcap and --latency-log write one camera's file: use them with one camera");
    }
    if all.len() > 1 && all.iter().any(|o| o.verbs.is_some() || o.roce_ip.is_some()) {
        bail!("--transport verbs and --roce-ip name one device or address: one camera");
    }
    let ips: Vec<Ipv4Addr> = all.iter().map(|o| o.ip).collect();
    let threads: Vec<_> = all
        .into_iter()
        .map(|o| {
            let stop = stop.clone();
            std::thread::Builder::new()
                .name(format!("camera {}", o.ip))
                .spawn(move || {
                    let span = tracing::info_span!("camera", ip = %o.ip);
                    let _in = span.enter();
                    let r = run(o, stop.clone());
                    if r.is_err() {
                        stop.store(true, Ordering::SeqCst);
                    }
                    r
                })
        })
        .collect::<std::io::Result<_>>()?;
    let mut first_error = None;
    let mut summaries = Vec::new();
    for (t, ip) in threads.into_iter().zip(&ips) {
        match t.join() {
            Ok(Ok(s)) => summaries.push(s),
            Ok(Err(e)) => {
                first_error.get_or_insert(e.context(format!("camera {ip}")));
            }
            Err(_) => {
                first_error.get_or_insert(anyhow::anyhow!("camera {ip}: its thread panicked"));
            }
        }
    }
    first_error.map_or(Ok(summaries), Err)
}

/// Up to 1024 packets through UDP GSO: each queue-pair packet is built with the IPv4
/// identification of its place in the current send (the kernel numbers GSO segments 0, 1, 2,
/// ...); a send holds equal-size packets and may end with one shorter packet (a message's LAST).
/// A packet that cannot join (a FIRST, with its RETH, after MIDDLEs) ends the send and is
/// resealed for place 0 of the next. Small packets (ACKs, CM) go alone. Returns whether anything
/// was sent.
fn send_segmented(
    cam: &mut CameraCore,
    r: &mut RoceSocket,
    now: impl Fn() -> Instant,
    batch: &mut Vec<TxPacket>,
    scratch: &mut [u8],
) -> bool {
    let flush = |cam: &CameraCore, r: &mut RoceSocket, batch: &mut Vec<TxPacket>| {
        // the pieces of each packet, on the stack: no allocation per send
        let none = Gather {
            header: &[],
            payload: &[],
            trailer: &[],
        };
        let mut segs = [none; GSO_MAX_SEGMENTS];
        for (g, p) in segs.iter_mut().zip(batch.iter()) {
            *g = Gather {
                header: p.header(),
                payload: cam.payload(p),
                trailer: p.trailer(),
            };
        }
        if let Err(e) = r.send_gso(&segs[..batch.len()]) {
            warn!("RoCEv2 send failed: {e}");
        }
        batch.clear();
    };
    let mut sent = 0;
    while sent < 1024 {
        if let Some(first) = batch.first()
            && batch.len() >= gso_segments(first.udp_len())
        {
            // full: send before sealing the next packet, whose ICRC covers its place in the run
            flush(cam, r, batch);
        }
        let ident = batch.len() as u16;
        let Some(tx) = cam.poll_packet(now(), ident, scratch) else {
            break;
        };
        sent += 1;
        let mut p = match tx {
            Tx::Bytes(n) => {
                if let Err(e) = r.send(&scratch[..n]) {
                    warn!("RoCEv2 send failed: {e}");
                }
                continue;
            }
            Tx::Packet(p) => p,
        };
        if r.lose() {
            // --loss: sealed with the next place in the run, which the next packet takes
            continue;
        }
        if let Some(first) = batch.first()
            && p.udp_len() > first.udp_len()
        {
            flush(cam, r, batch);
            if let Err(e) = p.set_ipv4_ident(0, cam.payload(&p)) {
                warn!("cannot reseal a packet: {e:?}");
            }
        }
        let shorter = batch.first().is_some_and(|f| p.udp_len() < f.udp_len());
        batch.push(p);
        if shorter {
            flush(cam, r, batch);
        }
    }
    if !batch.is_empty() {
        flush(cam, r, batch);
    }
    sent > 0
}

/// Why an ORSP connection ended in the error state (retry exhaustion, fatal NAK).
fn log_failure(cam: &CameraCore) {
    let ch = cam.device_ref().orsp_channel();
    if ch.state() == rdmacam_protocol::orsp::channel::State::Error {
        let code = ch.last_error();
        let why = match code {
            rdmacam_protocol::orsp::msg::event::RETRY_EXCEEDED => {
                "transport retries exhausted: the host stopped acknowledging"
            }
            rdmacam_protocol::orsp::msg::event::REMOTE_ERROR => {
                "the host answered with a fatal NAK (access or invalid request)"
            }
            _ => "transport error",
        };
        warn!(
            code = format!("{code:#06x}"),
            "ORSP connection failed: {why}; idle until the host reconnects or its heartbeat expires"
        );
    }
}

/// The ORSP connection's transport counters (live, or of the last connection).
fn log_rc(cam: &CameraCore) {
    if let Some(rc) = cam.rc_counters() {
        let o = cam.device_ref().orsp_channel().counters();
        info!(
            frames = o.frames_sent,
            dropped = o.frames_dropped,
            packets = rc.packets_sent,
            retransmitted = rc.retransmitted_packets,
            seq_naks = rc.seq_naks,
            timeouts = rc.timeouts,
            spurious_timeouts = rc.spurious_timeouts,
            tail_probes = rc.tail_probes,
            window = rc.window,
            window_cuts = rc.window_cuts,
            srtt_us = rc.srtt_ns / 1000,
            min_rtt_us = rc.min_rtt_ns / 1000,
            "ORSP transport"
        );
    }
}

fn log_event(ev: &DeviceEvent) {
    match ev {
        DeviceEvent::ControlTaken(h) => info!(host = %h, "control taken"),
        DeviceEvent::ControlReleased(h) => info!(host = %h, "control released"),
        DeviceEvent::HeartbeatExpired(h) => {
            warn!(host = %h, "heartbeat expired: control dropped, stream closed")
        }
        DeviceEvent::AcquisitionStarted => info!("acquisition started"),
        DeviceEvent::AcquisitionStopped => info!("acquisition stopped"),
        DeviceEvent::OrspConnect(p) => info!(
            host_qpn = p.host_qpn,
            pmtu = p.pmtu.bytes(),
            "ORSP connected"
        ),
        DeviceEvent::OrspDisconnected => info!("ORSP disconnected"),
        DeviceEvent::ForceIp {
            ip,
            netmask,
            gateway,
        } => warn!(
            %ip, %netmask, %gateway,
            "FORCEIP accepted in the registers; the emulator keeps its socket address (restart with --ip to move)"
        ),
    }
}

/// GVSP packets waiting to leave together: equal-size packets to one destination (the last may
/// be shorter) go out in one UDP GSO send.
struct GvspBatch {
    bufs: Vec<Vec<u8>>,
    lens: [usize; GSO_MAX_SEGMENTS],
    n: usize,
    dst: Option<SocketAddrV4>,
    gso: bool,
    said_too_big: bool,
}

impl GvspBatch {
    fn new(gso: bool) -> Self {
        GvspBatch {
            bufs: vec![vec![0u8; 9216]; GSO_MAX_SEGMENTS],
            lens: [0; GSO_MAX_SEGMENTS],
            n: 0,
            dst: None,
            gso,
            said_too_big: false,
        }
    }

    /// Where the next packet is written.
    fn slot(&mut self) -> &mut [u8] {
        &mut self.bufs[self.n]
    }

    /// Take the packet of `len` bytes just written into [`slot`](Self::slot); what it cannot
    /// join goes out first.
    fn push(&mut self, sock: &UdpSocket, len: usize, dst: SocketAddrV4) {
        let n = self.n;
        let joins = n > 0
            && self.dst == Some(dst)
            && self.lens[n - 1] == self.lens[0]
            && len <= self.lens[0]
            && n < gso_segments(self.lens[0]);
        if n > 0 && !joins {
            self.flush(sock);
            self.bufs.swap(0, n);
        }
        self.lens[self.n] = len;
        self.dst = Some(dst);
        self.n += 1;
        if self.n == GSO_MAX_SEGMENTS {
            self.flush(sock);
        }
    }

    /// Send what is waiting.
    fn flush(&mut self, sock: &UdpSocket) {
        let (n, Some(dst)) = (self.n, self.dst) else {
            return;
        };
        self.n = 0;
        if n == 0 {
            return;
        }
        let mut datagrams: [&[u8]; GSO_MAX_SEGMENTS] = [&[]; GSO_MAX_SEGMENTS];
        for ((d, b), &l) in datagrams.iter_mut().zip(&self.bufs).zip(&self.lens[..n]) {
            *d = &b[..l];
        }
        if let Err(e) = rdmacam_io::gso::send_datagrams(
            sock,
            SocketAddr::V4(dst),
            &datagrams[..n],
            &mut self.gso,
        ) {
            // with Don't Fragment on, a packet larger than the path MTU cannot leave: a test
            // packet of a host's packet-size negotiation is meant to fail so; say it once
            let too_big = e.raw_os_error() == Some(nix::errno::Errno::EMSGSIZE as i32);
            if !too_big || !self.said_too_big {
                warn!(%dst, "GVSP send failed: {e}");
            }
            self.said_too_big |= too_big;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn busy_polling_backs_off_while_it_catches_nothing() {
        let mut s = SpinBackoff::default();
        assert!(s.ready());
        s.outcome(true);
        assert!(s.ready(), "a poll that caught a packet polls again");
        // misses skip 1, 2, 4, ... idle waits, at most 64
        for skip in [1, 2, 4, 8, 16, 32, 64, 64] {
            s.outcome(false);
            for _ in 0..skip {
                assert!(!s.ready());
            }
            assert!(s.ready(), "after {skip} skipped waits");
        }
        // a catch resets the backoff
        s.outcome(true);
        s.outcome(false);
        assert!(!s.ready());
        assert!(s.ready());
    }

    #[test]
    fn camera_addresses_from_a_count_or_a_list() {
        let a = |s: &str| s.parse::<Ipv4Addr>().unwrap();
        assert_eq!(
            camera_addresses(&[a("127.0.0.254")], Some(3)).unwrap(),
            vec![a("127.0.0.254"), a("127.0.0.255"), a("127.0.1.0")]
        );
        assert_eq!(
            camera_addresses(&[a("10.0.0.2"), a("10.0.0.9")], None).unwrap(),
            vec![a("10.0.0.2"), a("10.0.0.9")]
        );
        assert!(camera_addresses(&[a("10.0.0.2"), a("10.0.0.9")], Some(3)).is_err());
        assert!(camera_addresses(&[a("10.0.0.2"), a("10.0.0.2")], None).is_err());
        assert!(camera_addresses(&[a("10.0.0.2")], Some(0)).is_err());
        assert!(camera_addresses(&[a("10.0.0.2")], Some(257)).is_err());
        assert!(camera_addresses(&[a("255.255.255.254")], Some(3)).is_err());
    }
}
