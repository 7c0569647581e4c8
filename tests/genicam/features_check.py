#!/usr/bin/env python3
"""Drive the camera's triggers, chunk data, events and action commands through EMVA's reference
GenApi (PyPI `genicam`), and read the results back with the reference GenApi's own adapters:
ChunkAdapterGEV parses the chunk data of a frame received here over GVSP, EventAdapterGEV
delivers the GVCP EVENT/EVENTDATA packets received on the message channel to the event data
features. Every packet received or sent on the message channel and the action commands go into
a pcap for Wireshark's GVCP dissector (the calling test runs tshark on it).

Checks:
- exposure: AcquisitionFrameRate's maximum is 1 / ExposureTime.
- chunks: every ChunkSelector entry enabled; the chunk values the reference GenApi reads equal
  the features, the leader (timestamp) and the block id; PayloadSize and ChunkLayoutID agree
  with the trailer; the image before the chunks is the test pattern.
- software trigger: N TriggerSoftware give exactly N frames; one frame per trigger.
- missed triggers: triggers while a long exposure runs are counted (FrameTriggerMissedCount),
  and each raises a FrameTriggerMissed event (EVENTDATA with the count).
- events: AcquisitionStart, FrameStart, ExposureEnd, AcquisitionEnd arrive as EVENT packets;
  EventExposureEndTimestamp is the frame's timestamp plus its exposure, EventFrameStartFrameID
  its block id; an event never acknowledged is sent 1 + MCRC times, with one request id.
- actions: an ACTION_CMD with the right keys fires a frame (TriggerSource Action1) and is
  acknowledged; wrong device key, group key or mask: no acknowledge, no frame.

usage: features_check.py ADDRESS --pcap FILE
Prints one JSON line; exit 0 only if every check passed.
"""
import argparse
import json
import os
import socket
import struct
import sys
import threading
import time

from genicam import genapi

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from genapi_check import CCP, Gvcp, GvcpPort, fetch_xml  # noqa: E402

EVENT, EVENTDATA, ACTION = 0xC0, 0xC2, 0x100
WIDTH, HEIGHT = 320, 240


class Pcap:
    """UDP datagrams in a classic pcap (Ethernet, IPv4, UDP, no checksums)."""

    def __init__(self, path):
        self.lock = threading.Lock()
        self.f = open(path, "wb")
        self.f.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1))

    def add(self, src, dst, payload):
        udp = struct.pack(">HHHH", src[1], dst[1], 8 + len(payload), 0) + payload
        ip = struct.pack(">BBHHHBBH4s4s", 0x45, 0, 20 + len(udp), 0, 0, 64, 17, 0,
                         socket.inet_aton(src[0]), socket.inet_aton(dst[0]))
        csum = sum(struct.unpack(">10H", ip))
        csum = (csum & 0xFFFF) + (csum >> 16)
        csum = (csum & 0xFFFF) + (csum >> 16)
        ip = ip[:10] + struct.pack(">H", ~csum & 0xFFFF) + ip[12:]
        frame = b"\x02\0\0\0\0\x02" + b"\x02\0\0\0\0\x01" + b"\x08\x00" + ip + udp
        t = time.time()
        with self.lock:
            self.f.write(struct.pack("<IIII", int(t), int((t % 1) * 1e6), len(frame),
                                     len(frame)))
            self.f.write(frame)
            self.f.flush()


