//! The reference host on sockets: GVCP register exchange (`design/ORSP.md` §3), then the
//! [`OrspHost`] data plane on a UDP RoCEv2 socket. Used by `rdmacam-host` and `rdmacam demo`.

use std::io::IsTerminal;

use indicatif::{ProgressBar, ProgressStyle};
use std::net::{Ipv4Addr, SocketAddrV4};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant as StdInstant};

use anyhow::{Context, Result, bail};
use rdmacam_protocol::device::frame::Pattern;
use rdmacam_protocol::device::regs;
use rdmacam_protocol::orsp::regs as oregs;
use rdmacam_protocol::rc::Instant;
use rdmacam_protocol::wire::pmtu::Pmtu;

use crate::gvcp::GvcpClient;
use crate::host::{HostConfig, OrspHost, Summary};
use rdmacam_io::roce::RoceSocket;

/// What the host does.
#[derive(Debug, Clone)]
pub struct HostOptions {
    /// The camera's IP.
    pub camera: Ipv4Addr,
    /// The camera's GVCP port (3956).
    pub gvcp_port: u16,
    /// This host's IP.
    pub local: Ipv4Addr,
    /// UDP port this host receives RoCEv2 on (4791 unless it would collide).
    pub rx_port: u16,
    /// This host's RoCEv2 address when it differs from `local` (e.g. IPv6; written to
    /// OrspHostGid so the camera streams there).
    pub roce_local: Option<std::net::IpAddr>,
    /// The camera's RoCEv2 address when it differs from `camera`.
    pub camera_roce: Option<std::net::IpAddr>,
    /// UDP port the camera receives RoCEv2 on.
    pub camera_rx_port: u16,
    /// Frame buffers to announce.
    pub buffers: u32,
    /// Stop after this many frames (MultiFrame); None = until `duration` or stop.
    pub frames: Option<u64>,
    /// Stop after this long.
    pub duration: Option<Duration>,
    /// Drop this share of the host's outgoing RoCEv2 packets (tests).
    pub loss: f64,
    /// Seed for the loss and for checking the Noise pattern.
    pub seed: u64,
    /// Frame rate to ask for.
    pub fps: Option<f32>,
    /// Print live statistics on stderr.
    pub progress: bool,
    /// Connect with the RDMA CM to this port instead of the GVCP register exchange (the host
    /// sets OrspCmPort to it when the camera has no listener yet).
    pub cm_port: Option<u16>,
    /// Where RoCEv2 is received: the soft host on a UDP socket, or an RDMA device.
    pub transport: HostTransport,
    /// Write each TRAILER's block id and arrival time (CLOCK_MONOTONIC ns) here as CSV, to
    /// join with the camera's `--latency-log` (scripts/latency.py).
    pub latency_log: Option<std::path::PathBuf>,
    /// Switch chunk data on (ChunkModeActive, every ChunkSelector entry enabled) before
    /// streaming; every frame's chunks are then parsed and checked.
    pub chunks: bool,
    /// Check frames against these images (the camera runs `--images` with the same files)
    /// instead of the synthetic pattern.
    pub images: Option<Arc<rdmacam_io::images::ImageSet>>,
    /// Connect again this many times when a stream fails after it started (the camera
    /// restarted, the connection broke), waiting for the camera to answer discovery.
    pub reconnects: u32,
    /// Faults to ask the camera for (FaultInject) once so many frames arrived.
    pub inject: Vec<Injection>,
}

impl HostOptions {
    /// The soft host at `local` streaming `frames` frames from the camera at `camera` on the
    /// standard ports (GVCP 3956, RoCEv2 4791 both ways) into 16 buffers, at the camera's frame
    /// rate, with the register exchange, checking the synthetic pattern (seed 1); nothing lost on
    /// purpose, no progress line, no chunks, no reconnection, no faults, no logs. Callers change
    /// what they need with struct update syntax.
    pub fn new(camera: Ipv4Addr, local: Ipv4Addr, frames: u64) -> Self {
        HostOptions {
            camera,
            gvcp_port: 3956,
            local,
            rx_port: 4791,
            roce_local: None,
            camera_roce: None,
            camera_rx_port: 4791,
            buffers: 16,
            frames: Some(frames),
            duration: None,
            loss: 0.0,
            seed: 1,
            fps: None,
            progress: false,
            cm_port: None,
            transport: HostTransport::Soft,
            latency_log: None,
            chunks: false,
            images: None,
            reconnects: 0,
            inject: Vec::new(),
        }
    }
}

/// A fault the host asks the camera for through the FaultInjection features once
/// `after_frames` frames arrived (`rdmacam-host --inject-fault N:KIND[:AMOUNT]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Injection {
    /// Frames received (good, bad or reported dropped) before it is injected.
    pub after_frames: u64,
    /// What (FaultSelector value).
    pub kind: rdmacam_protocol::device::faults::FaultKind,
    /// Packets, frames or requests it hits (FaultCount), or ms it lasts (FaultDuration).
    pub amount: u32,
}

impl std::str::FromStr for Injection {
    type Err = anyhow::Error;

