//! The virtual camera against a GigE Vision host no one here wrote: Debian's aravis tools.
//!
//! Needs `aravis-tools`, `aravis-tools-cli` and `gir1.2-aravis-0.8` (CI installs them); without
//! them each test prints SKIPPED and passes, unless RDMACAM_REQUIRE_ARAVIS=1 (set by CI), which
//! makes a missing tool a failure. The lossy-link test also needs root, `ip` and `nft`.
//! The camera binary is `RDMACAM_BIN` if set (CI points it at the release build), else this
//! crate's test build.

mod common;
use common::{Netns, can_make_netns, check_script, have};

/// The Python aravis's GObject bindings are installed for (Debian's, not a venv's).
const SYSTEM_PYTHON: &str = "/usr/bin/python3";

use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::Duration;

/// aravis runs are CPU-hungry; on two cores they must not overlap.
static SERIAL: Mutex<()> = Mutex::new(());

fn aravis_available() -> bool {
    let ok = have("arv-tool-0.8")
        && have("arv-camera-test-0.8")
        && Command::new("/usr/bin/python3")
            .args(["-c", "import gi; gi.require_version('Aravis','0.8')"])
            .status()
            .is_ok_and(|s| s.success());
    if !ok {
        assert!(
            std::env::var("RDMACAM_REQUIRE_ARAVIS").is_err(),
            "aravis tools missing but RDMACAM_REQUIRE_ARAVIS is set"
        );
        eprintln!("SKIPPED: install aravis-tools aravis-tools-cli gir1.2-aravis-0.8");
    }
    ok
}

/// This test's turn with aravis: the lock that runs these tests one at a time, or `None` (the
/// test skips) when aravis's tools are missing or, asked only then, `also` (the test's own
/// needs) says no.
fn aravis_turn(also: impl FnOnce() -> bool) -> Option<std::sync::MutexGuard<'static, ()>> {
    (aravis_available() && also()).then(|| SERIAL.lock().unwrap_or_else(|e| e.into_inner()))
}

fn camera_bin() -> PathBuf {
    std::env::var_os("RDMACAM_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_rdmacam")))
}

/// A running `rdmacam run`, killed on drop.
struct Camera(Child);

impl Camera {
    fn start(netns: Option<&str>, ip: Ipv4Addr, serial: &str, extra: &[&str]) -> Camera {
        let bin = camera_bin();
        let mut c = match netns {
            Some(ns) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", ns]).arg(&bin);
                c
            }
            None => Command::new(&bin),
        };
        c.args([
            "run",
            "--ip",
            &ip.to_string(),
            "--serial",
            serial,
            "--duration",
            "300",
        ])
        .args(extra)
        // warnings and errors only: the camera's INFO lines went to the terminal among the
        // test results (libtest captures no child's output)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::inherit());
        let cam = Camera(c.spawn().expect("start rdmacam run"));
        wait_for_gvcp(netns, ip);
        cam
    }
}

impl Drop for Camera {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Wait until the camera answers a DISCOVERY (sent from the root namespace).
fn wait_for_gvcp(_netns: Option<&str>, ip: Ipv4Addr) {
    assert!(
        common::wait_for_discovery(ip, 3956, Duration::from_secs(20)),
        "camera at {ip} never answered DISCOVERY"
    );
}

fn arv_tool(args: &[&str]) -> String {
    let out = Command::new("timeout")
        .arg("20")
        .arg("arv-tool-0.8")
        .args(args)
        .output()
        .expect("arv-tool");
    String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr)
}

#[derive(Debug, Default)]
struct CameraTest {
    completed: u64,
    failures: u64,
    missing: u64,
    missing_frames: u64,
    resend_requests: u64,
    fps: f64,
}

