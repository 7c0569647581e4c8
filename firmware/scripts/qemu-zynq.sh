#!/bin/bash
# qemu-zynq.sh — boot the Zynq-7000 image in qemu's xilinx-zynq-a9 machine with GEM 0 on a TAP
# interface inside a private network namespace, and stream from it with the reference host.
#
#   sudo firmware/scripts/qemu-zynq.sh [FRAMES]      (root: namespace and TAP)
#
# Needs qemu-system-arm (Debian bookworm-backports: scripts/setup.sh --vm installs it), the
# release image (cd firmware && cargo build --release --target armv7a-none-eabi) and
# rdmacam-host (cargo build --release -p rdmacam-hil). The camera has no DHCP server there, so it
# falls back to its link-local address 169.254.90.1 after 5 s; the host side is 169.254.90.2.
# The firmware's defmt log (UART 1) is decoded into $OUT/uart1.log when defmt-print is installed.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
ELF=${ELF:-$ROOT/target/armv7a-none-eabi/release/rdmacam-firmware}
HOST=${HOST:-$ROOT/target/release/rdmacam-host}
FRAMES=${1:-20}
NS=rdmacam-zynq
OUT=${OUT:-$(mktemp -d /tmp/rdmacam-zynq.XXXXXX)}
mkdir -p "$OUT"
for f in "$ELF" "$HOST"; do [[ -x $f ]] || { echo "qemu-zynq: missing $f" >&2; exit 2; }; done
command -v qemu-system-arm >/dev/null || { echo "qemu-zynq: qemu-system-arm is not installed" >&2; exit 2; }
cleanup() {
  for p in $(ip netns pids $NS 2>/dev/null); do kill "$p" 2>/dev/null || true; done
  sleep 0.2
  ip netns del $NS 2>/dev/null || true
}
trap cleanup EXIT
cleanup
ip netns add $NS
ip -n $NS link set lo up
ip netns exec $NS qemu-system-arm -M xilinx-zynq-a9 -m 1G -display none -monitor none \
    -serial null -serial "file:$OUT/uart1.bin" \
    -nic tap,ifname=zq0,script=no,downscript=no,model=cadence_gem \
    -kernel "$ELF" 2>"$OUT/qemu.log" &
for _ in $(seq 50); do ip -n $NS link show zq0 >/dev/null 2>&1 && break; sleep 0.1; done
ip -n $NS link set zq0 up
ip -n $NS addr add 169.254.90.2/16 dev zq0
# the camera answers GVCP once it has fallen back to its link-local address
up=0
for _ in $(seq 60); do
  if ip netns exec $NS arv-tool-0.8 2>/dev/null | grep -q RDMACAMZ7001; then up=1; break; fi
  sleep 0.5
done
echo "qemu-zynq: camera discovered: $up"
rc=1
if [[ $up == 1 ]]; then
  # the RoCEv2 packets on the wire: the queue pair's leave below embassy-net, gathered by the
  # GEM from frame memory with the camera's own IP header (ECN ECT(0) by default, which
  # smoltcp's sockets would have cleared)
  ip netns exec $NS tcpdump -i zq0 -s 128 -w "$OUT/roce.pcap" udp port 4791 2>/dev/null &
  dump=$!
  sleep 0.5
  set +e
  ip netns exec $NS "$HOST" --camera 169.254.90.1 --local 169.254.90.2 --frames "$FRAMES" --json \
      > "$OUT/host.out" 2> "$OUT/host.err"
  rc=$?
  set -e
  sleep 0.3
  kill "$dump" 2>/dev/null || true
  wait "$dump" 2>/dev/null || true
  tail -2 "$OUT/host.err"; tail -1 "$OUT/host.out"
  if [[ $rc == 0 ]]; then
    # RDMA WRITE FIRST/MIDDLE/LAST/ONLY (opcodes 6-11) from the camera, and those with ECT(0)
    writes=$(tcpdump -r "$OUT/roce.pcap" -nn -x 'src host 169.254.90.1 and udp[8] >= 6 and udp[8] <= 11' 2>/dev/null | grep -c '^[0-9]' || true)
    ect=$(tcpdump -r "$OUT/roce.pcap" -nn -x 'src host 169.254.90.1 and udp[8] >= 6 and udp[8] <= 11 and (ip[1] & 3) == 2' 2>/dev/null | grep -c '^[0-9]' || true)
    echo "qemu-zynq: $writes RDMA WRITE packets on the wire, $ect of them with the camera's IP header (ECT(0))"
    if [[ $writes == 0 || $ect != "$writes" ]]; then
      echo "qemu-zynq: the queue pair's packets did not all take the zero-copy path" >&2
      rc=1
    fi
  fi
fi
if command -v defmt-print >/dev/null; then
  defmt-print -e "$ELF" < "$OUT/uart1.bin" > "$OUT/uart1.log" 2>&1 || true
  sed 's/^/firmware: /' "$OUT/uart1.log" | tail -12
fi
echo "qemu-zynq: host exit $rc (logs in $OUT)"
exit $rc
