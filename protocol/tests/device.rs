//! The GigE Vision device, driven with GVCP datagrams written out byte by byte in the format
//! aravis sends (`arvgvcp.c`: header 0x42, flags 0x01, command, length, request id).

use std::net::{Ipv4Addr, SocketAddrV4};

use proptest::prelude::*;
use rdmacam_protocol::device::frame::FrameSource;
use rdmacam_protocol::device::pattern::SyntheticSource;
use rdmacam_protocol::device::{Device, DeviceConfig, DeviceEvent, GENICAM_XML, regs};
use rdmacam_protocol::gev::PixelFormat;
use rdmacam_protocol::gev::gvsp::{Format, Header, ImageLeader};
use rdmacam_protocol::rc::Instant;

const CAM: Ipv4Addr = Ipv4Addr::new(192, 168, 1, 10);
const HOST_A: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::new(192, 168, 1, 2), 50000);
const HOST_B: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::new(192, 168, 1, 3), 50001);

fn device() -> Device {
    let mut cfg = DeviceConfig::new(CAM, [0x02, 0x52, 1, 2, 3, 4], "SN42");
    cfg.width = 64;
    cfg.height = 32;
    Device::new(cfg)
}

fn cmd(command: u16, req_id: u16, payload: &[u8]) -> Vec<u8> {
    let mut v = vec![0x42, 0x01];
    v.extend_from_slice(&command.to_be_bytes());
    v.extend_from_slice(&(payload.len() as u16).to_be_bytes());
    v.extend_from_slice(&req_id.to_be_bytes());
    v.extend_from_slice(payload);
    v
}

fn words(ws: &[u32]) -> Vec<u8> {
    ws.iter().flat_map(|w| w.to_be_bytes()).collect()
}

/// Send a command; returns (status, ack code, payload).
fn ask(
    d: &mut Device,
    now_ms: u64,
    src: SocketAddrV4,
    datagram: &[u8],
) -> Option<(u16, u16, Vec<u8>)> {
    let mut out = [0u8; 600];
    let r = d.handle_gvcp(Instant::from_millis(now_ms), src, datagram, &mut out)?;
    let b = &out[..r.len];
    Some((
        u16::from_be_bytes([b[0], b[1]]),
        u16::from_be_bytes([b[2], b[3]]),
        b[8..].to_vec(),
    ))
}

fn write(d: &mut Device, now: u64, src: SocketAddrV4, addr: u32, v: u32) -> u16 {
    ask(d, now, src, &cmd(0x82, 1, &words(&[addr, v])))
        .unwrap()
        .0
}

fn read(d: &mut Device, now: u64, src: SocketAddrV4, addr: u32) -> (u16, u32) {
    let (st, _, p) = ask(d, now, src, &cmd(0x80, 1, &words(&[addr]))).unwrap();
    (
        st,
        p.get(..4)
            .map_or(0, |w| u32::from_be_bytes(w.try_into().unwrap())),
    )
}

#[test]
fn discovery_ack_carries_the_bootstrap_block() {
    let mut d = device();
    let (st, ack, p) = ask(
        &mut d,
        0,
        HOST_A,
        &[0x42, 0x01, 0x00, 0x02, 0x00, 0x00, 0xff, 0xff],
    )
    .unwrap();
    assert_eq!((st, ack, p.len()), (0, 0x0003, 0xf8));
    assert_eq!(&p[0..4], &[0, 2, 0, 2], "GEV 2.2");
    assert_eq!(&p[4..8], &[0x80, 0, 0, 1], "big-endian transmitter, UTF-8");
    assert_eq!(
        &p[8..16],
        &[0, 0, 0x02, 0x52, 0, 0, 0, 0][..2]
            .iter()
            .chain(&[0x02, 0x52, 1, 2, 3, 4])
            .copied()
            .collect::<Vec<_>>()[..]
    );
    assert_eq!(&p[0x24..0x28], &CAM.octets());
    assert!(p[0x48..].starts_with(b"rdmacam\0"));
    assert!(p[0xd8..].starts_with(b"SN42\0"));
}

#[test]
fn readreg_of_several_addresses_and_errors() {
    let mut d = device();
    let (st, ack, p) = ask(
        &mut d,
        0,
        HOST_A,
        &cmd(0x80, 9, &words(&[0x0, 0x904, regs::WIDTH])),
    )
    .unwrap();
    assert_eq!((st, ack), (0, 0x81));
    assert_eq!(p, words(&[0x0002_0002, 1, 64]));
    assert_eq!(read(&mut d, 0, HOST_A, 0x902).0, 0x8005, "BAD_ALIGNMENT");
    assert_eq!(
        read(&mut d, 0, HOST_A, 0x0900_0000).0,
        0x8003,
        "INVALID_ADDRESS"
    );
    // unknown command with ACK required -> NOT_IMPLEMENTED; without -> silence
    assert_eq!(
        ask(&mut d, 0, HOST_A, &cmd(0xF0, 3, &[])).unwrap().0,
        0x8001
    );
    let mut no_ack = cmd(0xF0, 3, &[]);
    no_ack[1] = 0;
    assert!(ask(&mut d, 0, HOST_A, &no_ack).is_none());
    // not GVCP at all
    assert!(ask(&mut d, 0, HOST_A, b"hello").is_none());
}

#[test]
fn genicam_xml_is_readable_through_the_first_url() {
    let mut d = device();
    let (st, _, p) = ask(&mut d, 0, HOST_A, &cmd(0x84, 2, &words(&[0x200, 64]))).unwrap();
    assert_eq!(st, 0);
    let url = std::str::from_utf8(&p[4..]).unwrap().trim_end_matches('\0');
    assert_eq!(
        url,
        format!("Local:rdmacam.xml;20000;{:x}", GENICAM_XML.len())
    );
    let (_, _, p) = ask(
        &mut d,
        0,
        HOST_A,
        &cmd(0x84, 3, &words(&[regs::XML_BASE, 512])),
    )
    .unwrap();
    assert_eq!(&p[4..], &GENICAM_XML.as_bytes()[..512]);
}

