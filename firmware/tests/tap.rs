//! The firmware's Linux TAP build as a camera on a network no one else shares: a network
//! namespace holding one TAP interface (MTU 9000, 192.0.2.1/24 on the host side), the firmware
//! attached to it at 192.0.2.2. Then, against it:
//!
//! 1. aravis (`arv-tool-0.8`, Debian's GigE Vision host) discovers it by broadcast;
//! 2. the reference host (soft mode, in the namespace) streams 100 frames over ORSP, every frame
//!    checked byte for byte against the synthetic pattern;
//! 3. tshark captures that stream on the TAP interface and every RoCE packet's ICRC checks
//!    (`rdmacam inspect`'s analysis): smoltcp writes IPv4 identification 0 with DF, which is what
//!    the camera's ICRC assumed; packets the host sent too;
//! 4. the reference host connects through the RDMA CM instead (REQ/REP/RTU, DREQ at the end),
//!    and a REQ to a port nobody listens on comes back as REJ reason 8;
//! 5. the XML the firmware serves loads in EMVA's reference GenApi (PyPI `genicam`, the venv
//!    scripts/setup.sh makes) and every feature reads and writes through GVCP
//!    (`tests/genicam/genapi_check.py`), as for the emulator;
//! 6. software trigger, missed triggers, chunk data (read with the reference GenApi's chunk
//!    adapter), events and action commands work on the firmware as on the emulator
//!    (`tests/genicam/features_check.py`).
//!
//! Needs root (TAP, namespaces), iproute2, tshark and aravis-tools. Without them the test prints
//! SKIPPED, unless RDMACAM_REQUIRE_ARAVIS=1 (CI), which makes that a failure.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

const NETNS: &str = "rdmacam-fw-test";

fn have(tool: &str, arg: &str) -> bool {
    Command::new(tool)
        .arg(arg)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok()
}

fn missing() -> Option<String> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Some("not root (TAP interfaces and network namespaces need it)".into());
    }
    for (tool, arg) in [
        ("ip", "-V"),
        ("tshark", "--version"),
        ("arv-tool-0.8", "--help"),
    ] {
        if !have(tool, arg) {
            return Some(format!("{tool} is not installed (scripts/setup.sh)"));
        }
    }
    None
}

fn sh(cmd: &str) {
    let ok = Command::new("sh").arg("-c").arg(cmd).status().unwrap();
    assert!(ok.success(), "{cmd} failed");
}

/// The namespace and its TAP interface, removed on drop (with whatever runs in it).
struct Net;

impl Net {
    fn up() -> Net {
        let _ = Command::new("ip")
            .args(["netns", "del", NETNS])
            .stderr(Stdio::null())
            .status();
        sh(&format!(
            "ip netns add {NETNS} && ip -n {NETNS} link set lo up && \
             ip netns exec {NETNS} ip tuntap add name rdmacam0 mode tap && \
             ip -n {NETNS} link set rdmacam0 mtu 9000 up && \
             ip -n {NETNS} addr add 192.0.2.1/24 dev rdmacam0"
        ));
        Net
    }
}

impl Drop for Net {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["netns", "pids", NETNS])
            .output()
            .map(|o| {
                for pid in String::from_utf8_lossy(&o.stdout).split_whitespace() {
                    let _ = Command::new("kill").arg(pid).status();
                }
            });
        let _ = Command::new("ip").args(["netns", "del", NETNS]).status();
    }
}

struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Run `f` on a thread that has joined the namespace (setns is per thread for networks).
fn in_netns<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    std::thread::spawn(move || {
        let ns = std::fs::File::open(format!("/run/netns/{NETNS}")).expect("netns file");
        // SAFETY: a valid namespace fd; only this thread moves.
        let rc = unsafe { libc::setns(std::os::fd::AsRawFd::as_raw_fd(&ns), libc::CLONE_NEWNET) };
        assert_eq!(rc, 0, "setns: {}", std::io::Error::last_os_error());
        f()
    })
    .join()
    .expect("thread in the namespace")
}

