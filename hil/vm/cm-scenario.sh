#!/bin/bash
# Guest script (runs inside the Soft-RoCE VM, see hil/vm/README.md): the emulator's userspace
# RoCEv2 transport in netns `cam` (198.18.0.2, no RDMA stack there), and a host on real librdmacm
# over rxe0 (198.18.0.1) connecting to it with rdma_connect().
set -u
BIN=${RDMACAM_BIN:-$LAB/../../target/release/rdmacam}
OUT=${OUT:-/out}
ip netns exec cam "$BIN" run --ip 198.18.0.2 --transport udp --cm-port 7471 \
    --width 256 --height 64 --fps 25 --pcap "$OUT/cm-camera.pcapng" >"$OUT/cm-camera.log" 2>&1 &
cam=$!
for _ in $(seq 50); do
  ip netns exec cam ss -lun | grep -q ':3956 ' && break
  sleep 0.1
done
timeout 300 /usr/bin/python3 "$LAB/orsp_cm_host.py" 198.18.0.1 198.18.0.2 7471 "${FRAMES:-100}"
rc=$?
kill $cam 2>/dev/null
wait $cam 2>/dev/null
echo "--- camera log (tail)"
tail -20 "$OUT/cm-camera.log"
exit $rc
