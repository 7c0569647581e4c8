//! The Zynq-7000 board (Cortex-A9, `armv7a-none-eabi`): the FPGA-SoC camera prototype.
//!
//! Written for a Zedboard-class board: PS clock 33.333 MHz, Ethernet 0 on MIO 16–27 (RGMII)
//! with MDIO on MIO 52/53 and any IEEE 802.3 clause-22 PHY, UART 1 on MIO 48/49 at 115200 baud
//! for the defmt log. The firmware runs from DDR (`memory.x`); the Ethernet descriptors live in
//! a 1 MiB section the MMU maps uncached. Boot it with an FSBL or over JTAG after `ps7_init`
//! (docs/firmware.md).
//!
//! The frame source is the synthetic one; a sensor board implements
//! [`FrameSource`](rdmacam_firmware::protocol::device::frame::FrameSource) over its frame
//! DMA buffers instead.

use core::cell::RefCell;
use core::panic::PanicInfo;

use arbitrary_int::u5;
use critical_section::Mutex;
use embassy_executor::Spawner;
use embassy_net::{Config, StackResources};
use embassy_time::{Duration, Timer};
use rdmacam_firmware::app::{self, Buffers, GVSP_PORT, MESSAGE_PORT};
use rdmacam_firmware::protocol::device::pattern::SyntheticSource;
use rdmacam_firmware::protocol::device::{Device, DeviceConfig};
use rdmacam_firmware::protocol::wire::pmtu::Pmtu;
use static_cell::{ConstStaticCell, StaticCell};
use zynq7000_hal::clocks::Clocks;
use zynq7000_hal::eth::{
    AlignedBuffer, ClockDivSet, EthernetConfig, EthernetId, EthernetLowLevel, rx_descr, tx_descr,
};

use crate::zynq_eth::{self, Driver, RoceTx, TX_SLOTS};
use zynq7000_hal::gic::{Interrupt, SpiInterrupt};
use zynq7000_hal::gpio::GpioPins;
use zynq7000_hal::gtc::GlobalTimerCounter;
use zynq7000_hal::time::Hertz;
use zynq7000_hal::uart::{ClockConfig as UartClock, Config as UartConfig, Uart};

/// The PS reference clock of Zedboard-class boards.
const PS_CLOCK: Hertz = Hertz::from_raw(33_333_333);
/// Locally administered MAC of the prototype (a product takes it from its EEPROM).
const MAC: [u8; 6] = [0x02, 0x52, 0x44, 0x4d, 0x5a, 0x01];
/// Frame memory in DDR: three slots of up to 4 MiB (2048x2048 Mono8).
const FRAME_MEMORY: usize = 12 << 20;
/// The 1 MiB DDR section (see memory.x) the MMU maps uncached for DMA descriptors.
const UNCACHED_ADDR: u32 = 0x0400_0000;
const RX_SLOTS: usize = 32;

#[unsafe(link_section = ".uncached")]
static RX_DESCRIPTORS: rx_descr::DescriptorList<RX_SLOTS> = rx_descr::DescriptorList::new();
#[unsafe(link_section = ".uncached")]
static TX_DESCRIPTORS: tx_descr::DescriptorList<TX_SLOTS> = tx_descr::DescriptorList::new();

static RX_BUFS: ConstStaticCell<[AlignedBuffer; RX_SLOTS]> =
    ConstStaticCell::new([AlignedBuffer([0; zynq7000_hal::eth::MTU]); RX_SLOTS]);
static TX_BUFS: ConstStaticCell<[AlignedBuffer; TX_SLOTS]> =
    ConstStaticCell::new([AlignedBuffer([0; zynq7000_hal::eth::MTU]); TX_SLOTS]);
static FRAMES: ConstStaticCell<[u8; FRAME_MEMORY]> = ConstStaticCell::new([0; FRAME_MEMORY]);
static BUFFERS: ConstStaticCell<Buffers> = ConstStaticCell::new(Buffers::new());

// ------------------------------------------------------------------ defmt over UART 1

