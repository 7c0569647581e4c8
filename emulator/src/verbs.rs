//! `rdmacam run --transport verbs` (cargo feature `verbs`): the camera's ORSP stream on a real
//! RC queue pair of an RDMA device (an RDMA NIC, or Soft-RoCE), through sideway.
//!
//! [`CameraCore`] keeps the device, the ORSP channel and the frame schedule; this transport
//! replaces the userspace RC requester: the channel's work requests (payload WRITEs from frame
//! memory, LEADER/TRAILER/EVENT SENDs) go to `ibv_post_send`, their completions come back from
//! the CQ, and the host's SENDs land in posted receives. The NIC does segmentation, ICRC, ACKs
//! and retransmission; the ORSP transport counters stay 0 (read the device's own counters,
//! e.g. `rdma statistic` or /sys/class/infiniband/*/ports/1/hw_counters).
//!
//! DEVICE_QPN is the real QP number: a QP is created (INIT) before any host connects and again
//! after each connection ends, and its number is written to the ORSP channel.

use std::collections::VecDeque;
use std::net::IpAddr;

use anyhow::{Context, Result};
use rdmacam_io::verbs::{RcAttrs, Region, VerbsQp, Wc, status_name};
use rdmacam_protocol::orsp::channel::{
    DEV_RECV_DEPTH, DEV_RECV_SIZE, MAX_CTRL_MSG, MSG_HANDLE_BASE,
};
use rdmacam_protocol::orsp::msg::event;
use rdmacam_protocol::rc::{Completion, Instant, WcStatus, WorkRequest};
use sideway::ibverbs::completion::WorkCompletionStatus;
use tracing::{info, warn};

use crate::camera::{CameraCore, FRAME_SLOTS};

/// Send queue depth: one frame's WRITE chunks plus its messages fit many times over.
const SEND_DEPTH: u32 = 256;
/// Message slots (the channel's own slot count is below this).
const MSG_SLOTS: usize = 32;
/// wr_id tag of receives (the channel's tags use bits 48..50).
const RECV_TAG: u64 = 0xffff << 48;

/// The camera's side of the verbs transport.
pub struct VerbsLink {
    device: Option<String>,
    local_ip: IpAddr,
    // fields drop in order: the QP before the memory it may still use
    qp: VerbsQp,
    frames: Vec<Option<Region>>,
    msgs: Region,
    recv: Region,
    backlog: VecDeque<WorkRequest>,
    wcs: Vec<Wc>,
    connected: bool,
    posted: u32,
}

impl std::fmt::Debug for VerbsLink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VerbsLink")
            .field("qp", &self.qp)
            .field("connected", &self.connected)
            .finish_non_exhaustive()
    }
}

impl VerbsLink {
    /// Open `device` (or the one that owns `local_ip`), create the first QP and publish its
    /// number in DEVICE_QPN.
    pub fn open(device: Option<&str>, local_ip: IpAddr, cam: &mut CameraCore) -> Result<Self> {
        let qp = VerbsQp::open(device, local_ip, SEND_DEPTH, DEV_RECV_DEPTH, false)?;
        let msgs = qp.register(MSG_SLOTS * MAX_CTRL_MSG, false)?;
        let recv = qp.register((DEV_RECV_DEPTH * DEV_RECV_SIZE) as usize, false)?;
        info!(
            device = qp.device(),
            gid_index = qp.gid_index(),
            qpn = qp.qpn(),
            max_path_mtu = qp.active_mtu().bytes(),
            "verbs transport: RC QP ready for a host"
        );
        cam.device_mut().orsp_mut().set_device_qpn(qp.qpn());
        // hosts read the largest path MTU from ORSP_CAPS: the port's, not the protocol's 4096
        cam.device_mut().orsp_mut().set_max_pmtu(qp.active_mtu());
        Ok(VerbsLink {
            device: device.map(str::to_owned),
            local_ip,
            qp,
            frames: (0..FRAME_SLOTS).map(|_| None).collect(),
            msgs,
            recv,
            backlog: VecDeque::new(),
            wcs: Vec::new(),
            connected: false,
            posted: 0,
        })
    }

