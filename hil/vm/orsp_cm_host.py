#!/usr/bin/python3
"""An ORSP host on real librdmacm (pyverbs) and Linux Soft-RoCE: the VM scenario of issue 8.

Written from the documents, not from our Rust code: GVCP from GigE Vision 2.x (reference/gev.md),
the ORSP messages and buffer rules from design/ORSP.md sections 3, 5 and 6, and the frame content
from docs/virtual-camera.md (first 8 bytes the frame counter big-endian, Mono8 gradient
(x + y) mod 256). The kernel's IB CM (ib_cm + rdma_cm on rxe) does the connection: rdma_connect()
sends the REQ, the camera's REP private data must be the HELLO message, rdma_disconnect() sends
the DREQ.

Usage: orsp_cm_host.py HOST_IP CAMERA_IP CM_PORT FRAMES [LOSS_PERCENT]
The second connection streams with netem dropping LOSS_PERCENT (default 1) of the packets in
both directions on the veth pair, so the camera's RC requester recovers from real rxe NAKs and
timeouts (the CM exchange itself runs without loss).
Prints one "CHECK ok|FAIL name: detail" line per check; exit status 0 only if all passed.
"""

import collections
import os
import socket
import subprocess
import struct
import sys
import time

import pyverbs.cm_enums as ce
import pyverbs.enums as e
from pyverbs.cmid import CMID, AddrInfo, CMEvent, CMEventChannel, ConnParam
from pyverbs.qp import QPCap, QPInitAttr

HOST, CAM, CM_PORT, FRAMES = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
# RoCE addresses when not the GVCP ones (IPv6: GVCP stays IPv4, as GigE Vision is)
ROCE_HOST = os.environ.get("ROCE_HOST", HOST)
ROCE_CAM = os.environ.get("ROCE_CAM", CAM)
GVCP_PORT = int(os.environ.get("GVCP_PORT", 3956))
LOSS = sys.argv[5] if len(sys.argv) > 5 else "1"
# image size: small for the scenario; the benchmark (BENCH=1) sets RDMACAM_W/RDMACAM_H
W, H = int(os.environ.get("RDMACAM_W", 256)), int(os.environ.get("RDMACAM_H", 64))
FRAME = W * H
NBUF = 32  # 1.3 s of frames at 25 fps: a slow (TCG, busy CI) host still re-queues in time
MAGIC = 0x4F525350

# camera registers (docs/virtual-camera.md; bootstrap CCP from GigE Vision)
CCP, WIDTH, HEIGHT = 0x0A00, 0x1F000, 0x1F004
ACQ_MODE, ACQ_CMD, FRAME_COUNT = 0x1F018, 0x1F01C, 0x1F044
ORSP_STATUS = 0x10058
# OrspRetransmittedPackets, OrspRnrNaks, OrspSequenceNaks, OrspCnps, OrspAckTimeouts
RC_COUNTERS = [0x1006C, 0x10070, 0x10074, 0x10078, 0x1007C]

failures = 0


def check(name, ok, detail=""):
    global failures
    print(f"CHECK {'ok' if ok else 'FAIL'} {name}: {detail}", flush=True)
    if not ok:
        failures += 1
    return ok


class Gvcp:
    def __init__(self, cam):
        self.s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.s.settimeout(0.5)
        self.cam = (cam, GVCP_PORT)
        self.req = 0
        self.last = 0.0

    def _cmd(self, command, payload):
        for _ in range(5):
            self.req = self.req % 0xFFFF + 1
            pkt = struct.pack(">BBHHH", 0x42, 0x01, command, len(payload), self.req) + payload
            self.s.sendto(pkt, self.cam)
            try:
                while True:
                    ack, _ = self.s.recvfrom(1024)
                    status, _answer, _length, ack_id = struct.unpack(">HHHH", ack[:8])
                    if ack_id == self.req:
                        self.last = time.monotonic()
                        return status, ack[8:]
            except socket.timeout:
                continue
        raise RuntimeError("GVCP: camera does not answer")

    def read(self, addr):
        st, p = self._cmd(0x0080, struct.pack(">I", addr))
        assert st == 0, f"READREG {addr:#x}: status {st:#x}"
        return struct.unpack(">I", p[:4])[0]

    def write(self, addr, value):
        st, _ = self._cmd(0x0082, struct.pack(">II", addr, value))
        assert st == 0, f"WRITEREG {addr:#x}={value:#x}: status {st:#x}"

    def heartbeat(self):
        if time.monotonic() - self.last > 0.5:
            self.read(CCP)


