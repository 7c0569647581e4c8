//! Placing a WRITE's payload and checking it in one pass.
//!
//! The reference host used to copy each payload into frame memory and, at the frame's TRAILER,
//! read the whole frame back to compare it with the expected image: two passes over 2 MB of
//! memory no cache holds, 47 % of its CPU (docs/BENCHMARKS.md). [`Memory::copy_compare`] compares
//! the payload while it is still in the cache from its receive, and writes frame memory with
//! stores that bypass the cache (it is not read again soon): one pass, and no line of frame
//! memory read before it is overwritten.

/// Payloads shorter than this are copied with ordinary stores: a streaming store pays off over
/// whole cache lines, not a few bytes.
const STREAM_MIN: usize = 512;

/// A cache line, bytes.
const LINE: usize = 64;

/// Registered memory that payloads are placed into, some with streaming stores. Its bytes are
/// reached only through these methods, which fence the streaming stores (one `sfence` for a
/// whole receive batch, not one per packet: a fence per 4 KiB packet cost 70 % more) before any
/// other access, as the streaming stores' contract asks.
#[derive(Debug)]
pub struct Memory {
    /// The region and a line's worth of slack: the region starts at `at`, the first cache-line
    /// boundary, so a payload at a multiple of 64 bytes from the start begins and ends on whole
    /// lines, and no line is read before it is overwritten (a part-line write read each one
    /// from memory: 3.5 % of the soft host's CPU for the first and last line of each packet).
    bytes: Vec<u8>,
    at: usize,
    /// Streaming stores were issued and not yet fenced.
    streamed: std::cell::Cell<bool>,
}

impl Memory {
    /// `len` zeroed bytes with every page already in place, as registration pins a verbs
    /// region: a fresh allocation's pages arrive on first write, one fault per 4 KiB, and a
    /// frame written into such a buffer paid ~500 us of faults (the first frames' latency,
    /// docs/BENCHMARKS.md).
    pub fn zeroed(len: usize) -> Self {
        let bytes = rdmacam_io::mem::resident_zeroed(len + LINE - 1);
        let at = bytes.as_ptr().align_offset(LINE).min(LINE - 1);
        Memory {
            bytes,
            at,
            streamed: std::cell::Cell::new(false),
        }
    }

    /// Where the region lies in `bytes`.
    fn range(&self) -> std::ops::Range<usize> {
        self.at..self.at + self.bytes.len() - (LINE - 1)
    }

    /// The bytes.
    pub fn bytes(&self) -> &[u8] {
        self.fence();
        &self.bytes[self.range()]
    }

    fn region(&mut self) -> &mut [u8] {
        let r = self.range();
        &mut self.bytes[r]
    }

    /// Copy `data` in at `at`.
    ///
    /// # Panics
    /// If it does not fit.
    pub fn copy(&mut self, at: usize, data: &[u8]) {
        self.fence();
        self.region()[at..at + data.len()].copy_from_slice(data);
    }

    /// Copy `src` in at `at` and return whether it equals `expected`, in one pass: the payload
    /// is compared while it is still in the cache from its receive, and (x86-64, 512 bytes or
    /// more) written with stores that bypass the cache, since frame memory is not read again
    /// soon.
    ///
    /// # Panics
    /// If `src` does not fit or `expected` is not as long as `src`.
    pub fn copy_compare(&mut self, at: usize, src: &[u8], expected: &[u8]) -> bool {
        assert_eq!(
            src.len(),
            expected.len(),
            "copy_compare: src and expected lengths"
        );
        #[cfg(target_arch = "x86_64")]
        if src.len() >= STREAM_MIN {
            self.streamed.set(true);
            let dst = &mut self.region()[at..at + src.len()];
            if std::is_x86_feature_detected!("avx2") {
                // SAFETY: `streamed` is set, so every later access to these bytes through
                // `self` fences first; `self` owns them and is borrowed mutably here; the CPU
                // has AVX2 (checked just now).
                return unsafe { streaming_avx2(dst, src, expected) };
            }
            // SAFETY: as above, without AVX2.
            return unsafe { streaming(dst, src, expected) };
        }
        self.fence();
        plain(&mut self.region()[at..at + src.len()], src, expected)
    }

