#!/usr/bin/env bash
# packet-cost.sh — what a packet costs the camera's CPU, in instructions, as name=value lines.
# Counts do not depend on machine load: callgrind counts the x86 ones, qemu's instruction
# counter (-icount shift=0) the ARM ones.
#
# x86 (protocol/examples/header_path.rs under callgrind, PMTU 4096):
#   x86_one_packet_write_instructions   a one-packet WRITE's whole life without payload: post,
#                                       headers, ICRC over the headers, ACK, completion
#   x86_middle_instructions_beyond_crc  a MIDDLE packet of a 4 MiB WRITE, less the ICRC floor
#                                       (crc32fast over its masked headers and 4096 payload bytes)
#   x86_icrc_floor_instructions         that floor, per packet
#   x86_gvsp_packet_instructions        a GVSP packet of a 2048x2048 Mono8 gradient frame at
#                                       1,400 bytes (protocol/examples/gvsp_path.rs): header and
#                                       pixels, leaders and trailers included, up to the send
#   x86_gvsp_copy_floor_instructions    copying its 1,364 pixel bytes out of a kept image
# Each is the difference of two runs (1,000 and 11,000 packets) over 10,000: start-up cancels.
#
# ARM (the Zynq-7000 image firmware/src/bin/packet_cost.rs in qemu's xilinx-zynq-a9, the
# board's path MTU 1024, crc32fast's table path; skipped with a note when qemu-system-arm or
# the armv7a-none-eabi target is missing):
#   arm_middle_instructions_beyond_crc  a MIDDLE packet of a 1920x1080 Mono8 frame's WRITE, less
#                                       the ICRC floor (48 masked header bytes + 1024 payload)
#   arm_middle_instructions_data_mover  the same packet when a data mover computes the ICRC
#   arm_icrc_floor_instructions         that floor, per packet
#   arm_icrc_instructions_per_byte      crc32fast per payload byte
#   arm_copy_instructions_per_byte      a CPU copy of a payload byte into a transmit buffer
#   arm_cache_clean_instructions_per_packet  cleaning a 1024-byte payload's cache lines (L1 and
#                                       L2) for the GEM's DMA: what the zero-copy path pays
#                                       instead of copying
#   arm_packets_per_frame               packets of one 1920x1080 Mono8 frame at PMTU 1024
#   arm_instructions_per_frame          one frame's WRITE: every packet, the ACKs, completion
#   arm_instructions_per_frame_data_mover  the same with the ICRC in a data mover
# Results and what they mean for a 667 MHz Cortex-A9: docs/BENCHMARKS.md, docs/firmware.md.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v valgrind >/dev/null || { echo "valgrind not installed (apt-get install valgrind)" >&2; exit 1; }
cargo build --release -q -p rdmacam-protocol --example header_path --example gvsp_path
ex=target/release/examples
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
count() { # EXAMPLE ARGS... -> total instructions
  valgrind --tool=callgrind --callgrind-out-file="$tmp/out" "$ex/$1" "${@:2}" >/dev/null 2>&1
  awk '/^summary:/ {print $2}' "$tmp/out"
}
per_packet() { # EXAMPLE, then its arguments after the packet count -> instructions per packet
  local a b
  a=$(count "$1" 1000 "${@:2}"); b=$(count "$1" 11000 "${@:2}")
  echo $(( (b - a) / 10000 ))
}
one=$(per_packet header_path 0)
middle=$(per_packet header_path 4194304)
floor=$(per_packet header_path 4096 floor)
echo "x86_one_packet_write_instructions=$one"
echo "x86_middle_instructions_beyond_crc=$(( middle - floor ))"
echo "x86_icrc_floor_instructions=$floor"
echo "x86_gvsp_packet_instructions=$(per_packet gvsp_path)"
echo "x86_gvsp_copy_floor_instructions=$(per_packet gvsp_path copy)"

if ! command -v qemu-system-arm >/dev/null; then
  echo "packet-cost: qemu-system-arm not installed: no arm_* figures" >&2
  exit 0
fi
if ! (cd firmware && cargo build --release -q --target armv7a-none-eabi --bin packet-cost); then
  echo "packet-cost: the armv7a-none-eabi build failed (rustup target add armv7a-none-eabi): no arm_* figures" >&2
  exit 1
fi
qemu-system-arm -M xilinx-zynq-a9 -m 1G -display none -monitor none \
  -icount shift=0,align=off,sleep=off -serial null -serial "file:$tmp/uart1.txt" \
  -kernel target/armv7a-none-eabi/release/packet-cost 2>"$tmp/qemu.log" &
qemu=$!
for _ in $(seq 300); do grep -q '^done' "$tmp/uart1.txt" 2>/dev/null && break; sleep 1; done
kill "$qemu" 2>/dev/null || true
wait "$qemu" 2>/dev/null || true
if ! grep -q '^done ok' "$tmp/uart1.txt" 2>/dev/null; then
  echo "packet-cost: the Zynq image did not finish (qemu log: $(head -c 300 "$tmp/qemu.log"))" >&2
  exit 1
fi
grep '^arm_' "$tmp/uart1.txt"
