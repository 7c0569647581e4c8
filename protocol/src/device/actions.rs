//! Action commands (GVCP ACTION_CMD, GEV 1.1; scheduled, GEV 2.0): a host broadcasts one
//! command and every camera whose device key, group key and group mask match fires its action
//! signals at once, or at a given device timestamp. A fired signal is a trigger source
//! (TriggerSource Action1, Action2).
//!
//! Payload: device key (4), group key (4), group mask (4), and with flag 0x80 the action time
//! (8, device ticks). Signal n fires when the group key equals its ActionGroupKey and the
//! masks share a bit. A command for no signal of this camera is not answered (it is usually a
//! broadcast for others); one that fires is acknowledged if the host asked, with ACTION_LATE
//! when its time had already passed (it fires at once). Actions count only while a host holds
//! control, unless ActionUnconditionalMode is on.
//!
//! Anyone who knows the keys may send one (they are broadcasts), so the queue of scheduled
//! actions is guarded: an action more than [`MAX_AHEAD_NS`] ahead is refused
//! (INVALID_PARAMETER), and when the queue is full the controlling host's action takes the
//! place of the latest one another host scheduled (counted as displaced) rather than getting
//! OVERFLOW: a bystander cannot lock the controller out of its own scheduled actions.

use heapless::Vec;

use super::regs;
use crate::gev::status;

/// Flag of a scheduled action command (time follows the mask).
pub const FLAG_SCHEDULED: u8 = 0x80;
/// Scheduled actions the camera holds at once.
pub const QUEUE: usize = 8;

/// How far ahead of the device's clock an action may be scheduled: a minute (ticks are ns).
pub const MAX_AHEAD_NS: u64 = 60_000_000_000;

/// Who sent an action command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sender {
    /// The host holding control.
    Controller,
    /// Any other host.
    Other,
}

/// Action counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ActionCounters {
    /// Commands that fired (or scheduled) at least one signal.
    pub fired: u64,
    /// Commands for no signal of this camera (wrong device key, group key or mask).
    pub not_for_us: u64,
    /// Matching commands refused: no host in control (and not unconditional), or the queue of
    /// scheduled actions full.
    pub refused: u64,
    /// Scheduled actions whose time had passed when they came (fired at once).
    pub late: u64,
    /// Scheduled actions of other hosts dropped from a full queue for the controller's.
    pub displaced: u64,
}

/// What a command asks of the device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ActionOutcome {
    /// Not for this camera: stay silent.
    NotForUs,
    /// Fire these signals now (bit n = signal n); acknowledge with this status.
    Fire(u8, u16),
    /// Held until its time; acknowledge SUCCESS.
    Scheduled,
    /// Matched but refused: acknowledge with this status.
    Refused(u16),
}

/// The action signals of a device.
#[derive(Debug, Clone, Default)]
pub struct Actions {
    device_key: u32,
    groups: [(u32, u32); regs::ACTIONS as usize],
    /// (time, signals, scheduled by the controller)
    scheduled: Vec<(u64, u8, bool), QUEUE>,
    counters: ActionCounters,
}

impl Actions {
    /// Counters so far.
    pub fn counters(&self) -> ActionCounters {
        self.counters
    }

    fn group_reg(addr: u32) -> Option<(usize, bool)> {
        let off = addr.checked_sub(regs::ACTION_GROUP_KEY)?;
        let n = (off / regs::ACTION_STRIDE) as usize;
        (n < regs::ACTIONS as usize && off % regs::ACTION_STRIDE <= 4 && off % 4 == 0)
            .then_some((n, off % regs::ACTION_STRIDE == 4))
    }

    /// The register at `addr`, if it is one of the actions'. The device key reads 0 (write
    /// only: a bystander cannot learn it).
    pub fn read(&self, addr: u32) -> Option<u32> {
        if addr == regs::N_ACTION_SIGNALS {
            return Some(regs::ACTIONS);
        }
        if addr == regs::ACTION_DEVICE_KEY {
            return Some(0);
        }
        let (n, mask) = Self::group_reg(addr)?;
        Some(if mask {
            self.groups[n].1
        } else {
            self.groups[n].0
        })
    }

    /// A host writes `addr`; `None`: not an action register.
    pub fn write(&mut self, addr: u32, v: u32) -> Option<Result<(), u16>> {
        match addr {
            regs::N_ACTION_SIGNALS => Some(Err(status::WRITE_PROTECT)),
            regs::ACTION_DEVICE_KEY => {
                self.device_key = v;
                Some(Ok(()))
            }
            _ => {
                let (n, mask) = Self::group_reg(addr)?;
                if mask {
                    self.groups[n].1 = v;
                } else {
                    self.groups[n].0 = v;
                }
                Some(Ok(()))
            }
        }
    }