    fn from_str(s: &str) -> Result<Self> {
        use rdmacam_protocol::device::faults::FaultKind;
        let mut parts = s.split(':');
        let after_frames = parts
            .next()
            .and_then(|n| n.parse().ok())
            .with_context(|| format!("{s:?}: expected N:KIND[:AMOUNT], N a frame count"))?;
        let name = parts.next().unwrap_or_default();
        let kind = FaultKind::ALL
            .into_iter()
            .find(|k| k.feature_name() == name || k.cli_name() == name)
            .with_context(|| {
                let names: Vec<_> = FaultKind::ALL.iter().map(|k| k.feature_name()).collect();
                format!("{s:?}: unknown fault {name:?}; one of {}", names.join(", "))
            })?;
        let amount = match parts.next() {
            Some(a) => a
                .parse()
                .ok()
                .filter(|a| *a >= 1)
                .with_context(|| format!("{s:?}: AMOUNT is a count, or ms for timed faults"))?,
            None if kind.timed() => 1000,
            None => 1,
        };
        if parts.next().is_some() {
            bail!("{s:?}: expected N:KIND[:AMOUNT]");
        }
        Ok(Injection {
            after_frames,
            kind,
            amount,
        })
    }
}

/// Ask the camera for fault `i` through its FaultInjection features.
fn inject(gvcp: &mut GvcpClient, i: &Injection) -> Result<()> {
    let amount = if i.kind.timed() {
        regs::FAULT_DURATION
    } else {
        regs::FAULT_COUNT
    };
    gvcp.write(regs::FAULT_SELECTOR, i.kind as u32)
        .and_then(|()| gvcp.write(amount, i.amount))
        .and_then(|()| gvcp.write(regs::FAULT_INJECT, 1))
        .map_err(|e| {
            anyhow::anyhow!(
                "the camera refused FaultInject {:?}: {e:?}",
                i.kind.feature_name()
            )
        })
}

/// The host's RoCEv2 transport.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum HostTransport {
    /// The soft RC responder on a UDP socket (no RDMA device needed).
    #[default]
    Soft,
    /// A real RC QP on an RDMA device (an RDMA NIC or Soft-RoCE), by name or by the device
    /// whose GID table has the host's RoCEv2 address. Needs the `verbs` cargo feature.
    Verbs {
        /// The RDMA device's name (`rxe0`, `mlx5_0`); None = the one that owns the address.
        device: Option<String>,
        /// Fault for tests: destroy the QP after this many frames (memory stays registered),
        /// wait for the camera to report the failure in OrspStatus, release control, and end
        /// with an error that says what the camera did.
        destroy_qp_after: Option<u64>,
    },
}

/// Bytes of a frame the soft host compares between two receive batches: ~20 µs of work, so
/// its ACKs never wait for a whole frame's check.
const CHECK_SLICE: usize = 64 * 1024;

/// Packets the soft host reads before it sends the ACKs due (a NAK goes at once). Under loss
/// the camera's window shrinks to a few dozen packets and asks for an ACK four times per
/// window: ACKs every 32 packets then came once per window, and sending stopped and waited for
/// each. Every 8: 1 % loss 5.0 -> 5.7-6.1 Gbit/s in `rdmacam demo` (16: no gain; 1, 2, 4: the
/// same as 8 within noise; docs/BENCHMARKS.md).
const ACK_BATCH: usize = 8;

fn pump(
    host: &mut OrspHost,
    roce: &mut RoceSocket,
    t0: StdInstant,
    rx: &mut [u8],
    tx: &mut Vec<u8>,
) -> Result<bool> {
    let now = || Instant::from_nanos(t0.elapsed().as_nanos() as u64);
    let mut busy = false;
    let mut received = 0;
    for i in 0..4096 {
        let Some((src, dst, ecn, ib)) = roce.recv_ecn(rx) else {
            break;
        };
        busy = true;
        received += ib.len();
        host.handle_ib(now(), src, dst, ecn, ib);
        // Answer as a NIC would, not only when the socket is drained: a NAK at once (the camera
        // goes back sooner, and what it sends again queues behind what is still to be read
        // instead of arriving after the drain), ACKs every ACK_BATCH packets (the camera's
        // window keeps moving, and its round-trip samples stay those of the path)
        if host.nak_pending() || (i + 1) % ACK_BATCH == 0 {
            while let Some(n) = host.poll_transmit(now(), tx) {
                roce.send(&tx[..n])?;
            }
        }
    }
    host.handle_timeout(now());
    while let Some(n) = host.poll_transmit(now(), tx) {
        roce.send(&tx[..n])?;
        busy = true;
    }
    // the ACKs are out: now the application's work (frame checks), as many bytes as arrived
    // (at least a slice), so checking keeps pace with receiving and buffers go back (QUEUE) as
    // fast as they fill; one slice per burst let a host short of CPU fall behind, hold every
    // buffer and make the camera drop frames
    let mut checked = 0;
    while checked < received.max(1) && host.verify() {
        busy = true;
        checked += CHECK_SLICE;
    }
    while let Some(n) = host.poll_transmit(now(), tx) {
        roce.send(&tx[..n])?;
    }
    Ok(busy)
}

