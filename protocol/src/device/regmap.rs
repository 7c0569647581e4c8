//! The register map: every address a host reads or writes, as blocks that answer their own
//! addresses: the bootstrap registers (GigE Vision's, with the message channel's and the action
//! commands' own blocks inside), the camera registers (checked against the feature table), the
//! ORSP block, and the GenICam XML in device memory.

use core::net::{Ipv4Addr, SocketAddrV4};

use super::acquisition::frame_rate_limit;
use super::features::acquisition::{command, source};
use super::{
    Device, DeviceConfig, DeviceEvent, GENICAM_XML, Status, clipped, faults, features, regs,
};
use crate::gev::{Axis, PixelFormat, status};
use crate::orsp;
use crate::rc::Instant;

impl Device {
    /// Read a 32-bit register (READREG semantics).
    pub fn read_reg(&self, addr: u32) -> Result<u32, Status> {
        if addr % 4 != 0 {
            return Err(status::BAD_ALIGNMENT);
        }
        self.read_word(addr)
    }

    /// Any 32-bit word of the map, by block; unaligned addresses read the bytes there.
    pub(super) fn read_word(&self, addr: u32) -> Result<u32, Status> {
        if addr < regs::BOOTSTRAP_END {
            Ok(self.read_bootstrap(addr))
        } else if ORSP_BLOCK.contains(&addr) {
            self.read_orsp(addr)
        } else if CAMERA_BLOCK.contains(&addr) {
            Ok(self.read_camera(addr))
        } else {
            xml_word(addr).ok_or(status::INVALID_ADDRESS)
        }
    }

