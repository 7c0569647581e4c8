//! What the host reads and writes in the camera's registers around a stream: the ORSP
//! connection by registers, faults to inject, and the camera's account of a failure.

use std::time::{Duration, Instant as StdInstant};

use anyhow::{Context, Result, bail};
use rdmacam_protocol::device::regs;
use rdmacam_protocol::orsp::State;
use rdmacam_protocol::orsp::regs as oregs;
use rdmacam_protocol::wire::pmtu::Pmtu;

use super::plane::Plane;
use super::{HostOptions, Injection};
use crate::gvcp::GvcpClient;

/// Ask the camera for fault `i` through its FaultInjection features.
pub(super) fn inject(gvcp: &mut GvcpClient, i: &Injection) -> Result<()> {
    let amount = if i.kind.timed() {
        regs::FAULT_DURATION
    } else {
        regs::FAULT_COUNT
    };
    gvcp.write(regs::FAULT_SELECTOR, i.kind as u32)
        .and_then(|()| gvcp.write(amount, i.amount))
        .and_then(|()| gvcp.write(regs::FAULT_INJECT, 1))
        .map_err(|e| {
            let amount = if i.kind.timed() {
                format!("FaultDuration {} ms", i.amount)
            } else {
                format!("FaultCount {}", i.amount)
            };
            anyhow::Error::new(super::InjectionRefused(format!(
                "the camera refused FaultInject {:?} ({amount}): {e}",
                i.kind.feature_name()
            )))
        })
}

/// Why frames stopped coming, as far as the camera says: it no longer answers GVCP (killed,
/// unplugged, rebooted), it ended the connection with an ORSP error (and after how many
/// resends), or neither (then the RoCEv2 path is the suspect).
pub(super) fn stall_cause(
    gvcp: &mut GvcpClient,
    roce: std::net::SocketAddr,
    roce_local: std::net::IpAddr,
) -> String {
    let status = match gvcp.read(oregs::BASE + oregs::STATUS) {
        Ok(s) => s,
        Err(e) => {
            return format!(
                "the camera stopped answering GVCP ({e}): killed, unplugged or rebooted?"
            );
        }
    };
    let code = status >> 16;
    if status & 0xf == 15 {
        let resent = gvcp
            .read(oregs::BASE + oregs::COUNTER_RETRANSMITTED)
            .map_or(String::new(), |n| format!(" after {n} packets resent"));
        let why = match code as u16 {
            rdmacam_protocol::orsp::msg::event::RETRY_EXCEEDED => {
                format!("it gave up{resent} without progress (retries exhausted)")
            }
            rdmacam_protocol::orsp::msg::event::REMOTE_ERROR => {
                "this host answered it with a fatal NAK".to_owned()
            }
            rdmacam_protocol::orsp::msg::event::HOST_MESSAGE_REFUSED => {
                "it refused a message this host sent (longer than OrspDevRecvSize?)".to_owned()
            }
            _ => "see OrspStatus".to_owned(),
        };
        return format!("the camera ended the connection with {code:#06x}: {why}");
    }
    format!(
        "the camera still answers GVCP (OrspStatus {status:#x}), so the RoCEv2 path is the \
         suspect: is {roce} reachable from {roce_local}?"
    )
}

/// A camera counter's growth from `base` to `now`. A counter below its base was cleared
/// meanwhile (OrspControl CLEAR_COUNTERS): what it counts now came since.
pub(super) fn since(base: u32, now: u32) -> u32 {
    now.checked_sub(base).unwrap_or(now)
}

/// No HELLO arrived in time: did the camera send one? A camera that took the connection
/// (connected, or given up with retries exhausted) and resent packets since `resent_before`
/// sent its HELLO, and it went somewhere this host does not listen: most often another UDP
/// port. `listen` is where this host receives RoCEv2, `soft` whether it is this program's
/// socket (`--rx-port`) rather than a NIC (always 4791), `loss` the soft host's simulated
/// loss; `camera` the camera's RoCEv2 address.
pub(super) fn no_hello_cause(
    gvcp: &mut GvcpClient,
    resent_before: Option<u32>,
    listen: std::net::SocketAddr,
    (soft, loss): (bool, f64),
    camera: std::net::SocketAddr,
) -> String {
    let plain = format!(
        "no HELLO from the camera within 5 s: is {camera} reachable from {}?",
        listen.ip()
    );
    let status = gvcp.read(oregs::BASE + oregs::STATUS).ok();
    let resent = gvcp.read(oregs::BASE + oregs::COUNTER_RETRANSMITTED).ok();
    let took_it = status.is_some_and(|s| match State::of_status(s) {
        Some(State::Error) => {
            (s >> 16) as u16 == rdmacam_protocol::orsp::msg::event::RETRY_EXCEEDED
        }
        Some(st) => st.holds_connection(),
        None => false,
    });
    let (Some(before), Some(now), true) = (resent_before, resent, took_it) else {
        return plain;
    };
    let n = since(before, now);
    if n == 0 {
        return plain;
    }
    let port = listen.port();
    let rocev2 = rdmacam_protocol::wire::roce::ROCEV2_PORT;
    let hint = if soft && loss > 0.0 {
        format!("the simulated loss ({loss} of the packets, both ways) took every one")
    } else if soft && port != rocev2 {
        format!(
            "a camera sends RoCEv2 to UDP port {rocev2} unless it was set up otherwise \
             (rdmacam run --host-roce-port {port}), and this host listens on --rx-port {port}"
        )
    } else {
        format!(
            "does a firewall drop UDP port {port} to {}, or was the camera set up to send to \
             another port (rdmacam run --host-roce-port)?",
            listen.ip()
        )
    };
    format!(
        "no HELLO from the camera within 5 s, though the camera took the connection and sent \
         it ({n} packets resent): none of it reached {listen}; {hint}"
    )
}