    /// Forget the keys' effect: scheduled actions are dropped (control lost).
    pub fn clear_scheduled(&mut self) {
        self.scheduled.clear();
    }

    /// An ACTION_CMD with `flags` and `payload` at device time `now_ticks` from `from`;
    /// `allowed`: a host holds control or actions are unconditional.
    pub fn handle(
        &mut self,
        flags: u8,
        payload: &[u8],
        now_ticks: u64,
        allowed: bool,
        from: Sender,
    ) -> ActionOutcome {
        let scheduled = flags & FLAG_SCHEDULED != 0;
        if payload.len() < if scheduled { 20 } else { 12 } {
            self.counters.not_for_us += 1;
            return ActionOutcome::NotForUs;
        }
        let word = |at: usize| {
            u32::from_be_bytes([
                payload[at],
                payload[at + 1],
                payload[at + 2],
                payload[at + 3],
            ])
        };
        let (device_key, group_key, group_mask) = (word(0), word(4), word(8));
        let mut signals = 0u8;
        if device_key == self.device_key {
            for (n, (key, mask)) in self.groups.iter().enumerate() {
                if *key == group_key && mask & group_mask != 0 {
                    signals |= 1 << n;
                }
            }
        }
        if signals == 0 {
            self.counters.not_for_us += 1;
            return ActionOutcome::NotForUs;
        }
        if !allowed {
            self.counters.refused += 1;
            return ActionOutcome::Refused(status::ACCESS_DENIED);
        }
        if scheduled {
            let at = (u64::from(word(12)) << 32) | u64::from(word(16));
            if at > now_ticks.saturating_add(MAX_AHEAD_NS) {
                self.counters.refused += 1;
                return ActionOutcome::Refused(status::INVALID_PARAMETER);
            }
            if at > now_ticks {
                let mine = from == Sender::Controller;
                if self.scheduled.is_full() && mine {
                    // the controller's action takes the latest place another host holds
                    let theirs = (0..self.scheduled.len())
                        .filter(|&i| !self.scheduled[i].2)
                        .max_by_key(|&i| self.scheduled[i].0);
                    if let Some(i) = theirs {
                        self.scheduled.swap_remove(i);
                        self.counters.displaced += 1;
                    }
                }
                if self.scheduled.push((at, signals, mine)).is_err() {
                    self.counters.refused += 1;
                    return ActionOutcome::Refused(status::OVERFLOW);
                }
                self.counters.fired += 1;
                return ActionOutcome::Scheduled;
            }
            self.counters.late += 1;
            self.counters.fired += 1;
            return ActionOutcome::Fire(signals, status::ACTION_LATE);
        }
        self.counters.fired += 1;
        ActionOutcome::Fire(signals, status::SUCCESS)
    }

    /// The earliest scheduled action's time.
    pub fn next_due(&self) -> Option<u64> {
        self.scheduled.iter().map(|(t, _, _)| *t).min()
    }

