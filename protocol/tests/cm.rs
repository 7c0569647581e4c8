//! The IB CM, passive side, on the worked REQ of reference/rocev2.md §5.3 (an independent
//! implementation's bytes, dissected by Wireshark; `testdata/cm-req-vector.txt`).

mod common;
use common::linux_req_mad;
use proptest::prelude::*;
use rdmacam_protocol::cm::{
    CmEvent, CmListener, CmaHeader, ListenerConfig, MAD_LEN, MadHeader, Rep, Req, ReqParams, attr,
    comm_ids, emit_ids, emit_req, reason,
};
use rdmacam_protocol::rc::Instant;
use rdmacam_protocol::wire::pmtu::Pmtu;
use rdmacam_protocol::wire::{Opcode, RoceV2Repr};

fn vector() -> Vec<u8> {
    let line = include_str!("../../testdata/cm-req-vector.txt")
        .lines()
        .find(|l| !l.starts_with('#'))
        .unwrap();
    line.split_whitespace()
        .map(|b| u8::from_str_radix(b, 16).unwrap())
        .collect()
}

/// The MAD of the vector (after Ethernet, IP, UDP, BTH and DETH).
fn req_mad() -> Vec<u8> {
    vector()[62..62 + 256].to_vec()
}

#[test]
fn the_worked_req_parses_field_by_field() {
    let frame = vector();
    let (repr, range) = RoceV2Repr::parse(&frame[14..]).expect("ICRC of the vector is good");
    assert_eq!(repr.ib.bth.opcode, Opcode::UD_SEND_ONLY);
    assert_eq!(repr.ib.bth.dest_qp, 1);
    let deth = repr.ib.deth.unwrap();
    assert_eq!((deth.qkey, deth.src_qp), (0x8001_0000, 1));
    let mad = &frame[14..][range];
    assert_eq!(mad.len(), MAD_LEN);
    let h = MadHeader::parse(mad).unwrap();
    assert_eq!(
        (h.mgmt_class, h.class_version, h.method, h.tid, h.attr_id),
        (7, 2, 3, 0x0000_0001_0000_0001, attr::REQ)
    );
    let r = Req::parse(&mad[24..]).unwrap();
    assert_eq!(r.local_comm_id, 0x1122_3344);
    assert_eq!(r.service_id, 0x0000_0000_0106_1d2f, "RDMA_PS_TCP port 7471");
    assert_eq!(r.local_ca_guid, 0x0200_0000_0000_0002);
    assert_eq!((r.local_qpn, r.starting_psn), (0x11, 0xabcd));
    assert_eq!(
        (
            r.transport,
            r.path_mtu,
            r.rnr_retry,
            r.retry_count,
            r.local_ack_timeout,
            r.pkey
        ),
        (0, 5, 7, 7, 18, 0xffff)
    );
    assert_eq!(&r.local_gid[10..], &[0xff, 0xff, 192, 168, 10, 2]);
    assert_eq!(&r.remote_gid[10..], &[0xff, 0xff, 192, 168, 10, 1]);
    let cma = CmaHeader::parse(&r.private_data).unwrap();
    assert_eq!(cma.src_port, 50000);
    assert_eq!(cma.src.to_string(), "192.168.10.2");
    assert_eq!(cma.dst.to_string(), "192.168.10.1");
    assert_eq!(&r.private_data[36..45], b"camera-v1");
}

fn listener() -> CmListener {
    CmListener::new(
        ListenerConfig {
            port: 7471,
            local_qpn: 0x123,
            starting_psn: 0x4567,
            max_pmtu: Pmtu::Mtu4096,
            ca_guid: 0xabcd,
            comm_id_seed: 99,
        },
        b"HELLO body",
    )
}

fn handle(l: &mut CmListener, t: u64, mad: &[u8]) -> (CmEvent, Option<[u8; 256]>) {
    let mut out = [0u8; 256];
    let (ev, reply) = l.handle_mad(Instant::from_millis(t), mad, &mut out);
    (ev, reply.then_some(out))
}

