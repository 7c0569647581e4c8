//! The host side of rdmacam: what a host with an RDMA NIC does, in software.
//!
//! * [`soft`] — a soft RoCEv2 host: the protocol crate's RC responder plus real memory regions
//!   and receive buffers, behaving like a host NIC's receive queue (rxe is the model).
//! * [`sim`] — a deterministic lossy link and a virtual clock that joins a camera's requester to
//!   a soft host, for tests that control every packet and microsecond.

pub mod cm;
pub mod host;
pub mod net;
pub mod run;
pub mod sim;
pub mod soft;