/// `timeout -s INT 12 arv-camera-test-0.8 -n ADDR -f F -a --no-packet-socket [extra]`: the
/// socket receive path, which the lossy-veth test needs (a packet socket sees packets before
/// nftables' ingress hook drops them, so the loss would not reach aravis); the default receive
/// path is checked by `aravis_default_receive_paths_get_every_pixel`.
fn camera_test(ip: Ipv4Addr, fps: &str, extra: &[&str]) -> CameraTest {
    let out = Command::new("timeout")
        .args([
            "-s",
            "INT",
            "12",
            "arv-camera-test-0.8",
            "-n",
            &ip.to_string(),
            "-f",
            fps,
            "-a",
            "--no-packet-socket",
        ])
        .args(extra)
        .output()
        .expect("arv-camera-test");
    let text = String::from_utf8_lossy(&out.stdout);
    let field = |name: &str| -> u64 {
        text.lines()
            .find(|l| l.trim_start().starts_with(name))
            .and_then(|l| l.split('=').nth(1))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or_else(|| panic!("no {name} in arv-camera-test output:\n{text}"))
    };
    let rates: Vec<f64> = text
        .lines()
        .filter_map(|l| l.split("frame").next()?.trim().parse().ok())
        .collect();
    let steady = &rates[rates.len().min(2)..];
    let r = CameraTest {
        completed: field("n_completed_buffers"),
        failures: field("n_failures"),
        missing: field("n_missing_packets"),
        missing_frames: field("n_missing_frames"),
        resend_requests: field("n_resend_requests"),
        fps: steady.iter().sum::<f64>() / steady.len().max(1) as f64,
    };
    eprintln!("arv-camera-test -n {ip} -f {fps} {extra:?}: {r:?}");
    r
}

/// `tests/aravis/NAME`, a host script of this repository's.
fn aravis_file(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/aravis")
        .join(name)
}

/// Run `tests/aravis/NAME.py args…` with the system Python (its aravis bindings) within
/// `secs`; fails the test unless it exits 0. Returns its JSON line.
fn aravis_script<S: AsRef<std::ffi::OsStr>>(
    secs: u32,
    name: &str,
    args: impl IntoIterator<Item = S>,
    what: &str,
) -> String {
    let script = aravis_file(&format!("{name}.py"));
    check_script(secs, Path::new(SYSTEM_PYTHON), &script, args, what)
}

/// [`aravis_script`] on both of aravis's receive paths: its default (a packet socket, as
/// root) and its socket path (`--socket`).
fn aravis_script_on_both_paths(name: &str, args: &[&str]) {
    for extra in [&[][..], &["--socket"][..]] {
        let all = args.iter().chain(extra).copied();
        aravis_script(120, name, all, &format!("{name} {extra:?}"));
    }
}

/// The aravis-based content checker: every frame complete, counter consecutive, gradient exact.
/// Returns its JSON line.
fn grab_and_check(ip: Ipv4Addr, frames: u32, extra: &[&str]) -> String {
    let (ip, frames) = (ip.to_string(), frames.to_string());
    let args = [ip.as_str(), frames.as_str()]
        .into_iter()
        .chain(extra.iter().copied());
    aravis_script(
        60,
        "grab_and_check",
        args,
        &format!("grab_and_check {ip} {extra:?}"),
    )
}

