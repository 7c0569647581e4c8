//! The requester against the lab's bytes: the packets it builds carry the same InfiniBand
//! headers and payload as the lab's independent builder (`shared/lab/rxe/tools/roce.py`) sent to
//! rxe, and it reacts to rxe's own ACK and NAK packets as IBTA says.

use std::net::{IpAddr, Ipv4Addr};
use std::path::Path as FsPath;

use pcap_file::pcap::PcapReader;
use rdmacam_protocol::rc::{
    Instant, Path, PayloadRef, Requester, RequesterConfig, WcStatus, WorkRequest, split_rocev2,
};
use rdmacam_protocol::wire::pmtu::Pmtu;

fn frames() -> Vec<Vec<u8>> {
    let p = FsPath::new(env!("CARGO_MANIFEST_DIR")).join("../testdata/rxe-6.12-handbuilt.pcap");
    let mut r = PcapReader::new(std::fs::File::open(p).unwrap()).unwrap();
    let mut v = Vec::new();
    while let Some(p) = r.next_packet() {
        v.push(p.unwrap().data[14..].to_vec());
    }
    v
}

/// BTH through payload (the part that does not depend on IP ID or UDP port): bytes 28..len-4.
fn ib_without_icrc(ip: &[u8]) -> &[u8] {
    &ip[28..ip.len() - 4]
}

fn requester(remote_qpn: u32) -> Requester<8, 8> {
    let mut cfg = RequesterConfig::new(
        0xc4d,
        remote_qpn,
        0xf0,
        Path::new(
            IpAddr::V4(Ipv4Addr::new(198, 18, 0, 2)),
            IpAddr::V4(Ipv4Addr::new(198, 18, 0, 1)),
        ),
    );
    cfg.pmtu = Pmtu::Mtu1024;
    Requester::new(cfg)
}

fn write_3000(va: u64, rkey: u32) -> WorkRequest {
    WorkRequest::write(7, PayloadRef::new(0, 0), 3000, va, rkey)
}

fn reth(ip: &[u8]) -> (u64, u32) {
    let r = &ip[40..56];
    (
        u64::from_be_bytes(r[..8].try_into().unwrap()),
        u32::from_be_bytes(r[8..12].try_into().unwrap()),
    )
}

// Lab scenario rc_write_first_middle_last: packets 3-5 went to QP 0x12, rxe ACKed PSN 0xf2
// (packet 6).
#[test]
fn first_middle_last_match_the_lab_and_rxe_ack_completes() {
    let f = frames();
    let (sent, ack) = (&f[2..5], &f[5]);
    let buffer: Vec<u8> = sent
        .iter()
        .flat_map(|p| ib_without_icrc(p)[..].to_vec())
        .collect();
    // payload = the three packets' payloads in order (FIRST has a 16-byte RETH after the BTH)
    let payload: Vec<u8> = [
        &sent[0][28 + 28..sent[0].len() - 4],
        &sent[1][40..sent[1].len() - 4],
        &sent[2][40..sent[2].len() - 4],
    ]
    .concat();
    assert_eq!(payload.len(), 3000, "{}", buffer.len());
    let (va, rkey) = reth(&sent[0]);
    let mut rq = requester(0x12);
    rq.post(write_3000(va, rkey)).unwrap();
    let bufs = [payload];
    for lab in sent {
        let pkt = rq.poll_transmit(Instant::ZERO, &bufs[..]).unwrap();
        let mut ours = vec![0; pkt.len()];
        pkt.copy_to(&bufs[..], &mut ours).unwrap();
        assert_eq!(ib_without_icrc(&ours), ib_without_icrc(lab));
    }
    assert!(rq.poll_transmit(Instant::ZERO, &bufs[..]).is_none());
    let (_, _, _, ib) = split_rocev2(ack).expect("rxe's ICRC is good");
    assert!(rq.handle_ib(Instant::from_micros(10), ib));
    // rxe's ACK breaks no rule the camera judges: its MSN counts the one message it completes
    assert_eq!(rq.take_violation(), None);
    let c = rq.poll_completion().unwrap();
    assert_eq!((c.wr_id, c.status), (7, WcStatus::Success));
}

// Lab scenario rc_lost_middle_go_back_n: FIRST (62) and LAST (63) reached rxe, which NAKed PSN
// 0xf1 (64); the lab resent MIDDLE (65) and LAST (66); rxe ACKed 0xf2 (67).
#[test]
fn rxe_sequence_nak_makes_the_requester_resend_from_mid_message() {
    let f = frames();
    let (first, last, nak, middle, last2, ack) = (&f[61], &f[62], &f[63], &f[64], &f[65], &f[66]);
    let payload: Vec<u8> = [
        &first[56..first.len() - 4],
        &middle[40..middle.len() - 4],
        &last[40..last.len() - 4],
    ]
    .concat();
    let (va, rkey) = reth(first);
    let mut rq = requester(0x2c);
    rq.post(write_3000(va, rkey)).unwrap();
    let bufs = [payload];
    let mut sent = Vec::new();
    while let Some(p) = rq.poll_transmit(Instant::ZERO, &bufs[..]) {
        let mut b = vec![0; p.len()];
        p.copy_to(&bufs[..], &mut b).unwrap();
        sent.push(b);
    }
    assert_eq!(sent.len(), 3);
    let (_, _, _, ib) = split_rocev2(nak).unwrap();
    rq.handle_ib(Instant::from_micros(5), ib);
    assert_eq!(rq.counters().seq_naks, 1);
    // a NAK in the middle of the message: MSN 0, nothing completed yet
    assert_eq!(rq.take_violation(), None);
    // go back to 0xf1: MIDDLE then LAST again, byte-identical (IB part) to the lab's resend
    for lab in [middle, last2] {
        let p = rq
            .poll_transmit(Instant::from_micros(6), &bufs[..])
            .unwrap();
        assert!(p.retransmission);
        let mut b = vec![0; p.len()];
        p.copy_to(&bufs[..], &mut b).unwrap();
        assert_eq!(ib_without_icrc(&b), ib_without_icrc(lab));
    }
    let (_, _, _, ib) = split_rocev2(ack).unwrap();
    rq.handle_ib(Instant::from_micros(9), ib);
    assert_eq!(rq.take_violation(), None);
    assert_eq!(rq.poll_completion().unwrap().status, WcStatus::Success);
    assert_eq!(rq.counters().retransmitted_packets, 2);
}

