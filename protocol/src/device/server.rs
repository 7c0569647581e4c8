//! The GVCP server: one command datagram in, its acknowledge out. Retries of a command whose
//! acknowledge was lost are answered from the last acknowledge, not run again; registers and
//! memory are read and written through the register map ([`super::regmap`]), control through
//! [`super::control`].

use core::net::{Ipv4Addr, SocketAddrV4};

use super::actions::{ActionOutcome, Sender};
use super::regs;
use super::{Device, DeviceEvent, GvcpReply, LastAck, Status};
use crate::gev::gvcp::{self, Command, cmd};
use crate::gev::status;
use crate::rc::Instant;

impl Device {
    /// Handle a GVCP datagram from `src` (received on this device's address or as a broadcast).
    /// Returns the acknowledge written into `out`, if one is due.
    pub fn handle_gvcp(
        &mut self,
        now: Instant,
        src: SocketAddrV4,
        datagram: &[u8],
        out: &mut [u8],
    ) -> Option<GvcpReply> {
        self.last_now = now;
        let Ok(c) = Command::parse(datagram) else {
            self.counters.malformed += 1;
            let code = datagram
                .get(2..4)
                .map_or(0, |b| u16::from_be_bytes([b[0], b[1]]));
            self.header_violation(code);
            return None;
        };
        if self.controller == Some(src) {
            self.refresh_heartbeat(now);
        } else if let Some(c) = self.controller
            && c.ip() == src.ip()
        {
            self.other_port = Some(src.port());
        }
        let command_crc = crc32fast::hash(datagram);
        if let Some(last) = &self.last_ack
            && last.src == src
            && last.req_id == c.req_id
            && last.command_crc == command_crc
            && out.len() >= last.len
        {
            // a retry: the acknowledge was lost (or is late); answer, do not run it again
            self.counters.retries_answered += 1;
            out[..last.len].copy_from_slice(&last.bytes[..last.len]);
            return Some(GvcpReply {
                len: last.len,
                broadcast_allowed: false,
            });
        }
        self.counters.commands += 1;
        let ack_wanted = c.ack_required() || c.command == cmd::DISCOVERY;
        let mut broadcast_allowed = false;
        let hl = gvcp::HEADER_LEN;
        let (status, len) = if out.len() < hl + gvcp::MAX_PAYLOAD {
            (status::ERROR, 0)
        } else if c.req_id == 0 {
            (status::INVALID_HEADER, 0)
        } else {
            let body = &mut out[hl..hl + gvcp::MAX_PAYLOAD];
            match c.command {
                cmd::DISCOVERY => {
                    broadcast_allowed = c.flags & gvcp::FLAG_BROADCAST_ACK_OR_EXTENDED_ID != 0;
                    for (i, w) in body[..regs::DISCOVERY_DATA_LEN].chunks_mut(4).enumerate() {
                        let v = self.read_word(i as u32 * 4).unwrap_or(0);
                        w.copy_from_slice(&v.to_be_bytes());
                    }
                    (status::SUCCESS, regs::DISCOVERY_DATA_LEN)
                }
                cmd::READREG => self.cmd_readreg(src, c.payload, body),
                cmd::WRITEREG => self.cmd_writereg(now, src, c.payload, body),
                cmd::READMEM => self.cmd_readmem(src, c.payload, body),
                cmd::WRITEMEM => self.cmd_writemem(now, src, c.payload, body),
                cmd::FORCEIP => match self.cmd_forceip(src, c.payload) {
                    Some(st) => (st, 0),
                    None => return None, // not for us
                },
                cmd::ACTION => match self.cmd_action(now, src, c.flags, c.payload) {
                    Some(st) => (st, 0),
                    None => return None, // not for this camera: silent
                },
                cmd::PACKETRESEND => {
                    self.cmd_packetresend(src, c.flags, c.payload);
                    return None; // never acknowledged
                }
                _ => (status::NOT_IMPLEMENTED, 0),
            }
        };
        if matches!(status, status::INVALID_HEADER | status::NOT_IMPLEMENTED) {
            self.header_violation(c.command);
        }
        if status & 0x8000 != 0 {
            self.counters.errors += 1;
        }
        if !ack_wanted {
            return None;
        }
        gvcp::emit_ack_header(status, c.command, len as u16, c.req_id, out).ok()?;
        let len = hl + len;
        if c.command != cmd::DISCOVERY {
            let mut bytes = [0u8; gvcp::HEADER_LEN + gvcp::MAX_PAYLOAD];
            bytes[..len].copy_from_slice(&out[..len]);
            self.last_ack = Some(LastAck {
                src,
                req_id: c.req_id,
                command_crc,
                len,
                bytes,
            });
        }
        Some(GvcpReply {
            len,
            broadcast_allowed,
        })
    }

