#!/usr/bin/env python3
"""Every figure of the performance issue in one sitting, as `name=value` lines.

    scripts/perf-ratios.sh [--bin DIR] [--ab OLD_DIR] [--runs N] [--only SECTION,...]

DIR holds the release binaries (`rdmacam`, `rdmacam-host`, `examples/udp_blast`: those the
sections asked for use; default target/release). With --ab OLD_DIR each measurement runs for
both builds in turn, interleaved, so both see the same machine; the old build's figures are
printed with the suffix `_old`.

Sections (all by default):
  sender   the camera's sender against a plain UDP GSO sender (io/examples/udp_blast.rs) of
           the same 4112-byte datagrams: 300 frames of 1920x1080 Mono8 over loopback into
           rdmacam-host, flat out (--fps 10000, a rate no sender here reaches: at --fps 1000
           a fast CPU makes it a frame-rate cap of 16.6 Gbit/s, not the sender's limit), the
           camera at --link-mbps 100000 (its pacing above what loopback carries, as in the
           demo; the plain sender is not paced); rate and
           CPU per GB as ratios, per run, median; the camera's retransmissions on this
           lossless link (summed over the runs); and host_cpu_ratio, the reference host's CPU
           per GB over the camera's (below 1: the host keeps up), both over the stream (the
           host's JSON cpu_seconds; host_cpu_ratio_with_start counts its whole process), flat
           out and, as host_cpu_ratio_1000fps, at --fps 1000 (16.6 Gbit/s), a rate both can
           hold; and sender_cpu_ratio_paced, the camera's CPU per GB at its defaults (paced
           at 10 Gbit/s, a 10G NIC) and 300 fps (5 Gbit/s, half that link) over the same
           plain sender's: what a virtual camera costs a CI machine as users run it (no line)
           Issue 48's lines, against the plain pair with a receiver that reads as cheaply as
           Linux lets it (udp_blast gro / gro-paced: UDP GRO, recvmmsg, ppoll when empty):
           sender_cpu_ratio_gro / host_cpu_ratio_gro flat out (camera over the plain sender,
           the host's stream CPU over the plain receiver's), *_paced_gro at the camera's
           defaults (300 fps, paced at 10 Gbit/s) against the plain pair paced at 10 Gbit/s in
           64 KiB runs, *_1g_gro at --link-mbps 1000 --fps 50 against the pair paced at
           1 Gbit/s; and idle_camera_cpu_percent, a camera with no host over 5 s.
           sender_cpu_ratio_paced_gro_mem (no line): the camera at its defaults against the
           plain sender paced the same reading its payloads in turn from 12 MB (udp_blast
           gro-paced-mem: the camera's six 1080p frame slots) instead of one 4 KiB buffer
           that stays in the L1 cache: how much of the paced gap is reading frame memory;
           sender_cpu_ratio_1g_gro_mem the same at 1 Gbit/s
  busy     the same camera runs while a busy loop holds one core: retransmissions (summed)
  veth     the camera in its own network namespace, flat out at its default pace, into
           rdmacam-host across a veth pair at the default MTU of 1500 (path MTU 1024):
           retransmissions (summed; needs root, skipped otherwise)
  latency  TRAILER leaving the camera to the host seeing it, p99 over 300 frames at 100 fps and
           flat out (--fps 1000), the camera at its default link speed (a 10G NIC), from both
           sides' --latency-log on CLOCK_MONOTONIC; also split at the kernel's receive time;
           and the same with camera and host pinned to different CPUs (*_pinned: taskset), as
           on two machines, where the scheduler cannot put them on one CPU, and flat out with
           both pinned to one CPU (latency_p99_us_flat_one_cpu: what the unpinned runs meet in
           a spell where the scheduler keeps the two together; no line); the median of at
           least LATENCY_RUNS runs each (one build's p99 scatters 21-460 us between runs at
           1000 fps on this VM: three runs could not tell two builds apart). Beside each,
           the machine's own figure from the first build's udp_blast: the same frames, paced
           the same, from a plain UDP sender into a receiver that only drains and waits as the
           host does (*_plain), and into one that never sleeps (*_plain_spin: a core held;
           what is left is the machine taking the CPU away)
  sizes    issue 48's latency lines for every frame size a user may pick: 16x16 (one packet),
           640x480, 1920x1080 and 4096x3072 Mono8 (larger frames only add runs before the
           last; at 100 fps 4096x3072 already fills the camera's 10 Gbit/s pace), at 100 fps
           and flat out (--fps 1000), alone and beside a busy loop holding one core (*_busy):
           latency_p99_us_<fps>_<W>x<H>[_busy], the median of SIZE_RUNS runs' p99, each
           beside the machine's own figure (*_plain: udp_blast frames of the same size, paced
           the same, into a receiver that only drains)
  goodput  rdmacam demo, 300 frames at 0, 1 and 5 % loss (both directions), seeds 1-8
           interleaved: the lossy medians as ratios of the lossless one (100 frames and seeds
           1-5 until 2026-11-26: a 100-frame run at 1 % lasts 0.2 s, much of it the window's
           first growth, and its median moved by 10 % between identical builds)
  gvsp     aravis's fake camera and rdmacam (GVSP, its default one datagram per packet) into
           the same aravis host (arv-camera-test-0.8), 2048x2048 Mono8 at up to 100 fps, 10 s:
           frames per second and camera CPU per frame as rdmacam / aravis; and
           gvsp_user_cpu_ratio, the same for CPU in user mode only (the cameras' own code:
           on loopback the kernel part includes the host's receive path), and
           gvsp_kernel_cpu_ratio, rdmacam's kernel time per frame against the fake camera's
           whole CPU per frame: the floor gvsp_cpu_ratio meets if rdmacam's own code cost nothing
  rig      --cameras 1, 2 and 4 from one process, each into its own rdmacam-host: aggregate
           Gbit/s (rig_gbit_N)

The last line (one per build) says how many of issue 24's lines the figures measured met,
and names those not met, e.g.
`# lines: 13 of 14 met; not met: gvsp_cpu_ratio 0.52 (line <= 0.5)`.

Timings stay out of tests; docs/BENCHMARKS.md keeps the tables with dates and the machine.
"""
import argparse
import json
import operator
import os
import re
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# fixed ports below Linux's ephemeral range (32768-60999)
GVCP, CAM_ROCE, HOST_ROCE = 29580, 29880, 29881


