//! `rdmacam inspect` against independent bytes: the reference vectors A-G (text2pcap of the hex
//! in reference/rocev2.md) and the captures Linux rxe produced in the lab.

use std::borrow::Cow;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use pcap_file::DataLink;
use pcap_file::pcap::{PcapHeader, PcapPacket, PcapReader, PcapWriter};
use pcap_file::pcapng::PcapNgWriter;
use pcap_file::pcapng::blocks::enhanced_packet::EnhancedPacketBlock;
use pcap_file::pcapng::blocks::interface_description::InterfaceDescriptionBlock;
use rdmacam::inspect::analyze;

fn testdata(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../testdata")
        .join(name)
}

fn inspect(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_rdmacam"))
        .arg("inspect")
        .args(args)
        .output()
        .expect("run rdmacam");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    )
}

fn read_pcap(path: &Path) -> Vec<Vec<u8>> {
    let mut r = PcapReader::new(std::fs::File::open(path).unwrap()).unwrap();
    let mut v = Vec::new();
    while let Some(p) = r.next_packet() {
        v.push(p.unwrap().data.into_owned());
    }
    v
}

fn write_pcap(path: &Path, link: DataLink, frames: &[Vec<u8>]) {
    let header = PcapHeader {
        datalink: link,
        ..Default::default()
    };
    let mut w = PcapWriter::with_header(std::fs::File::create(path).unwrap(), header).unwrap();
    for (i, f) in frames.iter().enumerate() {
        w.write_packet(&PcapPacket::new(
            Duration::from_micros(i as u64),
            f.len() as u32,
            f,
        ))
        .unwrap();
    }
}

fn packet_lines(stdout: &str) -> Vec<&str> {
    stdout
        .lines()
        .filter(|l| !l.starts_with("summary:"))
        .collect()
}

#[test]
fn reference_vectors_a_to_g_all_have_good_icrc() {
    let (code, out, _) = inspect(&[testdata("rocev2-vectors-a-g.pcap").to_str().unwrap()]);
    assert_eq!(code, 0, "{out}");
    let lines = packet_lines(&out);
    assert_eq!(lines.len(), 7);
    assert!(lines.iter().all(|l| l.ends_with("icrc=ok")), "{out}");
    let ops: Vec<&str> = lines.iter().map(|l| l.split(' ').nth(5).unwrap()).collect();
    assert_eq!(
        ops,
        [
            "RC_RDMA_WRITE_ONLY",
            "RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE",
            "RC_SEND_ONLY_WITH_IMMEDIATE",
            "RC_ACKNOWLEDGE",
            "RC_ACKNOWLEDGE",
            "CNP",
            "RC_RDMA_WRITE_ONLY"
        ]
    );
    assert!(lines[4].contains("aeth=nak(psn-sequence-error)"));
    assert!(lines[6].starts_with("7 fd00::2 -> fd00::1 qpn=0x000011"));
    let summary = out.lines().last().unwrap();
    assert!(summary.starts_with("summary: 7 RoCE packets"));
    assert!(!summary.contains("icrc=ok") && !summary.contains("icrc=bad"));
}

