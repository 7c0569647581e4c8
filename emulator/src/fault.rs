//! `--fault`: faults on demand, from the command line or from a host (FaultInject).
//!
//! The grammar (docs/virtual-camera.md, "Faults on demand"):
//!
//! ```text
//! --fault [camN:]KIND[:KEY=VALUE[,KEY=VALUE]...]
//!
//! loss | reorder | duplicate | corrupt | ecn    p=P or every=N     stream packets
//! drop-frame                                    p=P or every=N     frames
//! resend-unavailable                            p=P or every=N     resend requests (default: all)
//! stall | silence | reboot                      for=T, at=T[, every=T]
//! ```
//!
//! `p` is a probability (0..1], `every=N` hits the Nth, 2Nth, ... thing; times take `ms` or
//! `s` (`250ms`, `2s`, `1.5s`) and count from the camera's start. `camN:` applies the fault to
//! the Nth camera of `--cameras`/`--ip`/`--rig` only (from 1); without it, to every camera.
//!
//! Packet faults hit what the camera streams: GVSP datagrams, or RoCEv2 request packets (RDMA
//! WRITE and SEND; `ecn` only these). `corrupt` flips payload bytes of a GVSP payload packet
//! (no checksum catches it: the host gets wrong pixels) or the ICRC of a RoCEv2 packet (the
//! receiver must discard it; the RC transport then resends it).
//!
//! The engine here decides; `run.rs` carries it out. Decisions by `p` and `every` draw from
//! `--seed` and so repeat exactly for the same sequence of packets; which packet is the Nth
//! depends on what the host asks for (resends, reconnects), so counts repeat exactly only when
//! the host behaves the same (see the README on `--seed`).

use std::time::{Duration, Instant as StdInstant};

use anyhow::{Context, Result, bail};
use rdmacam_protocol::device::faults::{FaultKind, FaultRequest, KINDS, Rng, Rule, Trigger};
use serde::Serialize;

/// One `--fault` option.
#[derive(Debug, Clone, PartialEq)]
pub struct FaultSpec {
    /// The camera it applies to (index from 0); `None` = all.
    pub camera: Option<usize>,
    /// What.
    pub kind: FaultKind,
    /// When (packet, frame and request faults).
    pub rule: Rule,
    /// When and how long (stall, silence, reboot).
    pub timed: Option<Timed>,
}

/// A fault that lasts a while.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timed {
    /// First start, from the camera's start.
    pub at: Duration,
    /// How long.
    pub duration: Duration,
    /// Again this long after each start.
    pub every: Option<Duration>,
}

/// The highest `camN` a fault may name (as many as `--cameras` serves).
const MAX_CAMERA: usize = 256;

/// A fault's time: `250ms` or `2s`, from 0 to a day. The error is the reason alone; the caller
/// names the key and the spec.
fn parse_time(s: &str) -> Result<Duration> {
    let (num, scale) = if let Some(n) = s.strip_suffix("ms") {
        (n, 1e-3)
    } else if let Some(n) = s.strip_suffix('s') {
        (n, 1.0)
    } else {
        bail!("{s} needs a unit, ms or s (250ms, 2s)");
    };
    let v: f64 = num
        .parse()
        .ok()
        .filter(|v: &f64| v.is_finite() && *v >= 0.0)
        .with_context(|| format!("{s} is not a time: a number of 0 or more, then ms or s"))?;
    if v * scale > 86_400.0 {
        bail!("{s} is more than a day (86400s)");
    }
    Ok(Duration::from_secs_f64(v * scale))
}

impl std::str::FromStr for FaultSpec {
    type Err = anyhow::Error;