#[test]
fn nobody_writes_without_control_not_even_while_nobody_holds_it() {
    // a camera nobody controls: a bystander's writes are refused with a status it can read,
    // the stream destination, the image and fault injection alike; reads stay open
    let mut d = device();
    for (addr, v) in [
        (regs::FAULT_INJECT, 1),
        (regs::SCDA0, u32::from(*HOST_B.ip())),
        (regs::WIDTH, 32),
        (regs::HEARTBEAT_TIMEOUT, 600_000),
    ] {
        assert_eq!(write(&mut d, 0, HOST_B, addr, v), 0x8006, "{addr:#x}");
    }
    assert_eq!(read(&mut d, 0, HOST_B, regs::WIDTH), (0, 64));
    assert_eq!(read(&mut d, 0, HOST_B, regs::SCDA0), (0, 0));
    // taking control is the one write open to all; then that host writes
    assert_eq!(write(&mut d, 1, HOST_B, regs::CCP, 2), 0);
    assert_eq!(write(&mut d, 1, HOST_B, regs::WIDTH, 32), 0);
}

#[test]
fn second_host_can_neither_take_control_nor_write() {
    let mut d = device();
    assert_eq!(write(&mut d, 0, HOST_A, regs::CCP, 2), 0);
    assert_eq!(d.poll_event(), Some(DeviceEvent::ControlTaken(HOST_A)));
    assert_eq!(write(&mut d, 1, HOST_B, regs::CCP, 2), 0x8006);
    assert_eq!(write(&mut d, 1, HOST_B, regs::WIDTH, 32), 0x8006);
    assert_eq!(
        write(&mut d, 1, HOST_B, regs::CCP, 0),
        0x8006,
        "cannot drop another's control"
    );
    assert_eq!(
        read(&mut d, 1, HOST_B, regs::WIDTH),
        (0, 64),
        "reads stay open"
    );
    assert_eq!(
        read(&mut d, 1, HOST_B, regs::PRIMARY_APP_IP).1,
        u32::from(*HOST_A.ip())
    );
    assert_eq!(write(&mut d, 2, HOST_A, regs::WIDTH, 32), 0);
    // WRITEREG with a bad second pair: one written, error status, index 1
    let (st, _, p) = ask(
        &mut d,
        3,
        HOST_A,
        &cmd(
            0x82,
            4,
            &words(&[regs::HEIGHT, 4, regs::PIXEL_FORMAT, 0x1234]),
        ),
    )
    .unwrap();
    assert_eq!((st, &p[..]), (0x8002, &[0u8, 0, 0, 1][..]));
    assert_eq!(read(&mut d, 3, HOST_A, regs::HEIGHT).1, 4);
}

#[test]
fn heartbeat_expiry_releases_control_and_gvcp_traffic_keeps_it() {
    let mut d = device();
    write(&mut d, 0, HOST_A, regs::CCP, 2);
    // a READREG of CCP every second keeps control (aravis' heartbeat)
    for t in [1000, 2000, 3000, 4000] {
        read(&mut d, t, HOST_A, regs::CCP);
        d.handle_timeout(Instant::from_millis(t + 500));
        assert_eq!(d.controller(), Some(HOST_A));
    }
    // silence for longer than the 3 s timeout
    assert_eq!(d.poll_timeout(), Some(Instant::from_millis(7000)));
    d.handle_timeout(Instant::from_millis(7001));
    assert_eq!(d.controller(), None);
    assert!(
        std::iter::from_fn(|| d.poll_event()).any(|e| e == DeviceEvent::HeartbeatExpired(HOST_A))
    );
    assert_eq!(
        write(&mut d, 7002, HOST_B, regs::CCP, 2),
        0,
        "now B may take it"
    );
}

#[test]
fn forceip_answers_only_its_own_mac() {
    let mut d = device();
    let mut p = vec![0u8; 56];
    p[2..8].copy_from_slice(&[0x02, 0x52, 1, 2, 3, 4]);
    p[20..24].copy_from_slice(&[192, 168, 1, 77]);
    p[36..40].copy_from_slice(&[255, 255, 255, 0]);
    assert_eq!(ask(&mut d, 0, HOST_A, &cmd(0x04, 5, &p)).unwrap().0, 0);
    assert_eq!(d.ip(), Ipv4Addr::new(192, 168, 1, 77));
    p[7] = 5;
    assert!(ask(&mut d, 0, HOST_A, &cmd(0x04, 6, &p)).is_none());
}

#[test]
fn forceip_from_a_bystander_cannot_move_the_camera_from_its_controller() {
    let mut d = device();
    assert_eq!(write(&mut d, 0, HOST_A, regs::CCP, 2), 0);
    let mut p = vec![0u8; 56];
    p[2..8].copy_from_slice(&[0x02, 0x52, 1, 2, 3, 4]);
    p[20..24].copy_from_slice(&[192, 168, 1, 99]);
    p[36..40].copy_from_slice(&[255, 255, 255, 0]);
    assert_eq!(ask(&mut d, 1, HOST_B, &cmd(0x04, 7, &p)).unwrap().0, 0x8006);
    assert_eq!(d.ip(), CAM);
    assert_eq!(d.controller(), Some(HOST_A));
    // the controller itself may re-address the camera
    assert_eq!(ask(&mut d, 2, HOST_A, &cmd(0x04, 8, &p)).unwrap().0, 0);
    assert_eq!(d.ip(), Ipv4Addr::new(192, 168, 1, 99));
}

/// Set up streaming to HOST_A:60000 and collect every packet of one frame.
fn one_frame(extended: bool) -> (Device, SyntheticSource, Vec<Vec<u8>>) {
    let mut d = device();
    write(&mut d, 0, HOST_A, regs::CCP, 2);
    write(&mut d, 0, HOST_A, regs::SCDA0, u32::from(*HOST_A.ip()));
    write(&mut d, 0, HOST_A, regs::SCP0, 60000);
    write(&mut d, 0, HOST_A, regs::SCPS0, 576);
    if extended {
        write(&mut d, 0, HOST_A, regs::GVSP_CONFIG, 0x4000_0000);
    }
    write(&mut d, 0, HOST_A, regs::ACQUISITION_MODE, 1); // SingleFrame
    write(&mut d, 0, HOST_A, regs::ACQUISITION_COMMAND, 1);
    let mut src = SyntheticSource::new(3);
    let mut pkts = Vec::new();
    let mut buf = [0u8; 9000];
    let mut t = Instant::from_millis(100);
    while let Some(next) = d.poll_timeout().filter(|_| pkts.len() < 1000) {
        t = t.max(next);
        while let Some(p) = d.poll_stream(t, &mut src, &mut buf) {
            assert_eq!((p.dst_ip, p.dst_port), (*HOST_A.ip(), 60000));
            pkts.push(buf[..p.len].to_vec());
        }
        if !d.acquiring() && d.stream_counters().frames_sent == 1 {
            break;
        }
    }
    (d, src, pkts)
}

