//! Ethernet II frames with an optional 802.1Q VLAN tag.
//!
//! Layout: destination (6) · source (6) · [TPID 0x8100 (2) · TCI: PCP 3 | DEI 1 | VID 12 (2)] ·
//! EtherType (2). RoCEv2 rides on EtherType 0x0800/0x86DD, RoCEv1 on 0x8915; the ICRC covers
//! none of these bytes, so tagging and untagging are harmless to RoCE.

use super::field::{put_u16, u16_at};
use super::{Error, Result};

/// EtherType of IPv4.
pub const ETHERTYPE_IPV4: u16 = 0x0800;
/// EtherType of IPv6.
pub const ETHERTYPE_IPV6: u16 = 0x86DD;
/// EtherType of RoCEv1 (IBoE, `ETH_P_IBOE`): a GRH follows.
pub const ETHERTYPE_ROCEV1: u16 = 0x8915;
/// EtherType of ARP.
pub const ETHERTYPE_ARP: u16 = 0x0806;
/// Tag protocol identifier of an 802.1Q VLAN tag.
pub const TPID_VLAN: u16 = 0x8100;

/// Length of an untagged Ethernet II header.
pub const HEADER_LEN: usize = 14;
/// Length of an 802.1Q tag.
pub const VLAN_TAG_LEN: usize = 4;

mod field {
    use crate::wire::field::Field;
    pub const DST: Field = 0..6;
    pub const SRC: Field = 6..12;
    pub const ETHERTYPE: usize = 12;
    pub const TCI: usize = 14;
    pub const INNER_ETHERTYPE: usize = 16;
}

/// A 48-bit Ethernet MAC address.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct EthernetAddress(pub [u8; 6]);

impl EthernetAddress {
    /// The broadcast address ff:ff:ff:ff:ff:ff.
    pub const BROADCAST: EthernetAddress = EthernetAddress([0xff; 6]);
}

impl core::fmt::Display for EthernetAddress {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let b = self.0;
        write!(
            f,
            "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
            b[0], b[1], b[2], b[3], b[4], b[5]
        )
    }
}

/// An 802.1Q tag: priority (PCP, the PFC class), drop-eligible bit and VLAN ID.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct VlanTag {
    /// Priority code point, 0..=7.
    pub pcp: u8,
    /// Drop eligible indicator.
    pub dei: bool,
    /// VLAN identifier, 0..=4095.
    pub vid: u16,
}

impl VlanTag {
    fn from_tci(tci: u16) -> Self {
        VlanTag {
            pcp: (tci >> 13) as u8,
            dei: tci & 0x1000 != 0,
            vid: tci & 0x0fff,
        }
    }
    fn tci(&self) -> u16 {
        (u16::from(self.pcp & 7) << 13) | (u16::from(self.dei) << 12) | (self.vid & 0x0fff)
    }
}

/// A checked view of an Ethernet II frame.
#[derive(Debug, Clone)]
pub struct Frame<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Frame<T> {
    /// Wrap a buffer without checking it.
    pub const fn new_unchecked(buffer: T) -> Self {
        Frame { buffer }
    }

    /// Wrap a buffer, checking that the header (and the VLAN tag, if any) fits.
    pub fn new_checked(buffer: T) -> Result<Self> {
        let f = Self::new_unchecked(buffer);
        f.check_len()?;
        Ok(f)
    }

    /// Check that the buffer holds the whole header.
    pub fn check_len(&self) -> Result<()> {
        let b = self.buffer.as_ref();
        if b.len() < HEADER_LEN || b.len() < self.header_len() {
            return Err(Error::Truncated);
        }
        Ok(())
    }

    /// Give back the buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// Destination MAC.
    pub fn dst_addr(&self) -> EthernetAddress {
        let mut a = [0; 6];
        a.copy_from_slice(&self.buffer.as_ref()[field::DST]);
        EthernetAddress(a)
    }

    /// Source MAC.
    pub fn src_addr(&self) -> EthernetAddress {
        let mut a = [0; 6];
        a.copy_from_slice(&self.buffer.as_ref()[field::SRC]);
        EthernetAddress(a)
    }

    /// The 802.1Q tag, when the frame carries one.
    pub fn vlan(&self) -> Option<VlanTag> {
        let b = self.buffer.as_ref();
        (u16_at(b, field::ETHERTYPE) == TPID_VLAN).then(|| VlanTag::from_tci(u16_at(b, field::TCI)))
    }

    /// The EtherType of the payload (the inner one on a tagged frame).
    pub fn ethertype(&self) -> u16 {
        let b = self.buffer.as_ref();
        match u16_at(b, field::ETHERTYPE) {
            TPID_VLAN => u16_at(b, field::INNER_ETHERTYPE),
            t => t,
        }
    }

    /// Header length: 14, or 18 with a VLAN tag.
    pub fn header_len(&self) -> usize {
        let b = self.buffer.as_ref();
        if b.len() >= HEADER_LEN && u16_at(b, field::ETHERTYPE) == TPID_VLAN {
            HEADER_LEN + VLAN_TAG_LEN
        } else {
            HEADER_LEN
        }
    }

