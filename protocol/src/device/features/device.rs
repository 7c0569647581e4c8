//! DeviceControl: who made the camera and what it is called.

use super::*;

/// The features of this area, in the order hosts list them.
pub const FEATURES: &[Feature] = &[
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
];
