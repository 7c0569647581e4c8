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

pub mod acquisition;
pub mod actions;
pub mod analog;
pub mod chunks;
pub mod device;
pub mod events;
pub mod faults;
pub mod image;
pub mod orsp;
pub mod timestamps;
pub mod transport;

use core::fmt::{self, Write};

use super::orsp_regs;
use super::regs;
use super::{Axis, PixelFormat};

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
    /// One register per value of a selector (GenApi `pIndex`): the register of selector
    /// value `i` is at `addr + i * stride`.
    pub index: Option<Index>,
    /// Where the value lives: device memory, or data the host parses out of a frame (chunk)
    /// or an event message.
    pub port: Port,
}

/// A register selected by another feature: one copy per selector value.
#[derive(Debug, Clone, Copy)]
pub struct Index {
    /// The selector feature (its register node is the index).
    pub selector: &'static str,
    /// Bytes between the copies.
    pub stride: u32,
    /// Number of copies (selector values 0..count).
    pub count: u32,
}

/// Where a register is read from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Port {
    /// Device memory over GVCP.
    Device,
    /// A chunk of a frame's payload with this chunk ID (GenApi `ChunkID`).
    Chunk(u32),
    /// The data of a GVCP event with this event ID (GenApi `EventID`): offset 0 is the
    /// start of the event item (its 24-byte header with 64-bit ids, then the data).
    Event(u16),
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
        index: None,
        port: Port::Device,
    }
}

/// A value in chunk `id` of a frame (offset 0, `len` bytes, read only, never cached).
const fn chunk_reg(id: u32, len: u32) -> Reg {
    let mut r = reg(0, Access::Ro).len(len).volatile();
    r.port = Port::Chunk(id);
    r
}

