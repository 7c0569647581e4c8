//! The data-mover mode: a requester that never reads a payload byte emits descriptors, and a
//! mover in software turns them into exactly the packets the normal requester sends, through
//! segmentation, the header template, a go-back after a sequence NAK and a retransmission.

use std::cell::Cell;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use rdmacam_protocol::rc::offload::{
    DESCRIPTOR_LEN, FLAG_ICRC, FLAG_IPV6, FLAG_RETRANSMISSION, TxDescriptor, move_packet,
};
use rdmacam_protocol::rc::{
    Instant, Path, PayloadRef, PayloadSource, Requester, RequesterConfig, TxPacket, WorkRequest,
};
use rdmacam_protocol::wire::pmtu::{MessageKind, Pmtu};

/// Frame memory the CPU may not read: `contains` answers, `payload` counts a violation.
struct Fpga<'a> {
    memory: &'a [Vec<u8>],
    reads: Cell<u32>,
}

impl PayloadSource for Fpga<'_> {
    fn payload(&self, handle: u32, offset: u64, len: usize) -> Option<&[u8]> {
        self.reads.set(self.reads.get() + 1);
        self.memory.payload(handle, offset, len)
    }
    fn contains(&self, handle: u32, offset: u64, len: usize) -> bool {
        self.memory.payload(handle, offset, len).is_some()
    }
}

fn requester(path: Path, offload: bool) -> Requester<8, 8> {
    let mut cfg = RequesterConfig::new(0x22, 0x11, 0xfff_ff0, path);
    cfg.pmtu = Pmtu::Mtu1024;
    cfg.icrc_offload = offload;
    Requester::new(cfg)
}

fn posts() -> Vec<WorkRequest> {
    let wr = |wr_id, kind, handle, len| WorkRequest {
        wr_id,
        kind,
        payload: PayloadRef { handle, offset: 3 },
        len,
        remote_va: 0x7f00_0000_1000,
        rkey: 0x1234,
        imm: 0xabcd_0123,
        solicited: kind == MessageKind::SendImm,
    };
    vec![
        wr(1, MessageKind::SendImm, 1, 61),    // a LEADER-like SEND
        wr(2, MessageKind::Write, 0, 20_001),  // FIRST, MIDDLEs, LAST with a pad
        wr(3, MessageKind::WriteImm, 0, 4096), // LAST with immediate data
        wr(4, MessageKind::Write, 0, 0),       // zero-length ONLY
    ]
}

/// A sequence NAK (AETH syndrome 0x60) or an ACK for `psn`, ICRC not checked by the requester.
fn aeth(psn: u32, nak: bool) -> [u8; 20] {
    let mut a = [0u8; 20];
    a[0] = 0x11;
    a[2..4].copy_from_slice(&0xffffu16.to_be_bytes());
    a[5..8].copy_from_slice(&0x22u32.to_be_bytes()[1..]);
    a[9..12].copy_from_slice(&(psn & 0xff_ffff).to_be_bytes()[1..]);
    a[12] = if nak { 0x60 } else { 0x1f };
    a
}

/// Every packet `rq` sends for [`posts`], with a sequence NAK after the fifth packet (a go-back
/// into the middle of the WRITE) and a final ACK.
fn run<S: PayloadSource + ?Sized>(mut rq: Requester<8, 8>, src: &S) -> Vec<TxPacket> {
    for w in posts() {
        rq.post(w).unwrap();
    }
    let mut out: Vec<TxPacket> = Vec::new();
    let mut nak_sent = false;
    loop {
        let before = out.len();
        while let Some(p) = rq.poll_transmit(Instant::ZERO, src) {
            out.push(p);
            if out.len() == 5 && !nak_sent {
                // the responder got up to the third packet and lost the fourth
                let lost = out[3].psn;
                rq.handle_ib(Instant::ZERO, &aeth(lost, true));
                nak_sent = true;
            }
        }
        if out.len() == before {
            return out;
        }
        // the window is full or everything went: acknowledge all of it
        let last = out[out.len() - 1].psn;
        rq.handle_ib(Instant::ZERO, &aeth(last, false));
    }
}