#[test]
fn aravis_discovers_configures_and_streams_from_the_virtual_camera() {
    let Some(_serial) = aravis_turn(|| true) else {
        return;
    };
    let ip = Ipv4Addr::new(127, 0, 0, 7);
    let _cam = Camera::start(None, ip, "ARVTEST7", &[]);

    // discovery and device information
    let list = arv_tool(&[]);
    assert!(
        list.contains("-ARVTEST7 (127.0.0.7)"),
        "arv-tool list: {list}"
    );
    let values = arv_tool(&[
        "-a",
        "127.0.0.7",
        "control",
        "DeviceVendorName",
        "DeviceSerialNumber",
        "Width",
        "Height",
        "PixelFormat",
        "PayloadSize",
        "GevVersionMajor",
        "GevVersionMinor",
    ]);
    for want in [
        "DeviceVendorName = rdmacam",
        "DeviceSerialNumber = ARVTEST7",
        "Width = 1920",
        "Height = 1080",
        "PixelFormat = Mono8",
        "PayloadSize = 2073600",
        "GevVersionMajor = 2",
        "GevVersionMinor = 2",
    ] {
        assert!(values.contains(want), "missing {want:?} in:\n{values}");
    }
    // writing features
    let set = arv_tool(&[
        "-a",
        "127.0.0.7",
        "control",
        "Width=1024",
        "Height=768",
        "PixelFormat=Mono16",
    ]);
    assert!(!set.to_lowercase().contains("error"), "{set}");
    let back = arv_tool(&[
        "-a",
        "127.0.0.7",
        "control",
        "Width",
        "Height",
        "PixelFormat",
        "PayloadSize",
    ]);
    for want in [
        "Width = 1024",
        "Height = 768",
        "PixelFormat = Mono16",
        "PayloadSize = 1572864",
    ] {
        assert!(back.contains(want), "missing {want:?} in:\n{back}");
    }
    // a bad value is refused with an error, not silently taken
    let bad = arv_tool(&["-a", "127.0.0.7", "control", "PixelFormat=BayerRG16"]);
    assert!(
        arv_tool(&["-a", "127.0.0.7", "control", "PixelFormat"]).contains("Mono16"),
        "{bad}"
    );
    arv_tool(&["-a", "127.0.0.7", "control", "PixelFormat=Mono8"]);

    // streaming right after the resize, then at 2048x2048 as fast as it goes
    let r = camera_test(ip, "20", &[]);
    assert_eq!(
        (r.failures, r.missing, r.missing_frames),
        (0, 0, 0),
        "{r:?}"
    );
    assert!(r.completed >= 100, "{r:?}");
    let big = camera_test(ip, "200", &["-w", "2048", "-h", "2048"]);
    // a measurement, not an assertion: docs/BENCHMARKS.md compares it with aravis' fake camera
    eprintln!(
        "2048x2048 Mono8 as fast as aravis takes it: {:.1} frames/s",
        big.fps
    );
    // At saturation the camera outruns aravis: its socket overflows, it asks for resends, and
    // whether a resend beats aravis' frame timeout depends on how the two processes share two
    // cores. Frames aravis gives up are reported by aravis, never passed on damaged, and the
    // count is a measurement (docs/BENCHMARKS.md), not a pass/fail criterion. What must hold:
    // it streams.
    assert!(big.completed >= 10, "{big:?}");

    // 64-bit block ids, switched on with arv-tool (aravis does not do it by itself); paced, so
    // every frame must arrive
    let on = arv_tool(&["-a", "127.0.0.7", "control", "GevGVSPExtendedIDMode=On"]);
    assert!(!on.to_lowercase().contains("error"), "{on}");
    let ext = camera_test(ip, "20", &["-w", "2048", "-h", "2048"]);
    assert_eq!(
        (ext.failures, ext.missing, ext.missing_frames),
        (0, 0, 0),
        "{ext:?}"
    );
    assert!(ext.completed >= 100, "{ext:?}");

    // content, through aravis: frame counters consecutive, gradient byte-exact (paced well below
    // what aravis takes on a loaded 2-core machine: a dropped frame would break the counters)
    grab_and_check(ip, 60, &[]);
    grab_and_check(
        ip,
        30,
        &[
            "--extended",
            "--width",
            "2048",
            "--height",
            "2048",
            "--fps",
            "25",
        ],
    );
}

#[test]
fn aravis_over_a_lossy_veth_recovers_every_frame_by_packet_resend() {
    let Some(_serial) = aravis_turn(can_make_netns) else {
        return;
    };
    let ns = Netns::new("l", (std::process::id() % 200) as u8 + 20, 1);
    let ip: Ipv4Addr = format!("10.77.{}.2", (std::process::id() % 200) + 20)
        .parse()
        .unwrap();
    let _cam = Camera::start(Some(&ns.name), ip, "LOSSY1", &[]);
    // broadcast discovery across the veth: the camera hears it on 0.0.0.0:3956, answers from ip.
    // Discovery is one datagram each way and this link drops 1 % of them (CI once lost one):
    // list again, as a user would, up to three times.
    let mut list = arv_tool(&[]);
    for _ in 0..2 {
        if list.contains(&format!("-LOSSY1 ({ip})")) {
            break;
        }
        list = arv_tool(&[]);
    }
    assert!(
        list.contains(&format!("-LOSSY1 ({ip})")),
        "arv-tool list: {list}"
    );
    for extended in ["Off", "On"] {
        arv_tool(&[
            "-a",
            &ip.to_string(),
            "control",
            &format!("GevGVSPExtendedIDMode={extended}"),
        ]);
        let r = camera_test(ip, "20", &["-w", "1024", "-h", "1024"]);
        assert_eq!(r.failures, 0, "extended {extended}: {r:?}");
        assert!(r.completed >= 100, "extended {extended}: {r:?}");
        assert!(
            r.resend_requests > 0,
            "1 % loss must have needed resends: {r:?}"
        );
    }
    assert!(ns.dropped() > 100, "nft dropped {} packets", ns.dropped());
}

