//! IPv4 identification for UDP segmentation offload: Linux numbers the segments of one GSO send
//! 0, 1, 2, ... (reference/rxe-lab.md: rxe accepted ICRCs computed with those identifications,
//! and only those), and the ICRC covers the identification. A requester told the segment's
//! index builds a packet whose ICRC matches; a packet built for one index and resealed for
//! another is byte-identical to one built for that index directly. These check the code against
//! itself (its own ICRC); the independent judge is Linux rxe, which takes the camera's GSO
//! segments in Soft-RoCE scenarios 1 and 3 (`hil/vm/run-scenarios`) only if each ICRC matches
//! the identification the kernel wrote.

use std::net::{IpAddr, Ipv4Addr};

use rdmacam_protocol::rc::{
    Instant, Path, PayloadRef, Requester, RequesterConfig, TxPacket, WorkRequest, split_rocev2,
};
use rdmacam_protocol::wire::pmtu::Pmtu;

fn requester() -> Requester<4, 4> {
    let mut cfg = RequesterConfig::new(
        0x22,
        0x11,
        0x100,
        Path::new(
            IpAddr::V4(Ipv4Addr::new(192, 168, 10, 2)),
            IpAddr::V4(Ipv4Addr::new(192, 168, 10, 1)),
        ),
    );
    cfg.pmtu = Pmtu::Mtu256;
    let mut rq = Requester::new(cfg);
    // FIRST, MIDDLE, LAST (188 bytes, 0 pad)
    rq.post(WorkRequest::write(
        1,
        PayloadRef::new(0, 0),
        700,
        0x7f00_0000_1000,
        0x1234,
    ))
    .unwrap();
    rq
}

fn bytes(p: &TxPacket, mem: &[Vec<u8>]) -> Vec<u8> {
    let mut b = vec![0u8; p.len()];
    p.copy_to(mem, &mut b).unwrap();
    b
}

#[test]
fn each_segment_carries_its_index_and_an_icrc_that_covers_it() {
    let mem = vec![(0..700u32).map(|i| (i * 7) as u8).collect::<Vec<u8>>()];
    let mut rq = requester();
    let mut direct = Vec::new();
    for i in 0..3u16 {
        rq.set_ipv4_ident(i);
        direct.push(rq.poll_transmit(Instant::ZERO, &mem[..]).unwrap());
    }
    for (i, p) in direct.iter().enumerate() {
        let b = bytes(p, &mem);
        assert_eq!(u16::from_be_bytes([b[4], b[5]]), i as u16, "identification");
        assert_eq!(
            rdmacam_protocol::wire::ipv4::checksum(&b[..20]),
            0,
            "header checksum"
        );
        split_rocev2(&b).expect("the ICRC covers this identification");
        // the same bytes with the identification the kernel would not write: ICRC fails
        let mut wrong = b.clone();
        wrong[5] ^= 0x40;
        let sum = {
            wrong[10..12].copy_from_slice(&[0, 0]);
            rdmacam_protocol::wire::ipv4::checksum(&wrong[..20])
        };
        wrong[10..12].copy_from_slice(&sum.to_be_bytes());
        assert!(
            split_rocev2(&wrong).is_err(),
            "segment {i} with another identification"
        );
    }
    // built for index 0, resealed for i: the same bytes as built for i
    let mut rq = requester();
    for (i, want) in direct.iter().enumerate() {
        rq.set_ipv4_ident(0);
        let mut p = rq.poll_transmit(Instant::ZERO, &mem[..]).unwrap();
        let payload = &mem[0][p.payload.offset as usize..][..p.payload_len as usize];
        p.set_ipv4_ident(i as u16, payload).unwrap();
        assert_eq!(bytes(&p, &mem), bytes(want, &mem), "segment {i}");
        assert_eq!(p.udp_len(), bytes(want, &mem).len() - 28);
    }
}