fn wire(p: &TxPacket, memory: &[Vec<u8>]) -> Vec<u8> {
    let payload = memory
        .payload(p.payload.handle, p.payload.offset, p.payload_len as usize)
        .unwrap();
    [p.header(), payload, p.trailer()].concat()
}

#[test]
fn descriptors_through_a_software_mover_are_the_normal_packets() {
    let memory: Vec<Vec<u8>> = vec![
        (0..30_000u32).map(|i| (i * 7 + 1) as u8).collect(),
        (0..100u8).collect(),
    ];
    for path in [
        Path::new(
            IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)),
            IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)),
        ),
        Path::new(
            IpAddr::V6(Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 2)),
            IpAddr::V6(Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 1)),
        ),
    ] {
        let normal = run(requester(path, false), memory.as_slice());
        let fpga = Fpga {
            memory: &memory,
            reads: Cell::new(0),
        };
        let moved = run(requester(path, true), &fpga);
        assert_eq!(fpga.reads.get(), 0, "the requester read payload bytes");
        assert_eq!(normal.len(), moved.len());
        assert!(normal.len() > 25, "{} packets", normal.len());
        assert!(moved.iter().any(|p| p.retransmission), "a go-back happened");
        let mut out = vec![0u8; 2048];
        for (n, m) in normal.iter().zip(&moved) {
            assert!(m.icrc_pending && !n.icrc_pending);
            // through the 128-byte layout a mover reads
            let bytes = TxDescriptor::of(m).to_bytes();
            assert_eq!(bytes.len(), DESCRIPTOR_LEN);
            let d = TxDescriptor::from_bytes(&bytes).unwrap();
            let len = move_packet(&d, memory.as_slice(), &mut out).unwrap();
            assert_eq!(&out[..len], &wire(n, &memory)[..], "PSN {:#x}", n.psn);
            assert_eq!(d.flags & FLAG_ICRC, FLAG_ICRC);
            assert_eq!(d.flags & FLAG_IPV6 != 0, path.remote_ip.is_ipv6());
            assert_eq!(d.flags & FLAG_RETRANSMISSION != 0, m.retransmission);
        }
    }
}

#[test]
fn the_descriptor_layout_is_the_documented_one() {
    let memory = vec![vec![0x5au8; 64]];
    let path = Path::new(
        IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)),
        IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)),
    );
    let mut rq = requester(path, true);
    rq.post(WorkRequest::write(1, PayloadRef::new(0, 1), 61, 0x1000, 7))
        .unwrap();
    let p = rq.poll_transmit(Instant::ZERO, memory.as_slice()).unwrap();
    let b = TxDescriptor::of(&p).to_bytes();
    // version 1, flags ICRC, 56 header bytes (IPv4 20, UDP 8, BTH 12, RETH 16), pad 3
    assert_eq!(&b[..4], &[1, FLAG_ICRC, 56, 3]);
    assert_eq!(&b[4..8], &61u32.to_le_bytes());
    assert_eq!(&b[8..12], &0u32.to_le_bytes());
    assert_eq!(&b[12..16], &0xfff_ff0u32.to_le_bytes());
    assert_eq!(&b[16..24], &1u64.to_le_bytes());
    assert_eq!(&b[24..32], &[0; 8]);
    assert_eq!(&b[32..88], p.header());
    assert!(b[88..].iter().all(|x| *x == 0));
    // the ICRC bytes wait for the mover
    assert_eq!(p.trailer(), &[0; 7]);
    // a descriptor of another version or with impossible lengths is refused
    let mut bad = b;
    bad[0] = 2;
    assert!(TxDescriptor::from_bytes(&bad).is_err());
    let mut bad = b;
    bad[2] = 10;
    assert!(TxDescriptor::from_bytes(&bad).is_err());
}