    /// The bootstrap registers (GigE Vision's 0x0000..0x10000): strings, fixed and current
    /// values, the message channel's and the action commands' blocks; unused words read 0.
    fn read_bootstrap(&self, addr: u32) -> u32 {
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
                return w;
            }
        }
        let mac = self.cfg.mac;
        match addr {
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
            _ => 0,
        }
    }

    /// The camera registers: what a host wrote (the feature table checked it), and values the
    /// device computes (PayloadSize, counters).
    fn read_camera(&self, addr: u32) -> u32 {
        match addr {
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
            regs::FRAMES_SENT => self.channel.counters().frames_sent as u32,
            a => self.cam.get(a),
        }
    }

    /// The ORSP block. A camera without an ORSP transport reads OrspVersion and OrspCaps 0, so
    /// a host can tell "no ORSP here" from "unreachable".
    fn read_orsp(&self, addr: u32) -> Result<u32, Status> {
        let offset = addr - orsp::regs::BASE;
        if !self.cfg.orsp_offered
            && (offset == orsp::regs::ORSP_VERSION || offset == orsp::regs::ORSP_CAPS)
        {
            return Ok(0);
        }
        self.orsp
            .read_reg(offset, &self.transport_counters)
            .ok_or(status::INVALID_ADDRESS)
    }

    pub(super) fn image_locked(&self) -> bool {
        self.acq.running() || self.acq.armed() || self.cam.get(regs::TL_PARAMS_LOCKED) != 0
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
        if addr < regs::BOOTSTRAP_END {
            self.write_bootstrap(now, addr, v)
        } else if ORSP_BLOCK.contains(&addr) {
            self.write_orsp(addr, v)
        } else if CAMERA_BLOCK.contains(&addr) {
            self.write_camera(now, addr, v)
        } else if xml_word(addr).is_some() {
            Err(status::WRITE_PROTECT)
        } else {
            Err(status::INVALID_ADDRESS)
        }
    }

    /// A bootstrap register, written by the controlling host; read-only ones refuse with
    /// WRITE_PROTECT.
    fn write_bootstrap(&mut self, now: Instant, addr: u32, v: u32) -> Result<(), Status> {
        match addr {
            a if (regs::USER_NAME..regs::USER_NAME + 16).contains(&a) => {
                let mut bytes = [0u8; 16];
                bytes[..self.user_name.len()].copy_from_slice(self.user_name.as_bytes());
                let at = (a - regs::USER_NAME) as usize;
                bytes[at..at + 4].copy_from_slice(&v.to_be_bytes());
                let end = bytes.iter().position(|b| *b == 0).unwrap_or(16);
                let text =
                    core::str::from_utf8(&bytes[..end]).map_err(|_| status::INVALID_PARAMETER)?;
                self.user_name = clipped(text);
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
                // heartbeat disable and unconditional action are offered; pending
                // acknowledges, extended status codes and IEEE 1588 are not, and a host that
                // sets them must hear so rather than wait for what never comes
                let offered =
                    regs::GVCP_CONFIG_HEARTBEAT_DISABLE | regs::GVCP_CONFIG_UNCONDITIONAL_ACTION;
                if v & !offered != 0 {
                    return Err(status::INVALID_PARAMETER);
                }
                self.gvcp_config = v;
            }
            regs::PENDING_TIMEOUT => self.pending_timeout = v,
            regs::GVSP_CONFIG => {
                if v & !regs::GVSP_CONFIG_EXTENDED_ID != 0 {
                    return Err(status::INVALID_PARAMETER); // 64-bit block ids only
                }
                self.gvsp_config = v;
            }
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
            regs::SCCFG0 => {
                if v != 0 {
                    return Err(status::INVALID_PARAMETER); // no optional stream features
                }
                self.sccfg = 0;
            }
            a if let Some(r) = self.messages.write(a, v) => r?,
            a if let Some(r) = self.actions.write(a, v) => r?,
            _ => return Err(status::WRITE_PROTECT),
        }
        Ok(())
    }

    /// The ORSP block; NOT_IMPLEMENTED on a camera without an ORSP transport.
    fn write_orsp(&mut self, addr: u32, v: u32) -> Result<(), Status> {
        if !self.cfg.orsp_offered {
            return Err(status::NOT_IMPLEMENTED);
        }
        let was_connected = self.orsp.is_connected();
        let r = self.orsp.write_reg(addr - orsp::regs::BASE, v)?;
        if let Some(params) = r {
            self.orsp_connected(params);
        } else if was_connected && !self.orsp.is_connected() {
            self.event(DeviceEvent::OrspDisconnected);
        }
        Ok(())
    }

    /// The current value of an integer feature (register-backed or computed), for limits that
    /// follow another feature.
    pub(super) fn feature_value(&self, name: &str) -> Option<f64> {
        let f = features::by_name(name)?;
        match f.kind {
            features::Kind::Diff { a, b } => Some(self.feature_value(a)? - self.feature_value(b)?),
            features::Kind::Step { format, axis } => {
                let pf = PixelFormat::from_pfnc(self.feature_value(format)? as u32);
                Some(f64::from(pf.map_or(1, |p| p.step(axis))))
            }
            features::Kind::Formula { .. } if name == "AcquisitionFrameRateLimit" => {
                Some(frame_rate_limit(self.cam.f32(regs::EXPOSURE_TIME)))
            }
            features::Kind::Float { reg, .. } => {
                Some(f64::from(f32::from_bits(self.read_word(reg.addr).ok()?)))
            }
            _ => {
                let r = f.reg()?;
                Some(f64::from(r.extract(self.read_word(r.addr).ok()?)))
            }
        }
    }

    /// A host writes a camera register: the feature table says whether the register exists,
    /// whether it may be written now, and which values it takes; then the value is stored, or
    /// the command executed.
    pub(super) fn write_camera(&mut self, now: Instant, addr: u32, v: u32) -> Result<(), Status> {
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
                    self.cam.get(regs::FAULT_SELECTOR),
                    self.cam.get(regs::FAULT_COUNT),
                    self.cam.get(regs::FAULT_DURATION),
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
            // a format of a coarser step than the image's width or offsets: refused, not a
            // line that ends in half a pixel pair or starts on another colour, nor a setting
            // changed behind the host's back
            regs::PIXEL_FORMAT
                if PixelFormat::from_pfnc(v).is_some_and(|p| {
                    [
                        (regs::WIDTH, Axis::Width),
                        (regs::OFFSET_X, Axis::OffsetX),
                        (regs::OFFSET_Y, Axis::OffsetY),
                    ]
                    .iter()
                    .any(|&(r, axis)| self.cam.get(r) % p.step(axis) != 0)
                }) =>
            {
                return Err(status::INVALID_PARAMETER);
            }
            // Off is the sensor's image: a camera without one has nothing to show
            regs::TEST_PATTERN if v == regs::TEST_PATTERN_OFF && !self.cfg.sensor => {
                return Err(status::INVALID_PARAMETER);
            }
            regs::EXPOSURE_TIME => {
                self.cam.set(addr, v);
                // a frame period holds one exposure: the frame rate comes down to fit
                let limit = frame_rate_limit(f32::from_bits(v)) as f32;
                if self.cam.f32(regs::FRAME_RATE) > limit {
                    self.cam.set(regs::FRAME_RATE, limit.to_bits());
                }
            }
            _ => self.cam.set(addr, v),
        }
        Ok(())
    }
}