    fn from_str(spec: &str) -> Result<Self> {
        let what = || format!("--fault {spec:?}");
        let mut rest = spec.trim();
        let mut camera = None;
        if let Some(after) = rest.strip_prefix("cam")
            && let Some((n, tail)) = after.split_once(':')
            && n.chars().all(|c| c.is_ascii_digit())
        {
            let n: usize = n
                .parse()
                .ok()
                .filter(|n| (1..=MAX_CAMERA).contains(n))
                .with_context(|| {
                    format!(
                        "{}: camN takes a camera number, cam1 to cam{MAX_CAMERA}",
                        what()
                    )
                })?;
            camera = Some(n - 1);
            rest = tail;
        }
        let (name, params) = rest.split_once(':').unwrap_or((rest, ""));
        let kind = FaultKind::ALL
            .into_iter()
            .find(|k| k.cli_name() == name)
            .with_context(|| {
                let names: Vec<_> = FaultKind::ALL.iter().map(|k| k.cli_name()).collect();
                format!(
                    "{}: unknown fault {name:?}; one of {}",
                    what(),
                    names.join(", ")
                )
            })?;
        let mut keys: Vec<(&str, &str)> = Vec::new();
        for kv in params.split(',').filter(|s| !s.is_empty()) {
            let (k, v) = kv
                .split_once('=')
                .with_context(|| format!("{}: {kv:?} is not KEY=VALUE", what()))?;
            let allowed: &[&str] = if kind.timed() {
                &["for", "at", "every"]
            } else {
                &["p", "every"]
            };
            if !allowed.contains(&k) {
                bail!(
                    "{}: {k:?} does not apply to {name}; it takes {}",
                    what(),
                    if kind.timed() {
                        "for=T, at=T and every=T"
                    } else {
                        "p=P or every=N"
                    }
                );
            }
            if keys.iter().any(|(seen, _)| *seen == k) {
                bail!("{}: {k} given twice", what());
            }
            keys.push((k, v));
        }
        let get = |k: &str| keys.iter().find(|(n, _)| *n == k).map(|(_, v)| *v);
        if kind.timed() {
            // the reason in the message itself: clap shows an error's outermost layer only
            let time = |k: &str| {
                get(k)
                    .map(parse_time)
                    .transpose()
                    .map_err(|e| anyhow::anyhow!("{}: {k}={e}", what()))
            };
            let duration = time("for")?
                .filter(|d| !d.is_zero())
                .with_context(|| format!("{}: say how long, for=T (e.g. for=500ms)", what()))?;
            let at =
                time("at")?.with_context(|| format!("{}: say when, at=T (e.g. at=2s)", what()))?;
            let every = time("every")?;
            if every.is_some_and(|e| e <= duration) {
                bail!("{}: every must be longer than for", what());
            }
            return Ok(FaultSpec {
                camera,
                kind,
                rule: Rule::Off,
                timed: Some(Timed {
                    at,
                    duration,
                    every,
                }),
            });
        }
        let rule = match (get("p"), get("every")) {
            (Some(_), Some(_)) => bail!("{}: give p or every, not both", what()),
            (Some(x), None) => {
                let x: f64 = x
                    .parse()
                    .ok()
                    .filter(|x| *x > 0.0 && *x <= 1.0)
                    .with_context(|| format!("{}: p must be more than 0 and at most 1", what()))?;
                Rule::chance(x)
            }
            (None, Some(n)) => {
                Rule::Every(n.parse().ok().filter(|n| *n >= 1).with_context(|| {
                    format!("{}: every takes a count from 1 to {}", what(), u32::MAX)
                })?)
            }
            (None, None) if kind == FaultKind::ResendUnavailable => Rule::Every(1),
            (None, None) => bail!("{}: say how often, p=P or every=N", what()),
        };
        Ok(FaultSpec {
            camera,
            kind,
            rule,
            timed: None,
        })
    }
}

/// Refuse a set of `--fault` options a run cannot honour as written: one naming a camera the run
/// does not have (`cameras` of them), or one kind twice for the same camera (the engine keeps
/// one rule per kind, so the second would silently replace the first).
pub fn check_faults(faults: &[FaultSpec], cameras: usize) -> Result<()> {
    if let Some(f) = faults
        .iter()
        .find(|f| f.camera.is_some_and(|c| c >= cameras))
    {
        bail!(
            "--fault names cam{} but the run has {cameras} camera(s)",
            f.camera.unwrap_or(0) + 1
        );
    }
    for (i, a) in faults.iter().enumerate() {
        let overlaps = |b: &&FaultSpec| {
            b.kind == a.kind && (a.camera.is_none() || b.camera.is_none() || a.camera == b.camera)
        };
        if let Some(b) = faults[i + 1..].iter().find(overlaps) {
            bail!(
                "--fault {} is given twice for the same camera ({} and {}): one rule per kind \
                 and camera; give camN: to set each camera's own",
                a.kind.cli_name(),
                a.describe(),
                b.describe()
            );
        }
    }
    Ok(())
}

