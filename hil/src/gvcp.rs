//! A GVCP client: commands to a camera with retries, as a host SDK sends them.

use std::net::{Ipv4Addr, SocketAddrV4, UdpSocket};
use std::sync::Arc;
use std::sync::atomic::{AtomicU16, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant as StdInstant};

use rdmacam_protocol::device::regs;
use rdmacam_protocol::gev::{gvcp, status};

/// A GVCP client: commands to a camera with retries, as a host SDK sends them.
#[derive(Debug)]
pub struct GvcpClient {
    sock: UdpSocket,
    camera: SocketAddrV4,
    /// The last request id, shared with a [`ControlKeeper`]: two commands never share one.
    req: Arc<AtomicU16>,
    heartbeat_req: u16,
    control_lost: bool,
}

/// A GVCP failure.
#[derive(Debug)]
pub enum GvcpError {
    /// No answer after the retries.
    Timeout,
    /// The camera answered with an error status.
    Status(u16),
    /// Socket error.
    Io(std::io::Error),
}

impl std::fmt::Display for GvcpError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            GvcpError::Timeout => f.write_str("no GVCP answer from the camera"),
            GvcpError::Status(s) => {
                write!(f, "camera answered GVCP status {s:#06x}")?;
                if let Some(name) = status::name(*s) {
                    write!(f, " ({name})")?;
                }
                if *s == status::ACCESS_DENIED {
                    // a write from a host without control: another host took it, or the camera
                    // dropped this one's (no heartbeat within its timeout)
                    f.write_str(": this host does not control the camera")?;
                }
                Ok(())
            }
            GvcpError::Io(e) => write!(f, "GVCP socket: {e}"),
        }
    }
}

impl std::error::Error for GvcpError {}

impl GvcpClient {
    /// A client bound to `local` talking to `camera`.
    pub fn new(local: Ipv4Addr, camera: SocketAddrV4) -> std::io::Result<Self> {
        let sock = UdpSocket::bind(SocketAddrV4::new(local, 0))?;
        sock.set_read_timeout(Some(Duration::from_millis(200)))?;
        Ok(GvcpClient {
            sock,
            camera,
            req: Arc::new(AtomicU16::new(0)),
            heartbeat_req: 0,
            control_lost: false,
        })
    }

    /// Whether a heartbeat's answer said this host no longer controls the camera (CCP reads
    /// without the control bits: the camera rebooted, or took the heartbeat for expired).
    pub fn control_lost(&self) -> bool {
        self.control_lost
    }

    /// `command` with `payload` and a new request id, acknowledge required, in `out`; its length.
    fn build(&mut self, command: u16, payload: &[u8], out: &mut [u8; 1024]) -> (u16, usize) {
        build(&self.req, command, payload, out)
    }

    /// Send a command and wait for its acknowledge (5 tries, 200 ms each); returns the ack
    /// payload.
    pub fn command(&mut self, command: u16, payload: &[u8]) -> Result<Vec<u8>, GvcpError> {
        self.command_tries(command, payload, 5)
    }

    /// [`command`](Self::command) with `tries` tries of 200 ms.
    fn command_tries(
        &mut self,
        command: u16,
        payload: &[u8],
        tries: u32,
    ) -> Result<Vec<u8>, GvcpError> {
        let mut c = [0u8; 1024];
        let (id, len) = self.build(command, payload, &mut c);
        let mut buf = [0u8; 1024];
        for _ in 0..tries {
            self.sock
                .send_to(&c[..len], self.camera)
                .map_err(GvcpError::Io)?;
            let t0 = StdInstant::now();
            while t0.elapsed() < Duration::from_millis(200) {
                let Ok((n, _)) = self.sock.recv_from(&mut buf) else {
                    break;
                };
                match gvcp::Ack::parse(&buf[..n]) {
                    Ok(ack) if ack.ack_id == id && ack.status != status::SUCCESS => {
                        return Err(GvcpError::Status(ack.status));
                    }
                    Ok(ack) if ack.ack_id == id => return Ok(ack.payload.to_vec()),
                    _ => {}
                }
            }
        }
        Err(GvcpError::Timeout)
    }

