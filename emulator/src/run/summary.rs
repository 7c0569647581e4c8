//! What a camera did, printed when it stops.

use crate::camera::CameraCore;

/// What one camera did, printed when it stops (text, or JSON with `--json`).
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct CameraSummary {
    /// Its address.
    pub ip: String,
    /// Its serial number.
    pub serial: String,
    /// Frames sent over GVSP (trailer out).
    pub gvsp_frames: u64,
    /// GVSP packets sent, resends included.
    pub gvsp_packets: u64,
    /// GVSP packets resent on request.
    pub gvsp_resent: u64,
    /// PACKETRESEND requests received.
    pub resend_requests: u64,
    /// Resend requests answered PACKET_UNAVAILABLE.
    pub resend_unavailable: u64,
    /// Frames sent over ORSP (TRAILER sent).
    pub orsp_frames: u64,
    /// Frames ORSP dropped (no host buffer queued, or a drop-frame fault).
    pub orsp_frames_dropped: u64,
    /// RoCE: packets sent, retransmissions included.
    pub roce_packets: u64,
    /// RoCE: packets retransmitted.
    pub retransmitted: u64,
    /// RoCE: PSN sequence error NAKs received.
    pub seq_naks: u64,
    /// RoCE: RNR NAKs received.
    pub rnr_naks: u64,
    /// RoCE: CNPs received.
    pub cnps: u64,
    /// RoCE: ACK timeouts that sent outstanding packets again (ORSP's ACK_TIMEOUTS; the
    /// waits that resent nothing are in the log's transport line).
    pub timeouts: u64,
    /// ORSP connections made.
    pub orsp_connections: u64,
    /// RoCEv2 packets that came with a bad ICRC and were dropped unread, as an RDMA NIC
    /// drops them (a host computing its ICRC wrong, or a damaged or forged packet).
    pub bad_icrc: u64,
    /// Faults injected, by kind.
    pub faults: crate::fault::FaultCounts,
    /// Datagrams that arrived while the camera was silent (a silence or reboot fault) and were
    /// lost with it, as on a pulled cable.
    pub silenced: u64,
    /// Free-running frames behind AcquisitionFrameRate: frame periods that went by while the
    /// stream still sent the frame before (a link too slow for the rate) or the camera waited
    /// for a CPU. Frames come as fast as the stream takes them; none is dropped.
    pub frames_behind: u64,
    /// Times the camera slept with nothing to do and woke again (a packet or a timer): an
    /// idle camera sleeps until one is due.
    pub idle_wakeups: u64,
    /// What the host did wrong, one entry per kind of rule it broke (empty for a correct
    /// host): docs/orsp-spec.md section 8.
    pub host_violations: Vec<HostViolation>,
    /// What the camera was asked to do and could not (a latency log it could not write):
    /// `rdmacam run` exits 1 after the summary when there is any.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub errors: Vec<String>,
}

/// One kind of rule the host broke: how often, the first time in words, where the rule is.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct HostViolation {
    /// The kind's name (`p_key`, `ack_unsent`, `heartbeat_late` ...).
    pub kind: String,
    /// How many times.
    pub count: u64,
    /// The first time: what was expected, what came, its PSN.
    pub first: String,
    /// The section of docs/orsp-spec.md that states the rule.
    pub spec: String,
}

impl HostViolation {
    /// A list for the summary from the protocol crate's record.
    pub fn list(v: &rdmacam_protocol::judge::Violations) -> Vec<HostViolation> {
        v.iter()
            .map(|(first, count)| HostViolation {
                kind: first.kind.name().to_string(),
                count,
                first: first.to_string(),
                spec: first.kind.spec().to_string(),
            })
            .collect()
    }
}

impl CameraSummary {
    /// The summary line, and under it a line per kind of rule the host broke.
    pub fn text(&self) -> String {
        let mut t = self.line();
        for l in self.violation_lines() {
            t.push('\n');
            t.push_str(&l);
        }
        t
    }

    /// The host's violations, a line each, for the text summary (empty when there is none).
    pub fn violation_lines(&self) -> Vec<String> {
        self.host_violations
            .iter()
            .map(|v| {
                format!(
                    "camera {}: the host broke a rule, {} x{}: first {} [{}]",
                    self.ip, v.kind, v.count, v.first, v.spec
                )
            })
            .collect()
    }

