//! The camera's features: one table from which both the GenICam XML the camera serves and the
//! checks on every camera-register write are made, so the two cannot disagree.
//!
//! Each [`Feature`] names an SFNC feature (or an rdmacam one, namespace Custom), its category,
//! its type, the register behind it, its access and its limits. [`write_xml`] turns the table
//! into the GenApi 1.1 description: this file is also compiled into the crate's build script
//! (`build.rs`), which writes the XML at build time, so the `no_std` firmware serves the same
//! bytes as the emulator. The device ([`super::Device`]) looks a written register up here
//! ([`by_register`]) and refuses values outside [`Feature::check`] with a GVCP status.
//!
//! A limit may follow another feature ([`Limit::Feature`]); features that exist only to be such
//! a limit are [`Kind::Diff`] (an IntSwissKnife `A - B`): `OffsetX` may go up to
//! `WidthMax - Width`, `Width` up to `WidthMax - OffsetX`.

use core::fmt::{self, Write};

use super::PixelFormat;
use super::orsp_regs as orsp;
use super::regs;

/// Who may read or write a register.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Read only.
    Ro,
    /// Write only (commands).
    Wo,
    /// Read and write.
    Rw,
}

impl Access {
    fn xml(self) -> &'static str {
        match self {
            Access::Ro => "RO",
            Access::Wo => "WO",
            Access::Rw => "RW",
        }
    }
}

/// The register behind a feature.
#[derive(Debug, Clone, Copy)]
pub struct Reg {
    /// Address in device memory.
    pub addr: u32,
    /// Length in bytes (4, 8 for 64-bit values, the string length for strings).
    pub len: u32,
    /// Access from the host.
    pub access: Access,
    /// Bit field within the 32-bit big-endian word, GenICam numbering (bit 0 = most
    /// significant): `(msb, lsb)`; `None` = the whole register.
    pub bits: Option<(u8, u8)>,
    /// The device changes the value by itself: hosts must not cache it.
    pub volatile: bool,
    /// Refused while acquisition runs or the transport parameters are locked.
    pub locked: bool,
    /// Features whose write changes this register's value (GenApi `pInvalidator`): a host
    /// that caches it reads it again after any of them is written.
    pub invalidated_by: &'static [&'static str],
}

/// A register with the defaults: 4 bytes, whole word, cachable, not locked.
const fn reg(addr: u32, access: Access) -> Reg {
    Reg {
        addr,
        len: 4,
        access,
        bits: None,
        volatile: false,
        locked: false,
        invalidated_by: &[],
    }
}

impl Reg {
    const fn len(mut self, len: u32) -> Reg {
        self.len = len;
        self
    }
    const fn bits(mut self, msb: u8, lsb: u8) -> Reg {
        self.bits = Some((msb, lsb));
        self
    }
    const fn bit(self, b: u8) -> Reg {
        self.bits(b, b)
    }
    const fn volatile(mut self) -> Reg {
        self.volatile = true;
        self
    }
    const fn locked(mut self) -> Reg {
        self.locked = true;
        self
    }
    const fn invalidated_by(mut self, features: &'static [&'static str]) -> Reg {
        self.invalidated_by = features;
        self
    }

    /// The field's value within the register word `word`.
    pub fn extract(&self, word: u32) -> u32 {
        match self.bits {
            None => word,
            Some((msb, lsb)) => {
                let shift = 31 - u32::from(lsb);
                let width = u32::from(lsb - msb) + 1;
                (word >> shift) & mask(width)
            }
        }
    }
}

fn mask(width: u32) -> u32 {
    if width >= 32 {
        u32::MAX
    } else {
        (1 << width) - 1
    }
}

/// A bound of an integer feature.
#[derive(Debug, Clone, Copy)]
pub enum Limit {
    /// A fixed number.
    Fixed(i64),
    /// The current value of another feature.
    Feature(&'static str),
}

/// One entry of an enumeration.
#[derive(Debug, Clone, Copy)]
pub struct Entry {
    /// SFNC or rdmacam name.
    pub name: &'static str,
    /// Register value.
    pub value: u32,
    /// Defined by SFNC (namespace Standard) or by rdmacam (Custom).
    pub standard: bool,
}

/// What a feature is, and where its value lives.
#[derive(Debug, Clone, Copy)]
pub enum Kind {
    /// IInteger on a register.
    Int {
        /// The register.
        reg: Reg,
        /// Smallest value.
        min: Limit,
        /// Largest value.
        max: Limit,
        /// Increment.
        inc: i64,
        /// Unit shown to users.
        unit: &'static str,
    },
    /// IFloat on an IEEE-754 single-precision register.
    Float {
        /// The register.
        reg: Reg,
        /// Smallest value.
        min: f32,
        /// Largest value.
        max: f32,
        /// Unit shown to users.
        unit: &'static str,
    },
    /// IEnumeration on a register.
    Enum {
        /// The register.
        reg: Reg,
        /// The values it takes.
        entries: &'static [Entry],
    },
    /// IBoolean on a register or bit: 1 = true.
    Bool {
        /// The register.
        reg: Reg,
    },
    /// ICommand: writing `value` executes it.
    Command {
        /// The register.
        reg: Reg,
        /// The value written.
        value: u32,
    },
    /// IString on a register block.
    Str {
        /// The register block.
        reg: Reg,
    },
    /// IInteger computed as `a - b` (IntSwissKnife), read only.
    Diff {
        /// Minuend feature.
        a: &'static str,
        /// Subtrahend feature.
        b: &'static str,
    },
}

/// How prominently a host shows a feature.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Visibility {
    /// Everyone.
    Beginner,
    /// Users who know the camera.
    Expert,
    /// Developers.
    Guru,
    /// Used by other features only.
    Invisible,
}

