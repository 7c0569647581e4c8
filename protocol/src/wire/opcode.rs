//! BTH opcodes: which operation, which position in a message, and which extension headers follow.
//!
//! OpCode = transport (bits 7:5: RC 0x00, UC 0x20, UD 0x60, CNP 0x80) + operation (bits 4:0).
//! Header order after the BTH follows IBTA: DETH, RETH, AtomicETH, AETH, AtomicAckETH, ImmDt,
//! IETH. Source: `include/rdma/ib_pack.h` and `drivers/infiniband/sw/rxe/rxe_opcode.c`.

/// A BTH opcode byte. Unknown values are representable; [`Opcode::info`] says whether it is known.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Opcode(pub u8);

/// The transport service an opcode belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    /// Reliable connected.
    Rc,
    /// Unreliable connected.
    Uc,
    /// Reliable datagram (not implemented by this crate).
    Rd,
    /// Unreliable datagram (CM MADs on QP1).
    Ud,
    /// Congestion notification packet (RoCEv2, opcode 0x81).
    Cnp,
}

/// What the packet does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operation {
    /// SEND, consumes a receive work request at the responder.
    Send,
    /// RDMA WRITE into registered memory.
    RdmaWrite,
    /// RDMA READ request.
    RdmaReadRequest,
    /// RDMA READ response.
    RdmaReadResponse,
    /// ACK or NAK (AETH).
    Acknowledge,
    /// Atomic acknowledge.
    AtomicAcknowledge,
    /// Atomic compare-and-swap.
    CompareSwap,
    /// Atomic fetch-and-add.
    FetchAdd,
    /// Congestion notification.
    Cnp,
}

/// Where a packet sits in a multi-packet message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Position {
    /// First packet of several: exactly PMTU bytes of payload.
    First,
    /// Middle packet: exactly PMTU bytes.
    Middle,
    /// Last packet: 1..=PMTU bytes.
    Last,
    /// The whole message in one packet: 0..=PMTU bytes.
    Only,
}

/// Which extension headers follow the BTH, in wire order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ExtHeaders {
    /// Datagram extended transport header (8 bytes).
    pub deth: bool,
    /// RDMA extended transport header (16 bytes).
    pub reth: bool,
    /// Atomic extended transport header (28 bytes).
    pub atomic_eth: bool,
    /// ACK extended transport header (4 bytes).
    pub aeth: bool,
    /// Atomic ACK extended transport header (8 bytes).
    pub atomic_ack_eth: bool,
    /// Immediate data (4 bytes).
    pub immdt: bool,
    /// Invalidate extended transport header (4 bytes).
    pub ieth: bool,
    /// The CNP's 16 reserved bytes.
    pub cnp_reserved: bool,
}

impl ExtHeaders {
    /// Total length of these headers in bytes.
    pub const fn len(&self) -> usize {
        8 * self.deth as usize
            + 16 * self.reth as usize
            + 28 * self.atomic_eth as usize
            + 4 * self.aeth as usize
            + 8 * self.atomic_ack_eth as usize
            + 4 * self.immdt as usize
            + 4 * self.ieth as usize
            + 16 * self.cnp_reserved as usize
    }
    /// Whether no extension header follows.
    pub const fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Byte offset of the RETH after the BTH.
    pub const fn reth_offset(&self) -> usize {
        8 * self.deth as usize
    }
    /// Byte offset of the AETH after the BTH.
    pub const fn aeth_offset(&self) -> usize {
        8 * self.deth as usize + 16 * self.reth as usize + 28 * self.atomic_eth as usize
    }
    /// Byte offset of the ImmDt after the BTH.
    pub const fn immdt_offset(&self) -> usize {
        self.aeth_offset() + 4 * self.aeth as usize + 8 * self.atomic_ack_eth as usize
    }
}

/// [`Opcode::info`] for all 256 opcodes.
static OPCODE_INFO: [Option<OpcodeInfo>; 256] = {
    let mut t = [None; 256];
    let mut i = 0;
    while i < 256 {
        t[i] = Opcode(i as u8).compute_info();
        i += 1;
    }
    t
};

/// Everything the crate knows about a known opcode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpcodeInfo {
    /// Transport service.
    pub transport: Transport,
    /// Operation.
    pub operation: Operation,
    /// Position in a message.
    pub position: Position,
    /// Extension headers that follow the BTH.
    pub headers: ExtHeaders,
}

