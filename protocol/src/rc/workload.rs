//! The synthetic stream the instruction counts are taken on (`scripts/packet-cost.sh`): a
//! requester sending RDMA WRITEs to a host that acknowledges every burst. The x86 count
//! (`protocol/examples/header_path.rs`, under callgrind) and the Cortex-A9 count
//! (`firmware/src/bin/packet_cost.rs`, in qemu with `-icount`) both run these functions, so
//! the two figures measure the same work.

use core::hint::black_box;

use super::{Instant, PayloadRef, PayloadSource, Requester, TxPacket, WorkRequest};
use crate::wire::aeth::{AethRepr, AethSyndrome};
use crate::wire::{BthRepr, IbRepr, Opcode};

/// Packets sent between two cumulative ACKs, and the most work requests kept posted.
pub const BURST: usize = 64;

/// Send `n` packets of RDMA WRITEs of `len` bytes each (buffer 0 of `src` from offset 0)
/// through `rq`, each into one transmit slot (`poll_transmit_into`) whose headers and trailer
/// are read as a transmitter reads them; after each burst a cumulative ACK, with unlimited
/// credits, of everything sent, and the completions taken. Returns the packets sent.
pub fn stream<const SQ: usize, const CQ: usize, S: PayloadSource + ?Sized>(
    rq: &mut Requester<SQ, CQ>,
    src: &S,
    n: u32,
    len: u32,
) -> u32 {
    let per_message = len.div_ceil(rq.config().pmtu.bytes()).max(1);
    let mut slot = TxPacket::EMPTY;
    let (mut sent, mut posted_packets, mut posted) = (0u32, 0u32, 0u64);
    while sent < n {
        while posted_packets < n && rq.outstanding() < BURST {
            let wr = WorkRequest::write(posted, PayloadRef::new(0, 0), len, 0x1000, 1);
            if rq.post(wr).is_err() {
                break;
            }
            posted += 1;
            posted_packets += per_message;
        }
        let mut burst = 0;
        while burst < BURST && rq.poll_transmit_into(Instant::ZERO, src, &mut slot) {
            black_box(slot.header());
            black_box(slot.trailer());
            sent += 1;
            burst += 1;
        }
        if burst == 0 {
            break; // nothing more to send (a failed request): not a workload to count
        }
        rq.handle_ib(Instant::ZERO, &ack(rq.config().local_qpn, sent - 1));
        while rq.poll_completion().is_some() {}
    }
    sent
}

/// The BTH, AETH and (unchecked, zero) ICRC of a cumulative ACK of `psn` to queue pair `qpn`.
pub(crate) fn ack(qpn: u32, psn: u32) -> [u8; 20] {
    let mut ib = IbRepr::new(BthRepr::new(Opcode::RC_ACK, qpn, psn & 0xff_ffff));
    ib.aeth = Some(AethRepr {
        syndrome: AethSyndrome::Ack { credits: 0x1f },
        msn: 0,
    });
    let mut b = [0u8; 20];
    let _ = ib.emit(&mut b, 0);
    b
}

/// What no packet path avoids for `n` packets of `payload` cut at `pmtu` bytes: the ICRC,
/// crc32fast over 48 masked header bytes and the packet's payload, from a fresh hasher each.
/// Returns the ICRCs XORed (to keep the work).
pub fn icrc_floor(payload: &[u8], pmtu: usize, n: u32) -> u32 {
    let masked = [0xffu8; 48];
    let mut acc = 0u32;
    let mut chunks = payload.chunks(pmtu.max(1)).cycle();
    for _ in 0..n {
        let mut h = crc32fast::Hasher::new();
        h.update(black_box(&masked));
        if let Some(c) = chunks.next() {
            h.update(black_box(c));
        }
        acc ^= h.finalize();
    }
    acc
}
