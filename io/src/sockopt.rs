//! Socket options RoCEv2 and GVSP need that the standard library does not offer.

use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;

use socket2::{Domain, Protocol, Socket, Type};

pub(crate) fn bind(addr: SocketAddr, buf: usize) -> std::io::Result<UdpSocket> {
    let s = Socket::new(Domain::for_address(addr), Type::DGRAM, Some(Protocol::UDP))?;
    if addr.is_ipv6() {
        s.set_only_v6(true)?;
    }
    let _ = s.set_recv_buffer_size(buf);
    let _ = s.set_send_buffer_size(buf);
    s.bind(&addr.into())?;
    Ok(s.into())
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
