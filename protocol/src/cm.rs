//! The IB connection manager over RoCEv2 (`reference/rocev2.md` §5), passive side: hosts call
//! `rdma_connect()` to the camera. CM messages are 256-byte MADs carried as UD SEND ONLY to QP1
//! with the GSI Q_Key; field offsets are from IBTA tables 106-113 as Linux implements them
//! (`include/rdma/ibta_vol1_c12.h`).
//!
//! [`CmListener`] answers REQ with REP (or REJ), moves to connected on RTU, resends REP on a
//! duplicate REQ, holds a REP resend back when the host sends MRA, and tears down on DREQ. The transport sends and receives the MADs.

use core::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use crate::rc::Instant;
use crate::secret::Secret;
use crate::wire::field::{put_u16, put_u32, put_u64, u16_at, u32_at, u64_at};
use crate::wire::pmtu::Pmtu;
use crate::wire::{BthRepr, DethRepr, IbRepr, IpRepr, Opcode, RoceV2Repr, deth};
use crate::wire::{Error, Result};

/// A MAD's length.
pub const MAD_LEN: usize = 256;
/// The MAD header's length.
pub const MAD_HEADER_LEN: usize = 24;
/// Where the REP's private data starts, from the end of the MAD header.
pub const REP_PRIVATE_OFFSET: usize = 36;
/// Management class of the CM.
pub const MGMT_CLASS_CM: u8 = 0x07;
/// CM class version.
pub const CLASS_VERSION: u8 = 2;
/// MAD method "Send".
pub const METHOD_SEND: u8 = 0x03;
/// The RDMA_PS_TCP port space in service IDs.
pub const PS_TCP: u64 = 0x0106;

/// CM attribute IDs.
pub mod attr {
    /// Connection request.
    pub const REQ: u16 = 0x0010;
    /// Message receipt acknowledgement (more time needed).
    pub const MRA: u16 = 0x0011;
    /// Reject.
    pub const REJ: u16 = 0x0012;
    /// Reply.
    pub const REP: u16 = 0x0013;
    /// Ready to use.
    pub const RTU: u16 = 0x0014;
    /// Disconnect request.
    pub const DREQ: u16 = 0x0015;
    /// Disconnect reply.
    pub const DREP: u16 = 0x0016;
}

/// REJ reasons (`include/rdma/ib_cm.h`).
pub mod reason {
    /// No listener on the service ID.
    pub const INVALID_SERVICE_ID: u16 = 8;
    /// Transport type not supported (not RC).
    pub const INVALID_TRANSPORT_TYPE: u16 = 9;
    /// Stale connection.
    pub const STALE_CONNECTION: u16 = 10;
    /// Path MTU not supported.
    pub const INVALID_MTU: u16 = 26;
    /// Consumer reject (the application said no; the private data says why).
    pub const CONSUMER_REJECT: u16 = 28;
}

/// The service ID of an RDMA_PS_TCP port.
pub const fn service_id_tcp(port: u16) -> u64 {
    (PS_TCP << 16) | port as u64
}

/// The MAD header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MadHeader {
    /// Management class (0x07 for the CM).
    pub mgmt_class: u8,
    /// Class version (2).
    pub class_version: u8,
    /// Method (0x03 Send).
    pub method: u8,
    /// Transaction ID (the active side's, reused in every reply).
    pub tid: u64,
    /// Attribute ID: which CM message.
    pub attr_id: u16,
}

impl MadHeader {
    /// Parse the header of a 256-byte MAD.
    pub fn parse(mad: &[u8]) -> Result<Self> {
        if mad.len() < MAD_LEN {
            return Err(Error::Truncated);
        }
        if mad[0] != 1 {
            return Err(Error::BadVersion);
        }
        Ok(MadHeader {
            mgmt_class: mad[1],
            class_version: mad[2],
            method: mad[3],
            tid: u64_at(mad, 8),
            attr_id: u16_at(mad, 16),
        })
    }

    /// Write a CM MAD header (base version 1, class 0x07, version 2, method Send).
    pub fn emit_cm(tid: u64, attr_id: u16, mad: &mut [u8]) {
        mad[..MAD_HEADER_LEN].fill(0);
        mad[0] = 1;
        mad[1] = MGMT_CLASS_CM;
        mad[2] = CLASS_VERSION;
        mad[3] = METHOD_SEND;
        put_u64(mad, 8, tid);
        put_u16(mad, 16, attr_id);
    }
}

