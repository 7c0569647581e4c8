//! `rdmacam-host` refuses settings it cannot honour before it touches the network: exit code 2
//! and a message naming the option.

use std::process::Command;

/// `rdmacam-host` with `args`, its camera on loopback at a port no camera serves (a refusal
/// comes before anything is sent); the exit code and stderr.
fn host(args: &[&str]) -> (Option<i32>, String) {
    host_at("127.0.0.1", "127.0.0.1", args)
}

/// [`host`] with its camera at `camera` and itself at `local`.
fn host_at(camera: &str, local: &str, args: &[&str]) -> (Option<i32>, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_rdmacam-host"))
        .args(["--camera", camera, "--local", local])
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
        // port 0 names no port: --rx-port 0 used to listen on a port the kernel picked, where
        // no camera sends
        (
            &["--rx-port", "0"][..],
            "'0' for '--rx-port <RX_PORT>': 0 is not in 1..=65535",
        ),
        (&["--camera-rx-port", "0"][..], "0 is not in 1..=65535"),
        (&["--cm-port", "0"][..], "0 is not in 1..=65535"),
        // the defaults on one machine: camera and host both on 127.0.0.1:4791 (it used to end
        // in "Address already in use" once the camera was configured)
        (
            &[][..],
            "this host and the camera would both receive RoCEv2 on 127.0.0.1:4791: give them \
             another address for this host (--local 127.0.0.2), or another port (--rx-port 29792",
        ),
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

/// `--camera` and `--local` name one machine each: 0.0.0.0, broadcast (a subnet's too) and
/// multicast are refused
/// (0.0.0.0 used to be tried as the camera, a broadcast failed with "Permission denied"), and a
/// `--local` this machine does not have is named as such (it said only "Cannot assign
/// requested address").
#[test]
fn addresses_that_name_no_one_machine_are_refused() {
    let run = |camera: &str, local: &str| host_at(camera, local, &[]);
    for (camera, local, bad) in [
        ("0.0.0.0", "127.0.0.1", "0.0.0.0"),
        ("255.255.255.255", "127.0.0.1", "255.255.255.255"),
        ("224.0.0.1", "127.0.0.1", "224.0.0.1"),
        ("127.0.0.1", "0.0.0.0", "0.0.0.0"),
    ] {
        let (code, err) = run(camera, local);
        assert_eq!(code, Some(2), "{camera} {local}: {err}");
        assert!(
            err.contains(&format!(
                "{bad} names no one machine: give a unicast address"
            )),
            "{err}"
        );
    }
    // loopback's subnet broadcast: Linux binds a socket to it, and a send there without
    // SO_BROADCAST fails with "Permission denied"
    for (camera, local) in [
        ("127.255.255.255", "127.0.0.1"),
        ("127.0.0.1", "127.255.255.255"),
    ] {
        let (code, err) = run(camera, local);
        assert_eq!(code, Some(2), "{camera} {local}: {err}");
        assert!(
            err.contains("127.255.255.255 is the broadcast address of lo's subnet"),
            "{err}"
        );
    }
    // TEST-NET-1: an address no machine here has
    let (code, err) = run("127.0.0.1", "192.0.2.77");
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains(
            "cannot open a GVCP socket on 192.0.2.77 (--local): is 192.0.2.77 an address of \
             this host (or of this network namespace)?"
        ),
        "{err}"
    );
}
