//! `rdmacam inspect`: read a capture, find every RoCE packet, recompute its ICRC from the raw
//! bytes and say whether it matches.
//!
//! A packet counts as RoCE when it is UDP to the RoCEv2 port (IPv4 or IPv6, VLAN-tagged or not)
//! or an Ethernet frame of type 0x8915 (RoCEv1). Damaged headers do not hide a packet: an IPv4
//! header whose IHL or protocol byte was corrupted is still recognised by the port at the usual
//! offset, and its ICRC is computed over the bytes as they are (and so comes out bad).

use std::fmt::Write as _;

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::Path;
use std::process::ExitCode;

use pcap_file::DataLink;
use pcap_file::pcap::PcapReader;
use pcap_file::pcapng::blocks::enhanced_packet::EnhancedPacketOption;
use pcap_file::pcapng::{Block, PcapNgReader};
use rdmacam_protocol::wire::{AethRepr, AethSyndrome, BthRepr, NakCode, bth, icrc, udp};
use serde::Serialize;

/// What the inspector found in one RoCE packet.
#[derive(Debug, Serialize, PartialEq, Eq)]
pub struct RocePacket {
    /// Frame number in the capture, counting from 1 as tshark does.
    pub index: u64,
    /// "RoCEv2" or "RoCEv1".
    pub version: &'static str,
    /// Source IP address (source GID for RoCEv1).
    pub src: IpAddr,
    /// Destination IP address (destination GID for RoCEv1).
    pub dst: IpAddr,
    /// UDP source port (RoCEv2 only).
    pub src_port: Option<u16>,
    /// UDP destination port (RoCEv2 only).
    pub dst_port: Option<u16>,
    /// 802.1Q VLAN ID, if the frame was tagged.
    pub vlan: Option<u16>,
    /// Destination QP number from the BTH.
    pub qpn: u32,
    /// Opcode name, or `unknown(0xNN)` when the BTH does not parse.
    pub opcode: String,
    /// The raw opcode byte.
    pub opcode_value: u8,
    /// Packet sequence number.
    pub psn: u32,
    /// BTH AckReq bit.
    pub ack_req: bool,
    /// Payload bytes after the transport headers, without pad and ICRC; `null` when the BTH
    /// does not parse.
    pub payload_len: Option<usize>,
    /// AETH verdict for ACK/NAK packets: `ack`, `rnr-nak(timer=N)` or `nak(<reason>)`.
    pub aeth: Option<String>,
    /// `ok` or `bad`.
    pub icrc: &'static str,
    /// ICRC carried in the packet (as a little-endian u32, printed in hex), if it has one.
    pub icrc_carried: Option<String>,
    /// ICRC computed over the packet's bytes.
    pub icrc_computed: Option<String>,
    /// Why the ICRC could not be checked (truncated packet), when that is the case, or how a
    /// UDP GSO send was split.
    pub note: Option<String>,
    /// A UDP GSO send captured before segmentation (on loopback, a veth, or the sender's own
    /// interface): how many segments it holds. `icrc` is then the verdict on every segment as
    /// the kernel cuts it (IPv4 identification counting up from the captured one).
    pub gso_segments: Option<usize>,
}

impl RocePacket {
    fn text_line(&self) -> String {
        let mut s = format!(
            "{} {} -> {} qpn=0x{:06x} {} psn={} len=",
            self.index, self.src, self.dst, self.qpn, self.opcode, self.psn
        );
        match self.payload_len {
            Some(n) => write!(s, "{n}").unwrap(),
            None => s.push('-'),
        }
        if let Some(a) = &self.aeth {
            write!(s, " aeth={a}").unwrap();
        }
        if let Some(v) = self.vlan {
            write!(s, " vlan={v}").unwrap();
        }
        write!(s, " icrc={}", self.icrc).unwrap();
        if let Some(n) = &self.note {
            write!(s, " ({n})").unwrap();
        }
        s
    }
}

#[derive(Debug, Default, Serialize)]
struct Summary {
    roce_packets: u64,
    icrc_good: u64,
    icrc_bad: u64,
    /// Received packets whose IP header `rdmacam run --pcap` rebuilt and whose ICRC, computed
    /// with identification 0, did not match: the sender used another identification.
    icrc_unverifiable: u64,
    other_packets: u64,
}