/// A connection request (the fields a passive side needs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Req {
    /// The active side's communication ID.
    pub local_comm_id: u32,
    /// Service ID (port space and port).
    pub service_id: u64,
    /// The active side's CA GUID.
    pub local_ca_guid: u64,
    /// The active side's QPN.
    pub local_qpn: u32,
    /// Its first send PSN (our expected receive PSN).
    pub starting_psn: u32,
    /// Transport service type (0 RC, 1 UC).
    pub transport: u8,
    /// Path MTU code (1..5).
    pub path_mtu: u8,
    /// RNR retry count it asks of us.
    pub rnr_retry: u8,
    /// Retry count.
    pub retry_count: u8,
    /// Local ACK timeout (exponent).
    pub local_ack_timeout: u8,
    /// Partition key.
    pub pkey: u16,
    /// The active side's GID.
    pub local_gid: [u8; 16],
    /// Our GID as it sees it.
    pub remote_gid: [u8; 16],
    /// 92 bytes of private data (CMA header + user data for rdma_cm).
    pub private_data: [u8; 92],
}

impl Req {
    /// Parse the REQ body (MAD bytes 24..).
    pub fn parse(d: &[u8]) -> Result<Self> {
        if d.len() < 232 {
            return Err(Error::Truncated);
        }
        let mut g = [[0u8; 16]; 2];
        g[0].copy_from_slice(&d[56..72]);
        g[1].copy_from_slice(&d[72..88]);
        let mut pd = [0u8; 92];
        pd.copy_from_slice(&d[140..232]);
        Ok(Req {
            local_comm_id: u32_at(d, 0),
            service_id: u64_at(d, 8),
            local_ca_guid: u64_at(d, 16),
            local_qpn: u32_at(d, 32) >> 8,
            starting_psn: u32_at(d, 44) >> 8,
            transport: (d[43] >> 1) & 3,
            path_mtu: d[50] >> 4,
            rnr_retry: d[50] & 7,
            retry_count: d[47] & 7,
            local_ack_timeout: d[95] >> 3,
            pkey: u16_at(d, 48),
            local_gid: g[0],
            remote_gid: g[1],
            private_data: pd,
        })
    }
}

/// The rdma_cm header at the start of REQ private data (`struct cma_hdr`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CmaHeader {
    /// The active side's source port.
    pub src_port: u16,
    /// Its address.
    pub src: IpAddr,
    /// The address it connected to.
    pub dst: IpAddr,
}

impl CmaHeader {
    /// Parse from REQ private data; `None` when the version is not 0 or the IP version unknown.
    pub fn parse(pd: &[u8]) -> Option<Self> {
        if pd.len() < 36 || pd[0] != 0 {
            return None;
        }
        let addr = |b: &[u8]| -> Option<IpAddr> {
            match pd[1] >> 4 {
                4 => Some(IpAddr::V4(Ipv4Addr::new(b[12], b[13], b[14], b[15]))),
                6 => Some(IpAddr::V6(Ipv6Addr::from(<[u8; 16]>::try_from(b).ok()?))),
                _ => None,
            }
        };
        Some(CmaHeader {
            src_port: u16_at(pd, 2),
            src: addr(&pd[4..20])?,
            dst: addr(&pd[20..36])?,
        })
    }
}

/// How a CM MAD travels: a RoCEv2 UD SEND ONLY from QP1 to QP1 with the GSI Q_Key (no ACK; the
/// CM retransmits). Emit it with the MAD as payload.
pub fn mad_packet(ip: IpRepr, src_port: u16, dst_port: u16, psn: u32) -> RoceV2Repr {
    let mut bth = BthRepr::new(Opcode::UD_SEND_ONLY, 1, psn & 0x00ff_ffff);
    bth.solicited = false;
    let mut ib = IbRepr::new(bth);
    ib.deth = Some(DethRepr {
        qkey: deth::GSI_QKEY,
        src_qp: 1,
    });
    RoceV2Repr {
        ip,
        src_port,
        dst_port,
        ib,
        payload_len: MAD_LEN,
    }
}

