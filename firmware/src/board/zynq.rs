//! The Zynq-7000 board (in progress): see docs/firmware.md.
compile_error!(
    "the Zynq-7000 board is not written yet; build the Linux TAP board on a hosted target"
);
