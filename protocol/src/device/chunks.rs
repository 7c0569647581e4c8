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
//! are decided when it is captured and travel with it (`Frame::chunks`), so a resend or a
//! retransmission gives the same bytes. The values of the image chunks (timestamp, size, offsets,
//! pixel format) are the frame's GVSP leader's, so the block is rendered from that.

use super::features::chunks::{CHUNKS, ChunkDef};
use crate::gev::gvsp::ImageLeader;

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

    /// Write the chunk block of a frame whose leader is `leader` and whose image is `image_len`
    /// bytes into `out`; returns its length.
    pub fn render(
        &self,
        leader: &ImageLeader,
        image_len: usize,
        out: &mut [u8; MAX_TAIL],
    ) -> usize {
        let mut n = 0;
        let tag = |out: &mut [u8; MAX_TAIL], n: &mut usize, def: &ChunkDef, len: u32| {
            out[*n..*n + 4].copy_from_slice(&def.id.to_be_bytes());
            out[*n + 4..*n + 8].copy_from_slice(&len.to_be_bytes());
            *n += 8;
        };
        tag(out, &mut n, &CHUNKS[0], image_len as u32);
        for def in &CHUNKS[1..] {
            if self.mask & (1 << def.selector) == 0 {
                continue;
            }
            let len = def.len as usize;
            let data = &mut out[n..n + len];
            match def.name {
                "FrameID" => data.copy_from_slice(&self.frame_id.to_be_bytes()),
                "Timestamp" => data.copy_from_slice(&leader.timestamp.to_be_bytes()),
                "Width" => data.copy_from_slice(&leader.width.to_be_bytes()),
                "Height" => data.copy_from_slice(&leader.height.to_be_bytes()),
                "OffsetX" => data.copy_from_slice(&leader.offset_x.to_be_bytes()),
                "OffsetY" => data.copy_from_slice(&leader.offset_y.to_be_bytes()),
                "PixelFormat" => data.copy_from_slice(&leader.pixel_format.to_be_bytes()),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_id_follows_the_layout_only() {
        let chunks = |mask| Chunks {
            active: true,
            mask,
            frame_id: 42,
            exposure_us: 1500.0,
            gain_db: 3.5,
        };
        let (a, b) = (chunks(0b110), chunks(0b1110));
        assert_ne!(a.layout_id(32), b.layout_id(32));
        assert_ne!(a.layout_id(32), a.layout_id(64));
        let mut c = a;
        c.frame_id = 7;
        assert_eq!(a.layout_id(32), c.layout_id(32));
        assert_eq!(Chunks::NONE.layout_id(32), 0);
        assert_eq!(Chunks::NONE.tail_len(), 0);
    }
}
