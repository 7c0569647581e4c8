//! RoCEv2 over plain UDP sockets (no privilege): the camera's and the soft host's endpoint.
//!
//! RoCEv2 rule: the ICRC covers the IPv4 identification, so packets go out of an *unconnected*
//! UDP socket with `IP_MTU_DISCOVER = IP_PMTUDISC_DO`, for which Linux sends identification 0
//! (measured in the rxe lab), or through UDP GSO, which numbers a send's segments 0, 1, 2, ...
//! Received packets arrive without their IP header: their ICRC is checked against the header
//! they must have had ([`IcrcCheck`]).

use std::io::ErrorKind;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, UdpSocket};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};
use std::time::Instant as StdInstant;

use rand::{Rng, SeedableRng};

use crate::capture::{Capture, RECONSTRUCTED, reconstruct};
use crate::gso::{
    GSO_MAX_SEGMENTS, Gather, TX_BATCH, gso_segments, sendmmsg_to, sendmsg_segmented,
};
use crate::icrc::IcrcCheck;
use crate::sockopt::{bind, no_check6_rx, pmtudisc_do, set_int};

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
    icrc: IcrcCheck,
    /// Packets dropped on purpose (`--loss`).
    pub dropped: u64,
    /// Received packets discarded for a bad ICRC.
    pub icrc_drops: u64,
    /// Received datagrams larger than [`RECV_SLOT`], skipped by [`RoceSocket::recv_batch`].
    pub oversized: u64,
    /// CLOCK_REALTIME minus CLOCK_MONOTONIC, ns: turns the kernel's receive timestamps into
    /// the monotonic clock every process's logs use.
    realtime_offset: u64,
}

/// Receive buffers one [`RoceSocket::recv_batch`] fills at most (each one datagram, or with
/// UDP GRO several segments of one).
pub const RECV_BATCH: usize = 32;
/// Bytes of a receive slot: a RoCEv2 packet at PMTU 4096 with every header fits.
pub const RECV_SLOT: usize = 4224;
/// Bytes of a receive slot with UDP GRO: the kernel hands over up to 64 KiB of equal-size
/// segments at once.
pub const GRO_SLOT: usize = 65536;
/// `UDP_GRO` (linux/udp.h), which the libc crate does not name for glibc.
const UDP_GRO: libc::c_int = 104;

/// One received datagram: where it lies in the batch's buffer, and what came with it.
#[derive(Debug, Clone, Copy)]
struct Seg {
    at: usize,
    len: usize,
    src: IpAddr,
    ecn: u8,
    arrived: u64,
}

/// Receive buffers for [`RoceSocket::recv_batch`], kept between calls so receiving allocates
/// nothing.
pub struct RecvBatch {
    buf: Vec<u8>,
    slot: usize,
    segs: Vec<Seg>,
}

impl Default for RecvBatch {
    fn default() -> Self {
        Self::with_slot(RECV_SLOT)
    }
}

impl RecvBatch {
    /// Buffers for a socket with UDP GRO on ([`RoceSocket::set_gro`]).
    pub fn for_gro() -> Self {
        Self::with_slot(GRO_SLOT)
    }

    fn with_slot(slot: usize) -> Self {
        RecvBatch {
            // in place now: the first receives to fill a GRO batch (2 MiB) would fault its pages
            // in mid-stream
            buf: crate::mem::resident_zeroed(slot * RECV_BATCH),
            slot,
            segs: Vec::with_capacity(RECV_BATCH * 64),
        }
    }

    /// The datagrams of the last receive: (source IP, the InfiniBand part BTH..ICRC).
    pub fn datagrams(&self) -> impl Iterator<Item = (IpAddr, &[u8])> {
        self.segs
            .iter()
            .map(|g| (g.src, &self.buf[g.at..g.at + g.len]))
    }

    /// When the kernel received datagram `i` of the last receive (CLOCK_MONOTONIC ns, 0 when
    /// unknown): the part of a packet's latency spent queued in the socket ends here.
    pub fn arrived(&self, i: usize) -> u64 {
        self.segs.get(i).map_or(0, |g| g.arrived)
    }