impl FaultSpec {
    /// The spec as it would be written on the command line.
    pub fn describe(&self) -> String {
        let cam = self
            .camera
            .map(|c| format!("cam{}:", c + 1))
            .unwrap_or_default();
        let when = match (&self.timed, self.rule) {
            (Some(t), _) => {
                let mut w = format!("for={:?},at={:?}", t.duration, t.at);
                if let Some(e) = t.every {
                    w += &format!(",every={e:?}");
                }
                w
            }
            (None, Rule::Every(n)) => format!("every={n}"),
            (None, Rule::Chance(c)) => format!("p={:.4}", f64::from(c) / f64::from(u32::MAX)),
            (None, Rule::Off) => String::new(),
        };
        format!("{cam}{}:{when}", self.kind.cli_name())
    }
}

/// What to do with one outgoing stream packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Verdict {
    /// Not sent at all.
    pub drop: bool,
    /// Held back and sent after the next packet.
    pub hold: bool,
    /// Sent twice.
    pub duplicate: bool,
    /// Its bytes are to be damaged ([`flip_bytes`] on a GVSP payload or a RoCEv2 ICRC).
    pub corrupt: bool,
    /// Marked ECN Congestion Experienced (RoCEv2).
    pub ecn: bool,
}

/// Faults of one camera injected, by kind, for the summary. In JSON a map from each kind's
/// `--fault` name (`-` as `_`: `drop_frame`, `resend_unavailable`) to its count, every kind
/// present.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FaultCounts(pub [u64; KINDS]);

impl FaultCounts {
    /// The count of `kind`.
    pub fn get(&self, kind: FaultKind) -> u64 {
        self.0[kind as usize]
    }

    /// `kind=count` for the kinds that happened, or "none".
    pub fn line(&self) -> String {
        let parts: Vec<String> = FaultKind::ALL
            .iter()
            .zip(self.0)
            .filter(|(_, n)| *n > 0)
            .map(|(k, n)| format!("{}={n}", k.cli_name()))
            .collect();
        if parts.is_empty() {
            "none".into()
        } else {
            parts.join(" ")
        }
    }
}

impl Serialize for FaultCounts {
    fn serialize<S: serde::Serializer>(&self, ser: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut m = ser.serialize_map(Some(KINDS))?;
        for (k, n) in FaultKind::ALL.iter().zip(self.0) {
            m.serialize_entry(&k.cli_name().replace('-', "_"), &n)?;
        }
        m.end()
    }
}

/// A timed fault's state.
#[derive(Debug, Clone, Copy)]
struct Schedule {
    kind: FaultKind,
    next: Option<Duration>,
    duration: Duration,
    every: Option<Duration>,
}

/// The timed windows open now: until when the stream stalls, the camera is silent, and when
/// a reboot's silence ends.
#[derive(Debug, Clone, Copy, Default)]
struct Windows {
    stall_until: Option<StdInstant>,
    silent_until: Option<StdInstant>,
    reboot_at: Option<StdInstant>,
}

impl Windows {
    fn start(&mut self, kind: FaultKind, until: StdInstant) {
        let later = |t: Option<StdInstant>| Some(t.map_or(until, |t| t.max(until)));
        match kind {
            FaultKind::Stall => self.stall_until = later(self.stall_until),
            FaultKind::Silence => self.silent_until = later(self.silent_until),
            _ => {
                // silent until it is back, then new
                self.reboot_at = later(self.reboot_at);
                self.silent_until = later(self.silent_until);
            }
        }
    }

    /// Close what has ended; whether a reboot's silence ended now.
    fn tick(&mut self, now: StdInstant) -> bool {
        if self.stall_until.is_some_and(|t| now >= t) {
            self.stall_until = None;
        }
        if self.silent_until.is_some_and(|t| now >= t) {
            self.silent_until = None;
        }
        let reboot_now = self.reboot_at.is_some_and(|t| now >= t);
        if reboot_now {
            self.reboot_at = None;
        }
        reboot_now
    }

