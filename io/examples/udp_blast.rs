//! The ceiling for the camera's userspace sender: plain UDP datagrams of the sizes RoCEv2 uses
//! (4112 bytes: BTH + 4096 payload + ICRC), over loopback to a receiver thread that only
//! drains, sent with `sendmmsg` (32 per call, like the camera without GSO) or with UDP GSO
//! (15 segments per send, like the camera's GSO path). Prints Gbit/s and the sender thread's
//! CPU seconds per GB, for docs/BENCHMARKS.md (scripts/bench-sender.sh runs it).
//!
//! `cargo run --release -p rdmacam-io --example udp_blast -- [sendmmsg|gso] [GB] [FROM TO:PORT]`
//! and `udp_blast sink PORT` as the receiver elsewhere (hil/vm/bench-rxe.sh: across the VM's
//! veth pair, the path the camera's RoCEv2 takes into rxe).
//!
//! `udp_blast gro [GB]` and `udp_blast gro-paced MBPS [GB]`: the same GSO sender (flat out, or
//! paced to MBPS in runs of one 64 KiB GSO send, sleeping between runs as the camera does) into
//! a receiver thread that reads as cheaply as Linux lets it: UDP GRO, `recvmmsg`, and `ppoll`
//! when its socket is empty, nothing else. It also prints that receiver's CPU seconds per GB:
//! the reference against which `scripts/perf-ratios.sh` judges the camera and the host (a
//! receiver without GRO makes the sender pay for segmentation on loopback, about half the
//! ceiling).
//!
//! `udp_blast gro-proc [GB]` and `udp_blast gro-paced-proc MBPS [GB]` (and `-mem-proc`): the
//! receiver in a child process rather than a thread, as a host program beside a camera runs
//! (a check that one address space does not flatter the reference: it did not, within 2 %).
//!
//! `udp_blast gro-mem [GB]` and `udp_blast gro-paced-mem MBPS [GB]` (and `gso-mem`; not
//! `sendmmsg-mem`, which is refused): the same, each datagram's payload read in turn from 12 MB
//! of memory (the camera's six 1080p frame slots) rather than from one 4 KiB buffer that stays
//! in the L1 cache: the plain sender paying what the camera pays to read its frames.
//!
//! `udp_blast frames PORT FRAMES FPS [MBPS [BYTES]]` with `udp_blast frames-sink PORT FRAMES
//! [spin]`, two processes: this machine's own frame latency, for `scripts/perf-ratios.sh`. The
//! sender paces frames of BYTES (1920x1080 Mono8 by default) as the camera does (4112-byte datagrams in GSO runs, a 64 KiB
//! burst allowance, the link at MBPS, 10 Gbit/s by default), then sends a small TRAILER
//! datagram stamped with when it left (CLOCK_MONOTONIC). The sink waits and drains as the
//! reference host does (`recvmmsg` with UDP GRO, `ppoll` of at most 1 ms when the socket is
//! empty; with `spin` it never sleeps: a core held) and does nothing else: no protocol, no
//! frame placement, no ACKs. It prints the p99 of TRAILER leaving to the sink seeing it, and
//! its two parts at the kernel's receive time.

use std::net::{Ipv4Addr, UdpSocket};
use std::os::fd::AsFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use rdmacam_io::clock::monotonic_ns;
use rdmacam_io::gso::{Gather, TX_BATCH, gso_segments};
use rdmacam_io::poll::wait_readable;
use rdmacam_io::roce::{RecvBatch, RoceSocket};

const DATAGRAM: usize = 4112;

/// The memory `gro-mem` and `gro-paced-mem` read payloads from in turn: the camera's six frame
/// slots of 1920x1080 Mono8 (12 MB), more than a core's caches hold.
const MEMORY: usize = 6 * 1920 * 1080;

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