def netem(loss):
    """netem loss on both ends of the veth pair (None: remove)."""
    for prefix, dev in ((["ip", "netns", "exec", "cam"], "veth1"), ([], "veth0")):
        if loss is None:
            cmd = prefix + ["tc", "qdisc", "del", "dev", dev, "root"]
        else:
            cmd = prefix + ["tc", "qdisc", "replace", "dev", dev, "root", "netem", "loss", f"{loss}%"]
        subprocess.run(cmd, check=loss is not None)


def header(kind, length, seq):
    return struct.pack(">IBBHII", MAGIC, 1, kind, 0, length, seq)


def next_event(ch):
    ev = CMEvent(ch)
    kind, pd = ev.event_type, ev.private_data
    ev.ack_cm_event()
    return kind, pd


class Conn:
    """One rdma_cm connection to the camera."""

    def __init__(self, port):
        self.ch = CMEventChannel()
        self.id = CMID(creator=self.ch)
        ai = AddrInfo(src=ROCE_HOST, dst=ROCE_CAM, dst_service=str(port),
                      port_space=ce.RDMA_PS_TCP)
        self.id.resolve_addr(ai, 2000)
        kind, _ = next_event(self.ch)
        assert kind == ce.RDMA_CM_EVENT_ADDR_RESOLVED, kind
        self.id.resolve_route(2000)
        kind, _ = next_event(self.ch)
        assert kind == ce.RDMA_CM_EVENT_ROUTE_RESOLVED, kind
        cap = QPCap(max_send_wr=64, max_recv_wr=128, max_send_sge=1, max_recv_sge=1)
        self.id.create_qp(QPInitAttr(qp_type=e.IBV_QPT_RC, cap=cap))
        self.id.connect(ConnParam(retry=7, rnr_retry=7))
        self.event, self.private = next_event(self.ch)
        self.seq = 0

    def established(self):
        return self.event == ce.RDMA_CM_EVENT_ESTABLISHED

    def send(self, kind, body):
        msg = header(kind, 16 + len(body), self.seq) + body
        self.seq += 1
        self.send_mr.write(msg, len(msg), 0)
        self.id.post_send(self.send_mr, e.IBV_SEND_SIGNALED, len(msg))
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            wc = self.id.get_send_comp()
            if wc is not None:
                assert wc.status == e.IBV_WC_SUCCESS, f"send completion status {wc.status}"
                return
        raise RuntimeError("SEND did not complete")

    def stream(self, gvcp, frames, label):
        """ANNOUNCE buffers, acquire `frames` frames, verify each, re-queue buffers."""
        self.frames_mr = self.id.reg_write(NBUF * FRAME)
        self.send_mr = self.id.reg_msgs(4096)
        recvs = collections.deque()
        for _ in range(2 * NBUF + 8):
            mr = self.id.reg_msgs(1024)
            self.id.post_recv(mr, 1024)
            recvs.append(mr)
        descs = b"".join(
            struct.pack(">IIQQ", i, self.frames_mr.rkey, self.frames_mr.buf + i * FRAME, FRAME)
            for i in range(NBUF)
        )
        self.send(0x81, struct.pack(">II", NBUF, 1) + descs)  # ANNOUNCE, queue now
        gvcp.write(ACQ_MODE, 2)
        gvcp.write(FRAME_COUNT, frames)
        gvcp.write(ACQ_CMD, 1)
        ramp = bytes(range(256)) * (W // 256 + 2)
        expected = b"".join(ramp[y % 256:y % 256 + W] for y in range(H))  # (x + y) mod 256
        good = bad = 0
        counters = []
        blocks = []
        leader_for = {}
        end = None
        self.first_leader = self.end_time = None
        deadline = time.monotonic() + 60 + frames
        while end is None and time.monotonic() < deadline:
            gvcp.heartbeat()
            wc = self.id.get_recv_comp()
            if wc is None:
                continue
            mr = recvs.popleft()
            if wc.status != e.IBV_WC_SUCCESS:
                check(f"{label} receive completion", False, f"status {wc.status}")
                break
            data = mr.read(wc.byte_len, 0)
            self.id.post_recv(mr, 1024)
            recvs.append(mr)
            magic, version, kind, _flags, length, _seq = struct.unpack(">IBBHII", data[:16])
            if magic != MAGIC or version != 1 or length != len(data):
                check(f"{label} message header", False, data[:16].hex())
                continue
            if kind == 0x01:  # LEADER
                self.first_leader = self.first_leader or time.monotonic()
                buf = struct.unpack(">I", data[16:20])[0]
                leader_for[buf] = struct.unpack(">Q", data[40:48])[0]
            elif kind == 0x02:  # TRAILER: the WRITEs before it are in memory (RC order)
                buf, status = struct.unpack(">IH", data[16:22])
                valid = struct.unpack(">Q", data[24:32])[0]
                img = self.frames_mr.read(FRAME, buf * FRAME)
                counter = struct.unpack(">Q", img[:8])[0]
                if status == 0 and valid == FRAME and img[8:] == expected[8:]:
                    good += 1
                else:
                    bad += 1
                counters.append(counter)
                blocks.append(leader_for.pop(buf, None))
                self.send(0x82, struct.pack(">II", 1, buf))  # QUEUE it again
            elif kind == 0x04:  # STREAM_END
                self.end_time = time.monotonic()
                end = struct.unpack(">QII", data[16:32])
            elif kind == 0x03:  # EVENT
                ev_id, _, detail = struct.unpack(">HHI", data[16:24])
                print(f"{label}: EVENT {ev_id:#x} detail {detail}", flush=True)
        check(f"{label} STREAM_END", end is not None, f"{end}")
        check(f"{label} frames verified byte for byte", good == frames and bad == 0,
              f"{good} good, {bad} bad of {frames}")
        check(f"{label} frame counters consecutive",
              counters == list(range(counters[0], counters[0] + len(counters))) if counters else False,
              f"{counters[:3]}...{counters[-3:]}")
        # block ids count acquired frames for the life of the camera: consecutive, no gaps
        check(f"{label} block ids consecutive",
              bool(blocks) and blocks == list(range(blocks[0], blocks[0] + len(blocks))),
              f"{blocks[:3]}...{blocks[-3:]}")

    def disconnect(self):
        self.id.disconnect()
        kind, _ = next_event(self.ch)
        return kind


def hello_ok(pd):
    if pd is None or len(pd) < 40:
        return False, f"private data {pd!r}"
    magic, version, kind, _flags, length, _seq = struct.unpack(">IBBHII", pd[:16])
    orsp_version, caps, _max_msg, _depth, max_buffers, pmtu = struct.unpack(">6I", pd[16:40])
    ok = magic == MAGIC and kind == 0x06 and length == 40 and orsp_version >> 16 == 1
    ok = ok and caps & 1 and caps & (1 << 5) and max_buffers >= NBUF
    return ok, f"HELLO version {orsp_version:#x} caps {caps:#x} max_buffers {max_buffers} pmtu {pmtu}"


ORSP_HOST_GID = 0x10018


def take_control():
    """GVCP: take control of the camera and set the image size. The camera admits RDMA CM
    requests from its controlling application only; GVCP is IPv4, so an IPv6 host names its
    RoCE address (its GID) in OrspHostGid first."""
    gvcp = Gvcp(CAM)
    gvcp.write(CCP, 2)
    gvcp.write(WIDTH, W)
    gvcp.write(HEIGHT, H)
    if ":" in ROCE_HOST:
        gid = socket.inet_pton(socket.AF_INET6, ROCE_HOST)
        for i in range(4):
            gvcp.write(ORSP_HOST_GID + 4 * i, struct.unpack(">I", gid[4 * i:4 * i + 4])[0])
    return gvcp


def once():
    """ONCE=1: connect, FRAMES frames, disconnect (the IPv6 run)."""
    gvcp = take_control()
    c = Conn(CM_PORT)
    if check(f"rdma_connect to {ROCE_CAM} established", c.established(), f"event {c.event}"):
        ok, detail = hello_ok(c.private)
        check(f"{ROCE_CAM}: REP private data is the HELLO", ok, detail)
        c.stream(gvcp, FRAMES, ROCE_CAM)
        kind = c.disconnect()
        check(f"{ROCE_CAM}: rdma_disconnect", kind == ce.RDMA_CM_EVENT_DISCONNECTED, f"event {kind}")
    print(f"RESULT {'PASS' if failures == 0 else 'FAIL'} ({failures} failed)", flush=True)
    return 0 if failures == 0 else 1


def bench():
    """BENCH=1: one connection, FRAMES frames of W x H Mono8 as fast as the camera sends them."""
    gvcp = take_control()
    c = Conn(CM_PORT)
    assert c.established(), c.event
    c.stream(gvcp, FRAMES, "bench")
    secs = c.end_time - c.first_leader
    print(f"BENCH orsp frames={FRAMES} bytes={FRAMES * FRAME} seconds={secs:.3f} "
          f"gbit_per_s={FRAMES * FRAME * 8 / secs / 1e9:.3f}", flush=True)
    c.disconnect()
    return 0 if failures == 0 else 1


def main():
    if os.environ.get("BENCH") == "1":
        return bench()
    if os.environ.get("ONCE") == "1":
        return once()
    gvcp = take_control()

    # 1. the wrong port: REJ, reported by rdma_cm as REJECTED
    c = Conn(CM_PORT + 1)
    check("wrong port is rejected", c.event == ce.RDMA_CM_EVENT_REJECTED, f"event {c.event}")

    # 2. connect, HELLO in the REP, stream, disconnect
    for attempt in ("first", "again"):
        c = Conn(CM_PORT)
        if not check(f"{attempt} rdma_connect established", c.established(), f"event {c.event}"):
            break
        ok, detail = hello_ok(c.private)
        check(f"{attempt} REP private data is the HELLO", ok, detail)
        gvcp.heartbeat()
        if attempt == "first":
            # a second host while connected: REJ with the ORSP reason in the private data
            other = Conn(CM_PORT)
            check("second connection rejected while connected",
                  other.event == ce.RDMA_CM_EVENT_REJECTED
                  and (other.private or b"").startswith(b"ORSP busy"),
                  f"event {other.event} private {(other.private or b'')[:28]!r}")
        if attempt == "first":
            c.stream(gvcp, FRAMES, attempt)
        else:
            before = [gvcp.read(a) for a in RC_COUNTERS]
            netem(LOSS)
            try:
                c.stream(gvcp, 50, f"again at {LOSS} % loss")
            finally:
                netem(None)
            retx, rnr, seq_naks, cnps, timeouts = (
                gvcp.read(a) - b for a, b in zip(RC_COUNTERS, before))
            check("the loss was recovered by retransmission",
                  float(LOSS) == 0 or retx > 0,
                  f"{retx} packets retransmitted, {seq_naks} sequence NAKs, "
                  f"{timeouts} ACK timeouts, {rnr} RNR NAKs")
        kind = c.disconnect()
        check(f"{attempt} rdma_disconnect", kind == ce.RDMA_CM_EVENT_DISCONNECTED, f"event {kind}")
        status = gvcp.read(ORSP_STATUS)
        check(f"{attempt} camera idle after DREQ", status & 0xF == 0, f"STATUS {status:#x}")
    print(f"RESULT {'PASS' if failures == 0 else 'FAIL'} ({failures} failed)", flush=True)
    return 0 if failures == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