/// The ORSP registers' addresses.
const ORSP_BLOCK: core::ops::Range<u32> = orsp::regs::BASE..orsp::regs::BASE + orsp::regs::BLOCK;
/// The camera registers' addresses.
const CAMERA_BLOCK: core::ops::Range<u32> = regs::CAM_BASE..regs::CAM_END;

/// A word of the GenICam XML in device memory (zero past its end), if `addr` is in its window.
fn xml_word(addr: u32) -> Option<u32> {
    (regs::XML_BASE..regs::XML_BASE + regs::XML_WINDOW)
        .contains(&addr)
        .then(|| {
            let b = GENICAM_XML.as_bytes();
            let at = (addr - regs::XML_BASE) as usize;
            u32::from_be_bytes(core::array::from_fn(|i| {
                b.get(at + i).copied().unwrap_or(0)
            }))
        })
}

/// 32-bit words in the camera register block.
const CAM_WORDS: usize = ((regs::CAM_END - regs::CAM_BASE) / 4) as usize;

/// The camera registers (`CAM_BASE..CAM_END`) as a host wrote them, word by word; the feature
/// table checks every value on the way in ([`Device::write_camera`]).
#[derive(Debug)]
pub(super) struct CameraRegs([u32; CAM_WORDS]);

impl CameraRegs {
    /// The values at power-up: the configured image, frame rate and pattern, software
    /// triggers, the image chunk on, one-packet faults lasting a second.
    pub(super) fn power_up(cfg: &DeviceConfig) -> Self {
        let mut cam = CameraRegs([0; CAM_WORDS]);
        cam.set(regs::WIDTH, cfg.width.min(cfg.sensor_width));
        cam.set(regs::HEIGHT, cfg.height.min(cfg.sensor_height));
        cam.set(regs::PIXEL_FORMAT, cfg.pixel_format.pfnc());
        cam.set(regs::FRAME_COUNT, 1);
        cam.set(regs::FRAME_RATE, cfg.frame_rate.to_bits());
        // a frame period holds one exposure
        let exposure = cfg
            .exposure_us
            .min((1e6 / f64::from(cfg.frame_rate)) as f32);
        cam.set(regs::EXPOSURE_TIME, exposure.max(1.0).to_bits());
        cam.set(
            regs::TEST_PATTERN,
            if cfg.sensor {
                regs::TEST_PATTERN_OFF
            } else {
                cfg.pattern as u32
            },
        );
        cam.set(regs::ACTION_SELECTOR, 1);
        if cfg.chunk_mode {
            cam.set(regs::CHUNK_MODE_ACTIVE, 1);
            for c in super::features::chunks::CHUNKS {
                cam.set(regs::CHUNK_ENABLE + 4 * c.selector, 1);
            }
        }
        for i in 0..regs::TRIGGERS {
            cam.set(
                regs::TRIGGER_SOURCE + i * regs::TRIGGER_STRIDE,
                source::SOFTWARE,
            );
        }
        cam.set(regs::CHUNK_ENABLE, 1); // the image is always in
        cam.set(regs::FAULT_COUNT, 1);
        cam.set(regs::FAULT_DURATION, 1000);
        cam
    }

    /// The word at `addr` (in the block).
    pub(super) fn get(&self, addr: u32) -> u32 {
        self.0[Self::index(addr)]
    }

    /// The word at `addr` as an IEEE 754 float (the Float features).
    pub(super) fn f32(&self, addr: u32) -> f32 {
        f32::from_bits(self.get(addr))
    }

    /// Store `v` at `addr` (in the block).
    pub(super) fn set(&mut self, addr: u32, v: u32) {
        self.0[Self::index(addr)] = v;
    }

    fn index(addr: u32) -> usize {
        ((addr - regs::CAM_BASE) / 4) as usize
    }
}
