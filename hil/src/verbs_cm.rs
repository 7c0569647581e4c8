//! `rdmacam-host --transport verbs --connect cm`: the RDMA CM active side on real librdmacm
//! (through sideway): what `rdma_connect()` does for a host SDK.
//!
//! 1. `rdma_create_event_channel`, `rdma_create_id(RDMA_PS_TCP)`.
//! 2. `rdma_resolve_addr(camera:cm_port)` → ADDR_RESOLVED; `rdma_resolve_route` →
//!    ROUTE_RESOLVED.
//! 3. `rdma_connect` with our own QP's number (the QP was created and put in INIT by
//!    [`VerbsQp`](rdmacam_io::verbs::VerbsQp), receives posted) → REQ; the camera answers REP, or
//!    REJ (→ REJECTED, whose status is the IB CM reject reason).
//! 4. CONNECT_RESPONSE: `rdma_init_qp_attr` for RTR and RTS (the camera's QPN, both PSNs, the
//!    path MTU and address vector the CM negotiated), `ibv_modify_qp` twice, `rdma_establish`
//!    → RTU.
//! 5. At the end `rdma_disconnect` → DREQ; the camera answers DREP.
//!
//! The REP's private data carries the camera's HELLO; sideway 0.4 does not expose an event's
//! private data, so the host reads the same fields from the ORSP registers over GVCP instead.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use sideway::ibverbs::queue_pair::QueuePairState;
use sideway::rdmacm::communication_manager::{
    ConnectionParameter, Event, EventChannel, EventType, GetEventErrorKind, Identifier, PortSpace,
};

use crate::verbs_host::VerbsHost;

/// An RDMA CM connection (keep it alive while streaming; [`disconnect`](Self::disconnect) ends it).
pub struct CmConnection {
    id: Arc<Identifier>,
    channel: Arc<EventChannel>,
}

impl std::fmt::Debug for CmConnection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CmConnection").finish_non_exhaustive()
    }
}

/// What an IB CM reject reason means (the ones a camera sends).
pub fn reject_reason(code: i32) -> &'static str {
    match code {
        8 => "invalid service ID: nothing listens on that port",
        9 => "invalid transport type: not an RC connection",
        26 => "invalid path MTU: above the camera's",
        28 => "consumer reject (an ORSP camera: already connected)",
        _ => "see the IB CM REJ reason codes",
    }
}

fn next_event(channel: &Arc<EventChannel>, deadline: Instant) -> Result<Event> {
    loop {
        match channel.get_cm_event() {
            Ok(ev) => return Ok(ev),
            Err(e) if matches!(e.0, GetEventErrorKind::NoEvent) => {
                if Instant::now() >= deadline {
                    bail!("no RDMA CM event within the time limit");
                }
                std::thread::sleep(Duration::from_millis(1));
            }
            Err(e) => return Err(anyhow::Error::new(e).context("rdma_get_cm_event")),
        }
    }
}

/// Wait for `want`; REJECTED and the error events end with a clear message.
fn expect(channel: &Arc<EventChannel>, want: EventType, step: &str) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(10);
    let ev = next_event(channel, deadline).with_context(|| format!("waiting for {want:?}"))?;
    let (kind, status) = (ev.event_type(), ev.status());
    ev.ack().context("rdma_ack_cm_event")?;
    if kind == want {
        return Ok(());
    }
    match kind {
        EventType::Rejected => bail!(
            "the camera rejected the connection: reason {status} ({})",
            reject_reason(status)
        ),
        _ => bail!("{step}: {kind:?} (status {status}) instead of {want:?}"),
    }
}

/// Steps 1–4: connect `host`'s QP to the camera's RDMA CM listener.
pub fn connect(host: &mut VerbsHost, camera: IpAddr, cm_port: u16) -> Result<CmConnection> {
    let channel = EventChannel::new().context("rdma_create_event_channel (is rdma_ucm loaded?)")?;
    channel
        .set_nonblocking(true)
        .context("RDMA CM event channel O_NONBLOCK")?;
    let id = channel
        .create_id(PortSpace::Tcp)
        .context("rdma_create_id")?;
    let timeout = Duration::from_secs(2);
    // no source address: the route to the camera picks it (with one, sideway 0.4.3's
    // resolve_addr fails with EINVAL here: its source sockaddr does not outlive the call)
    id.resolve_addr(None, SocketAddr::new(camera, cm_port), timeout)
        .with_context(|| format!("rdma_resolve_addr -> {camera}:{cm_port}"))?;
    expect(&channel, EventType::AddressResolved, "rdma_resolve_addr")?;
    id.resolve_route(timeout).context("rdma_resolve_route")?;
    expect(&channel, EventType::RouteResolved, "rdma_resolve_route")?;
    let mut param = ConnectionParameter::default();
    param.setup_qp_number(host.qp_numbers().0);
    id.connect(param).context("rdma_connect")?;
    expect(&channel, EventType::ConnectResponse, "rdma_connect")?;
    let rtr = id
        .get_qp_attr(QueuePairState::ReadyToReceive)
        .context("rdma_init_qp_attr(RTR)")?;
    let rts = id
        .get_qp_attr(QueuePairState::ReadyToSend)
        .context("rdma_init_qp_attr(RTS)")?;
    host.connect_with(&rtr, &rts)?;
    id.establish().context("rdma_establish (RTU)")?;
    Ok(CmConnection { id, channel })
}

impl CmConnection {
    /// Step 5: `rdma_disconnect` (DREQ) and wait for the camera's DREP (DISCONNECTED).
    pub fn disconnect(self) -> Result<()> {
        self.id.disconnect().context("rdma_disconnect")?;
        expect(&self.channel, EventType::Disconnected, "rdma_disconnect")
    }
}