#[test]
fn a_frame_is_leader_payload_trailer_and_reassembles_byte_exact() {
    for extended in [false, true] {
        let (d, src, pkts) = one_frame(extended);
        let (h0, hl) = Header::parse(&pkts[0]).unwrap();
        assert_eq!(
            (h0.format, h0.packet_id, h0.extended, h0.block_id),
            (Format::Leader, 0, extended, 1)
        );
        let leader = ImageLeader::parse(&pkts[0][hl..]).unwrap();
        assert_eq!(
            (leader.width, leader.height, leader.pixel_format),
            (64, 32, 0x0108_0001)
        );
        assert_eq!(pkts.len(), 2 + 4, "2048 bytes in 540-byte payload packets");
        let (ht, _) = Header::parse(pkts.last().unwrap()).unwrap();
        assert_eq!(
            (ht.format, ht.packet_id as usize),
            (Format::Trailer, pkts.len() - 1)
        );
        let mut image = Vec::new();
        for (i, p) in pkts[1..pkts.len() - 1].iter().enumerate() {
            let (h, hl) = Header::parse(p).unwrap();
            assert_eq!((h.format, h.packet_id as usize), (Format::Payload, i + 1));
            assert!(p.len() + 28 <= 576, "SCPS bounds the IP packet");
            image.extend_from_slice(&p[hl..]);
        }
        let frame = rdmacam_protocol::device::frame::Frame {
            number: 0,
            spec: d.frame_spec(),
            timestamp: 0,
            chunks: rdmacam_protocol::device::chunks::Chunks::NONE,
        };
        let mut want = vec![0u8; frame.size()];
        src.read(&frame, 0, &mut want);
        assert_eq!(image, want);
        assert_eq!(&image[..8], &0u64.to_be_bytes(), "frame counter stamped");
    }
}

#[test]
fn packetresend_from_the_controllers_stream_socket_is_served() {
    let (mut d, mut src, pkts) = one_frame(false);
    // PACKETRESEND (no ACK flag) for block 1, packets 2..=3, from host A's *stream* port
    let mut c = cmd(0x40, 7, &words(&[0x0000_0001, 2, 3]));
    c[1] = 0;
    let stream_port = SocketAddrV4::new(*HOST_A.ip(), 60000);
    assert!(
        ask(&mut d, 200, stream_port, &c).is_none(),
        "never acknowledged"
    );
    let mut buf = [0u8; 9000];
    let mut again = Vec::new();
    while let Some(p) = d.poll_stream(Instant::from_millis(300), &mut src, &mut buf) {
        again.push(buf[..p.len].to_vec());
    }
    assert_eq!(again.len(), 2);
    for (p, id) in again.iter().zip([2, 3]) {
        let (h, hl) = Header::parse(p).unwrap();
        assert_eq!(
            (h.status, h.packet_id),
            (0x0100, id),
            "resent packet status"
        );
        assert_eq!(&p[hl..], &pkts[id as usize][8..]);
    }
    // from another host: ignored
    let other = SocketAddrV4::new(*HOST_B.ip(), 60000);
    ask(&mut d, 201, other, &c);
    assert!(
        d.poll_stream(Instant::from_millis(400), &mut src, &mut buf)
            .is_none()
    );
    assert_eq!(d.stream_counters().packets_resent, 2);
}

// aravis 0.8.26's PACKETRESEND in extended-ID mode, captured with tshark on a lossy veth
// (from its stream socket port 0xdf97): flags 0x10, block 1, packet 0xb6 only.
const ARAVIS_EXTENDED_RESEND: &str =
    "42 10 00 40 00 14 ff 15 00 00 00 00 00 00 00 b6 00 00 00 b6 00 00 00 00 00 00 00 01";

#[test]
fn aravis_extended_id_packetresend_is_understood() {
    let mut d = device();
    write(&mut d, 0, HOST_A, regs::CCP, 2);
    write(&mut d, 0, HOST_A, regs::SCDA0, u32::from(*HOST_A.ip()));
    write(&mut d, 0, HOST_A, regs::SCP0, 60000);
    write(&mut d, 0, HOST_A, regs::SCPS0, 576);
    write(&mut d, 0, HOST_A, regs::GVSP_CONFIG, 0x4000_0000);
    write(&mut d, 0, HOST_A, regs::ACQUISITION_MODE, 1);
    write(&mut d, 0, HOST_A, regs::ACQUISITION_COMMAND, 1);
    let mut src = SyntheticSource::new(3);
    let mut buf = [0u8; 9000];
    // a bigger frame so packet 0xb6 exists: 64 x 32 at 540 bytes/packet has 6 packets only
    let mut t = Instant::from_millis(50);
    while d.stream_counters().frames_sent == 0 {
        t = t.max(d.poll_timeout().unwrap());
        while d.poll_stream(t, &mut src, &mut buf).is_some() {}
    }
    let bytes: Vec<u8> = ARAVIS_EXTENDED_RESEND
        .split_whitespace()
        .map(|b| u8::from_str_radix(b, 16).unwrap())
        .collect();
    // packet 0xb6 is beyond this small frame: counted unavailable, and answered so: a
    // header-only packet of status PACKET_UNAVAILABLE (aravis then stops asking for the frame)
    assert!(ask(&mut d, 60, SocketAddrV4::new(*HOST_A.ip(), 0xdf97), &bytes).is_none());
    assert_eq!(d.stream_counters().resend_unavailable, 1);
    let p = d
        .poll_stream(Instant::from_millis(60), &mut src, &mut buf)
        .unwrap();
    let (h, header_len) = Header::parse(&buf[..p.len]).unwrap();
    assert_eq!(
        (
            h.status,
            h.extended,
            h.block_id,
            h.packet_id,
            p.len - header_len
        ),
        (0x800C, true, 1, 0xb6, 0)
    );
    // the same request for packet 2 is served with the resend flag
    let mut req = bytes.clone();
    req[15] = 2;
    req[19] = 2;
    ask(&mut d, 61, SocketAddrV4::new(*HOST_A.ip(), 0xdf97), &req);
    let p = d
        .poll_stream(Instant::from_millis(62), &mut src, &mut buf)
        .unwrap();
    let (h, _) = Header::parse(&buf[..p.len]).unwrap();
    assert_eq!(
        (h.extended, h.block_id, h.packet_id, h.flags),
        (true, 1, 2, 0x0001)
    );
}