/// One feature of the camera.
#[derive(Debug, Clone, Copy)]
pub struct Feature {
    /// The node's name (SFNC's where SFNC has the feature).
    pub name: &'static str,
    /// The category that lists it.
    pub category: &'static str,
    /// Defined by SFNC / the GigE Vision standard (namespace Standard) or by rdmacam (Custom).
    pub standard: bool,
    /// How prominently hosts show it.
    pub visibility: Visibility,
    /// One line for users.
    pub tooltip: &'static str,
    /// Its type and register.
    pub kind: Kind,
}

/// A category: a folder of features under its parent.
#[derive(Debug, Clone, Copy)]
pub struct Category {
    /// Name.
    pub name: &'static str,
    /// The category that lists it; `None` for Root only.
    pub parent: Option<&'static str>,
    /// Defined by SFNC (Standard) or by rdmacam (Custom).
    pub standard: bool,
}

/// Why a value was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// The register is read only.
    ReadOnly,
    /// Outside the limits, not on the increment, or not an enumeration entry.
    OutOfRange,
}

impl Feature {
    /// The register behind the feature, if it has one.
    pub const fn reg(&self) -> Option<&Reg> {
        match &self.kind {
            Kind::Int { reg, .. }
            | Kind::Float { reg, .. }
            | Kind::Enum { reg, .. }
            | Kind::Bool { reg }
            | Kind::Command { reg, .. }
            | Kind::Str { reg } => Some(reg),
            Kind::Diff { .. } => None,
        }
    }

    /// Check the field value `v` a host writes. `value_of` gives the current value of another
    /// feature (for limits that follow one).
    pub fn check(&self, v: u32, value_of: &dyn Fn(&str) -> Option<i64>) -> Result<(), Refusal> {
        let Some(reg) = self.reg() else {
            return Err(Refusal::ReadOnly);
        };
        if reg.access == Access::Ro {
            return Err(Refusal::ReadOnly);
        }
        let bound = |l: Limit| match l {
            Limit::Fixed(x) => Some(x),
            Limit::Feature(n) => value_of(n),
        };
        let ok = match self.kind {
            Kind::Int { min, max, inc, .. } => {
                let v = i64::from(v);
                let lo = bound(min).unwrap_or(i64::MIN);
                let hi = bound(max).unwrap_or(i64::MAX);
                v >= lo && v <= hi && (inc <= 1 || (v - lo) % inc == 0)
            }
            Kind::Float { min, max, .. } => {
                let f = f32::from_bits(v);
                f >= min && f <= max
            }
            Kind::Enum { entries, .. } => entries.iter().any(|e| e.value == v),
            Kind::Bool { .. } => v <= 1,
            Kind::Command { value, .. } => v == value,
            Kind::Str { .. } | Kind::Diff { .. } => true,
        };
        if ok { Ok(()) } else { Err(Refusal::OutOfRange) }
    }
}

// ------------------------------------------------------------------------------------ the table

use Access::{Ro, Rw, Wo};
use Visibility::{Beginner, Expert, Guru, Invisible};

/// The categories, parents before children.
pub const CATEGORIES: &[Category] = &[
    Category {
        name: "Root",
        parent: None,
        standard: true,
    },
    Category {
        name: "DeviceControl",
        parent: Some("Root"),
        standard: true,
    },
    Category {
        name: "ImageFormatControl",
        parent: Some("Root"),
        standard: true,
    },
    Category {
        name: "AcquisitionControl",
        parent: Some("Root"),
        standard: true,
    },
    Category {
        name: "AnalogControl",
        parent: Some("Root"),
        standard: true,
    },
    Category {
        name: "TransportLayerControl",
        parent: Some("Root"),
        standard: true,
    },
    Category {
        name: "GigEVision",
        parent: Some("TransportLayerControl"),
        standard: true,
    },
    Category {
        name: "OrspControl",
        parent: Some("TransportLayerControl"),
        standard: false,
    },
];

const fn std_entry(name: &'static str, value: u32) -> Entry {
    Entry {
        name,
        value,
        standard: true,
    }
}

const fn custom_entry(name: &'static str, value: u32) -> Entry {
    Entry {
        name,
        value,
        standard: false,
    }
}

const fn pixel_entry(p: PixelFormat) -> Entry {
    std_entry(p.name(), p.pfnc())
}

const PIXEL_FORMATS: [Entry; PixelFormat::ALL.len()] = {
    let mut out = [std_entry("", 0); PixelFormat::ALL.len()];
    let mut i = 0;
    while i < out.len() {
        out[i] = pixel_entry(PixelFormat::ALL[i]);
        i += 1;
    }
    out
};