/// Bytes of one paced frame: 1920x1080 Mono8, the latency figures' frame.
const FRAME: f64 = 1920.0 * 1080.0;
/// Bytes of a paced TRAILER: the frame number and when it left, ns.
const TRAILER: usize = 16;

/// Send `frames` frames to 127.0.0.1:`port` at up to `fps`, paced to `mbps` as the camera's
/// link pacing does, each followed by a stamped TRAILER datagram.
fn frames(port: u16, frames: u64, fps: f64, mbps: f64, bytes: usize) -> std::io::Result<()> {
    let mut sock = RoceSocket::bind(Ipv4Addr::LOCALHOST.into(), 0, 0, 0.0, 1)?;
    let lo = Ipv4Addr::LOCALHOST;
    let header = ip_udp_header(lo, sock.tx_port(), lo, port);
    let payload = vec![0x5au8; DATAGRAM];
    let segs = gso_run(&header, &payload);
    let per = segs.len();
    let ns_per_byte = 8e3 / mbps;
    // the camera's allowance: a poll that comes late may send 64 KiB at once
    let burst = (65536.0 * ns_per_byte) as u64;
    // 4096 bytes of image per datagram, as the camera's (BTH 12 and ICRC 4 around them)
    let datagrams = bytes.div_ceil(DATAGRAM - 16);
    // the TRAILER datagram behind its IP/UDP header, its number and stamp written per frame
    let mut trailer = [&header[..], &[0u8; TRAILER][..]].concat();
    let t0 = monotonic_ns();
    let mut due = t0;
    for f in 0..frames {
        let start = t0 + (f as f64 * 1e9 / fps) as u64;
        wait_until(start);
        let mut left = datagrams;
        while left > 0 {
            let now = monotonic_ns();
            due = due.max(now.saturating_sub(burst));
            wait_until(due);
            let k = per.min(left);
            sock.send_gso(&segs[..k])?;
            due += ((k * DATAGRAM) as f64 * ns_per_byte) as u64;
            left -= k;
        }
        let t = &mut trailer[header.len()..];
        t[..8].copy_from_slice(&f.to_be_bytes());
        t[8..].copy_from_slice(&monotonic_ns().to_be_bytes());
        sock.send(&trailer)?;
    }
    Ok(())
}

/// Sleep until CLOCK_MONOTONIC reaches `at` ns (the camera waits in `ppoll` with a timeout: the
/// same timer slack).
fn wait_until(at: u64) {
    let now = monotonic_ns();
    if at > now {
        std::thread::sleep(std::time::Duration::from_nanos(at - now));
    }
}

/// Receive `frames` TRAILERs on `port` as the reference host waits (`spin`: never sleeps, a
/// core held); print the latency p99.
fn frames_sink(port: u16, frames: usize, spin: bool) -> std::io::Result<()> {
    let mut sock = RoceSocket::bind(Ipv4Addr::LOCALHOST.into(), port, 0, 0.0, 1)?;
    let mut batch = if sock.set_gro(true).is_ok() {
        RecvBatch::for_gro()
    } else {
        RecvBatch::default()
    };
    // (to the sink, to its socket) per TRAILER, ns
    let mut seen: Vec<(u64, u64)> = Vec::with_capacity(frames);
    let mut last = std::time::Instant::now();
    while seen.len() < frames && last.elapsed() < std::time::Duration::from_secs(5) {
        let n = sock.recv_batch(&mut batch);
        let now = monotonic_ns();
        for (i, (_, d)) in batch.datagrams().enumerate() {
            if d.len() == TRAILER {
                let left = u64::from_be_bytes(d[8..].try_into().expect("8 bytes"));
                let arrived = batch.arrived(i).max(left);
                seen.push((now.saturating_sub(left), arrived - left));
            }
        }
        if n > 0 {
            last = std::time::Instant::now();
        } else if !spin {
            wait_readable([sock.as_fd()], std::time::Duration::from_millis(1))?;
        }
    }
    let p99 = |mut xs: Vec<u64>| {
        xs.sort_unstable();
        xs.get((xs.len() * 99 / 100).min(xs.len().saturating_sub(1)))
            .map_or(f64::NAN, |&v| v as f64 / 1e3)
    };
    if seen.len() < frames {
        return Err(std::io::Error::other(format!(
            "frames-sink: {} of {frames} TRAILERs arrived (none for 5 s since)",
            seen.len()
        )));
    }
    let total = p99(seen.iter().map(|s| s.0).collect());
    let socket = p99(seen.iter().map(|s| s.1).collect());
    let host = p99(seen.iter().map(|s| s.0 - s.1).collect());
    println!(
        "frames-sink trailers={} p99_us={total:.1} to_socket_p99_us={socket:.1} \
         in_sink_p99_us={host:.1}",
        seen.len()
    );
    Ok(())
}

