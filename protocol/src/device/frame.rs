//! The frame: what a sensor (or a pattern generator) hands the device, described once for every
//! transport. A [`Frame`] is its settings, number, timestamp and chunk data; a [`FrameSource`]
//! gives its image bytes; [`Frame::leader`] and [`Frame::trailer`] are the GVSP leader and
//! trailer that GVSP sends as packets and ORSP inside its LEADER and TRAILER messages.
//!
//! Random access matters: the GVSP transmitter re-reads old frames for packet resend, and a
//! host verifies a frame without having been sent anything else.

use super::chunks::{Chunks, MAX_TAIL};
use crate::gev::PixelFormat;
use crate::gev::gvsp::{ImageLeader, ImageTrailer, TrailerChunks};

/// Synthetic image patterns (the camera's `TestPattern` feature).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Pattern {
    /// Diagonal grey ramp: byte = x + y (+ 85 per colour channel).
    Gradient = 0,
    /// A 16-pixel bright vertical bar moving 4 pixels per frame over a dim background.
    MovingBar = 1,
    /// 32-pixel squares that invert every frame.
    Checkerboard = 2,
    /// Seeded noise: a counter-based generator keyed by (seed, frame, offset).
    Noise = 3,
}

impl Pattern {
    /// Every pattern.
    pub const ALL: [Pattern; 4] = [
        Pattern::Gradient,
        Pattern::MovingBar,
        Pattern::Checkerboard,
        Pattern::Noise,
    ];
    /// From the register value.
    pub const fn from_u32(v: u32) -> Option<Self> {
        Some(match v {
            0 => Pattern::Gradient,
            1 => Pattern::MovingBar,
            2 => Pattern::Checkerboard,
            3 => Pattern::Noise,
            _ => return None,
        })
    }
    /// The GenICam enum entry name.
    pub const fn name(self) -> &'static str {
        match self {
            Pattern::Gradient => "Gradient",
            Pattern::MovingBar => "MovingBar",
            Pattern::Checkerboard => "Checkerboard",
            Pattern::Noise => "Noise",
        }
    }
    /// From a name (case-insensitive).
    pub fn from_name(s: &str) -> Option<Self> {
        Self::ALL
            .into_iter()
            .find(|p| p.name().eq_ignore_ascii_case(s))
    }
}

/// The image settings a frame is captured with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameSpec {
    /// Width in pixels.
    pub width: u32,
    /// Height in lines.
    pub height: u32,
    /// X offset on the sensor.
    pub offset_x: u32,
    /// Y offset on the sensor.
    pub offset_y: u32,
    /// Pixel format.
    pub pixel_format: PixelFormat,
    /// Test pattern.
    pub pattern: Pattern,
    /// `TestPattern` Off: the sensor's image (replayed images), not [`pattern`](Self::pattern).
    /// A source without a sensor renders the pattern.
    pub sensor: bool,
}

impl FrameSpec {
    /// Bytes of one frame's image.
    pub const fn payload_size(&self) -> usize {
        self.pixel_format.image_size(self.width, self.height)
    }
}

/// One captured frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Frame {
    /// Frame counter of the source (0, 1, 2, ...).
    pub number: u64,
    /// Settings it was captured with.
    pub spec: FrameSpec,
    /// Device timestamp in ticks (nanoseconds): the start of the frame's exposure.
    pub timestamp: u64,
    /// The chunk data that follows the image ([`Chunks::NONE`]: none, payload type image).
    pub chunks: Chunks,
}

impl Frame {
    /// Frame `number` with `spec`, taken at `timestamp`, without chunk data (the device adds the
    /// chunks its settings ask for).
    pub const fn new(number: u64, spec: FrameSpec, timestamp: u64) -> Self {
        Frame {
            number,
            spec,
            timestamp,
            chunks: Chunks::NONE,
        }
    }

    /// Bytes of the frame's payload: the image, then its chunk data.
    pub const fn size(&self) -> usize {
        self.image_size() + self.chunks.tail_len()
    }

    /// Bytes of the image alone.
    pub const fn image_size(&self) -> usize {
        self.spec.payload_size()
    }

    /// The GVSP image leader of this frame (GVSP sends it as packet 0, ORSP inside its LEADER).
    pub const fn leader(&self) -> ImageLeader {
        ImageLeader {
            timestamp: self.timestamp,
            pixel_format: self.spec.pixel_format.pfnc(),
            width: self.spec.width,
            height: self.spec.height,
            offset_x: self.spec.offset_x,
            offset_y: self.spec.offset_y,
            chunks: self.chunks.active,
        }
    }

    /// The GVSP image trailer of this frame when all of its payload is delivered; with chunk
    /// data it carries the payload length and the chunk layout.
    pub fn trailer(&self) -> ImageTrailer {
        ImageTrailer {
            size_y: self.spec.height,
            chunks: self.chunks.active.then(|| TrailerChunks {
                payload_len: self.size() as u32,
                layout_id: self.chunks.layout_id(self.image_size()),
            }),
        }
    }
}

/// Where frames come from: sensor DMA on a camera, a pattern generator elsewhere.
///
/// A source deals in image bytes only: offsets and buffers given to [`read`](Self::read) and
/// [`refresh`](Self::refresh) stay within [`Frame::image_size`]. The chunk data a frame
/// carries after its image is the device's ([`read_payload`]).
pub trait FrameSource {
    /// Capture the next frame with `spec` at device time `timestamp`.
    fn capture(&mut self, spec: &FrameSpec, timestamp: u64) -> Frame;
    /// Copy `out.len()` bytes of `frame` starting at `offset` into `out`. Must give the same
    /// bytes every time it is asked (packet resend reads old frames again).
    fn read(&self, frame: &Frame, offset: usize, out: &mut [u8]);
    /// Turn `buf`, which holds exactly the bytes of `held` (whole frame), into the bytes of
    /// `frame`. The default reads all of `frame`; a source whose frames share most of their
    /// bytes (a static test pattern) rewrites only what differs.
    fn refresh(&self, held: &Frame, frame: &Frame, buf: &mut [u8]) {
        let _ = held;
        self.read(frame, 0, buf);
    }
}

