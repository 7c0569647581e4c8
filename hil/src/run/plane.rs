//! The host's data plane: the soft host on a UDP RoCEv2 socket, or a queue pair on an RDMA
//! device, behind one interface the session drives.

use std::os::fd::AsFd;
use std::sync::Arc;
use std::time::{Duration, Instant as StdInstant};

use anyhow::{Context, Result};
use rdmacam_io::roce::{RECV_BATCH, RecvBatch, RoceSocket};
use rdmacam_protocol::device::frame::Pattern;
use rdmacam_protocol::rc::Instant;
use rdmacam_protocol::wire::pmtu::Pmtu;

use super::{HostOptions, HostTransport};
use crate::host::{HostConfig, OrspHost};

/// What the camera says about the stream before it starts.
pub(super) struct CameraFacts {
    /// Bytes of a frame's payload (image and, with chunks, chunk data): the buffer size.
    pub payload: usize,
    /// The test pattern frames are checked against.
    pub pattern: Pattern,
    /// The largest path MTU the camera takes.
    pub pmtu: Pmtu,
    /// The camera keeps a host's OrspHostRxWindow (ORSP_CAPS bit 7).
    pub keeps_rx_window: bool,
}

/// Bytes of a frame the soft host compares between two receive batches: ~20 µs of work, so
/// its ACKs never wait for a whole frame's check.
const CHECK_SLICE: usize = 64 * 1024;

/// Packets the soft host reads before it sends the ACKs due (a NAK goes at once). Under loss
/// the camera's window shrinks to a few dozen packets and asks for an ACK four times per
/// window: ACKs every 32 packets then came once per window, and sending stopped and waited for
/// each. Every 8: 1 % loss 5.0 -> 5.7-6.1 Gbit/s in `rdmacam demo` (16: no gain; 1, 2, 4: the
/// same as 8 within noise; docs/BENCHMARKS.md).
const ACK_BATCH: usize = 8;

/// Frames waiting for their check at which the soft host checks as fast as it receives, not
/// only while idle.
const CHECKS_BEHIND: usize = 2;

/// What one [`pump`] did.
#[derive(Debug, Clone, Copy)]
pub(super) struct Pumped {
    /// Something moved: a packet read or sent, a slice of a frame checked.
    pub(super) busy: bool,
    /// It left nothing to do until a packet arrives or a timer is due: its last receive found
    /// less than a batch and no frame waits for its check. A second pump at once would only
    /// look at an empty socket.
    pub(super) drained: bool,
}

pub(super) fn pump(
    host: &mut OrspHost,
    roce: &mut RoceSocket,
    t0: StdInstant,
    rx: &mut RecvBatch,
    tx: &mut Vec<u8>,
) -> Result<Pumped> {
    let now = || Instant::from_nanos(t0.elapsed().as_nanos() as u64);
    let mut busy = false;
    let mut received = 0;
    let mut i = 0;
    let mut empty = false;
    let dst = roce.local();
    // up to 4096 packets, RECV_BATCH per system call, bad ICRCs dropped on the way
    while i < 4096 {
        let got = roce.recv_checked_batch(rx);
        // one clock read per receive: the datagrams of a batch arrived together (a read per
        // datagram was 6 % of the host's CPU)
        let t = now();
        for (k, (src, ecn, ib)) in rx.datagrams_ecn().enumerate() {
            received += ib.len();
            host.set_arrival(rx.arrived(k));
            host.handle_ib(t, src, dst, ecn, ib);
            i += 1;
            // Answer as a NIC would, not only when the socket is drained: a NAK at once (the
            // camera goes back sooner, and what it sends again queues behind what is still to
            // be read instead of arriving after the drain), ACKs every ACK_BATCH packets (the
            // camera's window keeps moving, and its round-trip samples stay those of the path)
            if host.nak_pending() || i % ACK_BATCH == 0 {
                while let Some(n) = host.poll_transmit(t, tx) {
                    roce.send(&tx[..n])?;
                }
            }
        }
        busy |= got > 0;
        if got < RECV_BATCH {
            empty = true;
            break;
        }
    }
    // one clock read for the timers and what they let go: sending takes microseconds
    let t = now();
    host.handle_timeout(t);
    while let Some(n) = host.poll_transmit(t, tx) {
        roce.send(&tx[..n])?;
        busy = true;
    }
    // The ACKs are out: now the application's work (frame checks), a slice at a time while
    // nothing waits to be received, so a TRAILER that arrives meanwhile is read within a
    // slice's time (~10 us) instead of after every byte received before it was compared
    // (hundreds of microseconds: the frame's latency). When checks fall behind (frames
    // waiting, a host short of CPU), as many bytes as arrived, so checking keeps pace with
    // receiving and buffers go back (QUEUE) as fast as they fill; a host that checked only
    // when idle would hold every buffer and make the camera drop frames.
    let mut checked = 0;
    for slice in 0.. {
        if host.checks_pending() == 0 {
            // nothing to check: no look at the socket for it (a look per pump was a third of
            // the host's ppoll calls at the camera's defaults)
            break;
        }
        let catch_up = host.checks_pending() >= CHECKS_BEHIND && checked < received.max(1);
        // a look at the socket every other slice (~40 us of checking): one per slice was 9 %
        // of the host's CPU
        if !catch_up
            && slice % 2 == 0
            && rdmacam_io::poll::readable([roce.as_fd()], Duration::ZERO)?[0]
        {
            break;
        }
        if !host.verify() {
            break;
        }
        busy = true;
        checked += CHECK_SLICE;
    }
    if checked > 0 {
        // what the checks let go (a QUEUE of a checked frame's buffer)
        let t = now();
        while let Some(n) = host.poll_transmit(t, tx) {
            roce.send(&tx[..n])?;
        }
    }
    Ok(Pumped {
        busy,
        drained: empty && host.checks_pending() == 0,
    })
}

