//! GEM 0 shared by embassy-net and the camera's zero-copy RoCEv2 transmitter.
//!
//! embassy-net keeps the control traffic (GVCP, CM, ACKs in, events, GVSP): its frames are
//! copied into a buffer per transmit descriptor, as zynq7000-hal's driver does. The camera's
//! queue-pair packets go out below it, gathered by the GEM from three buffers per frame: the
//! Ethernet and RoCEv2 headers (62 bytes over IPv4, in the descriptor's buffer), the payload
//! where it lies in frame memory, and pad and ICRC (in the buffer of the third descriptor). The
//! CPU writes 70-odd bytes per packet and cleans the payload's cache lines; it copies no
//! payload byte. The IP header is the camera's own, so its DSCP and ECN reach the wire.
//!
//! A multi-buffer frame is one the GEM fetches descriptor by descriptor until the one marked
//! last, and marks sent by setting the used bit of its first descriptor only: the ring here
//! keeps each frame's descriptor count and reclaims frames, not descriptors (zynq7000-hal's
//! own ring handles single-descriptor frames only, so this module replaces its driver and
//! keeps its receive side).
//!
//! The destination MAC of a RoCEv2 packet is learnt from the frames the host sent (it sent
//! GVCP and CM datagrams before any queue pair exists); a packet for an address not seen yet
//! is left to the socket path.

use core::cell::RefCell;
use core::net::Ipv4Addr;
use core::sync::atomic::{AtomicBool, Ordering};
use core::task::{Context, Poll};

use critical_section::Mutex;
use embassy_sync::waitqueue::AtomicWaker;
use rdmacam_firmware::dma::clean;
use zynq7000_hal::cache::{self, CACHE_LINE_SIZE};
use zynq7000_hal::eth::{AlignedBuffer, EthernetId, MTU, rx_descr, tx_descr};

/// Transmit descriptors: 64 one-buffer frames, or 21 RoCEv2 packets of three.
pub const TX_SLOTS: usize = 64;

const USED: u32 = 1 << 31;
const WRAP: u32 = 1 << 30;
const LAST: u32 = 1 << 15;
/// Bytes before the IP header: destination and source MAC, EtherType.
const ETH_HEADER: usize = 14;

static RX_WAKER: AtomicWaker = AtomicWaker::new();
static LINK_WAKER: AtomicWaker = AtomicWaker::new();
static LINK_UP: AtomicBool = AtomicBool::new(false);
static TX_WAKER: AtomicWaker = AtomicWaker::new();
/// The camera task, waiting for room in the ring.
static ROOM_WAKER: AtomicWaker = AtomicWaker::new();
static RING: Mutex<RefCell<Option<TxRing>>> = Mutex::new(RefCell::new(None));
/// A sender seen: IPv4 address and MAC.
type Neighbour = Option<(Ipv4Addr, [u8; 6])>;
/// Senders seen lately, newest first.
static NEIGHBOURS: Mutex<RefCell<[Neighbour; 4]>> = Mutex::new(RefCell::new([None; 4]));

/// Counters of the zero-copy path.
#[derive(Debug, Clone, Copy, Default)]
pub struct TxCounters {
    /// RoCEv2 packets sent gathered from frame memory.
    pub gathered: u64,
    /// embassy-net frames sent (copied).
    pub copied: u64,
    /// Frames the GEM reported an error for.
    pub errors: u64,
}

struct TxRing {
    eth: EthernetId,
    list: &'static mut [tx_descr::Descriptor],
    bufs: &'static mut [AlignedBuffer],
    /// Descriptors of the frame starting at each index (0: no frame starts there).
    frame_len: [u8; TX_SLOTS],
    next: usize,
    busy: usize,
    in_flight: usize,
    counters: TxCounters,
}

impl TxRing {
    fn word(&self, i: usize) -> u32 {
        self.list[i].word1.get().raw_value()
    }

    fn set_word(&self, i: usize, w: u32) {
        self.list[i]
            .word1
            .set(tx_descr::Word1::new_with_raw_value(w));
    }

