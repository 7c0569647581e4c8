//! Wireshark's dissector, written by other people, reads what our emitter writes as the RoCE
//! packets we meant: opcode, QPN, PSN, RETH, ImmDt, AETH and DETH fields, no malformed packets,
//! and tshark's own "Invariant CRC" field equal to the ICRC we put on the wire.
//!
//! Skipped with a message when tshark is not installed (CI installs it).

use std::net::Ipv4Addr;
use std::time::Duration;

use pcap_file::DataLink;
use pcap_file::pcap::{PcapHeader, PcapPacket, PcapWriter};
use rdmacam_protocol::wire::pmtu::{MessageKind, Pmtu, segments};
use rdmacam_protocol::wire::{
    AethRepr, AethSyndrome, BthRepr, DethRepr, EthernetAddress, EthernetRepr, IbRepr, IpRepr,
    NakCode, Opcode, RethRepr, RoceV1Repr, RoceV2Repr, cnp, deth, ethernet, roce,
};

struct Expect {
    opcode: u8,
    qpn: u32,
    psn: u32,
    reth: Option<(u64, u32, u32)>,
    imm: Option<u32>,
    aeth: Option<u8>,
    deth: Option<(u32, u32)>,
}

fn frame(eth_type: u16, ip_packet: &[u8]) -> Vec<u8> {
    let eth = EthernetRepr {
        src_addr: EthernetAddress([2, 0, 0, 0, 0, 2]),
        dst_addr: EthernetAddress([2, 0, 0, 0, 0, 1]),
        vlan: None,
        ethertype: eth_type,
    };
    let mut f = vec![0u8; eth.buffer_len()];
    eth.emit(&mut f).unwrap();
    f.extend_from_slice(ip_packet);
    f
}

fn v2(ib: IbRepr, payload: &[u8]) -> Vec<u8> {
    let r = RoceV2Repr {
        ip: IpRepr::v4(Ipv4Addr::new(198, 18, 0, 2), Ipv4Addr::new(198, 18, 0, 1)),
        src_port: roce::udp_source_port(0x22, ib.bth.dest_qp),
        dst_port: roce::ROCEV2_PORT,
        ib,
        payload_len: payload.len(),
    };
    let mut b = vec![0u8; r.buffer_len()];
    r.emit(&mut b, payload).unwrap();
    frame(ethernet::ETHERTYPE_IPV4, &b)
}

fn build() -> (Vec<Vec<u8>>, Vec<Expect>) {
    let mut frames = Vec::new();
    let mut expect = Vec::new();
    let frame_bytes: Vec<u8> = (0..2500u32).map(|i| (i * 7) as u8).collect();
    let mut psn = 0xff_fffe; // wraps inside the first message
    for kind in [
        MessageKind::Send,
        MessageKind::SendImm,
        MessageKind::Write,
        MessageKind::WriteImm,
    ] {
        for len in [2500u32, 100] {
            for s in segments(kind, len, Pmtu::Mtu1024) {
                let mut bth = BthRepr::new(s.opcode, 0x11, psn);
                bth.ack_req = s.opcode.info().unwrap().position
                    != rdmacam_protocol::wire::opcode::Position::Middle;
                let mut ib = IbRepr::new(bth);
                let h = s.opcode.headers();
                let reth = h.reth.then_some(RethRepr {
                    va: 0x7f00_0000_0000 + u64::from(len),
                    rkey: 0xabcd,
                    dma_len: len,
                });
                ib.reth = reth;
                ib.immdt = h.immdt.then_some(0xcafe_0000 | len);
                let payload = &frame_bytes[s.offset as usize..(s.offset + s.len) as usize];
                frames.push(v2(ib, payload));
                expect.push(Expect {
                    opcode: s.opcode.0,
                    qpn: 0x11,
                    psn,
                    reth: reth.map(|r| (r.va, r.rkey, r.dma_len)),
                    imm: ib.immdt,
                    aeth: None,
                    deth: None,
                });
                psn = (psn + 1) & 0xff_ffff;
            }
        }
    }
    for (syndrome, byte) in [
        (AethSyndrome::Ack { credits: 0x1f }, 0x1f),
        (AethSyndrome::RnrNak { timer: 12 }, 0x2c),
        (AethSyndrome::Nak(NakCode::PsnSequenceError), 0x60),
        (AethSyndrome::Nak(NakCode::RemoteAccessError), 0x62),
    ] {
        let mut ib = IbRepr::new(BthRepr::new(Opcode::RC_ACK, 0x22, 77));
        ib.aeth = Some(AethRepr { syndrome, msn: 5 });
        frames.push(v2(ib, &[]));
        expect.push(Expect {
            opcode: 0x11,
            qpn: 0x22,
            psn: 77,
            reth: None,
            imm: None,
            aeth: Some(byte),
            deth: None,
        });
    }
    let mut ib = IbRepr::new(BthRepr::new(Opcode::UD_SEND_ONLY, 1, 9));
    ib.deth = Some(DethRepr {
        qkey: deth::GSI_QKEY,
        src_qp: 1,
    });
    frames.push(v2(ib, &[0x01, 0x07, 0x02, 0x03, 0, 0, 0, 0]));
    expect.push(Expect {
        opcode: 0x64,
        qpn: 1,
        psn: 9,
        reth: None,
        imm: None,
        aeth: None,
        deth: Some((deth::GSI_QKEY, 1)),
    });
    frames.push(v2(IbRepr::new(cnp::bth(0x22)), &[]));
    expect.push(Expect {
        opcode: 0x81,
        qpn: 0x22,
        psn: 0,
        reth: None,
        imm: None,
        aeth: None,
        deth: None,
    });
    // RoCEv1: the same WRITE ONLY behind a GRH on EtherType 0x8915
    let mut bth = BthRepr::new(Opcode::RC_WRITE_ONLY, 0x11, 5);
    bth.ack_req = true;
    let mut ib = IbRepr::new(bth);
    ib.reth = Some(RethRepr {
        va: 0x1000,
        rkey: 7,
        dma_len: 13,
    });
    let r1 = RoceV1Repr {
        src_gid: "fe80::2".parse().unwrap(),
        dst_gid: "fe80::1".parse().unwrap(),
        traffic_class: 0,
        flow_label: 0,
        hop_limit: 1,
        ib,
        payload_len: 13,
    };
    let mut b = vec![0u8; r1.buffer_len()];
    r1.emit(&mut b, b"camera-frame!").unwrap();
    frames.push(frame(ethernet::ETHERTYPE_ROCEV1, &b));
    expect.push(Expect {
        opcode: 0x0a,
        qpn: 0x11,
        psn: 5,
        reth: Some((0x1000, 7, 13)),
        imm: None,
        aeth: None,
        deth: None,
    });
    (frames, expect)
}

