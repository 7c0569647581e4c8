//! Sockets: RoCEv2 over plain UDP (no privilege), and a GVCP client.
//!
//! RoCEv2 rule (`design/ORSP.md` §12): the ICRC covers the IPv4 identification, so packets go
//! out of an *unconnected* UDP socket with `IP_MTU_DISCOVER = IP_PMTUDISC_DO`, for which Linux
//! sends identification 0 (measured in the rxe lab). Received packets arrive without their IP
//! header, so their ICRC cannot be checked here.

use std::io::ErrorKind;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, SocketAddrV4, UdpSocket};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};
use std::time::{Duration, Instant as StdInstant};

use rand::{Rng, SeedableRng};
use socket2::{Domain, Protocol, Socket, Type};

/// A RoCEv2 endpoint on UDP: a receive socket on the RoCE port and an unconnected send socket
/// on the QP's source port (rebound to whatever source port the packets carry, since the ICRC
/// covers it: the QP's entropy port).
pub struct RoceSocket {
    rx: UdpSocket,
    rx_port: u16,
    tx: UdpSocket,
    tx_port: u16,
    local: IpAddr,
    loss: f64,
    rng: rand::rngs::StdRng,
    capture: Option<Capture>,
    tos: u8,
    gso_ok: bool,
    /// Control-message space for `recvmsg` (the received TOS), kept so receiving allocates
    /// nothing.
    cmsg: Vec<u8>,
    icrc: IcrcCheck,
    /// Packets dropped on purpose (`--loss`).
    pub dropped: u64,
    /// Received packets discarded for a bad ICRC.
    pub icrc_drops: u64,
}

/// Checks the ICRC of RoCEv2 packets received on a UDP socket, which hands over the UDP
/// payload only: the IP and UDP headers are rebuilt from the addresses, ports and length. All
/// the fields the ICRC covers are known then (DF set, as RoCEv2 senders send) except the IPv4
/// identification, which a sender using UDP segmentation offload numbers 0, 1, 2, ... within a
/// send. The CRC is affine in those bits, so a packet is good when its carried ICRC differs
/// from the one computed with identification 0 by the contribution of an identification below
/// [`GSO_MAX_SEGMENTS`]; those contributions depend only on the packet's length and are
/// cached per length. IPv6 has no such field: its ICRC is checked exactly.
#[derive(Debug, Default)]
pub struct IcrcCheck {
    /// Per CRC-covered length: the contribution of each identification 0..GSO_MAX_SEGMENTS.
    deltas: std::collections::HashMap<usize, Box<[u32; GSO_MAX_SEGMENTS]>>,
}

impl IcrcCheck {
    /// Whether `ib` (BTH to ICRC) arriving from `src` at `dst` carries a good ICRC.
    pub fn ok(&mut self, src: SocketAddr, dst: SocketAddr, ib: &[u8]) -> bool {
        use rdmacam_protocol::wire::IpRepr;
        use rdmacam_protocol::wire::icrc::{ICRC_LEN, Icrc};
        const BTH: usize = 12;
        if ib.len() < BTH + ICRC_LEN {
            return false;
        }
        let ip = match (src.ip(), dst.ip()) {
            (IpAddr::V4(s), IpAddr::V4(d)) => IpRepr::v4(s, d),
            (IpAddr::V6(s), IpAddr::V6(d)) => IpRepr::v6(s, d),
            _ => return false,
        };
        let mut hdr = [0u8; 48];
        let Ok(hl) = ip.emit_udp_header(&mut hdr, src.port(), dst.port(), ib.len()) else {
            return false;
        };
        let ip_len = hl - 8;
        let (bth, rest) = ib.split_at(BTH);
        let (covered, carried) = rest.split_at(rest.len() - ICRC_LEN);
        let start = if src.is_ipv4() {
            Icrc::rocev2_ipv4(&hdr[..ip_len], &hdr[ip_len..hl], bth)
        } else {
            Icrc::rocev2_ipv6(&hdr[..ip_len], &hdr[ip_len..hl], bth)
        };
        let Ok(mut c) = start else {
            return false;
        };
        c.update(covered);
        let carried = u32::from_le_bytes([carried[0], carried[1], carried[2], carried[3]]);
        let diff = c.finish() ^ carried;
        if diff == 0 {
            return true;
        }
        if !src.is_ipv4() {
            return false;
        }
        // the CRC runs over 8 bytes of 0xFF, the IP header (identification at 4..6), UDP,
        // and the rest up to the ICRC
        let len = 8 + hl + ib.len() - ICRC_LEN;
        let deltas = self.deltas.entry(len).or_insert_with(|| {
            let crc = |ident: u16| {
                let mut m = vec![0u8; len];
                m[12..14].copy_from_slice(&ident.to_be_bytes());
                crc32fast::hash(&m)
            };
            let zero = crc(0);
            let basis: Vec<u32> = (0..6).map(|b| crc(1 << b) ^ zero).collect();
            let mut d = Box::new([0u32; GSO_MAX_SEGMENTS]);
            for (id, v) in d.iter_mut().enumerate() {
                *v = (0..6)
                    .filter(|b| id & (1 << b) != 0)
                    .fold(0, |a, b| a ^ basis[b]);
            }
            d
        });
        deltas[1..].contains(&diff)
    }
}