/// Test patterns, in `Pattern`'s order (a unit test keeps them equal).
pub const TEST_PATTERNS: &[Entry] = &[
    custom_entry("Gradient", 0),
    custom_entry("MovingBar", 1),
    custom_entry("Checkerboard", 2),
    custom_entry("Noise", 3),
];

const fn feature(
    name: &'static str,
    category: &'static str,
    visibility: Visibility,
    tooltip: &'static str,
    kind: Kind,
) -> Feature {
    Feature {
        name,
        category,
        standard: true,
        visibility,
        tooltip,
        kind,
    }
}

const fn custom(
    name: &'static str,
    category: &'static str,
    visibility: Visibility,
    tooltip: &'static str,
    kind: Kind,
) -> Feature {
    Feature {
        name,
        category,
        standard: false,
        visibility,
        tooltip,
        kind,
    }
}

const fn int(reg: Reg) -> Kind {
    Kind::Int {
        reg,
        min: Limit::Fixed(0),
        max: Limit::Fixed(u32::MAX as i64),
        inc: 1,
        unit: "",
    }
}

const fn int_range(reg: Reg, min: Limit, max: Limit, inc: i64, unit: &'static str) -> Kind {
    Kind::Int {
        reg,
        min,
        max,
        inc,
        unit,
    }
}

const fn string(addr: u32, len: u32, access: Access) -> Kind {
    Kind::Str {
        reg: reg(addr, access).len(len),
    }
}

const fn orsp_reg(off: u32, access: Access) -> Reg {
    reg(orsp::BASE + off, access)
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
    orsp_ro(name, tooltip, orsp::COUNTERS + 4 * i)
}

