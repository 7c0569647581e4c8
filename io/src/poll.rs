//! Waiting for sockets: block until one is readable, or poll without sleeping while a stream
//! flows.

use std::os::fd::BorrowedFd;
use std::time::{Duration, Instant as StdInstant};

/// How recently packets must have moved for a receive loop to busy-poll ([`busy_poll`]) rather
/// than sleep at once: the stream is flowing, and the next packet is due within a round trip.
pub const BUSY_POLL_WHILE: Duration = Duration::from_micros(500);

/// Poll `fd` without sleeping until it has something to read (true) or `limit` passes (false),
/// as an RDMA application polls its completion queue: a receiver that sleeps makes its peer
/// pay a wake-up for the next packet. Used by the camera (for ACKs) and the soft host (for
/// data) while a stream flows.
pub fn busy_poll(fd: BorrowedFd<'_>, limit: Duration) -> std::io::Result<bool> {
    let t = StdInstant::now();
    while t.elapsed() < limit {
        if wait_readable([fd], Duration::ZERO)? {
            return Ok(true);
        }
    }
    Ok(false)
}

/// [`busy_poll`] that offers its CPU between looks to a thread waiting for it when `share`
/// says the caller has time to spare ([`CpuShare`](crate::share::CpuShare): a quarter of a CPU
/// or less, no long yield lately). A receiver that polls on the CPU its sender was woken onto
/// holds off the very packets it waits for: on a small machine whose scheduler put the camera
/// and the host on one CPU, the soft host's polls for a frame's TRAILER did (at 100 fps over
/// loopback TRAILER latency p99 ~35-50 us, ~20 when it yields; docs/BENCHMARKS.md).
pub fn busy_poll_sharing(
    fd: BorrowedFd<'_>,
    limit: Duration,
    share: &mut crate::share::CpuShare,
) -> std::io::Result<bool> {
    let t = StdInstant::now();
    while t.elapsed() < limit {
        if wait_readable([fd], Duration::ZERO)? {
            return Ok(true);
        }
        share.yield_if_due();
    }
    Ok(false)
}

/// Block until one of `fds` has something to read or `timeout` passes; true if one has.
/// `ppoll`, so the timeout has microsecond resolution: an idle loop that waits here wakes
/// when an ACK or a command arrives, where a fixed sleep would add its whole length (and a
/// timer slack that is far coarser in a VM) to every round trip.
pub fn wait_readable<const N: usize>(
    fds: [BorrowedFd<'_>; N],
    timeout: Duration,
) -> std::io::Result<bool> {
    Ok(readable(fds, timeout)?.contains(&true))
}

/// Which of `fds` have something to read, waiting at most `timeout` until one has (zero: just
/// look). One `ppoll` for all of them: a loop that asks this once per turn reads only the
/// sockets that have data, instead of one `recv` per socket that mostly answers EAGAIN.
pub fn readable<const N: usize>(
    fds: [BorrowedFd<'_>; N],
    timeout: Duration,
) -> std::io::Result<[bool; N]> {
    use nix::poll::{PollFd, PollFlags, ppoll};
    // an array, not a Vec: this runs every turn of a loop
    let mut polled = fds.map(|fd| PollFd::new(fd, PollFlags::POLLIN));
    match ppoll(&mut polled, Some(timeout.into()), None) {
        Ok(_) => Ok(core::array::from_fn(|i| {
            polled[i]
                .revents()
                .is_some_and(|r| !(r & (PollFlags::POLLIN | PollFlags::POLLERR)).is_empty())
        })),
        Err(nix::errno::Errno::EINTR) => Ok([false; N]),
        Err(e) => Err(e.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::UdpSocket;
    use std::os::fd::AsFd;

    #[test]
    fn wait_readable_wakes_for_a_datagram_and_times_out_without_one() {
        let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
        let other = UdpSocket::bind("127.0.0.1:0").unwrap();
        let fds = [other.as_fd(), rx.as_fd()];
        assert!(!wait_readable(fds, Duration::from_micros(200)).unwrap());
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        tx.send_to(b"ack", rx.local_addr().unwrap()).unwrap();
        // a long timeout: the datagram, not the clock, ends the wait
        assert!(wait_readable(fds, Duration::from_secs(30)).unwrap());
        assert_eq!(readable(fds, Duration::ZERO).unwrap(), [false, true]);
        let mut b = [0u8; 8];
        assert_eq!(rx.recv(&mut b).unwrap(), 3);
        assert_eq!(readable(fds, Duration::ZERO).unwrap(), [false, false]);
    }

    #[test]
    fn a_sharing_busy_poll_finds_a_datagram_sent_from_another_thread_and_yields_meanwhile() {
        let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
        let mut share = crate::share::CpuShare::new(true, StdInstant::now(), Duration::ZERO);
        assert!(!busy_poll_sharing(rx.as_fd(), Duration::from_micros(300), &mut share).unwrap());
        assert!(share.pause.yields > 0, "it offered its CPU between looks");
        let to = rx.local_addr().unwrap();
        let sender = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(5));
            UdpSocket::bind("127.0.0.1:0")
                .unwrap()
                .send_to(b"data", to)
                .unwrap();
        });
        // the sender may need this thread's CPU to send at all
        assert!(busy_poll_sharing(rx.as_fd(), Duration::from_secs(30), &mut share).unwrap());
        sender.join().unwrap();
    }
}