static LOG_UART: Mutex<RefCell<Option<Uart>>> = Mutex::new(RefCell::new(None));
static mut ENCODER: defmt::Encoder = defmt::Encoder::new();
static mut RESTORE: critical_section::RestoreState = critical_section::RestoreState::invalid();

/// defmt frames go out on UART 1, blocking, inside one critical section per frame; decode them
/// on the host with `defmt-print -e rdmacam-firmware < /dev/ttyACM0` (docs/firmware.md).
#[defmt::global_logger]
struct UartLogger;

fn uart_write(bytes: &[u8]) {
    // SAFETY: only called between acquire and release, inside their critical section.
    let cs = unsafe { critical_section::CriticalSection::new() };
    if let Some(u) = LOG_UART.borrow(cs).borrow_mut().as_mut() {
        u.write_all(bytes);
    }
}

// SAFETY: acquire/release bracket every frame in one critical section, so the encoder and the
// UART are never used by two contexts at once.
unsafe impl defmt::Logger for UartLogger {
    fn acquire() {
        // SAFETY: released in `release`.
        let restore = unsafe { critical_section::acquire() };
        // SAFETY: inside the critical section just taken.
        unsafe {
            RESTORE = restore;
            (*core::ptr::addr_of_mut!(ENCODER)).start_frame(uart_write);
        }
    }

    unsafe fn flush() {}

    unsafe fn release() {
        // SAFETY: acquire ran first, in this critical section.
        unsafe {
            (*core::ptr::addr_of_mut!(ENCODER)).end_frame(uart_write);
            critical_section::release(RESTORE);
        }
    }

    unsafe fn write(bytes: &[u8]) {
        // SAFETY: between acquire and release.
        unsafe { (*core::ptr::addr_of_mut!(ENCODER)).write(bytes, uart_write) };
    }
}

#[panic_handler]
fn panic(info: &PanicInfo) -> ! {
    defmt::error!("panic: {}", defmt::Display2Format(info));
    loop {
        core::hint::spin_loop();
    }
}

// ------------------------------------------------------------------ interrupts

#[zynq7000_rt::irq]
fn irq_handler() {
    // SAFETY: called once per IRQ, from the IRQ handler.
    if let Err(irq) = unsafe { zynq7000_hal::generic_interrupt_handler() } {
        static UNHANDLED: core::sync::atomic::AtomicU32 = core::sync::atomic::AtomicU32::new(0);
        if UNHANDLED.fetch_add(1, core::sync::atomic::Ordering::Relaxed) < 3 {
            defmt::warn!("unhandled interrupt {}", defmt::Debug2Format(&irq));
        }
    }
}

/// The global timer's interrupt: clear its event flag (GTC interrupt status, write 1), then let
/// the time driver fire alarms. zynq7000-hal's driver only masks the comparator interrupt, so
/// the event flag stays set and the next unmask raises the interrupt again at once: harmless
/// where the PPI is edge-triggered, an interrupt storm where it is a level (qemu's model).
fn gtc_interrupt() {
    const GTC_INTERRUPT_STATUS: usize = 0xF8F0_0200 + 0x0C;
    // SAFETY: the GTC's interrupt status register; writing 1 clears the event flag only.
    unsafe { core::ptr::write_volatile(GTC_INTERRUPT_STATUS as *mut u32, 1) };
    // SAFETY: called once per global timer interrupt, from the IRQ handler.
    unsafe { zynq7000_hal::time_driver_gtc::on_interrupt() };
}

fn eth_interrupt() {
    zynq_eth::on_interrupt();
}

// ------------------------------------------------------------------ tasks

#[embassy_executor::task]
async fn net_task(mut runner: embassy_net::Runner<'static, Driver>) -> ! {
    runner.run().await
}

