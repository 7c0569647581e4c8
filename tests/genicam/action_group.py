#!/usr/bin/env python3
"""Fire several cameras with one broadcast ACTION_CMD, as a multi-camera rig does.

Each camera is configured through EMVA's reference GenApi (the XML it serves): ActionDeviceKey,
ActionGroupKey/Mask on ActionSelector 1, FrameStart trigger from Action1, a small image
streamed to its own GVSP socket here. Then, broadcast to the subnet:
- ACTION_CMD with a wrong device key, then a wrong group key: no camera sends a frame;
- ACTION_CMD with the right keys: every camera sends exactly one frame, and their leader
  timestamps (the start of exposure, on the machine's shared time base) agree within 1 ms;
- a scheduled ACTION_CMD 300 ms ahead: every camera sends one frame stamped at or after the
  action time, all within 1 ms of it.

usage: action_group.py HOST_IP BROADCAST CAMERA_IP...
Prints one JSON line; exit 0 only if every check passed.
"""
import json
import os
import socket
import struct
import sys
import time

from genicam import genapi

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from genapi_check import CCP, Gvcp, GvcpPort, fetch_xml  # noqa: E402
from features_check import Stream  # noqa: E402

DEVICE_KEY, GROUP_KEY, GROUP_MASK = 0xCAFE0001, 0x11, 0x1


def main():
    host_ip, broadcast, cams = sys.argv[1], sys.argv[2], sys.argv[3:]
    problems, facts = [], {}
    rig = []
    for ip in cams:
        gvcp = Gvcp(ip, 3956)
        _, xml = fetch_xml(gvcp)
        nm = genapi.NodeMap()
        nm.load_xml_from_string(xml)
        nm.connect(GvcpPort(gvcp), "Device")
        gvcp.write_reg(CCP, 2)
        stream = Stream(host_ip)
        n = nm.get_node
        n("GevHeartbeatTimeout").value = 20000
        n("GevSCDA").value = struct.unpack(">I", socket.inet_aton(host_ip))[0]
        n("GevSCPHostPort").value = stream.port
        n("Width").value = 64
        n("Height").value = 16
        n("ExposureTime").value = 1000.0
        n("ActionDeviceKey").value = DEVICE_KEY
        n("ActionSelector").value = 1
        n("ActionGroupKey").value = GROUP_KEY
        n("ActionGroupMask").value = GROUP_MASK
        n("TriggerSelector").value = "FrameStart"
        n("TriggerMode").value = "On"
        n("TriggerSource").value = "Action1"
        n("AcquisitionStart").execute()
        rig.append((ip, nm, stream, gvcp))

    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_BROADCAST, 1)
    sock.bind((host_ip, 0))

    def action(device_key, group_key, mask, req, at=None):
        body = struct.pack(">III", device_key, group_key, mask)
        flags = 0x00
        if at is not None:
            body += struct.pack(">Q", at)
            flags |= 0x80
        sock.sendto(struct.pack(">BBHHH", 0x42, flags, 0x100, len(body), req) + body,
                    (broadcast, 3956))

    def frames(seconds):
        end = time.time() + seconds
        got = {ip: [] for ip, *_ in rig}
        while time.time() < end:
            for ip, _, stream, _ in rig:
                for b in stream.poll(0.02):
                    got[ip].append(b["leader"]["timestamp"])
        return got

    for what, args in [("wrong device key", (DEVICE_KEY + 1, GROUP_KEY, GROUP_MASK, 1)),
                       ("wrong group key", (DEVICE_KEY, GROUP_KEY + 1, GROUP_MASK, 2)),
                       ("wrong group mask", (DEVICE_KEY, GROUP_KEY, 0x2, 3))]:
        action(*args)
        got = frames(0.5)
        if any(got.values()):
            problems.append("%s fired: %r" % (what, {k: len(v) for k, v in got.items()}))

    action(DEVICE_KEY, GROUP_KEY, GROUP_MASK, 4)
    got = frames(0.8)
    counts = {ip: len(v) for ip, v in got.items()}
    if any(c != 1 for c in counts.values()):
        problems.append("one broadcast action: frames per camera %r" % counts)
    else:
        stamps = [v[0] for v in got.values()]
        facts["spread_ns"] = max(stamps) - min(stamps)
        if facts["spread_ns"] >= 1_000_000:
            problems.append("timestamps spread %d ns (want < 1 ms)" % facts["spread_ns"])

    # scheduled: the time base is shared, so read it from one camera
    nm0 = rig[0][1]
    nm0.get_node("TimestampLatch").execute()
    at = nm0.get_node("TimestampLatchValue").value + 300_000_000
    action(DEVICE_KEY, GROUP_KEY, GROUP_MASK, 5, at=at)
    got = frames(1.0)
    counts = {ip: len(v) for ip, v in got.items()}
    if any(c != 1 for c in counts.values()):
        problems.append("scheduled action: frames per camera %r" % counts)
    else:
        late = [v[0] - at for v in got.values()]
        facts["scheduled_late_ns"] = late
        if any(x < 0 or x >= 1_000_000 for x in late):
            problems.append("scheduled action stamps %r ns after its time (want 0..1 ms)" % late)

    for _, nm, _, gvcp in rig:
        nm.get_node("AcquisitionStop").execute()
        gvcp.write_reg(CCP, 0)
    ok = not problems
    print(json.dumps({"ok": ok, "cameras": len(rig), "facts": facts, "problems": problems}))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