const fn h() -> ExtHeaders {
    ExtHeaders {
        deth: false,
        reth: false,
        atomic_eth: false,
        aeth: false,
        atomic_ack_eth: false,
        immdt: false,
        ieth: false,
        cnp_reserved: false,
    }
}

impl Opcode {
    /// RC SEND FIRST.
    pub const RC_SEND_FIRST: Opcode = Opcode(0x00);
    /// RC SEND MIDDLE.
    pub const RC_SEND_MIDDLE: Opcode = Opcode(0x01);
    /// RC SEND LAST.
    pub const RC_SEND_LAST: Opcode = Opcode(0x02);
    /// RC SEND LAST with immediate.
    pub const RC_SEND_LAST_IMM: Opcode = Opcode(0x03);
    /// RC SEND ONLY.
    pub const RC_SEND_ONLY: Opcode = Opcode(0x04);
    /// RC SEND ONLY with immediate.
    pub const RC_SEND_ONLY_IMM: Opcode = Opcode(0x05);
    /// RC RDMA WRITE FIRST (RETH).
    pub const RC_WRITE_FIRST: Opcode = Opcode(0x06);
    /// RC RDMA WRITE MIDDLE.
    pub const RC_WRITE_MIDDLE: Opcode = Opcode(0x07);
    /// RC RDMA WRITE LAST.
    pub const RC_WRITE_LAST: Opcode = Opcode(0x08);
    /// RC RDMA WRITE LAST with immediate.
    pub const RC_WRITE_LAST_IMM: Opcode = Opcode(0x09);
    /// RC RDMA WRITE ONLY (RETH).
    pub const RC_WRITE_ONLY: Opcode = Opcode(0x0a);
    /// RC RDMA WRITE ONLY with immediate (RETH, ImmDt).
    pub const RC_WRITE_ONLY_IMM: Opcode = Opcode(0x0b);
    /// RC ACKNOWLEDGE (AETH).
    pub const RC_ACK: Opcode = Opcode(0x11);
    /// UD SEND ONLY (DETH): CM MADs to QP1.
    pub const UD_SEND_ONLY: Opcode = Opcode(0x64);
    /// UD SEND ONLY with immediate (DETH, ImmDt).
    pub const UD_SEND_ONLY_IMM: Opcode = Opcode(0x65);
    /// RoCEv2 congestion notification packet.
    pub const CNP: Opcode = Opcode(0x81);

    /// What this opcode means, or `None` for an opcode this crate does not know. A table
    /// lookup: every packet asks this several times (header lengths, emit, parse).
    #[inline]
    pub const fn info(self) -> Option<OpcodeInfo> {
        OPCODE_INFO[self.0 as usize]
    }

    /// The definition behind [`info`](Self::info), evaluated at compile time into its table.
    const fn compute_info(self) -> Option<OpcodeInfo> {
        use Operation::*;
        use Position::*;
        let (transport, allowed_ops): (Transport, u32) = match self.0 >> 5 {
            0 => (Transport::Rc, 0x00ff_ffff & !(1 << 0x15)),
            1 => (Transport::Uc, 0x0000_0fff),
            2 => (Transport::Rd, 0),
            3 => (Transport::Ud, (1 << 4) | (1 << 5)),
            4 if self.0 == 0x81 => {
                return Some(OpcodeInfo {
                    transport: Transport::Cnp,
                    operation: Cnp,
                    position: Only,
                    headers: ExtHeaders {
                        cnp_reserved: true,
                        ..h()
                    },
                });
            }
            _ => return None,
        };
        let op = self.0 & 0x1f;
        if allowed_ops & (1 << op) == 0 {
            return None;
        }
        let ud = matches!(transport, Transport::Ud);
        let (operation, position, mut headers) = match op {
            0x00 => (Send, First, h()),
            0x01 => (Send, Middle, h()),
            0x02 => (Send, Last, h()),
            0x03 => (Send, Last, ExtHeaders { immdt: true, ..h() }),
            0x04 => (Send, Only, h()),
            0x05 => (Send, Only, ExtHeaders { immdt: true, ..h() }),
            0x06 => (RdmaWrite, First, ExtHeaders { reth: true, ..h() }),
            0x07 => (RdmaWrite, Middle, h()),
            0x08 => (RdmaWrite, Last, h()),
            0x09 => (RdmaWrite, Last, ExtHeaders { immdt: true, ..h() }),
            0x0a => (RdmaWrite, Only, ExtHeaders { reth: true, ..h() }),
            0x0b => (
                RdmaWrite,
                Only,
                ExtHeaders {
                    reth: true,
                    immdt: true,
                    ..h()
                },
            ),
            0x0c => (RdmaReadRequest, Only, ExtHeaders { reth: true, ..h() }),
            0x0d => (RdmaReadResponse, First, ExtHeaders { aeth: true, ..h() }),
            0x0e => (RdmaReadResponse, Middle, h()),
            0x0f => (RdmaReadResponse, Last, ExtHeaders { aeth: true, ..h() }),
            0x10 => (RdmaReadResponse, Only, ExtHeaders { aeth: true, ..h() }),
            0x11 => (Acknowledge, Only, ExtHeaders { aeth: true, ..h() }),
            0x12 => (
                AtomicAcknowledge,
                Only,
                ExtHeaders {
                    aeth: true,
                    atomic_ack_eth: true,
                    ..h()
                },
            ),
            0x13 => (
                CompareSwap,
                Only,
                ExtHeaders {
                    atomic_eth: true,
                    ..h()
                },
            ),
            0x14 => (
                FetchAdd,
                Only,
                ExtHeaders {
                    atomic_eth: true,
                    ..h()
                },
            ),
            0x16 => (Send, Last, ExtHeaders { ieth: true, ..h() }),
            0x17 => (Send, Only, ExtHeaders { ieth: true, ..h() }),
            _ => return None,
        };
        headers.deth = ud;
        Some(OpcodeInfo {
            transport,
            operation,
            position,
            headers,
        })
    }

