//! Real verbs through [`sideway`] (cargo feature `verbs`): one RDMA device, one RoCEv2 GID, a
//! protection domain, one completion queue and one RC queue pair, with registered memory. The
//! reference host (`rdmacam-host --transport verbs`) and the emulator's verbs transport
//! (`rdmacam run --transport verbs`) both use this and nothing else of libibverbs.
//!
//! The steps are the ones every RC program takes (rdma-core's `ibv_rc_pingpong` is the classic
//! example): `ibv_open_device`, `ibv_query_gid_ex` over the GID table to find the RoCEv2 GID of
//! our IP address, `ibv_alloc_pd`, `ibv_create_cq`, `ibv_create_qp` (RC), `ibv_modify_qp` to
//! INIT (port, P_Key index 0, access flags), then to RTR (path MTU, remote QPN, receive PSN,
//! address vector with the remote GID) and RTS (send PSN, timeout, retry counts).

use std::net::{IpAddr, Ipv6Addr};
use std::sync::Arc;

use anyhow::{Context, Result, bail};
use sideway::ibverbs::AccessFlags;
use sideway::ibverbs::address::{AddressHandleAttribute, Gid, GidType};
use sideway::ibverbs::completion::{
    BasicCompletionQueue, CompletionChannel, CompletionQueue, WorkCompletionStatus,
};
use sideway::ibverbs::device::{DeviceInfo, DeviceList};
use sideway::ibverbs::device_context::{DeviceContext, Mtu, PortState};
use sideway::ibverbs::memory_region::MemoryRegion;
use sideway::ibverbs::protection_domain::ProtectionDomain;
use sideway::ibverbs::queue_pair::{
    BasicQueuePair, PostSendGuard, QueuePair, QueuePairAttribute, QueuePairState,
    SetScatterGatherEntry, WorkRequestFlags,
};

use rdmacam_protocol::wire::pmtu::{MessageKind, Pmtu};

/// The port every RoCE device here has.
pub const PORT: u8 = 1;

/// The RoCEv2 GID of an IP address: IPv4 as `::ffff:a.b.c.d`, IPv6 as itself.
pub fn gid_of(ip: IpAddr) -> Ipv6Addr {
    match ip {
        IpAddr::V4(v4) => v4.to_ipv6_mapped(),
        IpAddr::V6(v6) => v6,
    }
}

/// The libibverbs name of a work completion status (`IBV_WC_RETRY_EXC_ERR`, ...).
pub fn status_name(s: WorkCompletionStatus) -> &'static str {
    use WorkCompletionStatus as S;
    match s {
        S::Success => "IBV_WC_SUCCESS",
        S::LocalLengthError => "IBV_WC_LOC_LEN_ERR",
        S::LocalQueuePairOperationError => "IBV_WC_LOC_QP_OP_ERR",
        S::LocalProtectionError => "IBV_WC_LOC_PROT_ERR",
        S::WorkRequestFlushedError => "IBV_WC_WR_FLUSH_ERR",
        S::BadResponseError => "IBV_WC_BAD_RESP_ERR",
        S::LocalAccessError => "IBV_WC_LOC_ACCESS_ERR",
        S::RemoteInvalidRequestError => "IBV_WC_REM_INV_REQ_ERR",
        S::RemoteAccessError => "IBV_WC_REM_ACCESS_ERR",
        S::RemoteOperationError => "IBV_WC_REM_OP_ERR",
        S::RetryCounterExceededError => "IBV_WC_RETRY_EXC_ERR",
        S::ResponderNotReadyRetryCounterExceededError => "IBV_WC_RNR_RETRY_EXC_ERR",
        S::RemoteAbortedError => "IBV_WC_REM_ABORT_ERR",
        S::FatalError => "IBV_WC_FATAL_ERR",
        S::ResponseTimeoutError => "IBV_WC_RESP_TIMEOUT_ERR",
        S::GeneralError => "IBV_WC_GENERAL_ERR",
        _ => "IBV_WC_(other error)",
    }
}

fn mtu_of(p: Pmtu) -> Mtu {
    match p {
        Pmtu::Mtu256 => Mtu::Mtu256,
        Pmtu::Mtu512 => Mtu::Mtu512,
        Pmtu::Mtu1024 => Mtu::Mtu1024,
        Pmtu::Mtu2048 => Mtu::Mtu2048,
        Pmtu::Mtu4096 => Mtu::Mtu4096,
    }
}