def cpu_s(pid):
    """The CPU seconds of `pid`'s live threads, to the nanosecond (/proc/PID/task/*/schedstat;
    /proc/PID/stat counts in clock ticks of 10 ms, 5 % of a 300-frame run)."""
    total = 0
    for t in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{t}/schedstat") as f:
                total += int(f.read().split()[0])
        except FileNotFoundError:  # the thread ended meanwhile
            pass
    return total / 1e9


def user_s(pid):
    """The user-mode CPU seconds of `pid` (all its threads), in clock ticks (/proc/PID/stat's
    utime): coarse, but a 10 s GVSP run holds hundreds of them."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) / os.sysconf("SC_CLK_TCK")


def median(xs):
    return statistics.median(xs) if xs else float("nan")


def camera(bindir, args, ip="127.0.0.1", prefix=()):
    cmd = [*prefix, f"{bindir}/rdmacam", "run", "--ip", ip, "--transport", "udp", "--gvcp-port", str(GVCP),
           "--roce-port", str(CAM_ROCE), "--host-roce-port", str(HOST_ROCE), "--duration", "120"]
    p = subprocess.Popen(cmd + args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(0.5)
    return p


def host(bindir, frames, args=(), ip="127.0.0.1", prefix=(), local="127.0.0.1"):
    cmd = [*prefix, f"{bindir}/rdmacam-host", "--camera", ip, "--local", local, "--gvcp-port",
           str(GVCP), "--rx-port", str(HOST_ROCE), "--camera-rx-port", str(CAM_ROCE), "--frames",
           str(frames), "--json", *args]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=120).stdout
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    j = json.loads(out.strip().splitlines()[-1])
    # the host's own CPU seconds (it is the only child that ends meanwhile)
    j["host_cpu_s"] = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    return j


def host_stream_cpu(j):
    """The host's CPU seconds over the stream: its JSON's cpu_seconds (builds before f3a3b17
    report none: the whole process's then)."""
    return j.get("cpu_seconds", j["host_cpu_s"])


def stop(p):
    p.send_signal(signal.SIGTERM)
    try:
        p.wait(10)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()


# the sender section's frame rate: flat out (see the docstring)
SENDER_FPS = 10000
# the fewest runs of each latency figure (see the docstring)
LATENCY_RUNS = 8
# the sizes section: issue 48 asks for the median of at least five runs
SIZE_RUNS = 5
# the frame sizes of the sizes section: one packet, VGA, 1080p, 12 MP (Mono8)
LATENCY_SIZES = ((16, 16), (640, 480), (1920, 1080), (4096, 3072))


def on_cpu(pin):
    """The command prefix that runs a process on CPU n when `pin` (taskset), else none: the
    sender goes on CPU 0 and the receiver on CPU 1, as on two machines; `pin` "one": both on
    CPU 0."""
    if pin == "one":
        return lambda n: ["taskset", "-c", "0"]
    return (lambda n: ["taskset", "-c", str(n)]) if pin else (lambda n: [])


def camera_into_host(bindir, frames=300, fps=1000, cam_args=(), host_args=(), link=100000,
                     pin=False, size=(1920, 1080)):
    """One camera streaming `frames` frames into rdmacam-host: the host's JSON, camera CPU s.
    `link`: the camera's --link-mbps (100000 by default: loopback is no 10G link, pace only
    above what it carries, as the demo does; None: the camera's default, a 10G NIC).
    `pin`: camera on CPU 0 and host on CPU 1 (taskset), as a host and camera on two machines;
    "one": both on CPU 0 (on_cpu)."""
    pace = ["--link-mbps", str(link)] if link else []
    cpu = on_cpu(pin)
    cam = camera(bindir, ["--width", str(size[0]), "--height", str(size[1]), "--fps", str(fps),
                          *pace,
                          *cam_args], prefix=cpu(0))
    try:
        c0 = cpu_s(cam.pid)
        j = host(bindir, frames, host_args, prefix=cpu(1))
        c1 = cpu_s(cam.pid)
    finally:
        stop(cam)
    return j, c1 - c0


def across_veth(bindir, frames=300):
    """A camera in its own network namespace streaming `frames` frames of 1920x1080 Mono8 flat
    out (--fps 1000, at its default 10G pace) into rdmacam-host across a veth pair at its
    default MTU of 1,500 bytes (path MTU 1024): the host's JSON. Needs root."""
    tag = f"rdpr{os.getpid() % 100000}"
    ns, hif, cif = f"{tag}-ns", f"{tag}h", f"{tag}c"
    net = f"10.79.{os.getpid() % 200 + 20}"
    h, c = f"{net}.1", f"{net}.2"
    try:
        # inside the try: a step that fails still leaves no namespace or link behind
        subprocess.run(["sh", "-c", f"ip netns add {ns} && ip link add {hif} type veth peer name "
                        f"{cif} netns {ns} && ip addr add {h}/24 dev {hif} && ip link set {hif} up "
                        f"&& ip -n {ns} addr add {c}/24 dev {cif} && ip -n {ns} link set {cif} up "
                        f"&& ip -n {ns} link set lo up"], check=True)
        cam = camera(bindir, ["--width", "1920", "--height", "1080", "--fps", "1000"], ip=c,
                     prefix=("ip", "netns", "exec", ns))
        try:
            return host(bindir, frames, ip=c, local=h)
        finally:
            stop(cam)
    finally:
        subprocess.run(["sh", "-c", f"ip link del {hif} 2>/dev/null; ip netns del {ns}"])


def udp_blast_gro(bindir, pace_mbps=None, gb=2, mem=False):
    """The plain pair of issue 48: udp_blast's GSO sender, flat out or paced to `pace_mbps` in
    64 KiB runs, into a receiver with UDP GRO and recvmmsg. (sender s/GB, receiver s/GB).
    `mem`: payloads read in turn from 12 MB of memory (gro-mem, gro-paced-mem)."""
    mode = ["gro"] if pace_mbps is None else ["gro-paced", str(pace_mbps)]
    if mem:
        mode[0] += "-mem"
    out = subprocess.run([f"{bindir}/examples/udp_blast", *mode, str(gb)], capture_output=True,
                         text=True, timeout=120).stdout
    m = dict(re.findall(r"(\w+)=([\d.]+)", out))
    return float(m["sender_cpu_s_per_GB"]), float(m["receiver_cpu_s_per_GB"])


def idle_cpu_percent(bindir, seconds=5):
    """A camera with no host: its CPU over `seconds`, % of one core."""
    cam = camera(bindir, [])
    try:
        time.sleep(0.5)
        c0 = cpu_s(cam.pid)
        time.sleep(seconds)
        return 100 * (cpu_s(cam.pid) - c0) / seconds
    finally:
        stop(cam)


def udp_blast(bindir):
    out = subprocess.run([f"{bindir}/examples/udp_blast", "gso", "2"], capture_output=True,
                         text=True, timeout=120).stdout
    m = dict(re.findall(r"(\w+)=([\d.]+)", out))
    return float(m["gbit_per_s"]), float(m["sender_cpu_s_per_GB"])


class Sitting:
    def __init__(self, builds, runs):
        self.builds = builds  # [(suffix, bindir)]
        self.runs = runs
        self.figures = []

    def turns(self, k):
        """The builds in the order of round `k`, alternating: on this VM the second of two
        back-to-back runs tended to come out faster (by a few %; 5 % loss goodput, 12 seeds
        each way: new/old 1.03 with old first, 0.96 with new first)."""
        return self.builds if k % 2 == 0 else self.builds[::-1]

    def put(self, name, value, suffix):
        line = f"{name}{suffix}={value}"
        self.figures.append(line)
        print(line, flush=True)

    def sender(self):
        rate = {s: [] for s, _ in self.builds}
        cpu = {s: [] for s, _ in self.builds}
        retx = {s: 0 for s, _ in self.builds}
        host_cpu = {s: [] for s, _ in self.builds}
        host_cpu_paced = {s: [] for s, _ in self.builds}
        host_cpu_start = {s: [] for s, _ in self.builds}
        cpu_paced = {s: [] for s, _ in self.builds}
        gro = {s: {k: [] for k in ("cam_flat", "host_flat", "cam_paced", "host_paced", "cam_1g",
                                   "host_1g", "cam_paced_mem", "cam_1g_mem")} for s, _ in self.builds}
        idle = {s: [] for s, _ in self.builds}
        for k in range(self.runs):
            for s, b in self.turns(k):
                # issue 48: against the plain GRO pair, flat out, paced at 10 Gbit/s, at 1 Gbit/s
                g = gro[s]
                ref_flat, ref_flat_rx = udp_blast_gro(self.builds[0][1])
                ref_paced, ref_paced_rx = udp_blast_gro(self.builds[0][1], 10_000, 1)
                ref_paced_mem = udp_blast_gro(self.builds[0][1], 10_000, 1, mem=True)[0]
                ref_1g, ref_1g_rx = udp_blast_gro(self.builds[0][1], 1_000, 0.2)
                ref_1g_mem = udp_blast_gro(self.builds[0][1], 1_000, 0.2, mem=True)[0]
                j, c = camera_into_host(b, frames=100, fps=50, link=1000)
                gb = j["bytes_received"] / 1e9
                g["cam_1g"].append(c / gb / ref_1g)
                g["host_1g"].append(host_stream_cpu(j) / gb / ref_1g_rx)
                g["cam_1g_mem"].append(c / gb / ref_1g_mem)
                idle[s].append(idle_cpu_percent(b))
                print(f"# sender{s} vs GRO pair: plain flat {ref_flat:.3f} / {ref_flat_rx:.3f}, "
                      f"paced 10G {ref_paced:.3f} / {ref_paced_rx:.3f}, 1G {ref_1g:.3f} / "
                      f"{ref_1g_rx:.3f} s/GB (sender / receiver), the sender at 1G from 12 MB "
                      f"{ref_1g_mem:.3f}; camera at 1G {c / gb:.3f}, host "
                      f"{host_stream_cpu(j) / gb:.3f}; idle camera {idle[s][-1]:.2f} % of a core",
                      flush=True)
                j, c = camera_into_host(b, frames=600, fps=300, link=None)
                paced_s_per_gb = c / (j["bytes_received"] / 1e9)
                g["cam_paced"].append(paced_s_per_gb / ref_paced)
                g["cam_paced_mem"].append(paced_s_per_gb / ref_paced_mem)
                g["host_paced"].append(host_stream_cpu(j) / (j["bytes_received"] / 1e9)
                                       / ref_paced_rx)
                print(f"# sender{s} at its default pace, 300 fps: camera {j['gbit_per_s']:.2f} "
                      f"Gbit/s {paced_s_per_gb:.3f} s/GB; plain paced from 12 MB of memory "
                      f"{ref_paced_mem:.3f}", flush=True)
                j, c = camera_into_host(b, fps=1000)
                host_cpu_paced[s].append(host_stream_cpu(j) / c)
                print(f"# sender{s} at 1000 fps: camera {j['gbit_per_s']:.2f} Gbit/s, host CPU "
                      f"{host_stream_cpu(j) / c:.2f}x the camera's", flush=True)
                ref_gbit, ref_cpu = udp_blast(b)
                j, c = camera_into_host(b, fps=SENDER_FPS)
                gb = j["bytes_received"] / 1e9
                rate[s].append(j["gbit_per_s"] / ref_gbit)
                cpu[s].append((c / gb) / ref_cpu)
                cpu_paced[s].append(paced_s_per_gb / ref_cpu)
                g["cam_flat"].append((c / gb) / ref_flat)
                g["host_flat"].append(host_stream_cpu(j) / gb / ref_flat_rx)
                retx[s] += j["retransmitted_packets"]
                host_cpu[s].append(host_stream_cpu(j) / c)
                host_cpu_start[s].append(j["host_cpu_s"] / c)
                print(f"# sender{s}: plain {ref_gbit:.2f} Gbit/s {ref_cpu:.3f} s/GB; camera "
                      f"{j['gbit_per_s']:.2f} Gbit/s {c / gb:.3f} s/GB, host "
                      f"{host_stream_cpu(j) / gb:.3f} s/GB "
                      f"({j['host_cpu_s'] / gb:.3f} with its start-up), "
                      f"{j['retransmitted_packets']} retransmitted, {j['frames_bad']} bad",
                      flush=True)
        for s, _ in self.builds:
            self.put("sender_rate_ratio", f"{median(rate[s]):.2f}", s)
            self.put("sender_cpu_ratio", f"{median(cpu[s]):.2f}", s)
            self.put("lossless_retransmitted", retx[s], s)
            # the reference host's CPU per GB over the camera's (below 1: it keeps up), the
            # host's over the stream (its JSON's cpu_seconds) as the camera's is
            self.put("host_cpu_ratio", f"{median(host_cpu[s]):.2f}", s)
            # the same with the host's whole process: its start-up (~25 ms, mostly the faults
            # of 32 MB of frame buffers) is ~10 % of a 300-frame run's CPU
            self.put("host_cpu_ratio_with_start", f"{median(host_cpu_start[s]):.2f}", s)
            # the same at --fps 1000 (16.6 Gbit/s): flat out, camera and host each fill one of
            # two vCPUs and the ratio only says how the machine is shared; at a frame rate both
            # can hold, it says which of them works harder per byte
            self.put("host_cpu_ratio_1000fps", f"{median(host_cpu_paced[s]):.2f}", s)
            # at the camera's defaults: paced at 10 Gbit/s in runs of one GSO send, sleeping
            # between them (it used to wake for each packet's slot, 3.3 us apart, and never
            # slept: docs/benchmarks-history.md)
            self.put("sender_cpu_ratio_paced", f"{median(cpu_paced[s]):.2f}", s)
            # issue 48's lines, against the plain GRO pair (udp_blast gro / gro-paced)
            g = gro[s]
            self.put("sender_cpu_ratio_gro", f"{median(g['cam_flat']):.2f}", s)
            self.put("host_cpu_ratio_gro", f"{median(g['host_flat']):.2f}", s)
            self.put("sender_cpu_ratio_paced_gro", f"{median(g['cam_paced']):.2f}", s)
            self.put("sender_cpu_ratio_paced_gro_mem", f"{median(g['cam_paced_mem']):.2f}", s)
            self.put("host_cpu_ratio_paced_gro", f"{median(g['host_paced']):.2f}", s)
            self.put("sender_cpu_ratio_1g_gro", f"{median(g['cam_1g']):.2f}", s)
            self.put("sender_cpu_ratio_1g_gro_mem", f"{median(g['cam_1g_mem']):.2f}", s)
            self.put("host_cpu_ratio_1g_gro", f"{median(g['host_1g']):.2f}", s)
            self.put("idle_camera_cpu_percent", f"{median(idle[s]):.2f}", s)

    def busy(self):
        retx = {s: 0 for s, _ in self.builds}
        spin = subprocess.Popen(["sh", "-c", "while :; do :; done"])
        try:
            for k in range(self.runs):
                for s, b in self.turns(k):
                    j, _ = camera_into_host(b)
                    retx[s] += j["retransmitted_packets"]
                    print(f"# busy{s}: {j['gbit_per_s']:.2f} Gbit/s, "
                          f"{j['retransmitted_packets']} retransmitted", flush=True)
        finally:
            spin.kill()
            spin.wait()
        for s, _ in self.builds:
            self.put("busy_lossless_retransmitted", retx[s], s)

    def veth(self):
        if os.geteuid() != 0 or shutil.which("ip") is None:
            print("# veth: skipped (a network namespace needs root and iproute2)", flush=True)
            return
        retx = {s: 0 for s, _ in self.builds}
        for k in range(self.runs):
            for s, b in self.turns(k):
                j = across_veth(b)
                retx[s] += j["retransmitted_packets"]
                print(f"# veth{s}: {j['frames_received']} frames, {j['frames_bad']} bad, "
                      f"{j['gbit_per_s']:.2f} Gbit/s, {j['retransmitted_packets']} retransmitted",
                      flush=True)
        for s, _ in self.builds:
            self.put("veth_lossless_retransmitted", retx[s], s)

    def latency(self):
        for fps, name, pin in [(100, "latency_p99_us_100fps", False),
                               (1000, "latency_p99_us_flat", False),
                               (100, "latency_p99_us_100fps_pinned", True),
                               (1000, "latency_p99_us_flat_pinned", True),
                               (1000, "latency_p99_us_flat_one_cpu", "one")]:
            p99 = {s: [] for s, _ in self.builds}
            for k in range(max(self.runs, LATENCY_RUNS)):
                for s, b in self.turns(k):
                    with tempfile.TemporaryDirectory() as d:
                        cam_log, host_log = f"{d}/cam.csv", f"{d}/host.csv"
                        camera_into_host(b, 300, fps, ["--latency-log", cam_log],
                                         ["--latency-log", host_log], link=None, pin=pin)
                        time.sleep(0.2)
                        p99[s].append(latency_p99(cam_log, host_log))
            for s, _ in self.builds:
                self.put(name, f"{median(p99[s]):.1f}", s)
            # the machine's own figure in the same sitting: plain UDP, no protocol
            for spin in ([False, True] if not pin else [False]):
                plain = [plain_latency_p99(self.builds[0][1], fps, pin, spin)
                         for _ in range(max(self.runs, LATENCY_RUNS))]
                self.put(f"{name}_plain{'_spin' if spin else ''}", f"{median(plain):.1f}", "")

    def sizes(self):
        for busy in (False, True):
            spin = subprocess.Popen(["sh", "-c", "while :; do :; done"]) if busy else None
            try:
                for w, h in LATENCY_SIZES:
                    for fps, rate in ((100, "100fps"), (1000, "flat")):
                        name = f"latency_p99_us_{rate}_{w}x{h}{'_busy' if busy else ''}"
                        p99 = {s: [] for s, _ in self.builds}
                        for k in range(max(self.runs, SIZE_RUNS)):
                            for s, b in self.turns(k):
                                with tempfile.TemporaryDirectory() as d:
                                    cam_log, host_log = f"{d}/cam.csv", f"{d}/host.csv"
                                    # a frame past the default 2048x2048 sensor needs a
                                    # larger one
                                    sensor = ["--sensor-width", str(max(w, 2048)),
                                              "--sensor-height", str(max(h, 2048))]
                                    camera_into_host(b, 300, fps,
                                                     ["--latency-log", cam_log, *sensor],
                                                     ["--latency-log", host_log], link=None,
                                                     size=(w, h))
                                    time.sleep(0.2)
                                    p99[s].append(latency_p99(cam_log, host_log))
                        for s, _ in self.builds:
                            self.put(name, f"{median(p99[s]):.1f}", s)
                        plain = [plain_latency_p99(self.builds[0][1], fps, False, False, (w, h))
                                 for _ in range(max(self.runs, SIZE_RUNS))]
                        self.put(f"{name}_plain", f"{median(plain):.1f}", "")
            finally:
                if spin:
                    spin.kill()
                    spin.wait()

    def goodput(self):
        g = {(s, loss): [] for s, _ in self.builds for loss in (0, 0.01, 0.05)}
        for seed in range(1, 9):
            for loss in (0, 0.01, 0.05):
                for s, b in self.turns(seed):
                    out = subprocess.run(
                        [f"{b}/rdmacam", "demo", "--frames", "300", "--fps", "1000", "--loss",
                         str(loss), "--seed", str(seed), "--json"],
                        capture_output=True, text=True, timeout=300).stdout
                    g[(s, loss)].append(json.loads(out.strip().splitlines()[-1])["gbit_per_s"])
        for s, _ in self.builds:
            m0 = median(g[(s, 0)])
            print(f"# goodput{s}: lossless {m0:.2f} Gbit/s, 1 % {median(g[(s, 0.01)]):.2f}, "
                  f"5 % {median(g[(s, 0.05)]):.2f}", flush=True)
            self.put("goodput_ratio_1pct", f"{median(g[(s, 0.01)]) / m0:.2f}", s)
            self.put("goodput_ratio_5pct", f"{median(g[(s, 0.05)]) / m0:.2f}", s)

    def gvsp(self):
        fps = {s: [] for s, _ in self.builds}
        cpu = {s: [] for s, _ in self.builds}
        user = {s: [] for s, _ in self.builds}
        kernel = {s: [] for s, _ in self.builds}
        for k in range(self.runs):
            ref = aravis_host(["arv-fake-gv-camera-0.8", "-i", "127.0.0.1"])
            for s, b in self.turns(k):
                mine = aravis_host([f"{b}/rdmacam", "run", "--ip", "127.0.0.1", "--width", "2048",
                                    "--height", "2048", "--fps", "100", "--link-mbps", "10000"])
                fps[s].append(mine[0] / ref[0])
                cpu[s].append(mine[1] / ref[1])
                user[s].append(mine[2] / max(ref[2], 1e-9))
                kernel[s].append((mine[1] - mine[2]) / ref[1])
                print(f"# gvsp{s}: aravis fake {ref[0]:.1f} fps {1000 * ref[1]:.2f} ms/frame "
                      f"({1000 * ref[2]:.2f} in user mode); rdmacam {mine[0]:.1f} fps "
                      f"{1000 * mine[1]:.2f} ms/frame ({1000 * mine[2]:.2f})", flush=True)
        for s, _ in self.builds:
            self.put("gvsp_fps_ratio", f"{median(fps[s]):.2f}", s)
            self.put("gvsp_cpu_ratio", f"{median(cpu[s]):.2f}", s)
            # the cameras' own code: without the kernel's send path and the aravis host's
            # receive softirq, which loopback runs in the sender's system call (BENCHMARKS)
            self.put("gvsp_user_cpu_ratio", f"{median(user[s]):.2f}", s)
            # rdmacam's kernel time alone against the fake camera's whole CPU: the floor
            # gvsp_cpu_ratio meets when the camera's own code costs nothing
            self.put("gvsp_kernel_cpu_ratio", f"{median(kernel[s]):.2f}", s)

    def rig(self):
        for n in (1, 2, 4):
            gbit = {s: [] for s, _ in self.builds}
            for k in range(self.runs):
                for s, b in self.turns(k):
                    gbit[s].append(rig_gbit(b, n))
            for s, _ in self.builds:
                self.put(f"rig_gbit_{n}", f"{median(gbit[s]):.2f}", s)


def latency_p99(cam_log, host_log):
    """p99 of TRAILER leaving the camera to the host seeing it, µs; and of its two parts: to
    the host's socket (kernel receive timestamp), and from there to the host."""
    def load(p):
        with open(p) as f:
            return {int(r[0]): [int(v) for v in r[1:]] for r in
                    (l.split(",") for l in f.read().split()[1:])}
    def p99(xs):
        xs = sorted(xs)
        return xs[min(len(xs) - 1, int(0.99 * len(xs)))] if xs else float("nan")
    sent, seen = load(cam_log), load(host_log)
    both = [b for b in seen if b in sent]
    total = p99((seen[b][0] - sent[b][0]) / 1000 for b in both)
    split = [b for b in both if len(seen[b]) > 1 and seen[b][1] > 0]
    to_socket = p99((seen[b][1] - sent[b][0]) / 1000 for b in split)
    host = p99((seen[b][0] - seen[b][1]) / 1000 for b in split)
    print(f"#   p99 {total:.1f} us: to the host's socket {to_socket:.1f}, in the host {host:.1f}",
          flush=True)
    return total


def plain_latency_p99(bindir, fps, pin, spin, size=(1920, 1080)):
    """The same frames as the latency figures from a plain UDP sender into a receiver that
    only drains (`udp_blast frames` / `frames-sink`, the host's waits: recvmmsg with GRO, ppoll
    of 1 ms; `spin`: never sleeps), TRAILER leaving to the receiver seeing it, p99 in us."""
    blast = f"{bindir}/examples/udp_blast"
    cpu = on_cpu(pin)
    sink = subprocess.Popen([*cpu(1), blast, "frames-sink", str(HOST_ROCE), "300",
                             *(["spin"] if spin else [])], stdout=subprocess.PIPE, text=True)
    try:
        time.sleep(0.3)
        subprocess.run([*cpu(0), blast, "frames", str(HOST_ROCE), "300", str(fps), "10000",
                        str(size[0] * size[1])], timeout=60, check=True)
        out, _ = sink.communicate(timeout=30)
    finally:
        if sink.poll() is None:
            sink.kill()
            sink.wait()
    if sink.returncode != 0:
        sys.exit(f"perf-ratios: udp_blast frames-sink failed (exit {sink.returncode})")
    m = dict(re.findall(r"(\w+)=([\d.]+)", out))
    print(f"#   plain{' spin' if spin else ''}: p99 {m['p99_us']} us: to the socket "
          f"{m['to_socket_p99_us']}, in the receiver {m['in_sink_p99_us']}", flush=True)
    return float(m["p99_us"])


def aravis_host(camera_cmd):
    """The aravis host against a camera on 127.0.0.1: (frames per second, camera CPU s/frame,
    the part of it in user mode s/frame)."""
    cam = subprocess.Popen(camera_cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(1)
        c0, u0 = cpu_s(cam.pid), user_s(cam.pid)
        out = subprocess.run(
            ["arv-camera-test-0.8", "-n", "127.0.0.1", "-a", "--duration=10", "-w", "2048",
             "-h", "2048", "-f", "100"], capture_output=True, text=True, timeout=40).stdout
        c1, u1 = cpu_s(cam.pid), user_s(cam.pid)
    finally:
        stop(cam)
    rates = [float(x) for x in re.findall(r"(\d+) frames/s", out)]
    done = re.findall(r"n_completed_buffers\s*=\s*(\d+)", out)
    frames = max(int(done[-1]) if done else 0, 1)
    return median(rates) if rates else 0.0, (c1 - c0) / frames, (u1 - u0) / frames


def rig_gbit(bindir, n):
    cam = subprocess.Popen(
        [f"{bindir}/rdmacam", "run", "--transport", "udp", "--ip", "127.0.1.1", "--cameras",
         str(n), "--serial", "BENCH", "--fps", "1000", "--duration", "120"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(1)
        t0 = time.time()
        hosts = [subprocess.Popen(
            [f"{bindir}/rdmacam-host", "--camera", f"127.0.1.{k}", "--local", f"127.0.2.{k}",
             "--frames", "200", "--json", "--reconnect", "0"],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True) for k in range(1, n + 1)]
        total = 0
        for h in hosts:
            out, _ = h.communicate(timeout=120)
            total += json.loads(out.strip().splitlines()[-1])["bytes_received"]
        secs = time.time() - t0
    finally:
        stop(cam)
    return total * 8 / secs / 1e9


# the binaries each section runs from a build directory, in the order the sections run
NEEDS = {
    "sender": ("rdmacam", "rdmacam-host", "examples/udp_blast"),
    "busy": ("rdmacam", "rdmacam-host"),
    "veth": ("rdmacam", "rdmacam-host"),
    "latency": ("rdmacam", "rdmacam-host", "examples/udp_blast"),
    "sizes": ("rdmacam", "rdmacam-host", "examples/udp_blast"),
    "goodput": ("rdmacam",),
    "gvsp": ("rdmacam",),
    "rig": ("rdmacam", "rdmacam-host"),
}
SECTIONS = tuple(NEEDS)
ARAVIS_TOOLS = ("arv-camera-test-0.8", "arv-fake-gv-camera-0.8")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin", default=f"{ROOT}/target/release")
    ap.add_argument("--ab", help="an older build's binaries, measured in the same sitting")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--only", default=",".join(SECTIONS))
    a = ap.parse_args()
    builds = [("", a.bin)] + ([("_old", a.ab)] if a.ab else [])
    sections = a.only.split(",")
    unknown = [x for x in sections if x not in SECTIONS]
    if unknown:
        sys.exit(f"perf-ratios: no section {', '.join(unknown)} (there are {', '.join(SECTIONS)})")
    # every build runs its own camera, host and plain sender, as far as the sections asked
    # for use them: find them all before the first minute is spent, not after
    wanted = sorted({x for sec in sections for x in NEEDS[sec]})
    for _, b in builds:
        missing = [x for x in wanted if not os.access(f"{b}/{x}", os.X_OK)]
        if missing:
            sys.exit(f"perf-ratios: {b} has no {', '.join(missing)}; build them there with "
                     "`cargo build --release -p rdmacam -p rdmacam-hil && cargo build --release "
                     "-p rdmacam-io --example udp_blast` (CARGO_TARGET_DIR for another tree)")
    tools = [t for t in ARAVIS_TOOLS if shutil.which(t) is None] if "gvsp" in sections else []
    if tools:
        sys.exit(f"perf-ratios: the gvsp section needs {', '.join(tools)} "
                 "(Debian's aravis-tools; scripts/setup.sh installs it)")
    s = Sitting(builds, a.runs)
    print(f"# {time.strftime('%Y-%m-%d %H:%M')} {cpu_model()}, {os.cpu_count()} CPUs; "
          f"runs {a.runs}; " + ", ".join(f"{b}{x}" for x, b in builds), flush=True)
    # what a socket may have decides what a host drops: sittings on a machine with these
    # raised (4 MiB) once hid resends every default Debian user saw
    print(f"# {socket_limits()}; uid {os.geteuid()}", flush=True)
    for section in sections:
        getattr(s, section)()
    for suffix, _ in builds:
        print(verdict(s.figures, suffix), flush=True)


# issue 24's lines, for the summary at the end: (figure, comparison, bound)
LINES = [
    ("sender_rate_ratio", ">=", 0.9), ("sender_cpu_ratio", "<=", 1.2),
    ("lossless_retransmitted", "==", 0), ("busy_lossless_retransmitted", "==", 0),
    ("veth_lossless_retransmitted", "==", 0),
    ("host_cpu_ratio", "<", 1), ("host_cpu_ratio_1000fps", "<", 1),
    ("latency_p99_us_100fps", "<=", 50), ("latency_p99_us_flat", "<=", 50),
    ("goodput_ratio_1pct", ">=", 0.8), ("goodput_ratio_5pct", ">=", 0.4),
    ("gvsp_fps_ratio", ">=", 2), ("gvsp_cpu_ratio", "<=", 0.5),
    # issue 48
    ("sender_cpu_ratio_gro", "<=", 1.5), ("host_cpu_ratio_gro", "<=", 2),
    ("sender_cpu_ratio_paced_gro", "<=", 1.3), ("host_cpu_ratio_paced_gro", "<=", 2),
    ("sender_cpu_ratio_1g_gro", "<=", 1.3), ("host_cpu_ratio_1g_gro", "<=", 2),
    ("idle_camera_cpu_percent", "<", 1),
]
COMPARE = {">=": operator.ge, "<=": operator.le, "<": operator.lt, "==": operator.eq}


def verdict(figures, suffix):
    """One comment line: how many of the lines this sitting measured were met, and which not.
    The rig's line is that two cameras carry more than one (this machine's two cores)."""
    got = {}
    for f in figures:
        name, value = f.split("=", 1)
        if name.endswith(suffix):
            got[name.removesuffix(suffix)] = float(value)
    checks = [(f"{n} {v:g} (line {op} {b:g})", COMPARE[op](v, b))
              for n, op, b in LINES if (v := got.get(n)) is not None]
    # issue 48: p99 <= 50 us at every frame size, alone and beside a busy loop
    checks += [(f"{n} {v:g} (line <= 50)", v <= 50) for n, v in got.items()
               if n.startswith("latency_p99_us_") and n.count("x") == 1
               and not n.endswith("_plain")]
    if "rig_gbit_1" in got and "rig_gbit_2" in got:
        checks.append((f"rig_gbit_2 {got['rig_gbit_2']:g} (line > rig_gbit_1, {got['rig_gbit_1']:g})",
                       got["rig_gbit_2"] > got["rig_gbit_1"]))
    missed = [c for c, ok in checks if not ok]
    return (f"# lines{suffix or ''}: {len(checks) - len(missed)} of {len(checks)} met"
            + (f"; not met: {', '.join(missed)}" if missed else ""))


def socket_limits():
    """The kernel's socket buffer caps (Debian's default: 212992 each)."""
    out = []
    for name in ("rmem_max", "wmem_max"):
        try:
            with open(f"/proc/sys/net/core/{name}") as f:
                out.append(f"net.core.{name}={f.read().strip()}")
        except OSError:
            out.append(f"net.core.{name}=unknown")
    return ", ".join(out)


def cpu_model():
    with open("/proc/cpuinfo") as f:
        m = re.search(r"model name\s*:\s*(.*)", f.read())
    return m.group(1) if m else "unknown CPU"


if __name__ == "__main__":
    sys.exit(main())
