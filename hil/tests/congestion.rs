//! Two cameras' RC requesters share one 10 Gbit/s bottleneck whose queue marks ECN-capable
//! packets (a switch with ECN marking); each host's responder answers CE marks with CNPs, and
//! the cameras' DCQCN reaction points (on by default in the camera) cut and recover their rates.
//! Both must settle near a fair share, with the line still well used. Virtual time: the figures
//! are the simulation's, not this machine's.

use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

use rdmacam_hil::sim::{Link, LinkConfig};
use rdmacam_hil::soft::SoftHost;
use rdmacam_protocol::rc::{
    DcqcnConfig, Instant, Path, PayloadRef, RateConfig, Requester, RequesterConfig,
    ResponderConfig, WcStatus, WorkRequest, split_rocev2,
};
use rdmacam_protocol::wire::pmtu::Pmtu;

const HOST: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);
const RKEY: u32 = 0x1234;
const VA: u64 = 0x7f00_0000_0000;
const MSG: u32 = 64 << 10;
const LINE: u64 = 10_000_000_000;

struct Flow {
    cam: Requester<64, 64>,
    host: SoftHost,
    posted: u64,
    done_bytes: u64,
    window_bytes: u64,
}

fn flow(i: u8, dcqcn: bool) -> Flow {
    let cam_ip = Ipv4Addr::new(10, 0, 0, 10 + i);
    let (cqpn, hqpn) = (0x100 + u32::from(i), 0x200 + u32::from(i));
    let mut path = Path::new(IpAddr::V4(cam_ip), IpAddr::V4(HOST));
    path.ecn = 2; // ECT(0), the camera's default
    let mut rq = RequesterConfig::new(cqpn, hqpn, 0, path);
    rq.pmtu = Pmtu::Mtu4096;
    rq.max_unacked = rdmacam_protocol::camera::MAX_UNACKED;
    // what the camera configures: the link speed as a ceiling, DCQCN from it
    rq.rate = RateConfig {
        static_limit: Some(LINE / 8),
        dcqcn: dcqcn.then(|| DcqcnConfig::new(LINE / 8)),
    };
    let mut rs = ResponderConfig::new(
        hqpn,
        cqpn,
        0,
        Path::new(IpAddr::V4(HOST), IpAddr::V4(cam_ip)),
    );
    rs.pmtu = Pmtu::Mtu4096;
    let mut host = SoftHost::new(rs);
    host.register(RKEY, VA, MSG as usize);
    Flow {
        cam: Requester::new(rq),
        host,
        posted: 0,
        done_bytes: 0,
        window_bytes: 0,
    }
}

/// Camera 0 streams alone for 10 ms, then camera 1 joins; 60 ms in all. Returns each camera's
/// Gbit/s over the last 30 ms, the CNPs each got, and the longest queue the bottleneck held in
/// that time.
fn bottleneck(dcqcn: bool) -> ([f64; 2], [u64; 2], Duration) {
    let payload = [vec![0x5au8; MSG as usize]];
    let mut flows = [flow(0, dcqcn), flow(1, dcqcn)];
    let mut max_queue = Duration::ZERO;
    let mut bottleneck = LinkConfig::clean();
    bottleneck.rate_bps = LINE;
    bottleneck.ecn_queue = Some(Duration::from_micros(10));
    let mut up = Link::new(bottleneck, 1);
    let mut down = Link::new(LinkConfig::clean(), 2);
    let mut now = Instant::from_millis(1);
    let end = Instant::from_millis(61);
    let measure_from = Instant::from_millis(31);
    let mut buf = vec![0u8; 256];
    let mut cnps = [0u64; 2];
    while now < end {
        if now >= measure_from {
            max_queue = max_queue.max(up.queue_delay(now));
        }
        for (i, f) in flows.iter_mut().enumerate() {
            if i == 1 && now < Instant::from_millis(11) {
                continue;
            }
            // always work to do: WRITEs of 64 KiB
            while f
                .cam
                .post(WorkRequest::write(
                    f.posted,
                    PayloadRef::new(0, 0),
                    MSG,
                    VA,
                    RKEY,
                ))
                .is_ok()
            {
                f.posted += 1;
            }
            f.cam.handle_timeout(now);
            while let Some(p) = f.cam.poll_transmit(now, &payload[..]) {
                let mut bytes = vec![0; p.len()];
                p.copy_to(&payload[..], &mut bytes).unwrap();
                up.send(now, bytes);
            }
        }
        while let Some(p) = up.recv(now) {
            let (_, _, _, ib) = split_rocev2(&p).unwrap();
            let qpn = u32::from_be_bytes([0, ib[5], ib[6], ib[7]]);
            let f = &mut flows[(qpn - 0x200) as usize];
            f.host.handle_packet(now, &p);
            while let Some(n) = f.host.poll_transmit(&mut buf) {
                down.send(now, buf[..n].to_vec());
            }
        }
        while let Some(p) = down.recv(now) {
            let (_, _, _, ib) = split_rocev2(&p).unwrap();
            let qpn = u32::from_be_bytes([0, ib[5], ib[6], ib[7]]);
            let i = (qpn - 0x100) as usize;
            if ib[0] == 0x81 {
                cnps[i] += 1;
            }
            flows[i].cam.handle_ib(now, ib);
        }
        for f in flows.iter_mut() {
            while let Some(c) = f.cam.poll_completion() {
                assert_eq!(c.status, WcStatus::Success);
                f.done_bytes += u64::from(c.len);
                if now >= measure_from {
                    f.window_bytes += u64::from(c.len);
                }
            }
        }
        let next = [
            up.next_arrival(),
            down.next_arrival(),
            flows[0].cam.poll_timeout(),
            flows[1].cam.poll_timeout(),
        ]
        .into_iter()
        .flatten()
        .min()
        .unwrap_or(end);
        now = now.max(next).max(now + Duration::from_nanos(100));
    }
    let secs = (end.0 - measure_from.0) as f64 / 1e9;
    let rate = |f: &Flow| f.window_bytes as f64 * 8.0 / secs / 1e9;
    ([rate(&flows[0]), rate(&flows[1])], cnps, max_queue)
}

#[test]
fn two_cameras_on_one_bottleneck_settle_near_a_fair_share() {
    let (rates, cnps, queue) = bottleneck(true);
    let (plain, _, plain_queue) = bottleneck(false);
    let total = rates[0] + rates[1];
    let share = rates[0] / total;
    eprintln!(
        "DCQCN: {:.2} + {:.2} = {total:.2} Gbit/s of 10 over the last 30 ms, share {share:.2}, \
         CNPs {cnps:?}, longest queue {queue:?}; without: {:.2} + {:.2}, longest queue {plain_queue:?}",
        rates[0], rates[1], plain[0], plain[1]
    );
    assert!(
        cnps[0] > 0 && cnps[1] > 0,
        "the queue marked both: {cnps:?}"
    );
    assert!((0.4..=0.6).contains(&share), "fair share: {share:.2}");
    assert!(total >= 7.0, "the line stays used: {total:.2} Gbit/s");
    // what DCQCN is for: the rates settle where the queue stays short
    assert!(
        queue * 4 < plain_queue,
        "queue with DCQCN {queue:?}, without {plain_queue:?}"
    );
}
