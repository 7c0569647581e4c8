//! The camera's log lines: device events, a connection's end, its transport counters.

use rdmacam_protocol::device::DeviceEvent;
use tracing::{info, warn};

use crate::camera::CameraCore;

/// Why an ORSP connection ended in the error state (retry exhaustion, fatal NAK).
pub(super) fn log_failure(cam: &CameraCore) {
    let ch = cam.device().orsp();
    if ch.state() == rdmacam_protocol::orsp::channel::State::Error {
        let code = ch.last_error();
        let why = match code {
            rdmacam_protocol::orsp::msg::event::RETRY_EXCEEDED => {
                "transport retries exhausted: the host stopped acknowledging"
            }
            rdmacam_protocol::orsp::msg::event::REMOTE_ERROR => {
                "the host answered with a fatal NAK (access or invalid request)"
            }
            _ => "transport error",
        };
        warn!(
            code = format!("{code:#06x}"),
            "ORSP connection failed: {why}; idle until the host reconnects or its heartbeat expires"
        );
    }
}

/// The ORSP connection's transport counters (live, or of the last connection).
pub(super) fn log_rc(cam: &CameraCore) {
    if let Some(rc) = cam.rc_counters() {
        let o = cam.device().orsp().counters();
        info!(
            frames = o.frames_sent,
            dropped = o.frames_dropped,
            packets = rc.packets_sent,
            retransmitted = rc.retransmitted_packets,
            seq_naks = rc.seq_naks,
            timeouts = rc.timeouts,
            go_backs = rc.go_backs,
            spurious_timeouts = rc.spurious_timeouts,
            new_data_probes = rc.new_data_probes,
            quiet_waits = rc.quiet_waits,
            tail_probes = rc.tail_probes,
            probe_gobacks = rc.probe_gobacks,
            window = rc.window,
            window_cuts = rc.window_cuts,
            srtt_us = rc.srtt_ns / 1000,
            min_rtt_us = rc.min_rtt_ns / 1000,
            "ORSP transport"
        );
    }
}

pub(super) fn log_event(ev: &DeviceEvent) {
    match ev {
        DeviceEvent::ControlTaken(h) => info!(host = %h, "control taken"),
        DeviceEvent::ControlReleased(h) => info!(host = %h, "control released"),
        DeviceEvent::HeartbeatExpired(h) => {
            warn!(host = %h, "heartbeat expired: control dropped, stream closed")
        }
        DeviceEvent::AcquisitionStarted => info!("acquisition started"),
        DeviceEvent::AcquisitionStopped => info!("acquisition stopped"),
        DeviceEvent::OrspConnect(p) => info!(
            host_qpn = p.host_qpn,
            pmtu = p.pmtu.bytes(),
            "ORSP connected"
        ),
        DeviceEvent::OrspDisconnected => info!("ORSP disconnected"),
        DeviceEvent::ForceIp {
            ip,
            netmask,
            gateway,
        } => warn!(
            %ip, %netmask, %gateway,
            "FORCEIP accepted in the registers; the emulator keeps its socket address (restart with --ip to move)"
        ),
    }
}
