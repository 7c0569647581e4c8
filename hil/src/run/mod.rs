//! The reference host on sockets: GVCP register exchange (`docs/orsp-spec.md` §6), then the
//! [`OrspHost`] data plane on a UDP RoCEv2 socket. Used by `rdmacam-host` and `rdmacam demo`.

mod camera_regs;
mod plane;
mod session;

use std::net::{IpAddr, Ipv4Addr, SocketAddr, SocketAddrV4};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant as StdInstant};

use anyhow::{Context, Result, bail};
use rdmacam_protocol::device::regs;

use crate::gvcp::GvcpClient;
use crate::host::Summary;

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
    /// The soft host's polls for packets offer its CPU to a thread waiting there between
    /// looks (a camera on the same CPU that the host would hold off) while the host used at
    /// most a quarter of a CPU lately, pausing after a yield that kept it away 1 ms or more
    /// (`rdmacam_io::share::CpuShare`); `rdmacam-host --no-share-cpu` turns it off.
    pub share_cpu: bool,
    /// The soft host's RoCEv2 receive buffer, bytes (None: 16 MiB). Linux grants an
    /// unprivileged process at most twice `net.core.rmem_max`; the host measures how many
    /// packets what it got holds and tells the camera (OrspHostRxWindow).
    pub recv_buffer: Option<usize>,
    /// Break one rule on purpose (`--misbehave`), to see a camera's judge name it.
    pub misbehave: Option<crate::host::Misbehaviour>,
}

impl HostOptions {
    /// This host's RoCEv2 address and the camera's: `roce_local` and `camera_roce` when given,
    /// else the GVCP addresses.
    pub fn roce_addresses(&self) -> (IpAddr, IpAddr) {
        (
            self.roce_local.unwrap_or(IpAddr::V4(self.local)),
            self.camera_roce.unwrap_or(IpAddr::V4(self.camera)),
        )
    }

