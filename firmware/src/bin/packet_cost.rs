//! What a packet costs the camera's CPU, counted on the Zynq-7000 image itself.
//!
//! Run in qemu's xilinx-zynq-a9 with `-icount shift=0` (`scripts/packet-cost.sh` does): virtual
//! time then advances one nanosecond per executed guest instruction, and qemu's Cortex-A9
//! global timer ticks every (prescaler + 1) × 10 ns of virtual time, so with prescaler 0 one
//! timer tick is ten instructions, deterministically, whatever the host's load. Every figure
//! is the difference of two runs of different length, so the timer reads and start-up cancel.
//! The results go out on UART 1 as `name=value` lines, then `done`.
//!
//! The packet path is the firmware's: the protocol crate built for `armv7a-none-eabi`, IPv4,
//! the board's path MTU of 1024, crc32fast's portable table path (the Cortex-A9 has no CRC
//! instructions).
#![cfg_attr(target_os = "none", no_std, no_main)]

#[cfg(not(target_os = "none"))]
fn main() {
    eprintln!("packet-cost runs on the Zynq-7000 image in qemu: scripts/packet-cost.sh");
    std::process::exit(2);
}

#[cfg(target_os = "none")]
mod zynq {
    use core::fmt::Write as _;
    use core::hint::black_box;
    use core::net::{IpAddr, Ipv4Addr};
    use core::panic::PanicInfo;

    use rdmacam_firmware::dma::clean;
    use rdmacam_protocol::rc::workload::{icrc_floor, stream};
    use rdmacam_protocol::rc::{Path, PayloadSource, Requester, RequesterConfig};
    use rdmacam_protocol::wire::pmtu::Pmtu;
    use static_cell::ConstStaticCell;
    use zynq7000_hal::clocks::Clocks;
    use zynq7000_hal::gpio::GpioPins;
    use zynq7000_hal::gtc::GlobalTimerCounter;
    use zynq7000_hal::time::Hertz;
    use zynq7000_hal::uart::{ClockConfig as UartClock, Config as UartConfig, Uart};

    const PS_CLOCK: Hertz = Hertz::from_raw(33_333_333);
    /// 1920x1080 Mono8.
    const FRAME: usize = 1920 * 1080;
    const PMTU: Pmtu = Pmtu::Mtu1024;
    /// Instructions per global timer tick under `-icount shift=0`, prescaler 0.
    const INSTRUCTIONS_PER_TICK: u64 = 10;

    static FRAME_MEMORY: ConstStaticCell<[u8; FRAME]> = ConstStaticCell::new([0; FRAME]);
    static COPY_BUFFER: ConstStaticCell<[u8; 1536]> = ConstStaticCell::new([0; 1536]);

    struct Out(Uart);

    impl core::fmt::Write for Out {
        fn write_str(&mut self, s: &str) -> core::fmt::Result {
            self.0.write_all(s.as_bytes());
            Ok(())
        }
    }

    #[panic_handler]
    fn panic(_: &PanicInfo) -> ! {
        loop {
            core::hint::spin_loop();
        }
    }

    #[zynq7000_rt::irq]
    fn irq_handler() {}

    struct Timer(GlobalTimerCounter);

    impl Timer {
        /// Instructions executed so far.
        fn now(&self) -> u64 {
            self.0.read_timer() * INSTRUCTIONS_PER_TICK
        }
        /// Instructions `f` runs.
        fn count(&self, f: impl FnOnce()) -> u64 {
            let t0 = self.now();
            f();
            self.now() - t0
        }
    }

    /// The board's requester: IPv4, path MTU 1024, the default ACK timeout (armed per ACK
    /// request, never firing here).
    fn requester(offload: bool) -> Requester<64, 64> {
        let mut cfg = RequesterConfig::new(
            0x22,
            0x11,
            0,
            Path::new(
                IpAddr::V4(Ipv4Addr::new(169, 254, 90, 1)),
                IpAddr::V4(Ipv4Addr::new(169, 254, 90, 2)),
            ),
        );
        cfg.pmtu = PMTU;
        cfg.max_unacked = 1 << 22;
        cfg.icrc_offload = offload;
        Requester::new(cfg)
    }

    /// The instructions `run` takes for `n2` units less those for `n1` (start-up and the timer
    /// reads cancel).
    fn delta(timer: &Timer, n1: u32, n2: u32, mut run: impl FnMut(u32)) -> u64 {
        let a = timer.count(|| run(n1));
        let b = timer.count(|| run(n2));
        b - a
    }

