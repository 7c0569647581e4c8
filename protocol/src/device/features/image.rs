//! ImageFormatControl: the image size, offsets, pixel format and test pattern.

use super::*;

/// The features of this area, in the order hosts list them.
pub const FEATURES: &[Feature] = &[
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
        "Width of the image in pixels; at most WidthMax - OffsetX, in steps of WidthStep.",
        stepped(
            reg(regs::WIDTH, Rw).locked(),
            Limit::Fixed(16),
            Limit::Feature("WidthLimit"),
            Limit::Feature("WidthStep"),
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
        "Horizontal offset of the image on the sensor; at most WidthMax - Width, in steps of OffsetXStep.",
        stepped(
            reg(regs::OFFSET_X, Rw).locked(),
            Limit::Fixed(0),
            Limit::Feature("OffsetXLimit"),
            Limit::Feature("OffsetXStep"),
            "",
        ),
    ),
    feature(
        "OffsetY",
        "ImageFormatControl",
        Beginner,
        "Vertical offset of the image on the sensor; at most HeightMax - Height, in steps of OffsetYStep.",
        stepped(
            reg(regs::OFFSET_Y, Rw).locked(),
            Limit::Fixed(0),
            Limit::Feature("OffsetYLimit"),
            Limit::Feature("OffsetYStep"),
            "",
        ),
    ),
    custom(
        "WidthStep",
        "ImageFormatControl",
        Invisible,
        "Pixels per step of Width at the current PixelFormat: 2 for YUV422_8, whose two neighbouring pixels share a U and a V, else 1.",
        Kind::Step {
            format: "PixelFormat",
            axis: Axis::Width,
        },
    ),
    custom(
        "OffsetXStep",
        "ImageFormatControl",
        Invisible,
        "Pixels per step of OffsetX at the current PixelFormat: 2 for YUV422_8 (a line starts on a pixel pair) and for Bayer formats (an odd offset would start on another colour), else 1.",
        Kind::Step {
            format: "PixelFormat",
            axis: Axis::OffsetX,
        },
    ),
    custom(
        "OffsetYStep",
        "ImageFormatControl",
        Invisible,
        "Lines per step of OffsetY at the current PixelFormat: 2 for Bayer formats (an odd offset would start on another colour), else 1.",
        Kind::Step {
            format: "PixelFormat",
            axis: Axis::OffsetY,
        },
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
];
