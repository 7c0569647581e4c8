//! Builds GVSP packets through the stream channel, for instruction counts under callgrind:
//! `scripts/packet-cost.sh` runs it with two packet counts and divides the difference, so
//! start-up costs cancel.
//!
//! `gvsp_path N` sends N packets of 2048x2048 Mono8 gradient frames at a GVSP packet size of
//! 1,400 bytes (what aravis's host asks for by default): leaders, payload packets with their
//! pixels rendered from the pattern, trailers, frame after frame, unpaced. What it counts is
//! the camera's own work per GVSP packet, everything before the `sendmmsg` that hands the
//! packet to the kernel.
//!
//! `gvsp_path N copy` only copies N packets' payload bytes (1,364) out of a kept image into a
//! packet buffer: what a camera whose pixels already sit in memory pays at least.

use core::net::Ipv4Addr;

use rdmacam_protocol::device::frame::{FrameSource, FrameSpec, Pattern};
use rdmacam_protocol::device::pattern::SyntheticSource;
use rdmacam_protocol::device::stream::{ChannelConfig, GvspChannel};
use rdmacam_protocol::gev::{PixelFormat, gvsp};
use rdmacam_protocol::rc::Instant;

const PACKET_SIZE: u32 = 1400;
/// A payload packet's pixels: the packet less IPv4, UDP and the GVSP header (1,364).
const CHUNK: usize = PACKET_SIZE as usize - gvsp::IP_UDP_OVERHEAD - gvsp::HEADER_LEN;

fn main() {
    let mut args = std::env::args().skip(1);
    let n: u64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(1000);
    let spec = FrameSpec {
        width: 2048,
        height: 2048,
        offset_x: 0,
        offset_y: 0,
        pixel_format: PixelFormat::Mono8,
        pattern: Pattern::Gradient,
        sensor: false,
    };
    let mut buf = vec![0u8; 9216];
    if args.next().as_deref() == Some("copy") {
        let image = vec![0x5au8; spec.payload_size()];
        let mut sum = 0u64;
        for k in 0..n as usize {
            let at = k * CHUNK % (image.len() - CHUNK);
            buf[..CHUNK].copy_from_slice(&image[at..at + CHUNK]);
            sum += u64::from(std::hint::black_box(&buf)[k % CHUNK]);
        }
        println!("{n} copies ({sum})");
        return;
    }
    let cfg = ChannelConfig {
        dst_ip: Ipv4Addr::new(127, 0, 0, 1),
        dst_port: 40000,
        packet_size: PACKET_SIZE,
        delay_ns: 0,
        extended: false,
        link_bps: 0,
    };
    let mut src = SyntheticSource::new(1);
    let mut ch = GvspChannel::new();
    let (mut sent, mut bytes, mut now) = (0u64, 0u64, Instant(1));
    while sent < n {
        if !ch.busy() {
            let frame = src.capture(&spec, now.0);
            ch.start_frame(frame, cfg);
        }
        match ch.poll_transmit(now, &src, (cfg.dst_ip, cfg.dst_port), &mut buf) {
            Some(p) => {
                sent += 1;
                bytes += p.len as u64;
                std::hint::black_box(&buf[..p.len]);
            }
            None => now = Instant(ch.next_packet_at().0.max(now.0 + 1)),
        }
    }
    println!("{sent} packets, {bytes} bytes");
}
