//! FLUSH gives back every queued buffer, however many: one RELEASED carries at most 123 ids
//! (512 bytes), so a FLUSH of more is answered in parts, each but the last flagged MORE
//! (header flags bit 1). Before, one RELEASED of at most 120 ids answered: a host that
//! queued 121 buffers got 120 back, the 121st was neither released nor queued any more, a
//! second FLUSH returned 0, and frames were dropped for want of that buffer.

use rdmacam_protocol::orsp::msg::{self, Descriptor, DeviceMessage};
use rdmacam_protocol::orsp::{OrspChannel, regs};
use rdmacam_protocol::rc::{Completion, WcStatus, WorkRequest};
use rdmacam_protocol::wire::pmtu::Pmtu;

fn connected() -> OrspChannel<256> {
    let mut c = OrspChannel::<256>::new(0x100, 7, Pmtu::Mtu4096);
    c.write_reg(regs::HOST_QPN, 0x11).unwrap();
    c.write_reg(regs::CONTROL, regs::CONTROL_CONNECT)
        .unwrap()
        .unwrap();
    // the HELLO, sent and acknowledged
    complete(&mut c);
    c
}

/// Every work request the channel has, completed; the messages they carried.
fn complete(c: &mut OrspChannel<256>) -> Vec<(u16, DeviceMessage, Vec<u32>)> {
    let wrs: Vec<WorkRequest> = std::iter::from_fn(|| c.poll_work()).collect();
    let mut out = Vec::new();
    for w in &wrs {
        let bytes = c
            .message(w.payload.handle, 0, w.len as usize)
            .unwrap()
            .to_vec();
        let (h, m) = msg::parse_device(&bytes).unwrap();
        let ids = if let DeviceMessage::Released { count, .. } = m {
            (0..count as usize)
                .map(|i| u32::from_be_bytes(bytes[20 + 4 * i..24 + 4 * i].try_into().unwrap()))
                .collect()
        } else {
            Vec::new()
        };
        out.push((h.flags, m, ids));
        c.on_completion(&Completion {
            wr_id: w.wr_id,
            status: WcStatus::Success,
            kind: w.kind,
            len: w.len,
        });
    }
    out
}

/// ANNOUNCE (and queue) buffers `ids`, 40 to a message, as the reference host does.
fn announce(c: &mut OrspChannel<256>, ids: std::ops::Range<u32>) {
    let d: Vec<Descriptor> = ids
        .map(|buffer_id| Descriptor {
            buffer_id,
            rkey: 0x1234,
            addr: 0x1_0000_0000 + u64::from(buffer_id) * 0x20_0000,
            length: 0x20_0000,
        })
        .collect();
    for (seq, part) in d.chunks(40).enumerate() {
        let mut b = vec![0u8; 24 + 24 * part.len()];
        let n = msg::emit_announce(&mut b, seq as u32, msg::ANNOUNCE_QUEUE, part).unwrap();
        c.on_host_message(&b[..n]);
    }
}

#[test]
fn a_flush_of_more_buffers_than_one_released_carries_gives_every_one_back() {
    for queued in [0u32, 1, 120, 121, 123, 124, 200, 246, 256] {
        let mut c = connected();
        announce(&mut c, 0..queued);
        assert_eq!(c.queued_buffers(), queued as usize);
        let mut b = [0u8; 20];
        let n = msg::emit_flush(&mut b, 99, 0).unwrap();
        c.on_host_message(&b[..n]);
        let answer = complete(&mut c);
        let parts: Vec<_> = answer
            .iter()
            .filter(|(_, m, _)| matches!(m, DeviceMessage::Released { .. }))
            .collect();
        let want_parts = (queued as usize).div_ceil(msg::RELEASED_MAX_IDS).max(1);
        assert_eq!(parts.len(), want_parts, "{queued} queued: {parts:?}");
        for (i, (flags, m, ids)) in parts.iter().enumerate() {
            let last = i + 1 == parts.len();
            assert_eq!(flags & msg::FLAG_MORE != 0, !last, "{queued}: part {i}");
            assert!(matches!(m, DeviceMessage::Released { more, .. } if *more != last));
            assert!(ids.len() <= msg::RELEASED_MAX_IDS);
        }
        let mut back: Vec<u32> = parts.iter().flat_map(|p| p.2.clone()).collect();
        back.sort_unstable();
        assert_eq!(back, (0..queued).collect::<Vec<_>>(), "{queued} queued");
        assert_eq!(c.queued_buffers(), 0);
        // a second FLUSH: nothing left, one empty RELEASED
        let n = msg::emit_flush(&mut b, 100, 0).unwrap();
        c.on_host_message(&b[..n]);
        let again = complete(&mut c);
        assert!(
            matches!(
                again[..],
                [(
                    0,
                    DeviceMessage::Released {
                        count: 0,
                        more: false
                    },
                    _
                )]
            ),
            "{again:?}"
        );
    }
}