/// Copy `out.len()` bytes of `frame`'s payload (image from `src`, then chunk data) from `offset`.
pub fn read_payload<S: FrameSource + ?Sized>(
    src: &S,
    frame: &Frame,
    offset: usize,
    out: &mut [u8],
) {
    let image = frame.image_size();
    let in_image = image.saturating_sub(offset).min(out.len());
    if in_image > 0 {
        src.read(frame, offset, &mut out[..in_image]);
    }
    if in_image < out.len() {
        let mut tail = [0u8; MAX_TAIL];
        let n = frame.chunks.render(&frame.leader(), image, &mut tail);
        let from = offset + in_image - image;
        let rest = &mut out[in_image..];
        let avail = n.saturating_sub(from).min(rest.len());
        rest[..avail].copy_from_slice(&tail[from..from + avail]);
        rest[avail..].fill(0);
    }
}

/// Turn `buf`, which holds the whole payload of `held`, into the payload of `frame` (same
/// size): the source refreshes the image, the chunk block is written again.
pub fn refresh_payload<S: FrameSource + ?Sized>(
    src: &S,
    held: &Frame,
    frame: &Frame,
    buf: &mut [u8],
) {
    let image = frame.image_size();
    if held.image_size() == image && buf.len() >= image {
        src.refresh(held, frame, &mut buf[..image]);
        let n = buf.len() - image;
        read_payload(src, frame, image, &mut buf[image..image + n]);
    } else {
        read_payload(src, frame, 0, buf);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::features::chunks::CHUNKS;
    use crate::device::pattern::SyntheticSource;
    use std::{vec, vec::Vec};

    fn frame(mask: u16) -> Frame {
        Frame {
            number: 3,
            spec: FrameSpec {
                width: 16,
                height: 2,
                offset_x: 4,
                offset_y: 5,
                pixel_format: PixelFormat::Mono8,
                pattern: Pattern::Gradient,
                sensor: false,
            },
            timestamp: 0x0102_0304_0506_0708,
            chunks: Chunks {
                active: true,
                mask,
                frame_id: 42,
                exposure_us: 1500.0,
                gain_db: 3.5,
            },
        }
    }

    /// Parse the payload from the end, as aravis's `arv_buffer_get_chunk_data` and GenApi's
    /// GEV chunk adapter do: (id, data) pairs, last first, ending exactly at offset 0.
    fn parse(p: &[u8]) -> Vec<(u32, Vec<u8>)> {
        let mut out = Vec::new();
        let mut end = p.len();
        while end > 0 {
            let id = u32::from_be_bytes(p[end - 8..end - 4].try_into().unwrap());
            let len = u32::from_be_bytes(p[end - 4..end].try_into().unwrap()) as usize;
            let start = end - 8 - len;
            out.push((id, p[start..end - 8].to_vec()));
            end = start;
        }
        out
    }

    #[test]
    fn chunks_parse_back_from_the_end_down_to_the_image() {
        let f = frame(0b10_0000_0110); // FrameID, Timestamp, Gain
        let src = SyntheticSource::new(0);
        let mut p = vec![0u8; f.size()];
        read_payload(&src, &f, 0, &mut p);
        let chunks = parse(&p);
        assert_eq!(chunks.len(), 4);
        assert_eq!(chunks[0], (CHUNKS[9].id, 3.5f64.to_be_bytes().to_vec()));
        assert_eq!(
            chunks[1],
            (CHUNKS[2].id, f.timestamp.to_be_bytes().to_vec())
        );
        assert_eq!(chunks[2], (CHUNKS[1].id, 42u64.to_be_bytes().to_vec()));
        assert_eq!(chunks[3].0, CHUNKS[0].id);
        let mut image = vec![0u8; 32];
        src.read(&f, 0, &mut image);
        assert_eq!(chunks[3].1, image);
    }

    #[test]
    fn any_slice_of_the_payload_reads_the_same_bytes() {
        let f = frame(0x3fe);
        let src = SyntheticSource::new(0);
        let mut whole = vec![0u8; f.size()];
        read_payload(&src, &f, 0, &mut whole);
        for (off, len) in [(0, 7), (30, 5), (32, 1), (33, 40), (f.size() - 3, 3)] {
            let mut part = vec![0u8; len];
            read_payload(&src, &f, off, &mut part);
            assert_eq!(part, whole[off..off + len], "offset {off}");
        }
        let mut held = frame(0x3fe);
        held.number = 2;
        held.chunks.frame_id = 41;
        let mut buf = vec![0u8; held.size()];
        read_payload(&src, &held, 0, &mut buf);
        refresh_payload(&src, &held, &f, &mut buf);
        assert_eq!(buf, whole);
    }

    #[test]
    fn the_trailer_carries_the_payload_and_layout_only_with_chunks() {
        let f = frame(0b110);
        let t = f.trailer();
        assert_eq!(t.size_y, 2);
        let c = t.chunks.expect("chunk mode on");
        assert_eq!(c.payload_len as usize, f.size());
        assert_eq!(c.layout_id, f.chunks.layout_id(32));
        let plain = Frame {
            chunks: Chunks::NONE,
            ..f
        };
        assert_eq!(plain.trailer().chunks, None);
        assert!(!plain.leader().chunks);
        assert_eq!(plain.leader().pixel_format, PixelFormat::Mono8.pfnc());
    }
}