/// The MAD in `ib` (BTH to ICRC) if it is a UD SEND ONLY to QP1 with the GSI Q_Key.
pub fn mad_of(ib: &[u8]) -> Option<&[u8]> {
    let (r, hl) = IbRepr::parse(ib).ok()?;
    let gsi = r.bth.opcode == Opcode::UD_SEND_ONLY
        && r.bth.dest_qp == 1
        && r.deth.is_some_and(|d| d.qkey == deth::GSI_QKEY);
    (gsi && ib.len() >= hl + MAD_LEN).then(|| &ib[hl..hl + MAD_LEN])
}

/// What an active side puts in a REQ (RC, RoCEv2, no alternate path).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReqParams {
    /// Transaction ID (reused by the REP, RTU and REJ).
    pub tid: u64,
    /// Our communication ID: random, non-zero, new per attempt.
    pub local_comm_id: u32,
    /// The passive side's port in the RDMA_PS_TCP space.
    pub service_port: u16,
    /// Our CA GUID.
    pub local_ca_guid: u64,
    /// Our QPN.
    pub local_qpn: u32,
    /// Starting PSN: the one the passive side will send with (Linux semantics, see
    /// [`ListenerConfig::starting_psn`]).
    pub starting_psn: u32,
    /// Path MTU.
    pub pmtu: Pmtu,
    /// Our GID and the passive side's (IPv4-mapped for IPv4).
    pub local_gid: [u8; 16],
    /// The passive side's GID.
    pub remote_gid: [u8; 16],
    /// IP hop limit of the path.
    pub hop_limit: u8,
    /// Local ACK timeout exponent (4.096 µs · 2^n).
    pub local_ack_timeout: u8,
    /// Our UDP/TCP-space source port for the rdma_cm header.
    pub cma_src_port: u16,
}

/// Write an RDMA CM REQ into `mad` (header included): the IBTA REQ with the rdma_cm header
/// (version 0, the IP version, our port and both addresses) and `user_data` (≤ 56 bytes) as
/// private data. Retry counts are 7, the CM response timeouts 20 (4.3 s), Max CM Retries 15.
pub fn emit_req(mad: &mut [u8], p: &ReqParams, user_data: &[u8]) -> Result<()> {
    if mad.len() < MAD_LEN || user_data.len() > 56 {
        return Err(Error::BadLength);
    }
    mad[..MAD_LEN].fill(0);
    MadHeader::emit_cm(p.tid, attr::REQ, mad);
    let d = &mut mad[MAD_HEADER_LEN..MAD_LEN];
    put_u32(d, 0, p.local_comm_id);
    put_u64(d, 8, service_id_tcp(p.service_port));
    put_u64(d, 16, p.local_ca_guid);
    put_u32(d, 32, (p.local_qpn & 0x00ff_ffff) << 8);
    // remote CM response timeout 20, transport RC (0), end-to-end flow control
    d[43] = (20 << 3) | 1;
    // starting PSN, local CM response timeout 20, retry count 7
    put_u32(d, 44, ((p.starting_psn & 0x00ff_ffff) << 8) | (20 << 3) | 7);
    put_u16(d, 48, 0xffff);
    d[50] = ((p.pmtu as u8) << 4) | 7; // path MTU, no RDC, RNR retry 7
    d[51] = 15 << 4; // Max CM Retries
    put_u32(d, 52, 0xffff_ffff); // permissive LIDs (RoCE)
    d[56..72].copy_from_slice(&p.local_gid);
    d[72..88].copy_from_slice(&p.remote_gid);
    d[93] = p.hop_limit;
    d[94] = u8::from(p.hop_limit <= 1) << 3; // subnet local
    d[95] = (p.local_ack_timeout & 0x1f) << 3;
    // rdma_cm header: version 0, IP version, source port, source and destination address
    let v4 = |g: &[u8; 16]| g[..12] == [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff];
    let pd = &mut d[140..232];
    pd[1] = if v4(&p.local_gid) && v4(&p.remote_gid) {
        4 << 4
    } else {
        6 << 4
    };
    put_u16(pd, 2, p.cma_src_port);
    if pd[1] == 4 << 4 {
        pd[16..20].copy_from_slice(&p.local_gid[12..]);
        pd[32..36].copy_from_slice(&p.remote_gid[12..]);
    } else {
        pd[4..20].copy_from_slice(&p.local_gid);
        pd[20..36].copy_from_slice(&p.remote_gid);
    }
    pd[36..36 + user_data.len()].copy_from_slice(user_data);
    Ok(())
}

