//! The message channel: GigE Vision events (GVCP EVENT and EVENTDATA commands, device to host)
//! for the events a host switched on with EventSelector/EventNotification.
//!
//! The host opens the channel with MCDA (address) and MCP (port). Every event needs an
//! acknowledge: one is in flight at a time, sent again every MCTT ms with the same request
//! id, at most MCRC times more, then given up (counted). Events wait in a bounded queue behind
//! it; when the queue is full, or the channel is closed, an event is dropped and counted,
//! never held without bound. Items use the GEV 2.0 64-bit form (flag 0x10; layout in
//! [`super::features::events`]).

use core::net::{Ipv4Addr, SocketAddrV4};
use core::time::Duration;

use heapless::Deque;

use super::features::events::ITEM_LEN;
use super::regs;
use crate::gev::gvcp::{self, Ack, Command, cmd};
use crate::gev::status;
use crate::rc::Instant;

/// Events that may wait behind the one in flight.
pub const QUEUE: usize = 32;

/// One event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EventItem {
    /// Event ID.
    pub id: u16,
    /// Block ID of the frame it concerns (0 = none).
    pub block_id: u64,
    /// Device timestamp.
    pub timestamp: u64,
    /// Data (sent as EVENTDATA), if any.
    pub data: Option<u32>,
}

/// A message-channel datagram to send.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MessagePacket {
    /// Bytes in the buffer.
    pub len: usize,
    /// Destination address (MCDA).
    pub dst_ip: Ipv4Addr,
    /// Destination port (MCP).
    pub dst_port: u16,
}

/// Message channel counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct EventCounters {
    /// Events sent (first transmissions).
    pub sent: u64,
    /// Retransmissions of unacknowledged events.
    pub resent: u64,
    /// Events the host acknowledged.
    pub acknowledged: u64,
    /// Events given up after MCRC retransmissions without an acknowledge.
    pub unacknowledged: u64,
    /// Events dropped: the channel closed or the queue full.
    pub dropped: u64,
    /// Acknowledges from an address other than the channel's destination, ignored.
    pub foreign_acks: u64,
}

#[derive(Debug, Clone, Copy)]
struct InFlight {
    item: EventItem,
    req_id: u16,
    next_send: Instant,
    sends: u32,
}

/// The message channel of a device.
#[derive(Debug)]
pub struct MessageChannel {
    port: u16,
    dst: Ipv4Addr,
    mctt_ms: u32,
    mcrc: u32,
    source_port: u16,
    queue: Deque<EventItem, QUEUE>,
    inflight: Option<InFlight>,
    next_req: u16,
    counters: EventCounters,
}

impl MessageChannel {
    /// A closed channel; `source_port` is where events leave from (MCSP).
    pub const fn new(source_port: u16) -> Self {
        MessageChannel {
            port: 0,
            dst: Ipv4Addr::UNSPECIFIED,
            mctt_ms: 300,
            mcrc: 3,
            source_port,
            queue: Deque::new(),
            inflight: None,
            next_req: 1,
            counters: EventCounters {
                sent: 0,
                resent: 0,
                acknowledged: 0,
                unacknowledged: 0,
                dropped: 0,
                foreign_acks: 0,
            },
        }
    }

    /// Counters so far.
    pub fn counters(&self) -> EventCounters {
        self.counters
    }

    /// Whether a host opened the channel.
    pub fn open(&self) -> bool {
        self.port != 0 && !self.dst.is_unspecified()
    }

    /// The channel's register at `addr`, if it is one.
    pub fn read(&self, addr: u32) -> Option<u32> {
        Some(match addr {
            regs::MCP => u32::from(self.port),
            regs::MCDA => u32::from(self.dst),
            regs::MCTT => self.mctt_ms,
            regs::MCRC => self.mcrc,
            regs::MCSP => u32::from(self.source_port),
            _ => return None,
        })
    }

    /// A host writes the channel's register at `addr` (`None`: not one of them).
    pub fn write(&mut self, addr: u32, v: u32) -> Option<Result<(), u16>> {
        let bad = Some(Err(status::INVALID_PARAMETER));
        match addr {
            regs::MCP => {
                if (v >> 16) & 0xf != 0 {
                    return bad; // one network interface
                }
                self.port = v as u16;
                if self.port == 0 {
                    self.close();
                }
            }
            regs::MCDA => self.dst = Ipv4Addr::from(v),
            regs::MCTT if v == 0 || v > 10_000 => return bad,
            regs::MCTT => self.mctt_ms = v,
            regs::MCRC if v > 255 => return bad,
            regs::MCRC => self.mcrc = v,
            regs::MCSP => return Some(Err(status::WRITE_PROTECT)),
            _ => return None,
        }
        Some(Ok(()))
    }

