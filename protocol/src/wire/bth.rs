//! The InfiniBand Base Transport Header (12 bytes), present in every RoCE packet.
//!
//! ```text
//! 0: OpCode | 1: SE M PadCnt(2) TVer(4) | 2-3: P_Key
//! 4: FECN BECN resv6 | 5-7: DestQP (24)
//! 8: AckReq resv7   | 9-11: PSN (24)
//! ```

use super::field::{put_u16, put_u24, u16_at, u24_at};
use super::opcode::Opcode;
use super::{Error, Result};

/// Length of a BTH.
pub const HEADER_LEN: usize = 12;
/// The default (full-membership) partition key every RoCE QP uses.
pub const DEFAULT_PKEY: u16 = 0xffff;
/// PSNs are 24-bit and wrap.
pub const PSN_MASK: u32 = 0x00ff_ffff;

mod field {
    pub const OPCODE: usize = 0;
    pub const FLAGS: usize = 1;
    pub const PKEY: usize = 2;
    pub const ECN: usize = 4;
    pub const DEST_QP: usize = 5;
    pub const ACK: usize = 8;
    pub const PSN: usize = 9;
}

/// Signed distance `a - b` between two 24-bit PSNs, as rxe's `psn_compare` computes it.
pub const fn psn_diff(a: u32, b: u32) -> i32 {
    (a.wrapping_sub(b) << 8) as i32 >> 8
}

/// `psn + n` modulo 2^24.
pub const fn psn_add(psn: u32, n: u32) -> u32 {
    psn.wrapping_add(n) & PSN_MASK
}

/// A checked view of a BTH at the start of a buffer.
#[derive(Debug, Clone)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// Wrap a buffer without checking it.
    pub const fn new_unchecked(buffer: T) -> Self {
        Packet { buffer }
    }
    /// Wrap a buffer of at least 12 bytes.
    pub fn new_checked(buffer: T) -> Result<Self> {
        if buffer.as_ref().len() < HEADER_LEN {
            return Err(Error::Truncated);
        }
        Ok(Self::new_unchecked(buffer))
    }
    /// Opcode.
    pub fn opcode(&self) -> Opcode {
        Opcode(self.buffer.as_ref()[field::OPCODE])
    }
    /// Solicited event.
    pub fn solicited(&self) -> bool {
        self.buffer.as_ref()[field::FLAGS] & 0x80 != 0
    }
    /// Migration request.
    pub fn migreq(&self) -> bool {
        self.buffer.as_ref()[field::FLAGS] & 0x40 != 0
    }
    /// Pad count: bytes of padding before the ICRC.
    pub fn pad_count(&self) -> u8 {
        (self.buffer.as_ref()[field::FLAGS] >> 4) & 3
    }
    /// Transport header version (must be 0).
    pub fn tver(&self) -> u8 {
        self.buffer.as_ref()[field::FLAGS] & 0x0f
    }
    /// Partition key.
    pub fn pkey(&self) -> u16 {
        u16_at(self.buffer.as_ref(), field::PKEY)
    }
    /// Forward ECN (RoCEv2 reuse of a reserved bit).
    pub fn fecn(&self) -> bool {
        self.buffer.as_ref()[field::ECN] & 0x80 != 0
    }
    /// Backward ECN (set in CNPs).
    pub fn becn(&self) -> bool {
        self.buffer.as_ref()[field::ECN] & 0x40 != 0
    }
    /// Destination QP number (24 bits).
    pub fn dest_qp(&self) -> u32 {
        u24_at(self.buffer.as_ref(), field::DEST_QP)
    }
    /// Acknowledge request.
    pub fn ack_req(&self) -> bool {
        self.buffer.as_ref()[field::ACK] & 0x80 != 0
    }
    /// Packet sequence number (24 bits).
    pub fn psn(&self) -> u32 {
        u24_at(self.buffer.as_ref(), field::PSN)
    }
}

/// The contents of a BTH.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BthRepr {
    /// Opcode (must be known to parse).
    pub opcode: Opcode,
    /// Solicited event.
    pub solicited: bool,
    /// Migration request (0 for this project's sender).
    pub migreq: bool,
    /// Pad count, 0..=3.
    pub pad_count: u8,
    /// Partition key (0xFFFF).
    pub pkey: u16,
    /// Forward ECN.
    pub fecn: bool,
    /// Backward ECN.
    pub becn: bool,
    /// Destination QP.
    pub dest_qp: u32,
    /// Acknowledge request.
    pub ack_req: bool,
    /// Packet sequence number.
    pub psn: u32,
}

impl BthRepr {
    /// A BTH with the defaults this project sends: P_Key 0xFFFF, no flags.
    pub const fn new(opcode: Opcode, dest_qp: u32, psn: u32) -> Self {
        BthRepr {
            opcode,
            solicited: false,
            migreq: false,
            pad_count: 0,
            pkey: DEFAULT_PKEY,
            fecn: false,
            becn: false,
            dest_qp,
            ack_req: false,
            psn,
        }
    }