    /// [`copy_compare`](Self::copy_compare) with SSE2 only, whatever the CPU has: for the
    /// benchmark and tests that compare the two.
    #[doc(hidden)]
    #[cfg(target_arch = "x86_64")]
    pub fn copy_compare_sse2(&mut self, at: usize, src: &[u8], expected: &[u8]) -> bool {
        assert_eq!(
            src.len(),
            expected.len(),
            "copy_compare: src and expected lengths"
        );
        self.streamed.set(true);
        // SAFETY: as in `copy_compare`.
        unsafe { streaming(&mut self.region()[at..at + src.len()], src, expected) }
    }

    /// Make the streaming stores so far visible to every later access (`sfence`); cheap when
    /// there were none.
    fn fence(&self) {
        #[cfg(target_arch = "x86_64")]
        if self.streamed.replace(false) {
            // SAFETY: SSE2 is part of x86-64.
            unsafe { core::arch::x86_64::_mm_sfence() };
        }
    }
}

impl Drop for Memory {
    fn drop(&mut self) {
        // the allocator may hand these bytes out again
        self.fence();
    }
}

fn plain(dst: &mut [u8], src: &[u8], expected: &[u8]) -> bool {
    dst.copy_from_slice(src);
    src == expected
}

/// Where `dst`'s whole cache lines lie: `[head, body)`, `head` its first line boundary (or its
/// end), `body` the end of its last whole line.
#[cfg(target_arch = "x86_64")]
fn lines(dst: &[u8]) -> (usize, usize) {
    let n = dst.len();
    let head = dst.as_ptr().align_offset(LINE).min(n);
    (head, head + (n - head) / LINE * LINE)
}

/// Ordinary stores up to `dst`'s first cache line, whole lines of non-temporal 16-byte stores
/// (SSE2: every x86-64), ordinary stores for the rest; no fence.
///
/// # Safety
/// The caller fences (`_mm_sfence`) before any other access to `dst`'s bytes. The three
/// slices have one length.
#[cfg(target_arch = "x86_64")]
unsafe fn streaming(dst: &mut [u8], src: &[u8], expected: &[u8]) -> bool {
    use core::arch::x86_64::{
        __m128i, _mm_cmpeq_epi8, _mm_loadu_si128, _mm_movemask_epi8, _mm_or_si128,
        _mm_setzero_si128, _mm_stream_si128, _mm_xor_si128,
    };
    let (head, body) = lines(dst);
    let mut same = plain(&mut dst[..head], &src[..head], &expected[..head]);
    same &= plain(&mut dst[body..], &src[body..], &expected[body..]);
    // SAFETY: SSE2 is part of x86-64. Every access lies in [head, body), within all three
    // slices (one length); the stores are 16-byte aligned because `dst + head` is 64-byte
    // aligned and each offset a multiple of 16; the loads are unaligned loads. The caller
    // fences before these bytes are accessed again.
    unsafe {
        let (d, s, e) = (dst.as_mut_ptr(), src.as_ptr(), expected.as_ptr());
        let mut diff = _mm_setzero_si128();
        let mut at = head;
        while at < body {
            for k in (0..LINE).step_by(16) {
                let x = _mm_loadu_si128(s.add(at + k).cast::<__m128i>());
                let y = _mm_loadu_si128(e.add(at + k).cast::<__m128i>());
                diff = _mm_or_si128(diff, _mm_xor_si128(x, y));
                _mm_stream_si128(d.add(at + k).cast::<__m128i>(), x);
            }
            at += LINE;
        }
        same & (_mm_movemask_epi8(_mm_cmpeq_epi8(diff, _mm_setzero_si128())) == 0xffff)
    }
}

