//! The data mover in the programmable logic (`fpga/rtl`, docs/firmware.md "The data mover in
//! Verilog"), behind the `mover` feature: the requester runs with `icrc_offload`, and each
//! queue-pair packet leaves as a 128-byte descriptor the CPU writes into the mover's register
//! window. The mover reads the payload from DDR over an HP port, computes the ICRC and sends
//! the frame through the MAC in the fabric; the CPU copies no payload byte and computes no CRC.
//!
//! Regions: 0 is the frame memory (`FRAMES` in zynq.rs), 1 the rest of the image's DDR (the
//! ORSP message slots live in the camera's state). A descriptor names its payload by region and
//! offset; the mover refuses a range outside its region.
//!
//! Anything the mover cannot take goes the way it went before (the software ICRC and the
//! RoCEv2 socket): an IPv6 packet or one to a host whose MAC is not known yet, and every
//! packet after the mover reported an error (logged once with its code and PSN).

use core::ptr::{read_volatile, write_volatile};

use defmt::{error, info};
use embassy_time::Timer;
use rdmacam_firmware::app::RawTx;
use rdmacam_firmware::dma::clean;
use rdmacam_firmware::protocol::rc::PayloadRef;
use rdmacam_firmware::protocol::rc::offload::{DESCRIPTOR_LEN, TxDescriptor};

use crate::zynq_eth::{RoceTx, neighbour};

/// Where the Vivado address editor put the mover's AXI4-Lite slave on M_AXI_GP0 (its default
/// first PL address); change it to match the block design.
pub const MOVER_BASE: usize = 0x43c0_0000;

const ID: usize = 0x00;
const VERSION: usize = 0x04;
const CONTROL: usize = 0x08;
const STATUS: usize = 0x0c;
const ERROR_PSN: usize = 0x10;
const MAC_DST_HI: usize = 0x20;
const MAC_DST_LO: usize = 0x24;
const MAC_SRC_HI: usize = 0x28;
const MAC_SRC_LO: usize = 0x2c;
const REGION_BASE: usize = 0x40; // + 8 * region
const REGION_SIZE: usize = 0x44;
const WINDOW: usize = 0x100;

const MOVER_ID: u32 = 0x5244_4d56; // "RDMV"
const STATUS_IDLE: u32 = 1 << 8;

/// The image's DDR (memory.x): region 1.
const DDR_BASE: u32 = 0x0010_0000;
const DDR_SIZE: u32 = 62 << 20;

fn read(reg: usize) -> u32 {
    // SAFETY: MOVER_BASE is the mover's register block, mapped device memory.
    unsafe { read_volatile((MOVER_BASE + reg) as *const u32) }
}

fn write(reg: usize, v: u32) {
    // SAFETY: as in `read`.
    unsafe { write_volatile((MOVER_BASE + reg) as *mut u32, v) }
}

fn mac_regs(mac: &[u8; 6]) -> (u32, u32) {
    (
        u32::from(u16::from_be_bytes([mac[0], mac[1]])),
        u32::from_be_bytes([mac[2], mac[3], mac[4], mac[5]]),
    )
}

/// The queue pair's transmitter through the data mover; the GEM path for what it does not take.
pub struct MoverTx {
    gem: RoceTx,
    frames: (u32, u32),
    dst: Option<[u8; 6]>,
    failed: bool,
}

