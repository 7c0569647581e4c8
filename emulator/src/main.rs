//! `rdmacam`: a virtual RoCEv2 camera, a test sender for host teams, and a capture inspector.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::parser::ValueSource;
use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};

use rdmacam::inspect;
use rdmacam::run::{self, RunOptions};
use rdmacam_protocol::device::frame::Pattern;
use rdmacam_protocol::gev::PixelFormat;

/// rdmacam: the camera side of RDMA streaming, in software.
#[derive(Parser, Debug)]
#[command(name = "rdmacam", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Check every RoCE packet of a pcap/pcapng capture: one line per packet with its ICRC verdict.
    ///
    /// Exit status: 0 when every RoCE packet's ICRC is good, 1 when any is bad, 2 when the file,
    /// or a part of it before its end, cannot be read.
    Inspect {
        /// The capture (pcap or pcapng; Ethernet, Linux cooked v1/v2 or raw IP link types), or
        /// `-` for standard input (`tcpdump -w - ... | rdmacam inspect -`, checked once it ends).
        file: PathBuf,
        /// Check only packets to or from this UDP port. Default: 4791 and every port a packet
        /// with a valid RoCEv2 ICRC was sent to or from, so both directions of a conversation
        /// on any ports are followed.
        #[arg(long, value_parser = clap::value_parser!(u16).range(1..))]
        port: Option<u16>,
        /// Print JSON lines instead of text (fields in docs/inspect.md).
        #[arg(long)]
        json: bool,
    },
    /// Run a virtual camera: GigE Vision control on UDP 3956 and streaming, until Ctrl-C.
    Run(Box<RunArgs>),
    /// A virtual camera and the reference host on loopback: ORSP RDMA streaming, every frame
    /// checked, a summary at the end. No root, no RDMA hardware.
    Demo(DemoArgs),
    /// Test a host: run it once against a fresh camera per scenario (a clean stream, loss,
    /// reordering, bad ICRCs, a stall, dropped frames, an odd frame size, chunk data, a slow
    /// link, the camera rebooting), judge each, print a table. Exit 0 only if every scenario passes.
    ///
    /// The host command (after `--`) gets the camera's facts as placeholders in its arguments
    /// and in its environment: {camera} RDMACAM_CAMERA, {gvcp_port} RDMACAM_GVCP_PORT,
    /// {roce_port} RDMACAM_ROCE_PORT (the camera receives RoCEv2 there), {host_roce_port}
    /// RDMACAM_HOST_ROCE_PORT (it sends there), {frames} RDMACAM_FRAMES, {scenario}
    /// RDMACAM_SCENARIO. docs/host-integration.md.
    CheckHost(Box<CheckHostArgs>),
}

#[derive(clap::Args, Debug)]
struct CheckHostArgs {
    /// The camera, as `rdmacam run` takes it (ORSP over its own RoCEv2, the only transport
    /// whose packets the camera judges itself).
    #[command(flatten)]
    camera: RunArgs,
    /// Frames each scenario asks the host to take ({frames}).
    #[arg(long, default_value_t = 60, value_parser = clap::value_parser!(u64).range(1..))]
    frames: u64,
    /// The longest the host command may run in one scenario, in seconds; then it is killed
    /// and fails the scenario.
    #[arg(long, default_value_t = 60, value_parser = clap::value_parser!(u64).range(1..))]
    timeout: u64,
    /// Run only these scenarios (comma-separated names from the table).
    #[arg(long, value_delimiter = ',')]
    only: Vec<String>,
    /// The host under test and its arguments.
    #[arg(last = true, required = true, value_name = "HOST_COMMAND")]
    command: Vec<String>,
}