#[test]
fn image_settings_are_locked_while_acquiring() {
    let mut d = device();
    write(&mut d, 0, HOST_A, regs::CCP, 2);
    write(&mut d, 0, HOST_A, regs::ACQUISITION_COMMAND, 1);
    assert_eq!(write(&mut d, 1, HOST_A, regs::WIDTH, 32), 0x8004);
    write(&mut d, 2, HOST_A, regs::ACQUISITION_COMMAND, 0);
    assert_eq!(write(&mut d, 3, HOST_A, regs::WIDTH, 32), 0);
    assert_eq!(read(&mut d, 3, HOST_A, regs::PAYLOAD_SIZE).1, 32 * 32);
    assert_eq!(
        write(&mut d, 3, HOST_A, regs::WIDTH, 4096),
        0x8002,
        "beyond the sensor"
    );
}

/// TestPattern Off is the sensor's image: the initial value of a camera that has one (the
/// emulator replaying images), refused INVALID_PARAMETER by one that has not (the firmware);
/// the frame spec says which the next frame is.
#[test]
fn test_pattern_off_is_the_sensor_and_only_a_camera_with_one_takes_it() {
    let mut d = device();
    write(&mut d, 0, HOST_A, regs::CCP, 2);
    assert_eq!(read(&mut d, 0, HOST_A, regs::TEST_PATTERN).1, 0, "Gradient");
    assert_eq!(write(&mut d, 1, HOST_A, regs::TEST_PATTERN, 4), 0x8002);
    assert!(!d.frame_spec().sensor);

    let mut cfg = DeviceConfig::new(CAM, [0x02, 0x52, 1, 2, 3, 4], "SN42");
    cfg.sensor = true;
    let mut d = Device::new(cfg);
    write(&mut d, 0, HOST_A, regs::CCP, 2);
    assert_eq!(read(&mut d, 0, HOST_A, regs::TEST_PATTERN).1, 4, "Off");
    assert!(d.frame_spec().sensor);
    assert_eq!(write(&mut d, 1, HOST_A, regs::TEST_PATTERN, 2), 0);
    let spec = d.frame_spec();
    assert!(!spec.sensor);
    assert_eq!(spec.pattern.name(), "Checkerboard");
    assert_eq!(write(&mut d, 2, HOST_A, regs::TEST_PATTERN, 4), 0);
    assert!(d.frame_spec().sensor);
    assert_eq!(write(&mut d, 3, HOST_A, regs::TEST_PATTERN, 5), 0x8002);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    // Random and mangled GVCP datagrams never panic the device, never let a second host change
    // anything, and get an error status when they are answered with one.
    #[test]
    fn malformed_gvcp_never_panics_or_changes_state(
        bytes in proptest::collection::vec(any::<u8>(), 0..600),
        command in prop::sample::select(vec![0x02u16, 0x04, 0x40, 0x80, 0x82, 0x84, 0x86, 0x89, 0xc0, 0x100, 0xffff]),
        flags in any::<u8>(),
        fake_len in any::<u16>(),
    ) {
        let mut d = device();
        write(&mut d, 0, HOST_A, regs::CCP, 2);
        let before = (d.controller(), d.frame_spec(), d.ip());
        // fully random bytes
        let mut out = [0u8; 600];
        let _ = d.handle_gvcp(Instant::from_millis(1), HOST_B, &bytes, &mut out);
        // a well-formed header with a random command, flags, claimed length and body
        let mut c = vec![0x42, flags];
        c.extend_from_slice(&command.to_be_bytes());
        c.extend_from_slice(&fake_len.to_be_bytes());
        c.extend_from_slice(&[0, 9]);
        c.extend_from_slice(&bytes);
        if let Some(r) = d.handle_gvcp(Instant::from_millis(2), HOST_B, &c, &mut out) {
            let status = u16::from_be_bytes([out[0], out[1]]);
            let code = u16::from_be_bytes([out[2], out[3]]);
            prop_assert!(r.len >= 8 && r.len <= 548);
            prop_assert_eq!(code, command.wrapping_add(1));
            if command == 0x82 || command == 0x86 {
                prop_assert!(status != 0, "a non-controller write must fail");
            }
        }
        // FORCEIP included: a bystander cannot move the camera away from its controller
        let after = (d.controller(), d.frame_spec(), d.ip());
        prop_assert_eq!(before, after);
        // the controller's random commands do not panic either
        let _ = d.handle_gvcp(Instant::from_millis(3), HOST_A, &c, &mut out);
    }
}

#[test]
fn a_retried_command_gets_the_previous_ack_and_runs_once() {
    let mut d = device();
    assert_eq!(write(&mut d, 0, HOST_A, regs::CCP, 2), 0);
    while d.poll_event().is_some() {}
    let start = cmd(0x82, 0x1234, &words(&[regs::ACQUISITION_COMMAND, 1]));
    let first = ask(&mut d, 1, HOST_A, &start).unwrap();
    assert_eq!(first.0, 0);
    assert_eq!(d.poll_event(), Some(DeviceEvent::AcquisitionStarted));
    // the ACK was lost: the host sends the very same datagram again
    let again = ask(&mut d, 2, HOST_A, &start).unwrap();
    assert_eq!(again, first, "the same acknowledge");
    assert_eq!(d.poll_event(), None, "not executed a second time");
    assert_eq!(d.gvcp_counters().retries_answered, 1);
    // the same req_id from another host is that host's own command (and it is not in control)
    assert_eq!(ask(&mut d, 3, HOST_B, &start).unwrap().0, 0x8006);
    // a new command, even with the old req_id but other bytes, runs
    let stop = cmd(0x82, 0x1234, &words(&[regs::ACQUISITION_COMMAND, 0]));
    assert_eq!(ask(&mut d, 4, HOST_A, &stop).unwrap().0, 0);
    assert_eq!(d.poll_event(), Some(DeviceEvent::AcquisitionStopped));
    assert!(!d.acquiring());
}