/// Every feature the camera has, in the order hosts list them within a category.
pub const FEATURES: &[Feature] = &[
    // ---------------------------------------------------------------- DeviceControl
    feature(
        "DeviceVendorName",
        "DeviceControl",
        Beginner,
        "Name of the manufacturer.",
        string(regs::MANUFACTURER_NAME, 32, Ro),
    ),
    feature(
        "DeviceModelName",
        "DeviceControl",
        Beginner,
        "Model of the device.",
        string(regs::MODEL_NAME, 32, Ro),
    ),
    feature(
        "DeviceVersion",
        "DeviceControl",
        Beginner,
        "Version of the device.",
        string(regs::DEVICE_VERSION, 32, Ro),
    ),
    feature(
        "DeviceManufacturerInfo",
        "DeviceControl",
        Beginner,
        "Manufacturer information about the device.",
        string(regs::MANUFACTURER_INFO, 48, Ro),
    ),
    feature(
        "DeviceSerialNumber",
        "DeviceControl",
        Expert,
        "Serial number of the device.",
        string(regs::SERIAL_NUMBER, 16, Ro),
    ),
    feature(
        "DeviceID",
        "DeviceControl",
        Invisible,
        "Serial number of the device (SFNC 1.x name).",
        string(regs::SERIAL_NUMBER, 16, Ro),
    ),
    feature(
        "DeviceUserID",
        "DeviceControl",
        Beginner,
        "User-programmable name of the device.",
        string(regs::USER_NAME, 16, Rw),
    ),
    // ---------------------------------------------------------------- ImageFormatControl
    feature(
        "SensorWidth",
        "ImageFormatControl",
        Expert,
        "Effective width of the sensor in pixels.",
        int(reg(regs::SENSOR_WIDTH, Ro)),
    ),
    feature(
        "SensorHeight",
        "ImageFormatControl",
        Expert,
        "Effective height of the sensor in pixels.",
        int(reg(regs::SENSOR_HEIGHT, Ro)),
    ),
    feature(
        "WidthMax",
        "ImageFormatControl",
        Expert,
        "Largest image width (no binning or decimation: the sensor width).",
        int(reg(regs::SENSOR_WIDTH, Ro)),
    ),
    feature(
        "HeightMax",
        "ImageFormatControl",
        Expert,
        "Largest image height (no binning or decimation: the sensor height).",
        int(reg(regs::SENSOR_HEIGHT, Ro)),
    ),
    feature(
        "Width",
        "ImageFormatControl",
        Beginner,
        "Width of the image in pixels; at most WidthMax - OffsetX.",
        int_range(
            reg(regs::WIDTH, Rw).locked(),
            Limit::Fixed(16),
            Limit::Feature("WidthLimit"),
            1,
            "",
        ),
    ),
    feature(
        "Height",
        "ImageFormatControl",
        Beginner,
        "Height of the image in lines; at most HeightMax - OffsetY.",
        int_range(
            reg(regs::HEIGHT, Rw).locked(),
            Limit::Fixed(1),
            Limit::Feature("HeightLimit"),
            1,
            "",
        ),
    ),
    feature(
        "OffsetX",
        "ImageFormatControl",
        Beginner,
        "Horizontal offset of the image on the sensor; at most WidthMax - Width.",
        int_range(
            reg(regs::OFFSET_X, Rw).locked(),
            Limit::Fixed(0),
            Limit::Feature("OffsetXLimit"),
            1,
            "",
        ),
    ),
    feature(
        "OffsetY",
        "ImageFormatControl",
        Beginner,
        "Vertical offset of the image on the sensor; at most HeightMax - Height.",
        int_range(
            reg(regs::OFFSET_Y, Rw).locked(),
            Limit::Fixed(0),
            Limit::Feature("OffsetYLimit"),
            1,
            "",
        ),
    ),
    custom(
        "WidthLimit",
        "ImageFormatControl",
        Invisible,
        "Largest Width at the current OffsetX.",
        Kind::Diff {
            a: "WidthMax",
            b: "OffsetX",
        },
    ),
    custom(
        "HeightLimit",
        "ImageFormatControl",
        Invisible,
        "Largest Height at the current OffsetY.",
        Kind::Diff {
            a: "HeightMax",
            b: "OffsetY",
        },
    ),
    custom(
        "OffsetXLimit",
        "ImageFormatControl",
        Invisible,
        "Largest OffsetX at the current Width.",
        Kind::Diff {
            a: "WidthMax",
            b: "Width",
        },
    ),
    custom(
        "OffsetYLimit",
        "ImageFormatControl",
        Invisible,
        "Largest OffsetY at the current Height.",
        Kind::Diff {
            a: "HeightMax",
            b: "Height",
        },
    ),
    feature(
        "PixelFormat",
        "ImageFormatControl",
        Beginner,
        "Format of the pixels in the stream (PFNC).",
        Kind::Enum {
            reg: reg(regs::PIXEL_FORMAT, Rw).locked(),
            entries: &PIXEL_FORMATS,
        },
    ),
    custom(
        "TestPattern",
        "ImageFormatControl",
        Beginner,
        "Synthetic image; the first 8 bytes of every frame carry its frame counter (big-endian).",
        Kind::Enum {
            reg: reg(regs::TEST_PATTERN, Rw),
            entries: TEST_PATTERNS,
        },
    ),
    // ---------------------------------------------------------------- AcquisitionControl
    feature(
        "AcquisitionMode",
        "AcquisitionControl",
        Beginner,
        "Continuous, SingleFrame (one frame, then stop) or MultiFrame (AcquisitionFrameCount frames).",
        Kind::Enum {
            reg: reg(regs::ACQUISITION_MODE, Rw).locked(),
            entries: &[
                std_entry("Continuous", 0),
                std_entry("SingleFrame", 1),
                std_entry("MultiFrame", 2),
            ],
        },
    ),
    feature(
        "AcquisitionStart",
        "AcquisitionControl",
        Beginner,
        "Start the acquisition.",
        Kind::Command {
            reg: reg(regs::ACQUISITION_COMMAND, Wo),
            value: 1,
        },
    ),
    feature(
        "AcquisitionStop",
        "AcquisitionControl",
        Beginner,
        "Stop the acquisition after the current frame.",
        Kind::Command {
            reg: reg(regs::ACQUISITION_COMMAND, Wo),
            value: 0,
        },
    ),
    feature(
        "AcquisitionFrameCount",
        "AcquisitionControl",
        Beginner,
        "Frames a MultiFrame acquisition takes.",
        int_range(
            reg(regs::FRAME_COUNT, Rw),
            Limit::Fixed(1),
            Limit::Fixed(1_000_000),
            1,
            "",
        ),
    ),
    feature(
        "AcquisitionFrameRate",
        "AcquisitionControl",
        Beginner,
        "Frames per second; the camera also waits for the link when a frame takes longer.",
        Kind::Float {
            reg: reg(regs::FRAME_RATE, Rw),
            min: 0.1,
            max: 10_000.0,
            unit: "Hz",
        },
    ),
    feature(
        "ExposureTime",
        "AcquisitionControl",
        Beginner,
        "Exposure time in microseconds; the first frame of an acquisition leaves after one exposure.",
        Kind::Float {
            reg: reg(regs::EXPOSURE_TIME, Rw),
            min: 1.0,
            max: 10_000_000.0,
            unit: "us",
        },
    ),
    // ---------------------------------------------------------------- AnalogControl
    feature(
        "Gain",
        "AnalogControl",
        Beginner,
        "Gain in dB (stored; the synthetic image does not change).",
        Kind::Float {
            reg: reg(regs::GAIN, Rw),
            min: 0.0,
            max: 48.0,
            unit: "dB",
        },
    ),
    // ---------------------------------------------------------------- TransportLayerControl
    feature(
        "PayloadSize",
        "TransportLayerControl",
        Expert,
        "Bytes of one frame's payload.",
        int(reg(regs::PAYLOAD_SIZE, Ro).volatile().invalidated_by(&[
            "Width",
            "Height",
            "PixelFormat",
        ])),
    ),
    feature(
        "TLParamsLocked",
        "TransportLayerControl",
        Invisible,
        "Set by the host while streaming: image size and format cannot change.",
        int_range(
            reg(regs::TL_PARAMS_LOCKED, Rw),
            Limit::Fixed(0),
            Limit::Fixed(1),
            1,
            "",
        ),
    ),
    feature(
        "GevVersionMajor",
        "GigEVision",
        Expert,
        "Major version of the GigE Vision specification the device follows.",
        int(reg(regs::VERSION, Ro).bits(0, 15)),
    ),
    feature(
        "GevVersionMinor",
        "GigEVision",
        Expert,
        "Minor version of the GigE Vision specification the device follows.",
        int(reg(regs::VERSION, Ro).bits(16, 31)),
    ),
    feature(
        "GevMACAddress",
        "GigEVision",
        Expert,
        "MAC address of the network interface.",
        int(reg(regs::MAC_HIGH, Ro).len(8)),
    ),
    feature(
        "GevCurrentIPAddress",
        "GigEVision",
        Expert,
        "IPv4 address of the network interface.",
        int(reg(regs::CURRENT_IP, Ro).volatile()),
    ),
    feature(
        "GevCurrentSubnetMask",
        "GigEVision",
        Expert,
        "Subnet mask of the network interface.",
        int(reg(regs::CURRENT_MASK, Ro).volatile()),
    ),
    feature(
        "GevCurrentDefaultGateway",
        "GigEVision",
        Expert,
        "Default gateway of the network interface.",
        int(reg(regs::CURRENT_GATEWAY, Ro).volatile()),
    ),
    feature(
        "GevLinkSpeed",
        "GigEVision",
        Expert,
        "Speed of the link in Mbit/s; the stream is paced to it.",
        int(reg(regs::LINK_SPEED, Ro)),
    ),
    feature(
        "GevHeartbeatTimeout",
        "GigEVision",
        Guru,
        "Milliseconds without GVCP traffic from the controlling host after which control is dropped.",
        int_range(
            reg(regs::HEARTBEAT_TIMEOUT, Rw),
            Limit::Fixed(500),
            Limit::Fixed(u32::MAX as i64),
            1,
            "ms",
        ),
    ),
    feature(
        "GevTimestampTickFrequency",
        "GigEVision",
        Expert,
        "Ticks per second of the timestamp counter.",
        int(reg(regs::TICK_FREQ_HIGH, Ro).len(8)),
    ),
    feature(
        "GevMessageChannelCount",
        "GigEVision",
        Expert,
        "Message channels the device has.",
        int(reg(regs::N_MESSAGE_CHANNELS, Ro)),
    ),
    feature(
        "GevStreamChannelCount",
        "GigEVision",
        Expert,
        "Stream channels the device has.",
        int(reg(regs::N_STREAM_CHANNELS, Ro)),
    ),
    feature(
        "GevSCPHostPort",
        "GigEVision",
        Expert,
        "UDP port of the stream's destination; 0 closes the stream channel.",
        int_range(
            reg(regs::SCP0, Rw).bits(16, 31),
            Limit::Fixed(0),
            Limit::Fixed(65535),
            1,
            "",
        ),
    ),
    feature(
        "GevSCPSPacketSize",
        "GigEVision",
        Expert,
        "Size of the stream's UDP payload plus IP and UDP headers, in bytes.",
        int_range(
            reg(regs::SCPS0, Rw).bits(16, 31),
            Limit::Fixed(576),
            Limit::Fixed(9000),
            4,
            "B",
        ),
    ),
    feature(
        "GevSCPSDoNotFragment",
        "GigEVision",
        Guru,
        "Stream packets carry IPv4's Don't Fragment bit.",
        Kind::Bool {
            reg: reg(regs::SCPS0, Rw).bit(1),
        },
    ),
    feature(
        "GevSCPSFireTestPacket",
        "GigEVision",
        Guru,
        "Send one test packet of GevSCPSPacketSize bytes to the stream destination.",
        Kind::Bool {
            reg: reg(regs::SCPS0, Rw).bit(0).volatile(),
        },
    ),
    feature(
        "GevSCPD",
        "GigEVision",
        Expert,
        "Delay between stream packets, in timestamp ticks.",
        int(reg(regs::SCPD0, Rw)),
    ),
    feature(
        "GevSCDA",
        "GigEVision",
        Expert,
        "IPv4 address of the stream's destination.",
        int(reg(regs::SCDA0, Rw)),
    ),
    feature(
        "GevSCSP",
        "GigEVision",
        Expert,
        "UDP source port of the stream.",
        int(reg(regs::SCSP0, Ro).bits(16, 31)),
    ),
    feature(
        "GevGVSPExtendedIDMode",
        "GigEVision",
        Expert,
        "On: GVSP packets carry 64-bit block ids and 32-bit packet ids (GEV 2.0).",
        Kind::Enum {
            reg: reg(regs::GVSP_CONFIG, Rw).bit(1),
            entries: &[std_entry("Off", 0), std_entry("On", 1)],
        },
    ),
    // ---------------------------------------------------------------- OrspControl
    orsp_ro(
        "OrspVersion",
        "ORSP version: major 16 bits, minor 16 bits.",
        orsp::ORSP_VERSION,
    ),
    orsp_ro(
        "OrspCaps",
        "bit 0 RC; bit 5 RDMA CM; bit 6 DSCP/ECN reaches the wire; bits 11..8 largest path MTU code.",
        orsp::ORSP_CAPS,
    ),
    orsp_ro(
        "OrspDeviceQPN",
        "QP number the camera sends from.",
        orsp::DEVICE_QPN,
    ),
    orsp_ro(
        "OrspDeviceSqPsn",
        "First PSN the camera sends.",
        orsp::DEVICE_SQ_PSN,
    ),
    orsp_rw(
        "OrspHostSqPsn",
        "First PSN the host sends.",
        orsp::HOST_SQ_PSN,
    ),
    orsp_rw(
        "OrspHostQPN",
        "The host's QP number; non-zero = configured.",
        orsp::HOST_QPN,
    ),
    orsp_rw(
        "OrspPathMtu",
        "Path MTU code 1..5 (256..4096 bytes).",
        orsp::PATH_MTU,
    ),
    orsp_rw(
        "OrspRetry",
        "bits 2..0 retry_cnt, 6..4 rnr_retry, 12..8 ACK timeout exponent.",
        orsp::RETRY,
    ),
    orsp_rw(
        "OrspTxTuning",
        "bits 7..0 DSCP/ECN byte (default 0x02: ECN-capable), bits 31..16 UDP source port (0 = the camera's).",
        orsp::TX_TUNING,
    ),
    orsp_rw(
        "OrspRateLimit",
        "Most the ORSP stream sends, Mbit/s of IP bytes (0 = GevLinkSpeed); taken at CONNECT.",
        orsp::RATE_LIMIT,
    ),
    custom(
        "OrspCongestionControl",
        "OrspControl",
        Expert,
        "DCQCN: the rate drops on CNPs and recovers, as RoCE NICs do; None: CNPs are only counted. Taken at CONNECT.",
        Kind::Enum {
            reg: orsp_reg(orsp::CONGESTION_CONTROL, Rw),
            entries: &[custom_entry("DCQCN", 0), custom_entry("None", 1)],
        },
    ),
    orsp_ro(
        "OrspMaxCtrlMsg",
        "Largest camera-to-host message in bytes.",
        orsp::MAX_CTRL_MSG,
    ),
    orsp_ro(
        "OrspDevRecvDepth",
        "Receives the camera keeps posted.",
        orsp::DEV_RECV_DEPTH,
    ),
    orsp_ro(
        "OrspMaxBuffers",
        "Buffers the camera can track.",
        orsp::MAX_BUFFERS,
    ),
    orsp_rw(
        "OrspWriteChunk",
        "Bytes per payload RDMA WRITE message (0 = whole frame).",
        orsp::WRITE_CHUNK,
    ),
    custom(
        "OrspControlRegister",
        "OrspControl",
        Expert,
        "bit 0 CONNECT, bit 1 DISCONNECT, bit 2 clear counters.",
        int(orsp_reg(orsp::CONTROL, Wo)),
    ),
    orsp_ro(
        "OrspStatus",
        "bits 3..0 state (0 idle, 1 configured, 2 connected, 3 streaming, 4 draining, 15 error), bits 31..16 last error.",
        orsp::STATUS,
    ),
    orsp_rw(
        "OrspCmPort",
        "RDMA CM listener port (0 = none).",
        orsp::CM_PORT,
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

/// The feature named `name`.
pub fn by_name(name: &str) -> Option<&'static Feature> {
    FEATURES.iter().find(|f| f.name == name)
}

/// The features whose register is at `addr` (several share a register as bit fields).
pub fn by_register(addr: u32) -> impl Iterator<Item = &'static Feature> {
    FEATURES
        .iter()
        .filter(move |f| f.reg().is_some_and(|r| r.addr == addr))
}

