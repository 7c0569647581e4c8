//! Test vectors for the data mover in Verilog (`fpga/`): the RC requester, in data-mover mode
//! (`icrc_offload`), streams messages; each packet's 128-byte descriptor goes to
//! `descriptors.bin`, the frame memory it points into to `memory.bin`, and the frame that
//! `offload::move_packet` (the software mover) makes of it, in Ethernet, to `expected.pcap`.
//! `fpga/sim`'s `mover-sim` runs the RTL on the first two files and compares what it sends with
//! the third, byte for byte (`scripts/fpga-check.sh`).
//!
//! ```sh
//! cargo run --release -p rdmacam-protocol --example mover_vectors -- OUT_DIR
//! ```
//!
//! Each case is a folder: the three files and `args`, the `mover-sim` options that place the
//! regions (`--region N=BASE:SIZE`) and say what the run must refuse.
//!
//! - `contract`: every kind of packet the requester emits, over IPv4 and IPv6: SEND and SEND
//!   with immediate, WRITE and WRITE with immediate as ONLY, FIRST, MIDDLE and LAST, every pad,
//!   payloads at every byte alignment, zero-length WRITEs, at path MTUs 1024 and 4096, and a
//!   go-back after a sequence NAK (retransmissions) and after an ACK timeout.
//! - `frame-1k`, `frame-4k`: one 1920x1080 Mono8 frame as an ORSP camera sends it (LEADER SEND,
//!   the frame as one WRITE, TRAILER SEND with immediate) at path MTU 1024 and 4096.
//! - `refusals`: good descriptors between ones a mover must refuse (a wrong version, impossible
//!   lengths, an unknown region, a payload beyond its region, reserved bits set).
//! - `read-error`: a region larger than the memory behind it: the frames whose payload the
//!   memory answers with SLVERR go out with their ICRC inverted.

use std::fs;
use std::io::Write;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::Path as FsPath;
use std::time::Duration;

use pcap_file::DataLink;
use pcap_file::pcap::{PcapHeader, PcapPacket, PcapWriter};
use rdmacam_protocol::rc::offload::{DESCRIPTOR_LEN, FLAG_IPV6, TxDescriptor, move_packet};
use rdmacam_protocol::rc::{Instant, Path, PayloadRef, Requester, RequesterConfig, WorkRequest};
use rdmacam_protocol::wire::pmtu::{MessageKind, Pmtu};

/// The Ethernet addresses `mover-sim` programs by default.
const MAC_DST: [u8; 6] = [0x02, 0, 0, 0, 0, 0x02];
const MAC_SRC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x01];

/// Frame memory in regions, and where each region lies in the mover's address space.
struct Memory {
    regions: Vec<Vec<u8>>,
    bases: Vec<u64>,
}

impl Memory {
    /// Regions placed one after another, each at a 4 KiB boundary plus `skew` bytes, so
    /// payloads start at every alignment of the 64-bit bus.
    fn new(regions: Vec<Vec<u8>>, skew: u64) -> Memory {
        let mut bases = Vec::new();
        let mut at = 0u64;
        for r in &regions {
            bases.push(at);
            at = (at + r.len() as u64).div_ceil(4096) * 4096 + skew;
        }
        Memory { regions, bases }
    }

    fn image(&self) -> Vec<u8> {
        let end = self.bases.last().unwrap() + self.regions.last().unwrap().len() as u64;
        let mut img = vec![0u8; end as usize];
        for (r, b) in self.regions.iter().zip(&self.bases) {
            img[*b as usize..*b as usize + r.len()].copy_from_slice(r);
        }
        img
    }

    fn args(&self) -> String {
        self.regions
            .iter()
            .zip(&self.bases)
            .enumerate()
            .map(|(n, (r, b))| format!("--region {n}={b:#x}:{:#x}", r.len()))
            .collect::<Vec<_>>()
            .join(" ")
    }
}

/// A case's descriptors and expected frames.
#[derive(Default)]
struct Case {
    descriptors: Vec<u8>,
    frames: Vec<Vec<u8>>,
}

