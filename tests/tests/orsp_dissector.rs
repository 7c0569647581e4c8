//! Wireshark reads ORSP: `wireshark/orsp.lua`, written from docs/orsp-spec.md alone, decodes
//! every message the camera and a host send (each by name and field) on top of Wireshark's
//! own InfiniBand dissector, in RC SEND payloads; the spec's worked LEADER reads as the spec
//! says; a message whose length disagrees with its counts is flagged malformed.
//!
//! Skipped with a message when tshark is not installed (CI installs it).

use std::net::Ipv4Addr;
use std::path::Path;
use std::time::Duration;

use pcap_file::DataLink;
use pcap_file::pcap::{PcapHeader, PcapPacket, PcapWriter};
use rdmacam_protocol::gev::gvsp::{ImageLeader, ImageTrailer, TrailerChunks};
use rdmacam_protocol::orsp::msg::{self, Descriptor, Hello};
use rdmacam_protocol::wire::{
    BthRepr, EthernetAddress, EthernetRepr, IbRepr, IpRepr, Opcode, RoceV2Repr, ethernet, roce,
};

/// An RC SEND ONLY carrying `payload`, in an Ethernet frame.
fn send(payload: &[u8], psn: u32) -> Vec<u8> {
    let r = RoceV2Repr {
        ip: IpRepr::v4(Ipv4Addr::new(198, 18, 0, 2), Ipv4Addr::new(198, 18, 0, 1)),
        src_port: roce::udp_source_port(0x22, 0x11),
        dst_port: roce::ROCEV2_PORT,
        ib: IbRepr::new(BthRepr::new(Opcode::RC_SEND_ONLY, 0x11, psn)),
        payload_len: payload.len(),
    };
    let mut b = vec![0u8; r.buffer_len()];
    r.emit(&mut b, payload).unwrap();
    let eth = EthernetRepr {
        src_addr: EthernetAddress([2, 0, 0, 0, 0, 2]),
        dst_addr: EthernetAddress([2, 0, 0, 0, 0, 1]),
        vlan: None,
        ethertype: ethernet::ETHERTYPE_IPV4,
    };
    let mut f = vec![0u8; eth.buffer_len()];
    eth.emit(&mut f).unwrap();
    f.extend_from_slice(&b);
    f
}

fn messages() -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut b = [0u8; 1024];
    let leader = ImageLeader {
        timestamp: 0x0102_0304_0506_0708,
        pixel_format: 0x0108_0001,
        width: 640,
        height: 480,
        offset_x: 16,
        offset_y: 8,
        chunks: false,
    };
    let n = msg::emit_leader(&mut b, 1, 3, 307_200, 7, true, &leader).unwrap();
    out.push(b[..n].to_vec());
    let t = ImageTrailer {
        size_y: 480,
        chunks: Some(TrailerChunks {
            payload_len: 307_264,
            layout_id: 0xab,
        }),
    };
    let n = msg::emit_trailer(&mut b, 2, 3, 0x8015, 307_200, 7, t).unwrap();
    out.push(b[..n].to_vec());
    let n = msg::emit_event(&mut b, 3, 0x9004, 5, 7, 0).unwrap();
    out.push(b[..n].to_vec());
    let n = msg::emit_stream_end(&mut b, 4, 7, 6, 1).unwrap();
    out.push(b[..n].to_vec());
    let n = msg::emit_released(&mut b, 5, &[9, 10, 11], true).unwrap();
    out.push(b[..n].to_vec());
    let hello = Hello {
        orsp_version: 0x0001_0000,
        caps: 0xe9,
        max_ctrl_msg: 512,
        dev_recv_depth: 16,
        max_buffers: 256,
        path_mtu: 4096,
    };
    let n = hello.emit(&mut b, 0).unwrap();
    out.push(b[..n].to_vec());
    let d = [
        Descriptor {
            buffer_id: 0,
            rkey: 0x1234,
            addr: 0x7f00_0000_0000,
            length: 307_200,
        },
        Descriptor {
            buffer_id: 1,
            rkey: 0x1234,
            addr: 0x7f00_0004_b000,
            length: 307_200,
        },
    ];
    let n = msg::emit_announce(&mut b, 0, msg::ANNOUNCE_QUEUE, &d).unwrap();
    out.push(b[..n].to_vec());
    let n = msg::emit_queue(&mut b, 1, &[0, 1]).unwrap();
    out.push(b[..n].to_vec());
    let n = msg::emit_flush(&mut b, 2, msg::FLUSH_FORGET).unwrap();
    out.push(b[..n].to_vec());
    out.push(rdmacam_tests::spec_leader_example());
    // a QUEUE whose count says 3 ids and whose length holds 2: malformed
    let n = msg::emit_queue(&mut b, 3, &[4, 5]).unwrap();
    b[19] = 3;
    out.push(b[..n].to_vec());
    out
}