    /// Whether the crate knows this opcode.
    pub const fn is_known(self) -> bool {
        self.info().is_some()
    }

    /// Extension headers after the BTH (none for an unknown opcode).
    #[inline]
    pub const fn headers(self) -> ExtHeaders {
        match self.info() {
            Some(i) => i.headers,
            None => h(),
        }
    }

    /// The name in the kernel's `IB_OPCODE_*` style, e.g. `RC_RDMA_WRITE_ONLY`; `None` if unknown.
    pub const fn name(self) -> Option<&'static str> {
        let Some(info) = self.info() else {
            return None;
        };
        let op = match self.0 & 0x1f {
            0x00 => "SEND_FIRST",
            0x01 => "SEND_MIDDLE",
            0x02 => "SEND_LAST",
            0x03 => "SEND_LAST_WITH_IMMEDIATE",
            0x04 => "SEND_ONLY",
            0x05 => "SEND_ONLY_WITH_IMMEDIATE",
            0x06 => "RDMA_WRITE_FIRST",
            0x07 => "RDMA_WRITE_MIDDLE",
            0x08 => "RDMA_WRITE_LAST",
            0x09 => "RDMA_WRITE_LAST_WITH_IMMEDIATE",
            0x0a => "RDMA_WRITE_ONLY",
            0x0b => "RDMA_WRITE_ONLY_WITH_IMMEDIATE",
            0x0c => "RDMA_READ_REQUEST",
            0x0d => "RDMA_READ_RESPONSE_FIRST",
            0x0e => "RDMA_READ_RESPONSE_MIDDLE",
            0x0f => "RDMA_READ_RESPONSE_LAST",
            0x10 => "RDMA_READ_RESPONSE_ONLY",
            0x11 => "ACKNOWLEDGE",
            0x12 => "ATOMIC_ACKNOWLEDGE",
            0x13 => "COMPARE_SWAP",
            0x14 => "FETCH_ADD",
            0x16 => "SEND_LAST_WITH_INVALIDATE",
            _ => "SEND_ONLY_WITH_INVALIDATE",
        };
        Some(match info.transport {
            Transport::Cnp => "CNP",
            Transport::Rc => match self.0 {
                0x00 => "RC_SEND_FIRST",
                0x01 => "RC_SEND_MIDDLE",
                0x02 => "RC_SEND_LAST",
                0x03 => "RC_SEND_LAST_WITH_IMMEDIATE",
                0x04 => "RC_SEND_ONLY",
                0x05 => "RC_SEND_ONLY_WITH_IMMEDIATE",
                0x06 => "RC_RDMA_WRITE_FIRST",
                0x07 => "RC_RDMA_WRITE_MIDDLE",
                0x08 => "RC_RDMA_WRITE_LAST",
                0x09 => "RC_RDMA_WRITE_LAST_WITH_IMMEDIATE",
                0x0a => "RC_RDMA_WRITE_ONLY",
                0x0b => "RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE",
                0x0c => "RC_RDMA_READ_REQUEST",
                0x0d => "RC_RDMA_READ_RESPONSE_FIRST",
                0x0e => "RC_RDMA_READ_RESPONSE_MIDDLE",
                0x0f => "RC_RDMA_READ_RESPONSE_LAST",
                0x10 => "RC_RDMA_READ_RESPONSE_ONLY",
                0x11 => "RC_ACKNOWLEDGE",
                0x12 => "RC_ATOMIC_ACKNOWLEDGE",
                0x13 => "RC_COMPARE_SWAP",
                0x14 => "RC_FETCH_ADD",
                0x16 => "RC_SEND_LAST_WITH_INVALIDATE",
                _ => "RC_SEND_ONLY_WITH_INVALIDATE",
            },
            Transport::Uc => match self.0 & 0x1f {
                0x00 => "UC_SEND_FIRST",
                0x01 => "UC_SEND_MIDDLE",
                0x02 => "UC_SEND_LAST",
                0x03 => "UC_SEND_LAST_WITH_IMMEDIATE",
                0x04 => "UC_SEND_ONLY",
                0x05 => "UC_SEND_ONLY_WITH_IMMEDIATE",
                0x06 => "UC_RDMA_WRITE_FIRST",
                0x07 => "UC_RDMA_WRITE_MIDDLE",
                0x08 => "UC_RDMA_WRITE_LAST",
                0x09 => "UC_RDMA_WRITE_LAST_WITH_IMMEDIATE",
                0x0a => "UC_RDMA_WRITE_ONLY",
                _ => "UC_RDMA_WRITE_ONLY_WITH_IMMEDIATE",
            },
            Transport::Ud => match self.0 {
                0x64 => "UD_SEND_ONLY",
                _ => "UD_SEND_ONLY_WITH_IMMEDIATE",
            },
            Transport::Rd => op,
        })
    }
}

