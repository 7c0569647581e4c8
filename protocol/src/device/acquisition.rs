//! Acquisition and triggers: when frames are exposed and read out (SFNC AcquisitionControl).
//!
//! Free running (FrameStart's TriggerMode Off), a frame is read out every frame period, the
//! longer of 1 / AcquisitionFrameRate and ExposureTime, the first one an exposure after
//! AcquisitionStart. Triggered, each accepted trigger exposes exactly one frame: exposure
//! starts TriggerDelay after the trigger and the frame is read out an exposure later. A
//! trigger that comes while a frame is still exposing, or while the transport cannot take a
//! frame (GVSP still sending the last one, no free ORSP buffer or frame memory), is missed:
//! counted (FrameTriggerMissedCount) and reported (FrameTriggerMissed event), never queued.
//! A frame's timestamp is the start of its exposure. A free-running frame is read out only
//! when the transport can take it; when it cannot keep the frame rate (a link too slow for the
//! frame, a CPU held elsewhere), the next read-out waits and the frame periods that went by
//! are counted as frames behind: frames come as fast as the transport takes them, none is
//! dropped unseen.

use core::time::Duration;

use crate::rc::Instant;

/// The frame timing the current settings give.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timing {
    /// Time between read-outs when free running: max(1 / frame rate, exposure).
    pub period: Duration,
    /// Exposure time.
    pub exposure: Duration,
}

impl Timing {
    /// From AcquisitionFrameRate (Hz) and ExposureTime (µs).
    pub fn new(frame_rate_hz: f32, exposure_us: f32) -> Self {
        let exposure = Duration::from_nanos((f64::from(exposure_us) * 1e3) as u64);
        let period = Duration::from_nanos((1e9 / f64::from(frame_rate_hz.max(0.001))) as u64);
        Timing {
            period: period.max(exposure),
            exposure,
        }
    }
}

/// The largest AcquisitionFrameRate at an exposure of `exposure_us` (the table's
/// AcquisitionFrameRateLimit formula, computed here for the device's checks).
pub fn frame_rate_limit(exposure_us: f32) -> f64 {
    (1e6 / f64::from(exposure_us.max(1.0))).min(10_000.0)
}

/// One frame's exposure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Exposure {
    /// Exposure starts (the frame's timestamp).
    pub start: Instant,
    /// Exposure ends; the frame is read out.
    pub readout: Instant,
}

/// What became of a trigger.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TriggerOutcome {
    /// A frame will be exposed.
    Accepted(Exposure),
    /// The camera could not take it: counted and reported.
    Missed,
    /// No acquisition runs: triggers mean nothing.
    Ignored,
}

/// The acquisition state.
#[derive(Debug, Clone, Default)]
pub struct Acquisition {
    running: bool,
    armed: bool,
    frames: u32,
    next_readout: Option<Instant>,
    pending: Option<Exposure>,
    missed: u32,
    behind: u32,
    /// The frame clock's next slot when free running (`next_readout` without its waits).
    slot: Option<Instant>,
}

impl Acquisition {
    /// Whether an acquisition runs (started, not stopped).
    pub fn running(&self) -> bool {
        self.running
    }

    /// Whether AcquisitionStart waits for its trigger.
    pub fn armed(&self) -> bool {
        self.armed
    }

    /// Frames taken in this acquisition.
    pub fn frames(&self) -> u32 {
        self.frames
    }

    /// Frame triggers missed so far.
    pub fn missed(&self) -> u32 {
        self.missed
    }

    /// Free-running frame periods that went by without a read-out, so far: the frame rate
    /// asked for less what the transport took.
    pub fn behind(&self) -> u32 {
        self.behind
    }

    /// AcquisitionStart with the AcquisitionStart trigger on: wait for it.
    pub fn arm(&mut self) {
        self.armed = true;
    }

