//! The ICRC check of a RoCEv2 packet received on a UDP socket, which hands over no IP header.
//!
//! The IP and UDP headers are rebuilt from the addresses, ports and length (their CRC is kept for
//! the last source, destination and length: a stream's full packets share it). All the fields the
//! ICRC covers are known then but two of the IPv4 header: the identification, which every sender
//! chooses its own way (0 for a socket that never fragments, 0, 1, 2, ... within a UDP segmentation
//! offload run, a hash of the addresses for Linux rxe, which sent 0xd4c4, 0xd5c0, ... in the lab),
//! and the DF flag. The CRC is affine in those 17 bits, so a packet is good when its carried ICRC
//! differs from the one computed with identification 0 and DF by a combination of their 17
//! contributions: the difference must lie in the space they span, which depends on the packet's
//! length alone and is kept for the last few lengths seen. A packet whose ICRC is wrong anywhere
//! else passes by chance once in 2^15 (a NIC, which sees the header, never lets one pass). IPv6 has
//! no such field: its ICRC is checked exactly.

use core::net::{IpAddr, SocketAddr};

use super::IpRepr;
use super::icrc::{ICRC_LEN, Icrc, mask_bth, mask_ipv4, mask_ipv6, mask_udp};

/// Lengths whose spans are kept (ACKs, the host's messages, CM datagrams).
const LENGTHS: usize = 4;

/// A basis of a subspace of GF(2)^32, each vector with a highest bit set in no other, highest
/// first.
#[derive(Debug, Clone, Copy, Default)]
struct Span {
    v: [u32; 17],
    n: usize,
}

impl Span {
    fn reduce(&self, mut v: u32) -> u32 {
        for &b in &self.v[..self.n] {
            v = v.min(v ^ b);
        }
        v
    }

    fn add(&mut self, v: u32) {
        let v = self.reduce(v);
        if v != 0 && self.n < self.v.len() {
            self.v[self.n] = v;
            self.n += 1;
            self.v[..self.n].sort_unstable_by(|a, b| b.cmp(a));
        }
    }

    fn contains(&self, v: u32) -> bool {
        self.reduce(v) == 0
    }

    /// The differences the identification and DF make to the CRC of `len` bytes (8 bytes of
    /// 0xFF, the IPv4 header with identification at 4..6 and DF in byte 6, UDP, the rest).
    fn of_length(len: usize) -> Span {
        let crc = |at: usize, bit: u8| {
            let mut h = crc32fast::Hasher::new();
            let mut fed = 0;
            while fed < len {
                let mut chunk = [0u8; 64];
                let n = (len - fed).min(chunk.len());
                if (fed..fed + n).contains(&at) {
                    chunk[at - fed] = bit;
                }
                h.update(&chunk[..n]);
                fed += n;
            }
            h.finalize()
        };
        let zero = crc(usize::MAX, 0);
        let mut s = Span::default();
        for b in 0..8 {
            s.add(crc(12, 1 << b) ^ zero);
            s.add(crc(13, 1 << b) ^ zero);
        }
        s.add(crc(14, 0x40) ^ zero); // DF
        s
    }
}

/// Checks the ICRC of RoCEv2 packets received on a UDP socket (see the module's text).
#[derive(Debug, Clone, Default)]
pub struct SocketIcrcCheck {
    spans: [(usize, Span); LENGTHS],
    next: usize,
    /// The headers' CRC for the last source, destination and length seen: the same for every
    /// full-sized packet of a stream.
    head: Option<Head>,
}

/// The CRC (finalised) after the LRH stand-in and the masked IP and UDP headers a packet of
/// `len` bytes from BTH to ICRC had from `src` to `dst`, and those headers' length.
#[derive(Debug, Clone, Copy)]
struct Head {
    src: SocketAddr,
    dst: SocketAddr,
    len: usize,
    crc: u32,
    hl: usize,
}

impl Head {
    fn new(src: SocketAddr, dst: SocketAddr, len: usize) -> Option<Head> {
        let ip = match (src.ip(), dst.ip()) {
            (IpAddr::V4(s), IpAddr::V4(d)) => IpRepr::v4(s, d),
            (IpAddr::V6(s), IpAddr::V6(d)) => IpRepr::v6(s, d),
            _ => return None,
        };
        let mut hdr = [0u8; 48];
        let hl = ip
            .emit_udp_header(&mut hdr, src.port(), dst.port(), len)
            .ok()?;
        let ip_len = hl - 8;
        if src.is_ipv4() {
            mask_ipv4(&mut hdr[..ip_len]);
        } else {
            mask_ipv6(&mut hdr[..ip_len]);
        }
        mask_udp(&mut hdr[ip_len..hl]);
        let mut c = Icrc::new();
        c.update(&hdr[..hl]);
        let crc = c.finish();
        Some(Head {
            src,
            dst,
            len,
            crc,
            hl,
        })
    }
}

