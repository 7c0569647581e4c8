//! Power-up: the device a virtual camera boots with (also after a reboot fault, which loses
//! every setting), and which faults its transport can carry out.

use anyhow::{Result, bail};
use rdmacam_protocol::device::faults::FaultKind;
use rdmacam_protocol::device::pattern::SyntheticSource;
use rdmacam_protocol::device::{Device, DeviceConfig};
use rdmacam_protocol::wire::pmtu::Pmtu;

use super::RunOptions;
use crate::camera::{CameraCore, EmuSource, ImageSource, RocePorts, new_camera_with};
use crate::fault::FaultEngine;

/// Whether this camera's transport can carry out a fault of `kind`: with `--transport verbs`
/// the RDMA device sends the packets (no packet faults, no reboot); with `--transport gvsp` no
/// RoCEv2 packet leaves to carry an ECN mark.
pub(super) fn transport_carries(opts: &RunOptions, kind: FaultKind) -> bool {
    if opts.verbs.is_some() {
        kind.in_device() || kind == FaultKind::Silence || kind == FaultKind::Stall
    } else {
        opts.roce || kind != FaultKind::Ecn
    }
}

/// Faults this camera's transport cannot carry out are refused at start, not accepted and
/// never injected (a host's FaultInject of them is refused NOT_IMPLEMENTED: [`boot`]).
pub(super) fn refuse_faults_the_transport_lacks(opts: &RunOptions) -> Result<()> {
    let lacking = opts
        .faults
        .iter()
        .find(|f| f.camera.is_none_or(|c| c == opts.index) && !transport_carries(opts, f.kind));
    match lacking {
        None => Ok(()),
        Some(_) if opts.verbs.is_some() => bail!(
            "with --transport verbs the RDMA device sends the packets: packet faults and reboot \
             need --transport udp or gvsp (drop-frame, resend-unavailable, stall and silence work)"
        ),
        Some(f) => bail!(
            "--fault {} marks RoCEv2 packets, and --transport gvsp sends none: it needs \
             --transport udp (GVSP has no congestion notification a host answers)",
            f.kind.cli_name()
        ),
    }
}

/// Power-up: also after a reboot fault, which loses every setting. `camera_tx` is the RoCEv2
/// socket's own port (0 without one).
pub(super) fn boot(
    opts: &RunOptions,
    cfg: &DeviceConfig,
    faults: &FaultEngine,
    camera_tx: u16,
    max_pmtu: Option<Pmtu>,
) -> CameraCore {
    // replayed images are the sensor's: TestPattern Off, and a host may pick a pattern
    let sensor = opts.images.is_some();
    let mut device = Device::new(DeviceConfig {
        sensor,
        ..cfg.clone()
    });
    device.orsp_mut().set_cm_port(opts.cm_port);
    if let Some(p) = max_pmtu {
        device.orsp_mut().set_max_pmtu(p);
    }
    let f = device.faults();
    let carried: Vec<FaultKind> = FaultKind::ALL
        .into_iter()
        .filter(|&k| transport_carries(opts, k))
        .collect();
    f.set_io(&carried);
    f.set_seed(opts.seed ^ 0xd3 ^ ((opts.index as u64) << 32));
    f.set_frame_drop(faults.rule(FaultKind::FrameDrop));
    f.set_resend_unavailable(faults.rule(FaultKind::ResendUnavailable));
    let source = match &opts.images {
        Some(set) => EmuSource::Images(
            ImageSource::new(set.clone()),
            SyntheticSource::new(opts.seed),
        ),
        None => EmuSource::Synthetic(SyntheticSource::new(opts.seed)),
    };
    let ports = RocePorts {
        // The socket's own ephemeral port, not the QP's entropy port: that one (0xC000 and up)
        // lies in Linux's ephemeral range, and when another socket on the machine holds it the
        // camera cannot send at all (seen in CI: EADDRINUSE, frames dropped).
        camera_tx,
        host_rx: opts.host_roce_port,
    };
    // the QPN and first PSN of every connection come from the OS's randomness, so a host that
    // is not in control cannot predict them
    let mut cam = new_camera_with(device, source, ports).with_entropy(rand::random::<u64>);
    if let Some(a) = opts.roce_ip {
        cam = cam.with_roce_address(a);
    }
    cam.set_icrc_offload(opts.data_mover);
    // a few UDP GSO sends per wake-up: the pacer lets a run of packets go at once, then the
    // camera sleeps until the next run is due (it used to send each packet as its slot came,
    // 3.3 us apart at 10 Gbit/s, and never slept)
    cam.set_pace_burst(rdmacam_protocol::rc::PACE_BURST);
    cam
}
