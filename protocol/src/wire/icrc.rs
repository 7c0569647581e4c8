//! The RoCE invariant CRC, exactly as Linux rxe computes it (`rxe_icrc.c`).
//!
//! `ICRC = CRC-32/ISO-HDLC( 8×0xFF ‖ masked(IP ‖ UDP ‖ BTH) ‖ other headers ‖ payload ‖ pad )`,
//! sent least significant byte first. Masked (set to all-ones) are the fields a router may
//! rewrite: IPv4 TOS, TTL and header checksum; IPv6 traffic class, flow label and hop limit;
//! the UDP checksum; BTH byte 4 (FECN, BECN, reserved). The IPv4 identification is covered.
//!
//! [`Icrc`] is incremental: feed the masked headers once, then stream payload slices straight
//! from the frame buffer without copying them.

use super::{Error, Result, bth, ipv6, udp};

/// The CRC value (finalised form) after the 8-byte 0xFF stand-in for the IB LRH; equal to
/// `crc32(b"\xff" * 8)`. rxe starts its register at the complement, 0xDEBB20E3.
pub const LRH_STANDIN_CRC: u32 = 0x2144_df1c;

/// Length of the ICRC trailer.
pub const ICRC_LEN: usize = 4;

const MAX_IPV4_HEADER: usize = 60;

/// An ICRC being computed.
#[derive(Clone)]
pub struct Icrc {
    hasher: crc32fast::Hasher,
}

impl Default for Icrc {
    fn default() -> Self {
        Self::new()
    }
}

impl core::fmt::Debug for Icrc {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Icrc").finish_non_exhaustive()
    }
}

/// Set the fields of an IPv4 header that the ICRC masks: TOS, TTL, header checksum.
#[inline]
pub fn mask_ipv4(hdr: &mut [u8]) {
    hdr[1] = 0xff;
    hdr[8] = 0xff;
    hdr[10] = 0xff;
    hdr[11] = 0xff;
}

/// Set the fields of an IPv6 header (or GRH) that the ICRC masks: traffic class, flow label,
/// hop limit.
#[inline]
pub fn mask_ipv6(hdr: &mut [u8]) {
    hdr[0] |= 0x0f;
    hdr[1] = 0xff;
    hdr[2] = 0xff;
    hdr[3] = 0xff;
    hdr[7] = 0xff;
}

/// Set the UDP checksum to all-ones, as the ICRC masks it.
#[inline]
pub fn mask_udp(hdr: &mut [u8]) {
    hdr[6] = 0xff;
    hdr[7] = 0xff;
}

/// Set BTH byte 4 (FECN, BECN, resv6a) to all-ones, as the ICRC masks it.
#[inline]
pub fn mask_bth(hdr: &mut [u8]) {
    hdr[4] = 0xff;
}

/// CRC-32/ISO-HDLC's tables for four bytes at a time (reflected polynomial 0xEDB88320;
/// `CRC_TABLES[0]` is the byte table), for the few header bytes a template feeds itself.
pub(crate) const CRC_TABLES: [[u32; 256]; 4] = {
    let mut t = [[0u32; 256]; 4];
    let mut i = 0;
    while i < 256 {
        let mut r = i as u32;
        let mut k = 0;
        while k < 8 {
            r = if r & 1 != 0 {
                (r >> 1) ^ 0xedb8_8320
            } else {
                r >> 1
            };
            k += 1;
        }
        t[0][i] = r;
        i += 1;
    }
    let mut k = 1;
    while k < 4 {
        let mut i = 0;
        while i < 256 {
            let prev = t[k - 1][i];
            t[k][i] = (prev >> 8) ^ t[0][(prev & 0xff) as usize];
            i += 1;
        }
        k += 1;
    }
    t
};

/// The byte table.
pub(crate) const CRC_TABLE: [u32; 256] = CRC_TABLES[0];

/// The CRC register (not the finalised value) after `bytes` from register `reg`, a byte at a
/// time.
#[inline]
pub(crate) const fn register_update(mut reg: u32, bytes: &[u8]) -> u32 {
    let mut i = 0;
    while i < bytes.len() {
        reg = (reg >> 8) ^ CRC_TABLE[((reg ^ bytes[i] as u32) & 0xff) as usize];
        i += 1;
    }
    reg
}

/// [`register_update`] four bytes at a time (slice-by-4), for lengths that are a multiple of
/// four (a BTH's PSN word and the RETH and immediate data after it); a rest is fed bytewise.
#[inline(always)]
pub(crate) fn register_update_words(mut reg: u32, bytes: &[u8]) -> u32 {
    let mut words = bytes.chunks_exact(4);
    for w in &mut words {
        reg ^= u32::from_le_bytes([w[0], w[1], w[2], w[3]]);
        reg = CRC_TABLES[3][(reg & 0xff) as usize]
            ^ CRC_TABLES[2][((reg >> 8) & 0xff) as usize]
            ^ CRC_TABLES[1][((reg >> 16) & 0xff) as usize]
            ^ CRC_TABLES[0][(reg >> 24) as usize];
    }
    register_update(reg, words.remainder())
}

