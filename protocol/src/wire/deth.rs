//! Datagram Extended Transport Header (8 bytes): Q_Key and source QP of a UD packet, used by
//! CM MADs sent to QP1 with the GSI Q_Key 0x80010000.

use super::field::{put_u24, put_u32, u24_at, u32_at};
use super::{Error, Result};

/// Length of a DETH.
pub const HEADER_LEN: usize = 8;
/// The Q_Key of the General Services Interface (QP1).
pub const GSI_QKEY: u32 = 0x8001_0000;

/// The contents of a DETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DethRepr {
    /// Queue key.
    pub qkey: u32,
    /// Source QP (24 bits).
    pub src_qp: u32,
}

impl DethRepr {
    /// Parse from the start of `buf`.
    pub fn parse(buf: &[u8]) -> Result<Self> {
        if buf.len() < HEADER_LEN {
            return Err(Error::Truncated);
        }
        Ok(DethRepr {
            qkey: u32_at(buf, 0),
            src_qp: u24_at(buf, 5),
        })
    }
    /// Header length (always 8).
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }
    /// Write at the start of `buf`.
    pub fn emit(&self, buf: &mut [u8]) -> Result<()> {
        if buf.len() < HEADER_LEN {
            return Err(Error::Truncated);
        }
        put_u32(buf, 0, self.qkey);
        buf[4] = 0;
        put_u24(buf, 5, self.src_qp);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hex;

    // DETH of the worked CM REQ in rocev2.md §5.3: Q_Key 0x80010000, source QP 1.
    #[test]
    fn parses_and_emits_cm_req_deth() {
        let bytes = hex("80 01 00 00 00 00 00 01");
        let r = DethRepr::parse(&bytes).unwrap();
        assert_eq!(
            r,
            DethRepr {
                qkey: GSI_QKEY,
                src_qp: 1
            }
        );
        let mut out = [0xffu8; 8];
        r.emit(&mut out).unwrap();
        assert_eq!(&out[..], &bytes[..]);
        assert_eq!(DethRepr::parse(&bytes[..7]), Err(Error::Truncated));
    }
}
