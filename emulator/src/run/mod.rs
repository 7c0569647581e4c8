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

mod boot;
mod camera_loop;
mod gvsp_tx;
mod idle;
mod log;
mod roce_tx;
mod sockets;
pub mod summary;

use std::net::Ipv4Addr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use rdmacam_protocol::device::DeviceConfig;

use camera_loop::CameraLoop;
pub use idle::BUSY_POLL;
pub use summary::CameraSummary;

/// Everything `rdmacam run` needs.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// The camera as a host sees it: its address, serial, sensor, initial image settings,
    /// GigE Vision version, link speed. The run fills in what its sockets and clock decide
    /// (stream and message ports, time base, whether ORSP is offered); the MAC and the seed of
    /// the QP numbers follow the address ([`RunOptions::at`]).
    pub device: DeviceConfig,
    /// Seed of the noise pattern.
    pub seed: u64,
    /// Stop after this many seconds (tests); None = until Ctrl-C.
    pub duration: Option<Duration>,
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
    /// RoCEv2 address if not the camera's (IPv6 allowed).
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
    /// `--data-mover`: the queue pair leaves payload and ICRC to a data mover, here the
    /// software one, as an FPGA camera's fabric would take them (one datagram per packet).
    pub data_mover: bool,
    /// While RoCEv2 packets flow, poll the RoCEv2 socket this long for an ACK before sleeping
    /// (an RDMA NIC's requester never sleeps; a sleeping camera pays a wake-up per window,
    /// which on a lossy link, where the window is small, halves its goodput). Polls that catch
    /// nothing back off (`SpinBackoff`: on a busy machine the spinning would take the peer's
    /// core). `None` = [`BUSY_POLL`] for a camera alone in its process, 0 when several share
    /// it (they would spin against each other).
    pub busy_poll: Option<Duration>,
    /// Between RoCEv2 sends (after every second GSO run, and after each near a frame's
    /// TRAILER), give the CPU to a thread waiting on it while the camera has time to spare (its
    /// thread used at most a quarter of a CPU over the last 10 ms): a host on the same machine,
    /// woken onto the camera's CPU, keeps up with the runs instead of reading them after the
    /// burst (`CpuShare`, `roce_tx::offer_cpu_after`).
    pub share_cpu: bool,
    /// The camera thread's nice value: `None` = [`LOCAL_NICE`] for a camera on a loopback
    /// address (its host is on this machine) and the process's own otherwise. Only ever lowers
    /// the thread's priority (see [`apply_nice`]).
    pub nice: Option<i32>,
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

impl RunOptions {
    /// A camera at `ip` with serial `serial` and the emulator's defaults: 2048x2048 sensor,
    /// 1920x1080 Mono8 gradient at 30 frames/s, GEV 2.2, a 10 Gbit/s link; GVSP only, on the
    /// standard ports; no faults, no capture, no images.
    pub fn new(ip: Ipv4Addr, serial: &str) -> Self {
        RunOptions {
            device: DeviceConfig::new(ip, sockets::mac_for(ip), serial),
            seed: 1,
            duration: None,
            roce: false,
            roce_port: 4791,
            host_roce_port: 4791,
            gvcp_port: 3956,
            loss: 0.0,
            pcap: None,
            roce_ip: None,
            cm_port: 0,
            verbs: None,
            gso: true,
            gvsp_gso: false,
            data_mover: false,
            busy_poll: None,
            share_cpu: true,
            nice: None,
            latency_log: None,
            images: None,
            trigger_hz: None,
            faults: Vec::new(),
            index: 0,
        }
    }

    /// The same camera at `ip` with serial `serial` (another camera of a rig): its MAC and
    /// the seed of its QP numbers follow the new address; every other setting stays.
    pub fn at(&self, ip: Ipv4Addr, serial: &str) -> Self {
        let fresh = DeviceConfig::new(ip, sockets::mac_for(ip), serial);
        RunOptions {
            device: DeviceConfig {
                ip: fresh.ip,
                mac: fresh.mac,
                serial: fresh.serial,
                orsp_qpn: fresh.orsp_qpn,
                entropy: fresh.entropy,
                ..self.device.clone()
            },
            ..self.clone()
        }
    }