/// Follows the PHY (clause 22: BMSR bit 2 link status, bit 5 auto-negotiation complete) and
/// tells embassy-net whether the link is up.
#[embassy_executor::task]
async fn link_task(mut eth: zynq7000_hal::eth::Ethernet, phy: u8) -> ! {
    let mut up = false;
    let mut ticks = 0u32;
    let mut logged = zynq_eth::TxCounters::default();
    loop {
        // what the transmit ring did, every 5 s when it changed
        ticks += 1;
        let c = zynq_eth::counters();
        if ticks % 10 == 0 && (c.gathered, c.copied) != (logged.gathered, logged.copied) {
            logged = c;
            defmt::info!(
                "transmit: {} RoCEv2 packets gathered from frame memory, {} frames copied, {} errors",
                c.gathered,
                c.copied,
                c.errors
            );
        }
        let bmsr = eth.mdio_mut().read_blocking(u5::new(phy), u5::new(1));
        let now_up = bmsr & (1 << 2) != 0 && bmsr & (1 << 5) != 0;
        if now_up != up {
            up = now_up;
            defmt::info!("Ethernet link {}", if up { "up" } else { "down" });
            zynq_eth::update_link_state(up);
        }
        Timer::after(Duration::from_millis(500)).await;
    }
}

#[embassy_executor::task]
async fn camera_task(stack: embassy_net::Stack<'static>) -> ! {
    // DHCP for 5 s, then the link-local 169.254.90.1 (from the MAC), as GigE Vision devices do
    let ip = app::address(stack, MAC, 5).await;
    defmt::info!("camera at {}", defmt::Display2Format(&ip));
    let mut cfg = DeviceConfig::new(ip, MAC, "RDMACAMZ7001");
    // a VGA image to start with; hosts can enlarge it up to the 2048x2048 sensor
    cfg.width = 640;
    cfg.height = 480;
    cfg.stream_source_port = GVSP_PORT;
    cfg.message_source_port = MESSAGE_PORT;
    // the GEM driver's frames are at most 1536 bytes: 1500-byte IP MTU, path MTU 1024
    cfg.orsp_max_pmtu = Pmtu::Mtu1024;
    cfg.link_speed_mbps = 1000;
    let mut device = Device::new(cfg);
    // queue-pair packets leave below embassy-net with the camera's own IP header
    // (zynq_eth.rs): the DSCP and ECN a host sets reach the wire
    device.orsp_mut().set_tos_capable(true);
    let frames = FRAMES.take();
    #[cfg(feature = "mover")]
    let mover = crate::zynq_mover::MoverTx::probe(MAC, frames);
    let mut cam = rdmacam_firmware::camera::new(device, SyntheticSource::new(1), frames)
        .with_entropy(board_entropy);
    #[cfg(feature = "mover")]
    if let Some(mut mover) = mover {
        // the requester builds descriptors; the mover in the fabric does the rest
        cam.set_icrc_offload(true);
        app::run(stack, &mut cam, BUFFERS.take(), &mut mover).await
    }
    app::run(stack, &mut cam, BUFFERS.take(), &mut RoceTx::new(MAC)).await
}

/// The board's entropy for the device's QPN and first PSN: the Zynq-7000's processing system
/// has no random number generator, so this is the 64-bit global timer (333 MHz) read when a
/// connection ends and at start-up (after DHCP), moments set by network traffic. A design with
/// a TRNG in the programmable logic should return its output here instead (docs/firmware.md).
fn board_entropy() -> u64 {
    embassy_time::Instant::now()
        .as_ticks()
        .wrapping_mul(0x9e37_79b9_7f4a_7c15)
}

