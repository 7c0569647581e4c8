//! GVCP: the GigE Vision control protocol on UDP port 3956.
//!
//! Command header (8 bytes): key 0x42 · flags · command (2) · length (2, payload bytes) ·
//! request id (2). Acknowledge header (8 bytes): status (2) · acknowledge (2) · length (2) ·
//! ack id (2 = request id).

use super::super::wire::field::{put_u16, u16_at};
use super::super::wire::{Error, Result};

/// The UDP port a device listens on.
pub const PORT: u16 = 3956;
/// The first byte of every command.
pub const KEY: u8 = 0x42;
/// Header length of commands and acknowledges.
pub const HEADER_LEN: usize = 8;
/// The largest GVCP payload a device accepts and sends (GEV: 576-byte datagrams).
pub const MAX_PAYLOAD: usize = 540;

/// Command flag: the host wants an acknowledge.
pub const FLAG_ACK_REQUIRED: u8 = 0x01;
/// Command flag on DISCOVERY: the device may broadcast its ACK; on PACKETRESEND: 64-bit IDs.
pub const FLAG_BROADCAST_ACK_OR_EXTENDED_ID: u8 = 0x10;

/// GVCP command codes (acknowledges are command + 1).
pub mod cmd {
    /// DISCOVERY_CMD.
    pub const DISCOVERY: u16 = 0x0002;
    /// FORCEIP_CMD.
    pub const FORCEIP: u16 = 0x0004;
    /// PACKETRESEND_CMD (no acknowledge).
    pub const PACKETRESEND: u16 = 0x0040;
    /// READREG_CMD.
    pub const READREG: u16 = 0x0080;
    /// WRITEREG_CMD.
    pub const WRITEREG: u16 = 0x0082;
    /// READMEM_CMD.
    pub const READMEM: u16 = 0x0084;
    /// WRITEMEM_CMD.
    pub const WRITEMEM: u16 = 0x0086;
    /// PENDING_ACK.
    pub const PENDING_ACK: u16 = 0x0089;
    /// EVENT_CMD.
    pub const EVENT: u16 = 0x00c0;
    /// EVENTDATA_CMD.
    pub const EVENTDATA: u16 = 0x00c2;
    /// ACTION_CMD.
    pub const ACTION: u16 = 0x0100;
}

/// A parsed command header with its payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Command<'a> {
    /// Flags byte.
    pub flags: u8,
    /// Command code.
    pub command: u16,
    /// Request id (echoed as ack id).
    pub req_id: u16,
    /// Payload bytes (as many as the length field says).
    pub payload: &'a [u8],
}

impl<'a> Command<'a> {
    /// Parse a command datagram. A wrong key is `BadVersion`; a length field beyond the datagram
    /// is `Truncated`; trailing bytes beyond the length field are ignored.
    pub fn parse(buf: &'a [u8]) -> Result<Self> {
        if buf.len() < HEADER_LEN {
            return Err(Error::Truncated);
        }
        if buf[0] != KEY {
            return Err(Error::BadVersion);
        }
        let len = usize::from(u16_at(buf, 4));
        let payload = buf
            .get(HEADER_LEN..HEADER_LEN + len)
            .ok_or(Error::Truncated)?;
        Ok(Command {
            flags: buf[1],
            command: u16_at(buf, 2),
            req_id: u16_at(buf, 6),
            payload,
        })
    }

    /// Whether the host asked for an acknowledge.
    pub fn ack_required(&self) -> bool {
        self.flags & FLAG_ACK_REQUIRED != 0
    }

    /// Write a command header (for host-side tools and tests); returns the header length.
    pub fn emit_header(
        flags: u8,
        command: u16,
        len: u16,
        req_id: u16,
        buf: &mut [u8],
    ) -> Result<usize> {
        let b = buf.get_mut(..HEADER_LEN).ok_or(Error::Truncated)?;
        b[0] = KEY;
        b[1] = flags;
        put_u16(b, 2, command);
        put_u16(b, 4, len);
        put_u16(b, 6, req_id);
        Ok(HEADER_LEN)
    }
}

/// Write an acknowledge header for `command` into `buf`.
pub fn emit_ack_header(
    status: u16,
    command: u16,
    len: u16,
    ack_id: u16,
    buf: &mut [u8],
) -> Result<()> {
    let b = buf.get_mut(..HEADER_LEN).ok_or(Error::Truncated)?;
    put_u16(b, 0, status);
    put_u16(b, 2, command.wrapping_add(1));
    put_u16(b, 4, len);
    put_u16(b, 6, ack_id);
    Ok(())
}

/// A parsed acknowledge header (host side).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ack<'a> {
    /// Status code.
    pub status: u16,
    /// Acknowledge code (command + 1).
    pub acknowledge: u16,
    /// Ack id.
    pub ack_id: u16,
    /// Payload.
    pub payload: &'a [u8],
}

impl<'a> Ack<'a> {
    /// Parse an acknowledge datagram.
    pub fn parse(buf: &'a [u8]) -> Result<Self> {
        if buf.len() < HEADER_LEN {
            return Err(Error::Truncated);
        }
        let len = usize::from(u16_at(buf, 4));
        Ok(Ack {
            status: u16_at(buf, 0),
            acknowledge: u16_at(buf, 2),
            ack_id: u16_at(buf, 6),
            payload: buf
                .get(HEADER_LEN..HEADER_LEN + len)
                .ok_or(Error::Truncated)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hex;

    // aravis' discovery command (arvgvcp.c `arv_gvcp_packet_new_discovery_cmd`: ack required,
    // req_id 0xffff, no payload); with --gv-allow-broadcast-discovery-ack the 0x10 flag is added.
    #[test]
    fn parses_aravis_discovery_command() {
        let b = hex("42 01 00 02 00 00 ff ff");
        let c = Command::parse(&b).unwrap();
        assert_eq!(
            (c.flags, c.command, c.req_id, c.payload.len()),
            (0x01, cmd::DISCOVERY, 0xffff, 0)
        );
        assert!(c.ack_required());
        let b = hex("42 11 00 02 00 00 ff ff");
        let c = Command::parse(&b).unwrap();
        assert_ne!(c.flags & FLAG_BROADCAST_ACK_OR_EXTENDED_ID, 0);
    }

    #[test]
    fn parses_readreg_with_two_addresses() {
        let b = hex("42 01 00 80 00 08 00 07 00 00 0a 00 00 00 09 38");
        let c = Command::parse(&b).unwrap();
        assert_eq!((c.command, c.req_id), (cmd::READREG, 7));
        assert_eq!(c.payload, &hex("00 00 0a 00 00 00 09 38")[..]);
    }

    #[test]
    fn rejects_wrong_key_and_short_payload() {
        assert_eq!(
            Command::parse(&hex("43 01 00 80 00 00 00 01")),
            Err(Error::BadVersion)
        );
        assert_eq!(
            Command::parse(&hex("42 01 00 80 00 08 00 01 00 00")),
            Err(Error::Truncated)
        );
        assert_eq!(Command::parse(&hex("42 01 00")), Err(Error::Truncated));
    }

    #[test]
    fn ack_header_echoes_request_id() {
        let mut b = [0u8; 8];
        emit_ack_header(0, cmd::READREG, 4, 7, &mut b).unwrap();
        assert_eq!(b, [0, 0, 0, 0x81, 0, 4, 0, 7]);
        let a = Ack::parse(&[0, 0, 0, 0x81, 0, 0, 0, 7]).unwrap();
        assert_eq!((a.acknowledge, a.ack_id), (0x81, 7));
    }
}
