//! What a link carries: the MTU of an interface and of a route. A RoCEv2 packet of the path MTU
//! must fit in one IP datagram with its IP, UDP and IB headers (RoCEv2 sets Don't Fragment), so
//! a camera offers, and a host asks for, no more than the link's MTU leaves room for
//! ([`Pmtu::for_netdev_mtu`](rdmacam_protocol::wire::pmtu::Pmtu::for_netdev_mtu)), as the
//! Linux IB core does for an RDMA NIC's port.

use std::net::{IpAddr, Ipv4Addr, SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;

use rdmacam_protocol::wire::pmtu::Pmtu;

/// The address entry (`getifaddrs`) of the interface that holds `addr` in this network
/// namespace: its name, mask and broadcast address; `None` when none holds it (an unspecified
/// address, or another machine's).
pub fn interface_of(addr: IpAddr) -> std::io::Result<Option<nix::ifaddrs::InterfaceAddress>> {
    if addr.is_unspecified() {
        return Ok(None);
    }
    Ok(nix::ifaddrs::getifaddrs()?.find(|a| {
        a.address.as_ref().and_then(|s| {
            s.as_sockaddr_in()
                .map(|v| IpAddr::V4(v.ip()))
                .or_else(|| s.as_sockaddr_in6().map(|v| IpAddr::V6(v.ip())))
        }) == Some(addr)
    }))
}

/// The broadcast address of an IPv4 address entry (`getifaddrs`): its own (`brd`) where it
/// has one, else its subnet's all-ones host part (loopback, or an address added without
/// `brd`, which reads back its own address there). None for /31 and /32 subnets, which have
/// no broadcast address, and for other families.
pub fn broadcast_of(a: &nix::ifaddrs::InterfaceAddress) -> Option<Ipv4Addr> {
    let v4 = |s: &Option<nix::sys::socket::SockaddrStorage>| {
        s.as_ref().and_then(|s| s.as_sockaddr_in()).map(|v| v.ip())
    };
    let addr = v4(&a.address)?;
    v4(&a.broadcast)
        .filter(|b| *b != addr && !b.is_unspecified() && !b.is_broadcast())
        .or_else(|| {
            let mask = u32::from(v4(&a.netmask)?);
            (mask.leading_ones() <= 30).then(|| Ipv4Addr::from(u32::from(addr) | !mask))
        })
}

/// The interface (its name) with an address whose subnet has `ip` as its broadcast address
/// ([`broadcast_of`]; loopback's is 127.255.255.255). Linux lets a socket bind to such an
/// address and send from it, but it names every machine on that subnet, not one.
pub fn subnet_broadcast_of(ip: Ipv4Addr) -> std::io::Result<Option<String>> {
    Ok(nix::ifaddrs::getifaddrs()?
        .find(|a| broadcast_of(a) == Some(ip))
        .map(|a| a.interface_name))
}

/// The MTU of the interface that holds `addr` in this network namespace (`SIOCGIFMTU`), or
/// `None` when none holds it.
pub fn interface_mtu(addr: IpAddr) -> std::io::Result<Option<u32>> {
    match interface_of(addr)? {
        Some(a) => named_mtu(&a.interface_name).map(Some),
        None => Ok(None),
    }
}

/// `SIOCGIFMTU` of the interface `name` (the namespace's own; `/sys/class/net` may show another
/// namespace's after a bare `unshare -n`).
fn named_mtu(name: &str) -> std::io::Result<u32> {
    let mut req: libc::ifreq = unsafe {
        // SAFETY: ifreq is plain data (a name array and a union of integers and addresses);
        // all zeros is a valid value of it.
        std::mem::zeroed()
    };
    if name.len() >= req.ifr_name.len() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("interface name {name:?} is too long"),
        ));
    }
    for (d, b) in req.ifr_name.iter_mut().zip(name.bytes()) {
        *d = b as libc::c_char;
    }
    let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::DGRAM, None)?;
    // SAFETY: SIOCGIFMTU reads the NUL-terminated name and writes ifru_mtu of the live ifreq
    // passed, on a socket this function owns.
    let r = unsafe { libc::ioctl(s.as_raw_fd(), libc::SIOCGIFMTU as _, &mut req) };
    if r != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: SIOCGIFMTU succeeded, so the union holds the MTU.
    let mtu = unsafe { req.ifr_ifru.ifru_mtu };
    Ok(u32::try_from(mtu).unwrap_or(0))
}