fn msg(attr_id: u16, tid: u64, ids: (u32, u32)) -> Vec<u8> {
    let mut m = vec![0u8; 256];
    MadHeader::emit_cm(tid, attr_id, &mut m);
    m[24..28].copy_from_slice(&ids.0.to_be_bytes());
    m[28..32].copy_from_slice(&ids.1.to_be_bytes());
    m
}

#[test]
fn accept_duplicate_rtu_disconnect_and_reconnect() {
    let mut l = listener();
    let (ev, rep) = handle(&mut l, 0, &req_mad());
    let CmEvent::Accepting(a) = ev else {
        panic!("{ev:?}")
    };
    assert_eq!(
        (
            a.remote_qpn,
            a.send_psn,
            a.recv_psn,
            a.pmtu,
            a.retry_count,
            a.rnr_retry
        ),
        (0x11, 0xabcd, 0x4567, Pmtu::Mtu4096, 7, 7)
    );
    let rep = rep.unwrap();
    let h = MadHeader::parse(&rep).unwrap();
    assert_eq!(
        (h.attr_id, h.tid),
        (attr::REP, 0x0000_0001_0000_0001),
        "REP reuses the REQ's TID"
    );
    let (ours, theirs) = comm_ids(&rep[24..]).unwrap();
    assert_eq!(theirs, 0x1122_3344);
    assert_eq!(
        u32::from_be_bytes(rep[36..40].try_into().unwrap()) >> 8,
        0x123,
        "REP local QPN"
    );
    assert_eq!(
        u32::from_be_bytes(rep[44..48].try_into().unwrap()) >> 8,
        0x4567,
        "REP starting PSN"
    );
    assert_eq!(
        &rep[60..70],
        b"HELLO body",
        "private data carries the ORSP HELLO"
    );
    // the host did not see the REP and sends the REQ again: the same REP
    let (ev, again) = handle(&mut l, 100, &req_mad());
    assert_eq!((ev, again), (CmEvent::None, Some(rep)));
    // RTU with the wrong ids is ignored, with the right ones establishes
    assert_eq!(
        handle(&mut l, 200, &msg(attr::RTU, 1, (0x1122_3344, ours ^ 1))).0,
        CmEvent::None
    );
    assert_eq!(
        handle(&mut l, 200, &msg(attr::RTU, 1, (0x1122_3344, ours))).0,
        CmEvent::Established
    );
    assert!(l.connected());
    // DREQ: DREP and back to idle
    let (ev, drep) = handle(&mut l, 300, &msg(attr::DREQ, 2, (0x1122_3344, ours)));
    assert_eq!(ev, CmEvent::Disconnected);
    assert_eq!(
        MadHeader::parse(&drep.unwrap()).unwrap().attr_id,
        attr::DREP
    );
    // a new connection gets a fresh Local Comm ID
    let mut req2 = req_mad();
    req2[24..28].copy_from_slice(&0x5555_6666u32.to_be_bytes());
    let (ev, rep2) = handle(&mut l, 400, &req2);
    assert!(matches!(ev, CmEvent::Accepting(_)));
    assert_ne!(comm_ids(&rep2.unwrap()[24..]).unwrap().0, ours);
}