/// The cheapest receiver: UDP GRO, `recvmmsg`, `ppoll` of at most 1 ms when empty, nothing
/// else. Drains `sock` until `done` says so (asked with whether the last look found nothing);
/// returns (bytes, the calling thread's CPU seconds).
fn gro_drain(mut sock: RoceSocket, gro: bool, mut done: impl FnMut(bool) -> bool) -> (u64, f64) {
    let mut batch = if gro {
        RecvBatch::for_gro()
    } else {
        RecvBatch::default()
    };
    let c0 = thread_cpu();
    let mut bytes = 0u64;
    let mut empty = false;
    while !done(empty) {
        empty = sock.recv_batch(&mut batch) == 0;
        if empty {
            let _ = wait_readable([sock.as_fd()], std::time::Duration::from_millis(1));
            continue;
        }
        bytes += batch.datagrams().map(|(_, d)| d.len() as u64).sum::<u64>();
    }
    (bytes, thread_cpu() - c0)
}

/// The plain receiver, a thread of this process or a process of its own.
enum GroReceiver {
    Thread(std::thread::JoinHandle<(u64, f64)>),
    /// The child's pid and the pipe it writes "BYTES CPU_SECONDS" to when it is done.
    Process(libc::pid_t, std::fs::File),
}

/// Start the plain receiver on `port`: a thread that drains until `stop`, or (`process`) a
/// child process that drains until nothing came for 100 ms after the first datagram (or its
/// parent is gone), as a host program beside the camera's would: a check that sharing the
/// sender's address space does not flatter the reference (it did not: docs/BENCHMARKS.md).
fn gro_receiver(port: u16, stop: Arc<AtomicBool>, process: bool) -> std::io::Result<GroReceiver> {
    let mut sock = RoceSocket::bind(Ipv4Addr::LOCALHOST.into(), port, 0, 0.0, 1)?;
    let gro = sock.set_gro(true).is_ok();
    if !process {
        return Ok(GroReceiver::Thread(std::thread::spawn(move || {
            gro_drain(sock, gro, |_| stop.load(Ordering::Relaxed))
        })));
    }
    use std::io::Write;
    use std::os::fd::FromRawFd;
    let mut fds = [0; 2];
    // SAFETY: `fds` has room for the two descriptors pipe(2) returns.
    if unsafe { libc::pipe(fds.as_mut_ptr()) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: the descriptors are new and each is owned by one File from here on.
    let (read, mut write) = unsafe {
        (
            std::fs::File::from_raw_fd(fds[0]),
            std::fs::File::from_raw_fd(fds[1]),
        )
    };
    // SAFETY: this process has no other thread yet (the receiver is started before anything
    // else), so the child's copy of it is whole.
    match unsafe { libc::fork() } {
        -1 => Err(std::io::Error::last_os_error()),
        0 => {
            drop(read);
            // SAFETY: prctl with PR_SET_PDEATHSIG and a signal number takes no pointers.
            unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM) };
            let start = Instant::now();
            let mut last = Instant::now();
            let mut seen = false;
            let (bytes, cpu) = gro_drain(sock, gro, |empty| {
                if !empty {
                    last = Instant::now();
                    seen = true;
                }
                let quiet = last.elapsed() > std::time::Duration::from_millis(100);
                (seen && quiet) || start.elapsed() > std::time::Duration::from_secs(60)
            });
            let _ = write!(write, "{bytes} {cpu}");
            drop(write);
            // SAFETY: the child ends here, without running the parent's exit handlers.
            unsafe { libc::_exit(0) }
        }
        pid => {
            drop(write);
            drop(sock);
            Ok(GroReceiver::Process(pid, read))
        }
    }
}