#[test]
fn offsets_and_sizes_limit_each_other_as_the_xml_says() {
    let mut d = device(); // 64x32 on a 2048x2048 sensor
    write(&mut d, 0, HOST_A, regs::CCP, 2);
    assert_eq!(write(&mut d, 1, HOST_A, regs::OFFSET_X, 2048 - 63), 0x8002);
    assert_eq!(write(&mut d, 1, HOST_A, regs::OFFSET_X, 2048 - 64), 0);
    assert_eq!(write(&mut d, 1, HOST_A, regs::WIDTH, 65), 0x8002);
    assert_eq!(write(&mut d, 1, HOST_A, regs::OFFSET_Y, 2048 - 31), 0x8002);
    assert_eq!(write(&mut d, 1, HOST_A, regs::OFFSET_Y, 2048 - 32), 0);
    assert_eq!(write(&mut d, 1, HOST_A, regs::HEIGHT, 33), 0x8002);
    assert_eq!(write(&mut d, 1, HOST_A, regs::OFFSET_X, 0), 0);
    assert_eq!(write(&mut d, 1, HOST_A, regs::WIDTH, 2048), 0);
    // not a PixelFormat entry, not an AcquisitionMode entry
    assert_eq!(
        write(&mut d, 1, HOST_A, regs::PIXEL_FORMAT, 0x0110_002F), // BayerRG16
        0x8002
    );
    assert_eq!(write(&mut d, 1, HOST_A, regs::ACQUISITION_MODE, 3), 0x8002);
    // read-only camera registers refuse writes
    assert_eq!(write(&mut d, 1, HOST_A, regs::SENSOR_WIDTH, 16), 0x8004);
    assert_eq!(write(&mut d, 1, HOST_A, regs::PAYLOAD_SIZE, 16), 0x8004);
}

/// YUV422_8 pairs pixels (Y U Y V): Width and OffsetX go in steps of two under it, as the XML
/// says (`<pInc>WidthStep</pInc>`, `<pInc>OffsetXStep</pInc>`, IntSwissKnifes over the
/// PixelFormat register); a format the current width or offset does not fit is refused, not
/// applied with half a pair per line.
#[test]
fn a_four_two_two_image_goes_in_pixel_pairs() {
    let mut d = device(); // 64x32 Mono8
    write(&mut d, 0, HOST_A, regs::CCP, 2);
    let yuv = PixelFormat::Yuv422_8.pfnc();
    let mono = PixelFormat::Mono8.pfnc();
    // Mono8: any width from 16 up, any offset
    assert_eq!(write(&mut d, 1, HOST_A, regs::WIDTH, 65), 0);
    assert_eq!(write(&mut d, 1, HOST_A, regs::OFFSET_X, 3), 0);
    // an odd width, then an odd offset, do not fit 4:2:2
    assert_eq!(write(&mut d, 1, HOST_A, regs::PIXEL_FORMAT, yuv), 0x8002);
    assert_eq!(write(&mut d, 1, HOST_A, regs::WIDTH, 64), 0);
    assert_eq!(write(&mut d, 1, HOST_A, regs::PIXEL_FORMAT, yuv), 0x8002);
    assert_eq!(write(&mut d, 1, HOST_A, regs::OFFSET_X, 2), 0);
    assert_eq!(write(&mut d, 1, HOST_A, regs::PIXEL_FORMAT, yuv), 0);
    assert_eq!(d.frame_spec().pixel_format, PixelFormat::Yuv422_8);
    // under it, steps of two from Width's minimum (16) and OffsetX's (0)
    assert_eq!(write(&mut d, 1, HOST_A, regs::WIDTH, 63), 0x8002);
    assert_eq!(write(&mut d, 1, HOST_A, regs::OFFSET_X, 5), 0x8002);
    assert_eq!(write(&mut d, 1, HOST_A, regs::WIDTH, 18), 0);
    assert_eq!(write(&mut d, 1, HOST_A, regs::OFFSET_X, 6), 0);
    // back to Mono8: odd again
    assert_eq!(write(&mut d, 1, HOST_A, regs::PIXEL_FORMAT, mono), 0);
    assert_eq!(write(&mut d, 1, HOST_A, regs::WIDTH, 17), 0);
    // the XML says the same
    for (feature, step) in [("Width", "WidthStep"), ("OffsetX", "OffsetXStep")] {
        assert_eq!(xml_child(feature, "pInc").as_deref(), Some(step));
    }
    assert_eq!(
        xml_child("WidthStep", "pVariable").as_deref(),
        Some("PF=PixelFormatReg")
    );
    assert_eq!(
        xml_child("WidthStep", "Formula"),
        Some(format!("(PF = {yuv}) ? 2 : 1"))
    );
}

/// The text of the first `tag` child of the GenICam node named `name`; for a `pVariable`,
/// prefixed with its variable name (`PF=PixelFormatReg`).
fn xml_child(name: &str, tag: &str) -> Option<String> {
    let doc = roxmltree::Document::parse(GENICAM_XML).unwrap();
    let node = doc
        .descendants()
        .find(|n| n.attribute("Name") == Some(name))?;
    let c = node.children().find(|c| c.has_tag_name(tag))?;
    let text = c.text()?.trim();
    Some(match c.attribute("Name") {
        Some(var) => format!("{var}={text}"),
        None => text.to_owned(),
    })
}