#[test]
fn rejects_with_ib_cm_reason_codes() {
    let reject = |mutate: &dyn Fn(&mut Vec<u8>), max: Pmtu| {
        let mut l = CmListener::new(
            ListenerConfig {
                port: 7471,
                local_qpn: 1,
                starting_psn: 1,
                max_pmtu: max,
                ca_guid: 1,
                comm_id_seed: 1,
            },
            &[],
        );
        let mut m = req_mad();
        mutate(&mut m);
        let (ev, rej) = handle(&mut l, 0, &m);
        let rej = rej.unwrap();
        assert_eq!(MadHeader::parse(&rej).unwrap().attr_id, attr::REJ);
        assert_eq!(
            u32::from_be_bytes(rej[28..32].try_into().unwrap()),
            0x1122_3344
        );
        (ev, rej)
    };
    let (ev, _) = reject(&|m| m[24 + 15] = 0x30, Pmtu::Mtu4096); // port 7472
    assert_eq!(ev, CmEvent::Rejected(reason::INVALID_SERVICE_ID));
    let (ev, _) = reject(&|m| m[24 + 43] |= 0x02, Pmtu::Mtu4096); // UC
    assert_eq!(ev, CmEvent::Rejected(reason::INVALID_TRANSPORT_TYPE));
    let (ev, rej) = reject(&|_| {}, Pmtu::Mtu1024); // asks 4096
    assert_eq!(ev, CmEvent::Rejected(reason::INVALID_MTU));
    assert_eq!(
        u16::from_be_bytes(rej[34..36].try_into().unwrap()),
        reason::INVALID_MTU
    );
    // a second host while one is connected: consumer reject with an ORSP reason
    let mut l = listener();
    let (_, rep) = handle(&mut l, 0, &req_mad());
    let ours = comm_ids(&rep.unwrap()[24..]).unwrap().0;
    handle(&mut l, 1, &msg(attr::RTU, 1, (0x1122_3344, ours)));
    let mut other = req_mad();
    other[24..28].copy_from_slice(&7u32.to_be_bytes());
    let (ev, rej) = handle(&mut l, 2, &other);
    assert_eq!(ev, CmEvent::Rejected(reason::CONSUMER_REJECT));
    assert!(rej.unwrap()[24 + 84..].starts_with(b"ORSP busy"));
    assert!(l.connected(), "the first connection is untouched");
}

#[test]
fn rep_is_resent_until_rtu_or_give_up() {
    let mut l = listener();
    let (_, rep) = handle(&mut l, 0, &req_mad());
    let mut out = [0u8; 256];
    let mut resent = 0;
    let mut t = Instant::ZERO;
    while let Some(next) = l.poll_timeout() {
        t = next;
        if l.handle_timeout(t, &mut out) {
            assert_eq!(out, rep.unwrap());
            resent += 1;
        }
    }
    assert_eq!(resent, 15, "Max CM Retries");
    assert!(!l.connected());
    assert!(t > Instant::from_millis(60_000));
}

#[test]
fn an_mra_for_the_rep_holds_its_resend_back_by_the_service_timeout() {
    let mut l = listener();
    let (_, rep) = handle(&mut l, 0, &req_mad());
    let rep = rep.unwrap();
    // REP body: Local Comm ID at 0 (ours), Remote Comm ID at 4 (the host's)
    let ours = u32::from_be_bytes(rep[24..28].try_into().unwrap());
    let theirs = u32::from_be_bytes(rep[28..32].try_into().unwrap());
    let first = l.poll_timeout().unwrap();
    // MRA (IBTA Table 107): Local Comm ID (the host's), Remote Comm ID (ours), byte 8 bits 7:6
    // Message MRAed = 1 (REP), byte 9 bits 7:3 Service Timeout = 22 (4.096 us * 2^22 = 17.2 s)
    let mra = |from: u32, to: u32| {
        let mut m = msg(0x0011, 0x77, (from, to));
        m[24 + 8] = 1 << 6;
        m[24 + 9] = 22 << 3;
        m
    };
    // one naming another connection changes nothing
    assert_eq!(
        handle(&mut l, 1000, &mra(theirs ^ 1, ours)),
        (CmEvent::None, None)
    );
    assert_eq!(l.poll_timeout(), Some(first));
    // ours: no reply, and the REP waits the service timeout longer
    assert_eq!(
        handle(&mut l, 1000, &mra(theirs, ours)),
        (CmEvent::None, None)
    );
    let later = l.poll_timeout().unwrap();
    assert_eq!(
        later,
        Instant::from_millis(1000)
            + core::time::Duration::from_nanos(4096 << 22)
            + (first - Instant::ZERO)
    );
    let mut out = [0u8; 256];
    assert!(
        !l.handle_timeout(first, &mut out),
        "not resent at the old deadline"
    );
    assert!(l.handle_timeout(later, &mut out), "resent at the new one");
    assert_eq!(out, rep);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn garbage_and_mangled_mads_never_panic(
        bytes in proptest::collection::vec(any::<u8>(), 0..300),
        edits in proptest::collection::vec((0usize..256, any::<u8>()), 0..8),
    ) {
        let mut l = listener();
        let mut out = [0u8; 256];
        let _ = l.handle_mad(Instant::ZERO, &bytes, &mut out);
        let mut m = req_mad();
        for (at, v) in edits { m[at] = v; }
        let _ = l.handle_mad(Instant::ZERO, &m, &mut out);
        let _ = l.handle_mad(Instant::ZERO, &msg(attr::RTU, 0, (0x1122_3344, 0)), &mut out);
    }
}