fn host_options(frames: u64, cm_port: Option<u16>) -> rdmacam_hil::run::HostOptions {
    rdmacam_hil::run::HostOptions {
        buffers: 8,
        fps: Some(100.0),
        cm_port,
        ..rdmacam_hil::run::HostOptions::new(
            "192.0.2.2".parse().unwrap(),
            "192.0.2.1".parse().unwrap(),
            frames,
        )
    }
}

/// The reference host, in the namespace, streaming `frames` (through the CM on `cm_port`).
fn stream(frames: u64, cm_port: Option<u16>) -> anyhow::Result<rdmacam_hil::host::Summary> {
    in_netns(move || {
        rdmacam_hil::run::run_host(
            &host_options(frames, cm_port),
            &Arc::new(AtomicBool::new(false)),
        )
    })
}

#[test]
fn the_tap_firmware_is_discovered_streams_verified_frames_and_every_icrc_checks() {
    if let Some(why) = missing() {
        assert!(
            std::env::var("RDMACAM_REQUIRE_ARAVIS").is_err(),
            "RDMACAM_REQUIRE_ARAVIS=1 but {why}"
        );
        eprintln!("SKIPPED: {why}");
        return;
    }
    let _net = Net::up();
    let log = std::env::temp_dir().join(format!("rdmacam-fw-{}.log", std::process::id()));
    let _fw = Killed(
        Command::new("ip")
            .args([
                "netns",
                "exec",
                NETNS,
                env!("CARGO_BIN_EXE_rdmacam-firmware"),
            ])
            .args([
                "--tap",
                "rdmacam0",
                "--ip",
                "192.0.2.2/24",
                "--width",
                "640",
            ])
            .args(["--height", "480", "--cm-port", "7471"])
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("firmware"),
    );

    // 1. aravis discovers it (broadcast on the TAP interface); retried while it boots
    let started = Instant::now();
    let listed = loop {
        let out = Command::new("ip")
            .args(["netns", "exec", NETNS, "arv-tool-0.8"])
            .output()
            .expect("arv-tool-0.8");
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        if text.contains("RDMACAMFW01") || started.elapsed() > Duration::from_secs(10) {
            break text;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    assert!(
        listed.contains("RDMACAMFW01") && listed.contains("192.0.2.2"),
        "aravis did not discover the firmware: {listed:?}\nfirmware log:\n{}",
        std::fs::read_to_string(&log).unwrap_or_default()
    );

    // 2 and 3. 100 frames into the reference host while tshark captures the TAP interface
    let pcap = std::env::temp_dir().join(format!("rdmacam-fw-{}.pcapng", std::process::id()));
    let tshark = Killed(
        Command::new("ip")
            .args(["netns", "exec", NETNS, "tshark", "-q", "-i", "rdmacam0"])
            .args(["-f", "udp port 4791", "-w"])
            .arg(&pcap)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("tshark"),
    );
    // tshark is capturing once its file exists
    let t = Instant::now();
    while !pcap.exists() && t.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(100));
    }
    std::thread::sleep(Duration::from_millis(500));
    let summary = stream(100, None).expect("the reference host streams from the firmware");
    std::thread::sleep(Duration::from_millis(500));
    // SIGINT lets tshark finish its file
    let _ = Command::new("kill")
        .args(["-INT", &tshark.0.id().to_string()])
        .status();
    std::thread::sleep(Duration::from_millis(500));
    drop(tshark);
    assert_eq!(summary.frames_received, 100, "{summary:?}");
    assert_eq!(summary.frames_bad, 0, "{summary:?}");
    assert_eq!(summary.frames_dropped, 0, "{summary:?}");

    let packets = rdmacam::inspect::packets(Path::new(&pcap), 4791).expect("capture");
    let from_camera = packets
        .iter()
        .filter(|p| p.src.to_string() == "192.0.2.2")
        .count();
    let bad: Vec<_> = packets.iter().filter(|p| p.icrc != "ok").collect();
    let _ = std::fs::remove_file(&pcap);
    assert!(
        from_camera > 100 * 75,
        "the capture holds the stream: {from_camera} packets from the camera"
    );
    assert!(bad.is_empty(), "packets with a bad ICRC: {bad:?}");

    // 4. the firmware answers the RDMA CM too: REQ/REP/RTU instead of the register exchange,
    // 50 frames, DREQ/DREP; and a REQ to a port nobody listens on is rejected
    let summary = in_netns(|| {
        rdmacam_hil::run::run_host(
            &host_options(50, Some(7471)),
            &Arc::new(AtomicBool::new(false)),
        )
    })
    .expect("the reference host connects to the firmware through the RDMA CM");
    assert_eq!(
        (summary.frames_received, summary.frames_bad),
        (50, 0),
        "{summary:?}"
    );
    let refused = in_netns(|| {
        rdmacam_hil::run::run_host(
            &host_options(5, Some(7472)),
            &Arc::new(AtomicBool::new(false)),
        )
    })
    .expect_err("a wrong CM port is rejected");
    assert!(
        format!("{refused:#}").contains("reason 8"),
        "the REJ reason reaches the host: {refused:#}"
    );

    // 4b. the firmware injects FrameDrop and ResendUnavailable only: a host asking it for
    // PacketLoss hears NOT_IMPLEMENTED and the run ends there, with what arrived (it used to
    // connect again, stream on without the fault and exit 0)
    let refused = in_netns(|| {
        let o = rdmacam_hil::run::HostOptions {
            inject: vec!["3:PacketLoss".parse().unwrap()],
            ..host_options(20, None)
        };
        rdmacam_hil::run::run_host(&o, &Arc::new(AtomicBool::new(false)))
    })
    .expect_err("the firmware refuses PacketLoss");
    let text = format!("{refused:#}");
    assert!(
        text.contains("refused FaultInject \"PacketLoss\"") && text.contains("NOT_IMPLEMENTED"),
        "{text}"
    );
    let failed = refused
        .downcast_ref::<rdmacam_hil::run::StreamFailed>()
        .expect("a stream failure, with what arrived");
    assert_eq!(failed.summary.reconnects, 0, "{text}");
    assert!(failed.summary.frames_received >= 3, "{text}");

    // 5. the reference GenApi reads the firmware's XML and drives its features
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let py = std::env::var_os("RDMACAM_GENICAM_PYTHON")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| repo.join(".venv/genicam/bin/python"));
    if py.exists() {
        let out = Command::new("ip")
            .args(["netns", "exec", NETNS, "timeout", "120"])
            .arg(&py)
            .arg(repo.join("tests/genicam/genapi_check.py"))
            .arg("192.0.2.2")
            .output()
            .expect("genapi_check.py");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "the reference GenApi refused the firmware: {text}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        // 6. software trigger, missed triggers, chunk data, events and action commands, as for
        // the emulator (the firmware runs the same device code on embassy-net)
        let pcap = std::env::temp_dir().join(format!("rdmacam-fw-{}.pcap", std::process::id()));
        let out = Command::new("ip")
            .args(["netns", "exec", NETNS, "timeout", "120"])
            .arg(&py)
            .arg(repo.join("tests/genicam/features_check.py"))
            .arg("192.0.2.2")
            .arg("--pcap")
            .arg(&pcap)
            .output()
            .expect("features_check.py");
        let _ = std::fs::remove_file(&pcap);
        let text = String::from_utf8_lossy(&out.stdout);
        eprintln!("features_check (firmware): {text}");
        assert!(
            out.status.success(),
            "the firmware's triggers, chunks, events or actions: {text}{}",
            String::from_utf8_lossy(&out.stderr)
        );
    } else {
        assert!(
            std::env::var("RDMACAM_REQUIRE_ARAVIS").is_err(),
            "the reference GenApi venv is missing ({}) but RDMACAM_REQUIRE_ARAVIS is set",
            py.display()
        );
        eprintln!("SKIPPED (GenApi): run scripts/setup.sh");
    }
    let _ = std::fs::remove_file(&log);
}
