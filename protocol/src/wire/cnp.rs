//! The RoCEv2 Congestion Notification Packet: BTH opcode 0x81 with BECN set, destination QP =
//! the QP whose packets were CE-marked, PSN 0, then 16 reserved zero bytes and the ICRC.

use super::bth::BthRepr;
use super::opcode::Opcode;

/// Length of the reserved block after the BTH.
pub const RESERVED_LEN: usize = 16;

/// The BTH a notification point puts on a CNP for `dest_qp`.
pub const fn bth(dest_qp: u32) -> BthRepr {
    let mut b = BthRepr::new(Opcode::CNP, dest_qp, 0);
    b.becn = true;
    b
}

#[cfg(test)]
mod tests {
    use crate::hex;

    // BTH of vector F (rocev2.md §2.4 c), which matches the ConnectX-4 Lx CNP capture's layout.
    #[test]
    fn cnp_bth_matches_vector_f() {
        let mut out = [0u8; 12];
        super::bth(0x22).emit(&mut out).unwrap();
        assert_eq!(&out[..], &hex("81 00 ff ff 40 00 00 22 00 00 00 00")[..]);
    }
}