impl std::fmt::Debug for RoceSocket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RoceSocket")
            .field("local", &self.local)
            .field("rx_port", &self.rx_port)
            .field("tx_port", &self.tx_port)
            .finish_non_exhaustive()
    }
}

/// A pcapng capture of a socket's RoCEv2 traffic (link type raw IPv4).
struct Capture {
    w: pcap_file::pcapng::PcapNgWriter<std::io::BufWriter<std::fs::File>>,
    t0: StdInstant,
}

/// A copy of an IPv4 or IPv6 UDP packet with its UDP checksum filled in (RFC 768 / RFC 8200),
/// as the kernel writes it on the wire: the queue pair builds its headers with checksum 0 (the
/// ICRC protects RoCEv2), and a capture should show what left, not what was handed over.
pub fn with_udp_checksum(packet: &[u8]) -> Vec<u8> {
    use rdmacam_protocol::wire::ipv4::checksum;
    let mut p = packet.to_vec();
    let (hl, mut pseudo) = match p.first().map(|b| b >> 4) {
        Some(4) if p.len() >= 20 => {
            let hl = usize::from(p[0] & 0xf) * 4;
            let mut ph = Vec::with_capacity(12);
            ph.extend_from_slice(&p[12..20]);
            ph.extend_from_slice(&[0, 17]);
            (hl, ph)
        }
        Some(6) if p.len() >= 40 => {
            let mut ph = Vec::with_capacity(40);
            ph.extend_from_slice(&p[8..40]);
            ph.extend_from_slice(&[0, 0]);
            (40, ph)
        }
        _ => return p,
    };
    if p.len() < hl + 8 {
        return p;
    }
    let udp_len = p.len() - hl;
    pseudo.extend_from_slice(&(udp_len as u16).to_be_bytes());
    if p[0] >> 4 == 6 {
        // IPv6: the 32-bit length, then three zero bytes and the next header
        pseudo.extend_from_slice(&[0, 0, 0, 17]);
    }
    p[hl + 6..hl + 8].copy_from_slice(&[0, 0]);
    pseudo.extend_from_slice(&p[hl..]);
    let c = match checksum(&pseudo) {
        0 => 0xffff,
        c => c,
    };
    p[hl + 6..hl + 8].copy_from_slice(&c.to_be_bytes());
    p
}

impl Capture {
    fn write(&mut self, packet: &[u8], comment: Option<&'static str>) {
        let packet = &with_udp_checksum(packet)[..];
        use pcap_file::pcapng::blocks::enhanced_packet::{
            EnhancedPacketBlock, EnhancedPacketOption,
        };
        let options = comment
            .map(|c| vec![EnhancedPacketOption::Comment(std::borrow::Cow::Borrowed(c))])
            .unwrap_or_default();
        let _ = self.w.write_pcapng_block(EnhancedPacketBlock {
            interface_id: 0,
            timestamp: self.t0.elapsed(),
            original_len: packet.len() as u32,
            data: std::borrow::Cow::Borrowed(packet),
            options,
        });
    }
}

/// RoCEv2 packets handed to the kernel per `sendmmsg` call at most.
pub const TX_BATCH: usize = 32;

/// CLOCK_MONOTONIC in nanoseconds: one clock for every process on the machine (and every
/// network namespace), so a camera's and a host's logs line up (latency measurements).
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid timespec out-pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

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

