//! A GVCP client: commands to a camera with retries, as a host SDK sends them.

use std::net::{Ipv4Addr, SocketAddrV4, UdpSocket};
use std::time::{Duration, Instant as StdInstant};

use rdmacam_protocol::device::regs;
use rdmacam_protocol::gev::{gvcp, status};

/// A GVCP client: commands to a camera with retries, as a host SDK sends them.
#[derive(Debug)]
pub struct GvcpClient {
    sock: UdpSocket,
    camera: SocketAddrV4,
    req: u16,
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
            GvcpError::Status(s) => write!(f, "camera answered GVCP status {s:#06x}"),
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
            req: 0,
            heartbeat_req: 0,
            control_lost: false,
        })
    }

    /// Whether a heartbeat's answer said this host no longer controls the camera (CCP reads
    /// without the control bits: the camera rebooted, or took the heartbeat for expired).
    pub fn control_lost(&self) -> bool {
        self.control_lost
    }

    fn next_req(&mut self) -> u16 {
        self.req = self.req.wrapping_add(1).max(1);
        self.req
    }

    /// `command` with `payload` and a new request id, acknowledge required, in `out`; its length.
    fn build(&mut self, command: u16, payload: &[u8], out: &mut [u8; 1024]) -> (u16, usize) {
        let id = self.next_req();
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

    /// Send a command and wait for its acknowledge (5 tries); returns the ack payload.
    pub fn command(&mut self, command: u16, payload: &[u8]) -> Result<Vec<u8>, GvcpError> {
        let mut c = [0u8; 1024];
        let (id, len) = self.build(command, payload, &mut c);
        let mut buf = [0u8; 1024];
        for _ in 0..5 {
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

    /// DISCOVERY, answered by the camera at this client's address.
    pub fn discover(&mut self) -> Result<(), GvcpError> {
        self.command(gvcp::cmd::DISCOVERY, &[]).map(|_| ())
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
}