// ------------------------------------------------------------------------------------ the XML

/// The start of the GenICam file, up to and including the `RegisterDescription` element.
const HEADER: &str = r#"<?xml version="1.0" encoding="utf-8"?>
<!-- GenICam description of the rdmacam virtual camera (GenApi schema 1.1), generated from
     protocol/src/device/features.rs at build time: edit the table there, not this file.
     Served from device memory at 0x20000 (see the First URL register at 0x200). Camera
     registers live at 0x1F000..0x1F100, the ORSP block at 0x10000, GigE Vision bootstrap
     registers below 0x10000. -->
<RegisterDescription
  ModelName="rdmacam"
  VendorName="rdmacam"
  ToolTip="rdmacam virtual RoCEv2 camera"
  StandardNameSpace="GEV"
  SchemaMajorVersion="1"
  SchemaMinorVersion="1"
  SchemaSubMinorVersion="0"
  MajorVersion="1"
  MinorVersion="1"
  SubMinorVersion="0"
  ProductGuid="8f1d1c7e-6a37-4c2a-9a8e-2f0d7a1b3c01"
  VersionGuid="8f1d1c7e-6a37-4c2a-9a8e-2f0d7a1b3c03"
  xmlns="http://www.genicam.org/GenApi/Version_1_1"
  xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance"
  xsi:schemaLocation="http://www.genicam.org/GenApi/Version_1_1 http://www.genicam.org/GenApi/GenApiSchema_Version_1_1.xsd">
