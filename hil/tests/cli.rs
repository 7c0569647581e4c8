//! `rdmacam-host` refuses settings it cannot honour before it touches the network: exit code 2
//! and a message naming the option.

use std::process::Command;

/// `rdmacam-host` with `args`, its camera on loopback at a port no camera serves (a refusal
/// comes before anything is sent); the exit code and stderr.
fn host(args: &[&str]) -> (Option<i32>, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_rdmacam-host"))
        .args(["--camera", "127.0.0.1", "--local", "127.0.0.1"])
        .args(["--gvcp-port", "9"])
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn settings_out_of_range_are_refused_before_anything_starts() {
    let mut cases = vec![
        (
            &["--buffers", "0"][..],
            "'0' for '--buffers <BUFFERS>': 0 is not in 1..",
        ),
        (
            &["--frames", "0"][..],
            "'0' for '--frames <FRAMES>': 0 is not in 1..=4294967295",
        ),
        // AcquisitionFrameCount is 32 bits: more used to be cut to its low bits
        (
            &["--frames", "5000000000"][..],
            "5000000000 is not in 1..=4294967295",
        ),
        (&["--recv-buffer", "1"][..], "1 is not in 4096..=1073741824"),
        (&["--duration", "0"][..], "0 seconds is out of range"),
        (
            &["--destroy-qp-after", "3"][..],
            "--destroy-qp-after: only with --transport verbs",
        ),
        // options of another transport or connection: refused, where they used to be ignored
        (
            &["--device", "rxe0"][..],
            "--device: only with --transport verbs",
        ),
        (
            &[
                "--transport",
                "verbs",
                "--recv-buffer",
                "65536",
                "--no-share-cpu",
            ][..],
            "--recv-buffer, --no-share-cpu: only with --transport soft",
        ),
        (
            &["--cm-port", "7471"][..],
            "--cm-port: only with --connect cm",
        ),
        // FaultCount and FaultDuration's ranges: the camera used to refuse them mid-stream
        (
            &["--inject-fault", "5:PacketLoss:1000001"][..],
            "AMOUNT of PacketLoss is 1 to 1000000 packets, frames or requests",
        ),
        (
            &["--inject-fault", "5:StreamStall:600001"][..],
            "AMOUNT of StreamStall is 1 to 600000 ms",
        ),
        // written when the stream ends: refused before it starts, not after (the error used
        // to replace the stream's summary)
        (
            &["--latency-log", "/nonexistent/dir/lat.csv"][..],
            "cannot write /nonexistent/dir/lat.csv",
        ),
    ];
    // a build without the verbs feature says so before it asks the camera anything
    if !cfg!(feature = "verbs") {
        cases.push((
            &["--transport", "verbs"][..],
            "rebuild with `--features verbs`",
        ));
    }
    for (args, want) in cases {
        let (code, err) = host(args);
        assert_eq!(code, Some(2), "{args:?}: {err}");
        assert!(err.contains(want), "{args:?}: {err}");
    }
}