/// Block until one of `fds` has something to read or `timeout` passes; true if one has.
/// `ppoll`, so the timeout has microsecond resolution: an idle loop that waits here wakes
/// when an ACK or a command arrives, where a fixed sleep would add its whole length (and a
/// timer slack that is far coarser in a VM) to every round trip.
pub fn wait_readable<const N: usize>(
    fds: [BorrowedFd<'_>; N],
    timeout: Duration,
) -> std::io::Result<bool> {
    use nix::poll::{PollFd, PollFlags, ppoll};
    // an array, not a Vec: this runs every time a loop goes idle
    let mut polled = fds.map(|fd| PollFd::new(fd, PollFlags::POLLIN));
    match ppoll(&mut polled, Some(timeout.into()), None) {
        Ok(n) => Ok(n > 0),
        Err(nix::errno::Errno::EINTR) => Ok(false),
        Err(e) => Err(e.into()),
    }
}

/// One `sendmsg(2)` of the bytes in `iov` to `dst` with `UDP_SEGMENT = seg`: the kernel cuts
/// them into datagrams of `seg` bytes (the last may be shorter). Retries while the socket
/// buffer is full.
fn sendmsg_segmented(
    fd: BorrowedFd<'_>,
    dst: SocketAddr,
    iov: &mut [libc::iovec],
    seg: usize,
) -> std::io::Result<()> {
    let name: socket2::SockAddr = dst.into();
    // one cmsg: SOL_UDP / UDP_SEGMENT with the segment size as a u16
    #[repr(C, align(8))]
    struct Cmsg([u8; 32]);
    let mut control = Cmsg([0; 32]);
    // SAFETY: an all-zero msghdr is valid; every pointer set below refers to locals or to `iov`
    // (whose entries point at live buffers, the caller's promise) that outlive the sendmsg
    // call, and the control buffer is large and aligned enough for one cmsghdr carrying two
    // bytes.
    unsafe {
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_name = name.as_ptr().cast_mut().cast();
        msg.msg_namelen = name.len();
        msg.msg_iov = iov.as_mut_ptr();
        msg.msg_iovlen = iov.len();
        msg.msg_control = control.0.as_mut_ptr().cast();
        msg.msg_controllen = libc::CMSG_SPACE(2) as usize;
        let c = libc::CMSG_FIRSTHDR(&msg);
        (*c).cmsg_level = libc::SOL_UDP;
        (*c).cmsg_type = libc::UDP_SEGMENT;
        (*c).cmsg_len = libc::CMSG_LEN(2) as usize;
        std::ptr::copy_nonoverlapping((seg as u16).to_ne_bytes().as_ptr(), libc::CMSG_DATA(c), 2);
        loop {
            if libc::sendmsg(fd.as_raw_fd(), &msg, 0) >= 0 {
                return Ok(());
            }
            let e = std::io::Error::last_os_error();
            match e.kind() {
                ErrorKind::WouldBlock | ErrorKind::Interrupted => std::thread::yield_now(),
                _ if e.raw_os_error() == Some(libc::ENOBUFS) => std::thread::yield_now(),
                _ => return Err(e),
            }
        }
    }
}

/// Datagrams to one destination through UDP segmentation offload: up to
/// [`GSO_MAX_SEGMENTS`] per `sendmsg(2)`, all of the first one's length but the last, which
/// may be shorter (the GVSP stream's payload packets). With `gso` false, or once the kernel
/// refuses `UDP_SEGMENT` (it then sets `gso` false), one `sendto` per datagram.
pub fn send_datagrams(
    sock: &UdpSocket,
    dst: SocketAddr,
    datagrams: &[&[u8]],
    gso: &mut bool,
) -> std::io::Result<()> {
    let Some(first) = datagrams.first() else {
        return Ok(());
    };
    let seg = first.len();
    let fits = datagrams.len() <= gso_segments(seg)
        && datagrams[..datagrams.len() - 1]
            .iter()
            .all(|d| d.len() == seg)
        && datagrams.last().is_some_and(|d| d.len() <= seg);
    if *gso && datagrams.len() > 1 && fits {
        let mut iov = [libc::iovec {
            iov_base: std::ptr::null_mut(),
            iov_len: 0,
        }; GSO_MAX_SEGMENTS];
        for (v, d) in iov.iter_mut().zip(datagrams) {
            *v = libc::iovec {
                iov_base: d.as_ptr().cast_mut().cast(),
                iov_len: d.len(),
            };
        }
        match sendmsg_segmented(sock.as_fd(), dst, &mut iov[..datagrams.len()], seg) {
            Err(e)
                if matches!(
                    e.raw_os_error(),
                    Some(libc::EIO | libc::EINVAL | libc::ENOPROTOOPT)
                ) =>
            {
                *gso = false; // no UDP GSO here: from now on one datagram per send
            }
            r => return r,
        }
    }
    for d in datagrams {
        sock.send_to(d, dst)?;
    }
    Ok(())
}

/// Most segments in one UDP segmentation offload send (the kernel's `UDP_MAX_SEGMENTS`).
pub const GSO_MAX_SEGMENTS: usize = 64;

/// One RoCEv2 packet in pieces, for gather I/O: the whole header (IP, UDP, IB), the payload
/// where it lies (frame memory), and the pad and ICRC.
#[derive(Debug, Clone, Copy)]
pub struct Gather<'a> {
    /// IP, UDP and InfiniBand headers.
    pub header: &'a [u8],
    /// Payload bytes.
    pub payload: &'a [u8],
    /// Pad and ICRC.
    pub trailer: &'a [u8],
}

impl Gather<'_> {
    fn ip_header_len(&self) -> usize {
        if self.header.first().is_some_and(|b| b >> 4 == 6) {
            40
        } else {
            20
        }
    }

    /// The UDP payload length.
    pub fn udp_len(&self) -> usize {
        self.header.len() - self.ip_header_len() - 8 + self.payload.len() + self.trailer.len()
    }

    fn whole(&self) -> Vec<u8> {
        [self.header, self.payload, self.trailer].concat()
    }
}

/// How many segments of `udp_len` bytes one GSO send may carry: the kernel's segment limit,
/// and the IP datagram limit of 64 KiB for the unsegmented send.
pub fn gso_segments(udp_len: usize) -> usize {
    (65_000 / udp_len.max(1)).clamp(1, GSO_MAX_SEGMENTS)
}

/// Comment on received packets in a capture.
pub const RECONSTRUCTED: &str = "received on a UDP socket: IPv4/UDP header reconstructed by rdmacam (identification 0 assumed, TTL/TOS unknown; UDP checksum recomputed)";

