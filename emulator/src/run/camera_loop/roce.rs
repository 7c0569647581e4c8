//! The RoCEv2 transport on a UDP socket, one turn's worth: ACKs and host messages in, each at
//! its kernel receive time; packets out by the path the settings choose.

use rdmacam_io::gso::TX_BATCH;
use rdmacam_io::share::CpuShare;
use rdmacam_protocol::judge::{Violation, ViolationKind};
use rdmacam_protocol::rc::Instant;

use super::{CameraLoop, RoceLink};
use crate::camera::CameraCore;
use crate::run::roce_tx::{send_segmented, send_with_faults};

impl CameraLoop {
    /// RoCEv2 on the UDP socket, in: ACKs and host messages (if `readable`), each at its
    /// kernel receive time. Before the timers run ([`Self::send_roce`] after them): a camera
    /// the pacer holds sleeps through ACKs and may wake at an ACK deadline the ACK waiting in
    /// its socket already met; read after the timers, that ACK came too late, the timer fired,
    /// and the camera sent a probe for nothing (at 1 Gbit/s, 457 such timeouts in 250 frames).
    pub(super) fn receive_roce(&mut self, readable: bool) -> bool {
        let Some(r) = self.roce.as_mut() else {
            return false;
        };
        let now = || Instant::from_nanos(self.t0.elapsed().as_nanos() as u64);
        let mut busy = false;
        // what arrived, RECV_BATCH datagrams per system call, at most 4096
        let local = r.socket.local();
        for _ in 0..4096 / rdmacam_io::roce::RECV_BATCH {
            if !readable {
                break;
            }
            // as an RNIC: a packet whose ICRC is wrong is dropped before anything reads it
            let bad_before = r.socket.icrc_drops;
            let n = r.socket.recv_checked_batch(&mut r.rx);
            if r.socket.icrc_drops > bad_before {
                // the host computes its ICRC wrong, or the packet was damaged or forged
                let v = Violation::new(ViolationKind::BadIcrc, 0, 0, None);
                let list = self.cam.device_mut().violations_mut();
                list.record_many(v, r.socket.icrc_drops - bad_before);
            }
            // each packet at the kernel's receive time, not when the loop came to read it: a
            // camera the pacer holds sleeps through ACKs (`idle`), and a round trip measured to
            // the wake-up would count the sleep as queueing on the path. No sooner than the
            // last send, though: what went out after a packet arrived and before it was read
            // armed its timers then, and a round trip from those would come out 0
            let read_at = now();
            for (k, (src, ib)) in r.rx.datagrams().enumerate() {
                let arrived = r.rx.arrived(k).checked_sub(self.mono_t0);
                let at = arrived.map_or(read_at, |a| {
                    Instant::from_nanos(a).max(r.sent_at).min(read_at)
                });
                self.cam.handle_ib(at, src, local, 0, ib);
            }
            busy |= n > 0;
            if n < rdmacam_io::roce::RECV_BATCH {
                break;
            }
        }
        busy
    }

    /// RoCEv2 on the UDP socket, out: packets by the path the settings choose (GSO runs,
    /// packets through the fault engine, `sendmmsg` batches).
    pub(super) fn send_roce(&mut self) -> bool {
        let Some(r) = self.roce.as_mut() else {
            return false;
        };
        let now = || Instant::from_nanos(self.t0.elapsed().as_nanos() as u64);
        let mut sent = false;
        let packet_faults = self.faults.packet_faults();
        if self.faults.stalled() {
            // a stream stall: nothing leaves until it ends
        } else if r.socket.gso() && !packet_faults {
            // UDP segmentation offload with gather I/O: runs of equal-size packets in one
            // send, payload straight from frame memory
            sent = send_segmented(
                &mut self.cam,
                &mut r.socket,
                now,
                &mut r.gso_batch,
                &mut r.tx[0][..],
                &mut self.share,
            );
        } else if packet_faults {
            // faults on demand: each packet on its own
            for _ in 0..1024 {
                let Some(n) = self.cam.poll_transmit(now(), &mut r.tx[0][..]) else {
                    break;
                };
                sent = true;
                if send_with_faults(
                    &mut self.faults,
                    &mut r.socket,
                    &mut r.tx[0][..n],
                    &mut r.held,
                ) {
                    self.cam.held_back(&r.tx[0][..n]);
                }
            }
            if let Some(h) = r.held.take()
                && let Err(e) = r.socket.send(&h)
            {
                crate::run::roce_tx::send_failed(&e);
            }
        } else {
            sent = send_batches(&mut self.cam, r, now, &mut self.share);
        }
        if sent {
            r.sent_at = now();
        }
        sent
    }
}

/// Up to 1024 packets, handed to the kernel [`TX_BATCH`] at a time (`sendmmsg`), copied.
fn send_batches(
    cam: &mut CameraCore,
    r: &mut RoceLink,
    now: impl Fn() -> Instant,
    share: &mut CpuShare,
) -> bool {
    let mut busy = false;
    for _ in 0..1024 / TX_BATCH {
        let mut k = 0;
        while k < TX_BATCH {
            let Some(n) = cam.poll_transmit(now(), &mut r.tx[k][..]) else {
                break;
            };
            r.tx_len[k] = n;
            k += 1;
        }
        if k == 0 {
            break;
        }
        busy = true;
        let (tx, tx_len) = (&r.tx, &r.tx_len);
        let sent = r
            .socket
            .send_many_reporting((0..k).map(|i| &tx[i][..tx_len[i]]), &mut |lost| {
                cam.held_back(lost)
            });
        if let Err(e) = sent {
            crate::run::roce_tx::send_failed(&e);
        }
        share.yield_if_due();
        if k < TX_BATCH {
            break;
        }
    }
    busy
}