#[test]
fn a_real_linux_req_parses_and_is_accepted_with_linux_psn_semantics() {
    let mad = linux_req_mad();
    assert_eq!(mad.len(), MAD_LEN);
    let h = MadHeader::parse(&mad).unwrap();
    assert_eq!(
        (h.mgmt_class, h.class_version, h.attr_id),
        (7, 2, attr::REQ)
    );
    let r = Req::parse(&mad[24..]).unwrap();
    assert_eq!(r.service_id, 0x0106_1d2f, "RDMA_PS_TCP port 7471");
    assert_eq!((r.local_qpn, r.starting_psn), (0x12, 0x70_ac0c));
    assert_eq!((r.transport, r.path_mtu), (0, Pmtu::Mtu1024 as u8));
    assert_eq!(&r.local_gid[10..], &[0xff, 0xff, 198, 18, 0, 1]);
    assert_eq!(&r.remote_gid[10..], &[0xff, 0xff, 198, 18, 0, 2]);
    let cma = CmaHeader::parse(&r.private_data).expect("rdma_cm's private-data header");
    assert_eq!(cma.src.to_string(), "198.18.0.1");
    assert_eq!(cma.dst.to_string(), "198.18.0.2");

    let mut l = listener();
    let (ev, rep) = handle(&mut l, 0, &mad);
    let CmEvent::Accepting(a) = ev else {
        panic!("{ev:?}")
    };
    // In the captured session the camera's first SEND carried PSN 0x70ac0c (this REQ's) and the
    // host's first SEND the REP's Starting PSN: so we send with the REQ's, the host with ours.
    assert_eq!((a.send_psn, a.recv_psn), (0x70_ac0c, 0x4567));
    assert_eq!(a.pmtu, Pmtu::Mtu1024);
    let rep = rep.unwrap();
    assert_eq!(
        u32::from_be_bytes(rep[24 + 20..24 + 24].try_into().unwrap()) >> 8,
        0x4567
    );
}

/// Which copies of a MAD the channel delivers: lose it, deliver it, or deliver it twice.
#[derive(Debug, Clone, Copy)]
enum Fate {
    Lost,
    Once,
    Twice,
}