    /// Hand back every frame the GEM has sent (its first descriptor's used bit set).
    fn reclaim(&mut self) {
        while self.in_flight > 0 {
            let first = self.word(self.busy);
            if first & USED == 0 {
                break;
            }
            // retry limit, AHB error, late collision, or a checksum-generation error (not the
            // statuses "not IP" and "not TCP/UDP", which ARP and ICMP frames get)
            let checksum = (first >> 20) & 0x7;
            if first & (1 << 29 | 1 << 27 | 1 << 26) != 0 || !matches!(checksum, 0 | 0b100 | 0b110)
            {
                self.counters.errors += 1;
            }
            let n = usize::from(self.frame_len[self.busy]).max(1);
            for k in 0..n {
                let i = (self.busy + k) % TX_SLOTS;
                self.set_word(i, USED | if i == TX_SLOTS - 1 { WRAP } else { 0 });
                self.frame_len[i] = 0;
            }
            self.busy = (self.busy + n) % TX_SLOTS;
            self.in_flight -= n;
        }
    }

    fn free(&self) -> usize {
        TX_SLOTS - self.in_flight
    }

    /// Queue a frame of `pieces` (bus address, length), the first piece's descriptor handed
    /// to the GEM last so it never starts a frame whose rest is not ready; then start it.
    fn push(&mut self, pieces: &[(u32, usize)]) {
        let n = pieces.len();
        let start = self.next;
        for (k, &(addr, len)) in pieces.iter().enumerate().rev() {
            let i = (start + k) % TX_SLOTS;
            let wrap = if i == TX_SLOTS - 1 { WRAP } else { 0 };
            let last = if k == n - 1 { LAST } else { 0 };
            self.list[i].set_addr(addr);
            // used bit clear: the GEM's to send
            self.set_word(i, wrap | last | (len as u32 & 0x3fff));
        }
        self.frame_len[start] = n as u8;
        self.next = (start + n) % TX_SLOTS;
        self.in_flight += n;
        // the descriptors are in device memory, the buffers cleaned: start
        // SAFETY: only the transmit-start bit of the network control register is set.
        let mut regs = unsafe { self.eth.steal_regs() };
        regs.modify_net_ctrl(|mut v| {
            v.set_start_tx(true);
            v
        });
    }
}

/// Set up the transmit ring over `list` and `bufs` (one buffer per descriptor).
pub fn init_tx(
    eth: EthernetId,
    list: &'static mut [tx_descr::Descriptor; TX_SLOTS],
    bufs: &'static mut [AlignedBuffer; TX_SLOTS],
) -> u32 {
    let base = list.as_ptr() as u32;
    let ring = TxRing {
        eth,
        list,
        bufs,
        frame_len: [0; TX_SLOTS],
        next: 0,
        busy: 0,
        in_flight: 0,
        counters: TxCounters::default(),
    };
    for i in 0..TX_SLOTS {
        ring.set_word(i, USED | if i == TX_SLOTS - 1 { WRAP } else { 0 });
    }
    critical_section::with(|cs| RING.borrow(cs).replace(Some(ring)));
    base
}

/// The GEM interrupt: clear it (zynq7000-hal's handler) and wake whoever waits.
pub fn on_interrupt() {
    let r = zynq7000_hal::eth::smoltcp::on_interrupt(EthernetId::Eth0);
    if r.frame_received {
        RX_WAKER.wake();
    }
    if r.frame_sent {
        TX_WAKER.wake();
        ROOM_WAKER.wake();
    }
}

/// The PHY's link state, for embassy-net.
pub fn update_link_state(up: bool) {
    if LINK_UP.swap(up, Ordering::Relaxed) != up {
        LINK_WAKER.wake();
    }
}

/// The zero-copy path's counters.
pub fn counters() -> TxCounters {
    critical_section::with(|cs| {
        RING.borrow(cs)
            .borrow()
            .as_ref()
            .map(|r| r.counters)
            .unwrap_or_default()
    })
}

/// The camera's RoCEv2 transmitter on the shared ring.
pub struct RoceTx {
    mac: [u8; 6],
}

impl RoceTx {
    /// The transmitter of a board whose MAC is `mac`.
    pub const fn new(mac: [u8; 6]) -> Self {
        RoceTx { mac }
    }
}

