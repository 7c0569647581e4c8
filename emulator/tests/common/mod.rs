//! What the integration tests that run a camera and a host share. Each test binary uses
//! some of it.
#![allow(dead_code)]

use std::ffi::OsStr;
use std::path::Path;
use std::process::Command;

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
