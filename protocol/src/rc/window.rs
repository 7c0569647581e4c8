//! The requester's loss-adaptive window: how many packets may be in flight unacknowledged. A
//! responder (rxe, a NIC) discards everything after a gap, so each loss costs a go-back-N of up
//! to the window: the window is halved on a loss (once per window of packets, as TCP's NewReno
//! does) and grows back as ACKs come (doubling per round trip up to half its last size, then one
//! packet per quarter window), never above the configured maximum. After a timeout that may
//! have been a pause it restarts from one packet ([`LossWindow::collapse`]).

use crate::wire::bth::psn_diff;

/// The smallest a cut leaves the window, packets (a collapse leaves one).
pub const MIN_WINDOW: u32 = 4;

/// The window a connection starts with, packets (it doubles per round trip from there while
/// round trips stay short).
pub const INITIAL_WINDOW: u32 = 16;

/// The window and its slow-start threshold, packets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LossWindow {
    /// Largest the window grows to (`max_unacked`).
    max: u32,
    /// The window now.
    cwnd: u32,
    /// Below this the window doubles per round trip (slow start), above it grows linearly.
    ssthresh: u32,
    /// Packets acknowledged towards the next +1 of the window above `ssthresh`.
    acc: u32,
    /// One past the highest PSN sent when the window was last cut: losses below it belong to
    /// the same event and do not cut it again.
    recovery_end: u32,
}

impl LossWindow {
    /// A window of at most `max` packets for a connection whose first PSN is `start_psn`.
    pub fn new(max: u32, start_psn: u32) -> Self {
        LossWindow {
            max,
            cwnd: INITIAL_WINDOW.min(max).max(MIN_WINDOW),
            ssthresh: max.max(MIN_WINDOW),
            acc: 0,
            recovery_end: start_psn,
        }
    }

    /// Packets that may be in flight unacknowledged now.
    #[inline]
    pub fn get(&self) -> u32 {
        self.cwnd.min(self.max).max(1)
    }

    /// A loss at `psn` was detected while everything below `sent_end` had been sent: halve the
    /// window, unless this loss belongs to a window already cut for (a timeout always cuts).
    /// Returns whether it was cut.
    pub fn on_loss(&mut self, psn: u32, timeout: bool, sent_end: u32) -> bool {
        if psn_diff(psn, self.recovery_end) < 0 && !timeout {
            return false;
        }
        self.ssthresh = (self.get() / 2).max(MIN_WINDOW);
        self.cwnd = self.ssthresh;
        self.acc = 0;
        self.recovery_end = sent_end;
        true
    }

    /// Down to one packet, the threshold kept, to grow back from ACKs (after a timeout that
    /// may have been a pause: one packet goes again before an answer says what is missing).
    pub fn collapse(&mut self) {
        self.cwnd = 1;
        self.acc = 0;
    }

    /// `n` more packets were acknowledged: grow, unless packets already `queueing` (past the
    /// path's bandwidth-delay product a larger window buys no rate, only a larger go-back-N per
    /// loss).
    pub fn on_acked(&mut self, n: u32, queueing: bool) {
        let max = self.max.max(MIN_WINDOW);
        if queueing {
            return;
        }
        if self.cwnd < self.ssthresh {
            self.cwnd = (self.cwnd + n).min(self.ssthresh).min(max);
        } else {
            self.acc += n;
            let step = (self.cwnd / 4).max(1);
            while self.acc >= step && self.cwnd < max {
                self.acc -= step;
                self.cwnd += 1;
            }
        }
    }

    /// The window and threshold now, to undo a cut found spurious later.
    pub fn snapshot(&self) -> (u32, u32) {
        (self.cwnd, self.ssthresh)
    }

    /// Undo a cut: back to at least the window and threshold of `snapshot`.
    pub fn restore(&mut self, snapshot: (u32, u32)) {
        self.cwnd = self.cwnd.max(snapshot.0);
        self.ssthresh = self.ssthresh.max(snapshot.1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn halves_once_per_window_and_grows_back() {
        let mut w = LossWindow::new(1024, 0);
        assert_eq!(w.get(), INITIAL_WINDOW);
        w.on_acked(16, false);
        assert_eq!(w.get(), 32, "slow start doubles per window of ACKs");
        assert!(w.on_loss(10, false, 40));
        assert_eq!(w.get(), 16);
        assert!(!w.on_loss(30, false, 48), "a loss of the same window");
        assert!(w.on_loss(30, true, 48), "a timeout always cuts");
        assert_eq!(w.get(), 8);
        let before = w.snapshot();
        assert!(w.on_loss(50, false, 60));
        assert_eq!(w.get(), MIN_WINDOW);
        w.restore(before);
        assert_eq!(w.get(), 8);
        w.on_acked(2, false);
        assert_eq!(w.get(), 9, "above the threshold: +1 per quarter window");
        w.on_acked(100, true);
        assert_eq!(w.get(), 9, "no growth while packets queue");
    }
}
