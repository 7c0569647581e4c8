//! The rdmacam camera firmware: one [`protocol::device::Device`] on embassy-net.
//!
//! * [`camera`] — the protocol crate's sans-IO camera (`no_std`, no allocator) over frame memory
//!   lent by the board, RoCEv2 on one port.
//! * [`app`] — the embassy task that owns the UDP sockets (GVCP 3956, RoCEv2 4791, GVSP) and
//!   moves datagrams between them and the camera.
//!
//! Boards live in the binary (`src/main.rs`): the Zynq-7000 (Cortex-A9, Cadence GEM, for
//! `armv7a-none-eabi`, logging through defmt) and a Linux TAP build (embassy's std executor and
//! embassy-net-tuntap, logging through `log`), selected by `cfg(target_os = "none")`.
#![no_std]

pub use rdmacam_protocol as protocol;

pub mod app;
pub mod camera;

/// DMA on the Zynq-7000: what the CPU does so the GEM reads what it wrote.
#[cfg(target_os = "none")]
pub mod dma {
    use zynq7000_hal::cache::{self, CACHE_LINE_SIZE};

    /// Clean the data cache (L1 and the PL310 L2) over `bytes`, whole cache lines around them,
    /// so a DMA engine reads from DDR what the CPU wrote.
    pub fn clean(bytes: &[u8]) {
        let start = bytes.as_ptr() as usize & !(CACHE_LINE_SIZE - 1);
        let end = (bytes.as_ptr() as usize + bytes.len()).next_multiple_of(CACHE_LINE_SIZE);
        // aligned by construction
        let _ = cache::clean_data_cache_range(start as u32, end - start);
    }
}

use protocol::device::DeviceEvent;

/// One line per device event: through `log` on Linux, defmt on the hardware.
pub(crate) fn log_event(ev: &DeviceEvent) {
    let what = match ev {
        DeviceEvent::ControlTaken(_) => "control taken",
        DeviceEvent::ControlReleased(_) => "control released",
        DeviceEvent::HeartbeatExpired(_) => "heartbeat expired: control dropped, stream closed",
        DeviceEvent::AcquisitionStarted => "acquisition started",
        DeviceEvent::AcquisitionStopped => "acquisition stopped",
        DeviceEvent::OrspConnect(_) => "ORSP connected",
        DeviceEvent::OrspDisconnected => "ORSP disconnected",
        DeviceEvent::ForceIp { .. } => "FORCEIP accepted (takes effect after a restart)",
    };
    info(what);
}

/// Log one line.
pub fn info(what: &str) {
    #[cfg(target_os = "none")]
    defmt::info!("{=str}", what);
    #[cfg(not(target_os = "none"))]
    log::info!("{what}");
}
