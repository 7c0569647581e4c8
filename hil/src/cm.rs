//! The host's side of the RDMA CM on the soft transport: an IB CM active side (REQ, RTU, DREQ)
//! over the same UDP RoCEv2 socket as the data, as `rdma_connect()` would do with a kernel CM.
//! Used by `rdmacam-host --connect cm` against a camera listening on `OrspCmPort`.

use std::net::IpAddr;
use std::time::{Duration, Instant as StdInstant};

use anyhow::{Result, bail};
use rdmacam_protocol::cm::{self, MAD_LEN, MadHeader, Rep, ReqParams, attr, reason};
use rdmacam_protocol::orsp::msg::Hello;
use rdmacam_protocol::wire::IpRepr;
use rdmacam_protocol::wire::pmtu::Pmtu;

use rdmacam_io::roce::RoceSocket;

/// An established CM connection, as the host needs it.
#[derive(Debug, Clone, Copy)]
pub struct CmConnection {
    /// The camera's QPN (from the REP).
    pub device_qpn: u32,
    /// The PSN the camera sends with (our REQ's Starting PSN).
    pub device_sq_psn: u32,
    /// The PSN we send with (the REP's Starting PSN).
    pub host_sq_psn: u32,
    /// The HELLO in the REP's private data.
    pub hello: Hello,
    tid: u64,
    local_comm_id: u32,
    remote_comm_id: u32,
}

/// The GID of an address: IPv4-mapped for IPv4.
pub fn gid(ip: IpAddr) -> [u8; 16] {
    match ip {
        IpAddr::V4(v4) => v4.to_ipv6_mapped().octets(),
        IpAddr::V6(v6) => v6.octets(),
    }
}

fn send_mad(
    roce: &mut RoceSocket,
    local: IpAddr,
    camera: IpAddr,
    camera_port: u16,
    psn: u32,
    mad: &[u8; MAD_LEN],
) -> Result<()> {
    let ip = match (local, camera) {
        (IpAddr::V4(a), IpAddr::V4(b)) => IpRepr::v4(a, b),
        (IpAddr::V6(a), IpAddr::V6(b)) => IpRepr::v6(a, b),
        _ => bail!("the host's and the camera's RoCEv2 addresses are of different families"),
    };
    let r = cm::mad_packet(ip, roce.tx_port(), camera_port, psn);
    let mut pkt = vec![0u8; r.buffer_len()];
    r.emit(&mut pkt, mad)
        .map_err(|e| anyhow::anyhow!("CM packet: {e:?}"))?;
    roce.send(&pkt)?;
    Ok(())
}

/// What an IB CM rejection reason means for a host.
fn reason_text(r: u16) -> &'static str {
    match r {
        reason::INVALID_SERVICE_ID => "invalid service ID: nothing listens on that port",
        reason::INVALID_TRANSPORT_TYPE => "invalid transport type",
        reason::STALE_CONNECTION => "stale connection",
        reason::INVALID_MTU => "path MTU above the camera's",
        reason::CONSUMER_REJECT => "refused by the camera",
        _ => "see IBTA Vol 1 table 109",
    }
}