fn pmtu_of(m: Mtu) -> Pmtu {
    match m {
        Mtu::Mtu256 => Pmtu::Mtu256,
        Mtu::Mtu512 => Pmtu::Mtu512,
        Mtu::Mtu1024 => Pmtu::Mtu1024,
        Mtu::Mtu2048 => Pmtu::Mtu2048,
        Mtu::Mtu4096 => Pmtu::Mtu4096,
    }
}

/// Memory registered with the device. The buffer never moves or grows, so the address the
/// device was given stays valid until the region is dropped (deregistration first).
pub struct Region {
    mr: Arc<MemoryRegion>,
    buf: Box<[u8]>,
}

impl Region {
    /// The bytes.
    pub fn bytes(&self) -> &[u8] {
        &self.buf
    }

    /// The bytes, to fill before a SEND or WRITE reads them.
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        &mut self.buf
    }

    /// Virtual address of byte `offset` (what a peer's WRITE targets).
    pub fn addr(&self, offset: usize) -> u64 {
        self.buf.as_ptr() as u64 + offset as u64
    }

    /// Local key.
    pub fn lkey(&self) -> u32 {
        self.mr.lkey()
    }

    /// Remote key (what a peer puts in its RETH).
    pub fn rkey(&self) -> u32 {
        self.mr.rkey()
    }
}

/// One work completion, copied out of the CQ.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Wc {
    /// The work request's id.
    pub wr_id: u64,
    /// Outcome.
    pub status: WorkCompletionStatus,
    /// Bytes received (receives only; the caller tells receives from sends by its wr_id).
    pub byte_len: u32,
}

/// How the RC connection behaves (the QP attributes of RTR and RTS).
#[derive(Debug, Clone, Copy)]
pub struct RcAttrs {
    /// Path MTU.
    pub pmtu: Pmtu,
    /// Local ACK timeout exponent (4.096 µs · 2^timeout).
    pub timeout: u8,
    /// Retries after a timeout or sequence NAK (0..=7).
    pub retry_cnt: u8,
    /// Retries after an RNR NAK (7 = forever).
    pub rnr_retry: u8,
    /// RNR NAK timer code this side asks peers to wait.
    pub min_rnr_timer: u8,
    /// IP traffic class (DSCP << 2 | ECN) of what this side sends.
    pub traffic_class: u8,
}

/// One RC queue pair on one RDMA device.
pub struct VerbsQp {
    // drop order: QP, then CQ, then PD, then the context
    qp: Option<BasicQueuePair>,
    qpn: u32,
    cq: Arc<BasicCompletionQueue>,
    channel: Arc<CompletionChannel>,
    pd: Arc<ProtectionDomain>,
    _ctx: Arc<DeviceContext>,
    device: String,
    gid_index: u8,
    active_mtu: Pmtu,
    state: QueuePairState,
}

impl std::fmt::Debug for VerbsQp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VerbsQp")
            .field("device", &self.device)
            .field("gid_index", &self.gid_index)
            .field("qpn", &self.qpn)
            .finish_non_exhaustive()
    }
}

