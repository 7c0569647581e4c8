//! GigE Vision wire formats: the control protocol (GVCP), the stream protocol (GVSP) and the
//! pixel formats, as public sources describe them (`reference/gev.md` §2-3: aravis and the
//! AIA-contributed Wireshark dissectors). All fields are big-endian.

pub mod gvcp;
pub mod gvsp;
pub mod pixel;

pub use pixel::{Axis, PixelFormat};

/// GigE Vision status codes (GVCP acknowledge status and GVSP packet status).
pub mod status {
    /// Success.
    pub const SUCCESS: u16 = 0x0000;
    /// GVSP: this packet is a resent one.
    pub const PACKET_RESEND: u16 = 0x0100;
    /// Command not supported.
    pub const NOT_IMPLEMENTED: u16 = 0x8001;
    /// A parameter is out of range or malformed.
    pub const INVALID_PARAMETER: u16 = 0x8002;
    /// The address does not exist.
    pub const INVALID_ADDRESS: u16 = 0x8003;
    /// The address is read-only.
    pub const WRITE_PROTECT: u16 = 0x8004;
    /// The address is not 32-bit aligned.
    pub const BAD_ALIGNMENT: u16 = 0x8005;
    /// Another application holds control.
    pub const ACCESS_DENIED: u16 = 0x8006;
    /// The device is busy.
    pub const BUSY: u16 = 0x8007;
    /// A requested packet is no longer available for resend.
    pub const PACKET_UNAVAILABLE: u16 = 0x800C;
    /// The command header is malformed.
    pub const INVALID_HEADER: u16 = 0x800E;
    /// The payload was larger than the buffer and was truncated (GEV 2.0).
    pub const OVERFLOW: u16 = 0x8015;
    /// ACTION_LATE: a scheduled action's time had passed; it fired at once (GEV 2.0).
    pub const ACTION_LATE: u16 = 0x8016;
    /// Sensor or FIFO underrun, partial frame.
    pub const DATA_OVERRUN: u16 = 0x800D;
    /// Generic error.
    pub const ERROR: u16 = 0x8FFF;

    /// The name a status code goes by (`GEV_STATUS_` and this), for messages a person reads.
    pub const fn name(code: u16) -> Option<&'static str> {
        Some(match code {
            SUCCESS => "SUCCESS",
            PACKET_RESEND => "PACKET_RESEND",
            NOT_IMPLEMENTED => "NOT_IMPLEMENTED",
            INVALID_PARAMETER => "INVALID_PARAMETER",
            INVALID_ADDRESS => "INVALID_ADDRESS",
            WRITE_PROTECT => "WRITE_PROTECT",
            BAD_ALIGNMENT => "BAD_ALIGNMENT",
            ACCESS_DENIED => "ACCESS_DENIED",
            BUSY => "BUSY",
            PACKET_UNAVAILABLE => "PACKET_UNAVAILABLE",
            DATA_OVERRUN => "DATA_OVERRUN",
            INVALID_HEADER => "INVALID_HEADER",
            OVERFLOW => "OVERFLOW",
            ACTION_LATE => "ACTION_LATE",
            ERROR => "ERROR",
            _ => return None,
        })
    }
}
