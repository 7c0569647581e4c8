//! ORSP end to end on a virtual clock: the camera (device + RC queue pair + frame memory) and
//! the reference host (soft responder + its own requester) joined by the seeded lossy link, the
//! host doing the GVCP register exchange of `docs/orsp-spec.md` §6 exactly as a real host would.

use std::net::{Ipv4Addr, SocketAddrV4};
use std::time::Duration;

use rdmacam::camera::{CameraCore, RocePorts};
use rdmacam_hil::host::{HostConfig, OrspHost};
use rdmacam_hil::sim::{Link, LinkConfig};
use rdmacam_protocol::device::frame::Pattern;
use rdmacam_protocol::device::{Device, DeviceConfig, regs};
use rdmacam_protocol::orsp::{msg::event, regs as oregs};
use rdmacam_protocol::rc::{Instant, split_rocev2};
use rdmacam_protocol::wire::pmtu::Pmtu;
use rdmacam_protocol::wire::{BthRepr, DethRepr, IbRepr, IpRepr, Opcode, RoceV2Repr, deth};

const CAM: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 2);
const HOST: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);
const W: u32 = 256;
const H: u32 = 64;

struct World {
    now: Instant,
    cam: CameraCore,
    host: OrspHost,
    up: Link,
    down: Link,
    heartbeat: bool,
    next_heartbeat: Instant,
    host_alive: bool,
    req: u16,
    host_ip: Ipv4Addr,
    /// CM MADs (UD SENDs to QP1) the camera sent the host, as IP packets.
    cm_inbox: Vec<Vec<u8>>,
    /// A stalled process runs nothing before this time; what is sent to it waits in the link.
    cam_paused_until: Instant,
    host_paused_until: Instant,
}

impl World {
    fn new(loss: f64, seed: u64, buffers: u32, requeue: bool) -> World {
        World::at(CAM, HOST, 0x1234, loss, seed, buffers, requeue)
    }

    fn at(
        cam_ip: Ipv4Addr,
        host_ip: Ipv4Addr,
        host_sq_psn: u32,
        loss: f64,
        seed: u64,
        buffers: u32,
        requeue: bool,
    ) -> World {
        World::sized(
            cam_ip,
            host_ip,
            host_sq_psn,
            (loss, seed),
            buffers,
            requeue,
            (W, H),
        )
    }

    /// A world whose frames are `size` (width, height) Mono8.
    fn sized(
        cam_ip: Ipv4Addr,
        host_ip: Ipv4Addr,
        host_sq_psn: u32,
        (loss, seed): (f64, u64),
        buffers: u32,
        requeue: bool,
        (w, h): (u32, u32),
    ) -> World {
        let mut cfg = DeviceConfig::new(cam_ip, [2, 0, 0, 0, 0, 2], "SIM");
        cfg.width = w;
        cfg.height = h;
        cfg.frame_rate = 200.0;
        cfg.pattern = Pattern::Gradient;
        let cam = rdmacam::camera::new_camera(
            Device::new(cfg),
            seed,
            RocePorts {
                camera_tx: 0xc001,
                host_rx: 4791,
            },
        );
        let host = OrspHost::new(HostConfig {
            host_ip: host_ip.into(),
            camera_ip: cam_ip.into(),
            host_qpn: 0x11,
            host_sq_psn,
            buffers,
            buffer_size: (w * h) as usize,
            tx_port: 0xc002,
            camera_rx_port: 4791,
            seed,
            pattern: Pattern::Gradient,
            requeue,
        });
        let mut link = LinkConfig::lossy(loss);
        link.reorder = loss / 4.0;
        link.duplicate = loss / 4.0;
        World {
            now: Instant::from_millis(1),
            cam,
            host,
            up: Link::new(link, seed * 2 + 1),
            down: Link::new(link, seed * 2 + 2),
            heartbeat: true,
            next_heartbeat: Instant::from_millis(500),
            host_alive: true,
            req: 1,
            host_ip,
            cm_inbox: Vec::new(),
            cam_paused_until: Instant::ZERO,
            host_paused_until: Instant::ZERO,
        }
    }

    fn gvcp(&mut self, command: u16, words: &[u32]) -> (u16, Vec<u8>) {
        self.req += 1;
        let mut c = vec![0x42, 1];
        c.extend_from_slice(&command.to_be_bytes());
        c.extend_from_slice(&((words.len() * 4) as u16).to_be_bytes());
        c.extend_from_slice(&self.req.to_be_bytes());
        for w in words {
            c.extend_from_slice(&w.to_be_bytes());
        }
        let mut out = [0u8; 600];
        let r = self
            .cam
            .handle_gvcp(
                self.now,
                SocketAddrV4::new(self.host_ip, 50000),
                &c,
                &mut out,
            )
            .expect("ack");
        (u16::from_be_bytes([out[0], out[1]]), out[8..r.len].to_vec())
    }

    fn write(&mut self, addr: u32, v: u32) {
        let (st, _) = self.gvcp(0x82, &[addr, v]);
        assert_eq!(st, 0, "WRITEREG {addr:#x} = {v:#x}");
    }

    fn read(&mut self, addr: u32) -> u32 {
        let (st, p) = self.gvcp(0x80, &[addr]);
        assert_eq!(st, 0, "READREG {addr:#x}");
        u32::from_be_bytes(p[..4].try_into().unwrap())
    }

    /// The host side of ORSP §3: control, ORSP registers, CONNECT, HELLO, ANNOUNCE.
    fn connect(&mut self) {
        self.connect_as(0x11, 0x1234);
    }

