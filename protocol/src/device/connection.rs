//! The ORSP connection, by registers (CONNECT) or by the RDMA CM, and what the transport tells
//! the device about it (counters, frame memory, failures).

use core::net::IpAddr;

use super::{Device, DeviceEvent, ORSP_BUFFERS};
use crate::cm::{self, CmEvent, CmListener, ListenerConfig};
use crate::orsp::{self, ConnectParams, OrspChannel, TransportCounters};
use crate::rc::Instant;

impl Device {
    /// The ORSP channel (state, counters, message bytes for the transport's payload source).
    pub fn orsp(&self) -> &OrspChannel<ORSP_BUFFERS> {
        &self.orsp
    }

    /// The ORSP channel, to drive it (the transport feeds it completions and host messages,
    /// and posts its work requests).
    pub fn orsp_mut(&mut self) -> &mut OrspChannel<ORSP_BUFFERS> {
        &mut self.orsp
    }

    /// A message the host SENT: to the ORSP channel, and a refused one onto the list of what
    /// the host did wrong.
    pub fn orsp_host_message(&mut self, bytes: &[u8]) {
        self.orsp.on_host_message(bytes);
        if let Some(seq) = self.orsp.take_refused() {
            use crate::judge::{Violation, ViolationKind};
            let v = Violation::new(ViolationKind::OrspMessage, 0, seq, None);
            self.violations.record(v);
        }
    }

    /// What the host did wrong so far ([`crate::judge`]).
    pub fn violations(&self) -> &crate::judge::Violations {
        &self.violations
    }

    /// The list, to add what the transport found or to take the firsts for the log.
    pub fn violations_mut(&mut self) -> &mut crate::judge::Violations {
        &mut self.violations
    }

    /// The transport's RC counters for the ORSP COUNTERS registers: retransmitted packets, RNR
    /// NAKs, sequence NAKs, CNPs, ACK timeouts.
    pub fn set_transport_counters(&mut self, c: TransportCounters) {
        self.transport_counters = c;
    }

