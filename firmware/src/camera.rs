//! The firmware's camera: the protocol crate's sans-IO [`Camera`] (the same core the emulator
//! runs), with frame memory the board lends as one slice and one UDP port for RoCEv2 both
//! ways. The UDP source port is covered by the ICRC and an embassy-net socket sends from the
//! port it is bound to, so the queue pair (and the CM listener) send from 4791 rather than an
//! entropy port.

use core::net::Ipv4Addr;
use core::ops::Range;

use rdmacam_protocol::camera::{Camera, RocePorts, SliceFrames};
use rdmacam_protocol::device::Device;
use rdmacam_protocol::device::frame::FrameSource;

/// The RoCEv2 UDP port (both directions).
pub const ROCE_PORT: u16 = 4791;
/// Frame slots: one being written and the ones not yet acknowledged.
pub const FRAME_SLOTS: usize = 3;

/// The firmware's camera over frame memory borrowed for `'m`.
pub type FwCamera<'m, S> = Camera<S, SliceFrames<'m, FRAME_SLOTS>>;

/// A camera with `device`, frames from `source` rendered into `frames` (cut into
/// [`FRAME_SLOTS`] slots; a frame larger than a slot is counted and not sent).
pub fn new<S: FrameSource>(device: Device, source: S, frames: &mut [u8]) -> FwCamera<'_, S> {
    Camera::new(
        device,
        source,
        SliceFrames::new(frames),
        RocePorts {
            camera_tx: ROCE_PORT,
            host_rx: ROCE_PORT,
        },
    )
}

/// Where an IPv4 packet the camera built goes, and its UDP payload (what a UDP socket sends).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Datagram {
    /// Bytes of the packet after the IPv4 and UDP headers.
    pub payload: Range<usize>,
    /// Destination.
    pub dst: Ipv4Addr,
    /// Destination UDP port.
    pub dst_port: u16,
}

/// The destination and UDP payload of an IPv4/UDP packet; `None` for anything else.
pub fn datagram(packet: &[u8]) -> Option<Datagram> {
    if packet.len() < 28 || packet[0] != 0x45 || packet[9] != 17 {
        return None;
    }
    Some(Datagram {
        payload: 28..packet.len(),
        dst: Ipv4Addr::new(packet[16], packet[17], packet[18], packet[19]),
        dst_port: u16::from_be_bytes([packet[22], packet[23]]),
    })
}