    fn connect_as(&mut self, host_qpn: u32, host_psn: u32) {
        self.write(regs::CCP, 2);
        assert_eq!(self.read(oregs::BASE + oregs::ORSP_VERSION) >> 16, 1);
        self.write(regs::SCDA0, u32::from(self.host_ip));
        self.write(oregs::BASE + oregs::HOST_QPN, host_qpn);
        self.write(oregs::BASE + oregs::HOST_SQ_PSN, host_psn);
        self.write(oregs::BASE + oregs::PATH_MTU, Pmtu::Mtu1024 as u32);
        self.write(oregs::BASE + oregs::WRITE_CHUNK, 8192);
        // as the reference host: retry 6, rnr_retry 7, ACK timeout 537 ms
        self.write(
            oregs::BASE + oregs::RETRY,
            6 | (7 << 4) | (u32::from(rdmacam_hil::host::HOST_ACK_TIMEOUT) << 8),
        );
        let dqpn = self.read(oregs::BASE + oregs::DEVICE_QPN);
        let dpsn = self.read(oregs::BASE + oregs::DEVICE_SQ_PSN);
        self.host.connect(dqpn, dpsn, Pmtu::Mtu1024);
        self.write(oregs::BASE + oregs::CONTROL, oregs::CONTROL_CONNECT);
        self.run_until(|w| w.host.stats().hello.is_some(), Duration::from_secs(2));
        let hello = self.host.stats().hello.expect("HELLO");
        assert_eq!((hello.path_mtu, hello.orsp_version), (1024, 0x0001_0000));
        self.host.announce();
    }

    fn start(&mut self, frames: u32) {
        self.write(regs::ACQUISITION_MODE, 2);
        self.write(regs::FRAME_COUNT, frames);
        self.write(regs::ACQUISITION_COMMAND, 1);
    }

    fn step(&mut self) {
        let mut buf = Vec::new();
        let mut cam_buf = vec![0u8; 9216];
        let mut busy = true;
        let cam_runs = self.now >= self.cam_paused_until;
        let host_runs = self.now >= self.host_paused_until;
        while busy {
            busy = false;
            while cam_runs && let Some(n) = self.cam.poll_transmit(self.now, &mut cam_buf) {
                self.up.send(self.now, cam_buf[..n].to_vec());
                busy = true;
            }
            while host_runs && let Some(p) = self.up.recv(self.now) {
                if split_rocev2(&p).is_ok_and(|(.., ib)| ib[0] == Opcode::UD_SEND_ONLY.0) {
                    self.cm_inbox.push(p);
                } else if self.host_alive {
                    self.host.handle_datagram(self.now, &p);
                }
                busy = true;
            }
            while self.host_alive && host_runs {
                let Some(n) = self.host.poll_transmit(self.now, &mut buf) else {
                    break;
                };
                self.down.send(self.now, buf[..n].to_vec());
                busy = true;
            }
            // a host with deferred frame checks works on them once its ACKs are out
            busy |= self.host_alive && host_runs && self.host.verify();
            while cam_runs && let Some(p) = self.down.recv(self.now) {
                self.cam.handle_datagram(self.now, &p);
                busy = true;
            }
        }
    }

    /// Run until the host has seen the stream end (at most `limit` of simulated time).
    fn run_to_stream_end(&mut self, limit: Duration) {
        self.run_until(|w| w.host.stats().stream_end.is_some(), limit);
    }

    fn run_until(&mut self, done: impl Fn(&World) -> bool, limit: Duration) {
        let deadline = self.now + limit;
        let mut stuck = 0u32;
        loop {
            self.step();
            if done(self) || self.now >= deadline {
                return;
            }
            let (cam_runs, host_runs) = (
                self.now >= self.cam_paused_until,
                self.now >= self.host_paused_until,
            );
            let next = [
                self.up.next_arrival().filter(|_| host_runs),
                self.down.next_arrival().filter(|_| cam_runs),
                self.cam.poll_timeout().filter(|_| cam_runs),
                self.host
                    .poll_timeout()
                    .filter(|_| self.host_alive && host_runs),
                self.heartbeat.then_some(self.next_heartbeat),
                (!cam_runs).then_some(self.cam_paused_until),
                (!host_runs).then_some(self.host_paused_until),
                Some(deadline),
            ]
            .into_iter()
            .flatten()
            .min()
            .unwrap();
            stuck = if next <= self.now { stuck + 1 } else { 0 };
            assert!(
                stuck < 100_000,
                "livelock at {:?}: camera timer {:?}",
                self.now,
                self.cam.poll_timeout()
            );
            self.now = self.now.max(next);
            if self.now >= self.cam_paused_until {
                self.cam.handle_timeout(self.now);
            }
            if self.host_alive && self.now >= self.host_paused_until {
                self.host.handle_timeout(self.now);
            }
            if self.heartbeat && self.now >= self.next_heartbeat {
                self.read(regs::CCP); // aravis-style heartbeat
                self.next_heartbeat = self.now + Duration::from_millis(500);
            }
        }
    }
}

fn stream(loss: f64, frames: u32) -> World {
    let mut w = World::new(loss, 7, 32, true);
    w.connect();
    w.start(frames);
    w.run_to_stream_end(Duration::from_secs(120));
    w
}

