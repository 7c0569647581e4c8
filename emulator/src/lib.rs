//! The `rdmacam` emulator's library half: what the binary's subcommands do, callable from tests.

pub mod camera;
pub mod check_host;
pub mod demo;
pub mod fault;
pub mod inspect;
pub mod rig;
pub mod run;
#[cfg(feature = "verbs")]
pub mod verbs;