    fn header_violation(&mut self, command: u16) {
        use crate::judge::{Violation, ViolationKind};
        let v = Violation::new(ViolationKind::GvcpHeader, 0, command.into(), None);
        self.violations.record(v);
    }

    pub(super) fn cmd_readreg(
        &mut self,
        src: SocketAddrV4,
        p: &[u8],
        body: &mut [u8],
    ) -> (Status, usize) {
        if p.is_empty() || p.len() % 4 != 0 || p.len() > gvcp::MAX_PAYLOAD {
            return (status::INVALID_PARAMETER, 0);
        }
        for (i, a) in p.chunks_exact(4).enumerate() {
            let addr = u32::from_be_bytes([a[0], a[1], a[2], a[3]]);
            match self.read_reg(addr).map(|v| self.shown_to(src, addr, v)) {
                Ok(v) => body[i * 4..i * 4 + 4].copy_from_slice(&v.to_be_bytes()),
                Err(st) => return (st, i * 4),
            }
        }
        (status::SUCCESS, p.len())
    }

    pub(super) fn cmd_writereg(
        &mut self,
        now: Instant,
        src: SocketAddrV4,
        p: &[u8],
        body: &mut [u8],
    ) -> (Status, usize) {
        if p.is_empty() || p.len() % 8 != 0 || p.len() > gvcp::MAX_PAYLOAD {
            return (status::INVALID_PARAMETER, 0);
        }
        let word = |w: &[u8]| u32::from_be_bytes([w[0], w[1], w[2], w[3]]);
        let pairs = p.chunks_exact(8).map(|c| (word(&c[..4]), word(&c[4..])));
        // WRITEREG_ACK counts registers written
        self.write_words(now, src, pairs, 1, body)
    }

    pub(super) fn cmd_readmem(
        &mut self,
        src: SocketAddrV4,
        p: &[u8],
        body: &mut [u8],
    ) -> (Status, usize) {
        if p.len() != 8 {
            return (status::INVALID_PARAMETER, 0);
        }
        let addr = u32::from_be_bytes([p[0], p[1], p[2], p[3]]);
        let count = usize::from(u16::from_be_bytes([p[6], p[7]]));
        if count == 0 || count % 4 != 0 || count + 4 > gvcp::MAX_PAYLOAD {
            return (status::INVALID_PARAMETER, 0);
        }
        if addr % 4 != 0 {
            return (status::BAD_ALIGNMENT, 0);
        }
        body[..4].copy_from_slice(&addr.to_be_bytes());
        for i in 0..count / 4 {
            let a = addr.wrapping_add(i as u32 * 4);
            match self.read_word(a).map(|v| self.shown_to(src, a, v)) {
                Ok(v) => body[4 + i * 4..8 + i * 4].copy_from_slice(&v.to_be_bytes()),
                Err(st) => return (st, 4),
            }
        }
        (status::SUCCESS, 4 + count)
    }

    pub(super) fn cmd_writemem(
        &mut self,
        now: Instant,
        src: SocketAddrV4,
        p: &[u8],
        body: &mut [u8],
    ) -> (Status, usize) {
        if p.len() < 8 || p.len() % 4 != 0 || p.len() > gvcp::MAX_PAYLOAD {
            return (status::INVALID_PARAMETER, 0);
        }
        let addr = u32::from_be_bytes([p[0], p[1], p[2], p[3]]);
        if addr % 4 != 0 {
            return (status::BAD_ALIGNMENT, 0);
        }
        let words = p[4..].chunks_exact(4).enumerate().map(|(i, w)| {
            (
                addr.wrapping_add(i as u32 * 4),
                u32::from_be_bytes([w[0], w[1], w[2], w[3]]),
            )
        });
        // WRITEMEM_ACK counts bytes written
        self.write_words(now, src, words, 4, body)
    }