/// A value at `offset` in the data of event `id` (`len` bytes, read only, never cached).
const fn event_reg(id: u16, offset: u32, len: u32) -> Reg {
    let mut r = reg(offset, Access::Ro).len(len).volatile();
    r.port = Port::Event(id);
    r
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
    const fn indexed(mut self, selector: &'static str, stride: u32, count: u32) -> Reg {
        self.index = Some(Index {
            selector,
            stride,
            count,
        });
        self
    }

    /// Whether a host's access to `addr` reaches this register (or one of its indexed
    /// copies), and which copy: `Some(i)`.
    pub fn copy_at(&self, addr: u32) -> Option<u32> {
        if self.port != Port::Device {
            return None;
        }
        match self.index {
            None => (addr == self.addr).then_some(0),
            Some(ix) => {
                let off = addr.checked_sub(self.addr)?;
                let i = off / ix.stride;
                (off % ix.stride == 0 && i < ix.count).then_some(i)
            }
        }
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

/// The upper bound of a float feature.
#[derive(Debug, Clone, Copy)]
pub enum FLimit {
    /// A fixed number.
    Fixed(f32),
    /// The current value of another (float) feature.
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
        inc: Limit,
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
        max: FLimit,
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
    /// IFloat computed by the device from other features (SwissKnife `formula` over the
    /// registers of `vars`), read only. The device computes the same value in Rust.
    Formula {
        /// GenApi formula.
        formula: &'static str,
        /// Variable name and the feature whose register it reads.
        vars: &'static [(&'static str, &'static str)],
    },
    /// IInteger with a constant value (an event's ID, which hosts register callbacks on).
    Const {
        /// The value.
        value: i64,
    },
    /// IInteger: the step of `axis` ([`PixelFormat::step`]) under the pixel format in feature
    /// `format`'s register (an IntSwissKnife), read only: the increment of Width, OffsetX or
    /// OffsetY.
    Step {
        /// The pixel format feature.
        format: &'static str,
        /// The setting it steps.
        axis: Axis,
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
    /// Features whose register this one selects (GenApi `pSelected`).
    pub selects: &'static [&'static str],
    /// GenApi `EventID`: the feature stands for this event (hosts register callbacks on it).
    pub event_id: Option<u16>,
}

impl Feature {
    const fn selects(mut self, features: &'static [&'static str]) -> Feature {
        self.selects = features;
        self
    }
    const fn event(mut self, id: u16) -> Feature {
        self.event_id = Some(id);
        self
    }
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
            Kind::Diff { .. } | Kind::Formula { .. } | Kind::Const { .. } | Kind::Step { .. } => {
                None
            }
        }
    }

    /// Check the field value `v` a host writes. `value_of` gives the current value of another
    /// feature (for limits that follow one).
    pub fn check(&self, v: u32, value_of: &dyn Fn(&str) -> Option<f64>) -> Result<(), Refusal> {
        let Some(reg) = self.reg() else {
            return Err(Refusal::ReadOnly);
        };
        if reg.access == Access::Ro {
            return Err(Refusal::ReadOnly);
        }
        let bound = |l: Limit| match l {
            Limit::Fixed(x) => Some(x),
            Limit::Feature(n) => value_of(n).map(|f| f as i64),
        };
        let ok = match self.kind {
            Kind::Int { min, max, inc, .. } => {
                let v = i64::from(v);
                let lo = bound(min).unwrap_or(i64::MIN);
                let hi = bound(max).unwrap_or(i64::MAX);
                let inc = bound(inc).unwrap_or(1);
                v >= lo && v <= hi && (inc <= 1 || (v - lo) % inc == 0)
            }
            Kind::Float { min, max, .. } => {
                let f = f32::from_bits(v);
                let hi = match max {
                    FLimit::Fixed(x) => f64::from(x),
                    FLimit::Feature(n) => value_of(n).unwrap_or(f64::MAX),
                };
                f >= min && f64::from(f) <= hi * (1.0 + 1e-6)
            }
            Kind::Enum { entries, .. } => entries.iter().any(|e| e.value == v),
            Kind::Bool { .. } => v <= 1,
            Kind::Command { value, .. } => v == value,
            Kind::Str { .. }
            | Kind::Diff { .. }
            | Kind::Formula { .. }
            | Kind::Const { .. }
            | Kind::Step { .. } => true,
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
        name: "ChunkDataControl",
        parent: Some("Root"),
        standard: true,
    },
    Category {
        name: "EventControl",
        parent: Some("Root"),
        standard: true,
    },
    Category {
        name: "ActionControl",
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
    Category {
        name: "FaultInjection",
        parent: Some("Root"),
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
    custom_entry("Off", regs::TEST_PATTERN_OFF),
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
        selects: &[],
        event_id: None,
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
        selects: &[],
        event_id: None,
    }
}

const fn int(reg: Reg) -> Kind {
    Kind::Int {
        reg,
        min: Limit::Fixed(0),
        max: Limit::Fixed(u32::MAX as i64),
        inc: Limit::Fixed(1),
        unit: "",
    }
}

const fn int_range(reg: Reg, min: Limit, max: Limit, inc: i64, unit: &'static str) -> Kind {
    stepped(reg, min, max, Limit::Fixed(inc), unit)
}

/// An integer whose increment may follow another feature (Width's, the pixel format's step).
const fn stepped(reg: Reg, min: Limit, max: Limit, inc: Limit, unit: &'static str) -> Kind {
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

/// The feature tables, one per area (a file each), in the order hosts list them.
pub const TABLES: &[&[Feature]] = &[
    device::FEATURES,
    image::FEATURES,
    acquisition::FEATURES,
    analog::FEATURES,
    chunks::FEATURES,
    events::FEATURES,
    actions::FEATURES,
    timestamps::FEATURES,
    transport::FEATURES,
    orsp::FEATURES,
    faults::FEATURES,
];

/// Every feature the camera has.
pub fn all() -> impl Iterator<Item = &'static Feature> {
    TABLES.iter().flat_map(|t| t.iter())
}

/// The feature named `name`.
pub fn by_name(name: &str) -> Option<&'static Feature> {
    all().find(|f| f.name == name)
}

/// The features whose register (or an indexed copy of it) is at `addr` in device memory
/// (several share a register as bit fields).
pub fn by_register(addr: u32) -> impl Iterator<Item = &'static Feature> {
    all().filter(move |f| f.reg().is_some_and(|r| r.copy_at(addr).is_some()))
}

// ------------------------------------------------------------------------------------ the XML

/// The start of the GenICam file, up to and including the `RegisterDescription` element.
const HEADER: &str = r#"<?xml version="1.0" encoding="utf-8"?>
<!-- GenICam description of the rdmacam virtual camera (GenApi schema 1.1), generated from
     protocol/src/device/features/ at build time: edit the tables there, not this file.
     Served from device memory at 0x20000 (see the First URL register at 0x200). Camera
     registers live at 0x1F000..0x1F200, the ORSP block at 0x10000, GigE Vision bootstrap
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
    )?;
    if let Some(id) = f.event_id {
        writeln!(out, "    <EventID>{id:04X}</EventID>")?;
    }
    Ok(())
}