#[derive(clap::Args, Debug)]
struct DemoArgs {
    /// Image width.
    #[arg(long, default_value_t = 1920)]
    width: u32,
    /// Image height.
    #[arg(long, default_value_t = 1080)]
    height: u32,
    /// Pixel format: Mono8, Mono10, Mono12, Mono12p, Mono16, BayerGR8, BayerRG8, BayerGB8, BayerBG8, RGB8, BGR8 or YUV422_8.
    #[arg(long, default_value = "Mono8", value_parser = parse_pixel_format)]
    pixel_format: PixelFormat,
    /// Frames to stream (frames_expected in the summary).
    #[arg(long, default_value_t = 300)]
    frames: u64,
    /// Frames per second.
    #[arg(long, default_value_t = 100.0)]
    fps: f32,
    /// Probability (0..1) of dropping each RoCEv2 packet, both directions.
    #[arg(long, default_value_t = 0.0)]
    loss: f64,
    /// Seed for the loss (reproducible) and the noise pattern.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Host frame buffers (1 or more).
    #[arg(long, default_value_t = 16)]
    buffers: u32,
    /// Print the summary as one JSON line, alone on stdout (the human lines go to stderr): the
    /// host's fields, and the camera's under "camera".
    #[arg(long)]
    json: bool,
    /// Inject a fault (repeatable): [camN:]KIND[:KEY=VALUE,...]. KIND is loss, reorder,
    /// duplicate, corrupt, ecn (stream packets) or drop-frame (frames), with p=P (a
    /// probability) or every=N; resend-unavailable (every resend request, or p=/every=); stall,
    /// silence or reboot with for=T, at=T and optionally every=T (T as 250ms or 2s, from the
    /// camera's start). camN: only the Nth camera. Hosts inject the same faults at a moment
    /// they choose through the FaultInjection features. See docs/virtual-camera.md.
    #[arg(long = "fault", value_name = "SPEC")]
    faults: Vec<rdmacam::fault::FaultSpec>,
    /// Times the host connects again after a failed stream (a reboot fault needs one).
    #[arg(long, default_value_t = 3)]
    reconnect: u32,
}

/// How frames leave the camera.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum Transport {
    /// Classic GigE Vision streaming (GVSP over UDP) only.
    Gvsp,
    /// ORSP: RDMA WRITEs into host buffers, RoCEv2 from a plain UDP socket (no privilege, no
    /// RDMA NIC); GVSP stays available for hosts that do not connect ORSP.
    Udp,
    /// ORSP on an RC queue pair of an RDMA device (an RDMA NIC or Soft-RoCE; see --device):
    /// the NIC segments, acknowledges and retransmits. Needs a build with `--features verbs`.
    Verbs,
}

