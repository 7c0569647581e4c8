//! The header template (headers built once per message shape, PSN, AckReq and IPv4
//! identification patched per packet) against the plain emit path, byte for byte, and against
//! the independently produced reference vectors.

use std::net::{Ipv4Addr, Ipv6Addr};

use proptest::prelude::*;
use rdmacam_protocol::wire::opcode::Opcode;
use rdmacam_protocol::wire::roce::MAX_HEADER_LEN;
use rdmacam_protocol::wire::{BthRepr, HeaderTemplate, IbRepr, IpRepr, RethRepr, RoceV2Repr};

fn vector(name: char) -> Vec<u8> {
    let line = include_str!("../../testdata/rocev2-vectors.txt")
        .lines()
        .find(|l| l.starts_with(name))
        .unwrap();
    let frame: Vec<u8> = line[2..]
        .split_whitespace()
        .map(|b| u8::from_str_radix(b, 16).unwrap())
        .collect();
    frame[14..].to_vec()
}

/// Headers and trailer through a template built from `shape` (whose PSN, AckReq and
/// identification do not matter), for the packet with `psn`, `ack_req` and `ident`.
fn by_template(shape: &RoceV2Repr, psn: u32, ack_req: bool, ident: u16, payload: &[u8]) -> Vec<u8> {
    let t = HeaderTemplate::new(shape).unwrap();
    let (mut h, mut tr) = ([0u8; MAX_HEADER_LEN], [0u8; 7]);
    let (hl, tl) = t
        .emit(
            psn,
            ack_req,
            ident,
            // the payload in two pieces, as frame memory may hand it over
            [&payload[..payload.len() / 2], &payload[payload.len() / 2..]],
            &mut h,
            &mut tr,
        )
        .unwrap();
    [&h[..hl], payload, &tr[..tl]].concat()
}

/// The same packet through the plain path.
fn plain(repr: &RoceV2Repr, payload: &[u8]) -> Vec<u8> {
    let mut buf = vec![0u8; repr.header_len() + payload.len() + repr.trailer_len()];
    let n = repr.emit(&mut buf, payload).unwrap();
    buf.truncate(n);
    buf
}

#[test]
fn the_reference_vectors_come_out_of_a_template() {
    // A: RDMA WRITE ONLY over IPv4 (RETH, 64-byte payload); G: the same over IPv6
    for name in ['A', 'G'] {
        let v = vector(name);
        let (repr, payload) = RoceV2Repr::parse(&v).unwrap();
        let ident = match repr.ip {
            IpRepr::V4 { .. } => u16::from_be_bytes([v[4], v[5]]),
            IpRepr::V6 { .. } => 0,
        };
        let (psn, ack_req) = (repr.ib.bth.psn, repr.ib.bth.ack_req);
        assert_eq!(
            by_template(&repr, psn, ack_req, ident, &v[payload]),
            v,
            "vector {name}"
        );
    }
}

fn ip() -> impl Strategy<Value = IpRepr> {
    prop_oneof![
        (
            any::<[u8; 4]>(),
            any::<[u8; 4]>(),
            0u8..64,
            0u8..4,
            any::<u8>(),
            any::<bool>()
        )
            .prop_map(|(s, d, dscp, ecn, ttl, dont_frag)| IpRepr::V4 {
                src: Ipv4Addr::from(s),
                dst: Ipv4Addr::from(d),
                dscp,
                ecn,
                ttl,
                ident: 0,
                dont_frag,
            }),
        (
            any::<[u8; 16]>(),
            any::<[u8; 16]>(),
            any::<u8>(),
            0u32..0x10_0000,
            any::<u8>()
        )
            .prop_map(|(s, d, traffic_class, flow_label, hop_limit)| IpRepr::V6 {
                src: Ipv6Addr::from(s),
                dst: Ipv6Addr::from(d),
                traffic_class,
                flow_label,
                hop_limit,
            }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn a_template_writes_the_plain_paths_bytes(
        ip in ip(),
        opcode in prop_oneof![
            Just(Opcode::RC_WRITE_MIDDLE),
            Just(Opcode::RC_SEND_MIDDLE),
            Just(Opcode::RC_WRITE_LAST),
            Just(Opcode::RC_WRITE_FIRST),
        ],
        src_port in 0xc000u16..,
        dest_qp in 0u32..0x100_0000,
        psn in 0u32..0x100_0000,
        ack_req: bool,
        ident: u16,
        va: u64,
        rkey: u32,
        payload in proptest::collection::vec(any::<u8>(), 0..600),
    ) {
        let mut bth = BthRepr::new(opcode, dest_qp, psn);
        bth.ack_req = ack_req;
        let mut ib = IbRepr::new(bth);
        if opcode == Opcode::RC_WRITE_FIRST {
            ib.reth = Some(RethRepr { va, rkey, dma_len: 1 << 20 });
        }
        let mut ip = ip;
        if let IpRepr::V4 { ident: i, .. } = &mut ip {
            *i = ident;
        }
        let repr = RoceV2Repr { ip, src_port, dst_port: 4791, ib, payload_len: payload.len() };
        // the template is built from a packet of another PSN, AckReq and identification
        let mut shape = repr;
        shape.ib.bth.psn = psn ^ 0x5a5a5a;
        shape.ib.bth.ack_req = !ack_req;
        if let IpRepr::V4 { ident: i, .. } = &mut shape.ip {
            *i = !ident;
        }
        prop_assert_eq!(
            by_template(&shape, psn, ack_req, ident, &payload),
            plain(&repr, &payload)
        );
    }
}
