//! The camera's brain: a GigE Vision device (GVCP server, bootstrap and camera registers,
//! GenICam XML in device memory) with one GVSP stream channel, sans-IO.
//!
//! The caller pumps bytes and time through it: [`Device::handle_gvcp`] for every datagram on
//! UDP 3956 (answer with the returned acknowledge), [`Device::poll_stream`] for GVSP packets to
//! send, [`Device::poll_timeout`] / [`Device::handle_timeout`] for the heartbeat and pacing.
//!
//! One [`Device`], its `impl` continued by responsibility in private sibling files (as smoltcp
//! splits its interface): `server.rs` answers GVCP commands, `regmap.rs` is the register map
//! (bootstrap, camera, ORSP and XML blocks), `control.rs` the control privilege and heartbeat,
//! `trigger.rs` triggers and acquisition start/stop, `capture.rs` turns due exposures into
//! frames for GVSP or ORSP, `connection.rs` the ORSP connection (registers or RDMA CM). The
//! public modules beside them are the blocks the device is built from: [`frame`] (what a frame
//! is), [`pattern`] (synthetic frames), [`chunks`], [`stream`] (the GVSP transmitter),
//! [`events`] (message channel), [`actions`], [`acquisition`], [`faults`], [`timestamps`],
//! [`features`] (the GenICam feature table the XML is built from) and [`regs`] (addresses).

pub mod acquisition;
pub mod actions;
mod capture;
pub mod chunks;
mod connection;
mod control;
pub mod events;
pub mod faults;
pub mod features;
pub mod frame;
pub mod pattern;
mod regmap;
pub mod regs;
mod server;
pub mod stream;
pub mod timestamps;
mod trigger;

use core::net::{Ipv4Addr, SocketAddrV4};

use heapless::{Deque, String};

use crate::cm::{self, CmListener};
use crate::gev::gvcp;
use crate::gev::{Axis, PixelFormat};
use crate::orsp::regs as orsp_regs;
use crate::orsp::{ConnectParams, OrspChannel, TransportCounters};
use crate::rc::Instant;
use crate::wire::pmtu::Pmtu;
use acquisition::Acquisition;
use actions::{ActionCounters, Actions};
use events::{EventCounters, MessageChannel};
use frame::{FrameSpec, Pattern};
use regmap::CameraRegs;
use stream::{GvspChannel, StreamCounters};
use timestamps::Clock;

/// Buffers one ORSP channel can track (MAX_BUFFERS).
pub const ORSP_BUFFERS: usize = 256;

/// The GenICam description served from device memory at [`regs::XML_BASE`], written at build
/// time from the feature table ([`features`]).
pub const GENICAM_XML: &str = include_str!(concat!(env!("OUT_DIR"), "/rdmacam.xml"));

const _: () = assert!(GENICAM_XML.len() <= regs::XML_WINDOW as usize);