    fn ends(&self) -> impl Iterator<Item = StdInstant> {
        [self.stall_until, self.silent_until, self.reboot_at]
            .into_iter()
            .flatten()
    }
}

/// What the run loop must do now.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Tick {
    /// A reboot's silence ended: build the camera afresh.
    pub reboot_now: bool,
}

/// One camera's fault engine: the rules of its `--fault` options, the requests hosts made
/// (FaultInject), timed windows, and what was injected on the wire.
#[derive(Debug)]
pub struct FaultEngine {
    triggers: [Trigger; KINDS],
    rng: Rng,
    schedules: Vec<Schedule>,
    t0: StdInstant,
    /// Windows opened by `--fault` schedules.
    cli: Windows,
    /// Windows opened by a host's FaultInject: they end with that host's control.
    host: Windows,
    /// Wire faults injected (the device counts its own).
    wire: [u64; KINDS],
}

impl FaultEngine {
    /// The engine of camera `index` from every `--fault` option, seeded from `seed`.
    pub fn new(specs: &[FaultSpec], index: usize, seed: u64) -> Self {
        let mut triggers = [Trigger::new(Rule::Off); KINDS];
        let mut schedules = Vec::new();
        for s in specs.iter().filter(|s| s.camera.is_none_or(|c| c == index)) {
            match s.timed {
                Some(t) => schedules.push(Schedule {
                    kind: s.kind,
                    next: Some(t.at),
                    duration: t.duration,
                    every: t.every,
                }),
                None => triggers[s.kind as usize].rule = s.rule,
            }
        }
        FaultEngine {
            triggers,
            rng: Rng::new(seed ^ 0xfa17 ^ (index as u64) << 32),
            schedules,
            t0: StdInstant::now(),
            cli: Windows::default(),
            host: Windows::default(),
            wire: [0; KINDS],
        }
    }

    /// The rule for a fault the device carries out itself (drop-frame, resend-unavailable).
    pub fn rule(&self, kind: FaultKind) -> Rule {
        self.triggers[kind as usize].rule
    }

    /// Whether any RoCEv2 packet fault may happen (then packets leave one by one, not in
    /// UDP GSO runs, so each can be treated on its own).
    pub fn packet_faults(&self) -> bool {
        [
            FaultKind::Loss,
            FaultKind::Reorder,
            FaultKind::Duplicate,
            FaultKind::Corrupt,
            FaultKind::Ecn,
        ]
        .iter()
        .any(|&k| self.triggers[k as usize].armed())
    }

    /// A host's FaultInject, to carry out from now on. Returns the kind for logging.
    pub fn request(&mut self, now: StdInstant, r: FaultRequest) -> FaultKind {
        let d = Duration::from_millis(u64::from(r.duration_ms));
        match r.kind {
            k if k.timed() => {
                self.host.start(k, now + d);
                self.wire[k as usize] += 1;
            }
            k => self.triggers[k as usize].add(u64::from(r.count)),
        }
        r.kind
    }

    /// The host that asked for faults lost control (released it, its heartbeat expired, the
    /// camera rebooted): what it asked for ends with it. A silence or stall it opened closes
    /// now, a reboot it asked for comes back now, and the packets it asked to hit are not hit.
    /// Without this, one packet from a host that took free control (CCP, then
    /// ControlSilence for 600 s) left the camera deaf for ten minutes after that host was gone.
    /// Returns whether anything was cut short.
    pub fn host_control_ended(&mut self, now: StdInstant) -> bool {
        let open = self.host.ends().any(|t| t > now);
        let mut pending = false;
        for t in &mut self.triggers {
            pending |= t.clear_pending();
        }
        if self.host.reboot_at.is_some() {
            self.host.reboot_at = Some(now);
        }
        self.host.stall_until = None;
        self.host.silent_until = None;
        open || pending
    }