    /// Scheduled signals due at `now_ticks` (bit n = signal n), taken off the queue.
    pub fn take_due(&mut self, now_ticks: u64) -> u8 {
        let mut signals = 0;
        self.scheduled.retain(|&(t, s, _)| {
            if t <= now_ticks {
                signals |= s;
                false
            } else {
                true
            }
        });
        signals
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cmd(device: u32, group: u32, mask: u32, at: Option<u64>) -> ([u8; 20], usize) {
        let mut b = [0u8; 20];
        b[..4].copy_from_slice(&device.to_be_bytes());
        b[4..8].copy_from_slice(&group.to_be_bytes());
        b[8..12].copy_from_slice(&mask.to_be_bytes());
        if let Some(t) = at {
            b[12..20].copy_from_slice(&t.to_be_bytes());
        }
        (b, if at.is_some() { 20 } else { 12 })
    }

    fn actions() -> Actions {
        let mut a = Actions::default();
        a.write(regs::ACTION_DEVICE_KEY, 0x1234);
        a.write(regs::ACTION_GROUP_KEY, 7);
        a.write(regs::ACTION_GROUP_MASK, 0b01);
        a.write(regs::ACTION_GROUP_KEY + 0x10, 7);
        a.write(regs::ACTION_GROUP_MASK + 0x10, 0b10);
        a
    }

    #[test]
    fn keys_and_masks_select_signals() {
        let mut a = actions();
        let (b, n) = cmd(0x1234, 7, 0b11, None);
        assert_eq!(
            a.handle(0x01, &b[..n], 0, true, Sender::Other),
            ActionOutcome::Fire(0b11, 0)
        );
        let (b, n) = cmd(0x1234, 7, 0b10, None);
        assert_eq!(
            a.handle(0x01, &b[..n], 0, true, Sender::Other),
            ActionOutcome::Fire(0b10, 0)
        );
        for (d, g, m) in [(0x1235, 7, 1), (0x1234, 8, 1), (0x1234, 7, 0b100)] {
            let (b, n) = cmd(d, g, m, None);
            assert_eq!(
                a.handle(0x01, &b[..n], 0, true, Sender::Other),
                ActionOutcome::NotForUs
            );
        }
        let (b, n) = cmd(0x1234, 7, 1, None);
        assert_eq!(
            a.handle(0x01, &b[..n], 0, false, Sender::Other),
            ActionOutcome::Refused(status::ACCESS_DENIED)
        );
        assert_eq!(a.read(regs::ACTION_DEVICE_KEY), Some(0));
        assert_eq!(a.read(regs::ACTION_GROUP_MASK + 0x10), Some(0b10));
    }

    #[test]
    fn scheduled_actions_wait_for_their_time_or_are_late() {
        let mut a = actions();
        let (b, n) = cmd(0x1234, 7, 1, Some(1_000));
        assert_eq!(
            a.handle(0x81, &b[..n], 500, true, Sender::Other),
            ActionOutcome::Scheduled
        );
        assert_eq!(a.next_due(), Some(1_000));
        assert_eq!(a.take_due(999), 0);
        assert_eq!(a.take_due(1_000), 0b01);
        assert_eq!(a.next_due(), None);
        assert_eq!(
            a.handle(0x81, &b[..n], 2_000, true, Sender::Other),
            ActionOutcome::Fire(1, status::ACTION_LATE)
        );
        for _ in 0..QUEUE {
            let (b, n) = cmd(0x1234, 7, 1, Some(5_000));
            assert_eq!(
                a.handle(0x81, &b[..n], 0, true, Sender::Other),
                ActionOutcome::Scheduled
            );
        }
        // a late action needs no room in the queue
        assert_eq!(
            a.handle(0x81, &b[..n], 2_000, true, Sender::Other),
            ActionOutcome::Fire(1, status::ACTION_LATE)
        );
        let (b, n) = cmd(0x1234, 7, 1, Some(5_000));
        assert_eq!(
            a.handle(0x81, &b[..n], 0, true, Sender::Other),
            ActionOutcome::Refused(status::OVERFLOW)
        );
    }

    #[test]
    fn a_bystander_cannot_lock_the_controller_out_of_scheduled_actions() {
        let mut a = actions();
        // t = 2^64 - 1 (and anything past a minute ahead) is refused, with a status
        let (b, n) = cmd(0x1234, 7, 1, Some(u64::MAX));
        assert_eq!(
            a.handle(0x81, &b[..n], 1_000, true, Sender::Other),
            ActionOutcome::Refused(status::INVALID_PARAMETER)
        );
        let (b, n) = cmd(0x1234, 7, 1, Some(1_000 + MAX_AHEAD_NS + 1));
        assert_eq!(
            a.handle(0x81, &b[..n], 1_000, true, Sender::Other),
            ActionOutcome::Refused(status::INVALID_PARAMETER)
        );
        // a bystander fills the queue within the minute
        for k in 0..QUEUE as u64 {
            let (b, n) = cmd(0x1234, 7, 1, Some(MAX_AHEAD_NS - k));
            assert_eq!(
                a.handle(0x81, &b[..n], 0, true, Sender::Other),
                ActionOutcome::Scheduled
            );
        }
        // the controller's action still goes in, in place of the bystander's latest
        let (b, n) = cmd(0x1234, 7, 0b10, Some(5_000));
        assert_eq!(
            a.handle(0x81, &b[..n], 0, true, Sender::Controller),
            ActionOutcome::Scheduled
        );
        assert_eq!(a.counters().displaced, 1);
        assert_eq!(a.next_due(), Some(5_000));
        assert_eq!(a.take_due(5_000), 0b10);
        // a queue of the controller's own actions stays full for the controller
        let mut a = actions();
        for k in 0..QUEUE as u64 {
            let (b, n) = cmd(0x1234, 7, 1, Some(1_000 + k));
            assert_eq!(
                a.handle(0x81, &b[..n], 0, true, Sender::Controller),
                ActionOutcome::Scheduled
            );
        }
        let (b, n) = cmd(0x1234, 7, 1, Some(9_000));
        assert_eq!(
            a.handle(0x81, &b[..n], 0, true, Sender::Controller),
            ActionOutcome::Refused(status::OVERFLOW)
        );
    }
}