#[test]
fn thousand_frames_arrive_once_byte_exact_in_order_at_0_1_and_5_percent_loss() {
    for loss in [0.0, 0.01, 0.05] {
        let mut w = stream(loss, 1000);
        let s = w.host.stats().clone();
        assert_eq!(s.stream_end, Some((1000, 1000, 0)), "loss {loss}");
        assert_eq!((s.good, s.bad, s.dropped), (1000, 0, 0), "loss {loss}");
        assert!(
            s.block_ids.windows(2).all(|p| p[1] == p[0] + 1),
            "block ids in order"
        );
        assert_eq!(s.block_ids.first(), Some(&1));
        assert!(
            s.frame_numbers.windows(2).all(|p| p[1] == p[0] + 1),
            "frame counters consecutive"
        );
        let retx = w.read(oregs::BASE + oregs::COUNTER_RETRANSMITTED);
        if loss > 0.0 {
            assert!(retx > 0, "loss {loss} needed retransmissions");
        } else {
            assert_eq!(retx, 0);
        }
        assert_eq!(
            w.read(oregs::BASE + oregs::COUNTER_FRAMES_SENT),
            1000,
            "FRAMES_SENT register"
        );
        assert_eq!(
            w.read(oregs::BASE + oregs::STATUS) & 0xf,
            2,
            "back to connected after STREAM_END"
        );
        // a correct host through loss, reordering and duplicates breaks no rule the camera
        // judges (ICRC, BTH, AETH and its MSN, ACKs of what was sent, heartbeats, messages)
        let v: Vec<_> = w.cam.device().violations().iter().collect();
        assert!(v.is_empty(), "loss {loss}: false alarms {v:?}");
    }
}

/// Hosts that break one rule each: the camera drops what an RNIC drops and names the rule,
/// with the numbers of the first time, for each kind.
#[test]
fn a_host_that_breaks_a_rule_is_named_for_it() {
    use rdmacam_hil::host::Misbehaviour;
    use rdmacam_protocol::judge::ViolationKind as K;
    let judged = |m: Misbehaviour, frames: u32, limit: u64| {
        let mut w = World::new(0.0, 5, 8, true);
        w.connect();
        w.host.misbehave(m);
        w.start(frames);
        w.run_until(|_| false, Duration::from_secs(limit));
        let v: Vec<_> = w.cam.device().violations().iter().collect();
        (w, v)
    };
    // every ACK one PSN on: the last of each burst names a PSN never sent
    let (_, v) = judged(Misbehaviour::SkipAck, 5, 2);
    assert_eq!(v.len(), 1, "{v:?}");
    assert_eq!(v[0].0.kind, K::AckUnsent);
    assert!(v[0].0.to_string().contains("never sent"), "{}", v[0].0);
    // a spoilt ICRC: every packet dropped unread, as an RNIC drops it
    let (w, v) = judged(Misbehaviour::BadIcrc, 5, 2);
    assert_eq!(v.len(), 1, "{v:?}");
    assert_eq!(v[0].0.kind, K::BadIcrc);
    assert!(v[0].1 >= 5, "{v:?}");
    assert_eq!(w.host.stats().good, 0, "no ACK reached the camera");
    // heartbeats from the right socket stopped: control lost at the timeout (3 s)
    let mut w = World::new(0.0, 5, 8, true);
    w.connect();
    w.heartbeat = false;
    w.run_until(|_| false, Duration::from_secs(4));
    let v: Vec<_> = w.cam.device().violations().iter().collect();
    assert_eq!(v.len(), 1, "{v:?}");
    assert_eq!((v[0].0.kind, v[0].0.expected), (K::HeartbeatLate, 3000));
}

/// An ACK past a packet the camera itself kept off the wire acknowledges what the host never
/// received: named `ack_undelivered`, with the packet held back.
#[test]
fn an_ack_past_a_packet_the_camera_held_back_is_named() {
    use rdmacam_protocol::judge::ViolationKind as K;
    let mut w = World::new(0.0, 5, 8, true);
    w.connect();
    w.start(1);
    // a packet of the frame's WRITE leaves and is lost on purpose; two more leave, and the host
    // ACKs the second as if it had all (a forged cumulative ACK from the host's address)
    let mut buf = vec![0u8; 9216];
    let mut hbuf = Vec::new();
    let (mut held, mut after) = (None, Vec::new());
    for _ in 0..1000 {
        if after.len() >= 2 {
            break;
        }
        w.now = w.now + Duration::from_millis(1);
        w.cam.handle_timeout(w.now);
        w.host.handle_timeout(w.now);
        while let Some(n) = w.cam.poll_transmit(w.now, &mut buf) {
            let p = buf[..n].to_vec();
            if held.is_some() {
                after.push(p);
            } else if p[28] == Opcode::RC_WRITE_MIDDLE.0 {
                w.cam.held_back(&p);
                held = Some(p);
            } else {
                w.host.handle_datagram(w.now, &p);
            }
        }
        while held.is_none()
            && let Some(n) = w.host.poll_transmit(w.now, &mut hbuf)
        {
            w.cam.handle_datagram(w.now, &hbuf[..n]);
        }
    }
    let psn_of = |p: &[u8]| u32::from_be_bytes([0, p[37], p[38], p[39]]);
    let (held, psn) = (psn_of(&held.expect("a WRITE MIDDLE")), psn_of(&after[1]));
    let dqpn = w.read(oregs::BASE + oregs::DEVICE_QPN);
    let mut ack = IbRepr::new(BthRepr::new(Opcode::RC_ACK, dqpn, psn));
    ack.aeth = Some(rdmacam_protocol::wire::AethRepr {
        syndrome: rdmacam_protocol::wire::AethSyndrome::Ack { credits: 31 },
        msn: 0,
    });
    let r = RoceV2Repr {
        ip: IpRepr::v4(HOST, CAM),
        src_port: 0xc002,
        dst_port: 4791,
        ib: ack,
        payload_len: 0,
    };
    let mut b = vec![0u8; r.buffer_len()];
    r.emit(&mut b, &[]).unwrap();
    w.cam.handle_datagram(w.now, &b);
    let v: Vec<_> = w.cam.device().violations().iter().collect();
    assert_eq!(v.len(), 1, "{v:?}");
    assert_eq!(v[0].0.kind, K::AckUndelivered);
    assert_eq!((v[0].0.expected, v[0].0.got), (held, psn));
}