fn bind(addr: SocketAddr, buf: usize) -> std::io::Result<UdpSocket> {
    let s = Socket::new(Domain::for_address(addr), Type::DGRAM, Some(Protocol::UDP))?;
    if addr.is_ipv6() {
        s.set_only_v6(true)?;
    }
    let _ = s.set_recv_buffer_size(buf);
    let _ = s.set_send_buffer_size(buf);
    s.bind(&addr.into())?;
    Ok(s.into())
}

fn set_int(
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
fn pmtudisc_do(s: &UdpSocket, v6: bool) -> std::io::Result<()> {
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
fn no_check6_rx(s: &UdpSocket) -> std::io::Result<()> {
    const UDP_NO_CHECK6_RX: libc::c_int = 102;
    set_int(s, libc::IPPROTO_UDP, UDP_NO_CHECK6_RX, 1)
}

/// The receiving socket, for [`wait_readable`].
impl AsFd for RoceSocket {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.rx.as_fd()
    }
}

impl RoceSocket {
    /// Bind `local:rx_port` for receiving and `local:tx_port` for sending. `loss` (0..1) drops
    /// that share of outgoing packets, reproducibly from `seed`.
    pub fn bind(
        local: IpAddr,
        rx_port: u16,
        tx_port: u16,
        loss: f64,
        seed: u64,
    ) -> std::io::Result<Self> {
        let at = |port| SocketAddr::new(local, port);
        let rx = bind(at(rx_port), 16 << 20).map_err(|e| {
            std::io::Error::new(
                e.kind(),
                format!(
                    "cannot bind RoCEv2 port {}: {e} (is it taken, or not a local address?)",
                    at(rx_port)
                ),
            )
        })?;
        let tx = bind(at(tx_port), 16 << 20).map_err(|e| {
            std::io::Error::new(
                e.kind(),
                format!("cannot bind RoCEv2 source port {}: {e}", at(tx_port)),
            )
        })?;
        pmtudisc_do(&tx, local.is_ipv6())?;
        if local.is_ipv6() {
            no_check6_rx(&rx)?;
        }
        // the ECN bits of what arrives (a congested switch's CE mark asks for a CNP)
        if local.is_ipv6() {
            set_int(&rx, libc::IPPROTO_IPV6, libc::IPV6_RECVTCLASS, 1)?;
        } else {
            set_int(&rx, libc::IPPROTO_IP, libc::IP_RECVTOS, 1)?;
        }
        rx.set_nonblocking(true)?;
        let tx_port = tx.local_addr()?.port();
        Ok(RoceSocket {
            rx,
            rx_port,
            tx,
            tx_port,
            local,
            loss,
            rng: rand::rngs::StdRng::seed_from_u64(seed),
            capture: None,
            tos: 0,
            gso_ok: true,
            cmsg: nix::cmsg_space!(libc::c_int),
            icrc: IcrcCheck::default(),
            dropped: 0,
            icrc_drops: 0,
        })
    }

    /// Write every packet sent and received to a pcapng file at `path`.
    pub fn capture_to(&mut self, path: &std::path::Path) -> std::io::Result<()> {
        use pcap_file::pcapng::blocks::interface_description::{
            InterfaceDescriptionBlock, InterfaceDescriptionOption,
        };
        let f = std::io::BufWriter::new(std::fs::File::create(path)?);
        let mut w = pcap_file::pcapng::PcapNgWriter::new(f).map_err(std::io::Error::other)?;
        w.write_pcapng_block(InterfaceDescriptionBlock {
            linktype: pcap_file::DataLink::RAW,
            snaplen: 0,
            // pcap-file writes Enhanced Packet timestamps in nanoseconds: say so, or readers
            // take the default microseconds and show times 1000 times too large
            options: vec![InterfaceDescriptionOption::IfTsResol(9)],
        })
        .map_err(std::io::Error::other)?;
        self.capture = Some(Capture {
            w,
            t0: StdInstant::now(),
        });
        Ok(())
    }

    /// The port packets leave from when they do not name one (`Path::src_port` 0 means the
    /// QP's entropy port, to which the socket rebinds on the first packet).
    pub fn tx_port(&self) -> u16 {
        self.tx_port
    }

    fn rebind_tx(&mut self, port: u16) -> std::io::Result<()> {
        let at = SocketAddr::new(self.local, port);
        let tx = bind(at, 16 << 20).map_err(|e| {
            std::io::Error::new(
                e.kind(),
                format!("cannot send from the QP's UDP port {at}: {e}"),
            )
        })?;
        pmtudisc_do(&tx, self.local.is_ipv6())?;
        self.tx = tx;
        self.tx_port = port;
        self.set_tos(self.tos)
    }

    /// Send one RoCEv2 IP packet marked ECN Congestion Experienced, as a congested switch
    /// would have marked it (a fault on demand); the socket's TOS is restored after.
    pub fn send_congested(&mut self, ip_packet: &[u8]) -> std::io::Result<()> {
        let tos = self.tos;
        let (_, _, src_port) = Self::addresses(ip_packet)?;
        if src_port != self.tx_port {
            self.rebind_tx(src_port)?;
        }
        self.set_tos(tos | 3)?;
        let r = self.send(ip_packet);
        self.set_tos(tos)?;
        r
    }

    /// The IPv4 TOS / IPv6 traffic class byte (DSCP << 2 | ECN) of what this socket sends from
    /// now on (ORSP TX_TUNING). The ICRC masks it, so it changes no checksum.
    pub fn set_tos(&mut self, tos: u8) -> std::io::Result<()> {
        self.tos = tos;
        if !self.local.is_ipv6() {
            return socket2::SockRef::from(&self.tx).set_tos(u32::from(tos));
        }
        set_int(
            &self.tx,
            libc::IPPROTO_IPV6,
            libc::IPV6_TCLASS,
            libc::c_int::from(tos),
        )
    }

    /// Send a whole RoCEv2 IP packet: the kernel writes the IP and UDP headers again, with the
    /// same covered values (IPv4 identification 0 and DF; the fields it may choose differently,
    /// like TTL, the IPv6 flow label and the UDP checksum, are masked in the ICRC), so only the
    /// UDP payload is handed over.
    pub fn send(&mut self, ip_packet: &[u8]) -> std::io::Result<()> {
        self.send_many(std::iter::once(ip_packet))
    }

    /// Send several RoCEv2 IP packets as [`Self::send`] does, up to [`TX_BATCH`] per
    /// `sendmmsg(2)` call; a change of UDP source port (the QP's entropy port) starts a new call.
    /// No allocation: the batch lives on the stack.
    pub fn send_many<'a>(
        &mut self,
        packets: impl IntoIterator<Item = &'a [u8]>,
    ) -> std::io::Result<()> {
        self.send_batched(packets, true)
    }

    /// [`send_many`](Self::send_many), dropping on purpose only if `lossy` (not for packets
    /// whose sender already asked [`lose`](Self::lose)).
    fn send_batched<'a>(
        &mut self,
        packets: impl IntoIterator<Item = &'a [u8]>,
        lossy: bool,
    ) -> std::io::Result<()> {
        const NONE: SocketAddr = SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 0));
        let mut batch: [(&[u8], SocketAddr); TX_BATCH] = [(&[], NONE); TX_BATCH];
        let mut n = 0;
        for ip_packet in packets {
            let (hl, dst, src_port) = Self::addresses(ip_packet)?;
            if src_port != self.tx_port || n == TX_BATCH {
                self.flush(&batch[..n])?;
                n = 0;
                if src_port != self.tx_port {
                    self.rebind_tx(src_port)?;
                }
            }
            if let Some(c) = self.capture.as_mut() {
                c.write(ip_packet, None);
            }
            if lossy && self.lose() {
                continue;
            }
            let port = u16::from_be_bytes([ip_packet[hl + 2], ip_packet[hl + 3]]);
            batch[n] = (&ip_packet[hl + 8..], SocketAddr::new(dst, port));
            n += 1;
        }
        self.flush(&batch[..n])
    }

    /// Whether the next packet is dropped on purpose (`--loss`; counted in `dropped`). Senders
    /// that hand packets to [`send_gso`](Self::send_gso) ask before they seal a packet into a
    /// run (its IPv4 identification, which the ICRC covers, is its place in the run), so a
    /// lossy link keeps segmentation offload.
    pub fn lose(&mut self) -> bool {
        let lost = self.loss > 0.0 && self.rng.random_bool(self.loss);
        self.dropped += u64::from(lost);
        lost
    }

    /// Allow or forbid UDP segmentation offload (on by default where the kernel has it).
    pub fn set_gso(&mut self, on: bool) {
        self.gso_ok = on;
    }

    /// Whether [`send_gso`](Self::send_gso) hands segments to the kernel in one send (UDP
    /// segmentation offload). Not when capturing, which needs each packet, nor after the kernel
    /// refused GSO once. `--loss` is applied by the caller ([`lose`](Self::lose)) before a
    /// packet joins a run.
    pub fn gso(&self) -> bool {
        self.gso_ok && self.capture.is_none()
    }

    /// Send packets that share a destination and UDP source port, each of the first's UDP
    /// length except the last (which may be shorter), in one `sendmsg(2)` with `UDP_SEGMENT`:
    /// the kernel cuts them apart and numbers their IPv4 identifications 0, 1, 2, ... (the
    /// packets' ICRCs must have been computed with those; a single packet is sent as it is).
    /// Gather I/O: the payload goes from where it lies, with no copy in user space. Falls back
    /// to one copied datagram per packet when [`gso`](Self::gso) is off.
    pub fn send_gso(&mut self, segs: &[Gather<'_>]) -> std::io::Result<()> {
        let Some(first) = segs.first() else {
            return Ok(());
        };
        if !self.gso() {
            let whole: Vec<Vec<u8>> = segs.iter().map(Gather::whole).collect();
            return self.send_batched(whole.iter().map(Vec::as_slice), false);
        }
        let (hl, dst, src_port) = Self::addresses(first.header)?;
        if src_port != self.tx_port {
            self.rebind_tx(src_port)?;
        }
        let port = u16::from_be_bytes([first.header[hl + 2], first.header[hl + 3]]);
        let seg = first.udp_len();
        if segs.len() > gso_segments(seg)
            || segs[..segs.len() - 1].iter().any(|g| g.udp_len() != seg)
            || segs.last().is_some_and(|g| g.udp_len() > seg)
        {
            return Err(std::io::Error::new(
                ErrorKind::InvalidInput,
                "GSO segments must be equal but the last, which may be shorter",
            ));
        }
        let mut iov = [libc::iovec {
            iov_base: std::ptr::null_mut(),
            iov_len: 0,
        }; 3 * GSO_MAX_SEGMENTS];
        for (i, g) in segs.iter().enumerate() {
            let parts = [&g.header[hl + 8..], g.payload, g.trailer];
            for (j, part) in parts.iter().enumerate() {
                iov[3 * i + j] = libc::iovec {
                    iov_base: part.as_ptr().cast_mut().cast(),
                    iov_len: part.len(),
                };
            }
        }
        let r = sendmsg_segmented(
            self.tx.as_fd(),
            SocketAddr::new(dst, port),
            &mut iov[..3 * segs.len()],
            seg,
        );
        match r {
            Err(e)
                if matches!(
                    e.raw_os_error(),
                    Some(libc::EIO | libc::EINVAL | libc::ENOPROTOOPT)
                ) =>
            {
                // no UDP GSO here: from now on one datagram per packet
                self.gso_ok = false;
                let whole: Vec<Vec<u8>> = segs.iter().map(Gather::whole).collect();
                self.send_batched(whole.iter().map(Vec::as_slice), false)
            }
            r => r,
        }
    }

    /// `sendmmsg(2)` the datagrams (at most [`TX_BATCH`]), retrying while the socket buffer is
    /// full.
    fn flush(&self, batch: &[(&[u8], SocketAddr)]) -> std::io::Result<()> {
        let n = batch.len();
        if n == 0 {
            return Ok(());
        }
        let names: [socket2::SockAddr; TX_BATCH] =
            std::array::from_fn(|i| batch[i.min(n - 1)].1.into());
        let mut iov = [libc::iovec {
            iov_base: std::ptr::null_mut(),
            iov_len: 0,
        }; TX_BATCH];
        // SAFETY: all-zero mmsghdrs are valid "no name, no data, no control, no flags" headers.
        let mut msgs: [libc::mmsghdr; TX_BATCH] = unsafe { std::mem::zeroed() };
        for (i, (data, _)) in batch.iter().enumerate() {
            iov[i] = libc::iovec {
                iov_base: data.as_ptr().cast_mut().cast(),
                iov_len: data.len(),
            };
            let h = &mut msgs[i].msg_hdr;
            h.msg_name = names[i].as_ptr().cast_mut().cast();
            h.msg_namelen = names[i].len();
            h.msg_iov = &mut iov[i];
            h.msg_iovlen = 1;
        }
        let mut done = 0;
        while done < n {
            // SAFETY: `msgs[done..n]` are initialised headers whose name and iovec pointers refer
            // to `names`, `iov` and `batch`, all alive and unmoved for this call.
            let r = unsafe {
                libc::sendmmsg(
                    self.tx.as_raw_fd(),
                    msgs[done..].as_mut_ptr(),
                    (n - done) as libc::c_uint,
                    0,
                )
            };
            if r >= 0 {
                done += r as usize;
                continue;
            }
            let e = std::io::Error::last_os_error();
            match e.kind() {
                ErrorKind::WouldBlock | ErrorKind::Interrupted => std::thread::yield_now(),
                _ if e.raw_os_error() == Some(libc::ENOBUFS) => std::thread::yield_now(),
                _ => return Err(e),
            }
        }
        Ok(())
    }

    /// Header length, destination and UDP source port of a RoCEv2 IP packet.
    fn addresses(ip_packet: &[u8]) -> std::io::Result<(usize, IpAddr, u16)> {
        let (hl, dst): (usize, IpAddr) = match ip_packet.first() {
            Some(0x45) if ip_packet.len() >= 28 => (
                20,
                IpAddr::V4(Ipv4Addr::new(
                    ip_packet[16],
                    ip_packet[17],
                    ip_packet[18],
                    ip_packet[19],
                )),
            ),
            Some(b) if b >> 4 == 6 && ip_packet.len() >= 48 => {
                let d: [u8; 16] = ip_packet[24..40].try_into().expect("16 bytes");
                (40, IpAddr::V6(std::net::Ipv6Addr::from(d)))
            }
            _ => {
                return Err(std::io::Error::new(
                    ErrorKind::InvalidInput,
                    "not a RoCEv2 IP packet",
                ));
            }
        };
        let src_port = u16::from_be_bytes([ip_packet[hl], ip_packet[hl + 1]]);
        Ok((hl, dst, src_port))
    }

    /// With `--pcap`: write a received datagram with its IP and UDP headers rebuilt.
    fn capture_received(&mut self, src: SocketAddr, datagram: &[u8]) {
        if let Some(c) = self.capture.as_mut() {
            let p = reconstruct(src.ip(), src.port(), self.local, self.rx_port, datagram);
            c.write(&p, Some(RECONSTRUCTED));
        }
    }

    /// A received packet with the ECN bits of its IP header: (source IP, destination IP, ECN,
    /// the InfiniBand part BTH..ICRC).
    pub fn recv_ecn<'a>(&mut self, buf: &'a mut [u8]) -> Option<(IpAddr, IpAddr, u8, &'a [u8])> {
        use nix::sys::socket::{ControlMessageOwned, MsgFlags, SockaddrStorage, recvmsg};
        let dst = SocketAddr::new(self.local, self.rx_port);
        let (n, src, tos) = loop {
            let mut iov = [std::io::IoSliceMut::new(buf)];
            let m = recvmsg::<SockaddrStorage>(
                self.rx.as_raw_fd(),
                &mut iov,
                Some(&mut self.cmsg),
                MsgFlags::MSG_DONTWAIT,
            )
            .ok()?;
            let mut tos = 0u8;
            for c in m.cmsgs().ok()? {
                match c {
                    ControlMessageOwned::Ipv4Tos(t) => tos = t,
                    ControlMessageOwned::Ipv6TClass(t) => tos = t as u8,
                    _ => {}
                }
            }
            let src = m.address.and_then(|a: SockaddrStorage| {
                a.as_sockaddr_in()
                    .map(|s| SocketAddr::from(std::net::SocketAddrV4::from(*s)))
                    .or(a
                        .as_sockaddr_in6()
                        .map(|s| SocketAddr::from(std::net::SocketAddrV6::from(*s))))
            })?;
            let n = m.bytes;
            self.capture_received(src, &buf[..n]);
            // a packet with a bad ICRC is discarded, as a RoCE NIC does
            if self.icrc.ok(src, dst, &buf[..n]) {
                break (n, src, tos);
            }
            self.icrc_drops += 1;
        };
        Some((src.ip(), self.local, tos & 3, &buf[..n]))
    }

    /// A received packet: (source IP, destination IP, the InfiniBand part BTH..ICRC).
    pub fn recv<'a>(&mut self, buf: &'a mut [u8]) -> Option<(IpAddr, IpAddr, &'a [u8])> {
        match self.rx.recv_from(buf) {
            Ok((n, src)) => {
                self.capture_received(src, &buf[..n]);
                Some((src.ip(), self.local, &buf[..n]))
            }
            Err(_) => None,
        }
    }
}

