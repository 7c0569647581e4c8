//! The camera's RoCEv2 transmit paths on a UDP socket: UDP GSO runs with gather I/O (the
//! default), `sendmmsg` batches of copied packets (`--no-gso`), and one packet at a time
//! through the fault engine (`--fault` on stream packets).

use rdmacam_io::gso::{GSO_MAX_SEGMENTS, Gather, gso_segments};
use rdmacam_io::roce::RoceSocket;
use rdmacam_io::share::CpuShare;
use rdmacam_protocol::rc::{Instant, TxPacket};
use tracing::warn;

use crate::camera::{CameraCore, Tx};

/// Log a RoCEv2 send the kernel refused, at most once a second per camera thread (with how many
/// more came since): a send that fails fails again for every packet after it. A datagram too
/// long for the route (EMSGSIZE) is a path MTU the route cannot carry: the camera offers what
/// its interface carries, but a route can carry less.
pub(super) fn send_failed(e: &std::io::Error) {
    use std::cell::Cell;
    use std::time::{Duration, Instant as StdInstant};
    thread_local! {
        static LAST: Cell<(Option<StdInstant>, u64)> = const { Cell::new((None, 0)) };
    }
    LAST.with(|l| {
        let (last, quiet) = l.get();
        if last.is_some_and(|t| t.elapsed() < Duration::from_secs(1)) {
            l.set((last, quiet + 1));
            return;
        }
        l.set((Some(StdInstant::now()), 0));
        let more = if quiet > 0 {
            format!(" ({quiet} more failed sends since the last report)")
        } else {
            String::new()
        };
        if e.raw_os_error() == Some(nix::errno::Errno::EMSGSIZE as i32) {
            warn!(
                "RoCEv2 send refused: a packet is longer than the route to the host carries \
                 ({e}): the connection's path MTU (OrspPathMtu) is more than that route's MTU; \
                 the host must ask for less{more}"
            );
        } else {
            warn!("RoCEv2 send failed: {e}{more}");
        }
    });
}

/// Up to 1024 packets through UDP GSO: each queue-pair packet is built with the IPv4
/// identification of its place in the current send (the kernel numbers GSO segments 0, 1, 2,
/// ...); a send holds equal-size packets and may end with one shorter packet (a message's LAST).
/// A packet that cannot join (a FIRST, with its RETH, after MIDDLEs) ends the send and is
/// resealed for place 0 of the next. Small packets (ACKs, CM) go alone. Returns whether anything
/// was sent.
pub(super) fn send_segmented(
    cam: &mut CameraCore,
    r: &mut RoceSocket,
    now: impl Fn() -> Instant,
    batch: &mut Vec<TxPacket>,
    scratch: &mut [u8],
    share: &mut CpuShare,
) -> bool {
    // runs sent this turn
    let mut runs = 0;
    let flush = |cam: &CameraCore,
                 r: &mut RoceSocket,
                 batch: &mut Vec<TxPacket>,
                 share: &mut CpuShare,
                 runs: &mut u32| {
        // the pieces of each packet, on the stack: no allocation per send
        let none = Gather {
            header: &[],
            payload: &[],
            trailer: &[],
        };
        let mut segs = [none; GSO_MAX_SEGMENTS];
        for (g, p) in segs.iter_mut().zip(batch.iter()) {
            *g = Gather {
                header: p.header(),
                payload: cam.payload(p),
                trailer: p.trailer(),
            };
        }
        let had_gso = r.gso();
        if let Err(e) = r.send_gso(&segs[..batch.len()]) {
            send_failed(&e);
        }
        if had_gso && !r.gso() {
            warn!(
                "the kernel takes no UDP segmentation offload here: one datagram per \
                 packet from now on (more CPU per byte)"
            );
        }
        *runs += 1;
        if offer_cpu_after(*runs, batch.len() as u32, || cam.packets_to_solicited()) {
            share.yield_if_due();
        }
        batch.clear();
    };
    let mut sent = 0;
    // one clock read per send, not per packet: the packets of a run are sealed within a few
    // microseconds of each other (a read per packet was 4 % of the camera's CPU at its default
    // pace), and a time read before the run's packets is early, never late, for their timers
    let mut t = now();
    while sent < 1024 {
        if let Some(first) = batch.first()
            && batch.len() >= gso_segments(first.udp_len())
        {
            // full: send before sealing the next packet, whose ICRC covers its place in the run
            flush(cam, r, batch, share, &mut runs);
            t = now();
        }
        let ident = batch.len() as u16;
        let Some(tx) = cam.poll_packet(t, ident, scratch) else {
            break;
        };
        sent += 1;
        let mut p = match tx {
            Tx::Bytes(n) => {
                if let Err(e) = r.send(&scratch[..n]) {
                    send_failed(&e);
                }
                t = now();
                continue;
            }
            Tx::Packet(p) => p,
        };
        if r.lose() {
            // --loss: sealed with the next place in the run, which the next packet takes
            cam.held_back_psn(p.psn);
            continue;
        }
        if let Some(first) = batch.first()
            && p.udp_len() > first.udp_len()
        {
            flush(cam, r, batch, share, &mut runs);
            t = now();
            if let Err(e) = p.set_ipv4_ident(0, cam.payload(&p)) {
                warn!("cannot reseal a packet: {e:?}");
            }
        }
        let shorter = batch.first().is_some_and(|f| p.udp_len() < f.udp_len());
        batch.push(p);
        if shorter {
            flush(cam, r, batch, share, &mut runs);
            t = now();
        }
    }
    if !batch.is_empty() {
        flush(cam, r, batch, share, &mut runs);
    }
    sent > 0
}