/// aravis as its users run it: as root it receives through a packet socket (what arv-viewer
/// always does), otherwise through a UDP socket. Both, on loopback and across a veth pair, at
/// the camera's default settings (1920x1080 Mono8 Gradient, 30 frames/s, GVSP one datagram a
/// packet): 40 frames, every pixel checked.
#[test]
fn aravis_default_receive_paths_get_every_pixel() {
    let Some(_serial) = aravis_turn(can_make_netns) else {
        return;
    };
    let ip = Ipv4Addr::new(127, 0, 0, 12);
    let cam = Camera::start(None, ip, "DEFAULTPATH", &[]);
    grab_and_check(ip, 40, &[]);
    grab_and_check(ip, 40, &["--socket"]);
    drop(cam);

    let subnet = (std::process::id() % 200) as u8 + 20;
    let ns = Netns::new("d", subnet.wrapping_add(1), 0);
    let ip: Ipv4Addr = format!("10.77.{}.2", subnet.wrapping_add(1))
        .parse()
        .unwrap();
    let _cam = Camera::start(Some(&ns.name), ip, "DEFAULTVETH", &[]);
    grab_and_check(ip, 40, &[]);
    // aravis negotiates the packet size with GevSCPSFireTestPacket (and DoNotFragment): on a
    // 1500-byte veth it must settle at or below the MTU, and the frames still check out
    let out = grab_and_check(ip, 40, &["--socket", "--auto-packet-size"]);
    let size = out
        .split("\"negotiated\": ")
        .nth(1)
        .and_then(|r| r.split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|n| n.parse::<u32>().ok())
        .unwrap_or_else(|| panic!("no negotiated packet size: {out}"));
    assert!(
        (576..=1500).contains(&size),
        "negotiated {size} on a 1500-byte link"
    );
}

/// aravis's own camera test suite with a configuration that states the camera's truths
/// (tests/aravis/arv-test.cfg), at the camera's default settings, three iterations: every
/// test SUCCESS (Genicam:Schema is IGNORED on purpose, see the file), on arv-test's default
/// receive path and on the packet socket; a pass whose only failures are buffer checks (aravis's
/// receive overruns on two shared cores) runs again, at most twice.
#[test]
fn arv_test_suite_passes_at_default_settings() {
    let Some(_serial) = aravis_turn(|| true) else {
        return;
    };
    let ip = Ipv4Addr::new(127, 0, 0, 13);
    let _cam = Camera::start(None, ip, "ARVTEST13", &[]);
    let cfg = aravis_file("arv-test.cfg");
    for extra in [&[][..], &["--packet-socket"][..]] {
        // A buffer count one short (9/10) or a "Buffer transfer failure" is aravis's receive
        // thread held off on two shared cores while its default socket buffer, smaller than
        // one frame, overflowed (seen in CI beside the other tests, 1 pass in 3 on some
        // sittings, with the camera's counters showing every frame sent and no resend asked).
        // As tests/aravis/faults.py does for the same overruns, such a pass is run again, at
        // most twice, and says so; a failure of any other kind, or three in a row, fails.
        for attempt in 0.. {
            let out = Command::new("timeout")
                .args(["300", "arv-test-0.8", "-n", "*ARVTEST13*", "-c"])
                .arg(&cfg)
                .args(["-i", "3"])
                .args(extra)
                .output()
                .expect("arv-test-0.8");
            let text = String::from_utf8_lossy(&out.stdout).into_owned();
            eprintln!("arv-test-0.8 {extra:?} (attempt {}):\n{text}", attempt + 1);
            let results: Vec<&str> = text
                .lines()
                .filter(|l| l.contains(':') && !l.starts_with("Testing") && !l.starts_with("Found"))
                .collect();
            assert!(results.len() >= 3 * 15, "too few results: {text}");
            let failed: Vec<&str> = results
                .iter()
                .copied()
                .filter(|l| {
                    !(l.contains(" SUCCESS")
                        || (l.starts_with("Genicam:Schema") && l.contains(" IGNORED")))
                })
                .collect();
            // every line in `failed` failed: an overrun shows as a buffer check
            let overrun = |l: &&str| l.contains("BufferCheck");
            if failed.is_empty() {
                break;
            }
            assert!(
                attempt < 2 && failed.iter().all(overrun),
                "arv-test {extra:?}: {failed:?}\n{text}"
            );
            eprintln!("arv-test {extra:?}: {failed:?}: a receive overrun, running again");
        }
    }
}

