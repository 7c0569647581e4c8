//! A reference host that breaks one rule on purpose (`rdmacam-host --misbehave`): the broken
//! hosts `rdmacam check-host` must fail, each for the fault it has, and the camera must name.

use rdmacam_protocol::wire::Opcode;
use rdmacam_protocol::wire::icrc::raw_rocev2;

/// One rule broken on purpose.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Misbehaviour {
    /// Every RoCEv2 packet leaves with its ICRC spoilt: the camera, as an RNIC, drops them all.
    BadIcrc,
    /// Every ACK names the PSN after the one it should (ICRC recomputed): it acknowledges a
    /// packet not received, or one never sent.
    SkipAck,
    /// No GVCP heartbeat once the stream runs: the camera takes control back.
    NoHeartbeat,
    /// Buffers never go back to the camera once filled: it drops frames for want of one.
    NoRequeue,
}

impl Misbehaviour {
    /// Every kind, by its name on the command line.
    pub const ALL: [(&'static str, Misbehaviour); 4] = [
        ("bad-icrc", Misbehaviour::BadIcrc),
        ("skip-ack", Misbehaviour::SkipAck),
        ("no-heartbeat", Misbehaviour::NoHeartbeat),
        ("no-requeue", Misbehaviour::NoRequeue),
    ];
}

impl std::str::FromStr for Misbehaviour {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        Misbehaviour::ALL
            .iter()
            .find(|(n, _)| *n == s)
            .map(|(_, m)| *m)
            .ok_or_else(|| {
                let names: Vec<&str> = Misbehaviour::ALL.iter().map(|(n, _)| *n).collect();
                format!("unknown misbehaviour {s:?}: one of {}", names.join(", "))
            })
    }
}

/// Spoil `packet` (a RoCEv2 IP packet the host is about to send) as `m` says.
pub(super) fn apply(m: Misbehaviour, packet: &mut [u8]) {
    let ip_len = match packet.first().map(|b| b >> 4) {
        Some(4) => usize::from(packet[0] & 0x0f) * 4,
        Some(6) => 40,
        _ => return,
    };
    let bth = ip_len + 8;
    if packet.len() < bth + 16 {
        return;
    }
    match m {
        Misbehaviour::BadIcrc => {
            let last = packet.len() - 1;
            packet[last] ^= 0xff;
        }
        Misbehaviour::SkipAck if packet[bth] == Opcode::RC_ACK.0 => {
            let psn = u32::from_be_bytes([0, packet[bth + 9], packet[bth + 10], packet[bth + 11]]);
            let next = (psn + 1) & 0x00ff_ffff;
            packet[bth + 9..bth + 12].copy_from_slice(&next.to_be_bytes()[1..]);
            let (ip, udp) = packet.split_at(ip_len);
            if let Ok((icrc, _)) = raw_rocev2(ip, ip_len == 40, udp) {
                let at = packet.len() - 4;
                packet[at..].copy_from_slice(&icrc.to_le_bytes());
            }
        }
        _ => {}
    }
}