#[derive(clap::Args, Debug)]
struct RunArgs {
    /// Streaming transport.
    #[arg(long, value_enum, default_value_t = Transport::Gvsp)]
    transport: Transport,
    /// Local IPv4 address to answer on (127.0.0.1, or an address inside a network namespace);
    /// a comma-separated list serves one camera on each.
    #[arg(long, default_value = "127.0.0.1", value_delimiter = ',')]
    ip: Vec<std::net::Ipv4Addr>,
    /// Serve this many cameras in one process, on consecutive addresses from --ip (1..=256).
    /// Each has its own serial (--serial with -1, -2, ... appended), MAC, ports and state, and
    /// is discovered, controlled and streamed on its own.
    #[arg(long)]
    cameras: Option<u32>,
    /// A rig of cameras described in a TOML file (docs/virtual-camera.md): each [[camera]]
    /// has its ip and may set serial, width, height, sensor_width, sensor_height,
    /// pixel_format, pattern, fps, images, raw_format, trigger_hz; the rest comes from the
    /// other options. Takes the place of --ip and --cameras (given with either, refused).
    #[arg(long, value_name = "FILE", conflicts_with_all = ["cameras", "ip"])]
    rig: Option<std::path::PathBuf>,
    /// Initial image width in pixels (a host may change it up to the sensor width); default
    /// 1920, or the images' width with --images.
    #[arg(long)]
    width: Option<u32>,
    /// Initial image height in lines (a host may change it up to the sensor height); default
    /// 1080, or the images' height.
    #[arg(long)]
    height: Option<u32>,
    /// Sensor width in pixels: WidthMax, the largest Width a host may set (16..16384); default
    /// 2048, or the images' width.
    #[arg(long)]
    sensor_width: Option<u32>,
    /// Sensor height in lines: HeightMax (1..16384); default 2048, or the images' height.
    #[arg(long)]
    sensor_height: Option<u32>,
    /// Replay these images instead of a test pattern: a file, a directory (its PNG, TIFF,
    /// PGM/PPM, BMP and .raw files in name order) or a glob (`dir/*.png`), looped. Each frame
    /// is the Width x Height region at OffsetX/OffsetY of an image, converted to PixelFormat.
    /// The camera reads TestPattern Off (its sensor); a host may pick a pattern and go back.
    #[arg(long, value_name = "PATH")]
    images: Option<String>,
    /// Size and pixel format of `.raw` files among --images: WIDTHxHEIGHT:FORMAT
    /// (Mono8, Mono16, RGB8 or a Bayer 8-bit). Only with --images.
    #[arg(long, value_name = "WxH:FORMAT", requires = "images")]
    raw_format: Option<rdmacam_io::images::RawFormat>,
    /// Pixel format: Mono8, Mono10, Mono12, Mono12p, Mono16, BayerGR8, BayerRG8, BayerGB8, BayerBG8, RGB8, BGR8 or YUV422_8.
    #[arg(long, default_value = "Mono8", value_parser = parse_pixel_format)]
    pixel_format: PixelFormat,
    /// Test pattern: Gradient, MovingBar, Checkerboard or Noise. Not with --images: the camera
    /// then shows the images (TestPattern Off), and a host may pick a pattern through
    /// TestPattern.
    #[arg(long, default_value = "Gradient", value_parser = parse_pattern, conflicts_with = "images")]
    pattern: Pattern,
    /// Frames per second (a host can change it through AcquisitionFrameRate).
    #[arg(long, default_value_t = 30.0)]
    fps: f32,
    /// Serial number, also the GenICam DeviceID: at most 16 bytes (the bootstrap register's
    /// size; with several cameras, 16 with the -N each gets appended).
    #[arg(long, default_value = "RDMACAM0001", value_parser = parse_serial)]
    serial: String,
    /// Drive the camera's input Line0 with this many pulses per second (a square wave): a
    /// host that sets TriggerSource Line0 (and TriggerMode On) gets one frame per rising edge,
    /// or per edge its TriggerActivation names. Without it Line0 stays low.
    #[arg(long)]
    trigger_hz: Option<f64>,
    /// GigE Vision version to report, MAJOR.MINOR.
    #[arg(long, default_value = "2.2", value_parser = parse_version)]
    gev_version: (u16, u16),
    /// Seed of the Noise pattern.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Stop after this many seconds (more than 0, at most a year; default: run until Ctrl-C).
    #[arg(long, value_parser = rdmacam_io::clock::parse_seconds)]
    duration: Option<std::time::Duration>,
    /// Link speed in Mbit/s (GevLinkSpeed, 1 or more): no packet leaves faster than this, GVSP or ORSP
    /// (ORSP's RoCEv2 also slows down on CNPs, with DCQCN). Default 1000 with --transport gvsp
    /// (a GigE camera, a pace a host on the same 2-core machine keeps up with; at 10000 aravis
    /// on a loaded machine loses packets faster than it can ask for them), 10000 with udp and
    /// verbs (a 10G RoCE NIC).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    link_mbps: Option<u32>,
    /// Rate of the first frame of each acquisition, Mbit/s (0 = link speed): hosts such as
    /// aravis size their socket buffer only when that frame arrives.
    #[arg(long, default_value_t = 1000)]
    first_frame_mbps: u32,
    /// Send one datagram per RoCEv2 packet (copied, sendmmsg) instead of UDP segmentation
    /// offload with gather I/O (--transport udp); for comparison, or a kernel without UDP GSO,
    /// which is detected anyway.
    #[arg(long)]
    no_gso: bool,
    /// Send a frame's GVSP payload packets in UDP GSO runs. Only for a path where a NIC
    /// segments in hardware: on loopback or a veth pair a host receiving on a packet socket
    /// (aravis as root, arv-viewer) sees each run as one datagram and gets garbled frames.
    #[arg(long)]
    gvsp_gso: bool,
    /// Build ORSP's RoCEv2 packets as an FPGA camera does (--transport udp): the queue pair
    /// emits transmit descriptors and never reads a payload byte; a data mover in software
    /// reads frame memory and computes the ICRC (docs/firmware.md, "The data-mover contract").
    /// One datagram per packet.
    #[arg(long)]
    data_mover: bool,
    /// While RoCEv2 packets flow, poll for ACKs this many microseconds before sleeping
    /// (--transport udp; 0 = sleep at once). Default: 50 for one camera, 0 with several
    /// (--cameras, a list of --ip, --rig), which would spin against each other.
    #[arg(long, value_name = "US")]
    busy_poll_us: Option<u32>,
    /// Never give the CPU away between RoCEv2 sends. By default a camera with time to spare
    /// (its thread used at most a quarter of a CPU over the last 10 ms) lets a thread waiting
    /// on its CPU run after every second GSO run and after each of a frame's last two and its
    /// TRAILER: a host on the same machine, woken onto the camera's CPU, then keeps up with the
    /// runs and reads the TRAILER as it arrives (100 fps over loopback: frame latency p99 ~250
    /// -> ~35 us).
    #[arg(long)]
    no_share_cpu: bool,
    /// The camera threads' nice value (0-19; only ever lowers their priority). Default: 10 for
    /// a camera on a loopback address, whose host is on this machine, so that the host's
    /// receive thread runs before the camera's next send (at the default 10 Gbit/s pace the
    /// camera keeps most of a CPU; sharing one with the host at equal priority held a whole
    /// window in the host's socket: frame latency ~430 us against ~20). Else the process's own.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(i32).range(0..=19))]
    nice: Option<i32>,
    /// Write each TRAILER's block id and first send time (CLOCK_MONOTONIC ns) to FILE as CSV;
    /// with rdmacam-host --latency-log, scripts/latency.py gives p50/p99 latency.
    #[arg(long, value_name = "FILE")]
    latency_log: Option<std::path::PathBuf>,
    /// RDMA device for --transport verbs (default: the one whose GID table has the RoCEv2
    /// address, --roce-ip or --ip).
    #[arg(long)]
    device: Option<String>,
    /// UDP port the camera receives RoCEv2 on (--transport udp).
    #[arg(long, default_value_t = 4791, value_parser = clap::value_parser!(u16).range(1..))]
    roce_port: u16,
    /// UDP port hosts receive RoCEv2 on.
    #[arg(long, default_value_t = 4791, value_parser = clap::value_parser!(u16).range(1..))]
    host_roce_port: u16,
    /// GVCP port.
    #[arg(long, default_value_t = 3956, value_parser = clap::value_parser!(u16).range(1..))]
    gvcp_port: u16,
    /// Write every RoCEv2 packet sent and received to this pcapng file (received ones with their
    /// IP/UDP header reconstructed, marked in a packet comment).
    #[arg(long)]
    pcap: Option<std::path::PathBuf>,
    /// RoCEv2 address if not --ip: an IPv6 address makes ORSP run over IPv6 (the host writes its
    /// IPv6 GID to OrspHostGid). GVCP stays IPv4, as GigE Vision is.
    #[arg(long)]
    roce_ip: Option<std::net::IpAddr>,
    /// Answer RDMA CM connection requests (rdma_connect) for this TCP-port-space port from the
    /// start, without a host writing OrspCmPort first (0 = only after that write).
    #[arg(long, default_value_t = 0)]
    cm_port: u16,
    /// Inject a fault (repeatable): [camN:]KIND[:KEY=VALUE,...]. KIND is loss, reorder,
    /// duplicate, corrupt, ecn (stream packets) or drop-frame (frames), with p=P (a
    /// probability) or every=N; resend-unavailable (every resend request, or p=/every=); stall,
    /// silence or reboot with for=T, at=T and optionally every=T (T as 250ms or 2s, from the
    /// camera's start). camN: only the Nth camera. Hosts inject the same faults at a moment
    /// they choose through the FaultInjection features. See docs/virtual-camera.md.
    #[arg(long = "fault", value_name = "SPEC")]
    faults: Vec<rdmacam::fault::FaultSpec>,
    /// When the cameras stop, print their summary as one JSON line, alone on stdout (the text
    /// lines go to stderr): {"cameras": [...]}, fields in docs/virtual-camera.md.
    #[arg(long)]
    json: bool,
}