/// The MTU of the route from `local` to `peer` as the kernel holds it now (`IP_MTU` /
/// `IPV6_MTU` of a UDP socket connected there): the outgoing interface's, or less where the
/// route or a learned path MTU says so. Sends nothing.
pub fn route_mtu(local: IpAddr, peer: IpAddr) -> std::io::Result<u32> {
    let s = UdpSocket::bind(SocketAddr::new(local, 0))?;
    s.connect(SocketAddr::new(peer, 4791))?;
    let (level, name) = if peer.is_ipv6() {
        (libc::IPPROTO_IPV6, libc::IPV6_MTU)
    } else {
        (libc::IPPROTO_IP, libc::IP_MTU)
    };
    Ok(crate::sockopt::get_int(&s, level, name)? as u32)
}

/// The largest path MTU a link of `mtu` bytes carries, or an error that says why none fits.
pub fn pmtu_for(mtu: u32, what: &str) -> std::io::Result<Pmtu> {
    Pmtu::for_netdev_mtu(mtu).ok_or_else(|| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!(
                "{what} has an MTU of {mtu} bytes: RoCEv2 needs at least 352 (a 256-byte path \
                 MTU and 96 bytes of headers)"
            ),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv6Addr;

    fn lo_mtu_from_sysfs() -> Option<u32> {
        std::fs::read_to_string("/sys/class/net/lo/mtu")
            .ok()?
            .trim()
            .parse()
            .ok()
    }

    #[test]
    fn loopback_addresses_are_on_lo_and_its_mtu_is_what_the_kernel_says() {
        let v4 = interface_mtu(IpAddr::V4(Ipv4Addr::LOCALHOST))
            .unwrap()
            .expect("127.0.0.1 is on lo");
        // the kernel's own figure for lo, read another way (this test runs in the namespace
        // sysfs shows unless something unshared it without remounting)
        if let Some(sys) = lo_mtu_from_sysfs() {
            assert_eq!(v4, sys);
        }
        assert!(v4 >= 1280, "{v4}");
        if let Ok(Some(v6)) = interface_mtu(IpAddr::V6(Ipv6Addr::LOCALHOST)) {
            assert_eq!(v6, v4);
        }
        // nothing here holds these
        assert_eq!(
            interface_mtu(IpAddr::V4(Ipv4Addr::UNSPECIFIED)).unwrap(),
            None
        );
        assert_eq!(
            interface_mtu(IpAddr::V4(Ipv4Addr::new(192, 0, 2, 77))).unwrap(),
            None
        );
        let route = route_mtu(
            IpAddr::V4(Ipv4Addr::LOCALHOST),
            IpAddr::V4(Ipv4Addr::new(127, 0, 0, 1)),
        )
        .unwrap();
        // an IPv4 route's MTU is at most 65,535 (IP_MAX_MTU), lo's 65,536
        assert_eq!(route, v4.min(65_535));
    }

    #[test]
    fn a_subnet_broadcast_address_is_the_one_the_kernel_will_not_send_to_unasked() {
        // the kernel's own verdict: a UDP socket without SO_BROADCAST may not send to a
        // broadcast address (EACCES), and may to a unicast one
        let sends = |to: Ipv4Addr| {
            let s = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
            s.send_to(b"x", (to, 9)).map(|_| ()).map_err(|e| e.kind())
        };
        let lo_brd = Ipv4Addr::new(127, 255, 255, 255);
        assert_eq!(sends(lo_brd), Err(std::io::ErrorKind::PermissionDenied));
        assert_eq!(subnet_broadcast_of(lo_brd).unwrap().as_deref(), Some("lo"));
        for one in [Ipv4Addr::LOCALHOST, Ipv4Addr::new(127, 0, 0, 9)] {
            assert_eq!(sends(one), Ok(()));
            assert_eq!(subnet_broadcast_of(one).unwrap(), None, "{one}");
        }
    }

    #[test]
    fn a_link_too_small_for_any_path_mtu_is_named() {
        assert_eq!(pmtu_for(1500, "x").unwrap(), Pmtu::Mtu1024);
        assert_eq!(pmtu_for(65536, "x").unwrap(), Pmtu::Mtu4096);
        let e = pmtu_for(300, "the link to 10.0.0.2").unwrap_err();
        assert!(
            e.to_string()
                .contains("the link to 10.0.0.2 has an MTU of 300"),
            "{e}"
        );
    }
}
