//! Timestamps: the device clock that stamps frames and events. Behaviour:
//! [`crate::device::timestamps`].

use super::*;

/// TIMESTAMP_CONTROL bits (GigE Vision bootstrap 0x944).
pub mod control {
    /// Reset the counter to 0.
    pub const RESET: u32 = 0x1;
    /// Copy the counter to the latch registers.
    pub const LATCH: u32 = 0x2;
}

/// The features of this area, in the order hosts list them.
pub const FEATURES: &[Feature] = &[
    feature(
        "TimestampLatch",
        "DeviceControl",
        Expert,
        "Copy the current timestamp to TimestampLatchValue.",
        Kind::Command {
            reg: reg(regs::TIMESTAMP_CONTROL, Wo),
            value: control::LATCH,
        },
    ),
    feature(
        "TimestampReset",
        "DeviceControl",
        Expert,
        "Set the timestamp counter to 0 (this camera then no longer shares the machine's time base).",
        Kind::Command {
            reg: reg(regs::TIMESTAMP_CONTROL, Wo),
            value: control::RESET,
        },
    ),
    feature(
        "TimestampLatchValue",
        "DeviceControl",
        Expert,
        "The timestamp TimestampLatch copied, in ticks of GevTimestampTickFrequency.",
        int(reg(regs::TIMESTAMP_LATCHED_HIGH, Ro).len(8).volatile()),
    ),
];
