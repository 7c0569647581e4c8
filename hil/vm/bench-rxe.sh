#!/bin/bash
# Guest script (the Soft-RoCE VM, hil/vm/README.md): the camera's userspace RoCEv2 sender into
# rxe against perftest's ib_write_bw over rxe0 in the same boot, for docs/BENCHMARKS.md.
# Env: FRAMES (default 60) of 1920x1080 Mono8; SIZE for ib_write_bw (default the frame size).
set -u
BIN=${RDMACAM_BIN:-$LAB/../../target/release/rdmacam}
OUT=${OUT:-/out}
FRAMES=${FRAMES:-60}
W=1920 H=1080
SIZE=${SIZE:-$((W * H))}
echo "BENCH cpus=$(nproc) kernel=$(uname -r)"
# 1. reference: ib_write_bw, both ends on rxe0 (rxe's loopback), RoCEv2 GID 1, MTU 1024
ib_write_bw -d rxe0 -x 1 -m 1024 -s "$SIZE" -n "$FRAMES" --report_gbits >"$OUT/bw-server.log" 2>&1 &
srv=$!
sleep 1
ib_write_bw -d rxe0 -x 1 -m 1024 -s "$SIZE" -n "$FRAMES" --report_gbits 198.18.0.1 >"$OUT/bw-client.log" 2>&1
wait $srv
gbit=$(awk '/^ *[0-9]+ +[0-9]+ /{print $4}' "$OUT/bw-client.log" | tail -1)
echo "BENCH ib_write_bw size=$SIZE iterations=$FRAMES gbit_per_s=$gbit"
# 2. ours: the emulator in netns cam, userspace RoCEv2 over veth into rxe0, host on librdmacm
ip netns exec cam "$BIN" run --ip 198.18.0.2 --transport udp --cm-port 7471 \
    --width $W --height $H --fps 1000 >"$OUT/bench-camera.log" 2>&1 &
cam=$!
sleep 1
BENCH=1 RDMACAM_W=$W RDMACAM_H=$H timeout 600 /usr/bin/python3 "$LAB/orsp_cm_host.py" \
    198.18.0.1 198.18.0.2 7471 "$FRAMES"
rc=$?
kill $cam; wait $cam 2>/dev/null
exit $rc