/// Good neighbours on one machine: aravis's fake camera and two rdmacam cameras in one network
/// namespace, all listed by one arv-tool-0.8 (each hears broadcast DISCOVERY on a shared
/// socket); a third rdmacam on a served address exits non-zero with a clear message; and a
/// unicast DISCOVERY to an address no camera has gets no answer.
#[test]
fn rdmacam_and_aravis_fake_camera_share_a_machine() {
    let Some(_serial) = aravis_turn(|| can_make_netns() && have("arv-fake-gv-camera-0.8")) else {
        return;
    };
    let name = format!("rdmacam-coex-{}", std::process::id());
    let bin = camera_bin();
    let script = format!(
        r#"set -u
ip link set lo up
arv-fake-gv-camera-0.8 -i 127.0.0.1 >/dev/null 2>&1 &
fake=$!
"{bin}" run --ip 127.0.0.2 --serial COEX2 --duration 30 2>/dev/null &
c2=$!
"{bin}" run --ip 127.0.0.3 --serial COEX3 --duration 30 2>/dev/null &
c3=$!
sleep 1.5
echo "== list"
timeout 20 arv-tool-0.8
echo "== busy"
"{bin}" run --ip 127.0.0.2 --serial COEX4 --duration 3 2>&1
echo "exit=$?"
echo "== stray"
python3 - <<'PY'
import socket
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.settimeout(1.0)
s.sendto(bytes([0x42, 1, 0, 2, 0, 0, 0, 7]), ("127.0.0.9", 3956))
try:
    s.recvfrom(600)
    print("stray answered")
except socket.timeout:
    print("stray silent")
PY
# by PID: `jobs -p` of a non-interactive sh listed nothing, and aravis's fake camera outlived
# the test (and its namespace)
kill $fake $c2 $c3 2>/dev/null
wait $fake $c2 $c3 2>/dev/null
"#,
        bin = bin.display()
    );
    let status = Command::new("ip")
        .args(["netns", "add", &name])
        .status()
        .unwrap();
    assert!(status.success());
    let out = Command::new("ip")
        .args(["netns", "exec", &name, "sh", "-c", &script])
        .output()
        .unwrap();
    let _ = Command::new("ip").args(["netns", "del", &name]).status();
    let text = String::from_utf8_lossy(&out.stdout);
    eprintln!("{text}");
    let list = text.split("== busy").next().unwrap();
    for want in ["(127.0.0.1)", "-COEX2 (127.0.0.2)", "-COEX3 (127.0.0.3)"] {
        assert!(list.contains(want), "arv-tool did not list {want}: {text}");
    }
    assert!(
        text.contains("127.0.0.2:3956 is already served") && text.contains("exit=2"),
        "a second camera on a served address: {text}"
    );
    assert!(text.contains("stray silent"), "{text}");
}

/// Acquisition code as host teams write it with aravis's GObject API
/// (`tests/aravis/triggers_and_chunks.py`), on aravis's default receive path (a packet socket,
/// as root) and on its socket path: N software triggers give exactly N buffers; MultiFrame K
/// gives K and stops; every chunk read with aravis's ArvChunkParser equals the feature, the
/// buffer's frame id and timestamp; triggers faster than the exposure give fewer buffers and
/// FrameTriggerMissedCount counts exactly the rest; Line0, driven by `--trigger-hz 20`, gives
/// frames whole pulse periods apart.
#[test]
fn aravis_triggers_chunks_and_line0_on_both_receive_paths() {
    let Some(_serial) = aravis_turn(|| true) else {
        return;
    };
    let ip = Ipv4Addr::new(127, 0, 0, 14);
    let _cam = Camera::start(None, ip, "TRIGGERS", &["--trigger-hz", "20"]);
    aravis_script_on_both_paths("triggers_and_chunks", &[&ip.to_string(), "--line-hz", "20"]);
}