impl VerbsQp {
    /// Open `device` (or the one whose GID table holds `ip`), find the RoCEv2 GID of `ip`,
    /// and create an RC QP in INIT with room for `send_depth`/`recv_depth` work requests.
    /// `remote_write`: peers may RDMA WRITE into our memory (the host).
    pub fn open(
        device: Option<&str>,
        ip: IpAddr,
        send_depth: u32,
        recv_depth: u32,
        remote_write: bool,
    ) -> Result<Self> {
        let list = DeviceList::new().context(
            "cannot list RDMA devices: is libibverbs installed (ibverbs-providers), and does this \
             kernel have RDMA (an RDMA NIC's driver, or rdma_rxe for Soft-RoCE)?",
        )?;
        if list.is_empty() {
            bail!(
                "no RDMA device: load a driver, or add Soft-RoCE with `rdma link add rxe0 type rxe netdev <if>`"
            );
        }
        let want = Gid::from(gid_of(ip));
        let mut seen = Vec::new();
        let mut found = None;
        for dev in list.iter() {
            let name = dev.name();
            if device.is_some_and(|d| d != name) {
                continue;
            }
            let ctx = dev
                .open()
                .with_context(|| format!("cannot open RDMA device {name}"))?;
            let table = ctx
                .query_gid_table()
                .with_context(|| format!("cannot read the GID table of {name}"))?;
            let entry = table
                .iter()
                .find(|e| e.gid() == want && e.gid_type() == GidType::RoceV2);
            match entry {
                Some(e) => {
                    found = Some((name, ctx, e.gid_index(), e.port_num()));
                    break;
                }
                None => seen.push(format!(
                    "{name}: {}",
                    table
                        .iter()
                        .filter(|e| e.gid_type() == GidType::RoceV2)
                        .map(|e| format!("[{}] {}", e.gid_index(), Ipv6Addr::from(e.gid())))
                        .collect::<Vec<_>>()
                        .join(", ")
                )),
            }
        }
        let Some((name, ctx, gid_index, port)) = found else {
            if let Some(d) = device
                && seen.is_empty()
            {
                let names: Vec<String> = list.iter().map(|d| d.name()).collect();
                bail!("no RDMA device named {d} (have: {})", names.join(", "));
            }
            bail!(
                "no RoCEv2 GID for {ip} on {} (RoCEv2 GIDs: {}); is {ip} configured on the \
                 device's network interface?",
                device.unwrap_or("any RDMA device"),
                if seen.is_empty() {
                    "none".to_owned()
                } else {
                    seen.join("; ")
                }
            );
        };
        let port = u8::try_from(port).unwrap_or(PORT);
        let pattr = ctx
            .query_port(port)
            .with_context(|| format!("cannot query port {port} of {name}"))?;
        if pattr.port_state() != PortState::Active {
            bail!(
                "port {port} of {name} is {:?}, not active (is its network interface up?)",
                pattr.port_state()
            );
        }
        let active_mtu = pmtu_of(pattr.active_mtu());
        let pd = ctx
            .alloc_pd()
            .with_context(|| format!("ibv_alloc_pd on {name}"))?;
        // a completion channel, so a host can sleep until a solicited completion (the TRAILER)
        let channel = CompletionChannel::new(&ctx)
            .with_context(|| format!("ibv_create_comp_channel on {name}"))?;
        channel
            .set_nonblocking(true)
            .context("completion channel O_NONBLOCK")?;
        let cq = ctx
            .create_cq_builder()
            .setup_cqe(send_depth + recv_depth)
            .setup_comp_channel(&channel, 0)
            .build()
            .with_context(|| format!("ibv_create_cq on {name}"))?;
        let mut qp = pd
            .create_qp_builder()
            .setup_max_send_wr(send_depth)
            .setup_max_recv_wr(recv_depth)
            .setup_max_send_sge(1)
            .setup_max_recv_sge(1)
            .setup_send_cq(Arc::clone(&cq))
            .setup_recv_cq(Arc::clone(&cq))
            .build()
            .with_context(|| format!("ibv_create_qp (RC) on {name}"))?;
        let mut access = AccessFlags::LocalWrite;
        if remote_write {
            access |= AccessFlags::RemoteWrite;
        }
        let mut attr = QueuePairAttribute::new();
        attr.setup_state(QueuePairState::Init)
            .setup_pkey_index(0)
            .setup_port(port)
            .setup_access_flags(access);
        qp.modify(&attr)
            .with_context(|| format!("ibv_modify_qp to INIT on {name}"))?;
        Ok(VerbsQp {
            qpn: qp.qp_number(),
            qp: Some(qp),
            cq,
            channel,
            pd,
            _ctx: ctx,
            device: name,
            gid_index: u8::try_from(gid_index).context("GID index above 255")?,
            active_mtu,
            state: QueuePairState::Init,
        })
    }

    /// The device's name.
    pub fn device(&self) -> &str {
        &self.device
    }

    /// Our QP number.
    pub fn qpn(&self) -> u32 {
        self.qpn
    }

    /// Destroy the QP now (`ibv_destroy_qp`), keeping the CQ, PD and registered memory: the
    /// peer's packets then find no QP (a host that vanished, for tests). Later posts fail.
    pub fn destroy_qp(&mut self) {
        self.qp = None;
        self.state = QueuePairState::Reset;
    }

    fn live(&mut self) -> Result<&mut BasicQueuePair> {
        self.qp.as_mut().context("the QP was destroyed")
    }

    /// The GID index of our address.
    pub fn gid_index(&self) -> u8 {
        self.gid_index
    }

    /// The port's active MTU (the largest path MTU the link carries; rxe derives it from the
    /// network interface's MTU).
    pub fn active_mtu(&self) -> Pmtu {
        self.active_mtu
    }