fn num(s: &str) -> u64 {
    let s = s.trim();
    match s.strip_prefix("0x") {
        Some(h) => u64::from_str_radix(h, 16).unwrap(),
        None => s.parse().unwrap(),
    }
}

#[test]
fn tshark_dissects_emitted_packets_as_intended() {
    if !rdmacam_tests::have_tshark() {
        return;
    }
    let (frames, expect) = build();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("emitted.pcap");
    let header = PcapHeader {
        datalink: DataLink::ETHERNET,
        ..Default::default()
    };
    let mut w = PcapWriter::with_header(std::fs::File::create(&path).unwrap(), header).unwrap();
    for (i, f) in frames.iter().enumerate() {
        w.write_packet(&PcapPacket::new(
            Duration::from_millis(i as u64),
            f.len() as u32,
            f,
        ))
        .unwrap();
    }
    drop(w);
    let fields = [
        "infiniband.bth.opcode",
        "infiniband.bth.destqp",
        "infiniband.bth.psn",
        "infiniband.reth.va",
        "infiniband.reth.r_key",
        "infiniband.reth.dmalen",
        "infiniband.immdt",
        "infiniband.aeth.syndrome",
        "infiniband.deth.q_key",
        "infiniband.deth.srcqp",
        "infiniband.invariant.crc",
        "_ws.malformed",
        "_ws.expert",
    ];
    let owned = rdmacam_tests::tshark_fields(&path, &fields);
    let rows: Vec<Vec<&str>> = owned
        .iter()
        .map(|r| r.iter().map(String::as_str).collect())
        .collect();
    let text = format!("{rows:?}");
    assert_eq!(rows.len(), expect.len(), "{text}");
    for (i, (row, e)) in rows.iter().zip(&expect).enumerate() {
        let ctx = format!("frame {}: {:?}", i + 1, row);
        assert_eq!(num(row[0]), u64::from(e.opcode), "{ctx}");
        assert_eq!(num(row[1]), u64::from(e.qpn), "{ctx}");
        assert_eq!(num(row[2]), u64::from(e.psn), "{ctx}");
        match e.reth {
            Some((va, rkey, len)) => {
                assert_eq!(
                    (num(row[3]), num(row[4]), num(row[5])),
                    (va, u64::from(rkey), u64::from(len)),
                    "{ctx}"
                );
            }
            None => assert_eq!(row[3], "", "{ctx}"),
        }
        match e.imm {
            // tshark 4.0 prints ImmDt as bare hex, twice: "cafe09c4,cafe09c4"
            Some(imm) => {
                let first = row[6].split(',').next().unwrap();
                assert_eq!(u32::from_str_radix(first, 16).unwrap(), imm, "{ctx}");
            }
            None => assert_eq!(row[6], "", "{ctx}"),
        }
        match e.aeth {
            Some(s) => assert_eq!(num(row[7]), u64::from(s), "{ctx}"),
            None => assert_eq!(row[7], "", "{ctx}"),
        }
        match e.deth {
            Some((q, src)) => assert_eq!(
                (num(row[8]), num(row[9])),
                (u64::from(q), u64::from(src)),
                "{ctx}"
            ),
            None => assert_eq!(row[8], "", "{ctx}"),
        }
        // tshark 4.0 shows the ICRC of RC packets without checking it (none for UD and CNP);
        // it must be the 4 bytes we appended (it reads them big-endian).
        let f = &frames[i];
        let ours = u32::from_be_bytes(f[f.len() - 4..].try_into().unwrap());
        if e.opcode < 0x20 {
            assert_eq!(num(row[10]), u64::from(ours), "{ctx}");
        }
        assert_eq!(row[11], "", "malformed: {ctx}");
    }
}
