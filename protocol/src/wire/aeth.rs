//! ACK Extended Transport Header (4 bytes): syndrome (8) · MSN (24).
//!
//! Syndrome bits 6:5 select ACK (00, credit code in 4:0), RNR NAK (01, timer code in 4:0) or NAK
//! (11, NAK code in 4:0); 10 is reserved. Source: rxe_hdr.h `enum aeth_syndrome`.

use super::field::{put_u24, u24_at};
use super::{Error, Result};

/// Length of an AETH.
pub const HEADER_LEN: usize = 4;
/// The credit code rxe always sends: "unlimited / invalid".
pub const CREDITS_UNLIMITED: u8 = 0x1f;

/// NAK codes of an AETH whose syndrome type is NAK.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NakCode {
    /// 0x60: PSN sequence error; the AETH's BTH carries the expected PSN.
    PsnSequenceError,
    /// 0x61: invalid request (fatal).
    InvalidRequest,
    /// 0x62: remote access error (fatal).
    RemoteAccessError,
    /// 0x63: remote operational error (fatal).
    RemoteOperationalError,
    /// 0x64: invalid RD request (RD only).
    InvalidRdRequest,
}

/// The meaning of an AETH syndrome byte.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AethSyndrome {
    /// Positive acknowledgement with a credit code (0..=31).
    Ack {
        /// Credit code (0x1F = unlimited).
        credits: u8,
    },
    /// Receiver not ready: wait the timer code's time, then resend.
    RnrNak {
        /// RNR timer code (0..=31, see [`rnr_timer_micros`]).
        timer: u8,
    },
    /// Negative acknowledgement.
    Nak(NakCode),
}

impl AethSyndrome {
    /// Decode a syndrome byte.
    pub fn from_byte(b: u8) -> Result<Self> {
        let value = b & 0x1f;
        match (b >> 5) & 3 {
            _ if b & 0x80 != 0 => Err(Error::Unsupported),
            0 => Ok(AethSyndrome::Ack { credits: value }),
            1 => Ok(AethSyndrome::RnrNak { timer: value }),
            3 => Ok(AethSyndrome::Nak(match value {
                0 => NakCode::PsnSequenceError,
                1 => NakCode::InvalidRequest,
                2 => NakCode::RemoteAccessError,
                3 => NakCode::RemoteOperationalError,
                4 => NakCode::InvalidRdRequest,
                _ => return Err(Error::Unsupported),
            })),
            _ => Err(Error::Unsupported),
        }
    }

    /// Encode as a syndrome byte.
    pub const fn to_byte(self) -> u8 {
        match self {
            AethSyndrome::Ack { credits } => credits & 0x1f,
            AethSyndrome::RnrNak { timer } => 0x20 | (timer & 0x1f),
            AethSyndrome::Nak(code) => {
                0x60 | match code {
                    NakCode::PsnSequenceError => 0,
                    NakCode::InvalidRequest => 1,
                    NakCode::RemoteAccessError => 2,
                    NakCode::RemoteOperationalError => 3,
                    NakCode::InvalidRdRequest => 4,
                }
            }
        }
    }
}

/// Minimum wait, in microseconds, that an RNR NAK timer code asks for (IBTA table; rxe_comp.c
/// `rnrnak_usec[]`, with rxe's 61.41 ms typo for code 25 corrected to 61.44 ms).
pub const fn rnr_timer_micros(code: u8) -> u32 {
    const T: [u32; 32] = [
        655_360, 10, 20, 30, 40, 60, 80, 120, 160, 240, 320, 480, 640, 960, 1_280, 1_920, 2_560,
        3_840, 5_120, 7_680, 10_240, 15_360, 20_480, 30_720, 40_960, 61_440, 81_920, 122_880,
        163_840, 245_760, 327_680, 491_520,
    ];
    T[(code & 0x1f) as usize]
}

/// Credits a credit code grants (codes 0..=30; 31 means unlimited and returns `None`).
pub const fn credits(code: u8) -> Option<u32> {
    const T: [u32; 31] = [
        0, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024, 1536,
        2048, 3072, 4096, 6144, 8192, 12288, 16384, 24576, 32768,
    ];
    if code >= 31 {
        None
    } else {
        Some(T[code as usize])
    }
}

/// The contents of an AETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AethRepr {
    /// What the responder says.
    pub syndrome: AethSyndrome,
    /// Message sequence number: messages the responder has completed (24 bits).
    pub msn: u32,
}

impl AethRepr {
    /// Parse from the start of `buf`; reserved syndromes are `Unsupported`.
    pub fn parse(buf: &[u8]) -> Result<Self> {
        if buf.len() < HEADER_LEN {
            return Err(Error::Truncated);
        }
        Ok(AethRepr {
            syndrome: AethSyndrome::from_byte(buf[0])?,
            msn: u24_at(buf, 1),
        })
    }
    /// Header length (always 4).
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }
    /// Write at the start of `buf`.
    pub fn emit(&self, buf: &mut [u8]) -> Result<()> {
        if buf.len() < HEADER_LEN {
            return Err(Error::Truncated);
        }
        buf[0] = self.syndrome.to_byte();
        put_u24(buf, 1, self.msn & 0x00ff_ffff);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // AETHs of vectors D and E (rocev2.md §2.4 c) and rxe's own ACKs/NAKs in the lab capture
    // (shared/lab/rxe/results/*/tshark-fields.tsv: syndromes 31, 96, 97, 98).
    #[test]
    fn decodes_vector_and_rxe_syndromes() {
        let d = AethRepr::parse(&[0x1f, 0, 0, 3]).unwrap();
        assert_eq!(d.syndrome, AethSyndrome::Ack { credits: 31 });
        assert_eq!(d.msn, 3);
        let e = AethRepr::parse(&[0x60, 0, 0, 1]).unwrap();
        assert_eq!(e.syndrome, AethSyndrome::Nak(NakCode::PsnSequenceError));
        assert_eq!(
            AethSyndrome::from_byte(97),
            Ok(AethSyndrome::Nak(NakCode::InvalidRequest))
        );
        assert_eq!(
            AethSyndrome::from_byte(98),
            Ok(AethSyndrome::Nak(NakCode::RemoteAccessError))
        );
        assert_eq!(
            AethSyndrome::from_byte(0x2c),
            Ok(AethSyndrome::RnrNak { timer: 12 })
        );
        for b in [0x1f, 0x60, 0x61, 0x62, 0x63, 0x64, 0x20, 0x3f, 0x00] {
            assert_eq!(AethSyndrome::from_byte(b).unwrap().to_byte(), b);
        }
        let mut out = [0u8; 4];
        e.emit(&mut out).unwrap();
        assert_eq!(out, [0x60, 0, 0, 1]);
    }

    #[test]
    fn rejects_reserved_syndromes() {
        for b in [0x40u8, 0x5f, 0x65, 0x7f, 0x80, 0xff] {
            assert_eq!(
                AethSyndrome::from_byte(b),
                Err(Error::Unsupported),
                "0x{b:02x}"
            );
        }
    }

    // Table from rocev2.md §1.5.
    #[test]
    fn rnr_timer_and_credit_tables() {
        assert_eq!(rnr_timer_micros(0), 655_360);
        assert_eq!(rnr_timer_micros(12), 640);
        assert_eq!(rnr_timer_micros(25), 61_440);
        assert_eq!(rnr_timer_micros(31), 491_520);
        assert_eq!(credits(0), Some(0));
        assert_eq!(credits(30), Some(32768));
        assert_eq!(credits(31), None);
    }
}
