//! The Linux TAP board: the same firmware on embassy's std executor, with embassy-net on a TAP
//! interface (embassy-net-tuntap) and the synthetic frame source.
//!
//! ```sh
//! ip tuntap add name rdmacam0 mode tap && ip link set rdmacam0 mtu 9000 up
//! ip addr add 192.0.2.1/24 dev rdmacam0
//! rdmacam-firmware --tap rdmacam0 --ip 192.0.2.2/24       # or without --ip: DHCP, then link-local
//! ```

use clap::Parser;
use embassy_executor::Spawner;
use embassy_net::{Config, Ipv4Cidr, Stack, StackResources, StaticConfigV4};
use embassy_net_tuntap::TunTapDevice;
use rdmacam_firmware::app::{self, Buffers, GVSP_PORT, MESSAGE_PORT};
use rdmacam_firmware::protocol::device::pattern::SyntheticSource;
use rdmacam_firmware::protocol::device::{Device, DeviceConfig};
use rdmacam_firmware::protocol::wire::pmtu::Pmtu;
use static_cell::StaticCell;

/// Frame memory: three slots of up to 1 MiB (1024x1024 Mono8).
const FRAME_MEMORY: usize = 3 << 20;

/// The rdmacam camera firmware on a Linux TAP interface.
#[derive(Parser, Debug)]
#[command(version, about)]
struct Args {
    /// TAP interface to attach to (created beforehand: `ip tuntap add name NAME mode tap`).
    #[arg(long, default_value = "rdmacam0")]
    tap: String,
    /// Static (persistent) address with prefix, e.g. 192.0.2.2/24. Default: DHCP, then a
    /// link-local 169.254.x.y/16 after --dhcp-timeout seconds without a lease.
    #[arg(long)]
    ip: Option<String>,
    /// Seconds to wait for a DHCP lease before falling back to link-local.
    #[arg(long, default_value_t = 5)]
    dhcp_timeout: u64,
    /// MAC address of the camera (locally administered by default).
    #[arg(long, default_value = "02:52:44:4d:41:43")]
    mac: String,
    /// Image width and height (a frame must fit in 1 MiB of frame memory).
    #[arg(long, default_value_t = 640)]
    width: u32,
    /// Image height.
    #[arg(long, default_value_t = 480)]
    height: u32,
    /// Frames per second until a host sets AcquisitionFrameRate.
    #[arg(long, default_value_t = 30.0)]
    fps: f32,
    /// Serial number.
    #[arg(long, default_value = "RDMACAMFW01")]
    serial: String,
    /// Seed of the Noise pattern.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Answer RDMA CM connection requests (rdma_connect) on this port from the start (the
    /// OrspCmPort register; 0 = only after a host writes it).
    #[arg(long, default_value_t = 0)]
    cm_port: u16,
}

fn parse_mac(s: &str) -> Option<[u8; 6]> {
    let mut mac = [0u8; 6];
    let mut parts = s.split(':');
    for b in &mut mac {
        *b = u8::from_str_radix(parts.next()?, 16).ok()?;
    }
    parts.next().is_none().then_some(mac)
}

fn parse_cidr(s: &str) -> Option<Ipv4Cidr> {
    let (a, p) = s.split_once('/')?;
    Some(Ipv4Cidr::new(a.parse().ok()?, p.parse().ok()?))
}

#[embassy_executor::task]
async fn net_task(mut runner: embassy_net::Runner<'static, TunTapDevice>) -> ! {
    runner.run().await
}