/// A rig from one command: `rdmacam run --cameras 8` in a network namespace; one
/// `arv-tool-0.8` lists all eight (each discovered on its own), and two aravis hosts stream
/// from two of them at once, every pixel checked.
#[test]
fn eight_cameras_from_one_process_are_listed_and_two_stream_at_once() {
    let Some(_serial) = aravis_turn(can_make_netns) else {
        return;
    };
    let name = format!("rdmacam-rig-{}", std::process::id());
    let bin = camera_bin();
    let script = format!(
        r#"set -u
ip link set lo up
"{bin}" run --ip 127.0.0.20 --cameras 8 --serial RIG --duration 60 2>/dev/null &
cam=$!
sleep 1.5
echo "== list"
timeout 20 arv-tool-0.8
echo "== stream"
/usr/bin/python3 "{grab}" 127.0.0.21 20 > /tmp/rig-a.$$ 2>&1 &
a=$!
/usr/bin/python3 "{grab}" 127.0.0.27 20 > /tmp/rig-b.$$ 2>&1 &
b=$!
wait $a; echo "a=$?"; cat /tmp/rig-a.$$
wait $b; echo "b=$?"; cat /tmp/rig-b.$$
rm -f /tmp/rig-a.$$ /tmp/rig-b.$$
kill $cam
"#,
        bin = bin.display(),
        grab = aravis_file("grab_and_check.py").display()
    );
    assert!(
        Command::new("ip")
            .args(["netns", "add", &name])
            .status()
            .unwrap()
            .success()
    );
    let out = Command::new("ip")
        .args(["netns", "exec", &name, "sh", "-c", &script])
        .output()
        .unwrap();
    let _ = Command::new("ip").args(["netns", "del", &name]).status();
    let text = String::from_utf8_lossy(&out.stdout);
    eprintln!("{text}");
    let list = text.split("== stream").next().unwrap();
    for k in 1..=8 {
        let want = format!("-RIG-{k} (127.0.0.{})", 19 + k);
        assert!(list.contains(&want), "arv-tool did not list {want}: {text}");
    }
    assert!(
        text.contains("a=0") && text.contains("b=0"),
        "two hosts streaming at once: {text}"
    );
}

/// `rdmacam run --images DIR`: three PNGs (written by the test script from formulas) replayed
/// in name order and looped; aravis receives them in Mono8, BayerRG8 and RGB8 and every byte
/// equals the conversion the script computes itself from the same formulas
/// (`tests/aravis/replay_images.py`).
#[test]
fn aravis_receives_replayed_images_byte_for_byte() {
    let Some(_serial) = aravis_turn(|| true) else {
        return;
    };
    let script = aravis_file("replay_images.py");
    let dir = tempfile::tempdir().unwrap();
    let made = Command::new("/usr/bin/python3")
        .arg(&script)
        .arg("make")
        .arg(dir.path())
        .status()
        .unwrap();
    assert!(made.success());
    let ip = Ipv4Addr::new(127, 0, 0, 15);
    let _cam = Camera::start(
        None,
        ip,
        "IMAGES",
        &["--images", dir.path().to_str().unwrap()],
    );
    let (ip, shots) = (ip.to_string(), dir.path().to_str().unwrap());
    for format in ["Mono8", "BayerRG8", "RGB8"] {
        aravis_script(
            60,
            "replay_images",
            ["check", &ip, shots, "--format", format, "--frames", "9"],
            &format!("replay_images {format}"),
        );
    }
    // the camera says what it shows, as aravis reads it: the sensor's images (TestPattern
    // Off; it used to read Gradient), until a host picks a pattern
    let out = arv_tool(&["-a", &ip, "control", "TestPattern"]);
    assert!(out.contains("TestPattern = Off"), "{out}");
    let out = arv_tool(&["-a", &ip, "control", "TestPattern=Gradient", "TestPattern"]);
    assert!(out.contains("TestPattern = Gradient"), "{out}");
}

