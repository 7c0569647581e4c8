//! The RC state machines on the reference vectors of reference/rocev2.md §2.4 (c): a host-side
//! responder takes vectors A (WRITE ONLY), B (WRITE ONLY with immediate) and C (SEND ONLY with
//! immediate); a camera-side requester takes vectors D (ACK), E (sequence NAK) and F (CNP).

mod common;

use std::net::{IpAddr, Ipv4Addr};

use rdmacam_protocol::rc::rtt::MIN_RTO;
use rdmacam_protocol::rc::{
    Instant, MemoryRegion, Path, PayloadRef, Placement, RecvOpcode, Requester, RequesterConfig,
    Responder, ResponderConfig, WcStatus, WorkRequest, split_rocev2,
};
use rdmacam_protocol::wire::{IbRepr, aeth::AethSyndrome};

const CAM: Ipv4Addr = Ipv4Addr::new(192, 168, 10, 2);
const HOST: Ipv4Addr = Ipv4Addr::new(192, 168, 10, 1);

/// The host QP the vectors address (QPN 0x11, the camera's 0x22), expecting `psn`, with the
/// region vectors A and B write into (rkey 0x1234).
fn host_responder(psn: u32) -> Responder<4, 2, 8> {
    let cfg = ResponderConfig::new(
        0x11,
        0x22,
        psn,
        Path::new(IpAddr::V4(HOST), IpAddr::V4(CAM)),
    );
    let mut r = Responder::new(cfg);
    r.register(MemoryRegion {
        rkey: 0x1234,
        va: 0x7f00_0000_0000,
        len: 1 << 20,
    });
    r
}

#[test]
fn host_responder_places_vectors_a_b_c_and_acks() {
    let mut r = host_responder(0x100);
    let a = common::vector_ip('A');
    let (src, dst, ecn, ib) = split_rocev2(&a).unwrap();
    let p = r.handle_ib(Instant::ZERO, src, dst, ecn, ib);
    let want: Vec<u8> = (0..64).collect();
    assert_eq!(
        p,
        Some(Placement::Write {
            rkey: 0x1234,
            va: 0x7f00_0000_1000,
            data: &want[..]
        })
    );
    let mut buf = [0u8; 128];
    let n = r.poll_transmit(&mut buf).unwrap();
    let (ack, _) = IbRepr::parse(&buf[28..n]).unwrap();
    assert_eq!(ack.bth.psn, 0x100);
    assert_eq!(ack.bth.dest_qp, 0x22);
    assert!(matches!(
        ack.aeth.unwrap().syndrome,
        AethSyndrome::Ack { .. }
    ));

    // B: WRITE ONLY with immediate needs a posted receive: none yet -> RNR NAK, nothing placed
    let b = common::vector_ip('B');
    let (src, dst, ecn, ib) = split_rocev2(&b).unwrap();
    assert_eq!(r.handle_ib(Instant::ZERO, src, dst, ecn, ib), None);
    let n = r.poll_transmit(&mut buf).unwrap();
    let (rnr, _) = IbRepr::parse(&buf[28..n]).unwrap();
    assert!(matches!(
        rnr.aeth.unwrap().syndrome,
        AethSyndrome::RnrNak { timer: 12 }
    ));
    assert_eq!(rnr.bth.psn, 0x101);
    // with two receives posted, B and C complete with their immediates
    assert!(r.post_recv(1, 4096) && r.post_recv(2, 4096));
    let p = r.handle_ib(Instant::ZERO, src, dst, ecn, ib);
    assert!(matches!(
        p,
        Some(Placement::Write {
            data: b"camera-frame!",
            ..
        })
    ));
    let c = r.poll_completion().unwrap();
    assert_eq!(
        (c.wr_id, c.opcode, c.byte_len, c.imm, c.solicited),
        (1, RecvOpcode::RecvRdmaWithImm, 13, Some(0xdead_beef), true)
    );
    let cv = common::vector_ip('C');
    let (src, dst, ecn, ib) = split_rocev2(&cv).unwrap();
    r.handle_ib(Instant::ZERO, src, dst, ecn, ib);
    let c = r.poll_completion().unwrap();
    assert_eq!(
        (c.wr_id, c.opcode, c.byte_len, c.imm),
        (2, RecvOpcode::Recv, 0, Some(1))
    );
    assert_eq!(r.expected_psn(), 0x103);
}

/// A host sends a NAK at once and may hold ACKs back to coalesce them: `nak_pending` tells the
/// two apart (vector A, PSN 0x100, arriving in sequence, then one packet early).
#[test]
fn a_pending_nak_is_told_from_a_pending_ack() {
    let a = common::vector_ip('A');
    let (src, dst, ecn, ib) = split_rocev2(&a).unwrap();
    let mut buf = [0u8; 128];
    for (expected, nak) in [(0x100, false), (0x0ff, true)] {
        let mut r = host_responder(expected);
        assert!(!r.nak_pending() && !r.has_reply());
        r.handle_ib(Instant::ZERO, src, dst, ecn, ib);
        assert!(r.has_reply());
        assert_eq!(r.nak_pending(), nak, "expecting {expected:#x}");
        let n = r.poll_transmit(&mut buf).unwrap();
        let (reply, _) = IbRepr::parse(&buf[28..n]).unwrap();
        assert_eq!(
            matches!(reply.aeth.unwrap().syndrome, AethSyndrome::Nak(_)),
            nak
        );
        assert!(!r.nak_pending(), "sent");
    }
}