    /// Parse: TVer must be 0 and the opcode known.
    pub fn parse<T: AsRef<[u8]>>(p: &Packet<T>) -> Result<Self> {
        if p.buffer.as_ref().len() < HEADER_LEN {
            return Err(Error::Truncated);
        }
        if p.tver() != 0 {
            return Err(Error::BadVersion);
        }
        let opcode = p.opcode();
        if !opcode.is_known() {
            return Err(Error::UnknownOpcode(opcode.0));
        }
        Ok(BthRepr {
            opcode,
            solicited: p.solicited(),
            migreq: p.migreq(),
            pad_count: p.pad_count(),
            pkey: p.pkey(),
            fecn: p.fecn(),
            becn: p.becn(),
            dest_qp: p.dest_qp(),
            ack_req: p.ack_req(),
            psn: p.psn(),
        })
    }

    /// Header length (always 12).
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Write the 12 bytes at the start of `buf`.
    #[inline]
    pub fn emit(&self, buf: &mut [u8]) -> Result<()> {
        if buf.len() < HEADER_LEN {
            return Err(Error::Truncated);
        }
        if self.pad_count > 3 || self.dest_qp > PSN_MASK || self.psn > PSN_MASK {
            return Err(Error::BadLength);
        }
        buf[field::OPCODE] = self.opcode.0;
        buf[field::FLAGS] =
            (u8::from(self.solicited) << 7) | (u8::from(self.migreq) << 6) | (self.pad_count << 4);
        put_u16(buf, field::PKEY, self.pkey);
        buf[field::ECN] = (u8::from(self.fecn) << 7) | (u8::from(self.becn) << 6);
        put_u24(buf, field::DEST_QP, self.dest_qp);
        buf[field::ACK] = u8::from(self.ack_req) << 7;
        put_u24(buf, field::PSN, self.psn);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hex;

    // BTH of vector B (rocev2.md §2.4 c): WRITE ONLY IMM, SE, PadCnt 3, QP 0x11, AckReq, PSN 0x101.
    const B_BTH: &str = "0b b0 ff ff 00 00 00 11 80 00 01 01";
    // BTH of vector F: CNP with BECN to QP 0x22.
    const F_BTH: &str = "81 00 ff ff 40 00 00 22 00 00 00 00";

    #[test]
    fn parses_and_emits_vector_b_bth() {
        let bytes = hex(B_BTH);
        let r = BthRepr::parse(&Packet::new_checked(&bytes[..]).unwrap()).unwrap();
        assert_eq!(r.opcode, Opcode::RC_WRITE_ONLY_IMM);
        assert!(r.solicited && r.ack_req && !r.migreq && !r.becn && !r.fecn);
        assert_eq!(
            (r.pad_count, r.pkey, r.dest_qp, r.psn),
            (3, 0xffff, 0x11, 0x101)
        );
        let mut out = [0u8; 12];
        r.emit(&mut out).unwrap();
        assert_eq!(&out[..], &bytes[..]);
    }

    #[test]
    fn parses_cnp_becn() {
        let bytes = hex(F_BTH);
        let r = BthRepr::parse(&Packet::new_checked(&bytes[..]).unwrap()).unwrap();
        assert_eq!(r.opcode, Opcode::CNP);
        assert!(r.becn && !r.ack_req);
        assert_eq!((r.dest_qp, r.psn), (0x22, 0));
        let mut out = [0u8; 12];
        r.emit(&mut out).unwrap();
        assert_eq!(&out[..], &bytes[..]);
    }

    #[test]
    fn rejects_wrong_tver_and_unknown_opcode() {
        let mut bytes = hex(B_BTH);
        bytes[1] |= 1;
        assert_eq!(
            BthRepr::parse(&Packet::new_unchecked(&bytes[..])),
            Err(Error::BadVersion)
        );
        let mut bytes = hex(B_BTH);
        bytes[0] = 0x1f;
        assert_eq!(
            BthRepr::parse(&Packet::new_unchecked(&bytes[..])),
            Err(Error::UnknownOpcode(0x1f))
        );
        assert_eq!(
            Packet::new_checked(&bytes[..11]).err(),
            Some(Error::Truncated)
        );
    }

    #[test]
    fn psn_arithmetic_wraps_at_24_bits() {
        assert_eq!(psn_add(0xff_ffff, 1), 0);
        assert_eq!(psn_diff(0, 0xff_ffff), 1);
        assert_eq!(psn_diff(0xff_ffff, 0), -1);
        assert_eq!(psn_diff(0x7f_ffff, 0), 0x7f_ffff);
        assert_eq!(psn_diff(0x80_0000, 0), -0x80_0000);
    }
}
