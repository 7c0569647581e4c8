//! The GVSP stream channel: frames out as leader, payload packets and trailer, paced by the
//! inter-packet delay, with packet resend from a ring of recent frames.

use core::net::Ipv4Addr;

use heapless::Deque;

use super::frame::{Frame, FrameSource, read_payload};
use crate::gev::gvsp::{self, Format, Header};
use crate::gev::status;
use crate::rc::Instant;

/// Frames kept for packet resend.
pub const RESEND_RING: usize = 8;
const RESEND_QUEUE: usize = 16;
/// PACKET_UNAVAILABLE answers waiting to go.
const UNAVAILABLE_QUEUE: usize = 16;

/// A resend the camera cannot serve, answered with a header-only GVSP packet of status
/// PACKET_UNAVAILABLE so the host stops asking (aravis then gives up on the frame at once).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Unavailable {
    block_id: u64,
    extended: bool,
    packet_id: u32,
}

/// Where and how a frame was sent, so any of its packets can be rebuilt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Block {
    block_id: u64,
    frame: Frame,
    extended: bool,
    /// Payload bytes per payload packet.
    chunk: usize,
    /// Number of payload packets.
    n_payload: u32,
}

impl Block {
    fn last_packet_id(&self) -> u32 {
        self.n_payload + 1
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Resend {
    block: Block,
    next: u32,
    last: u32,
}

/// Counters of the stream channel.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct StreamCounters {
    /// Frames completely sent (trailer out).
    pub frames_sent: u64,
    /// GVSP packets sent, resends included.
    pub packets_sent: u64,
    /// Packets sent again on request.
    pub packets_resent: u64,
    /// Resend requests received.
    pub resend_requests: u64,
    /// Resend requests for blocks no longer in the ring, or for packet ids out of range.
    pub resend_unavailable: u64,
    /// Test packets fired.
    pub test_packets: u64,
}

/// A packet ready to send: its length in the caller's buffer and its destination.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamPacket {
    /// Bytes written to the buffer (the UDP payload).
    pub len: usize,
    /// Destination address.
    pub dst_ip: Ipv4Addr,
    /// Destination port.
    pub dst_port: u16,
}

/// Settings the channel sends with, taken from the SCx registers when a frame starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChannelConfig {
    /// Host address (SCDA).
    pub dst_ip: Ipv4Addr,
    /// Host port (SCP).
    pub dst_port: u16,
    /// IP packet size (SCPS), headers included.
    pub packet_size: u32,
    /// Inter-packet delay in nanoseconds (SCPD at a 1 GHz tick).
    pub delay_ns: u64,
    /// 64-bit block ids.
    pub extended: bool,
    /// Link speed in bits per second: packets are paced so the camera never sends faster than
    /// its link (0 = unpaced).
    pub link_bps: u64,
}

/// Bytes a GVSP datagram of `udp_payload` bytes occupies on Ethernet: IP, UDP, Ethernet header,
/// FCS, preamble and inter-frame gap.
const fn wire_bytes(udp_payload: usize) -> u64 {
    (udp_payload + 28 + 14 + 4 + 8 + 12) as u64
}

/// How far ahead of the link's pace packets may leave, in link time: 20 us, 17 packets of 1400
/// bytes at 10 Gbit/s (where waking per 1.1 us packet cost the camera a third of its CPU), one
/// or two at 1 Gbit/s. Bursts of 32 KiB at 1 Gbit/s made aravis's socket receive path (not
/// its default packet socket) lose packets and ask for hundreds of resends.
pub const LINK_BURST_NS: u64 = 20_000;

/// The GVSP transmitter of one stream channel.
#[derive(Debug)]
pub struct GvspChannel {
    current: Option<(Block, u32, ChannelConfig)>,
    ring: Deque<Block, RESEND_RING>,
    resends: Deque<Resend, RESEND_QUEUE>,
    unavailable: Deque<Unavailable, UNAVAILABLE_QUEUE>,
    next_block: u64,
    /// When the inter-packet delay (SCPD) lets the next packet go.
    next_packet_at: Instant,
    /// When the link's serialisation time lets it go; it may leave up to [`LINK_BURST_NS`] of
    /// link time before that.
    next_link_at: Instant,
    test_packet: Option<ChannelConfig>,
    link_bps: u64,
    counters: StreamCounters,
}

impl Default for GvspChannel {
    fn default() -> Self {
        Self::new()
    }
}