fn fate() -> impl Strategy<Value = Fate> {
    prop_oneof![2 => Just(Fate::Lost), 5 => Just(Fate::Once), 1 => Just(Fate::Twice)]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(500))]

    /// An active side modelled on the IB CM (REQ resent every second until a REP; RTU sent for
    /// every REP, duplicates included) over a channel that loses and duplicates MADs in both
    /// directions until `calm`, then delivers. The listener connects exactly once, with the
    /// REQ's parameters, and both sides agree on the communication IDs.
    #[test]
    fn lost_and_duplicated_req_rep_rtu_still_connect_once(
        fates in proptest::collection::vec(fate(), 0..40),
    ) {
        let mut l = listener();
        let req = req_mad();
        let mut fates = fates.into_iter();
        let mut deliver = |n: &mut u32| match fates.next().unwrap_or(Fate::Once) {
            Fate::Lost => *n = 0,
            Fate::Once => *n = 1,
            Fate::Twice => *n = 2,
        };
        let (mut accepted, mut established) = (Vec::new(), 0);
        let mut active_connected: Option<u32> = None; // the camera's comm ID, from the REP
        let mut t = 0u64;
        let mut next_req = 0u64;
        let mut out = [0u8; 256];
        while t < 120_000 && !(l.connected() && active_connected.is_some()) {
            let mut to_active: Vec<[u8; 256]> = Vec::new();
            // the active side's REQ timer
            if active_connected.is_none() && t >= next_req {
                next_req = t + 1000;
                let mut n = 0;
                deliver(&mut n);
                for _ in 0..n {
                    let (ev, rep) = handle(&mut l, t, &req);
                    match ev {
                        CmEvent::Accepting(a) => accepted.push(a),
                        CmEvent::None => {}
                        other => panic!("unexpected {other:?}"),
                    }
                    to_active.extend(rep);
                }
            }
            // the listener's REP timer
            if l.poll_timeout().is_some_and(|d| Instant::from_millis(t) >= d)
                && l.handle_timeout(Instant::from_millis(t), &mut out)
            {
                to_active.push(out);
            }
            // the active side answers every REP that reaches it with an RTU
            for rep in to_active {
                let mut n = 0;
                deliver(&mut n);
                if n == 0 {
                    continue;
                }
                let (ours, theirs) = comm_ids(&rep[24..]).unwrap();
                prop_assert_eq!(theirs, 0x1122_3344);
                prop_assert!(active_connected.is_none_or(|c| c == ours), "one camera comm ID");
                active_connected = Some(ours);
                let rtu = msg(attr::RTU, 0x0000_0001_0000_0001, (0x1122_3344, ours));
                let mut m = 0;
                deliver(&mut m);
                for _ in 0..m {
                    let (ev, reply) = handle(&mut l, t, &rtu);
                    prop_assert!(reply.is_none());
                    if ev == CmEvent::Established {
                        established += 1;
                    }
                }
            }
            t += 100;
        }
        prop_assert!(l.connected(), "connected within the retries");
        prop_assert_eq!(established, 1, "established exactly once");
        prop_assert!(!accepted.is_empty());
        prop_assert!(accepted.iter().all(|a| *a == accepted[0]), "one set of parameters");
        prop_assert_eq!((accepted[0].remote_qpn, accepted[0].send_psn), (0x11, 0xabcd));
    }
}