/// The fields of a REP an active side needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rep {
    /// The passive side's communication ID.
    pub local_comm_id: u32,
    /// Ours, echoed.
    pub remote_comm_id: u32,
    /// The passive side's QPN.
    pub local_qpn: u32,
    /// Starting PSN: the one we send with (Linux semantics).
    pub starting_psn: u32,
    /// RNR retry count it asks for.
    pub rnr_retry: u8,
    /// Its CA GUID.
    pub local_ca_guid: u64,
}

impl Rep {
    /// Parse the REP body (MAD bytes 24..); the private data is at
    /// [`REP_PRIVATE_OFFSET`]..+196.
    pub fn parse(d: &[u8]) -> Result<Self> {
        if d.len() < REP_PRIVATE_OFFSET + 196 {
            return Err(Error::Truncated);
        }
        Ok(Rep {
            local_comm_id: u32_at(d, 0),
            remote_comm_id: u32_at(d, 4),
            local_qpn: u32_at(d, 12) >> 8,
            starting_psn: u32_at(d, 20) >> 8,
            rnr_retry: d[27] >> 5,
            local_ca_guid: u64_at(d, 28),
        })
    }
}

/// Write an RTU, DREQ (with the passive side's QPN in `remote_qpn`) or DREP: the two
/// communication IDs and no private data.
pub fn emit_ids(
    mad: &mut [u8],
    attr_id: u16,
    tid: u64,
    local_comm_id: u32,
    remote_comm_id: u32,
    remote_qpn: Option<u32>,
) -> Result<()> {
    if mad.len() < MAD_LEN {
        return Err(Error::BadLength);
    }
    mad[..MAD_LEN].fill(0);
    MadHeader::emit_cm(tid, attr_id, mad);
    let d = &mut mad[MAD_HEADER_LEN..MAD_LEN];
    put_u32(d, 0, local_comm_id);
    put_u32(d, 4, remote_comm_id);
    if let Some(q) = remote_qpn {
        put_u32(d, 8, (q & 0x00ff_ffff) << 8);
    }
    Ok(())
}

/// Write a REP body into `mad` (header included).
#[allow(clippy::too_many_arguments)]
pub fn emit_rep(
    mad: &mut [u8],
    tid: u64,
    local_comm_id: u32,
    remote_comm_id: u32,
    local_qpn: u32,
    starting_psn: u32,
    rnr_retry: u8,
    local_ca_guid: u64,
    private_data: &[u8],
) -> Result<()> {
    if mad.len() < MAD_LEN || private_data.len() > 196 {
        return Err(Error::BadLength);
    }
    mad[..MAD_LEN].fill(0);
    MadHeader::emit_cm(tid, attr::REP, mad);
    let d = &mut mad[MAD_HEADER_LEN..MAD_LEN];
    put_u32(d, 0, local_comm_id);
    put_u32(d, 4, remote_comm_id);
    put_u32(d, 12, (local_qpn & 0x00ff_ffff) << 8);
    put_u32(d, 20, (starting_psn & 0x00ff_ffff) << 8);
    // target ACK delay 0, failover not supported (1 << 1), end-to-end flow control 1
    d[26] = (1 << 1) | 1;
    d[27] = (rnr_retry & 7) << 5;
    put_u64(d, 28, local_ca_guid);
    d[REP_PRIVATE_OFFSET..REP_PRIVATE_OFFSET + private_data.len()].copy_from_slice(private_data);
    Ok(())
}

/// Write a REJ of a REQ into `mad`.
pub fn emit_rej(
    mad: &mut [u8],
    tid: u64,
    local_comm_id: u32,
    remote_comm_id: u32,
    reason: u16,
    private_data: &[u8],
) -> Result<()> {
    if mad.len() < MAD_LEN || private_data.len() > 148 {
        return Err(Error::BadLength);
    }
    mad[..MAD_LEN].fill(0);
    MadHeader::emit_cm(tid, attr::REJ, mad);
    let d = &mut mad[MAD_HEADER_LEN..MAD_LEN];
    put_u32(d, 0, local_comm_id);
    put_u32(d, 4, remote_comm_id);
    d[8] = 0; // message rejected: REQ
    put_u16(d, 10, reason);
    d[84..84 + private_data.len()].copy_from_slice(private_data);
    Ok(())
}