    /// Register `len` zeroed bytes.
    pub fn register(&self, len: usize, remote_write: bool) -> Result<Region> {
        let buf = vec![0u8; len.max(1)].into_boxed_slice();
        let mut access = AccessFlags::LocalWrite;
        if remote_write {
            access |= AccessFlags::RemoteWrite;
        }
        // SAFETY: `buf` is a live heap allocation of `buf.len()` bytes that the Region owns and
        // never reallocates; the Region drops the MR (deregisters) before the buffer.
        let mr = unsafe { self.pd.reg_mr(buf.as_ptr() as usize, buf.len(), access) }
            .with_context(|| format!("ibv_reg_mr of {len} bytes on {}", self.device))?;
        Ok(Region { mr, buf })
    }

    /// INIT → RTR → RTS towards `remote_qpn` at `remote_ip`: we receive from PSN `rq_psn` and
    /// send from `sq_psn`.
    pub fn connect(
        &mut self,
        remote_qpn: u32,
        remote_ip: IpAddr,
        rq_psn: u32,
        sq_psn: u32,
        a: RcAttrs,
    ) -> Result<()> {
        if a.pmtu > self.active_mtu {
            bail!(
                "path MTU {} is larger than the active MTU {} of {} port {PORT} (raise the \
                 network interface's MTU, or ask for a smaller path MTU)",
                a.pmtu.bytes(),
                self.active_mtu.bytes(),
                self.device
            );
        }
        let mut av = AddressHandleAttribute::new();
        av.setup_dest_lid(0)
            .setup_port(PORT)
            .setup_service_level(0)
            .setup_grh(
                &Gid::from(gid_of(remote_ip)),
                0,
                self.gid_index,
                64,
                a.traffic_class,
            );
        let mut attr = QueuePairAttribute::new();
        attr.setup_state(QueuePairState::ReadyToReceive)
            .setup_path_mtu(mtu_of(a.pmtu))
            .setup_dest_qp_num(remote_qpn)
            .setup_rq_psn(rq_psn & 0x00ff_ffff)
            .setup_max_dest_read_atomic(0)
            .setup_min_rnr_timer(a.min_rnr_timer)
            .setup_address_vector(&av);
        let device = self.device.clone();
        self.live()?.modify(&attr).with_context(|| {
            format!("ibv_modify_qp to RTR (remote QPN {remote_qpn:#x} at {remote_ip}) on {device}")
        })?;
        self.state = QueuePairState::ReadyToReceive;
        let mut attr = QueuePairAttribute::new();
        attr.setup_state(QueuePairState::ReadyToSend)
            .setup_sq_psn(sq_psn & 0x00ff_ffff)
            .setup_timeout(a.timeout)
            .setup_retry_cnt(a.retry_cnt)
            .setup_rnr_retry(a.rnr_retry)
            .setup_max_read_atomic(0);
        self.live()?
            .modify(&attr)
            .with_context(|| format!("ibv_modify_qp to RTS on {device}"))?;
        self.state = QueuePairState::ReadyToSend;
        Ok(())
    }

    /// RTR then RTS with attributes someone else computed (the RDMA CM's `rdma_init_qp_attr`).
    pub fn connect_with(
        &mut self,
        rtr: &QueuePairAttribute,
        rts: &QueuePairAttribute,
    ) -> Result<Pmtu> {
        let device = self.device.clone();
        let pmtu = pmtu_of(rtr.path_mtu());
        self.live()?
            .modify(rtr)
            .with_context(|| format!("ibv_modify_qp to RTR (RDMA CM attributes) on {device}"))?;
        self.state = QueuePairState::ReadyToReceive;
        self.live()?
            .modify(rts)
            .with_context(|| format!("ibv_modify_qp to RTS (RDMA CM attributes) on {device}"))?;
        self.state = QueuePairState::ReadyToSend;
        Ok(pmtu)
    }

    /// Whether the QP reached RTS.
    pub fn connected(&self) -> bool {
        self.state == QueuePairState::ReadyToSend
    }

