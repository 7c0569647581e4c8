//! The reference ORSP host on real verbs (cargo feature `verbs`): what a host SDK does with
//! libibverbs, step by step (docs/host-integration.md walks through it).
//!
//! 1. Open the RDMA device that owns the host's IP and create an RC QP in INIT with
//!    `IBV_ACCESS_REMOTE_WRITE` ([`VerbsQp::open`]).
//! 2. Register the frame buffers (one region, remote-writable: the camera WRITEs pixels there),
//!    a receive region for the camera's SENDs (HELLO, LEADER, TRAILER, ...), and a small send
//!    region for our own SENDs (ANNOUNCE, QUEUE, FLUSH).
//! 3. Post every receive before the camera can send: its first message (HELLO) follows CONNECT
//!    at once, and an RC SEND without a posted receive costs an RNR NAK.
//! 4. Exchange QP numbers and PSNs (GVCP registers, `docs/orsp-spec.md` §6, or the RDMA CM), then
//!    INIT → RTR → RTS ([`VerbsQp::connect`]).
//! 5. ANNOUNCE the buffers (rkey, address, length of each), then for every TRAILER check the
//!    buffer and QUEUE it again.

use anyhow::{Result, bail};
use rdmacam_protocol::orsp::msg::Hello;
use rdmacam_protocol::wire::pmtu::{MessageKind, Pmtu};
use sideway::ibverbs::completion::WorkCompletionStatus;

use crate::host::{HostConfig, HostCore, RECV_SIZE, Stats};
use rdmacam_io::verbs::{RcAttrs, Region, VerbsQp, Wc, status_name};

/// Receives kept posted (the camera sends at most LEADER + TRAILER per buffer in flight, plus
/// events).
const RECV_DEPTH: u32 = 64;
/// Send slots for our own messages.
const SEND_SLOTS: u32 = 16;
/// Bytes per send slot (the largest ANNOUNCE chunk is 24 + 40 * 24 = 984).
const SEND_SLOT: usize = 1024;
/// wr_id bit that marks a receive.
const RECV_TAG: u64 = 1 << 63;

/// The host's side of one ORSP connection on an RDMA device.
pub struct VerbsHost {
    core: HostCore,
    // fields drop in order: the QP before the regions it may still use
    qp: VerbsQp,
    frames: Region,
    recv: Region,
    send: Region,
    free_send: Vec<u32>,
    pending: std::collections::VecDeque<Vec<u8>>,
    wcs: Vec<Wc>,
    destroyed: bool,
}

impl std::fmt::Debug for VerbsHost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VerbsHost")
            .field("qp", &self.qp)
            .field("stats", self.core.stats())
            .finish_non_exhaustive()
    }
}

impl VerbsHost {
    /// Steps 1–3: device, QP, regions, receives. `device`: the RDMA device's name, or None
    /// for the one whose GID table has `cfg.host_ip`.
    pub fn open(device: Option<&str>, cfg: HostConfig) -> Result<Self> {
        let mut qp = VerbsQp::open(device, cfg.host_ip, SEND_SLOTS + 4, RECV_DEPTH, true)?;
        let frames = qp.register(cfg.buffers as usize * cfg.buffer_size, true)?;
        let recv = qp.register(RECV_DEPTH as usize * RECV_SIZE as usize, false)?;
        let send = qp.register(SEND_SLOTS as usize * SEND_SLOT, false)?;
        for i in 0..RECV_DEPTH {
            qp.post_recv(
                RECV_TAG | u64::from(i),
                &recv,
                i as usize * RECV_SIZE as usize,
                RECV_SIZE,
            )?;
        }
        Ok(VerbsHost {
            core: HostCore::new(cfg),
            qp,
            frames,
            recv,
            send,
            free_send: (0..SEND_SLOTS).rev().collect(),
            pending: Default::default(),
            wcs: Vec::new(),
            destroyed: false,
        })
    }

    /// Our QP number and the PSN we send with (what the camera must know).
    pub fn qp_numbers(&self) -> (u32, u32) {
        (self.qp.qpn(), self.core.config().host_sq_psn)
    }

    /// The device and GID index in use.
    pub fn device(&self) -> (&str, u8) {
        (self.qp.device(), self.qp.gid_index())
    }

    /// The largest path MTU the port carries.
    pub fn max_pmtu(&self) -> Pmtu {
        self.qp.active_mtu()
    }

    /// Statistics so far.
    pub fn stats(&self) -> &Stats {
        self.core.stats()
    }

    /// Check frames against replayed images ([`crate::host::HostCore::set_images`]).
    pub fn set_images(&mut self, images: Option<std::sync::Arc<rdmacam_io::images::ImageSet>>) {
        self.core.set_images(images);
    }