/// `-` reads the capture from standard input (`tcpdump -w - | rdmacam inspect -`): the same
/// verdicts as from the file, and an empty pipe is an unreadable capture (exit 2).
#[test]
fn a_capture_on_standard_input_is_judged_as_from_its_file() {
    let piped = |bytes: &[u8]| {
        let mut child = Command::new(env!("CARGO_BIN_EXE_rdmacam"))
            .args(["inspect", "-"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        std::io::Write::write_all(&mut child.stdin.take().unwrap(), bytes).unwrap();
        let out = child.wait_with_output().unwrap();
        (
            out.status.code(),
            String::from_utf8(out.stdout).unwrap(),
            String::from_utf8(out.stderr).unwrap(),
        )
    };
    let file = testdata("rocev2-vectors-a-g.pcap");
    let (_, from_file, _) = inspect(&[file.to_str().unwrap()]);
    let (code, out, _) = piped(&std::fs::read(&file).unwrap());
    assert_eq!((code, out), (Some(0), from_file));
    let (code, _, err) = piped(b"");
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("cannot read standard input"), "{err}");
}

/// The lab's sender spoiled the ICRC of exactly these packets on purpose (wrong IP ID, a flipped
/// ICRC, a UDP GSO send whose segments after the first carry the first one's IP ID in their
/// ICRC); everything rxe itself sent (from 198.18.0.1) is good.
const SPOILED: [u64; 5] = [13, 26, 40, 41, 70];

/// The two UDP GSO sends of the lab (captured whole on the veth, before segmentation): 4
/// segments each; rxe took all four of the first (ICRCs made with IP IDs 0, 1, 2, 3) and only
/// the first of the second (all made with ID 0), as the lab's scenario log records
/// (`udp_gso_ids_0123`, `udp_gso_ids_all0`: rcvd_pkts 4 and 1).
const GSO_SENDS: [(u64, &str); 2] = [
    (68, "4 segments of 288 bytes, each ICRC good"),
    (70, "4 segments of 288 bytes; bad ICRC in segment 2, 3, 4 "),
];

#[test]
fn rxe_captures_are_judged_like_the_kernel_judged_them() {
    for cap in ["rxe-6.12-handbuilt.pcap", "rxe-6.1-handbuilt.pcap"] {
        let (code, out, _) = inspect(&[testdata(cap).to_str().unwrap()]);
        assert_eq!(code, 1, "{cap}: a spoiled packet means exit 1");
        let lines = packet_lines(&out);
        assert_eq!(lines.len(), 75, "{cap}");
        let mut rxe_sent = 0;
        for line in lines {
            let index: u64 = line.split(' ').next().unwrap().parse().unwrap();
            let want_bad = SPOILED.contains(&index);
            assert_eq!(line.contains(" icrc=bad"), want_bad, "{cap}: {line}");
            assert_eq!(line.contains(" icrc=ok"), !want_bad, "{cap}: {line}");
            match GSO_SENDS.iter().find(|(i, _)| *i == index) {
                Some((_, what)) => assert!(
                    line.contains("a UDP GSO send captured before segmentation: ")
                        && line.contains(what),
                    "{cap}: {line}"
                ),
                None => assert!(!line.contains("GSO"), "{cap}: {line}"),
            }
            if line.contains(" 198.18.0.1 -> ") {
                rxe_sent += 1;
                assert!(line.contains("RC_ACKNOWLEDGE"), "{line}");
            }
            if want_bad {
                assert!(line.contains(" 198.18.0.2 -> "), "{line}");
            }
        }
        assert!(rxe_sent >= 20, "{cap}: rxe sent {rxe_sent} ACK/NAKs");
    }
}

/// Byte ranges (from the IP header) that the ICRC masks, or that identify the packet as RoCE at
/// all (a damaged destination port makes it another UDP packet).
fn exempt(ip_off: usize, v6: bool, at: usize) -> bool {
    let r = at.wrapping_sub(ip_off);
    if at < ip_off {
        return true; // Ethernet: not covered
    }
    if v6 {
        matches!(r, 0..=3 | 7 | 42 | 43 | 46 | 47 | 52)
    } else {
        matches!(r, 1 | 8 | 10 | 11 | 22 | 23 | 26 | 27 | 32)
    }
}

#[test]
fn any_single_bit_flip_outside_masked_fields_is_caught() {
    let mut frames = read_pcap(&testdata("rocev2-vectors-a-g.pcap"));
    let rxe = read_pcap(&testdata("rxe-6.12-handbuilt.pcap"));
    // packets 1 (WRITE ONLY), 2 (rxe's ACK), 3 (WRITE FIRST), 17 (rxe's NAK)
    frames.extend([0, 1, 2, 16].map(|i| rxe[i].clone()));
    let mut flips = 0;
    for f in &frames {
        let v6 = f[12..14] == [0x86, 0xdd];
        assert_eq!(analyze(1, DataLink::ETHERNET, f, 4791).unwrap().icrc, "ok");
        for at in 0..f.len() {
            if exempt(14, v6, at) {
                continue;
            }
            for bit in 0..8 {
                let mut m = f.clone();
                m[at] ^= 1 << bit;
                let p = analyze(1, DataLink::ETHERNET, &m, 4791)
                    .unwrap_or_else(|| panic!("byte {at} bit {bit}: no longer seen as RoCE"));
                assert_eq!(
                    p.icrc,
                    "bad",
                    "byte {at} bit {bit} of a {}-byte frame",
                    f.len()
                );
                flips += 1;
            }
        }
    }
    assert!(flips > 10_000, "{flips}");
}

#[test]
fn flipped_bit_makes_the_cli_exit_1() {
    let dir = tempfile::tempdir().unwrap();
    let mut frames = read_pcap(&testdata("rocev2-vectors-a-g.pcap"));
    frames[3][50] ^= 0x10; // vector D's PSN
    let p = dir.path().join("flipped.pcap");
    write_pcap(&p, DataLink::ETHERNET, &frames);
    let (code, out, _) = inspect(&[p.to_str().unwrap()]);
    assert_eq!(code, 1);
    let bad: Vec<&str> = out.lines().filter(|l| l.ends_with("icrc=bad")).collect();
    assert_eq!(bad.len(), 1);
    assert!(bad[0].starts_with("4 "));
}

#[test]
fn vlan_tags_pcapng_and_cooked_captures_are_read() {
    let dir = tempfile::tempdir().unwrap();
    let frames = read_pcap(&testdata("rocev2-vectors-a-g.pcap"));
    // 802.1Q tag (PCP 3, VID 100) inserted after the MACs, written as pcapng
    let tagged: Vec<Vec<u8>> = frames
        .iter()
        .map(|f| [&f[..12], &[0x81, 0x00, 0x60, 0x64][..], &f[12..]].concat())
        .collect();
    let ng = dir.path().join("tagged.pcapng");
    {
        let mut w = PcapNgWriter::new(std::fs::File::create(&ng).unwrap()).unwrap();
        w.write_pcapng_block(InterfaceDescriptionBlock {
            linktype: DataLink::ETHERNET,
            snaplen: 0,
            options: vec![],
        })
        .unwrap();
        for f in &tagged {
            w.write_pcapng_block(EnhancedPacketBlock {
                interface_id: 0,
                timestamp: Duration::ZERO,
                original_len: f.len() as u32,
                data: Cow::Borrowed(f),
                options: vec![],
            })
            .unwrap();
        }
    }
    let (code, out, _) = inspect(&[ng.to_str().unwrap()]);
    assert_eq!(code, 0, "{out}");
    let lines = packet_lines(&out);
    assert_eq!(lines.len(), 7);
    assert!(
        lines
            .iter()
            .all(|l| l.contains("vlan=100") && l.ends_with("icrc=ok"))
    );

    // Linux cooked capture v1 (tcpdump -i any): 16-byte header, protocol at 14..16
    let sll: Vec<Vec<u8>> = frames
        .iter()
        .map(|f| [&[0, 0, 0, 1, 0, 6][..], &f[6..12], &[0, 0], &f[12..]].concat())
        .collect();
    let p = dir.path().join("sll.pcap");
    write_pcap(&p, DataLink::LINUX_SLL, &sll);
    let (code, out, _) = inspect(&[p.to_str().unwrap()]);
    assert_eq!(code, 0, "{out}");
    assert_eq!(packet_lines(&out).len(), 7);
}

#[test]
fn json_lines_carry_the_documented_fields() {
    let (code, out, _) = inspect(&[
        testdata("rocev2-vectors-a-g.pcap").to_str().unwrap(),
        "--json",
    ]);
    assert_eq!(code, 0);
    let rows: Vec<serde_json::Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(rows.len(), 8);
    let b = &rows[1];
    assert_eq!(b["index"], 2);
    assert_eq!(b["version"], "RoCEv2");
    assert_eq!(b["src"], "192.168.10.2");
    assert_eq!(b["dst_port"], 4791);
    assert_eq!(b["qpn"], 0x11);
    assert_eq!(b["opcode"], "RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE");
    assert_eq!(b["opcode_value"], 0x0b);
    assert_eq!(b["psn"], 0x101);
    assert_eq!(b["payload_len"], 13);
    assert_eq!(b["icrc"], "ok");
    assert_eq!(b["icrc_carried"], "0x4fed8dd6");
    let s = &rows[7]["summary"];
    assert_eq!(
        (s["roce_packets"].as_u64(), s["icrc_bad"].as_u64()),
        (Some(7), Some(0))
    );
}

#[test]
fn unknown_opcode_and_other_port() {
    let dir = tempfile::tempdir().unwrap();
    let mut frames = read_pcap(&testdata("rocev2-vectors-a-g.pcap"));
    frames[0][42] = 0x1f; // opcode of vector A -> unknown, ICRC now wrong too
    let p = dir.path().join("unknown.pcap");
    write_pcap(&p, DataLink::ETHERNET, &frames);
    let (code, out, _) = inspect(&[p.to_str().unwrap()]);
    assert_eq!(code, 1);
    assert!(
        out.lines()
            .next()
            .unwrap()
            .contains("unknown(0x1f) psn=256 len=- icrc=bad"),
        "{out}"
    );
    // --port: nothing is RoCE on 4792
    let (code, out, _) = inspect(&[p.to_str().unwrap(), "--port", "4792"]);
    assert_eq!(code, 0);
    assert!(out.starts_with("summary: 0 RoCE packets"));
    assert!(out.contains("7 other packets skipped"));
}

#[test]
fn unreadable_file_exits_2_with_a_message() {
    let (code, out, err) = inspect(&["/nonexistent/x.pcap"]);
    assert_eq!((code, out.as_str()), (2, ""));
    assert!(err.contains("cannot open /nonexistent/x.pcap"), "{err}");
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("junk.pcap");
    std::fs::write(&p, b"this is not a capture at all").unwrap();
    let (code, _, err) = inspect(&[p.to_str().unwrap()]);
    assert_eq!(code, 2);
    assert!(err.contains("not a readable capture"), "{err}");
}

#[test]
fn a_capture_from_the_soft_roce_vm_with_a_cut_tail_reads_and_flags_rebuilt_headers() {
    // `rdmacam run --pcap` in the VM, killed mid-write: 16 whole packets, then half of one.
    // Received packets carry rebuilt IP headers (rxe's IP identification is not known).
    let out = Command::new(env!("CARGO_BIN_EXE_rdmacam"))
        .arg("inspect")
        .arg(testdata("rxe-cm-session.pcapng"))
        .output()
        .unwrap();
    let stdout = String::from_utf8(out.stdout).unwrap();
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert_eq!(out.status.code(), Some(0), "{stdout}{stderr}");
    assert!(
        stderr.contains("cut packet after 16 whole ones"),
        "{stderr}"
    );
    assert_eq!(stdout.matches("icrc=unverifiable").count(), 5, "{stdout}");
    assert_eq!(stdout.matches("icrc=ok").count(), 11, "{stdout}");
    assert!(
        stdout.contains("5 received packets unverifiable"),
        "{stdout}"
    );
}

mod common;

#[test]
fn both_directions_of_a_conversation_on_any_ports_are_followed() {
    // a camera and a host on ports other than 4791 (as the README's loopback pair): the
    // camera's own capture holds its WRITEs and SENDs to the host's port, and the host's
    // ACKs to its port (received: headers rebuilt, so unverifiable, yet RoCE)
    use std::sync::Arc;
    use std::sync::atomic::AtomicBool;
    let dir = tempfile::tempdir().unwrap();
    let cap = dir.path().join("pair.pcapng");
    let ports = (19592, 17954, 17955);
    let cam = common::udp_camera(ports)
        .args(["--duration", "4"])
        .args(["--width", "64", "--height", "16", "--pcap"])
        .arg(&cap)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    common::wait_for_discovery(
        std::net::Ipv4Addr::LOCALHOST,
        19592,
        Duration::from_secs(10),
    );
    let lo = std::net::Ipv4Addr::LOCALHOST;
    let r = rdmacam_hil::run::run_host(
        &common::host_options(lo, lo, ports, 3),
        &Arc::new(AtomicBool::new(false)),
    )
    .unwrap();
    assert_eq!(r.frames_received, 3, "{r:?}");
    assert!(cam.wait_with_output().unwrap().status.success());
    // before: nothing, the default --port 4791 matched neither end
    let (code, out, err) = inspect(&[cap.to_str().unwrap(), "--json"]);
    assert_eq!(code, 0, "{out}{err}");
    let packets: Vec<serde_json::Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .filter(|v: &serde_json::Value| v.get("summary").is_none())
        .collect();
    let to = |port: u64| {
        packets
            .iter()
            .filter(|p| p["dst_port"].as_u64() == Some(port))
            .map(|p| p["opcode"].as_str().unwrap().to_string())
            .collect::<Vec<_>>()
    };
    // the camera's WRITEs to the host's port, the host's ACKs to the camera's
    assert!(to(17955).iter().any(|o| o.contains("WRITE")), "{out}");
    assert!(to(17954).iter().any(|o| o.contains("ACKNOWLEDGE")), "{out}");
    assert!(packets.iter().all(|p| p["icrc"] != "bad"), "{out}");
    let (_, text, _) = inspect(&[cap.to_str().unwrap()]);
    assert!(text.contains("0 with a bad ICRC"), "{text}");
}

/// A capture damaged before its end is not a clean bill: what is read is judged and printed,
/// and the exit status is 2 with the byte where reading stopped. Before, a damaged record
/// header mid-file was taken for a cut tail, the packets after it (a bad ICRC among them) went
/// unread, and `inspect` exited 0. A cut last record stays a warning (exit 0).
#[test]
fn a_capture_damaged_before_its_end_exits_2_and_says_where() {
    let mut good = std::fs::read(testdata("rocev2-vectors-a-g.pcap")).unwrap();
    // spoil the last packet's ICRC: a verdict the damage must not hide
    let n = good.len();
    good[n - 1] ^= 0xff;
    // the third record's captured length: past any snap length
    let mut at = 24;
    for _ in 0..2 {
        let incl = u32::from_le_bytes(good[at + 8..at + 12].try_into().unwrap()) as usize;
        at += 16 + incl;
    }
    let mut damaged = good.clone();
    damaged[at + 8..at + 12].copy_from_slice(&0x00ff_ffffu32.to_le_bytes());
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("damaged.pcap");
    std::fs::write(&p, &damaged).unwrap();
    let (code, out, err) = inspect(&[p.to_str().unwrap()]);
    assert_eq!(code, 2, "{out}{err}");
    assert!(out.contains("summary: 2 RoCE packets"), "{out}");
    assert!(
        err.contains(&format!("is damaged at byte {at}, after 2 whole packets")),
        "{err}"
    );
    // the same file cut inside its last record: a warning, and the verdicts of the rest
    let cut = &good[..n - 10];
    std::fs::write(&p, cut).unwrap();
    let (code, out, err) = inspect(&[p.to_str().unwrap()]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(err.contains("cut packet after 6 whole ones"), "{err}");
}

/// `--port 0` matched nothing, checked nothing and exited 0: it is refused.
#[test]
fn port_0_is_refused() {
    let (code, _, err) = inspect(&["--port", "0", "x.pcap"]);
    assert_eq!(code, 2);
    assert!(err.contains("0 is not in 1..=65535"), "{err}");
}