/// [`streaming`] 32 bytes at a time: half the instructions per cache line. The host's
/// placement of a 4 KiB payload (`benches/place.rs`): AVX2 x1.15-1.2 the bytes per second of
/// SSE2 on the 2-vCPU Xeon VM, whose copy is near its memory's pace either way.
///
/// # Safety
/// As [`streaming`], and the CPU has AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn streaming_avx2(dst: &mut [u8], src: &[u8], expected: &[u8]) -> bool {
    use core::arch::x86_64::{
        __m256i, _mm256_loadu_si256, _mm256_or_si256, _mm256_setzero_si256, _mm256_stream_si256,
        _mm256_testz_si256, _mm256_xor_si256,
    };
    let (head, body) = lines(dst);
    let mut same = plain(&mut dst[..head], &src[..head], &expected[..head]);
    same &= plain(&mut dst[body..], &src[body..], &expected[body..]);
    // SAFETY: AVX2 is enabled for this function and the caller checked the CPU has it. Every
    // access lies in [head, body), within all three slices (one length); the stores are 32-byte
    // aligned because `dst + head` is 64-byte aligned and each offset a multiple of 32; the
    // loads are unaligned loads. The caller fences before these bytes are accessed again.
    unsafe {
        let (d, s, e) = (dst.as_mut_ptr(), src.as_ptr(), expected.as_ptr());
        let mut diff = _mm256_setzero_si256();
        let mut at = head;
        while at < body {
            for k in [0, 32] {
                let x = _mm256_loadu_si256(s.add(at + k).cast::<__m256i>());
                let y = _mm256_loadu_si256(e.add(at + k).cast::<__m256i>());
                diff = _mm256_or_si256(diff, _mm256_xor_si256(x, y));
                _mm256_stream_si256(d.add(at + k).cast::<__m256i>(), x);
            }
            at += LINE;
        }
        same & (_mm256_testz_si256(diff, diff) == 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Every length and alignment, a difference anywhere or none: the bytes land as a
        /// plain copy puts them and the answer is what `==` says.
        #[test]
        fn as_a_copy_and_a_compare(
            len in 0usize..3000,
            dst_off in 0usize..64,
            src_off in 0usize..64,
            flip in proptest::option::of(any::<prop::sample::Index>()),
            seed in any::<u8>(),
        ) {
            let src_buf: Vec<u8> = (0..len + 64).map(|i| (i as u8).wrapping_mul(31) ^ seed).collect();
            let src = &src_buf[src_off..src_off + len];
            let mut expected = src.to_vec();
            if let (Some(i), true) = (flip, len > 0) {
                expected[i.index(len)] ^= 0x10;
            }
            let mut mem = Memory::zeroed(len + 128);
            mem.copy(0, &vec![0xaa; len + 128]);
            // the CPU's widest path, and SSE2 whatever the CPU has
            for sse2 in [false, true] {
                let mut mem = Memory::zeroed(len + 128);
                mem.copy(0, &vec![0xaa; len + 128]);
                let same = if sse2 {
                    mem.copy_compare_sse2(dst_off, src, &expected)
                } else {
                    mem.copy_compare(dst_off, src, &expected)
                };
                prop_assert_eq!(same, src == &expected[..]);
                let dst_buf = mem.bytes();
                prop_assert_eq!(&dst_buf[dst_off..dst_off + len], src);
                prop_assert!(dst_buf[..dst_off].iter().all(|&b| b == 0xaa));
                prop_assert!(dst_buf[dst_off + len..].iter().all(|&b| b == 0xaa));
            }
        }
    }

    #[test]
    #[should_panic(expected = "lengths")]
    fn unequal_lengths_are_a_bug() {
        Memory::zeroed(4).copy_compare(0, &[0; 4], &[0; 3]);
    }

    #[test]
    fn the_region_starts_on_a_cache_line() {
        for len in [1, 63, 4096, 3 * 2_073_600] {
            let m = Memory::zeroed(len);
            assert_eq!(m.bytes().as_ptr() as usize % LINE, 0);
            assert_eq!(m.bytes().len(), len);
            assert!(m.bytes().iter().all(|&b| b == 0));
        }
    }

    #[test]
    fn payloads_placed_one_after_another_read_back_in_order() {
        // a frame's packets, each streamed without a fence, then read: the fence comes first
        let frame: Vec<u8> = (0..64 * 1024u32).map(|i| (i % 251) as u8).collect();
        let mut mem = Memory::zeroed(frame.len() + 16);
        for (k, p) in frame.chunks(4096).enumerate() {
            assert!(mem.copy_compare(16 + k * 4096, p, p));
        }
        assert_eq!(&mem.bytes()[16..], &frame[..]);
        mem.copy(16, &[1, 2, 3]);
        assert_eq!(&mem.bytes()[16..19], &[1, 2, 3]);
    }
}