impl GroReceiver {
    /// (bytes received, the receiver's CPU seconds), once it is done.
    fn join(self) -> (u64, f64) {
        match self {
            GroReceiver::Thread(t) => t.join().expect("receiver"),
            GroReceiver::Process(pid, mut pipe) => {
                use std::io::Read;
                let mut out = String::new();
                let _ = pipe.read_to_string(&mut out);
                let mut status = 0;
                // SAFETY: `pid` is this process's child; waiting for it reaps it.
                unsafe { libc::waitpid(pid, &mut status, 0) };
                let mut it = out.split_whitespace().map(|v| v.parse::<f64>().ok());
                match (it.next().flatten(), it.next().flatten()) {
                    (Some(bytes), Some(cpu)) => (bytes as u64, cpu),
                    _ => {
                        // no figure rather than a made-up one
                        eprintln!(
                            "udp_blast: the receiver process reported nothing (wait status \
                             {status:#x})"
                        );
                        (0, f64::NAN)
                    }
                }
            }
        }
    }
}

/// As many datagrams of `header` + `payload` as one GSO send carries, ready to send.
fn gso_run<'a>(header: &'a [u8], payload: &'a [u8]) -> Vec<Gather<'a>> {
    let seg = Gather {
        header,
        payload,
        trailer: &[],
    };
    vec![seg; gso_segments(seg.udp_len())]
}

/// An IPv4 + UDP header from `src`:`src_port` to `dst`:`dst_port` (lengths and checksums are
/// the kernel's: a RoceSocket hands over only the UDP payload).
fn ip_udp_header(src: Ipv4Addr, src_port: u16, dst: Ipv4Addr, dst_port: u16) -> Vec<u8> {
    let mut header = vec![0u8; 28];
    header[0] = 0x45;
    header[12..16].copy_from_slice(&src.octets());
    header[16..20].copy_from_slice(&dst.octets());
    header[20..22].copy_from_slice(&src_port.to_be_bytes());
    header[22..24].copy_from_slice(&dst_port.to_be_bytes());
    header
}

fn main() {
    if let Err(e) = run() {
        eprintln!("udp_blast: {e}");
        std::process::exit(1);
    }
}