/// A Bayer sensor's colour filter repeats every two pixels and lines, and the sensor position
/// decides a pixel's filter: OffsetX and OffsetY go in steps of two under a Bayer format, so
/// the image starts on the colour its format names (an odd offset under BayerRG8 started on
/// green). Width and Height stay free.
#[test]
fn a_bayer_image_starts_on_the_colour_its_format_names() {
    let mut d = device(); // 64x32 Mono8
    write(&mut d, 0, HOST_A, regs::CCP, 2);
    let rg = PixelFormat::BayerRG8.pfnc();
    assert_eq!(write(&mut d, 1, HOST_A, regs::OFFSET_Y, 1), 0);
    assert_eq!(write(&mut d, 1, HOST_A, regs::PIXEL_FORMAT, rg), 0x8002);
    assert_eq!(write(&mut d, 1, HOST_A, regs::OFFSET_Y, 2), 0);
    assert_eq!(write(&mut d, 1, HOST_A, regs::OFFSET_X, 3), 0);
    assert_eq!(write(&mut d, 1, HOST_A, regs::PIXEL_FORMAT, rg), 0x8002);
    assert_eq!(write(&mut d, 1, HOST_A, regs::OFFSET_X, 4), 0);
    assert_eq!(write(&mut d, 1, HOST_A, regs::PIXEL_FORMAT, rg), 0);
    assert_eq!(write(&mut d, 1, HOST_A, regs::OFFSET_X, 5), 0x8002);
    assert_eq!(write(&mut d, 1, HOST_A, regs::OFFSET_Y, 3), 0x8002);
    assert_eq!(write(&mut d, 1, HOST_A, regs::WIDTH, 63), 0);
    assert_eq!(write(&mut d, 1, HOST_A, regs::HEIGHT, 31), 0);
    assert_eq!(xml_child("OffsetY", "pInc").as_deref(), Some("OffsetYStep"));
}

#[test]
fn every_register_the_feature_table_names_reads_and_read_only_ones_refuse_writes() {
    use rdmacam_protocol::device::features::{Access, Port, all};
    let mut d = device();
    write(&mut d, 0, HOST_A, regs::CCP, 2);
    for f in all() {
        let Some(r) = f.reg().filter(|r| r.port == Port::Device) else {
            continue;
        };
        let base = r.addr & !3;
        for off in (0..r.len.max(4)).step_by(4) {
            let (st, _) = read(&mut d, 1, HOST_A, base + off);
            assert_eq!(st, 0, "{} at {:#x}", f.name, base + off);
        }
        if r.access == Access::Ro && r.addr >= regs::CAM_BASE && r.addr < regs::CAM_END {
            assert_eq!(write(&mut d, 1, HOST_A, r.addr, 1), 0x8004, "{}", f.name);
        }
    }
}

/// Leaders sent between `from` and `to` ms (polled every 100 µs), with their timestamps.
fn leaders(
    d: &mut Device,
    src: &mut SyntheticSource,
    from_ms: u64,
    to_ms: u64,
    at: impl FnMut(&mut Device, Instant),
) -> Vec<u64> {
    let every = std::time::Duration::from_micros(100);
    leaders_polled_every(d, src, from_ms, to_ms, every, at)
}

/// [`leaders`], the device polled every `every` (a loop that wakes that often).
fn leaders_polled_every(
    d: &mut Device,
    src: &mut SyntheticSource,
    from_ms: u64,
    to_ms: u64,
    every: std::time::Duration,
    mut at: impl FnMut(&mut Device, Instant),
) -> Vec<u64> {
    let mut out = Vec::new();
    let mut buf = [0u8; 9000];
    let mut t = Instant::from_millis(from_ms);
    while t < Instant::from_millis(to_ms) {
        at(d, t);
        d.handle_timeout(t);
        while let Some(p) = d.poll_stream(t, src, &mut buf) {
            let (h, hl) = Header::parse(&buf[..p.len]).unwrap();
            if h.format == Format::Leader {
                out.push(ImageLeader::parse(&buf[hl..p.len]).unwrap().timestamp);
            }
        }
        t = t + every;
    }
    out
}

fn streaming(exposure_us: f32) -> Device {
    let mut d = device();
    write(&mut d, 0, HOST_A, regs::CCP, 2);
    write(&mut d, 0, HOST_A, regs::SCDA0, u32::from(*HOST_A.ip()));
    write(&mut d, 0, HOST_A, regs::SCP0, 60000);
    write(&mut d, 0, HOST_A, regs::SCPS0, 1500);
    write(
        &mut d,
        0,
        HOST_A,
        regs::EXPOSURE_TIME,
        exposure_us.to_bits(),
    );
    d
}

#[test]
fn trigger_delay_and_exposure_place_the_frame_and_its_timestamp() {
    let mut d = streaming(2000.0);
    write(&mut d, 0, HOST_A, regs::TRIGGER_MODE, 1); // FrameStart On, source Software
    write(&mut d, 0, HOST_A, regs::TRIGGER_DELAY, 500f32.to_bits());
    write(&mut d, 0, HOST_A, regs::ACQUISITION_COMMAND, 1);
    let mut src = SyntheticSource::new(1);
    assert!(
        leaders(&mut d, &mut src, 1, 20, |_, _| {}).is_empty(),
        "no trigger, no frame"
    );
    // TriggerSoftware at 20 ms: exposure 20.5..22.5 ms, stamped at its start
    assert_eq!(write(&mut d, 20, HOST_A, regs::TRIGGER_SOFTWARE, 1), 0);
    let got = leaders(&mut d, &mut src, 20, 40, |_, _| {});
    assert_eq!(got, vec![20_500_000]);
    assert_eq!(
        leaders(&mut d, &mut src, 40, 45, |_, _| {}),
        Vec::<u64>::new()
    );
}