/// `rdma_connect()`: REQ (resent every second, 5 tries), REP → RTU. A REJ is an error that
/// says why.
#[allow(clippy::too_many_arguments)]
pub fn connect(
    roce: &mut RoceSocket,
    local: IpAddr,
    camera: IpAddr,
    camera_port: u16,
    service_port: u16,
    host_qpn: u32,
    device_sq_psn: u32,
    pmtu: Pmtu,
) -> Result<CmConnection> {
    let local_comm_id = (host_qpn.wrapping_mul(0x9e37_79b1) ^ device_sq_psn) | 1;
    let tid = u64::from(local_comm_id);
    let p = ReqParams {
        tid,
        local_comm_id,
        service_port,
        local_ca_guid: 0x0252_00ff_fe00_0000 | u64::from(host_qpn),
        local_qpn: host_qpn,
        starting_psn: device_sq_psn,
        pmtu,
        local_gid: gid(local),
        remote_gid: gid(camera),
        hop_limit: 64,
        local_ack_timeout: crate::host::HOST_ACK_TIMEOUT,
        cma_src_port: roce.tx_port(),
    };
    let mut req = [0u8; MAD_LEN];
    cm::emit_req(&mut req, &p, &[])?;
    let mut rx = vec![0u8; 65536];
    for attempt in 0..5u32 {
        send_mad(roce, local, camera, camera_port, attempt, &req)?;
        let sent = StdInstant::now();
        while sent.elapsed() < Duration::from_secs(1) {
            let Some((_, _, ib)) = roce.recv(&mut rx) else {
                std::thread::sleep(Duration::from_millis(1));
                continue;
            };
            let Some(mad) = cm::mad_of(ib) else { continue };
            let Ok(h) = MadHeader::parse(mad) else {
                continue;
            };
            let d = &mad[cm::MAD_HEADER_LEN..];
            let ids = cm::comm_ids(d)?;
            if h.tid != tid || ids.1 != local_comm_id {
                continue;
            }
            match h.attr_id {
                attr::REJ => {
                    let r = u16::from_be_bytes([d[10], d[11]]);
                    let pd = &d[84..];
                    let text = String::from_utf8_lossy(
                        &pd[..pd.iter().position(|b| *b == 0).unwrap_or(pd.len())],
                    )
                    .into_owned();
                    bail!(
                        "the camera rejected the RDMA CM connection to port {service_port}: reason {r} ({}){}",
                        reason_text(r),
                        if text.is_empty() {
                            String::new()
                        } else {
                            format!(": {text}")
                        }
                    );
                }
                attr::REP => {
                    let rep = Rep::parse(d)?;
                    let pd = &d[cm::REP_PRIVATE_OFFSET..];
                    let hello = Hello::parse(pd).map_err(|e| {
                        anyhow::anyhow!("the REP's private data is not an ORSP HELLO ({e:?})")
                    })?;
                    let mut rtu = [0u8; MAD_LEN];
                    cm::emit_ids(
                        &mut rtu,
                        attr::RTU,
                        tid,
                        local_comm_id,
                        rep.local_comm_id,
                        None,
                    )?;
                    send_mad(roce, local, camera, camera_port, attempt + 1, &rtu)?;
                    return Ok(CmConnection {
                        device_qpn: rep.local_qpn,
                        device_sq_psn,
                        host_sq_psn: rep.starting_psn,
                        hello,
                        tid,
                        local_comm_id,
                        remote_comm_id: rep.local_comm_id,
                    });
                }
                _ => {}
            }
        }
    }
    bail!(
        "no answer to the RDMA CM REQ from {} after 5 tries: does the camera listen (OrspCmPort)?",
        std::net::SocketAddr::new(camera, camera_port)
    )
}

/// `rdma_disconnect()`: DREQ, and wait up to a second for the DREP (other packets are dropped).
pub fn disconnect(
    roce: &mut RoceSocket,
    local: IpAddr,
    camera: IpAddr,
    camera_port: u16,
    c: &CmConnection,
) -> Result<bool> {
    let mut dreq = [0u8; MAD_LEN];
    let tid = c.tid.wrapping_add(1);
    cm::emit_ids(
        &mut dreq,
        attr::DREQ,
        tid,
        c.local_comm_id,
        c.remote_comm_id,
        Some(c.device_qpn),
    )?;
    send_mad(roce, local, camera, camera_port, 100, &dreq)?;
    let mut rx = vec![0u8; 65536];
    let sent = StdInstant::now();
    while sent.elapsed() < Duration::from_secs(1) {
        let Some((_, _, ib)) = roce.recv(&mut rx) else {
            std::thread::sleep(Duration::from_millis(1));
            continue;
        };
        if let Some(mad) = cm::mad_of(ib)
            && MadHeader::parse(mad).is_ok_and(|h| h.attr_id == attr::DREP && h.tid == tid)
        {
            return Ok(true);
        }
    }
    Ok(false)
}