    /// One round: connection changes, a due frame, work requests to the send queue, the CQ.
    /// Returns whether anything happened.
    pub fn step(&mut self, cam: &mut CameraCore, now: Instant) -> bool {
        let mut busy = false;
        if cam.take_disconnect() {
            self.reset(cam);
            busy = true;
        }
        if let Some((p, host_ip)) = cam.take_connect() {
            busy = true;
            let attrs = RcAttrs {
                pmtu: p.pmtu,
                timeout: p.timeout,
                retry_cnt: p.retry_cnt,
                rnr_retry: p.rnr_retry,
                min_rnr_timer: 1,
                traffic_class: p.tos,
            };
            match self.connect(p.host_qpn, host_ip, p.host_sq_psn, p.device_sq_psn, attrs) {
                Ok(()) => {
                    self.connected = true;
                    info!(device = self.qp.device(), qpn = self.qp.qpn(), host = %host_ip, "verbs QP connected (RTS)");
                }
                Err(e) => {
                    warn!("verbs connect failed: {e:#}");
                    cam.device_mut().orsp_failed(event::REMOTE_ERROR);
                    self.reset(cam);
                }
            }
        }
        if !self.connected {
            return busy;
        }
        if let Some((frame, slot)) = cam.next_frame(now) {
            busy = true;
            let size = frame.size();
            match self.frame_region(slot, size) {
                Ok(region) => {
                    cam.render(&frame, &mut region.bytes_mut()[..size]);
                    cam.offer_frame(&frame, slot);
                }
                Err(e) => warn!("frame memory: {e:#}"),
            }
        }
        while let Some(wr) = cam.poll_work() {
            self.backlog.push_back(wr);
        }
        while let Some(wr) = self.backlog.front().copied() {
            if self.posted >= SEND_DEPTH {
                break;
            }
            if let Err(e) = self.post(cam, &wr) {
                warn!("ibv_post_send: {e:#}");
                break;
            }
            self.posted += 1;
            self.backlog.pop_front();
            busy = true;
        }
        self.wcs.clear();
        if self.qp.poll(&mut self.wcs) > 0 {
            busy = true;
            let wcs = std::mem::take(&mut self.wcs);
            let mut failed = false;
            for wc in &wcs {
                if wc.wr_id & RECV_TAG == RECV_TAG {
                    let i = (wc.wr_id & 0xffff) as usize;
                    if wc.status == WorkCompletionStatus::Success {
                        let at = i * DEV_RECV_SIZE as usize;
                        let len = (wc.byte_len as usize).min(DEV_RECV_SIZE as usize);
                        cam.host_message(&self.recv.bytes()[at..at + len]);
                        if let Err(e) = self.qp.post_recv(wc.wr_id, &self.recv, at, DEV_RECV_SIZE) {
                            warn!("ibv_post_recv: {e:#}");
                        }
                    }
                    continue;
                }
                self.posted = self.posted.saturating_sub(1);
                let status = wc_status(wc.status);
                if status != WcStatus::Success && !failed {
                    failed = true;
                    warn!(
                        status = status_name(wc.status),
                        wr_id = wc.wr_id,
                        "verbs send failed: the QP is in the error state, the connection ends"
                    );
                }
                cam.complete(&Completion {
                    wr_id: wc.wr_id,
                    status,
                    kind: rdmacam_protocol::wire::pmtu::MessageKind::Send,
                    len: 0,
                });
            }
            // a failure ended the connection: the next step replaces the QP
            self.wcs = wcs;
        }
        busy
    }