#[test]
fn an_acquisition_start_trigger_arms_the_acquisition_and_starts_it() {
    let mut d = streaming(1000.0);
    let acq_start = regs::TRIGGER_STRIDE; // TriggerSelector AcquisitionStart's block
    write(&mut d, 0, HOST_A, regs::TRIGGER_MODE + acq_start, 1);
    write(&mut d, 0, HOST_A, regs::TRIGGER_SOURCE + acq_start, 0); // Software
    write(&mut d, 0, HOST_A, regs::ACQUISITION_COMMAND, 1);
    assert!(!d.acquiring(), "armed, waiting for its trigger");
    let mut src = SyntheticSource::new(1);
    assert!(leaders(&mut d, &mut src, 1, 30, |_, _| {}).is_empty());
    // a FrameStart TriggerSoftware does nothing to the AcquisitionStart trigger
    write(&mut d, 30, HOST_A, regs::TRIGGER_SOFTWARE, 1);
    assert!(!d.acquiring());
    write(&mut d, 30, HOST_A, regs::TRIGGER_SOFTWARE + acq_start, 1);
    assert!(d.acquiring(), "the trigger started it");
    // free running from there (FrameStart trigger off): frames every 1/30 s
    assert!(leaders(&mut d, &mut src, 30, 110, |_, _| {}).len() >= 2);
}

#[test]
fn line0_fires_on_the_edge_trigger_activation_names() {
    let mut d = streaming(1000.0);
    write(&mut d, 0, HOST_A, regs::TRIGGER_MODE, 1);
    write(&mut d, 0, HOST_A, regs::TRIGGER_SOURCE, 1); // Line0
    write(&mut d, 0, HOST_A, regs::TRIGGER_ACTIVATION, 1); // FallingEdge
    write(&mut d, 0, HOST_A, regs::ACQUISITION_COMMAND, 1);
    let mut src = SyntheticSource::new(1);
    // Line0 high at 10 ms, low at 20 ms: one frame, exposed from the falling edge
    let got = leaders(&mut d, &mut src, 1, 40, |d, t| {
        if t == Instant::from_millis(10) {
            d.set_line0(t, true);
        }
        if t == Instant::from_millis(20) {
            d.set_line0(t, false);
        }
    });
    assert_eq!(got, vec![20_000_000]);
}

#[test]
fn a_scheduled_action_starts_its_exposure_at_its_time_however_late_the_loop_wakes() {
    let mut d = streaming(1000.0);
    write(&mut d, 0, HOST_A, regs::TRIGGER_MODE, 1);
    write(&mut d, 0, HOST_A, regs::TRIGGER_SOURCE, 2); // Action1
    write(&mut d, 0, HOST_A, regs::ACTION_DEVICE_KEY, 0x1234);
    write(&mut d, 0, HOST_A, regs::ACTION_GROUP_KEY, 7);
    write(&mut d, 0, HOST_A, regs::ACTION_GROUP_MASK, 1);
    write(&mut d, 0, HOST_A, regs::ACQUISITION_COMMAND, 1);
    // ACTION_CMD (0x0100), flags scheduled + ack: device key, group key, mask, time 10.05 ms
    let mut p = words(&[0x1234, 7, 1]);
    p.extend_from_slice(&10_050_000u64.to_be_bytes());
    let mut c = cmd(0x0100, 2, &p);
    c[1] = 0x81;
    let (st, ack, _) = ask(&mut d, 1, HOST_B, &c).expect("an ACTION_ACK");
    assert_eq!((st, ack), (0, 0x0101));
    let mut src = SyntheticSource::new(1);
    // a loop that wakes only every 1.5 ms (descheduled on a loaded machine): it gets to the
    // action at 11.5 ms, and the exposure still began at 10.05
    let every = std::time::Duration::from_micros(1500);
    let got = leaders_polled_every(&mut d, &mut src, 1, 30, every, |_, _| {});
    assert_eq!(got, vec![10_050_000]);
}

#[test]
fn timestamp_latch_and_reset() {
    let mut d = device();
    write(&mut d, 0, HOST_A, regs::CCP, 2);
    write(&mut d, 5, HOST_A, regs::TIMESTAMP_CONTROL, 2); // latch
    let hi = read(&mut d, 5, HOST_A, regs::TIMESTAMP_LATCHED_HIGH).1;
    let lo = read(&mut d, 5, HOST_A, regs::TIMESTAMP_LATCHED_LOW).1;
    assert_eq!((u64::from(hi) << 32) | u64::from(lo), 5_000_000);
    write(&mut d, 7, HOST_A, regs::TIMESTAMP_CONTROL, 1); // reset
    write(&mut d, 9, HOST_A, regs::TIMESTAMP_CONTROL, 2);
    assert_eq!(
        read(&mut d, 9, HOST_A, regs::TIMESTAMP_LATCHED_LOW).1,
        2_000_000
    );
    assert_eq!(
        read(&mut d, 9, HOST_A, regs::TICK_FREQ_LOW).1,
        1_000_000_000
    );
}

/// Stream until `frames` frames have left or 2 s of device time pass; the block ids sent.
fn stream_blocks(d: &mut Device, t: &mut Instant, frames: u64) -> Vec<u64> {
    let mut src = SyntheticSource::new(3);
    let mut buf = [0u8; 9000];
    let mut blocks = Vec::new();
    let end = *t + core::time::Duration::from_secs(2);
    while d.stream_counters().frames_sent < frames && *t < end {
        *t = (*t).max(d.poll_timeout().unwrap_or(*t));
        while let Some(p) = d.poll_stream(*t, &mut src, &mut buf) {
            let (h, _) = Header::parse(&buf[..p.len]).unwrap();
            if h.packet_id == 0 {
                blocks.push(h.block_id);
            }
        }
        *t = *t + core::time::Duration::from_micros(100);
    }
    blocks
}