/// An RDMA CM connection: the soft host's own IB CM, or librdmacm's.
pub(super) enum CmConn {
    Soft(crate::cm::CmConnection),
    #[cfg(feature = "verbs")]
    Verbs(crate::verbs_cm::CmConnection),
}

/// The soft host and its UDP socket.
pub(super) struct SoftPlane {
    pub(super) host: OrspHost,
    pub(super) roce: RoceSocket,
    t0: StdInstant,
    rx: RecvBatch,
    tx: Vec<u8>,
    /// When a pump last moved a packet (busy-polling applies while the stream is flowing).
    active: StdInstant,
    /// When the responder last saw a gap or a packet again (busy-polling applies after loss).
    lossy: Option<StdInstant>,
    /// Gaps and repeats counted so far (the responder's out-of-sequence and duplicate counts).
    irregular: u64,
    /// When busy polls offer the CPU between looks (`HostOptions::share_cpu`).
    share: rdmacam_io::share::CpuShare,
    /// Packets of the path MTU the receive buffer holds unread, at most [`RX_WINDOW_PROBE`].
    rx_capacity: usize,
    /// The last pump left the socket empty and no check pending ([`Pumped::drained`]).
    drained: bool,
}

/// How many packets the receive buffer is counted up to: a buffer holding this many is
/// plenty for the camera's window of 128.
const RX_WINDOW_PROBE: usize = 1024;

/// While packets are flowing and a frame's TRAILER is due ([`TRAILER_SOON`]), the soft host
/// polls its socket for up to this long before it sleeps ([`poll_limit`]). Polling for longer
/// (200 us through a whole frame) cost frame latency: on a small machine the camera wakes the
/// host onto its own CPU, and two pollers there take turns of a scheduler slice while the other
/// CPU idles.
const TRAILER_POLL: Duration = Duration::from_micros(20);

/// How long the soft host polls while packets flow on a link that lost packets lately
/// ([`LOSSY_FOR`]). There a sleeping receiver makes the sender pay a wake-up for nearly every
/// packet (the loopback path runs in the sender's system call): at 1 % and 5 % loss, where the
/// camera's window is small and the host often catches up, sleeping at once cost the demo a
/// fifth to a third of its goodput (docs/BENCHMARKS.md). After a loss the camera's next
/// packets (what a NAK asked for again, or what an ACK let go) come one round trip after the
/// host answered. That round trip was often longer than 20 us, and a host asleep by then woke
/// late for each answer. Since a polling host gives its CPU away while it has time to spare
/// ([`CpuShare`](rdmacam_io::share::CpuShare)), polling longer no longer holds off a camera on
/// its CPU. In the demo, ten randomized pairs each against 20 us: goodput x1.11 at 5 % loss,
/// x1.21 at 20 % (five pairs), x1.04 at 1 %; 100 us gave only x1.03 at 5 %
/// (docs/BENCHMARKS.md).
const LOSSY_POLL: Duration = Duration::from_micros(40);