    /// Start and end timed faults due at `now`.
    pub fn tick(&mut self, now: StdInstant) -> Tick {
        let since = now.saturating_duration_since(self.t0);
        let mut due = Vec::new();
        for s in &mut self.schedules {
            if let Some(at) = s.next
                && since >= at
            {
                due.push((s.kind, s.duration));
                s.next = s.every.map(|e| at + e);
            }
        }
        for (k, d) in due {
            self.cli.start(k, now + d);
            self.wire[k as usize] += 1;
        }
        let cli = self.cli.tick(now);
        let host = self.host.tick(now);
        Tick {
            reboot_now: cli || host,
        }
    }

    /// Nothing in or out (silence, or a reboot under way).
    pub fn silent(&self) -> bool {
        self.cli.silent_until.is_some() || self.host.silent_until.is_some()
    }

    /// The stream may not send (a stall, or silence).
    pub fn stalled(&self) -> bool {
        self.cli.stall_until.is_some() || self.host.stall_until.is_some() || self.silent()
    }

    /// When the current window ends (to sleep no longer than that).
    pub fn next_change(&self, now: StdInstant) -> Option<Duration> {
        let since = now.saturating_duration_since(self.t0);
        self.cli
            .ends()
            .chain(self.host.ends())
            .map(|t| t.saturating_duration_since(now))
            .chain(
                self.schedules
                    .iter()
                    .filter_map(|s| s.next)
                    .map(|at| at.saturating_sub(since)),
            )
            .min()
    }

    fn hit(&mut self, kind: FaultKind) -> bool {
        self.triggers[kind as usize].hit(&mut self.rng)
    }

    /// Decide the fate of one outgoing stream packet: `corruptible` says whether it is one a
    /// corruption may hit (a GVSP payload packet, a RoCEv2 request), `ecn_capable` whether it
    /// can carry an ECN mark. The caller damages it when the verdict says `corrupt`.
    pub fn packet(&mut self, corruptible: bool, ecn_capable: bool) -> Verdict {
        let mut v = Verdict {
            drop: false,
            hold: false,
            duplicate: false,
            corrupt: false,
            ecn: false,
        };
        if self.hit(FaultKind::Loss) {
            v.drop = true;
            self.wire[FaultKind::Loss as usize] += 1;
            return v;
        }
        if corruptible && self.hit(FaultKind::Corrupt) {
            v.corrupt = true;
            self.wire[FaultKind::Corrupt as usize] += 1;
        }
        if ecn_capable && self.hit(FaultKind::Ecn) {
            v.ecn = true;
            self.wire[FaultKind::Ecn as usize] += 1;
        }
        if self.hit(FaultKind::Duplicate) {
            v.duplicate = true;
            self.wire[FaultKind::Duplicate as usize] += 1;
        }
        if self.hit(FaultKind::Reorder) {
            v.hold = true;
            self.wire[FaultKind::Reorder as usize] += 1;
        }
        v
    }

    /// Wire faults injected so far, by kind.
    pub fn wire_counts(&self) -> [u64; KINDS] {
        self.wire
    }
}

/// Where a GVSP payload packet's data starts (a standard or extended-ID header); `None` for
/// other packets (leader, trailer, status-only answers).
pub fn gvsp_payload_at(packet: &[u8]) -> Option<usize> {
    use rdmacam_protocol::gev::gvsp::{Format, Header};
    let (h, header_len) = Header::parse(packet).ok()?;
    (h.format == Format::Payload && packet.len() > header_len).then_some(header_len)
}

/// Flip the first 16 data bytes of a GVSP payload packet; false for other packets.
pub fn corrupt_gvsp(packet: &mut [u8]) -> bool {
    let Some(at) = gvsp_payload_at(packet) else {
        return false;
    };
    flip_bytes(&mut packet[at..]);
    true
}

/// Invert up to the first 16 bytes: GVSP payload data, or a RoCEv2 ICRC's last byte (which
/// a receiver must then discard).
pub fn flip_bytes(bytes: &mut [u8]) {
    for b in bytes.iter_mut().take(16) {
        *b ^= 0xff;
    }
}

