#!/usr/bin/python3
"""Faults on demand as an aravis host sees them (GVSP), injected "now" through the camera's
FaultInjection features with aravis's GObject API, each followed by a check that the stream
recovers:

- PacketLoss: aravis asks for the packets again (n_resend_requests, n_resent_packets grow),
  every buffer completes with the right pixels;
- PacketReorder, PacketDuplicate: buffers complete, duplicates counted (n_duplicated_packets);
- FrameDrop: the buffers' frame ids skip exactly that many, and aravis counts the gap
  (n_missing_frames counts gaps, not frames);
- PacketCorrupt: GVSP has no checksum: the buffer completes with wrong pixels (what a host's
  own image check must catch);
- ResendUnavailable with a lost packet: the resend is answered PACKET_UNAVAILABLE, aravis
  counts the error packet and fails that one buffer (n_failures), the next ones are good;
- StreamStall: no buffer for the stall, then buffers again;
- ControlSilence: GVCP and stream go quiet (aravis's heartbeat goes unanswered), then both
  come back and control was kept;
- Reboot: aravis raises control-lost; a new connection streams again;
- and with the camera started with `--fault` options (--cli): loss, reorder and duplication
  by probability all through a run, every buffer good.

FaultInjectedCount must equal what was asked each time.

usage: faults.py ADDRESS [--socket] [--cli]
Prints one JSON line; exit 0 only if every check passed.
"""
import argparse
import json
import sys
import time

import gi

gi.require_version("Aravis", "0.8")
from gi.repository import Aravis, GLib  # noqa: E402

W, H = 640, 480
EXPECTED = bytearray((x + y) & 0xFF for y in range(H) for x in range(W))
KINDS = ["PacketLoss", "PacketReorder", "PacketDuplicate", "FrameDrop", "PacketCorrupt",
         "StreamStall", "ControlSilence", "Reboot", "ResendUnavailable", "EcnMark"]
STATS = ["n_completed_buffers", "n_failures", "n_missing_frames", "n_resend_requests",
         "n_resent_packets", "n_duplicated_packets", "n_error_packets", "n_missing_packets"]


