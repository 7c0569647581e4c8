//! The camera task: UDP sockets on embassy-net, datagrams in and out of the [`Camera`].
//!
//! GVCP on 3956 (discovery broadcasts included), RoCEv2 on 4791 both ways, GVSP from
//! [`GVSP_PORT`], events (the message channel) from [`MESSAGE_PORT`]. Receiving never blocks the sender: each round takes what has arrived, runs the
//! timers, sends what is due, and sleeps only when nothing happened, until a datagram arrives
//! or the camera's next deadline.

use core::fmt::Write as _;
use core::net::{IpAddr, Ipv4Addr, SocketAddr, SocketAddrV4};
use core::task::{Context, Poll, Waker};

use embassy_futures::select::select4;
use embassy_net::udp::{PacketMetadata, UdpSocket};
use embassy_net::{IpAddress, IpEndpoint, Stack};
use embassy_time::Timer;
use rdmacam_protocol::camera::Tx;
use rdmacam_protocol::device::frame::FrameSource;
use rdmacam_protocol::rc::Instant;
use rdmacam_protocol::rc::offload::TxDescriptor;

use crate::camera::{self, FwCamera, ROCE_PORT};

/// GigE Vision control port.
pub const GVCP_PORT: u16 = 3956;
/// UDP port GVSP leaves from (the device reports it in SCSP).
pub const GVSP_PORT: u16 = 20202;
/// UDP port events leave from and their acknowledges come back to (the device reports it in
/// MCSP).
pub const MESSAGE_PORT: u16 = 20203;

/// Socket buffers of the camera task; a board keeps them in a `static`.
pub struct Buffers {
    gvcp_rx_meta: [PacketMetadata; 8],
    gvcp_tx_meta: [PacketMetadata; 8],
    gvcp_rx: [u8; 4096],
    gvcp_tx: [u8; 4096],
    roce_rx_meta: [PacketMetadata; 64],
    roce_tx_meta: [PacketMetadata; 64],
    roce_rx: [u8; 32 * 1024],
    roce_tx: [u8; 64 * 1024],
    gvsp_rx_meta: [PacketMetadata; 1],
    gvsp_tx_meta: [PacketMetadata; 64],
    gvsp_rx: [u8; 64],
    gvsp_tx: [u8; 64 * 1024],
    msg_rx_meta: [PacketMetadata; 4],
    msg_tx_meta: [PacketMetadata; 4],
    msg_rx: [u8; 256],
    msg_tx: [u8; 512],
    datagram: [u8; 9216],
    out: [u8; 9216],
}

impl Buffers {
    /// Zeroed buffers.
    pub const fn new() -> Self {
        Buffers {
            gvcp_rx_meta: [PacketMetadata::EMPTY; 8],
            gvcp_tx_meta: [PacketMetadata::EMPTY; 8],
            gvcp_rx: [0; 4096],
            gvcp_tx: [0; 4096],
            roce_rx_meta: [PacketMetadata::EMPTY; 64],
            roce_tx_meta: [PacketMetadata::EMPTY; 64],
            roce_rx: [0; 32 * 1024],
            roce_tx: [0; 64 * 1024],
            gvsp_rx_meta: [PacketMetadata::EMPTY; 1],
            gvsp_tx_meta: [PacketMetadata::EMPTY; 64],
            gvsp_rx: [0; 64],
            gvsp_tx: [0; 64 * 1024],
            msg_rx_meta: [PacketMetadata::EMPTY; 4],
            msg_tx_meta: [PacketMetadata::EMPTY; 4],
            msg_rx: [0; 256],
            msg_tx: [0; 512],
            datagram: [0; 9216],
            out: [0; 9216],
        }
    }
}

impl Default for Buffers {
    fn default() -> Self {
        Self::new()
    }
}

fn now() -> Instant {
    Instant::from_nanos(embassy_time::Instant::now().as_micros() * 1000)
}

fn v4(a: IpAddress) -> Option<Ipv4Addr> {
    #[allow(unreachable_patterns)]
    match a {
        IpAddress::Ipv4(v) => Some(v),
        _ => None,
    }
}