/// How long after the last gap or repeated packet the soft host still busy-polls. On a clean
/// link the camera's window is wide and its GSO runs wake the host once per 64 KiB; a host that
/// kept polling there spent every idle microsecond spinning, a whole core whatever its work
/// (docs/BENCHMARKS.md: its CPU per GB was the camera's, whichever was faster).
const LOSSY_FOR: Duration = Duration::from_millis(100);

/// A frame with at most this much of its image still to arrive has its TRAILER due within a
/// GSO run: the soft host polls for it rather than sleep, so a frame's last message is read
/// when it arrives, not a wake-up later (at --fps 1000, six interleaved runs each: frame
/// latency p99 34-42 us in five of six against 35-149, median 39 against 63;
/// docs/BENCHMARKS.md). It costs one short poll per frame.
const TRAILER_SOON: usize = 64 * 1024;

/// How long the soft host polls its socket before it sleeps, if at all: only while packets are
/// `flowing` (the last one moved less than
/// [`BUSY_POLL_WHILE`](rdmacam_io::poll::BUSY_POLL_WHILE) ago), [`LOSSY_POLL`] on a `lossy`
/// link, else [`TRAILER_POLL`] when a frame's TRAILER is due (asked only then).
fn poll_limit(flowing: bool, lossy: bool, trailer_due: impl FnOnce() -> bool) -> Option<Duration> {
    if !flowing {
        None
    } else if lossy {
        Some(LOSSY_POLL)
    } else if trailer_due() {
        Some(TRAILER_POLL)
    } else {
        None
    }
}

/// The host's data plane: the soft host on a UDP socket, or a verbs QP.
pub(super) enum Plane {
    Soft(Box<SoftPlane>),
    #[cfg(feature = "verbs")]
    Verbs(Box<crate::verbs_host::VerbsHost>),
}

impl Plane {
    /// The data plane `o.transport` names, for frames as `camera` describes them, and the path
    /// MTU it will use.
    pub(super) fn open(
        o: &HostOptions,
        roce_local: std::net::IpAddr,
        camera_roce: std::net::IpAddr,
        camera: &CameraFacts,
    ) -> Result<(Plane, Pmtu)> {
        let host_psn = (std::process::id().wrapping_mul(2_654_435_761)) & 0x00ff_ffff;
        let cfg = |host_qpn: u32, tx_port: u16| HostConfig {
            host_ip: roce_local,
            camera_ip: camera_roce,
            host_qpn,
            host_sq_psn: host_psn,
            buffers: o.buffers,
            buffer_size: camera.payload,
            tx_port,
            camera_rx_port: o.camera_rx_port,
            seed: o.seed,
            pattern: camera.pattern,
            requeue: true,
        };
        match &o.transport {
            HostTransport::Soft => {
                let mut roce = RoceSocket::bind(roce_local, o.rx_port, 0, o.loss, o.seed ^ 0x5eed)?;
                if let Some(bytes) = o.recv_buffer {
                    roce.set_recv_buffer(bytes)
                        .context("cannot set the RoCEv2 receive buffer")?;
                }
                // no more than the route to the camera carries whole (Don't Fragment): a
                // 4096 path MTU on a 1500-byte link would deliver nothing
                let mut pmtu = camera.pmtu.min(Pmtu::Mtu4096);
                if let Ok(mtu) = rdmacam_io::link::route_mtu(roce_local, camera_roce) {
                    let route = rdmacam_io::link::pmtu_for(
                        mtu,
                        &format!("the route from {roce_local} to {camera_roce}"),
                    )?;
                    if route < pmtu && o.progress {
                        eprintln!(
                            "path MTU {} (the camera takes {}): the route to {camera_roce} \
                             has an MTU of {mtu} bytes",
                            route.bytes(),
                            pmtu.bytes()
                        );
                    }
                    pmtu = pmtu.min(route);
                }
                // a packet of the path MTU: IP, UDP, BTH, RETH and ICRC around the payload,
                // with room to spare
                let packet = pmtu.bytes() as usize + 64;
                let estimate = || {
                    (roce.recv_buffer() / rdmacam_io::roce::datagram_charge(packet))
                        .min(RX_WINDOW_PROBE)
                };
                let rx_capacity = match roce.unread_capacity(packet, RX_WINDOW_PROBE) {
                    // nothing came back (a namespace whose lo is down): estimate from above
                    Ok(0) => estimate(),
                    Ok(n) => n,
                    Err(e) => {
                        // the estimate never promises more than the buffer holds, but say so:
                        // a window below the measured one costs rate
                        let n = estimate();
                        eprintln!(
                            "receive window estimated ({n} packets of {packet} bytes): could not \
                             measure what the receive buffer holds: {e}"
                        );
                        n
                    }
                };
                // a camera's GSO runs arrive as one buffer each, cut apart here: one receive
                // and one copy per run instead of per packet
                let gro = roce.set_gro(true).is_ok();
                let host_qpn = 0x000200 | (std::process::id() & 0xff);
                // its own bound port: the QP pair's entropy port is symmetric in the two QPNs,
                // so on one loopback address it is the camera's already
                let mut host = OrspHost::new(cfg(host_qpn, roce.tx_port()));
                if let Some(m) = o.misbehave {
                    host.misbehave(m);
                }
                // as a NIC would, ACK what arrives while frames are being checked
                host.defer_checks(CHECK_SLICE);
                let plane = Plane::Soft(Box::new(SoftPlane {
                    host,
                    roce,
                    t0: StdInstant::now(),
                    rx: if gro {
                        RecvBatch::for_gro()
                    } else {
                        RecvBatch::default()
                    },
                    tx: Vec::new(),
                    active: StdInstant::now(),
                    lossy: None,
                    irregular: 0,
                    share: rdmacam_io::share::CpuShare::new(
                        o.share_cpu,
                        StdInstant::now(),
                        rdmacam_io::sched::thread_cpu_time(),
                    ),
                    rx_capacity,
                    drained: false,
                }));
                Ok((plane, pmtu))
            }
            #[cfg(feature = "verbs")]
            HostTransport::Verbs { device, .. } => {
                // the QPN is the device's; HostConfig's is unused by the verbs host
                let v = crate::verbs_host::VerbsHost::open(device.as_deref(), cfg(0, 0))?;
                let pmtu = camera.pmtu.min(v.max_pmtu());
                let (name, gid_index) = v.device();
                if o.progress {
                    eprintln!(
                        "verbs: {name} GID index {gid_index} ({roce_local}), QPN {:#x}, path MTU {}",
                        v.qp_numbers().0,
                        pmtu.bytes()
                    );
                }
                Ok((Plane::Verbs(Box::new(v)), pmtu))
            }
            #[cfg(not(feature = "verbs"))]
            HostTransport::Verbs { .. } => {
                anyhow::bail!("this build has no verbs transport: rebuild with `--features verbs`")
            }
        }
    }

