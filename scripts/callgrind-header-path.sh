#!/usr/bin/env bash
# Instructions per packet of the requester's packet path, counted by callgrind (repeatable:
# instruction counts do not depend on machine load). Prints one line per payload size.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v valgrind >/dev/null || { echo "valgrind not installed (apt-get install valgrind)" >&2; exit 1; }
cargo build --release -q -p rdmacam-protocol --example header_path
bin=target/release/examples/header_path
tmp=$(mktemp -d)
count() { # N LEN -> total instructions
  valgrind --tool=callgrind --callgrind-out-file="$tmp/out" "$bin" "$1" "$2" >/dev/null 2>&1
  awk '/^summary:/ {print $2}' "$tmp/out"
}
for len in 0 4096; do
  a=$(count 1000 "$len"); b=$(count 11000 "$len")
  echo "payload ${len} B: $(( (b - a) / 10000 )) instructions/packet (callgrind, $a vs $b for 1000/11000 packets)"
done
rm -rf "$tmp"
