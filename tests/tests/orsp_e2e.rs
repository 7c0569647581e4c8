//! ORSP end to end on a virtual clock: the camera (device + RC queue pair + frame memory) and
//! the reference host (soft responder + its own requester) joined by the seeded lossy link, the
//! host doing the GVCP register exchange of `design/ORSP.md` §3 exactly as a real host would.

use std::net::{Ipv4Addr, SocketAddrV4};
use std::time::Duration;

use rdmacam::camera::{CameraCore, RocePorts};
use rdmacam_hil::host::{HostConfig, OrspHost};
use rdmacam_hil::sim::{Link, LinkConfig};
use rdmacam_protocol::device::pattern::Pattern;
use rdmacam_protocol::device::{Device, DeviceConfig, regs};
use rdmacam_protocol::orsp::{msg::event, regs as oregs};
use rdmacam_protocol::rc::Instant;
use rdmacam_protocol::wire::pmtu::Pmtu;

const CAM: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 2);
const HOST: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);
const GVCP_HOST: SocketAddrV4 = SocketAddrV4::new(HOST, 50000);
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
}

impl World {
    fn new(loss: f64, seed: u64, buffers: u32, requeue: bool) -> World {
        let mut cfg = DeviceConfig::new(CAM, [2, 0, 0, 0, 0, 2], "SIM");
        cfg.width = W;
        cfg.height = H;
        cfg.frame_rate = 200.0;
        cfg.pattern = Pattern::Gradient;
        let cam = CameraCore::new(
            Device::new(cfg),
            seed,
            RocePorts {
                camera_tx: 0xc001,
                host_rx: 4791,
            },
        );
        let host = OrspHost::new(HostConfig {
            host_ip: HOST.into(),
            camera_ip: CAM.into(),
            host_qpn: 0x11,
            host_sq_psn: 0x1234,
            buffers,
            buffer_size: (W * H) as usize,
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
            .handle_gvcp(self.now, GVCP_HOST, &c, &mut out)
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
        self.write(regs::SCDA0, u32::from(HOST));
        self.write(oregs::BASE + oregs::HOST_QPN, host_qpn);
        self.write(oregs::BASE + oregs::HOST_SQ_PSN, host_psn);
        self.write(oregs::BASE + oregs::PATH_MTU, Pmtu::Mtu1024 as u32);
        self.write(oregs::BASE + oregs::WRITE_CHUNK, 8192);
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
        let mut busy = true;
        while busy {
            busy = false;
            while let Some(n) = self.cam.poll_transmit(self.now, &mut buf) {
                self.up.send(self.now, buf[..n].to_vec());
                busy = true;
            }
            while let Some(p) = self.up.recv(self.now) {
                if self.host_alive {
                    self.host.handle_datagram(self.now, &p);
                }
                busy = true;
            }
            while self.host_alive {
                let Some(n) = self.host.poll_transmit(self.now, &mut buf) else {
                    break;
                };
                self.down.send(self.now, buf[..n].to_vec());
                busy = true;
            }
            while let Some(p) = self.down.recv(self.now) {
                self.cam.handle_datagram(self.now, &p);
                busy = true;
            }
        }
    }

    fn run_until(&mut self, done: impl Fn(&World) -> bool, limit: Duration) {
        let deadline = self.now + limit;
        let mut stuck = 0u32;
        loop {
            self.step();
            if done(self) || self.now >= deadline {
                return;
            }
            let next = [
                self.up.next_arrival(),
                self.down.next_arrival(),
                self.cam.poll_timeout(),
                self.host.poll_timeout().filter(|_| self.host_alive),
                self.heartbeat.then_some(self.next_heartbeat),
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
            self.cam.handle_timeout(self.now);
            if self.host_alive {
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
    w.run_until(
        |w| w.host.stats().stream_end.is_some(),
        Duration::from_secs(120),
    );
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
        let retx = w.read(oregs::BASE + 0x6C);
        if loss > 0.0 {
            assert!(retx > 0, "loss {loss} needed retransmissions");
        } else {
            assert_eq!(retx, 0);
        }
        assert_eq!(w.read(oregs::BASE + 0x60), 1000, "FRAMES_SENT register");
        assert_eq!(
            w.read(oregs::BASE + oregs::STATUS) & 0xf,
            2,
            "back to connected after STREAM_END"
        );
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
    let dropped_so_far = w.read(oregs::BASE + 0x64);
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
        |w| w.cam.device_ref().controller().is_none(),
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
    w.run_until(
        |w| w.host.stats().stream_end.is_some(),
        Duration::from_secs(10),
    );
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
    w.run_until(
        |w| w.host.stats().stream_end.is_some(),
        Duration::from_secs(10),
    );
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
}