/// The camera's IPv4 address: a static one at once, else a DHCP lease, else (after
/// `dhcp_wait_s` seconds without one) the link-local 169.254.x.y/16 that GigE Vision devices
/// fall back to, derived from the last two bytes of `mac`.
pub async fn address(stack: Stack<'_>, mac: [u8; 6], dhcp_wait_s: u64) -> Ipv4Addr {
    let mut waited = 0;
    loop {
        if let Some(c) = stack.config_v4() {
            return c.address.address();
        }
        if waited == dhcp_wait_s * 10 {
            crate::info("no DHCP lease: falling back to a link-local address");
            let lla = Ipv4Addr::new(169, 254, mac[4].max(1), mac[5].clamp(1, 254));
            stack.set_config_v4(embassy_net::ConfigV4::Static(embassy_net::StaticConfigV4 {
                address: embassy_net::Ipv4Cidr::new(lla, 16),
                gateway: None,
                dns_servers: Default::default(),
            }));
        }
        Timer::after(embassy_time::Duration::from_millis(100)).await;
        waited += 1;
    }
}

/// A board's way to send the queue pair's packets below the IP stack: headers, payload and
/// trailer gathered by the Ethernet DMA from where they lie (the payload in frame memory),
/// with the camera's own IP header. A board without one passes [`SocketsOnly`].
#[allow(async_fn_in_trait)]
pub trait RawTx {
    /// Whether a packet could be queued now.
    fn ready(&mut self) -> bool;
    /// Wait until [`ready`](Self::ready).
    async fn wait_ready(&mut self);
    /// Queue the IPv4 packet `header ‖ payload ‖ trailer`; `false` leaves it to the socket
    /// path (a destination whose MAC is not known yet, IPv6, no room).
    fn send(&mut self, header: &[u8], payload: &[u8], trailer: &[u8]) -> bool;
    /// Hand a packet whose ICRC is still to compute (`icrc_offload`) to a data mover, as its
    /// descriptor and the payload where it lies; `false` leaves it to the software mover and
    /// the socket path. A board without a mover takes none.
    fn send_descriptor(&mut self, _d: &TxDescriptor, _payload: &[u8]) -> bool {
        false
    }
}

/// Every packet through embassy-net's sockets (the Linux TAP board).
pub struct SocketsOnly;

impl RawTx for SocketsOnly {
    fn ready(&mut self) -> bool {
        true
    }
    async fn wait_ready(&mut self) {}
    fn send(&mut self, _: &[u8], _: &[u8], _: &[u8]) -> bool {
        false
    }
}