impl GvspChannel {
    /// An idle channel.
    pub const fn new() -> Self {
        GvspChannel {
            current: None,
            ring: Deque::new(),
            resends: Deque::new(),
            unavailable: Deque::new(),
            next_block: 1,
            next_packet_at: Instant::ZERO,
            next_link_at: Instant::ZERO,
            test_packet: None,
            link_bps: 0,
            counters: StreamCounters {
                frames_sent: 0,
                packets_sent: 0,
                packets_resent: 0,
                resend_requests: 0,
                resend_unavailable: 0,
                test_packets: 0,
            },
        }
    }

    /// Counters so far.
    pub fn counters(&self) -> StreamCounters {
        self.counters
    }

    /// Whether a frame is being sent.
    pub fn busy(&self) -> bool {
        self.current.is_some()
    }

    /// Whether something (a frame's packets, resends, a test packet) is waiting to go.
    pub fn has_pending(&self) -> bool {
        self.current.is_some()
            || !self.resends.is_empty()
            || !self.unavailable.is_empty()
            || self.test_packet.is_some()
    }

    /// When to come back for the next packet: after the inter-packet delay, and when the
    /// link has caught up with what was sent. A sender that waits until then finds a whole
    /// burst allowed ([`LINK_BURST_NS`]) and sleeps once per burst.
    pub fn next_packet_at(&self) -> Instant {
        self.next_packet_at.max(self.next_link_at)
    }

    /// Whether a packet may leave at `now`: the inter-packet delay has passed, and the link's
    /// pace is less than [`LINK_BURST_NS`] ahead.
    fn may_send(&self, now: Instant) -> bool {
        now >= self.next_packet_at && now.0 + LINK_BURST_NS >= self.next_link_at.0
    }

    /// Link time of `bytes`, ns (0 without a link speed).
    fn ns(&self, bytes: u64) -> u64 {
        if self.link_bps == 0 {
            return 0;
        }
        bytes * 8 * 1_000_000_000 / self.link_bps
    }

    /// Forget queued resends and the current frame (stream closed).
    pub fn reset(&mut self) {
        self.current = None;
        self.resends.clear();
        self.unavailable.clear();
        self.ring.clear();
    }

    /// Queue one test packet of the configured size (SCPS "fire test packet").
    pub fn fire_test_packet(&mut self, cfg: ChannelConfig) {
        self.test_packet = Some(cfg);
    }

    /// The block id [`start_frame`](Self::start_frame) gives the next frame.
    pub fn next_block_id(&self, extended: bool) -> u64 {
        if extended {
            self.next_block
        } else {
            match self.next_block & 0xffff {
                0 => 1,
                b => b,
            }
        }
    }

    /// Give the next block id to no frame (a frame dropped at the camera): the host sees the gap.
    pub fn skip_block(&mut self, extended: bool) {
        self.next_block = self.next_block_id(extended) + 1;
    }

    /// Start sending `frame` with `cfg`. Returns its block id.
    pub fn start_frame(&mut self, frame: Frame, cfg: ChannelConfig) -> u64 {
        let header = if cfg.extended {
            gvsp::EXTENDED_HEADER_LEN
        } else {
            gvsp::HEADER_LEN
        };
        let chunk = (cfg.packet_size as usize)
            .saturating_sub(gvsp::IP_UDP_OVERHEAD + header)
            .max(4);
        let block_id = self.next_block_id(cfg.extended);
        self.next_block = block_id + 1;
        let block = Block {
            block_id,
            frame,
            extended: cfg.extended,
            chunk,
            n_payload: frame.size().div_ceil(chunk) as u32,
        };
        self.current = Some((block, 0, cfg));
        block_id
    }

    /// Ask for packets `first..=last` of `block_id` again (PACKETRESEND). Blocks no longer held
    /// are counted as unavailable.
    pub fn request_resend(&mut self, block_id: u64, first: u32, last: u32) {
        self.counters.resend_requests += 1;
        let found = self
            .ring
            .iter()
            .chain(self.current.as_ref().map(|(b, _, _)| b))
            .find(|b| {
                if b.extended {
                    b.block_id == block_id
                } else {
                    b.block_id & 0xffff == block_id & 0xffff
                }
            })
            .copied();
        match found {
            Some(block) if first <= last && first <= block.last_packet_id() => {
                let r = Resend {
                    block,
                    next: first,
                    last: last.min(block.last_packet_id()),
                };
                if self.resends.push_back(r).is_err() {
                    self.refuse(block_id, block.extended, first);
                }
            }
            // a block that left the ring
            _ => self.refuse(block_id, self.newest_extended(), first),
        }
    }

