//! Immediate data (4 bytes): delivered verbatim to the host's completion (`ibv_wc.imm_data`).

use super::{Error, Result};

/// Length of an ImmDt header.
pub const HEADER_LEN: usize = 4;

/// Read the immediate value (network order) from the start of `buf`.
pub fn parse(buf: &[u8]) -> Result<u32> {
    match buf.get(..HEADER_LEN) {
        Some(b) => Ok(u32::from_be_bytes([b[0], b[1], b[2], b[3]])),
        None => Err(Error::Truncated),
    }
}

/// Write the immediate value at the start of `buf`.
pub fn emit(imm: u32, buf: &mut [u8]) -> Result<()> {
    match buf.get_mut(..HEADER_LEN) {
        Some(b) => {
            b.copy_from_slice(&imm.to_be_bytes());
            Ok(())
        }
        None => Err(Error::Truncated),
    }
}

#[cfg(test)]
mod tests {
    // ImmDt of vector B (rocev2.md §2.4 c): 0xdeadbeef.
    #[test]
    fn reads_vector_b_immediate() {
        let b = [0xde, 0xad, 0xbe, 0xef];
        assert_eq!(super::parse(&b), Ok(0xdead_beef));
        let mut out = [0u8; 4];
        super::emit(0xdead_beef, &mut out).unwrap();
        assert_eq!(out, b);
        assert!(super::parse(&b[..3]).is_err());
    }
}
