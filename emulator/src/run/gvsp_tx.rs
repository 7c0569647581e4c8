//! GVSP packets out of the stream socket: one datagram per packet by default, UDP GSO runs
//! with `--gvsp-gso`.

use std::net::{SocketAddr, SocketAddrV4, UdpSocket};

use rdmacam_io::gso::{GSO_MAX_SEGMENTS, gso_segments};
use tracing::warn;

/// GVSP packets waiting to leave together: equal-size packets to one destination (the last may
/// be shorter) go out in one UDP GSO send.
pub(super) struct GvspBatch {
    bufs: Vec<Vec<u8>>,
    lens: [usize; GSO_MAX_SEGMENTS],
    n: usize,
    dst: Option<SocketAddrV4>,
    gso: bool,
    said_too_big: bool,
    /// The destination the socket is connected to: the kernel keeps its route (a lookup per
    /// datagram was ~6 % of the camera's CPU at 2048 x 2048 into aravis).
    connected: Option<SocketAddrV4>,
}

impl GvspBatch {
    pub(super) fn new(gso: bool) -> Self {
        GvspBatch {
            bufs: vec![vec![0u8; 9216]; GSO_MAX_SEGMENTS],
            lens: [0; GSO_MAX_SEGMENTS],
            n: 0,
            dst: None,
            gso,
            said_too_big: false,
            connected: None,
        }
    }

    /// Where the next packet is written.
    pub(super) fn slot(&mut self) -> &mut [u8] {
        &mut self.bufs[self.n]
    }

    /// Take the packet of `len` bytes just written into [`slot`](Self::slot); what it cannot
    /// join goes out first.
    pub(super) fn push(&mut self, sock: &UdpSocket, len: usize, dst: SocketAddrV4) {
        let n = self.n;
        let joins = n > 0
            && self.dst == Some(dst)
            && self.lens[n - 1] == self.lens[0]
            && len <= self.lens[0]
            && n < gso_segments(self.lens[0]);
        if n > 0 && !joins {
            self.flush(sock);
            self.bufs.swap(0, n);
        }
        self.lens[self.n] = len;
        self.dst = Some(dst);
        self.n += 1;
        if self.n == GSO_MAX_SEGMENTS {
            self.flush(sock);
        }
    }

    /// Send what is waiting.
    pub(super) fn flush(&mut self, sock: &UdpSocket) {
        let (n, Some(dst)) = (self.n, self.dst) else {
            return;
        };
        self.n = 0;
        if n == 0 {
            return;
        }
        let mut datagrams: [&[u8]; GSO_MAX_SEGMENTS] = [&[]; GSO_MAX_SEGMENTS];
        for ((d, b), &l) in datagrams.iter_mut().zip(&self.bufs).zip(&self.lens[..n]) {
            *d = &b[..l];
        }
        if !self.gso && self.connected != Some(dst) {
            // one packet per datagram (the default): sendmmsg batches on a socket connected
            // to the one destination a stream has
            self.connected = sock.connect(dst).is_ok().then_some(dst);
        }
        let had_gso = self.gso;
        let sent = if self.gso || self.connected != Some(dst) {
            rdmacam_io::gso::send_datagrams(
                sock,
                SocketAddr::V4(dst),
                &datagrams[..n],
                &mut self.gso,
            )
        } else {
            rdmacam_io::gso::send_each(sock, None, &datagrams[..n])
        };
        if had_gso && !self.gso {
            warn!(%dst, "the kernel refused UDP GSO: GVSP leaves one datagram per packet from now on");
        }
        if let Err(e) = sent {
            // with Don't Fragment on, a packet larger than the path MTU cannot leave: a test
            // packet of a host's packet-size negotiation is meant to fail so; say it once
            let too_big = e.raw_os_error() == Some(nix::errno::Errno::EMSGSIZE as i32);
            if !too_big || !self.said_too_big {
                warn!(%dst, "GVSP send failed: {e}");
            }
            self.said_too_big |= too_big;
        }
    }
}
