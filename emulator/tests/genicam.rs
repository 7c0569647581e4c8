//! The camera's GenICam description as hosts read it, checked by implementations no one here
//! wrote: EMVA's reference GenApi (PyPI `genicam`, behind vendor SDKs and harvesters) loads
//! the XML fetched over GVCP and drives every feature through GVCP READMEM/WRITEMEM
//! (`tests/genicam/genapi_check.py`), and libxml2 validates it against the GenApi 1.1 schema
//! that Debian's arv-test-0.8 carries (arv-test's own Schema test loads the 1.0 schema for
//! 1.1 files, a bug of aravis 0.8.26, so the schema is taken out of it with `gresource`).
//!
//! Needs `scripts/setup.sh` (the venv at .venv/genicam, xmllint, gresource, aravis-tools-cli);
//! without them the tests print SKIPPED, unless RDMACAM_REQUIRE_ARAVIS=1 (CI).

mod common;
use common::{check_script, have};

use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The venv python with the reference GenApi, or None (SKIPPED) when setup.sh has not run.
fn genapi_python() -> Option<PathBuf> {
    let py = std::env::var_os("RDMACAM_GENICAM_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo().join(".venv/genicam/bin/python"));
    let ok = Command::new(&py)
        .args(["-c", "import genicam.genapi"])
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        assert!(
            std::env::var("RDMACAM_REQUIRE_ARAVIS").is_err(),
            "the reference GenApi is missing ({}) but RDMACAM_REQUIRE_ARAVIS is set",
            py.display()
        );
        eprintln!("SKIPPED: run scripts/setup.sh (the genicam venv)");
        return None;
    }
    Some(py)
}

struct Camera(Child);

impl Drop for Camera {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn camera(ip: Ipv4Addr) -> Camera {
    let bin = std::env::var_os("RDMACAM_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_rdmacam")));
    let c = Camera(
        Command::new(bin)
            .args(["run", "--ip", &ip.to_string(), "--duration", "120"])
            .stderr(Stdio::null())
            .spawn()
            .expect("rdmacam run"),
    );
    // answers DISCOVERY once its sockets are bound
    let s = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    s.set_read_timeout(Some(Duration::from_millis(100)))
        .unwrap();
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(10) {
        let _ = s.send_to(&[0x42, 1, 0, 2, 0, 0, 0, 1], (ip, 3956));
        let mut b = [0u8; 600];
        if s.recv_from(&mut b).is_ok() {
            return c;
        }
    }
    panic!("camera at {ip} never answered");
}

