//! ChunkDataControl: chunk mode, which chunks a frame carries, and the chunk values a host
//! reads out of a frame (GenApi chunk ports). Behaviour and layout: [`crate::device::chunks`].

use super::*;

/// A chunk the camera can append to a frame: its ChunkSelector value and name, its ChunkID on
/// the wire, and its data length in bytes.
#[derive(Debug, Clone, Copy)]
pub struct ChunkDef {
    /// ChunkSelector value.
    pub selector: u32,
    /// ChunkSelector entry name (the value feature is `Chunk` + name).
    pub name: &'static str,
    /// Chunk ID on the wire.
    pub id: u32,
    /// Bytes of data (a multiple of 4).
    pub len: u32,
}

const fn def(selector: u32, name: &'static str, len: u32) -> ChunkDef {
    ChunkDef {
        selector,
        name,
        id: 0x5243_0000 | selector, // "RC" and the selector value
        len,
    }
}

/// Every chunk, by ChunkSelector value; Image (the pixels) is always first in the payload.
pub const CHUNKS: &[ChunkDef] = &[
    def(0, "Image", 0), // length: the image's
    def(1, "FrameID", 8),
    def(2, "Timestamp", 8),
    def(3, "Width", 4),
    def(4, "Height", 4),
    def(5, "OffsetX", 4),
    def(6, "OffsetY", 4),
    def(7, "PixelFormat", 4),
    def(8, "ExposureTime", 8),
    def(9, "Gain", 8),
];

const SELECTOR_ENTRIES: [Entry; CHUNKS.len()] = {
    let mut out = [std_entry("", 0); CHUNKS.len()];
    let mut i = 0;
    while i < out.len() {
        out[i] = std_entry(CHUNKS[i].name, CHUNKS[i].selector);
        i += 1;
    }
    out
};

const fn id(selector: usize) -> u32 {
    CHUNKS[selector].id
}

const fn value(name: &'static str, tooltip: &'static str, kind: Kind) -> Feature {
    feature(name, "ChunkDataControl", Expert, tooltip, kind)
}

/// The features of this area, in the order hosts list them.
pub const FEATURES: &[Feature] = &[
    feature(
        "ChunkModeActive",
        "ChunkDataControl",
        Expert,
        "Frames carry chunk data: the GVSP payload type becomes 0x4001 and the enabled chunks follow the image (each chunk's data, then its ID and length, read from the end).",
        Kind::Bool {
            reg: reg(regs::CHUNK_MODE_ACTIVE, Rw).locked(),
        },
    ),
    feature(
        "ChunkSelector",
        "ChunkDataControl",
        Expert,
        "The chunk ChunkEnable switches.",
        Kind::Enum {
            reg: reg(regs::CHUNK_SELECTOR, Rw),
            entries: &SELECTOR_ENTRIES,
        },
    )
    .selects(&["ChunkEnable"]),
    feature(
        "ChunkEnable",
        "ChunkDataControl",
        Expert,
        "The selected chunk is in every frame while ChunkModeActive (Image always is).",
        Kind::Bool {
            reg: reg(regs::CHUNK_ENABLE, Rw).locked().indexed(
                "ChunkSelector",
                4,
                CHUNKS.len() as u32,
            ),
        },
    ),
    feature(
        "ChunkLayoutID",
        "ChunkDataControl",
        Expert,
        "Identifies the chunk layout (which chunks, image size); changes whenever the layout does.",
        int(reg(regs::CHUNK_LAYOUT_ID, Ro).volatile().invalidated_by(&[
            "ChunkModeActive",
            "ChunkEnable",
            "Width",
            "Height",
            "PixelFormat",
        ])),
    ),
    value(
        "ChunkFrameID",
        "The frame's block ID (the GVSP block ID / ORSP block ID of the frame).",
        int(chunk_reg(id(1), 8)),
    ),
    value(
        "ChunkTimestamp",
        "Start of exposure in timestamp ticks (the leader's timestamp).",
        int(chunk_reg(id(2), 8)),
    ),
    value(
        "ChunkWidth",
        "Width of the frame.",
        int(chunk_reg(id(3), 4)),
    ),
    value(
        "ChunkHeight",
        "Height of the frame.",
        int(chunk_reg(id(4), 4)),
    ),
    value(
        "ChunkOffsetX",
        "OffsetX of the frame.",
        int(chunk_reg(id(5), 4)),
    ),
    value(
        "ChunkOffsetY",
        "OffsetY of the frame.",
        int(chunk_reg(id(6), 4)),
    ),
    value(
        "ChunkPixelFormat",
        "Pixel format of the frame.",
        Kind::Enum {
            reg: chunk_reg(id(7), 4),
            entries: &PIXEL_FORMATS,
        },
    ),
    value(
        "ChunkExposureTime",
        "Exposure time of the frame in microseconds.",
        Kind::Float {
            reg: chunk_reg(id(8), 8),
            min: 0.0,
            max: FLimit::Fixed(10_000_000.0),
            unit: "us",
        },
    ),
    value(
        "ChunkGain",
        "Gain of the frame in dB.",
        Kind::Float {
            reg: chunk_reg(id(9), 8),
            min: 0.0,
            max: FLimit::Fixed(48.0),
            unit: "dB",
        },
    ),
];