#[test]
fn wireshark_reads_every_orsp_message_by_name_and_field() {
    if !rdmacam_tests::have_tshark() {
        return;
    }
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../wireshark/orsp.lua");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("orsp.pcap");
    let header = PcapHeader {
        datalink: DataLink::ETHERNET,
        ..Default::default()
    };
    let mut w = PcapWriter::with_header(std::fs::File::create(&path).unwrap(), header).unwrap();
    let msgs = messages();
    for (i, m) in msgs.iter().enumerate() {
        let f = send(m, i as u32);
        w.write_packet(&PcapPacket::new(
            Duration::from_millis(i as u64),
            f.len() as u32,
            &f,
        ))
        .unwrap();
    }
    drop(w);
    let fields = [
        "orsp.type",
        "orsp.seq",
        "orsp.length",
        "orsp.buffer_id",
        "orsp.block_id",
        "orsp.leader.width",
        "orsp.leader.height",
        "orsp.leader.pixel_format",
        "orsp.leader.dropped_before",
        "orsp.trailer.status",
        "orsp.trailer.valid_size",
        "orsp.trailer.chunk_layout_id",
        "orsp.event.id",
        "orsp.stream_end.frames_sent",
        "orsp.count",
        "orsp.id",
        "orsp.flags.more",
        "orsp.hello.path_mtu",
        "orsp.announce.rkey",
        "orsp.announce.address",
        "orsp.flush.forget",
        "_ws.expert",
        "orsp.leader.planned_size",
        "orsp.timestamp",
    ];
    let lua = format!("lua_script:{}", script.display());
    let rows = rdmacam_tests::tshark_fields_with(&path, &fields, &["-X", &lua]);
    let text = format!("{rows:#?}");
    assert_eq!(rows.len(), msgs.len(), "{text}");
    let col = |r: usize, name: &str| -> &str {
        let i = fields.iter().position(|f| *f == name).unwrap();
        rows[r][i].as_str()
    };
    // the type of each, by the spec's numbers
    let types: Vec<&str> = (0..rows.len()).map(|r| col(r, "orsp.type")).collect();
    assert_eq!(
        types,
        [
            "0x01", "0x02", "0x03", "0x04", "0x05", "0x06", "0x81", "0x82", "0x83", "0x01", "0x82"
        ],
        "{text}"
    );
    // LEADER
    assert_eq!(
        (
            col(0, "orsp.buffer_id"),
            col(0, "orsp.block_id"),
            col(0, "orsp.leader.width"),
            col(0, "orsp.leader.height"),
            col(0, "orsp.leader.pixel_format"),
            col(0, "orsp.leader.dropped_before"),
            col(0, "orsp.leader.planned_size"),
        ),
        ("3", "7", "640", "480", "0x01080001", "1", "307200"),
        "{text}"
    );
    // TRAILER with chunk data, cut
    assert_eq!(
        (
            col(1, "orsp.trailer.status"),
            col(1, "orsp.trailer.valid_size"),
            col(1, "orsp.trailer.chunk_layout_id"),
            col(1, "orsp.length"),
        ),
        ("0x8015", "307200", "0x000000ab", "68"),
        "{text}"
    );
    assert_eq!(col(2, "orsp.event.id"), "0x9004", "{text}");
    assert_eq!(col(3, "orsp.stream_end.frames_sent"), "6", "{text}");
    // RELEASED, a part with more to follow
    assert_eq!(
        (
            col(4, "orsp.count"),
            col(4, "orsp.id"),
            col(4, "orsp.flags.more")
        ),
        ("3", "9,10,11", "1"),
        "{text}"
    );
    assert_eq!(col(5, "orsp.hello.path_mtu"), "4096", "{text}");
    assert_eq!(
        (
            col(6, "orsp.count"),
            col(6, "orsp.announce.rkey"),
            col(6, "orsp.announce.address")
        ),
        (
            "2",
            "0x00001234,0x00001234",
            "0x00007f0000000000,0x00007f000004b000"
        ),
        "{text}"
    );
    assert_eq!(col(7, "orsp.id"), "0,1", "{text}");
    assert_eq!(col(8, "orsp.flush.forget"), "1", "{text}");
    // the spec's worked LEADER: block 7, buffer 3, 1920x1080 Mono8, seq 12
    assert_eq!(
        (
            col(9, "orsp.seq"),
            col(9, "orsp.buffer_id"),
            col(9, "orsp.block_id"),
            col(9, "orsp.leader.width"),
            col(9, "orsp.leader.height"),
            col(9, "orsp.leader.planned_size"),
            col(9, "orsp.timestamp"),
        ),
        (
            "12",
            "3",
            "7",
            "1920",
            "1080",
            "2073600",
            "72623859790382856"
        ),
        "{text}"
    );
    // nothing malformed but the last
    for r in 0..rows.len() - 1 {
        assert!(!col(r, "_ws.expert").contains("Malformed"), "{text}");
    }
    assert!(
        col(rows.len() - 1, "_ws.expert").contains(
            "Malformed ORSP QUEUE: its length field says 28 bytes, its type and counts need 32"
        ),
        "{text}"
    );
}