    /// DISCOVERY, answered by the camera at this client's address: 15 tries, 3 s. The first
    /// packet to a camera waits for ARP, which asks again only after a second when a request
    /// or reply is lost; 5 tries (1 s) then ran out just before the camera's answers came (on
    /// a link losing 1 %, one lost ARP packet failed a run). Later commands find the address
    /// resolved.
    pub fn discover(&mut self) -> Result<(), GvcpError> {
        self.command_tries(gvcp::cmd::DISCOVERY, &[], 15)
            .map(|_| ())
    }

    /// READREG.
    pub fn read(&mut self, addr: u32) -> Result<u32, GvcpError> {
        let p = self.command(gvcp::cmd::READREG, &addr.to_be_bytes())?;
        Ok(u32::from_be_bytes(
            p.get(..4).ok_or(GvcpError::Timeout)?.try_into().expect("4"),
        ))
    }

    /// WRITEREG.
    pub fn write(&mut self, addr: u32, v: u32) -> Result<(), GvcpError> {
        let mut p = addr.to_be_bytes().to_vec();
        p.extend_from_slice(&v.to_be_bytes());
        self.command(gvcp::cmd::WRITEREG, &p).map(|_| ())
    }

    /// A heartbeat without waiting: READREG of CCP, its answer read at the next heartbeat.
    pub fn heartbeat(&mut self) {
        let mut c = [0u8; 1024];
        let (id, len) = self.build(gvcp::cmd::READREG, &regs::CCP.to_be_bytes(), &mut c);
        let _ = self.sock.send_to(&c[..len], self.camera);
        // the answers so far (the previous heartbeat's, usually): does CCP still say ours?
        let mut buf = [0u8; 64];
        let _ = self.sock.set_nonblocking(true);
        while let Ok((n, _)) = self.sock.recv_from(&mut buf) {
            if let Ok(ack) = gvcp::Ack::parse(&buf[..n])
                && self.heartbeat_req != 0
                && (ack.status, ack.acknowledge, ack.ack_id)
                    == (status::SUCCESS, gvcp::cmd::READREG + 1, self.heartbeat_req)
                && ack.payload.len() >= 4
                && ack.payload[3] & (regs::CCP_CONTROL | regs::CCP_EXCLUSIVE) as u8 == 0
            {
                self.control_lost = true;
            }
        }
        self.heartbeat_req = id;
        let _ = self.sock.set_nonblocking(false);
    }

    /// Keep this host in control while the caller blocks on something else: a thread sends a
    /// heartbeat (READREG of CCP) every `period` from this client's own socket, as the camera
    /// knows its controlling application by address and port, until the keeper is dropped.
    /// For set-up steps that take longer than the camera's heartbeat timeout (3 s by default):
    /// zeroing and registering gigabytes of frame buffers, a CM exchange or a HELLO on a lossy
    /// link, a stream that starts stalled. The answers are left to the client, whose reads
    /// skip request ids they did not send.
    pub fn keep_control(&self, period: Duration) -> std::io::Result<ControlKeeper> {
        let sock = self.sock.try_clone()?;
        let (camera, req) = (self.camera, Arc::clone(&self.req));
        let (stop, stopped) = mpsc::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("gvcp-keeper".into())
            .spawn(move || {
                let mut c = [0u8; 1024];
                while let Err(mpsc::RecvTimeoutError::Timeout) = stopped.recv_timeout(period) {
                    let (_, len) =
                        build(&req, gvcp::cmd::READREG, &regs::CCP.to_be_bytes(), &mut c);
                    let _ = sock.send_to(&c[..len], camera);
                }
            })?;
        Ok(ControlKeeper {
            stop: Some(stop),
            thread: Some(thread),
        })
    }
}

