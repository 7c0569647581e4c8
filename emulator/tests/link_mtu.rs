//! ORSP across a link of an ordinary Ethernet MTU (1,500 bytes), camera and reference host in two
//! network namespaces joined by a veth pair. RoCEv2 sends with Don't Fragment, so a packet of a
//! 4096-byte path MTU (4,156 bytes on the wire) does not pass such a link: before the camera
//! offered what its interface carries and the host asked for what its route carries, a stream
//! there sent nothing at all and ended in "retries exhausted" after ~1,800 resends.

use std::net::{IpAddr, Ipv4Addr, SocketAddrV4};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use rdmacam_hil::gvcp::{GvcpClient, GvcpError};
use rdmacam_protocol::device::regs;
use rdmacam_protocol::orsp::regs as oregs;
use rdmacam_protocol::wire::pmtu::Pmtu;

mod common;
use common::{Netns, can_make_netns};

/// GVCP, the camera's RoCEv2 port (inside its namespace), the host's (in this one).
const PORTS: (u16, u16, u16) = (3956, 4791, 18793);

struct Camera(Child, tempfile::NamedTempFile);

impl Camera {
    fn start(ns: &Netns, ip: Ipv4Addr) -> Camera {
        let log = tempfile::NamedTempFile::new().unwrap();
        let child = Command::new("ip")
            .args(["netns", "exec", &ns.name])
            .arg(env!("CARGO_BIN_EXE_rdmacam"))
            .args(["run", "--transport", "udp", "--ip", &ip.to_string()])
            .args(["--host-roce-port", &PORTS.2.to_string()])
            .args(["--width", "640", "--height", "480", "--fps", "200"])
            .args(["--duration", "60"])
            .stdout(Stdio::null())
            .stderr(log.reopen().unwrap())
            .spawn()
            .unwrap();
        let cam = Camera(child, log);
        assert!(
            common::wait_for_discovery(ip, PORTS.0, Duration::from_secs(10)),
            "the camera at {ip} did not come up"
        );
        cam
    }

    /// What the camera logged so far.
    fn log(&self) -> String {
        std::fs::read_to_string(self.1.path()).unwrap()
    }
}

impl Drop for Camera {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The largest path MTU the camera offers (ORSP_CAPS bits 11..8), in bytes, and its answer to a
/// host asking for 4096 (PATH_MTU code 5) while in control.
fn offered(camera: Ipv4Addr, local: Ipv4Addr) -> (u32, Result<(), GvcpError>) {
    let mut g = GvcpClient::new(local, SocketAddrV4::new(camera, PORTS.0)).unwrap();
    let caps = g.read(oregs::BASE + oregs::ORSP_CAPS).unwrap();
    g.write(regs::CCP, regs::CCP_CONTROL).unwrap();
    let asked = g.write(oregs::BASE + oregs::PATH_MTU, 5);
    g.write(regs::CCP, 0).unwrap();
    let pmtu = Pmtu::from_code(((caps >> 8) & 0xf) as u8).map_or(0, Pmtu::bytes);
    (pmtu, asked)
}

/// 50 frames into the reference host, and the path MTU code it left in PATH_MTU.
fn stream(camera: Ipv4Addr, local: Ipv4Addr) -> (rdmacam_hil::host::Summary, u32) {
    let o = common::host_options(camera, local, PORTS, 50);
    let s = rdmacam_hil::run::run_host(&o, &Arc::new(AtomicBool::new(false))).unwrap();
    let mut g = GvcpClient::new(local, SocketAddrV4::new(camera, PORTS.0)).unwrap();
    (s, g.read(oregs::BASE + oregs::PATH_MTU).unwrap())
}

#[test]
fn a_1500_byte_link_carries_the_stream_at_a_path_mtu_of_1024() {
    if !can_make_netns() {
        return;
    }
    let subnet = (std::process::id() % 200) as u8 + 30;
    let ns = Netns::new("m", subnet, 0);
    let (host, cam_ip) = (
        Ipv4Addr::new(10, 77, subnet, 1),
        Ipv4Addr::new(10, 77, subnet, 2),
    );
    // the kernel's own figures for both ends
    assert_eq!(
        rdmacam_io::link::interface_mtu(IpAddr::V4(host)).unwrap(),
        Some(1500)
    );
    assert_eq!(
        rdmacam_io::link::route_mtu(IpAddr::V4(host), IpAddr::V4(cam_ip)).unwrap(),
        1500
    );

    // both ends at 1500: the camera offers 1024 (a 1,024-byte payload and 96 bytes of headers
    // fit in 1,500; 2,048 do not) and refuses 4096 with a status the host can read
    {
        let _cam = Camera::start(&ns, cam_ip);
        let (pmtu, asked) = offered(cam_ip, host);
        assert_eq!(pmtu, 1024);
        assert!(
            matches!(
                asked,
                Err(GvcpError::Status(
                    rdmacam_protocol::gev::status::INVALID_PARAMETER
                ))
            ),
            "PATH_MTU 4096 on a 1500-byte link: {asked:?}"
        );
        let (s, asked) = stream(cam_ip, host);
        assert_eq!(asked, 3, "the host's PATH_MTU code");
        assert_eq!((s.frames_received, s.frames_bad), (50, 0), "{s:?}");
        assert_eq!(s.bytes_received, 50 * 640 * 480);
        assert_eq!(s.retransmitted_packets, 0, "{s:?}");
    }

    // a camera on a jumbo link whose host end is 1500: the camera offers 4096, the host's route
    // carries 1024, and the host asks for that. (A switch drops every frame longer than a
    // port's MTU; the veth drops a lone packet so long but lets a GSO run through whole, so
    // with the host asking 4096 here each frame's last packet was dropped and resent.)
    ns.set_mtu(1500, 9000);
    {
        let _cam = Camera::start(&ns, cam_ip);
        let (pmtu, _) = offered(cam_ip, host);
        assert_eq!(pmtu, 4096);
        let (s, asked) = stream(cam_ip, host);
        assert_eq!(asked, 3, "the host's PATH_MTU code");
        assert_eq!((s.frames_received, s.frames_bad), (50, 0), "{s:?}");
        assert_eq!(s.retransmitted_packets, 0, "{s:?}");
    }

    // a route that carries less than the camera's interface (a tunnel, a learned path MTU):
    // the camera offers 1024, and the kernel refuses its packets as too long. The camera says
    // so in its log, keeps UDP segmentation offload for when the route carries them again, and
    // the host hears the connection fail (retries exhausted) instead of waiting forever.
    ns.set_mtu(1500, 1500);
    let route = |mtu: &str| {
        let cmd = format!(
            "ip -n {} route replace 10.77.{subnet}.0/24 dev {} {mtu}",
            ns.name, ns.cam_if
        );
        assert!(
            Command::new("sh")
                .args(["-c", &cmd])
                .status()
                .unwrap()
                .success(),
            "{cmd}"
        );
    };
    route("mtu lock 1000");
    {
        let cam = Camera::start(&ns, cam_ip);
        let mut o = common::host_options(cam_ip, host, PORTS, 5);
        o.reconnects = 0;
        let failed = rdmacam_hil::run::run_host(&o, &Arc::new(AtomicBool::new(false)));
        assert!(failed.is_err(), "{failed:?}");
        route("");
        let (s, _) = stream(cam_ip, host);
        assert_eq!((s.frames_received, s.frames_bad), (50, 0), "{s:?}");
        let log = cam.log();
        assert!(
            log.contains("RoCEv2 send refused: a packet is longer than the route"),
            "{log}"
        );
        assert!(!log.contains("no UDP segmentation offload"), "{log}");
    }
}