    /// The soft host's RoCE receive counters (zero on verbs).
    pub(super) fn host_roce(&self) -> crate::host::HostRoceCounters {
        match self {
            Plane::Soft(p) => {
                let r = p.host.responder_counters().unwrap_or_default();
                crate::host::HostRoceCounters {
                    bad_icrc: p.roce.icrc_drops,
                    out_of_seq_request: r.out_of_seq_request,
                    duplicate_request: r.duplicate_request,
                    ecn_marked: r.ecn_marked,
                    cnps_sent: r.cnps_sent,
                }
            }
            #[cfg(feature = "verbs")]
            Plane::Verbs(_) => crate::host::HostRoceCounters::default(),
        }
    }

    pub(super) fn qp_numbers(&self) -> (u32, u32) {
        match self {
            Plane::Soft(p) => p.host.qp_numbers(),
            #[cfg(feature = "verbs")]
            Plane::Verbs(v) => v.qp_numbers(),
        }
    }

    pub(super) fn stats(&self) -> &crate::host::Stats {
        match self {
            Plane::Soft(p) => p.host.stats(),
            #[cfg(feature = "verbs")]
            Plane::Verbs(v) => v.stats(),
        }
    }

    pub(super) fn set_images(&mut self, images: Option<Arc<rdmacam_io::images::ImageSet>>) {
        match self {
            Plane::Soft(p) => p.host.set_images(images),
            #[cfg(feature = "verbs")]
            Plane::Verbs(v) => v.set_images(images),
        }
    }

    /// The receive buffer's size and how many packets it holds unread (the soft host), or
    /// None (an RDMA device places packets as they come).
    pub(super) fn rx_capacity(&self) -> Option<(usize, usize)> {
        match self {
            Plane::Soft(p) => Some((p.roce.recv_buffer(), p.rx_capacity)),
            #[cfg(feature = "verbs")]
            Plane::Verbs(_) => None,
        }
    }

    pub(super) fn connect(&mut self, dqpn: u32, dpsn: u32, pmtu: Pmtu) -> Result<()> {
        match self {
            Plane::Soft(p) => p.host.connect(dqpn, dpsn, pmtu),
            #[cfg(feature = "verbs")]
            Plane::Verbs(v) => v.connect(dqpn, dpsn, pmtu)?,
        }
        Ok(())
    }