    /// Answer a resend request starting at packet `first` of `block_id` PACKET_UNAVAILABLE,
    /// whether or not the block is still held (a fault on demand).
    pub fn refuse_resend(&mut self, block_id: u64, first: u32) {
        self.counters.resend_requests += 1;
        self.refuse(block_id, self.newest_extended(), first);
    }

    /// The extended-ID mode of the newest block (sent or being sent), for an answer about a
    /// block no longer held.
    fn newest_extended(&self) -> bool {
        self.current
            .as_ref()
            .map(|(b, _, _)| b)
            .or(self.ring.back())
            .is_some_and(|b| b.extended)
    }

    fn refuse(&mut self, block_id: u64, extended: bool, packet_id: u32) {
        self.counters.resend_unavailable += 1;
        // one answer per request; when many wait, the host's own timeout covers the rest
        let _ = self.unavailable.push_back(Unavailable {
            block_id,
            extended,
            packet_id,
        });
    }

    /// Schedule the next packet after one of `len` bytes: the inter-packet delay (SCPD), held
    /// exactly, and the link's serialisation time, which the packets may run ahead of by
    /// [`LINK_BURST_NS`] (so the sender wakes once per burst, not once per 1.1 us packet at 10
    /// Gbit/s) and fall behind by 64 KiB (so a late poll keeps the rate).
    fn pace(&mut self, now: Instant, len: usize, delay_ns: u64, link_bps: u64) {
        self.next_packet_at = now + core::time::Duration::from_nanos(delay_ns);
        self.link_bps = link_bps;
        if link_bps > 0 {
            let floor = Instant(now.0.saturating_sub(self.ns(64 << 10)));
            self.next_link_at = self.next_link_at.max(floor)
                + core::time::Duration::from_nanos(self.ns(wire_bytes(len)));
        }
    }

    /// Write the next packet into `buf` if one may leave at `now`. `dst` is used for resends and
    /// test packets (the current SCDA/SCP).
    pub fn poll_transmit<S: FrameSource + ?Sized>(
        &mut self,
        now: Instant,
        src: &S,
        dst: (Ipv4Addr, u16),
        buf: &mut [u8],
    ) -> Option<StreamPacket> {
        if !self.may_send(now) {
            return None;
        }
        if let Some(cfg) = self.test_packet.take() {
            let n = (cfg.packet_size as usize)
                .saturating_sub(gvsp::IP_UDP_OVERHEAD)
                .min(buf.len());
            for (i, b) in buf[..n].iter_mut().enumerate() {
                *b = i as u8;
            }
            self.counters.test_packets += 1;
            return Some(StreamPacket {
                len: n,
                dst_ip: dst.0,
                dst_port: dst.1,
            });
        }
        if let Some(u) = self.unavailable.pop_front() {
            let header = Header {
                status: status::PACKET_UNAVAILABLE,
                flags: 0,
                extended: u.extended,
                format: if u.packet_id == 0 {
                    Format::Leader
                } else {
                    Format::Payload
                },
                block_id: u.block_id,
                packet_id: u.packet_id,
            };
            let len = header.emit(buf).ok()?;
            self.counters.packets_sent += 1;
            self.pace(now, len, 0, self.link_bps);
            return Some(StreamPacket {
                len,
                dst_ip: dst.0,
                dst_port: dst.1,
            });
        }
        if let Some(r) = self.resends.front_mut() {
            let (block, id) = (r.block, r.next);
            r.next += 1;
            if r.next > r.last {
                let _ = self.resends.pop_front();
            }
            let len = emit(&block, id, true, src, buf)?;
            self.counters.packets_sent += 1;
            self.counters.packets_resent += 1;
            self.pace(now, len, 0, self.link_bps);
            return Some(StreamPacket {
                len,
                dst_ip: dst.0,
                dst_port: dst.1,
            });
        }
        let (block, id, cfg) = self.current.as_mut()?;
        let (block, packet_id, cfg) = (*block, *id, *cfg);
        let len = emit(&block, packet_id, false, src, buf)?;
        self.counters.packets_sent += 1;
        self.link_bps = cfg.link_bps;
        self.pace(now, len, cfg.delay_ns, cfg.link_bps);
        if packet_id >= block.last_packet_id() {
            self.current = None;
            self.counters.frames_sent += 1;
            if self.ring.is_full() {
                let _ = self.ring.pop_front();
            }
            let _ = self.ring.push_back(block);
        } else if let Some((_, id, _)) = self.current.as_mut() {
            *id += 1;
        }
        Some(StreamPacket {
            len,
            dst_ip: cfg.dst_ip,
            dst_port: cfg.dst_port,
        })
    }
}