/// A GVCP client: commands to a camera with retries, as a host SDK sends them.
#[derive(Debug)]
pub struct GvcpClient {
    sock: UdpSocket,
    camera: SocketAddrV4,
    req: u16,
    heartbeat_req: u16,
    control_lost: bool,
}

/// A GVCP failure.
#[derive(Debug)]
pub enum GvcpError {
    /// No answer after the retries.
    Timeout,
    /// The camera answered with an error status.
    Status(u16),
    /// Socket error.
    Io(std::io::Error),
}

impl std::fmt::Display for GvcpError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            GvcpError::Timeout => f.write_str("no GVCP answer from the camera"),
            GvcpError::Status(s) => write!(f, "camera answered GVCP status {s:#06x}"),
            GvcpError::Io(e) => write!(f, "GVCP socket: {e}"),
        }
    }
}

impl std::error::Error for GvcpError {}

impl GvcpClient {
    /// A client bound to `local` talking to `camera`.
    pub fn new(local: Ipv4Addr, camera: SocketAddrV4) -> std::io::Result<Self> {
        let sock = UdpSocket::bind(SocketAddrV4::new(local, 0))?;
        sock.set_read_timeout(Some(Duration::from_millis(200)))?;
        Ok(GvcpClient {
            sock,
            camera,
            req: 0,
            heartbeat_req: 0,
            control_lost: false,
        })
    }

