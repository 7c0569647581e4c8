//! What a reference host is told and what it reports: its set-up, its run summary, its
//! RoCEv2 counters and its frame statistics.

use std::net::IpAddr;

use rdmacam_protocol::device::frame::Pattern;
use rdmacam_protocol::orsp::msg::Hello;
use serde::Serialize;

/// How the host is set up.
#[derive(Debug, Clone)]
pub struct HostConfig {
    /// The host's RoCEv2 address.
    pub host_ip: IpAddr,
    /// The camera's RoCEv2 address.
    pub camera_ip: IpAddr,
    /// The host's QP number.
    pub host_qpn: u32,
    /// The host's first send PSN.
    pub host_sq_psn: u32,
    /// Frame buffers to announce.
    pub buffers: u32,
    /// Bytes per buffer (PayloadSize).
    pub buffer_size: usize,
    /// UDP port the host sends RoCEv2 from.
    pub tx_port: u16,
    /// UDP port the camera listens on for RoCEv2.
    pub camera_rx_port: u16,
    /// Noise seed and pattern of the camera, to check content.
    pub seed: u64,
    /// Test pattern the camera sends.
    pub pattern: Pattern,
    /// Re-queue buffers after each frame (false = starve the camera, for tests).
    pub requeue: bool,
}

/// The JSON summary `rdmacam-host --json` and `rdmacam demo --json` print.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct Summary {
    /// Frames expected: `--frames`, or the frames the camera acquired (sent and dropped) from
    /// this host's AcquisitionStart to STREAM_END.
    pub frames_expected: u64,
    /// TRAILERs received.
    pub frames_received: u64,
    /// Frames whose bytes, size or status were wrong.
    pub frames_bad: u64,
    /// Frames the camera dropped while this host streamed: block-id gaps flagged in a LEADER,
    /// or its FRAMES_DROPPED counter's growth, whichever says more.
    pub frames_dropped: u64,
    /// Payload bytes received.
    pub bytes_received: u64,
    /// The packets the camera retransmitted while this host streamed (the ORSP counter's
    /// growth, read over GVCP).
    pub retransmitted_packets: u64,
    /// Payload throughput.
    pub gbit_per_s: f64,
    /// Wall time of the stream.
    pub seconds: f64,
    /// CPU time the receiving thread spent over the same span (`CLOCK_THREAD_CPUTIME_ID`):
    /// receiving, placing, checking and answering, without the start-up (the buffers' pages
    /// faulted in, ~25 ms for the 16 default buffers of 1920x1080) or the teardown.
    pub cpu_seconds: f64,
    /// Good frames that carried chunk data (`--chunks`): parsed from the end of the buffer,
    /// ChunkFrameID equal to the block id, ChunkWidth to the leader's width.
    pub frames_with_chunks: u64,
    /// Times the host connected again after a stream failed (`--reconnect`).
    pub reconnects: u32,
    /// The host's own RoCE receive counters (soft host; zero with verbs, whose NIC keeps
    /// them in its hw_counters).
    pub host_roce: HostRoceCounters,
    /// The soft host's RoCEv2 receive buffer as the kernel granted it, bytes (zero with verbs).
    pub rx_buffer_bytes: u64,
    /// Path-MTU packets that buffer holds unread, as measured (zero with verbs).
    pub rx_buffer_packets: u64,
    /// The OrspHostRxWindow the host wrote because its buffer holds fewer packets than the
    /// camera keeps in flight; zero when it wrote none.
    pub rx_window: u32,
    /// The frames' width, height and pixel format (the last LEADER's), when any came.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub format: Option<FrameFormat>,
}

/// What a frame was: its size and pixel format (by its PFNC name, or the code in hex).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FrameFormat {
    /// Pixels per line.
    pub width: u32,
    /// Lines.
    pub height: u32,
    /// The pixel format's name (`Mono8`), or its PFNC code (`0x01080001`) when unknown.
    pub pixel_format: String,
}

impl FrameFormat {
    /// From a LEADER's width, height and PFNC code.
    pub fn new(width: u32, height: u32, pfnc: u32) -> FrameFormat {
        let pixel_format = rdmacam_protocol::gev::PixelFormat::from_pfnc(pfnc)
            .map_or_else(|| format!("{pfnc:#010x}"), |p| p.name().to_owned());
        FrameFormat {
            width,
            height,
            pixel_format,
        }
    }
}

/// What the host's RoCE receiver saw, named as rxe's hw_counters where rxe has the counter.
#[derive(Debug, Clone, Copy, Default, Serialize, PartialEq, Eq)]
pub struct HostRoceCounters {
    /// Packets discarded for a bad ICRC.
    pub bad_icrc: u64,
    /// Requests out of sequence, NAKed (`out_of_seq_request`).
    pub out_of_seq_request: u64,
    /// Duplicate requests, acknowledged again (`duplicate_request`).
    pub duplicate_request: u64,
    /// Packets marked ECN Congestion Experienced.
    pub ecn_marked: u64,
    /// CNPs sent to the camera.
    pub cnps_sent: u64,
}

impl HostRoceCounters {
    /// Both added.
    pub fn sum(self, o: HostRoceCounters) -> HostRoceCounters {
        HostRoceCounters {
            bad_icrc: self.bad_icrc + o.bad_icrc,
            out_of_seq_request: self.out_of_seq_request + o.out_of_seq_request,
            duplicate_request: self.duplicate_request + o.duplicate_request,
            ecn_marked: self.ecn_marked + o.ecn_marked,
            cnps_sent: self.cnps_sent + o.cnps_sent,
        }
    }
}

/// Per-stream statistics as frames arrive.
#[derive(Debug, Clone, Default)]
pub struct Stats {
    /// Frames received and checked good.
    pub good: u64,
    /// Frames received with wrong content or status.
    pub bad: u64,
    /// Frames the camera reported dropped.
    pub dropped: u64,
    /// Payload bytes received.
    pub bytes: u64,
    /// Good frames that carried chunk data (parsed, ChunkFrameID and ChunkWidth checked).
    pub chunk_frames: u64,
    /// Block ids of received frames, in arrival order (the newest [`HISTORY`] to 2 × HISTORY).
    pub block_ids: Vec<u64>,
    /// Frame counters stamped in received frames (the newest, as `block_ids`).
    pub frame_numbers: Vec<u64>,
    /// The size and PFNC pixel format of the last frame a LEADER announced.
    pub format: Option<(u32, u32, u32)>,
    /// The camera's HELLO.
    pub hello: Option<Hello>,
    /// STREAM_END: last block id, frames sent, frames dropped.
    pub stream_end: Option<(u64, u32, u32)>,
    /// EVENTs: id and detail.
    pub events: Vec<(u16, u32)>,
    /// Buffers given back by RELEASED.
    pub released: u32,
    /// Device messages that did not parse.
    pub garbled: u64,
    /// Each TRAILER's block id, when the host saw it and when the kernel had received it
    /// (CLOCK_MONOTONIC ns; 0 when unknown), for latency (the newest, as `block_ids`: a
    /// latency log of a longer run holds its last frames).
    pub trailers_seen: Vec<(u64, u64, u64)>,
}
