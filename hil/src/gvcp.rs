//! A GVCP client: commands to a camera with retries, as a host SDK sends them.

use std::net::{Ipv4Addr, SocketAddrV4, UdpSocket};
use std::time::{Duration, Instant as StdInstant};

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

    /// Send a command and wait for its acknowledge (5 tries); returns the ack payload.
    pub fn command(&mut self, command: u16, payload: &[u8]) -> Result<Vec<u8>, GvcpError> {
        let id = self.next_req();
        let mut c = vec![0x42, 0x01];
        c.extend_from_slice(&command.to_be_bytes());
        c.extend_from_slice(&(payload.len() as u16).to_be_bytes());
        c.extend_from_slice(&id.to_be_bytes());
        c.extend_from_slice(payload);
        let mut buf = [0u8; 1024];
        for _ in 0..5 {
            self.sock.send_to(&c, self.camera).map_err(GvcpError::Io)?;
            let t0 = StdInstant::now();
            while t0.elapsed() < Duration::from_millis(200) {
                let Ok((n, _)) = self.sock.recv_from(&mut buf) else {
                    break;
                };
                if n >= 8 && u16::from_be_bytes([buf[6], buf[7]]) == id {
                    let status = u16::from_be_bytes([buf[0], buf[1]]);
                    if status != 0 {
                        return Err(GvcpError::Status(status));
                    }
                    return Ok(buf[8..n].to_vec());
                }
            }
        }
        Err(GvcpError::Timeout)
    }

    /// READREG.
    pub fn read(&mut self, addr: u32) -> Result<u32, GvcpError> {
        let p = self.command(0x80, &addr.to_be_bytes())?;
        Ok(u32::from_be_bytes(
            p.get(..4).ok_or(GvcpError::Timeout)?.try_into().expect("4"),
        ))
    }

    /// WRITEREG.
    pub fn write(&mut self, addr: u32, v: u32) -> Result<(), GvcpError> {
        let mut p = addr.to_be_bytes().to_vec();
        p.extend_from_slice(&v.to_be_bytes());
        self.command(0x82, &p).map(|_| ())
    }

    /// A heartbeat without waiting: READREG of CCP, answer ignored.
    pub fn heartbeat(&mut self) {
        let id = self.next_req();
        let mut c = vec![0x42, 0x01, 0x00, 0x80, 0x00, 0x04];
        c.extend_from_slice(&id.to_be_bytes());
        c.extend_from_slice(&0x0a00u32.to_be_bytes());
        let _ = self.sock.send_to(&c, self.camera);
        // the answers so far (the previous heartbeat's, usually): does CCP still say ours?
        let mut buf = [0u8; 64];
        let _ = self.sock.set_nonblocking(true);
        while let Ok((n, _)) = self.sock.recv_from(&mut buf) {
            let word = |at: usize| u16::from_be_bytes([buf[at], buf[at + 1]]);
            if n >= 12
                && self.heartbeat_req != 0
                && (word(0), word(2), word(6)) == (0, 0x0081, self.heartbeat_req)
                && buf[11] & 0x3 == 0
            {
                self.control_lost = true;
            }
        }
        self.heartbeat_req = id;
        let _ = self.sock.set_nonblocking(false);
    }
}
