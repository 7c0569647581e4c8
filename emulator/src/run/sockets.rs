//! The camera's GVCP sockets: its own unicast socket on ADDR:3956, the shared broadcast
//! listeners for DISCOVERY and ACTION_CMD, and its MAC.

use std::io::ErrorKind;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, UdpSocket};

use anyhow::{Context, Result, bail};
use socket2::{Domain, Protocol, Socket, Type};
use tracing::warn;

/// The camera's own GVCP socket: exclusive, so one address is one camera.
pub(super) fn control_socket(addr: SocketAddrV4) -> Result<UdpSocket> {
    let s = Socket::new(Domain::IPV4, Type::DGRAM, Some(Protocol::UDP))?;
    s.set_broadcast(true)?;
    if let Err(e) = s.bind(&SocketAddr::V4(addr).into()) {
        if e.kind() == ErrorKind::AddrInUse {
            bail!(
                "{addr} is already served by another camera or GigE Vision device (UDP port {} \
                 on that address is taken): give this camera another --ip",
                addr.port()
            );
        }
        return Err(anyhow::Error::new(e).context(format!(
            "cannot bind UDP {addr}: is {} an address of this host (or of this network namespace)?",
            addr.ip()
        )));
    }
    let u: UdpSocket = s.into();
    u.set_nonblocking(true)?;
    Ok(u)
}

/// A broadcast listener on `addr`, shared with every other device on this machine.
pub(super) fn broadcast_socket(addr: SocketAddrV4) -> std::io::Result<UdpSocket> {
    let s = Socket::new(Domain::IPV4, Type::DGRAM, Some(Protocol::UDP))?;
    s.set_reuse_address(true)?;
    s.set_reuse_port(true)?;
    s.bind(&SocketAddr::V4(addr).into())?;
    let u: UdpSocket = s.into();
    u.set_nonblocking(true)?;
    Ok(u)
}

/// The broadcast address of the subnet `ip` is on (`rdmacam_io::link::broadcast_of` its
/// address entry): hosts send DISCOVERY there as well as to 255.255.255.255.
pub(super) fn subnet_broadcast(ip: Ipv4Addr) -> Option<Ipv4Addr> {
    rdmacam_io::link::broadcast_of(&rdmacam_io::link::interface_of(ip.into()).ok()??)
}

/// The sockets that hear broadcast DISCOVERY for a camera at `ip`.
pub(super) fn discovery_sockets(ip: Ipv4Addr, port: u16) -> Result<Vec<UdpSocket>> {
    let global = SocketAddrV4::new(Ipv4Addr::BROADCAST, port);
    let mut socks = vec![broadcast_socket(global).with_context(|| {
        format!(
            "cannot listen for broadcast discovery on {global}: another program holds it \
             without sharing (SO_REUSEADDR)"
        )
    })?];
    if let Some(b) = subnet_broadcast(ip) {
        let subnet = SocketAddrV4::new(b, port);
        match broadcast_socket(subnet) {
            Ok(s) => socks.push(s),
            // aravis's fake camera holds its subnet's broadcast address alone; hosts send to
            // 255.255.255.255 as well, which every device hears
            Err(e) => warn!("not listening on {subnet} ({e}): discovery by limited broadcast only"),
        }
    }
    Ok(socks)
}

/// A locally administered MAC derived from the address, so each emulated camera differs.
pub(super) fn mac_for(ip: Ipv4Addr) -> [u8; 6] {
    let o = ip.octets();
    [0x02, 0x52, o[0], o[1], o[2], o[3]]
}
