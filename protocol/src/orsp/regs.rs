//! The ORSP register block of stream channel n, at 0x10000 + 0x100·n (`docs/orsp-spec.md` §3).

#![allow(missing_docs)]

/// Base address of channel 0's block.
pub const BASE: u32 = 0x1_0000;
/// Size of one block.
pub const BLOCK: u32 = 0x100;

pub const ORSP_VERSION: u32 = 0x00;
pub const ORSP_CAPS: u32 = 0x04;
pub const DEVICE_QPN: u32 = 0x08;
pub const DEVICE_SQ_PSN: u32 = 0x0C;
pub const HOST_SQ_PSN: u32 = 0x10;
pub const HOST_QPN: u32 = 0x14;
pub const HOST_GID: u32 = 0x18; // 16 bytes
pub const HOST_MAC_HI: u32 = 0x28;
pub const HOST_MAC_LO: u32 = 0x2C;
pub const PATH_MTU: u32 = 0x30;
pub const TRANSPORT: u32 = 0x34;
pub const RETRY: u32 = 0x38;
pub const TX_TUNING: u32 = 0x3C;
pub const MAX_CTRL_MSG: u32 = 0x40;
pub const DEV_RECV_DEPTH: u32 = 0x44;
pub const DEV_RECV_SIZE: u32 = 0x48;
pub const MAX_BUFFERS: u32 = 0x4C;
pub const WRITE_CHUNK: u32 = 0x50;
pub const CONTROL: u32 = 0x54;
pub const STATUS: u32 = 0x58;
pub const CM_PORT: u32 = 0x5C;
pub const COUNTERS: u32 = 0x60; // 8 × u32
/// COUNTERS word 0: frames whose TRAILER was sent.
pub const COUNTER_FRAMES_SENT: u32 = COUNTERS;
/// COUNTERS word 1: frames dropped (no buffer queued, or dropped at the camera).
pub const COUNTER_FRAMES_DROPPED: u32 = COUNTERS + 4;
/// COUNTERS word 2: frames larger than their buffer, truncated.
pub const COUNTER_FRAMES_TRUNCATED: u32 = COUNTERS + 8;
/// COUNTERS word 3: RoCEv2 packets sent again.
pub const COUNTER_RETRANSMITTED: u32 = COUNTERS + 12;
/// COUNTERS word 4: RNR NAKs received.
pub const COUNTER_RNR_NAKS: u32 = COUNTERS + 16;
/// COUNTERS word 5: PSN sequence error NAKs received.
pub const COUNTER_SEQ_NAKS: u32 = COUNTERS + 20;
/// COUNTERS word 6: CNPs received.
pub const COUNTER_CNPS: u32 = COUNTERS + 24;
/// COUNTERS word 7: local ACK timeouts.
pub const COUNTER_ACK_TIMEOUTS: u32 = COUNTERS + 28;
/// rdmacam extension: the most the ORSP stream may send, Mbit/s of IP bytes (0 = the link
/// speed, GevLinkSpeed). Taken at CONNECT.
pub const RATE_LIMIT: u32 = 0x80;
/// rdmacam extension: congestion control at CONNECT: 0 = DCQCN reacting to CNPs (default, as
/// RoCE NICs do), 1 = none (CNPs are only counted).
pub const CONGESTION_CONTROL: u32 = 0x84;
/// rdmacam extension: the most RoCEv2 packets the host's receive path holds unread (a software
/// host's socket buffer); the camera keeps no more than this many unacknowledged. 0 = no limit
/// from the host (the camera's own window, 128). Taken at CONNECT; at most
/// [`MAX_HOST_RX_WINDOW`].
pub const HOST_RX_WINDOW: u32 = 0x88;
/// The largest HOST_RX_WINDOW: half the 24-bit PSN space, beyond which a PSN would be
/// ambiguous.
pub const MAX_HOST_RX_WINDOW: u32 = 0x7f_ffff;

/// RETRY's fields: bits 2..0 retry_cnt, 6..4 rnr_retry, 12..8 the local ACK timeout
/// exponent; every other bit is reserved (a write setting one is refused).
pub const RETRY_FIELDS: u32 = 0x1f77;

/// CONTROL bits.
pub const CONTROL_CONNECT: u32 = 0x1;
pub const CONTROL_DISCONNECT: u32 = 0x2;
pub const CONTROL_CLEAR_COUNTERS: u32 = 0x4;

/// ORSP_CAPS: RC profile.
pub const CAP_RC: u32 = 1 << 0;
/// ORSP_CAPS: chunk data. With ChunkModeActive the chunk block (GenICam chunk layout, read
/// from the end) follows the image in the host buffer, LEADER and TRAILER carry payload type
/// 0x4001, and the TRAILER's GVSP trailer adds the payload length and ChunkLayoutID.
pub const CAP_CHUNKS: u32 = 1 << 3;
/// ORSP_CAPS: RDMA CM listener.
pub const CAP_CM: u32 = 1 << 5;
/// ORSP_CAPS (rdmacam extension, reserved in ORSP 1): the DSCP/ECN byte of TX_TUNING reaches
/// the wire. A device whose IP stack writes its own TOS (smoltcp writes 0) leaves it clear and
/// reads TX_TUNING's low byte back as 0.
pub const CAP_TOS: u32 = 1 << 6;
/// ORSP_CAPS (rdmacam extension, reserved in ORSP 1): HOST_RX_WINDOW is honoured.
pub const CAP_RX_WINDOW: u32 = 1 << 7;
