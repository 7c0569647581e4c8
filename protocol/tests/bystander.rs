//! What a bystander on the link, with nothing but GVCP reads and forged datagrams, can do to a
//! stream another host controls: nothing. It reads no number of the connection (the QPNs and
//! first PSNs read 0 to it), it cannot end a CM connection (a DREQ counts only from the address
//! whose REQ made the connection), and it cannot predict the camera's CM communication IDs from
//! the ones it provokes (each REJ's comes from a secret generator).

mod common;
use common::linux_req_mad;
use std::net::{IpAddr, Ipv4Addr, SocketAddrV4};

use rdmacam_protocol::cm::{MAD_LEN, MadHeader, attr, comm_ids, emit_ids};
use rdmacam_protocol::device::{Device, DeviceConfig, regs};
use rdmacam_protocol::orsp::regs as oregs;
use rdmacam_protocol::rc::Instant;

const HOST: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::new(198, 18, 0, 1), 50000);
/// The bystander: another machine, and the controlling host's own machine on another port.
const OTHER: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::new(198, 18, 0, 9), 50000);
const SAME_MACHINE: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::new(198, 18, 0, 1), 50001);

fn camera(entropy: u64) -> Device {
    let mut cfg = DeviceConfig::new(Ipv4Addr::new(198, 18, 0, 2), [0x02, 0x52, 0, 0, 0, 2], "BY");
    cfg.orsp_offered = true;
    let mut d = Device::new(cfg);
    d.orsp_mut().reseed(entropy);
    d.orsp_mut().set_cm_port(7471);
    d
}

/// (status, first word of the payload) of a GVCP command from `src`.
fn gvcp(d: &mut Device, src: SocketAddrV4, command: u16, words: &[u32]) -> (u16, Vec<u8>) {
    let mut c = vec![0x42, 0x01];
    c.extend_from_slice(&command.to_be_bytes());
    c.extend_from_slice(&((words.len() * 4) as u16).to_be_bytes());
    c.extend_from_slice(&[0, 1]);
    c.extend(words.iter().flat_map(|w| w.to_be_bytes()));
    let mut out = [0u8; 600];
    let r = d
        .handle_gvcp(Instant::from_millis(0), src, &c, &mut out)
        .unwrap();
    (u16::from_be_bytes([out[0], out[1]]), out[8..r.len].to_vec())
}

fn read(d: &mut Device, src: SocketAddrV4, addr: u32) -> u32 {
    let (st, p) = gvcp(d, src, 0x80, &[addr]);
    assert_eq!(st, 0);
    u32::from_be_bytes(p[..4].try_into().unwrap())
}

fn write(d: &mut Device, src: SocketAddrV4, addr: u32, v: u32) {
    assert_eq!(gvcp(d, src, 0x82, &[addr, v]).0, 0, "write {addr:#x}");
}

#[test]
fn the_numbers_of_the_connection_read_zero_to_anyone_but_the_controlling_host() {
    let mut d = camera(0x5eed);
    write(&mut d, HOST, regs::CCP, 2);
    write(&mut d, HOST, oregs::BASE + oregs::HOST_QPN, 0x11);
    write(&mut d, HOST, oregs::BASE + oregs::HOST_SQ_PSN, 0xabcd);
    let hidden = [
        oregs::DEVICE_QPN,
        oregs::DEVICE_SQ_PSN,
        oregs::HOST_QPN,
        oregs::HOST_SQ_PSN,
    ];
    for r in hidden {
        let a = oregs::BASE + r;
        assert_ne!(read(&mut d, HOST, a), 0, "{r:#x} to the controlling host");
        for by in [OTHER, SAME_MACHINE] {
            assert_eq!(read(&mut d, by, a), 0, "{r:#x} to {by}");
        }
    }
    // nor through READMEM of the whole block
    let (st, p) = gvcp(&mut d, OTHER, 0x84, &[oregs::BASE, 0x100]);
    assert_eq!(st, 0);
    for r in hidden {
        let at = 4 + r as usize;
        assert_eq!(&p[at..at + 4], &[0; 4], "{r:#x} in READMEM");
    }
    // what a monitor may read stays open: the version, the state, the counters
    assert_eq!(
        read(&mut d, OTHER, oregs::BASE + oregs::ORSP_VERSION),
        0x0001_0000
    );
    assert_eq!(read(&mut d, OTHER, oregs::BASE + oregs::STATUS) & 0xf, 1);
}

