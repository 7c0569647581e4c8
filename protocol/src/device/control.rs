//! Control privilege and heartbeat: which host may write, taking and releasing control, and
//! what is undone when control ends.

use core::net::SocketAddrV4;
use core::time::Duration;

use super::{Device, DeviceEvent, Status, regs};
use crate::gev::status;
use crate::rc::Instant;

impl Device {
    /// Whether `src` may write registers: only the host holding control (CCP is written
    /// through [`Device::write_ccp`], which is how a host takes it). GigE Vision grants writes
    /// with the control privilege; a camera nobody controls took writes from anyone before, so
    /// a bystander could inject faults (silence, reboot), point the stream elsewhere (SCDA) or
    /// change the image while the host that was about to take control read its registers.
    /// Reads stay open to all (monitor access). docs/virtual-camera.md, "Who may write".
    pub(super) fn may_write(&self, src: SocketAddrV4) -> bool {
        self.controller == Some(src)
    }

    /// What register `addr` holding `v` reads to `src`. The numbers that identify the ORSP
    /// connection (the device's QPN and first PSN, the host's QPN and first PSN) are the
    /// controlling host's alone: to anyone else they read 0. A bystander who read them could
    /// forge the RC ACKs and NAKs that end the stream. Everything else reads the same to all.
    pub(super) fn shown_to(&self, src: SocketAddrV4, addr: u32, v: u32) -> u32 {
        use crate::orsp::regs as o;
        let hidden = matches!(
            addr.wrapping_sub(o::BASE),
            o::DEVICE_QPN | o::DEVICE_SQ_PSN | o::HOST_QPN | o::HOST_SQ_PSN
        );
        if hidden && self.controller != Some(src) {
            0
        } else {
            v
        }
    }

    pub(super) fn write_ccp(
        &mut self,
        now: Instant,
        src: SocketAddrV4,
        v: u32,
    ) -> Result<(), Status> {
        let wants = v & (regs::CCP_EXCLUSIVE | regs::CCP_CONTROL);
        match (self.controller, wants != 0) {
            (None, true) => {
                self.controller = Some(src);
                self.ccp = wants;
                self.refresh_heartbeat(now);
                self.event(DeviceEvent::ControlTaken(src));
                Ok(())
            }
            (Some(c), true) if c == src => {
                self.ccp = wants;
                Ok(())
            }
            (Some(c), false) if c == src => {
                self.release_control();
                self.event(DeviceEvent::ControlReleased(src));
                Ok(())
            }
            (None, false) => Ok(()),
            _ => {
                // switchover is not offered: another host cannot take or drop control
                self.counters.access_denied += 1;
                Err(status::ACCESS_DENIED)
            }
        }
    }

    pub(super) fn release_control(&mut self) {
        let was_connected = self.orsp.is_connected();
        self.orsp.control_lost();
        if was_connected {
            self.event(DeviceEvent::OrspDisconnected);
        }
        self.controller = None;
        self.ccp = 0;
        self.heartbeat_deadline = None;
        self.stop_acquisition(self.last_now);
        self.scp_port = 0;
        self.cam.set(regs::TL_PARAMS_LOCKED, 0);
        self.channel.reset();
        self.messages.close();
        self.actions.clear_scheduled();
        self.faults.control_ended();
    }

    pub(super) fn refresh_heartbeat(&mut self, now: Instant) {
        self.other_port = None;
        self.heartbeat_deadline = if self.gvcp_config & regs::GVCP_CONFIG_HEARTBEAT_DISABLE != 0 {
            None
        } else {
            Some(now + Duration::from_millis(u64::from(self.heartbeat_ms)))
        };
    }
}
