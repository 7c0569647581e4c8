//! A deterministic lossy link between a camera's RC requester and a soft host, on a virtual
//! clock. Every random decision comes from one seeded ChaCha8 stream per direction, so a seed
//! replays the same run bit for bit.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::time::Duration;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rdmacam_protocol::rc::{
    Completion, Instant, Requester, RequesterConfig, ResponderConfig, split_rocev2,
};

use crate::soft::SoftHost;

/// What a link does to packets. Probabilities are per packet, 0.0..=1.0.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LinkConfig {
    /// Drop the packet.
    pub loss: f64,
    /// Deliver it twice.
    pub duplicate: f64,
    /// Hold it back by three link delays so later packets overtake it.
    pub reorder: f64,
    /// Flip one random bit from the IP header on.
    pub corrupt: f64,
    /// Mark ECN-capable packets Congestion Experienced.
    pub ecn_mark: f64,
    /// One-way delay.
    pub delay: Duration,
    /// Extra uniformly random delay, 0..jitter.
    pub jitter: Duration,
    /// Line rate in bit/s: packets leave one after the other at this rate and queue behind
    /// each other (0 = infinitely fast, only the delay counts).
    pub rate_bps: u64,
    /// Mark an ECN-capable packet Congestion Experienced when it would wait longer than this in
    /// the line's queue, as a switch with ECN marking does (`None` = never).
    pub ecn_queue: Option<Duration>,
}

impl LinkConfig {
    /// A perfect link with a 5 µs delay.
    pub const fn clean() -> Self {
        LinkConfig {
            loss: 0.0,
            duplicate: 0.0,
            reorder: 0.0,
            corrupt: 0.0,
            ecn_mark: 0.0,
            delay: Duration::from_micros(5),
            jitter: Duration::ZERO,
            rate_bps: 0,
            ecn_queue: None,
        }
    }
    /// A link that loses `p` of packets.
    pub const fn lossy(p: f64) -> Self {
        let mut c = Self::clean();
        c.loss = p;
        c
    }
}

/// What a link did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LinkStats {
    /// Packets offered.
    pub offered: u64,
    /// Packets dropped (random loss or a drop filter).
    pub lost: u64,
    /// Extra copies delivered.
    pub duplicated: u64,
    /// Packets held back.
    pub reordered: u64,
    /// Packets with a flipped bit.
    pub corrupted: u64,
    /// Packets marked CE.
    pub marked: u64,
}

/// A filter that drops the packets for which it returns true (named-scenario losses).
pub type DropFilter = Box<dyn FnMut(&[u8]) -> bool>;

/// One direction of a link.
pub struct Link {
    cfg: LinkConfig,
    rng: ChaCha8Rng,
    queue: BinaryHeap<Reverse<(Instant, u64, Vec<u8>)>>,
    seq: u64,
    stats: LinkStats,
    filter: Option<DropFilter>,
    /// When the line is free to serialize the next packet.
    free_at: Instant,
}

impl std::fmt::Debug for Link {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Link")
            .field("cfg", &self.cfg)
            .field("in_flight", &self.queue.len())
            .field("stats", &self.stats)
            .finish()
    }
}

impl Link {
    /// A link with its own random stream.
    pub fn new(cfg: LinkConfig, seed: u64) -> Self {
        Link {
            cfg,
            rng: ChaCha8Rng::seed_from_u64(seed),
            queue: BinaryHeap::new(),
            seq: 0,
            stats: LinkStats::default(),
            filter: None,
            free_at: Instant::ZERO,
        }
    }

    /// Drop every packet `f` returns true for (besides random loss).
    pub fn set_filter(&mut self, f: DropFilter) {
        self.filter = Some(f);
    }

    /// What the link did so far.
    pub fn stats(&self) -> LinkStats {
        self.stats
    }