fn parse_pixel_format(s: &str) -> Result<PixelFormat, String> {
    PixelFormat::from_name(s)
        .ok_or_else(|| format!("unknown pixel format {s:?}: use Mono8, Mono10, Mono12, Mono12p, Mono16, BayerGR8, BayerRG8, BayerGB8, BayerBG8, RGB8, BGR8 or YUV422_8"))
}

fn parse_pattern(s: &str) -> Result<Pattern, String> {
    Pattern::from_name(s).ok_or_else(|| {
        format!("unknown pattern {s:?}: use Gradient, MovingBar, Checkerboard or Noise")
    })
}

fn parse_serial(s: &str) -> Result<String, String> {
    run::check_serial(s)?;
    Ok(s.to_string())
}

fn parse_version(s: &str) -> Result<(u16, u16), String> {
    let (a, b) = s.split_once('.').ok_or("expected MAJOR.MINOR, e.g. 2.2")?;
    Ok((
        a.parse()
            .map_err(|_| format!("MAJOR {a:?} is not a number from 0 to 65535"))?,
        b.parse()
            .map_err(|_| format!("MINOR {b:?} is not a number from 0 to 65535"))?,
    ))
}

/// The stop flag of a camera that serves from now on: Ctrl-C sets it from here.
fn serving(s: &Ctrl) -> std::sync::Arc<std::sync::atomic::AtomicBool> {
    s.serving.store(true, std::sync::atomic::Ordering::SeqCst);
    s.stop.clone()
}

