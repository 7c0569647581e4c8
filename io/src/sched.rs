//! The calling thread's scheduling: its priority, and giving its CPU away.

/// Set the calling thread's nice value (Linux keeps one per thread: threads started before keep
/// theirs). Lower is sooner: at -10 a receive thread woken on a CPU where a busy sender runs
/// preempts it instead of waiting out the sender's slice, as the stream threads of aravis's
/// `arv-camera-test --high-priority` and of vendor SDKs run. Raising it needs CAP_SYS_NICE or
/// an RLIMIT_NICE that allows it: otherwise the error, and the thread keeps its priority.
pub fn set_thread_nice(nice: i32) -> std::io::Result<()> {
    // SAFETY: setpriority takes plain integers; `who` 0 with PRIO_PROCESS is the calling thread
    let r = unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, nice) };
    if r == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// Set the calling thread's timer slack (`PR_SET_TIMERSLACK`): how late the kernel may end its
/// timed waits (`ppoll`, `nanosleep`) to wake it with other timers. Linux gives each thread
/// 50 us by default, longer than a paced sender's whole wait between two bursts at 10 Gbit/s.
pub fn set_timer_slack(slack: std::time::Duration) -> std::io::Result<()> {
    let ns = libc::c_ulong::try_from(slack.as_nanos().max(1)).unwrap_or(libc::c_ulong::MAX);
    // SAFETY: PR_SET_TIMERSLACK takes one integer argument and affects the calling thread only
    let r = unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, ns, 0, 0, 0) };
    if r == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// The calling thread's timer slack.
pub fn timer_slack() -> std::time::Duration {
    // SAFETY: PR_GET_TIMERSLACK takes no argument and returns the slack in ns
    let r = unsafe { libc::prctl(libc::PR_GET_TIMERSLACK, 0, 0, 0, 0) };
    std::time::Duration::from_nanos(u64::try_from(r).unwrap_or(0))
}

/// Give the CPU to another thread runnable on it, if one waits (`sched_yield`): the caller runs
/// on when it is picked again. With none waiting it returns at once.
pub fn yield_cpu() {
    // it cannot fail on Linux
    let _ = nix::sched::sched_yield();
}

/// CPU time the calling thread has used (`CLOCK_THREAD_CPUTIME_ID`): one system call.
pub fn thread_cpu_time() -> std::time::Duration {
    use nix::time::{ClockId, clock_gettime};
    // this clock exists on every Linux
    clock_gettime(ClockId::CLOCK_THREAD_CPUTIME_ID).map_or(std::time::Duration::ZERO, Into::into)
}

/// The calling thread's nice value.
pub fn thread_nice() -> i32 {
    // SAFETY: getpriority takes plain integers; -1 is a valid nice value, so errno is not
    // consulted (who 0, the calling thread, exists)
    unsafe { libc::getpriority(libc::PRIO_PROCESS, 0) }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_thread_sets_its_own_timer_slack() {
        std::thread::spawn(|| {
            let before = super::timer_slack();
            super::set_timer_slack(std::time::Duration::from_micros(2)).unwrap();
            assert_eq!(super::timer_slack(), std::time::Duration::from_micros(2));
            assert_ne!(before, super::timer_slack(), "the default is Linux's 50 us");
        })
        .join()
        .unwrap();
    }

    use super::*;

    #[test]
    fn a_thread_gets_the_nice_value_it_may_have_and_the_others_keep_theirs() {
        let before = thread_nice();
        let t = std::thread::spawn(move || match set_thread_nice(-5) {
            Ok(()) => Some(thread_nice()),
            Err(e) => {
                // without CAP_SYS_NICE: refused, and the thread keeps its priority
                assert!(
                    matches!(e.raw_os_error(), Some(libc::EACCES | libc::EPERM)),
                    "{e}"
                );
                assert_eq!(thread_nice(), before);
                None
            }
        });
        if let Some(nice) = t.join().unwrap() {
            assert_eq!(nice, -5);
        }
        assert_eq!(thread_nice(), before, "only the thread that asked");
    }

    #[test]
    fn a_thread_s_cpu_time_grows_while_it_works_and_not_while_it_sleeps() {
        let t0 = thread_cpu_time();
        let wall = std::time::Instant::now();
        while wall.elapsed() < std::time::Duration::from_millis(20) {
            std::hint::black_box(0u64);
        }
        let t1 = thread_cpu_time();
        // at least some of 20 ms spinning (a loaded machine may hold the thread back)
        assert!(t1 > t0, "{t0:?} -> {t1:?}");
        std::thread::sleep(std::time::Duration::from_millis(50));
        let t2 = thread_cpu_time();
        assert!(
            t2 - t1 < std::time::Duration::from_millis(40),
            "{t1:?} -> {t2:?}"
        );
    }
}
