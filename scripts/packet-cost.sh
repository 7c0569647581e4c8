#!/usr/bin/env bash
# packet-cost.sh — what a packet costs the camera's CPU, in instructions (callgrind counts them;
# the count does not depend on machine load), as name=value lines:
#   x86_one_packet_write_instructions   a one-packet WRITE's whole life without payload: post,
#                                       headers, ICRC over the headers, ACK, completion
#   x86_middle_instructions_beyond_crc  a MIDDLE packet of a 4 MiB WRITE, less the ICRC floor
#                                       (crc32fast over its masked headers and 4096 payload bytes)
#   x86_icrc_floor_instructions         that floor, per packet
# Each figure is the difference of two runs (1,000 and 11,000 packets) over 10,000, so start-up
# costs cancel. Method: protocol/examples/header_path.rs. Results: docs/BENCHMARKS.md.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v valgrind >/dev/null || { echo "valgrind not installed (apt-get install valgrind)" >&2; exit 1; }
cargo build --release -q -p rdmacam-protocol --example header_path
bin=target/release/examples/header_path
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
count() { # ARGS... -> total instructions
  valgrind --tool=callgrind --callgrind-out-file="$tmp/out" "$bin" "$@" >/dev/null 2>&1
  awk '/^summary:/ {print $2}' "$tmp/out"
}
per_packet() { # LEN [floor] -> instructions per packet
  local a b
  a=$(count 1000 "$@"); b=$(count 11000 "$@")
  echo $(( (b - a) / 10000 ))
}
one=$(per_packet 0)
middle=$(per_packet 4194304)
floor=$(per_packet 4096 floor)
echo "x86_one_packet_write_instructions=$one"
echo "x86_middle_instructions_beyond_crc=$(( middle - floor ))"
echo "x86_icrc_floor_instructions=$floor"