/// Identity and defaults of a device.
#[derive(Debug, Clone)]
pub struct DeviceConfig {
    /// MAC address of the interface.
    pub mac: [u8; 6],
    /// IPv4 address.
    pub ip: Ipv4Addr,
    /// Subnet mask.
    pub netmask: Ipv4Addr,
    /// Default gateway.
    pub gateway: Ipv4Addr,
    /// Manufacturer name (bootstrap 0x48).
    pub manufacturer: String<32>,
    /// Model name (0x68).
    pub model: String<32>,
    /// Device version (0x88).
    pub device_version: String<32>,
    /// Manufacturer info (0xA8).
    pub manufacturer_info: String<48>,
    /// Serial number (0xD8).
    pub serial: String<16>,
    /// User-defined name (0xE8), writable by the host.
    pub user_name: String<16>,
    /// GigE Vision version reported at 0x0000 (default 2.2).
    pub gev_version: (u16, u16),
    /// Sensor width in pixels.
    pub sensor_width: u32,
    /// Sensor height in lines.
    pub sensor_height: u32,
    /// Initial image width.
    pub width: u32,
    /// Initial image height.
    pub height: u32,
    /// Initial pixel format.
    pub pixel_format: PixelFormat,
    /// Initial test pattern.
    pub pattern: Pattern,
    /// The camera has an image source besides its test patterns (`rdmacam run --images`):
    /// `TestPattern` Off selects it and is the initial value. Without one, Off is refused.
    pub sensor: bool,
    /// Initial frame rate (frames per second).
    pub frame_rate: f32,
    /// Initial exposure time (µs); [`Device::new`] shortens it to fit `frame_rate`.
    pub exposure_us: f32,
    /// UDP source port of the stream channel (SCSP).
    pub stream_source_port: u16,
    /// Link speed in Mbit/s (0x670).
    pub link_speed_mbps: u32,
    /// Heartbeat timeout in ms until a host changes it.
    pub heartbeat_ms: u32,
    /// QP number the ORSP channel sends from until the first draw (a verbs back-end puts its
    /// real QPN here, and then it stays).
    pub orsp_qpn: u32,
    /// Seed of the device's QPNs and first PSNs. [`DeviceConfig::new`] derives one from the MAC
    /// and the address, which anyone can guess: the I/O layer puts real randomness here (the
    /// OS's, the board's) and stirs more in after each connection
    /// ([`crate::camera::Camera::with_entropy`]).
    pub entropy: u64,
    /// Largest path MTU the link allows ORSP to use.
    pub orsp_max_pmtu: Pmtu,
    /// Rate of the first frame of each acquisition, Mbit/s (0 = link speed). Hosts such as
    /// aravis size their socket buffer when the first frame arrives; sent at full speed, that
    /// frame can overflow the default buffer before the host's receive thread wakes up.
    pub first_frame_mbps: u32,
    /// An ORSP transport is attached. Without one (a GVSP-only camera) OrspVersion and
    /// OrspCaps read 0 and the ORSP registers refuse writes with NOT_IMPLEMENTED, so a host
    /// can tell "this camera offers no ORSP" from "the camera is unreachable".
    pub orsp_offered: bool,
    /// Device ticks (ns) = the I/O layer's [`Instant`] + this. The emulator puts the machine's
    /// real-time clock here so cameras on one machine share a time base
    /// ([`timestamps`]); 0 counts from the I/O layer's epoch.
    pub tick_offset: u64,
    /// UDP source port of the message channel (MCSP): where events leave from.
    pub message_source_port: u16,
    /// Power up with chunk data on (ChunkModeActive, every chunk enabled), as a camera a
    /// previous host left so: frames carry their chunks after the image (`check-host`'s
    /// `chunks` scenario).
    pub chunk_mode: bool,
}

/// `v`, cut at the capacity of the string it goes into (whole characters).
fn clipped<const N: usize>(v: &str) -> String<N> {
    let mut out = String::new();
    for c in v.chars() {
        if out.push(c).is_err() {
            break;
        }
    }
    out
}

impl DeviceConfig {
    /// A camera at `ip` with rdmacam's defaults: 2048×2048 sensor, 1920×1080 Mono8 gradient at
    /// 30 frames/s, GEV 2.2, heartbeat 3 s.
    pub fn new(ip: Ipv4Addr, mac: [u8; 6], serial: &str) -> Self {
        DeviceConfig {
            mac,
            ip,
            netmask: Ipv4Addr::new(255, 255, 255, 0),
            gateway: Ipv4Addr::UNSPECIFIED,
            manufacturer: clipped("rdmacam"),
            model: clipped("rdmacam virtual camera"),
            device_version: clipped(env!("CARGO_PKG_VERSION")),
            manufacturer_info: clipped("RoCEv2 RDMA camera emulator (ORSP)"),
            serial: clipped(serial),
            user_name: String::new(),
            gev_version: (2, 2),
            sensor_width: 2048,
            sensor_height: 2048,
            width: 1920,
            height: 1080,
            pixel_format: PixelFormat::Mono8,
            pattern: Pattern::Gradient,
            sensor: false,
            frame_rate: 30.0,
            exposure_us: 10_000.0,
            stream_source_port: 0,
            link_speed_mbps: 10_000,
            heartbeat_ms: 3000,
            first_frame_mbps: 1000,
            orsp_qpn: 0x000100 | u32::from(mac[5]),
            entropy: u64::from_be_bytes([0, 0, mac[0], mac[1], mac[2], mac[3], mac[4], mac[5]])
                ^ (u64::from(u32::from(ip)) << 16),
            orsp_max_pmtu: Pmtu::Mtu4096,
            orsp_offered: true,
            tick_offset: 0,
            message_source_port: 0,
            chunk_mode: false,
        }
    }
}

