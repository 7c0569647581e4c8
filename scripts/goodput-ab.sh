#!/bin/bash
# goodput-ab.sh — loopback goodput of two rdmacam binaries under loss, interleaved so both
# see the same machine: for each loss, seeds 1-5, the two binaries alternating.
#
#   scripts/goodput-ab.sh OLD/rdmacam NEW/rdmacam [LOSS...]     (default losses: 0 0.01 0.05 0.2)
#
# Each run: rdmacam demo --frames 100 --fps 1000 --loss LOSS --seed S --json (1920x1080 Mono8,
# both directions lossy). Prints per binary and loss the median Gbit/s and the range.
set -euo pipefail
a=$1 b=$2; shift 2
losses=${*:-0 0.01 0.05 0.2}
g() {
  "$1" demo --frames 100 --fps 1000 --loss "$2" --seed "$3" --json 2>/dev/null | tail -1 |
    python3 -c "import json,sys; print('%.2f' % json.load(sys.stdin)['gbit_per_s'])"
}
for loss in $losses; do
  ra=() rb=()
  for s in 1 2 3 4 5; do ra+=("$(g "$a" "$loss" "$s")"); rb+=("$(g "$b" "$loss" "$s")"); done
  for side in a b; do
    if [[ $side == a ]]; then vals=("${ra[@]}"); bin=$a; else vals=("${rb[@]}"); bin=$b; fi
    printf '%s\n' "${vals[@]}" | sort -n | awk -v l="$loss" -v b="$bin" \
      '{v[NR]=$1} END {printf "loss=%s %s: median %s (%s-%s)\n", l, b, v[int((NR+1)/2)], v[1], v[NR]}'
  done
done
