//! The synthetic frame source: every byte is a pure function of (seed, frame number, settings,
//! offset), so a host checks any part of any frame without having been sent anything else. The
//! frame counter is stamped into the first 8 bytes (big-endian) so a receiver checks identity
//! too.

use super::frame::{Frame, FrameSource, FrameSpec, Pattern};
use crate::gev::PixelFormat;
use crate::splitmix::splitmix64;

/// The synthetic source: patterns computed on demand, nothing stored.
#[derive(Debug, Clone)]
pub struct SyntheticSource {
    next: u64,
    seed: u64,
}

impl SyntheticSource {
    /// A source whose noise pattern is keyed by `seed`; frame numbers start at 0.
    pub const fn new(seed: u64) -> Self {
        SyntheticSource { next: 0, seed }
    }
    /// The noise seed.
    pub const fn seed(&self) -> u64 {
        self.seed
    }

    /// Whether frames `a` and `b` have the same bytes but for the 8-byte counter (a static
    /// pattern's frames do), so one's bytes become the other's by rewriting the counter.
    pub fn shares_pixels(&self, a: &Frame, b: &Frame) -> bool {
        same_pixels(a, b)
    }
}

impl FrameSource for SyntheticSource {
    fn capture(&mut self, spec: &FrameSpec, timestamp: u64) -> Frame {
        let f = Frame::new(self.next, *spec, timestamp);
        self.next += 1;
        f
    }

    fn read(&self, frame: &Frame, offset: usize, out: &mut [u8]) {
        fill(self.seed, frame, offset, out);
    }

    /// Frames of a static pattern differ only in the 8-byte counter: rewrite that, not the
    /// pixels (a real camera's pixels arrive by DMA at no CPU cost; this keeps the synthetic
    /// source from dominating the sender's profile).
    fn refresh(&self, held: &Frame, frame: &Frame, buf: &mut [u8]) {
        if same_pixels(held, frame) {
            let n = buf.len().min(8);
            fill(self.seed, frame, 0, &mut buf[..n]);
        } else {
            fill(self.seed, frame, 0, buf);
        }
    }
}

/// Whether two frames have the same bytes after the counter.
fn same_pixels(a: &Frame, b: &Frame) -> bool {
    if a.spec != b.spec {
        return false;
    }
    let width = u64::from(a.spec.width.max(1));
    match a.spec.pattern {
        Pattern::Gradient => true,
        Pattern::Checkerboard => (a.number ^ b.number) & 1 == 0,
        Pattern::MovingBar => a.number.wrapping_mul(4) % width == b.number.wrapping_mul(4) % width,
        Pattern::Noise => a.number == b.number,
    }
}

/// Fill `out` with bytes `offset..offset + out.len()` of a synthetic frame.
pub fn fill(seed: u64, frame: &Frame, offset: usize, out: &mut [u8]) {
    let spec = &frame.spec;
    let n = frame.number;
    // the frame counter in the first 8 bytes
    let mut i = 0;
    while i < out.len() && offset + i < 8 {
        out[i] = n.to_be_bytes()[offset + i];
        i += 1;
    }
    let (at, out) = (offset + i, &mut out[i..]);
    if out.is_empty() {
        return;
    }
    if spec.pixel_format.sample_bits() != 8 && spec.pixel_format != PixelFormat::Mono16 {
        fill_scaled(seed, frame, at, out);
    } else {
        pattern_bytes(seed, frame, at, out);
    }
}

/// Mono10, Mono12 (16-bit little-endian containers) and Mono12p (packed, two pixels in three
/// bytes, low bits first): each pixel is the Mono8 frame's pixel (its pattern, without the
/// counter) scaled to the format's bits, `sample << (bits - 8)`.
fn fill_scaled(seed: u64, frame: &Frame, at: usize, out: &mut [u8]) {
    let pf = frame.spec.pixel_format;
    let mono8 = Frame {
        spec: FrameSpec {
            pixel_format: PixelFormat::Mono8,
            ..frame.spec
        },
        ..*frame
    };
    let pixels = frame.spec.width as usize * frame.spec.height as usize;
    let shift = pf.sample_bits() - 8;
    let mut samples = [0u8; 258];
    let mut done = 0;
    while done < out.len() {
        let pos = at + done;
        let n = (out.len() - done).min(384);
        // the pixels bytes pos..pos + n cover
        let (first, last) = if pf.packed() {
            (
                pos / 3 * 2,
                ((pos + n - 1) / 3 * 2 + 1).min(pixels.saturating_sub(1)),
            )
        } else {
            (pos / 2, ((pos + n - 1) / 2).min(pixels.saturating_sub(1)))
        };
        let count = last + 1 - first;
        pattern_bytes(seed, &mono8, first, &mut samples[..count]);
        let sample = |k: usize| -> u16 {
            if k < first || k > last {
                0
            } else {
                u16::from(samples[k - first]) << shift
            }
        };
        for (i, b) in out[done..done + n].iter_mut().enumerate() {
            let p = pos + i;
            *b = if pf.packed() {
                let g = p / 3;
                crate::gev::pixel::pack_mono12p(sample(2 * g), sample(2 * g + 1))[p % 3]
            } else {
                sample(p / 2).to_le_bytes()[p % 2]
            };
        }
        done += n;
    }
}

