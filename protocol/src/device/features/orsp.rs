//! OrspControl: the ORSP register block of stream channel 0 (`docs/orsp-spec.md` §3).

use super::*;

const fn orsp_reg(off: u32, access: Access) -> Reg {
    reg(orsp_regs::BASE + off, access)
}

const fn orsp_ro(name: &'static str, tooltip: &'static str, off: u32) -> Feature {
    custom(
        name,
        "OrspControl",
        Expert,
        tooltip,
        int(orsp_reg(off, Ro).volatile()),
    )
}

const fn orsp_rw(name: &'static str, tooltip: &'static str, off: u32) -> Feature {
    custom(name, "OrspControl", Expert, tooltip, int(orsp_reg(off, Rw)))
}

const fn orsp_counter(name: &'static str, tooltip: &'static str, i: u32) -> Feature {
    orsp_ro(name, tooltip, orsp_regs::COUNTERS + 4 * i)
}

/// The features of this area, in the order hosts list them.
pub const FEATURES: &[Feature] = &[
    orsp_ro(
        "OrspVersion",
        "ORSP version: major 16 bits, minor 16 bits.",
        orsp_regs::ORSP_VERSION,
    ),
    orsp_ro(
        "OrspCaps",
        "bit 0 RC; bit 3 chunk data; bit 5 RDMA CM; bit 6 DSCP/ECN reaches the wire; bits 11..8 largest path MTU code.",
        orsp_regs::ORSP_CAPS,
    ),
    orsp_ro(
        "OrspDeviceQPN",
        "QP number the camera sends from.",
        orsp_regs::DEVICE_QPN,
    ),
    orsp_ro(
        "OrspDeviceSqPsn",
        "First PSN the camera sends.",
        orsp_regs::DEVICE_SQ_PSN,
    ),
    orsp_rw(
        "OrspHostSqPsn",
        "First PSN the host sends.",
        orsp_regs::HOST_SQ_PSN,
    ),
    orsp_rw(
        "OrspHostQPN",
        "The host's QP number; non-zero = configured.",
        orsp_regs::HOST_QPN,
    ),
    orsp_rw(
        "OrspPathMtu",
        "Path MTU code 1..5 (256..4096 bytes).",
        orsp_regs::PATH_MTU,
    ),
    orsp_rw(
        "OrspRetry",
        "bits 2..0 retry_cnt, 6..4 rnr_retry, 12..8 ACK timeout exponent.",
        orsp_regs::RETRY,
    ),
    orsp_rw(
        "OrspTxTuning",
        "bits 7..0 DSCP/ECN byte (default 0x02: ECN-capable), bits 31..16 UDP source port (0 = the camera's).",
        orsp_regs::TX_TUNING,
    ),
    orsp_rw(
        "OrspRateLimit",
        "Most the ORSP stream sends, Mbit/s of IP bytes (0 = GevLinkSpeed); taken at CONNECT.",
        orsp_regs::RATE_LIMIT,
    ),
    custom(
        "OrspCongestionControl",
        "OrspControl",
        Expert,
        "DCQCN: the rate drops on CNPs and recovers, as RoCE NICs do; None: CNPs are only counted. Taken at CONNECT.",
        Kind::Enum {
            reg: orsp_reg(orsp_regs::CONGESTION_CONTROL, Rw),
            entries: &[custom_entry("DCQCN", 0), custom_entry("None", 1)],
        },
    ),
    orsp_rw(
        "OrspHostRxWindow",
        "Most RoCEv2 packets the host holds unread (a software host's socket buffer); the camera keeps no more unacknowledged (0 = no limit from the host: 128). Taken at CONNECT.",
        orsp_regs::HOST_RX_WINDOW,
    ),
    orsp_ro(
        "OrspMaxCtrlMsg",
        "Largest camera-to-host message in bytes.",
        orsp_regs::MAX_CTRL_MSG,
    ),
    orsp_ro(
        "OrspDevRecvDepth",
        "Receives the camera keeps posted.",
        orsp_regs::DEV_RECV_DEPTH,
    ),
    orsp_ro(
        "OrspMaxBuffers",
        "Buffers the camera can track.",
        orsp_regs::MAX_BUFFERS,
    ),
    orsp_rw(
        "OrspWriteChunk",
        "Bytes per payload RDMA WRITE message (0 = whole frame).",
        orsp_regs::WRITE_CHUNK,
    ),
    custom(
        "OrspControlRegister",
        "OrspControl",
        Expert,
        "bit 0 CONNECT, bit 1 DISCONNECT, bit 2 clear counters.",
        int(orsp_reg(orsp_regs::CONTROL, Wo)),
    ),
    orsp_ro(
        "OrspStatus",
        "bits 3..0 state (0 idle, 1 configured, 2 connected, 3 streaming, 4 draining, 15 error), bits 31..16 last error.",
        orsp_regs::STATUS,
    ),
    orsp_rw(
        "OrspCmPort",
        "RDMA CM listener port (0 = none).",
        orsp_regs::CM_PORT,
    ),
    orsp_counter("OrspFramesSent", "Frames sent.", 0),
    orsp_counter(
        "OrspFramesDropped",
        "Frames dropped for want of a queued buffer.",
        1,
    ),
    orsp_counter("OrspFramesTruncated", "Frames larger than their buffer.", 2),
    orsp_counter("OrspRetransmittedPackets", "RoCEv2 packets sent again.", 3),
    orsp_counter("OrspRnrNaks", "RNR NAKs received.", 4),
    orsp_counter("OrspSequenceNaks", "PSN sequence error NAKs received.", 5),
    orsp_counter("OrspCnps", "CNPs received.", 6),
    orsp_counter("OrspAckTimeouts", "Local ACK timeouts.", 7),
];