    /// Whether a heartbeat's answer said this host no longer controls the camera (CCP reads
    /// without the control bits: the camera rebooted, or took the heartbeat for expired).
    pub fn control_lost(&self) -> bool {
        self.control_lost
    }

    fn next_req(&mut self) -> u16 {
        self.req = self.req.wrapping_add(1).max(1);
        self.req
    }

    /// Send a command and wait for its acknowledge (5 tries); returns the ack payload.
    pub fn command(&mut self, command: u16, payload: &[u8]) -> Result<Vec<u8>, GvcpError> {
        let id = self.next_req();
        let mut c = vec![0x42, 0x01];
        c.extend_from_slice(&command.to_be_bytes());
        c.extend_from_slice(&(payload.len() as u16).to_be_bytes());
        c.extend_from_slice(&id.to_be_bytes());
        c.extend_from_slice(payload);
        let mut buf = [0u8; 1024];
        for _ in 0..5 {
            self.sock.send_to(&c, self.camera).map_err(GvcpError::Io)?;
            let t0 = StdInstant::now();
            while t0.elapsed() < Duration::from_millis(200) {
                let Ok((n, _)) = self.sock.recv_from(&mut buf) else {
                    break;
                };
                if n >= 8 && u16::from_be_bytes([buf[6], buf[7]]) == id {
                    let status = u16::from_be_bytes([buf[0], buf[1]]);
                    if status != 0 {
                        return Err(GvcpError::Status(status));
                    }
                    return Ok(buf[8..n].to_vec());
                }
            }
        }
        Err(GvcpError::Timeout)
    }

