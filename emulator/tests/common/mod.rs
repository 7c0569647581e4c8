//! What the integration tests that run a camera and a host share. Each test binary uses
//! some of it.
#![allow(dead_code)]

use std::ffi::OsStr;
use std::path::Path;
use std::process::{Command, Stdio};

/// Run `python script args…` under `timeout secs`, print its stdout, and fail the test (saying
/// `what`, with stdout and stderr) unless it exits 0. Returns stdout: the script's JSON line.
pub fn check_script<S: AsRef<OsStr>>(
    secs: u32,
    python: &Path,
    script: &Path,
    args: impl IntoIterator<Item = S>,
    what: &str,
) -> String {
    let out = Command::new("timeout")
        .arg(secs.to_string())
        .arg(python)
        .arg(script)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{what}: cannot run {}: {e}", script.display()));
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    eprintln!("{what}: {text}");
    assert!(
        out.status.success(),
        "{what}: {text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    text
}

/// Whether a camera at `ip`:`port` answers a DISCOVERY (a full acknowledge) within `within`:
/// it is up once it does (a fixed sleep was too short on a loaded machine).
pub fn wait_for_discovery(ip: std::net::Ipv4Addr, port: u16, within: std::time::Duration) -> bool {
    let s = std::net::UdpSocket::bind("0.0.0.0:0").unwrap();
    s.set_read_timeout(Some(std::time::Duration::from_millis(100)))
        .unwrap();
    let t0 = std::time::Instant::now();
    while t0.elapsed() < within {
        let _ = s.send_to(&[0x42, 1, 0, 2, 0, 0, 0, 1], (ip, port));
        let mut b = [0u8; 600];
        if let Ok((n, _)) = s.recv_from(&mut b)
            && n == 8 + 0xf8
        {
            return true;
        }
    }
    false
}

/// The reference host at `local` for the ORSP camera at `camera` on `ports` (GVCP, camera
/// RoCEv2, host RoCEv2): `frames` frames, 8 buffers, the rest at its defaults.
pub fn host_options(
    camera: std::net::Ipv4Addr,
    local: std::net::Ipv4Addr,
    ports: (u16, u16, u16),
    frames: u64,
) -> rdmacam_hil::run::HostOptions {
    rdmacam_hil::run::HostOptions {
        gvcp_port: ports.0,
        rx_port: ports.2,
        camera_rx_port: ports.1,
        buffers: 8,
        ..rdmacam_hil::run::HostOptions::new(camera, local, frames)
    }
}

/// `rdmacam run` on loopback over the userspace RoCEv2 transport, on `ports` (GVCP, camera
/// RoCEv2, host RoCEv2); the caller adds the rest and spawns it.
pub fn udp_camera(ports: (u16, u16, u16)) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_rdmacam"));
    cmd.args(["run", "--transport", "udp", "--ip", "127.0.0.1"])
        .args(["--gvcp-port", &ports.0.to_string()])
        .args(["--roce-port", &ports.1.to_string()])
        .args(["--host-roce-port", &ports.2.to_string()]);
    cmd
}

/// Whether `tool` is on PATH.
pub fn have(tool: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// A network namespace holding the camera end of a veth pair `10.77.SUBNET.2/24`; the host end,
/// `10.77.SUBNET.1`, stays in this namespace. Both gone when dropped.
pub struct Netns {
    pub name: String,
    pub host_if: String,
    pub cam_if: String,
}

impl Netns {
    /// A namespace holding the camera end of a veth pair; `loss_pct` % of UDP packets arriving
    /// at either end are dropped by nftables (this kernel has no netem).
    pub fn new(tag: &str, subnet: u8, loss_pct: u32) -> Netns {
        let name = format!("rdmacam-{tag}-{}", std::process::id());
        let host_if = format!("rch{}{tag}", std::process::id() % 100000);
        let cam_if = format!("rcc{}{tag}", std::process::id() % 100000);
        let sh = |cmd: String| {
            let st = Command::new("sh").args(["-c", &cmd]).status().unwrap();
            assert!(st.success(), "{cmd}");
        };
        let ns = Netns {
            name: name.clone(),
            host_if: host_if.clone(),
            cam_if: cam_if.clone(),
        };
        sh(format!("ip netns add {name}"));
        sh(format!(
            "ip link add {host_if} type veth peer name {cam_if} netns {name}"
        ));
        sh(format!(
            "ip addr add 10.77.{subnet}.1/24 dev {host_if} && ip link set {host_if} up"
        ));
        sh(format!(
            "ip -n {name} addr add 10.77.{subnet}.2/24 dev {cam_if} && ip -n {name} link set {cam_if} up && ip -n {name} link set lo up"
        ));
        if loss_pct > 0 {
            let rule = |ns: &str, dev: &str| {
                format!(
                    "{ns} nft add table netdev rdmacam_loss && \
                     {ns} nft 'add chain netdev rdmacam_loss in {{ type filter hook ingress device {dev} priority 0; }}' && \
                     {ns} nft add rule netdev rdmacam_loss in meta l4proto udp numgen random mod 100 lt {loss_pct} counter drop"
                )
            };
            sh(rule("", &host_if));
            sh(rule(&format!("ip netns exec {name}"), &cam_if));
        }
        ns
    }

    /// Set the MTU of the host end and of the camera end.
    pub fn set_mtu(&self, host: u32, cam: u32) {
        let cmd = format!(
            "ip link set {} mtu {host} && ip -n {} link set {} mtu {cam}",
            self.host_if, self.name, self.cam_if
        );
        let st = Command::new("sh").args(["-c", &cmd]).status().unwrap();
        assert!(st.success(), "{cmd}");
    }

    /// UDP packets the loss rules dropped, both ends.
    pub fn dropped(&self) -> u64 {
        let out = Command::new("sh")
            .args(["-c", &format!("nft list table netdev rdmacam_loss; ip netns exec {} nft list table netdev rdmacam_loss", self.name)])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout)
            .split_whitespace()
            .collect::<Vec<_>>()
            .windows(2)
            .filter(|w| w[0] == "packets")
            .filter_map(|w| w[1].parse::<u64>().ok())
            .sum()
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("sh")
            .args(["-c", &format!("nft delete table netdev rdmacam_loss 2>/dev/null; ip link del {} 2>/dev/null; ip netns del {}", self.host_if, self.name)])
            .status();
    }
}

/// Whether this test may make namespaces (root, iproute2, nftables); says SKIPPED if not, and
/// fails instead when RDMACAM_REQUIRE_ARAVIS is set (CI).
pub fn can_make_netns() -> bool {
    let root = Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| o.stdout.starts_with(b"0"));
    let ok = root && have("ip") && have("nft");
    if !ok {
        assert!(
            std::env::var("RDMACAM_REQUIRE_ARAVIS").is_err(),
            "namespace tests need root, ip and nft (RDMACAM_REQUIRE_ARAVIS is set)"
        );
        eprintln!("SKIPPED: needs root, iproute2 and nftables");
    }
    ok
}
