//! The fuzz harnesses: each takes arbitrary bytes, drives one parser or state machine with them
//! as a hostile peer would, and panics only on a broken invariant (or a panic inside). The
//! cargo-fuzz targets in `fuzz/` call these, and `tests/tests/fuzz_regressions.rs` replays every
//! input kept in `fuzz/regressions/<target>/` on stable `cargo test`.

use std::net::{IpAddr, Ipv4Addr, SocketAddrV4};

use rdmacam_protocol::cm::{CmListener, ListenerConfig, MAD_LEN};
use rdmacam_protocol::device::frame::{Frame, FrameSpec, Pattern};
use rdmacam_protocol::device::{Device, DeviceConfig, regs};
use rdmacam_protocol::gev::PixelFormat;
use rdmacam_protocol::orsp::msg::{self, HostMessage};
use rdmacam_protocol::orsp::{OrspChannel, regs as oregs};
use rdmacam_protocol::rc::{Instant, Path, PayloadRef, Requester, RequesterConfig, WorkRequest};
use rdmacam_protocol::wire::pmtu::{MessageKind, Pmtu};

/// Split fuzz bytes into pieces: each starts with a length byte (pieces of 0..=255 bytes; the
/// rest of the input when it runs short).
fn pieces(data: &[u8], mut f: impl FnMut(&[u8])) {
    let mut at = 0;
    while at < data.len() {
        let n = usize::from(data[at]).min(data.len() - at - 1);
        f(&data[at + 1..at + 1 + n]);
        at += 1 + n;
    }
}

const CAM: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 2);
const CONTROLLER: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::new(192, 0, 2, 1), 50000);
const BYSTANDER: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::new(192, 0, 2, 9), 50001);

/// A WRITEREG command (ACK wanted) of `v` to `addr`.
fn writereg(req: u16, addr: u32, v: u32) -> Vec<u8> {
    let mut c = vec![0x42, 0x01, 0x00, 0x82, 0x00, 0x08];
    c.extend_from_slice(&req.to_be_bytes());
    c.extend_from_slice(&addr.to_be_bytes());
    c.extend_from_slice(&v.to_be_bytes());
    c
}

fn gvcp_write(d: &mut Device, src: SocketAddrV4, addr: u32, v: u32) {
    let mut out = [0u8; 600];
    let _ = d.handle_gvcp(
        Instant::from_millis(1),
        src,
        &writereg(1, addr, v),
        &mut out,
    );
}

/// GVCP into the device from a host that is not in control: whatever it sends, nothing the
/// controller set changes (control, image settings, address, ORSP state), and acknowledges are
/// well-formed. The same bytes from the controller must not panic either.
pub fn gvcp_from_a_bystander(data: &[u8]) {
    let mut d = Device::new(DeviceConfig::new(CAM, [2, 0x52, 0, 0, 0, 2], "FUZZ"));
    gvcp_write(&mut d, CONTROLLER, regs::CCP, 2);
    gvcp_write(&mut d, CONTROLLER, regs::WIDTH, 640);
    let snapshot = |d: &Device| {
        (
            d.controller(),
            d.frame_spec(),
            d.ip(),
            d.acquiring(),
            d.orsp().state(),
            d.read_reg(oregs::BASE + oregs::HOST_QPN),
        )
    };
    let before = snapshot(&d);
    let mut out = [0u8; 600];
    let mut t = 2;
    pieces(data, |dgram| {
        t += 1;
        if let Some(r) = d.handle_gvcp(Instant::from_millis(t), BYSTANDER, dgram, &mut out) {
            assert!(r.len >= 8 && r.len <= out.len(), "ack of {} bytes", r.len);
        }
    });
    assert_eq!(before, snapshot(&d), "a bystander changed the camera");
    pieces(data, |dgram| {
        t += 1;
        let _ = d.handle_gvcp(Instant::from_millis(t), CONTROLLER, dgram, &mut out);
    });
}

