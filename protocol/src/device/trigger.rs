//! Triggers and acquisition: the frame and acquisition-start triggers (software, Line0, action
//! commands), starting and stopping acquisition, and the events they raise on the message
//! channel.

use core::net::SocketAddrV4;
use core::time::Duration;

use super::acquisition::{Timing, TriggerOutcome};
use super::events::{EventItem, MessagePacket};
use super::features::acquisition::{activation, source};
use super::features::events::EVENTS;
use super::{Device, DeviceEvent, regs};
use crate::rc::Instant;

impl Device {
    /// The register of trigger `selector` at `base` (TRIGGER_MODE, ...).
    pub(super) fn trigger_reg(&self, base: u32, selector: u32) -> u32 {
        self.cam.get(base + selector * regs::TRIGGER_STRIDE)
    }

    /// Whether trigger `selector` is on and listens to `src`.
    pub(super) fn trigger_armed(&self, selector: u32, src: u32) -> bool {
        self.trigger_reg(regs::TRIGGER_MODE, selector) == 1
            && self.trigger_reg(regs::TRIGGER_SOURCE, selector) == src
    }

    /// Free running: FrameStart's trigger is off.
    pub(super) fn free_run(&self) -> bool {
        self.trigger_reg(regs::TRIGGER_MODE, 0) == 0
    }

    pub(super) fn timing(&self) -> Timing {
        Timing::new(
            self.cam.f32(regs::FRAME_RATE),
            self.cam.f32(regs::EXPOSURE_TIME),
        )
    }

    /// Whether the transport can take another frame (else a frame trigger is missed).
    pub(super) fn can_take_frame(&self) -> bool {
        if self.orsp.is_connected() {
            self.orsp_memory_free && self.orsp.ready_for_frame()
        } else {
            self.stream_open() && !self.channel.busy()
        }
    }

    /// Trigger `selector` fired at `now`.
    pub(super) fn fire_trigger(&mut self, now: Instant, selector: u32) {
        if selector == 1 {
            // AcquisitionStart: an armed acquisition starts
            if self.acq.armed() {
                self.begin_acquisition(now);
            }
            return;
        }
        let delay = Duration::from_nanos(
            (f64::from(f32::from_bits(self.trigger_reg(regs::TRIGGER_DELAY, 0))) * 1e3) as u64,
        );
        let can_take = self.can_take_frame();
        if self.acq.trigger(now, delay, self.timing(), can_take) == TriggerOutcome::Missed {
            let missed = self.acq.missed();
            self.raise(now, 4, 0, Some(missed));
        }
    }

    /// Fire every trigger whose source is `src` (an edge already matched by the caller).
    pub(super) fn fire_source(&mut self, now: Instant, src: u32) {
        for selector in (0..regs::TRIGGERS).rev() {
            if self.trigger_armed(selector, src) {
                self.fire_trigger(now, selector);
            }
        }
    }

    /// Input Line0 is at `level` from `now` (the emulator's `--trigger-hz` drives it): an edge
    /// fires the triggers whose source is Line0 and whose TriggerActivation matches it.
    pub fn set_line0(&mut self, now: Instant, level: bool) {
        if level == self.line0 {
            return;
        }
        self.line0 = level;
        for selector in (0..regs::TRIGGERS).rev() {
            let edge_ok = match self.trigger_reg(regs::TRIGGER_ACTIVATION, selector) {
                activation::RISING_EDGE => level,
                activation::FALLING_EDGE => !level,
                _ => true,
            };
            if edge_ok && self.trigger_armed(selector, source::LINE0) {
                self.fire_trigger(now, selector);
            }
        }
    }

    /// Action signals fired (bit n = signal n, TriggerSource Action(n+1)).
    pub(super) fn fire_actions(&mut self, now: Instant, signals: u8) {
        for (n, src) in [source::ACTION1, source::ACTION2].into_iter().enumerate() {
            if signals & (1 << n) != 0 {
                self.fire_source(now, src);
            }
        }
    }

    /// AcquisitionStart: start, or with the AcquisitionStart trigger on, wait for it.
    pub(super) fn start_acquisition(&mut self, now: Instant) {
        if self.acq.running() || self.acq.armed() {
            return;
        }
        if self.trigger_reg(regs::TRIGGER_MODE, 1) == 1 {
            self.acq.arm();
        } else {
            self.begin_acquisition(now);
        }
    }

    pub(super) fn begin_acquisition(&mut self, now: Instant) {
        // Like a sensor, a free-running camera reads the first frame out an exposure later.
        self.acq.start(now, self.timing(), self.free_run());
        self.orsp.start_acquisition();
        self.event(DeviceEvent::AcquisitionStarted);
        self.raise(now, 0, 0, None);
    }

    pub(super) fn stop_acquisition(&mut self, now: Instant) {
        let was = self.acq.running();
        self.acq.stop();
        if was {
            self.orsp.stop_acquisition();
            self.event(DeviceEvent::AcquisitionStopped);
            self.raise(now, 1, 0, None);
        }
    }

    /// Raise event `selector` (EventSelector value) if the host switched it on.
    pub(super) fn raise(
        &mut self,
        now: Instant,
        selector: usize,
        block_id: u64,
        data: Option<u32>,
    ) {
        self.raise_at(self.ticks(now), selector, block_id, data);
    }

    pub(super) fn raise_at(
        &mut self,
        timestamp: u64,
        selector: usize,
        block_id: u64,
        data: Option<u32>,
    ) {
        let on = self.cam.get(regs::EVENT_NOTIFICATION + 4 * selector as u32) == 1;
        if on && let Some(def) = EVENTS.get(selector) {
            self.messages.push(EventItem {
                id: def.id,
                block_id,
                timestamp,
                data,
            });
        }
    }

    /// The next message-channel datagram (an event, or its retransmission) to send at `now`
    /// from the MCSP port, written into `buf`.
    pub fn poll_message(&mut self, now: Instant, buf: &mut [u8]) -> Option<MessagePacket> {
        self.messages.poll_transmit(now, buf)
    }

    /// A datagram from `src` received on the message channel's socket (the host's
    /// acknowledge; only the channel's destination, MCDA:MCP, may give one).
    pub fn handle_message(&mut self, src: SocketAddrV4, datagram: &[u8]) -> bool {
        self.messages.handle_ack(src, datagram)
    }
}
