#!/bin/bash
# bench-aravis.sh — issue 9, item 4: the same aravis host (arv-camera-test-0.8) against aravis's
# own fake camera (arv-fake-gv-camera-0.8) and against `rdmacam run` (GVSP), 2048x2048 Mono8 at
# up to 100 fps, 1400-byte packets, 15 s each: frames per second (median of the tool's
# per-second lines) and each camera's CPU per frame (utime+stime over the run / frames).
# rdmacam runs at --link-mbps 10000 (its default is 1000, a GigE camera's pace), once with one
# datagram per GVSP packet (its default) and once with --gvsp-gso (GSO runs), to price the
# default that every host receive path reads correctly.
# The host runs at its defaults (its packet-socket receiver) for the first two rows. The GSO
# row runs it with --no-packet-socket: on loopback the kernel hands a GSO send to a packet
# socket unsegmented, and aravis's default receiver then sees one 64 KB "packet" and garbles
# the frame (a real NIC segments before anything is captured); its socket receiver gets the
# datagrams. That row prices GSO, not a host's default path.
#   cargo build --release -p rdmacam && scripts/bench-aravis.sh [RUNS]
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${1:-2}
TCK=$(getconf CLK_TCK)
cpu() { awk '{print $14 + $15}' "/proc/$1/stat"; }
one() { # label, the host's extra option (or ""), then the camera command
  local label=$1 host_opt=$2; shift 2
  "$@" >/dev/null 2>&1 &
  local cam=$!
  sleep 1
  local c0; c0=$(cpu "$cam")
  local out
  out=$(timeout 30 arv-camera-test-0.8 -n 127.0.0.1 -a ${host_opt:+"$host_opt"} --duration=15 \
      -w 2048 -h 2048 -f 100 2>&1 || true)
  local c1; c1=$(cpu "$cam")
  kill "$cam"; wait "$cam" 2>/dev/null || true
  python3 - "$label" "$out" "$((c1 - c0))" "$TCK" <<'PY'
import re, statistics, sys
label, out, ticks, tck = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
rates = [float(m) for m in re.findall(r"(\d+) frames/s", out)]
failures = re.findall(r"n_failures\s*=\s*(\d+)", out)
done = re.findall(r"n_completed_buffers\s*=\s*(\d+)", out)
frames = int(done[-1]) if done else 0
fps = statistics.median(rates) if rates else 0.0
cpu = ticks / tck
print(f"{label:14} fps={fps:.1f} frames={frames} camera_cpu_s={cpu:.2f} "
      f"camera_cpu_ms_per_frame={1000 * cpu / max(frames, 1):.2f} "
      f"host_failures={failures[-1] if failures else '?'}")
PY
}
for run in $(seq "$RUNS"); do
  echo "run $run"
  one aravis-fake "" arv-fake-gv-camera-0.8 -i 127.0.0.1
  one rdmacam-gvsp "" target/release/rdmacam run --ip 127.0.0.1 --width 2048 --height 2048 --fps 100 --link-mbps 10000
  one rdmacam-gso --no-packet-socket target/release/rdmacam run --ip 127.0.0.1 --width 2048 --height 2048 --fps 100 --link-mbps 10000 --gvsp-gso
done