#[test]
fn a_host_that_checks_frames_in_slices_gets_every_frame_under_loss() {
    // what `rdmacam-host` and the demo do: ACKs between slices of each frame's comparison
    for loss in [0.0, 0.05] {
        let mut w = World::new(loss, 7, 32, true);
        w.host.defer_checks(1000);
        w.connect();
        w.start(300);
        w.run_to_stream_end(Duration::from_secs(60));
        let s = w.host.stats();
        assert_eq!(s.stream_end, Some((300, 300, 0)), "loss {loss}");
        assert_eq!((s.good, s.bad, s.dropped), (300, 0, 0), "loss {loss}");
        assert!(s.frame_numbers.windows(2).all(|p| p[1] == p[0] + 1));
    }
}

#[test]
fn a_host_that_stops_queuing_makes_the_camera_drop_then_recover() {
    let mut w = World::new(0.0, 9, 4, false);
    w.connect();
    w.start(40);
    // four buffers, none re-queued: four frames, then drops
    w.run_until(|w| w.host.stats().good == 4, Duration::from_secs(5));
    w.run_until(|_| false, Duration::from_millis(100));
    assert_eq!(w.host.stats().good, 4);
    let dropped_so_far = w.read(oregs::BASE + oregs::COUNTER_FRAMES_DROPPED);
    assert!(dropped_so_far > 0, "camera counted drops");
    // buffers come back: streaming resumes, the next LEADER says frames were dropped
    w.host.queue(&[0, 1, 2, 3]);
    w.run_until(|w| w.host.stats().good >= 8, Duration::from_secs(5));
    let s = w.host.stats().clone();
    assert_eq!(s.bad, 0);
    assert!(
        s.dropped >= u64::from(dropped_so_far),
        "host saw the gap: {s:?}"
    );
    assert!(s.block_ids.windows(2).all(|p| p[1] > p[0]));
    assert!(
        s.block_ids[4] > s.block_ids[3] + 1,
        "block ids skip the dropped frames"
    );
}

#[test]
fn a_vanished_host_returns_the_camera_to_idle() {
    let mut w = stream(0.0, 5);
    assert_eq!(w.host.stats().good, 5);
    w.start(1_000_000);
    w.run_until(|w| w.host.stats().good >= 10, Duration::from_secs(5));
    // the host dies: no heartbeat, no ACKs
    w.heartbeat = false;
    w.host_alive = false;
    // the camera's retries run out first (host silent), then the heartbeat expires
    w.run_until(|w| !w.cam.connected(), Duration::from_secs(10));
    assert!(!w.cam.connected());
    assert!(!w.cam.device().acquiring());
    w.run_until(
        |w| w.cam.device().controller().is_none(),
        Duration::from_secs(10),
    );
    assert_eq!(w.cam.device().controller(), None, "heartbeat expired");
    let status = w.read(oregs::BASE + oregs::STATUS);
    assert_eq!(status & 0xf, 0, "idle");
    assert_eq!(status >> 16, u32::from(event::CONTROL_LOST));
    assert_eq!(w.read(oregs::BASE + oregs::HOST_QPN), 0);
    // a new host can take control and connect again
    w.host_alive = true;
    w.heartbeat = true;
    w.host = OrspHost::new(HostConfig {
        host_ip: HOST.into(),
        camera_ip: CAM.into(),
        host_qpn: 0x12,
        host_sq_psn: 0x777,
        buffers: 8,
        buffer_size: (W * H) as usize,
        tx_port: 0xc003,
        camera_rx_port: 4791,
        seed: 7,
        pattern: Pattern::Gradient,
        requeue: true,
    });
    w.connect_as(0x12, 0x777);
    w.start(5);
    w.run_to_stream_end(Duration::from_secs(10));
    assert_eq!(
        w.host.stats().good,
        5,
        "streams again after a new connection"
    );
}

#[test]
fn bad_host_messages_raise_an_event_and_are_ignored() {
    let mut w = World::new(0.0, 11, 8, true);
    w.connect();
    w.host
        .send_raw(b"ORSPgarbage, not a message of any kind!!".to_vec());
    let mut bogus = vec![0u8; 24];
    bogus[..4].copy_from_slice(b"ORSP");
    bogus[4] = 1;
    bogus[5] = 0x82; // QUEUE
    bogus[8..12].copy_from_slice(&24u32.to_be_bytes());
    bogus[16..20].copy_from_slice(&1u32.to_be_bytes());
    bogus[20..24].copy_from_slice(&999u32.to_be_bytes()); // never announced
    w.host.send_raw(bogus);
    w.start(10);
    w.run_to_stream_end(Duration::from_secs(10));
    let s = w.host.stats();
    assert_eq!(
        s.events
            .iter()
            .filter(|(id, _)| *id == event::MALFORMED_MESSAGE)
            .count(),
        2,
        "{:?}",
        s.events
    );
    assert_eq!((s.good, s.bad), (10, 0), "streaming unaffected");
    // and named, once per message refused
    let refused = w.cam.device().violations();
    assert_eq!(
        refused.count(rdmacam_protocol::judge::ViolationKind::OrspMessage),
        2
    );
}

// ---- RDMA CM (ORSP §3, caps bit 5): the host connects with REQ/REP/RTU instead of registers ----

