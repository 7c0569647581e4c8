//! Sending many UDP datagrams per system call: UDP segmentation offload (`UDP_SEGMENT`) with
//! gather I/O, and `sendmmsg(2)` batches.

use std::io::ErrorKind;
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};

/// RoCEv2 packets handed to the kernel per `sendmmsg` call at most.
pub const TX_BATCH: usize = 32;

/// Most segments in one UDP segmentation offload send (the kernel's `UDP_MAX_SEGMENTS`).
pub const GSO_MAX_SEGMENTS: usize = 64;

/// One RoCEv2 packet in pieces, for gather I/O: the whole header (IP, UDP, IB), the payload
/// where it lies (frame memory), and the pad and ICRC.
#[derive(Debug, Clone, Copy)]
pub struct Gather<'a> {
    /// IP, UDP and InfiniBand headers.
    pub header: &'a [u8],
    /// Payload bytes.
    pub payload: &'a [u8],
    /// Pad and ICRC.
    pub trailer: &'a [u8],
}

impl Gather<'_> {
    fn ip_header_len(&self) -> usize {
        if self.header.first().is_some_and(|b| b >> 4 == 6) {
            40
        } else {
            20
        }
    }

    /// The UDP payload length.
    pub fn udp_len(&self) -> usize {
        self.header.len() - self.ip_header_len() - 8 + self.payload.len() + self.trailer.len()
    }

    pub(crate) fn whole(&self) -> Vec<u8> {
        [self.header, self.payload, self.trailer].concat()
    }
}

/// How many segments of `udp_len` bytes one GSO send may carry: the kernel's segment limit,
/// and the IP datagram limit of 64 KiB for the unsegmented send.
pub fn gso_segments(udp_len: usize) -> usize {
    (65_000 / udp_len.max(1)).clamp(1, GSO_MAX_SEGMENTS)
}

/// One `sendmsg(2)` of the bytes in `iov` to `dst` with `UDP_SEGMENT = seg`: the kernel cuts
/// them into datagrams of `seg` bytes (the last may be shorter). Retries while the socket
/// buffer is full.
pub(crate) fn sendmsg_segmented(
    fd: BorrowedFd<'_>,
    dst: SocketAddr,
    iov: &mut [libc::iovec],
    seg: usize,
) -> std::io::Result<()> {
    let name: socket2::SockAddr = dst.into();
    // one cmsg: SOL_UDP / UDP_SEGMENT with the segment size as a u16
    #[repr(C, align(8))]
    struct Cmsg([u8; 32]);
    let mut control = Cmsg([0; 32]);
    // SAFETY: an all-zero msghdr is valid; every pointer set below refers to locals or to `iov`
    // (whose entries point at live buffers, the caller's promise) that outlive the sendmsg
    // call, and the control buffer is large and aligned enough for one cmsghdr carrying two
    // bytes.
    unsafe {
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_name = name.as_ptr().cast_mut().cast();
        msg.msg_namelen = name.len();
        msg.msg_iov = iov.as_mut_ptr();
        msg.msg_iovlen = iov.len();
        msg.msg_control = control.0.as_mut_ptr().cast();
        msg.msg_controllen = libc::CMSG_SPACE(2) as usize;
        let c = libc::CMSG_FIRSTHDR(&msg);
        (*c).cmsg_level = libc::SOL_UDP;
        (*c).cmsg_type = libc::UDP_SEGMENT;
        (*c).cmsg_len = libc::CMSG_LEN(2) as usize;
        std::ptr::copy_nonoverlapping((seg as u16).to_ne_bytes().as_ptr(), libc::CMSG_DATA(c), 2);
        loop {
            if libc::sendmsg(fd.as_raw_fd(), &msg, 0) >= 0 {
                return Ok(());
            }
            let e = std::io::Error::last_os_error();
            match e.kind() {
                ErrorKind::WouldBlock | ErrorKind::Interrupted => std::thread::yield_now(),
                _ if e.raw_os_error() == Some(libc::ENOBUFS) => std::thread::yield_now(),
                _ => return Err(e),
            }
        }
    }
}