    /// Write `(address, value)` pairs until one fails; the acknowledge payload is reserved (2)
    /// and the index (2): how many were written, times `unit`.
    pub(super) fn write_words(
        &mut self,
        now: Instant,
        src: SocketAddrV4,
        words: impl Iterator<Item = (u32, u32)>,
        unit: u16,
        body: &mut [u8],
    ) -> (Status, usize) {
        let mut done = 0u16;
        let mut st = status::SUCCESS;
        for (addr, v) in words {
            if let Err(e) = self.write_reg(now, src, addr, v) {
                st = e;
                break;
            }
            done += unit;
        }
        body[..2].copy_from_slice(&[0, 0]);
        body[2..4].copy_from_slice(&done.to_be_bytes());
        (st, 4)
    }

    /// FORCEIP: `None` when the MAC is not ours (stay silent). GigE Vision lets any host
    /// re-address a device; while one holds control, only that host may, so a bystander can
    /// never move the camera away from its controller (ACCESS_DENIED).
    pub(super) fn cmd_forceip(&mut self, src: SocketAddrV4, p: &[u8]) -> Option<Status> {
        if p.len() < 56 {
            return Some(status::INVALID_PARAMETER);
        }
        if p[2..8] != self.cfg.mac {
            return None;
        }
        if self.controller.is_some_and(|c| c.ip() != src.ip()) {
            self.counters.access_denied += 1;
            return Some(status::ACCESS_DENIED);
        }
        let ip = |at: usize| Ipv4Addr::new(p[at], p[at + 1], p[at + 2], p[at + 3]);
        let (new_ip, mask, gw) = (ip(20), ip(36), ip(52));
        if new_ip.is_unspecified() || new_ip.is_broadcast() || new_ip.is_multicast() {
            return Some(status::INVALID_PARAMETER);
        }
        self.ip = new_ip;
        self.netmask = mask;
        self.gateway = gw;
        self.event(DeviceEvent::ForceIp {
            ip: new_ip,
            netmask: mask,
            gateway: gw,
        });
        Some(status::SUCCESS)
    }

    pub(super) fn cmd_packetresend(&mut self, src: SocketAddrV4, flags: u8, p: &[u8]) {
        // From the controlling host's IP, on any port (hosts send it from their stream socket).
        if self.controller.map(|c| *c.ip()) != Some(*src.ip()) {
            self.counters.access_denied += 1;
            return;
        }
        let word = |at: usize| u32::from_be_bytes([p[at], p[at + 1], p[at + 2], p[at + 3]]);
        let extended = flags & gvcp::FLAG_BROADCAST_ACK_OR_EXTENDED_ID != 0;
        // 64-bit form, as aravis 0.8.26 sends it (captured on a veth, see tests/device.rs):
        // channel (2) · reserved (2) · first packet id (4) · last packet id (4) · block id (8).
        let (channel, block, first, last) = if extended && p.len() >= 20 {
            (
                u16::from_be_bytes([p[0], p[1]]),
                (u64::from(word(12)) << 32) | u64::from(word(16)),
                word(4),
                word(8),
            )
        } else if p.len() >= 12 {
            (
                u16::from_be_bytes([p[0], p[1]]),
                u64::from(u16::from_be_bytes([p[2], p[3]])),
                word(4) & 0x00ff_ffff,
                word(8) & 0x00ff_ffff,
            )
        } else {
            self.counters.errors += 1;
            return;
        };
        if channel != 0 {
            self.counters.errors += 1;
            return;
        }
        if self.faults.refuse_resend() {
            self.channel.refuse_resend(block, first);
        } else {
            self.channel.request_resend(block, first, last);
        }
    }

    pub(super) fn cmd_action(
        &mut self,
        now: Instant,
        src: SocketAddrV4,
        flags: u8,
        p: &[u8],
    ) -> Option<Status> {
        let allowed = self.controller.is_some()
            || self.gvcp_config & regs::GVCP_CONFIG_UNCONDITIONAL_ACTION != 0;
        let from = if self.controller == Some(src) {
            Sender::Controller
        } else {
            Sender::Other
        };
        match self
            .actions
            .handle(flags, p, self.ticks(now), allowed, from)
        {
            ActionOutcome::NotForUs => None,
            ActionOutcome::Fire(signals, st) => {
                self.fire_actions(now, signals);
                Some(st)
            }
            ActionOutcome::Scheduled => Some(status::SUCCESS),
            ActionOutcome::Refused(st) => Some(st),
        }
    }
}