impl Case {
    /// A descriptor the mover must turn into a frame.
    fn push(&mut self, d: &TxDescriptor, memory: &Memory) {
        let bytes = d.to_bytes();
        // through the layout a mover reads, as the RTL sees it
        let d = TxDescriptor::from_bytes(&bytes).expect("a descriptor the crate wrote");
        let mut packet = vec![0u8; 8192];
        let n = move_packet(&d, memory.regions.as_slice(), &mut packet).expect("move_packet");
        let mut frame = Vec::with_capacity(14 + n);
        frame.extend_from_slice(&MAC_DST);
        frame.extend_from_slice(&MAC_SRC);
        let ethertype: u16 = if d.flags & FLAG_IPV6 != 0 {
            0x86dd
        } else {
            0x0800
        };
        frame.extend_from_slice(&ethertype.to_be_bytes());
        frame.extend_from_slice(&packet[..n]);
        self.descriptors.extend_from_slice(&bytes);
        self.frames.push(frame);
    }

    /// A descriptor the mover must refuse: no frame.
    fn push_refused(&mut self, bytes: [u8; DESCRIPTOR_LEN]) {
        self.descriptors.extend_from_slice(&bytes);
    }

    /// The last frame pushed goes out with its ICRC inverted (its payload read failed).
    fn corrupt_last(&mut self) {
        let f = self.frames.last_mut().unwrap();
        let n = f.len();
        f[n - 4..].iter_mut().for_each(|b| *b = !*b);
    }

    fn write(&self, dir: &FsPath, memory: &Memory, extra_args: &str) {
        self.write_image(dir, &memory.image(), &memory.args(), extra_args)
    }

    fn write_image(&self, dir: &FsPath, image: &[u8], regions: &str, extra_args: &str) {
        fs::create_dir_all(dir).unwrap();
        fs::write(dir.join("descriptors.bin"), &self.descriptors).unwrap();
        fs::write(dir.join("memory.bin"), image).unwrap();
        let header = PcapHeader {
            datalink: DataLink::ETHERNET,
            ..Default::default()
        };
        let file = fs::File::create(dir.join("expected.pcap")).unwrap();
        let mut w = PcapWriter::with_header(file, header).unwrap();
        for f in &self.frames {
            w.write_packet(&PcapPacket::new(Duration::ZERO, f.len() as u32, f))
                .unwrap();
        }
        let mut args = fs::File::create(dir.join("args")).unwrap();
        writeln!(args, "{regions} {extra_args}").unwrap();
        println!(
            "{}: {} descriptors, {} frames",
            dir.display(),
            self.descriptors.len() / DESCRIPTOR_LEN,
            self.frames.len()
        );
    }
}

/// An ACK (syndrome 0x1f) or a sequence NAK (0x60) for `psn`, as the responder sends it.
fn aeth(qpn: u32, psn: u32, nak: bool) -> [u8; 20] {
    let mut a = [0u8; 20];
    a[0] = 0x11; // RC ACKNOWLEDGE
    a[2..4].copy_from_slice(&0xffffu16.to_be_bytes());
    a[5..8].copy_from_slice(&qpn.to_be_bytes()[1..]);
    a[9..12].copy_from_slice(&(psn & 0xff_ffff).to_be_bytes()[1..]);
    a[12] = if nak { 0x60 } else { 0x1f };
    a
}

const CAMERA_QPN: u32 = 0x11;
const HOST_QPN: u32 = 0x22;

fn requester(path: Path, pmtu: Pmtu, psn: u32) -> Requester<16, 16> {
    let mut cfg = RequesterConfig::new(CAMERA_QPN, HOST_QPN, psn, path);
    cfg.pmtu = pmtu;
    cfg.icrc_offload = true;
    Requester::new(cfg)
}