/// Why frames stopped coming, as far as the camera says: it no longer answers GVCP (killed,
/// unplugged, rebooted), it ended the connection with an ORSP error (and after how many
/// resends), or neither (then the RoCEv2 path is the suspect).
fn stall_cause(
    gvcp: &mut GvcpClient,
    roce: std::net::SocketAddr,
    roce_local: std::net::IpAddr,
) -> String {
    let status = match gvcp.read(oregs::BASE + oregs::STATUS) {
        Ok(s) => s,
        Err(e) => {
            return format!(
                "the camera stopped answering GVCP ({e}): killed, unplugged or rebooted?"
            );
        }
    };
    let code = status >> 16;
    if status & 0xf == 15 {
        let resent = gvcp
            .read(oregs::BASE + oregs::COUNTERS + 12)
            .map_or(String::new(), |n| format!(" after {n} packets resent"));
        let why = match code as u16 {
            rdmacam_protocol::orsp::msg::event::RETRY_EXCEEDED => {
                format!("it gave up{resent} without progress (retries exhausted)")
            }
            rdmacam_protocol::orsp::msg::event::REMOTE_ERROR => {
                "this host answered it with a fatal NAK".to_owned()
            }
            rdmacam_protocol::orsp::msg::event::HOST_MESSAGE_REFUSED => {
                "it refused a message this host sent (longer than OrspDevRecvSize?)".to_owned()
            }
            _ => "see OrspStatus".to_owned(),
        };
        return format!("the camera ended the connection with {code:#06x}: {why}");
    }
    format!(
        "the camera still answers GVCP (OrspStatus {status:#x}), so the RoCEv2 path is the \
         suspect: is {roce} reachable from {roce_local}?"
    )
}

/// The host's IPv6 GID into OrspHostGid.
fn write_host_gid(gvcp: &mut GvcpClient, gid: std::net::Ipv6Addr) -> Result<()> {
    for (i, w) in gid.octets().chunks(4).enumerate() {
        gvcp.write(
            oregs::BASE + oregs::HOST_GID + 4 * i as u32,
            u32::from_be_bytes(w.try_into().expect("4")),
        )?;
    }
    Ok(())
}

/// ORSP §3: the host's QP parameters through GVCP registers, then CONNECT.
fn connect_registers(
    o: &HostOptions,
    gvcp: &mut GvcpClient,
    plane: &mut Plane,
    roce_local: std::net::IpAddr,
    pmtu: Pmtu,
) -> Result<()> {
    let (host_qpn, host_psn) = plane.qp_numbers();
    gvcp.write(regs::SCDA0, u32::from(o.local))?;
    if let std::net::IpAddr::V6(gid) = roce_local {
        write_host_gid(gvcp, gid)?;
    }
    gvcp.write(oregs::BASE + oregs::HOST_QPN, host_qpn)?;
    gvcp.write(oregs::BASE + oregs::HOST_SQ_PSN, host_psn)?;
    gvcp.write(oregs::BASE + oregs::PATH_MTU, pmtu as u32)?;
    // retry 6 (rxe takes 7 as "forever"), rnr_retry 7 and a 537 ms ACK timeout: the camera
    // keeps trying for 3.7 s without progress, so a host that stalls for a second does not lose
    // the stream (the camera's timer is RTT-based below this: loss recovery does not wait)
    gvcp.write(
        oregs::BASE + oregs::RETRY,
        6 | (7 << 4) | (u32::from(crate::host::HOST_ACK_TIMEOUT) << 8),
    )?;
    let dqpn = gvcp.read(oregs::BASE + oregs::DEVICE_QPN)?;
    let dpsn = gvcp.read(oregs::BASE + oregs::DEVICE_SQ_PSN)?;
    // the QP must be ready to receive before CONNECT: the HELLO follows at once
    plane.connect(dqpn, dpsn, pmtu)?;
    gvcp.write(oregs::BASE + oregs::CONTROL, oregs::CONTROL_CONNECT)
        .context("camera refused CONNECT")?;
    Ok(())
}

/// `--destroy-qp-after`: the QP goes, the registered memory and the GVCP session stay.
fn destroy_qp(plane: &mut Plane, frames: u64) {
    #[cfg(feature = "verbs")]
    if let Plane::Verbs(v) = plane {
        v.destroy_qp();
        eprintln!(
            "destroy-qp: destroyed the host QP after {frames} frames; waiting for the camera to give up"
        );
    }
    #[cfg(not(feature = "verbs"))]
    let _ = (plane, frames);
}

/// After the QP was destroyed: poll OrspStatus until the camera reports an error, then release
/// control and check the camera went idle. Always ends the session with an error that says what
/// the camera did.
fn camera_gives_up(gvcp: &mut GvcpClient, since: StdInstant) -> Result<()> {
    let status = gvcp.read(oregs::BASE + oregs::STATUS)?;
    let code = status >> 16;
    if status & 0xf != 15 {
        if since.elapsed() > Duration::from_secs(30) {
            bail!("the camera did not report an error within 30 s of the host QP's destruction");
        }
        return Ok(());
    }
    let what = match code {
        0x9001 => "retries exhausted",
        0x9002 => "remote access error or invalid request",
        _ => "other error",
    };
    eprintln!(
        "destroy-qp: the camera reported OrspStatus error {code:#06x} ({what}) {:.2} s after the QP was destroyed",
        since.elapsed().as_secs_f64()
    );
    gvcp.write(regs::CCP, 0)?;
    let state = gvcp.read(oregs::BASE + oregs::STATUS)? & 0xf;
    eprintln!(
        "destroy-qp: after control was released the camera's ORSP state is {state}{}",
        if state == 0 { " (idle)" } else { "" }
    );
    bail!("stream ended by --destroy-qp-after: the camera reported {code:#06x} ({what})")
}

