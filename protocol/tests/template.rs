//! The header template (headers built once per message shape, PSN, AckReq and IPv4
//! identification patched per packet) against the plain emit path, byte for byte, and against
//! the independently produced reference vectors.

mod common;

use std::net::{Ipv4Addr, Ipv6Addr};

use proptest::prelude::*;
use rdmacam_protocol::wire::opcode::Opcode;
use rdmacam_protocol::wire::roce::MAX_HEADER_LEN;
use rdmacam_protocol::wire::{
    BthRepr, HeaderTemplate, IbRepr, IpRepr, PacketFields, RethRepr, RoceV2Repr,
};

/// Headers and trailer through a template built from `shape` (whose PSN, AckReq,
/// identification, RETH and immediate data do not matter), for the packet with `f`.
fn by_template(shape: &RoceV2Repr, f: PacketFields, payload: &[u8]) -> Vec<u8> {
    let t = HeaderTemplate::new(shape).unwrap();
    let (mut h, mut tr) = ([0u8; MAX_HEADER_LEN], [0u8; 7]);
    let (hl, tl) = t
        .emit(
            &f,
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
        let v = common::vector_ip(name);
        let (repr, payload) = RoceV2Repr::parse(&v).unwrap();
        let ident = match repr.ip {
            IpRepr::V4 { .. } => u16::from_be_bytes([v[4], v[5]]),
            IpRepr::V6 { .. } => 0,
        };
        let f = fields(&repr, ident);
        let mut shape = repr;
        shape.ib.reth = shape.ib.reth.map(|_| RethRepr::default());
        assert_eq!(by_template(&shape, f, &v[payload]), v, "vector {name}");
    }
}

/// The per-packet fields of `repr`.
fn fields(repr: &RoceV2Repr, ident: u16) -> PacketFields {
    PacketFields {
        psn: repr.ib.bth.psn,
        ack_req: repr.ib.bth.ack_req,
        ident,
        reth: repr.ib.reth.unwrap_or_default(),
        imm: repr.ib.immdt.unwrap_or(0),
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
            Just(Opcode::RC_WRITE_ONLY),
            Just(Opcode::RC_WRITE_ONLY_IMM),
            Just(Opcode::RC_WRITE_LAST_IMM),
            Just(Opcode::RC_SEND_ONLY),
            Just(Opcode::RC_SEND_ONLY_IMM),
        ],
        solicited: bool,
        imm: u32,
        dma_len: u32,
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
        bth.solicited = solicited;
        let mut ib = IbRepr::new(bth);
        let h = opcode.headers();
        if h.reth {
            ib.reth = Some(RethRepr { va, rkey, dma_len });
        }
        if h.immdt {
            ib.immdt = Some(imm);
        }
        let mut ip = ip;
        if let IpRepr::V4 { ident: i, .. } = &mut ip {
            *i = ident;
        }
        let repr = RoceV2Repr { ip, src_port, dst_port: 4791, ib, payload_len: payload.len() };
        // the template is built from a packet of another PSN, AckReq, identification, RETH and
        // immediate data
        let mut shape = repr;
        shape.ib.bth.psn = psn ^ 0x5a5a5a;
        shape.ib.bth.ack_req = !ack_req;
        if let IpRepr::V4 { ident: i, .. } = &mut shape.ip {
            *i = !ident;
        }
        shape.ib.reth = shape.ib.reth.map(|r| RethRepr { va: !r.va, rkey: !r.rkey, dma_len: 7 });
        shape.ib.immdt = shape.ib.immdt.map(|i| !i);
        prop_assert_eq!(
            by_template(&shape, fields(&repr, ident), &payload),
            plain(&repr, &payload)
        );
    }
}