/// Runs `wrs` through a requester and pushes every packet it sends. After packet `nak_at` the
/// responder reports the packet before it lost (a go-back); with `timeout_at`, after that packet
/// the responder goes quiet until the ACK timer fires (a resend of everything outstanding).
fn stream(
    case: &mut Case,
    memory: &Memory,
    mut rq: Requester<16, 16>,
    wrs: &[WorkRequest],
    nak_at: Option<usize>,
    timeout_at: Option<usize>,
) {
    let mut next = 0;
    let mut sent = 0usize;
    let mut now = Instant::ZERO;
    let src = memory.regions.as_slice();
    let (mut nak_done, mut timeout_done) = (false, false);
    loop {
        while next < wrs.len() && rq.post(wrs[next]).is_ok() {
            next += 1;
        }
        let mut last_psn = None;
        while let Some(p) = rq.poll_transmit(now, src) {
            case.push(&TxDescriptor::of(&p), memory);
            sent += 1;
            last_psn = Some(p.psn);
            if Some(sent) == nak_at && !nak_done {
                nak_done = true;
                rq.handle_ib(now, &aeth(CAMERA_QPN, p.psn.wrapping_sub(1), true));
            }
        }
        while rq.poll_completion().is_some() {}
        if timeout_at.is_some_and(|t| sent >= t) && !timeout_done {
            // the responder goes quiet: nothing acknowledged until the ACK timer resends
            timeout_done = true;
        } else if let Some(psn) = last_psn {
            rq.handle_ib(now, &aeth(CAMERA_QPN, psn, false));
            continue;
        }
        if next == wrs.len() && rq.outstanding() == 0 {
            break;
        }
        // nothing to send: on to the requester's next timer
        now = rq
            .poll_timeout()
            .map_or(Instant(now.0 + 1_000_000), |t| t.max(now));
        rq.handle_timeout(now);
        assert!(
            now.0 < 1_000_000_000_000,
            "the requester stalled: {next} of {} posted, {} outstanding",
            wrs.len(),
            rq.outstanding()
        );
    }
    assert!(
        !rq.is_error(),
        "the requester failed: {:?}",
        rq.last_failure()
    );
}

fn paths() -> [Path; 2] {
    [
        Path::new(
            IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)),
            IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)),
        ),
        Path::new(
            IpAddr::V6(Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 2)),
            IpAddr::V6(Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 1)),
        ),
    ]
}

fn wr(kind: MessageKind, handle: u32, offset: u64, len: u32, id: u64) -> WorkRequest {
    WorkRequest {
        wr_id: id,
        kind,
        payload: PayloadRef { handle, offset },
        len,
        remote_va: 0x7f00_0000_0000 + id * 0x10000,
        rkey: 0x1234,
        imm: 0xabcd_0000 | id as u32,
        solicited: matches!(kind, MessageKind::SendImm),
    }
}

fn contract(out: &FsPath) {
    let memory = Memory::new(
        vec![
            (0..40_000u32).map(|i| (i * 7 + i / 251) as u8).collect(),
            (0..600u32).map(|i| (i * 13 + 5) as u8).collect(),
        ],
        5,
    );
    let mut case = Case::default();
    let kinds = [
        MessageKind::Write,
        MessageKind::WriteImm,
        MessageKind::Send,
        MessageKind::SendImm,
    ];
    for (pi, path) in paths().into_iter().enumerate() {
        for (mi, pmtu) in [Pmtu::Mtu1024, Pmtu::Mtu4096].into_iter().enumerate() {
            let mut wrs = Vec::new();
            let mut id = 0;
            for offset in 0..8u64 {
                for len in [0u32, 1, 2, 3, 4, 5, 61, 1023, 1024, 1025, 4093, 4096, 9001] {
                    let kind = kinds[(id as usize) % kinds.len()];
                    // SENDs come from the small region, as the camera's messages do
                    let (handle, at, len) =
                        if matches!(kind, MessageKind::Send | MessageKind::SendImm) {
                            (1, offset, len.min(512))
                        } else {
                            (0, offset * 1001, len)
                        };
                    wrs.push(wr(kind, handle, at, len, id));
                    id += 1;
                }
            }
            let psn = [0x00_0100, 0xff_fff0][(pi + mi) % 2]; // one run wraps the PSN
            stream(
                &mut case,
                &memory,
                requester(path, pmtu, psn),
                &wrs,
                Some(40 + 7 * mi),
                Some(70),
            );
        }
    }
    case.write(&out.join("contract"), &memory, "--expect-refused 0");
}

fn frame(out: &FsPath, name: &str, pmtu: Pmtu) {
    let (w, h) = (1920u32, 1080u32);
    let pixels: Vec<u8> = (0..w * h).map(|i| ((i % w) + (i / w) * 3) as u8).collect();
    let messages: Vec<u8> = (0..256u32).map(|i| i as u8).collect();
    let memory = Memory::new(vec![pixels, messages], 0);
    let wrs = [
        wr(MessageKind::Send, 1, 0, 48, 1),                 // LEADER
        wr(MessageKind::Write, 0, 0, w * h, 2),             // the frame
        wr(MessageKind::SendImm, 1, 64, 36, 3).solicited(), // TRAILER
    ];
    let mut case = Case::default();
    stream(
        &mut case,
        &memory,
        requester(paths()[0], pmtu, 0x1000),
        &wrs,
        None,
        None,
    );
    case.write(&out.join(name), &memory, "--expect-refused 0");
}