/// An RDMA CM connection: the soft host's own IB CM, or librdmacm's.
enum CmConn {
    Soft(crate::cm::CmConnection),
    #[cfg(feature = "verbs")]
    Verbs(crate::verbs_cm::CmConnection),
}

/// The soft host and its UDP socket.
struct SoftPlane {
    host: OrspHost,
    roce: RoceSocket,
    t0: StdInstant,
    rx: Vec<u8>,
    tx: Vec<u8>,
    /// When a pump last moved a packet (busy-polling applies while the stream is flowing).
    active: StdInstant,
}

/// While packets are flowing (the last one moved less than
/// [`BUSY_POLL_WHILE`](rdmacam_io::poll::BUSY_POLL_WHILE) ago), the soft host polls its socket for up
/// to this long before it sleeps ([`busy_poll`](rdmacam_io::poll::busy_poll)). A sleeping receiver makes the sender pay a wake-up for nearly every packet
/// (the loopback path runs in the sender's system call): at 1 % and 5 % loss, where the camera's
/// window is small and the host often catches up, that cost the demo a fifth to a third of its
/// goodput (docs/BENCHMARKS.md).
const BUSY_POLL: Duration = Duration::from_micros(20);

/// The host's data plane: the soft host on a UDP socket, or a verbs QP.
enum Plane {
    Soft(Box<SoftPlane>),
    #[cfg(feature = "verbs")]
    Verbs(Box<crate::verbs_host::VerbsHost>),
}

impl Plane {
    /// The soft host's RoCE receive counters (zero on verbs).
    fn host_roce(&self) -> crate::host::HostRoceCounters {
        match self {
            Plane::Soft(p) => {
                let r = p.host.responder_counters().unwrap_or_default();
                crate::host::HostRoceCounters {
                    bad_icrc: p.roce.icrc_drops,
                    out_of_seq_request: r.out_of_seq_request,
                    duplicate_request: r.duplicate_request,
                    ecn_marked: r.ecn_marked,
                    cnps_sent: r.cnps_sent,
                }
            }
            #[cfg(feature = "verbs")]
            Plane::Verbs(_) => crate::host::HostRoceCounters::default(),
        }
    }

    fn qp_numbers(&self) -> (u32, u32) {
        match self {
            Plane::Soft(p) => p.host.qp_numbers(),
            #[cfg(feature = "verbs")]
            Plane::Verbs(v) => v.qp_numbers(),
        }
    }

    fn stats(&self) -> &crate::host::Stats {
        match self {
            Plane::Soft(p) => p.host.stats(),
            #[cfg(feature = "verbs")]
            Plane::Verbs(v) => v.stats(),
        }
    }

    fn set_images(&mut self, images: Option<Arc<rdmacam_io::images::ImageSet>>) {
        match self {
            Plane::Soft(p) => p.host.set_images(images),
            #[cfg(feature = "verbs")]
            Plane::Verbs(v) => v.set_images(images),
        }
    }

    fn connect(&mut self, dqpn: u32, dpsn: u32, pmtu: Pmtu) -> Result<()> {
        match self {
            Plane::Soft(p) => p.host.connect(dqpn, dpsn, pmtu),
            #[cfg(feature = "verbs")]
            Plane::Verbs(v) => v.connect(dqpn, dpsn, pmtu)?,
        }
        Ok(())
    }

    fn announce(&mut self) -> Result<()> {
        match self {
            Plane::Soft(p) => p.host.announce(),
            #[cfg(feature = "verbs")]
            Plane::Verbs(v) => v.announce()?,
        }
        Ok(())
    }

    /// Whether the camera has acknowledged every message this host sent (its buffers are
    /// announced and queued).
    fn sends_done(&self) -> bool {
        match self {
            Plane::Soft(p) => p.host.idle(),
            #[cfg(feature = "verbs")]
            Plane::Verbs(v) => v.sends_done(),
        }
    }

    /// Nothing to do: wait for the next datagram (soft, at most 1 ms, so timers and the
    /// heartbeat run), or until a solicited completion (verbs).
    fn wait(&mut self) -> Result<()> {
        match self {
            Plane::Soft(p) => {
                use std::os::fd::AsFd;
                if p.active.elapsed() < rdmacam_io::poll::BUSY_POLL_WHILE
                    && rdmacam_io::poll::busy_poll(p.roce.as_fd(), BUSY_POLL)?
                {
                    return Ok(());
                }
                rdmacam_io::poll::wait_readable([p.roce.as_fd()], Duration::from_millis(1))?;
            }
            #[cfg(feature = "verbs")]
            Plane::Verbs(v) => {
                v.wait(Duration::from_millis(5))?;
            }
        }
        Ok(())
    }

    /// Why the host's own queue pair failed, if it did.
    fn transport_error(&self) -> Option<String> {
        match self {
            Plane::Soft(p) => p.host.transport_error().map(|st| {
                format!(
                    "the host's queue pair failed ({st:?}): the camera stopped acknowledging \
                     the host's messages (QUEUE, ANNOUNCE) for 4 s"
                )
            }),
            #[cfg(feature = "verbs")]
            Plane::Verbs(_) => None,
        }
    }

