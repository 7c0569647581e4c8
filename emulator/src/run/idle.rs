//! What the camera does when a turn of its loop found nothing to do: busy-poll for an ACK
//! while packets flow (only while that pays), else sleep until a socket is readable or a timer
//! is due.

use std::time::Duration;

/// How long a camera alone in its process polls for an ACK before it sleeps
/// ([`RunOptions::busy_poll`]): about two loopback round trips. Measured in `rdmacam demo`
/// (docs/BENCHMARKS.md): 30-75 µs give the same goodput at 1 % and 5 % loss, none a third less.
pub const BUSY_POLL: Duration = Duration::from_micros(50);

/// Whether the camera busy-polls before its next sleep: only while polling pays. A poll that
/// ends with nothing arrived says the peer is not answering within a round trip (descheduled
/// on a busy machine, where the camera's spinning would take the very core the peer waits
/// for): the next 1, 2, 4, ... 64 idle waits sleep at once; a poll that catches a packet
/// resets that.
#[derive(Debug)]
pub(super) struct SpinBackoff {
    /// Idle waits still to sleep through without polling.
    skip: u32,
    /// How many the next miss skips.
    next: u32,
}

impl Default for SpinBackoff {
    fn default() -> Self {
        SpinBackoff { skip: 0, next: 1 }
    }
}

impl SpinBackoff {
    /// Poll before this wait? (Counts a skipped wait.)
    pub(super) fn ready(&mut self) -> bool {
        if self.skip == 0 {
            return true;
        }
        self.skip -= 1;
        false
    }

    /// What the poll found.
    pub(super) fn outcome(&mut self, arrived: bool) {
        if arrived {
            self.next = 1;
        } else {
            self.skip = self.next;
            self.next = (self.next * 2).min(64);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn busy_polling_backs_off_while_it_catches_nothing() {
        let mut s = SpinBackoff::default();
        assert!(s.ready());
        s.outcome(true);
        assert!(s.ready(), "a poll that caught a packet polls again");
        // misses skip 1, 2, 4, ... idle waits, at most 64
        for skip in [1, 2, 4, 8, 16, 32, 64, 64] {
            s.outcome(false);
            for _ in 0..skip {
                assert!(!s.ready());
            }
            assert!(s.ready(), "after {skip} skipped waits");
        }
        // a catch resets the backoff
        s.outcome(true);
        s.outcome(false);
        assert!(!s.ready());
        assert!(s.ready());
    }
}