impl Icrc {
    /// Go on from `value`, the finalised CRC of what was fed so far (what
    /// [`finish`](Self::finish) would have returned).
    #[inline]
    pub fn resume(value: u32) -> Self {
        Icrc {
            hasher: crc32fast::Hasher::new_with_initial(value),
        }
    }

    /// Start an ICRC: the 8-byte LRH stand-in is already in.
    #[inline]
    pub fn new() -> Self {
        Self::resume(LRH_STANDIN_CRC)
    }

    /// Start the ICRC of a RoCEv2 packet over IPv4 from its IP header (20 bytes, or more with
    /// options), UDP header and BTH, masking the variant fields in a stack copy.
    #[inline]
    pub fn rocev2_ipv4(ip: &[u8], udp_hdr: &[u8], bth_hdr: &[u8]) -> Result<Self> {
        if ip.len() < 20 || ip.len() > MAX_IPV4_HEADER {
            return Err(Error::BadLength);
        }
        let mut scratch = [0u8; MAX_IPV4_HEADER + udp::HEADER_LEN + bth::HEADER_LEN];
        let n = Self::masked_copy(&mut scratch, ip, udp_hdr, bth_hdr, mask_ipv4)?;
        let mut c = Icrc::new();
        c.update(&scratch[..n]);
        Ok(c)
    }

    /// Start the ICRC of a RoCEv2 packet over IPv6 from its 40-byte header, UDP header and BTH.
    pub fn rocev2_ipv6(ip: &[u8], udp_hdr: &[u8], bth_hdr: &[u8]) -> Result<Self> {
        if ip.len() != ipv6::HEADER_LEN {
            return Err(Error::BadLength);
        }
        let mut scratch = [0u8; ipv6::HEADER_LEN + udp::HEADER_LEN + bth::HEADER_LEN];
        let n = Self::masked_copy(&mut scratch, ip, udp_hdr, bth_hdr, mask_ipv6)?;
        let mut c = Icrc::new();
        c.update(&scratch[..n]);
        Ok(c)
    }

    /// Start the ICRC of a RoCEv1 packet from its GRH and BTH.
    pub fn rocev1(grh: &[u8], bth_hdr: &[u8]) -> Result<Self> {
        if grh.len() != ipv6::HEADER_LEN || bth_hdr.len() != bth::HEADER_LEN {
            return Err(Error::BadLength);
        }
        let mut scratch = [0u8; ipv6::HEADER_LEN + bth::HEADER_LEN];
        scratch[..40].copy_from_slice(grh);
        mask_ipv6(&mut scratch[..40]);
        scratch[40..].copy_from_slice(bth_hdr);
        mask_bth(&mut scratch[40..]);
        let mut c = Icrc::new();
        c.update(&scratch);
        Ok(c)
    }

    #[inline]
    fn masked_copy(
        scratch: &mut [u8],
        ip: &[u8],
        udp_hdr: &[u8],
        bth_hdr: &[u8],
        mask_ip: fn(&mut [u8]),
    ) -> Result<usize> {
        if udp_hdr.len() != udp::HEADER_LEN || bth_hdr.len() != bth::HEADER_LEN {
            return Err(Error::BadLength);
        }
        let (a, b) = (ip.len(), ip.len() + udp::HEADER_LEN);
        let n = b + bth::HEADER_LEN;
        scratch[..a].copy_from_slice(ip);
        mask_ip(&mut scratch[..a]);
        scratch[a..b].copy_from_slice(udp_hdr);
        mask_udp(&mut scratch[a..b]);
        scratch[b..n].copy_from_slice(bth_hdr);
        mask_bth(&mut scratch[b..n]);
        Ok(n)
    }

    /// Feed bytes that the ICRC covers as they are: extension headers, payload, pad.
    #[inline]
    pub fn update(&mut self, bytes: &[u8]) {
        self.hasher.update(bytes);
    }

    /// Feed `n` (0..=3) zero pad bytes.
    #[inline]
    pub fn pad(&mut self, n: usize) {
        self.hasher.update(&[0u8; 3][..n.min(3)]);
    }

    /// The ICRC value; on the wire it is `value.to_le_bytes()`.
    #[inline]
    pub fn finish(self) -> u32 {
        self.hasher.finalize()
    }
}

/// ICRC computed over a received RoCEv2 packet's raw bytes, whatever its headers say, next to
/// the ICRC it carries: `(computed, carried)`. `ip_header` is the IP header as found (IPv4 of
/// IHL×4 bytes or IPv6 of 40), `udp_datagram` the UDP header and payload cut to the UDP length.
pub fn raw_rocev2(ip_header: &[u8], ipv6: bool, udp_datagram: &[u8]) -> Result<(u32, u32)> {
    let min = udp::HEADER_LEN + bth::HEADER_LEN + ICRC_LEN;
    if udp_datagram.len() < min {
        return Err(Error::Truncated);
    }
    let (udp_hdr, rest) = udp_datagram.split_at(udp::HEADER_LEN);
    let (bth_hdr, rest) = rest.split_at(bth::HEADER_LEN);
    let (covered, carried) = rest.split_at(rest.len() - ICRC_LEN);
    let mut c = if ipv6 {
        Icrc::rocev2_ipv6(ip_header, udp_hdr, bth_hdr)?
    } else {
        Icrc::rocev2_ipv4(ip_header, udp_hdr, bth_hdr)?
    };
    c.update(covered);
    Ok((
        c.finish(),
        u32::from_le_bytes([carried[0], carried[1], carried[2], carried[3]]),
    ))
}