    /// Close the channel (port 0, control lost): forget what waits, count it dropped.
    pub fn close(&mut self) {
        self.port = 0;
        self.counters.dropped += self.queue.len() as u64 + u64::from(self.inflight.is_some());
        self.queue.clear();
        self.inflight = None;
    }

    /// Queue an event (dropped and counted when the channel is closed or the queue full).
    pub fn push(&mut self, item: EventItem) {
        if !self.open() || self.queue.push_back(item).is_err() {
            self.counters.dropped += 1;
        }
    }

    /// When [`poll_transmit`](Self::poll_transmit) next has something to do.
    pub fn poll_timeout(&self) -> Option<Instant> {
        match &self.inflight {
            Some(f) => Some(f.next_send),
            None if !self.queue.is_empty() => Some(Instant::ZERO),
            None => None,
        }
    }

    /// The next datagram to send at `now`, written into `buf`.
    pub fn poll_transmit(&mut self, now: Instant, buf: &mut [u8]) -> Option<MessagePacket> {
        if !self.open() {
            return None;
        }
        loop {
            if self.inflight.is_none() {
                let item = self.queue.pop_front()?;
                self.inflight = Some(InFlight {
                    item,
                    req_id: self.next_req,
                    next_send: now,
                    sends: 0,
                });
                self.next_req = match self.next_req.wrapping_add(1) {
                    0 => 1,
                    r => r,
                };
            }
            let f = self.inflight.as_mut()?;
            if now < f.next_send {
                return None;
            }
            if f.sends > self.mcrc {
                self.counters.unacknowledged += 1;
                self.inflight = None;
                continue;
            }
            if f.sends == 0 {
                self.counters.sent += 1;
            } else {
                self.counters.resent += 1;
            }
            f.sends += 1;
            f.next_send = now + Duration::from_millis(u64::from(self.mctt_ms));
            let len = emit_event(&f.item, f.req_id, buf)?;
            return Some(MessagePacket {
                len,
                dst_ip: self.dst,
                dst_port: self.port,
            });
        }
    }

    /// A datagram received on the message channel's socket: an acknowledge of the event in
    /// flight ends its retransmissions. Returns whether it was one.
    pub fn handle_ack(&mut self, src: SocketAddrV4, datagram: &[u8]) -> bool {
        // only the channel's destination acknowledges: request ids are predictable, and a
        // bystander's acknowledge would end an event's resends before the host had it
        if src != SocketAddrV4::new(self.dst, self.port) {
            self.counters.foreign_acks += 1;
            return false;
        }
        let (Ok(a), Some(f)) = (Ack::parse(datagram), self.inflight) else {
            return false;
        };
        let acked = matches!(a.acknowledge, 0x00c1 | 0x00c3) && a.ack_id == f.req_id;
        if acked {
            self.counters.acknowledged += 1;
            self.inflight = None;
        }
        acked
    }
}

