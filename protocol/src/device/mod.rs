//! The camera's brain: a GigE Vision device (GVCP server, bootstrap and camera registers,
//! GenICam XML in device memory) with one GVSP stream channel, sans-IO.
//!
//! The caller pumps bytes and time through it: [`Device::handle_gvcp`] for every datagram on
//! UDP 3956 (answer with the returned acknowledge), [`Device::poll_stream`] for GVSP packets to
//! send, [`Device::poll_timeout`] / [`Device::handle_timeout`] for the heartbeat and pacing.
//! Formats and numbers: `reference/gev.md` §2-3.

pub mod acquisition;
pub mod actions;
pub mod chunks;
pub mod events;
pub mod faults;
pub mod features;
pub mod frame;
pub mod pattern;
pub mod regs;
pub mod stream;
pub mod timestamps;

use core::net::{IpAddr, Ipv4Addr, SocketAddrV4};
use core::time::Duration;

use heapless::{Deque, String};

use crate::cm::{self, CmEvent, CmListener, ListenerConfig};
use crate::gev::gvcp::{self, Command, cmd};
use crate::gev::{PixelFormat, status};
use crate::orsp::regs as orsp_regs;
use crate::orsp::{self, ConnectParams, OrspChannel};
use crate::rc::Instant;
use crate::wire::pmtu::Pmtu;
use acquisition::{Acquisition, Exposure, Timing, TriggerOutcome};
use actions::{ActionCounters, ActionOutcome, Actions};
use chunks::Chunks;
use events::{EventCounters, EventItem, MessageChannel, MessagePacket};
use features::acquisition::{activation, command, source};
use features::events::EVENTS;
use frame::{Frame, FrameSource, FrameSpec, Pattern};
use stream::{ChannelConfig, GvspChannel, StreamCounters, StreamPacket};
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
    /// ([`crate::camera::CameraCore::with_entropy`]).
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
}

fn s<const N: usize>(v: &str) -> String<N> {
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
            manufacturer: s("rdmacam"),
            model: s("rdmacam virtual camera"),
            device_version: s(env!("CARGO_PKG_VERSION")),
            manufacturer_info: s("RoCEv2 RDMA camera emulator (ORSP)"),
            serial: s(serial),
            user_name: String::new(),
            gev_version: (2, 2),
            sensor_width: 2048,
            sensor_height: 2048,
            width: 1920,
            height: 1080,
            pixel_format: PixelFormat::Mono8,
            pattern: Pattern::Gradient,
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
    scp_port: u16,
    scps: u32,
    scpd: u32,
    scda: Ipv4Addr,
    sccfg: u32,
    /// The camera registers (0x1F000..0x1F100) a host writes, checked against
    /// [`features::FEATURES`] on the way in.
    cam: [u32; CAM_WORDS],
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
    rc_counters: [u32; 5],
    events: Deque<DeviceEvent, 8>,
    counters: GvcpCounters,
    last_ack: Option<LastAck>,
}

type Status = u16;

/// 32-bit words in the camera register block.
const CAM_WORDS: usize = ((regs::CAM_END - regs::CAM_BASE) / 4) as usize;