#[test]
fn fault_injection_over_gvcp_drops_frames_and_refuses_resends() {
    use rdmacam_protocol::device::faults::FaultKind;
    let mut d = device();
    write(&mut d, 0, HOST_A, regs::CCP, 2);
    write(&mut d, 0, HOST_A, regs::SCDA0, u32::from(*HOST_A.ip()));
    write(&mut d, 0, HOST_A, regs::SCP0, 60000);
    // FaultSelector, FaultCount, FaultInject as a host writes them; FaultInjectedCount
    let inject = |d: &mut Device, now, kind: FaultKind, count| {
        write(d, now, HOST_A, regs::FAULT_SELECTOR, kind as u32);
        write(d, now, HOST_A, regs::FAULT_COUNT, count);
        write(d, now, HOST_A, regs::FAULT_INJECT, 1)
    };
    let injected = |d: &mut Device, kind: FaultKind| {
        read(d, 5, HOST_A, regs::FAULT_INJECTED + 4 * kind as u32)
    };
    // a bystander injects nothing
    assert_eq!(write(&mut d, 1, HOST_B, regs::FAULT_INJECT, 1), 0x8006);
    // FrameDrop x2: blocks 1 and 2 are captured and never sent
    assert_eq!(inject(&mut d, 1, FaultKind::FrameDrop, 2), 0);
    assert_eq!(
        injected(&mut d, FaultKind::FrameDrop),
        (0, 0),
        "counted when it happens"
    );
    write(&mut d, 2, HOST_A, regs::ACQUISITION_COMMAND, 1);
    let mut t = Instant::from_millis(2);
    assert_eq!(stream_blocks(&mut d, &mut t, 2), vec![3, 4]);
    assert_eq!(injected(&mut d, FaultKind::FrameDrop), (0, 2));
    // ResendUnavailable x1: the next request gets PACKET_UNAVAILABLE, the one after a resend
    write(&mut d, 5, HOST_A, regs::ACQUISITION_COMMAND, 0);
    assert_eq!(inject(&mut d, 5, FaultKind::ResendUnavailable, 1), 0);
    let resend = cmd(0x40, 9, &words(&[4, 1, 1]));
    let mut src = SyntheticSource::new(3);
    let mut buf = [0u8; 9000];
    let mut statuses = Vec::new();
    for now in [3000u64, 3001] {
        ask(&mut d, now, HOST_A, &resend);
        let t = Instant::from_millis(now).max(d.poll_timeout().unwrap());
        let p = d.poll_stream(t, &mut src, &mut buf).unwrap();
        statuses.push(Header::parse(&buf[..p.len]).unwrap().0.status);
    }
    assert_eq!(statuses, vec![0x800C, 0x0100]);
    // a wire fault needs an I/O layer that carries it out: refused NOT_IMPLEMENTED here
    write(
        &mut d,
        6,
        HOST_A,
        regs::FAULT_SELECTOR,
        FaultKind::Stall as u32,
    );
    assert_eq!(write(&mut d, 6, HOST_A, regs::FAULT_INJECT, 1), 0x8001);
    d.faults().set_io(&[FaultKind::Stall]);
    write(&mut d, 6, HOST_A, regs::FAULT_DURATION, 250);
    assert_eq!(write(&mut d, 6, HOST_A, regs::FAULT_INJECT, 1), 0);
    let r = d.faults().poll_request().unwrap();
    assert_eq!((r.kind, r.duration_ms), (FaultKind::Stall, 250));
    // out of range
    assert_eq!(write(&mut d, 6, HOST_A, regs::FAULT_SELECTOR, 10), 0x8002);
    assert_eq!(write(&mut d, 6, HOST_A, regs::FAULT_DURATION, 0), 0x8002);
}

#[test]
fn selected_registers_resolve_through_address_and_paddress_alone() {
    // A GenApi that sums only <Address> and <pAddress> (no pIndex) must still reach each
    // selector value's copy: before, every EventNotification write went to copy 0.
    let doc = roxmltree::Document::parse(rdmacam_protocol::device::GENICAM_XML).unwrap();
    let named = |name: &str| {
        doc.descendants()
            .find(|n| n.attribute("Name") == Some(name))
            .unwrap_or_else(|| panic!("no node {name}"))
    };
    let child = |n: roxmltree::Node, tag: &str| {
        n.children()
            .find(|c| c.has_tag_name(tag))
            .and_then(|c| c.text())
            .map(str::trim)
            .map(String::from)
    };
    let int = |t: &str| {
        t.strip_prefix("0x")
            .map(|h| i64::from_str_radix(h, 16).unwrap())
            .unwrap_or_else(|| t.parse().unwrap())
    };
    assert!(
        !rdmacam_protocol::device::GENICAM_XML.contains("<pIndex"),
        "a register reached through pIndex"
    );
    let mut checked = Vec::new();
    for reg in doc.descendants().filter(|n| {
        ["IntReg", "MaskedIntReg", "FloatReg"]
            .iter()
            .any(|t| n.has_tag_name(*t))
    }) {
        let Some(p) = child(reg, "pAddress") else {
            continue;
        };
        let base = int(&child(reg, "Address").unwrap());
        let knife = named(&p);
        assert!(knife.has_tag_name("IntSwissKnife"));
        let var = knife
            .children()
            .find(|c| c.has_tag_name("pVariable"))
            .unwrap();
        let formula = child(knife, "Formula").unwrap();
        let (v, k) = formula.split_once(" * ").unwrap();
        assert_eq!(v, var.attribute("Name").unwrap());
        let stride = int(k);
        // the selector whose register the variable is, and its values
        let sel_reg = var.text().unwrap().trim();
        let selector = doc
            .descendants()
            .find(|n| {
                (n.has_tag_name("Enumeration") || n.has_tag_name("Integer"))
                    && n.children()
                        .any(|c| c.has_tag_name("pValue") && c.text() == Some(sel_reg))
            })
            .unwrap_or_else(|| panic!("no selector over {sel_reg}"));
        let values: Vec<i64> = if selector.has_tag_name("Integer") {
            let bound = |t| int(&child(selector, t).unwrap());
            (bound("Min")..=bound("Max")).collect()
        } else {
            selector
                .children()
                .filter(|c| c.has_tag_name("EnumEntry"))
                .map(|e| int(&child(e, "Value").unwrap()))
                .collect()
        };
        let addrs: std::collections::BTreeSet<i64> =
            values.iter().map(|v| base + v * stride).collect();
        assert_eq!(
            addrs.len(),
            values.len(),
            "{}",
            reg.attribute("Name").unwrap()
        );
        checked.push(reg.attribute("Name").unwrap().to_string());
    }
    assert!(
        checked.iter().any(|n| n.starts_with("EventNotification")),
        "{checked:?}"
    );
    // and on the device: EventSelector's second value reaches the second copy
    let mut d = device();
    write(&mut d, 0, HOST_A, regs::CCP, 2);
    assert_eq!(write(&mut d, 1, HOST_A, regs::EVENT_NOTIFICATION + 4, 1), 0);
    assert_eq!(read(&mut d, 1, HOST_A, regs::EVENT_NOTIFICATION).1, 0);
}