    /// The camera's address.
    pub fn ip(&self) -> Ipv4Addr {
        self.device.ip
    }

    /// Refuse settings the camera's own feature table would refuse from a host: an image
    /// larger than the sensor, a frame rate outside AcquisitionFrameRate's range.
    pub fn validate(&self) -> Result<()> {
        use rdmacam_protocol::device::features::{Kind, Limit, by_name};
        let d = &self.device;
        if d.link_speed_mbps == 0 {
            bail!("--link-mbps 0: a link speed is 1 Mbit/s or more");
        }
        if self.gvcp_port == 0 || self.roce_port == 0 || self.host_roce_port == 0 {
            bail!(
                "port 0 is not a port a host can reach: give --gvcp-port, --roce-port and --host-roce-port 1..65535"
            );
        }
        // both UDP on the camera's address: one socket each
        if self.roce && self.gvcp_port == self.roce_port {
            bail!(
                "--roce-port {} is the camera's GVCP port (--gvcp-port): GVCP and RoCEv2 each need \
                 their own UDP port",
                self.roce_port
            );
        }
        let fixed_min = |name: &str| match by_name(name).map(|f| f.kind) {
            Some(Kind::Int {
                min: Limit::Fixed(m),
                ..
            }) => m as u32,
            _ => 1,
        };
        if !(16..=MAX_SENSOR).contains(&d.sensor_width)
            || !(1..=MAX_SENSOR).contains(&d.sensor_height)
        {
            bail!(
                "the sensor must be 16..{MAX_SENSOR} pixels wide and 1..{MAX_SENSOR} lines high, \
                 not {}x{}",
                d.sensor_width,
                d.sensor_height
            );
        }
        for (what, v, min, max, sensor_flag) in [
            (
                "--width",
                d.width,
                fixed_min("Width"),
                d.sensor_width,
                "--sensor-width",
            ),
            (
                "--height",
                d.height,
                fixed_min("Height"),
                d.sensor_height,
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
        // Width's step follows the pixel format (WidthStep): 4:2:2 pairs pixels
        let step = d.pixel_format.step(rdmacam_protocol::gev::Axis::Width);
        if d.width % step != 0 {
            bail!(
                "--width {} does not fit {}: its width goes in steps of {step} pixels (two \
                 pixels share a U and a V), e.g. --width {}",
                d.width,
                d.pixel_format.name(),
                d.width - d.width % step
            );
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
            if !(min..=max).contains(&d.frame_rate) {
                bail!(
                    "--fps {} is out of range: {min}..{max} {unit}",
                    d.frame_rate
                );
            }
        }
        Ok(())
    }
}

/// The largest sensor the emulator offers, per side (a 16k x 16k Mono8 frame is 256 MiB).
pub const MAX_SENSOR: u32 = 16_384;

/// Run the camera until `stop` is set (or `duration` passes); what it did.
pub fn run(opts: RunOptions, stop: Arc<AtomicBool>) -> Result<CameraSummary> {
    apply_nice(&opts);
    set_timer_slack();
    let mut camera = CameraLoop::setup(opts)?;
    while !stop.load(Ordering::SeqCst) && !camera.expired() {
        camera.turn();
    }
    camera.finish()
}

/// How late a camera thread's timed waits may end: its pace sleeps between bursts for tens of
/// microseconds (~37 us at 10 Gbit/s), and with Linux's default 50 us every wake-up came late.
/// Sleeping through ACKs (nothing woke it early), the camera then sent two bursts a wake-up and
/// a frame's TRAILER reached the host behind twice the bytes: latency p99 at 100 fps 74-150 us
/// against 58-69 with the slack at 1 us (docs/benchmarks-history.md). Within 10 us a wake-up
/// has credit for one burst, not two.
pub const TIMER_SLACK: std::time::Duration = std::time::Duration::from_micros(10);

fn set_timer_slack() {
    if let Err(e) = rdmacam_io::sched::set_timer_slack(TIMER_SLACK) {
        tracing::warn!("cannot set the camera thread's timer slack: {e}");
    }
}

/// The nice value of a camera whose host is on the same machine (a loopback address): a real
/// camera's work never takes its host's CPU, and a virtual one at the host's priority does.
/// At its default 10 Gbit/s pace the camera wakes every few microseconds and keeps most of a
/// CPU; where the scheduler puts the host on that CPU (on a two-CPU machine, for spells), each
/// of those wake-ups took the CPU back from the host, a whole window (~0.5 MB) waited in the
/// host's socket, and a frame's TRAILER reached the host ~430 us late. At nice 10 the host
/// runs first: ~20 us (docs/BENCHMARKS.md). Nice 3, 5 and 7 did not do it.
pub const LOCAL_NICE: i32 = 10;

/// The nice value `opts` asks for: [`RunOptions::nice`], else [`LOCAL_NICE`] for a camera on
/// a loopback address (its GVCP or RoCEv2 address), else none.
pub fn wanted_nice(opts: &RunOptions) -> Option<i32> {
    let local = opts.ip().is_loopback() || opts.roce_ip.is_some_and(|a| a.is_loopback());
    opts.nice.or(local.then_some(LOCAL_NICE))
}

/// Run the calling (camera) thread at [`wanted_nice`], if that is lower priority than it has:
/// raising a priority needs privilege, and a camera never asks for it (a host that wants to
/// preempt others asks for itself: `rdmacam-host --high-priority`).
fn apply_nice(opts: &RunOptions) {
    let Some(nice) = wanted_nice(opts) else {
        return;
    };
    let now = rdmacam_io::sched::thread_nice();
    if nice <= now {
        return;
    }
    match rdmacam_io::sched::set_thread_nice(nice) {
        Ok(()) => tracing::debug!(nice, "camera thread priority lowered"),
        Err(e) => tracing::warn!("cannot run the camera thread at nice {nice}: {e}"),
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

/// A serial a host can show and open a camera by: 1 to 16 bytes (the bootstrap register's
/// size) of printable ASCII. Hosts name a camera by vendor and serial (aravis's
/// `rdmacam-SERIAL`), so an empty one gives every such camera the same name, and a control
/// character or non-ASCII byte reaches a host's logs and file names as it is.
pub fn check_serial(s: &str) -> Result<(), String> {
    if s.is_empty() {
        return Err("a serial is empty: hosts name a camera by it".into());
    }
    if let Some(c) = s.chars().find(|c| !(' '..='~').contains(c)) {
        return Err(format!(
            "{s:?} holds {c:?}: a serial is printable ASCII (space to '~')"
        ));
    }
    if s.len() > 16 {
        return Err(format!(
            "{s:?} is {} bytes, longer than a GigE Vision serial (16 bytes)",
            s.len()
        ));
    }
    Ok(())
}

/// Serve one camera per address in `ips`, each on its own thread with `opts` and its own
/// address, serial (the configured serial with `-1`, `-2`, ... appended when there are several), MAC
/// and ports. The first camera that fails to start or fails stops them all, and its error is
/// returned.
pub fn run_cameras(
    opts: RunOptions,
    ips: &[Ipv4Addr],
    stop: Arc<AtomicBool>,
) -> Result<Vec<CameraSummary>> {
    crate::fault::check_faults(&opts.faults, ips.len())?;
    if let [ip] = ips {
        let serial = opts.device.serial.clone();
        return Ok(vec![run(opts.at(*ip, &serial), stop)?]);
    }
    let longest = format!("{}-{}", opts.device.serial, ips.len());
    if longest.len() > 16 {
        bail!(
            "serial {longest:?} would be longer than a GigE Vision serial (16 bytes): a shorter --serial"
        );
    }
    let all = ips
        .iter()
        .enumerate()
        .map(|(k, ip)| RunOptions {
            index: k,
            ..opts.at(*ip, &format!("{}-{}", opts.device.serial, k + 1))
        })
        .collect();
    run_all(all, stop)
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
    crate::fault::check_faults(&all[0].faults, all.len())?;
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
    for (serial, ips) in shared_serials(&all) {
        // a host that opens a camera by serial or ID meets one of them; allowed, as cameras
        // with cloned firmware do it too, but said
        tracing::warn!(
            serial = %serial,
            cameras = ?ips,
            "cameras share a serial: a host opening a camera by serial or ID gets one of them"
        );
    }
    let ips: Vec<Ipv4Addr> = all.iter().map(RunOptions::ip).collect();
    let threads: Vec<_> = all
        .into_iter()
        .map(|o| {
            let stop = stop.clone();
            std::thread::Builder::new()
                .name(format!("camera {}", o.ip()))
                .spawn(move || {
                    let span = tracing::info_span!("camera", ip = %o.ip());
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

/// Serials more than one camera of `all` carries, each with the cameras' addresses.
fn shared_serials(all: &[RunOptions]) -> Vec<(String, Vec<Ipv4Addr>)> {
    let mut by_serial: Vec<(String, Vec<Ipv4Addr>)> = Vec::new();
    for o in all {
        let serial = o.device.serial.as_str();
        match by_serial.iter_mut().find(|(s, _)| s == serial) {
            Some((_, ips)) => ips.push(o.ip()),
            None => by_serial.push((serial.to_string(), vec![o.ip()])),
        }
    }
    by_serial.retain(|(_, ips)| ips.len() > 1);
    by_serial
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rig_whose_cameras_share_a_serial_is_told_which() {
        // two cameras named LEFT by a copied [[camera]], and a third whose default serial
        // (the base's with -3) another camera took by hand
        let rig = crate::rig::Rig::parse(
            "[[camera]]\nip = \"127.0.0.10\"\nserial = \"LEFT\"\n\
             [[camera]]\nip = \"127.0.0.11\"\nserial = \"LEFT\"\n\
             [[camera]]\nip = \"127.0.0.12\"\n\
             [[camera]]\nip = \"127.0.0.13\"\nserial = \"RIG-3\"\n\
             [[camera]]\nip = \"127.0.0.14\"\nserial = \"RIGHT\"\n",
        )
        .unwrap();
        let base = RunOptions::new(Ipv4Addr::LOCALHOST, "RIG");
        let all = rig.options(&base, std::path::Path::new(".")).unwrap();
        let ip = |s: &str| s.parse::<Ipv4Addr>().unwrap();
        assert_eq!(
            shared_serials(&all),
            vec![
                ("LEFT".to_string(), vec![ip("127.0.0.10"), ip("127.0.0.11")]),
                (
                    "RIG-3".to_string(),
                    vec![ip("127.0.0.12"), ip("127.0.0.13")]
                ),
            ]
        );
        assert_eq!(shared_serials(&all[2..4]).len(), 1);
        assert!(shared_serials(&all[3..]).is_empty());
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

    /// A camera whose host is on this machine (a loopback address) runs its thread at
    /// LOCAL_NICE; one on another address keeps its priority; `--nice` chooses; and a
    /// thread already at a lower priority is never raised.
    #[test]
    fn a_camera_on_loopback_gives_its_host_the_cpu_first() {
        let a = |s: &str| s.parse::<Ipv4Addr>().unwrap();
        let nice_after = |o: RunOptions, start: Option<i32>| {
            std::thread::spawn(move || {
                if let Some(n) = start {
                    rdmacam_io::sched::set_thread_nice(n).unwrap();
                }
                apply_nice(&o);
                rdmacam_io::sched::thread_nice()
            })
            .join()
            .unwrap()
        };
        let base = rdmacam_io::sched::thread_nice();
        let on = |ip| RunOptions::new(a(ip), "NICE");
        assert_eq!(nice_after(on("127.0.0.3"), None), LOCAL_NICE.max(base));
        assert_eq!(nice_after(on("10.0.0.2"), None), base);
        let roce_local = RunOptions {
            roce_ip: Some("::1".parse().unwrap()),
            ..on("10.0.0.2")
        };
        assert_eq!(wanted_nice(&roce_local), Some(LOCAL_NICE));
        let keep = RunOptions {
            nice: Some(0),
            ..on("127.0.0.3")
        };
        assert_eq!(nice_after(keep, None), base);
        let five = RunOptions {
            nice: Some(5),
            ..on("10.0.0.2")
        };
        assert_eq!(nice_after(five, None), 5.max(base));
        // never back up: a thread started nicer than asked stays so
        assert_eq!(nice_after(on("127.0.0.3"), Some(15)), 15.max(base));
        assert_eq!(
            base,
            rdmacam_io::sched::thread_nice(),
            "only the camera's thread"
        );
    }
}
