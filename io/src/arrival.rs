//! Datagrams with the time the kernel received them: a camera latches what a command asks
//! (an ACTION_CMD's trigger) when the command arrived, as a camera's hardware does, not when
//! its thread next got a CPU.

use std::io::IoSliceMut;
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::time::Duration;

use nix::sys::socket::{
    ControlMessageOwned, MsgFlags, SockaddrStorage, recvmsg, setsockopt, sockopt,
};

/// Ask the kernel to stamp each datagram `sock` receives with its arrival time
/// (`SO_TIMESTAMPNS`). The kernel turns its receive stamps on shortly after (a deferred
/// work item); until then a datagram is stamped when it is read.
pub fn stamp_arrivals(sock: &UdpSocket) -> std::io::Result<()> {
    setsockopt(sock, sockopt::ReceiveTimestampns, &true).map_err(std::io::Error::from)
}

/// The longest age [`recv_from_aged`] believes: an older stamp means the clock was set
/// meanwhile, and the datagram's age is not known.
pub const MAX_AGE: Duration = Duration::from_secs(1);

/// One datagram into `buf` (a longer one is cut, as `recv_from` does): its length, its
/// source, and how long ago the kernel received it (`None` without a stamp, or with one the
/// clock makes doubtful).
pub fn recv_from_aged(
    sock: &UdpSocket,
    buf: &mut [u8],
) -> std::io::Result<(usize, SocketAddr, Option<Duration>)> {
    let mut cmsg = nix::cmsg_space!(nix::sys::time::TimeSpec);
    let mut iov = [IoSliceMut::new(buf)];
    let msg = recvmsg::<SockaddrStorage>(
        sock.as_raw_fd(),
        &mut iov,
        Some(&mut cmsg),
        MsgFlags::empty(),
    )?;
    let mut stamp = None;
    for c in msg.cmsgs()? {
        if let ControlMessageOwned::ScmTimestampns(t) = c {
            stamp = Some(Duration::new(t.tv_sec() as u64, t.tv_nsec() as u32));
        }
    }
    let src = msg
        .address
        .as_ref()
        .and_then(|a| {
            a.as_sockaddr_in()
                .map(|v4| SocketAddr::from(std::net::SocketAddrV4::from(*v4)))
                .or_else(|| {
                    a.as_sockaddr_in6()
                        .map(|v6| SocketAddr::from(std::net::SocketAddrV6::from(*v6)))
                })
        })
        .ok_or_else(|| std::io::Error::other("a datagram without an IP source"))?;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let age = stamp
        .and_then(|s| now.checked_sub(s))
        .filter(|a| *a <= MAX_AGE);
    Ok((msg.bytes, src, age))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_datagram_read_later_says_how_long_it_waited() {
        let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
        stamp_arrivals(&rx).unwrap();
        // the kernel turns its stamps on from a work item
        std::thread::sleep(Duration::from_millis(50));
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        tx.send_to(b"ACTION", rx.local_addr().unwrap()).unwrap();
        std::thread::sleep(Duration::from_millis(30));
        let mut b = [0u8; 64];
        let (n, src, age) = recv_from_aged(&rx, &mut b).unwrap();
        assert_eq!(&b[..n], b"ACTION");
        assert_eq!(src, tx.local_addr().unwrap());
        let age = age.expect("stamped");
        assert!(age >= Duration::from_millis(30) && age < MAX_AGE, "{age:?}");
        // without the option: no stamp, and the datagram all the same
        let plain = UdpSocket::bind("127.0.0.1:0").unwrap();
        tx.send_to(b"X", plain.local_addr().unwrap()).unwrap();
        let (n, _, age) = recv_from_aged(&plain, &mut b).unwrap();
        assert_eq!((&b[..n], age), (&b"X"[..], None));
    }
}