"#;

fn ns(standard: bool) -> &'static str {
    if standard { "Standard" } else { "Custom" }
}

/// Escape text for an XML element.
struct Esc<'a>(&'a str);

impl fmt::Display for Esc<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for c in self.0.chars() {
            match c {
                '<' => f.write_str("&lt;")?,
                '>' => f.write_str("&gt;")?,
                '&' => f.write_str("&amp;")?,
                c => f.write_char(c)?,
            }
        }
        Ok(())
    }
}

fn visibility(v: Visibility) -> &'static str {
    match v {
        Beginner => "Beginner",
        Expert => "Expert",
        Guru => "Guru",
        Invisible => "Invisible",
    }
}

/// The node's opening tag and the elements every node shares (ToolTip, Visibility).
fn open(out: &mut dyn Write, tag: &str, f: &Feature) -> fmt::Result {
    write!(
        out,
        "  <{tag} Name=\"{}\" NameSpace=\"{}\">\n    <ToolTip>{}</ToolTip>\n    <Visibility>{}</Visibility>\n",
        f.name,
        ns(f.standard),
        Esc(f.tooltip),
        visibility(f.visibility)
    )
}

/// The register node `name` behind a feature.
fn register_node(
    out: &mut dyn Write,
    name: &dyn fmt::Display,
    r: &Reg,
    float: bool,
) -> fmt::Result {
    let tag = match (float, r.bits) {
        (true, _) => "FloatReg",
        (false, None) => "IntReg",
        (false, Some(_)) => "MaskedIntReg",
    };
    write!(
        out,
        "  <{tag} Name=\"{name}\" NameSpace=\"Custom\">\n    <Visibility>Invisible</Visibility>\n    <Address>{:#x}</Address>\n    <Length>{}</Length>\n    <AccessMode>{}</AccessMode>\n    <pPort>Device</pPort>\n",
        r.addr,
        r.len,
        r.access.xml()
    )?;
    if r.volatile {
        out.write_str("    <Cachable>NoCache</Cachable>\n")?;
    }
    for f in r.invalidated_by {
        writeln!(out, "    <pInvalidator>{}</pInvalidator>", Reg2(f))?;
    }
    match r.bits {
        Some((msb, lsb)) if msb == lsb => writeln!(out, "    <Bit>{msb}</Bit>")?,
        Some((msb, lsb)) => writeln!(out, "    <LSB>{lsb}</LSB>\n    <MSB>{msb}</MSB>")?,
        None => {}
    }
    if !float {
        out.write_str("    <Sign>Unsigned</Sign>\n")?;
    }
    writeln!(out, "    <Endianess>BigEndian</Endianess>\n  </{tag}>")
}