/// Build packet `packet_id` of `block` into `buf`; returns its length.
fn emit<S: FrameSource + ?Sized>(
    block: &Block,
    packet_id: u32,
    resend: bool,
    src: &S,
    buf: &mut [u8],
) -> Option<usize> {
    let last = block.last_packet_id();
    let format = match packet_id {
        0 => Format::Leader,
        id if id == last => Format::Trailer,
        _ => Format::Payload,
    };
    let header = Header {
        status: if resend && !block.extended {
            status::PACKET_RESEND
        } else {
            status::SUCCESS
        },
        flags: if resend { gvsp::FLAG_PACKET_RESEND } else { 0 },
        extended: block.extended,
        format,
        block_id: block.block_id,
        packet_id,
    };
    let h = header.emit(buf).ok()?;
    let f = &block.frame;
    let body = match format {
        Format::Leader => f.leader().emit(&mut buf[h..]).ok()?,
        Format::Trailer => f.trailer().emit(&mut buf[h..]).ok()?,
        _ => {
            let offset = (packet_id as usize - 1) * block.chunk;
            let n = block.chunk.min(f.size() - offset);
            read_payload(src, f, offset, buf.get_mut(h..h + n)?);
            n
        }
    };
    Some(h + body)
}

#[cfg(test)]
mod tests {
    extern crate std;
    use std::vec::Vec;

    use super::*;
    use crate::device::frame::{FrameSpec, Pattern};
    use crate::device::pattern::SyntheticSource;
    use crate::gev::PixelFormat;

    fn config(link_bps: u64, delay_ns: u64) -> ChannelConfig {
        ChannelConfig {
            dst_ip: Ipv4Addr::new(127, 0, 0, 1),
            dst_port: 5000,
            packet_size: 1400,
            delay_ns,
            extended: false,
            link_bps,
        }
    }

    /// When each packet of a 1 MiB frame leaves (us), for a sender that comes back when the
    /// channel says ([`GvspChannel::next_packet_at`]), as the camera's loop does.
    fn send_times(cfg: ChannelConfig) -> Vec<u64> {
        let spec = FrameSpec {
            width: 1024,
            height: 1024,
            offset_x: 0,
            offset_y: 0,
            pixel_format: PixelFormat::Mono8,
            pattern: Pattern::Gradient,
            sensor: false,
        };
        let mut ch = GvspChannel::new();
        ch.start_frame(Frame::new(1, spec, 0), cfg);
        let src = SyntheticSource::new(1);
        let mut buf = [0u8; 2048];
        let mut times = Vec::new();
        let mut t = 0u64;
        while ch.busy() && t < 10_000_000_000 {
            while ch
                .poll_transmit(Instant(t), &src, (cfg.dst_ip, 5000), &mut buf)
                .is_some()
            {
                times.push(t / 1000);
            }
            t = ch.next_packet_at().0.max(t + 1);
        }
        times
    }

    #[test]
    fn the_link_pace_holds_on_average_and_packets_leave_in_bursts() {
        // 10 Gbit/s, 1400-byte packets: 1.15 us of link time each
        let times = send_times(config(10_000_000_000, 0));
        let per_packet_ns = wire_bytes(1400 - 28) * 8 / 10;
        let n = times.len() as u64;
        let span_us = times[times.len() - 1];
        // the link's rate within a few per cent (the burst allowance, shorter leader and
        // trailer), neither faster nor slower
        let nominal = n * per_packet_ns;
        assert!(
            span_us * 1000 * 100 >= nominal * 96,
            "{span_us} us for {n} packets"
        );
        assert!(
            span_us * 1000 <= nominal + 1000,
            "{span_us} us for {n} packets"
        );
        // in bursts: many packets share a microsecond, so the sender sleeps once per burst
        let mut wakes = times.clone();
        wakes.dedup();
        assert!(
            wakes.len() * 10 < times.len(),
            "{} wake-ups for {n} packets",
            wakes.len()
        );
    }

    #[test]
    fn an_inter_packet_delay_is_held_exactly() {
        // SCPD 5 us: every packet at least 5 us after the one before, no burst
        let times = send_times(config(10_000_000_000, 5_000));
        assert!(
            times.windows(2).all(|w| w[1] - w[0] >= 5),
            "{:?}",
            &times[..10]
        );
    }
}