    /// Start: free running, the first frame is read out one exposure from now.
    pub fn start(&mut self, now: Instant, t: Timing, free_run: bool) {
        self.running = true;
        self.armed = false;
        self.frames = 0;
        self.pending = None;
        self.next_readout = free_run.then(|| now + t.exposure);
        self.slot = self.next_readout;
    }

    /// AcquisitionStop: no new exposure; a frame already exposing is still read out.
    pub fn stop(&mut self) {
        self.running = false;
        self.armed = false;
        self.next_readout = None;
    }

    /// AcquisitionAbort: stop, and discard a frame still exposing.
    pub fn abort(&mut self) {
        self.stop();
        self.pending = None;
    }

    /// A frame trigger at `now` with `delay`; `can_take`: the transport can take a frame.
    pub fn trigger(
        &mut self,
        now: Instant,
        delay: Duration,
        t: Timing,
        can_take: bool,
    ) -> TriggerOutcome {
        if !self.running {
            return TriggerOutcome::Ignored;
        }
        if self.pending.is_some() || !can_take {
            self.missed = self.missed.saturating_add(1);
            return TriggerOutcome::Missed;
        }
        let start = now + delay;
        let e = Exposure {
            start,
            readout: start + t.exposure,
        };
        self.pending = Some(e);
        TriggerOutcome::Accepted(e)
    }

    /// The frame to read out at `now`, if one is due.
    pub fn due(&self, now: Instant, t: Timing) -> Option<Exposure> {
        let e = self.next()?;
        let e = match e {
            Next::Pending(e) => e,
            Next::FreeRun(readout) => Exposure {
                start: Instant(readout.0.saturating_sub(t.exposure.as_nanos() as u64)),
                readout,
            },
        };
        (now >= e.readout).then_some(e)
    }

    /// Whether a frame is due at `now` (what [`due`](Self::due) says without the timing).
    pub fn is_due(&self, now: Instant) -> bool {
        self.next_due().is_some_and(|d| now >= d)
    }

    /// When the next frame is read out.
    pub fn next_due(&self) -> Option<Instant> {
        match self.next()? {
            Next::Pending(e) => Some(e.readout),
            Next::FreeRun(t) => Some(t),
        }
    }

    fn next(&self) -> Option<Next> {
        if let Some(e) = self.pending {
            return Some(Next::Pending(e));
        }
        self.next_readout
            .filter(|_| self.running)
            .map(Next::FreeRun)
    }

    /// The frame of `e` was read out at `now`. `limit`: frames this acquisition takes
    /// (SingleFrame, MultiFrame). Returns whether that was the last one.
    pub fn taken(&mut self, now: Instant, e: Exposure, t: Timing, limit: Option<u32>) -> bool {
        self.frames += 1;
        if self.pending == Some(e) {
            self.pending = None;
        } else if let Some(r) = self.next_readout {
            // the frame clock's slots go on every period; a read-out late by whole periods
            // leaves that many slots without a frame
            let p = (t.period.as_nanos() as u64).max(1);
            let slot = self.slot.unwrap_or(r);
            let passed = now.0.saturating_sub(slot.0) / p;
            self.behind = self
                .behind
                .saturating_add(passed.min(u64::from(u32::MAX)) as u32);
            self.slot = Some(Instant(
                slot.0
                    .saturating_add(passed.saturating_add(1).saturating_mul(p)),
            ));
            // the next frame is read out a period after this one's time, or at once when
            // that has gone by: as fast as the transport takes frames
            let next = r + t.period;
            self.next_readout = Some(if next < now { now } else { next });
        }
        limit.is_some_and(|l| self.frames >= l)
    }
}

enum Next {
    Pending(Exposure),
    FreeRun(Instant),
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    fn t() -> Timing {
        Timing::new(100.0, 2000.0) // 10 ms period, 2 ms exposure
    }

    #[test]
    fn exposure_bounds_the_frame_period() {
        assert_eq!(Timing::new(1000.0, 5000.0).period, 5 * MS);
        assert_eq!(Timing::new(100.0, 5000.0).period, 10 * MS);
        assert_eq!(frame_rate_limit(5000.0), 200.0);
        assert_eq!(frame_rate_limit(10.0), 10_000.0);
    }

