//! `rdmacam check-host` against the reference host and against hosts broken on purpose
//! (`--misbehave`): the reference host passes every scenario; each broken host fails, with a
//! reason that names its fault.
//!
//! The host under test is this test binary run again (`host_under_test`, active only when
//! RDMACAM_TEST_HOST is set): the reference host, configured from the environment check-host
//! gives every host command, as a host in another language would read it.

use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use rdmacam_hil::run::{HostOptions, run_host};

/// Not a test of its own: the host check-host runs, when RDMACAM_TEST_HOST is set (to "ok"
/// or a `--misbehave` name). Exit 0 when every frame arrived good, 1 otherwise, 2 on error.
#[test]
fn host_under_test() {
    let Ok(kind) = std::env::var("RDMACAM_TEST_HOST") else {
        return;
    };
    let var = |k: &str| std::env::var(k).unwrap_or_else(|_| panic!("check-host sets {k}"));
    let num = |k: &str| var(k).parse::<u64>().unwrap_or_else(|e| panic!("{k}: {e}"));
    let camera = var("RDMACAM_CAMERA").parse().unwrap();
    let o = HostOptions {
        gvcp_port: num("RDMACAM_GVCP_PORT") as u16,
        camera_rx_port: num("RDMACAM_ROCE_PORT") as u16,
        rx_port: num("RDMACAM_HOST_ROCE_PORT") as u16,
        misbehave: (kind != "ok").then(|| kind.parse().unwrap()),
        ..HostOptions::new(camera, camera, num("RDMACAM_FRAMES"))
    };
    let code = match run_host(&o, &Arc::new(AtomicBool::new(false))) {
        Ok(s) if s.frames_bad == 0 && s.frames_received > 0 => 0,
        Ok(s) => {
            eprintln!("host under test: {s:?}");
            1
        }
        Err(e) => {
            eprintln!("host under test: {e:#}");
            2
        }
    };
    std::process::exit(code);
}

/// `rdmacam check-host --json` with the host under test behaving as `kind`: exit code, JSON.
fn check(kind: &str, ports: (u16, u16, u16), extra: &[&str]) -> (i32, serde_json::Value) {
    let (gvcp, roce, host_roce) = (
        ports.0.to_string(),
        ports.1.to_string(),
        ports.2.to_string(),
    );
    let me = std::env::current_exe().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_rdmacam"))
        .args(["check-host", "--json"])
        .args([
            "--gvcp-port",
            &gvcp,
            "--roce-port",
            &roce,
            "--host-roce-port",
            &host_roce,
        ])
        .args(extra)
        .arg("--")
        .arg(me)
        .args([
            "--exact",
            "host_under_test",
            "--nocapture",
            "--test-threads",
            "1",
        ])
        .env("RDMACAM_TEST_HOST", kind)
        .env("RUST_LOG", "warn")
        .output()
        .expect("run rdmacam check-host");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let json = serde_json::from_str(&stdout)
        .unwrap_or_else(|e| panic!("stdout is not one JSON document ({e}): {stdout}\n{stderr}"));
    (out.status.code().unwrap_or(-1), json)
}

/// The reasons scenario `name` failed for, joined.
fn why(j: &serde_json::Value, name: &str) -> String {
    let s = j["scenarios"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["scenario"] == name)
        .unwrap_or_else(|| panic!("no scenario {name}: {j}"));
    assert_eq!(s["pass"], false, "{name} passed: {s}");
    s["why"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w.as_str().unwrap().to_string())
        .collect::<Vec<_>>()
        .join("; ")
}

#[test]
fn the_reference_host_passes_every_scenario() {
    // at the camera's defaults (1920x1080 Mono8, 30 fps) but the ports
    let (code, j) = check("ok", (19831, 18231, 18232), &["--timeout", "30"]);
    let names: Vec<&str> = j["scenarios"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["scenario"].as_str().unwrap())
        .collect();
    assert_eq!(names.len(), rdmacam::check_host::SCENARIOS.len(), "{j}");
    for s in j["scenarios"].as_array().unwrap() {
        assert_eq!(s["pass"], true, "{s}");
        assert_eq!(s["camera"]["host_violations"], serde_json::json!([]), "{s}");
    }
    assert_eq!((code, &j["pass"]), (0, &serde_json::json!(true)), "{j}");
}

/// A host broken as `kind` fails each of `scenarios` (run with `extra`), check-host exits 1,
/// and every failing scenario's reasons contain each of `words`.
fn fails_naming(
    kind: &str,
    ports: (u16, u16, u16),
    extra: &[&str],
    scenarios: &str,
    words: &[&str],
) {
    let args = [
        &["--only", scenarios, "--width", "320", "--height", "240"][..],
        extra,
    ]
    .concat();
    let (code, j) = check(kind, ports, &args);
    assert_eq!(code, 1, "{j}");
    for name in scenarios.split(',') {
        let w = why(&j, name);
        assert!(words.iter().all(|x| w.contains(x)), "{kind}, {name}: {w}");
    }
}

#[test]
fn a_host_with_a_wrong_icrc_fails_and_the_reason_names_it() {
    let extra = ["--timeout", "15"];
    fails_naming(
        "bad-icrc",
        (19832, 18233, 18234),
        &extra,
        "clean",
        &["bad_icrc", "ICRC is wrong"],
    );
}

#[test]
fn a_host_whose_acks_skip_a_psn_fails_and_the_reason_names_it() {
    let extra = ["--timeout", "20"];
    fails_naming(
        "skip-ack",
        (19833, 18235, 18236),
        &extra,
        "clean",
        &["ack_unsent", "never sent"],
    );
}

#[test]
fn a_host_without_a_heartbeat_fails_and_the_reason_names_it() {
    // 60 frames at 10 a second outlast the 3 s heartbeat timeout
    let extra = ["--fps", "10", "--timeout", "20"];
    let words = ["heartbeat_late", "control lost"];
    fails_naming(
        "no-heartbeat",
        (19834, 18237, 18238),
        &extra,
        "clean",
        &words,
    );
}

#[test]
fn a_host_that_never_requeues_fails_and_the_reason_names_it() {
    let words = ["for want of a buffer"];
    fails_naming(
        "no-requeue",
        (19835, 18239, 18240),
        &[],
        "clean,loss",
        &words,
    );
}

#[test]
fn unknown_scenarios_and_options_that_do_not_apply_are_refused() {
    let run = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_rdmacam"))
            .arg("check-host")
            .args(args)
            .args(["--", "true"])
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (code, err) = run(&["--only", "sunshine"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("no scenario \"sunshine\"") && err.contains("clean"),
        "{err}"
    );
    let (code, err) = run(&["--transport", "gvsp"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("--transport does not apply"), "{err}");
}