fn cam_index(addr: u32) -> usize {
    ((addr - regs::CAM_BASE) / 4) as usize
}

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
            scp_port: 0,
            scps: 1400,
            scpd: 0,
            scda: Ipv4Addr::UNSPECIFIED,
            sccfg: 0,
            cam: {
                let mut cam = [0u32; CAM_WORDS];
                let mut set = |addr: u32, v: u32| cam[cam_index(addr)] = v;
                set(regs::WIDTH, cfg.width.min(cfg.sensor_width));
                set(regs::HEIGHT, cfg.height.min(cfg.sensor_height));
                set(regs::PIXEL_FORMAT, cfg.pixel_format.pfnc());
                set(regs::FRAME_COUNT, 1);
                set(regs::FRAME_RATE, cfg.frame_rate.to_bits());
                // a frame period holds one exposure
                let exposure = cfg
                    .exposure_us
                    .min((1e6 / f64::from(cfg.frame_rate)) as f32);
                set(regs::EXPOSURE_TIME, exposure.max(1.0).to_bits());
                set(regs::TEST_PATTERN, cfg.pattern as u32);
                set(regs::ACTION_SELECTOR, 1);
                for i in 0..regs::TRIGGERS {
                    set(
                        regs::TRIGGER_SOURCE + i * regs::TRIGGER_STRIDE,
                        source::SOFTWARE,
                    );
                }
                set(regs::CHUNK_ENABLE, 1); // the image is always in
                set(regs::FAULT_COUNT, 1);
                set(regs::FAULT_DURATION, 1000);
                cam
            },
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
            rc_counters: [0; 5],
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
        FrameSpec {
            width: self.cam(regs::WIDTH),
            height: self.cam(regs::HEIGHT),
            offset_x: self.cam(regs::OFFSET_X),
            offset_y: self.cam(regs::OFFSET_Y),
            pixel_format: PixelFormat::from_pfnc(self.cam(regs::PIXEL_FORMAT))
                .unwrap_or(PixelFormat::Mono8),
            pattern: Pattern::from_u32(self.cam(regs::TEST_PATTERN)).unwrap_or(Pattern::Gradient),
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

    /// Handle a GVCP datagram from `src` (received on this device's address or as a broadcast).
    /// Returns the acknowledge written into `out`, if one is due.
    pub fn handle_gvcp(
        &mut self,
        now: Instant,
        src: SocketAddrV4,
        datagram: &[u8],
        out: &mut [u8],
    ) -> Option<GvcpReply> {
        self.last_now = now;
        let Ok(c) = Command::parse(datagram) else {
            self.counters.malformed += 1;
            return None;
        };
        if self.controller == Some(src) {
            self.refresh_heartbeat(now);
        }
        let command_crc = crc32fast::hash(datagram);
        if let Some(last) = &self.last_ack
            && last.src == src
            && last.req_id == c.req_id
            && last.command_crc == command_crc
            && out.len() >= last.len
        {
            // a retry: the acknowledge was lost (or is late); answer, do not run it again
            self.counters.retries_answered += 1;
            out[..last.len].copy_from_slice(&last.bytes[..last.len]);
            return Some(GvcpReply {
                len: last.len,
                broadcast_allowed: false,
            });
        }
        self.counters.commands += 1;
        let ack_wanted = c.ack_required() || c.command == cmd::DISCOVERY;
        let mut broadcast_allowed = false;
        let hl = gvcp::HEADER_LEN;
        let (status, len) = if out.len() < hl + gvcp::MAX_PAYLOAD {
            (status::ERROR, 0)
        } else if c.req_id == 0 {
            (status::INVALID_HEADER, 0)
        } else {
            let body = &mut out[hl..hl + gvcp::MAX_PAYLOAD];
            match c.command {
                cmd::DISCOVERY => {
                    broadcast_allowed = c.flags & gvcp::FLAG_BROADCAST_ACK_OR_EXTENDED_ID != 0;
                    for (i, w) in body[..regs::DISCOVERY_DATA_LEN].chunks_mut(4).enumerate() {
                        let v = self.read_word(i as u32 * 4).unwrap_or(0);
                        w.copy_from_slice(&v.to_be_bytes());
                    }
                    (status::SUCCESS, regs::DISCOVERY_DATA_LEN)
                }
                cmd::READREG => self.cmd_readreg(c.payload, body),
                cmd::WRITEREG => self.cmd_writereg(now, src, c.payload, body),
                cmd::READMEM => self.cmd_readmem(c.payload, body),
                cmd::WRITEMEM => self.cmd_writemem(now, src, c.payload, body),
                cmd::FORCEIP => match self.cmd_forceip(src, c.payload) {
                    Some(st) => (st, 0),
                    None => return None, // not for us
                },
                cmd::ACTION => match self.cmd_action(now, c.flags, c.payload) {
                    Some(st) => (st, 0),
                    None => return None, // not for this camera: silent
                },
                cmd::PACKETRESEND => {
                    self.cmd_packetresend(src, c.flags, c.payload);
                    return None; // never acknowledged
                }
                _ => (status::NOT_IMPLEMENTED, 0),
            }
        };
        if status & 0x8000 != 0 {
            self.counters.errors += 1;
        }
        if !ack_wanted {
            return None;
        }
        gvcp::emit_ack_header(status, c.command, len as u16, c.req_id, out).ok()?;
        let len = hl + len;
        if c.command != cmd::DISCOVERY {
            let mut bytes = [0u8; gvcp::HEADER_LEN + gvcp::MAX_PAYLOAD];
            bytes[..len].copy_from_slice(&out[..len]);
            self.last_ack = Some(LastAck {
                src,
                req_id: c.req_id,
                command_crc,
                len,
                bytes,
            });
        }
        Some(GvcpReply {
            len,
            broadcast_allowed,
        })
    }

    fn cmd_readreg(&mut self, p: &[u8], body: &mut [u8]) -> (Status, usize) {
        if p.is_empty() || p.len() % 4 != 0 || p.len() > gvcp::MAX_PAYLOAD {
            return (status::INVALID_PARAMETER, 0);
        }
        for (i, a) in p.chunks_exact(4).enumerate() {
            let addr = u32::from_be_bytes([a[0], a[1], a[2], a[3]]);
            match self.read_reg(addr) {
                Ok(v) => body[i * 4..i * 4 + 4].copy_from_slice(&v.to_be_bytes()),
                Err(st) => return (st, i * 4),
            }
        }
        (status::SUCCESS, p.len())
    }

    fn cmd_writereg(
        &mut self,
        now: Instant,
        src: SocketAddrV4,
        p: &[u8],
        body: &mut [u8],
    ) -> (Status, usize) {
        if p.is_empty() || p.len() % 8 != 0 || p.len() > gvcp::MAX_PAYLOAD {
            return (status::INVALID_PARAMETER, 0);
        }
        let word = |w: &[u8]| u32::from_be_bytes([w[0], w[1], w[2], w[3]]);
        let pairs = p.chunks_exact(8).map(|c| (word(&c[..4]), word(&c[4..])));
        // WRITEREG_ACK counts registers written
        self.write_words(now, src, pairs, 1, body)
    }

    fn cmd_readmem(&mut self, p: &[u8], body: &mut [u8]) -> (Status, usize) {
        if p.len() != 8 {
            return (status::INVALID_PARAMETER, 0);
        }
        let addr = u32::from_be_bytes([p[0], p[1], p[2], p[3]]);
        let count = usize::from(u16::from_be_bytes([p[6], p[7]]));
        if count == 0 || count % 4 != 0 || count + 4 > gvcp::MAX_PAYLOAD {
            return (status::INVALID_PARAMETER, 0);
        }
        if addr % 4 != 0 {
            return (status::BAD_ALIGNMENT, 0);
        }
        body[..4].copy_from_slice(&addr.to_be_bytes());
        for i in 0..count / 4 {
            match self.read_word(addr.wrapping_add(i as u32 * 4)) {
                Ok(v) => body[4 + i * 4..8 + i * 4].copy_from_slice(&v.to_be_bytes()),
                Err(st) => return (st, 4),
            }
        }
        (status::SUCCESS, 4 + count)
    }

    fn cmd_writemem(
        &mut self,
        now: Instant,
        src: SocketAddrV4,
        p: &[u8],
        body: &mut [u8],
    ) -> (Status, usize) {
        if p.len() < 8 || p.len() % 4 != 0 || p.len() > gvcp::MAX_PAYLOAD {
            return (status::INVALID_PARAMETER, 0);
        }
        let addr = u32::from_be_bytes([p[0], p[1], p[2], p[3]]);
        if addr % 4 != 0 {
            return (status::BAD_ALIGNMENT, 0);
        }
        let words = p[4..].chunks_exact(4).enumerate().map(|(i, w)| {
            (
                addr.wrapping_add(i as u32 * 4),
                u32::from_be_bytes([w[0], w[1], w[2], w[3]]),
            )
        });
        // WRITEMEM_ACK counts bytes written
        self.write_words(now, src, words, 4, body)
    }

    /// Write `(address, value)` pairs until one fails; the acknowledge payload is reserved (2)
    /// and the index (2): how many were written, times `unit`.
    fn write_words(
        &mut self,
        now: Instant,
        src: SocketAddrV4,
        words: impl Iterator<Item = (u32, u32)>,
        unit: u16,
        body: &mut [u8],
    ) -> (Status, usize) {
        let mut done = 0u16;
        let mut st = status::SUCCESS;
        for (addr, v) in words {
            if let Err(e) = self.write_reg(now, src, addr, v) {
                st = e;
                break;
            }
            done += unit;
        }
        body[..2].copy_from_slice(&[0, 0]);
        body[2..4].copy_from_slice(&done.to_be_bytes());
        (st, 4)
    }

    /// FORCEIP: `None` when the MAC is not ours (stay silent). GigE Vision lets any host
    /// re-address a device; while one holds control, only that host may, so a bystander can
    /// never move the camera away from its controller (ACCESS_DENIED).
    fn cmd_forceip(&mut self, src: SocketAddrV4, p: &[u8]) -> Option<Status> {
        if p.len() < 56 {
            return Some(status::INVALID_PARAMETER);
        }
        if p[2..8] != self.cfg.mac {
            return None;
        }
        if self.controller.is_some_and(|c| c.ip() != src.ip()) {
            self.counters.access_denied += 1;
            return Some(status::ACCESS_DENIED);
        }
        let ip = |at: usize| Ipv4Addr::new(p[at], p[at + 1], p[at + 2], p[at + 3]);
        let (new_ip, mask, gw) = (ip(20), ip(36), ip(52));
        if new_ip.is_unspecified() || new_ip.is_broadcast() || new_ip.is_multicast() {
            return Some(status::INVALID_PARAMETER);
        }
        self.ip = new_ip;
        self.netmask = mask;
        self.gateway = gw;
        self.event(DeviceEvent::ForceIp {
            ip: new_ip,
            netmask: mask,
            gateway: gw,
        });
        Some(status::SUCCESS)
    }

    fn cmd_packetresend(&mut self, src: SocketAddrV4, flags: u8, p: &[u8]) {
        // From the controlling host's IP, on any port (hosts send it from their stream socket).
        if self.controller.map(|c| *c.ip()) != Some(*src.ip()) {
            self.counters.access_denied += 1;
            return;
        }
        let word = |at: usize| u32::from_be_bytes([p[at], p[at + 1], p[at + 2], p[at + 3]]);
        let extended = flags & gvcp::FLAG_BROADCAST_ACK_OR_EXTENDED_ID != 0;
        // 64-bit form, as aravis 0.8.26 sends it (captured on a veth, see tests/device.rs):
        // channel (2) · reserved (2) · first packet id (4) · last packet id (4) · block id (8).
        let (channel, block, first, last) = if extended && p.len() >= 20 {
            (
                u16::from_be_bytes([p[0], p[1]]),
                (u64::from(word(12)) << 32) | u64::from(word(16)),
                word(4),
                word(8),
            )
        } else if p.len() >= 12 {
            (
                u16::from_be_bytes([p[0], p[1]]),
                u64::from(u16::from_be_bytes([p[2], p[3]])),
                word(4) & 0x00ff_ffff,
                word(8) & 0x00ff_ffff,
            )
        } else {
            self.counters.errors += 1;
            return;
        };
        if channel != 0 {
            self.counters.errors += 1;
            return;
        }
        if self.faults.refuse_resend() {
            self.channel.refuse_resend(block, first);
        } else {
            self.channel.request_resend(block, first, last);
        }
    }

    // ---------------------------------------------------------------- registers

    /// Read a 32-bit register (READREG semantics).
    pub fn read_reg(&self, addr: u32) -> Result<u32, Status> {
        if addr % 4 != 0 {
            return Err(status::BAD_ALIGNMENT);
        }
        self.read_word(addr)
    }

    fn read_word(&self, addr: u32) -> Result<u32, Status> {
        let str_word = |s: &str, base: u32, len: u32| -> Option<u32> {
            (addr >= base && addr < base + len).then(|| {
                let b = s.as_bytes();
                let at = (addr - base) as usize;
                u32::from_be_bytes(core::array::from_fn(|i| {
                    b.get(at + i).copied().unwrap_or(0)
                }))
            })
        };
        let strings: [(&str, u32, u32); 8] = [
            (&self.cfg.manufacturer, regs::MANUFACTURER_NAME, 32),
            (&self.cfg.model, regs::MODEL_NAME, 32),
            (&self.cfg.device_version, regs::DEVICE_VERSION, 32),
            (&self.cfg.manufacturer_info, regs::MANUFACTURER_INFO, 48),
            (&self.cfg.serial, regs::SERIAL_NUMBER, 16),
            (&self.user_name, regs::USER_NAME, 16),
            (&self.url, regs::FIRST_URL, 512),
            ("", regs::SECOND_URL, 512),
        ];
        for (s, base, len) in strings {
            if let Some(w) = str_word(s, base, len) {
                return Ok(w);
            }
        }
        let mac = self.cfg.mac;
        Ok(match addr {
            regs::VERSION => {
                (u32::from(self.cfg.gev_version.0) << 16) | u32::from(self.cfg.gev_version.1)
            }
            // big-endian device, transmitter class, UTF-8 strings
            regs::DEVICE_MODE => 0x8000_0001,
            regs::MAC_HIGH => u32::from(u16::from_be_bytes([mac[0], mac[1]])),
            regs::MAC_LOW => u32::from_be_bytes([mac[2], mac[3], mac[4], mac[5]]),
            regs::IP_CONFIG_SUPPORTED => 0x0000_0007,
            regs::IP_CONFIG_CURRENT => 0x0000_0005,
            regs::CURRENT_IP => u32::from(self.ip),
            regs::CURRENT_MASK => u32::from(self.netmask),
            regs::CURRENT_GATEWAY => u32::from(self.gateway),
            regs::N_INTERFACES => 1,
            regs::PERSISTENT_IP => self.persistent[0],
            regs::PERSISTENT_MASK => self.persistent[1],
            regs::PERSISTENT_GATEWAY => self.persistent[2],
            regs::LINK_SPEED => self.cfg.link_speed_mbps,
            regs::N_MESSAGE_CHANNELS => 1,
            regs::N_STREAM_CHANNELS => 1,
            regs::N_ACTIVE_LINKS => 1,
            // SCSPx supported, legacy 16-bit block id supported
            regs::SC_CAPABILITY => 0xC000_0000,
            // MCSP supported
            regs::MC_CAPABILITY => 0x8000_0000,
            // user name, serial, heartbeat disable, link speed, CCP app port/IP (31..27),
            // unconditional action (20), scheduled action (17), action (6), event data (4),
            // event (3), packet resend (2), WRITEMEM (1), concatenation (0)
            regs::GVCP_CAPABILITY => 0xF812_005F,
            regs::HEARTBEAT_TIMEOUT => self.heartbeat_ms,
            regs::TICK_FREQ_HIGH => 0,
            regs::TICK_FREQ_LOW => 1_000_000_000,
            regs::TIMESTAMP_CONTROL => 0,
            regs::TIMESTAMP_LATCHED_HIGH => (self.clock.latched() >> 32) as u32,
            regs::TIMESTAMP_LATCHED_LOW => self.clock.latched() as u32,
            regs::GVCP_CONFIG => self.gvcp_config,
            regs::PENDING_TIMEOUT => self.pending_timeout,
            regs::GVSP_CONFIG => self.gvsp_config,
            regs::CCP => self.ccp,
            regs::PRIMARY_APP_PORT => self.controller.map_or(0, |c| u32::from(c.port())),
            regs::PRIMARY_APP_IP => self.controller.map_or(0, |c| u32::from(*c.ip())),
            regs::SCP0 => u32::from(self.scp_port),
            regs::SCPS0 => self.scps,
            regs::SCPD0 => self.scpd,
            regs::SCDA0 => u32::from(self.scda),
            regs::SCSP0 => u32::from(self.cfg.stream_source_port),
            // resend destination option not offered; big-endian only
            regs::SCC0 => 0,
            regs::SCCFG0 => self.sccfg,
            a if let Some(v) = self.messages.read(a) => v,
            a if let Some(v) = self.actions.read(a) => v,
            a if a < regs::BOOTSTRAP_END => 0,
            regs::PAYLOAD_SIZE => {
                (self.frame_spec().payload_size() + self.chunks(0).tail_len()) as u32
            }
            regs::CHUNK_LAYOUT_ID => self.chunks(0).layout_id(self.frame_spec().payload_size()),
            regs::FRAME_TRIGGER_MISSED => self.acq.missed(),
            a if (regs::FAULT_INJECTED..regs::FAULT_INJECTED + 4 * faults::KINDS as u32)
                .contains(&a) =>
            {
                let n = self.faults.injected()[((a - regs::FAULT_INJECTED) / 4) as usize];
                u32::try_from(n).unwrap_or(u32::MAX)
            }
            regs::ACQUISITION_COMMAND => u32::from(self.acq.running()),
            regs::SENSOR_WIDTH => self.cfg.sensor_width,
            regs::SENSOR_HEIGHT => self.cfg.sensor_height,
            a if !self.cfg.orsp_offered
                && (a == orsp::regs::BASE + orsp::regs::ORSP_VERSION
                    || a == orsp::regs::BASE + orsp::regs::ORSP_CAPS) =>
            {
                0
            }
            a if (orsp::regs::BASE..orsp::regs::BASE + orsp::regs::BLOCK).contains(&a) => self
                .orsp
                .read_reg(a - orsp::regs::BASE, &self.rc_counters)
                .ok_or(status::INVALID_ADDRESS)?,
            regs::FRAMES_SENT => self.channel.counters().frames_sent as u32,
            a if (regs::CAM_BASE..regs::CAM_END).contains(&a) => self.cam(a),
            a if (regs::XML_BASE..regs::XML_BASE + regs::XML_WINDOW).contains(&a) => {
                let b = GENICAM_XML.as_bytes();
                let at = (a - regs::XML_BASE) as usize;
                u32::from_be_bytes(core::array::from_fn(|i| {
                    b.get(at + i).copied().unwrap_or(0)
                }))
            }
            _ => return Err(status::INVALID_ADDRESS),
        })
    }

    fn may_write(&self, src: SocketAddrV4) -> bool {
        self.controller.is_none_or(|c| c == src)
    }

    fn image_locked(&self) -> bool {
        self.acq.running() || self.acq.armed() || self.cam(regs::TL_PARAMS_LOCKED) != 0
    }

    /// Write a 32-bit register (WRITEREG semantics) on behalf of `src`.
    pub fn write_reg(
        &mut self,
        now: Instant,
        src: SocketAddrV4,
        addr: u32,
        v: u32,
    ) -> Result<(), Status> {
        if addr % 4 != 0 {
            return Err(status::BAD_ALIGNMENT);
        }
        if addr == regs::CCP {
            return self.write_ccp(now, src, v);
        }
        if !self.may_write(src) {
            self.counters.access_denied += 1;
            return Err(status::ACCESS_DENIED);
        }
        match addr {
            a if (regs::USER_NAME..regs::USER_NAME + 16).contains(&a) => {
                let mut bytes = [0u8; 16];
                bytes[..self.user_name.len()].copy_from_slice(self.user_name.as_bytes());
                let at = (a - regs::USER_NAME) as usize;
                bytes[at..at + 4].copy_from_slice(&v.to_be_bytes());
                let end = bytes.iter().position(|b| *b == 0).unwrap_or(16);
                let text =
                    core::str::from_utf8(&bytes[..end]).map_err(|_| status::INVALID_PARAMETER)?;
                self.user_name = s(text);
            }
            regs::PERSISTENT_IP => self.persistent[0] = v,
            regs::PERSISTENT_MASK => self.persistent[1] = v,
            regs::PERSISTENT_GATEWAY => self.persistent[2] = v,
            regs::HEARTBEAT_TIMEOUT => {
                if v < 500 {
                    return Err(status::INVALID_PARAMETER);
                }
                self.heartbeat_ms = v;
                if self.controller.is_some() {
                    self.refresh_heartbeat(now);
                }
            }
            regs::TIMESTAMP_CONTROL => self.clock.control(now, v),
            regs::GVCP_CONFIG => {
                self.gvcp_config = v
                    & (regs::GVCP_CONFIG_HEARTBEAT_DISABLE
                        | regs::GVCP_CONFIG_UNCONDITIONAL_ACTION);
            }
            regs::PENDING_TIMEOUT => self.pending_timeout = v,
            regs::GVSP_CONFIG => self.gvsp_config = v & regs::GVSP_CONFIG_EXTENDED_ID,
            regs::SCP0 => {
                if (v >> 16) & 0xf != 0 {
                    return Err(status::INVALID_PARAMETER); // one network interface
                }
                self.scp_port = v as u16;
                if self.scp_port == 0 {
                    self.channel.reset();
                }
            }
            regs::SCPS0 => {
                let size = v & 0xffff;
                if !(576..=9000).contains(&size) {
                    return Err(status::INVALID_PARAMETER);
                }
                self.scps = size | (v & regs::SCPS_DO_NOT_FRAGMENT);
                if v & regs::SCPS_FIRE_TEST_PACKET != 0 {
                    let cfg = self.channel_config();
                    self.channel.fire_test_packet(cfg);
                }
            }
            regs::SCPD0 => self.scpd = v,
            regs::SCDA0 => self.scda = Ipv4Addr::from(v),
            regs::SCCFG0 => self.sccfg = 0, // no optional stream features
            a if let Some(r) = self.messages.write(a, v) => r?,
            a if let Some(r) = self.actions.write(a, v) => r?,
            a if (orsp::regs::BASE..orsp::regs::BASE + orsp::regs::BLOCK).contains(&a)
                && !self.cfg.orsp_offered =>
            {
                return Err(status::NOT_IMPLEMENTED);
            }
            a if (orsp::regs::BASE..orsp::regs::BASE + orsp::regs::BLOCK).contains(&a) => {
                let was_connected = self.orsp.is_connected();
                let r = self.orsp.write_reg(a - orsp::regs::BASE, v)?;
                if let Some(params) = r {
                    self.orsp_connected(params);
                } else if was_connected && !self.orsp.is_connected() {
                    self.event(DeviceEvent::OrspDisconnected);
                }
            }
            a if (regs::CAM_BASE..regs::CAM_END).contains(&a) => self.write_camera(now, a, v)?,
            a if a < regs::BOOTSTRAP_END
                || (regs::XML_BASE..regs::XML_BASE + regs::XML_WINDOW).contains(&a) =>
            {
                return Err(status::WRITE_PROTECT);
            }
            _ => return Err(status::INVALID_ADDRESS),
        }
        Ok(())
    }

    /// A camera register: the value of its word.
    fn cam(&self, addr: u32) -> u32 {
        self.cam[cam_index(addr)]
    }

    /// The current value of an integer feature (register-backed or computed), for limits that
    /// follow another feature.
    fn feature_value(&self, name: &str) -> Option<f64> {
        let f = features::by_name(name)?;
        match f.kind {
            features::Kind::Diff { a, b } => Some(self.feature_value(a)? - self.feature_value(b)?),
            features::Kind::Formula { .. } if name == "AcquisitionFrameRateLimit" => Some(
                acquisition::frame_rate_limit(self.cam_f32(regs::EXPOSURE_TIME)),
            ),
            features::Kind::Float { reg, .. } => {
                Some(f64::from(f32::from_bits(self.read_word(reg.addr).ok()?)))
            }
            _ => {
                let r = f.reg()?;
                Some(f64::from(r.extract(self.read_word(r.addr).ok()?)))
            }
        }
    }

    fn cam_f32(&self, addr: u32) -> f32 {
        f32::from_bits(self.cam(addr))
    }

    /// A host writes a camera register: the feature table says whether the register exists,
    /// whether it may be written now, and which values it takes; then the value is stored, or
    /// the command executed.
    fn write_camera(&mut self, now: Instant, addr: u32, v: u32) -> Result<(), Status> {
        let mut found = None;
        for f in features::by_register(addr) {
            let r = f.check(v, &|n| self.feature_value(n));
            if r.is_ok() || found.is_none() {
                found = Some((f, r));
            }
            if r.is_ok() {
                break;
            }
        }
        let Some((f, checked)) = found else {
            return Err(status::WRITE_PROTECT);
        };
        if f.reg().is_some_and(|r| r.locked) && self.image_locked() {
            return Err(status::WRITE_PROTECT);
        }
        checked.map_err(|e| match e {
            features::Refusal::ReadOnly => status::WRITE_PROTECT,
            features::Refusal::OutOfRange => status::INVALID_PARAMETER,
        })?;
        let trigger_software = features::by_name("TriggerSoftware")
            .and_then(|f| f.reg())
            .and_then(|r| r.copy_at(addr));
        match addr {
            regs::ACQUISITION_COMMAND if v == command::START => self.start_acquisition(now),
            regs::ACQUISITION_COMMAND if v == command::ABORT => {
                self.acq.abort();
                self.stop_acquisition(now);
            }
            regs::ACQUISITION_COMMAND => self.stop_acquisition(now),
            regs::FAULT_INJECT => self
                .faults
                .inject(
                    self.cam(regs::FAULT_SELECTOR),
                    self.cam(regs::FAULT_COUNT),
                    self.cam(regs::FAULT_DURATION),
                )
                .map_err(|e| match e {
                    faults::InjectError::NotSupported => status::NOT_IMPLEMENTED,
                    faults::InjectError::Busy => status::BUSY,
                })?,
            _ if trigger_software.is_some() => {
                let selector = trigger_software.unwrap_or(0);
                if self.trigger_armed(selector, source::SOFTWARE) {
                    self.fire_trigger(now, selector);
                }
            }
            regs::EXPOSURE_TIME => {
                self.cam[cam_index(addr)] = v;
                // a frame period holds one exposure: the frame rate comes down to fit
                let limit = acquisition::frame_rate_limit(f32::from_bits(v)) as f32;
                if self.cam_f32(regs::FRAME_RATE) > limit {
                    self.cam[cam_index(regs::FRAME_RATE)] = limit.to_bits();
                }
            }
            _ => self.cam[cam_index(addr)] = v,
        }
        Ok(())
    }

    // ---------------------------------------------------------------- triggers

    /// The register of trigger `selector` at `base` (TRIGGER_MODE, ...).
    fn trigger_reg(&self, base: u32, selector: u32) -> u32 {
        self.cam(base + selector * regs::TRIGGER_STRIDE)
    }

    /// Whether trigger `selector` is on and listens to `src`.
    fn trigger_armed(&self, selector: u32, src: u32) -> bool {
        self.trigger_reg(regs::TRIGGER_MODE, selector) == 1
            && self.trigger_reg(regs::TRIGGER_SOURCE, selector) == src
    }

    /// Free running: FrameStart's trigger is off.
    fn free_run(&self) -> bool {
        self.trigger_reg(regs::TRIGGER_MODE, 0) == 0
    }

    fn timing(&self) -> Timing {
        Timing::new(
            self.cam_f32(regs::FRAME_RATE),
            self.cam_f32(regs::EXPOSURE_TIME),
        )
    }

    /// Whether the transport can take another frame (else a frame trigger is missed).
    fn can_take_frame(&self) -> bool {
        if self.orsp.is_connected() {
            self.orsp_memory_free && self.orsp.ready_for_frame()
        } else {
            self.stream_open() && !self.channel.busy()
        }
    }

    /// Trigger `selector` fired at `now`.
    fn fire_trigger(&mut self, now: Instant, selector: u32) {
        if selector == 1 {
            // AcquisitionStart: an armed acquisition starts
            if self.acq.armed() {
                self.begin_acquisition(now);
            }
            return;
        }
        let delay = Duration::from_nanos(
            (f64::from(f32::from_bits(self.trigger_reg(regs::TRIGGER_DELAY, 0))) * 1e3) as u64,
        );
        let can_take = self.can_take_frame();
        if self.acq.trigger(now, delay, self.timing(), can_take) == TriggerOutcome::Missed {
            let missed = self.acq.missed();
            self.raise(now, 4, 0, Some(missed));
        }
    }

    /// Fire every trigger whose source is `src` (an edge already matched by the caller).
    fn fire_source(&mut self, now: Instant, src: u32) {
        for selector in (0..regs::TRIGGERS).rev() {
            if self.trigger_armed(selector, src) {
                self.fire_trigger(now, selector);
            }
        }
    }

    /// Input Line0 is at `level` from `now` (the emulator's `--trigger-hz` drives it): an edge
    /// fires the triggers whose source is Line0 and whose TriggerActivation matches it.
    pub fn set_line0(&mut self, now: Instant, level: bool) {
        if level == self.line0 {
            return;
        }
        self.line0 = level;
        for selector in (0..regs::TRIGGERS).rev() {
            let edge_ok = match self.trigger_reg(regs::TRIGGER_ACTIVATION, selector) {
                activation::RISING_EDGE => level,
                activation::FALLING_EDGE => !level,
                _ => true,
            };
            if edge_ok && self.trigger_armed(selector, source::LINE0) {
                self.fire_trigger(now, selector);
            }
        }
    }

    // ---------------------------------------------------------------- events

    /// Raise event `selector` (EventSelector value) if the host switched it on.
    fn raise(&mut self, now: Instant, selector: usize, block_id: u64, data: Option<u32>) {
        self.raise_at(self.ticks(now), selector, block_id, data);
    }

    fn raise_at(&mut self, timestamp: u64, selector: usize, block_id: u64, data: Option<u32>) {
        let on = self.cam(regs::EVENT_NOTIFICATION + 4 * selector as u32) == 1;
        if on && let Some(def) = EVENTS.get(selector) {
            self.messages.push(EventItem {
                id: def.id,
                block_id,
                timestamp,
                data,
            });
        }
    }

    /// The next message-channel datagram (an event, or its retransmission) to send at `now`
    /// from the MCSP port, written into `buf`.
    pub fn poll_message(&mut self, now: Instant, buf: &mut [u8]) -> Option<MessagePacket> {
        self.messages.poll_transmit(now, buf)
    }

    /// A datagram received on the message channel's socket (the host's acknowledge).
    pub fn handle_message(&mut self, datagram: &[u8]) -> bool {
        self.messages.handle_ack(datagram)
    }

    // ---------------------------------------------------------------- actions

    fn cmd_action(&mut self, now: Instant, flags: u8, p: &[u8]) -> Option<Status> {
        let allowed = self.controller.is_some()
            || self.gvcp_config & regs::GVCP_CONFIG_UNCONDITIONAL_ACTION != 0;
        match self.actions.handle(flags, p, self.ticks(now), allowed) {
            ActionOutcome::NotForUs => None,
            ActionOutcome::Fire(signals, st) => {
                self.fire_actions(now, signals);
                Some(st)
            }
            ActionOutcome::Scheduled => Some(status::SUCCESS),
            ActionOutcome::Refused(st) => Some(st),
        }
    }

    /// Action signals fired (bit n = signal n, TriggerSource Action(n+1)).
    fn fire_actions(&mut self, now: Instant, signals: u8) {
        for (n, src) in [source::ACTION1, source::ACTION2].into_iter().enumerate() {
            if signals & (1 << n) != 0 {
                self.fire_source(now, src);
            }
        }
    }

    fn write_ccp(&mut self, now: Instant, src: SocketAddrV4, v: u32) -> Result<(), Status> {
        let wants = v & (regs::CCP_EXCLUSIVE | regs::CCP_CONTROL);
        match (self.controller, wants != 0) {
            (None, true) => {
                self.controller = Some(src);
                self.ccp = wants;
                self.refresh_heartbeat(now);
                self.event(DeviceEvent::ControlTaken(src));
                Ok(())
            }
            (Some(c), true) if c == src => {
                self.ccp = wants;
                Ok(())
            }
            (Some(c), false) if c == src => {
                self.release_control();
                self.event(DeviceEvent::ControlReleased(src));
                Ok(())
            }
            (None, false) => Ok(()),
            _ => {
                // switchover is not offered: another host cannot take or drop control
                self.counters.access_denied += 1;
                Err(status::ACCESS_DENIED)
            }
        }
    }

    fn release_control(&mut self) {
        let was_connected = self.orsp.is_connected();
        self.orsp.control_lost();
        if was_connected {
            self.event(DeviceEvent::OrspDisconnected);
        }
        self.controller = None;
        self.ccp = 0;
        self.heartbeat_deadline = None;
        self.stop_acquisition(self.last_now);
        self.scp_port = 0;
        self.cam[cam_index(regs::TL_PARAMS_LOCKED)] = 0;
        self.channel.reset();
        self.messages.close();
        self.actions.clear_scheduled();
    }

    fn refresh_heartbeat(&mut self, now: Instant) {
        self.heartbeat_deadline = if self.gvcp_config & regs::GVCP_CONFIG_HEARTBEAT_DISABLE != 0 {
            None
        } else {
            Some(now + Duration::from_millis(u64::from(self.heartbeat_ms)))
        };
    }

    /// AcquisitionStart: start, or with the AcquisitionStart trigger on, wait for it.
    fn start_acquisition(&mut self, now: Instant) {
        if self.acq.running() || self.acq.armed() {
            return;
        }
        if self.trigger_reg(regs::TRIGGER_MODE, 1) == 1 {
            self.acq.arm();
        } else {
            self.begin_acquisition(now);
        }
    }

    fn begin_acquisition(&mut self, now: Instant) {
        // Like a sensor, a free-running camera reads the first frame out an exposure later.
        self.acq.start(now, self.timing(), self.free_run());
        self.orsp.start_acquisition();
        self.event(DeviceEvent::AcquisitionStarted);
        self.raise(now, 0, 0, None);
    }

    fn stop_acquisition(&mut self, now: Instant) {
        let was = self.acq.running();
        self.acq.stop();
        if was {
            self.orsp.stop_acquisition();
            self.event(DeviceEvent::AcquisitionStopped);
            self.raise(now, 1, 0, None);
        }
    }

    /// Capture the frame of exposure `e` as block `block_id`: its timestamp is the start of
    /// exposure, its chunks what the settings say now. Raises FrameStart and ExposureEnd.
    fn capture<S: FrameSource + ?Sized>(
        &mut self,
        src: &mut S,
        e: Exposure,
        block_id: u64,
    ) -> Frame {
        let start = self.ticks(e.start);
        let mut frame = src.capture(&self.frame_spec(), start);
        frame.timestamp = start;
        frame.chunks = self.chunks(block_id);
        self.raise_at(start, 2, block_id, None);
        self.raise_at(self.ticks(e.readout), 3, block_id, None);
        frame
    }

    /// The chunk data a frame captured now as block `frame_id` carries.
    fn chunks(&self, frame_id: u64) -> Chunks {
        let mut mask = 0u16;
        for (i, _) in features::chunks::CHUNKS.iter().enumerate() {
            if self.cam(regs::CHUNK_ENABLE + 4 * i as u32) == 1 {
                mask |= 1 << i;
            }
        }
        Chunks {
            active: self.cam(regs::CHUNK_MODE_ACTIVE) == 1,
            mask: mask | 1,
            frame_id,
            exposure_us: f64::from(self.cam_f32(regs::EXPOSURE_TIME)),
            gain_db: f64::from(self.cam_f32(regs::GAIN)),
        }
    }

    fn channel_config(&self) -> ChannelConfig {
        ChannelConfig {
            dst_ip: self.scda,
            dst_port: self.scp_port,
            packet_size: self.scps & 0xffff,
            delay_ns: u64::from(self.scpd),
            extended: self.gvsp_config & regs::GVSP_CONFIG_EXTENDED_ID != 0,
            link_bps: u64::from(self.cfg.link_speed_mbps) * 1_000_000,
        }
    }

    fn stream_open(&self) -> bool {
        self.scp_port != 0 && !self.scda.is_unspecified()
    }

    // ---------------------------------------------------------------- stream and time

    /// The next GVSP packet to send at `now`, written into `buf` (at least SCPS bytes).
    pub fn poll_stream<S: FrameSource + ?Sized>(
        &mut self,
        now: Instant,
        src: &mut S,
        buf: &mut [u8],
    ) -> Option<StreamPacket> {
        self.last_now = now;
        if !self.stream_open() {
            return None;
        }
        if !self.orsp.is_connected()
            && !self.channel.busy()
            && let Some(e) = self.acq.due(now, self.timing())
        {
            let mut cfg = self.channel_config();
            let frame = self.capture(src, e, self.channel.next_block_id(cfg.extended));
            if self.faults.drop_frame() {
                // captured, never sent: the host sees the block id skipped
                self.channel.skip_block(cfg.extended);
                if self.frame_taken(now, e) {
                    self.stop_acquisition(now);
                }
                return None;
            }
            if self.acq.frames() == 0 && self.cfg.first_frame_mbps > 0 {
                cfg.link_bps = cfg
                    .link_bps
                    .min(u64::from(self.cfg.first_frame_mbps) * 1_000_000);
            }
            self.channel.start_frame(frame, cfg);
            if self.frame_taken(now, e) {
                self.stop_acquisition(now);
            }
        }
        let dst = (self.scda, self.scp_port);
        self.channel.poll_transmit(now, src, dst, buf)
    }

    /// Fault injection: rules from the command line, requests from hosts (FaultInject) for the
    /// I/O layer, counters.
    pub fn faults(&mut self) -> &mut faults::Faults {
        &mut self.faults
    }

    /// Faults injected so far, by kind.
    pub fn faults_injected(&self) -> [u64; faults::KINDS] {
        self.faults.injected()
    }

    /// The ORSP channel (the transport feeds it completions and host messages, and posts its
    /// work requests).
    pub fn orsp(&mut self) -> &mut OrspChannel<ORSP_BUFFERS> {
        &mut self.orsp
    }

    /// The ORSP channel, read-only (message bytes for the transport's payload source).
    pub fn orsp_channel(&self) -> &OrspChannel<ORSP_BUFFERS> {
        &self.orsp
    }

    /// The transport's RC counters for the ORSP COUNTERS registers: retransmitted packets, RNR
    /// NAKs, sequence NAKs, CNPs, ACK timeouts.
    pub fn set_rc_counters(&mut self, c: [u32; 5]) {
        self.rc_counters = c;
    }

    /// ORSP: capture the next frame if one is due and the channel can take it. The caller puts
    /// its bytes in memory and passes it to [`orsp_send_frame`](Self::orsp_send_frame).
    pub fn poll_orsp_frame<S: FrameSource + ?Sized>(
        &mut self,
        now: Instant,
        src: &mut S,
    ) -> Option<Frame> {
        self.last_now = now;
        if !(self.orsp_memory_free && self.orsp.ready_for_frame()) {
            return None;
        }
        let e = self.acq.due(now, self.timing())?;
        let frame = self.capture(src, e, self.orsp.next_block_id());
        if self.faults.drop_frame() {
            // captured, never sent: the next LEADER flags the gap
            self.orsp.skip_frame();
            if self.frame_taken(now, e) {
                self.stop_acquisition(now);
            }
            return None;
        }
        // The last frame of SingleFrame/MultiFrame still goes out: stop once it is handed over.
        self.stop_after_frame = self.frame_taken(now, e);
        Some(frame)
    }

    /// The frame of exposure `e` was taken at `now`: count it; free running, the next one
    /// follows a frame period later (never in the past). Returns whether it was the last one
    /// SingleFrame or MultiFrame asks for.
    fn frame_taken(&mut self, now: Instant, e: Exposure) -> bool {
        let limit = match self.cam(regs::ACQUISITION_MODE) {
            1 => Some(1),
            2 => Some(self.cam(regs::FRAME_COUNT)),
            _ => None,
        };
        self.acq.taken(now, e, self.timing(), limit)
    }

    /// ORSP: send a frame from [`poll_orsp_frame`](Self::poll_orsp_frame) whose bytes sit at
    /// payload handle `handle`.
    pub fn orsp_send_frame(&mut self, frame: &Frame, handle: u32) -> orsp::FrameOutcome {
        let outcome = self.orsp.send_frame(
            &frame.leader(),
            &frame.trailer(),
            frame.size() as u64,
            handle,
        );
        if core::mem::take(&mut self.stop_after_frame) {
            self.stop_acquisition(self.last_now);
        }
        outcome
    }

    /// Whether an RDMA CM request from `src` comes from the controlling application: its GVCP
    /// address (IPv4, or IPv4-mapped IPv6), or the IPv6 GID it wrote to OrspHostGid (GVCP is
    /// IPv4 only, so an IPv6 host names its RoCE address that way first). With no controller,
    /// nobody may connect.
    fn cm_admitted(&self, src: IpAddr) -> bool {
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
    /// A REQ from anyone but the controlling application ([`Self::cm_admitted`]) gets a REJ,
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
                comm_id_seed: dpsn ^ now.0 as u32,
            };
            // CM_PORT only changes while disconnected, so nothing established is lost here
            self.cm = Some((port, CmListener::new(cfg, &hello)));
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
        let (ev, reply) = listener.handle_mad(now, mad, out);
        match ev {
            CmEvent::Accepting(a) => {
                // the HELLO states the path MTU this connection will use
                let pmtu = a.pmtu.bytes().to_be_bytes();
                listener.patch_rep_private(out, orsp::msg::HELLO_PATH_MTU_OFFSET, &pmtu);
                self.cm_accepted = Some(a);
            }
            CmEvent::Established => self.cm_connect(),
            CmEvent::Disconnected => {
                self.cm_accepted = None;
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
    fn cm_connect(&mut self) {
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
    fn orsp_connected(&mut self, mut p: ConnectParams) {
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
        let signals = self.actions.take_due(self.ticks(now));
        if signals != 0 {
            self.fire_actions(now, signals);
        }
        if let (Some(deadline), Some(c)) = (self.heartbeat_deadline, self.controller)
            && now >= deadline
        {
            self.release_control();
            self.event(DeviceEvent::HeartbeatExpired(c));
        }
    }
}