/// Connect the controlling host through the CM: (camera's comm ID, host's comm ID, REQ tid).
fn cm_connect(d: &mut Device) -> (u32, u32, u64) {
    write(d, HOST, regs::CCP, 2);
    let req = linux_req_mad();
    let from = IpAddr::V4(*HOST.ip());
    let mut rep = [0u8; MAD_LEN];
    assert!(d.handle_cm(Instant::from_millis(1), from, &req, &mut rep));
    assert_eq!(MadHeader::parse(&rep).unwrap().attr_id, attr::REP);
    let (camera_id, host_id) = comm_ids(&rep[24..]).unwrap();
    let tid = MadHeader::parse(&req).unwrap().tid;
    let mut rtu = [0u8; MAD_LEN];
    emit_ids(&mut rtu, attr::RTU, tid, host_id, camera_id, None).unwrap();
    let mut out = [0u8; MAD_LEN];
    let _ = d.handle_cm(Instant::from_millis(2), from, &rtu, &mut out);
    assert!(d.orsp().is_connected());
    (camera_id, host_id, tid)
}

#[test]
fn a_dreq_ends_the_connection_only_from_the_address_that_made_it() {
    let mut d = camera(0x5eed);
    let (camera_id, host_id, tid) = cm_connect(&mut d);
    let mut dreq = [0u8; MAD_LEN];
    emit_ids(&mut dreq, attr::DREQ, tid, host_id, camera_id, None).unwrap();
    // the right communication IDs from another address: dropped, counted, no DREP
    let mut out = [0u8; MAD_LEN];
    for t in 3..6 {
        assert!(!d.handle_cm(
            Instant::from_millis(t),
            IpAddr::V4(*OTHER.ip()),
            &dreq,
            &mut out
        ));
    }
    assert!(
        d.orsp().is_connected(),
        "a bystander's DREQ ended the stream"
    );
    assert_eq!(d.gvcp_counters().cm_foreign, 3);
    // from the host that connected: DREP, disconnected
    assert!(d.handle_cm(
        Instant::from_millis(7),
        IpAddr::V4(*HOST.ip()),
        &dreq,
        &mut out
    ));
    assert_eq!(MadHeader::parse(&out).unwrap().attr_id, attr::DREP);
    assert!(!d.orsp().is_connected());
}

/// The comm IDs a bystander sees in the REJs it provokes tell it nothing of the next one.
/// Before, each was the last one through a fixed multiply-add, its seed the public
/// DEVICE_SQ_PSN mixed with the time: a REJ gave away the ID of the connection after it.
#[test]
fn the_comm_ids_a_bystander_provokes_tell_nothing_of_the_next() {
    let old_formula = |x: u32| x.wrapping_mul(0x9e37_79b1).wrapping_add(0x7f4a_7c15) | 1;
    let rej_ids = |entropy: u64| -> Vec<u32> {
        let mut d = camera(entropy);
        write(&mut d, HOST, regs::CCP, 2);
        let req = linux_req_mad();
        (0..8)
            .map(|t| {
                let mut out = [0u8; MAD_LEN];
                assert!(d.handle_cm(
                    Instant::from_millis(t),
                    IpAddr::V4(*OTHER.ip()),
                    &req,
                    &mut out
                ));
                assert_eq!(MadHeader::parse(&out).unwrap().attr_id, attr::REJ);
                comm_ids(&out[24..]).unwrap().0
            })
            .collect()
    };
    let a = rej_ids(1);
    for w in a.windows(2) {
        assert_ne!(w[1], old_formula(w[0]), "{a:x?}");
        assert_ne!(w[0], w[1], "{a:x?}");
    }
    // the same camera at the same moments, other entropy: other IDs throughout
    let b = rej_ids(2);
    assert!(a.iter().zip(&b).all(|(x, y)| x != y), "{a:x?} {b:x?}");
}

/// A host whose heartbeats come from another socket of its machine loses control at the
/// timeout, and the camera says why: the port that took control, the port the commands came
/// from. A command with request id 0 breaks GVCP's header rules and is named too.
#[test]
fn heartbeats_from_another_port_are_named_when_control_is_lost() {
    use rdmacam_protocol::judge::ViolationKind as K;
    let mut d = camera(0x5eed);
    write(&mut d, HOST, regs::CCP, 2);
    let _ = read(&mut d, SAME_MACHINE, regs::CCP);
    d.handle_timeout(Instant::from_millis(3001));
    assert_eq!(read(&mut d, OTHER, regs::CCP), 0, "control lost");
    let v: Vec<_> = d.violations().iter().collect();
    assert_eq!(v.len(), 1, "{v:?}");
    assert_eq!(
        (v[0].0.kind, v[0].0.expected, v[0].0.got),
        (K::HeartbeatPort, 50000, 50001)
    );
    assert!(v[0].0.to_string().contains("port 50001"), "{}", v[0].0);
    let mut c = vec![0x42, 0x01, 0x00, 0x80, 0x00, 0x04, 0x00, 0x00];
    c.extend_from_slice(&regs::CCP.to_be_bytes());
    let mut out = [0u8; 600];
    let _ = d.handle_gvcp(Instant::from_millis(3002), HOST, &c, &mut out);
    assert_eq!(d.violations().count(K::GvcpHeader), 1);
}