impl rdmacam_firmware::app::RawTx for RoceTx {
    fn ready(&mut self) -> bool {
        critical_section::with(|cs| {
            let mut r = RING.borrow(cs).borrow_mut();
            let Some(r) = r.as_mut() else {
                return false;
            };
            r.reclaim();
            r.free() >= 3
        })
    }

    async fn wait_ready(&mut self) {
        core::future::poll_fn(|cx: &mut Context<'_>| {
            ROOM_WAKER.register(cx.waker());
            if self.ready() {
                Poll::Ready(())
            } else {
                Poll::Pending
            }
        })
        .await
    }

    fn send(&mut self, header: &[u8], payload: &[u8], trailer: &[u8]) -> bool {
        if header.len() < 20 || header[0] >> 4 != 4 || ETH_HEADER + header.len() > 128 {
            return false; // IPv4 only here; anything else takes the socket path
        }
        let dst = Ipv4Addr::new(header[16], header[17], header[18], header[19]);
        let Some(dst_mac) = neighbour(dst) else {
            return false;
        };
        if payload.is_empty() || payload.len() > MTU || trailer.is_empty() {
            return false;
        }
        critical_section::with(|cs| {
            let mut r = RING.borrow(cs).borrow_mut();
            let Some(r) = r.as_mut() else {
                return false;
            };
            // ready() reclaimed just before; only a frame sent since then is left to take back
            if r.free() < 3 {
                r.reclaim();
                if r.free() < 3 {
                    return false;
                }
            }
            let (a, c) = (r.next, (r.next + 2) % TX_SLOTS);
            let hl = ETH_HEADER + header.len();
            {
                let h = &mut r.bufs[a].0[..hl];
                h[..6].copy_from_slice(&dst_mac);
                h[6..12].copy_from_slice(&self.mac);
                h[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
                h[ETH_HEADER..].copy_from_slice(header);
                clean(h);
            }
            {
                let t = &mut r.bufs[c].0[..trailer.len()];
                t.copy_from_slice(trailer);
                clean(t);
            }
            clean(payload);
            let pieces = [
                (r.bufs[a].0.as_ptr() as u32, hl),
                (payload.as_ptr() as u32, payload.len()),
                (r.bufs[c].0.as_ptr() as u32, trailer.len()),
            ];
            r.push(&pieces);
            r.counters.gathered += 1;
            true
        })
    }
}

/// The MAC `ip` last sent from.
pub(crate) fn neighbour(ip: Ipv4Addr) -> Option<[u8; 6]> {
    critical_section::with(|cs| {
        NEIGHBOURS
            .borrow(cs)
            .borrow()
            .iter()
            .flatten()
            .find(|(a, _)| *a == ip)
            .map(|(_, m)| *m)
    })
}

/// Remember the sender of a received Ethernet frame carrying IPv4.
fn learn(frame: &[u8]) {
    if frame.len() < ETH_HEADER + 20 || frame[12..14] != [0x08, 0x00] {
        return;
    }
    let ip = Ipv4Addr::new(frame[26], frame[27], frame[28], frame[29]);
    let mut mac = [0u8; 6];
    mac.copy_from_slice(&frame[6..12]);
    if mac[0] & 1 != 0 || ip.is_unspecified() {
        return;
    }
    critical_section::with(|cs| {
        let mut t = NEIGHBOURS.borrow(cs).borrow_mut();
        if t[0] == Some((ip, mac)) {
            return;
        }
        let keep = t.iter().position(|e| e.is_some_and(|(a, _)| a == ip));
        let end = keep.unwrap_or(t.len() - 1);
        t.copy_within(0..end, 1);
        t[0] = Some((ip, mac));
    });
}

/// embassy-net's driver: zynq7000-hal's receive ring, and the shared transmit ring.
pub struct Driver {
    mac: [u8; 6],
    rx: rx_descr::DescriptorListWrapper<'static>,
    rx_bufs: &'static mut [AlignedBuffer],
}

impl Driver {
    /// The driver over the receive ring `rx` and its buffers (the transmit ring is
    /// [`init_tx`]'s).
    pub fn new(
        mac: [u8; 6],
        rx: rx_descr::DescriptorListWrapper<'static>,
        rx_bufs: &'static mut [AlignedBuffer],
    ) -> Self {
        Driver { mac, rx, rx_bufs }
    }
}