/// `command` with `payload` and the next request id of `req` (never 0), acknowledge required,
/// in `out`; the id and the length.
fn build(req: &AtomicU16, command: u16, payload: &[u8], out: &mut [u8; 1024]) -> (u16, usize) {
    // fetch_add wraps; 0 is skipped (an id is never 0)
    let id = loop {
        let id = req.fetch_add(1, Ordering::Relaxed).wrapping_add(1);
        if id != 0 {
            break id;
        }
    };
    let n = gvcp::Command::emit_header(
        gvcp::FLAG_ACK_REQUIRED,
        command,
        payload.len() as u16,
        id,
        out,
    )
    .expect("the buffer holds a header");
    out[n..n + payload.len()].copy_from_slice(payload);
    (id, n + payload.len())
}

/// Heartbeats from a thread while it lives ([`GvcpClient::keep_control`]).
#[derive(Debug)]
pub struct ControlKeeper {
    stop: Option<mpsc::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Drop for ControlKeeper {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A "camera" socket on loopback and a client talking to it.
    fn pair() -> (UdpSocket, GvcpClient) {
        let camera = UdpSocket::bind("127.0.0.1:0").unwrap();
        let std::net::SocketAddr::V4(at) = camera.local_addr().unwrap() else {
            unreachable!()
        };
        (camera, GvcpClient::new(Ipv4Addr::LOCALHOST, at).unwrap())
    }

    #[test]
    fn a_keeper_beats_from_the_clients_own_port_until_dropped() {
        let (camera, mut client) = pair();
        camera
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        let keeper = client.keep_control(Duration::from_millis(40)).unwrap();
        let mut buf = [0u8; 64];
        let mut beat = || {
            let (n, from) = camera.recv_from(&mut buf).ok()?;
            // the camera knows its controlling application by address and port
            assert_eq!(from, client.sock.local_addr().unwrap());
            // READREG (0x0080), acknowledge required, 4 bytes: CCP at 0x0a00
            let b = &buf[..n];
            assert_eq!(n, 12, "{b:02x?}");
            assert_eq!(
                [b[0], b[1], b[2], b[3], b[4], b[5]],
                [0x42, 0x01, 0x00, 0x80, 0x00, 0x04]
            );
            assert_eq!(b[8..], [0x00, 0x00, 0x0a, 0x00]);
            Some(u16::from_be_bytes([b[6], b[7]]))
        };
        let mut beats: Vec<u16> = (0..3).map(|_| beat().expect("a heartbeat")).collect();
        // dropping joins the thread: what it sent is in the camera's socket (loopback delivers
        // within the send), and nothing comes after, five periods on
        drop(keeper);
        camera.set_nonblocking(true).unwrap();
        beats.extend(std::iter::from_fn(&mut beat));
        std::thread::sleep(Duration::from_millis(200));
        assert_eq!(beat(), None, "a heartbeat after the keeper was dropped");
        assert!(beats.windows(2).all(|w| w[1] == w[0] + 1), "{beats:?}");
        assert!(!beats.contains(&0));
        // the client's next command takes the next id: a camera that answers a repeated id
        // from its cache never mistakes one for the other
        let mut c = [0u8; 1024];
        let (id, _) = client.build(gvcp::cmd::READREG, &0u32.to_be_bytes(), &mut c);
        assert_eq!(id, beats.last().unwrap() + 1);
    }

    #[test]
    fn a_refusal_says_its_name_and_what_it_means() {
        let e = GvcpError::Status(status::ACCESS_DENIED).to_string();
        assert_eq!(
            e,
            "camera answered GVCP status 0x8006 (ACCESS_DENIED): this host does not control \
             the camera"
        );
        assert_eq!(
            GvcpError::Status(0x8002).to_string(),
            "camera answered GVCP status 0x8002 (INVALID_PARAMETER)"
        );
        assert_eq!(
            GvcpError::Status(0x8123).to_string(),
            "camera answered GVCP status 0x8123"
        );
    }
}