    /// Post a receive of up to `len` bytes at `offset` of `region`.
    pub fn post_recv(
        &mut self,
        wr_id: u64,
        region: &Region,
        offset: usize,
        len: u32,
    ) -> Result<()> {
        assert!(
            offset + len as usize <= region.buf.len(),
            "receive outside its region"
        );
        let mut guard = self.live()?.start_post_recv();
        let wr = guard.construct_wr(wr_id);
        // SAFETY: the range lies inside the registered region, which outlives the QP's use of
        // it (the caller keeps the Region alive while the QP exists).
        unsafe { wr.setup_sge(region.lkey(), region.addr(offset), len) };
        guard.post().context("ibv_post_recv")?;
        Ok(())
    }

    /// Post a SEND or RDMA WRITE (optionally with immediate) of `len` bytes from `offset` of
    /// `region`.
    #[allow(clippy::too_many_arguments)]
    pub fn post_send(
        &mut self,
        wr_id: u64,
        kind: MessageKind,
        region: &Region,
        offset: usize,
        len: u32,
        remote: (u64, u32),
        imm: u32,
        solicited: bool,
    ) -> Result<()> {
        assert!(
            offset + len as usize <= region.buf.len(),
            "send outside its region"
        );
        let mut flags = WorkRequestFlags::Signaled;
        if solicited {
            flags |= WorkRequestFlags::Solicited;
        }
        let (remote_va, rkey) = remote;
        let mut guard = self.live()?.start_post_send();
        let wr = guard.construct_wr(wr_id, flags);
        let wr = match kind {
            MessageKind::Send => wr.setup_send(),
            MessageKind::SendImm => wr.setup_send_imm(imm),
            MessageKind::Write => wr.setup_write(rkey, remote_va),
            MessageKind::WriteImm => wr.setup_write_imm(rkey, remote_va, imm),
        };
        // SAFETY: as in post_recv: inside the registered region, which outlives the request.
        unsafe { wr.setup_sge(region.lkey(), region.addr(offset), len) };
        guard.post().context("ibv_post_send")?;
        Ok(())
    }

    /// Completions waiting in the CQ (non-blocking), appended to `out`.
    pub fn poll(&self, out: &mut Vec<Wc>) -> usize {
        let before = out.len();
        if let Ok(poller) = self.cq.start_poll() {
            for wc in poller {
                out.push(Wc {
                    wr_id: wc.wr_id(),
                    status: WorkCompletionStatus::from(wc.status()),
                    byte_len: wc.byte_len(),
                });
            }
        }
        out.len() - before
    }
}

impl VerbsQp {
    /// Wait up to `timeout` for a solicited completion (the camera's TRAILERs are sent
    /// solicited), then poll: `ibv_req_notify_cq(cq, solicited_only = 1)`, one more poll for
    /// what came before arming, then `poll(2)` on the completion channel and
    /// `ibv_get_cq_event` + `ibv_ack_cq_events`. Returns how many completions were appended.
    pub fn wait_solicited(&self, out: &mut Vec<Wc>, timeout: std::time::Duration) -> Result<usize> {
        // SAFETY: the CQ outlives this call (we hold its Arc); req_notify only arms it.
        let cq = unsafe { self.cq.cq() };
        let rc = unsafe { rdma_mummy_sys::ibv_req_notify_cq(cq.as_ptr(), 1) };
        if rc != 0 {
            bail!(
                "ibv_req_notify_cq failed: {}",
                std::io::Error::from_raw_os_error(rc)
            );
        }
        let n = self.poll(out);
        if n > 0 {
            return Ok(n);
        }
        let mut pfd = libc::pollfd {
            fd: std::os::fd::AsRawFd::as_raw_fd(&*self.channel),
            events: libc::POLLIN,
            revents: 0,
        };
        let ms = i32::try_from(timeout.as_millis()).unwrap_or(i32::MAX);
        // SAFETY: one valid pollfd for the duration of the call.
        let ready = unsafe { libc::poll(&mut pfd, 1, ms) };
        if ready > 0 {
            let mut ev_cq = std::ptr::null_mut();
            let mut ctx = std::ptr::null_mut();
            // SAFETY: the channel is live; the out-pointers are valid locals. The fd is
            // non-blocking, so a spurious wake-up returns -1 instead of blocking.
            let got = unsafe {
                rdma_mummy_sys::ibv_get_cq_event(
                    self.channel.comp_channel().as_ptr(),
                    &mut ev_cq,
                    &mut ctx,
                )
            };
            if got == 0 {
                // SAFETY: the event's CQ is ours; every event is acknowledged exactly once.
                unsafe { rdma_mummy_sys::ibv_ack_cq_events(ev_cq, 1) };
            }
        }
        Ok(self.poll(out))
    }
}