class Stream:
    """A GVSP receiver: whole blocks (leader, payload, trailer) by block id."""

    def __init__(self, ip):
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
        self.sock.bind((ip, 0))
        self.sock.settimeout(0.05)
        self.port = self.sock.getsockname()[1]
        self.blocks = {}

    def poll(self, seconds):
        """Receive for `seconds`; return the blocks completed meanwhile."""
        done = []
        end = time.time() + seconds
        while time.time() < end:
            try:
                data, _ = self.sock.recvfrom(16384)
            except socket.timeout:
                continue
            _status, block, info = struct.unpack(">HHI", data[:8])
            fmt, pid = (info >> 24) & 0x7F, info & 0xFFFFFF
            b = self.blocks.setdefault(block, {"payload": {}})
            if fmt == 1:
                ptype, ts = struct.unpack(">HQ", data[10:20])
                b["leader"] = {"payload_type": ptype, "timestamp": ts}
            elif fmt == 2:
                ptype, size_y = struct.unpack(">HI", data[10:16])
                b["trailer"] = {"payload_type": ptype}
                if ptype & 0x4000:
                    b["trailer"]["payload_len"], b["trailer"]["layout_id"] = \
                        struct.unpack(">II", data[16:24])
                b["last"] = pid
            else:
                b["payload"][pid] = data[8:]
            if "leader" in b and "last" in b and len(b["payload"]) == b["last"] - 1:
                b["data"] = b"".join(b["payload"][i] for i in range(1, b["last"]))
                b["block_id"] = block
                done.append(b)
                del self.blocks[block]
        return done


