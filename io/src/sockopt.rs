//! Socket options RoCEv2 and GVSP need that the standard library does not offer.

use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;

use socket2::{Domain, Protocol, Socket, Type};

/// A UDP socket bound to `addr` with receive and send buffers of `buf` bytes each, or as much
/// of them as it may have.
///
/// Linux caps a plain request at twice `net.core.rmem_max` / `wmem_max` (Debian's default
/// 212,992 gives 425,984 bytes: 50 loopback datagrams of 4 KiB, fewer than the requester's
/// window of 128). A process with CAP_NET_ADMIN gets the whole buffer (`SO_RCVBUFFORCE`,
/// `SO_SNDBUFFORCE`); others keep the cap, which [`recv_buffer`] reports.
pub(crate) fn bind(addr: SocketAddr, buf: usize) -> std::io::Result<UdpSocket> {
    let s = Socket::new(Domain::for_address(addr), Type::DGRAM, Some(Protocol::UDP))?;
    if addr.is_ipv6() {
        s.set_only_v6(true)?;
    }
    let _ = s.set_recv_buffer_size(buf);
    let _ = s.set_send_buffer_size(buf);
    s.bind(&addr.into())?;
    let s = UdpSocket::from(s);
    // the kernel reports twice what was granted; a cap shows as less than asked
    let want = libc::c_int::try_from(buf).unwrap_or(libc::c_int::MAX);
    if recv_buffer(&s) < buf.saturating_mul(2) {
        let _ = set_int(&s, libc::SOL_SOCKET, libc::SO_RCVBUFFORCE, want);
    }
    if get_int(&s, libc::SOL_SOCKET, libc::SO_SNDBUF).unwrap_or(0) < buf.saturating_mul(2) {
        let _ = set_int(&s, libc::SOL_SOCKET, libc::SO_SNDBUFFORCE, want);
    }
    Ok(s)
}

/// The receive buffer `s` has, bytes of kernel memory (what `SO_RCVBUF` reads: twice the
/// request, datagrams charged with their overhead).
pub fn recv_buffer(s: &UdpSocket) -> usize {
    get_int(s, libc::SOL_SOCKET, libc::SO_RCVBUF).unwrap_or(0)
}

pub(crate) fn get_int(
    s: &UdpSocket,
    level: libc::c_int,
    name: libc::c_int,
) -> std::io::Result<usize> {
    let mut v: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: getsockopt on a valid, owned socket fd into a live c_int of the length passed.
    let r = unsafe {
        libc::getsockopt(
            s.as_raw_fd(),
            level,
            name,
            (&mut v as *mut libc::c_int).cast(),
            &mut len,
        )
    };
    if r == 0 {
        Ok(usize::try_from(v).unwrap_or(0))
    } else {
        Err(std::io::Error::last_os_error())
    }
}

pub(crate) fn set_int(
    s: &UdpSocket,
    level: libc::c_int,
    name: libc::c_int,
    v: libc::c_int,
) -> std::io::Result<()> {
    // SAFETY: setsockopt on a valid, owned socket fd with a pointer to a live c_int and its size.
    let r = unsafe {
        libc::setsockopt(
            s.as_raw_fd(),
            level,
            name,
            (&v as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// GVSP's Don't Fragment choice (SCPS bit 1) on an IPv4 socket: on, packets carry DF and one
/// larger than the path MTU is refused (`EMSGSIZE`) instead of leaving in fragments, which is
/// what lets a host's packet-size negotiation (GevSCPSFireTestPacket) find the largest size
/// that fits; off, the kernel fragments as needed and never sets DF.
pub fn set_dont_fragment(s: &UdpSocket, on: bool) -> std::io::Result<()> {
    let mode = if on {
        libc::IP_PMTUDISC_DO
    } else {
        libc::IP_PMTUDISC_DONT
    };
    set_int(s, libc::IPPROTO_IP, libc::IP_MTU_DISCOVER, mode)
}

/// Never fragment. IPv4: `IP_PMTUDISC_DO`, for which Linux sends identification 0 and DF.
pub(crate) fn pmtudisc_do(s: &UdpSocket, v6: bool) -> std::io::Result<()> {
    if v6 {
        set_int(
            s,
            libc::IPPROTO_IPV6,
            libc::IPV6_MTU_DISCOVER,
            libc::IPV6_PMTUDISC_DO,
        )
    } else {
        set_dont_fragment(s, true)
    }
}

/// `UDP_NO_CHECK6_RX`: accept IPv6 UDP with checksum 0, which RoCEv2 senders (rxe) send.
pub(crate) fn no_check6_rx(s: &UdpSocket) -> std::io::Result<()> {
    const UDP_NO_CHECK6_RX: libc::c_int = 102;
    set_int(s, libc::IPPROTO_UDP, UDP_NO_CHECK6_RX, 1)
}
