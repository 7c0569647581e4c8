//! The emulator's camera: the protocol crate's sans-IO [`Camera`] (the same core the firmware
//! runs) with synthetic frames rendered into heap memory. The UDP transport, the verbs
//! transport and the deterministic simulator all drive this one type.

use std::cell::RefCell;
use std::sync::Arc;

use rdmacam_io::images::ImageSet;
use rdmacam_protocol::camera::{Camera, FrameMemory};
pub use rdmacam_protocol::camera::{CameraCounters, RocePorts, Tx};
use rdmacam_protocol::device::Device;
use rdmacam_protocol::device::frame::{Frame, FrameSource, FrameSpec};
use rdmacam_protocol::device::pattern::SyntheticSource;

/// Frames the camera keeps in memory: one being written, and the ones not yet acknowledged.
pub const FRAME_SLOTS: usize = 6;

/// The emulator's camera.
pub type CameraCore = Camera<EmuSource, VecFrames>;

/// Where the emulator's frames come from: the synthetic patterns, or images replayed as a
/// sensor's (`TestPattern` Off) beside the patterns a host may switch to.
#[derive(Debug)]
pub enum EmuSource {
    /// `TestPattern` frames from a seed.
    Synthetic(SyntheticSource),
    /// `--images`: the set's images in name order, looped, while `TestPattern` is Off; the
    /// patterns otherwise.
    Images(ImageSource, SyntheticSource),
}

impl FrameSource for EmuSource {
    fn capture(&mut self, spec: &FrameSpec, timestamp: u64) -> Frame {
        match self {
            EmuSource::Images(s, _) if spec.sensor => s.capture(spec, timestamp),
            EmuSource::Synthetic(s) | EmuSource::Images(_, s) => s.capture(spec, timestamp),
        }
    }
    fn read(&self, frame: &Frame, offset: usize, out: &mut [u8]) {
        match self {
            EmuSource::Images(s, _) if frame.spec.sensor => s.read(frame, offset, out),
            EmuSource::Synthetic(s) | EmuSource::Images(_, s) => s.read(frame, offset, out),
        }
    }
    fn refresh(&self, held: &Frame, frame: &Frame, buf: &mut [u8]) {
        match self {
            EmuSource::Images(s, _) if frame.spec.sensor => s.read(frame, 0, buf),
            EmuSource::Synthetic(s) | EmuSource::Images(_, s) => s.refresh(held, frame, buf),
        }
    }
}

/// Images replayed: frame n is image n mod count, its region and pixel format as the frame's
/// settings say ([`ImageSet::render`]). The last rendering is kept, so the packets of one frame
/// (and its resends) do not convert the image again.
#[derive(Debug)]
pub struct ImageSource {
    set: Arc<ImageSet>,
    next: u64,
    rendered: RefCell<Option<(u64, FrameSpec, Vec<u8>)>>,
}

impl ImageSource {
    /// A source replaying `set` from its first image.
    pub fn new(set: Arc<ImageSet>) -> Self {
        ImageSource {
            set,
            next: 0,
            rendered: RefCell::new(None),
        }
    }
}

impl FrameSource for ImageSource {
    fn capture(&mut self, spec: &FrameSpec, timestamp: u64) -> Frame {
        let f = Frame::new(self.next, *spec, timestamp);
        self.next += 1;
        f
    }
    fn read(&self, frame: &Frame, offset: usize, out: &mut [u8]) {
        let mut r = self.rendered.borrow_mut();
        let index = frame.number % self.set.len() as u64;
        if !r
            .as_ref()
            .is_some_and(|(i, s, _)| *i == index && *s == frame.spec)
        {
            let mut bytes = r.take().map(|(_, _, b)| b).unwrap_or_default();
            self.set.render(index as usize, &frame.spec, &mut bytes);
            *r = Some((index, frame.spec, bytes));
        }
        let bytes = &r.as_ref().expect("rendered above").2;
        out.copy_from_slice(&bytes[offset..offset + out.len()]);
    }
}

/// A camera with `device`, synthetic frames from `seed`, sending RoCEv2 as `ports` say.
pub fn new_camera(device: Device, seed: u64, ports: RocePorts) -> CameraCore {
    new_camera_with(
        device,
        EmuSource::Synthetic(SyntheticSource::new(seed)),
        ports,
    )
}

/// A camera with `device`, frames from `source`, sending RoCEv2 as `ports` say.
pub fn new_camera_with(device: Device, source: EmuSource, ports: RocePorts) -> CameraCore {
    Camera::new(
        device,
        source,
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