/// What Ctrl-C does: exit while loading, set `stop` once serving.
struct Ctrl {
    serving: std::sync::Arc<std::sync::atomic::AtomicBool>,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

fn on_ctrl_c() -> Result<Ctrl, ctrlc::Error> {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    let c = Ctrl {
        serving: Arc::new(AtomicBool::new(false)),
        stop: Arc::new(AtomicBool::new(false)),
    };
    let (serving, stop) = (c.serving.clone(), c.stop.clone());
    ctrlc::set_handler(move || {
        if serving.load(Ordering::SeqCst) {
            stop.store(true, Ordering::SeqCst);
        } else {
            eprintln!("rdmacam run: interrupted before the camera started");
            std::process::exit(130);
        }
    })?;
    Ok(c)
}

fn demo_cmd(a: DemoArgs) -> ExitCode {
    if !(0.0..1.0).contains(&a.loss) {
        eprintln!(
            "rdmacam demo: --loss {} is not a chance the demo takes: at least 0 and below 1 \
             (0.2 loses a packet in five; 1 would lose every packet, and nothing would arrive)",
            a.loss
        );
        return ExitCode::from(2);
    }
    init_logging("warn");
    let o = rdmacam::demo::DemoOptions {
        width: a.width,
        height: a.height,
        pixel_format: a.pixel_format,
        frames: a.frames,
        fps: a.fps,
        loss: a.loss,
        seed: a.seed,
        buffers: a.buffers,
        progress: true,
        faults: a.faults,
        reconnects: a.reconnect,
    };
    match rdmacam::demo::demo(&o) {
        Ok(s) => {
            // with --json, stdout holds the JSON alone (`| jq`), the human lines go to stderr
            if a.json {
                eprintln!("{}\n{}", s.host.line(), s.camera.text());
                println!("{}", serde_json::to_string(&s).expect("serialisable"));
            } else {
                println!("{}\n{}", s.host.line(), s.camera.text());
            }
            if s.camera.frames_behind == 0 {
                // a reader takes the Gbit/s for the ceiling: it is the frame rate's
                eprintln!(
                    "rdmacam demo: paced at --fps {}: the rate above is what {} frames of \
                     {}x{} {} a second take, not the most loopback carries (--fps 10000 \
                     streams flat out)",
                    a.fps,
                    a.fps,
                    a.width,
                    a.height,
                    a.pixel_format.name()
                );
            }
            if s.host.ok() {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            }
        }
        Err(e) => {
            eprintln!("rdmacam demo: {e:#}");
            ExitCode::from(2)
        }
    }
}

/// Log to stderr at `level` (or `RUST_LOG`), in colour only on a terminal and without
/// `NO_COLOR` (no-color.org): a log file or a pipe gets plain text.
fn check_host_cmd(a: CheckHostArgs, given: impl Fn(&str) -> bool) -> ExitCode {
    use rdmacam::check_host::{CheckOptions, table};
    let refused = [
        (
            "transport",
            "check-host streams ORSP over the camera's own RoCEv2 (udp), whose packets it judges itself",
        ),
        (
            "duration",
            "each scenario lasts as long as the host command runs",
        ),
        ("rig", "check-host runs one camera"),
        ("cameras", "check-host runs one camera"),
    ];
    for (id, why) in refused {
        if given(id) {
            eprintln!("rdmacam check-host: --{id} does not apply: {why}");
            return ExitCode::from(2);
        }
    }
    if a.camera.ip.len() > 1 {
        eprintln!("rdmacam check-host: one --ip: check-host runs one camera");
        return ExitCode::from(2);
    }
    init_logging("warn");
    let mut camera = a.camera;
    camera.transport = Transport::Udp;
    let images = match load_images(&camera) {
        Ok(i) => i,
        Err(e) => {
            eprintln!("rdmacam check-host: {e:#}");
            return ExitCode::from(2);
        }
    };
    let json = camera.json;
    let o = CheckOptions {
        camera: run_options(&camera, images),
        frames: a.frames,
        timeout: std::time::Duration::from_secs(a.timeout),
        only: a.only,
        command: a.command,
    };
    let scenarios = match o.scenarios() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("rdmacam check-host: {e:#}");
            return ExitCode::from(2);
        }
    };
    let mut outcomes = Vec::new();
    for s in &scenarios {
        match o.run_one(s) {
            Ok(r) => outcomes.push(r),
            Err(e) => {
                eprintln!("rdmacam check-host: {e:#}");
                return ExitCode::from(2);
            }
        }
    }
    let pass = outcomes.iter().all(|r| r.pass);
    if json {
        eprint!("{}", table(&outcomes));
        println!(
            "{}",
            serde_json::json!({ "pass": pass, "scenarios": outcomes })
        );
    } else {
        print!("{}", table(&outcomes));
    }
    if pass {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

fn init_logging(level: &str) {
    use std::io::IsTerminal;
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(level));
    let colour = std::io::stderr().is_terminal()
        && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty());
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(colour)
        .init();
}

