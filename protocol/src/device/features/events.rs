//! EventControl: which events the camera sends on the GigE Vision message channel, and the
//! event data features a host reads an event's values through (GenApi event ports). Behaviour:
//! [`crate::device::events`].
//!
//! Every event goes out in the GEV 2.0 64-bit form (GVCP flag 0x10): a 24-byte item of size
//! (2), event ID (2), stream channel (2), reserved (2), block ID (8), timestamp (8), then data
//! (EVENTDATA). The event ports address that item, so FrameID is at 8 and Timestamp at 16.

use super::*;

/// An event the camera can send.
#[derive(Debug, Clone, Copy)]
pub struct EventDef {
    /// EventSelector value.
    pub selector: u32,
    /// EventSelector entry name.
    pub name: &'static str,
    /// GigE Vision event ID (device-specific range 0x9000..=0xFFFF).
    pub id: u16,
}

const fn def(selector: u32, name: &'static str) -> EventDef {
    EventDef {
        selector,
        name,
        id: 0x9100 + selector as u16,
    }
}

/// Every event, by EventSelector value.
pub const EVENTS: &[EventDef] = &[
    def(0, "AcquisitionStart"),
    def(1, "AcquisitionEnd"),
    def(2, "FrameStart"),
    def(3, "ExposureEnd"),
    def(4, "FrameTriggerMissed"),
];

/// Offset of the block ID in an event item (64-bit form).
pub const ITEM_BLOCK_ID: u32 = 8;
/// Offset of the timestamp in an event item.
pub const ITEM_TIMESTAMP: u32 = 16;
/// Length of the item header; EVENTDATA's data follows.
pub const ITEM_LEN: u32 = 24;

const SELECTOR_ENTRIES: [Entry; EVENTS.len()] = {
    let mut out = [std_entry("", 0); EVENTS.len()];
    let mut i = 0;
    while i < out.len() {
        out[i] = std_entry(EVENTS[i].name, EVENTS[i].selector);
        i += 1;
    }
    out
};

const fn ev(name: &'static str, tooltip: &'static str, kind: Kind) -> Feature {
    feature(name, "EventControl", Expert, tooltip, kind)
}

/// The three features of one event: its ID node (callbacks), its timestamp and frame ID.
macro_rules! event_features {
    ($i:expr, $name:literal) => {
        [
            ev(
                concat!("Event", $name),
                concat!(
                    "The ",
                    $name,
                    " event's ID; hosts register callbacks on it."
                ),
                Kind::Const {
                    value: EVENTS[$i].id as i64,
                },
            )
            .event(EVENTS[$i].id),
            ev(
                concat!("Event", $name, "Timestamp"),
                concat!(
                    "Timestamp of the last ",
                    $name,
                    " event, in timestamp ticks."
                ),
                int(event_reg(EVENTS[$i].id, ITEM_TIMESTAMP, 8)),
            ),
            ev(
                concat!("Event", $name, "FrameID"),
                concat!("Block ID of the frame of the last ", $name, " event."),
                int(event_reg(EVENTS[$i].id, ITEM_BLOCK_ID, 8)),
            ),
        ]
    };
}

const ACQ_START: [Feature; 3] = event_features!(0, "AcquisitionStart");
const ACQ_END: [Feature; 3] = event_features!(1, "AcquisitionEnd");
const FRAME_START: [Feature; 3] = event_features!(2, "FrameStart");
const EXPOSURE_END: [Feature; 3] = event_features!(3, "ExposureEnd");
const MISSED: [Feature; 3] = event_features!(4, "FrameTriggerMissed");

/// The features of this area, in the order hosts list them.
pub const FEATURES: &[Feature] = &[
    feature(
        "EventSelector",
        "EventControl",
        Expert,
        "The event EventNotification switches.",
        Kind::Enum {
            reg: reg(regs::EVENT_SELECTOR, Rw),
            entries: &SELECTOR_ENTRIES,
        },
    )
    .selects(&["EventNotification"]),
    feature(
        "EventNotification",
        "EventControl",
        Expert,
        "On: the camera sends the selected event on the message channel (GevMCDA:GevMCPHostPort), again every GevMCTT ms until acknowledged, at most GevMCRC times more.",
        Kind::Enum {
            reg: reg(regs::EVENT_NOTIFICATION, Rw).indexed("EventSelector", 4, EVENTS.len() as u32),
            entries: &[std_entry("Off", 0), std_entry("On", 1)],
        },
    ),
    ACQ_START[0],
    ACQ_START[1],
    ACQ_START[2],
    ACQ_END[0],
    ACQ_END[1],
    ACQ_END[2],
    FRAME_START[0],
    FRAME_START[1],
    FRAME_START[2],
    EXPOSURE_END[0],
    EXPOSURE_END[1],
    EXPOSURE_END[2],
    MISSED[0],
    MISSED[1],
    MISSED[2],
    ev(
        "EventFrameTriggerMissedCount",
        "FrameTriggerMissedCount when the last FrameTriggerMissed event was sent (its EVENTDATA).",
        int(event_reg(EVENTS[4].id, ITEM_LEN, 4)),
    ),
    feature(
        "GevMCPHostPort",
        "GigEVision",
        Expert,
        "UDP port events are sent to; 0 closes the message channel.",
        int_range(
            reg(regs::MCP, Rw).bits(16, 31),
            Limit::Fixed(0),
            Limit::Fixed(65535),
            1,
            "",
        ),
    ),
    feature(
        "GevMCDA",
        "GigEVision",
        Expert,
        "IPv4 address events are sent to.",
        int(reg(regs::MCDA, Rw)),
    ),
    feature(
        "GevMCTT",
        "GigEVision",
        Expert,
        "Milliseconds the camera waits for an event's acknowledge before sending it again.",
        int_range(
            reg(regs::MCTT, Rw),
            Limit::Fixed(1),
            Limit::Fixed(10_000),
            1,
            "ms",
        ),
    ),
    feature(
        "GevMCRC",
        "GigEVision",
        Expert,
        "Times an unacknowledged event is sent again.",
        int_range(
            reg(regs::MCRC, Rw),
            Limit::Fixed(0),
            Limit::Fixed(255),
            1,
            "",
        ),
    ),
    feature(
        "GevMCSP",
        "GigEVision",
        Guru,
        "UDP source port of the message channel.",
        int(reg(regs::MCSP, Ro).bits(16, 31)),
    ),
];