    /// Offer a packet at `now`.
    pub fn send(&mut self, now: Instant, mut pkt: Vec<u8>) {
        self.stats.offered += 1;
        // the line serializes every offered packet, lost ones too (they are lost on the way)
        let bits = (pkt.len() as u64 + 24) * 8; // Ethernet header, FCS, preamble, gap
        let now = match (bits * 1_000_000_000).checked_div(self.cfg.rate_bps) {
            Some(ns) => {
                let queued = Duration::from_nanos(self.free_at.0.saturating_sub(now.0));
                if self.cfg.ecn_queue.is_some_and(|t| queued > t) && mark_ce(&mut pkt) {
                    self.stats.marked += 1;
                }
                self.free_at = self.free_at.max(now) + Duration::from_nanos(ns);
                self.free_at
            }
            None => now,
        };
        if let Some(f) = self.filter.as_mut()
            && f(&pkt)
        {
            self.stats.lost += 1;
            return;
        }
        if self.rng.random_bool(self.cfg.loss) {
            self.stats.lost += 1;
            return;
        }
        if self.rng.random_bool(self.cfg.ecn_mark) && mark_ce(&mut pkt) {
            self.stats.marked += 1;
        }
        if self.rng.random_bool(self.cfg.corrupt) {
            let at = self.rng.random_range(0..pkt.len());
            pkt[at] ^= 1 << self.rng.random_range(0..8);
            self.stats.corrupted += 1;
        }
        let copies = if self.rng.random_bool(self.cfg.duplicate) {
            self.stats.duplicated += 1;
            2
        } else {
            1
        };
        for i in 0..copies {
            let mut delay = self.cfg.delay;
            if !self.cfg.jitter.is_zero() {
                delay += self.cfg.jitter.mul_f64(self.rng.random::<f64>());
            }
            if i == 0 && self.rng.random_bool(self.cfg.reorder) {
                delay += self.cfg.delay * 3;
                self.stats.reordered += 1;
            }
            self.seq += 1;
            self.queue
                .push(Reverse((now + delay, self.seq, pkt.clone())));
        }
    }

    /// How long a packet offered at `now` would wait in the line's queue.
    pub fn queue_delay(&self, now: Instant) -> Duration {
        Duration::from_nanos(self.free_at.0.saturating_sub(now.0))
    }

    /// When the next packet arrives.
    pub fn next_arrival(&self) -> Option<Instant> {
        self.queue.peek().map(|Reverse((t, _, _))| *t)
    }

    /// A packet that has arrived by `now`.
    pub fn recv(&mut self, now: Instant) -> Option<Vec<u8>> {
        if self.next_arrival()? <= now {
            self.queue.pop().map(|Reverse((_, _, p))| p)
        } else {
            None
        }
    }
}

/// Set CE on an ECN-capable IPv4/IPv6 packet (fixing the IPv4 checksum, as a switch does).
/// Returns false for a Not-ECT packet, which a switch would drop or pause instead.
fn mark_ce(pkt: &mut [u8]) -> bool {
    match pkt.first().map(|b| b >> 4) {
        Some(4) if pkt.len() >= 20 && pkt[1] & 3 != 0 => {
            pkt[1] |= 3;
            pkt[10] = 0;
            pkt[11] = 0;
            let c = rdmacam_protocol::wire::ipv4::checksum(&pkt[..20]);
            pkt[10..12].copy_from_slice(&c.to_be_bytes());
            true
        }
        Some(6) if pkt.len() >= 40 && (pkt[1] >> 4) & 3 != 0 => {
            pkt[1] |= 0x30;
            true
        }
        _ => false,
    }
}

/// Send-queue depth of the simulated camera.
pub const SQ_DEPTH: usize = 256;

/// Something to do at a simulated time.
pub enum Event {
    /// The host posts `count` receives of `len` bytes (ids continue from earlier posts).
    PostRecv {
        /// How many.
        count: u32,
        /// Buffer size.
        len: u32,
    },
}