    pub(super) fn announce(&mut self) -> Result<()> {
        match self {
            Plane::Soft(p) => p.host.announce(),
            #[cfg(feature = "verbs")]
            Plane::Verbs(v) => v.announce()?,
        }
        Ok(())
    }

    /// Whether the camera has acknowledged every message this host sent (its buffers are
    /// announced and queued).
    pub(super) fn sends_done(&self) -> bool {
        match self {
            Plane::Soft(p) => p.host.idle(),
            #[cfg(feature = "verbs")]
            Plane::Verbs(v) => v.sends_done(),
        }
    }

    /// Nothing to do: wait for the next datagram (soft, at most 1 ms, so timers and the
    /// heartbeat run), or until a solicited completion (verbs).
    pub(super) fn wait(&mut self) -> Result<()> {
        match self {
            Plane::Soft(p) => {
                let poll = poll_limit(
                    p.active.elapsed() < rdmacam_io::poll::BUSY_POLL_WHILE,
                    p.lossy.is_some_and(|t| t.elapsed() < LOSSY_FOR),
                    || p.host.trailer_due(TRAILER_SOON),
                );
                if let Some(limit) = poll
                    && rdmacam_io::poll::busy_poll_sharing(p.roce.as_fd(), limit, &mut p.share)?
                {
                    return Ok(());
                }
                rdmacam_io::poll::wait_readable([p.roce.as_fd()], Duration::from_millis(1))?;
            }
            #[cfg(feature = "verbs")]
            Plane::Verbs(v) => {
                v.wait(Duration::from_millis(5))?;
            }
        }
        Ok(())
    }

    /// Whether the host's own queue pair gave up for want of ACKs (soft; the camera never
    /// acknowledged what it was sent, or stopped).
    pub(super) fn retries_exhausted(&self) -> bool {
        match self {
            Plane::Soft(p) => {
                p.host.transport_error() == Some(rdmacam_protocol::rc::WcStatus::RetryExceeded)
            }
            #[cfg(feature = "verbs")]
            Plane::Verbs(_) => false,
        }
    }

    /// Why the host's own queue pair failed, if it did.
    pub(super) fn transport_error(&self) -> Option<String> {
        match self {
            Plane::Soft(p) => p.host.transport_error().map(|st| {
                format!(
                    "the host's queue pair failed ({st:?}): the camera stopped acknowledging \
                     the host's messages (QUEUE, ANNOUNCE) for 4 s"
                )
            }),
            #[cfg(feature = "verbs")]
            Plane::Verbs(_) => None,
        }
    }

    /// Whether the last [`pump`](Self::pump) left nothing to do until the next packet or timer
    /// (soft; a verbs plane always says no): the caller may wait at once, though the pump was
    /// busy. Pumping again until one finds nothing cost a receive that found the socket empty,
    /// and the clock reads and timer checks around it, after each of the camera's sends.
    pub(super) fn drained(&self) -> bool {
        match self {
            Plane::Soft(p) => p.drained,
            #[cfg(feature = "verbs")]
            Plane::Verbs(_) => false,
        }
    }

    pub(super) fn pump(&mut self) -> Result<bool> {
        match self {
            Plane::Soft(p) => {
                let Pumped { busy, drained } =
                    pump(&mut p.host, &mut p.roce, p.t0, &mut p.rx, &mut p.tx)?;
                p.drained = drained;
                if busy {
                    p.active = StdInstant::now();
                    let r = p.host.responder_counters().unwrap_or_default();
                    let irregular = r.out_of_seq_request + r.duplicate_request;
                    if irregular != p.irregular {
                        p.irregular = irregular;
                        p.lossy = Some(p.active);
                    }
                }
                Ok(busy)
            }
            #[cfg(feature = "verbs")]
            Plane::Verbs(v) => v.pump(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_host_polls_while_packets_flow_longest_after_a_loss() {
        let unasked = || -> bool { panic!("a lossy link polls whatever the TRAILER") };
        assert_eq!(poll_limit(true, true, unasked), Some(LOSSY_POLL));
        assert_eq!(poll_limit(true, false, || true), Some(TRAILER_POLL));
        assert_eq!(
            poll_limit(true, false, || false),
            None,
            "a clean link mid-frame sleeps"
        );
        assert_eq!(
            poll_limit(false, true, || true),
            None,
            "nothing flowing: sleep"
        );
        assert!(LOSSY_POLL > TRAILER_POLL);
    }
}