/// Where the network layer of a frame starts, and what it is.
enum L3<'a> {
    Ipv4(&'a [u8]),
    Ipv6(&'a [u8]),
    RoceV1(&'a [u8]),
}

/// Strip the link layer of a captured frame.
fn link_layer(link: DataLink, data: &[u8]) -> Option<(L3<'_>, Option<u16>)> {
    let (ethertype, rest, vlan) = match link {
        DataLink::ETHERNET => {
            let mut at = 12;
            let mut vlan = None;
            loop {
                let t = u16::from_be_bytes([*data.get(at)?, *data.get(at + 1)?]);
                if t == 0x8100 || t == 0x88a8 {
                    if vlan.is_none() {
                        vlan = Some(
                            u16::from_be_bytes([*data.get(at + 2)?, *data.get(at + 3)?]) & 0x0fff,
                        );
                    }
                    at += 4;
                } else {
                    break (t, &data[at + 2..], vlan);
                }
            }
        }
        DataLink::LINUX_SLL => (
            u16::from_be_bytes([*data.get(14)?, *data.get(15)?]),
            data.get(16..)?,
            None,
        ),
        DataLink::LINUX_SLL2 => (
            u16::from_be_bytes([*data.first()?, *data.get(1)?]),
            data.get(20..)?,
            None,
        ),
        DataLink::RAW | DataLink::IPV4 | DataLink::IPV6 => match data.first()? >> 4 {
            4 => (0x0800, data, None),
            6 => (0x86dd, data, None),
            _ => return None,
        },
        DataLink::NULL | DataLink::LOOP => {
            let fam = u32::from_ne_bytes(data.get(..4)?.try_into().ok()?);
            let fam_be = u32::from_be_bytes(data.get(..4)?.try_into().ok()?);
            match (fam, fam_be) {
                (2, _) | (_, 2) => (0x0800, data.get(4..)?, None),
                (24 | 28 | 30, _) | (_, 24 | 28 | 30) => (0x86dd, data.get(4..)?, None),
                _ => return None,
            }
        }
        _ => return None,
    };
    let l3 = match ethertype {
        0x0800 => L3::Ipv4(rest),
        0x86dd => L3::Ipv6(rest),
        0x8915 => L3::RoceV1(rest),
        _ => return None,
    };
    Some((l3, vlan))
}

fn be16(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_be_bytes([*b.get(at)?, *b.get(at + 1)?]))
}

/// Analyse one captured frame; `None` when it is not a RoCE packet.
pub fn analyze(index: u64, link: DataLink, data: &[u8], port: u16) -> Option<RocePacket> {
    analyze_ports(index, link, data, &|_, dst| dst == port)
}

/// [`analyze`] for a UDP packet whose (source, destination) ports `is_roce` accepts.
pub fn analyze_ports(
    index: u64,
    link: DataLink,
    data: &[u8],
    is_roce: &dyn Fn(u16, u16) -> bool,
) -> Option<RocePacket> {
    let roce_port = |ip: &[u8], udp: usize| match (be16(ip, udp), be16(ip, udp + 2)) {
        (Some(s), Some(d)) => is_roce(s, d),
        _ => false,
    };
    let (l3, vlan) = link_layer(link, data)?;
    match l3 {
        L3::Ipv4(ip) => {
            if ip.len() < 20 {
                return None;
            }
            let ihl = usize::from(ip[0] & 0x0f) * 4;
            let honest = ihl >= 20 && ip[9] == 17 && roce_port(ip, ihl);
            // A damaged IHL or protocol byte: rxe assumes a 20-byte header, so do we.
            let hl = if honest {
                ihl
            } else if roce_port(ip, 20) {
                20
            } else {
                return None;
            };
            let src = IpAddr::V4(Ipv4Addr::new(ip[12], ip[13], ip[14], ip[15]));
            let dst = IpAddr::V4(Ipv4Addr::new(ip[16], ip[17], ip[18], ip[19]));
            Some(rocev2(index, vlan, src, dst, &ip[..hl], false, &ip[hl..]))
        }
        L3::Ipv6(ip) => {
            if ip.len() < 40 || !roce_port(ip, 40) {
                return None;
            }
            let src = IpAddr::V6(Ipv6Addr::from(<[u8; 16]>::try_from(&ip[8..24]).ok()?));
            let dst = IpAddr::V6(Ipv6Addr::from(<[u8; 16]>::try_from(&ip[24..40]).ok()?));
            Some(rocev2(index, vlan, src, dst, &ip[..40], true, &ip[40..]))
        }
        L3::RoceV1(grh) => {
            if grh.len() < 40 + bth::HEADER_LEN {
                return None;
            }
            let src = IpAddr::V6(Ipv6Addr::from(<[u8; 16]>::try_from(&grh[8..24]).ok()?));
            let dst = IpAddr::V6(Ipv6Addr::from(<[u8; 16]>::try_from(&grh[24..40]).ok()?));
            let paylen = usize::from(be16(grh, 4)?);
            let avail = &grh[40..];
            let (ib, note) = if paylen <= avail.len() {
                (&avail[..paylen], None)
            } else {
                (
                    avail,
                    Some("truncated: GRH payload length exceeds the captured bytes"),
                )
            };
            let check = icrc::raw_rocev1(&grh[..40], ib).ok();
            let mut p = describe(index, "RoCEv1", vlan, src, dst, ib, check, note);
            p.src_port = None;
            p.dst_port = None;
            Some(p)
        }
    }
}

fn rocev2(
    index: u64,
    vlan: Option<u16>,
    src: IpAddr,
    dst: IpAddr,
    ip_header: &[u8],
    v6: bool,
    l4: &[u8],
) -> RocePacket {
    let udp_len = be16(l4, 4).map(usize::from).unwrap_or(0);
    let (dgram, note) = if udp_len < udp::HEADER_LEN {
        (l4, Some("UDP length field below 8"))
    } else if udp_len > l4.len() {
        (l4, Some("truncated: UDP length exceeds the captured bytes"))
    } else {
        (&l4[..udp_len], None)
    };
    let check = if note.is_none() {
        icrc::raw_rocev2(ip_header, v6, dgram).ok()
    } else {
        None
    };
    let ib = dgram.get(udp::HEADER_LEN..).unwrap_or(&[]);
    let mut p = describe(index, "RoCEv2", vlan, src, dst, ib, check, note);
    p.src_port = be16(l4, 0);
    p.dst_port = be16(l4, 2);
    if p.icrc == "bad"
        && note.is_none()
        && let Some(size) = gso_segment_size(dgram)
    {
        // judged as its receiver gets it: segment by segment
        let segments = gso_segments(ip_header, v6, dgram, size);
        let bad: Vec<String> = segments
            .iter()
            .enumerate()
            .filter(|(_, (ip, d))| !matches!(icrc::raw_rocev2(ip, v6, d), Ok((c, r)) if c == r))
            .map(|(k, _)| (k + 1).to_string())
            .collect();
        let n = segments.len();
        p.gso_segments = Some(n);
        p.payload_len =
            describe(index, "RoCEv2", vlan, src, dst, &ib[..size], None, None).payload_len;
        p.icrc_carried = None;
        p.icrc_computed = None;
        p.icrc = if bad.is_empty() { "ok" } else { "bad" };
        p.note = Some(if bad.is_empty() {
            format!(
                "a UDP GSO send captured before segmentation: {n} segments of {size} bytes, each ICRC good"
            )
        } else {
            format!(
                "a UDP GSO send captured before segmentation: {n} segments of {size} bytes; bad ICRC in segment {} (IPv4 identification counting up from the first, as the kernel numbers them)",
                bad.join(", ")
            )
        });
    }
    p
}

/// Fill in the transport fields from the InfiniBand part (`BTH ‖ … ‖ ICRC`).
#[allow(clippy::too_many_arguments)]
fn describe(
    index: u64,
    version: &'static str,
    vlan: Option<u16>,
    src: IpAddr,
    dst: IpAddr,
    ib: &[u8],
    check: Option<(u32, u32)>,
    note: Option<&str>,
) -> RocePacket {
    let view = (ib.len() >= bth::HEADER_LEN).then(|| bth::Packet::new_unchecked(ib));
    let parsed = view.as_ref().and_then(|v| BthRepr::parse(v).ok());
    let opcode_value = view.as_ref().map(|v| v.opcode().0).unwrap_or(0);
    let opcode = match &parsed {
        Some(b) => b.opcode.to_string(),
        None => format!("unknown(0x{opcode_value:02x})"),
    };
    let payload_len = parsed.as_ref().and_then(|b| {
        let h = b.opcode.headers().len();
        ib.len()
            .checked_sub(bth::HEADER_LEN + h + usize::from(b.pad_count) + icrc::ICRC_LEN)
    });
    let aeth = parsed
        .as_ref()
        .filter(|b| b.opcode.headers().aeth)
        .and_then(|b| {
            let at = bth::HEADER_LEN + b.opcode.headers().aeth_offset();
            AethRepr::parse(ib.get(at..)?).ok()
        })
        .map(|a| match a.syndrome {
            AethSyndrome::Ack { .. } => "ack".to_string(),
            AethSyndrome::RnrNak { timer } => format!("rnr-nak(timer={timer})"),
            AethSyndrome::Nak(code) => format!(
                "nak({})",
                match code {
                    NakCode::PsnSequenceError => "psn-sequence-error",
                    NakCode::InvalidRequest => "invalid-request",
                    NakCode::RemoteAccessError => "remote-access-error",
                    NakCode::RemoteOperationalError => "remote-operational-error",
                    NakCode::InvalidRdRequest => "invalid-rd-request",
                }
            ),
        });
    let good = matches!(check, Some((c, r)) if c == r);
    RocePacket {
        index,
        version,
        src,
        dst,
        src_port: None,
        dst_port: None,
        vlan,
        qpn: view.as_ref().map(|v| v.dest_qp()).unwrap_or(0),
        opcode,
        opcode_value,
        psn: view.as_ref().map(|v| v.psn()).unwrap_or(0),
        ack_req: view.as_ref().map(|v| v.ack_req()).unwrap_or(false),
        payload_len,
        aeth,
        icrc: if good { "ok" } else { "bad" },
        icrc_carried: check.map(|(_, r)| format!("0x{r:08x}")),
        icrc_computed: check.map(|(c, _)| format!("0x{c:08x}")),
        note: note.map(str::to_string).or_else(|| {
            check
                .is_none()
                .then(|| "too short for BTH and ICRC".to_string())
        }),
        gso_segments: None,
    }
}

/// A UDP GSO send captured whole (`dgram` is its UDP header and every segment's bytes): the
/// size of its segments, when they can be told: equal-size RoCEv2 packets of one queue pair
/// whose PSNs count up, the last possibly shorter. The kernel cuts such a send into datagrams
/// of that size, each with its own IP and UDP length and, for IPv4, the identification of the
/// one before plus one: each segment's ICRC covers those. `None`: not such a send.
fn gso_segment_size(dgram: &[u8]) -> Option<usize> {
    let ib = dgram.get(udp::HEADER_LEN..)?;
    let min = bth::HEADER_LEN + icrc::ICRC_LEN;
    if ib.len() < 2 * min {
        return None;
    }
    let first = bth::Packet::new_unchecked(ib);
    let (qpn, psn) = (first.dest_qp(), first.psn());
    let continues = |at: usize, k: u32| {
        ib.get(at..at + bth::HEADER_LEN).is_some_and(|b| {
            let b = bth::Packet::new_unchecked(b);
            b.dest_qp() == qpn && b.psn() == psn.wrapping_add(k) & 0x00ff_ffff
        })
    };
    // RoCEv2 packets are whole 4-byte words; the second segment names the size
    (min..=ib.len() - min).step_by(4).find(|&size| {
        let n = ib.len().div_ceil(size);
        ib.len() - (n - 1) * size >= min && (1..n).all(|k| continues(k * size, k as u32))
    })
}

/// Each segment of a UDP GSO send as the kernel sends it: `(ip_header, udp_datagram)`.
fn gso_segments(ip_header: &[u8], v6: bool, dgram: &[u8], size: usize) -> Vec<(Vec<u8>, Vec<u8>)> {
    let ib = &dgram[udp::HEADER_LEN..];
    let id = be16(ip_header, 4).unwrap_or(0);
    ib.chunks(size)
        .enumerate()
        .map(|(k, seg)| {
            let udp_len = (udp::HEADER_LEN + seg.len()) as u16;
            let mut ip = ip_header.to_vec();
            if v6 {
                ip[4..6].copy_from_slice(&udp_len.to_be_bytes());
            } else {
                let total = (ip_header.len() as u16).wrapping_add(udp_len);
                ip[2..4].copy_from_slice(&total.to_be_bytes());
                ip[4..6].copy_from_slice(&id.wrapping_add(k as u16).to_be_bytes());
            }
            let mut d = dgram[..udp::HEADER_LEN].to_vec();
            d[4..6].copy_from_slice(&udp_len.to_be_bytes());
            d.extend_from_slice(seg);
            (ip, d)
        })
        .collect()
}

/// How `rdmacam run --pcap` marks received packets whose IP/UDP header it rebuilt.
const RECONSTRUCTED_PREFIX: &str = "received on a UDP socket";

/// One captured frame: link type, bytes, and whether its headers were reconstructed by
/// `rdmacam run --pcap` (received on a UDP socket: the IP identification the ICRC covers is not
/// known, so a mismatch there proves nothing).
type Captured = (DataLink, Vec<u8>, bool);

/// Every frame of a capture with its link type, in order, and a warning if the capture ends in a
/// cut block (its writer was killed): the packets before it are still returned, as tshark does.
/// `-` is standard input (`tcpdump -w - | rdmacam inspect -`), read to its end.
fn frames(path: &Path) -> Result<(Vec<Captured>, Option<Tail>), String> {
    if path == Path::new("-") {
        let mut bytes = Vec::new();
        std::io::Read::read_to_end(&mut std::io::stdin().lock(), &mut bytes)
            .map_err(|e| format!("cannot read standard input: {e}"))?;
        return frames_of(&bytes, "standard input");
    }
    let bytes = std::fs::read(path).map_err(|e| format!("cannot open {}: {e}", path.display()))?;
    frames_of(&bytes, &path.display().to_string())
}

/// How a capture that could not be read to its end ends.
#[derive(Debug)]
enum Tail {
    /// Its last record is cut short (a writer killed mid-write): everything before is whole.
    Cut(String),
    /// A record before its end is damaged: the rest of the file is not read.
    Damaged(String),
}

/// Where a capture's structure breaks before its end, walking its records (pcap) or blocks
/// (pcapng) by their lengths: `None` when every record is whole but possibly the last, which
/// may run past the end of the file (a cut tail). A length no capture writes (past pcap's
/// snap length, a pcapng block under 12 bytes, not a multiple of 4, or whose trailing copy
/// differs) is damage.
fn damaged_at(b: &[u8]) -> Option<usize> {
    let u32_at = |at: usize, le: bool| {
        let w: [u8; 4] = b.get(at..at + 4)?.try_into().ok()?;
        Some(if le {
            u32::from_le_bytes(w)
        } else {
            u32::from_be_bytes(w)
        } as usize)
    };
    if b.get(..4) == Some(&[0x0a, 0x0d, 0x0d, 0x0a]) {
        let mut le = true;
        let mut at = 0;
        while at + 12 <= b.len() {
            if b[at..at + 4] == [0x0a, 0x0d, 0x0d, 0x0a] {
                le = b.get(at + 8..at + 12) == Some(&[0x4d, 0x3c, 0x2b, 0x1a]);
            }
            let len = u32_at(at + 4, le)?;
            if len < 12 || len % 4 != 0 || len > 1 << 26 {
                return Some(at);
            }
            if at + len > b.len() {
                return None;
            }
            if u32_at(at + len - 4, le) != Some(len) {
                return Some(at);
            }
            at += len;
        }
        return None;
    }
    let le = matches!(
        b.get(..4),
        Some([0xd4, 0xc3, 0xb2, 0xa1] | [0x4d, 0x3c, 0xb2, 0xa1])
    );
    let snap = u32_at(16, le)?.clamp(65_535, 1 << 18);
    let mut at = 24;
    while at + 16 <= b.len() {
        let (incl, orig) = (u32_at(at + 8, le)?, u32_at(at + 12, le)?);
        if incl > snap || incl > orig {
            return Some(at);
        }
        if at + 16 + incl > b.len() {
            return None;
        }
        at += 16 + incl;
    }
    None
}

/// [`frames`] of a capture held in memory; `name` goes into the messages.
fn frames_of(bytes: &[u8], name: &str) -> Result<(Vec<Captured>, Option<Tail>), String> {
    let magic: [u8; 4] = bytes
        .get(..4)
        .and_then(|m| m.try_into().ok())
        .ok_or_else(|| format!("cannot read {name}: shorter than a capture header"))?;
    let file = bytes;
    let bad = |e: pcap_file::PcapError| format!("{name} is not a readable capture: {e}");
    let mut out = Vec::new();
    // a read error in the last record is a writer killed mid-write (a warning: what came
    // before is whole); one before it is damage, and what follows it goes unread (exit 2)
    let cut = |n: usize, e: pcap_file::PcapError| match damaged_at(file) {
        None => Tail::Cut(format!(
            "{name} ends in a cut packet after {n} whole ones (was its writer killed?): {e}"
        )),
        Some(at) => Tail::Damaged(format!(
            "{name} is damaged at byte {at}, after {n} whole packets: the {} bytes from there \
             are not read, and nothing in them is judged ({e})",
            file.len() - at
        )),
    };
    if magic == [0x0a, 0x0d, 0x0d, 0x0a] {
        let mut r = PcapNgReader::new(file).map_err(bad)?;
        while let Some(block) = r.next_block() {
            let block = match block {
                Ok(b) => b,
                Err(e) if !out.is_empty() => {
                    let w = cut(out.len(), e);
                    return Ok((out, Some(w)));
                }
                Err(e) => return Err(bad(e)),
            };
            let (iface, data, rebuilt) = match block {
                Block::EnhancedPacket(p) => {
                    let rebuilt = p.options.iter().any(|o| {
                        matches!(o, EnhancedPacketOption::Comment(c)
                            if c.starts_with(RECONSTRUCTED_PREFIX))
                    });
                    (p.interface_id, p.data.into_owned(), rebuilt)
                }
                Block::SimplePacket(p) => (0, p.data.into_owned(), false),
                Block::Packet(p) => (u32::from(p.interface_id), p.data.into_owned(), false),
                _ => continue,
            };
            let link = r
                .interfaces()
                .get(iface as usize)
                .map(|i| i.linktype)
                .ok_or_else(|| format!("{name}: packet names a missing interface"))?;
            out.push((link, data, rebuilt));
        }
    } else {
        let mut r = PcapReader::new(file).map_err(bad)?;
        let link = r.header().datalink;
        while let Some(p) = r.next_packet() {
            match p {
                Ok(p) => out.push((link, p.data.into_owned(), false)),
                Err(e) if !out.is_empty() => {
                    let w = cut(out.len(), e);
                    return Ok((out, Some(w)));
                }
                Err(e) => return Err(bad(e)),
            }
        }
    }
    Ok((out, None))
}

/// Every RoCE packet of a capture as `rdmacam inspect` judges it (`icrc` is `ok`, `bad` or
/// `unverifiable`), for tests and tools.
pub fn packets(path: &Path, port: u16) -> Result<Vec<RocePacket>, String> {
    let (frames, tail) = frames(path)?;
    if let Some(Tail::Damaged(d)) = tail {
        return Err(d);
    }
    Ok(judge(&frames, port))
}

/// [`packets`] of a capture held in memory (the fuzz target reads captures this way).
pub fn packets_of(bytes: &[u8], port: u16) -> Result<Vec<RocePacket>, String> {
    let (frames, _) = frames_of(bytes, "the capture")?;
    Ok(judge(&frames, port))
}

fn judge(frames: &[Captured], port: u16) -> Vec<RocePacket> {
    frames
        .iter()
        .enumerate()
        .filter_map(|(i, (link, data, rebuilt))| {
            let mut p = analyze(i as u64 + 1, *link, data, port)?;
            if p.icrc != "ok" && *rebuilt {
                p.icrc = "unverifiable";
            }
            Some(p)
        })
        .collect()
}

/// The UDP ports that carry RoCEv2 in a capture, when no `--port` is given: 4791, and every
/// port of a packet whose ICRC checks as RoCEv2 (a CRC-32 over the whole packet: other traffic
/// passes it once in 4 billion). So both directions of a conversation on any ports are
/// followed (a camera and a host on 47910/47911, say), and a damaged packet to one of those
/// ports is judged, not skipped.
fn roce_ports(frames: &[Captured]) -> std::collections::BTreeSet<u16> {
    let mut ports = std::collections::BTreeSet::from([ROCEV2_PORT]);
    for (link, data, _) in frames {
        if let Some(p) = analyze_ports(0, *link, data, &|_, _| true)
            && p.icrc == "ok"
        {
            // both ends: a capture taken at one of them holds that end's received packets
            // with rebuilt headers
            ports.extend(p.dst_port);
            ports.extend(p.src_port);
        }
    }
    ports
}

/// RoCEv2's UDP port.
const ROCEV2_PORT: u16 = 4791;

/// Run the subcommand; the exit code follows the documented contract (0 good, 1 bad, 2 unreadable).
/// `port`: packets to or from this UDP port only; `None`: every conversation found
/// ([`roce_ports`]).
pub fn run(path: &Path, port: Option<u16>, json: bool) -> ExitCode {
    let mut damaged = None;
    let frames = match frames(path) {
        Ok((f, tail)) => {
            match tail {
                Some(Tail::Cut(w)) => eprintln!("rdmacam inspect: warning: {w}"),
                Some(Tail::Damaged(d)) => damaged = Some(d),
                None => {}
            }
            f
        }
        Err(e) => {
            eprintln!("rdmacam inspect: {e}");
            return ExitCode::from(2);
        }
    };
    let ports = roce_ports(&frames);
    let is_roce = |src: u16, dst: u16| match port {
        Some(p) => src == p || dst == p,
        None => ports.contains(&dst),
    };
    let mut sum = Summary::default();
    let mut out = String::new();
    for (i, (link, data, rebuilt)) in frames.iter().enumerate() {
        match analyze_ports(i as u64 + 1, *link, data, &is_roce) {
            Some(mut p) => {
                sum.roce_packets += 1;
                if p.icrc == "ok" {
                    sum.icrc_good += 1;
                } else if *rebuilt {
                    p.icrc = "unverifiable";
                    sum.icrc_unverifiable += 1;
                } else {
                    sum.icrc_bad += 1;
                }
                if json {
                    out.push_str(&serde_json::to_string(&p).expect("serialisable"));
                } else {
                    out.push_str(&p.text_line());
                }
                out.push('\n');
            }
            None => sum.other_packets += 1,
        }
    }
    if json {
        let s = serde_json::json!({ "summary": sum });
        writeln!(out, "{s}").unwrap();
    } else {
        writeln!(
            out,
            "summary: {} RoCE packets, {} with a good ICRC, {} with a bad ICRC, {} other packets skipped{}",
            sum.roce_packets,
            sum.icrc_good,
            sum.icrc_bad,
            sum.other_packets,
            if sum.icrc_unverifiable > 0 {
                format!(
                    "; {} received packets unverifiable (their IP header was rebuilt, the sender's IP identification is unknown)",
                    sum.icrc_unverifiable
                )
            } else {
                String::new()
            }
        )
        .unwrap();
    }
    // A closed pipe (`| head`) is not an error worth a panic.
    let _ = std::io::Write::write_all(&mut std::io::stdout(), out.as_bytes());
    if let Some(d) = damaged {
        // what was read is judged above; the rest may hide anything: not a clean bill
        eprintln!("rdmacam inspect: {d}");
        return ExitCode::from(2);
    }
    if sum.icrc_bad > 0 {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}
