//! The device clock: timestamps of frames (the leader's, ChunkTimestamp) and events, latched
//! and reset by the host (GigE Vision bootstrap 0x93C..0x94C; SFNC TimestampLatch,
//! TimestampLatchValue, TimestampReset).
//!
//! Ticks are nanoseconds (GevTimestampTickFrequency 1 GHz): the I/O layer's clock ([`Instant`])
//! plus an offset it chooses ([`super::DeviceConfig::tick_offset`]). The emulator makes that
//! offset the machine's real-time clock, so every camera on one machine counts the same ticks
//! and an action command fired on several of them stamps their frames alike: a stand-in for
//! IEEE 1588, which it does not run. The firmware counts from its board timer.

use super::features::timestamps::control;
use crate::rc::Instant;

/// Ticks per second.
pub const TICK_HZ: u64 = 1_000_000_000;

/// The device clock.
#[derive(Debug, Clone, Copy)]
pub struct Clock {
    offset: u64,
    latched: u64,
}

impl Clock {
    /// A clock whose ticks are `now + offset`.
    pub const fn new(offset: u64) -> Self {
        Clock { offset, latched: 0 }
    }

    /// Ticks at `now`.
    pub fn ticks(&self, now: Instant) -> u64 {
        now.0.wrapping_add(self.offset)
    }

    /// The instant the clock reads `ticks` (for scheduled actions).
    pub fn instant_of(&self, ticks: u64) -> Instant {
        Instant(ticks.wrapping_sub(self.offset))
    }

    /// The value TimestampLatch took.
    pub fn latched(&self) -> u64 {
        self.latched
    }

    /// A host wrote the timestamp control register: reset, then latch (a write of both latches
    /// the reset clock: 0).
    pub fn control(&mut self, now: Instant, v: u32) {
        if v & control::RESET != 0 {
            self.offset = 0u64.wrapping_sub(now.0);
        }
        if v & control::LATCH != 0 {
            self.latched = self.ticks(now);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reset_restarts_at_zero_and_latch_copies() {
        let mut c = Clock::new(1_000);
        assert_eq!(c.ticks(Instant(5)), 1_005);
        c.control(Instant(10), control::LATCH);
        assert_eq!(c.latched(), 1_010);
        c.control(Instant(20), control::RESET);
        assert_eq!(c.ticks(Instant(25)), 5);
        assert_eq!(c.instant_of(5), Instant(25));
        c.control(Instant(30), control::RESET | control::LATCH);
        assert_eq!(c.latched(), 0);
    }
}
