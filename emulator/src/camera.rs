//! The emulator's camera: the protocol crate's sans-IO [`Camera`] (the same core the firmware
//! runs) with synthetic frames rendered into heap memory. The UDP transport, the verbs
//! transport and the deterministic simulator all drive this one type.

use rdmacam_protocol::camera::{Camera, FrameMemory};
pub use rdmacam_protocol::camera::{CameraCounters, RocePorts, Tx};
use rdmacam_protocol::device::Device;
use rdmacam_protocol::device::pattern::SyntheticSource;

/// Frames the camera keeps in memory: one being written, and the ones not yet acknowledged.
pub const FRAME_SLOTS: usize = 6;

/// The emulator's camera.
pub type CameraCore = Camera<SyntheticSource, VecFrames>;

/// A camera with `device`, synthetic frames from `seed`, sending RoCEv2 as `ports` say.
pub fn new_camera(device: Device, seed: u64, ports: RocePorts) -> CameraCore {
    Camera::new(
        device,
        SyntheticSource::new(seed),
        VecFrames((0..FRAME_SLOTS).map(|_| Vec::new()).collect()),
        ports,
    )
    // a userspace stack on shared cores: round trips jitter with scheduling by tens of µs,
    // which the default 20 µs slack would read as queueing (loopback demo at 5 % loss: 1.3
    // Gbit/s with 20 µs, 2.1 with 50 µs; docs/BENCHMARKS.md)
    .with_queue_slack(USERSPACE_QUEUE_SLACK_NS)
}

/// The requester's queueing slack in the emulator (see [`new_camera`]).
pub const USERSPACE_QUEUE_SLACK_NS: u64 = 50_000;

/// Frame memory on the heap: each slot grows to the frame it holds.
#[derive(Debug, Default)]
pub struct VecFrames(Vec<Vec<u8>>);

impl FrameMemory for VecFrames {
    fn slots(&self) -> usize {
        self.0.len()
    }

    fn frame(&self, slot: u32) -> &[u8] {
        &self.0[slot as usize]
    }

    fn frame_mut(&mut self, slot: u32, len: usize) -> Option<&mut [u8]> {
        let f = self.0.get_mut(slot as usize)?;
        f.resize(len, 0);
        Some(f)
    }
}