/// Write a DREP into `mad`.
pub fn emit_drep(mad: &mut [u8], tid: u64, local_comm_id: u32, remote_comm_id: u32) -> Result<()> {
    emit_ids(mad, attr::DREP, tid, local_comm_id, remote_comm_id, None)
}

/// Communication IDs of an RTU, DREQ, DREP or REJ: (sender's local, sender's remote).
pub fn comm_ids(d: &[u8]) -> Result<(u32, u32)> {
    if d.len() < 8 {
        return Err(Error::Truncated);
    }
    Ok((u32_at(d, 0), u32_at(d, 4)))
}

/// MRA "Message MRAed" value for a REP (Table 107: 0 REQ, 1 REP, 2 LAP).
const MRAED_REP: u8 = 1;

/// What the listener is configured with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ListenerConfig {
    /// The port in the RDMA_PS_TCP space (ORSP CM_PORT).
    pub port: u16,
    /// Our QPN.
    pub local_qpn: u32,
    /// The Starting PSN of our REPs: the PSN the active side (the host) sends with. Linux takes
    /// the REP's Starting PSN as the active side's `sq_psn` (`cm_rep_handler`) and as the passive
    /// side's `rq_psn` (`ib_send_cm_rep`); the REQ's is the other direction. Observed on rxe.
    pub starting_psn: u32,
    /// Largest path MTU we accept.
    pub max_pmtu: Pmtu,
    /// Our CA GUID.
    pub ca_guid: u64,
    /// Key of the communication IDs (a new one per connection, drawn from it): a secret, so
    /// that no host can tell the next ID from the ones it has seen (in a REJ, say) and forge a
    /// DREQ.
    pub comm_id_seed: u64,
}

/// The parameters of an accepted connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Accepted {
    /// The host's QPN.
    pub remote_qpn: u32,
    /// The PSN we send with: the REQ's Starting PSN (the host expects it).
    pub send_psn: u32,
    /// The PSN the host sends with: the Starting PSN of our REP.
    pub recv_psn: u32,
    /// Path MTU.
    pub pmtu: Pmtu,
    /// Retry count the host asked for.
    pub retry_count: u8,
    /// RNR retry count.
    pub rnr_retry: u8,
    /// Local ACK timeout exponent.
    pub timeout: u8,
    /// The host's GID.
    pub remote_gid: [u8; 16],
}

/// What a handled MAD leads to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CmEvent {
    /// Nothing (ignored, or a reply was written).
    None,
    /// A REQ was accepted: bring the QP to RTR/RTS with these parameters (REP written).
    Accepting(Accepted),
    /// RTU arrived: the connection is up.
    Established,
    /// DREQ arrived (DREP written): tear the QP down.
    Disconnected,
    /// A REQ was rejected with this reason (REJ written).
    Rejected(u16),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Conn {
    Idle,
    RepSent {
        tid: u64,
        local: u32,
        remote: u32,
        since: Instant,
        tries: u8,
    },
    Connected {
        tid: u64,
        local: u32,
        remote: u32,
    },
}

/// The passive side of the CM for one connection at a time.
#[derive(Debug, Clone)]
pub struct CmListener {
    cfg: ListenerConfig,
    conn: Conn,
    comm_ids: Secret,
    next_comm_id: u32,
    rep_private: [u8; 196],
    rep_private_len: usize,
    last_rep: [u8; MAD_LEN],
}

impl CmListener {
    /// A listener; `rep_private_data` goes into every REP (the ORSP HELLO body).
    pub fn new(cfg: ListenerConfig, rep_private_data: &[u8]) -> Self {
        let mut p = [0u8; 196];
        let n = rep_private_data.len().min(196);
        p[..n].copy_from_slice(&rep_private_data[..n]);
        CmListener {
            cfg,
            conn: Conn::Idle,
            comm_ids: Secret::new(cfg.comm_id_seed),
            next_comm_id: 0,
            rep_private: p,
            rep_private_len: n,
            last_rep: [0; MAD_LEN],
        }
    }