impl MoverTx {
    /// Check the mover's ID and version, set its regions and MAC, and enable it; `None` (and a
    /// log line) when the register block is not a contract-version-1 mover. The bitstream must
    /// be loaded: a read from GP0 with nothing behind it is a bus error.
    pub fn probe(mac: [u8; 6], frames: &[u8]) -> Option<MoverTx> {
        let (id, version) = (read(ID), read(VERSION));
        if id != MOVER_ID || version & 0xff != 1 {
            error!(
                "no data mover at {=usize:#x} (ID {=u32:#x}, version {=u32:#x}): software ICRC",
                MOVER_BASE, id, version
            );
            return None;
        }
        write(CONTROL, 0);
        let frames = (frames.as_ptr() as u32, frames.len() as u32);
        write(REGION_BASE, frames.0);
        write(REGION_SIZE, frames.1);
        write(REGION_BASE + 8, DDR_BASE);
        write(REGION_SIZE + 8, DDR_SIZE);
        let (hi, lo) = mac_regs(&mac);
        write(MAC_SRC_HI, hi);
        write(MAC_SRC_LO, lo);
        write(STATUS, 0); // clear an error left from before
        write(CONTROL, 1);
        info!(
            "data mover at {=usize:#x}: {=u32} descriptor slots",
            MOVER_BASE,
            (version >> 16) & 0xff
        );
        Some(MoverTx {
            gem: RoceTx::new(mac),
            frames,
            dst: None,
            failed: false,
        })
    }

    /// Region and offset of `payload` in the mover's address map.
    fn place(&self, payload: &[u8]) -> Option<PayloadRef> {
        let at = payload.as_ptr() as u32;
        let inside = |(base, size): (u32, u32)| {
            at.checked_sub(base)
                .filter(|off| u64::from(*off) + payload.len() as u64 <= u64::from(size))
        };
        if let Some(off) = inside(self.frames) {
            Some(PayloadRef::new(0, u64::from(off)))
        } else {
            inside((DDR_BASE, DDR_SIZE)).map(|off| PayloadRef::new(1, u64::from(off)))
        }
    }

    /// The mover's first error since it was enabled, logged once; after it every packet takes
    /// the software path.
    fn check(&mut self) -> bool {
        let status = read(STATUS);
        if status & 0xff != 0 && !self.failed {
            self.failed = true;
            error!(
                "data mover error {=u32:#x} at PSN {=u32:#x}: software ICRC from now on",
                status & 0xff,
                read(ERROR_PSN)
            );
        }
        !self.failed
    }
}

impl RawTx for MoverTx {
    fn ready(&mut self) -> bool {
        // the GEM ring too: the software path stays open for what the mover does not take
        self.gem.ready() && (self.failed || (read(STATUS) >> 16) & 0xff != 0)
    }

    async fn wait_ready(&mut self) {
        // the mover raises no interrupt: its slots free at a packet's pace (microseconds)
        while !self.ready() {
            Timer::after_micros(10).await;
        }
    }

    fn send(&mut self, header: &[u8], payload: &[u8], trailer: &[u8]) -> bool {
        self.gem.send(header, payload, trailer)
    }

    fn send_descriptor(&mut self, d: &TxDescriptor, payload: &[u8]) -> bool {
        if !self.check() || d.header_len < 20 || d.header[0] >> 4 != 4 {
            return false; // IPv4 here: the neighbour table is
        }
        let h = &d.header;
        let ip = core::net::Ipv4Addr::new(h[16], h[17], h[18], h[19]);
        let (Some(mac), Some(place)) = (neighbour(ip), self.place(payload)) else {
            return false;
        };
        if (read(STATUS) >> 16) & 0xff == 0 {
            return false;
        }
        if self.dst != Some(mac) {
            // frames already queued keep the address they were queued for
            while read(STATUS) & STATUS_IDLE == 0 {}
            let (hi, lo) = mac_regs(&mac);
            write(MAC_DST_HI, hi);
            write(MAC_DST_LO, lo);
            self.dst = Some(mac);
        }
        clean(payload);
        let mut placed = d.clone();
        placed.payload = place;
        let bytes = placed.to_bytes();
        for (i, w) in bytes.chunks_exact(4).enumerate() {
            write(WINDOW + 4 * i, u32::from_le_bytes([w[0], w[1], w[2], w[3]]));
        }
        debug_assert_eq!(bytes.len(), DESCRIPTOR_LEN);
        // the writes complete before STATUS is read (AXI orders neither channel against the
        // other); a refusal then shows at once, and that packet takes the software path. An
        // error from an earlier packet may send this one twice: a duplicate PSN, which RC's
        // responder acknowledges and drops.
        aarch32_cpu::asm::dsb();
        self.check()
    }
}
