//! Path MTU and the segmentation rules of RC/UC messages.
//!
//! A message of N bytes at path MTU P travels in `max(1, ceil(N / P))` packets: one ONLY packet
//! (0..=P bytes), or a FIRST and MIDDLEs of exactly P bytes and a LAST of 1..=P bytes. Only the
//! ONLY/LAST packet carries pad (`(-len) & 3`) and, for the "with immediate" kinds, the ImmDt;
//! only FIRST/ONLY of a WRITE carry the RETH. rxe NAKs anything else with Invalid Request.

use super::opcode::Opcode;

/// IB path MTU (the enum values are the IB codes used in QP attributes and the CM REQ).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Pmtu {
    /// 256 bytes (code 1).
    Mtu256 = 1,
    /// 512 bytes (code 2).
    Mtu512 = 2,
    /// 1024 bytes (code 3); what rxe uses on a 1500-byte netdev.
    Mtu1024 = 3,
    /// 2048 bytes (code 4).
    Mtu2048 = 4,
    /// 4096 bytes (code 5); what rxe uses on a netdev MTU of 4200 or more.
    Mtu4096 = 5,
}

impl Pmtu {
    /// Payload bytes per packet.
    pub const fn bytes(self) -> u32 {
        128 << (self as u32)
    }
    /// From the IB code 1..=5.
    pub const fn from_code(code: u8) -> Option<Self> {
        Some(match code {
            1 => Pmtu::Mtu256,
            2 => Pmtu::Mtu512,
            3 => Pmtu::Mtu1024,
            4 => Pmtu::Mtu2048,
            5 => Pmtu::Mtu4096,
            _ => return None,
        })
    }
    /// From a byte count that must be exactly 256, 512, 1024, 2048 or 4096.
    pub const fn from_bytes(n: u32) -> Option<Self> {
        Some(match n {
            256 => Pmtu::Mtu256,
            512 => Pmtu::Mtu512,
            1024 => Pmtu::Mtu1024,
            2048 => Pmtu::Mtu2048,
            4096 => Pmtu::Mtu4096,
            _ => return None,
        })
    }
    /// The largest PMTU usable on a netdev of `mtu` bytes, as the Linux IB core picks it for
    /// RoCE (`iboe_get_mtu`: subtract 96 bytes of headers).
    pub const fn for_netdev_mtu(mtu: u32) -> Option<Self> {
        let room = mtu.saturating_sub(96);
        if room >= 4096 {
            Some(Pmtu::Mtu4096)
        } else if room >= 2048 {
            Some(Pmtu::Mtu2048)
        } else if room >= 1024 {
            Some(Pmtu::Mtu1024)
        } else if room >= 512 {
            Some(Pmtu::Mtu512)
        } else if room >= 256 {
            Some(Pmtu::Mtu256)
        } else {
            None
        }
    }
}

/// The kinds of message a requester sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MessageKind {
    /// SEND.
    Send,
    /// SEND with immediate.
    SendImm,
    /// RDMA WRITE.
    Write,
    /// RDMA WRITE with immediate.
    WriteImm,
}

impl MessageKind {
    /// Whether the message is an RDMA WRITE (its FIRST/ONLY packet carries a RETH).
    pub const fn is_write(self) -> bool {
        matches!(self, MessageKind::Write | MessageKind::WriteImm)
    }
    /// Whether the message consumes a receive work request at the responder.
    pub const fn consumes_receive(self) -> bool {
        !matches!(self, MessageKind::Write)
    }
    /// Whether the message carries immediate data.
    pub const fn has_immediate(self) -> bool {
        matches!(self, MessageKind::SendImm | MessageKind::WriteImm)
    }
}

/// One packet of a segmented message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Segment {
    /// Index of the packet within the message (PSN offset from the first packet).
    pub index: u32,
    /// Opcode of the packet.
    pub opcode: Opcode,
    /// Byte offset of the packet's payload within the message.
    pub offset: u32,
    /// Payload bytes.
    pub len: u32,
    /// Pad bytes after the payload.
    pub pad: u8,
}

/// Packets a message of `len` bytes needs at `pmtu` (a zero-length message still needs one).
pub const fn packet_count(len: u32, pmtu: Pmtu) -> u32 {
    if len == 0 {
        1
    } else {
        len.div_ceil(pmtu.bytes())
    }
}

/// The `index`-th packet of a message of `kind` and `len` bytes at `pmtu`, on an RC QP
/// (`uc = false`) or a UC QP (`uc = true`). `index` must be below [`packet_count`].
#[inline]
pub const fn segment(kind: MessageKind, len: u32, pmtu: Pmtu, index: u32, uc: bool) -> Segment {
    let n = packet_count(len, pmtu);
    let p = pmtu.bytes();
    let offset = index * p;
    let last = index + 1 >= n;
    let seg_len = if last { len - offset } else { p };
    // RC opcode values; UC is +0x20.
    let op = match (kind, n == 1, index == 0, last) {
        (MessageKind::Send, true, _, _) => 0x04,
        (MessageKind::SendImm, true, _, _) => 0x05,
        (MessageKind::Write, true, _, _) => 0x0a,
        (MessageKind::WriteImm, true, _, _) => 0x0b,
        (MessageKind::Send | MessageKind::SendImm, false, true, _) => 0x00,
        (MessageKind::Write | MessageKind::WriteImm, false, true, _) => 0x06,
        (MessageKind::Send | MessageKind::SendImm, false, false, false) => 0x01,
        (MessageKind::Write | MessageKind::WriteImm, false, false, false) => 0x07,
        (MessageKind::Send, false, false, true) => 0x02,
        (MessageKind::SendImm, false, false, true) => 0x03,
        (MessageKind::Write, false, false, true) => 0x08,
        (MessageKind::WriteImm, false, false, true) => 0x09,
    };
    Segment {
        index,
        opcode: Opcode(if uc { op + 0x20 } else { op }),
        offset,
        len: seg_len,
        pad: if last {
            (seg_len.wrapping_neg() & 3) as u8
        } else {
            0
        },
    }
}