    /// Overwrite `bytes` at `at` of the REP's private data, in `out` (the REP just written by
    /// [`Self::handle_mad`]) and in the copy kept for resends; for values known only once the
    /// REQ is parsed (ORSP puts the negotiated path MTU in its HELLO).
    pub fn patch_rep_private(&mut self, out: &mut [u8; MAD_LEN], at: usize, bytes: &[u8]) {
        let start = MAD_HEADER_LEN + REP_PRIVATE_OFFSET + at;
        if let Some(range) = out.get_mut(start..start + bytes.len()) {
            range.copy_from_slice(bytes);
            self.last_rep[start..start + bytes.len()].copy_from_slice(bytes);
        }
    }

    /// IB CM "communication established": traffic from the peer on the new QP while the REP
    /// waits for its RTU means the RTU was lost; the connection is up. Returns whether it was
    /// waiting.
    pub fn establish(&mut self) -> bool {
        if let Conn::RepSent {
            tid, local, remote, ..
        } = self.conn
        {
            self.conn = Conn::Connected { tid, local, remote };
            return true;
        }
        false
    }

    /// Whether a connection is established.
    pub fn connected(&self) -> bool {
        matches!(self.conn, Conn::Connected { .. })
    }

    /// Forget the connection (QP reset by other means).
    pub fn reset(&mut self) {
        self.conn = Conn::Idle;
    }

    /// Refuse a REQ before looking at it further (the device's admission rule: only the
    /// controlling application may connect): a REJ with `reason` and `private` data is written
    /// to `out` and `true` returned; `false` if `mad` is not a REQ.
    pub fn reject_req(
        &mut self,
        mad: &[u8],
        out: &mut [u8; MAD_LEN],
        reason: u16,
        private: &[u8],
    ) -> bool {
        let Ok(h) = MadHeader::parse(mad) else {
            return false;
        };
        if h.mgmt_class != MGMT_CLASS_CM || h.attr_id != attr::REQ {
            return false;
        }
        let Ok(req) = Req::parse(&mad[MAD_HEADER_LEN..MAD_LEN]) else {
            return false;
        };
        let local = self.fresh_comm_id();
        emit_rej(out, h.tid, local, req.local_comm_id, reason, private).is_ok()
    }

    fn fresh_comm_id(&mut self) -> u32 {
        // a new Local Comm ID per connection, so a reconnect is never taken as stale; never 0
        // (no connection) and never the last one
        let last = self.next_comm_id;
        while self.next_comm_id == last || self.next_comm_id == 0 {
            self.next_comm_id = self.comm_ids.next_u32();
        }
        self.next_comm_id
    }