/// The host's IPv6 GID into OrspHostGid.
pub(super) fn write_host_gid(gvcp: &mut GvcpClient, gid: std::net::Ipv6Addr) -> Result<()> {
    for (i, w) in gid.octets().chunks(4).enumerate() {
        gvcp.write(
            oregs::BASE + oregs::HOST_GID + 4 * i as u32,
            u32::from_be_bytes(w.try_into().expect("4")),
        )?;
    }
    Ok(())
}

/// ORSP §3: the host's QP parameters through GVCP registers, then CONNECT.
pub(super) fn connect_registers(
    o: &HostOptions,
    gvcp: &mut GvcpClient,
    plane: &mut Plane,
    roce_local: std::net::IpAddr,
    pmtu: Pmtu,
) -> Result<()> {
    let (host_qpn, host_psn) = plane.qp_numbers();
    gvcp.write(regs::SCDA0, u32::from(o.local))?;
    if let std::net::IpAddr::V6(gid) = roce_local {
        write_host_gid(gvcp, gid)?;
    }
    gvcp.write(oregs::BASE + oregs::HOST_QPN, host_qpn)?;
    gvcp.write(oregs::BASE + oregs::HOST_SQ_PSN, host_psn)?;
    gvcp.write(oregs::BASE + oregs::PATH_MTU, pmtu as u32)?;
    // retry 6 (rxe takes 7 as "forever"), rnr_retry 7 and a 537 ms ACK timeout: the camera
    // keeps trying for 3.7 s without progress, so a host that stalls for a second does not lose
    // the stream (the camera's timer is RTT-based below this: loss recovery does not wait)
    gvcp.write(
        oregs::BASE + oregs::RETRY,
        6 | (7 << 4) | (u32::from(crate::host::HOST_ACK_TIMEOUT) << 8),
    )?;
    let dqpn = gvcp.read(oregs::BASE + oregs::DEVICE_QPN)?;
    let dpsn = gvcp.read(oregs::BASE + oregs::DEVICE_SQ_PSN)?;
    // the QP must be ready to receive before CONNECT: the HELLO follows at once
    plane.connect(dqpn, dpsn, pmtu)?;
    gvcp.write(oregs::BASE + oregs::CONTROL, oregs::CONTROL_CONNECT)
        .context("camera refused CONNECT")?;
    Ok(())
}

/// `--destroy-qp-after`: the QP goes, the registered memory and the GVCP session stay.
pub(super) fn destroy_qp(plane: &mut Plane, frames: u64) {
    #[cfg(feature = "verbs")]
    if let Plane::Verbs(v) = plane {
        v.destroy_qp();
        eprintln!(
            "destroy-qp: destroyed the host QP after {frames} frames; waiting for the camera to give up"
        );
    }
    #[cfg(not(feature = "verbs"))]
    let _ = (plane, frames);
}

/// After the QP was destroyed: poll OrspStatus until the camera reports an error, then release
/// control and check the camera went idle. Always ends the session with an error that says what
/// the camera did.
pub(super) fn camera_gives_up(gvcp: &mut GvcpClient, since: StdInstant) -> Result<()> {
    let status = gvcp.read(oregs::BASE + oregs::STATUS)?;
    let code = status >> 16;
    if status & 0xf != 15 {
        if since.elapsed() > Duration::from_secs(30) {
            bail!("the camera did not report an error within 30 s of the host QP's destruction");
        }
        return Ok(());
    }
    let what = match code {
        0x9001 => "retries exhausted",
        0x9002 => "remote access error or invalid request",
        _ => "other error",
    };
    eprintln!(
        "destroy-qp: the camera reported OrspStatus error {code:#06x} ({what}) {:.2} s after the QP was destroyed",
        since.elapsed().as_secs_f64()
    );
    gvcp.write(regs::CCP, 0)?;
    let state = gvcp.read(oregs::BASE + oregs::STATUS)? & 0xf;
    eprintln!(
        "destroy-qp: after control was released the camera's ORSP state is {state}{}",
        if state == 0 { " (idle)" } else { "" }
    );
    bail!("stream ended by --destroy-qp-after: the camera reported {code:#06x} ({what})")
}
