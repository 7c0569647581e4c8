//! RDMA Extended Transport Header (16 bytes): virtual address, R_Key and DMA length of the whole
//! RDMA WRITE message; carried by WRITE FIRST and WRITE ONLY only.

use super::field::{put_u32, put_u64, u32_at, u64_at};
use super::{Error, Result};

/// Length of a RETH.
pub const HEADER_LEN: usize = 16;

/// The contents of a RETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RethRepr {
    /// Remote virtual address of the first byte.
    pub va: u64,
    /// Remote key of the registered region.
    pub rkey: u32,
    /// Length of the whole message.
    pub dma_len: u32,
}

impl RethRepr {
    /// Parse from the start of `buf`.
    pub fn parse(buf: &[u8]) -> Result<Self> {
        if buf.len() < HEADER_LEN {
            return Err(Error::Truncated);
        }
        Ok(RethRepr {
            va: u64_at(buf, 0),
            rkey: u32_at(buf, 8),
            dma_len: u32_at(buf, 12),
        })
    }
    /// Header length (always 16).
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }
    /// Write at the start of `buf`.
    #[inline]
    pub fn emit(&self, buf: &mut [u8]) -> Result<()> {
        if buf.len() < HEADER_LEN {
            return Err(Error::Truncated);
        }
        put_u64(buf, 0, self.va);
        put_u32(buf, 8, self.rkey);
        put_u32(buf, 12, self.dma_len);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hex;

    // RETH of vector A (rocev2.md §2.4 c): VA 0x7f0000001000, rkey 0x1234, length 64.
    #[test]
    fn parses_and_emits_vector_a_reth() {
        let bytes = hex("00 00 7f 00 00 00 10 00 00 00 12 34 00 00 00 40");
        let r = RethRepr::parse(&bytes).unwrap();
        assert_eq!(
            r,
            RethRepr {
                va: 0x7f00_0000_1000,
                rkey: 0x1234,
                dma_len: 64
            }
        );
        let mut out = [0u8; 16];
        r.emit(&mut out).unwrap();
        assert_eq!(&out[..], &bytes[..]);
        assert_eq!(RethRepr::parse(&bytes[..15]), Err(Error::Truncated));
    }
}