impl core::fmt::Display for Opcode {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self.name() {
            Some(n) => f.write_str(n),
            None => write!(f, "unknown(0x{:02x})", self.0),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::string::ToString;

    // Header sets and lengths per rxe_opcode.c (RXE_*_MASK and .length of each entry).
    #[test]
    fn extension_headers_match_rxe_opcode_table() {
        let cases: &[(u8, usize)] = &[
            (0x00, 0),
            (0x03, 4),
            (0x04, 0),
            (0x05, 4),
            (0x06, 16),
            (0x07, 0),
            (0x08, 0),
            (0x09, 4),
            (0x0a, 16),
            (0x0b, 20),
            (0x0c, 16),
            (0x0d, 4),
            (0x0e, 0),
            (0x11, 4),
            (0x12, 12),
            (0x13, 28),
            (0x17, 4),
            (0x2b, 20),
            (0x64, 8),
            (0x65, 12),
            (0x81, 16),
        ];
        for &(op, len) in cases {
            assert_eq!(Opcode(op).headers().len(), len, "opcode 0x{op:02x}");
        }
        let wi = Opcode::RC_WRITE_ONLY_IMM.headers();
        assert_eq!((wi.reth_offset(), wi.immdt_offset()), (0, 16));
        let ud = Opcode::UD_SEND_ONLY_IMM.headers();
        assert_eq!(ud.immdt_offset(), 8);
    }

    #[test]
    fn unknown_opcodes_are_reported_not_guessed() {
        for op in [
            0x15u8, 0x18, 0x1f, 0x2c, 0x30, 0x40, 0x60, 0x66, 0x80, 0x82, 0xff,
        ] {
            assert_eq!(Opcode(op).info(), None, "0x{op:02x}");
        }
        assert_eq!(Opcode(0x18).to_string(), "unknown(0x18)");
    }

    #[test]
    fn names_follow_kernel_style() {
        assert_eq!(Opcode::RC_WRITE_ONLY.to_string(), "RC_RDMA_WRITE_ONLY");
        assert_eq!(
            Opcode(0x2b).to_string(),
            "UC_RDMA_WRITE_ONLY_WITH_IMMEDIATE"
        );
        assert_eq!(Opcode::RC_ACK.to_string(), "RC_ACKNOWLEDGE");
        assert_eq!(Opcode::CNP.to_string(), "CNP");
        assert_eq!(Opcode::UD_SEND_ONLY.to_string(), "UD_SEND_ONLY");
        for op in 0..=255u8 {
            if let Some(i) = Opcode(op).info() {
                let n = Opcode(op).name().unwrap();
                let prefix = match i.transport {
                    Transport::Rc => "RC_",
                    Transport::Uc => "UC_",
                    Transport::Ud => "UD_",
                    _ => "",
                };
                assert!(n.starts_with(prefix), "{n}");
            }
        }
    }
}
