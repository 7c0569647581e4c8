//! The ceiling for the camera's userspace sender: plain UDP datagrams of the sizes RoCEv2 uses
//! (4112 bytes: BTH + 4096 payload + ICRC), over loopback to a receiver thread that only
//! drains, sent with `sendmmsg` (32 per call, like the camera without GSO) or with UDP GSO
//! (15 segments per send, like the camera's GSO path). Prints Gbit/s and the sender thread's
//! CPU seconds per GB, for docs/BENCHMARKS.md (scripts/bench-sender.sh runs it).
//!
//! `cargo run --release -p rdmacam-hil --example udp_blast -- [sendmmsg|gso] [GB] [FROM TO:PORT]`
//! and `udp_blast sink PORT` as the receiver elsewhere (hil/vm/bench-rxe.sh: across the VM's
//! veth pair, the path the camera's RoCEv2 takes into rxe).

use std::net::{Ipv4Addr, UdpSocket};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use rdmacam_io::gso::{Gather, TX_BATCH, gso_segments};
use rdmacam_io::roce::RoceSocket;

const DATAGRAM: usize = 4112;

fn thread_cpu() -> f64 {
    rdmacam_io::sched::thread_cpu_time().as_secs_f64()
}

/// Drain UDP datagrams on `port` until none came for a second; print what arrived and the rate
/// from the first datagram to the last.
fn sink(port: u16) -> std::io::Result<()> {
    let sock = UdpSocket::bind((Ipv4Addr::UNSPECIFIED, port))?;
    socket2::SockRef::from(&sock).set_recv_buffer_size(16 << 20)?;
    sock.set_read_timeout(Some(std::time::Duration::from_secs(1)))?;
    let mut buf = vec![0u8; 65536];
    let (mut bytes, mut first, mut last) = (0u64, None, Instant::now());
    loop {
        match sock.recv(&mut buf) {
            Ok(n) => {
                bytes += n as u64;
                last = Instant::now();
                first.get_or_insert(last);
            }
            Err(_) if first.is_some() => break,
            Err(_) => {}
        }
    }
    let secs = (last - first.unwrap_or(last)).as_secs_f64().max(1e-9);
    println!(
        "sink     bytes={bytes} gbit_per_s={:.3}",
        bytes as f64 * 8.0 / secs / 1e9
    );
    Ok(())
}

fn main() -> std::io::Result<()> {
    let mut args = std::env::args().skip(1);
    let mode = args.next().unwrap_or_else(|| "gso".into());
    if mode == "sink" {
        let port = args.next().and_then(|a| a.parse().ok()).unwrap_or(9000);
        return sink(port);
    }
    let gb: f64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(2.0);
    // optional FROM TO:PORT: send to a sink elsewhere (`udp_blast sink PORT`, e.g. across the
    // VM's veth pair) instead of the receiver thread on loopback
    let from: Option<Ipv4Addr> = args.next().and_then(|a| a.parse().ok());
    let to: Option<std::net::SocketAddrV4> = args.next().and_then(|a| a.parse().ok());
    let stop = Arc::new(AtomicBool::new(false));
    let (src_ip, dst, rx) = match (from, to) {
        (Some(f), Some(t)) => (f, t, None),
        _ => {
            let sink = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0))?;
            socket2::SockRef::from(&sink).set_recv_buffer_size(16 << 20)?;
            let port = sink.local_addr()?.port();
            let stop = stop.clone();
            sink.set_read_timeout(Some(std::time::Duration::from_millis(100)))?;
            let rx = std::thread::spawn(move || {
                let mut buf = vec![0u8; 65536];
                let mut bytes = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    if let Ok(n) = sink.recv(&mut buf) {
                        bytes += n as u64;
                    }
                }
                bytes
            });
            (
                Ipv4Addr::LOCALHOST,
                std::net::SocketAddrV4::new(Ipv4Addr::LOCALHOST, port),
                Some(rx),
            )
        }
    };
    // a RoceSocket sends whole IPv4 packets: build one IPv4/UDP header for the datagram
    let mut sock = RoceSocket::bind(src_ip.into(), 0, 0, 0.0, 1)?;
    let src_port = sock.tx_port();
    let mut header = vec![0u8; 28];
    header[0] = 0x45;
    header[12..16].copy_from_slice(&src_ip.octets());
    header[16..20].copy_from_slice(&dst.ip().octets());
    header[20..22].copy_from_slice(&src_port.to_be_bytes());
    header[22..24].copy_from_slice(&dst.port().to_be_bytes());
    let payload = vec![0x5au8; DATAGRAM];
    let whole: Vec<u8> = [&header[..], &payload[..]].concat();
    let total = (gb * 1e9) as usize / DATAGRAM;
    let (t0, c0) = (Instant::now(), thread_cpu());
    let mut sent = 0;
    match mode.as_str() {
        "sendmmsg" => {
            while sent < total {
                let k = TX_BATCH.min(total - sent);
                sock.send_many((0..k).map(|_| &whole[..]))?;
                sent += k;
            }
        }
        _ => {
            let per = gso_segments(DATAGRAM);
            let seg = Gather {
                header: &header,
                payload: &payload,
                trailer: &[],
            };
            let segs = vec![seg; per];
            while sent < total {
                let k = per.min(total - sent);
                sock.send_gso(&segs[..k])?;
                sent += k;
            }
        }
    }
    let (secs, cpu) = (t0.elapsed().as_secs_f64(), thread_cpu() - c0);
    std::thread::sleep(std::time::Duration::from_millis(200));
    stop.store(true, Ordering::Relaxed);
    let bytes = (sent * DATAGRAM) as f64;
    let share = match rx {
        Some(rx) => format!("{:.3}", rx.join().expect("receiver") as f64 / bytes),
        None => "see-sink".into(),
    };
    println!(
        "{mode:8} datagrams={sent} received_share={share} gbit_per_s={:.2} sender_cpu_s_per_GB={:.3}",
        bytes * 8.0 / secs / 1e9,
        cpu / (bytes / 1e9)
    );
    Ok(())
}
