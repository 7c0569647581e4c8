//! Memory the data path writes into with every page already present.

/// `len` zeroed bytes whose pages are all in place. A fresh allocation this large comes from
/// `mmap` and gets its pages on first write, one fault per 4 KiB (about 0.5-1 us each on the
/// machines of docs/BENCHMARKS.md). A buffer that a receive or a frame fills for the first time
/// mid-stream pays them then: a receive batch of 2 MiB cost the reference host's early frames
/// 230-720 us of their latency. Touching each page here moves that cost to start-up.
pub fn resident_zeroed(len: usize) -> Vec<u8> {
    let mut bytes = vec![0u8; len];
    // one store per 4 KiB, and the last byte: the allocation need not start on a page, so its
    // tail may reach one page more than the steps do
    let last = bytes.len().checked_sub(1);
    for at in (0..bytes.len()).step_by(4096).chain(last) {
        // through black_box: a store of zero into zeroed memory is one the optimizer may drop
        *std::hint::black_box(&mut bytes[at]) = 0;
    }
    bytes
}

/// The memory this machine can give a new allocation without swapping, in bytes
/// (`MemAvailable` of `/proc/meminfo`); `None` where the kernel does not say.
pub fn available_bytes() -> Option<u64> {
    let meminfo = std::fs::read_to_string("/proc/meminfo").ok()?;
    mem_available(&meminfo)
}

/// `MemAvailable` of a `/proc/meminfo` text, in bytes.
fn mem_available(meminfo: &str) -> Option<u64> {
    let line = meminfo.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let mut words = line.split_whitespace().skip(1);
    let kib: u64 = words.next()?.parse().ok()?;
    (words.next() == Some("kB")).then_some(kib.checked_mul(1024)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Minor page faults of the calling process so far (getrusage).
    fn minor_faults() -> i64 {
        // SAFETY: getrusage writes one rusage into the struct it is given
        let mut u: libc::rusage = unsafe { std::mem::zeroed() };
        assert_eq!(unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) }, 0);
        u.ru_minflt
    }

    #[test]
    fn the_memory_available_is_read_from_meminfo() {
        // the lines of a Debian 12 machine's /proc/meminfo, as the kernel writes them
        let text = "MemTotal:       24609104 kB\nMemFree:        21871120 kB\n\
                    MemAvailable:   23512340 kB\nBuffers:          143020 kB\n";
        assert_eq!(mem_available(text), Some(23_512_340 * 1024));
        assert_eq!(mem_available("MemTotal:       24609104 kB\n"), None);
        assert_eq!(mem_available("MemAvailable:   12 MB\n"), None);
        assert_eq!(mem_available("MemAvailable:   lots kB\n"), None);
        // this machine's own says something
        assert!(available_bytes().is_some_and(|b| b > 0));
    }

    #[test]
    fn every_page_is_in_place_before_the_first_write() {
        let len = 8 << 20;
        let mut b = resident_zeroed(len);
        assert!(b.iter().all(|&x| x == 0));
        // writing every page now faults none in (a lazily allocated buffer would take ~2,048;
        // the test harness's other threads may fault a few meanwhile)
        let before = minor_faults();
        for page in b.chunks_mut(4096) {
            page[0] = 1;
        }
        let faults = minor_faults() - before;
        assert!(
            faults < 64,
            "{faults} page faults writing a resident buffer"
        );
        assert_eq!(
            b.iter().map(|&x| x as usize).sum::<usize>(),
            len.div_ceil(4096)
        );
    }
}
