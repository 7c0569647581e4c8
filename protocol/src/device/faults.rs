//! Faults on demand: the camera misbehaving when a test asks it to.
//!
//! Two kinds of fault live here. The ones a device decides itself, [`FaultKind::FrameDrop`]
//! (a frame captured but never sent: its block id is skipped, as when a camera's internal
//! buffer overflows) and [`FaultKind::ResendUnavailable`] (a PACKETRESEND answered with a
//! PACKET_UNAVAILABLE packet), follow a [`Rule`] set at start-up or a count a host asks for.
//! The others act on the wire (packet loss, reordering, duplication, corruption, ECN marks, a
//! stall, silence, a reboot): the device only queues a host's request as a [`FaultRequest`]
//! for the I/O layer that can carry it out (`rdmacam run`), which reports back what it did
//! with [`Faults::counted`].
//!
//! Hosts reach them through the FaultInjection features (device specific, namespace Custom):
//! FaultSelector, FaultCount, FaultDuration, FaultInject, FaultInjectedCount.

use heapless::Deque;

/// Every fault the camera can inject, by FaultSelector value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum FaultKind {
    /// Stream packets lost at the camera (GVSP datagrams or RoCEv2 packets).
    Loss = 0,
    /// A stream packet held back and sent after the next one.
    Reorder = 1,
    /// A stream packet sent twice.
    Duplicate = 2,
    /// A whole frame captured but not sent (its block id is skipped).
    FrameDrop = 3,
    /// A payload packet with wrong bytes: GVSP payload bytes flipped, or a RoCEv2 packet with
    /// a bad ICRC (which the receiver must discard).
    Corrupt = 4,
    /// The stream stops for a while (nothing leaves; control still answers).
    Stall = 5,
    /// Nothing in or out for a while, control included: a pulled cable.
    Silence = 6,
    /// Silent for a while, then back with every setting lost: a power cycle.
    Reboot = 7,
    /// A packet resend request answered PACKET_UNAVAILABLE.
    ResendUnavailable = 8,
    /// A RoCEv2 packet marked ECN Congestion Experienced, as a congested switch does.
    Ecn = 9,
}

/// Number of fault kinds.
pub const KINDS: usize = 10;

impl FaultKind {
    /// Every kind, by FaultSelector value.
    pub const ALL: [FaultKind; KINDS] = [
        FaultKind::Loss,
        FaultKind::Reorder,
        FaultKind::Duplicate,
        FaultKind::FrameDrop,
        FaultKind::Corrupt,
        FaultKind::Stall,
        FaultKind::Silence,
        FaultKind::Reboot,
        FaultKind::ResendUnavailable,
        FaultKind::Ecn,
    ];

    /// The kind of FaultSelector value `v`.
    pub fn from_index(v: u32) -> Option<FaultKind> {
        Self::ALL.get(v as usize).copied()
    }

    /// Its name on the command line (`--fault NAME...`) and in summaries.
    pub const fn cli_name(self) -> &'static str {
        match self {
            FaultKind::Loss => "loss",
            FaultKind::Reorder => "reorder",
            FaultKind::Duplicate => "duplicate",
            FaultKind::FrameDrop => "drop-frame",
            FaultKind::Corrupt => "corrupt",
            FaultKind::Stall => "stall",
            FaultKind::Silence => "silence",
            FaultKind::Reboot => "reboot",
            FaultKind::ResendUnavailable => "resend-unavailable",
            FaultKind::Ecn => "ecn",
        }
    }

    /// Its FaultSelector entry.
    pub const fn feature_name(self) -> &'static str {
        match self {
            FaultKind::Loss => "PacketLoss",
            FaultKind::Reorder => "PacketReorder",
            FaultKind::Duplicate => "PacketDuplicate",
            FaultKind::FrameDrop => "FrameDrop",
            FaultKind::Corrupt => "PacketCorrupt",
            FaultKind::Stall => "StreamStall",
            FaultKind::Silence => "ControlSilence",
            FaultKind::Reboot => "Reboot",
            FaultKind::ResendUnavailable => "ResendUnavailable",
            FaultKind::Ecn => "EcnMark",
        }
    }

    /// Whether it lasts a time (FaultDuration) rather than hitting a number of things
    /// (FaultCount).
    pub const fn timed(self) -> bool {
        matches!(
            self,
            FaultKind::Stall | FaultKind::Silence | FaultKind::Reboot
        )
    }

    /// Whether the device carries it out itself (any I/O layer will do).
    pub const fn in_device(self) -> bool {
        matches!(self, FaultKind::FrameDrop | FaultKind::ResendUnavailable)
    }
}

/// When a repeated fault hits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Rule {
    /// Never.
    #[default]
    Off,
    /// The Nth, 2Nth, 3Nth, ... thing (packet, frame, request).
    Every(u32),
    /// Each thing with this chance, in units of 2^-32 (reproducible from the seed).
    Chance(u32),
}