/// ICRC computed over a received RoCEv1 packet (GRH and what follows, cut to the GRH payload
/// length), next to the one it carries: `(computed, carried)`.
pub fn raw_rocev1(grh: &[u8], ib: &[u8]) -> Result<(u32, u32)> {
    if ib.len() < bth::HEADER_LEN + ICRC_LEN {
        return Err(Error::Truncated);
    }
    let (bth_hdr, rest) = ib.split_at(bth::HEADER_LEN);
    let (covered, carried) = rest.split_at(rest.len() - ICRC_LEN);
    let mut c = Icrc::rocev1(grh, bth_hdr)?;
    c.update(covered);
    Ok((
        c.finish(),
        u32::from_le_bytes([carried[0], carried[1], carried[2], carried[3]]),
    ))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::vec::Vec;

    /// Vectors A-G of shared/reference/rocev2.md §2.4 (c), one Ethernet frame each.
    pub(crate) fn vectors() -> Vec<(char, Vec<u8>)> {
        include_str!("../../../testdata/rocev2-vectors.txt")
            .lines()
            .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
            .map(|l| {
                let (name, bytes) = l.split_once(' ').unwrap();
                (name.chars().next().unwrap(), crate::hex(bytes))
            })
            .collect()
    }

    fn raw(frame: &[u8]) -> (u32, u32) {
        let v6 = frame[12..14] == [0x86, 0xdd];
        let ip_len = if v6 { 40 } else { 20 };
        let ip = &frame[14..14 + ip_len];
        let udp_len = usize::from(u16::from_be_bytes([
            frame[14 + ip_len + 4],
            frame[14 + ip_len + 5],
        ]));
        raw_rocev2(ip, v6, &frame[14 + ip_len..14 + ip_len + udp_len]).unwrap()
    }

    #[test]
    fn the_word_tables_compute_crc32() {
        let data: Vec<u8> = (0u8..=255).cycle().take(1000).collect();
        for n in [0usize, 3, 4, 5, 20, 24, 999] {
            let mut h = crc32fast::Hasher::new();
            h.update(&data[..n]);
            let want = h.finalize();
            assert_eq!(!register_update_words(!0, &data[..n]), want, "{n}");
            assert_eq!(!register_update(!0, &data[..n]), want, "{n}");
        }
    }

    #[test]
    fn lrh_standin_is_crc_of_eight_ff_bytes() {
        let mut h = crc32fast::Hasher::new();
        h.update(&[0xff; 8]);
        assert_eq!(h.finalize(), LRH_STANDIN_CRC);
        assert_eq!(!LRH_STANDIN_CRC, 0xdebb_20e3);
    }

    #[test]
    fn icrc_of_every_reference_vector_matches() {
        let v = vectors();
        assert_eq!(v.len(), 7);
        for (name, frame) in v {
            let (computed, carried) = raw(&frame);
            assert_eq!(computed, carried, "vector {name}");
            // and the wire order is least significant byte first
            assert_eq!(
                &frame[frame.len() - 4..],
                &computed.to_le_bytes()[..],
                "vector {name}"
            );
        }
    }

    #[test]
    fn masked_fields_do_not_change_the_icrc_but_ip_id_does() {
        let (_, a) = vectors().into_iter().next().unwrap();
        let good = raw(&a).0;
        for (at, v) in [
            (15usize, 0xc3u8),
            (22, 3),
            (24, 0x12),
            (40, 0xab),
            (41, 0xcd),
            (46, 0xc0),
        ] {
            let mut m = a.clone();
            m[at] = v; // TOS, TTL, IP checksum, UDP checksum, BTH FECN/BECN
            assert_eq!(raw(&m).0, good, "byte {at}");
        }
        let mut m = a.clone();
        m[19] ^= 1; // IP identification
        assert_ne!(raw(&m).0, good);
    }

    #[test]
    fn streaming_in_slices_equals_one_pass() {
        let (_, a) = vectors().into_iter().next().unwrap();
        let mut c = Icrc::rocev2_ipv4(&a[14..34], &a[34..42], &a[42..54]).unwrap();
        let covered = &a[54..a.len() - 4];
        for chunk in covered.chunks(7) {
            c.update(chunk);
        }
        assert_eq!(c.finish(), raw(&a).1);
    }

    #[test]
    fn rejects_datagrams_too_short_for_bth_and_icrc() {
        let (_, a) = vectors().into_iter().next().unwrap();
        assert_eq!(
            raw_rocev2(&a[14..34], false, &a[34..57]),
            Err(Error::Truncated)
        );
        assert_eq!(
            raw_rocev2(&a[14..30], false, &a[34..]),
            Err(Error::BadLength)
        );
    }
}
