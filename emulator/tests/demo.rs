//! `rdmacam demo` through real UDP sockets on loopback: the README's first command.

use std::process::Command;

fn demo(args: &[&str]) -> (i32, serde_json::Value, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_rdmacam"))
        .arg("demo")
        .args(args)
        .arg("--json")
        .output()
        .expect("run rdmacam demo");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let last = stdout.lines().last().unwrap_or_default().to_string();
    let json = serde_json::from_str(&last).unwrap_or_else(|e| panic!("last stdout line is not JSON ({e}): {stdout}\n{}", String::from_utf8_lossy(&out.stderr)));
    (out.status.code().unwrap_or(-1), json, stdout)
}

#[test]
fn demo_streams_and_checks_every_frame_then_summarises() {
    // one test at a time: both use the demo's fixed ports
    let (code, s, text) = demo(&["--frames", "60", "--width", "640", "--height", "480"]);
    assert_eq!(code, 0, "{text}");
    for key in ["frames_expected", "frames_received", "frames_bad", "frames_dropped", "bytes_received", "retransmitted_packets", "gbit_per_s", "seconds"] {
        assert!(s.get(key).is_some(), "summary lacks {key}: {s}");
    }
    assert_eq!((s["frames_expected"].as_u64(), s["frames_received"].as_u64(), s["frames_bad"].as_u64()), (Some(60), Some(60), Some(0)));
    assert_eq!(s["bytes_received"].as_u64(), Some(60 * 640 * 480));
    assert!(text.lines().next().unwrap().starts_with("60 of 60 frames received, 0 bad"), "{text}");

    // 1 % loss both ways: every frame still arrives, through retransmission
    let (code, s, text) = demo(&["--frames", "60", "--width", "640", "--height", "480", "--pixel-format", "Mono16", "--loss", "0.01", "--seed", "3"]);
    assert_eq!(code, 0, "{text}");
    assert_eq!((s["frames_received"].as_u64(), s["frames_bad"].as_u64()), (Some(60), Some(0)));
    assert!(s["retransmitted_packets"].as_u64().unwrap() > 0, "{s}");
    assert_eq!(s["bytes_received"].as_u64(), Some(60 * 640 * 480 * 2));
}

#[test]
fn demo_rejects_a_bad_loss_probability() {
    let out = Command::new(env!("CARGO_BIN_EXE_rdmacam")).args(["demo", "--loss", "1.5"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--loss must be in 0..1"));
}