/// `pSelected` elements of a selector.
fn selected(out: &mut dyn Write, f: &Feature) -> fmt::Result {
    for s in f.selects {
        writeln!(out, "    <pSelected>{s}</pSelected>")?;
    }
    Ok(())
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
        "  <{tag} Name=\"{name}\" NameSpace=\"Custom\">\n    <Visibility>Invisible</Visibility>\n    <Address>{:#x}</Address>\n",
        r.addr,
    )?;
    if r.index.is_some() {
        // the selector's copy: Address + pAddress, which every GenApi sums; a pIndex that
        // an implementation ignores put every selector value's write at copy 0
        writeln!(out, "    <pAddress>{name}Offset</pAddress>")?;
    }
    write!(
        out,
        "    <Length>{}</Length>\n    <AccessMode>{}</AccessMode>\n",
        r.len,
        r.access.xml()
    )?;
    match r.port {
        Port::Device => out.write_str("    <pPort>Device</pPort>\n")?,
        _ => writeln!(out, "    <pPort>{name}Port</pPort>")?,
    }
    if r.volatile {
        out.write_str("    <Cachable>NoCache</Cachable>\n")?;
    }
    for f in r.invalidated_by {
        writeln!(out, "    <pInvalidator>{}</pInvalidator>", RegNode(f))?;
    }
    match r.bits {
        Some((msb, lsb)) if msb == lsb => writeln!(out, "    <Bit>{msb}</Bit>")?,
        Some((msb, lsb)) => writeln!(out, "    <LSB>{lsb}</LSB>\n    <MSB>{msb}</MSB>")?,
        None => {}
    }
    if !float {
        out.write_str("    <Sign>Unsigned</Sign>\n")?;
    }
    writeln!(out, "    <Endianess>BigEndian</Endianess>\n  </{tag}>")?;
    if let Some(ix) = r.index {
        writeln!(
            out,
            "  <IntSwissKnife Name=\"{name}Offset\" NameSpace=\"Custom\">\n    <Visibility>Invisible</Visibility>\n    <pVariable Name=\"SEL\">{}</pVariable>\n    <Formula>SEL * {}</Formula>\n  </IntSwissKnife>",
            RegNode(ix.selector),
            ix.stride
        )?;
    }
    match r.port {
        Port::Device => Ok(()),
        Port::Chunk(id) => writeln!(
            out,
            "  <Port Name=\"{name}Port\" NameSpace=\"Custom\">\n    <Visibility>Invisible</Visibility>\n    <ChunkID>{id:08X}</ChunkID>\n  </Port>"
        ),
        Port::Event(id) => writeln!(
            out,
            "  <Port Name=\"{name}Port\" NameSpace=\"Custom\">\n    <Visibility>Invisible</Visibility>\n    <EventID>{id:04X}</EventID>\n  </Port>"
        ),
    }
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
            limit(out, "Inc", inc)?;
            if !unit.is_empty() {
                writeln!(out, "    <Unit>{unit}</Unit>")?;
            }
            selected(out, f)?;
            writeln!(out, "  </Integer>")?;
            register_node(out, &RegNode(name), &reg, false)
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
                "    <pValue>{name}Reg</pValue>\n    <Min>{min:?}</Min>"
            )?;
            match max {
                FLimit::Fixed(m) => writeln!(out, "    <Max>{m:?}</Max>")?,
                FLimit::Feature(n) => writeln!(out, "    <pMax>{n}</pMax>")?,
            }
            writeln!(out, "    <Unit>{unit}</Unit>\n  </Float>")?;
            register_node(out, &RegNode(name), &reg, true)
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
            writeln!(out, "    <pValue>{name}Reg</pValue>")?;
            selected(out, f)?;
            writeln!(out, "  </Enumeration>")?;
            register_node(out, &RegNode(name), &reg, false)
        }
        Kind::Bool { reg } => {
            open(out, "Boolean", f)?;
            writeln!(
                out,
                "    <pValue>{name}Reg</pValue>\n    <OnValue>1</OnValue>\n    <OffValue>0</OffValue>\n  </Boolean>"
            )?;
            register_node(out, &RegNode(name), &reg, false)
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
        Kind::Formula { formula, vars } => {
            open(out, "SwissKnife", f)?;
            for (v, feature) in vars {
                writeln!(
                    out,
                    "    <pVariable Name=\"{v}\">{}</pVariable>",
                    RegNode(feature)
                )?;
            }
            writeln!(
                out,
                "    <Formula>{}</Formula>\n  </SwissKnife>",
                Esc(formula)
            )
        }
        Kind::Const { value } => {
            open(out, "Integer", f)?;
            writeln!(out, "    <Value>{value}</Value>\n  </Integer>")
        }
        Kind::Step { format, axis } => {
            // "(PF = a) || (PF = b) ? 2 : 1": the formats whose step is 2, in decimal
            open(out, "IntSwissKnife", f)?;
            writeln!(
                out,
                "    <pVariable Name=\"PF\">{}</pVariable>",
                RegNode(format)
            )?;
            write!(out, "    <Formula>")?;
            let mut first = true;
            for p in PixelFormat::ALL.iter().filter(|p| p.step(axis) == 2) {
                write!(
                    out,
                    "{}(PF = {})",
                    if first { "" } else { " || " },
                    p.pfnc()
                )?;
                first = false;
            }
            if first {
                write!(out, "1")?;
            } else {
                write!(out, " ? 2 : 1")?;
            }
            writeln!(out, "</Formula>\n  </IntSwissKnife>")
        }
        Kind::Diff { a, b } => {
            // The variables name the registers, not the features: a limit of Width that read
            // OffsetX, whose own limit reads Width, is a cycle for GenApi.
            open(out, "IntSwissKnife", f)?;
            writeln!(
                out,
                "    <pVariable Name=\"A\">{}</pVariable>\n    <pVariable Name=\"B\">{}</pVariable>\n    <Formula>A-B</Formula>\n  </IntSwissKnife>",
                RegNode(a),
                RegNode(b)
            )
        }
    }
}