    #[zynq7000_rt::entry]
    fn main() -> ! {
        let dp = zynq7000_hal::init(zynq7000_hal::Config::default()).expect("peripherals");
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
        let mut out = Out(uart);
        let mut gtc = GlobalTimerCounter::new(dp.gtc, clocks.arm_clocks());
        gtc.set_prescaler(0);
        gtc.enable();
        let timer = Timer(gtc);

        let frame = FRAME_MEMORY.take();
        for (i, b) in frame.iter_mut().enumerate() {
            *b = (i as u32).wrapping_mul(2_654_435_761).to_be_bytes()[0];
        }
        let frame: &[u8] = frame;
        let src: &[&[u8]] = &[frame];
        let (n1, n2) = (400u32, 1400u32);

        // the scale checked: a loop of exactly two instructions per turn, 1,000,000 turns
        let calibration = timer.count(|| {
            // SAFETY: a register-only countdown loop.
            unsafe {
                core::arch::asm!(
                    "2:",
                    "subs {n}, {n}, #1",
                    "bne 2b",
                    n = inout(reg) 1_000_000u32 => _,
                    options(nomem, nostack),
                );
            }
        });

        // a MIDDLE packet beyond the CRC over its payload, and the same packets when a data
        // mover computes the ICRC (no payload byte read)
        let pmtu = PMTU.bytes() as usize;
        let stream_of = |offload: bool| {
            move |n: u32| {
                black_box(stream(&mut requester(offload), src, n, FRAME as u32));
            }
        };
        let units = u64::from(n2 - n1);
        let middle = delta(&timer, n1, n2, stream_of(false)) / units;
        let middle_mover = delta(&timer, n1, n2, stream_of(true)) / units;
        let floor_per_packet = delta(&timer, n1, n2, |n| {
            black_box(icrc_floor(frame, pmtu, n));
        }) / units;
        // the ICRC per payload byte: crc32fast over the frame against over half of it, in
        // thousandths of an instruction
        let per_byte_milli = {
            let half = timer.count(|| {
                let mut h = crc32fast::Hasher::new();
                h.update(black_box(&frame[..FRAME / 2]));
                black_box(h.finalize());
            });
            let full = timer.count(|| {
                let mut h = crc32fast::Hasher::new();
                h.update(black_box(frame));
                black_box(h.finalize());
            });
            (full - half) * 1000 / (FRAME as u64 / 2)
        };
        // a CPU copy of each payload byte into a transmit buffer (what a socket-buffer path
        // adds), per byte in thousandths
        let buf = COPY_BUFFER.take();
        let copy_milli = delta(&timer, n1, n2, |n| {
            for c in frame.chunks(pmtu).take(n as usize) {
                buf[..c.len()].copy_from_slice(black_box(c));
                black_box(&buf);
            }
        }) * 1000
            / (units * u64::from(PMTU.bytes()));
        // what the zero-copy transmit path does instead of copying (the same function): clean
        // the payload's cache lines (L1 and the PL310 L2) so the GEM's DMA reads what the CPU
        // wrote, per packet
        let clean_per_packet = delta(&timer, n1, n2, |n| {
            frame.chunks(pmtu).take(n as usize).for_each(clean);
        }) / units;
        // whole frames: one WRITE of 1920x1080 Mono8, every packet, ACKs and the completion
        let packets = (FRAME as u32).div_ceil(PMTU.bytes());
        let per_frame = timer.count(|| stream_of(false)(packets));
        let per_frame_mover = timer.count(|| stream_of(true)(packets));
        let checks = src.payload(0, 0, FRAME).is_some();

        let _ = writeln!(out, "arm_calibration_2000000={calibration}");
        let _ = writeln!(
            out,
            "arm_middle_instructions_beyond_crc={}",
            middle - floor_per_packet
        );
        let _ = writeln!(out, "arm_middle_instructions_data_mover={middle_mover}");
        let _ = writeln!(out, "arm_icrc_floor_instructions={floor_per_packet}");
        let _ = writeln!(
            out,
            "arm_icrc_instructions_per_byte={}.{:03}",
            per_byte_milli / 1000,
            per_byte_milli % 1000
        );
        let _ = writeln!(
            out,
            "arm_copy_instructions_per_byte={}.{:03}",
            copy_milli / 1000,
            copy_milli % 1000
        );
        let _ = writeln!(
            out,
            "arm_cache_clean_instructions_per_packet={clean_per_packet}"
        );
        let _ = writeln!(out, "arm_packets_per_frame={packets}");
        let _ = writeln!(out, "arm_instructions_per_frame={per_frame}");
        let _ = writeln!(
            out,
            "arm_instructions_per_frame_data_mover={per_frame_mover}"
        );
        let _ = writeln!(out, "done {}", if checks { "ok" } else { "frame missing" });
        loop {
            aarch32_cpu::asm::wfi();
        }
    }
}
