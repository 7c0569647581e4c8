//! The firmware binary: the board is chosen by the target. `armv7a-none-eabi` builds the
//! Zynq-7000 image (`board/zynq.rs`); a hosted target builds the Linux TAP camera
//! (`board/tap.rs`), which CI runs in a network namespace.
#![cfg_attr(target_os = "none", no_std, no_main)]

#[cfg(not(target_os = "none"))]
#[path = "board/tap.rs"]
mod board;

#[cfg(target_os = "none")]
#[path = "board/zynq.rs"]
mod board;

#[cfg(target_os = "none")]
#[path = "board/zynq_eth.rs"]
mod zynq_eth;

#[cfg(all(target_os = "none", feature = "mover"))]
#[path = "board/zynq_mover.rs"]
mod zynq_mover;

#[cfg(not(target_os = "none"))]
fn main() {
    board::main();
}
