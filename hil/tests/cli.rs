//! `rdmacam-host` refuses settings it cannot honour before it touches the network: exit code 2
//! and a message naming the option.

use std::process::Command;

#[test]
fn settings_out_of_range_are_refused_before_anything_starts() {
    for (args, want) in [
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
        (&["--destroy-qp-after", "3"][..], "needs --transport verbs"),
        // written when the stream ends: refused before it starts, not after (the error used
        // to replace the stream's summary)
        (
            &["--latency-log", "/nonexistent/dir/lat.csv"][..],
            "cannot write /nonexistent/dir/lat.csv",
        ),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_rdmacam-host"))
            // loopback, on a port no camera serves: the parser refuses before anything is sent
            .args([
                "--camera",
                "127.0.0.1",
                "--local",
                "127.0.0.1",
                "--gvcp-port",
                "9",
            ])
            .args(args)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(want), "{args:?}: {err}");
    }
    // a build without the verbs feature says so before it asks the camera anything
    if !cfg!(feature = "verbs") {
        let out = Command::new(env!("CARGO_BIN_EXE_rdmacam-host"))
            .args([
                "--camera",
                "127.0.0.1",
                "--local",
                "127.0.0.1",
                "--gvcp-port",
                "9",
            ])
            .args(["--transport", "verbs"])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert!(err.contains("rebuild with `--features verbs`"), "{err}");
    }
}