/// A requester's packets, whichever of its paths built them (the MIDDLE fast path, the
/// template of any other shape, the first packet of a shape), for a run of messages.
fn requester_packets(
    path: rdmacam_protocol::rc::Path,
    pmtu: rdmacam_protocol::wire::pmtu::Pmtu,
    start_psn: u32,
    messages: &[(rdmacam_protocol::wire::pmtu::MessageKind, u32, bool)],
    idents: &[u16],
    frame: &[u8],
) -> Vec<(Vec<u8>, usize)> {
    use rdmacam_protocol::rc::{Instant, PayloadRef, Requester, RequesterConfig, WorkRequest};
    let mut cfg = RequesterConfig::new(0x22, 0x11, start_psn, path);
    cfg.pmtu = pmtu;
    let mut rq: Requester<16, 16> = Requester::new(cfg);
    for (i, &(kind, len, solicited)) in messages.iter().enumerate() {
        rq.post(WorkRequest {
            wr_id: i as u64,
            kind,
            payload: PayloadRef {
                handle: 0,
                offset: i as u64 * 7,
            },
            len,
            remote_va: 0x7f00_0000_0000 + i as u64 * 0x1_0000,
            rkey: 0x1234 + i as u32,
            imm: 0xabcd_0000 + i as u32,
            solicited,
        })
        .unwrap();
    }
    let bufs = [frame];
    let mut out = Vec::new();
    let mut k = 0;
    let mut last_sent: Option<u32> = None;
    loop {
        rq.set_ipv4_ident(idents[k % idents.len()]);
        let Some(p) = rq.poll_transmit(Instant::ZERO, &bufs[..]) else {
            // acknowledge everything sent so the window opens, as a host does
            let Some(last) = last_sent.take() else {
                break; // nothing sent since the last ACK: all done
            };
            let mut ack = [0u8; 20];
            ack[0] = 0x11;
            ack[2..4].copy_from_slice(&[0xff, 0xff]);
            ack[5..8].copy_from_slice(&0x22u32.to_be_bytes()[1..]);
            ack[9..12].copy_from_slice(&last.to_be_bytes()[1..]);
            ack[12] = 0x1f;
            rq.handle_ib(Instant::ZERO, &ack);
            while rq.poll_completion().is_some() {}
            continue;
        };
        let payload = frame
            .get(p.payload.offset as usize..p.payload.offset as usize + p.payload_len as usize)
            .unwrap();
        last_sent = Some(p.psn);
        out.push((
            [p.header(), payload, p.trailer()].concat(),
            p.payload.offset as usize,
        ));
        k += 1;
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn every_requester_packet_is_the_plain_paths_bytes(
        v6: bool,
        pmtu in prop_oneof![
            Just(rdmacam_protocol::wire::pmtu::Pmtu::Mtu256),
            Just(rdmacam_protocol::wire::pmtu::Pmtu::Mtu1024),
            Just(rdmacam_protocol::wire::pmtu::Pmtu::Mtu4096),
        ],
        start_psn in 0u32..0x100_0000,
        messages in proptest::collection::vec(
            (
                prop_oneof![
                    Just(rdmacam_protocol::wire::pmtu::MessageKind::Write),
                    Just(rdmacam_protocol::wire::pmtu::MessageKind::WriteImm),
                    Just(rdmacam_protocol::wire::pmtu::MessageKind::Send),
                    Just(rdmacam_protocol::wire::pmtu::MessageKind::SendImm),
                ],
                0u32..20_000,
                any::<bool>(),
            ),
            1..8,
        ),
        idents in proptest::collection::vec(any::<u16>(), 1..5),
    ) {
        use std::net::IpAddr;
        let path = if v6 {
            rdmacam_protocol::rc::Path::new(
                IpAddr::V6(Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 2)),
                IpAddr::V6(Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 1)),
            )
        } else {
            rdmacam_protocol::rc::Path::new(
                IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)),
                IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)),
            )
        };
        let frame: Vec<u8> = (0..200_000u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8).collect();
        let packets = requester_packets(path, pmtu, start_psn, &messages, &idents, &frame);
        let expected: u32 = messages
            .iter()
            .map(|m| m.1.div_ceil(pmtu.bytes()).max(1))
            .sum();
        prop_assert_eq!(packets.len() as u32, expected);
        let mut psn = start_psn;
        let mut at = Vec::new(); // (message, packet index) of each packet, in order
        for (i, m) in messages.iter().enumerate() {
            for j in 0..m.1.div_ceil(pmtu.bytes()).max(1) {
                at.push((i, j));
            }
        }
        for (k, (bytes, offset)) in packets.iter().enumerate() {
            // parsed back (the ICRC checked), then written again field by field
            let (repr, range) = RoceV2Repr::parse(bytes).unwrap();
            prop_assert_eq!(repr.ib.bth.psn, psn);
            let (i, j) = at[k];
            prop_assert_eq!(*offset as u64, i as u64 * 7 + u64::from(j * pmtu.bytes()));
            if let IpRepr::V4 { ident, .. } = repr.ip {
                prop_assert_eq!(ident, idents[k % idents.len()]);
            }
            if let Some(r) = repr.ib.reth {
                prop_assert_eq!((r.va, r.rkey, r.dma_len), (0x7f00_0000_0000 + i as u64 * 0x1_0000, 0x1234 + i as u32, messages[i].1));
            }
            prop_assert_eq!(plain(&repr, &bytes[range]), bytes.clone());
            psn = (psn + 1) & 0xff_ffff;
        }
    }
}
