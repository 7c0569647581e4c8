//! Every parser meets random and mangled bytes: it returns an error or a value, never panics.

mod common;

use proptest::prelude::*;
use rdmacam_protocol::wire::{
    self, AethRepr, BthRepr, DethRepr, EthernetRepr, IbRepr, RethRepr, RoceV1Repr, RoceV2Repr, bth,
    ethernet, icrc, immdt, ipv4, ipv6, udp,
};

fn poke_all(bytes: &[u8]) {
    if let Ok(f) = ethernet::Frame::new_checked(bytes) {
        let _ = EthernetRepr::parse(&f);
        let _ = (f.vlan(), f.ethertype(), f.payload().len());
    }
    if let Ok(p) = ipv4::Packet::new_checked(bytes) {
        let _ = ipv4::Ipv4Repr::parse(&p);
        let _ = (p.payload().len(), p.verify_checksum(), p.header().len());
    }
    if let Ok(p) = ipv6::Packet::new_checked(bytes) {
        let _ = ipv6::Ipv6Repr::parse(&p);
        let _ = p.payload().len();
    }
    if let Ok(p) = udp::Packet::new_checked(bytes) {
        let _ = udp::UdpRepr::parse(&p);
        let _ = p.payload().len();
    }
    if let Ok(p) = bth::Packet::new_checked(bytes) {
        let _ = BthRepr::parse(&p);
    }
    let _ = RethRepr::parse(bytes);
    let _ = AethRepr::parse(bytes);
    let _ = DethRepr::parse(bytes);
    let _ = immdt::parse(bytes);
    let _ = IbRepr::parse(bytes);
    let _ = RoceV2Repr::parse(bytes);
    let _ = RoceV1Repr::parse(bytes);
    let split = bytes.len().min(20);
    let _ = icrc::raw_rocev2(&bytes[..split], false, &bytes[split..]);
    let split6 = bytes.len().min(40);
    let _ = icrc::raw_rocev2(&bytes[..split6], true, &bytes[split6..]);
    let _ = icrc::raw_rocev1(&bytes[..split6], &bytes[split6..]);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(4096))]

    #[test]
    fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
        poke_all(&bytes);
    }

    // Start from a valid packet and damage it: this reaches deep into each parser, where random
    // bytes rarely get.
    #[test]
    fn mangled_valid_packets_never_panic(
        edits in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..6),
        cut in any::<prop::sample::Index>(),
    ) {
        // vector A, from the IP header on
        let mut p = common::vector_ip('A');
        for (i, v) in edits {
            let at = i.index(p.len());
            p[at] = v;
        }
        poke_all(&p);
        let n = cut.index(p.len());
        poke_all(&p[..n]);
        // a damaged packet never parses as valid unless the edits left the covered bytes alone
        if let Ok((repr, range)) = RoceV2Repr::parse(&p) {
            prop_assert!(range.end <= p.len());
            prop_assert_eq!(repr.payload_len, range.len());
        }
    }

    #[test]
    fn emit_then_parse_round_trips(
        psn in 0u32..0x100_0000, qp in 1u32..0x100_0000, len in 0usize..300,
        ident in any::<u16>(), ack_req in any::<bool>(),
    ) {
        let mut b = BthRepr::new(wire::Opcode::RC_SEND_ONLY, qp, psn);
        b.ack_req = ack_req;
        let repr = RoceV2Repr {
            ip: wire::IpRepr::V4 {
                src: "10.0.0.2".parse().unwrap(), dst: "10.0.0.1".parse().unwrap(),
                dscp: 26, ecn: 2, ttl: 64, ident, dont_frag: true,
            },
            src_port: wire::roce::udp_source_port(qp, 7),
            dst_port: wire::roce::ROCEV2_PORT,
            ib: IbRepr::new(b),
            payload_len: len,
        };
        let payload: Vec<u8> = (0..len).map(|i| i as u8).collect();
        let mut buf = vec![0u8; repr.buffer_len()];
        repr.emit(&mut buf, &payload).unwrap();
        let (back, range) = RoceV2Repr::parse(&buf).unwrap();
        prop_assert_eq!(&buf[range], &payload[..]);
        prop_assert_eq!(back.ib.bth.psn, psn);
        prop_assert_eq!(back.ib.bth.pad_count as usize, wire::roce::pad_len(len));
    }
}