/// Something the I/O layer may want to log or act on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeviceEvent {
    /// A host took control.
    ControlTaken(SocketAddrV4),
    /// The controlling host released control.
    ControlReleased(SocketAddrV4),
    /// The controlling host stopped sending GVCP traffic; control dropped, stream closed.
    HeartbeatExpired(SocketAddrV4),
    /// Acquisition started.
    AcquisitionStarted,
    /// Acquisition stopped (command, frame count reached, or control lost).
    AcquisitionStopped,
    /// ORSP CONNECT accepted: the transport brings its queue pair up with these parameters.
    OrspConnect(ConnectParams),
    /// ORSP connection gone (DISCONNECT, heartbeat expiry, loss of control, fatal error): the
    /// transport resets its queue pair.
    OrspDisconnected,
    /// FORCEIP set a new address (the I/O layer must rebind to use it).
    ForceIp {
        /// New address.
        ip: Ipv4Addr,
        /// New mask.
        netmask: Ipv4Addr,
        /// New gateway.
        gateway: Ipv4Addr,
    },
}

/// An acknowledge to send back to the command's source.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GvcpReply {
    /// Bytes written to the output buffer.
    pub len: usize,
    /// The host allowed a broadcast reply (DISCOVERY with flag 0x10).
    pub broadcast_allowed: bool,
}

/// GVCP counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct GvcpCounters {
    /// Commands handled.
    pub commands: u64,
    /// Datagrams dropped as not GVCP (bad key, truncated).
    pub malformed: u64,
    /// Commands answered with an error status.
    pub errors: u64,
    /// Writes refused because another host holds control.
    pub access_denied: u64,
    /// Retried commands (same host, req_id and bytes as the one before) answered with the
    /// acknowledge already sent, without running them again.
    pub retries_answered: u64,
    /// RDMA CM connection requests refused because they did not come from the controlling
    /// application's address.
    pub cm_refused: u64,
    /// RDMA CM messages about a connection (RTU, DREQ, MRA, REJ) from another address than the
    /// one whose REQ made it: dropped, whatever their communication IDs say.
    pub cm_foreign: u64,
}

/// The last acknowledge sent, kept so a host's retry of a command whose acknowledge was lost
/// gets it again instead of running the command twice (a second CONNECT, a second
/// AcquisitionStart).
#[derive(Debug)]
struct LastAck {
    src: SocketAddrV4,
    req_id: u16,
    /// CRC-32 of the whole command datagram: a host that restarted and reuses the req_id for
    /// another command is not answered from the cache.
    command_crc: u32,
    len: usize,
    bytes: [u8; gvcp::HEADER_LEN + gvcp::MAX_PAYLOAD],
}

/// A GigE Vision camera with one stream channel.
#[derive(Debug)]
pub struct Device {
    cfg: DeviceConfig,
    clock: Clock,
    /// The latest time the I/O layer gave (for events raised where no time is passed).
    last_now: Instant,
    faults: faults::Faults,
    ip: Ipv4Addr,
    netmask: Ipv4Addr,
    gateway: Ipv4Addr,
    persistent: [u32; 3],
    user_name: String<16>,
    url: String<64>,
    heartbeat_ms: u32,
    gvcp_config: u32,
    gvsp_config: u32,
    pending_timeout: u32,
    ccp: u32,
    controller: Option<SocketAddrV4>,
    heartbeat_deadline: Option<Instant>,
    /// A command from the controller's address but another UDP port since its last heartbeat:
    /// named if the heartbeat then expires.
    other_port: Option<u16>,
    /// What the host did wrong ([`crate::judge`]).
    violations: crate::judge::Violations,
    scp_port: u16,
    scps: u32,
    scpd: u32,
    scda: Ipv4Addr,
    sccfg: u32,
    /// The camera registers (`CAM_BASE..CAM_END`) a host writes, checked against
    /// [`features::FEATURES`] on the way in.
    cam: CameraRegs,
    acq: Acquisition,
    /// Input Line0's level (edges fire triggers whose source is Line0).
    line0: bool,
    messages: MessageChannel,
    actions: Actions,
    stop_after_frame: bool,
    orsp_memory_free: bool,
    channel: GvspChannel,
    orsp: OrspChannel<ORSP_BUFFERS>,
    cm: Option<(u16, CmListener)>,
    cm_accepted: Option<cm::Accepted>,
    /// Where the REQ of the CM connection (accepted or established) came from: every later
    /// message about it must come from there.
    cm_peer: Option<core::net::IpAddr>,
    transport_counters: TransportCounters,
    events: Deque<DeviceEvent, 8>,
    counters: GvcpCounters,
    last_ack: Option<LastAck>,
}

