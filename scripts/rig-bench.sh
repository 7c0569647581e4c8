#!/usr/bin/env bash
# Many cameras from one process, each streaming ORSP (userspace RoCEv2) into its own reference
# host on this machine: aggregate goodput and the camera process's CPU per GB, for N cameras.
#   cargo build --release -p rdmacam -p rdmacam-hil && scripts/rig-bench.sh 1 4 16
# Each host takes FRAMES frames (default 200) of 1920x1080 Mono8 and checks every byte.
set -euo pipefail
cd "$(dirname "$0")/.."
FRAMES=${FRAMES:-200}
BIN=target/release
hz=$(getconf CLK_TCK)
for n in "$@"; do
    "$BIN/rdmacam" run --transport udp --ip 127.0.1.1 --cameras "$n" --serial BENCH \
        --fps 1000 --duration 600 2>/dev/null &
    cam=$!
    sleep 1
    t0=$(date +%s.%N)
    pids=()
    for k in $(seq 1 "$n"); do
        "$BIN/rdmacam-host" --camera "127.0.1.$k" --local "127.0.2.$k" --frames "$FRAMES" \
            --json --reconnect 0 > "/tmp/rig-bench.$k" 2>/dev/null &
        pids+=($!)
    done
    bad=0
    for p in "${pids[@]}"; do wait "$p" || bad=$((bad + 1)); done
    t1=$(date +%s.%N)
    read -r utime stime < <(awk '{print $14, $15}' "/proc/$cam/stat")
    kill "$cam"; wait "$cam" 2>/dev/null || true
    bytes=0; frames=0
    for k in $(seq 1 "$n"); do
        line=$(tail -1 "/tmp/rig-bench.$k")
        bytes=$((bytes + $(python3 -c "import json,sys; print(json.loads(sys.argv[1])['bytes_received'])" "$line")))
        frames=$((frames + $(python3 -c "import json,sys; print(json.loads(sys.argv[1])['frames_received'])" "$line")))
        rm -f "/tmp/rig-bench.$k"
    done
    python3 - "$n" "$bytes" "$frames" "$t0" "$t1" "$utime" "$stime" "$hz" "$bad" <<'PY'
import sys
n, b, f, t0, t1, u, s, hz, bad = sys.argv[1:]
secs = float(t1) - float(t0)
gb = int(b) / 1e9
cpu = (int(u) + int(s)) / int(hz)
print(f"cameras {n}: {f} frames, {gb:.2f} GB in {secs:.2f} s = {gb * 8 / secs:.2f} Gbit/s "
      f"aggregate, camera process {cpu:.2f} CPU-s = {cpu / gb:.2f} CPU-s per GB, "
      f"{bad} hosts failed")
PY
done