    /// The soft host at `local` streaming `frames` frames from the camera at `camera` on the
    /// standard ports (GVCP 3956, RoCEv2 4791 both ways) into 16 buffers, at the camera's frame
    /// rate, with the register exchange, checking the synthetic pattern (seed 1); nothing lost on
    /// purpose, no progress line, no chunks, no reconnection, no faults, no logs, polls that
    /// share the CPU. Callers change what they need with struct update syntax.
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
            share_cpu: true,
            recv_buffer: None,
            misbehave: None,
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
        // what FaultCount and FaultDuration take: more used to be refused by the camera
        // mid-stream, and the host connected again and went on without the fault
        use rdmacam_protocol::device::features::faults::{FAULT_COUNT_MAX, FAULT_DURATION_MAX_MS};
        let (max, what) = if kind.timed() {
            (FAULT_DURATION_MAX_MS, "ms")
        } else {
            (FAULT_COUNT_MAX, "packets, frames or requests")
        };
        let amount = match parts.next() {
            Some(a) => a
                .parse()
                .ok()
                .filter(|a| (1..=max).contains(a))
                .with_context(|| {
                    format!(
                        "{s:?}: AMOUNT of {} is 1 to {max} {what}",
                        kind.feature_name()
                    )
                })?,
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

/// The camera refused a fault this host asked for (`--inject-fault`): the run ends there.
#[derive(Debug)]
pub struct InjectionRefused(pub String);

impl std::fmt::Display for InjectionRefused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for InjectionRefused {}

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
    // the log's header now: a path it cannot be written to is said before the stream, not
    // after it in place of its summary; each connection appends its rows when it ends
    if let Some(path) = &o.latency_log {
        std::fs::write(path, "block_id,trailer_seen_ns,trailer_arrived_ns\n")
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    refuse_one_address_for_both(o)?;
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
                // a camera that refused a fault refuses it again after a reconnection: the
                // run ends (it used to go on, without the fault, and exit 0)
                let refused = f.cause.downcast_ref::<InjectionRefused>().is_some();
                if reconnects >= o.reconnects || stop.load(Ordering::SeqCst) || refused {
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

/// A soft host and its camera on one machine cannot both receive RoCEv2 on one address and
/// port, which is where the defaults put them (`--camera 127.0.0.1 --local 127.0.0.1`): say how
/// to part them, instead of "Address already in use" once the camera is configured.
fn refuse_one_address_for_both(o: &HostOptions) -> Result<()> {
    let (roce_local, camera_roce) = o.roce_addresses();
    if o.transport == HostTransport::Soft
        && roce_local == camera_roce
        && o.rx_port == o.camera_rx_port
    {
        let other = match roce_local {
            IpAddr::V4(a) if a.is_loopback() => {
                let [x, y, z, w] = a.octets();
                format!(
                    "another address for this host (--local {}), or ",
                    Ipv4Addr::new(x, y, z, w.wrapping_add(1).max(1))
                )
            }
            _ => String::new(),
        };
        bail!(
            "this host and the camera would both receive RoCEv2 on {}: give them {other}another \
             port (--rx-port 29792 here, and rdmacam run --host-roce-port 29792 for the camera)",
            SocketAddr::new(roce_local, o.rx_port)
        );
    }
    Ok(())
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
        cpu_seconds: t.cpu_seconds + s.cpu_seconds,
        frames_with_chunks: t.frames_with_chunks + s.frames_with_chunks,
        reconnects,
        host_roce: t.host_roce.sum(s.host_roce),
        // the newest connection's
        rx_buffer_bytes: s.rx_buffer_bytes,
        rx_buffer_packets: s.rx_buffer_packets,
        rx_window: s.rx_window,
        format: s.format.or(t.format),
    }
}

/// Wait until the camera answers discovery again (a restarting camera), at most 30 s.
fn wait_for_camera(o: &HostOptions, stop: &Arc<AtomicBool>) -> Result<()> {
    let camera = SocketAddrV4::new(o.camera, o.gvcp_port);
    let t0 = StdInstant::now();
    loop {
        if let Ok(mut g) = GvcpClient::new(o.local, camera)
            && g.discover().is_ok()
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
    let mut gvcp = GvcpClient::new(o.local, camera).map_err(|e| {
        let hint = if e.kind() == std::io::ErrorKind::AddrNotAvailable {
            format!(
                ": is {} an address of this host (or of this network namespace)?",
                o.local
            )
        } else {
            String::new()
        };
        anyhow::anyhow!(
            "cannot open a GVCP socket on {} (--local){hint}: {e}",
            o.local
        )
    })?;
    gvcp.discover()
        .with_context(|| format!("no camera answered discovery at {camera}"))?;
    gvcp.write(regs::CCP, regs::CCP_CONTROL)
        .context("could not take control of the camera (another host has it?)")?;
    let r = session::session(o, stop, &mut gvcp);
    if r.is_err() {
        // give control back at once, so a retry need not wait for the heartbeat to expire
        let _ = gvcp.write(regs::CCP, 0);
    }
    r
}

impl Summary {
    /// Whether every frame arrived good or was reported dropped by the camera.
    pub fn ok(&self) -> bool {
        self.frames_bad == 0 && self.frames_received + self.frames_dropped >= self.frames_expected
    }

    /// Print the human line (stdout), or with `json` the JSON line alone on stdout and the human
    /// line on stderr (so `| jq` reads it); the exit code the contract gives: 0 all good, 1 a
    /// frame bad or missing.
    pub fn report(&self, json: bool) -> std::process::ExitCode {
        if json {
            eprintln!("{}", self.line());
            println!("{}", serde_json::to_string(self).expect("serialisable"));
        } else {
            println!("{}", self.line());
        }
        if self.ok() {
            std::process::ExitCode::SUCCESS
        } else {
            std::process::ExitCode::from(1)
        }
    }

    /// One human line.
    pub fn line(&self) -> String {
        let of = self.format.as_ref().map_or_else(String::new, |f| {
            format!(" ({}x{} {})", f.width, f.height, f.pixel_format)
        });
        format!(
            "{} of {} frames received{of}, {} bad, {} dropped by the camera, {:.2} Gbit/s over {:.2} s, {} retransmitted",
            self.frames_received,
            self.frames_expected,
            self.frames_bad,
            self.frames_dropped,
            self.gbit_per_s,
            self.seconds,
            crate::plural(self.retransmitted_packets, "packet", "packets")
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