#[test]
fn our_req_is_the_worked_vector_byte_for_byte() {
    // The active side of the worked example (reference/rocev2.md §5.3): its bytes were written
    // from the IBTA tables and read back field by field by Wireshark, not by this code.
    let mapped = |ip: [u8; 4]| {
        let mut g = [0u8; 16];
        g[10] = 0xff;
        g[11] = 0xff;
        g[12..].copy_from_slice(&ip);
        g
    };
    let p = ReqParams {
        tid: 0x0000_0001_0000_0001,
        local_comm_id: 0x1122_3344,
        service_port: 7471,
        local_ca_guid: 0x0200_0000_0000_0002,
        local_qpn: 0x11,
        starting_psn: 0xabcd,
        pmtu: Pmtu::Mtu4096,
        local_gid: mapped([192, 168, 10, 2]),
        remote_gid: mapped([192, 168, 10, 1]),
        hop_limit: 64,
        local_ack_timeout: 18,
        cma_src_port: 50000,
    };
    let mut mad = [0u8; MAD_LEN];
    emit_req(&mut mad, &p, b"camera-v1").unwrap();
    let want = req_mad();
    for (i, (a, b)) in mad.iter().zip(&want).enumerate() {
        assert_eq!(a, b, "MAD byte {i} (data offset {})", i as isize - 24);
    }
    // and the passive side accepts it with the parameters put in
    let mut l = listener();
    let (ev, rep) = handle(&mut l, 0, &mad);
    let CmEvent::Accepting(a) = ev else {
        panic!("{ev:?}")
    };
    assert_eq!(
        (a.remote_qpn, a.send_psn, a.pmtu),
        (0x11, 0xabcd, Pmtu::Mtu4096)
    );
    let rep = Rep::parse(&rep.unwrap()[24..]).unwrap();
    assert_eq!(
        (
            rep.remote_comm_id,
            rep.local_qpn,
            rep.starting_psn,
            rep.rnr_retry
        ),
        (0x1122_3344, 0x123, 0x4567, 7)
    );
    // RTU and DREQ from the active side close the loop
    let mut rtu = [0u8; MAD_LEN];
    emit_ids(
        &mut rtu,
        attr::RTU,
        p.tid,
        p.local_comm_id,
        rep.local_comm_id,
        None,
    )
    .unwrap();
    assert_eq!(handle(&mut l, 1, &rtu).0, CmEvent::Established);
    let mut dreq = [0u8; MAD_LEN];
    emit_ids(
        &mut dreq,
        attr::DREQ,
        9,
        p.local_comm_id,
        rep.local_comm_id,
        Some(0x123),
    )
    .unwrap();
    let (ev, drep) = handle(&mut l, 2, &dreq);
    assert_eq!(ev, CmEvent::Disconnected);
    assert_eq!(
        MadHeader::parse(&drep.unwrap()).unwrap().attr_id,
        attr::DREP
    );
}

/// With RDMA CM the host's RTU (RoCEv2) and its AcquisitionStart (GVCP) travel on different
/// sockets. Seen in CI: AcquisitionStart was handled first, and the channel, connected by the
/// RTU after it, never streamed. It must stream whichever comes first.
#[test]
fn an_acquisition_started_before_the_rtu_streams_once_the_rtu_comes() {
    use rdmacam_protocol::device::{Device, DeviceConfig, regs};
    use rdmacam_protocol::orsp::State;
    use std::net::{Ipv4Addr, SocketAddrV4};

    let host = SocketAddrV4::new(Ipv4Addr::new(198, 18, 0, 1), 50000);
    let mut d = Device::new(DeviceConfig::new(
        Ipv4Addr::new(198, 18, 0, 2),
        [0x02, 0x52, 0, 0, 0, 2],
        "CM1",
    ));
    d.orsp_mut().set_cm_port(7471);
    let gvcp = |d: &mut Device, t: u64, addr: u32, v: u32| {
        let mut c = vec![0x42, 0x01, 0x00, 0x82, 0x00, 0x08, 0x00, 0x01];
        c.extend_from_slice(&addr.to_be_bytes());
        c.extend_from_slice(&v.to_be_bytes());
        let mut out = [0u8; 600];
        let r = d
            .handle_gvcp(Instant::from_millis(t), host, &c, &mut out)
            .unwrap();
        assert_eq!(&out[..2], &[0, 0], "GVCP write {addr:#x} = {v}");
        r.len
    };
    gvcp(&mut d, 0, regs::CCP, 2);

    // REQ (the one Linux sent over rxe) -> REP
    let req = linux_req_mad();
    let mut rep = [0u8; MAD_LEN];
    let from = std::net::IpAddr::V4(*host.ip());
    assert!(
        d.handle_cm(Instant::from_millis(1), from, &req, &mut rep),
        "REP"
    );
    let (camera_id, host_id) = comm_ids(&rep[24..]).unwrap();
    assert!(!d.orsp().is_connected(), "connected before the RTU");

    // AcquisitionStart overtakes the RTU
    gvcp(&mut d, 2, regs::ACQUISITION_COMMAND, 1);
    assert_ne!(d.orsp().state(), State::Streaming);

    let mut rtu = [0u8; MAD_LEN];
    let tid = MadHeader::parse(&req).unwrap().tid;
    emit_ids(&mut rtu, attr::RTU, tid, host_id, camera_id, None).unwrap();
    let mut out = [0u8; MAD_LEN];
    let _ = d.handle_cm(Instant::from_millis(3), from, &rtu, &mut out);
    assert_eq!(d.orsp().state(), State::Streaming);
}

