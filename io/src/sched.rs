//! The calling thread's scheduling priority.

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

/// The calling thread's nice value.
pub fn thread_nice() -> i32 {
    // SAFETY: as above; -1 is a valid nice value, so errno is not consulted (who 0 exists)
    unsafe { libc::getpriority(libc::PRIO_PROCESS, 0) }
}

#[cfg(test)]
mod tests {
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
}