// The same NAK when it names no packet in flight (nothing posted yet; then after its request
// completed) is dropped and changes nothing, as rxe's completer drops an ACK with no request
// waiting: one forged NAK must not end a stream (issue 46).
#[test]
fn a_nak_that_names_nothing_outstanding_is_dropped() {
    let f = frames();
    let (sent, nak) = (&f[42], &f[43]);
    let (va, rkey) = reth(sent);
    let (_, _, _, nak_ib) = split_rocev2(nak).unwrap();
    let mut rq = requester(0x24);
    rq.handle_ib(Instant::ZERO, nak_ib);
    assert!(
        !rq.is_error(),
        "a NAK before anything was sent failed the QP"
    );
    assert_eq!(rq.counters().stale_acks, 1);
    // and named: a NAK for a PSN the camera never sent
    let v = rq.take_violation().expect("named");
    assert_eq!(v.kind, rdmacam_protocol::judge::ViolationKind::AckUnsent);
    assert!(v.to_string().contains("never sent"), "{v}");
    assert!(rq.poll_completion().is_none());
    // it still answers the packet it names once that packet is in flight
    let payload = sent[56..sent.len() - 4].to_vec();
    rq.post(WorkRequest {
        len: payload.len() as u32,
        ..write_3000(va, rkey)
    })
    .unwrap();
    let bufs = [payload];
    rq.poll_transmit(Instant::ZERO, &bufs[..]).unwrap();
    rq.handle_ib(Instant::from_micros(5), nak_ib);
    assert!(rq.is_error());
}

// Lab scenario wrong_rkey_nak: rxe answered NAK remote access error (packet 44).
#[test]
fn rxe_remote_access_nak_fails_the_request() {
    let f = frames();
    let (sent, nak) = (&f[42], &f[43]);
    let (va, rkey) = reth(sent);
    let mut rq = requester(0x24);
    let payload = sent[56..sent.len() - 4].to_vec();
    rq.post(WorkRequest {
        len: payload.len() as u32,
        ..write_3000(va, rkey)
    })
    .unwrap();
    let bufs = [payload];
    let p = rq.poll_transmit(Instant::ZERO, &bufs[..]).unwrap();
    let mut b = vec![0; p.len()];
    p.copy_to(&bufs[..], &mut b).unwrap();
    assert_eq!(ib_without_icrc(&b)[..12], ib_without_icrc(sent)[..12]);
    let (_, _, _, ib) = split_rocev2(nak).unwrap();
    rq.handle_ib(Instant::from_micros(5), ib);
    assert_eq!(
        rq.poll_completion().unwrap().status,
        WcStatus::RemoteAccessError
    );
    assert!(rq.is_error());
}

// Every ACK and NAK rxe sent in the lab passes the camera's header checks (no false alarm on a
// real RDMA stack's bytes); each field spoilt in one of them is named as its kind.
#[test]
fn rxe_acks_pass_the_header_checks_and_spoilt_fields_are_named() {
    use rdmacam_protocol::judge::{ViolationKind as K, check_header};
    let acks: Vec<Vec<u8>> = frames()
        .into_iter()
        .filter_map(|ip| {
            let (_, _, _, ib) = split_rocev2(&ip).ok()?;
            (ib[0] == 0x11).then(|| ib.to_vec())
        })
        .collect();
    assert!(acks.len() >= 10, "{}", acks.len());
    for ib in &acks {
        let qpn = u32::from_be_bytes([0, ib[5], ib[6], ib[7]]);
        assert_eq!(check_header(ib, qpn), None, "{ib:02x?}");
    }
    let ib = &acks[0];
    let qpn = u32::from_be_bytes([0, ib[5], ib[6], ib[7]]);
    let spoilt = |at: usize, v: u8| {
        let mut b = ib.clone();
        b[at] = v;
        check_header(&b, qpn).map(|v| (v.kind, v.got))
    };
    assert_eq!(spoilt(2, 0x12), Some((K::PKey, 0x12ff)));
    assert_eq!(spoilt(1, 0x01), Some((K::TVer, 1)));
    assert_eq!(
        spoilt(0, 0x0c),
        Some((K::Opcode, 0x0c)),
        "RDMA READ request"
    );
    assert_eq!(
        spoilt(12, 0x40),
        Some((K::Syndrome, 0x40)),
        "reserved syndrome"
    );
    assert_eq!(
        spoilt(12, 0x65),
        Some((K::Syndrome, 0x65)),
        "reserved NAK code"
    );
    assert_eq!(
        check_header(ib, qpn ^ 1).map(|v| (v.kind, v.got)),
        Some((K::DestQp, qpn))
    );
    // 0x7fff is the default partition too (a limited member; rxe matches it with 0xffff)
    assert_eq!(spoilt(2, 0x7f), None);
}
