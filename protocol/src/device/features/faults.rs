//! FaultInjection: rdmacam's own features for a test harness to make the camera misbehave at
//! a chosen moment (packet loss, a dropped frame, a stall, a reboot, ...). Behaviour:
//! [`crate::device::faults`].

use super::*;

/// The most packets, frames or requests one FaultInject hits (FaultCount's maximum).
pub const FAULT_COUNT_MAX: u32 = 1_000_000;

/// The longest a StreamStall, ControlSilence or Reboot lasts, ms (FaultDuration's maximum).
pub const FAULT_DURATION_MAX_MS: u32 = 600_000;

/// FaultSelector entries, by value (`FaultKind`'s order; a unit test keeps them equal).
pub const FAULT_KINDS: &[Entry] = &[
    custom_entry("PacketLoss", 0),
    custom_entry("PacketReorder", 1),
    custom_entry("PacketDuplicate", 2),
    custom_entry("FrameDrop", 3),
    custom_entry("PacketCorrupt", 4),
    custom_entry("StreamStall", 5),
    custom_entry("ControlSilence", 6),
    custom_entry("Reboot", 7),
    custom_entry("ResendUnavailable", 8),
    custom_entry("EcnMark", 9),
];

const fn fault(name: &'static str, tooltip: &'static str, kind: Kind) -> Feature {
    custom(name, "FaultInjection", Guru, tooltip, kind)
}

/// The features of this area, in the order hosts list them.
pub const FEATURES: &[Feature] = &[
    fault(
        "FaultSelector",
        "The fault FaultInject injects and FaultInjectedCount counts.",
        Kind::Enum {
            reg: reg(regs::FAULT_SELECTOR, Rw),
            entries: FAULT_KINDS,
        },
    )
    .selects(&["FaultInjectedCount"]),
    fault(
        "FaultCount",
        "How many stream packets (PacketLoss, PacketReorder, PacketDuplicate, PacketCorrupt, EcnMark), frames (FrameDrop) or resend requests (ResendUnavailable) the next FaultInject hits.",
        int_range(
            reg(regs::FAULT_COUNT, Rw),
            Limit::Fixed(1),
            Limit::Fixed(FAULT_COUNT_MAX as i64),
            1,
            "",
        ),
    ),
    fault(
        "FaultDuration",
        "How long the next StreamStall, ControlSilence or Reboot lasts.",
        int_range(
            reg(regs::FAULT_DURATION, Rw),
            Limit::Fixed(1),
            Limit::Fixed(FAULT_DURATION_MAX_MS as i64),
            1,
            "ms",
        ),
    ),
    fault(
        "FaultInject",
        "Inject the selected fault now. Refused (GenICam access error) where the camera cannot carry it out: the firmware injects FrameDrop and ResendUnavailable only.",
        Kind::Command {
            reg: reg(regs::FAULT_INJECT, Wo),
            value: 1,
        },
    ),
    fault(
        "FaultInjectedCount",
        "Faults of the selected kind injected since the camera started (packets, frames, requests, or stalls, silences and reboots), from the command line and FaultInject alike.",
        int(reg(regs::FAULT_INJECTED, Ro).volatile().indexed(
            "FaultSelector",
            4,
            FAULT_KINDS.len() as u32,
        )),
    ),
];