#[test]
fn camera_requester_acts_on_vectors_d_e_f() {
    let mut rq = camera_requester();
    for i in 0..3 {
        rq.post(write(i)).unwrap();
    }
    assert_eq!(sent(&mut rq, Instant::ZERO), [0x100, 0x101, 0x102]);
    // E: NAK sequence error expecting 0x101 -> 0x100 done, resend from 0x101
    assert!(rq.handle_ib(Instant::ZERO, &vector_ib('E')));
    assert_eq!(
        rq.poll_completion().map(|c| (c.wr_id, c.status)),
        Some((0, WcStatus::Success))
    );
    assert_eq!(sent(&mut rq, Instant::ZERO), [0x101, 0x102]);
    // D: ACK 0x102 completes the rest
    rq.handle_ib(Instant::ZERO, &vector_ib('D'));
    assert_eq!(rq.poll_completion().map(|c| c.wr_id), Some(1));
    assert_eq!(rq.poll_completion().map(|c| c.wr_id), Some(2));
    // F: a CNP is counted, never taken for an ACK or an error
    assert!(rq.handle_ib(Instant::ZERO, &vector_ib('F')));
    assert_eq!(rq.counters().cnps, 1);
    assert!(!rq.is_error());
}

/// The RTT-based timeout's floor is `min_rto` on a clean path and half of it within a second of
/// a loss (vector E's sequence NAK), where the peer answers promptly and a lost NAK or resend
/// otherwise idles the link for the whole floor.
#[test]
fn the_timeout_floor_halves_on_a_path_that_lost_a_packet_lately() {
    use std::time::Duration;
    let mut rq = acked_once();
    let us = Instant::from_micros;
    assert_eq!(rq.rto(us(20)), Some(MIN_RTO), "clean: the floor");
    // 0x101 and 0x102 go; vector E says 0x101 was lost
    rq.post(write(1)).unwrap();
    rq.post(write(2)).unwrap();
    assert_eq!(sent(&mut rq, us(20)), [0x101, 0x102]);
    assert!(rq.handle_ib(us(30), &vector_ib('E')));
    assert_eq!(rq.counters().seq_naks, 1);
    assert_eq!(
        rq.rto(us(40)),
        Some(MIN_RTO / 2),
        "within a second of a loss: half"
    );
    assert_eq!(
        rq.rto(Instant::from_micros(30) + Duration::from_secs(2)),
        Some(MIN_RTO),
        "a second later the path is clean again"
    );
}

/// A timeout alone (a pause: a busy loop on the peer's CPU) does not halve the floor; only a
/// sequence NAK, which real loss produces, does.
#[test]
fn a_timeout_alone_keeps_the_whole_floor() {
    let mut rq = acked_once();
    let late = unanswered_0x101(&mut rq);
    // the floor is whole (doubled once by the timeout), not halved
    assert_eq!(rq.rto(late), Some(MIN_RTO * 2));
}

/// A loss probe that comes due while a go-back is about to send the probed packet again does
/// not send it a second time (two copies of one SEND used to share a GSO run).
#[test]
fn a_probe_of_the_packet_a_go_back_sends_next_is_not_sent_twice() {
    let mut rq = acked_once();
    // 0x101 goes again, on a path that has now lost something (a loss probe is armed with it)
    let late = gone_back_0x101(&mut rq);
    assert_eq!(sent(&mut rq, late), [0x101]);
    // vector E: the responder still expects 0x101 (no progress, so the probe timer stands);
    // before the go-back is sent, the probe comes due
    let t = Instant::from_nanos(late.as_nanos() + 5_000);
    assert!(rq.handle_ib(t, &vector_ib('E')));
    assert_eq!(rq.counters().seq_naks, 1);
    let t = Instant::from_nanos(late.as_nanos() + 100_000);
    rq.handle_timeout(t);
    assert_eq!(sent(&mut rq, t), [0x101], "sent once");
    assert_eq!(
        rq.counters().tail_probes,
        0,
        "the go-back answers for the probe"
    );
}

/// 0x101 leaves at 20 us and nothing answers: the timer fires (at 20 ms, the returned time).
fn unanswered_0x101(rq: &mut Requester<4, 4>) -> Instant {
    rq.post(write(1)).unwrap();
    assert_eq!(sent(rq, Instant::from_micros(20)), [0x101]);
    let late = Instant::from_micros(20 + 20_000);
    rq.handle_timeout(late);
    assert_eq!(rq.counters().timeouts, 1);
    assert_eq!(rq.counters().go_backs, 0, "a quiet wait is no go-back");
    late
}