    fn pump(&mut self) -> Result<bool> {
        match self {
            Plane::Soft(p) => {
                let busy = pump(&mut p.host, &mut p.roce, p.t0, &mut p.rx, &mut p.tx)?;
                if busy {
                    p.active = StdInstant::now();
                }
                Ok(busy)
            }
            #[cfg(feature = "verbs")]
            Plane::Verbs(v) => v.pump(),
        }
    }
}

/// A stream that failed after it started: why, and what had arrived by then (`--json` prints
/// both). Its message is the cause's.
#[derive(Debug)]
pub struct StreamFailed {
    /// The frames and bytes received before the failure.
    pub summary: Summary,
    /// What went wrong.
    pub cause: anyhow::Error,
}

impl std::fmt::Display for StreamFailed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:#}", self.cause)
    }
}

impl std::error::Error for StreamFailed {}

/// Connect to the camera over ORSP, stream, check every frame, and summarise. A stream that
/// fails after it started (the camera restarted, a connection error) is connected again, up to
/// `o.reconnects` times, each after the camera answers discovery again (within 30 s); the
/// summary adds up every connection's frames and counts the reconnections. When it still
/// fails, the error is a [`StreamFailed`] (downcast it) with everything that arrived.
pub fn run_host(o: &HostOptions, stop: &Arc<AtomicBool>) -> Result<Summary> {
    let started = StdInstant::now();
    let mut total: Option<Summary> = None;
    let mut reconnects = 0;
    loop {
        // what is left of the run: frames still expected, time still to stream
        let mut left = o.clone();
        if let (Some(n), Some(t)) = (o.frames, &total) {
            left.frames = Some(
                n.saturating_sub(t.frames_received + t.frames_dropped)
                    .max(1),
            );
        }
        if let Some(d) = o.duration {
            left.duration = Some(d.saturating_sub(started.elapsed()));
        }
        // faults still to inject, counted from this connection's first frame
        if let Some(t) = &total {
            let done = t.frames_received + t.frames_dropped;
            left.inject.retain(|i| i.after_frames > done);
            for i in &mut left.inject {
                i.after_frames -= done;
            }
        }
        match connect_and_stream(&left, stop) {
            Ok(s) => return Ok(add(total, s, reconnects, o.frames)),
            Err(e) => {
                let Some(f) = e.downcast_ref::<StreamFailed>() else {
                    return Err(e);
                };
                let sum = add(total, f.summary.clone(), reconnects, o.frames);
                if reconnects >= o.reconnects || stop.load(Ordering::SeqCst) {
                    let cause = anyhow::anyhow!("{e:#}");
                    return Err(anyhow::Error::new(StreamFailed {
                        summary: sum,
                        cause,
                    }));
                }
                reconnects += 1;
                eprintln!(
                    "rdmacam-host: {e:#}; connecting again ({reconnects} of {})",
                    o.reconnects
                );
                total = Some(sum);
                wait_for_camera(o, stop)?;
            }
        }
    }
}

/// One connection's summary added to the ones before.
fn add(total: Option<Summary>, s: Summary, reconnects: u32, frames: Option<u64>) -> Summary {
    let Some(t) = total else {
        return Summary { reconnects, ..s };
    };
    let seconds = t.seconds + s.seconds;
    let bytes = t.bytes_received + s.bytes_received;
    Summary {
        frames_expected: frames.unwrap_or(t.frames_expected + s.frames_expected),
        frames_received: t.frames_received + s.frames_received,
        frames_bad: t.frames_bad + s.frames_bad,
        frames_dropped: t.frames_dropped + s.frames_dropped,
        bytes_received: bytes,
        retransmitted_packets: t.retransmitted_packets + s.retransmitted_packets,
        gbit_per_s: bytes as f64 * 8.0 / seconds.max(1e-9) / 1e9,
        seconds,
        frames_with_chunks: t.frames_with_chunks + s.frames_with_chunks,
        reconnects,
        host_roce: t.host_roce.sum(s.host_roce),
    }
}