    /// The datagrams of the last receive with the ECN bits of their IP header: (source IP,
    /// ECN, the InfiniBand part BTH..ICRC).
    pub fn datagrams_ecn(&self) -> impl Iterator<Item = (IpAddr, u8, &[u8])> {
        self.segs
            .iter()
            .map(|g| (g.src, g.ecn, &self.buf[g.at..g.at + g.len]))
    }
}

/// Control-message space for one received message: its TOS / traffic class, receive time and
/// GRO segment size.
#[derive(Clone, Copy)]
#[repr(C, align(8))]
struct Cmsg([u8; 64]);

/// What a received message's control data carries.
#[derive(Debug, Default)]
struct Control {
    /// The IPv4 TOS or IPv6 traffic class (0 without).
    tos: u8,
    /// The kernel's receive time (CLOCK_REALTIME ns, `SO_TIMESTAMPNS`).
    realtime: Option<u64>,
    /// With UDP GRO: the size of the segments the message holds (0: one datagram).
    gro: usize,
}

/// The control data of a received message.
///
/// # Safety
/// `h.msg_control` points at `h.msg_controllen` bytes the kernel filled in.
unsafe fn control_of(h: &libc::msghdr) -> Control {
    let mut out = Control::default();
    // SAFETY: the caller's promise; CMSG_FIRSTHDR/NXTHDR stay within msg_controllen.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(h);
        while !c.is_null() {
            let (level, kind) = ((*c).cmsg_level, (*c).cmsg_type);
            let data = libc::CMSG_DATA(c);
            if level == libc::IPPROTO_IP && kind == libc::IP_TOS {
                out.tos = *data;
            } else if level == libc::IPPROTO_IPV6 && kind == libc::IPV6_TCLASS {
                out.tos = std::ptr::read_unaligned(data.cast::<libc::c_int>()) as u8;
            } else if level == libc::SOL_SOCKET && kind == libc::SCM_TIMESTAMPNS {
                let t: libc::timespec = std::ptr::read_unaligned(data.cast());
                out.realtime = Some(t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64);
            } else if level == libc::IPPROTO_UDP && kind == UDP_GRO {
                out.gro = std::ptr::read_unaligned(data.cast::<libc::c_int>()).max(0) as usize;
            }
            c = libc::CMSG_NXTHDR(h, c);
        }
    }
    out
}

