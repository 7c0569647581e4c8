//! ORSP/1, the Open RDMA Stream Profile (`docs/orsp-spec.md`): frames RDMA-written into buffers the
//! host announced, framed by LEADER and TRAILER SENDs, on one RC queue pair.
//!
//! [`OrspChannel`] knows frames, buffers and messages; it produces RC work requests
//! ([`crate::rc::WorkRequest`]) and consumes their completions, so the same code drives the
//! userspace requester and a verbs queue pair.

pub mod channel;
pub mod msg;
pub mod regs;

pub use channel::{
    ConnectParams, FrameOutcome, OrspChannel, OrspCounters, State, TransportCounters,
};