/// The worked IB CM REQ of reference/rocev2.md §5.3 (service port 7471, QPN 0x11, PSN 0xabcd,
/// PMTU 4096, from 192.168.10.2 to 192.168.10.1), as its IP packet.
fn req_vector() -> Vec<u8> {
    let line = include_str!("../../testdata/cm-req-vector.txt")
        .lines()
        .find(|l| !l.starts_with('#'))
        .unwrap();
    let frame: Vec<u8> = line
        .split_whitespace()
        .map(|b| u8::from_str_radix(b, 16).unwrap())
        .collect();
    frame[14..].to_vec()
}

const CM_CAM: Ipv4Addr = Ipv4Addr::new(192, 168, 10, 1);
const CM_HOST: Ipv4Addr = Ipv4Addr::new(192, 168, 10, 2);
const REQ_TID: u64 = 0x1_0000_0001;
const REQ_COMM_ID: u32 = 0x1122_3344;

/// The MAD of a UD SEND to QP1, checking the GSI addressing.
fn mad_of(packet: &[u8]) -> Vec<u8> {
    let (src, dst, _, ib) = split_rocev2(packet).expect("RoCEv2 with a good ICRC");
    assert_eq!((src, dst), (CM_CAM.into(), CM_HOST.into()));
    let (r, hl) = IbRepr::parse(ib).unwrap();
    assert_eq!((r.bth.opcode, r.bth.dest_qp), (Opcode::UD_SEND_ONLY, 1));
    let d = r.deth.unwrap();
    assert_eq!((d.qkey, d.src_qp), (deth::GSI_QKEY, 1));
    ib[hl..hl + 256].to_vec()
}

fn be32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes(b[at..at + 4].try_into().unwrap())
}

/// A CM MAD written by hand from IBTA Vol 1 §16.7 / §12.6: MAD header, then the two
/// communication IDs, then `rest` (private data and trailing fields zero).
fn hand_mad(attr_id: u16, tid: u64, local: u32, remote: u32, rest: &[u8]) -> Vec<u8> {
    let mut m = vec![0u8; 256];
    m[..4].copy_from_slice(&[1, 0x07, 2, 0x03]); // base version, CM class, version 2, Send
    m[8..16].copy_from_slice(&tid.to_be_bytes());
    m[16..18].copy_from_slice(&attr_id.to_be_bytes());
    m[24..28].copy_from_slice(&local.to_be_bytes());
    m[28..32].copy_from_slice(&remote.to_be_bytes());
    m[32..32 + rest.len()].copy_from_slice(rest);
    m
}

/// A MAD as a UD SEND ONLY from the host's QP1 to the camera's.
fn ud_to_camera(mad: &[u8], psn: u32) -> Vec<u8> {
    let mut ib = IbRepr::new(BthRepr::new(Opcode::UD_SEND_ONLY, 1, psn));
    ib.deth = Some(DethRepr {
        qkey: deth::GSI_QKEY,
        src_qp: 1,
    });
    let r = RoceV2Repr {
        ip: IpRepr::v4(CM_HOST, CM_CAM),
        src_port: 0xc001,
        dst_port: 4791,
        ib,
        payload_len: mad.len(),
    };
    let mut b = vec![0u8; r.buffer_len()];
    r.emit(&mut b, mad).unwrap();
    b
}