    /// Step 4: RTR and RTS towards the camera's QP (its QPN and the PSN it sends with).
    pub fn connect(&mut self, device_qpn: u32, device_sq_psn: u32, pmtu: Pmtu) -> Result<()> {
        let c = self.core.config();
        let (camera, psn) = (c.camera_ip, c.host_sq_psn);
        self.qp.connect(
            device_qpn,
            camera,
            device_sq_psn,
            psn,
            RcAttrs {
                pmtu,
                timeout: 14,
                retry_cnt: 7,
                rnr_retry: 7,
                min_rnr_timer: 1,
                traffic_class: 0,
            },
        )
    }

    /// RTR and RTS with the RDMA CM's attributes (`crate::verbs_cm`); returns the path MTU
    /// the CM negotiated.
    pub fn connect_with(
        &mut self,
        rtr: &sideway::ibverbs::queue_pair::QueuePairAttribute,
        rts: &sideway::ibverbs::queue_pair::QueuePairAttribute,
    ) -> Result<Pmtu> {
        self.qp.connect_with(rtr, rts)
    }

    /// The camera's HELLO, when it came another way than as a SEND (the RDMA CM's REP).
    pub fn set_hello(&mut self, hello: Hello) {
        self.core.set_hello(hello);
    }

    /// Step 5: ANNOUNCE every buffer with its real rkey and address.
    pub fn announce(&mut self) -> Result<()> {
        let (rkey, va) = (self.frames.rkey(), self.frames.addr(0));
        for m in self.core.announce_messages(rkey, va) {
            self.send(m)?;
        }
        Ok(())
    }

    /// Whether every SEND posted so far has completed (the camera acknowledged it).
    pub fn sends_done(&self) -> bool {
        self.pending.is_empty() && self.free_send.len() == SEND_SLOTS as usize
    }

    fn send(&mut self, bytes: Vec<u8>) -> Result<()> {
        self.pending.push_back(bytes);
        self.post_pending()
    }

    fn post_pending(&mut self) -> Result<()> {
        while let Some(&slot) = self.free_send.last() {
            let Some(m) = self.pending.pop_front() else {
                break;
            };
            assert!(m.len() <= SEND_SLOT, "host message larger than a send slot");
            let at = slot as usize * SEND_SLOT;
            self.send.bytes_mut()[at..at + m.len()].copy_from_slice(&m);
            self.qp.post_send(
                u64::from(slot),
                MessageKind::Send,
                &self.send,
                at,
                m.len() as u32,
                (0, 0),
                0,
                false,
            )?;
            self.free_send.pop();
        }
        Ok(())
    }

    /// Poll the CQ once: received messages are checked and their buffers re-queued, send slots
    /// come back. Returns whether anything happened; an error names the failed completion.
    pub fn pump(&mut self) -> Result<bool> {
        if self.destroyed {
            return Ok(false);
        }
        self.wcs.clear();
        if self.qp.poll(&mut self.wcs) == 0 {
            return Ok(false);
        }
        self.handle_completions()
    }

    /// Sleep until the next solicited completion (a TRAILER) or `timeout`, then handle what
    /// the CQ holds. The camera's LEADERs and our own send completions raise no event; they are
    /// picked up with the TRAILER that follows them or when the wait times out.
    pub fn wait(&mut self, timeout: std::time::Duration) -> Result<bool> {
        if self.destroyed {
            std::thread::sleep(timeout);
            return Ok(false);
        }
        self.wcs.clear();
        if self.qp.wait_solicited(&mut self.wcs, timeout)? == 0 {
            return Ok(false);
        }
        self.handle_completions()
    }

    fn handle_completions(&mut self) -> Result<bool> {
        let mut requeue = Vec::new();
        let wcs = std::mem::take(&mut self.wcs);
        for wc in &wcs {
            let recv = wc.wr_id & RECV_TAG != 0;
            let index = (wc.wr_id & !RECV_TAG) as usize;
            if wc.status != WorkCompletionStatus::Success {
                bail!(
                    "{} completed with {} (the QP is in the error state)",
                    if recv {
                        format!("receive {index}")
                    } else {
                        format!("SEND from slot {index}")
                    },
                    status_name(wc.status)
                );
            }
            if recv {
                let at = index * RECV_SIZE as usize;
                let len = (wc.byte_len as usize).min(RECV_SIZE as usize);
                let data = &self.recv.bytes()[at..at + len];
                if let Some(done) = self.core.on_message(data, self.frames.bytes()) {
                    requeue.push(done);
                }
                self.qp.post_recv(wc.wr_id, &self.recv, at, RECV_SIZE)?;
            } else {
                self.free_send.push(index as u32);
            }
        }
        self.wcs = wcs;
        if self.core.requeue() && !requeue.is_empty() {
            let m = self.core.queue_message(&requeue);
            self.pending.push_back(m);
        }
        self.post_pending()?;
        Ok(true)
    }

    /// Destroy the QP, keeping the registered memory (a host that vanished, for tests): the
    /// camera's packets then find no QP and its retries run out.
    pub fn destroy_qp(&mut self) {
        self.qp.destroy_qp();
        self.destroyed = true;
    }
}
