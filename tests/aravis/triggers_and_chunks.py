#!/usr/bin/python3
"""Acquisition code as host teams write it with aravis's GObject API, against a camera:

- software trigger: N arv_camera_software_trigger() give exactly N buffers, no more;
- MultiFrame: AcquisitionFrameCount K gives K buffers and the camera stops by itself;
- chunks: arv_camera_set_chunks() with every chunk; aravis's ArvChunkParser reads each chunk
  value of every buffer and they match the features, the buffer's frame id and timestamp;
  the image before the chunks is the Gradient pattern;
- missed triggers: triggers faster than the exposure allows give fewer buffers, and
  FrameTriggerMissedCount grows by the difference (buffers + missed = triggers);
- Line0 (camera started with --trigger-hz): TriggerSource Line0 gives buffers whose
  timestamps are a whole number of pulse periods apart.

usage: triggers_and_chunks.py ADDRESS [--socket] [--line-hz HZ]
Without --socket aravis picks its receive path as any application does (a packet socket when
root). Prints one JSON line; exit 0 only if every check passed.
"""
import argparse
import json
import sys
import time

import gi

gi.require_version("Aravis", "0.8")
from gi.repository import Aravis  # noqa: E402

CHUNKS = "FrameID Timestamp Width Height OffsetX OffsetY PixelFormat ExposureTime Gain"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("address")
    ap.add_argument("--socket", action="store_true")
    ap.add_argument("--line-hz", type=float)
    a = ap.parse_args()

    problems = []
    facts = {}

    def expect(what, got, want):
        if got != want:
            problems.append("%s: got %r, want %r" % (what, got, want))

    cam = Aravis.Camera.new(a.address)
    if a.socket:
        cam.gv_set_stream_options(Aravis.GvStreamOption.PACKET_SOCKET_DISABLED)
    cam.set_region(0, 0, 640, 480)
    cam.set_pixel_format(Aravis.PIXEL_FORMAT_MONO_8)
    cam.set_exposure_time(1000.0)
    cam.set_gain(3.0)

    def new_stream(n_buffers=8):
        stream = cam.create_stream(None, None)
        payload = cam.get_payload()
        for _ in range(n_buffers):
            stream.push_buffer(Aravis.Buffer.new_allocate(payload))
        return stream

    def drain(stream, seconds):
        """Buffers that arrive within `seconds`, pushed back; returns (successes, others)."""
        good = bad = 0
        end = time.time() + seconds
        while time.time() < end:
            buf = stream.timeout_pop_buffer(50_000)
            if buf is None:
                continue
            if buf.get_status() == Aravis.BufferStatus.SUCCESS:
                good += 1
            else:
                bad += 1
            stream.push_buffer(buf)
        return good, bad

    # ------------------------------------------------------------- software trigger
    cam.set_acquisition_mode(Aravis.AcquisitionMode.CONTINUOUS)
    if not cam.is_software_trigger_supported():
        problems.append("aravis finds no software trigger")
    cam.set_trigger("Software")
    stream = new_stream()
    cam.start_acquisition()
    n = 7
    got = 0
    for _ in range(n):
        cam.software_trigger()
        buf = stream.timeout_pop_buffer(1_000_000)
        if buf is not None and buf.get_status() == Aravis.BufferStatus.SUCCESS:
            got += 1
        if buf is not None:
            stream.push_buffer(buf)
    extra, _ = drain(stream, 0.5)
    cam.stop_acquisition()
    expect("buffers for %d software triggers" % n, got, n)
    expect("buffers without a trigger", extra, 0)

    # ------------------------------------------------------------- missed triggers
    cam.set_exposure_time(100_000.0)  # 100 ms: triggers every 10 ms mostly miss
    missed0 = cam.get_integer("FrameTriggerMissedCount")
    cam.start_acquisition()
    triggers = 30
    for _ in range(triggers):
        cam.software_trigger()
        time.sleep(0.01)
    good, bad = drain(stream, 0.8)
    cam.stop_acquisition()
    missed = cam.get_integer("FrameTriggerMissedCount") - missed0
    facts["fast_triggers"] = {"triggers": triggers, "buffers": good, "missed": missed}
    expect("buffers + missed for %d fast triggers" % triggers, good + bad + missed, triggers)
    if not (0 < good < triggers and missed > 0):
        problems.append("fast triggers: %d buffers, %d missed" % (good, missed))
    cam.set_exposure_time(1000.0)
    cam.clear_triggers()
    del stream

    # ------------------------------------------------------------- MultiFrame
    cam.set_acquisition_mode(Aravis.AcquisitionMode.MULTI_FRAME)
    cam.set_frame_count(5)
    cam.set_frame_rate(50.0)
    stream = new_stream()
    cam.start_acquisition()
    good, bad = drain(stream, 1.5)
    expect("MultiFrame 5 buffers", (good, bad), (5, 0))
    # the acquisition register (0x1F01C) reads 1 while an acquisition runs
    expect("MultiFrame acquisition stopped by itself",
           cam.get_device().read_register(0x1F01C), 0)
    cam.stop_acquisition()
    del stream

    # ------------------------------------------------------------- chunks
    cam.set_acquisition_mode(Aravis.AcquisitionMode.CONTINUOUS)
    cam.set_region(8, 4, 320, 240)
    cam.set_exposure_time(2500.0)
    cam.set_frame_rate(20.0)
    cam.set_chunks(CHUNKS)
    parser = cam.create_chunk_parser()
    stream = new_stream()
    cam.start_acquisition()
    checked = 0
    last_ts = None
    for _ in range(6):
        buf = stream.timeout_pop_buffer(2_000_000)
        if buf is None:
            problems.append("chunks: timeout")
            continue
        if buf.get_status() != Aravis.BufferStatus.SUCCESS or not buf.has_chunks():
            problems.append("chunks: status %s, has_chunks %s"
                            % (buf.get_status().value_nick, buf.has_chunks()))
            stream.push_buffer(buf)
            continue
        v = {}
        for name in CHUNKS.split():
            try:
                v[name] = parser.get_integer_value(buf, "Chunk" + name)
            except Exception:  # noqa: BLE001 - floats read as floats
                v[name] = parser.get_float_value(buf, "Chunk" + name)
        expect("ChunkFrameID", v["FrameID"], buf.get_frame_id())
        expect("ChunkTimestamp", v["Timestamp"], buf.get_timestamp())
        expect("ChunkWidth/Height", (v["Width"], v["Height"]), (320, 240))
        expect("ChunkOffsetX/Y", (v["OffsetX"], v["OffsetY"]), (8, 4))
        expect("ChunkPixelFormat", v["PixelFormat"], Aravis.PIXEL_FORMAT_MONO_8)
        expect("ChunkExposureTime", v["ExposureTime"], 2500.0)
        expect("ChunkGain", v["Gain"], 3.0)
        # aravis 0.8.26 hands the whole payload (image and chunks) as the image data of a
        # GVSP chunk buffer: the pixels are its first width x height bytes
        data = bytes(buf.get_image_data())
        expect("payload = image + chunks", len(data), cam.get_payload())
        img = data[: 320 * 240]
        if len(img) != 320 * 240 or any(img[y * 320 + x] != (x + y) % 256
                                        for y in range(1, 240, 31) for x in range(0, 320, 17)):
            problems.append("chunks: the image part is not the Gradient pattern")
        if last_ts is not None and v["Timestamp"] <= last_ts:
            problems.append("chunk timestamps do not increase")
        last_ts = v["Timestamp"]
        facts["chunks"] = v
        checked += 1
        stream.push_buffer(buf)
    cam.stop_acquisition()
    cam.set_chunk_mode(False)
    expect("buffers with chunks checked", checked, 6)
    del stream

    # ------------------------------------------------------------- Line0
    if a.line_hz:
        cam.set_trigger("Line0")
        stream = new_stream()
        cam.start_acquisition()
        stamps = []
        end = time.time() + 1.5
        while time.time() < end:
            buf = stream.timeout_pop_buffer(100_000)
            if buf is None:
                continue
            if buf.get_status() == Aravis.BufferStatus.SUCCESS:
                stamps.append(buf.get_timestamp())
            stream.push_buffer(buf)
        cam.stop_acquisition()
        cam.clear_triggers()
        period = 1e9 / a.line_hz
        gaps = [(b - a_) / period for a_, b in zip(stamps, stamps[1:])]
        facts["line0"] = {"buffers": len(stamps), "gaps_in_periods": [round(g, 2) for g in gaps]}
        if len(stamps) < 3:
            problems.append("Line0: %d buffers in 1.5 s at %g Hz" % (len(stamps), a.line_hz))
        if any(abs(g - round(g)) > 0.05 or round(g) < 1 for g in gaps):
            problems.append("Line0: frames not a whole number of pulses apart: %r" % gaps)

    ok = not problems
    print(json.dumps({"ok": ok, "facts": facts, "problems": problems[:10]}))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
