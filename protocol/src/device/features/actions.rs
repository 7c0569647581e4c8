//! ActionControl: action commands (GVCP ACTION_CMD) a host broadcasts to fire triggers on
//! many cameras at once. Behaviour: [`crate::device::actions`].

use super::*;

const fn action(r: u32, access: Access) -> Reg {
    // ActionSelector counts from 1; signal 1 is the bootstrap's first (0x9800)
    reg(r - regs::ACTION_STRIDE, access).indexed(
        "ActionSelector",
        regs::ACTION_STRIDE,
        regs::ACTIONS + 1,
    )
}

/// The features of this area, in the order hosts list them.
pub const FEATURES: &[Feature] = &[
    feature(
        "ActionDeviceKey",
        "ActionControl",
        Expert,
        "Key an ACTION_CMD must carry for this camera to act on it (write only).",
        int(reg(regs::ACTION_DEVICE_KEY, Wo)),
    ),
    feature(
        "ActionSelector",
        "ActionControl",
        Expert,
        "The action signal ActionGroupKey and ActionGroupMask configure (1 or 2; TriggerSource Action1, Action2).",
        int_range(
            reg(regs::ACTION_SELECTOR, Rw),
            Limit::Fixed(1),
            Limit::Fixed(regs::ACTIONS as i64),
            1,
            "",
        ),
    )
    .selects(&["ActionGroupKey", "ActionGroupMask"]),
    feature(
        "ActionGroupKey",
        "ActionControl",
        Expert,
        "Group key an ACTION_CMD must carry to fire the selected action signal.",
        int(action(regs::ACTION_GROUP_KEY, Rw)),
    ),
    feature(
        "ActionGroupMask",
        "ActionControl",
        Expert,
        "The selected signal fires when this mask and the ACTION_CMD's share a bit (0 = never).",
        int(action(regs::ACTION_GROUP_MASK, Rw)),
    ),
    feature(
        "ActionUnconditionalMode",
        "ActionControl",
        Guru,
        "On: action commands fire even while no host holds control.",
        Kind::Enum {
            reg: reg(regs::GVCP_CONFIG, Rw).bit(28),
            entries: &[std_entry("Off", 0), std_entry("On", 1)],
        },
    ),
];