type Status = u16;

impl Device {
    /// A device in its power-up state.
    pub fn new(cfg: DeviceConfig) -> Self {
        let mut url: String<64> = String::new();
        let _ = core::fmt::write(
            &mut url,
            format_args!(
                "Local:rdmacam.xml;{:x};{:x}",
                regs::XML_BASE,
                GENICAM_XML.len()
            ),
        );
        Device {
            ip: cfg.ip,
            netmask: cfg.netmask,
            gateway: cfg.gateway,
            persistent: [0; 3],
            user_name: cfg.user_name.clone(),
            url,
            heartbeat_ms: cfg.heartbeat_ms,
            gvcp_config: 0,
            gvsp_config: 0,
            pending_timeout: 1000,
            ccp: 0,
            controller: None,
            heartbeat_deadline: None,
            other_port: None,
            violations: crate::judge::Violations::new(),
            scp_port: 0,
            scps: 1400,
            scpd: 0,
            scda: Ipv4Addr::UNSPECIFIED,
            sccfg: 0,
            cam: CameraRegs::power_up(&cfg),
            acq: Acquisition::default(),
            line0: false,
            messages: MessageChannel::new(cfg.message_source_port),
            actions: Actions::default(),
            stop_after_frame: false,
            orsp_memory_free: true,
            channel: GvspChannel::new(),
            orsp: OrspChannel::new(cfg.orsp_qpn, cfg.entropy, cfg.orsp_max_pmtu),
            cm: None,
            cm_accepted: None,
            cm_peer: None,
            transport_counters: TransportCounters::default(),
            events: Deque::new(),
            counters: GvcpCounters::default(),
            last_ack: None,
            clock: Clock::new(cfg.tick_offset),
            last_now: Instant::ZERO,
            faults: faults::Faults::new(cfg.entropy),
            cfg,
        }
    }

    /// The configuration it was built with.
    pub fn config(&self) -> &DeviceConfig {
        &self.cfg
    }

    /// The current IPv4 address.
    pub fn ip(&self) -> Ipv4Addr {
        self.ip
    }

    /// The host holding control, if any.
    pub fn controller(&self) -> Option<SocketAddrV4> {
        self.controller
    }

    /// Whether acquisition is running.
    pub fn acquiring(&self) -> bool {
        self.acq.running()
    }

    /// Frame triggers missed so far (FrameTriggerMissedCount).
    pub fn frame_triggers_missed(&self) -> u32 {
        self.acq.missed()
    }

    /// Free-running frames behind AcquisitionFrameRate so far: frame periods that went by
    /// while the transport still sent the frame before (a link slower than the frame rate
    /// asks), or the camera waited for a CPU. None of them is dropped: frames come as fast as
    /// the transport takes them.
    pub fn frames_behind(&self) -> u32 {
        self.acq.behind()
    }

    /// Message channel (event) counters.
    pub fn event_counters(&self) -> EventCounters {
        self.messages.counters()
    }

    /// Action command counters.
    pub fn action_counters(&self) -> ActionCounters {
        self.actions.counters()
    }

    /// Device time at `now`, in ticks (ns).
    pub fn timestamp(&self, now: Instant) -> u64 {
        self.clock.ticks(now)
    }

    /// GVCP counters.
    pub fn gvcp_counters(&self) -> GvcpCounters {
        self.counters
    }