/// `NameReg`: the register node of a feature.
struct RegNode<'a>(&'a str);

impl fmt::Display for RegNode<'_> {
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
    all()
        .find(|g| matches!(g.kind, Kind::Command { .. }) && g.reg().map(|r| r.addr) == addr)
        .is_some_and(|g| g.name == f.name)
}

/// Write the GenICam XML of every feature ([`TABLES`]) and [`CATEGORIES`] to `out`.
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
        for f in all().filter(|f| f.category == c.name) {
            writeln!(out, "    <pFeature>{}</pFeature>", f.name)?;
        }
        writeln!(out, "  </Category>")?;
    }
    for f in all() {
        feature_nodes(out, f)?;
    }
    out.write_str("  <Port Name=\"Device\" NameSpace=\"Standard\"/>\n</RegisterDescription>\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::frame::Pattern;

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
        for f in all() {
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
        let features: [&Feature; 512] = {
            let mut a = [&TABLES[0][0]; 512];
            for (i, f) in all().enumerate() {
                a[i] = f;
            }
            a
        };
        let n = all().count();
        for (i, f) in features[..n].iter().enumerate() {
            assert!(
                features[i + 1..n].iter().all(|g| g.name != f.name),
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
                Kind::Int { min, max, inc, .. } => &[named(min), named(max), named(inc)],
                Kind::Diff { a, b } => &[Some(a), Some(b)],
                _ => &[],
            };
            for n in refs.iter().flatten() {
                let g = by_name(n).unwrap_or_else(|| panic!("{}: no feature {n}", f.name));
                assert!(
                    matches!(
                        g.kind,
                        Kind::Int { .. } | Kind::Diff { .. } | Kind::Step { .. }
                    ),
                    "{}: {n} is not an integer",
                    f.name
                );
            }
        }
    }

    #[test]
    fn test_pattern_entries_are_the_patterns() {
        assert_eq!(TEST_PATTERNS.len(), Pattern::ALL.len() + 1);
        let off = TEST_PATTERNS.last().map(|e| (e.name, e.value));
        assert_eq!(off, Some(("Off", regs::TEST_PATTERN_OFF)));
        for (e, p) in TEST_PATTERNS.iter().zip(Pattern::ALL) {
            assert_eq!((e.name, e.value), (p.name(), p as u32));
        }
    }

    #[test]
    fn formula_variables_are_not_genapi_constants() {
        // GenApi reads E and PI in a formula as Euler's number and pi, whatever pVariable says
        for f in all() {
            if let Kind::Formula { vars, .. } = f.kind {
                for (v, _) in vars {
                    assert!(!["E", "PI"].contains(v), "{}: variable {v}", f.name);
                }
            }
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
