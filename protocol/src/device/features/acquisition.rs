//! AcquisitionControl: acquisition modes, frame rate, exposure and triggers. Behaviour:
//! [`crate::device::acquisition`].

use super::*;

/// TriggerSelector entries (register values index the trigger register blocks).
pub const TRIGGER_SELECTORS: &[Entry] =
    &[std_entry("FrameStart", 0), std_entry("AcquisitionStart", 1)];

/// TriggerSource values.
pub mod source {
    /// TriggerSoftware.
    pub const SOFTWARE: u32 = 0;
    /// The camera's input line 0 (the emulator drives it with `--trigger-hz`).
    pub const LINE0: u32 = 1;
    /// Action signal 1 (ActionSelector 1).
    pub const ACTION1: u32 = 2;
    /// Action signal 2 (ActionSelector 2).
    pub const ACTION2: u32 = 3;
}

/// TriggerActivation values.
pub mod activation {
    /// The rising edge of the source.
    pub const RISING_EDGE: u32 = 0;
    /// The falling edge.
    pub const FALLING_EDGE: u32 = 1;
    /// Either edge.
    pub const ANY_EDGE: u32 = 2;
}

/// AcquisitionMode values (ACQUISITION_MODE).
pub mod mode {
    /// Frames until AcquisitionStop.
    pub const CONTINUOUS: u32 = 0;
    /// One frame, then stop.
    pub const SINGLE_FRAME: u32 = 1;
    /// AcquisitionFrameCount frames, then stop.
    pub const MULTI_FRAME: u32 = 2;
}

/// ACQUISITION_COMMAND values: what AcquisitionStop, AcquisitionStart and AcquisitionAbort write.
pub mod command {
    /// AcquisitionStop.
    pub const STOP: u32 = 0;
    /// AcquisitionStart.
    pub const START: u32 = 1;
    /// AcquisitionAbort.
    pub const ABORT: u32 = 2;
}

const fn trigger(r: u32, access: Access) -> Reg {
    reg(r, access).indexed("TriggerSelector", regs::TRIGGER_STRIDE, regs::TRIGGERS)
}