/// The BTH opcode of a RoCEv2 IP packet (IPv4 or IPv6), if it is one.
pub fn roce_opcode(ip_packet: &[u8]) -> Option<u8> {
    let hl = match ip_packet.first()? >> 4 {
        4 => usize::from(ip_packet[0] & 0x0f) * 4,
        6 => 40,
        _ => return None,
    };
    ip_packet.get(hl + 8).copied()
}

/// Whether a RoCEv2 IP packet is an RC request the camera streams (RDMA WRITE or SEND), not
/// an acknowledgement or a connection-manager datagram.
pub fn is_rc_request(ip_packet: &[u8]) -> bool {
    roce_opcode(ip_packet).is_some_and(|op| op < 0x10)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(s: &str) -> FaultSpec {
        s.parse().unwrap_or_else(|e| panic!("{s}: {e:#}"))
    }

    #[test]
    fn the_grammar() {
        assert_eq!(
            spec("loss:p=0.01"),
            FaultSpec {
                camera: None,
                kind: FaultKind::Loss,
                rule: Rule::chance(0.01),
                timed: None
            }
        );
        assert_eq!(spec("cam3:drop-frame:every=10").camera, Some(2));
        assert_eq!(spec("cam3:drop-frame:every=10").rule, Rule::Every(10));
        assert_eq!(spec("resend-unavailable").rule, Rule::Every(1));
        assert_eq!(
            spec("stall:for=250ms,at=2s").timed,
            Some(Timed {
                at: Duration::from_secs(2),
                duration: Duration::from_millis(250),
                every: None
            })
        );
        assert_eq!(
            spec("silence:every=10s,at=1.5s,for=3s").timed,
            Some(Timed {
                at: Duration::from_millis(1500),
                duration: Duration::from_secs(3),
                every: Some(Duration::from_secs(10))
            })
        );
        for bad in [
            "lose:p=0.1",
            "loss",
            "loss:p=0",
            "loss:p=1.5",
            "loss:p=0.1,every=3",
            "loss:every=0",
            "loss:for=1s",
            "stall:at=1s",
            "stall:for=1s",
            "stall:for=1s,at=2",
            "stall:for=2s,at=1s,every=1s",
            "cam0:loss:p=0.1",
            "reboot:p=0.5",
            "loss:p",
        ] {
            let e = bad.parse::<FaultSpec>().unwrap_err();
            assert!(format!("{e:#}").contains(bad), "{bad}: {e:#}");
        }
    }

    #[test]
    fn a_refused_fault_says_why_in_the_message_clap_shows() {
        // clap prints an error's outermost layer (`{}`), so the reason must be in it
        for (bad, why) in [
            ("stall:for=1h,at=0s", "for=1h needs a unit, ms or s"),
            ("stall:for=-1s,at=0s", "for=-1s is not a time"),
            ("stall:for=NaNs,at=0s", "for=NaNs is not a time"),
            ("stall:for=86401s,at=0s", "for=86401s is more than a day"),
            ("stall:for=1,at=0s", "for=1 needs a unit"),
            ("stall:for=1s,at=1h", "at=1h needs a unit"),
            (
                "cam:loss:p=0.1",
                "camN takes a camera number, cam1 to cam256",
            ),
            (
                "cam99999999999999999999999:loss:p=0.1",
                "camN takes a camera number",
            ),
            ("cam257:loss:p=0.1", "cam1 to cam256"),
            (
                "loss:every=18446744073709551615",
                "every takes a count from 1 to 4294967295",
            ),
        ] {
            let e = bad.parse::<FaultSpec>().unwrap_err();
            let shown = format!("{e}");
            assert!(shown.contains(bad) && shown.contains(why), "{bad}: {shown}");
        }
        assert_eq!(spec("loss:every=4294967295").rule, Rule::Every(u32::MAX));
    }

    #[test]
    fn one_kind_twice_for_a_camera_is_refused_not_replaced() {
        let set = |v: &[&str]| v.iter().map(|s| spec(s)).collect::<Vec<_>>();
        let e = check_faults(&set(&["drop-frame:every=3", "drop-frame:every=5"]), 1).unwrap_err();
        assert!(
            e.to_string()
                .contains("drop-frame is given twice for the same camera (drop-frame:every=3 and drop-frame:every=5)"),
            "{e}"
        );
        // a rule for all cameras and one for cam2 overlap on cam2
        assert!(check_faults(&set(&["loss:p=0.1", "cam2:loss:every=4"]), 2).is_err());
        // two cameras' own rules, and different kinds, do not
        check_faults(&set(&["cam1:loss:p=0.1", "cam2:loss:every=4"]), 2).unwrap();
        check_faults(&set(&["loss:p=0.1", "duplicate:every=4"]), 1).unwrap();
        let e = check_faults(&set(&["cam3:loss:p=0.1"]), 2).unwrap_err();
        assert!(
            e.to_string().contains("names cam3 but the run has 2"),
            "{e}"
        );
    }

    #[test]
    fn decisions_repeat_from_the_seed_and_count() {
        let specs = [spec("loss:p=0.1"), spec("duplicate:every=7")];
        let run = || {
            let mut e = FaultEngine::new(&specs, 0, 42);
            let v: Vec<Verdict> = (0..1000).map(|_| e.packet(false, false)).collect();
            (v, e.wire_counts())
        };
        let (a, counts) = run();
        assert_eq!(a, run().0);
        let dropped = a.iter().filter(|v| v.drop).count() as u64;
        assert_eq!(counts[FaultKind::Loss as usize], dropped);
        assert!((60..140).contains(&dropped), "{dropped}");
        // every 7th packet that was not lost is duplicated
        assert_eq!(counts[FaultKind::Duplicate as usize], (1000 - dropped) / 7);
        // another camera draws differently
        let mut other = FaultEngine::new(&specs, 1, 42);
        let b: Vec<Verdict> = (0..1000).map(|_| other.packet(false, false)).collect();
        assert_ne!(a, b);
    }

    #[test]
    fn corrupt_counts_only_packets_it_can_damage() {
        let mut e = FaultEngine::new(&[spec("corrupt:every=2")], 0, 1);
        let hits: Vec<bool> = (0..6)
            .map(|i| e.packet(i % 3 != 0, false).corrupt)
            .collect();
        // packets 0 and 3 cannot be corrupted and are not counted
        assert_eq!(hits, vec![false, false, true, false, false, true]);
        assert_eq!(e.wire_counts()[FaultKind::Corrupt as usize], 2);
    }

    #[test]
    fn requests_and_schedules_open_windows() {
        let mut e = FaultEngine::new(&[spec("stall:for=50ms,at=0s")], 0, 1);
        let t = StdInstant::now();
        e.tick(t);
        assert!(e.stalled() && !e.silent());
        e.tick(t + Duration::from_millis(60));
        assert!(!e.stalled());
        e.request(
            t,
            FaultRequest {
                kind: FaultKind::Reboot,
                count: 1,
                duration_ms: 100,
            },
        );
        assert!(e.silent());
        assert_eq!(e.tick(t + Duration::from_millis(50)), Tick::default());
        assert!(e.tick(t + Duration::from_millis(100)).reboot_now);
        assert!(!e.silent());
        e.request(
            t,
            FaultRequest {
                kind: FaultKind::Loss,
                count: 2,
                duration_ms: 0,
            },
        );
        assert!(e.packet_faults());
        assert!(e.packet(false, false).drop && e.packet(false, false).drop);
        assert!(!e.packet(false, false).drop);
        let c = FaultCounts(e.wire_counts());
        assert_eq!(c.line(), "loss=2 stall=1 reboot=1");
    }

    #[test]
    fn gvsp_corruption_hits_payload_packets_only() {
        use rdmacam_protocol::gev::gvsp::{Format, Header};
        let mut p = vec![0u8; 100];
        let h = |format| Header {
            status: 0,
            flags: 0,
            extended: false,
            format,
            block_id: 1,
            packet_id: 1,
        };
        let n = h(Format::Payload).emit(&mut p).unwrap();
        assert!(corrupt_gvsp(&mut p));
        assert!(p[n..n + 16].iter().all(|&b| b == 0xff) && p[n + 16] == 0);
        h(Format::Leader).emit(&mut p).unwrap();
        assert!(!corrupt_gvsp(&mut p));
    }
}