/// Wait until the camera answers discovery again (a restarting camera), at most 30 s.
fn wait_for_camera(o: &HostOptions, stop: &Arc<AtomicBool>) -> Result<()> {
    let camera = SocketAddrV4::new(o.camera, o.gvcp_port);
    let t0 = StdInstant::now();
    loop {
        if let Ok(mut g) = GvcpClient::new(o.local, camera)
            && g.command(0x0002, &[]).is_ok()
        {
            return Ok(());
        }
        if stop.load(Ordering::SeqCst) || t0.elapsed() > Duration::from_secs(30) {
            bail!("the camera at {camera} did not come back within 30 s");
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// One connection: discovery, control, session.
fn connect_and_stream(o: &HostOptions, stop: &Arc<AtomicBool>) -> Result<Summary> {
    let camera = SocketAddrV4::new(o.camera, o.gvcp_port);
    let mut gvcp = GvcpClient::new(o.local, camera).context("GVCP socket")?;
    gvcp.command(0x0002, &[])
        .with_context(|| format!("no camera answered discovery at {camera}"))?;
    gvcp.write(regs::CCP, 2)
        .context("could not take control of the camera (another host has it?)")?;
    let r = session(o, stop, &mut gvcp);
    if r.is_err() {
        // give control back at once, so a retry need not wait for the heartbeat to expire
        let _ = gvcp.write(regs::CCP, 0);
    }
    r
}

/// Everything after taking control.
fn session(o: &HostOptions, stop: &Arc<AtomicBool>, gvcp: &mut GvcpClient) -> Result<Summary> {
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
    let pattern = Pattern::from_u32(gvcp.read(regs::TEST_PATTERN)?).unwrap_or(Pattern::Gradient);
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
    let camera_pmtu = Pmtu::from_code(((caps >> 8) & 0xf) as u8).unwrap_or(Pmtu::Mtu1024);
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
    let roce_local = o.roce_local.unwrap_or(std::net::IpAddr::V4(o.local));
    let camera_roce = o.camera_roce.unwrap_or(std::net::IpAddr::V4(o.camera));
    let host_psn = (std::process::id().wrapping_mul(2_654_435_761)) & 0x00ff_ffff;
    let cfg = |host_qpn: u32, tx_port: u16| HostConfig {
        host_ip: roce_local,
        camera_ip: camera_roce,
        host_qpn,
        host_sq_psn: host_psn,
        buffers: o.buffers,
        buffer_size: payload,
        tx_port,
        camera_rx_port: o.camera_rx_port,
        seed: o.seed,
        pattern,
        requeue: true,
    };
    let (mut plane, pmtu) = match &o.transport {
        HostTransport::Soft => {
            let roce = RoceSocket::bind(roce_local, o.rx_port, 0, o.loss, o.seed ^ 0x5eed)?;
            let host_qpn = 0x000200 | (std::process::id() & 0xff);
            // its own bound port: the QP pair's entropy port is symmetric in the two QPNs, so
            // on one loopback address it is the camera's already
            let mut host = OrspHost::new(cfg(host_qpn, roce.tx_port()));
            // as a NIC would, ACK what arrives while frames are being checked
            host.defer_checks(CHECK_SLICE);
            let plane = Plane::Soft(Box::new(SoftPlane {
                host,
                roce,
                t0: StdInstant::now(),
                rx: vec![0u8; 65536],
                tx: Vec::new(),
                active: StdInstant::now(),
            }));
            (plane, camera_pmtu.min(Pmtu::Mtu4096))
        }
        #[cfg(feature = "verbs")]
        HostTransport::Verbs { device, .. } => {
            // the QPN is the device's; HostConfig's is unused by the verbs host
            let v = crate::verbs_host::VerbsHost::open(device.as_deref(), cfg(0, 0))?;
            let pmtu = camera_pmtu.min(v.max_pmtu());
            let (name, gid_index) = v.device();
            if o.progress {
                eprintln!(
                    "verbs: {name} GID index {gid_index} ({roce_local}), QPN {:#x}, path MTU {}",
                    v.qp_numbers().0,
                    pmtu.bytes()
                );
            }
            (Plane::Verbs(Box::new(v)), pmtu)
        }
        #[cfg(not(feature = "verbs"))]
        HostTransport::Verbs { .. } => {
            bail!("this build has no verbs transport: rebuild with `--features verbs`")
        }
    };
    plane.set_images(o.images.clone());
    if let Some(port) = o.cm_port
        && gvcp.read(oregs::BASE + oregs::CM_PORT)? == 0
    {
        gvcp.write(oregs::BASE + oregs::CM_PORT, u32::from(port))?;
    }
    // the camera admits CM requests from its controlling application only: GVCP is IPv4, so an
    // IPv6 host names its RoCE address in OrspHostGid first
    if let (Some(_), std::net::IpAddr::V6(gid)) = (o.cm_port, roce_local) {
        write_host_gid(gvcp, gid)?;
    }
    let cm_conn = match (o.cm_port, &mut plane) {
        (Some(port), Plane::Soft(p)) => {
            let SoftPlane { host, roce, .. } = &mut **p;
            let (host_qpn, host_psn) = host.qp_numbers();
            let c = crate::cm::connect(
                roce,
                roce_local,
                camera_roce,
                o.camera_rx_port,
                port,
                host_qpn,
                host_psn,
                pmtu,
            )?;
            host.connect_cm(c.device_qpn, c.device_sq_psn, c.host_sq_psn, pmtu, c.hello);
            Some(CmConn::Soft(c))
        }
        #[cfg(feature = "verbs")]
        (Some(port), Plane::Verbs(v)) => {
            let c = crate::verbs_cm::connect(v, camera_roce, port)?;
            // the REP carried the HELLO; sideway 0.4 hides private data, so read the same
            // fields from the registers
            let r = |gvcp: &mut GvcpClient, off: u32| gvcp.read(oregs::BASE + off);
            let hello = rdmacam_protocol::orsp::msg::Hello {
                orsp_version: r(gvcp, oregs::ORSP_VERSION)?,
                caps: r(gvcp, oregs::ORSP_CAPS)?,
                max_ctrl_msg: r(gvcp, oregs::MAX_CTRL_MSG)?,
                dev_recv_depth: r(gvcp, oregs::DEV_RECV_DEPTH)?,
                max_buffers: r(gvcp, oregs::MAX_BUFFERS)?,
                path_mtu: Pmtu::from_code(r(gvcp, oregs::PATH_MTU)? as u8).map_or(0, |p| p.bytes()),
            };
            if o.progress {
                eprintln!(
                    "rdma_connect: established, path MTU {} (OrspPathMtu)",
                    hello.path_mtu
                );
            }
            v.set_hello(hello);
            Some(CmConn::Verbs(c))
        }
        (None, _) => None,
    };
    if cm_conn.is_none() {
        connect_registers(o, gvcp, &mut plane, roce_local, pmtu)?;
    }
    let t0 = StdInstant::now();
    while plane.stats().hello.is_none() {
        // a lossy link may take a few resends of the HELLO
        if t0.elapsed() > Duration::from_secs(5) {
            bail!(
                "no HELLO from the camera within 5 s: is {} reachable from {roce_local}?",
                std::net::SocketAddr::new(camera_roce, o.camera_rx_port)
            );
        }
        if !plane.pump()? {
            std::thread::sleep(Duration::from_micros(100));
        }
    }
    plane.announce()?;
    // Start only once the camera holds the buffers: frames due before the ANNOUNCE arrives
    // (lost and sent again on a lossy link) find no buffer and are dropped, as a camera must.
    let t0 = StdInstant::now();
    while !plane.sends_done() {
        if t0.elapsed() > Duration::from_secs(5) {
            bail!(
                "the camera did not acknowledge the buffer ANNOUNCE within 5 s: is {} reachable \
                 from {roce_local}?",
                std::net::SocketAddr::new(camera_roce, o.camera_rx_port)
            );
        }
        if !plane.pump()? {
            plane.wait()?;
        }
    }
    match o.frames {
        Some(n) => {
            gvcp.write(regs::ACQUISITION_MODE, 2)?;
            gvcp.write(regs::FRAME_COUNT, n as u32)?;
        }
        None => gvcp.write(regs::ACQUISITION_MODE, 0)?,
    }
    gvcp.write(regs::ACQUISITION_COMMAND, 1)?;
    let start = StdInstant::now();
    let (mut last_beat, mut last_print) = (start, start);
    // a progress bar on a terminal (a spinner when the frame count is open), plain lines otherwise
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
    let mut stopping = false;
    // a stream that stops moving is an error, not a wait without end
    let (mut seen, mut moved) = (0, start);
    let destroy_after = match &o.transport {
        HostTransport::Verbs {
            destroy_qp_after, ..
        } => *destroy_qp_after,
        HostTransport::Soft => None,
    };
    let mut destroyed: Option<StdInstant> = None;
    // the stream itself: a failure here still reports what arrived (StreamFailed)
    let mut injections = o.inject.clone();
    injections.sort_by_key(|i| i.after_frames);
    let mut streamed = || -> Result<()> {
        while plane.stats().stream_end.is_none() {
            {
                let s = plane.stats();
                let arrived = s.good + s.bad + s.dropped;
                while injections
                    .first()
                    .is_some_and(|i| arrived >= i.after_frames)
                {
                    let i = injections.remove(0);
                    inject(gvcp, &i)?;
                }
            }
            if let Some(n) = destroy_after
                && destroyed.is_none()
                && plane.stats().good + plane.stats().bad >= n
            {
                destroy_qp(&mut plane, n);
                destroyed = Some(StdInstant::now());
            }
            if let Some(at) = destroyed {
                camera_gives_up(gvcp, at)?;
                std::thread::sleep(Duration::from_millis(20));
                continue;
            }
            let s = plane.stats();
            if s.good + s.bad + s.dropped != seen {
                (seen, moved) = (s.good + s.bad + s.dropped, StdInstant::now());
            } else if moved.elapsed() > Duration::from_secs(10) {
                let roce = std::net::SocketAddr::new(camera_roce, o.camera_rx_port);
                bail!(
                    "no frame from the camera for 10 s ({seen} so far): {}",
                    stall_cause(gvcp, roce, roce_local)
                );
            }
            if let Some(why) = plane.transport_error() {
                bail!("{why} ({seen} frames so far)");
            }
            if gvcp.control_lost() {
                bail!(
                    "the camera dropped this host's control ({seen} frames so far): it rebooted, \
                     or did not hear the heartbeat in time"
                );
            }
            if !stopping
                && (stop.load(Ordering::SeqCst) || o.duration.is_some_and(|d| start.elapsed() >= d))
            {
                gvcp.write(regs::ACQUISITION_COMMAND, 0)?;
                stopping = true;
            }
            if stopping && start.elapsed() > o.duration.unwrap_or_default() + Duration::from_secs(5)
            {
                bail!("camera did not end the stream after AcquisitionStop");
            }
            if !plane.pump()? {
                plane.wait()?;
            }
            if last_beat.elapsed() > Duration::from_millis(500) {
                gvcp.heartbeat();
                last_beat = StdInstant::now();
            }
            if o.progress && last_print.elapsed() > Duration::from_secs(1) {
                let s = plane.stats();
                let secs = start.elapsed().as_secs_f64();
                // the camera's retransmission counter; the read doubles as the heartbeat
                let retransmitted = gvcp.read(oregs::BASE + 0x6C).unwrap_or(0);
                last_beat = StdInstant::now();
                let stats = format!(
                    "({} bad, {} dropped) {:.1} frames/s {:.2} Gbit/s, {retransmitted} packets retransmitted",
                    s.bad,
                    s.dropped,
                    (s.good + s.bad) as f64 / secs,
                    s.bytes as f64 * 8.0 / secs / 1e9
                );
                match &bar {
                    Some(b) => {
                        b.set_position(s.good + s.bad);
                        b.set_message(stats);
                    }
                    None => eprintln!("{} frames {stats}", s.good + s.bad),
                }
                last_print = StdInstant::now();
            }
        }
        Ok(())
    };
    if let Err(cause) = streamed() {
        if let Some(b) = &bar {
            b.abandon();
        }
        let s = plane.stats();
        let seconds = start.elapsed().as_secs_f64();
        let summary = Summary {
            frames_expected: o.frames.unwrap_or(0),
            frames_received: s.good + s.bad,
            frames_bad: s.bad,
            frames_dropped: s.dropped,
            bytes_received: s.bytes,
            retransmitted_packets: u64::from(gvcp.read(oregs::BASE + 0x6C).unwrap_or(0)),
            gbit_per_s: s.bytes as f64 * 8.0 / seconds.max(1e-9) / 1e9,
            seconds,
            frames_with_chunks: s.chunk_frames,
            reconnects: 0,
            host_roce: plane.host_roce(),
        };
        return Err(anyhow::Error::new(StreamFailed { summary, cause }));
    }
    let seconds = start.elapsed().as_secs_f64();
    if let Some(b) = bar {
        b.set_position(plane.stats().good + plane.stats().bad);
        b.finish();
    }
    // settle the last ACKs, then read the camera's view
    for _ in 0..20 {
        plane.pump()?;
        std::thread::sleep(Duration::from_millis(1));
    }
    let retransmitted = gvcp.read(oregs::BASE + 0x6C).unwrap_or(0);
    match (cm_conn, &mut plane) {
        // rdma_disconnect(): DREQ, the camera answers DREP and goes idle
        (Some(CmConn::Soft(c)), Plane::Soft(p)) => {
            let _ =
                crate::cm::disconnect(&mut p.roce, roce_local, camera_roce, o.camera_rx_port, &c);
        }
        #[cfg(feature = "verbs")]
        (Some(CmConn::Verbs(c)), _) => {
            if let Err(e) = c.disconnect() {
                eprintln!("rdmacam-host: {e:#}");
            }
        }
        _ => {
            let _ = gvcp.write(oregs::BASE + oregs::CONTROL, oregs::CONTROL_DISCONNECT);
        }
    }
    let _ = gvcp.write(regs::CCP, 0);
    let s = plane.stats();
    if let Some(path) = &o.latency_log {
        let csv: String = s
            .trailers_seen
            .iter()
            .map(|(b, t)| format!("{b},{t}\n"))
            .collect();
        std::fs::write(path, format!("block_id,trailer_seen_ns\n{csv}"))
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    let (last_block, _, camera_dropped) = s.stream_end.unwrap_or_default();
    let received = s.good + s.bad;
    Ok(Summary {
        frames_expected: o.frames.unwrap_or(last_block),
        frames_received: received,
        frames_bad: s.bad,
        frames_dropped: u64::from(camera_dropped).max(s.dropped),
        bytes_received: s.bytes,
        retransmitted_packets: u64::from(retransmitted),
        gbit_per_s: s.bytes as f64 * 8.0 / seconds.max(1e-9) / 1e9,
        seconds,
        frames_with_chunks: s.chunk_frames,
        reconnects: 0,
        host_roce: plane.host_roce(),
    })
}

impl Summary {
    /// Whether every frame arrived good or was reported dropped by the camera.
    pub fn ok(&self) -> bool {
        self.frames_bad == 0 && self.frames_received + self.frames_dropped >= self.frames_expected
    }

    /// Print the human line and, with `json`, the JSON line after it (both stdout); the exit code
    /// the contract gives: 0 all good, 1 a frame bad or missing.
    pub fn report(&self, json: bool) -> std::process::ExitCode {
        println!("{}", self.line());
        if json {
            println!("{}", serde_json::to_string(self).expect("serialisable"));
        }
        if self.ok() {
            std::process::ExitCode::SUCCESS
        } else {
            std::process::ExitCode::from(1)
        }
    }

    /// One human line.
    pub fn line(&self) -> String {
        format!(
            "{} of {} frames received, {} bad, {} dropped by the camera, {:.2} Gbit/s over {:.2} s, {} packets retransmitted",
            self.frames_received,
            self.frames_expected,
            self.frames_bad,
            self.frames_dropped,
            self.gbit_per_s,
            self.seconds,
            self.retransmitted_packets
        ) + &{
            let h = self.host_roce;
            if h == crate::host::HostRoceCounters::default() {
                String::new()
            } else {
                format!(
                    "; host: {} bad ICRC, {} out of sequence, {} duplicates, {} ECN marked, {} CNPs sent",
                    h.bad_icrc,
                    h.out_of_seq_request,
                    h.duplicate_request,
                    h.ecn_marked,
                    h.cnps_sent
                )
            }
        }
    }
}
