//! `rdmacam-host`: the reference ORSP host: soft mode (RoCEv2 on a UDP socket, no RDMA NIC) or
//! verbs mode (an RC QP on an RDMA device; cargo feature `verbs`).

use std::net::Ipv4Addr;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use clap::{CommandFactory, FromArgMatches, Parser};
use rdmacam_hil::run::{HostOptions, HostTransport, run_host};

/// Connect to an rdmacam camera over ORSP, receive and check frames, print statistics.
#[derive(Parser, Debug)]
#[command(version, about)]
struct Args {
    /// The camera's IP.
    #[arg(long, value_parser = unicast)]
    camera: Ipv4Addr,
    /// This host's IP (must be on the camera's network).
    #[arg(long, value_parser = unicast)]
    local: Ipv4Addr,
    /// The camera's GVCP port.
    #[arg(long, default_value_t = 3956, value_parser = clap::value_parser!(u16).range(1..))]
    gvcp_port: u16,
    /// UDP port this host receives RoCEv2 on.
    #[arg(long, default_value_t = 4791, value_parser = clap::value_parser!(u16).range(1..))]
    rx_port: u16,
    /// This host's RoCEv2 address if not --local (an IPv6 address is written to OrspHostGid).
    #[arg(long)]
    roce_local: Option<std::net::IpAddr>,
    /// The camera's RoCEv2 address if not --camera.
    #[arg(long)]
    camera_roce: Option<std::net::IpAddr>,
    /// UDP port the camera receives RoCEv2 on.
    #[arg(long, default_value_t = 4791, value_parser = clap::value_parser!(u16).range(1..))]
    camera_rx_port: u16,
    /// Frame buffers to announce (1 or more: the camera writes frames only into buffers, and
    /// drops every frame that finds none).
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u32).range(1..))]
    buffers: u32,
    /// Frames to receive (MultiFrame, 1 or more); default: until --duration or Ctrl-C.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=u64::from(u32::MAX)))]
    frames: Option<u64>,
    /// Seconds to stream (more than 0, at most a year): without --frames, 10 by default; with
    /// --frames, the longest the run may take (frames not received by then count as missing).
    #[arg(long, value_parser = rdmacam_io::clock::parse_seconds)]
    duration: Option<Duration>,
    /// Frame rate to ask the camera for.
    #[arg(long)]
    fps: Option<f32>,
    /// Seed the camera's Noise pattern uses.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Print a one-line JSON summary as the last line on stdout.
    #[arg(long)]
    json: bool,
    /// How to connect: `registers` (ORSP's GVCP register exchange) or `cm` (the RDMA CM:
    /// REQ/REP/RTU to --cm-port, as rdma_connect() does; DREQ at the end).
    #[arg(long, value_enum, default_value_t = Connect::Registers)]
    connect: Connect,
    /// The camera's RDMA CM port (--connect cm); written to OrspCmPort if the camera has none.
    #[arg(long, default_value_t = 7471, value_parser = clap::value_parser!(u16).range(1..))]
    cm_port: u16,
    /// Where RoCEv2 arrives: `soft` (this program's RC responder on a UDP socket, no RDMA
    /// device) or `verbs` (an RC QP on an RDMA NIC or Soft-RoCE; needs a build with
    /// `--features verbs`).
    #[arg(long, value_enum, default_value_t = Transport::Soft)]
    transport: Transport,
    /// RDMA device for --transport verbs (default: the one whose GID table has this host's
    /// RoCEv2 address).
    #[arg(long)]
    device: Option<String>,
    /// Test fault (--transport verbs): destroy the host's QP after N frames, keep the memory
    /// and the GVCP session, wait until the camera reports the failure in OrspStatus, release
    /// control, print what the camera did, and exit 2.
    #[arg(long, value_name = "N")]
    destroy_qp_after: Option<u64>,
    /// Write each TRAILER's block id and arrival time (CLOCK_MONOTONIC ns) to FILE as CSV; with
    /// the camera's --latency-log, scripts/latency.py gives the latency from the frame's last
    /// byte leaving the camera to the host seeing its TRAILER.
    #[arg(long, value_name = "FILE")]
    latency_log: Option<std::path::PathBuf>,
    /// Switch the camera's chunk data on (ChunkModeActive, every chunk enabled): each frame
    /// then carries its chunks after the image, and the host parses and checks them.
    #[arg(long)]
    chunks: bool,
    /// When the stream fails after it started (the camera restarted, the connection broke),
    /// wait for the camera to answer discovery again (up to 30 s) and connect again, at most
    /// this many times; the summary adds every connection's frames (0: end with the error).
    #[arg(long, default_value_t = 3, value_name = "N")]
    reconnect: u32,
    /// Break one rule on purpose, to test a camera's judgement of hosts (`rdmacam check-host`):
    /// bad-icrc (every RoCEv2 packet's ICRC spoilt), skip-ack (every ACK names the PSN after
    /// the right one), no-heartbeat (no GVCP heartbeat once streaming), no-requeue (buffers
    /// never given back).
    #[arg(long, value_name = "KIND")]
    misbehave: Option<rdmacam_hil::host::Misbehaviour>,
    /// Check every frame against these images (the camera replays them with `rdmacam run
    /// --images`, same files): a file, a directory or a glob (`dir/*.png`).
    #[arg(long, value_name = "PATH")]
    images: Option<String>,
    /// Size and pixel format of `.raw` files among --images: WIDTHxHEIGHT:FORMAT.
    #[arg(long, value_name = "WxH:FORMAT")]
    raw_format: Option<rdmacam_io::images::RawFormat>,
    /// Ask the camera for a fault once N frames arrived, through its FaultInjection features
    /// (repeatable): N:KIND[:AMOUNT], KIND a FaultSelector entry (PacketLoss, PacketReorder,
    /// PacketDuplicate, FrameDrop, PacketCorrupt, StreamStall, ControlSilence, Reboot,
    /// ResendUnavailable, EcnMark), AMOUNT the packets/frames/requests it hits (1 to
    /// 1000000, default 1) or the ms a StreamStall, ControlSilence or Reboot lasts (1 to
    /// 600000, default 1000). A camera that refuses the fault ends the run (no reconnection).
    #[arg(long = "inject-fault", value_name = "N:KIND[:AMOUNT]")]
    inject: Vec<rdmacam_hil::run::Injection>,
    /// Receive at nice -10, as aravis's `arv-camera-test --high-priority` runs its stream
    /// thread: woken by a packet on a CPU something busy holds, the host preempts it instead
    /// of waiting out its time slice (a camera on the same machine that keeps its CPU,
    /// `rdmacam run --no-share-cpu`, at 100 fps over loopback: TRAILER latency p99 ~250 us ->
    /// ~70 us). Needs CAP_SYS_NICE or an RLIMIT_NICE that allows it; otherwise a warning, and
    /// the default priority.
    #[arg(long)]
    high_priority: bool,
    /// Poll for packets without offering the CPU to others between looks. By default, while
    /// it polls (for a frame's TRAILER, or after a loss) a host with time to spare (at most a
    /// quarter of a CPU over the last 10 ms) gives its CPU to a thread waiting there
    /// (`sched_yield`): a camera on the same machine that the scheduler put on the host's CPU
    /// would otherwise wait out the poll before it sends what the host waits for (100 fps
    /// over loopback: TRAILER latency p99 ~20 us against ~35-50). After a yield that kept it
    /// away 1 ms or more (a busy loop's time slice) it stops yielding for a while.
    #[arg(long)]
    no_share_cpu: bool,
    /// The RoCEv2 receive socket's buffer, bytes (soft transport; default 16 MiB). Linux
    /// grants an unprivileged host at most twice net.core.rmem_max (Debian: 425,984 bytes, 50
    /// packets of 4 KiB); a root host gets what it asks. The host counts how many packets its
    /// buffer holds and, when that is fewer than the camera's window, asks the camera to keep no
    /// more than that unacknowledged (OrspHostRxWindow), so nothing overflows and is resent.
    /// A small value emulates a host short of buffer.
    #[arg(long, value_parser = clap::value_parser!(u64).range(4096..=1 << 30))]
    recv_buffer: Option<u64>,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum Transport {
    Soft,
    Verbs,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum Connect {
    Registers,
    Cm,
}

/// One machine's IPv4 address: not 0.0.0.0 (which Linux takes for this machine), a broadcast
/// address (255.255.255.255 or a subnet's of this machine) or a multicast address, which name
/// no one camera or host.
fn unicast(s: &str) -> Result<Ipv4Addr, String> {
    let a: Ipv4Addr = s.parse().map_err(|e| format!("{s:?}: {e}"))?;
    if a.is_unspecified() || a.is_broadcast() || a.is_multicast() {
        return Err(format!("{a} names no one machine: give a unicast address"));
    }
    if let Ok(Some(dev)) = rdmacam_io::link::subnet_broadcast_of(a) {
        return Err(format!(
            "{a} is the broadcast address of {dev}'s subnet: it names no one machine; give a \
             unicast address"
        ));
    }
    Ok(a)
}

/// Options that would do nothing with the transport and connection `a` asks for: refused,
/// not ignored. `given(id)`: whether option `id` (its field name) was on the command line.
fn unused_options(a: &Args, given: impl Fn(&str) -> bool) -> Result<(), String> {
    let verbs = [
        ("--destroy-qp-after", a.destroy_qp_after.is_some()),
        ("--device", a.device.is_some()),
    ];
    let soft = [
        ("--recv-buffer", a.recv_buffer.is_some()),
        ("--no-share-cpu", a.no_share_cpu),
    ];
    let on = |set: &[(&'static str, bool)]| -> Vec<&'static str> {
        set.iter().filter(|(_, on)| *on).map(|(n, _)| *n).collect()
    };
    let (wrong, needs) = match a.transport {
        Transport::Soft => (on(&verbs), "--transport verbs"),
        Transport::Verbs => (on(&soft), "--transport soft (the default)"),
    };
    if !wrong.is_empty() {
        return Err(format!("{}: only with {needs}", wrong.join(", ")));
    }
    if a.connect != Connect::Cm && given("cm_port") {
        return Err("--cm-port: only with --connect cm".to_owned());
    }
    Ok(())
}

fn main() -> ExitCode {
    let matches = Args::command().get_matches();
    let a = Args::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    let given = |id: &str| matches.value_source(id) == Some(clap::parser::ValueSource::CommandLine);
    if let Err(e) = unused_options(&a, given) {
        eprintln!("rdmacam-host: {e}");
        return ExitCode::from(2);
    }
    if a.transport == Transport::Verbs && !cfg!(feature = "verbs") {
        // said before the camera is asked anything, not after discovery and control
        eprintln!(
            "rdmacam-host: this build has no verbs transport: rebuild with `--features verbs`"
        );
        return ExitCode::from(2);
    }
    let stop = Arc::new(AtomicBool::new(false));
    {
        let stop = stop.clone();
        let _ = ctrlc::set_handler(move || stop.store(true, std::sync::atomic::Ordering::SeqCst));
    }
    let o = HostOptions {
        camera: a.camera,
        gvcp_port: a.gvcp_port,
        local: a.local,
        rx_port: a.rx_port,
        roce_local: a.roce_local,
        camera_roce: a.camera_roce,
        camera_rx_port: a.camera_rx_port,
        buffers: a.buffers,
        frames: a.frames,
        duration: a
            .duration
            .or(a.frames.is_none().then(|| Duration::from_secs(10))),
        loss: 0.0,
        seed: a.seed,
        fps: a.fps,
        progress: true,
        cm_port: (a.connect == Connect::Cm).then_some(a.cm_port),
        transport: match a.transport {
            Transport::Soft => HostTransport::Soft,
            Transport::Verbs => HostTransport::Verbs {
                device: a.device,
                destroy_qp_after: a.destroy_qp_after,
            },
        },
        latency_log: a.latency_log,
        chunks: a.chunks,
        reconnects: a.reconnect,
        misbehave: a.misbehave,
        inject: a.inject,
        share_cpu: !a.no_share_cpu,
        recv_buffer: a.recv_buffer.map(|b| b as usize),
        images: match &a.images {
            Some(path) => match rdmacam_io::images::ImageSet::load(path, a.raw_format) {
                Ok(set) => Some(Arc::new(set)),
                Err(e) => {
                    eprintln!("rdmacam-host: {e:#}");
                    return ExitCode::from(2);
                }
            },
            None => None,
        },
    };
    // the receive loop runs on this thread (nice is per thread on Linux)
    if a.high_priority
        && let Err(e) = rdmacam_io::sched::set_thread_nice(-10)
    {
        eprintln!(
            "rdmacam-host: --high-priority: cannot run at nice -10 ({e}); running at the \
             default priority (needs CAP_SYS_NICE or an RLIMIT_NICE that allows it)"
        );
    }
    match run_host(&o, &stop) {
        Ok(s) => s.report(a.json),
        Err(e) => {
            eprintln!("rdmacam-host: {e:#}");
            if a.json {
                // a machine reading the JSON line learns of the failure too, and, when the
                // stream had started, what arrived before it
                let mut v = match e.downcast_ref::<rdmacam_hil::run::StreamFailed>() {
                    Some(f) => serde_json::to_value(&f.summary).expect("serialisable"),
                    None => serde_json::json!({}),
                };
                v["ok"] = false.into();
                v["error"] = format!("{e:#}").into();
                println!("{v}");
            }
            ExitCode::from(2)
        }
    }
}