#[embassy_executor::task]
async fn camera_task(stack: Stack<'static>, args: Args, mac: [u8; 6], pmtu: Pmtu) -> ! {
    let ip = app::address(stack, mac, args.dhcp_timeout).await;
    log::info!("camera at {ip}, RoCEv2 path MTU up to {}", pmtu.bytes());
    let mut cfg = DeviceConfig::new(ip, mac, &args.serial);
    cfg.width = args.width;
    cfg.height = args.height;
    cfg.sensor_width = args.width.max(1024);
    cfg.sensor_height = args.height.max(1024);
    cfg.frame_rate = args.fps;
    cfg.stream_source_port = GVSP_PORT;
    cfg.message_source_port = MESSAGE_PORT;
    cfg.orsp_max_pmtu = pmtu;
    cfg.link_speed_mbps = 1000;
    let mut device = Device::new(cfg);
    // smoltcp writes TOS 0 and hides received IP headers: no DSCP/ECN control
    device.orsp_mut().set_tos_capable(false);
    device.orsp_mut().set_cm_port(args.cm_port);
    static FRAMES: StaticCell<[u8; FRAME_MEMORY]> = StaticCell::new();
    static BUFFERS: StaticCell<Buffers> = StaticCell::new();
    let frames = FRAMES.init([0; FRAME_MEMORY]);
    let buffers = BUFFERS.init(Buffers::new());
    let mut cam = rdmacam_firmware::camera::new(device, SyntheticSource::new(args.seed), frames)
        .with_entropy(os_entropy);
    app::run(stack, &mut cam, buffers, &mut app::SocketsOnly).await
}

/// The OS's randomness, for the device's QPN and first PSN of each connection.
fn os_entropy() -> u64 {
    use std::io::Read as _;
    let mut b = [0u8; 8];
    match std::fs::File::open("/dev/urandom").and_then(|mut f| f.read_exact(&mut b)) {
        Ok(()) => u64::from_ne_bytes(b),
        Err(e) => {
            log::warn!("no /dev/urandom ({e}): QPN and PSN from the clock only");
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos() as u64)
        }
    }
}

pub fn main() {
    env_logger::builder()
        .filter_level(log::LevelFilter::Info)
        .parse_default_env()
        .init();
    let args = Args::parse();
    let Some(mac) = parse_mac(&args.mac) else {
        eprintln!("rdmacam-firmware: --mac must look like 02:52:44:4d:41:43");
        std::process::exit(2);
    };
    let config = match args.ip.as_deref() {
        Some(s) => match parse_cidr(s) {
            Some(address) => Config::ipv4_static(StaticConfigV4 {
                address,
                gateway: None,
                dns_servers: Default::default(),
            }),
            None => {
                eprintln!("rdmacam-firmware: --ip must look like 192.0.2.2/24");
                std::process::exit(2);
            }
        },
        None => Config::dhcpv4(Default::default()),
    };
    let mut device = match TunTapDevice::new(&args.tap) {
        Ok(d) => d,
        Err(e) => {
            eprintln!(
                "rdmacam-firmware: cannot open TAP interface {}: {e} (create it as root: ip tuntap add name {} mode tap)",
                args.tap, args.tap
            );
            std::process::exit(2);
        }
    };
    device.set_hardware_address(mac);
    let mtu = embassy_net_driver::Driver::capabilities(&device).max_transmission_unit;
    // the IP MTU less IP, UDP, BTH, RETH and ICRC
    let pmtu = Pmtu::for_netdev_mtu((mtu - 14) as u32).unwrap_or(Pmtu::Mtu256);
    static RESOURCES: StaticCell<StackResources<8>> = StaticCell::new();
    let (stack, runner) = embassy_net::new(
        device,
        config,
        RESOURCES.init(StackResources::new()),
        u64::from_le_bytes([mac[0], mac[1], mac[2], mac[3], mac[4], mac[5], 0, 0]),
    );
    static EXECUTOR: StaticCell<embassy_executor::Executor> = StaticCell::new();
    let executor = EXECUTOR.init(embassy_executor::Executor::new());
    executor.run(|spawner: Spawner| {
        spawner.spawn(net_task(runner).expect("net task"));
        spawner.spawn(camera_task(stack, args, mac, pmtu).expect("camera task"));
    });
}