    /// Handle a received CM MAD; a reply, if any, is written to `out` and `true` returned with the
    /// event.
    pub fn handle_mad(
        &mut self,
        now: Instant,
        mad: &[u8],
        out: &mut [u8; MAD_LEN],
    ) -> (CmEvent, bool) {
        let Ok(h) = MadHeader::parse(mad) else {
            return (CmEvent::None, false);
        };
        if h.mgmt_class != MGMT_CLASS_CM || h.class_version != CLASS_VERSION {
            return (CmEvent::None, false);
        }
        let d = &mad[MAD_HEADER_LEN..MAD_LEN];
        match h.attr_id {
            attr::REQ => {
                let Ok(req) = Req::parse(d) else {
                    return (CmEvent::None, false);
                };
                // a retransmitted REQ: send the same REP again
                if let Conn::RepSent { remote, .. } | Conn::Connected { remote, .. } = self.conn
                    && remote == req.local_comm_id
                {
                    out.copy_from_slice(&self.last_rep);
                    return (CmEvent::None, true);
                }
                let reject = |this: &mut Self, out: &mut [u8; MAD_LEN], reason: u16, pd: &[u8]| {
                    let local = this.fresh_comm_id();
                    let _ = emit_rej(out, h.tid, local, req.local_comm_id, reason, pd);
                    (CmEvent::Rejected(reason), true)
                };
                if req.service_id != service_id_tcp(self.cfg.port) {
                    return reject(self, out, reason::INVALID_SERVICE_ID, &[]);
                }
                if req.transport != 0 {
                    return reject(self, out, reason::INVALID_TRANSPORT_TYPE, &[]);
                }
                let Some(pmtu) = Pmtu::from_code(req.path_mtu).filter(|p| *p <= self.cfg.max_pmtu)
                else {
                    return reject(self, out, reason::INVALID_MTU, &[]);
                };
                if !matches!(self.conn, Conn::Idle) {
                    // ORSP reason in the private data: "busy" (already connected)
                    return reject(
                        self,
                        out,
                        reason::CONSUMER_REJECT,
                        b"ORSP busy: already connected",
                    );
                }
                let local = self.fresh_comm_id();
                let pd = self.rep_private;
                let _ = emit_rep(
                    out,
                    h.tid,
                    local,
                    req.local_comm_id,
                    self.cfg.local_qpn,
                    self.cfg.starting_psn,
                    7,
                    self.cfg.ca_guid,
                    &pd[..self.rep_private_len],
                );
                self.last_rep.copy_from_slice(out);
                self.conn = Conn::RepSent {
                    tid: h.tid,
                    local,
                    remote: req.local_comm_id,
                    since: now,
                    tries: 0,
                };
                (
                    CmEvent::Accepting(Accepted {
                        remote_qpn: req.local_qpn,
                        send_psn: req.starting_psn,
                        recv_psn: self.cfg.starting_psn,
                        pmtu,
                        retry_count: req.retry_count,
                        rnr_retry: req.rnr_retry,
                        timeout: req.local_ack_timeout,
                        remote_gid: req.local_gid,
                    }),
                    true,
                )
            }
            attr::RTU => match (self.conn, comm_ids(d)) {
                (
                    Conn::RepSent {
                        tid, local, remote, ..
                    },
                    Ok((their, ours)),
                ) if their == remote && ours == local => {
                    self.conn = Conn::Connected { tid, local, remote };
                    (CmEvent::Established, false)
                }
                _ => (CmEvent::None, false),
            },
            attr::DREQ => match (self.conn, comm_ids(d)) {
                (
                    Conn::Connected {
                        tid: _,
                        local,
                        remote,
                    }
                    | Conn::RepSent { local, remote, .. },
                    Ok((their, ours)),
                ) if their == remote && ours == local => {
                    let _ = emit_drep(out, h.tid, local, remote);
                    self.conn = Conn::Idle;
                    (CmEvent::Disconnected, true)
                }
                _ => (CmEvent::None, false),
            },
            // "give me more time" for our REP (Message MRAed = 1): the REP waits that much
            // longer (Service Timeout: 4.096 µs · 2^t) before it is resent
            attr::MRA => match (self.conn, comm_ids(d)) {
                (
                    Conn::RepSent {
                        tid,
                        local,
                        remote,
                        tries,
                        ..
                    },
                    Ok((their, ours)),
                ) if their == remote && ours == local && d[8] >> 6 == MRAED_REP => {
                    let extra = core::time::Duration::from_nanos(4096u64 << (d[9] >> 3));
                    self.conn = Conn::RepSent {
                        tid,
                        local,
                        remote,
                        since: now + extra,
                        tries,
                    };
                    (CmEvent::None, false)
                }
                _ => (CmEvent::None, false),
            },
            attr::REJ => match (self.conn, comm_ids(d)) {
                (Conn::RepSent { local, remote, .. }, Ok((their, ours)))
                    if their == remote && ours == local =>
                {
                    self.conn = Conn::Idle;
                    (CmEvent::Disconnected, false)
                }
                _ => (CmEvent::None, false),
            },
            _ => (CmEvent::None, false),
        }
    }

    /// When the REP should be resent if no RTU came (CM response timeout ≈ 4.3 s per try).
    pub fn poll_timeout(&self) -> Option<Instant> {
        match self.conn {
            Conn::RepSent { since, tries, .. } => {
                Some(since + core::time::Duration::from_millis(4295 * (u64::from(tries) + 1)))
            }
            _ => None,
        }
    }

    /// Resend the REP (written to `out`, returns true) or give up after 15 tries.
    pub fn handle_timeout(&mut self, now: Instant, out: &mut [u8; MAD_LEN]) -> bool {
        if let Conn::RepSent {
            tid,
            local,
            remote,
            since,
            tries,
        } = self.conn
            && self.poll_timeout().is_some_and(|t| now >= t)
        {
            if tries >= 15 {
                self.conn = Conn::Idle;
                return false;
            }
            self.conn = Conn::RepSent {
                tid,
                local,
                remote,
                since,
                tries: tries + 1,
            };
            out.copy_from_slice(&self.last_rep);
            return true;
        }
        false
    }
}