/// ORSP host messages into a connected, streaming channel, frames sent between them: no panic,
/// and every payload WRITE lies inside a buffer the host announced (and the channel took).
pub fn orsp_host_messages(data: &[u8]) {
    let mut c: OrspChannel<16> = OrspChannel::new(0x100, 7, Pmtu::Mtu1024);
    let _ = c.write_reg(oregs::HOST_QPN, 0x11);
    let _ = c.write_reg(oregs::WRITE_CHUNK, 4096);
    if c.connect().is_err() {
        return;
    }
    c.start_acquisition();
    // buffers the channel may write: what valid ANNOUNCEs named (a FLUSH that forgets them
    // leaves them here: WRITEs already queued may still go to them)
    let mut announced: Vec<(u32, u64, u64)> = Vec::new();
    let frame = Frame::new(
        0,
        FrameSpec {
            width: 256,
            height: 64,
            offset_x: 0,
            offset_y: 0,
            pixel_format: PixelFormat::Mono8,
            pattern: Pattern::Gradient,
            sensor: false,
        },
        0,
    );
    let mut handle = 0;
    pieces(data, |m| {
        if let Ok((_, HostMessage::Announce { descriptors, .. })) = msg::parse_host(m) {
            for d in msg::descriptors(descriptors) {
                if d.length > 0 && d.addr.checked_add(d.length).is_some() {
                    announced.push((d.rkey, d.addr, d.addr + d.length));
                }
            }
        }
        c.on_host_message(m);
        handle += 1;
        let _ = c.send_frame(
            &frame.leader(),
            &frame.trailer(),
            frame.size() as u64,
            handle,
        );
        while let Some(wr) = c.poll_work() {
            if wr.kind == MessageKind::Write {
                let end = wr.remote_va.checked_add(u64::from(wr.len));
                let inside = end.is_some_and(|end| {
                    announced
                        .iter()
                        .any(|&(rkey, lo, hi)| rkey == wr.rkey && wr.remote_va >= lo && end <= hi)
                });
                assert!(inside, "WRITE {wr:?} outside every announced buffer");
            }
        }
    });
}

/// RDMA CM MADs into the passive side, with its resend timer run between them: no panic, and
/// every reply is a whole MAD.
pub fn cm_mads(data: &[u8]) {
    let cfg = ListenerConfig {
        port: 7471,
        local_qpn: 0x100,
        starting_psn: 0x1234,
        max_pmtu: Pmtu::Mtu4096,
        ca_guid: 0x0252_00ff_fe00_0002,
        comm_id_seed: 9,
    };
    let mut l = CmListener::new(cfg, &[0u8; 40]);
    let mut out = [0u8; MAD_LEN];
    let mut t = 0;
    for mad in data.chunks(MAD_LEN) {
        t += 1000;
        let _ = l.handle_mad(Instant::from_millis(t), mad, &mut out);
        let _ = l.handle_timeout(Instant::from_millis(t + 500), &mut out);
        let _ = l.reject_req(mad, &mut out, 28, b"fuzz");
    }
}

/// ACK/NAK/CNP packets (the InfiniBand part, BTH onwards) into a requester with WRITEs and
/// SENDs outstanding, time moving on: no panic, and never more completions than posts.
pub fn requester_acks(data: &[u8]) {
    let mut cfg = RequesterConfig::new(
        0x22,
        0x11,
        0x00ff_fff0, // wraps the 24-bit PSN space
        Path::new(IpAddr::V4(CAM), IpAddr::V4(*CONTROLLER.ip())),
    );
    cfg.pmtu = Pmtu::Mtu1024;
    let mut rq: Requester<16, 16> = Requester::new(cfg);
    let buf = [vec![7u8; 8192]];
    let mut posted = 0;
    for i in 0..8u64 {
        let ok = rq
            .post(WorkRequest {
                wr_id: i,
                kind: if i % 2 == 0 {
                    MessageKind::Write
                } else {
                    MessageKind::Send
                },
                payload: PayloadRef {
                    handle: 0,
                    offset: 0,
                },
                len: 1000 + 700 * i as u32,
                remote_va: 0x1000,
                rkey: 1,
                imm: 0,
                solicited: false,
            })
            .is_ok();
        posted += u32::from(ok);
    }
    let mut now = Instant::from_millis(1);
    let mut completions = 0;
    pieces(data, |ib| {
        while rq.poll_transmit(now, &buf[..]).is_some() {}
        let _ = rq.handle_ib(now, ib);
        now = now
            + core::time::Duration::from_micros(u64::from(ib.first().copied().unwrap_or(1)) * 97);
        rq.handle_timeout(now);
        while rq.poll_completion().is_some() {
            completions += 1;
        }
    });
    assert!(
        completions <= posted,
        "{completions} completions for {posted} posts"
    );
}