fn limit(out: &mut dyn Write, tag: &str, l: Limit) -> fmt::Result {
    match l {
        Limit::Fixed(v) => writeln!(out, "    <{tag}>{v}</{tag}>"),
        Limit::Feature(n) => writeln!(out, "    <p{tag}>{n}</p{tag}>"),
    }
}

fn feature_nodes(out: &mut dyn Write, f: &Feature) -> fmt::Result {
    let name = f.name;
    match f.kind {
        Kind::Int {
            reg,
            min,
            max,
            inc,
            unit,
        } => {
            open(out, "Integer", f)?;
            writeln!(out, "    <pValue>{name}Reg</pValue>")?;
            limit(out, "Min", min)?;
            limit(out, "Max", max)?;
            writeln!(out, "    <Inc>{inc}</Inc>")?;
            if !unit.is_empty() {
                writeln!(out, "    <Unit>{unit}</Unit>")?;
            }
            writeln!(out, "  </Integer>")?;
            register_node(out, &Reg2(name), &reg, false)
        }
        Kind::Float {
            reg,
            min,
            max,
            unit,
        } => {
            open(out, "Float", f)?;
            writeln!(
                out,
                "    <pValue>{name}Reg</pValue>\n    <Min>{min:?}</Min>\n    <Max>{max:?}</Max>\n    <Unit>{unit}</Unit>\n  </Float>"
            )?;
            register_node(out, &Reg2(name), &reg, true)
        }
        Kind::Enum { reg, entries } => {
            open(out, "Enumeration", f)?;
            for e in entries {
                writeln!(
                    out,
                    "    <EnumEntry Name=\"{}\" NameSpace=\"{}\">\n      <Value>{}</Value>\n    </EnumEntry>",
                    e.name,
                    ns(e.standard),
                    e.value
                )?;
            }
            writeln!(out, "    <pValue>{name}Reg</pValue>\n  </Enumeration>")?;
            register_node(out, &Reg2(name), &reg, false)
        }
        Kind::Bool { reg } => {
            open(out, "Boolean", f)?;
            writeln!(
                out,
                "    <pValue>{name}Reg</pValue>\n    <OnValue>1</OnValue>\n    <OffValue>0</OffValue>\n  </Boolean>"
            )?;
            register_node(out, &Reg2(name), &reg, false)
        }
        Kind::Command { value, .. } => {
            open(out, "Command", f)?;
            // commands sharing a register share one register node, named after the register
            writeln!(
                out,
                "    <pValue>{}</pValue>\n    <CommandValue>{value}</CommandValue>\n  </Command>",
                RegName(f)
            )?;
            if first_on_register(f) {
                let r = f.reg().copied().expect("commands have a register");
                register_node(out, &RegName(f), &r, false)?;
            }
            Ok(())
        }
        Kind::Str { reg } => {
            open(out, "StringReg", f)?;
            writeln!(
                out,
                "    <Address>{:#x}</Address>\n    <Length>{}</Length>\n    <AccessMode>{}</AccessMode>\n    <pPort>Device</pPort>\n  </StringReg>",
                reg.addr,
                reg.len,
                reg.access.xml()
            )
        }
        Kind::Diff { a, b } => {
            // The variables name the registers, not the features: a limit of Width that read
            // OffsetX, whose own limit reads Width, is a cycle for GenApi.
            open(out, "IntSwissKnife", f)?;
            writeln!(
                out,
                "    <pVariable Name=\"A\">{}</pVariable>\n    <pVariable Name=\"B\">{}</pVariable>\n    <Formula>A-B</Formula>\n  </IntSwissKnife>",
                Reg2(a),
                Reg2(b)
            )
        }
    }
}