/// Wireshark's reading of the camera's CM MADs (`None` when tshark is missing).
fn tshark_cm(packets: &[Vec<u8>]) -> Option<Vec<String>> {
    use pcap_file::DataLink;
    use pcap_file::pcap::{PcapHeader, PcapPacket, PcapWriter};
    if !rdmacam_tests::have_tshark() {
        return None;
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cm.pcap");
    let header = PcapHeader {
        datalink: DataLink::IPV4,
        ..Default::default()
    };
    let mut w = PcapWriter::with_header(std::fs::File::create(&path).unwrap(), header).unwrap();
    for p in packets {
        w.write_packet(&PcapPacket::new(Duration::ZERO, p.len() as u32, p))
            .unwrap();
    }
    drop(w);
    let fields = [
        "infiniband.mad.attributeid",
        "infiniband.mad.transactionid",
        "infiniband.cm.rep.remotecommid",
        "infiniband.cm.rep.localqpn",
        "infiniband.cm.rep.startpsn",
        "infiniband.cm.rej.remotecommid",
        "infiniband.cm.rej.reason",
        "_ws.malformed",
    ];
    Some(
        rdmacam_tests::tshark_fields(&path, &fields)
            .into_iter()
            .map(|r| r.join("|"))
            .collect(),
    )
}

#[test]
fn a_host_connects_through_the_rdma_cm_streams_and_disconnects() {
    let mut w = World::at(CM_CAM, CM_HOST, 0xabcd, 0.0, 5, 16, true);
    w.write(regs::CCP, 2);
    let caps = w.read(oregs::BASE + oregs::ORSP_CAPS);
    assert_ne!(caps & oregs::CAP_CM, 0, "caps advertise the CM listener");
    w.write(oregs::BASE + oregs::CM_PORT, 7471);

    // REQ (the worked vector, bytes from outside this code base) → REP
    w.cam.handle_datagram(w.now, &req_vector());
    w.run_until(|w| !w.cm_inbox.is_empty(), Duration::from_millis(100));
    assert_eq!(w.cm_inbox.len(), 1, "one REP");
    let rep_pkt = w.cm_inbox.pop().unwrap();
    let rep = mad_of(&rep_pkt);
    let dqpn = w.read(oregs::BASE + oregs::DEVICE_QPN);
    // Linux semantics (cm_rep_handler): the REP's Starting PSN is the one the host sends with;
    // the REQ's (0xabcd) the one the camera sends with
    let host_psn = be32(&rep, 44) >> 8;
    assert_eq!(&rep[..4], &[1, 0x07, 2, 0x03]);
    assert_eq!(u16::from_be_bytes([rep[16], rep[17]]), 0x0013, "REP");
    assert_eq!(u64::from_be_bytes(rep[8..16].try_into().unwrap()), REQ_TID);
    assert_eq!(be32(&rep, 28), REQ_COMM_ID, "REP answers the REQ's comm ID");
    assert_eq!(be32(&rep, 36) >> 8, dqpn, "local QPN = DEVICE_QPN");
    // private data: the HELLO message (ORSP §6)
    let hello = &rep[24 + 36..24 + 36 + 40];
    assert_eq!(&hello[..4], b"ORSP");
    assert_eq!(be32(hello, 16), 0x0001_0000, "ORSP version");
    assert_eq!(be32(hello, 36), 4096, "path MTU of the REQ");
    if let Some(rows) = tshark_cm(std::slice::from_ref(&rep_pkt)) {
        let f: Vec<&str> = rows[0].split('|').collect();
        assert_eq!(f[0], "0x0013", "{rows:?}");
        assert_eq!(
            u32::from_str_radix(f[2].trim_start_matches("0x"), 16).unwrap(),
            REQ_COMM_ID,
            "{rows:?}"
        );
        assert_eq!(
            u32::from_str_radix(f[3].trim_start_matches("0x"), 16).unwrap(),
            dqpn,
            "{rows:?}"
        );
        assert_eq!(
            u32::from_str_radix(f[4].trim_start_matches("0x"), 16).unwrap(),
            host_psn,
            "{rows:?}"
        );
        assert_eq!(f[7], "", "not malformed: {rows:?}");
    }
    assert!(!w.cam.connected(), "not before RTU");

    // RTU → connected; the host brings its QP up with what the REP said
    let cam_comm = be32(&rep, 24);
    w.host = OrspHost::new(HostConfig {
        host_ip: CM_HOST.into(),
        camera_ip: CM_CAM.into(),
        host_qpn: 0x11,
        host_sq_psn: host_psn,
        buffers: 16,
        buffer_size: (W * H) as usize,
        tx_port: 0xc002,
        camera_rx_port: 4791,
        seed: 5,
        pattern: Pattern::Gradient,
        requeue: true,
    });
    w.host.connect(dqpn, 0xabcd, Pmtu::Mtu4096);
    let rtu = hand_mad(0x0014, REQ_TID, REQ_COMM_ID, cam_comm, &[]);
    w.cam.handle_datagram(w.now, &ud_to_camera(&rtu, 1));
    assert!(w.cam.connected(), "RTU connects the ORSP channel");
    assert_eq!(
        w.read(oregs::BASE + oregs::HOST_QPN),
        0x11,
        "QPN of the REQ"
    );
    assert_eq!(w.read(oregs::BASE + oregs::DEVICE_SQ_PSN), 0xabcd);
    assert_eq!(w.read(oregs::BASE + oregs::HOST_SQ_PSN), host_psn);
    w.host.announce();
    w.start(20);
    w.run_to_stream_end(Duration::from_secs(10));
    let s = w.host.stats();
    assert_eq!((s.good, s.bad), (20, 0), "{s:?}");

    // a second REQ while connected: REJ 28 with the ORSP reason
    w.cam.handle_datagram(
        w.now,
        &ud_to_camera(
            &{
                let mut m = mad_of_req();
                m[24..28].copy_from_slice(&0x5555_0001u32.to_be_bytes());
                m
            },
            2,
        ),
    );
    w.run_until(|w| !w.cm_inbox.is_empty(), Duration::from_millis(100));
    let rej = mad_of(&w.cm_inbox.pop().expect("REJ"));
    assert_eq!(u16::from_be_bytes([rej[16], rej[17]]), 0x0012, "REJ");
    assert_eq!(be32(&rej, 28), 0x5555_0001);
    assert_eq!(
        u16::from_be_bytes([rej[24 + 10], rej[24 + 11]]),
        28,
        "consumer reject"
    );
    assert!(w.cam.connected(), "the connection stands");

    // DREQ → DREP, disconnected
    let dreq = hand_mad(
        0x0015,
        2,
        REQ_COMM_ID,
        cam_comm,
        &(0x11u32 << 8).to_be_bytes(),
    );
    w.cam.handle_datagram(w.now, &ud_to_camera(&dreq, 3));
    w.run_until(|w| !w.cm_inbox.is_empty(), Duration::from_millis(100));
    let drep = mad_of(&w.cm_inbox.pop().expect("DREP"));
    assert_eq!(u16::from_be_bytes([drep[16], drep[17]]), 0x0016, "DREP");
    assert_eq!((be32(&drep, 24), be32(&drep, 28)), (cam_comm, REQ_COMM_ID));
    assert!(!w.cam.connected());
    assert_eq!(w.read(oregs::BASE + oregs::STATUS) & 0xf, 0, "idle");
}

fn mad_of_req() -> Vec<u8> {
    req_vector()[48..48 + 256].to_vec()
}

#[test]
fn a_req_for_another_port_or_a_closed_listener_is_rejected() {
    for port in [7000, 0] {
        let mut w = World::at(CM_CAM, CM_HOST, 0xabcd, 0.0, 5, 16, true);
        w.write(regs::CCP, 2);
        w.write(oregs::BASE + oregs::CM_PORT, port);
        w.cam.handle_datagram(w.now, &req_vector());
        w.run_until(|w| !w.cm_inbox.is_empty(), Duration::from_millis(100));
        let pkt = w.cm_inbox.pop().expect("REJ");
        let rej = mad_of(&pkt);
        assert_eq!(u16::from_be_bytes([rej[16], rej[17]]), 0x0012, "REJ");
        assert_eq!(be32(&rej, 28), REQ_COMM_ID);
        assert_eq!(
            u16::from_be_bytes([rej[24 + 10], rej[24 + 11]]),
            8,
            "invalid service ID"
        );
        if let Some(rows) = tshark_cm(&[pkt]) {
            let f: Vec<&str> = rows[0].split('|').collect();
            assert_eq!(f[0], "0x0012", "{rows:?}");
            assert_eq!(f[6], "0x0008", "{rows:?}");
        }
        assert!(!w.cam.connected());
    }
}

#[test]
fn cm_port_cannot_change_while_connected() {
    let mut w = World::new(0.0, 3, 8, true);
    w.connect();
    let (st, _) = w.gvcp(0x82, &[oregs::BASE + oregs::CM_PORT, 7471]);
    assert_ne!(st, 0, "CM_PORT is locked while connected");
}

#[test]
fn a_lost_rtu_makes_the_camera_resend_its_rep() {
    let mut w = World::at(CM_CAM, CM_HOST, 0xabcd, 0.0, 5, 16, true);
    w.write(regs::CCP, 2);
    w.write(oregs::BASE + oregs::CM_PORT, 7471);
    w.cam.handle_datagram(w.now, &req_vector());
    w.run_until(|w| !w.cm_inbox.is_empty(), Duration::from_millis(100));
    let first = mad_of(&w.cm_inbox.pop().expect("REP"));
    // no RTU: the REP comes again after the CM response timeout, same MAD
    let sent = w.now;
    w.run_until(|w| !w.cm_inbox.is_empty(), Duration::from_secs(10));
    let again = mad_of(&w.cm_inbox.pop().expect("REP resent"));
    assert_eq!(first, again);
    assert!(w.now - sent >= Duration::from_secs(4));
    // a retransmitted REQ (the host's own timer) also gets the same REP
    w.cam.handle_datagram(w.now, &req_vector());
    w.run_until(|w| !w.cm_inbox.is_empty(), Duration::from_millis(100));
    assert_eq!(mad_of(&w.cm_inbox.pop().expect("REP")), first);
    // and the RTU, when it finally comes, connects
    let rtu = hand_mad(0x0014, REQ_TID, REQ_COMM_ID, be32(&first, 24), &[]);
    w.cam.handle_datagram(w.now, &ud_to_camera(&rtu, 1));
    assert!(w.cam.connected());
}

#[test]
fn host_traffic_after_a_lost_rtu_establishes_the_connection() {
    let mut w = World::at(CM_CAM, CM_HOST, 0xabcd, 0.0, 5, 16, true);
    w.write(regs::CCP, 2);
    w.write(oregs::BASE + oregs::CM_PORT, 7471);
    w.cam.handle_datagram(w.now, &req_vector());
    w.run_until(|w| !w.cm_inbox.is_empty(), Duration::from_millis(100));
    let rep = mad_of(&w.cm_inbox.pop().expect("REP"));
    let dqpn = w.read(oregs::BASE + oregs::DEVICE_QPN);
    // the RTU is lost; the host, connected on its side, sends ANNOUNCE on the new QP
    w.host = OrspHost::new(HostConfig {
        host_ip: CM_HOST.into(),
        camera_ip: CM_CAM.into(),
        host_qpn: 0x11,
        host_sq_psn: be32(&rep, 44) >> 8,
        buffers: 16,
        buffer_size: (W * H) as usize,
        tx_port: 0xc002,
        camera_rx_port: 4791,
        seed: 5,
        pattern: Pattern::Gradient,
        requeue: true,
    });
    w.host.connect(dqpn, 0xabcd, Pmtu::Mtu4096);
    w.host.announce();
    w.run_until(|w| w.cam.connected(), Duration::from_secs(2));
    assert!(
        w.cam.connected(),
        "the host's first packet stands in for the RTU"
    );
    w.start(5);
    w.run_to_stream_end(Duration::from_secs(10));
    assert_eq!(w.host.stats().good, 5, "{:?}", w.host.stats());
}

// ---- hostile host values (issue: ORSP that survives hostile hosts) ----

/// OrspWriteChunk 4096 on a 512 KiB frame asks for 128 WRITE messages, more than the 64-entry
/// work queue holds: the overflow (TRAILER included) used to be dropped silently and the camera
/// stalled for good. The camera now raises the chunk so a frame fits, and every frame arrives.
#[test]
fn a_small_write_chunk_never_overflows_the_work_queue() {
    let mut w = World::sized(CAM, HOST, 0x1234, (0.0, 21), 8, true, (1024, 512));
    w.connect();
    w.write(oregs::BASE + oregs::WRITE_CHUNK, 4096);
    w.start(10);
    w.run_to_stream_end(Duration::from_secs(20));
    let s = w.host.stats();
    assert_eq!((s.good, s.bad), (10, 0), "{s:?}");
}

/// A descriptor whose address plus length overflows 64 bits is refused where it enters (an
/// EVENT the host can read), never used: it used to panic in debug builds and write at
/// address 0 in release builds.
#[test]
fn an_announce_that_overflows_the_address_space_is_refused() {
    use rdmacam_protocol::orsp::msg::{self, Descriptor};
    let mut w = World::new(0.0, 22, 8, true);
    w.connect();
    let mut b = vec![0u8; 48];
    let n = msg::emit_announce(
        &mut b,
        900,
        msg::ANNOUNCE_QUEUE,
        &[Descriptor {
            buffer_id: 77,
            rkey: 1,
            addr: u64::MAX - 100,
            length: 4096,
        }],
    )
    .unwrap();
    b.truncate(n);
    w.host.send_raw(b);
    w.start(10);
    w.run_to_stream_end(Duration::from_secs(10));
    let s = w.host.stats();
    assert!(
        s.events
            .iter()
            .any(|(id, _)| *id == event::MALFORMED_MESSAGE),
        "{:?}",
        s.events
    );
    assert_eq!(
        (s.good, s.bad),
        (10, 0),
        "only the host's real buffers are used"
    );
}

/// A host SEND longer than the camera's receive buffers (DEV_RECV_SIZE, 1024 bytes: here an
/// ANNOUNCE of 42 buffers in one message) used to wedge the camera's receive side while STATUS
/// still said streaming. The camera's queue pair answers it with an invalid-request NAK, as
/// any RC responder does, and the connection ends with a STATUS the host can read.
#[test]
fn an_oversized_host_send_ends_the_connection_with_a_readable_status() {
    use rdmacam_protocol::orsp::msg::{self, Descriptor};
    let mut w = World::new(0.0, 23, 8, true);
    w.connect();
    let descs: Vec<Descriptor> = (0..42)
        .map(|i| Descriptor {
            buffer_id: 1000 + i,
            rkey: 1,
            addr: 0x1000_0000 + u64::from(i) * 0x1_0000,
            length: 0x1_0000,
        })
        .collect();
    let mut b = vec![0u8; 24 + 24 * descs.len()];
    let n = msg::emit_announce(&mut b, 901, msg::ANNOUNCE_QUEUE, &descs).unwrap();
    b.truncate(n);
    assert!(n > 1024);
    w.host.send_raw(b);
    w.start(10);
    w.run_until(|_| false, Duration::from_secs(2));
    let status = w.read(oregs::BASE + oregs::STATUS);
    assert_eq!(
        (status & 0xf, status >> 16),
        (15, u32::from(event::HOST_MESSAGE_REFUSED)),
        "STATUS {status:#x}"
    );
}

/// Rate control reaches ORSP (issue: ORSP that survives lossy links): the host's
/// OrspRateLimit (a GenICam feature; 0 = GevLinkSpeed) caps the stream, measured on the
/// simulation's virtual clock; and the camera's packets are ECN-capable (ECT(0)) by default, so
/// a switch marks them instead of dropping and the host's CNPs reach DCQCN.
#[test]
fn the_rate_limit_caps_orsp_and_packets_are_ecn_capable() {
    let mut w = World::sized(CAM, HOST, 0x1234, (0.0, 31), 16, true, (512, 256));
    w.write(regs::CCP, 2);
    w.write(oregs::BASE + oregs::RATE_LIMIT, 500);
    assert_eq!(w.read(oregs::BASE + oregs::RATE_LIMIT), 500);
    // a frame period holds an exposure: shorten it before asking for 5000 frames/s
    w.write(regs::EXPOSURE_TIME, 100f32.to_bits());
    w.write(regs::FRAME_RATE, 5000f32.to_bits()); // the limit, not the frame rate, paces
    assert_eq!(
        w.read(oregs::BASE + oregs::TX_TUNING) & 3,
        2,
        "ECT(0) by default"
    );
    w.connect();
    let t0 = w.now;
    w.start(40);
    w.run_to_stream_end(Duration::from_secs(10));
    let s = w.host.stats();
    assert_eq!((s.good, s.bad), (40, 0), "{s:?}");
    let secs = (w.now.0 - t0.0) as f64 / 1e9;
    let mbps = 40.0 * 512.0 * 256.0 * 8.0 / secs / 1e6;
    assert!(
        mbps <= 500.0,
        "{mbps:.0} Mbit/s of pixels with a 500 Mbit/s limit"
    );
    assert!(
        mbps >= 400.0,
        "{mbps:.0} Mbit/s: the limit, not something else, sets the pace"
    );
    // the packets the camera sent carry ECT(0)
    let mut cam_buf = vec![0u8; 9216];
    w.start(1);
    let n = w
        .cam
        .poll_transmit(w.now + Duration::from_secs(1), &mut cam_buf)
        .unwrap();
    assert_eq!(
        cam_buf[1] & 3,
        2,
        "IPv4 ECN field of a camera packet ({n} bytes)"
    );
}

/// The reference host survives a stall (issue: ORSP that survives stalls): the camera paused
/// for a second while the host's QUEUE messages wait for their ACKs (the host used to give up
/// after 134 ms and the stream died silently), and the host paused for a second while the
/// camera's frames wait for theirs (the camera used to give up after 470 ms): both resume, and
/// every frame arrives.
#[test]
fn a_camera_or_host_paused_for_a_second_resumes_streaming() {
    for who in ["camera", "host"] {
        let mut w = World::new(0.0, 41, 8, true);
        w.connect();
        w.start(200);
        w.run_until(|w| w.host.stats().good >= 20, Duration::from_secs(5));
        let until = w.now + Duration::from_secs(1);
        match who {
            "camera" => w.cam_paused_until = until,
            _ => w.host_paused_until = until,
        }
        w.run_to_stream_end(Duration::from_secs(20));
        let s = w.host.stats();
        assert_eq!(
            (s.good, s.bad, s.dropped),
            (200, 0, 0),
            "{who} paused: {s:?}"
        );
        assert!(w.host.transport_error().is_none(), "{who} paused");
        assert_eq!(
            w.read(oregs::BASE + oregs::STATUS) >> 16,
            0,
            "{who} paused: no error"
        );
    }
}
