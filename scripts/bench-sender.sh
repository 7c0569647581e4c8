#!/bin/bash
# bench-sender.sh — the camera's userspace RoCEv2 sender, with and without UDP GSO + gather I/O:
# camera CPU seconds per GB delivered and Gbit/s, 1920x1080 Mono8 at up to 1000 fps into the
# reference host (a separate process) on loopback; and in the same run the reference for both,
# a plain UDP sender of the same 4112-byte datagrams into a receiver that only drains
# (io/examples/udp_blast.rs). Numbers for docs/BENCHMARKS.md.
#   cargo build --release -p rdmacam -p rdmacam-hil -p rdmacam-io --example udp_blast
#   scripts/bench-sender.sh [FRAMES] [RUNS]
set -euo pipefail
cd "$(dirname "$0")/.."
FRAMES=${1:-300}
RUNS=${2:-3}
TCK=$(getconf CLK_TCK)
for run in $(seq "$RUNS"); do
  echo "run $run"
  target/release/examples/udp_blast sendmmsg 2 | sed 's/^/plain-udp /'
  target/release/examples/udp_blast gso 2 | sed 's/^/plain-udp /'
  for mode in gso no-gso; do
    flag=""; [[ $mode == no-gso ]] && flag="--no-gso"
    target/release/rdmacam run --ip 127.0.0.1 --transport udp --gvcp-port 29570 \
        --roce-port 29820 --host-roce-port 29821 --width 1920 --height 1080 --fps 1000 \
        $flag 2>/dev/null &
    cam=$!
    sleep 0.5
    json=$(target/release/rdmacam-host --camera 127.0.0.1 --local 127.0.0.1 --gvcp-port 29570 \
        --rx-port 29821 --camera-rx-port 29820 --frames "$FRAMES" --json 2>/dev/null | tail -1)
    read -r ut st < <(awk '{print $14, $15}' "/proc/$cam/stat")
    kill "$cam"; wait "$cam" 2>/dev/null || true
    python3 - "$mode" "$json" "$ut" "$st" "$TCK" <<'PY'
import json, sys
mode, j, ut, st, tck = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
cpu = (ut + st) / tck
gb = j["bytes_received"] / 1e9
print(f"{mode:7} frames={j['frames_received']} bad={j['frames_bad']} gbit_per_s={j['gbit_per_s']:.2f} "
      f"camera_cpu_s={cpu:.2f} camera_cpu_s_per_GB={cpu / gb:.3f}")
PY
  done
done
