//! AnalogControl: gain.

use super::*;

/// The features of this area, in the order hosts list them.
pub const FEATURES: &[Feature] = &[feature(
    "Gain",
    "AnalogControl",
    Beginner,
    "Gain in dB (stored; the synthetic image does not change).",
    Kind::Float {
        reg: reg(regs::GAIN, Rw),
        min: 0.0,
        max: FLimit::Fixed(48.0),
        unit: "dB",
    },
)];
