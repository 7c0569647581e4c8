//! Chunk data: the values a frame carries after its image when ChunkModeActive is set, laid
//! out as the GenICam chunk format for GigE Vision says (`reference/gev.md` §2.6): each chunk
//! is its data followed by its ID and length (big-endian), and a host parses them from the end
//! of the payload. The image is the first chunk, so the parse ends at offset 0:
//!
//! ```text
//! [pixels][Image ID][image length] [FrameID 8][ID][8] [Timestamp 8][ID][8] ... [Gain 8][ID][8]
//! ```
//!
//! GVSP says so with payload type 0x4001 in the leader and trailer, and the trailer carries
//! the payload length and [`Chunks::layout_id`]; ORSP's TRAILER carries the same GVSP trailer,
//! and the chunk block lands in the host buffer right after the image. The chunks a frame has
//! are decided when it is captured and travel with it ([`Frame::chunks`]), so a resend or a
//! retransmission gives the same bytes.

use super::features::chunks::{CHUNKS, ChunkDef};
use super::pattern::{Frame, FrameSource};

/// Largest chunk block after the image: every chunk's data and tag.
pub const MAX_TAIL: usize = tail_len_of(u16::MAX);

const fn tail_len_of(mask: u16) -> usize {
    let mut n = 8; // the image's tag
    let mut i = 1;
    while i < CHUNKS.len() {
        if mask & (1 << i) != 0 {
            n += CHUNKS[i].len as usize + 8;
        }
        i += 1;
    }
    n
}

/// The chunk data of one frame.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Chunks {
    /// ChunkModeActive when the frame was captured.
    pub active: bool,
    /// ChunkEnable by ChunkSelector value (bit n = selector n; Image is always in).
    pub mask: u16,
    /// ChunkFrameID: the frame's block ID.
    pub frame_id: u64,
    /// ChunkExposureTime in microseconds.
    pub exposure_us: f64,
    /// ChunkGain in dB.
    pub gain_db: f64,
}

// The floats are feature values the device checked on the way in: never NaN.
impl Eq for Chunks {}

impl Chunks {
    /// No chunk data: the payload is the image alone.
    pub const NONE: Chunks = Chunks {
        active: false,
        mask: 0,
        frame_id: 0,
        exposure_us: 0.0,
        gain_db: 0.0,
    };

    /// Bytes of chunk data after the image (0 without chunk mode).
    pub const fn tail_len(&self) -> usize {
        if self.active {
            tail_len_of(self.mask)
        } else {
            0
        }
    }

    /// ChunkLayoutID: changes whenever the layout (which chunks, the image length) does;
    /// 0 without chunk mode.
    pub fn layout_id(&self, image_len: usize) -> u32 {
        if !self.active {
            return 0;
        }
        let mut b = [0u8; 12];
        b[..2].copy_from_slice(&(self.mask | 1).to_be_bytes());
        b[4..].copy_from_slice(&(image_len as u64).to_be_bytes());
        crc32fast::hash(&b) | 1
    }

    /// Write the chunk block of `frame` (image length `frame.image_size()`) into `out`, which
    /// holds at least [`MAX_TAIL`] bytes; returns its length.
    fn render(&self, frame: &Frame, out: &mut [u8; MAX_TAIL]) -> usize {
        let mut n = 0;
        let tag = |out: &mut [u8; MAX_TAIL], n: &mut usize, def: &ChunkDef, len: u32| {
            out[*n..*n + 4].copy_from_slice(&def.id.to_be_bytes());
            out[*n + 4..*n + 8].copy_from_slice(&len.to_be_bytes());
            *n += 8;
        };
        tag(out, &mut n, &CHUNKS[0], frame.image_size() as u32);
        let spec = &frame.spec;
        for def in &CHUNKS[1..] {
            if self.mask & (1 << def.selector) == 0 {
                continue;
            }
            let len = def.len as usize;
            let data = &mut out[n..n + len];
            match def.name {
                "FrameID" => data.copy_from_slice(&self.frame_id.to_be_bytes()),
                "Timestamp" => data.copy_from_slice(&frame.timestamp.to_be_bytes()),
                "Width" => data.copy_from_slice(&spec.width.to_be_bytes()),
                "Height" => data.copy_from_slice(&spec.height.to_be_bytes()),
                "OffsetX" => data.copy_from_slice(&spec.offset_x.to_be_bytes()),
                "OffsetY" => data.copy_from_slice(&spec.offset_y.to_be_bytes()),
                "PixelFormat" => data.copy_from_slice(&spec.pixel_format.pfnc().to_be_bytes()),
                "ExposureTime" => data.copy_from_slice(&self.exposure_us.to_be_bytes()),
                "Gain" => data.copy_from_slice(&self.gain_db.to_be_bytes()),
                _ => data.fill(0),
            }
            n += len;
            tag(out, &mut n, def, def.len);
        }
        n
    }
}

/// Copy `out.len()` bytes of `frame`'s payload (image, then chunk data) from `offset`.
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
        let n = frame.chunks.render(frame, &mut tail);
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
    use crate::device::pattern::{FrameSpec, Pattern, SyntheticSource};
    use crate::gev::PixelFormat;
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
    fn layout_id_follows_the_layout_only() {
        let (a, b) = (frame(0b110), frame(0b1110));
        assert_ne!(a.chunks.layout_id(32), b.chunks.layout_id(32));
        assert_ne!(a.chunks.layout_id(32), a.chunks.layout_id(64));
        let mut c = a;
        c.chunks.frame_id = 7;
        assert_eq!(a.chunks.layout_id(32), c.chunks.layout_id(32));
        assert_eq!(Chunks::NONE.layout_id(32), 0);
        assert_eq!(Chunks::NONE.tail_len(), 0);
    }
}