#[zynq7000_rt::entry]
fn main() -> ! {
    let dp = zynq7000_hal::init(zynq7000_hal::Config::default()).expect("peripherals");
    zynq7000_hal::mmu::mmu_l1_table_mut()
        .update(
            UNCACHED_ADDR,
            zynq7000_hal::mmu::section_attrs::SHAREABLE_DEVICE,
        )
        .expect("uncached section");
    let clocks = Clocks::new_from_regs(PS_CLOCK).expect("clocks");
    let m = GpioPins::new(dp.gpio).mio;

    let (uart_clk, _) =
        UartClock::new_autocalc_with_error(clocks.io_clocks(), 115_200).expect("UART clock");
    let uart = Uart::new_with_mio_for_uart_1(
        dp.uart_1,
        UartConfig::new_with_clk_config(uart_clk),
        (m.mio48, m.mio49),
    )
    .expect("UART 1");
    critical_section::with(|cs| LOG_UART.borrow(cs).replace(Some(uart)));
    defmt::info!("rdmacam firmware on the Zynq-7000");
    defmt::debug!(
        "clocks: cpu 3x2x {} Hz, io ref {} Hz",
        clocks.arm_clocks().cpu_3x2x_clk().to_raw(),
        clocks.io_clocks().ref_clk().to_raw()
    );

    zynq7000_hal::time_driver_gtc::init(
        clocks.arm_clocks(),
        GlobalTimerCounter::new(dp.gtc, clocks.arm_clocks()),
    );
    // replaces the driver's own handler (see gtc_interrupt)
    zynq7000_hal::register_interrupt(
        Interrupt::Ppi(zynq7000_hal::gic::PpiInterrupt::GlobalTimer),
        gtc_interrupt,
    );

    // Ethernet 0: descriptors in the uncached section, buffers in DDR
    // SAFETY: each descriptor list is taken once, here.
    let (rx_descr, tx_descr) = unsafe { (RX_DESCRIPTORS.take(), TX_DESCRIPTORS.take()) };
    let mut rx = rx_descr::DescriptorListWrapper::new(rx_descr.as_mut_slice());
    let (rx_bufs, tx_bufs) = (RX_BUFS.take(), TX_BUFS.take());
    rx.init_with_aligned_bufs(rx_bufs.as_slice());
    let tx_base = zynq_eth::init_tx(EthernetId::Eth0, tx_descr, tx_bufs);
    let ll = EthernetLowLevel::new(dp.eth_0).expect("Ethernet 0");
    let (divs, _) = ClockDivSet::calculate_for_rgmii_and_io_clock(clocks.io_clocks());
    let eth_cfg = EthernetConfig::new(
        zynq7000_hal::eth::ClockConfig::new(divs.cfg_1000_mbps),
        zynq7000_hal::eth::calculate_mdc_clk_div(clocks.arm_clocks()).expect("MDC divisor"),
        MAC,
    );
    let mut eth = zynq7000_hal::eth::Ethernet::new_with_mio_eth_0(
        ll,
        eth_cfg,
        m.mio16,
        m.mio21,
        (m.mio17, m.mio18, m.mio19, m.mio20),
        m.mio22,
        m.mio27,
        (m.mio23, m.mio24, m.mio25, m.mio26),
        Some((m.mio52, m.mio53)),
    );
    eth.set_rx_buf_descriptor_base_address(rx.base_addr());
    eth.set_tx_buf_descriptor_base_address(tx_base);
    // the handler first: an unacknowledged GEM interrupt would fire for ever
    zynq7000_hal::register_interrupt(Interrupt::Spi(SpiInterrupt::Eth0), eth_interrupt);
    eth.start();
    // the first PHY that answers on MDIO, reset with auto-negotiation (BMCR 0x9200)
    let phy = (0u8..32)
        .find(|&a| {
            let id = eth.mdio_mut().read_blocking(u5::new(a), u5::new(2));
            id != 0xffff && id != 0
        })
        .unwrap_or(0);
    eth.mdio_mut()
        .write_blocking(u5::new(phy), u5::new(0), 0x9200);
    let driver = Driver::new(MAC, rx, rx_bufs);
    static RESOURCES: StaticCell<StackResources<8>> = StaticCell::new();
    let (stack, runner) = embassy_net::new(
        driver,
        Config::dhcpv4(Default::default()),
        RESOURCES.init(StackResources::new()),
        u64::from_le_bytes([MAC[0], MAC[1], MAC[2], MAC[3], MAC[4], MAC[5], 0x5a, 0x7e]),
    );

    static EXECUTOR: StaticCell<embassy_executor::Executor> = StaticCell::new();
    EXECUTOR
        .init(embassy_executor::Executor::new())
        .run(|spawner: Spawner| {
            spawner.spawn(net_task(runner).expect("net task"));
            spawner.spawn(link_task(eth, phy).expect("link task"));
            spawner.spawn(camera_task(stack).expect("camera task"));
        })
}