    /// READREG.
    pub fn read(&mut self, addr: u32) -> Result<u32, GvcpError> {
        let p = self.command(0x80, &addr.to_be_bytes())?;
        Ok(u32::from_be_bytes(
            p.get(..4).ok_or(GvcpError::Timeout)?.try_into().expect("4"),
        ))
    }

    /// WRITEREG.
    pub fn write(&mut self, addr: u32, v: u32) -> Result<(), GvcpError> {
        let mut p = addr.to_be_bytes().to_vec();
        p.extend_from_slice(&v.to_be_bytes());
        self.command(0x82, &p).map(|_| ())
    }

    /// A heartbeat without waiting: READREG of CCP, answer ignored.
    pub fn heartbeat(&mut self) {
        let id = self.next_req();
        let mut c = vec![0x42, 0x01, 0x00, 0x80, 0x00, 0x04];
        c.extend_from_slice(&id.to_be_bytes());
        c.extend_from_slice(&0x0a00u32.to_be_bytes());
        let _ = self.sock.send_to(&c, self.camera);
        // the answers so far (the previous heartbeat's, usually): does CCP still say ours?
        let mut buf = [0u8; 64];
        let _ = self.sock.set_nonblocking(true);
        while let Ok((n, _)) = self.sock.recv_from(&mut buf) {
            let word = |at: usize| u16::from_be_bytes([buf[at], buf[at + 1]]);
            if n >= 12
                && self.heartbeat_req != 0
                && (word(0), word(2), word(6)) == (0, 0x0081, self.heartbeat_req)
                && buf[11] & 0x3 == 0
            {
                self.control_lost = true;
            }
        }
        self.heartbeat_req = id;
        let _ = self.sock.set_nonblocking(false);
    }
}

