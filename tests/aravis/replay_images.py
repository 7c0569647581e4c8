#!/usr/bin/python3
"""Images replayed by `rdmacam run --images`, checked through aravis byte for byte.

  replay_images.py make DIR          write three 64x48 8-bit RGB PNGs (a.png, b.png, c.png)
  replay_images.py check ADDRESS DIR --format F --frames N [--socket]

`make` writes the PNGs with the standard library (zlib), from formulas; `check` grabs N frames
with aravis in pixel format F (Mono8, BayerRG8 or RGB8) and compares each with the image it must
be, converted here from the same formulas (BT.601 luma on 16 bits for Mono8, the RGGB mosaic for
BayerRG8), independently of the camera's code: every frame one of the three images, in name
order, looped. Prints one JSON line; exit 0 only if every frame checked out.
"""
import argparse
import json
import os
import struct
import sys
import zlib

W, H = 64, 48
NAMES = ["a.png", "b.png", "c.png"]


def rgb(k, x, y):
    """Pixel (x, y) of image k, 8-bit RGB."""
    return ((x * 4 + k * 40) % 256, (y * 5 + k * 70) % 256, (x * y + k * 90) % 256)


def write_png(path, k):
    raw = b"".join(b"\0" + bytes(c for x in range(W) for c in rgb(k, x, y)) for y in range(H))

    def chunk(kind, data):
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    png = (b"\x89PNG\r\n\x1a\n"
           + chunk(b"IHDR", struct.pack(">IIBBBBB", W, H, 8, 2, 0, 0, 0))
           + chunk(b"IDAT", zlib.compress(raw))
           + chunk(b"IEND", b""))
    with open(path, "wb") as f:
        f.write(png)


def expected(k, fmt):
    out = bytearray()
    for y in range(H):
        for x in range(W):
            r, g, b = rgb(k, x, y)
            if fmt == "RGB8":
                out += bytes((r, g, b))
            elif fmt == "BayerRG8":
                out.append([[r, g], [g, b]][y % 2][x % 2])
            else:  # Mono8: BT.601 on 16-bit samples, top byte
                r16, g16, b16 = r * 257, g * 257, b * 257
                out.append(((299 * r16 + 587 * g16 + 114 * b16 + 500) // 1000) >> 8)
    return bytes(out)


def check(a):
    import gi

    gi.require_version("Aravis", "0.8")
    from gi.repository import Aravis

    cam = Aravis.Camera.new(a.address)
    if a.socket:
        cam.gv_set_stream_options(Aravis.GvStreamOption.PACKET_SOCKET_DISABLED)
    cam.set_string("PixelFormat", a.format)
    want = [expected(k, a.format) for k in range(len(NAMES))]
    stream = cam.create_stream(None, None)
    payload = cam.get_payload()
    for _ in range(8):
        stream.push_buffer(Aravis.Buffer.new_allocate(payload))
    cam.set_acquisition_mode(Aravis.AcquisitionMode.CONTINUOUS)
    cam.start_acquisition()
    seen, problems = [], []
    for _ in range(a.frames):
        buf = stream.timeout_pop_buffer(3_000_000)
        if buf is None:
            problems.append("timeout")
            continue
        if buf.get_status() != Aravis.BufferStatus.SUCCESS:
            problems.append("status %s" % buf.get_status().value_nick)
        else:
            data = bytes(buf.get_data())
            k = next((k for k, w in enumerate(want) if w == data), None)
            if k is None:
                problems.append("frame %d is none of the images (%d bytes)"
                                % (buf.get_frame_id(), len(data)))
            seen.append(k)
        stream.push_buffer(buf)
    cam.stop_acquisition()
    in_order = all(b == (a_ + 1) % len(NAMES) for a_, b in zip(seen, seen[1:])
                   if a_ is not None and b is not None)
    if not in_order:
        problems.append("images out of order: %r" % seen[:12])
    ok = not problems and len(seen) == a.frames
    print(json.dumps({"ok": ok, "format": a.format, "frames": len(seen),
                      "images": seen[:9], "problems": problems[:5]}))
    return 0 if ok else 1


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("make")
    m.add_argument("dir")
    c = sub.add_parser("check")
    c.add_argument("address")
    c.add_argument("dir")
    c.add_argument("--format", default="Mono8")
    c.add_argument("--frames", type=int, default=9)
    c.add_argument("--socket", action="store_true")
    a = ap.parse_args()
    if a.cmd == "make":
        os.makedirs(a.dir, exist_ok=True)
        for k, n in enumerate(NAMES):
            write_png(os.path.join(a.dir, n), k)
        return 0
    return check(a)


if __name__ == "__main__":
    sys.exit(main())