/// Datagrams to one destination through UDP segmentation offload: up to
/// [`GSO_MAX_SEGMENTS`] per `sendmsg(2)`, all of the first one's length but the last, which
/// may be shorter (the GVSP stream's payload packets). With `gso` false, or once the kernel
/// refuses `UDP_SEGMENT` (it then sets `gso` false), one `sendto` per datagram.
pub fn send_datagrams(
    sock: &UdpSocket,
    dst: SocketAddr,
    datagrams: &[&[u8]],
    gso: &mut bool,
) -> std::io::Result<()> {
    let Some(first) = datagrams.first() else {
        return Ok(());
    };
    let seg = first.len();
    let fits = datagrams.len() <= gso_segments(seg)
        && datagrams[..datagrams.len() - 1]
            .iter()
            .all(|d| d.len() == seg)
        && datagrams.last().is_some_and(|d| d.len() <= seg);
    if *gso && datagrams.len() > 1 && fits {
        let mut iov = [libc::iovec {
            iov_base: std::ptr::null_mut(),
            iov_len: 0,
        }; GSO_MAX_SEGMENTS];
        for (v, d) in iov.iter_mut().zip(datagrams) {
            *v = libc::iovec {
                iov_base: d.as_ptr().cast_mut().cast(),
                iov_len: d.len(),
            };
        }
        match sendmsg_segmented(sock.as_fd(), dst, &mut iov[..datagrams.len()], seg) {
            Err(e)
                if matches!(
                    e.raw_os_error(),
                    Some(libc::EIO | libc::EINVAL | libc::ENOPROTOOPT)
                ) =>
            {
                *gso = false; // no UDP GSO here: from now on one datagram per send
            }
            r => return r,
        }
    }
    send_each(sock, Some(dst), datagrams)?;
    Ok(())
}

/// Datagrams of one size class to one destination, one per packet, `sendmmsg(2)` in batches
/// of [`TX_BATCH`]: a GVSP frame's packets for a host that reads one datagram per packet. `dst`
/// `None`: the socket is connected (the kernel then keeps the route instead of looking it up
/// for every datagram).
pub fn send_each(
    sock: &UdpSocket,
    dst: Option<SocketAddr>,
    datagrams: &[&[u8]],
) -> std::io::Result<()> {
    for chunk in datagrams.chunks(TX_BATCH) {
        let mut batch: [(&[u8], Option<SocketAddr>); TX_BATCH] = [(&[], None); TX_BATCH];
        for (b, d) in batch.iter_mut().zip(chunk) {
            *b = (d, dst);
        }
        sendmmsg_to(sock.as_fd(), &batch[..chunk.len()])?;
    }
    Ok(())
}