/// The features of this area, in the order hosts list them.
pub const FEATURES: &[Feature] = &[
    feature(
        "AcquisitionMode",
        "AcquisitionControl",
        Beginner,
        "Continuous, SingleFrame (one frame, then stop) or MultiFrame (AcquisitionFrameCount frames).",
        Kind::Enum {
            reg: reg(regs::ACQUISITION_MODE, Rw).locked(),
            entries: &[
                std_entry("Continuous", mode::CONTINUOUS),
                std_entry("SingleFrame", mode::SINGLE_FRAME),
                std_entry("MultiFrame", mode::MULTI_FRAME),
            ],
        },
    ),
    feature(
        "AcquisitionStart",
        "AcquisitionControl",
        Beginner,
        "Start the acquisition (with TriggerMode On for AcquisitionStart: arm it; the trigger starts it).",
        Kind::Command {
            reg: reg(regs::ACQUISITION_COMMAND, Wo),
            value: command::START,
        },
    ),
    feature(
        "AcquisitionStop",
        "AcquisitionControl",
        Beginner,
        "Stop the acquisition: no new exposure starts; a frame already exposing is still sent.",
        Kind::Command {
            reg: reg(regs::ACQUISITION_COMMAND, Wo),
            value: command::STOP,
        },
    ),
    feature(
        "AcquisitionAbort",
        "AcquisitionControl",
        Expert,
        "Stop the acquisition at once: a frame still exposing is discarded.",
        Kind::Command {
            reg: reg(regs::ACQUISITION_COMMAND, Wo),
            value: command::ABORT,
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
        "Frames per second when free running; at most 1 / ExposureTime (AcquisitionFrameRateLimit). The camera also waits for the link when a frame takes longer.",
        Kind::Float {
            reg: reg(regs::FRAME_RATE, Rw).invalidated_by(&["ExposureTime"]),
            min: 0.1,
            max: FLimit::Feature("AcquisitionFrameRateLimit"),
            unit: "Hz",
        },
    ),
    custom(
        "AcquisitionFrameRateLimit",
        "AcquisitionControl",
        Invisible,
        "Largest AcquisitionFrameRate at the current ExposureTime: a frame period holds one exposure.",
        // not "E": GenApi formulas read E as Euler's number (1000000 / E was 367879)
        Kind::Formula {
            formula: "(1000000 / EXPOSURE > 10000) ? 10000 : 1000000 / EXPOSURE",
            vars: &[("EXPOSURE", "ExposureTime")],
        },
    ),
    feature(
        "ExposureTime",
        "AcquisitionControl",
        Beginner,
        "Exposure time in microseconds. A frame leaves one exposure after its start (the leader's timestamp); a longer exposure lowers AcquisitionFrameRate to fit.",
        Kind::Float {
            reg: reg(regs::EXPOSURE_TIME, Rw),
            min: 1.0,
            max: FLimit::Fixed(10_000_000.0),
            unit: "us",
        },
    ),
    feature(
        "TriggerSelector",
        "AcquisitionControl",
        Beginner,
        "The trigger the other Trigger features configure: FrameStart (one frame per trigger) or AcquisitionStart (the acquisition starts on the trigger).",
        Kind::Enum {
            reg: reg(regs::TRIGGER_SELECTOR, Rw),
            entries: TRIGGER_SELECTORS,
        },
    )
    .selects(&[
        "TriggerMode",
        "TriggerSource",
        "TriggerActivation",
        "TriggerDelay",
        "TriggerSoftware",
    ]),
    feature(
        "TriggerMode",
        "AcquisitionControl",
        Beginner,
        "On: the selected trigger waits for TriggerSource; Off: free running.",
        Kind::Enum {
            reg: trigger(regs::TRIGGER_MODE, Rw),
            entries: &[std_entry("Off", 0), std_entry("On", 1)],
        },
    ),
    feature(
        "TriggerSource",
        "AcquisitionControl",
        Beginner,
        "What fires the selected trigger: TriggerSoftware, input Line0 (rdmacam run --trigger-hz), or an action command (Action1, Action2).",
        Kind::Enum {
            reg: trigger(regs::TRIGGER_SOURCE, Rw),
            entries: &[
                std_entry("Software", source::SOFTWARE),
                std_entry("Line0", source::LINE0),
                std_entry("Action1", source::ACTION1),
                std_entry("Action2", source::ACTION2),
            ],
        },
    ),
    feature(
        "TriggerActivation",
        "AcquisitionControl",
        Beginner,
        "Which edge of Line0 fires the trigger (software and action triggers are events: any setting fires).",
        Kind::Enum {
            reg: trigger(regs::TRIGGER_ACTIVATION, Rw),
            entries: &[
                std_entry("RisingEdge", activation::RISING_EDGE),
                std_entry("FallingEdge", activation::FALLING_EDGE),
                std_entry("AnyEdge", activation::ANY_EDGE),
            ],
        },
    ),
    feature(
        "TriggerDelay",
        "AcquisitionControl",
        Expert,
        "Microseconds from the trigger to the start of exposure.",
        Kind::Float {
            reg: trigger(regs::TRIGGER_DELAY, Rw),
            min: 0.0,
            max: FLimit::Fixed(10_000_000.0),
            unit: "us",
        },
    ),
    feature(
        "TriggerSoftware",
        "AcquisitionControl",
        Beginner,
        "Fire the selected trigger now (its TriggerSource must be Software).",
        Kind::Command {
            reg: trigger(regs::TRIGGER_SOFTWARE, Wo),
            value: 1,
        },
    ),
    custom(
        "FrameTriggerMissedCount",
        "AcquisitionControl",
        Expert,
        "Frame triggers that came while the camera could not take them (exposure or readout running, no buffer); each also raises the FrameTriggerMissed event.",
        int(reg(regs::FRAME_TRIGGER_MISSED, Ro).volatile()),
    ),
];