/// The IP and UDP headers a received datagram most likely had (IPv4: identification 0 and DF,
/// as RoCEv2 senders that follow the project's rule send; TTL/hop limit 64; checksum 0).
fn reconstruct(src: IpAddr, sport: u16, dst: IpAddr, dport: u16, payload: &[u8]) -> Vec<u8> {
    use rdmacam_protocol::wire::IpRepr;
    let ip = match (src, dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => IpRepr::v4(s, d),
        (s, d) => {
            let v6 = |a: IpAddr| match a {
                IpAddr::V6(a) => a,
                IpAddr::V4(a) => a.to_ipv6_mapped(),
            };
            IpRepr::v6(v6(s), v6(d))
        }
    };
    let mut p = vec![0u8; ip.buffer_len() + 8 + payload.len()];
    let hl = ip
        .emit_udp_header(&mut p, sport, dport, payload.len())
        .expect("sized for the headers");
    p[hl..].copy_from_slice(payload);
    p
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gvsp_runs_go_out_as_one_gso_send_and_arrive_as_the_same_datagrams() {
        for mut gso in [true, false] {
            let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
            rx.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
            let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
            // four full packets and a short last one, each filled with its index
            let packets: Vec<Vec<u8>> = (0..5u8)
                .map(|i| vec![i; if i == 4 { 700 } else { 1400 }])
                .collect();
            let refs: Vec<&[u8]> = packets.iter().map(Vec::as_slice).collect();
            let wanted = gso;
            send_datagrams(&tx, rx.local_addr().unwrap(), &refs, &mut gso).unwrap();
            // Linux has had UDP_SEGMENT since 4.18: the GSO path must have been taken
            assert_eq!(gso, wanted);
            let mut b = [0u8; 2048];
            for p in &packets {
                let n = rx.recv(&mut b).unwrap();
                assert_eq!(&b[..n], &p[..], "gso {gso}");
            }
        }
    }

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
        let mut b = [0u8; 8];
        assert_eq!(rx.recv(&mut b).unwrap(), 3);
    }

    #[test]
    fn the_orsp_dscp_byte_reaches_the_sending_socket() {
        let mut s = RoceSocket::bind(IpAddr::V4(std::net::Ipv4Addr::LOCALHOST), 0, 0, 0.0, 1)
            .expect("bind on loopback");
        s.set_tos(0xb8).unwrap(); // DSCP 46 (EF), ECN 0
        assert_eq!(socket2::SockRef::from(&s.tx).tos().unwrap(), 0xb8);
        // a rebind to the QP's entropy port keeps it
        s.rebind_tx(0).unwrap();
        assert_eq!(socket2::SockRef::from(&s.tx).tos().unwrap(), 0xb8);
    }
}