/// `rdmacam run --rig FILE`: a TOML rig of two different cameras in one process, one replaying
/// images in BayerRG8, one a 640x480 test pattern; aravis streams from both and checks every
/// byte (tests/aravis/replay_images.py, tests/aravis/grab_and_check.py).
#[test]
fn a_rig_file_serves_two_different_cameras() {
    let Some(_serial) = aravis_turn(|| true) else {
        return;
    };
    let script = aravis_file("replay_images.py");
    let dir = tempfile::tempdir().unwrap();
    assert!(
        Command::new("/usr/bin/python3")
            .arg(&script)
            .arg("make")
            .arg(dir.path().join("shots"))
            .status()
            .unwrap()
            .success()
    );
    let rig = dir.path().join("rig.toml");
    std::fs::write(
        &rig,
        r#"
[[camera]]
ip = "127.0.0.40"
serial = "RIGIMAGES"
images = "shots/"
pixel_format = "BayerRG8"

[[camera]]
ip = "127.0.0.41"
serial = "RIGPATTERN"
width = 640
height = 480
"#,
    )
    .unwrap();
    let cam = Command::new(camera_bin())
        .args(["run", "--duration", "120", "--rig"])
        .arg(&rig)
        .env("RUST_LOG", "warn")
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    wait_for_gvcp(None, Ipv4Addr::new(127, 0, 0, 40));
    wait_for_gvcp(None, Ipv4Addr::new(127, 0, 0, 41));
    // the camera process ends with the test, whatever the checks say
    struct Kill(std::process::Child);
    impl Drop for Kill {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let _cam = Kill(cam);
    let shots = dir.path().join("shots");
    aravis_script(
        60,
        "replay_images",
        [
            "check",
            "127.0.0.40",
            shots.to_str().unwrap(),
            "--format",
            "BayerRG8",
            "--frames",
            "6",
        ],
        "the rig's image camera",
    );
    let pattern = grab_and_check(Ipv4Addr::new(127, 0, 0, 41), 5, &[]);
    assert!(pattern.contains("\"width\": 640"), "{pattern}");
}

/// Faults on demand as aravis sees them (`tests/aravis/faults.py`), on both receive paths:
/// each fault injected through FaultSelector/FaultInject at a moment the host chooses, what
/// aravis counts for it (resends, duplicates, missing frames, error packets, a failed buffer,
/// control-lost after a reboot), and good buffers after each. Then a camera started with
/// `--fault` loss, reorder and duplication by probability: every buffer good, resends and
/// duplicates counted.
#[test]
fn aravis_sees_each_injected_fault_and_the_camera_recovers() {
    let Some(_serial) = aravis_turn(|| true) else {
        return;
    };
    let ip = Ipv4Addr::new(127, 0, 0, 15);
    let cam = Camera::start(None, ip, "FAULTS", &[]);
    aravis_script_on_both_paths("faults", &[&ip.to_string()]);
    drop(cam);
    let ip = Ipv4Addr::new(127, 0, 0, 16);
    let _cam = Camera::start(
        None,
        ip,
        "FAULTS2",
        &[
            "--fault",
            "loss:p=0.01",
            "--fault",
            "reorder:p=0.01",
            "--fault",
            "duplicate:p=0.01",
        ],
    );
    aravis_script(
        120,
        "faults",
        [ip.to_string().as_str(), "--cli"],
        "faults --cli",
    );
    // a fault this camera's transport cannot carry out is refused where aravis reads it:
    // GVSP sends no RoCEv2 packet to mark ECN (the request used to be taken and never happen)
    let at = ip.to_string();
    let out = arv_tool(&["-a", &at, "control", "FaultSelector=EcnMark", "FaultInject"]);
    assert!(
        out.contains("FaultInject execute error") && out.contains("not-implemented"),
        "{out}"
    );
    let out = arv_tool(&[
        "-a",
        &at,
        "control",
        "FaultSelector=StreamStall",
        "FaultDuration=1",
        "FaultInject",
    ]);
    assert!(out.contains("FaultInject executed"), "{out}");
}