/// Run the camera on `stack` forever, the queue pair's packets through `raw` where it takes
/// them.
pub async fn run<S: FrameSource, T: RawTx>(
    stack: Stack<'_>,
    cam: &mut FwCamera<'_, S>,
    b: &mut Buffers,
    raw: &mut T,
) -> ! {
    let local = IpAddr::V4(cam.device().ip());
    let mut gvcp = UdpSocket::new(
        stack,
        &mut b.gvcp_rx_meta,
        &mut b.gvcp_rx,
        &mut b.gvcp_tx_meta,
        &mut b.gvcp_tx,
    );
    let mut roce = UdpSocket::new(
        stack,
        &mut b.roce_rx_meta,
        &mut b.roce_rx,
        &mut b.roce_tx_meta,
        &mut b.roce_tx,
    );
    let mut gvsp = UdpSocket::new(
        stack,
        &mut b.gvsp_rx_meta,
        &mut b.gvsp_rx,
        &mut b.gvsp_tx_meta,
        &mut b.gvsp_tx,
    );
    let mut msg = UdpSocket::new(
        stack,
        &mut b.msg_rx_meta,
        &mut b.msg_rx,
        &mut b.msg_tx_meta,
        &mut b.msg_tx,
    );
    // binding a fresh socket to a free port cannot fail
    let _ = msg.bind(MESSAGE_PORT);
    let _ = gvcp.bind(GVCP_PORT);
    let _ = roce.bind(ROCE_PORT);
    let _ = gvsp.bind(GVSP_PORT);
    let (datagram, out) = (&mut b.datagram, &mut b.out);
    let mut noop = Context::from_waker(Waker::noop());
    loop {
        let mut busy = false;
        // GVCP: answer every command that has arrived
        while let Poll::Ready(Ok((n, meta))) = gvcp.poll_recv_from(datagram, &mut noop) {
            busy = true;
            let Some(ip) = v4(meta.endpoint.addr) else {
                continue;
            };
            let src = SocketAddrV4::new(ip, meta.endpoint.port);
            if let Some(reply) = cam.handle_gvcp(now(), src, &datagram[..n], out) {
                let _ = gvcp.send_to(&out[..reply.len], meta.endpoint).await;
            }
        }
        // RoCEv2 in: ACK/NAKs, the host's SENDs, CM MADs
        for _ in 0..64 {
            let Poll::Ready(Ok((n, meta))) = roce.poll_recv_from(datagram, &mut noop) else {
                break;
            };
            busy = true;
            // a UDP socket hides the IP header: ECN unknown; the ICRC is checked against the
            // headers the packet must have had, and a bad one dropped as an RDMA NIC drops it
            if let Some(ip) = v4(meta.endpoint.addr) {
                let src = SocketAddr::new(IpAddr::V4(ip), meta.endpoint.port);
                let dst = SocketAddr::new(local, ROCE_PORT);
                cam.handle_udp(now(), src, dst, &datagram[..n]);
            }
        }
        // what the host did wrong, the first of each kind (a bad ICRC, an ACK for a PSN never
        // sent, a late heartbeat ...)
        while let Some(v) = cam.device_mut().violations_mut().take_new() {
            let mut line: heapless::String<256> = heapless::String::new();
            let _ = write!(
                line,
                "the host broke a rule, {}: {v} [{}]",
                v.kind.name(),
                v.kind.spec()
            );
            crate::info(&line);
        }
        // the message channel: acknowledges in, events (and their resends) out
        while let Poll::Ready(Ok((n, meta))) = msg.poll_recv_from(datagram, &mut noop) {
            busy = true;
            if let Some(ip) = v4(meta.endpoint.addr) {
                let from = SocketAddrV4::new(ip, meta.endpoint.port);
                cam.device_mut().handle_message(from, &datagram[..n]);
            }
        }
        while let Some(m) = cam.device_mut().poll_message(now(), out) {
            busy = true;
            let to = IpEndpoint::new(IpAddress::Ipv4(m.dst_ip), m.dst_port);
            let _ = msg.send_to(&out[..m.len], to).await;
        }
        cam.handle_timeout(now());
        while let Some(ev) = cam.poll_event() {
            crate::log_event(&ev);
        }
        // RoCEv2 out: a bounded batch, so GVCP stays responsive; queue-pair packets below the
        // IP stack when the board can, else (and everything else) through the socket
        let mut ring_full = false;
        for _ in 0..64 {
            if !raw.ready() {
                ring_full = true;
                break;
            }
            let Some(tx) = cam.poll_packet(now(), 0, out) else {
                break;
            };
            busy = true;
            let n = match tx {
                Tx::Packet(p) => {
                    let taken = if p.icrc_pending {
                        raw.send_descriptor(&TxDescriptor::of(&p), cam.payload(&p))
                    } else {
                        raw.send(p.header(), cam.payload(&p), p.trailer())
                    };
                    if taken {
                        continue;
                    }
                    cam.write_packet(&p, out)
                }
                Tx::Bytes(n) => Some(n),
            };
            if let Some(d) = n.and_then(|n| camera::datagram(&out[..n])) {
                let to = IpEndpoint::new(IpAddress::Ipv4(d.dst), d.dst_port);
                let _ = roce.send_to(&out[d.payload], to).await;
            }
        }
        if ring_full && !busy {
            raw.wait_ready().await;
            continue;
        }
        // GVSP for hosts that did not connect ORSP
        for _ in 0..64 {
            let Some(p) = cam.poll_gvsp(now(), out) else {
                break;
            };
            busy = true;
            let to = IpEndpoint::new(IpAddress::Ipv4(p.dst_ip), p.dst_port);
            let _ = gvsp.send_to(&out[..p.len], to).await;
        }
        if !busy {
            let t = now().0;
            let wake = cam
                .poll_timeout()
                .map_or(t + 1_000_000, |d| d.0)
                .clamp(t, t + 1_000_000);
            let at = embassy_time::Instant::from_micros(wake / 1000);
            select4(
                gvcp.wait_recv_ready(),
                roce.wait_recv_ready(),
                msg.wait_recv_ready(),
                Timer::at(at),
            )
            .await;
        }
    }
}
