//! What the camera tells its user as it runs, once each: frames falling behind the frame
//! rate, a frame dropped for want of a host buffer, a latency log it cannot write.

use std::io::Write;

use rdmacam_protocol::device::faults::FaultKind;
use tracing::warn;

use super::CameraLoop;

impl CameraLoop {
    /// Once per run, when free-running frames first fall behind AcquisitionFrameRate: the
    /// host gets fewer frames than it asked for, none of them lost, and should hear why. And
    /// once, when a frame is dropped for want of a host buffer (not by a fault): that one is
    /// lost, and the host should hear why too.
    pub(super) fn tell_frames_behind(&mut self) {
        let d = self.cam.device();
        let fault_drops = d.faults_injected()[FaultKind::FrameDrop as usize];
        let dropped = u64::from(d.orsp().counters().frames_dropped);
        let (last_dropped, last_faults) = self.drops_seen;
        if !self.told_no_buffer
            && dropped > last_dropped
            && dropped - last_dropped > fault_drops.saturating_sub(last_faults)
        {
            self.told_no_buffer = true;
            warn!(
                "a frame was dropped: the host had no buffer queued (every buffer it announced \
                 still held a frame it had not given back). A host that gives buffers back \
                 sooner, or announces more (demo: --buffers), keeps every frame; the summary \
                 counts the frames dropped"
            );
        }
        self.drops_seen = (dropped, fault_drops);
        if self.told_behind {
            return;
        }
        let behind = d.frames_behind();
        if behind > 0 {
            self.told_behind = true;
            let link = d.config().link_speed_mbps;
            let why = if link < 100_000 {
                format!("a link of {link} Mbit/s (--link-mbps) or a CPU")
            } else {
                "a CPU: this machine does not carry the rate (a lower frame rate or smaller \
                 frames do)"
                    .to_owned()
            };
            warn!(
                "frames fall behind AcquisitionFrameRate: each waits for the stream to finish \
                 the frame before, held back by {why}. These frames are not dropped: they come \
                 as fast as the stream carries them, and the summary counts the frames behind"
            );
        }
    }

    /// `--latency-log`: each TRAILER's block id and when it first left. A write that fails
    /// (a full disk) ends the log, not the camera: the error names the file, goes to the log
    /// at once and into the summary, and the run exits 1 after it.
    pub(super) fn log_latency(&mut self) {
        while let Some((block, at)) = self.cam.poll_trailer_sent() {
            if let Some(f) = self.latency_log.as_mut()
                && let Err(e) = writeln!(f, "{block},{}", self.mono_t0 + at.0)
            {
                self.latency_log = None;
                self.latency_log_failed(&e);
            }
        }
    }

    pub(super) fn latency_log_failed(&mut self, e: &std::io::Error) {
        let path = self
            .opts
            .latency_log
            .as_ref()
            .map_or_else(String::new, |p| p.display().to_string());
        let what = format!("cannot write the latency log {path}: {e}; it ends here");
        warn!("{what}");
        self.summary.errors.push(what);
    }
}

/// The first violation of each kind the host commits, as it happens: what was expected, what
/// came, where the rule is written. The summary lists them all with their counts.
pub(super) fn tell_violations(cam: &mut crate::camera::CameraCore) {
    while let Some(v) = cam.device_mut().violations_mut().take_new() {
        warn!(
            kind = v.kind.name(),
            spec = v.kind.spec(),
            "the host broke a rule: {v} (the first of its kind; the summary counts them all)"
        );
    }
}
