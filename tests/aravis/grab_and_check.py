#!/usr/bin/python3
"""Grab frames from a GigE Vision camera with aravis (a host no one here wrote) and check
rdmacam's synthetic content: every buffer complete, the frame counter stamped in the first
8 bytes (big-endian) increasing by one, and the Gradient pattern byte = (x + y) mod 256.

usage: grab_and_check.py ADDRESS N_FRAMES [--width W --height H --extended --fps F --socket]
Without --width/--height/--fps the camera's own settings stay (its defaults). Without --socket
aravis picks its receive path as it does for any application: a packet socket when it may
(root or CAP_NET_RAW, as arv-viewer), else a UDP socket; --socket forces the UDP socket.
Prints one JSON line; exit 0 only if every frame checked out. On the socket path it also says
how many datagrams this machine's kernel dropped for want of receive buffer meanwhile
(rcvbuf_drops, UDP RcvbufErrors): a frame lost so is the host's loss (see the note on aravis's
socket buffer in docs/virtual-camera.md).
"""
import argparse
import json
import sys

import gi

gi.require_version("Aravis", "0.8")
from kernel_counters import rcvbuf_drops  # noqa: E402
from gi.repository import Aravis  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("address")
    ap.add_argument("frames", type=int)
    ap.add_argument("--width", type=int)
    ap.add_argument("--height", type=int)
    ap.add_argument("--fps", type=float)
    ap.add_argument("--extended", action="store_true")
    ap.add_argument("--socket", action="store_true")
    ap.add_argument("--auto-packet-size", action="store_true",
                    help="let aravis negotiate GevSCPSPacketSize with test packets first")
    a = ap.parse_args()

    cam = Aravis.Camera.new(a.address)
    if a.width or a.height:
        cam.set_region(0, 0, a.width, a.height)
    _, _, width, height = cam.get_region()
    cam.set_pixel_format(Aravis.PIXEL_FORMAT_MONO_8)
    cam.set_string("TestPattern", "Gradient")
    cam.set_string("GevGVSPExtendedIDMode", "On" if a.extended else "Off")
    if a.socket:
        cam.gv_set_stream_options(Aravis.GvStreamOption.PACKET_SOCKET_DISABLED)
    negotiated = cam.gv_auto_packet_size() if a.auto_packet_size else None
    payload = cam.get_payload()
    stream = cam.create_stream(None, None)
    # as arv-camera-test -a: size the socket buffer for the payload
    stream.set_property("socket-buffer", Aravis.GvStreamSocketBuffer.AUTO)
    stream.set_property("socket-buffer-size", 0)
    for _ in range(16):
        stream.push_buffer(Aravis.Buffer.new_allocate(payload))
    cam.set_acquisition_mode(Aravis.AcquisitionMode.CONTINUOUS)
    if a.fps:
        cam.set_frame_rate(a.fps)
    drops_before = rcvbuf_drops()
    cam.start_acquisition()

    w, h = width, height
    expected = bytearray((x + y) & 0xFF for y in range(h) for x in range(w))
    good = bad = 0
    counters = []
    problems = []
    for _ in range(a.frames):
        buf = stream.timeout_pop_buffer(3_000_000)
        if buf is None:
            problems.append("timeout")
            bad += 1
            continue
        if buf.get_status() != Aravis.BufferStatus.SUCCESS:
            problems.append("status %s" % buf.get_status().value_nick)
            bad += 1
        else:
            data = bytes(buf.get_data())
            counter = int.from_bytes(data[:8], "big")
            counters.append(counter)
            if len(data) != w * h or data[8:] != expected[8:]:
                problems.append("content of frame %d" % counter)
                bad += 1
            else:
                good += 1
        stream.push_buffer(buf)
    cam.stop_acquisition()
    # on the packet-socket path aravis's UDP socket is never read: its drops say nothing
    drops = rcvbuf_drops() - drops_before if a.socket else None
    consecutive = all(b == a_ + 1 for a_, b in zip(counters, counters[1:]))
    if not consecutive:
        problems.append("frame counters not consecutive")
    ok = bad == 0 and consecutive and good == a.frames
    print(json.dumps({"ok": ok, "good": good, "bad": bad, "width": w, "height": h,
                      "packet_size": cam.gv_get_packet_size(), "negotiated": negotiated,
                      "first_counter": counters[:1],
                      "consecutive": consecutive, "rcvbuf_drops": drops,
                      "problems": problems[:5]}))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