/// Iterator over all packets of a message.
#[derive(Debug, Clone)]
pub struct Segments {
    kind: MessageKind,
    len: u32,
    pmtu: Pmtu,
    uc: bool,
    next: u32,
    count: u32,
}

/// Every packet of an RC message of `kind` and `len` bytes at `pmtu`, in PSN order.
pub const fn segments(kind: MessageKind, len: u32, pmtu: Pmtu) -> Segments {
    Segments {
        kind,
        len,
        pmtu,
        uc: false,
        next: 0,
        count: packet_count(len, pmtu),
    }
}

impl Iterator for Segments {
    type Item = Segment;
    fn next(&mut self) -> Option<Segment> {
        if self.next >= self.count {
            return None;
        }
        let s = segment(self.kind, self.len, self.pmtu, self.next, self.uc);
        self.next += 1;
        Some(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::vec::Vec;

    #[test]
    fn pmtu_codes_and_netdev_rules() {
        assert_eq!(Pmtu::Mtu256.bytes(), 256);
        assert_eq!(Pmtu::Mtu4096.bytes(), 4096);
        assert_eq!(Pmtu::from_code(3), Some(Pmtu::Mtu1024));
        assert_eq!(Pmtu::from_code(6), None);
        assert_eq!(Pmtu::from_bytes(1000), None);
        // rocev2.md §1.6: netdev MTU 1500 => 1024; >= 4200 (e.g. 9000) => 4096.
        assert_eq!(Pmtu::for_netdev_mtu(1500), Some(Pmtu::Mtu1024));
        assert_eq!(Pmtu::for_netdev_mtu(4200), Some(Pmtu::Mtu4096));
        assert_eq!(Pmtu::for_netdev_mtu(9000), Some(Pmtu::Mtu4096));
        // iboe_get_mtu needs 96 bytes of headroom: 4192 is the smallest netdev MTU for 4096.
        assert_eq!(Pmtu::for_netdev_mtu(4191), Some(Pmtu::Mtu2048));
        assert_eq!(Pmtu::for_netdev_mtu(4192), Some(Pmtu::Mtu4096));
    }

    // The lab's rc_write_first_middle_last scenario (shared/lab/rxe, packets 3-5 of roce.pcap):
    // a 3000-byte WRITE at PMTU 1024 went out as FIRST 1024, MIDDLE 1024, LAST 952, and rxe
    // accepted it. Frame sizes 1098/1082/1010 = 14+20+8+12 (+16 RETH) + payload + pad + 4.
    #[test]
    fn write_of_3000_bytes_at_1024_matches_the_lab_capture() {
        let s: Vec<Segment> = segments(MessageKind::Write, 3000, Pmtu::Mtu1024).collect();
        let ops: Vec<u8> = s.iter().map(|s| s.opcode.0).collect();
        assert_eq!(ops, [0x06, 0x07, 0x08]);
        let frame =
            |s: &Segment| 54 + s.opcode.headers().len() + s.len as usize + s.pad as usize + 4;
        let frames: Vec<usize> = s.iter().map(frame).collect();
        assert_eq!(frames, [1098, 1082, 1010]);
    }

    #[test]
    fn every_kind_and_size_follows_the_rules() {
        for pmtu in [
            Pmtu::Mtu256,
            Pmtu::Mtu512,
            Pmtu::Mtu1024,
            Pmtu::Mtu2048,
            Pmtu::Mtu4096,
        ] {
            let p = pmtu.bytes();
            for kind in [
                MessageKind::Send,
                MessageKind::SendImm,
                MessageKind::Write,
                MessageKind::WriteImm,
            ] {
                for len in [0, 1, 3, 4, p - 1, p, p + 1, 2 * p, 2 * p + 3, 5 * p - 2] {
                    let s: Vec<Segment> = segments(kind, len, pmtu).collect();
                    assert_eq!(s.len() as u32, packet_count(len, pmtu));
                    assert_eq!(s.iter().map(|s| s.len).sum::<u32>(), len);
                    for (i, seg) in s.iter().enumerate() {
                        let info = seg.opcode.info().unwrap();
                        let last = i + 1 == s.len();
                        assert_eq!(seg.offset, i as u32 * p);
                        assert_eq!(info.headers.reth, kind.is_write() && i == 0);
                        assert_eq!(info.headers.immdt, kind.has_immediate() && last);
                        if last {
                            assert!(seg.len <= p && (seg.len > 0 || s.len() == 1));
                            assert_eq!((seg.len + seg.pad as u32) % 4, 0);
                        } else {
                            assert_eq!((seg.len, seg.pad), (p, 0));
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn uc_opcodes_are_rc_plus_0x20() {
        let s = segment(MessageKind::WriteImm, 100, Pmtu::Mtu1024, 0, true);
        assert_eq!(s.opcode, Opcode(0x2b));
    }
}