/// The whole camera against a hostile host: control taken and ORSP connected through GVCP as a
/// host does, acquisition running, then the fuzz pieces arrive as the InfiniBand part of
/// RoCEv2 packets from the host (SENDs of host messages, ACKs, NAKs, anything) while time
/// passes and the camera streams. Every RDMA WRITE the camera sends must lie inside a buffer
/// some ANNOUNCE in the input named (the camera cannot have learnt of any other), and nothing
/// may panic.
pub fn camera_hostile(data: &[u8]) {
    use rdmacam_protocol::camera::RocePorts;
    use rdmacam_protocol::rc::split_rocev2;
    use rdmacam_protocol::wire::IbRepr;
    let mut cfg = DeviceConfig::new(CAM, [2, 0x52, 0, 0, 0, 2], "FUZZ");
    cfg.width = 64;
    cfg.height = 16;
    cfg.frame_rate = 1000.0;
    let mut cam = rdmacam::camera::new_camera(
        Device::new(cfg),
        1,
        RocePorts {
            camera_tx: 0xc001,
            host_rx: 4791,
        },
    );
    let mut out = [0u8; 600];
    let mut req = 0u16;
    let mut write = |cam: &mut rdmacam::camera::CameraCore, addr: u32, v: u32| {
        req += 1;
        let c = writereg(req, addr, v);
        let _ = cam.handle_gvcp(Instant::from_millis(1), CONTROLLER, &c, &mut out);
    };
    write(&mut cam, regs::CCP, 2);
    write(&mut cam, regs::SCDA0, u32::from(*CONTROLLER.ip()));
    write(&mut cam, oregs::BASE + oregs::HOST_QPN, 0x11);
    write(&mut cam, oregs::BASE + oregs::HOST_SQ_PSN, 0);
    write(
        &mut cam,
        oregs::BASE + oregs::PATH_MTU,
        Pmtu::Mtu1024 as u32,
    );
    write(&mut cam, oregs::BASE + oregs::WRITE_CHUNK, 4096);
    write(
        &mut cam,
        oregs::BASE + oregs::CONTROL,
        oregs::CONTROL_CONNECT,
    );
    write(&mut cam, regs::ACQUISITION_COMMAND, 1);
    // every buffer any bytes of the input could announce
    let mut announced: Vec<(u32, u64, u64)> = Vec::new();
    let (host, me) = (IpAddr::V4(*CONTROLLER.ip()), IpAddr::V4(CAM));
    let mut now = Instant::from_millis(2);
    let mut pkt = vec![0u8; 9216];
    pieces(data, |ib| {
        for at in 0..ib.len().saturating_sub(3) {
            if &ib[at..at + 4] == b"ORSP"
                && let Ok((_, HostMessage::Announce { descriptors, .. })) =
                    msg::parse_host(&ib[at..])
            {
                for d in msg::descriptors(descriptors) {
                    if let Some(end) = d.addr.checked_add(d.length) {
                        announced.push((d.rkey, d.addr, end));
                    }
                }
            }
        }
        cam.handle_ib(now, host, me, 0, ib);
        now = now + core::time::Duration::from_micros(200);
        cam.handle_timeout(now);
        while let Some(n) = cam.poll_transmit(now, &mut pkt) {
            let Ok((_, _, _, bytes)) = split_rocev2(&pkt[..n]) else {
                continue;
            };
            if let Ok((repr, _)) = IbRepr::parse(bytes)
                && let Some(r) = repr.reth
            {
                let end = r.va.checked_add(u64::from(r.dma_len));
                let inside = end.is_some_and(|end| {
                    announced
                        .iter()
                        .any(|&(rkey, lo, hi)| rkey == r.rkey && r.va >= lo && end <= hi)
                });
                assert!(
                    inside,
                    "WRITE to {:#x}+{} (rkey {:#x}) outside every announced buffer",
                    r.va, r.dma_len, r.rkey
                );
            }
        }
    });
}

/// A capture file as `rdmacam inspect` reads it (pcap or pcapng, any link type): no panic.
pub fn inspect_capture(data: &[u8]) {
    let _ = rdmacam::inspect::packets_of(data, 4791);
}

/// A harness: arbitrary bytes in, a panic only on a broken invariant.
pub type Harness = fn(&[u8]);

/// Every harness by the name of its fuzz target and regression folder.
pub const TARGETS: &[(&str, Harness)] = &[
    ("gvcp_device", gvcp_from_a_bystander),
    ("orsp_host_messages", orsp_host_messages),
    ("cm_mads", cm_mads),
    ("requester_acks", requester_acks),
    ("camera_hostile", camera_hostile),
    ("inspect_capture", inspect_capture),
];
