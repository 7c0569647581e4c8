//! Linux I/O that the rdmacam camera (`rdmacam`) and the reference host (`rdmacam-hil`) share,
//! one module per job. Neither side owns it: the camera does not depend on the host crate for
//! its sockets, nor the host on the camera's.
//!
//! * [`roce`]: RoCEv2 over plain UDP sockets ([`roce::RoceSocket`]), both directions.
//! * [`gso`]: many datagrams per system call: UDP segmentation offload with gather I/O, and
//!   `sendmmsg` batches.
//! * [`icrc`]: the ICRC check of packets that arrive on a UDP socket without their IP header.
//! * [`capture`]: pcapng captures of a socket's RoCEv2 traffic (`--pcap`).
//! * [`poll`]: waiting for sockets, and busy-polling while a stream flows.
//! * [`mem`]: buffers the data path fills, with their pages in place before the stream starts.
//! * [`clock`]: the machine-wide monotonic clock that lines up the logs of several processes.
//! * [`link`]: what a link carries (interface and route MTUs), for the path MTU.
//! * [`sockopt`]: socket options the standard library lacks (Don't Fragment, ...).
//! * [`arrival`]: datagrams with the kernel's receive time (a GVCP action fires at its arrival).
//! * [`sched`]: a thread's priority and CPU time; [`share`]: giving a CPU to a peer on it.
//! * [`images`]: loading image files and converting them to the camera's pixel formats.
//! * `verbs` (cargo feature `verbs`): one RC queue pair on an RDMA device through `sideway`.

pub mod arrival;
pub mod capture;
pub mod clock;
pub mod gso;
pub mod icrc;
pub mod images;
pub mod link;
pub mod mem;
pub mod poll;
pub mod roce;
pub mod sched;
pub mod share;
pub mod sockopt;
#[cfg(feature = "verbs")]
pub mod verbs;
