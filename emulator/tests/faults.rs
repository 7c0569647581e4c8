//! Faults on demand over ORSP: what the reference host sees for each kind, that the camera
//! recovers, and that every fault shows in both summaries. The GVSP side is checked through
//! aravis (tests/aravis/faults.py, run from tests/aravis.rs). Also the faults of a set-up: a
//! host whose RoCEv2 ports are not the camera's.

use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use serde_json::Value;

mod common;

/// `rdmacam demo --json` with these arguments: exit code, summary (host fields at the top,
/// the camera's under "camera"), stdout. One demo at a time: every demo camera serves the
/// same ports.
fn demo(args: &[&str]) -> (i32, Value, String) {
    static DEMO_PORTS: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _ports = DEMO_PORTS.lock().unwrap_or_else(|e| e.into_inner());
    let out = Command::new(env!("CARGO_BIN_EXE_rdmacam"))
        .args(["demo", "--json", "--width", "640", "--height", "480"])
        .args(args)
        .output()
        .expect("run rdmacam demo");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let last = stdout.lines().last().unwrap_or_default();
    let json = serde_json::from_str(last).unwrap_or_else(|e| {
        panic!(
            "last line is not JSON ({e}): {stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (out.status.code().unwrap_or(-1), json, stdout)
}

fn n(v: &Value, path: &str) -> u64 {
    path.split('.')
        .fold(v, |v, k| &v[k])
        .as_u64()
        .unwrap_or_else(|| panic!("{path} missing in {v}"))
}

/// No frame bad, and every frame received or reported dropped by the camera.
fn all_good(s: &Value, text: &str) {
    assert_eq!(n(s, "frames_bad"), 0, "{text}");
    assert!(
        n(s, "frames_received") + n(s, "frames_dropped") >= n(s, "frames_expected"),
        "{text}"
    );
}

/// Each fault kind in the demo (camera and reference host on loopback, ORSP), one after the
/// other.
#[test]
fn each_fault_kind_is_seen_by_the_host_and_the_stream_recovers() {
    // a bad ICRC: the host discards the packet, NAKs the gap, the camera resends
    let (code, s, text) = demo(&["--frames", "100", "--fault", "corrupt:every=200"]);
    assert_eq!(code, 0, "{text}");
    all_good(&s, &text);
    let corrupt = n(&s, "camera.faults.corrupt");
    assert!(corrupt >= 30, "{text}");
    assert_eq!(n(&s, "host_roce.bad_icrc"), corrupt, "{text}");
    assert!(
        n(&s, "camera.seq_naks") + n(&s, "camera.timeouts") > 0,
        "{text}"
    );
    assert!(n(&s, "camera.retransmitted") >= corrupt, "{text}");

    // ECN marks: the host answers CNPs, the camera's DCQCN hears them
    let (code, s, text) = demo(&["--frames", "100", "--fault", "ecn:p=0.02"]);
    assert_eq!(code, 0, "{text}");
    all_good(&s, &text);
    let marked = n(&s, "camera.faults.ecn");
    assert!(marked > 0, "{text}");
    assert_eq!(n(&s, "host_roce.ecn_marked"), marked, "{text}");
    assert!(n(&s, "host_roce.cnps_sent") > 0, "{text}");
    assert_eq!(n(&s, "camera.cnps"), n(&s, "host_roce.cnps_sent"), "{text}");

    // loss, reordering, duplication: go-back-N and duplicate detection at the host
    let (code, s, text) = demo(&["--frames", "100", "--fault", "loss:p=0.01"]);
    assert_eq!(code, 0, "{text}");
    all_good(&s, &text);
    assert!(n(&s, "camera.faults.loss") > 0, "{text}");
    assert!(
        n(&s, "camera.retransmitted") >= n(&s, "camera.faults.loss"),
        "{text}"
    );
    let (code, s, text) = demo(&["--frames", "100", "--fault", "reorder:every=100"]);
    assert_eq!(code, 0, "{text}");
    all_good(&s, &text);
    assert!(n(&s, "camera.faults.reorder") > 0, "{text}");
    assert!(n(&s, "host_roce.out_of_seq_request") > 0, "{text}");
    let (code, s, text) = demo(&["--frames", "100", "--fault", "duplicate:every=100"]);
    assert_eq!(code, 0, "{text}");
    all_good(&s, &text);
    assert!(n(&s, "camera.faults.duplicate") > 0, "{text}");
    assert!(
        n(&s, "host_roce.duplicate_request") >= n(&s, "camera.faults.duplicate"),
        "{text}"
    );

    // whole frames: the host counts them dropped by the camera, and the run is still good
    let (code, s, text) = demo(&["--frames", "100", "--fault", "drop-frame:every=10"]);
    assert_eq!(code, 0, "{text}");
    all_good(&s, &text);
    assert_eq!(n(&s, "camera.faults.drop_frame"), 10, "{text}");
    assert_eq!(n(&s, "frames_dropped"), 10, "{text}");
    assert_eq!(n(&s, "frames_received"), 90, "{text}");

    // a stall and a pulled cable: the stream resumes by itself
    for f in ["stall:for=400ms,at=300ms", "silence:for=600ms,at=300ms"] {
        let (code, s, text) = demo(&["--frames", "100", "--fault", f]);
        assert_eq!(code, 0, "{text}");
        all_good(&s, &text);
        assert_eq!(n(&s, "reconnects"), 0, "{text}");
        let kind = f.split(':').next().unwrap();
        assert_eq!(n(&s, &format!("camera.faults.{kind}")), 1, "{text}");
    }

    // a reboot: the host sees control gone, waits for the camera, and connects again
    let (code, s, text) = demo(&["--frames", "150", "--fault", "reboot:for=1s,at=300ms"]);
    assert_eq!(code, 0, "{text}");
    all_good(&s, &text);
    assert_eq!(n(&s, "camera.faults.reboot"), 1, "{text}");
    assert!(n(&s, "reconnects") >= 1, "{text}");
    assert_eq!(
        n(&s, "camera.orsp_connections"),
        n(&s, "reconnects") + 1,
        "{text}"
    );
}

/// A stream that starts stalled for longer than the camera's heartbeat timeout (3 s): the
/// host, waiting for the HELLO, keeps control all the while (a heartbeat thread through its
/// set-up), and every frame arrives on the first connection. Before, the camera dropped the
/// host's control at 3 s and the demo ended in "no HELLO from the camera within 5 s".
#[test]
fn a_host_keeps_control_through_a_set_up_longer_than_the_heartbeat_timeout() {
    let (code, s, text) = demo(&["--frames", "10", "--fault", "stall:for=4s,at=0s"]);
    assert_eq!(code, 0, "{text}");
    all_good(&s, &text);
    assert_eq!(n(&s, "reconnects"), 0, "{text}");
    assert_eq!(n(&s, "camera.faults.stall"), 1, "{text}");
}

/// A stream stalled for longer than the host's first look at a quiet camera (10 s): the
/// camera still streams and resends nothing, so the host waits, and every frame arrives on the
/// first connection. Before, the host gave up at 10 s without a frame ("the RoCEv2 path is the
/// suspect") and connected again; a camera at 0.1 frames/s lost its connection so at every
/// frame. And the stalled camera sleeps (it spun a core until the stall ended): it wakes
/// every 5 ms, about 2,200 times in 11 s; spinning, it never went to sleep at all.
#[test]
fn a_host_waits_out_a_stall_longer_than_its_look_at_a_quiet_camera() {
    let (code, s, text) = demo(&[
        "--frames",
        "6",
        "--fps",
        "5",
        "--fault",
        "stall:for=11s,at=500ms",
    ]);
    assert_eq!(code, 0, "{text}");
    all_good(&s, &text);
    assert_eq!(n(&s, "reconnects"), 0, "{text}");
    assert_eq!(n(&s, "camera.orsp_connections"), 1, "{text}");
    assert_eq!(n(&s, "camera.faults.stall"), 1, "{text}");
    assert!(n(&s, "camera.idle_wakeups") > 200, "{text}");
}

/// A camera whose packets stop arriving (PacketLoss of every packet from frame 5 on) gives up
/// and says so in OrspStatus; the host, at its look after 10 s without a frame, ends the
/// stream with the camera's account instead of waiting on.
#[test]
fn a_host_ends_the_stream_of_a_camera_whose_packets_stopped_arriving() {
    let ports = (19650, 18000, 18001);
    let cam = camera("127.0.0.1", ports, &[]);
    let mut o = host("127.0.0.1", "127.0.0.1", ports, 100);
    o.reconnects = 0;
    o.inject = vec!["5:PacketLoss:1000000".parse().unwrap()];
    let r = rdmacam_hil::run::run_host(&o, &Arc::new(AtomicBool::new(false)));
    stop(cam);
    let e = format!("{:#}", r.expect_err("the stream cannot go on"));
    // the fault is injected over GVCP once 5 frames have come: a frame already on its way
    // may still arrive (seen beside the other tests on two cores)
    assert!(
        (e.contains("no frame from the camera for 10 s (5 so far)")
            || e.contains("no frame from the camera for 10 s (6 so far)"))
            && e.contains("0x9001")
            && e.contains("retries exhausted"),
        "{e}"
    );
}

/// A host listening where the camera does not send (`--rx-port` other than the camera's
/// `--host-roce-port`) is told which two options disagree, at the 5 s the HELLO may take: the
/// camera took the connection and resent its HELLO. It used to read "is the camera
/// reachable?", and a setup error is not connected again.
#[test]
fn a_host_listening_where_the_camera_does_not_send_is_told_which_options_disagree() {
    let e = host_set_up_wrong((19660, 18010, 18011), |o| o.rx_port = 18012);
    assert!(
        e.contains("took the connection")
            && e.contains("none of it reached 127.0.0.1:18012")
            && e.contains("--host-roce-port 18012")
            && e.contains("--rx-port 18012"),
        "{e}"
    );
}

/// A host sending where the camera does not listen (`--camera-rx-port` other than the
/// camera's `--roce-port`) hears no ACK for its ANNOUNCE: it says where it sent it when its
/// queue pair gives up (4 s), instead of starting the stream, failing and connecting again
/// three times (17 s, each failure read "the camera stopped acknowledging").
#[test]
fn a_host_sending_where_the_camera_does_not_listen_says_so_without_reconnecting() {
    let e = host_set_up_wrong((19661, 18013, 18014), |o| o.camera_rx_port = 18015);
    assert!(
        e.contains("acknowledged none of the buffer ANNOUNCE")
            && e.contains("127.0.0.1:18015")
            && e.contains("--camera-rx-port"),
        "{e}"
    );
}

/// A camera on `ports` and a host whose options `wrong` spoils: the host's error, checked to
/// be a set-up error (not a stream that failed, which would be connected again) after the one
/// connection the camera took.
fn host_set_up_wrong(
    ports: (u16, u16, u16),
    wrong: impl FnOnce(&mut rdmacam_hil::run::HostOptions),
) -> String {
    let cam = camera("127.0.0.1", ports, &[]);
    let mut o = host("127.0.0.1", "127.0.0.1", ports, 10);
    wrong(&mut o);
    let r = rdmacam_hil::run::run_host(&o, &Arc::new(AtomicBool::new(false)));
    let summary = stop(cam);
    let e = r.expect_err("the set-up cannot work");
    assert!(
        e.downcast_ref::<rdmacam_hil::run::StreamFailed>().is_none(),
        "{e:#}"
    );
    assert_eq!(summary[0]["orsp_connections"], 1, "{summary:?}");
    format!("{e:#}")
}

/// `rdmacam run --transport udp` on its own ports; stdout piped (its summary).
fn camera(ip: &str, ports: (u16, u16, u16), extra: &[&str]) -> Child {
    let child = Command::new(env!("CARGO_BIN_EXE_rdmacam"))
        .args(["run", "--transport", "udp", "--ip", ip, "--json"])
        .args(["--gvcp-port", &ports.0.to_string()])
        .args(["--roce-port", &ports.1.to_string()])
        .args(["--host-roce-port", &ports.2.to_string()])
        .args(["--width", "640", "--height", "480", "--duration", "60"])
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // up once the first camera answers DISCOVERY
    let first = ip.split(',').next().unwrap().parse().unwrap();
    common::wait_for_discovery(first, ports.0, Duration::from_secs(10));
    child
}

/// Stop a camera with Ctrl-C and read its JSON summary: one entry per camera.
fn stop(cam: Child) -> Vec<Value> {
    let _ = Command::new("kill")
        .args(["-INT", &cam.id().to_string()])
        .status();
    let out = cam.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    // with --json, stdout is the JSON alone
    let v: Value = serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{e}: {stdout}"));
    v["cameras"].as_array().unwrap().clone()
}

/// The reference host at `local` for the camera at `camera`, at 100 fps, reconnecting twice.
fn host(
    camera: &str,
    local: &str,
    ports: (u16, u16, u16),
    frames: u64,
) -> rdmacam_hil::run::HostOptions {
    rdmacam_hil::run::HostOptions {
        fps: Some(100.0),
        reconnects: 2,
        ..common::host_options(
            camera.parse().unwrap(),
            local.parse().unwrap(),
            ports,
            frames,
        )
    }
}

/// A host says "now": FaultInject through the control channel at chosen frames; each fault
/// shows in the host's summary as it happened and in the camera's count.
#[test]
fn a_host_injects_faults_at_the_moment_it_chooses() {
    let ports = (19610, 17960, 17961);
    let cam = camera("127.0.0.1", ports, &[]);
    let mut o = host("127.0.0.1", "127.0.0.1", ports, 200);
    o.inject = [
        "20:FrameDrop:3",
        "50:StreamStall:300",
        "80:PacketCorrupt:5",
        "110:EcnMark:4",
        "140:ControlSilence:400",
    ]
    .iter()
    .map(|s| s.parse().unwrap())
    .collect();
    let s = rdmacam_hil::run::run_host(&o, &Arc::new(AtomicBool::new(false)));
    // a bystander (not in control) injects nothing: refused ACCESS_DENIED, which it can read
    let mut g = rdmacam_hil::gvcp::GvcpClient::new(
        std::net::Ipv4Addr::new(127, 0, 0, 9),
        std::net::SocketAddrV4::new(std::net::Ipv4Addr::LOCALHOST, ports.0),
    )
    .unwrap();
    g.write(0x0A00, 2).unwrap(); // control is free again: take it
    let mut bystander = rdmacam_hil::gvcp::GvcpClient::new(
        std::net::Ipv4Addr::new(127, 0, 0, 10),
        std::net::SocketAddrV4::new(std::net::Ipv4Addr::LOCALHOST, ports.0),
    )
    .unwrap();
    let refused = bystander.write(rdmacam_protocol::device::regs::FAULT_INJECT, 1);
    assert!(
        matches!(refused, Err(rdmacam_hil::gvcp::GvcpError::Status(0x8006))),
        "{refused:?}"
    );
    g.write(0x0A00, 0).unwrap();
    let cams = stop(cam);
    let s = s.expect("the host streams through every fault");
    assert_eq!(s.frames_bad, 0, "{s:?}");
    assert_eq!(s.frames_dropped, 3, "{s:?}");
    assert_eq!(s.frames_received, 197, "{s:?}");
    assert_eq!(s.host_roce.bad_icrc, 5, "{s:?}");
    assert_eq!(s.host_roce.ecn_marked, 4, "{s:?}");
    assert_eq!(s.reconnects, 0, "{s:?}");
    let f = &cams[0]["faults"];
    assert_eq!(
        [
            &f["drop_frame"],
            &f["stall"],
            &f["corrupt"],
            &f["ecn"],
            &f["silence"]
        ],
        [3, 1, 5, 4, 1],
        "{f}"
    );
    assert!(n(&cams[0], "retransmitted") >= 5, "{}", cams[0]);
}

/// The camera's counters and block ids run on across connections; each host reports its own
/// stream. A first host meets 4 dropped frames and corrupted packets (resent); a second host
/// on the same camera then reports 0 dropped, 0 retransmitted, and its own frames expected,
/// with --frames and without. Before, the second host took the camera's totals from
/// STREAM_END and the retransmission counter: 4 dropped, the first host's resends, and
/// without --frames every block id since the camera started as expected.
#[test]
fn a_second_host_on_a_camera_reports_only_its_own_stream() {
    let ports = (19630, 17980, 17981);
    let cam = camera("127.0.0.1", ports, &[]);
    let run = |o: &rdmacam_hil::run::HostOptions| {
        rdmacam_hil::run::run_host(o, &Arc::new(AtomicBool::new(false))).expect("the host streams")
    };
    let mut o = host("127.0.0.1", "127.0.0.1", ports, 30);
    o.inject = ["5:FrameDrop:4", "10:PacketCorrupt:3"]
        .iter()
        .map(|s| s.parse().unwrap())
        .collect();
    let first = run(&o);
    assert_eq!(
        (
            first.frames_expected,
            first.frames_received,
            first.frames_dropped
        ),
        (30, 26, 4),
        "{first:?}"
    );
    assert!(first.retransmitted_packets >= 3, "{first:?}");
    let second = run(&host("127.0.0.1", "127.0.0.1", ports, 20));
    assert_eq!(
        (
            second.frames_expected,
            second.frames_received,
            second.frames_dropped,
            second.retransmitted_packets
        ),
        (20, 20, 0, 0),
        "{second:?}"
    );
    // no --frames: a second's worth, and what it expects is what this host's stream held
    let third = run(&rdmacam_hil::run::HostOptions {
        frames: None,
        duration: Some(Duration::from_secs(1)),
        ..host("127.0.0.1", "127.0.0.1", ports, 1)
    });
    assert!(third.ok(), "{third:?}");
    assert_eq!(third.frames_dropped, 0, "{third:?}");
    assert_eq!(third.frames_expected, third.frames_received, "{third:?}");
    assert!((50..=150).contains(&third.frames_received), "{third:?}");
    // the camera counts the frames it sent: 26, 20 and the third host's
    let cams = stop(cam);
    assert_eq!(
        cams[0]["orsp_frames"],
        26 + 20 + third.frames_received,
        "{cams:?}"
    );
}

/// Several cameras over ORSP at once from one process, each into its own host, with a fault
/// aimed at one of them: every frame of every camera checked, the fault only where aimed.
#[test]
fn three_cameras_stream_orsp_at_once_and_a_fault_hits_only_its_camera() {
    let ports = (19620, 17970, 17971);
    let cam = camera(
        "127.0.0.31,127.0.0.32,127.0.0.33",
        ports,
        &["--fault", "cam2:drop-frame:every=10"],
    );
    let hosts: Vec<_> = (1..=3)
        .map(|k| {
            let o = host(
                &format!("127.0.0.3{k}"),
                &format!("127.0.1.3{k}"),
                ports,
                100,
            );
            std::thread::spawn(move || {
                rdmacam_hil::run::run_host(&o, &Arc::new(AtomicBool::new(false)))
            })
        })
        .collect();
    let summaries: Vec<_> = hosts.into_iter().map(|h| h.join().unwrap()).collect();
    let cams = stop(cam);
    for (k, s) in summaries.into_iter().enumerate() {
        let s = s.unwrap_or_else(|e| panic!("camera {}: {e:#}", k + 1));
        assert_eq!(s.frames_bad, 0, "camera {}: {s:?}", k + 1);
        let dropped = if k == 1 { 10 } else { 0 };
        assert_eq!(s.frames_dropped, dropped, "camera {}: {s:?}", k + 1);
        assert_eq!(s.frames_received, 100 - dropped, "camera {}: {s:?}", k + 1);
        assert_eq!(n(&cams[k], "faults.drop_frame"), dropped, "{}", cams[k]);
        assert_eq!(cams[k]["ip"], format!("127.0.0.3{}", k + 1));
    }
}

/// A fault lasts no longer than the control of the host that asked for it. One datagram from
/// a host that finds control free (WRITEREG of CCP, ControlSilence, 600 s, FaultInject) left
/// the camera deaf for ten minutes, long after that host's control had expired. Now the
/// camera's heartbeat timer runs through the silence (3 s at the defaults, a pulled cable's
/// worth), control expires, and the silence ends with it.
#[test]
fn a_silence_ends_with_the_control_of_the_host_that_asked_for_it() {
    use rdmacam_protocol::device::regs;
    let ports = (19680, 18030, 18031);
    let cam = camera("127.0.0.1", ports, &[]);
    let at = std::net::SocketAddrV4::new(std::net::Ipv4Addr::LOCALHOST, ports.0);
    let mut passer = rdmacam_hil::gvcp::GvcpClient::new([127, 0, 0, 12].into(), at).unwrap();
    let mut p = Vec::new();
    for (a, v) in [
        (0x0A00, 2),
        (regs::FAULT_SELECTOR, 6), // ControlSilence
        (regs::FAULT_DURATION, 600_000),
        (regs::FAULT_INJECT, 1),
    ] {
        p.extend_from_slice(&u32::to_be_bytes(a));
        p.extend_from_slice(&u32::to_be_bytes(v));
    }
    // the acknowledge may or may not leave before the silence: either is fine
    let _ = passer.command(rdmacam_protocol::gev::gvcp::cmd::WRITEREG, &p);
    let t0 = std::time::Instant::now();
    let mut host = rdmacam_hil::gvcp::GvcpClient::new([127, 0, 0, 13].into(), at).unwrap();
    std::thread::sleep(Duration::from_millis(500));
    // silent at first: the fault happened
    assert!(host.read(0x0A00).is_err(), "the camera did not go silent");
    let back = loop {
        if let Ok(ccp) = host.read(0x0A00) {
            break (t0.elapsed(), ccp);
        }
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "still deaf after 10 s: the silence outlived the control that asked for it"
        );
    };
    // nobody holds control any more, and the camera is back within the heartbeat timeout
    assert_eq!(back.1, 0, "{back:?}");
    assert!(back.0 < Duration::from_secs(8), "{back:?}");
    let cams = stop(cam);
    assert_eq!(cams[0]["faults"]["silence"], 1, "{}", cams[0]);
}

/// The camera checks the ICRC of what it receives, as an RDMA NIC does: a bystander's forged
/// acknowledgements with a wrong ICRC (an RC NAK "from" the host's address, any port) are
/// dropped unread and counted, and the host's stream goes on undisturbed. Before, the camera
/// read every RoCEv2 packet whatever its ICRC, so garbage in it stopped a stream as well as a
/// correct one.
#[test]
fn packets_with_a_bad_icrc_are_dropped_unread_and_counted() {
    let ports = (19690, 18040, 18041);
    let cam = camera("127.0.0.1", ports, &[]);
    let o = host("127.0.0.1", "127.0.0.1", ports, 60);
    let h = std::thread::spawn(move || {
        rdmacam_hil::run::run_host(&o, &Arc::new(AtomicBool::new(false)))
    });
    let forger = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let mut sent = 0u64;
    for i in 0..200u32 {
        // BTH: ACKNOWLEDGE, P_Key 0xFFFF, any QP, PSN i; AETH: NAK sequence error (0x60);
        // an ICRC of garbage
        let mut p = vec![0x11, 0x00, 0xff, 0xff, 0, 0, 0x01, 0x00];
        p.extend_from_slice(&i.to_be_bytes());
        p.extend_from_slice(&[0x60, 0, 0, 1]);
        p.extend_from_slice(&[0xde, 0xad, 0xbe, 0xef]);
        forger.send_to(&p, ("127.0.0.1", ports.1)).unwrap();
        sent += 1;
        std::thread::sleep(Duration::from_millis(1));
    }
    let s = h.join().unwrap().expect("the host streams");
    let cams = stop(cam);
    assert_eq!(s.frames_received, 60, "{s:?}");
    // a wrong ICRC passes the check once in 2^15 by chance (the IPv4 identification and DF,
    // which a UDP socket does not hand over, span 17 of its 32 bits): one of 200 may
    let bad = n(&cams[0], "bad_icrc");
    assert!(
        (sent - 2..=sent).contains(&bad),
        "{bad} of {sent}: {}",
        cams[0]
    );
    assert_eq!(n(&cams[0], "retransmitted"), 0, "{}", cams[0]);
}

/// A run without --frames that loses its camera and reconnects counts as expected what the
/// camera sent and dropped in every connection, the lost one included. The lost connection's
/// share was 0: after a silence longer than the heartbeat, the host printed "237 of 147 frames
/// received" and exited 0.
#[test]
fn a_run_that_reconnects_never_expects_fewer_frames_than_it_received() {
    let ports = (19700, 18050, 18051);
    let cam = camera("127.0.0.1", ports, &[]);
    let mut o = host("127.0.0.1", "127.0.0.1", ports, 0);
    o.frames = None;
    o.duration = Some(Duration::from_secs(6));
    o.inject = vec!["40:ControlSilence:5000".parse().unwrap()];
    let r = rdmacam_hil::run::run_host(&o, &Arc::new(AtomicBool::new(false)));
    stop(cam);
    let s = match r {
        Ok(s) => s,
        Err(e) => e
            .downcast_ref::<rdmacam_hil::run::StreamFailed>()
            .unwrap_or_else(|| panic!("{e:#}"))
            .summary
            .clone(),
    };
    assert!(
        s.reconnects >= 1,
        "the camera was lost and found again: {s:?}"
    );
    assert!(s.frames_received > 40, "{s:?}");
    assert!(
        s.frames_expected >= s.frames_received + s.frames_dropped,
        "{} of {} frames received: {s:?}",
        s.frames_received,
        s.frames_expected
    );
}
