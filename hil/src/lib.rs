//! The host side of rdmacam: what a host with an RDMA NIC does, in software or on real verbs.
//!
//! * [`soft`] — a soft RoCEv2 host: the protocol crate's RC responder plus real memory regions
//!   and receive buffers, behaving like a host NIC's receive queue (rxe is the model).
//! * [`sim`] — a deterministic lossy link and a virtual clock that joins a camera's requester to
//!   a soft host, for tests that control every packet and microsecond.
//! * [`host`] and [`run`] — the reference ORSP host and its GVCP/CM connection sequence.
//! * `verbs` and `verbs_host` (cargo feature `verbs`) — the same host on libibverbs through
//!   sideway, and the verbs plumbing the emulator's verbs transport shares.

pub mod cm;
pub mod host;
pub mod images;
pub mod net;
pub mod run;
pub mod sim;
pub mod soft;
#[cfg(feature = "verbs")]
pub mod verbs;
#[cfg(feature = "verbs")]
pub mod verbs_cm;
#[cfg(feature = "verbs")]
pub mod verbs_host;