class Host:
    def __init__(self, address, socket):
        self.cam = Aravis.Camera.new(address)
        self.lost = False
        self.last_id = None
        self.cam.get_device().connect("control-lost", self.on_lost)
        if socket:
            self.cam.gv_set_stream_options(Aravis.GvStreamOption.PACKET_SOCKET_DISABLED)
        self.cam.set_region(0, 0, W, H)
        self.cam.set_pixel_format(Aravis.PIXEL_FORMAT_MONO_8)
        self.cam.set_string("TestPattern", "Gradient")
        self.cam.set_frame_rate(50.0)
        self.stream = self.cam.create_stream(None, None)
        payload = self.cam.get_payload()
        for _ in range(16):
            self.stream.push_buffer(Aravis.Buffer.new_allocate(payload))
        self.cam.set_acquisition_mode(Aravis.AcquisitionMode.CONTINUOUS)
        self.cam.start_acquisition()

    def on_lost(self, _device):
        self.lost = True

    def stats(self):
        return {n: self.stream.get_info_uint64_by_name(n) for n in STATS}

    def grab(self, n, timeout_s=2.0):
        """n buffers: (status nick, frame id, pixels right, arrival time)."""
        out = []
        for _ in range(n):
            buf = self.stream.timeout_pop_buffer(int(timeout_s * 1e6))
            if buf is None:
                out.append(("timeout", None, False, time.monotonic()))
                continue
            status = buf.get_status().value_nick
            right = False
            if buf.get_status() == Aravis.BufferStatus.SUCCESS:
                data = bytes(buf.get_data())
                right = len(data) == W * H and data[8:] == EXPECTED[8:]
            out.append((status, buf.get_frame_id(), right, time.monotonic()))
            self.last_id = buf.get_frame_id()
            self.stream.push_buffer(buf)
        return out

    def inject(self, kind, amount=None):
        self.cam.set_string("FaultSelector", kind)
        if amount is not None:
            timed = kind in ("StreamStall", "ControlSilence", "Reboot")
            self.cam.set_integer("FaultDuration" if timed else "FaultCount", amount)
        self.cam.execute_command("FaultInject")

    def injected(self, kind):
        self.cam.set_string("FaultSelector", kind)
        return self.cam.get_integer("FaultInjectedCount")

    def close(self):
        # give control back now: the next host (the same test on the other receive path)
        # must not wait for the heartbeat to expire
        for step in (self.cam.stop_acquisition, self.cam.get_device().leave_control):
            try:
                step()
            except GLib.Error:
                pass


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("address")
    ap.add_argument("--socket", action="store_true")
    ap.add_argument("--cli", action="store_true",
                    help="the camera runs with --fault loss/reorder/duplicate: stream and check")
    a = ap.parse_args()

    problems = []
    facts = {}

    def expect(what, ok, detail):
        if not ok:
            problems.append("%s: %s" % (what, detail))

    def all_good(what, frames):
        bad = [f for f in frames if f[0] != "success" or not f[2]]
        expect(what, not bad, "%d of %d buffers bad: %s" % (len(bad), len(frames), bad[:3]))

    host = Host(a.address, a.socket)
    if a.cli:
        before = host.stats()
        frames = host.grab(100)
        after = host.stats()
        all_good("cli faults", frames)
        d = {k: after[k] - before[k] for k in STATS}
        facts["cli"] = d
        expect("cli loss asks for resends", d["n_resent_packets"] > 0, d)
        expect("cli duplicates seen", d["n_duplicated_packets"] > 0, d)
        host.close()
        return report(problems, facts)

    all_good("before any fault", host.grab(10))
    # FaultInjectedCount counts since the camera started: compare differences
    counted = {k: host.injected(k) for k in KINDS}

    def injected_now(kind):
        return host.injected(kind) - counted[kind]

    def phase(kind, amount, n=20, extra=None):
        before = host.stats()
        host.inject(kind, amount)
        if extra:
            extra()
        frames = host.grab(n)
        after = host.stats()
        d = {k: after[k] - before[k] for k in STATS}
        facts[kind] = d
        return frames, d

    frames, d = phase("PacketLoss", 5)
    all_good("PacketLoss", frames)
    expect("PacketLoss resent", d["n_resent_packets"] >= 5, d)
    expect("PacketLoss counted", injected_now("PacketLoss") == 5, injected_now("PacketLoss"))

    frames, d = phase("PacketReorder", 5)
    all_good("PacketReorder", frames)
    expect("PacketReorder counted", injected_now("PacketReorder") == 5, "")

    frames, d = phase("PacketDuplicate", 5)
    all_good("PacketDuplicate", frames)
    expect("PacketDuplicate seen", d["n_duplicated_packets"] >= 5, d)

    last = host.last_id
    frames, d = phase("FrameDrop", 3)
    all_good("FrameDrop", frames)
    ids = [last] + [f[1] for f in frames]
    skipped = sum(b - a_ - 1 for a_, b in zip(ids, ids[1:]))
    expect("FrameDrop: frame ids skip 3", skipped == 3, ids)
    # aravis counts gaps, not frames: three frames in a row are one gap
    expect("FrameDrop: n_missing_frames", d["n_missing_frames"] == 1, d)
    expect("FrameDrop counted", injected_now("FrameDrop") == 3, "")

    frames, d = phase("PacketCorrupt", 1)
    wrong = [f for f in frames if f[0] == "success" and not f[2]]
    expect("PacketCorrupt: buffers complete", all(f[0] == "success" for f in frames), frames[:3])
    expect("PacketCorrupt: one buffer with wrong pixels", len(wrong) == 1, len(wrong))
    all_good("after PacketCorrupt", host.grab(10))

    # one lost packet whose resend the camera cannot serve
    frames, d = phase("ResendUnavailable", 1, extra=lambda: host.inject("PacketLoss", 1))
    failed = [f for f in frames if f[0] != "success"]
    expect("ResendUnavailable: an error packet", d["n_error_packets"] >= 1, d)
    expect("ResendUnavailable: one buffer failed", len(failed) == 1, [f[0] for f in frames])
    expect("ResendUnavailable counted", injected_now("ResendUnavailable") == 1, "")
    all_good("after ResendUnavailable", host.grab(10))

    def quiet_phase(kind, ms, n, min_gap_s, what):
        """A timed fault: the longest wait between buffers, and good buffers after it."""
        t0 = time.monotonic()
        frames, _ = phase(kind, ms, n=n)
        times = [f[3] for f in frames]
        gap = max(b - a_ for a_, b in zip([t0] + times, times))
        expect("%s: %s" % (kind, what), gap >= min_gap_s, gap)
        expect("%s: recovered" % kind, all(f[0] == "success" and f[2] for f in frames[-10:]),
               [f[0] for f in frames])
        return round(gap, 3)

    facts["stall_gap_s"] = quiet_phase("StreamStall", 600, 30, 0.45, "a gap of about 600 ms")
    facts["silence_gap_s"] = quiet_phase("ControlSilence", 1500, 40, 1.2,
                                         "quiet for about 1.5 s")
    expect("ControlSilence: control kept", not host.lost, "control-lost raised")
    expect("ControlSilence counted", injected_now("ControlSilence") == 1, "")

    host.inject("Reboot", 1000)
    deadline = time.monotonic() + 10
    while not host.lost and time.monotonic() < deadline:
        GLib.MainContext.default().iteration(False)
        time.sleep(0.05)
    expect("Reboot: aravis raises control-lost", host.lost, "no signal in 10 s")
    host.close()
    del host
    time.sleep(1.0)
    again = None
    for _ in range(20):
        try:
            again = Host(a.address, a.socket)
            break
        except GLib.Error:
            time.sleep(0.5)
    expect("Reboot: the camera is back", again is not None, "no answer")
    if again is not None:
        all_good("after Reboot", again.grab(10))
        expect("ControlSilence count kept across the reboot",
               again.injected("ControlSilence") - counted["ControlSilence"] == 1, "")
        # the counts are the run's (the test harness's view), kept across the reboot
        expect("Reboot counted", again.injected("Reboot") - counted["Reboot"] == 1, "")
        again.close()
    return report(problems, facts)


def report(problems, facts):
    print(json.dumps({"ok": not problems, "problems": problems, "facts": facts}))
    return 0 if not problems else 1


if __name__ == "__main__":
    sys.exit(main())