/// Whether the camera offers its CPU ([`CpuShare`]) after the `nth` run of a turn (from 1), of
/// `len` packets, with `to_trailer()` packets still to go before the last of the next TRAILER
/// (`None`: none is posted; asked only after an odd run, since it walks the send queue). Mid-frame after every second run: a yield after each one handed
/// the CPU to a host woken onto it once a run, where the host mostly gets it anyway as the
/// camera's send returns; at the defaults (two runs a wake-up) the camera's yields fell from
/// 26 to 19 a frame and the host's CPU per GB by 4-9 %, the camera's did not move
/// (docs/BENCHMARKS.md). Near a TRAILER after each run, and after the TRAILER itself: the host
/// has placed all but the last run when the TRAILER comes, and reads it before the camera
/// goes on (frame latency unchanged).
fn offer_cpu_after(nth: u32, len: u32, to_trailer: impl FnOnce() -> Option<u32>) -> bool {
    nth % 2 == 0 || to_trailer().is_none_or(|n| n < 2 * len)
}

/// Send one RoCEv2 packet through the fault engine: lost, corrupted (bad ICRC), marked
/// Congestion Experienced, duplicated or held back to follow the next one. Returns whether the
/// host cannot receive it (lost, or corrupted so its NIC drops it).
pub(super) fn send_with_faults(
    faults: &mut crate::fault::FaultEngine,
    r: &mut RoceSocket,
    packet: &mut [u8],
    held: &mut Option<Vec<u8>>,
) -> bool {
    let request = crate::fault::is_rc_request(packet);
    let v = if request {
        faults.packet(true, true)
    } else {
        crate::fault::Verdict::default()
    };
    if v.drop {
        return true;
    }
    if v.corrupt {
        // a request (checked above): its ICRC is the last byte
        let icrc_last = packet.len() - 1;
        crate::fault::flip_bytes(&mut packet[icrc_last..]);
    }
    if v.hold {
        if let Some(h) = held.replace(packet.to_vec())
            && let Err(e) = r.send(&h)
        {
            send_failed(&e);
        }
        return v.corrupt;
    }
    let copies = if v.duplicate { 2 } else { 1 };
    for _ in 0..copies {
        let sent = if v.ecn {
            r.send_congested(packet)
        } else {
            r.send(packet)
        };
        if let Err(e) = sent {
            send_failed(&e);
        }
    }
    if let Some(h) = held.take()
        && let Err(e) = r.send(&h)
    {
        send_failed(&e);
    }
    v.corrupt
}

#[cfg(test)]
mod tests {
    use super::offer_cpu_after;

    /// A 1080p frame at path MTU 4096: 507 WRITE packets in runs of 15, then its TRAILER.
    #[test]
    fn the_cpu_is_offered_after_every_second_run_and_after_each_near_a_trailer() {
        const RUN: u32 = 15;
        // mid-frame, two runs a turn (the default pace): once a turn, after the second
        let far = Some(400);
        assert!(!offer_cpu_after(1, RUN, || far));
        assert!(offer_cpu_after(2, RUN, || far));
        // one run a turn: the camera sleeps next, which gives the CPU away anyway
        assert!(!offer_cpu_after(1, RUN, || Some(300)));
        // the last two runs before the TRAILER: each one, so the host keeps up with them
        assert!(!offer_cpu_after(1, RUN, || Some(2 * RUN)));
        assert!(offer_cpu_after(1, RUN, || Some(2 * RUN - 1)));
        assert!(offer_cpu_after(3, RUN, || Some(RUN)));
        assert!(
            offer_cpu_after(1, 1, || Some(0)),
            "the frame's last packet, its TRAILER next"
        );
        // the TRAILER gone, nothing solicited posted (between frames): each send
        assert!(offer_cpu_after(1, 1, || None));
    }
}
