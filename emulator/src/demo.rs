//! `rdmacam demo`: a virtual camera and the reference host on loopback, streaming ORSP (RoCEv2
//! RDMA WRITEs over UDP sockets) with every frame checked. No root, no RDMA hardware.
//!
//! Ports (chosen to stay clear of real cameras on 3956 and RDMA NICs on 4791, and below Linux's
//! ephemeral range 32768-60999, where any socket bound to port 0 may hold them): GVCP 29560,
//! camera RoCEv2 29791, host RoCEv2 29792, all on 127.0.0.1.

use std::net::Ipv4Addr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::{Context, Result};
use rdmacam_hil::host::Summary;
use rdmacam_hil::run::{HostOptions, run_host};
use rdmacam_protocol::gev::PixelFormat;

use crate::run::{CameraSummary, RunOptions, run};

/// GVCP port of the demo camera.
pub const DEMO_GVCP_PORT: u16 = 29560;
/// RoCEv2 port of the demo camera.
pub const DEMO_CAMERA_ROCE_PORT: u16 = 29791;
/// RoCEv2 port of the demo host.
pub const DEMO_HOST_ROCE_PORT: u16 = 29792;

/// Demo settings.
#[derive(Debug, Clone)]
pub struct DemoOptions {
    /// Image width.
    pub width: u32,
    /// Image height.
    pub height: u32,
    /// Pixel format.
    pub pixel_format: PixelFormat,
    /// Frames to stream.
    pub frames: u64,
    /// Frame rate.
    pub fps: f32,
    /// Probability of dropping each RoCEv2 packet, both directions.
    pub loss: f64,
    /// Seed for loss and noise.
    pub seed: u64,
    /// Host frame buffers.
    pub buffers: u32,
    /// Live statistics on stderr.
    pub progress: bool,
    /// Faults on demand (`--fault`) the camera injects.
    pub faults: Vec<crate::fault::FaultSpec>,
    /// Times the host connects again after a failed stream (a reboot fault needs one).
    pub reconnects: u32,
}

/// What the demo's host and camera saw.
#[derive(Debug, Clone, serde::Serialize)]
pub struct DemoSummary {
    /// The host's summary (its fields are the JSON's top level, as before).
    #[serde(flatten)]
    pub host: Summary,
    /// The camera's counters: RoCE, faults injected.
    pub camera: CameraSummary,
}

/// Run the demo and return the host's and the camera's summaries.
pub fn demo(o: &DemoOptions) -> Result<DemoSummary> {
    let ip = Ipv4Addr::LOCALHOST;
    let stop_camera = Arc::new(AtomicBool::new(false));
    if o.frames == 0 {
        anyhow::bail!("--frames must be at least 1");
    }
    if o.buffers == 0 {
        anyhow::bail!("--buffers must be at least 1: the camera writes frames only into buffers");
    }
    crate::fault::check_faults(&o.faults, 1)?;
    if o.faults
        .iter()
        .any(|f| f.kind == rdmacam_protocol::device::faults::FaultKind::ResendUnavailable)
    {
        anyhow::bail!(
            "--fault resend-unavailable answers GVSP resend requests, and the demo's host \
             streams ORSP, which sends none (its losses are resent by the RC transport): try \
             rdmacam run with an aravis host (docs/virtual-camera.md)"
        );
    }
    let mut cam_opts = RunOptions::new(ip, "DEMO0001");
    let d = &mut cam_opts.device;
    d.sensor_width = o.width.max(2048);
    d.sensor_height = o.height.max(2048);
    d.width = o.width;
    d.height = o.height;
    d.pixel_format = o.pixel_format;
    d.frame_rate = o.fps;
    // loopback is no 10G link: pace only above what it carries
    d.link_speed_mbps = 100_000;
    d.first_frame_mbps = 0;
    let cam_opts = RunOptions {
        seed: o.seed,
        roce: true,
        roce_port: DEMO_CAMERA_ROCE_PORT,
        host_roce_port: DEMO_HOST_ROCE_PORT,
        gvcp_port: DEMO_GVCP_PORT,
        loss: o.loss,
        faults: o.faults.clone(),
        ..cam_opts
    };
    let camera = {
        let stop = stop_camera.clone();
        std::thread::Builder::new()
            .name("camera".into())
            .spawn(move || run(cam_opts, stop))
            .context("cannot start the camera thread")?
    };
    // wait for the camera's sockets (its errors, e.g. a port in use, surface here)
    std::thread::sleep(Duration::from_millis(200));
    if camera.is_finished() {
        return match camera.join() {
            Ok(Err(e)) => Err(e.context("the demo camera did not start")),
            _ => Err(anyhow::anyhow!("the demo camera stopped at once")),
        };
    }
    let host = HostOptions {
        gvcp_port: DEMO_GVCP_PORT,
        rx_port: DEMO_HOST_ROCE_PORT,
        camera_rx_port: DEMO_CAMERA_ROCE_PORT,
        buffers: o.buffers,
        loss: o.loss,
        seed: o.seed,
        fps: Some(o.fps),
        progress: o.progress,
        reconnects: o.reconnects,
        ..HostOptions::new(ip, ip, o.frames)
    };
    let result = run_host(&host, &Arc::new(AtomicBool::new(false)));
    stop_camera.store(true, Ordering::SeqCst);
    let camera = match camera.join() {
        Ok(Ok(c)) => c,
        Ok(Err(e)) => return Err(e.context("the demo camera failed")),
        Err(_) => anyhow::bail!("the demo camera's thread panicked"),
    };
    Ok(DemoSummary {
        host: result?,
        camera,
    })
}