impl Rule {
    /// A chance of `p` (0..=1).
    pub fn chance(p: f64) -> Rule {
        if p <= 0.0 {
            Rule::Off
        } else {
            Rule::Chance((p.min(1.0) * 4_294_967_295.0) as u32)
        }
    }

    /// Whether the `n`th thing (counting from 1) is hit; `rng` draws the chance.
    pub fn hits(self, n: u64, rng: &mut Rng) -> bool {
        match self {
            Rule::Off => false,
            Rule::Every(k) => k > 0 && n % u64::from(k) == 0,
            Rule::Chance(c) => (rng.next_u64() >> 32) < u64::from(c),
        }
    }
}

/// When one kind of fault hits: a [`Rule`] over the things that come by (packets, frames,
/// requests), and a count of the next ones a host asked for (FaultInject), which go first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Trigger {
    /// The standing rule.
    pub rule: Rule,
    seen: u64,
    pending: u64,
}

impl Trigger {
    /// Hit by `rule` only.
    pub const fn new(rule: Rule) -> Trigger {
        Trigger {
            rule,
            seen: 0,
            pending: 0,
        }
    }

    /// Hit the next `n` things as well.
    pub fn add(&mut self, n: u64) {
        self.pending = self.pending.saturating_add(n);
    }

    /// Forget the things a host asked to hit (the rule stays); whether there were any.
    pub fn clear_pending(&mut self) -> bool {
        let had = self.pending > 0;
        self.pending = 0;
        had
    }

    /// Whether it may hit anything.
    pub fn armed(&self) -> bool {
        self.rule != Rule::Off || self.pending > 0
    }

    /// Whether the thing coming by now is hit: the next one a host asked for, else the rule
    /// over everything counted so far (this one included).
    pub fn hit(&mut self, rng: &mut Rng) -> bool {
        self.seen += 1;
        if self.pending > 0 {
            self.pending -= 1;
            return true;
        }
        self.rule.hits(self.seen, rng)
    }
}

/// A small reproducible random source (xorshift64*), enough for fault decisions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rng(u64);

impl Rng {
    /// A generator from `seed` (any value, 0 included).
    pub const fn new(seed: u64) -> Rng {
        Rng(seed ^ 0x9e37_79b9_7f4a_7c15 | 1)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
}

/// A fault a host asked for (FaultInject) that the I/O layer carries out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FaultRequest {
    /// What.
    pub kind: FaultKind,
    /// How many packets it hits (packet faults).
    pub count: u32,
    /// How long it lasts, ms (timed faults).
    pub duration_ms: u32,
}

/// Requests waiting for the I/O layer.
const REQUESTS: usize = 8;

/// The device's fault state: the FaultInjection registers, the rules and pending counts of the
/// faults it carries out itself, the requests for the I/O layer, and what was injected.
#[derive(Debug, Clone)]
pub struct Faults {
    frame_drop: Trigger,
    resend: Trigger,
    rng: Rng,
    requests: Deque<FaultRequest, REQUESTS>,
    injected: [u64; KINDS],
    /// The kinds an I/O layer carries out, one bit per FaultSelector value.
    io: u16,
}

/// Why a FaultInject was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InjectError {
    /// No I/O layer here carries out this kind (the firmware does drops and resends only).
    NotSupported,
    /// Too many requests wait already.
    Busy,
}

impl Faults {
    /// No faults; `seed` draws the chances of the rules.
    pub const fn new(seed: u64) -> Faults {
        Faults {
            frame_drop: Trigger::new(Rule::Off),
            resend: Trigger::new(Rule::Off),
            rng: Rng::new(seed),
            requests: Deque::new(),
            injected: [0; KINDS],
            io: 0,
        }
    }

    /// Draw the rules' chances from `seed` from now on.
    pub fn set_seed(&mut self, seed: u64) {
        self.rng = Rng::new(seed);
    }

    /// Say which kinds an I/O layer carries out as [`FaultRequest`]s (`rdmacam run` names
    /// what its transport can). FaultInject of any other wire fault is refused NOT_IMPLEMENTED,
    /// so a host hears that its fault will not happen instead of waiting for it.
    pub fn set_io(&mut self, kinds: &[FaultKind]) {
        self.io = kinds.iter().fold(0, |m, &k| m | 1 << k as u16);
    }

    /// Drop frames by this rule from now on.
    pub fn set_frame_drop(&mut self, r: Rule) {
        self.frame_drop.rule = r;
    }

    /// Answer resend requests PACKET_UNAVAILABLE by this rule from now on.
    pub fn set_resend_unavailable(&mut self, r: Rule) {
        self.resend.rule = r;
    }

