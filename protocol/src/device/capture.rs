//! Capture: a due exposure becomes a [`Frame`] with the chunks the settings ask for, handed to
//! the GVSP stream channel or, while an ORSP host is connected, to the transport.

use super::acquisition::Exposure;
use super::chunks::Chunks;
use super::features::acquisition::mode;
use super::frame::{Frame, FrameSource};
use super::stream::{ChannelConfig, StreamPacket};
use super::{Device, features, regs};
use crate::orsp;
use crate::rc::Instant;

impl Device {
    /// Capture the frame of exposure `e` as block `block_id`: its timestamp is the start of
    /// exposure, its chunks what the settings say now. Raises FrameStart and ExposureEnd.
    pub(super) fn capture<S: FrameSource + ?Sized>(
        &mut self,
        src: &mut S,
        e: Exposure,
        block_id: u64,
    ) -> Frame {
        let start = self.ticks(e.start);
        let mut frame = src.capture(&self.frame_spec(), start);
        frame.timestamp = start;
        frame.chunks = self.chunks(block_id);
        self.raise_at(start, 2, block_id, None);
        self.raise_at(self.ticks(e.readout), 3, block_id, None);
        frame
    }

    /// The chunk data a frame captured now as block `frame_id` carries.
    pub(super) fn chunks(&self, frame_id: u64) -> Chunks {
        let mut mask = 0u16;
        for (i, _) in features::chunks::CHUNKS.iter().enumerate() {
            if self.cam.get(regs::CHUNK_ENABLE + 4 * i as u32) == 1 {
                mask |= 1 << i;
            }
        }
        Chunks {
            active: self.cam.get(regs::CHUNK_MODE_ACTIVE) == 1,
            mask: mask | 1,
            frame_id,
            exposure_us: f64::from(self.cam.f32(regs::EXPOSURE_TIME)),
            gain_db: f64::from(self.cam.f32(regs::GAIN)),
        }
    }

    /// The frame of exposure `e` was taken at `now`: count it; free running, the next one
    /// follows a frame period later (never in the past). Returns whether it was the last one
    /// SingleFrame or MultiFrame asks for.
    pub(super) fn frame_taken(&mut self, now: Instant, e: Exposure) -> bool {
        let limit = match self.cam.get(regs::ACQUISITION_MODE) {
            mode::SINGLE_FRAME => Some(1),
            mode::MULTI_FRAME => Some(self.cam.get(regs::FRAME_COUNT)),
            _ => None,
        };
        self.acq.taken(now, e, self.timing(), limit)
    }

    pub(super) fn channel_config(&self) -> ChannelConfig {
        ChannelConfig {
            dst_ip: self.scda,
            dst_port: self.scp_port,
            packet_size: self.scps & 0xffff,
            delay_ns: u64::from(self.scpd),
            extended: self.gvsp_config & regs::GVSP_CONFIG_EXTENDED_ID != 0,
            link_bps: u64::from(self.cfg.link_speed_mbps) * 1_000_000,
        }
    }

    pub(super) fn stream_open(&self) -> bool {
        self.scp_port != 0 && !self.scda.is_unspecified()
    }

    /// The next GVSP packet to send at `now`, written into `buf` (at least SCPS bytes).
    pub fn poll_stream<S: FrameSource + ?Sized>(
        &mut self,
        now: Instant,
        src: &mut S,
        buf: &mut [u8],
    ) -> Option<StreamPacket> {
        self.last_now = now;
        if !self.stream_open() {
            return None;
        }
        if !self.orsp.is_connected()
            && !self.channel.busy()
            && self.acq.is_due(now)
            && let Some(e) = self.acq.due(now, self.timing())
        {
            let mut cfg = self.channel_config();
            let frame = self.capture(src, e, self.channel.next_block_id(cfg.extended));
            if self.faults.drop_frame() {
                // captured, never sent: the host sees the block id skipped
                self.channel.skip_block(cfg.extended);
                if self.frame_taken(now, e) {
                    self.stop_acquisition(now);
                }
                return None;
            }
            if self.acq.frames() == 0 && self.cfg.first_frame_mbps > 0 {
                cfg.link_bps = cfg
                    .link_bps
                    .min(u64::from(self.cfg.first_frame_mbps) * 1_000_000);
            }
            self.channel.start_frame(frame, cfg);
            if self.frame_taken(now, e) {
                self.stop_acquisition(now);
            }
        }
        let dst = (self.scda, self.scp_port);
        self.channel.poll_transmit(now, src, dst, buf)
    }

    /// ORSP: capture the next frame if one is due and the channel can take it. The caller puts
    /// its bytes in memory and passes it to [`orsp_send_frame`](Self::orsp_send_frame).
    pub fn poll_orsp_frame<S: FrameSource + ?Sized>(
        &mut self,
        now: Instant,
        src: &mut S,
    ) -> Option<Frame> {
        self.last_now = now;
        if !(self.orsp_memory_free && self.orsp.ready_for_frame()) {
            return None;
        }
        // nothing due: no Timing from the registers (two f32 reads and a division, per packet)
        if !self.acq.is_due(now) {
            return None;
        }
        let e = self.acq.due(now, self.timing())?;
        let frame = self.capture(src, e, self.orsp.next_block_id());
        if self.faults.drop_frame() {
            // captured, never sent: the next LEADER flags the gap
            self.orsp.skip_frame();
            if self.frame_taken(now, e) {
                self.stop_acquisition(now);
            }
            return None;
        }
        // The last frame of SingleFrame/MultiFrame still goes out: stop once it is handed over.
        self.stop_after_frame = self.frame_taken(now, e);
        Some(frame)
    }

    /// ORSP: send a frame from [`poll_orsp_frame`](Self::poll_orsp_frame) whose bytes sit at
    /// payload handle `handle`.
    pub fn orsp_send_frame(&mut self, frame: &Frame, handle: u32) -> orsp::FrameOutcome {
        let outcome = self.orsp.send_frame(
            &frame.leader(),
            &frame.trailer(),
            frame.size() as u64,
            handle,
        );
        if core::mem::take(&mut self.stop_after_frame) {
            self.stop_acquisition(self.last_now);
        }
        outcome
    }
}