    /// The bytes after the header.
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[self.header_len()..]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Frame<T> {
    /// Set the destination MAC.
    pub fn set_dst_addr(&mut self, a: EthernetAddress) {
        self.buffer.as_mut()[field::DST].copy_from_slice(&a.0);
    }
    /// Set the source MAC.
    pub fn set_src_addr(&mut self, a: EthernetAddress) {
        self.buffer.as_mut()[field::SRC].copy_from_slice(&a.0);
    }
    /// The bytes after the header, writable.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let h = self.header_len();
        &mut self.buffer.as_mut()[h..]
    }
}

/// The contents of an Ethernet II header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EthernetRepr {
    /// Source MAC.
    pub src_addr: EthernetAddress,
    /// Destination MAC.
    pub dst_addr: EthernetAddress,
    /// Optional 802.1Q tag.
    pub vlan: Option<VlanTag>,
    /// EtherType of the payload.
    pub ethertype: u16,
}

impl EthernetRepr {
    /// Read the header of a checked frame.
    pub fn parse<T: AsRef<[u8]>>(frame: &Frame<T>) -> Result<Self> {
        frame.check_len()?;
        Ok(EthernetRepr {
            src_addr: frame.src_addr(),
            dst_addr: frame.dst_addr(),
            vlan: frame.vlan(),
            ethertype: frame.ethertype(),
        })
    }

    /// Bytes the header takes.
    pub const fn buffer_len(&self) -> usize {
        if self.vlan.is_some() {
            HEADER_LEN + VLAN_TAG_LEN
        } else {
            HEADER_LEN
        }
    }

    /// Write the header at the start of `buf` (which must hold `buffer_len()` bytes).
    pub fn emit(&self, buf: &mut [u8]) -> Result<()> {
        if buf.len() < self.buffer_len() {
            return Err(Error::Truncated);
        }
        buf[field::DST].copy_from_slice(&self.dst_addr.0);
        buf[field::SRC].copy_from_slice(&self.src_addr.0);
        match self.vlan {
            Some(tag) => {
                put_u16(buf, field::ETHERTYPE, TPID_VLAN);
                put_u16(buf, field::TCI, tag.tci());
                put_u16(buf, field::INNER_ETHERTYPE, self.ethertype);
            }
            None => put_u16(buf, field::ETHERTYPE, self.ethertype),
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hex;

    // Vector A of shared/reference/rocev2.md §2.4 (c): camera -> host, untagged.
    const A_HEAD: &str = "b8 ce f6 00 00 01 02 00 00 00 00 02 08 00 45 00";

    #[test]
    fn parses_untagged_frame_from_vector_a() {
        let bytes = hex(A_HEAD);
        let f = Frame::new_checked(&bytes[..]).unwrap();
        let r = EthernetRepr::parse(&f).unwrap();
        assert_eq!(r.dst_addr, EthernetAddress([0xb8, 0xce, 0xf6, 0, 0, 1]));
        assert_eq!(r.src_addr, EthernetAddress([2, 0, 0, 0, 0, 2]));
        assert_eq!(r.vlan, None);
        assert_eq!(r.ethertype, ETHERTYPE_IPV4);
        assert_eq!(f.payload(), &[0x45, 0x00]);
        let mut out = [0u8; 14];
        r.emit(&mut out).unwrap();
        assert_eq!(&out[..], &bytes[..14]);
    }

    // An 802.1Q-tagged frame as tcpdump shows it on a trunk: PCP 3 (the usual RoCE class),
    // VID 100, carrying IPv4. TCI 0x6064 = 011 0 0000 0110 0100.
    #[test]
    fn parses_and_emits_vlan_tag() {
        let bytes = hex("b8 ce f6 00 00 01 02 00 00 00 00 02 81 00 60 64 08 00 45");
        let f = Frame::new_checked(&bytes[..]).unwrap();
        let r = EthernetRepr::parse(&f).unwrap();
        assert_eq!(
            r.vlan,
            Some(VlanTag {
                pcp: 3,
                dei: false,
                vid: 100
            })
        );
        assert_eq!(r.ethertype, ETHERTYPE_IPV4);
        assert_eq!(f.header_len(), 18);
        assert_eq!(f.payload(), &[0x45]);
        let mut out = [0u8; 18];
        r.emit(&mut out).unwrap();
        assert_eq!(&out[..], &bytes[..18]);
    }

    #[test]
    fn rejects_truncated_frames() {
        assert_eq!(
            Frame::new_checked(&[0u8; 13][..]).err(),
            Some(Error::Truncated)
        );
        let tagged = hex("b8 ce f6 00 00 01 02 00 00 00 00 02 81 00 60 64 08");
        assert_eq!(
            Frame::new_checked(&tagged[..]).err(),
            Some(Error::Truncated)
        );
    }
}