    /// Whether an RDMA CM request from `src` comes from the controlling application: its GVCP
    /// address (IPv4, or IPv4-mapped IPv6), or the IPv6 GID it wrote to OrspHostGid (GVCP is
    /// IPv4 only, so an IPv6 host names its RoCE address that way first). With no controller,
    /// nobody may connect.
    pub(super) fn cm_admitted(&self, src: IpAddr) -> bool {
        let Some(c) = self.controller else {
            return false;
        };
        match src {
            IpAddr::V4(v4) => v4 == *c.ip(),
            IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
                Some(v4) => v4 == *c.ip(),
                None => v6.octets() == self.orsp.host_gid(),
            },
        }
    }

    /// RDMA CM: a MAD received on QP1 from `src`. A reply MAD, if any, is written to `out` and
    /// `true` returned. On RTU the ORSP channel connects ([`DeviceEvent::OrspConnect`]); on DREQ it
    /// disconnects. The listener answers on the ORSP CM_PORT register's port (0 = none: REJ 8).
    /// A REQ from anyone but the controlling application (its GVCP address, or the GID it wrote to OrspHostGid) gets a REJ,
    /// consumer reason, with "ORSP 0x8006" (ACCESS_DENIED) and why in the private data.
    pub fn handle_cm(
        &mut self,
        now: Instant,
        src: IpAddr,
        mad: &[u8],
        out: &mut [u8; cm::MAD_LEN],
    ) -> bool {
        let port = self.orsp.cm_port();
        let (dqpn, dpsn) = self.orsp.device_qp();
        if self.cm.as_ref().is_none_or(|(p, _)| *p != port)
            || (!self.orsp.is_connected() && self.cm_accepted.is_none())
        {
            // (re)arm the listener with the current port, QPN and PSN
            let mut hello = [0u8; orsp::msg::HELLO_LEN];
            self.orsp.hello_body(&mut hello);
            let cfg = ListenerConfig {
                port,
                local_qpn: dqpn,
                starting_psn: dpsn,
                max_pmtu: self.cfg.orsp_max_pmtu,
                ca_guid: u64::from_be_bytes([
                    0x02,
                    0x52,
                    0,
                    0xff,
                    0xfe,
                    self.cfg.mac[3],
                    self.cfg.mac[4],
                    self.cfg.mac[5],
                ]),
                comm_id_seed: self.orsp.draw_secret(),
            };
            // CM_PORT only changes while disconnected, so nothing established is lost here
            self.cm = Some((port, CmListener::new(cfg, &hello)));
            self.cm_peer = None;
        }
        let admitted = self.cm_admitted(src);
        let Some((_, listener)) = self.cm.as_mut() else {
            return false;
        };
        if !admitted
            && listener.reject_req(
                mad,
                out,
                cm::reason::CONSUMER_REJECT,
                b"ORSP 0x8006: not the controlling application (take GVCP control first)",
            )
        {
            self.counters.cm_refused += 1;
            return true;
        }
        // a message about the connection (RTU, DREQ, MRA, REJ) counts only from the address
        // that made it: its communication IDs alone are no proof, since anyone who saw or
        // guessed them could end the stream
        let about_connection = cm::MadHeader::parse(mad).is_ok_and(|h| h.attr_id != cm::attr::REQ);
        if about_connection && self.cm_peer.is_some_and(|p| p != src) {
            self.counters.cm_foreign += 1;
            return false;
        }
        let (ev, reply) = listener.handle_mad(now, mad, out);
        match ev {
            CmEvent::Accepting(a) => {
                // the HELLO states the path MTU this connection will use
                let pmtu = a.pmtu.bytes().to_be_bytes();
                listener.patch_rep_private(out, orsp::msg::HELLO_PATH_MTU_OFFSET, &pmtu);
                self.cm_accepted = Some(a);
                self.cm_peer = Some(src);
            }
            CmEvent::Established => self.cm_connect(),
            CmEvent::Disconnected => {
                self.cm_accepted = None;
                self.cm_peer = None;
                if self.orsp.is_connected() {
                    self.orsp.disconnect();
                    self.event(DeviceEvent::OrspDisconnected);
                }
            }
            CmEvent::None | CmEvent::Rejected(_) => {}
        }
        reply
    }

    /// RDMA CM: the transport saw a packet from the CM peer before the RTU (which was lost):
    /// take the connection as established, as a passive side does on the QP's
    /// communication-established event. Returns whether the ORSP channel connected.
    pub fn cm_comm_established(&mut self) -> bool {
        if self.cm.as_mut().is_some_and(|(_, l)| l.establish()) {
            self.cm_connect();
            return self.orsp.is_connected();
        }
        false
    }

    /// Connect the ORSP channel with what the accepted REQ said.
    pub(super) fn cm_connect(&mut self) {
        if let Some(a) = self.cm_accepted.take()
            && let Ok(p) =
                self.orsp
                    .connect_cm(a.remote_qpn, a.recv_psn, a.send_psn, a.pmtu, a.remote_gid)
        {
            self.orsp_connected(p);
        }
    }

    /// The ORSP channel just connected. An acquisition already running streams at once: with
    /// RDMA CM the host's RTU (RoCEv2) and its AcquisitionStart (GVCP) travel on different
    /// sockets and may arrive in either order.
    pub(super) fn orsp_connected(&mut self, mut p: ConnectParams) {
        if p.rate_limit_mbps == 0 {
            p.rate_limit_mbps = self.cfg.link_speed_mbps;
        }
        self.event(DeviceEvent::OrspConnect(p));
        if self.acq.running() {
            self.orsp.start_acquisition();
        }
    }

    /// RDMA CM: when the REP should be resent if no RTU has come.
    pub fn cm_poll_timeout(&self) -> Option<Instant> {
        self.cm.as_ref().and_then(|(_, l)| l.poll_timeout())
    }

    /// RDMA CM timer: a REP to resend to the peer of [`Self::handle_cm`] is written to `out` and
    /// `true` returned. After 15 tries the half-open connection is forgotten.
    pub fn cm_handle_timeout(&mut self, now: Instant, out: &mut [u8; cm::MAD_LEN]) -> bool {
        let Some((_, l)) = self.cm.as_mut() else {
            return false;
        };
        let resend = l.handle_timeout(now, out);
        if !resend && l.poll_timeout().is_none() && !l.connected() {
            self.cm_accepted = None;
            self.cm_peer = None;
        }
        resend
    }

    /// ORSP: whether the caller has frame memory free for another frame. While it has none
    /// (every frame still unacknowledged), frames are not due and no timeout is reported for
    /// them; they resume when memory frees.
    pub fn set_orsp_frame_memory_free(&mut self, free: bool) {
        self.orsp_memory_free = free;
    }

    /// ORSP: a fatal transport error (retry exhaustion, fatal NAK) ends the connection and the
    /// acquisition; STATUS shows `code`.
    pub fn orsp_failed(&mut self, code: u16) {
        self.orsp.fail(code);
        self.stop_acquisition(self.last_now);
        self.event(DeviceEvent::OrspDisconnected);
    }
}