/// Write an EVENT (or, with data, EVENTDATA) command for `item` with request id `req_id`.
pub fn emit_event(item: &EventItem, req_id: u16, buf: &mut [u8]) -> Option<usize> {
    let (command, size) = match item.data {
        Some(_) => (cmd::EVENTDATA, ITEM_LEN as usize + 4),
        None => (cmd::EVENT, ITEM_LEN as usize),
    };
    let flags = gvcp::FLAG_ACK_REQUIRED | gvcp::FLAG_BROADCAST_ACK_OR_EXTENDED_ID;
    let h = Command::emit_header(flags, command, size as u16, req_id, buf).ok()?;
    let b = buf.get_mut(h..h + size)?;
    b[0..2].copy_from_slice(&(size as u16).to_be_bytes());
    b[2..4].copy_from_slice(&item.id.to_be_bytes());
    b[4..6].copy_from_slice(&0u16.to_be_bytes()); // stream channel 0
    b[6..8].copy_from_slice(&[0, 0]);
    b[8..16].copy_from_slice(&item.block_id.to_be_bytes());
    b[16..24].copy_from_slice(&item.timestamp.to_be_bytes());
    if let Some(d) = item.data {
        b[24..28].copy_from_slice(&d.to_be_bytes());
    }
    Some(h + size)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hex;

    fn open() -> MessageChannel {
        let mut m = MessageChannel::new(5000);
        assert_eq!(m.write(regs::MCDA, 0x7f00_0001), Some(Ok(())));
        assert_eq!(m.write(regs::MCP, 6000), Some(Ok(())));
        assert_eq!(m.write(regs::MCTT, 100), Some(Ok(())));
        assert_eq!(m.write(regs::MCRC, 2), Some(Ok(())));
        m
    }

    const EV: EventItem = EventItem {
        id: 0x9103,
        block_id: 7,
        timestamp: 0x1122_3344_5566_7788,
        data: None,
    };

    // The layout written out by hand from reference/gev.md §3.1 and Wireshark's
    // dissect_event_cmd (64-bit block id form).
    #[test]
    fn event_bytes() {
        let mut b = [0u8; 64];
        let n = emit_event(&EV, 0x0102, &mut b).unwrap();
        assert_eq!(
            &b[..n],
            &hex(
                "42 11 00 c0 00 18 01 02  00 18 91 03 00 00 00 00  00 00 00 00 00 00 00 07
                 11 22 33 44 55 66 77 88"
            )[..]
        );
        let d = EventItem {
            data: Some(5),
            ..EV
        };
        let n = emit_event(&d, 3, &mut b).unwrap();
        assert_eq!((n, b[3], b[5], b[9]), (8 + 28, 0xc2, 28, 28));
        assert_eq!(&b[n - 4..n], &[0, 0, 0, 5]);
    }

    #[test]
    fn resent_every_mctt_until_acknowledged_or_mcrc_runs_out() {
        let mut m = open();
        let mut b = [0u8; 64];
        m.push(EV);
        let t0 = Instant::ZERO;
        assert!(m.poll_transmit(t0, &mut b).is_some());
        let req = u16::from_be_bytes([b[6], b[7]]);
        assert!(
            m.poll_transmit(t0 + Duration::from_millis(99), &mut b)
                .is_none()
        );
        // sent again twice (MCRC 2), same request id, then given up
        for k in 1..=2 {
            let p = m
                .poll_transmit(t0 + Duration::from_millis(100 * k), &mut b)
                .unwrap();
            assert_eq!((p.dst_port, u16::from_be_bytes([b[6], b[7]])), (6000, req));
        }
        assert!(
            m.poll_transmit(t0 + Duration::from_millis(300), &mut b)
                .is_none()
        );
        let c = m.counters();
        assert_eq!((c.sent, c.resent, c.unacknowledged), (1, 2, 1));
        // an acknowledge ends it
        m.push(EV);
        m.poll_transmit(t0 + Duration::from_millis(400), &mut b)
            .unwrap();
        let req = u16::from_be_bytes([b[6], b[7]]);
        let mut ack = [0u8; 8];
        gvcp::emit_ack_header(0, cmd::EVENT, 0, req, &mut ack).unwrap();
        // from anywhere but the channel's destination, it ends nothing
        let host = SocketAddrV4::new(Ipv4Addr::new(127, 0, 0, 1), 6000);
        for bystander in [
            SocketAddrV4::new(Ipv4Addr::new(127, 0, 0, 2), 6000),
            SocketAddrV4::new(Ipv4Addr::new(127, 0, 0, 1), 6001),
        ] {
            assert!(!m.handle_ack(bystander, &ack));
        }
        assert_eq!(m.counters().foreign_acks, 2);
        assert!(m.handle_ack(host, &ack));
        assert!(
            m.poll_transmit(t0 + Duration::from_millis(900), &mut b)
                .is_none()
        );
        assert_eq!(m.counters().acknowledged, 1);
    }

    #[test]
    fn closed_or_full_drops_and_counts() {
        let mut m = MessageChannel::new(1);
        m.push(EV);
        assert_eq!(m.counters().dropped, 1);
        let mut m = open();
        for _ in 0..QUEUE + 3 {
            m.push(EV);
        }
        assert_eq!(m.counters().dropped, 3);
        assert_eq!(
            m.write(regs::MCP, 0x0001_0000 | 5),
            Some(Err(status::INVALID_PARAMETER))
        );
        m.write(regs::MCP, 0);
        assert_eq!(m.counters().dropped, 3 + QUEUE as u64);
    }
}
