#!/usr/bin/env bash
# soak.sh SECONDS — ORSP at full rate for SECONDS while a busy loop takes one of the machine's
# cores: the camera (rdmacam run --transport udp) streams 1920x1080 Mono8 as fast as it can
# into the reference host, which checks every frame byte for byte. The memory (VmRSS) of both
# processes is sampled every 5 s. Fails when a frame is bad, a packet is sent twice (the link
# loses nothing, and the busy loop's delays are no loss), the stream stops, or either process
# grows by more than 16 MiB after the first sample.
#   cargo build --release -p rdmacam -p rdmacam-hil && scripts/soak.sh 600
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=${1:-600}
BIN=target/release
OUT=$(mktemp -d)
"$BIN/rdmacam" run --transport udp --ip 127.0.0.31 --gvcp-port 29631 --roce-port 29851 \
    --host-roce-port 29852 --fps 1000 --duration $((SECS + 60)) 2>"$OUT/camera.log" &
cam=$!
sleep 0.5
timeout $((SECS + 30)) sh -c 'while :; do :; done' &
hog=$!
"$BIN/rdmacam-host" --camera 127.0.0.31 --local 127.0.0.1 --gvcp-port 29631 \
    --camera-rx-port 29851 --rx-port 29852 --fps 1000 --duration "$SECS" --json \
    >"$OUT/host.json" 2>"$OUT/host.err" &
host=$!
rss() { awk '/^VmRSS/ { print $2 }' "/proc/$1/status" 2>/dev/null || echo 0; }
echo "t_s,camera_rss_kib,host_rss_kib" >"$OUT/rss.csv"
t=0
while kill -0 "$host" 2>/dev/null; do
  echo "$t,$(rss $cam),$(rss $host)" >>"$OUT/rss.csv"
  sleep 5
  t=$((t + 5))
done
rc=0
wait "$host" || rc=$?
kill "$hog" "$cam" 2>/dev/null || true
wait "$cam" 2>/dev/null || true
summary=$(tail -1 "$OUT/host.json")
echo "soak ${SECS}s: $summary"
python3 - "$OUT/rss.csv" "$summary" "$rc" <<'PY'
import csv, json, sys
rows = [r for r in csv.DictReader(open(sys.argv[1])) if r["camera_rss_kib"] != "0" and r["host_rss_kib"] != "0"]
s, rc = json.loads(sys.argv[2]), int(sys.argv[3])
first, last = rows[1] if len(rows) > 1 else rows[0], rows[-1]
grow = {k: int(last[k]) - int(first[k]) for k in ("camera_rss_kib", "host_rss_kib")}
print(f"memory after warm-up -> end: camera {first['camera_rss_kib']} -> {last['camera_rss_kib']} KiB, "
      f"host {first['host_rss_kib']} -> {last['host_rss_kib']} KiB ({len(rows)} samples)")
# nothing sent twice: the link loses nothing, and the busy loop's delays are no loss
ok = rc == 0 and s.get("frames_bad") == 0 and s.get("frames_received", 0) > 0 \
    and s.get("retransmitted_packets") == 0 and all(g <= 16 * 1024 for g in grow.values())
print("SOAK", "PASS" if ok else "FAIL", json.dumps(grow))
sys.exit(0 if ok else 1)
PY