/// The address in a `sockaddr_storage` the kernel filled in (IPv4 or IPv6).
fn sockaddr(s: &libc::sockaddr_storage) -> Option<SocketAddr> {
    match i32::from(s.ss_family) {
        libc::AF_INET => {
            // SAFETY: the family says the storage holds a sockaddr_in.
            let a: &libc::sockaddr_in = unsafe { &*(s as *const libc::sockaddr_storage).cast() };
            Some(SocketAddr::from((
                Ipv4Addr::from(u32::from_be(a.sin_addr.s_addr)),
                u16::from_be(a.sin_port),
            )))
        }
        libc::AF_INET6 => {
            // SAFETY: the family says the storage holds a sockaddr_in6.
            let a: &libc::sockaddr_in6 = unsafe { &*(s as *const libc::sockaddr_storage).cast() };
            Some(SocketAddr::from((
                std::net::Ipv6Addr::from(a.sin6_addr.s6_addr),
                u16::from_be(a.sin6_port),
            )))
        }
        _ => None,
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

/// The receiving socket, for [`wait_readable`](crate::poll::wait_readable).
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
        // when each datagram arrived, for latency logs
        set_int(&rx, libc::SOL_SOCKET, libc::SO_TIMESTAMPNS, 1)?;
        rx.set_nonblocking(true)?;
        let tx_port = tx.local_addr()?.port();
        // the port bound, when the caller asked for any (0): received packets' ICRCs and the
        // capture's rebuilt headers name it
        let rx_port = rx.local_addr()?.port();
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
            icrc: IcrcCheck::default(),
            dropped: 0,
            icrc_drops: 0,
            oversized: 0,
            realtime_offset: crate::clock::realtime_ns()
                .saturating_sub(crate::clock::monotonic_ns()),
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

    /// The receiving socket's buffer, bytes of kernel memory: what arrives while nobody reads
    /// waits here, and what does not fit is dropped (UDP RcvbufErrors).
    pub fn recv_buffer(&self) -> usize {
        crate::sockopt::recv_buffer(&self.rx)
    }

    /// Ask for a receive buffer of `bytes` instead of the 16 MiB [`bind`](Self::bind) asks for
    /// (capped at twice `net.core.rmem_max` for an unprivileged process, as always).
    pub fn set_recv_buffer(&mut self, bytes: usize) -> std::io::Result<()> {
        set_int(
            &self.rx,
            libc::SOL_SOCKET,
            libc::SO_RCVBUF,
            libc::c_int::try_from(bytes).unwrap_or(libc::c_int::MAX),
        )
    }

    /// How many datagrams of `len` bytes the receiving socket holds unread before the kernel
    /// drops the next one, at most `limit`. Measured, not estimated: what a datagram costs the
    /// buffer (its bytes plus the kernel's overhead, 8,519 bytes for 4,140 on loopback) depends
    /// on the kernel, so a scratch socket with the same buffer is filled on the same address
    /// and counted. A host whose count is below the camera's window says so in HOST_RX_WINDOW.
    pub fn unread_capacity(&self, len: usize, limit: usize) -> std::io::Result<usize> {
        unread_capacity(self.local, self.recv_buffer(), len, limit)
    }

    /// The local address the socket is bound to (the destination of what it receives).
    pub fn local(&self) -> IpAddr {
        self.local
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
        self.send_batched(packets, true, &mut |_| {})
    }

    /// [`Self::send_many`], telling `lost` each packet `--loss` kept off the wire (the camera
    /// then knows an ACK past it acknowledges what the host never received).
    pub fn send_many_reporting<'a>(
        &mut self,
        packets: impl IntoIterator<Item = &'a [u8]>,
        lost: &mut dyn FnMut(&[u8]),
    ) -> std::io::Result<()> {
        self.send_batched(packets, true, lost)
    }

    /// [`send_many`](Self::send_many), dropping on purpose only if `lossy` (not for packets
    /// whose sender already asked [`lose`](Self::lose)).
    fn send_batched<'a>(
        &mut self,
        packets: impl IntoIterator<Item = &'a [u8]>,
        lossy: bool,
        lost: &mut dyn FnMut(&[u8]),
    ) -> std::io::Result<()> {
        let mut batch: [(&[u8], Option<SocketAddr>); TX_BATCH] = [(&[], None); TX_BATCH];
        let mut n = 0;
        for ip_packet in packets {
            let (hl, dst, src_port) = Self::addresses(ip_packet)?;
            if src_port != self.tx_port || n == TX_BATCH {
                sendmmsg_to(self.tx.as_fd(), &batch[..n])?;
                n = 0;
                if src_port != self.tx_port {
                    self.rebind_tx(src_port)?;
                }
            }
            if let Some(c) = self.capture.as_mut() {
                c.write(ip_packet, None);
            }
            if lossy && self.lose() {
                lost(ip_packet);
                continue;
            }
            let port = u16::from_be_bytes([ip_packet[hl + 2], ip_packet[hl + 3]]);
            batch[n] = (&ip_packet[hl + 8..], Some(SocketAddr::new(dst, port)));
            n += 1;
        }
        sendmmsg_to(self.tx.as_fd(), &batch[..n])
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
            return self.send_batched(whole.iter().map(Vec::as_slice), false, &mut |_| {});
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
                // no UDP GSO here; or segments longer than the route carries, which some
                // kernels also answer EINVAL (6.18 says EMSGSIZE): one datagram per packet
                // tells which, and only the first turns GSO off
                let whole: Vec<Vec<u8>> = segs.iter().map(Gather::whole).collect();
                let r = self.send_batched(whole.iter().map(Vec::as_slice), false, &mut |_| {});
                if !matches!(&r, Err(e) if e.raw_os_error() == Some(libc::EMSGSIZE)) {
                    // from now on one datagram per packet
                    self.gso_ok = false;
                }
                r
            }
            r => r,
        }
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

    /// Receive up to [`RECV_BATCH`] datagrams in one `recvmmsg(2)`, without waiting; returns
    /// how many the kernel handed over (0 when none was queued; [`RECV_BATCH`] when more may
    /// wait). A datagram larger than [`RECV_SLOT`] bytes (no RoCEv2 packet is: PMTU 4096 plus
    /// headers) is counted in `oversized` and skipped. Each datagram's ECN bits come with it.
    pub fn recv_batch(&mut self, batch: &mut RecvBatch) -> usize {
        self.recv_batch_inner(batch, false)
    }

    /// [`recv_batch`](Self::recv_batch) with the ICRC of each datagram checked against the IP
    /// and UDP headers it must have had ([`IcrcCheck`]): a bad one is discarded and counted in
    /// `icrc_drops`, as a RoCE NIC does.
    pub fn recv_checked_batch(&mut self, batch: &mut RecvBatch) -> usize {
        self.recv_batch_inner(batch, true)
    }

    fn recv_batch_inner(&mut self, batch: &mut RecvBatch, check: bool) -> usize {
        batch.segs.clear();
        let slot = batch.slot;
        // SAFETY: an all-zero sockaddr_storage is a valid (unspecified) address.
        let mut names: [libc::sockaddr_storage; RECV_BATCH] = unsafe { std::mem::zeroed() };
        let base = batch.buf.as_mut_ptr();
        let mut iov: [libc::iovec; RECV_BATCH] = core::array::from_fn(|i| libc::iovec {
            // SAFETY: slot i lies within `buf`, which holds RECV_BATCH slots.
            iov_base: unsafe { base.add(i * slot) }.cast(),
            iov_len: slot,
        });
        let mut control = [Cmsg([0; 64]); RECV_BATCH];
        // SAFETY: all-zero mmsghdrs are valid "no name, no data" headers; every pointer set
        // below refers to `names`, `iov`, `control` and the batch's buffer, alive for the call.
        let mut msgs: [libc::mmsghdr; RECV_BATCH] = unsafe { std::mem::zeroed() };
        for (i, m) in msgs.iter_mut().enumerate() {
            m.msg_hdr.msg_name = (&mut names[i] as *mut libc::sockaddr_storage).cast();
            m.msg_hdr.msg_namelen = std::mem::size_of::<libc::sockaddr_storage>() as u32;
            m.msg_hdr.msg_iov = &mut iov[i];
            m.msg_hdr.msg_iovlen = 1;
            m.msg_hdr.msg_control = control[i].0.as_mut_ptr().cast();
            m.msg_hdr.msg_controllen = control[i].0.len();
        }
        // SAFETY: `msgs` holds RECV_BATCH initialised headers as described above.
        let r = unsafe {
            libc::recvmmsg(
                self.rx.as_raw_fd(),
                msgs.as_mut_ptr(),
                RECV_BATCH as libc::c_uint,
                libc::MSG_DONTWAIT,
                std::ptr::null_mut(),
            )
        };
        if r <= 0 {
            return 0;
        }
        let dst = SocketAddr::new(self.local, self.rx_port);
        for (i, m) in msgs[..r as usize].iter().enumerate() {
            let Some(src) = sockaddr(&names[i]) else {
                continue;
            };
            if m.msg_hdr.msg_flags & libc::MSG_TRUNC != 0 {
                self.oversized += 1;
                continue;
            }
            // SAFETY: the kernel wrote msg_controllen bytes of control messages into
            // `control[i]`, which the header still points at.
            let c = unsafe { control_of(&m.msg_hdr) };
            let (len, start) = (m.msg_len as usize, i * slot);
            // with GRO, equal segments of `gro` bytes (the last may be shorter)
            let seg = if c.gro > 0 { c.gro } else { len.max(1) };
            let mut at = 0;
            while at < len {
                let n = seg.min(len - at);
                let bytes = &batch.buf[start + at..start + at + n];
                if let Some(cap) = self.capture.as_mut() {
                    let p = reconstruct(src.ip(), src.port(), self.local, self.rx_port, bytes);
                    cap.write(&p, Some(RECONSTRUCTED));
                }
                if check && !self.icrc.ok(src, dst, bytes) {
                    self.icrc_drops += 1;
                } else {
                    batch.segs.push(Seg {
                        at: start + at,
                        len: n,
                        src: src.ip(),
                        ecn: c.tos & 3,
                        arrived: c
                            .realtime
                            .map_or(0, |t| t.saturating_sub(self.realtime_offset)),
                    });
                }
                at += n;
            }
        }
        r as usize
    }

    /// Let the kernel hand over runs of equal-size datagrams from one sender at once (UDP GRO):
    /// one receive and one copy per run instead of per packet. The batch must come from
    /// [`RecvBatch::for_gro`].
    pub fn set_gro(&mut self, on: bool) -> std::io::Result<()> {
        set_int(&self.rx, libc::IPPROTO_UDP, UDP_GRO, libc::c_int::from(on))
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

/// What the kernel charges a receive buffer for a datagram of `len` bytes, estimated from
/// above: its data rounded up to a power of two with room for headers and the kernel's shared
/// info, plus the socket buffer's own struct (measured on loopback: 8,519 bytes for 4,140,
/// 2,315 for 1,372; this gives 8,704 and 2,560). For when [`unread_capacity`] cannot measure.
pub fn datagram_charge(len: usize) -> usize {
    (len + 512).next_power_of_two() + 512
}

/// [`RoceSocket::unread_capacity`] for a socket on `local` whose buffer reads `buffer` bytes
/// (`SO_RCVBUF`, twice what was granted). 0 when nothing sent to `local` came back: in a
/// network namespace whose `lo` is down, a host's own address does not deliver to itself
/// (the caller then estimates, with [`datagram_charge`]).
pub fn unread_capacity(
    local: IpAddr,
    buffer: usize,
    len: usize,
    limit: usize,
) -> std::io::Result<usize> {
    let at = SocketAddr::new(local, 0);
    let sink = UdpSocket::bind(at)?;
    // the kernel doubles what it is asked for; asking half gives the same buffer, also where
    // SO_RCVBUFFORCE gave it (set_int's plain SO_RCVBUF would be capped)
    let half = libc::c_int::try_from(buffer / 2).unwrap_or(libc::c_int::MAX);
    if set_int(&sink, libc::SOL_SOCKET, libc::SO_RCVBUFFORCE, half).is_err() {
        set_int(&sink, libc::SOL_SOCKET, libc::SO_RCVBUF, half)?;
    }
    sink.set_nonblocking(true)?;
    let source = UdpSocket::bind(at)?;
    source.connect(sink.local_addr()?)?;
    let datagram = vec![0u8; len];
    // loopback delivers within the send: a datagram the buffer cannot take is dropped there
    for _ in 0..limit {
        source.send(&datagram)?;
    }
    let mut buf = vec![0u8; len + 1];
    let mut held = 0;
    while held < limit {
        match sink.recv(&mut buf) {
            Ok(_) => held += 1,
            Err(e) if e.kind() == ErrorKind::WouldBlock => break,
            Err(e) => return Err(e),
        }
    }
    Ok(held)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The kernel's own count of what a buffer holds, against the estimate a host falls back
    /// to: the estimate never promises more (a window it gives cannot overflow the buffer).
    #[test]
    fn the_estimated_charge_never_promises_more_than_the_kernel_holds() {
        let lo = IpAddr::V4(Ipv4Addr::LOCALHOST);
        for asked in [212_992, 1 << 19] {
            // what a socket gets (an unprivileged one: at most twice net.core.rmem_max)
            let s = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
            set_int(&s, libc::SOL_SOCKET, libc::SO_RCVBUF, asked).unwrap();
            let buffer = crate::sockopt::recv_buffer(&s);
            for len in [300, 1_100, 1_436, 2_112, 4_160] {
                let held = unread_capacity(lo, buffer, len, 4096).unwrap();
                let estimate = buffer / datagram_charge(len);
                assert!(
                    estimate > 0 && estimate <= held,
                    "{len}-byte datagrams in {buffer} bytes: the kernel held {held}, \
                     estimated {estimate}"
                );
            }
        }
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

    #[test]
    fn a_batch_receive_takes_every_queued_datagram_and_skips_an_oversized_one() {
        let mut s = RoceSocket::bind(IpAddr::V4(Ipv4Addr::LOCALHOST), 0, 0, 0.0, 1).unwrap();
        let to = s.rx.local_addr().unwrap();
        assert_eq!(s.rx_port, to.port());
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        let mut b = RecvBatch::default();
        assert_eq!(s.recv_batch(&mut b), 0, "nothing queued, no wait");
        for i in 0..5u8 {
            tx.send_to(&[i; 20], to).unwrap();
        }
        tx.send_to(&vec![9u8; RECV_SLOT + 1], to).unwrap();
        tx.send_to(&[7u8; 1100], to).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(20));
        assert_eq!(s.recv_batch(&mut b), 7);
        let got: Vec<(IpAddr, Vec<u8>)> = b.datagrams().map(|(a, d)| (a, d.to_vec())).collect();
        assert_eq!(got.len(), 6);
        for (i, (src, d)) in got.iter().take(5).enumerate() {
            assert_eq!(*src, IpAddr::V4(Ipv4Addr::LOCALHOST));
            assert_eq!(d, &vec![i as u8; 20]);
        }
        assert_eq!(got[5].1, vec![7u8; 1100]);
        assert_eq!(s.oversized, 1);
    }

    #[test]
    fn a_checked_batch_keeps_good_icrcs_drops_bad_ones_and_reads_the_ecn_bits() {
        use rdmacam_protocol::rc::WorkRequest;
        use rdmacam_protocol::rc::{Instant, Path, PayloadRef, Requester, RequesterConfig};
        let lo = IpAddr::V4(Ipv4Addr::LOCALHOST);
        let mut rx = RoceSocket::bind(lo, 0, 0, 0.0, 1).unwrap();
        let mut tx = RoceSocket::bind(lo, 0, 0, 0.0, 1).unwrap();
        let mut path = Path::new(lo, lo);
        path.src_port = tx.tx_port();
        path.dst_port = rx.rx.local_addr().unwrap().port();
        let mut rq: Requester<4, 4> = Requester::new(RequesterConfig::new(0x22, 0x11, 7, path));
        let wr = |id| WorkRequest::send(id, PayloadRef::new(0, 0), 64);
        let data = [vec![0xabu8; 64]];
        let mut packets = Vec::new();
        for id in 0..2 {
            rq.post(wr(id)).unwrap();
            let p = rq.poll_transmit(Instant::ZERO, &data[..]).unwrap();
            let mut b = vec![0u8; p.len()];
            p.copy_to(&data[..], &mut b).unwrap();
            packets.push(b);
        }
        packets[1][60] ^= 1; // a payload byte: the ICRC no longer covers it
        tx.set_tos(0x03).unwrap(); // Congestion Experienced, as a switch marks it
        tx.send(&packets[0]).unwrap();
        tx.send(&packets[1]).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(20));
        let mut b = RecvBatch::default();
        assert_eq!(rx.recv_checked_batch(&mut b), 2);
        let got: Vec<(IpAddr, u8, Vec<u8>)> = b
            .datagrams_ecn()
            .map(|(a, e, d)| (a, e, d.to_vec()))
            .collect();
        assert_eq!(got.len(), 1, "the damaged packet is dropped");
        assert_eq!(got[0].0, lo);
        assert_eq!(got[0].1, 3, "ECN CE");
        assert_eq!(got[0].2, packets[0][28..].to_vec());
        assert_eq!(rx.icrc_drops, 1);
        let (arrived, now) = (b.arrived(0), crate::clock::monotonic_ns());
        assert!(
            arrived > 0 && arrived <= now && now - arrived < 1_000_000_000,
            "{arrived} {now}"
        );
    }

    /// A kernel that refuses UDP GSO with EINVAL (here: checksums turned off on the sending
    /// socket, which GSO needs) still gets every packet, one datagram each, and the socket
    /// stops asking for GSO.
    #[test]
    fn where_the_kernel_refuses_udp_gso_every_packet_leaves_alone_and_gso_turns_off() {
        let lo = IpAddr::V4(Ipv4Addr::LOCALHOST);
        let mut rx = RoceSocket::bind(lo, 0, 0, 0.0, 1).unwrap();
        let to = rx.rx.local_addr().unwrap();
        let mut tx = RoceSocket::bind(lo, 0, 0, 0.0, 1).unwrap();
        set_int(&tx.tx, libc::SOL_SOCKET, libc::SO_NO_CHECK, 1).unwrap();
        // IPv4 to 127.0.0.1 and UDP from the socket's port; the rest of the header is opaque here
        let mut header = vec![0u8; 28 + 12];
        header[0] = 0x45;
        header[16..20].copy_from_slice(&[127, 0, 0, 1]);
        header[20..22].copy_from_slice(&tx.tx_port().to_be_bytes());
        header[22..24].copy_from_slice(&to.port().to_be_bytes());
        header[28..].copy_from_slice(&[0x0a; 12]);
        let payloads: Vec<Vec<u8>> = (0..4u8).map(|i| vec![i; 1024]).collect();
        let trailer = [0xee; 4];
        let segs: Vec<Gather<'_>> = payloads
            .iter()
            .map(|p| Gather {
                header: &header,
                payload: p,
                trailer: &trailer,
            })
            .collect();
        assert!(tx.gso());
        tx.send_gso(&segs).unwrap();
        assert!(!tx.gso(), "GSO off after EINVAL");
        tx.send_gso(&segs[..1]).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(20));
        let mut b = RecvBatch::default();
        assert_eq!(rx.recv_batch(&mut b), 5);
        let got: Vec<Vec<u8>> = b.datagrams().map(|(_, d)| d.to_vec()).collect();
        let want: Vec<Vec<u8>> = [&payloads[..], &payloads[..1]]
            .concat()
            .iter()
            .map(|p| [&header[28..], &p[..], &trailer[..]].concat())
            .collect();
        assert_eq!(got, want, "each packet its own datagram, in order");
    }

    #[test]
    fn with_gro_a_gso_run_arrives_whole_and_is_cut_back_into_its_datagrams() {
        let lo = IpAddr::V4(Ipv4Addr::LOCALHOST);
        let mut rx = RoceSocket::bind(lo, 0, 0, 0.0, 1).unwrap();
        rx.set_gro(true).unwrap();
        let to = rx.rx.local_addr().unwrap();
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        // five full datagrams and a short last one, each filled with its index, in one send
        let packets: Vec<Vec<u8>> = (0..6u8)
            .map(|i| vec![i; if i == 5 { 700 } else { 4112 }])
            .collect();
        let refs: Vec<&[u8]> = packets.iter().map(Vec::as_slice).collect();
        let mut gso = true;
        crate::gso::send_datagrams(&tx, to, &refs, &mut gso).unwrap();
        assert!(gso, "UDP GSO taken");
        std::thread::sleep(std::time::Duration::from_millis(20));
        let mut b = RecvBatch::for_gro();
        let got = rx.recv_batch(&mut b);
        assert!((1..=6).contains(&got), "{got} receive buffers");
        let out: Vec<Vec<u8>> = b.datagrams().map(|(_, d)| d.to_vec()).collect();
        assert_eq!(out, packets, "the same datagrams, in order");
    }
}