/// Options that do nothing with the transport `a` asks for, refused rather than ignored (a
/// `--pcap` beside the default `--transport gvsp` used to write no file and say nothing).
/// `given(id)`: whether option `id` (its field name) was on the command line.
fn transport_options(a: &RunArgs, given: impl Fn(&str) -> bool) -> Result<(), String> {
    // RoCEv2 from the camera's own UDP socket
    let udp = [
        ("--pcap", a.pcap.is_some()),
        ("--no-gso", a.no_gso),
        ("--data-mover", a.data_mover),
        ("--busy-poll-us", a.busy_poll_us.is_some()),
        ("--no-share-cpu", a.no_share_cpu),
        ("--roce-port", given("roce_port")),
    ];
    // ORSP on either RoCEv2 transport
    let orsp = [
        ("--host-roce-port", given("host_roce_port")),
        ("--roce-ip", a.roce_ip.is_some()),
        ("--cm-port", given("cm_port")),
        ("--latency-log", a.latency_log.is_some()),
    ];
    let verbs = [("--device", a.device.is_some())];
    fn named(set: &[(&'static str, bool)]) -> Vec<&'static str> {
        set.iter().filter(|(_, on)| *on).map(|(n, _)| *n).collect()
    }
    let (wrong, why) = match a.transport {
        Transport::Gvsp => (
            [named(&udp), named(&orsp), named(&verbs)].concat(),
            "with --transport gvsp (the default) nothing streams over RoCEv2: ORSP needs \
             --transport udp or verbs",
        ),
        Transport::Udp => (
            named(&verbs),
            "--device names the RDMA device of --transport verbs; --transport udp sends from a \
             UDP socket",
        ),
        Transport::Verbs => (
            named(&udp),
            "with --transport verbs the RDMA device builds and sends the RoCEv2 packets: these \
             are options of --transport udp",
        ),
    };
    if wrong.is_empty() {
        Ok(())
    } else {
        Err(format!("{} would do nothing: {why}", wrong.join(", ")))
    }
}

/// The images `--images` names, loaded once for every camera that replays them.
fn load_images(
    a: &RunArgs,
) -> anyhow::Result<Option<std::sync::Arc<rdmacam_io::images::ImageSet>>> {
    a.images
        .as_ref()
        .map(|path| rdmacam_io::images::ImageSet::load(path, a.raw_format).map(std::sync::Arc::new))
        .transpose()
}

/// The camera `rdmacam run` (and each scenario of `check-host`) runs, from its options.
fn run_options(
    a: &RunArgs,
    images: Option<std::sync::Arc<rdmacam_io::images::ImageSet>>,
) -> RunOptions {
    let image_size = images.as_ref().map(|i| (i.width(), i.height()));
    let mut opts = RunOptions::new(a.ip[0], &a.serial);
    let d = &mut opts.device;
    d.sensor_width = a.sensor_width.or(image_size.map(|s| s.0)).unwrap_or(2048);
    d.sensor_height = a.sensor_height.or(image_size.map(|s| s.1)).unwrap_or(2048);
    d.width = a.width.or(image_size.map(|s| s.0)).unwrap_or(1920);
    d.height = a.height.or(image_size.map(|s| s.1)).unwrap_or(1080);
    d.pixel_format = a.pixel_format;
    d.pattern = a.pattern;
    d.frame_rate = a.fps;
    d.gev_version = a.gev_version;
    d.link_speed_mbps = a.link_mbps.unwrap_or(match a.transport {
        Transport::Gvsp => 1000,
        Transport::Udp | Transport::Verbs => 10_000,
    });
    d.first_frame_mbps = a.first_frame_mbps;
    RunOptions {
        images,
        seed: a.seed,
        duration: a.duration,
        trigger_hz: a.trigger_hz,
        roce: a.transport == Transport::Udp,
        roce_port: a.roce_port,
        host_roce_port: a.host_roce_port,
        gvcp_port: a.gvcp_port,
        pcap: a.pcap.clone(),
        roce_ip: a.roce_ip,
        cm_port: a.cm_port,
        verbs: (a.transport == Transport::Verbs).then(|| a.device.clone()),
        gso: !a.no_gso,
        gvsp_gso: a.gvsp_gso,
        data_mover: a.data_mover,
        busy_poll: a
            .busy_poll_us
            .map(|us| std::time::Duration::from_micros(u64::from(us))),
        share_cpu: !a.no_share_cpu,
        nice: a.nice,
        latency_log: a.latency_log.clone(),
        faults: a.faults.clone(),
        ..opts
    }
}

fn main() -> ExitCode {
    let matches = Cli::command().get_matches();
    let cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    let run_matches = matches.subcommand_matches("run");
    match cli.command {
        Command::Inspect { file, port, json } => inspect::run(&file, port, json),
        Command::Demo(a) => demo_cmd(a),
        Command::CheckHost(a) => {
            let m = matches.subcommand_matches("check-host");
            let given =
                |id: &str| m.and_then(|m| m.value_source(id)) == Some(ValueSource::CommandLine);
            check_host_cmd(*a, given)
        }
        Command::Run(a) => {
            let given = |id: &str| {
                run_matches.and_then(|m| m.value_source(id)) == Some(ValueSource::CommandLine)
            };
            if let Err(e) = transport_options(&a, given) {
                eprintln!("rdmacam run: {e}");
                return ExitCode::from(2);
            }
            init_logging("info");
            // Ctrl-C (and SIGTERM) work from the first moment: while the camera loads (a rig
            // file on a FIFO, a folder of images) they end the process at once; once it serves,
            // they stop it cleanly, with its summary. The handler used to come after loading
            // only to set a flag that nothing read while a FIFO blocked.
            let started = match on_ctrl_c() {
                Ok(s) => s,
                Err(e) => {
                    eprintln!("rdmacam run: cannot install the Ctrl-C handler: {e}");
                    return ExitCode::from(2);
                }
            };
            let images = match load_images(&a) {
                Ok(i) => i,
                Err(e) => {
                    eprintln!("rdmacam run: {e:#}");
                    return ExitCode::from(2);
                }
            };
            let opts = run_options(&a, images);
            let r = match &a.rig {
                Some(file) => rdmacam::rig::Rig::load(file)
                    .and_then(|rig| {
                        rig.options(&opts, file.parent().unwrap_or(std::path::Path::new(".")))
                    })
                    .and_then(|all| run::run_all(all, serving(&started))),
                None => run::camera_addresses(&a.ip, a.cameras)
                    .and_then(|ips| run::run_cameras(opts, &ips, serving(&started))),
            };
            match r {
                Ok(cameras) => {
                    // with --json, stdout holds the JSON alone, the human lines go to stderr
                    for c in &cameras {
                        if a.json {
                            eprintln!("{}", c.text());
                        } else {
                            println!("{}", c.text());
                        }
                    }
                    if a.json {
                        println!("{}", serde_json::json!({ "cameras": cameras }));
                    }
                    let errors: Vec<&String> = cameras.iter().flat_map(|c| &c.errors).collect();
                    for e in &errors {
                        eprintln!("rdmacam run: {e}");
                    }
                    if errors.is_empty() {
                        ExitCode::SUCCESS
                    } else {
                        ExitCode::from(1)
                    }
                }
                Err(e) => {
                    eprintln!("rdmacam run: {e:#}");
                    ExitCode::from(2)
                }
            }
        }
    }
}
