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
tail -5 "$OUT/cm-camera.log"
[ $rc -eq 0 ] || exit $rc

# the same over IPv6 GIDs: ORSP on fd00::2, GVCP still IPv4 (on another port)
ip addr add fd00::1/64 dev veth0 nodad
ip -n cam addr add fd00::2/64 dev veth1 nodad
ip netns exec cam "$BIN" run --ip 198.18.0.2 --gvcp-port 3957 --transport udp --cm-port 7471 \
    --roce-ip fd00::2 --width 256 --height 64 --fps 25 >"$OUT/cm-camera-v6.log" 2>&1 &
cam=$!
for _ in $(seq 50); do
  ip netns exec cam ss -lun | grep -q ':3957 ' && break
  sleep 0.1
done
ONCE=1 ROCE_HOST=fd00::1 ROCE_CAM=fd00::2 GVCP_PORT=3957 timeout 120 \
    /usr/bin/python3 "$LAB/orsp_cm_host.py" 198.18.0.1 198.18.0.2 7471 20
rc=$?
kill $cam 2>/dev/null
wait $cam 2>/dev/null
echo "--- IPv6 camera log (tail)"
tail -5 "$OUT/cm-camera-v6.log"
exit $rc