/// `NameReg`: the register node of a feature.
struct Reg2<'a>(&'a str);

impl fmt::Display for Reg2<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}Reg", self.0)
    }
}

/// The shared register node of commands on one register: `Reg` and its address.
struct RegName<'a>(&'a Feature);

impl fmt::Display for RegName<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "CommandReg{:X}", self.0.reg().map_or(0, |r| r.addr))
    }
}

fn first_on_register(f: &Feature) -> bool {
    let addr = f.reg().map(|r| r.addr);
    FEATURES
        .iter()
        .find(|g| matches!(g.kind, Kind::Command { .. }) && g.reg().map(|r| r.addr) == addr)
        .is_some_and(|g| g.name == f.name)
}

/// Write the GenICam XML of [`FEATURES`] and [`CATEGORIES`] to `out`.
pub fn write_xml(out: &mut dyn Write) -> fmt::Result {
    out.write_str(HEADER)?;
    for c in CATEGORIES {
        writeln!(
            out,
            "  <Category Name=\"{}\" NameSpace=\"{}\">",
            c.name,
            ns(c.standard)
        )?;
        for sub in CATEGORIES.iter().filter(|s| s.parent == Some(c.name)) {
            writeln!(out, "    <pFeature>{}</pFeature>", sub.name)?;
        }
        for f in FEATURES.iter().filter(|f| f.category == c.name) {
            writeln!(out, "    <pFeature>{}</pFeature>", f.name)?;
        }
        writeln!(out, "  </Category>")?;
    }
    for f in FEATURES {
        feature_nodes(out, f)?;
    }
    out.write_str("  <Port Name=\"Device\" NameSpace=\"Standard\"/>\n</RegisterDescription>\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::pattern::Pattern;

    #[test]
    fn every_category_hangs_from_root_and_lists_no_ancestor() {
        for c in CATEGORIES {
            let mut at = *c;
            let mut steps = 0;
            while let Some(p) = at.parent {
                at = *CATEGORIES
                    .iter()
                    .find(|x| x.name == p)
                    .unwrap_or_else(|| panic!("{}: no parent {p}", c.name));
                steps += 1;
                assert!(steps < CATEGORIES.len(), "{} is in a cycle", c.name);
                assert_ne!(at.name, c.name, "{} lists itself", c.name);
            }
            assert_eq!(at.name, "Root", "{}", c.name);
        }
        for f in FEATURES {
            assert!(
                CATEGORIES.iter().any(|c| c.name == f.category),
                "{} is in no category",
                f.name
            );
            assert!(
                CATEGORIES.iter().all(|c| c.name != f.name),
                "{} is a category too",
                f.name
            );
        }
    }

    #[test]
    fn names_are_unique_and_limits_name_integer_features() {
        for (i, f) in FEATURES.iter().enumerate() {
            assert!(
                FEATURES[i + 1..].iter().all(|g| g.name != f.name),
                "{} twice",
                f.name
            );
            let named = |l: Limit| match l {
                Limit::Feature(n) => Some(n),
                Limit::Fixed(_) => None,
            };
            for n in f.reg().map_or(&[][..], |r| r.invalidated_by) {
                let g = by_name(n).unwrap_or_else(|| panic!("{}: no feature {n}", f.name));
                assert!(g.reg().is_some(), "{}: {n} has no register", f.name);
            }
            let refs: &[Option<&str>] = match f.kind {
                Kind::Int { min, max, .. } => &[named(min), named(max)],
                Kind::Diff { a, b } => &[Some(a), Some(b)],
                _ => &[],
            };
            for n in refs.iter().flatten() {
                let g = by_name(n).unwrap_or_else(|| panic!("{}: no feature {n}", f.name));
                assert!(
                    matches!(g.kind, Kind::Int { .. } | Kind::Diff { .. }),
                    "{}: {n} is not an integer",
                    f.name
                );
            }
        }
    }

    #[test]
    fn test_pattern_entries_are_the_patterns() {
        assert_eq!(TEST_PATTERNS.len(), Pattern::ALL.len());
        for (e, p) in TEST_PATTERNS.iter().zip(Pattern::ALL) {
            assert_eq!((e.name, e.value), (p.name(), p as u32));
        }
    }

    #[test]
    fn bit_fields_use_genicam_numbering() {
        let r = reg(0, Rw).bits(16, 31);
        assert_eq!(r.extract(0xC000_05DC), 1500);
        assert_eq!(reg(0, Rw).bit(1).extract(0x4000_0000), 1);
        assert_eq!(reg(0, Rw).bit(0).extract(0x4000_0000), 0);
        assert_eq!(reg(0, Ro).bits(0, 15).extract(0x0002_0001), 2);
    }
}