    /// FaultInject: fault `selector` (a FaultSelector value) hitting `count` things or lasting
    /// `duration_ms`.
    pub fn inject(
        &mut self,
        selector: u32,
        count: u32,
        duration_ms: u32,
    ) -> Result<(), InjectError> {
        let kind = FaultKind::from_index(selector).ok_or(InjectError::NotSupported)?;
        match kind {
            FaultKind::FrameDrop => {
                self.frame_drop.add(count.into());
                Ok(())
            }
            FaultKind::ResendUnavailable => {
                self.resend.add(count.into());
                Ok(())
            }
            _ if self.io & 1 << kind as u16 == 0 => Err(InjectError::NotSupported),
            _ => self
                .requests
                .push_back(FaultRequest {
                    kind,
                    count,
                    duration_ms,
                })
                .map_err(|_| InjectError::Busy),
        }
    }

    /// The host that asked for faults lost control: what it asked for and is not yet done
    /// ends with it (requests not yet taken by the I/O layer, frames and resends still to
    /// hit). The standing rules (`--fault`) stay. An I/O layer ends the faults it already
    /// carries out on [`super::DeviceEvent::ControlReleased`] and
    /// [`super::DeviceEvent::HeartbeatExpired`].
    pub fn control_ended(&mut self) {
        self.requests.clear();
        self.frame_drop.clear_pending();
        self.resend.clear_pending();
    }

    /// The next request for the I/O layer.
    pub fn poll_request(&mut self) -> Option<FaultRequest> {
        self.requests.pop_front()
    }

    /// The I/O layer injected `n` faults of `kind`.
    pub fn counted(&mut self, kind: FaultKind, n: u64) {
        self.injected[kind as usize] += n;
    }

    /// The I/O layer's running total of `kind` (it keeps the count across reboots).
    pub fn set_counted(&mut self, kind: FaultKind, total: u64) {
        self.injected[kind as usize] = total;
    }

    /// Faults injected so far, by kind.
    pub fn injected(&self) -> [u64; KINDS] {
        self.injected
    }

    /// Whether the frame about to be captured is dropped (counts it).
    pub(crate) fn drop_frame(&mut self) -> bool {
        let hit = self.frame_drop.hit(&mut self.rng);
        self.injected[FaultKind::FrameDrop as usize] += u64::from(hit);
        hit
    }

    /// Whether the resend request just received is answered unavailable (counts it).
    pub(crate) fn refuse_resend(&mut self) -> bool {
        let hit = self.resend.hit(&mut self.rng);
        self.injected[FaultKind::ResendUnavailable as usize] += u64::from(hit);
        hit
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_hits_each_nth_and_chance_is_reproducible() {
        let mut rng = Rng::new(7);
        let hits: heapless::Vec<u64, 8> = (1..=20)
            .filter(|&n| Rule::Every(5).hits(n, &mut rng))
            .collect();
        assert_eq!(&hits[..], &[5, 10, 15, 20]);
        let count = |seed| {
            let mut rng = Rng::new(seed);
            (1..=100_000)
                .filter(|&n| Rule::chance(0.01).hits(n, &mut rng))
                .count()
        };
        assert_eq!(count(3), count(3));
        assert!((800..1200).contains(&count(3)), "{}", count(3));
        assert!(!Rule::chance(0.0).hits(1, &mut rng));
        assert!(Rule::chance(1.0).hits(1, &mut rng));
    }

    #[test]
    fn fault_selector_entries_are_the_kinds() {
        let entries = crate::device::features::faults::FAULT_KINDS;
        assert_eq!(entries.len(), KINDS);
        for (e, k) in entries.iter().zip(FaultKind::ALL) {
            assert_eq!((e.name, e.value), (k.feature_name(), k as u32));
            assert_eq!(FaultKind::from_index(e.value), Some(k));
        }
    }

    #[test]
    fn requests_need_an_io_layer_and_a_free_slot() {
        let stall = FaultKind::Stall as u32;
        let mut f = Faults::new(1);
        assert_eq!(f.inject(stall, 1, 1000), Err(InjectError::NotSupported));
        // an I/O layer carries out the kinds it names, no others
        f.set_io(&[FaultKind::Stall, FaultKind::Silence]);
        let ecn = FaultKind::Ecn as u32;
        assert_eq!(f.inject(ecn, 1, 0), Err(InjectError::NotSupported));
        for _ in 0..REQUESTS {
            f.inject(stall, 1, 1000).unwrap();
        }
        assert_eq!(f.inject(stall, 1, 1000), Err(InjectError::Busy));
        let r = f.poll_request().unwrap();
        assert_eq!((r.kind, r.duration_ms), (FaultKind::Stall, 1000));
        // drops and refusals need no I/O layer
        let mut f = Faults::new(1);
        f.inject(FaultKind::FrameDrop as u32, 2, 0).unwrap();
        assert!(f.drop_frame() && f.drop_frame() && !f.drop_frame());
        assert_eq!(f.injected()[FaultKind::FrameDrop as usize], 2);
        assert_eq!(f.inject(99, 1, 1), Err(InjectError::NotSupported));
    }
}
