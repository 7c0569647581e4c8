#!/bin/bash
# Guest script (the Soft-RoCE VM, hil/vm/README.md): our senders into rxe against perftest's
# ib_write_bw over rxe0 in the same boot, for docs/BENCHMARKS.md (issue 9, item 3).
#   OUT=/tmp/bench hil/vm/run-vm.sh hil/vm/bench-rxe.sh      (after building with
#   cargo build --release -p rdmacam -p rdmacam-hil --features rdmacam/verbs --bins && cargo build --release -p rdmacam-io --example udp_blast)
# Env: FRAMES (default 60) of 1920x1080 Mono8; SIZE for ib_write_bw (default the frame size).
set -u
REL=${RDMACAM_REL:-$LAB/../../target/release}
OUT=${OUT:-/out}
FRAMES=${FRAMES:-60}
W=1920 H=1080
SIZE=${SIZE:-$((W * H))}
ip link set veth0 mtu 9000
ip -n cam link set veth1 mtu 9000
ip addr add 198.18.0.3/24 dev veth0
sleep 0.5
echo "BENCH cpus=$(nproc) kernel=$(uname -r) path_mtu=4096"
# 1. reference: ib_write_bw, both ends on rxe0 (rxe's loopback), RoCEv2 GID 1
ib_write_bw -d rxe0 -x 1 -m 4096 -s "$SIZE" -n "$FRAMES" --report_gbits >"$OUT/bw-server.log" 2>&1 &
srv=$!
sleep 1
ib_write_bw -d rxe0 -x 1 -m 4096 -s "$SIZE" -n "$FRAMES" --report_gbits 198.18.0.1 >"$OUT/bw-client.log" 2>&1
wait $srv
gbit=$(awk '/^ *[0-9]+ +[0-9]+ /{print $4}' "$OUT/bw-client.log" | tail -1)
echo "BENCH ib_write_bw size=$SIZE iterations=$FRAMES gbit_per_s=$gbit"
# 1b. the path's own ceiling: plain UDP GSO datagrams of the same size from netns cam across
# the veth pair to a draining socket in the root namespace (no rxe, no RDMA)
"$REL/examples/udp_blast" sink 9000 >"$OUT/sink.log" 2>&1 &
sink=$!
sleep 0.5
ip netns exec cam "$REL/examples/udp_blast" gso 0.5 198.18.0.2 198.18.0.1:9000 >"$OUT/blast.log" 2>&1
wait $sink
echo "BENCH plain-udp-gso-over-veth $(grep -o 'gbit_per_s=[0-9.]*' "$OUT/sink.log") $(grep -o 'sender_cpu_s_per_GB=[0-9.]*' "$OUT/blast.log")"
TCK=$(getconf CLK_TCK)
cpu_of() { awk -v t="$TCK" '{printf "camera_user_s=%.2f camera_sys_s=%.2f", $14 / t, $15 / t}' "/proc/$1/stat"; }
host() { # label camera-ip
  timeout 300 "$REL/rdmacam-host" --transport verbs --device rxe0 --camera "$2" \
      --local 198.18.0.1 --frames "$FRAMES" --buffers 32 --json 2>/dev/null | tail -1 \
    | python3 -c "import json,sys; j=json.load(sys.stdin); print(f\"BENCH $1 frames={j['frames_received']} bad={j['frames_bad']} dropped={j['frames_dropped']} gbit_per_s={j['gbit_per_s']:.3f} retransmitted={j['retransmitted_packets']}\")"
}
# 2./3. ours: the userspace RoCEv2 sender in netns cam over the veth pair into rxe0, with and
# without UDP GSO; the host is rdmacam-host on verbs (checks every frame). In one guest the
# receive half of the path (veth0's RX softirq: IP, UDP, rxe_rcv and its ICRC check) runs on
# the sending vCPU and is charged to the camera; "gso-rps" pins the camera to vCPU 0 and steers
# veth0's receive to vCPU 1 (RPS), as two machines would split it.
for mode in gso no-gso gso-rps; do
  flag=""; [[ $mode == no-gso ]] && flag="--no-gso"
  pin=""
  if [[ $mode == gso-rps ]]; then
    pin="taskset -c 0"
    echo 2 >/sys/class/net/veth0/queues/rx-0/rps_cpus
  fi
  ip netns exec cam $pin "$REL/rdmacam" run --ip 198.18.0.2 --transport udp --width $W \
      --height $H --fps 1000 $flag >"$OUT/bench-camera-$mode.log" 2>&1 &
  cam=$!
  sleep 1
  echo "$(host "udp-camera-$mode" 198.18.0.2) $(cpu_of $cam)"
  kill $cam; wait $cam 2>/dev/null
  echo 0 >/sys/class/net/veth0/queues/rx-0/rps_cpus
done
# 5. latency (issue 9, item 5): from a frame's last byte leaving the userspace camera (its
# TRAILER's first send) to rdmacam-host on verbs seeing the TRAILER, at a paced 30 fps and
# flat out; CLOCK_MONOTONIC is shared by the namespaces of one guest
for fps in 30 1000; do
  ip netns exec cam "$REL/rdmacam" run --ip 198.18.0.2 --transport udp --width $W --height $H \
      --fps $fps --latency-log "$OUT/lat-cam-$fps.csv" >"$OUT/lat-camera-$fps.log" 2>&1 &
  cam=$!
  sleep 1
  timeout 300 "$REL/rdmacam-host" --transport verbs --device rxe0 --camera 198.18.0.2 \
      --local 198.18.0.1 --frames "$FRAMES" --buffers 32 --latency-log "$OUT/lat-host-$fps.csv" \
      >/dev/null 2>&1
  kill -INT $cam; wait $cam 2>/dev/null
  echo "BENCH latency fps=$fps $(python3 "$LAB/../../scripts/latency.py" "$OUT/lat-cam-$fps.csv" "$OUT/lat-host-$fps.csv")"
done
# 4. the verbs camera on rxe0 (the kernel's sender, like ib_write_bw)
"$REL/rdmacam" run --ip 198.18.0.3 --transport verbs --device rxe0 --width $W --height $H \
    --fps 1000 >"$OUT/bench-camera-verbs.log" 2>&1 &
cam=$!
sleep 1
echo "$(host verbs-camera 198.18.0.3) $(cpu_of $cam)"
kill $cam; wait $cam 2>/dev/null