/// `sendmmsg(2)` the datagrams (at most [`TX_BATCH`]), each to its address (`None`: the
/// connected peer), retrying while the socket buffer is full.
pub(crate) fn sendmmsg_to(
    fd: BorrowedFd<'_>,
    batch: &[(&[u8], Option<SocketAddr>)],
) -> std::io::Result<()> {
    let n = batch.len();
    if n == 0 {
        return Ok(());
    }
    if let [(data, to)] = batch {
        // one datagram (a host's ACK): sendto, without the 32 headers and addresses a batch
        // sets up (filling those was 2.4 % of the soft host's CPU)
        let sock = socket2::SockRef::from(&fd);
        let to = to.map(socket2::SockAddr::from);
        loop {
            let sent = match &to {
                Some(to) => sock.send_to(data, to),
                None => sock.send(data),
            };
            match sent {
                Ok(_) => return Ok(()),
                Err(e) => send_again(e)?,
            }
        }
    }
    let names: [Option<socket2::SockAddr>; TX_BATCH] =
        std::array::from_fn(|i| batch.get(i).and_then(|b| b.1).map(Into::into));
    let mut iov = [libc::iovec {
        iov_base: std::ptr::null_mut(),
        iov_len: 0,
    }; TX_BATCH];
    // SAFETY: all-zero mmsghdrs are valid "no name, no data, no control, no flags" headers.
    let mut msgs: [libc::mmsghdr; TX_BATCH] = unsafe { std::mem::zeroed() };
    for (i, (data, _)) in batch.iter().enumerate() {
        iov[i] = libc::iovec {
            iov_base: data.as_ptr().cast_mut().cast(),
            iov_len: data.len(),
        };
        let h = &mut msgs[i].msg_hdr;
        if let Some(name) = &names[i] {
            h.msg_name = name.as_ptr().cast_mut().cast();
            h.msg_namelen = name.len();
        }
        h.msg_iov = &mut iov[i];
        h.msg_iovlen = 1;
    }
    let mut done = 0;
    while done < n {
        // SAFETY: `msgs[done..n]` are initialised headers whose name and iovec pointers refer
        // to `names`, `iov` and `batch`, all alive and unmoved for this call.
        let r = unsafe {
            libc::sendmmsg(
                fd.as_raw_fd(),
                msgs[done..].as_mut_ptr(),
                (n - done) as libc::c_uint,
                0,
            )
        };
        if r >= 0 {
            done += r as usize;
            continue;
        }
        send_again(std::io::Error::last_os_error())?;
    }
    Ok(())
}

/// Whether a failed send is tried again (`Ok`, after yielding when the socket was full) or
/// fails.
fn send_again(e: std::io::Error) -> std::io::Result<()> {
    match e.kind() {
        ErrorKind::WouldBlock | ErrorKind::Interrupted => std::thread::yield_now(),
        _ if e.raw_os_error() == Some(libc::ENOBUFS) => std::thread::yield_now(),
        // a connected socket reports an earlier datagram's ICMP port unreachable on the
        // next send, which it did not send: the error is consumed, send it again
        _ if e.raw_os_error() == Some(libc::ECONNREFUSED) => {}
        _ => return Err(e),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn gvsp_runs_go_out_as_one_gso_send_and_arrive_as_the_same_datagrams() {
        for mut gso in [true, false] {
            let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
            rx.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
            let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
            // four full packets and a short last one, each filled with its index
            let packets: Vec<Vec<u8>> = (0..5u8)
                .map(|i| vec![i; if i == 4 { 700 } else { 1400 }])
                .collect();
            let refs: Vec<&[u8]> = packets.iter().map(Vec::as_slice).collect();
            let wanted = gso;
            send_datagrams(&tx, rx.local_addr().unwrap(), &refs, &mut gso).unwrap();
            // Linux has had UDP_SEGMENT since 4.18: the GSO path must have been taken
            assert_eq!(gso, wanted);
            let mut b = [0u8; 2048];
            for p in &packets {
                let n = rx.recv(&mut b).unwrap();
                assert_eq!(&b[..n], &p[..], "gso {gso}");
            }
        }
    }

    /// Where the kernel refuses `UDP_SEGMENT` (EINVAL: here checksums are off on the socket,
    /// which GSO needs), the run still leaves, one datagram per packet, and GSO is off after.
    #[test]
    fn a_run_the_kernel_will_not_segment_leaves_one_datagram_per_packet() {
        let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
        rx.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        crate::sockopt::set_int(&tx, libc::SOL_SOCKET, libc::SO_NO_CHECK, 1).unwrap();
        let packets: Vec<Vec<u8>> = (0..3u8).map(|i| vec![i; 1400]).collect();
        let refs: Vec<&[u8]> = packets.iter().map(Vec::as_slice).collect();
        let mut gso = true;
        send_datagrams(&tx, rx.local_addr().unwrap(), &refs, &mut gso).unwrap();
        assert!(!gso, "GSO off after EINVAL");
        let mut b = [0u8; 2048];
        for p in &packets {
            let n = rx.recv(&mut b).unwrap();
            assert_eq!(&b[..n], &p[..]);
        }
    }
}