    /// Whether the host asked for GVSP packets with IPv4's Don't Fragment bit
    /// (GevSCPSDoNotFragment): the I/O layer sets it on its stream socket.
    pub fn stream_do_not_fragment(&self) -> bool {
        self.scps & regs::SCPS_DO_NOT_FRAGMENT != 0
    }

    /// Stream channel counters.
    pub fn stream_counters(&self) -> StreamCounters {
        self.channel.counters()
    }

    /// Image settings the next frame is captured with.
    pub fn frame_spec(&self) -> FrameSpec {
        let test_pattern = self.cam.get(regs::TEST_PATTERN);
        FrameSpec {
            width: self.cam.get(regs::WIDTH),
            height: self.cam.get(regs::HEIGHT),
            offset_x: self.cam.get(regs::OFFSET_X),
            offset_y: self.cam.get(regs::OFFSET_Y),
            pixel_format: PixelFormat::from_pfnc(self.cam.get(regs::PIXEL_FORMAT))
                .unwrap_or(PixelFormat::Mono8),
            pattern: Pattern::from_u32(test_pattern).unwrap_or(self.cfg.pattern),
            sensor: test_pattern == regs::TEST_PATTERN_OFF,
        }
    }

    /// Take the next event.
    pub fn poll_event(&mut self) -> Option<DeviceEvent> {
        self.events.pop_front()
    }

    fn event(&mut self, e: DeviceEvent) {
        if self.events.push_back(e).is_err() {
            let _ = self.events.pop_front();
            let _ = self.events.push_back(e);
        }
    }

    fn ticks(&self, now: Instant) -> u64 {
        self.clock.ticks(now)
    }

    // ---------------------------------------------------------------- GVCP

    /// Fault injection: rules from the command line, requests from hosts (FaultInject) for the
    /// I/O layer, counters.
    pub fn faults(&mut self) -> &mut faults::Faults {
        &mut self.faults
    }

    /// Faults injected so far, by kind.
    pub fn faults_injected(&self) -> [u64; faults::KINDS] {
        self.faults.injected()
    }

    /// When [`poll_stream`](Self::poll_stream) or [`handle_timeout`](Self::handle_timeout) next
    /// has something to do.
    pub fn poll_timeout(&self) -> Option<Instant> {
        let mut t = self.heartbeat_deadline;
        let mut earliest = |x: Instant| t = Some(t.map_or(x, |t| t.min(x)));
        let due = self.acq.next_due();
        if let Some(d) = due
            && self.orsp_memory_free
            && self.orsp.ready_for_frame()
        {
            earliest(d);
        }
        if self.stream_open() {
            if self.channel.has_pending() {
                earliest(self.channel.next_packet_at());
            } else if let Some(d) = due {
                earliest(d);
            }
        }
        if let Some(at) = self.actions.next_due() {
            earliest(self.clock.instant_of(at));
        }
        if let Some(m) = self.messages.poll_timeout() {
            earliest(m);
        }
        t
    }

    /// Run timers: scheduled action commands whose time came fire; the heartbeat expires
    /// (control dropped, stream closed) when the controlling host has been silent for the
    /// heartbeat timeout.
    pub fn handle_timeout(&mut self, now: Instant) {
        self.last_now = now;
        // Each scheduled action fires at its own time, as a camera's hardware does: a loop that
        // gets here late (its process descheduled) starts the exposure when it was due, not
        // when the loop came round (an action 1.3 ms late on a loaded machine otherwise).
        let ticks = self.ticks(now);
        while let Some(at) = self.actions.next_due().filter(|&at| at <= ticks) {
            let signals = self.actions.take_due(at);
            self.fire_actions(self.clock.instant_of(at), signals);
        }
        if let (Some(deadline), Some(c)) = (self.heartbeat_deadline, self.controller)
            && now >= deadline
        {
            use crate::judge::{Violation, ViolationKind};
            self.violations.record(match self.other_port {
                Some(p) => Violation::new(
                    ViolationKind::HeartbeatPort,
                    c.port().into(),
                    p.into(),
                    None,
                ),
                None => Violation::new(ViolationKind::HeartbeatLate, self.heartbeat_ms, 0, None),
            });
            self.release_control();
            self.event(DeviceEvent::HeartbeatExpired(c));
        }
    }
}