class Messages:
    """The host end of the message channel: a thread receives (and acknowledges) events."""

    def __init__(self, ip, pcap):
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind((ip, 0))
        self.sock.settimeout(0.05)
        self.addr = self.sock.getsockname()
        self.port = self.addr[1]
        self.pcap = pcap
        self.received = []  # (command, flags, req_id, datagram)
        self.ack = True
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self):
        while True:
            try:
                data, src = self.sock.recvfrom(2048)
            except socket.timeout:
                continue
            self.pcap.add(src, self.addr, data)
            _key, flags, command, _length, req = struct.unpack(">BBHHH", data[:8])
            self.received.append((command, flags, req, data))
            if self.ack and flags & 1:
                ack = struct.pack(">HHHH", 0, command + 1, 0, req)
                self.sock.sendto(ack, src)
                self.pcap.add(self.addr, src, ack)

    def poll(self, seconds):
        time.sleep(seconds)

    def events(self, event_id):
        return [r for r in self.received if struct.unpack(">H", r[3][10:12])[0] == event_id]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("address")
    ap.add_argument("--port", type=int, default=3956)
    ap.add_argument("--pcap", required=True)
    a = ap.parse_args()

    problems = []
    facts = {}
    pcap = Pcap(a.pcap)
    gvcp = Gvcp(a.address, a.port)
    _, xml = fetch_xml(gvcp)
    nm = genapi.NodeMap()
    nm.load_xml_from_string(xml)
    nm.connect(GvcpPort(gvcp), "Device")
    gvcp.write_reg(CCP, 2)
    # this host's address towards the camera (where streams and events are sent)
    probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    probe.connect((a.address, a.port))
    host_ip = probe.getsockname()[0]
    probe.close()
    stream = Stream(host_ip)
    messages = Messages(host_ip, pcap)
    # one event adapter for the node map (a second one finds the event ports taken)
    ev_adapter = genapi.EventAdapterGEV(nm.pointer)

    def node(name):
        return nm.get_node(name)

    def expect(what, got, want):
        if got != want:
            problems.append("%s: got %r, want %r" % (what, got, want))

    ip_int = struct.unpack(">I", socket.inet_aton(host_ip))[0]
    node("GevSCDA").value = ip_int
    node("GevSCPHostPort").value = stream.port
    node("GevSCPSPacketSize").value = 1500
    node("Width").value = WIDTH
    node("Height").value = HEIGHT
    node("OffsetX").value = 16
    node("OffsetY").value = 8
    node("ExposureTime").value = 2500.0
    # a frame period holds an exposure: the frame rate's maximum follows ExposureTime
    expect("AcquisitionFrameRate max at a 2.5 ms exposure",
           round(node("AcquisitionFrameRate").max, 3), 400.0)
    node("Gain").value = 6.0
    node("GevMCDA").value = ip_int
    node("GevMCPHostPort").value = messages.port
    node("GevMCTT").value = 100
    node("GevMCRC").value = 2
    for entry in node("EventSelector").symbolics:
        node("EventSelector").value = entry
        node("EventNotification").value = "On"

    # ------------------------------------------------------------- chunks, single frame
    node("ChunkModeActive").value = True
    for entry in node("ChunkSelector").symbolics:
        node("ChunkSelector").value = entry
        node("ChunkEnable").value = True
    node("AcquisitionMode").value = "SingleFrame"
    payload_size = node("PayloadSize").value
    layout_id = node("ChunkLayoutID").value
    node("AcquisitionStart").execute()
    blocks = stream.poll(1.5)
    messages.poll(0.3)
    expect("SingleFrame frames", len(blocks), 1)
    if blocks:
        b = blocks[0]
        expect("leader payload type", b["leader"]["payload_type"], 0x4001)
        expect("trailer payload type", b["trailer"]["payload_type"], 0x4001)
        expect("payload length = PayloadSize", len(b["data"]), payload_size)
        expect("trailer payload length", b["trailer"].get("payload_len"), payload_size)
        expect("trailer ChunkLayoutID", b["trailer"].get("layout_id"), layout_id)
        # the pattern: frame counter, then Gradient (x + y) mod 256 over the image
        img = b["data"][: WIDTH * HEIGHT]
        grad_ok = all(img[y * WIDTH + x] == (x + y) % 256
                      for y in range(1, HEIGHT, 37) for x in range(0, WIDTH, 13))
        if not grad_ok:
            problems.append("image before the chunks is not the Gradient pattern")
        adapter = genapi.ChunkAdapterGEV(nm)
        buf = bytes(b["data"])
        if not adapter.check_buffer_layout(buf, len(buf)):
            problems.append("ChunkAdapterGEV: the buffer's chunk layout does not check out")
        # (the wrapper passes statistics=None, which no overload takes: call the C++ adapter;
        # it takes the buffer as bytes)
        adapter._adapter.attach_buffer(buf, len(buf))
        chunks = {}
        for name in ["ChunkFrameID", "ChunkTimestamp", "ChunkWidth", "ChunkHeight",
                     "ChunkOffsetX", "ChunkOffsetY", "ChunkPixelFormat",
                     "ChunkExposureTime", "ChunkGain"]:
            try:
                v = node(name).value
                chunks[name] = v
            except Exception as e:  # noqa: BLE001
                problems.append("read %s: %s" % (name, e))
        facts["chunks"] = {k: (v if not isinstance(v, float) else round(v, 3))
                           for k, v in chunks.items()}
        expect("ChunkFrameID", chunks.get("ChunkFrameID"), b["block_id"])
        expect("ChunkTimestamp", chunks.get("ChunkTimestamp"), b["leader"]["timestamp"])
        expect("ChunkWidth", chunks.get("ChunkWidth"), WIDTH)
        expect("ChunkHeight", chunks.get("ChunkHeight"), HEIGHT)
        expect("ChunkOffsetX", chunks.get("ChunkOffsetX"), 16)
        expect("ChunkOffsetY", chunks.get("ChunkOffsetY"), 8)
        expect("ChunkPixelFormat", chunks.get("ChunkPixelFormat"), "Mono8")
        expect("ChunkExposureTime", chunks.get("ChunkExposureTime"), 2500.0)
        expect("ChunkGain", chunks.get("ChunkGain"), 6.0)
        adapter.detach_buffer()

        # ---------------------------------------------------------- events of that frame
        for name, eid in [("AcquisitionStart", 0x9100), ("AcquisitionEnd", 0x9101),
                          ("FrameStart", 0x9102), ("ExposureEnd", 0x9103)]:
            got = messages.events(eid)
            if len(got) != 1:
                problems.append("event %s: %d packets, want 1" % (name, len(got)))
                continue
            expect("event %s command" % name, got[0][0], EVENT)
            expect("event %s 64-bit flag" % name, got[0][1] & 0x10, 0x10)
            expect("Event%s node" % name, node("Event%s" % name).value, eid)
            ev_adapter.deliver_message(got[0][3])
        facts["EventExposureEndTimestamp"] = node("EventExposureEndTimestamp").value
        expect("EventFrameStartTimestamp", node("EventFrameStartTimestamp").value,
               b["leader"]["timestamp"])
        expect("EventFrameStartFrameID", node("EventFrameStartFrameID").value, b["block_id"])
        expect("EventExposureEndFrameID", node("EventExposureEndFrameID").value, b["block_id"])
        expect("EventExposureEndTimestamp - EventFrameStartTimestamp (ns)",
               node("EventExposureEndTimestamp").value - b["leader"]["timestamp"], 2_500_000)

    # ------------------------------------------------------------- software trigger
    node("ChunkModeActive").value = False
    node("AcquisitionMode").value = "Continuous"
    node("TriggerSelector").value = "FrameStart"
    node("TriggerMode").value = "On"
    node("TriggerSource").value = "Software"
    node("AcquisitionStart").execute()
    n_frames = 0
    for _ in range(5):
        node("TriggerSoftware").execute()
        n_frames += len(stream.poll(0.3))
    n_frames += len(stream.poll(0.5))
    expect("frames for 5 software triggers", n_frames, 5)

    # ------------------------------------------------------------- missed triggers
    node("AcquisitionStop").execute()
    node("ExposureTime").value = 200_000.0  # 200 ms
    messages.received.clear()
    missed0 = node("FrameTriggerMissedCount").value
    node("AcquisitionStart").execute()
    for _ in range(4):
        node("TriggerSoftware").execute()  # the first exposes, the other three are missed
    frames = len(stream.poll(0.6))
    messages.poll(0.3)
    missed = node("FrameTriggerMissedCount").value - missed0
    expect("frames for 4 triggers during one 200 ms exposure", frames, 1)
    expect("FrameTriggerMissedCount increase", missed, 3)
    got = messages.events(0x9104)
    expect("FrameTriggerMissed events", len(got), 3)
    if got:
        expect("FrameTriggerMissed command", got[-1][0], EVENTDATA)
        ev_adapter.deliver_message(got[-1][3])
        expect("EventFrameTriggerMissedCount", node("EventFrameTriggerMissedCount").value,
               missed0 + 3)
    node("AcquisitionStop").execute()
    node("ExposureTime").value = 2500.0

    # ------------------------------------------------------------- unacknowledged event
    messages.ack = False
    messages.received.clear()
    node("AcquisitionStart").execute()  # raises AcquisitionStart
    messages.poll(1.0)
    starts = messages.events(0x9100)
    expect("sends of an unacknowledged event (1 + MCRC)", len(starts), 3)
    expect("one request id across its resends", len({r[2] for r in starts}), 1)
    messages.ack = True
    messages.poll(0.5)

    # ------------------------------------------------------------- action commands
    node("ActionDeviceKey").value = 0x12345678
    node("ActionSelector").value = 1
    node("ActionGroupKey").value = 0x24
    node("ActionGroupMask").value = 0x1
    node("TriggerSource").value = "Action1"
    stream.poll(0.3)
    asock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    asock.bind((host_ip, 0))
    asock.settimeout(0.3)

    def action(device_key, group_key, mask, req):
        body = struct.pack(">III", device_key, group_key, mask)
        pkt = struct.pack(">BBHHH", 0x42, 0x01, ACTION, len(body), req) + body
        asock.sendto(pkt, (a.address, a.port))
        pcap.add(asock.getsockname(), (a.address, a.port), pkt)
        try:
            data, src = asock.recvfrom(64)
            pcap.add(src, asock.getsockname(), data)
            return struct.unpack(">HH", data[:4])
        except socket.timeout:
            return None

    expect("ACTION_ACK for the right keys", action(0x12345678, 0x24, 0x3, 0x501), (0, 0x101))
    expect("frames fired by the action", len(stream.poll(0.5)), 1)
    for dk, gk, m, req in [(0x12345679, 0x24, 1, 0x502), (0x12345678, 0x25, 1, 0x503),
                           (0x12345678, 0x24, 2, 0x504)]:
        expect("ACTION_ACK for keys %x/%x/%x" % (dk, gk, m), action(dk, gk, m, req), None)
    expect("frames fired by wrong keys", len(stream.poll(0.5)), 0)
    node("AcquisitionStop").execute()
    node("TriggerMode").value = "Off"

    gvcp.write_reg(CCP, 0)
    ok = not problems
    facts["message_packets"] = len(messages.received)
    facts["message_port"] = messages.port
    print(json.dumps({"ok": ok, "facts": facts, "problems": problems[:20]}))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