    fn connect(
        &mut self,
        host_qpn: u32,
        host_ip: IpAddr,
        host_sq_psn: u32,
        device_sq_psn: u32,
        attrs: RcAttrs,
    ) -> Result<()> {
        for i in 0..DEV_RECV_DEPTH {
            self.qp.post_recv(
                RECV_TAG | u64::from(i),
                &self.recv,
                (i * DEV_RECV_SIZE) as usize,
                DEV_RECV_SIZE,
            )?;
        }
        self.qp
            .connect(host_qpn, host_ip, host_sq_psn, device_sq_psn, attrs)
    }

    /// Replace the QP with a fresh one in INIT (its number goes to DEVICE_QPN) in a fresh
    /// protection domain; frame memory is registered again on first use.
    fn reset(&mut self, cam: &mut CameraCore) {
        self.connected = false;
        self.backlog.clear();
        self.posted = 0;
        let fresh = VerbsQp::open(
            self.device.as_deref(),
            self.local_ip,
            SEND_DEPTH,
            DEV_RECV_DEPTH,
            false,
        )
        .and_then(|qp| {
            let msgs = qp.register(MSG_SLOTS * MAX_CTRL_MSG, false)?;
            let recv = qp.register((DEV_RECV_DEPTH * DEV_RECV_SIZE) as usize, false)?;
            Ok((qp, msgs, recv))
        });
        match fresh {
            Ok((qp, msgs, recv)) => {
                // old QP first, then the memory it used
                self.qp = qp;
                self.frames.iter_mut().for_each(|f| *f = None);
                self.msgs = msgs;
                self.recv = recv;
                cam.device_mut().orsp_mut().set_device_qpn(self.qp.qpn());
                info!(
                    qpn = self.qp.qpn(),
                    "verbs transport: new RC QP ready for a host"
                );
            }
            Err(e) => warn!("verbs transport: cannot create a new QP: {e:#}"),
        }
    }

    /// The registered memory of frame slot `slot`, at least `size` bytes.
    fn frame_region(&mut self, slot: u32, size: usize) -> Result<&mut Region> {
        let entry = &mut self.frames[slot as usize];
        if entry.as_ref().is_none_or(|r| r.bytes().len() < size) {
            *entry = None;
            *entry = Some(
                self.qp
                    .register(size, false)
                    .context("registering frame memory")?,
            );
        }
        Ok(entry.as_mut().expect("just set"))
    }

    fn post(&mut self, cam: &CameraCore, wr: &WorkRequest) -> Result<()> {
        let h = wr.payload.handle;
        let (region, offset) = if h >= MSG_HANDLE_BASE {
            let slot = (h - MSG_HANDLE_BASE) as usize % MSG_SLOTS;
            let bytes = cam
                .message(h, wr.payload.offset, wr.len as usize)
                .context("message work request without its bytes")?;
            let at = slot * MAX_CTRL_MSG;
            self.msgs.bytes_mut()[at..at + bytes.len()].copy_from_slice(bytes);
            (&self.msgs, at)
        } else {
            let r = self.frames[h as usize]
                .as_ref()
                .context("WRITE from a frame slot with no memory")?;
            (r, wr.payload.offset as usize)
        };
        self.qp.post_send(
            wr.wr_id,
            wr.kind,
            region,
            offset,
            wr.len,
            (wr.remote_va, wr.rkey),
            wr.imm,
            wr.solicited,
        )
    }
}

/// The protocol crate's completion status for a verbs one (what the ORSP channel acts on).
fn wc_status(s: WorkCompletionStatus) -> WcStatus {
    use WorkCompletionStatus as S;
    match s {
        S::Success => WcStatus::Success,
        S::RetryCounterExceededError => WcStatus::RetryExceeded,
        S::ResponderNotReadyRetryCounterExceededError => WcStatus::RnrRetryExceeded,
        S::RemoteInvalidRequestError => WcStatus::RemoteInvalidRequest,
        S::RemoteAccessError => WcStatus::RemoteAccessError,
        S::RemoteOperationError => WcStatus::RemoteOperationalError,
        S::WorkRequestFlushedError => WcStatus::Flushed,
        _ => WcStatus::LocalProtectionError,
    }
}