    /// One human line.
    pub fn line(&self) -> String {
        let silenced = if self.silenced > 0 {
            format!(" ({} datagrams lost while silent)", self.silenced)
        } else {
            String::new()
        };
        let bad_icrc = if self.bad_icrc > 0 {
            format!("; {} RoCEv2 packets with a bad ICRC dropped", self.bad_icrc)
        } else {
            String::new()
        };
        let behind = if self.frames_behind > 0 {
            format!(
                "; {} frames behind AcquisitionFrameRate (the stream could not carry the rate)",
                self.frames_behind
            )
        } else {
            String::new()
        };
        use rdmacam_hil::plural as n;
        format!(
            "camera {} ({}): GVSP {}, {}, {} resent, {} of {} unavailable; \
             ORSP {}, {} dropped, {}; RoCE {}, {} retransmitted, {}, \
             {}, {}, {}{bad_icrc}; faults: {}{silenced}{behind}",
            self.ip,
            self.serial,
            n(self.gvsp_frames, "frame", "frames"),
            n(self.gvsp_packets, "packet", "packets"),
            self.gvsp_resent,
            self.resend_unavailable,
            n(self.resend_requests, "resend request", "resend requests"),
            n(self.orsp_frames, "frame", "frames"),
            self.orsp_frames_dropped,
            n(self.orsp_connections, "connection", "connections"),
            n(self.roce_packets, "packet", "packets"),
            self.retransmitted,
            n(self.seq_naks, "sequence NAK", "sequence NAKs"),
            n(self.rnr_naks, "RNR NAK", "RNR NAKs"),
            n(self.cnps, "CNP", "CNPs"),
            n(self.timeouts, "timeout", "timeouts"),
            self.faults.line(),
        )
    }

    /// Add what a camera did before a reboot (counters of the one before).
    pub(super) fn add(&mut self, o: &CameraSummary) {
        self.gvsp_frames += o.gvsp_frames;
        self.gvsp_packets += o.gvsp_packets;
        self.gvsp_resent += o.gvsp_resent;
        self.resend_requests += o.resend_requests;
        self.resend_unavailable += o.resend_unavailable;
        self.orsp_frames += o.orsp_frames;
        self.orsp_frames_dropped += o.orsp_frames_dropped;
        self.frames_behind += o.frames_behind;
    }

    /// Add an RC connection's counters.
    pub(super) fn add_rc(&mut self, rc: &rdmacam_protocol::rc::RequesterCounters) {
        self.roce_packets += rc.packets_sent;
        self.retransmitted += rc.retransmitted_packets;
        self.seq_naks += rc.seq_naks;
        self.rnr_naks += rc.rnr_naks;
        self.cnps += rc.cnps;
        self.timeouts += rc.go_backs;
    }
}

/// The stream counters of the camera as it is now (not RoCE, not faults).
pub(super) fn device_summary(cam: &CameraCore) -> CameraSummary {
    let s = cam.device().stream_counters();
    let o = cam.device().orsp().counters();
    CameraSummary {
        gvsp_frames: s.frames_sent,
        gvsp_packets: s.packets_sent,
        gvsp_resent: s.packets_resent,
        resend_requests: s.resend_requests,
        resend_unavailable: s.resend_unavailable,
        orsp_frames: u64::from(o.frames_sent),
        orsp_frames_dropped: u64::from(o.frames_dropped),
        frames_behind: u64::from(cam.device().frames_behind()),
        ..CameraSummary::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_line_names_lost_datagrams_and_frames_behind_only_when_there_are_some() {
        let quiet = CameraSummary::default().line();
        assert!(quiet.ends_with("faults: none"), "{quiet}");
        let s = CameraSummary {
            silenced: 2,
            frames_behind: 3,
            ..CameraSummary::default()
        };
        assert!(
            s.line().ends_with(
                "faults: none (2 datagrams lost while silent); 3 frames behind \
                 AcquisitionFrameRate (the stream could not carry the rate)"
            ),
            "{}",
            s.line()
        );
    }

    /// One of a thing is not "1 connections" or "1 timeouts".
    #[test]
    fn counts_of_one_are_singular() {
        let s = CameraSummary {
            ip: "127.0.0.1".into(),
            serial: "S".into(),
            orsp_frames: 1,
            orsp_connections: 1,
            roce_packets: 2,
            timeouts: 1,
            ..CameraSummary::default()
        };
        let l = s.line();
        for want in [
            "ORSP 1 frame,",
            "1 connection;",
            "RoCE 2 packets,",
            "1 timeout;",
        ] {
            assert!(l.contains(want), "{want}: {l}");
        }
    }
}