fn run() -> std::io::Result<()> {
    let mut args = std::env::args().skip(1);
    let mode = args.next().unwrap_or_else(|| "gso".into());
    let mut num = |default: f64| args.next().and_then(|a| a.parse().ok()).unwrap_or(default);
    match mode.as_str() {
        "sink" => return sink(num(9000.0) as u16),
        "frames" => {
            let (port, n, fps) = (num(9000.0) as u16, num(300.0) as u64, num(100.0));
            let mbps = num(10_000.0);
            return frames(port, n, fps, mbps, num(FRAME) as usize);
        }
        "frames-sink" => {
            let (port, n) = (num(9000.0) as u16, num(300.0) as usize);
            let spin = match args.next().as_deref() {
                None => false,
                Some("spin") => true,
                Some(other) => {
                    return Err(std::io::Error::other(format!(
                        "frames-sink: {other:?} is not a receive mode (spin, or nothing)"
                    )));
                }
            };
            return frames_sink(port, n, spin);
        }
        _ => {}
    }
    let named = mode.clone();
    // `-proc`: the receiver is a process of its own, not a thread of the sender's
    let two_processes = mode.ends_with("-proc");
    let mode = mode.trim_end_matches("-proc");
    // `-mem`: each datagram's payload read in turn from frame-sized memory, not one buffer
    let from_memory = mode.ends_with("-mem");
    let mode = mode.trim_end_matches("-mem").to_string();
    if two_processes && !mode.starts_with("gro") {
        return Err(std::io::Error::other(format!(
            "{named}: a receiver process of its own is for the GRO modes (gro, gro-paced)"
        )));
    }
    if from_memory && mode == "sendmmsg" {
        return Err(std::io::Error::other(
            "sendmmsg-mem: reading from memory is for the GSO modes (gso, gro, gro-paced)",
        ));
    }
    let pace_mbps = (mode == "gro-paced").then(|| num(10_000.0));
    let gb: f64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(2.0);
    // optional FROM TO:PORT: send to a sink elsewhere (`udp_blast sink PORT`, e.g. across the
    // VM's veth pair) instead of the receiver thread on loopback
    let from: Option<Ipv4Addr> = args.next().and_then(|a| a.parse().ok());
    let to: Option<std::net::SocketAddrV4> = args.next().and_then(|a| a.parse().ok());
    let stop = Arc::new(AtomicBool::new(false));
    let gro = mode.starts_with("gro");
    let mut gro_rx = None;
    let (src_ip, dst, rx) = match (from, to) {
        (Some(f), Some(t)) => (f, t, None),
        _ if gro => {
            let port = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0))?
                .local_addr()?
                .port();
            gro_rx = Some(gro_receiver(port, stop.clone(), two_processes)?);
            (
                Ipv4Addr::LOCALHOST,
                std::net::SocketAddrV4::new(Ipv4Addr::LOCALHOST, port),
                None,
            )
        }
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
    let header = ip_udp_header(src_ip, sock.tx_port(), *dst.ip(), dst.port());
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
            let mut segs = gso_run(&header, &payload);
            let memory = if from_memory {
                vec![0x5au8; MEMORY]
            } else {
                Vec::new()
            };
            let mut at = 0;
            // paced: one GSO send per run, the next when its bytes are due at the link's rate
            let ns_per_byte = pace_mbps.map(|m| 8_000.0 / m);
            let mut due = monotonic_ns();
            while sent < total {
                let k = segs.len().min(total - sent);
                if let Some(ns) = ns_per_byte {
                    wait_until(due);
                    due += ((k * DATAGRAM) as f64 * ns) as u64;
                }
                if from_memory {
                    for s in &mut segs[..k] {
                        if at + DATAGRAM > memory.len() {
                            at = 0;
                        }
                        s.payload = &memory[at..at + DATAGRAM];
                        at += DATAGRAM;
                    }
                }
                sock.send_gso(&segs[..k])?;
                sent += k;
            }
        }
    }
    let (secs, cpu) = (t0.elapsed().as_secs_f64(), thread_cpu() - c0);
    std::thread::sleep(std::time::Duration::from_millis(200));
    stop.store(true, Ordering::Relaxed);
    let bytes = (sent * DATAGRAM) as f64;
    let mut receiver = String::new();
    let share = match (rx, gro_rx) {
        (Some(rx), _) => format!("{:.3}", rx.join().expect("receiver") as f64 / bytes),
        (None, Some(rx)) => {
            let (got, rx_cpu) = rx.join();
            receiver = format!(" receiver_cpu_s_per_GB={:.3}", rx_cpu / (got as f64 / 1e9));
            format!("{:.3}", got as f64 / bytes)
        }
        (None, None) => "see-sink".into(),
    };
    println!(
        "{named:8} datagrams={sent} received_share={share} gbit_per_s={:.2} sender_cpu_s_per_GB={:.3}{receiver}",
        bytes * 8.0 / secs / 1e9,
        cpu / (bytes / 1e9)
    );
    Ok(())
}