    #[test]
    fn free_running_frames_start_an_exposure_before_their_readout() {
        let mut a = Acquisition::default();
        a.start(Instant::ZERO, t(), true);
        assert_eq!(a.due(Instant::ZERO + MS, t()), None);
        let e = a.due(Instant::ZERO + 2 * MS, t()).unwrap();
        assert_eq!(
            (e.start, e.readout),
            (Instant::ZERO, Instant::ZERO + 2 * MS)
        );
        assert!(!a.taken(e.readout, e, t(), None));
        assert_eq!(a.next_due(), Some(Instant::ZERO + 12 * MS));
        // is_due says what due says, without a timing
        for ms in [11, 12, 13] {
            let now = Instant::ZERO + ms * MS;
            assert_eq!(a.is_due(now), a.due(now, t()).is_some(), "{ms} ms");
        }
        assert!(!Acquisition::default().is_due(Instant::ZERO + 100 * MS));
    }

    #[test]
    fn a_transport_slower_than_the_frame_rate_puts_frames_behind_and_drops_none() {
        // 10 ms periods; each frame takes the transport 25 ms: read out when it is free
        let mut a = Acquisition::default();
        a.start(Instant::ZERO, t(), true);
        let mut now = Instant::ZERO + 2 * MS;
        for _ in 0..4 {
            let e = a.due(now, t()).expect("due once the transport is free");
            a.taken(now, e, t(), None);
            now = now + 25 * MS;
        }
        assert_eq!(a.frames(), 4);
        // the frame clock's slots from 2 ms to 77 ms: 2, 12, ... 72, eight; four read out
        assert_eq!(a.behind(), 4);
        // on time, nothing behind
        let mut b = Acquisition::default();
        b.start(Instant::ZERO, t(), true);
        let mut now = Instant::ZERO + 2 * MS;
        for _ in 0..4 {
            let e = b.due(now, t()).unwrap();
            b.taken(now, e, t(), None);
            now = b.next_due().unwrap();
        }
        assert_eq!(b.behind(), 0);
    }

    #[test]
    fn one_frame_per_trigger_and_the_rest_missed() {
        let mut a = Acquisition::default();
        let now = Instant::ZERO + MS;
        assert_eq!(a.trigger(now, MS, t(), true), TriggerOutcome::Ignored);
        a.start(Instant::ZERO, t(), false);
        assert_eq!(a.next_due(), None, "triggered: nothing until a trigger");
        let TriggerOutcome::Accepted(e) = a.trigger(now, MS, t(), true) else {
            panic!()
        };
        assert_eq!((e.start, e.readout), (now + MS, now + 3 * MS));
        // exposing: a second trigger is missed, not queued
        assert_eq!(a.trigger(now + MS, MS, t(), true), TriggerOutcome::Missed);
        assert_eq!(a.due(now + 2 * MS, t()), None);
        assert_eq!(a.due(now + 3 * MS, t()), Some(e));
        a.taken(now + 3 * MS, e, t(), None);
        assert_eq!(a.next_due(), None);
        // the transport busy: missed too
        assert_eq!(
            a.trigger(now + 4 * MS, MS, t(), false),
            TriggerOutcome::Missed
        );
        assert_eq!(a.missed(), 2);
    }

    #[test]
    fn stop_keeps_the_exposing_frame_abort_drops_it() {
        let mut a = Acquisition::default();
        a.start(Instant::ZERO, t(), false);
        a.trigger(Instant::ZERO, Duration::ZERO, t(), true);
        a.stop();
        assert!(a.due(Instant::ZERO + 2 * MS, t()).is_some());
        a.start(Instant::ZERO, t(), false);
        a.trigger(Instant::ZERO, Duration::ZERO, t(), true);
        a.abort();
        assert_eq!(a.next_due(), None);
    }
}