/// Gradient bytes copied at once: a 1,400-byte GVSP packet's pixels in one piece, two where a
/// row ends inside it.
const RAMP_PIECE: usize = 4096;
// every piece of a row starts at the row's first value only if a piece is whole ramp periods
const _: () = assert!(RAMP_PIECE % 256 == 0);

/// 0, 1, .., 255, 0, 1, ..: any [`RAMP_PIECE`] consecutive gradient bytes of a row are a window
/// of it, starting in its first 256 bytes.
static RAMP: [u8; RAMP_PIECE + 256] = {
    let mut r = [0u8; RAMP_PIECE + 256];
    let mut i = 0;
    while i < r.len() {
        r[i] = i as u8;
        i += 1;
    }
    r
};

/// The pattern's bytes `at..at + out.len()` (no frame counter), pixel by pixel in the format's
/// bytes: channel c of a pixel is its c-th byte.
fn pattern_bytes(seed: u64, frame: &Frame, at: usize, out: &mut [u8]) {
    let spec = &frame.spec;
    let n = frame.number;
    if spec.pattern == Pattern::Noise {
        // one splitmix64 word per 8 bytes of the frame
        let key = seed ^ (n << 40);
        let mut done = 0;
        while done < out.len() {
            let pos = at + done;
            let word = splitmix64(key ^ (pos as u64 / 8)).to_le_bytes();
            let take = (8 - pos % 8).min(out.len() - done);
            out[done..done + take].copy_from_slice(&word[pos % 8..pos % 8 + take]);
            done += take;
        }
        return;
    }
    // the other patterns, one row segment at a time
    let bpp = spec.pixel_format.bytes_per_pixel() as usize;
    let width = spec.width.max(1) as usize;
    let bar = (n.wrapping_mul(4) % width as u64) as usize;
    let mut done = 0;
    while done < out.len() {
        let pos = at + done;
        let (pixel, channel) = (pos / bpp, pos % bpp);
        let (x, y) = (pixel % width, pixel / width);
        let len = ((width - x) * bpp - channel).min(out.len() - done);
        let seg = &mut out[done..done + len];
        match spec.pattern {
            Pattern::Gradient if bpp == 1 => {
                // byte k is (x + y + k) mod 256, a window of the ramp: a copy, where a byte
                // loop was ~7 GB/s (RAMP_PIECE is a multiple of 256, so every piece starts
                // at the same value)
                let base = (x + y) % 256;
                for piece in seg.chunks_mut(RAMP_PIECE) {
                    piece.copy_from_slice(&RAMP[base..base + piece.len()]);
                }
            }
            Pattern::Gradient => {
                let (mut xx, mut ch) = (x, channel);
                for b in seg.iter_mut() {
                    *b = (xx + y + ch * 85) as u8;
                    ch += 1;
                    if ch == bpp {
                        ch = 0;
                        xx += 1;
                    }
                }
            }
            Pattern::MovingBar => {
                seg.fill(((y & 0xff) / 4) as u8);
                // pixels bar..bar+16 of the row are white
                let first = bar.max(x);
                let last = (bar + 16).min(x + (channel + len).div_ceil(bpp));
                for px in first..last {
                    let from = ((px - x) * bpp).saturating_sub(channel);
                    let to = ((px - x + 1) * bpp - channel).min(len);
                    seg[from..to].fill(255);
                }
            }
            Pattern::Checkerboard => {
                let (mut xx, mut ch) = (x, channel);
                for b in seg.iter_mut() {
                    *b = if ((xx / 32) ^ (y / 32) ^ n as usize) & 1 == 1 {
                        255
                    } else {
                        0
                    };
                    ch += 1;
                    if ch == bpp {
                        ch = 0;
                        xx += 1;
                    }
                }
            }
            Pattern::Noise => unreachable!("handled above"),
        }
        done += len;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::chunks::Chunks;
    use std::vec;

    /// The first, byte-at-a-time definition of the patterns: the fast `fill` must give exactly
    /// these bytes (hosts check frames against them).
    fn fill_reference(seed: u64, frame: &Frame, offset: usize, out: &mut [u8]) {
        let spec = &frame.spec;
        let pf = spec.pixel_format;
        if matches!(
            pf,
            PixelFormat::Mono10 | PixelFormat::Mono12 | PixelFormat::Mono12p
        ) {
            // the Mono8 pixel (pattern only) scaled to the format's bits, then laid out
            let width = spec.width.max(1) as usize;
            let pixels = spec.width as usize * spec.height as usize;
            let n = frame.number;
            let sample = |k: usize| -> u16 {
                if k >= pixels {
                    return 0;
                }
                let (x, y) = (k % width, k / width);
                let bar = (n.wrapping_mul(4) % width as u64) as usize;
                let s = match spec.pattern {
                    Pattern::Gradient => (x + y) as u8,
                    Pattern::MovingBar if x.wrapping_sub(bar) < 16 => 255,
                    Pattern::MovingBar => ((y & 0xff) / 4) as u8,
                    Pattern::Checkerboard if ((x / 32) ^ (y / 32) ^ n as usize) & 1 == 1 => 255,
                    Pattern::Checkerboard => 0,
                    Pattern::Noise => {
                        splitmix64(seed ^ (n << 40) ^ (k as u64 / 8)).to_le_bytes()[k % 8]
                    }
                };
                u16::from(s) << (pf.sample_bits() - 8)
            };
            for (i, b) in out.iter_mut().enumerate() {
                let at = offset + i;
                *b = if at < 8 {
                    n.to_be_bytes()[at]
                } else if pf == PixelFormat::Mono12p {
                    let (v0, v1) = (sample(at / 3 * 2), sample(at / 3 * 2 + 1));
                    [
                        v0 as u8,
                        ((v0 >> 8) as u8) | ((v1 as u8 & 0xf) << 4),
                        (v1 >> 4) as u8,
                    ][at % 3]
                } else {
                    sample(at / 2).to_le_bytes()[at % 2]
                };
            }
            return;
        }
        let bpp = spec.pixel_format.bytes_per_pixel() as usize;
        let width = spec.width.max(1) as usize;
        let n = frame.number;
        let mut pixel = offset / bpp;
        let mut channel = offset % bpp;
        let mut x = pixel % width;
        let mut y = pixel / width;
        let bar = (n.wrapping_mul(4) % width as u64) as usize;
        for (i, b) in out.iter_mut().enumerate() {
            let at = offset + i;
            *b = if at < 8 {
                n.to_be_bytes()[at]
            } else {
                match spec.pattern {
                    Pattern::Gradient => (x + y + channel * 85) as u8,
                    Pattern::MovingBar => {
                        if x.wrapping_sub(bar) < 16 {
                            255
                        } else {
                            ((y & 0xff) / 4) as u8
                        }
                    }
                    Pattern::Checkerboard => {
                        if ((x / 32) ^ (y / 32) ^ n as usize) & 1 == 1 {
                            255
                        } else {
                            0
                        }
                    }
                    Pattern::Noise => {
                        let word = splitmix64(seed ^ (n << 40) ^ (at as u64 / 8));
                        word.to_le_bytes()[at % 8]
                    }
                }
            };
            channel += 1;
            if channel == bpp {
                channel = 0;
                pixel += 1;
                x += 1;
                if x == width {
                    x = 0;
                    y += 1;
                }
            }
        }
        let _ = pixel;
    }

    #[test]
    fn the_fast_fill_gives_the_reference_bytes_at_every_offset() {
        let mut state = 0x1234_5678_9abc_def0u64;
        let mut next = move |m: usize| {
            state = splitmix64(state);
            (state % m as u64) as usize
        };
        for pattern in [
            Pattern::Gradient,
            Pattern::MovingBar,
            Pattern::Checkerboard,
            Pattern::Noise,
        ] {
            for pf in PixelFormat::ALL {
                for width in [1u32, 3, 17, 64, 100, 333, 700] {
                    for number in [0u64, 1, 7, 123_456] {
                        let frame = Frame {
                            number,
                            spec: FrameSpec {
                                width,
                                height: 40,
                                offset_x: 0,
                                offset_y: 0,
                                pixel_format: pf,
                                pattern,
                                sensor: false,
                            },
                            timestamp: 0,
                            chunks: Chunks::NONE,
                        };
                        let size = frame.size();
                        let mut want = vec![0u8; size];
                        fill_reference(9, &frame, 0, &mut want);
                        let mut got = vec![0u8; size];
                        fill(9, &frame, 0, &mut got);
                        assert_eq!(got, want, "{pattern:?} {pf:?} width {width} frame {number}");
                        for _ in 0..20 {
                            let off = next(size);
                            let len = next(size - off + 1);
                            let mut part = vec![0u8; len];
                            fill(9, &frame, off, &mut part);
                            assert_eq!(
                                part,
                                want[off..off + len],
                                "{pattern:?} {pf:?} {width} at {off}+{len}"
                            );
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn a_gradient_row_longer_than_one_ramp_piece_is_the_reference() {
        // rows of 4,096 and more bytes take two or more copies of the ramp
        for width in [4095u32, 4096, 4097, 9000] {
            let frame = Frame {
                number: 3,
                spec: FrameSpec {
                    width,
                    height: 3,
                    offset_x: 0,
                    offset_y: 0,
                    pixel_format: PixelFormat::Mono8,
                    pattern: Pattern::Gradient,
                    sensor: false,
                },
                timestamp: 0,
                chunks: Chunks::NONE,
            };
            let mut want = vec![0u8; frame.size()];
            fill_reference(9, &frame, 0, &mut want);
            for off in [0, 8, 1000, width as usize - 1, width as usize + 77] {
                let mut got = vec![0u8; want.len() - off];
                fill(9, &frame, off, &mut got);
                assert_eq!(got, want[off..], "width {width} from {off}");
            }
        }
    }

    fn spec(pattern: Pattern, pf: PixelFormat) -> FrameSpec {
        FrameSpec {
            width: 64,
            height: 16,
            offset_x: 0,
            offset_y: 0,
            pixel_format: pf,
            pattern,
            sensor: false,
        }
    }

    #[test]
    fn a_refreshed_slot_holds_the_reference_bytes_of_the_new_frame() {
        // One slot reused for frames 0, 1, 2, 3, 7, 64, 65 with a spec change in the middle:
        // after each refresh it must hold what the byte-at-a-time definition gives.
        let src = SyntheticSource::new(9);
        for pattern in [
            Pattern::Gradient,
            Pattern::MovingBar,
            Pattern::Checkerboard,
            Pattern::Noise,
        ] {
            let mut held: Option<Frame> = None;
            let mut slot = vec::Vec::new();
            for (k, (number, pf)) in [
                (0, PixelFormat::Mono8),
                (1, PixelFormat::Mono8),
                (2, PixelFormat::Mono8),
                (3, PixelFormat::Mono16),
                (7, PixelFormat::Mono16),
                (64, PixelFormat::Mono8),
                (65, PixelFormat::Mono8),
            ]
            .into_iter()
            .enumerate()
            {
                let frame = Frame {
                    number,
                    spec: spec(pattern, pf),
                    timestamp: k as u64,
                    chunks: Chunks::NONE,
                };
                slot.resize(frame.size(), 0xee);
                match &held {
                    Some(h) if h.size() == slot.len() => src.refresh(h, &frame, &mut slot),
                    _ => src.read(&frame, 0, &mut slot),
                }
                held = Some(frame);
                let mut want = vec![0u8; frame.size()];
                fill_reference(9, &frame, 0, &mut want);
                assert!(slot == want, "{pattern:?} {pf:?} frame {number}");
            }
        }
    }

    #[test]
    fn frame_counter_is_stamped_and_any_slice_matches_the_whole() {
        let mut src = SyntheticSource::new(7);
        for pattern in Pattern::ALL {
            for pf in PixelFormat::ALL {
                let f = src.capture(&spec(pattern, pf), 0);
                let mut whole = vec![0u8; f.size()];
                src.read(&f, 0, &mut whole);
                assert_eq!(&whole[..8], &f.number.to_be_bytes());
                for (off, len) in [(0, 5), (3, 100), (1000, 24), (f.size() - 7, 7)] {
                    let mut part = vec![0u8; len];
                    src.read(&f, off, &mut part);
                    assert_eq!(
                        &part[..],
                        &whole[off..off + len],
                        "{pattern:?} {pf:?} @{off}"
                    );
                }
            }
        }
    }

    #[test]
    fn patterns_look_like_their_names() {
        let mut src = SyntheticSource::new(1);
        let f = src.capture(&spec(Pattern::Gradient, PixelFormat::Mono8), 0);
        let mut b = vec![0u8; f.size()];
        src.read(&f, 0, &mut b);
        assert_eq!(b[64 * 3 + 10], 13); // x 10 + y 3
        let f1 = src.capture(&spec(Pattern::Checkerboard, PixelFormat::Mono8), 0);
        let f2 = src.capture(&spec(Pattern::Checkerboard, PixelFormat::Mono8), 0);
        let (mut a, mut c) = (vec![0u8; f1.size()], vec![0u8; f2.size()]);
        src.read(&f1, 0, &mut a);
        src.read(&f2, 0, &mut c);
        assert!(
            a[8..].iter().zip(&c[8..]).all(|(p, q)| *p == 255 - *q),
            "inverts each frame"
        );
        let f = src.capture(&spec(Pattern::Noise, PixelFormat::Mono8), 0);
        let mut n = vec![0u8; f.size()];
        src.read(&f, 0, &mut n);
        let distinct = n.iter().collect::<std::collections::BTreeSet<_>>().len();
        assert!(distinct > 200, "noise uses the byte range: {distinct}");
    }
}
