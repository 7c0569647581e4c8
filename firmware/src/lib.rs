//! Camera firmware: for now a placeholder that links the protocol crate for every target, so the
//! `no_std` build stays honest. The embassy application arrives with the firmware issue.
#![no_std]
#![forbid(unsafe_code)]

pub use rdmacam_protocol as protocol;