/// A camera requester and a soft host joined by two links.
pub struct Sim {
    /// Virtual time.
    pub now: Instant,
    /// The camera's send side.
    pub camera: Requester<SQ_DEPTH, SQ_DEPTH>,
    /// The host.
    pub host: SoftHost,
    /// Camera to host.
    pub up: Link,
    /// Host to camera.
    pub down: Link,
    /// Completions the camera reported, in order.
    pub completions: Vec<Completion>,
    /// Buffers the camera's work requests point into (`PayloadRef::handle` indexes them).
    pub buffers: Vec<Vec<u8>>,
    events: Vec<(Instant, Event)>,
    next_recv_id: u64,
    reply: Vec<u8>,
}

impl std::fmt::Debug for Sim {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sim")
            .field("now", &self.now)
            .field("up", &self.up)
            .field("down", &self.down)
            .finish_non_exhaustive()
    }
}

impl Sim {
    /// A simulation; `seed` drives both links (each gets its own stream).
    pub fn new(
        camera: RequesterConfig,
        host: ResponderConfig,
        up: LinkConfig,
        down: LinkConfig,
        seed: u64,
    ) -> Self {
        Sim {
            now: Instant::from_millis(1),
            camera: Requester::new(camera),
            host: SoftHost::new(host),
            up: Link::new(up, seed.wrapping_mul(2).wrapping_add(1)),
            down: Link::new(down, seed.wrapping_mul(2).wrapping_add(2)),
            completions: Vec::new(),
            buffers: Vec::new(),
            events: Vec::new(),
            next_recv_id: 0,
            reply: vec![0; 128],
        }
    }

    /// Post `count` receives of `len` bytes on the host now.
    pub fn post_recvs(&mut self, count: u32, len: u32) {
        for _ in 0..count {
            let id = self.next_recv_id;
            self.next_recv_id += 1;
            assert!(self.host.post_recv(id, len), "host receive queue full");
        }
    }

    /// Schedule an event at `at`.
    pub fn at(&mut self, at: Instant, e: Event) {
        self.events.push((at, e));
        self.events.sort_by_key(|(t, _)| Reverse(*t));
    }

    /// Run until nothing is left to do or `deadline` passes. Returns the time it stopped.
    pub fn run(&mut self, deadline: Instant) -> Instant {
        loop {
            let mut busy = true;
            while busy {
                busy = false;
                while let Some(pkt) = self.camera.poll_transmit(self.now, &self.buffers[..]) {
                    let mut bytes = vec![0; pkt.len()];
                    pkt.copy_to(&self.buffers[..], &mut bytes)
                        .expect("payload resolvable");
                    self.up.send(self.now, bytes);
                    busy = true;
                }
                while let Some(p) = self.up.recv(self.now) {
                    self.host.handle_packet(self.now, &p);
                    busy = true;
                }
                while let Some(n) = self.host.poll_transmit(&mut self.reply) {
                    self.down.send(self.now, self.reply[..n].to_vec());
                    busy = true;
                }
                while let Some(p) = self.down.recv(self.now) {
                    if let Ok((_, _, _, ib)) = split_rocev2(&p) {
                        self.camera.handle_ib(self.now, ib);
                    }
                    busy = true;
                }
                while let Some(c) = self.camera.poll_completion() {
                    self.completions.push(c);
                }
                while self.events.last().is_some_and(|(t, _)| *t <= self.now) {
                    let (_, e) = self.events.pop().expect("checked");
                    match e {
                        Event::PostRecv { count, len } => self.post_recvs(count, len),
                    }
                    busy = true;
                }
            }
            let next = [
                self.up.next_arrival(),
                self.down.next_arrival(),
                self.camera.poll_timeout(),
                self.events.last().map(|(t, _)| *t),
            ]
            .into_iter()
            .flatten()
            .min();
            match next {
                Some(t) if t <= deadline => {
                    self.now = self.now.max(t);
                    self.camera.handle_timeout(self.now);
                }
                _ => return self.now,
            }
        }
    }
}