/// [`unanswered_0x101`], and the timer runs on until the requester stops taking the silence
/// for a pause (three quiet waits: a path that lost nothing, nothing new to send) and goes
/// back; returns when.
fn gone_back_0x101(rq: &mut Requester<4, 4>) -> Instant {
    let mut t = unanswered_0x101(rq);
    assert!(sent(rq, t).is_empty(), "a quiet wait sends nothing");
    while rq.counters().timeouts < 4 {
        t = rq.poll_timeout().expect("the ACK timer runs");
        rq.handle_timeout(t);
    }
    assert_eq!(rq.counters().quiet_waits, 3);
    // the three waits resent nothing: one go-back, the timeout ORSP's ACK_TIMEOUTS counts
    assert_eq!(rq.counters().go_backs, 1);
    t
}

/// The PSNs `rq` sends at `now`, until it has nothing more to send.
fn sent(rq: &mut Requester<4, 4>, now: Instant) -> Vec<u32> {
    let bufs = payload();
    std::iter::from_fn(|| rq.poll_transmit(now, &bufs[..]).map(|p| p.psn)).collect()
}

/// The InfiniBand part (BTH to ICRC) of vector `c`, as the requester is fed it.
fn vector_ib(c: char) -> Vec<u8> {
    let bytes = common::vector_ip(c);
    split_rocev2(&bytes).unwrap().3.to_vec()
}

/// The camera QP the vectors answer (QPN 0x22, sending to the host's 0x11 from PSN 0x100).
/// A sender of a few small messages (the reference host's QUEUE and ANNOUNCE) sets
/// `pause_waits` 0: its first ACK timeout goes back and sends the message again, where the
/// camera's requester first waits out three doubled timeouts for a paused peer. A lost QUEUE
/// held back for those waits (hundreds of ms at 20 % loss) left the camera without a buffer:
/// 26 of 100 frames dropped in one demo of 70.
#[test]
fn a_requester_without_pause_waits_goes_back_at_its_first_timeout() {
    let mut cfg = RequesterConfig::new(
        0x22,
        0x11,
        0x100,
        Path::new(IpAddr::V4(CAM), IpAddr::V4(HOST)),
    );
    cfg.pause_waits = 0;
    let mut rq: Requester<4, 4> = Requester::new(cfg);
    rq.post(write(1)).unwrap();
    assert_eq!(sent(&mut rq, Instant::from_micros(20)), [0x100]);
    let t = rq.poll_timeout().expect("the ACK timer runs");
    rq.handle_timeout(t);
    let c = rq.counters();
    assert_eq!((c.timeouts, c.quiet_waits, c.go_backs), (1, 0, 1), "{c:?}");
    assert_eq!(sent(&mut rq, t), [0x100], "sent again at once");
    // the camera's default: the same timeout is a quiet wait, nothing sent
    let mut rq = camera_requester();
    rq.post(write(1)).unwrap();
    assert_eq!(sent(&mut rq, Instant::from_micros(20)), [0x100]);
    let t = rq.poll_timeout().expect("the ACK timer runs");
    rq.handle_timeout(t);
    assert_eq!(rq.counters().quiet_waits, 1);
    assert!(sent(&mut rq, t).is_empty());
}

fn camera_requester() -> Requester<4, 4> {
    Requester::new(RequesterConfig::new(
        0x22,
        0x11,
        0x100,
        Path::new(IpAddr::V4(CAM), IpAddr::V4(HOST)),
    ))
}

/// The one payload buffer the WRITEs read.
fn payload() -> [Vec<u8>; 1] {
    [vec![0u8; 64]]
}

/// A 64-byte RDMA WRITE into the region vectors A and B write into.
fn write(wr_id: u64) -> WorkRequest {
    WorkRequest::write(wr_id, PayloadRef::new(0, 0), 64, 0x7f00_0000_1000, 0x1234)
}

/// [`camera_requester`] after 0x100 left at 0 and was acknowledged at 10 us: one round trip
/// of 10 us measured, nothing lost. (The ACK is built here: what is under test is the timer,
/// not its bytes, which vector D checks.)
fn acked_once() -> Requester<4, 4> {
    use rdmacam_protocol::wire::aeth::AethRepr;
    use rdmacam_protocol::wire::bth::BthRepr;
    use rdmacam_protocol::wire::opcode::Opcode;
    let mut rq = camera_requester();
    rq.post(write(0)).unwrap();
    assert_eq!(sent(&mut rq, Instant::ZERO), [0x100]);
    let mut ack = IbRepr::new(BthRepr::new(Opcode::RC_ACK, 0x22, 0x100));
    ack.aeth = Some(AethRepr {
        syndrome: AethSyndrome::Ack { credits: 0x1f },
        msn: 1,
    });
    let mut b = [0u8; 20];
    ack.emit(&mut b, 0).unwrap();
    assert!(rq.handle_ib(Instant::from_micros(10), &b));
    rq
}
