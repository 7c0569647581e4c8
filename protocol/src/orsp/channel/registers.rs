//! The ORSP block's registers (`docs/orsp-spec.md` section 3): what each reads, and which
//! writes are taken whole, refused, or kept until CONNECT.

use super::*;

impl<const BUFS: usize> OrspChannel<BUFS> {
    /// Read a register at `offset` within the block.
    pub fn read_reg(&self, offset: u32, transport: &TransportCounters) -> Option<u32> {
        Some(match offset {
            regs::ORSP_VERSION => 0x0001_0000,
            regs::ORSP_CAPS => self.caps(),
            regs::DEVICE_QPN => self.device_qpn,
            regs::DEVICE_SQ_PSN => self.device_sq_psn,
            regs::HOST_SQ_PSN => self.host_sq_psn,
            regs::HOST_QPN => self.host_qpn,
            o if (regs::HOST_GID..regs::HOST_GID + 16).contains(&o) => {
                let at = (o - regs::HOST_GID) as usize;
                u32::from_be_bytes([
                    self.host_gid[at],
                    self.host_gid[at + 1],
                    self.host_gid[at + 2],
                    self.host_gid[at + 3],
                ])
            }
            regs::HOST_MAC_HI => self.host_mac[0],
            regs::HOST_MAC_LO => self.host_mac[1],
            regs::PATH_MTU => self.path_mtu,
            regs::TRANSPORT => 0,
            regs::RETRY => self.retry,
            regs::TX_TUNING => self.tx_tuning,
            regs::RATE_LIMIT => self.rate_limit,
            regs::CONGESTION_CONTROL => self.congestion_control,
            regs::HOST_RX_WINDOW => self.host_rx_window,
            regs::MAX_CTRL_MSG => MAX_CTRL_MSG as u32,
            regs::DEV_RECV_DEPTH => DEV_RECV_DEPTH,
            regs::DEV_RECV_SIZE => DEV_RECV_SIZE,
            regs::MAX_BUFFERS => BUFS as u32,
            regs::WRITE_CHUNK => self.write_chunk,
            regs::CONTROL => 0,
            regs::STATUS => (u32::from(self.last_error) << 16) | self.state as u32,
            regs::CM_PORT => self.cm_port,
            regs::COUNTER_FRAMES_SENT => self.counters.frames_sent,
            regs::COUNTER_FRAMES_DROPPED => self.counters.frames_dropped,
            regs::COUNTER_FRAMES_TRUNCATED => self.counters.frames_truncated,
            regs::COUNTER_RETRANSMITTED => transport.retransmitted,
            regs::COUNTER_RNR_NAKS => transport.rnr_naks,
            regs::COUNTER_SEQ_NAKS => transport.seq_naks,
            regs::COUNTER_CNPS => transport.cnps,
            regs::COUNTER_ACK_TIMEOUTS => transport.ack_timeouts,
            o if o < regs::BLOCK => 0,
            _ => return None,
        })
    }

    /// Write a register. CONTROL=CONNECT returns the parameters the transport must use.
    pub fn write_reg(&mut self, offset: u32, v: u32) -> Result<Option<ConnectParams>, u16> {
        let locked = self.is_connected();
        let settable = |locked: bool| {
            if locked {
                Err(status::WRITE_PROTECT)
            } else {
                Ok(())
            }
        };
        match offset {
            regs::HOST_SQ_PSN => {
                settable(locked)?;
                self.host_sq_psn = psn24(v)?;
            }
            regs::HOST_QPN => {
                settable(locked)?;
                self.host_qpn = psn24(v)?;
                if self.state == State::Idle && self.host_qpn != 0 {
                    self.state = State::Configured;
                }
                if self.host_qpn == 0 && self.state == State::Configured {
                    self.state = State::Idle;
                }
            }
            o if (regs::HOST_GID..regs::HOST_GID + 16).contains(&o) => {
                settable(locked)?;
                let at = (o - regs::HOST_GID) as usize;
                self.host_gid[at..at + 4].copy_from_slice(&v.to_be_bytes());
            }
            regs::HOST_MAC_HI => {
                if v > 0xffff {
                    return Err(status::INVALID_PARAMETER); // two bytes of MAC
                }
                self.host_mac[0] = v;
            }
            regs::HOST_MAC_LO => self.host_mac[1] = v,
            regs::PATH_MTU => {
                settable(locked)?;
                if Pmtu::from_code(v as u8).is_none() || v > self.max_pmtu {
                    return Err(status::INVALID_PARAMETER);
                }
                self.path_mtu = v;
            }
            regs::TRANSPORT => {
                if v != 0 {
                    return Err(status::INVALID_PARAMETER); // UC-ring not offered
                }
            }
            regs::RETRY => {
                settable(locked)?;
                if v & !regs::RETRY_FIELDS != 0 {
                    return Err(status::INVALID_PARAMETER); // reserved bits
                }
                self.retry = v;
            }
            regs::TX_TUNING => {
                if v & 0xff00 != 0 {
                    return Err(status::INVALID_PARAMETER); // reserved bits
                }
                self.tx_tuning = if self.tos_capable { v } else { v & !0xff };
            }
            regs::RATE_LIMIT => {
                settable(locked)?;
                self.rate_limit = v;
            }
            regs::CONGESTION_CONTROL => {
                settable(locked)?;
                if v > 1 {
                    return Err(status::INVALID_PARAMETER);
                }
                self.congestion_control = v;
            }
            regs::HOST_RX_WINDOW => {
                settable(locked)?;
                if v > regs::MAX_HOST_RX_WINDOW {
                    return Err(status::INVALID_PARAMETER);
                }
                self.host_rx_window = v;
            }
            regs::WRITE_CHUNK => {
                if v != 0 && v < 4096 {
                    return Err(status::INVALID_PARAMETER);
                }
                self.write_chunk = v;
            }
            regs::CM_PORT => {
                settable(locked)?;
                if v > 0xffff {
                    return Err(status::INVALID_PARAMETER); // a port is 16 bits
                }
                self.cm_port = v;
            }
            regs::CONTROL => {
                if v & !(regs::CONTROL_CONNECT
                    | regs::CONTROL_DISCONNECT
                    | regs::CONTROL_CLEAR_COUNTERS)
                    != 0
                {
                    return Err(status::INVALID_PARAMETER); // no such command
                }
                if v & regs::CONTROL_CLEAR_COUNTERS != 0 {
                    self.counters = OrspCounters::default();
                }
                if v & regs::CONTROL_DISCONNECT != 0 {
                    self.disconnect();
                }
                if v & regs::CONTROL_CONNECT != 0 {
                    return self.connect().map(Some);
                }
            }
            o if o < regs::BLOCK => return Err(status::WRITE_PROTECT),
            _ => return Err(status::INVALID_ADDRESS),
        }
        Ok(None)
    }
}

/// A 24-bit field (a QPN or a PSN) written in a 32-bit register: refused when the upper byte
/// is not zero, rather than cut to a number the host did not write.
fn psn24(v: u32) -> Result<u32, u16> {
    if v > 0x00ff_ffff {
        Err(status::INVALID_PARAMETER)
    } else {
        Ok(v)
    }
}