impl SocketIcrcCheck {
    /// A check with nothing cached.
    pub fn new() -> Self {
        Self::default()
    }

    /// Whether `ib` (BTH to ICRC) arriving from `src` at `dst` carries a good ICRC.
    pub fn ok(&mut self, src: SocketAddr, dst: SocketAddr, ib: &[u8]) -> bool {
        const BTH: usize = 12;
        if ib.len() < BTH + ICRC_LEN {
            return false;
        }
        let head = match self.head {
            Some(h) if (h.src, h.dst, h.len) == (src, dst, ib.len()) => h,
            _ => {
                let Some(h) = Head::new(src, dst, ib.len()) else {
                    return false;
                };
                *self.head.insert(h)
            }
        };
        let (bth, rest) = ib.split_at(BTH);
        let (covered, carried) = rest.split_at(rest.len() - ICRC_LEN);
        let mut masked = [0u8; BTH];
        masked.copy_from_slice(bth);
        mask_bth(&mut masked);
        let mut c = Icrc::resume(head.crc);
        c.update(&masked);
        c.update(covered);
        let carried = u32::from_le_bytes([carried[0], carried[1], carried[2], carried[3]]);
        let diff = c.finish() ^ carried;
        if diff == 0 {
            return true;
        }
        if !src.is_ipv4() {
            return false;
        }
        let len = 8 + head.hl + ib.len() - ICRC_LEN;
        let span = match self.spans.iter().find(|(l, _)| *l == len) {
            Some((_, s)) => *s,
            None => {
                let s = Span::of_length(len);
                self.spans[self.next] = (len, s);
                self.next = (self.next + 1) % LENGTHS;
                s
            }
        };
        span.contains(diff)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The RoCEv2 reference vectors (an independent implementation's bytes, IPv4 with an
    /// identification of 0x1234 and IPv6) pass as a socket sees them, twice in a row (the
    /// second from the kept header CRC), and fail with a bit flipped in the BTH or the payload.
    #[test]
    fn the_reference_vectors_pass_as_a_socket_sees_them() {
        let mut v6 = 0;
        let mut check = SocketIcrcCheck::new();
        for (name, frame) in crate::wire::icrc::tests::vectors() {
            let ip = &frame[14..];
            let (src, dst, hl) = if ip[0] >> 4 == 6 {
                v6 += 1;
                let a = |o: usize| IpAddr::from(<[u8; 16]>::try_from(&ip[o..o + 16]).unwrap());
                (a(8), a(24), 40)
            } else {
                let a = |o: usize| IpAddr::from(<[u8; 4]>::try_from(&ip[o..o + 4]).unwrap());
                (a(12), a(16), 20)
            };
            let port = |o: usize| u16::from_be_bytes([ip[hl + o], ip[hl + o + 1]]);
            let udp_len = usize::from(port(4));
            let (src, dst) = (SocketAddr::new(src, port(0)), SocketAddr::new(dst, port(2)));
            let ib = &ip[hl + 8..hl + udp_len];
            for pass in 0..2 {
                assert!(check.ok(src, dst, ib), "vector {name}, pass {pass}");
            }
            for at in [5, ib.len() - 5] {
                let mut bad = ib.to_vec();
                bad[at] ^= 0x01;
                assert!(
                    !check.ok(src, dst, &bad),
                    "vector {name}, bit flipped at {at}"
                );
            }
        }
        assert_eq!(v6, 1, "vector G is IPv6");
    }

    #[test]
    fn seventeen_bits_span_what_their_combinations_make() {
        let mut s = Span::default();
        for v in [1u32, 2, 3, 0x8000_0000, 0x8000_0001] {
            s.add(v);
        }
        assert_eq!(s.n, 3);
        assert!(s.contains(0x8000_0003) && s.contains(0) && !s.contains(4));
        // the identification's and DF's contributions are independent: 2^17 differences
        assert_eq!(Span::of_length(60).n, 17);
    }
}