#[test]
fn the_served_xml_loads_in_the_reference_genapi_and_every_feature_works() {
    let Some(py) = genapi_python() else { return };
    let ip = Ipv4Addr::new(127, 0, 0, 11);
    let _cam = camera(ip);
    let dir = tempfile::tempdir().unwrap();
    let xml = dir.path().join("served.xml");
    check_script(
        120,
        &py,
        &repo().join("tests/genicam/genapi_check.py"),
        [ip.to_string().as_str(), "--save-xml", xml.to_str().unwrap()],
        "genapi_check (the reference GenApi against the camera)",
    );

    // the same bytes against the GenApi 1.1 schema
    let have = |t: &str| {
        Command::new("sh")
            .args(["-c", &format!("command -v {t}")])
            .stdout(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    if !(have("xmllint") && have("gresource") && have("arv-test-0.8")) {
        assert!(
            std::env::var("RDMACAM_REQUIRE_ARAVIS").is_err(),
            "xmllint, gresource or arv-test-0.8 missing but RDMACAM_REQUIRE_ARAVIS is set"
        );
        eprintln!("SKIPPED (schema): install libxml2-utils libglib2.0-bin aravis-tools-cli");
        return;
    }
    let xsd = dir.path().join("GenApiSchema_Version_1_1.xsd");
    let arv_test = String::from_utf8(
        Command::new("sh")
            .args(["-c", "command -v arv-test-0.8"])
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap();
    let schema = Command::new("gresource")
        .args([
            "extract",
            arv_test.trim(),
            "/org/aravis/GenApiSchema_Version_1_1.xsd",
        ])
        .output()
        .unwrap();
    assert!(schema.status.success() && !schema.stdout.is_empty());
    std::fs::write(&xsd, &schema.stdout).unwrap();
    let v = Command::new("xmllint")
        .args(["--noout", "--schema"])
        .arg(&xsd)
        .arg(&xml)
        .output()
        .unwrap();
    assert!(
        v.status.success(),
        "the served XML does not validate against GenApi 1.1: {}",
        String::from_utf8_lossy(&v.stderr)
    );
}

/// Triggers, chunk data, events and action commands, driven through the reference GenApi and
/// read back with its own chunk and event adapters (`tests/genicam/features_check.py`); the
/// message-channel traffic and the action commands it recorded are decoded by Wireshark's GVCP
/// dissector without an expert note.
#[test]
fn triggers_chunks_events_and_actions_through_the_reference_genapi_and_wireshark() {
    let Some(py) = genapi_python() else { return };
    let ip = Ipv4Addr::new(127, 0, 0, 13);
    let _cam = camera(ip);
    let dir = tempfile::tempdir().unwrap();
    let pcap = dir.path().join("gvcp.pcap");
    let text = check_script(
        120,
        &py,
        &repo().join("tests/genicam/features_check.py"),
        [ip.to_string().as_str(), "--pcap", pcap.to_str().unwrap()],
        "features_check (features through the reference GenApi)",
    );
    if !have("tshark") {
        assert!(
            std::env::var("RDMACAM_REQUIRE_ARAVIS").is_err(),
            "tshark missing but RDMACAM_REQUIRE_ARAVIS is set"
        );
        eprintln!("SKIPPED (Wireshark): install tshark");
        return;
    }
    let facts: serde_json::Value = serde_json::from_str(text.trim()).unwrap();
    let port = facts["facts"]["message_port"].as_u64().unwrap();
    let decode = format!("udp.port=={port},gvcp");
    let tshark = |extra: &[&str]| {
        let o = Command::new("tshark")
            .arg("-r")
            .arg(&pcap)
            .args(["-d", &decode])
            .args(extra)
            .stderr(Stdio::null())
            .output()
            .unwrap();
        assert!(o.status.success());
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    let summary = tshark(&[]);
    for what in [
        "EVENT_CMD",
        "EVENT_ACK",
        "EVENTDATA_CMD",
        "ACTION_CMD",
        "ACTION_ACK",
    ] {
        assert!(
            summary.contains(what),
            "Wireshark saw no {what}:\n{summary}"
        );
    }
    assert!(!summary.contains("Malformed"), "{summary}");
    let detail = tshark(&["-V"]);
    for field in [
        "64 bit ID: True",
        "Device Specific ID: 0x9103",
        "Event Data: 00000001",
        "Action Device Key: 0x12345678",
    ] {
        assert!(detail.contains(field), "Wireshark did not decode {field}");
    }
    let expert = tshark(&["-q", "-z", "expert"]);
    assert!(
        !expert.contains("Error") && !expert.contains("Warning"),
        "Wireshark's expert notes: {expert}"
    );
}

/// A rig: three cameras on one subnet (a network namespace) fire together on one broadcast
/// ACTION_CMD (their frame timestamps, on the machine's shared time base, agree within 1 ms),
/// and on a scheduled one at its time; wrong device key, group key or mask fires none
/// (`tests/genicam/action_group.py`, cameras configured through the reference GenApi).
#[test]
fn one_broadcast_action_command_fires_three_cameras_together() {
    let Some(py) = genapi_python() else { return };
    let root = Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| o.stdout.starts_with(b"0"));
    if !(root && have("ip")) {
        assert!(
            std::env::var("RDMACAM_REQUIRE_ARAVIS").is_err(),
            "the action rig needs root and iproute2 (RDMACAM_REQUIRE_ARAVIS is set)"
        );
        eprintln!("SKIPPED: needs root and iproute2");
        return;
    }
    let ns = format!("rdmacam-act-{}", std::process::id());
    let bin = std::env::var_os("RDMACAM_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_rdmacam")));
    // one veth end carries the host (.1) and the three cameras (.2-.4), no `brd`: the cameras
    // work the subnet's broadcast address out from the mask
    let script = format!(
        r#"set -eu
ip link set lo up
ip link add v0 type veth peer name v1
ip addr add 10.89.0.1/24 dev v0
for i in 2 3 4; do ip addr add 10.89.0.$i/24 dev v0; done
ip link set v0 up; ip link set v1 up
pids=""
for i in 2 3 4; do "{bin}" run --ip 10.89.0.$i --serial RIG$i --duration 60 2>/dev/null & pids="$pids $!"; done
sleep 1.5
set +e
timeout 90 "{py}" "{action}" 10.89.0.1 10.89.0.255 10.89.0.2 10.89.0.3 10.89.0.4
r=$?
kill $pids 2>/dev/null
exit $r
"#,
        bin = bin.display(),
        py = py.display(),
        action = repo().join("tests/genicam/action_group.py").display()
    );
    assert!(
        Command::new("ip")
            .args(["netns", "add", &ns])
            .status()
            .unwrap()
            .success()
    );
    let out = Command::new("ip")
        .args(["netns", "exec", &ns, "sh", "-c", &script])
        .output()
        .unwrap();
    let _ = Command::new("sh")
        .args([
            "-c",
            &format!("ip netns pids {ns} | xargs -r kill; ip netns del {ns}"),
        ])
        .status();
    let text = String::from_utf8_lossy(&out.stdout);
    eprintln!("action_group: {text}");
    assert!(
        out.status.success(),
        "the action rig: {text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