fn refusals(out: &FsPath) {
    let memory = Memory::new(vec![(0..8192u32).map(|i| i as u8).collect()], 0);
    let mut case = Case::default();
    let mut rq = requester(paths()[0], Pmtu::Mtu1024, 0x2000);
    let src = memory.regions.as_slice();
    for id in 0..8 {
        rq.post(wr(MessageKind::Write, 0, 100 * id, 700, id))
            .unwrap();
    }
    let mut good = Vec::new();
    while let Some(p) = rq.poll_transmit(Instant::ZERO, src) {
        good.push(TxDescriptor::of(&p));
    }
    let bad = |f: &dyn Fn(&mut [u8; DESCRIPTOR_LEN])| {
        let mut b = good[0].to_bytes();
        f(&mut b);
        b
    };
    let refused = [
        // the first one is what STATUS must keep: an unknown version
        bad(&|b| b[0] = 2),
        bad(&|b| b[1] = 0),     // ICRC flag clear
        bad(&|b| b[1] |= 0x80), // a reserved flag
        bad(&|b| b[2] = 42),    // header length not a word
        bad(&|b| b[2] = 96),    // header length too long
        bad(&|b| b[2] = 36),    // shorter than IPv4+UDP+BTH
        bad(&|b| b[3] = 4),     // pad beyond 3
        bad(&|b| b[3] = 1),     // payload + pad not a word
        bad(&|b| b[4..8].copy_from_slice(&4100u32.to_le_bytes())), // beyond the MTU
        bad(&|b| b[8] = 2),     // a region never set
        bad(&|b| b[8] = 9),     // no such region
        bad(&|b| b[16..24].copy_from_slice(&7700u64.to_le_bytes())), // past the region's end
        bad(&|b| b[20] = 1),    // an offset beyond 4 GiB
        bad(&|b| b[27] = 1),    // reserved bytes 24-31
    ];
    for (i, d) in good.iter().enumerate() {
        case.push(d, &memory);
        if let Some(b) = refused.get(i * 2) {
            case.push_refused(*b);
        }
        if let Some(b) = refused.get(i * 2 + 1) {
            case.push_refused(*b);
        }
    }
    assert!(good.len() * 2 >= refused.len());
    let args = format!("--expect-refused {} --expect-error 0x02", refused.len());
    case.write(&out.join("refusals"), &memory, &args);
}

fn read_error(out: &FsPath) {
    // the memory reads as zeros where it fails (as mover-sim's does)
    let bytes = (0..8192u32).map(|i| if i < 4096 { (i * 3) as u8 } else { 0 });
    let memory = Memory::new(vec![bytes.collect()], 0);
    let mut case = Case::default();
    let mut rq = requester(paths()[0], Pmtu::Mtu1024, 0x3000);
    for (id, at) in [0u64, 3500, 6000, 100].into_iter().enumerate() {
        rq.post(wr(MessageKind::Write, 0, at, 900, id as u64))
            .unwrap();
    }
    // only the first 4 KiB of the region exist: reads past them answer SLVERR
    let image = &memory.image()[..4096];
    while let Some(p) = rq.poll_transmit(Instant::ZERO, memory.regions.as_slice()) {
        case.push(&TxDescriptor::of(&p), &memory);
        if p.payload.offset + u64::from(p.payload_len) > 4096 {
            case.corrupt_last();
        }
    }
    let args = "--expect-refused 0 --expect-error 0x0a";
    case.write_image(&out.join("read-error"), image, &memory.args(), args);
}

fn main() {
    let out = std::env::args()
        .nth(1)
        .expect("usage: mover_vectors OUT_DIR");
    let out = FsPath::new(&out);
    contract(out);
    frame(out, "frame-1k", Pmtu::Mtu1024);
    frame(out, "frame-4k", Pmtu::Mtu4096);
    refusals(out);
    read_error(out);
}