/// Only the controlling application may connect through the CM: host B's REQ (the one Linux
/// sent over rxe) while host A holds control gets a REJ, consumer reason, with the ORSP code in
/// the private data, and the refusal is counted; so does a REQ while nobody holds control; an
/// IPv6 host is admitted once its controller wrote that GID to OrspHostGid.
#[test]
fn only_the_controlling_application_connects_through_the_cm() {
    use rdmacam_protocol::device::{Device, DeviceConfig, regs};
    use rdmacam_protocol::orsp::regs as oregs;
    use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddrV4};

    let a = SocketAddrV4::new(Ipv4Addr::new(198, 18, 0, 1), 50000);
    let b = IpAddr::V4(Ipv4Addr::new(198, 18, 0, 9));
    let mut d = Device::new(DeviceConfig::new(
        Ipv4Addr::new(198, 18, 0, 2),
        [0x02, 0x52, 0, 0, 0, 2],
        "CM2",
    ));
    d.orsp_mut().set_cm_port(7471);
    let write = |d: &mut Device, addr: u32, v: u32| {
        let mut c = vec![0x42, 0x01, 0x00, 0x82, 0x00, 0x08, 0x00, 0x01];
        c.extend_from_slice(&addr.to_be_bytes());
        c.extend_from_slice(&v.to_be_bytes());
        let mut out = [0u8; 600];
        d.handle_gvcp(Instant::from_millis(0), a, &c, &mut out)
            .unwrap();
        assert_eq!(&out[..2], &[0, 0], "GVCP write {addr:#x} = {v}");
    };
    let req = linux_req_mad();
    let refused = |d: &mut Device, from: IpAddr| {
        let mut out = [0u8; MAD_LEN];
        assert!(d.handle_cm(Instant::from_millis(1), from, &req, &mut out));
        let h = MadHeader::parse(&out).unwrap();
        let data = &out[24..];
        (h.attr_id == attr::REJ).then(|| {
            assert_eq!(
                u16::from_be_bytes([data[10], data[11]]),
                reason::CONSUMER_REJECT
            );
            assert!(
                data[84..].starts_with(b"ORSP 0x8006"),
                "{:?}",
                &data[84..110]
            );
        })
    };
    // nobody in control: nobody connects
    assert!(refused(&mut d, IpAddr::V4(*a.ip())).is_some());
    write(&mut d, regs::CCP, 2);
    // a bystander while A holds control
    assert!(refused(&mut d, b).is_some());
    assert_eq!(d.gvcp_counters().cm_refused, 2);
    assert!(!d.orsp().is_connected());
    // an IPv6 host: refused until A names it in OrspHostGid
    let v6: Ipv6Addr = "fd00::1".parse().unwrap();
    assert!(refused(&mut d, IpAddr::V6(v6)).is_some());
    for (i, w) in v6.octets().chunks(4).enumerate() {
        write(
            &mut d,
            oregs::BASE + oregs::HOST_GID + 4 * i as u32,
            u32::from_be_bytes(w.try_into().unwrap()),
        );
    }
    assert!(
        refused(&mut d, IpAddr::V6(v6)).is_none(),
        "REP for the named GID"
    );
    assert_eq!(d.gvcp_counters().cm_refused, 3);
}