/// A received frame.
pub struct RxToken<'a> {
    rx: &'a mut rx_descr::DescriptorListWrapper<'static>,
    slot: usize,
    buf: &'a mut AlignedBuffer,
    len: usize,
}

/// Room for one embassy-net frame in the transmit ring.
pub struct TxToken;

impl embassy_net_driver::RxToken for RxToken<'_> {
    fn consume<R, F: FnOnce(&mut [u8]) -> R>(self, f: F) -> R {
        // the GEM wrote the frame to DDR: drop stale cache lines first
        let len = self.len.next_multiple_of(CACHE_LINE_SIZE);
        let _ = cache::invalidate_data_cache_range(self.buf.0.as_ptr() as u32, len);
        let frame = &mut self.buf.0[..self.len];
        learn(frame);
        let r = f(frame);
        self.rx.clear_slot(self.slot);
        r
    }
}

impl embassy_net_driver::TxToken for TxToken {
    fn consume<R, F: FnOnce(&mut [u8]) -> R>(self, len: usize, f: F) -> R {
        critical_section::with(|cs| {
            let mut r = RING.borrow(cs).borrow_mut();
            let r = r
                .as_mut()
                .expect("transmit ring set up before the driver runs");
            // transmit() found room and nothing else queues in between
            let i = r.next;
            let len = len.min(MTU);
            let out = f(&mut r.bufs[i].0[..len]);
            clean(&r.bufs[i].0[..len]);
            let addr = r.bufs[i].0.as_ptr() as u32;
            r.push(&[(addr, len)]);
            r.counters.copied += 1;
            out
        })
    }
}

fn tx_room() -> bool {
    critical_section::with(|cs| {
        let mut r = RING.borrow(cs).borrow_mut();
        r.as_mut().is_some_and(|r| {
            r.reclaim();
            r.free() >= 1
        })
    })
}

impl embassy_net_driver::Driver for Driver {
    type RxToken<'a>
        = RxToken<'a>
    where
        Self: 'a;
    type TxToken<'a>
        = TxToken
    where
        Self: 'a;

    fn receive(&mut self, cx: &mut Context) -> Option<(RxToken<'_>, TxToken)> {
        RX_WAKER.register(cx.waker());
        TX_WAKER.register(cx.waker());
        if !tx_room() {
            return None;
        }
        match self.rx.scan_and_handle_next_received_frame(true) {
            rx_descr::FrameScanResult::SingleFrame { index, size, .. } => {
                let buf = self.rx_bufs.get_mut(index)?;
                Some((
                    RxToken {
                        rx: &mut self.rx,
                        slot: index,
                        buf,
                        len: size,
                    },
                    TxToken,
                ))
            }
            _ => None,
        }
    }

    fn transmit(&mut self, cx: &mut Context) -> Option<TxToken> {
        TX_WAKER.register(cx.waker());
        tx_room().then_some(TxToken)
    }

    fn link_state(&mut self, cx: &mut Context) -> embassy_net_driver::LinkState {
        LINK_WAKER.register(cx.waker());
        if LINK_UP.load(Ordering::Relaxed) {
            embassy_net_driver::LinkState::Up
        } else {
            embassy_net_driver::LinkState::Down
        }
    }

    fn capabilities(&self) -> embassy_net_driver::Capabilities {
        let mut c = embassy_net_driver::Capabilities::default();
        c.max_transmission_unit = MTU;
        c.max_burst_size = Some(TX_SLOTS);
        // the GEM fills in IPv4, UDP and TCP checksums
        c.checksum.ipv4 = embassy_net_driver::Checksum::None;
        c.checksum.udp = embassy_net_driver::Checksum::None;
        c.checksum.tcp = embassy_net_driver::Checksum::None;
        c.checksum.icmpv4 = embassy_net_driver::Checksum::Both;
        c
    }

    fn hardware_address(&self) -> embassy_net_driver::HardwareAddress {
        embassy_net_driver::HardwareAddress::Ethernet(self.mac)
    }
}
