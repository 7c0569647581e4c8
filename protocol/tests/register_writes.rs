//! A register write the camera does not carry out whole is refused, not cut. Each case below
//! was acknowledged SUCCESS and then taken in part: HOST_QPN 0x1000000 read back 0 and left
//! the channel idle, HOST_SQ_PSN lost its top byte, CM_PORT 0x10000 read 0 (the listener off),
//! RETRY 0xFFFFFFFF read 0x1F77, HOST_MAC_HI lost its upper half, and CONTROL bit 3, GVCP
//! configuration bit 1 (pending acknowledges) and SCCFG bit 0 (extended chunk) were taken
//! though the camera does none of them. Each is now INVALID_PARAMETER (0x8002), a status a
//! host reads as "that value is not taken", and the register keeps what it held.

use std::net::{Ipv4Addr, SocketAddrV4};

use rdmacam_protocol::device::{Device, DeviceConfig, regs};
use rdmacam_protocol::orsp::regs as orsp;
use rdmacam_protocol::rc::Instant;

const CAM: Ipv4Addr = Ipv4Addr::new(192, 168, 1, 10);
const HOST: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::new(192, 168, 1, 2), 50000);

/// A WRITEREG or READREG datagram as aravis builds it (0x42, flags 0x01, command, length, id).
fn cmd(command: u16, req_id: u16, words: &[u32]) -> Vec<u8> {
    let mut v = vec![0x42, 0x01];
    v.extend_from_slice(&command.to_be_bytes());
    v.extend_from_slice(&((words.len() * 4) as u16).to_be_bytes());
    v.extend_from_slice(&req_id.to_be_bytes());
    v.extend(words.iter().flat_map(|w| w.to_be_bytes()));
    v
}

struct Cam {
    d: Device,
    id: u16,
}

impl Cam {
    fn new() -> Cam {
        let mut cfg = DeviceConfig::new(CAM, [0x02, 0x52, 1, 2, 3, 4], "SN42");
        cfg.orsp_offered = true;
        let mut c = Cam {
            d: Device::new(cfg),
            id: 0,
        };
        assert_eq!(c.write(regs::CCP, 2), 0);
        c
    }

    /// (status, payload) of a command.
    fn ask(&mut self, command: u16, words: &[u32]) -> (u16, Vec<u8>) {
        self.id += 1;
        let mut out = [0u8; 600];
        let r = self
            .d
            .handle_gvcp(
                Instant::from_millis(u64::from(self.id)),
                HOST,
                &cmd(command, self.id, words),
                &mut out,
            )
            .expect("an acknowledge");
        let b = &out[..r.len];
        (u16::from_be_bytes([b[0], b[1]]), b[8..].to_vec())
    }

    fn write(&mut self, addr: u32, v: u32) -> u16 {
        self.ask(0x82, &[addr, v]).0
    }

    fn read(&mut self, addr: u32) -> u32 {
        let (st, p) = self.ask(0x80, &[addr]);
        assert_eq!(st, 0, "READREG {addr:#x}");
        u32::from_be_bytes(p[..4].try_into().unwrap())
    }
}

const INVALID_PARAMETER: u16 = 0x8002;

#[test]
fn a_value_the_camera_would_cut_is_refused_and_the_register_keeps_its_value() {
    let o = |r: u32| orsp::BASE + r;
    let cases: &[(&str, u32, u32, u32)] = &[
        // (what, register, a value taken whole, a value it would cut)
        ("HOST_QPN", o(orsp::HOST_QPN), 0x00ab_cdef, 0x0100_0000),
        (
            "HOST_SQ_PSN",
            o(orsp::HOST_SQ_PSN),
            0x00ff_ffff,
            0x0100_0005,
        ),
        ("CM_PORT", o(orsp::CM_PORT), 0xffff, 0x1_0000),
        ("RETRY", o(orsp::RETRY), 0x0e76, 0xffff_ffff),
        ("RETRY bit 3", o(orsp::RETRY), 0x0e77, 0x0e7f),
        ("HOST_MAC_HI", o(orsp::HOST_MAC_HI), 0x0252, 0x0001_0252),
        ("GVCP configuration", regs::GVCP_CONFIG, 1, 1 | 2),
        ("SCCFG", regs::SCCFG0, 0, 1),
    ];
    let mut c = Cam::new();
    for &(what, reg, good, cut) in cases {
        assert_eq!(c.write(reg, good), 0, "{what} {good:#x}");
        assert_eq!(c.read(reg), good, "{what} reads back whole");
        assert_eq!(c.write(reg, cut), INVALID_PARAMETER, "{what} {cut:#x}");
        assert_eq!(c.read(reg), good, "{what} keeps its value");
    }
    // CONTROL: bits 0..2 only; an unknown bit does nothing and is refused, with the known
    // bits of the same write not carried out either
    assert_eq!(c.write(o(orsp::CONTROL), 0x8 | 0x4), INVALID_PARAMETER);
    assert_eq!(c.write(o(orsp::CONTROL), 0x4), 0);
}
