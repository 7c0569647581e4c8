#!/bin/bash
# goodput-ratio.sh — one sitting of one rdmacam binary: lossless, 1 % and 5 % loss interleaved
# per seed (seeds 1-7), so all three see the same machine; prints each median and the lossy
# medians as ratios of the lossless one (issue 16's targets: 0.8 at 1 %, 0.4 at 5 %).
#
#   scripts/goodput-ratio.sh [path/to/rdmacam]      (default: target/release/rdmacam)
#
# Each run: rdmacam demo --frames 100 --fps 1000 --loss LOSS --seed S --json (1920x1080 Mono8,
# both directions lossy).
set -euo pipefail
bin=${1:-target/release/rdmacam}
declare -A r
for s in 1 2 3 4 5 6 7; do
  for loss in 0 0.01 0.05; do
    g=$("$bin" demo --frames 100 --fps 1000 --loss "$loss" --seed "$s" --json 2>/dev/null | tail -1 |
      python3 -c "import json,sys; print('%.2f' % json.load(sys.stdin)['gbit_per_s'])")
    r[$loss]="${r[$loss]:-} $g"
  done
done
median() { printf '%s\n' $1 | sort -n | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'; }
m0=$(median "${r[0]}")
for loss in 0 0.01 0.05; do
  m=$(median "${r[$loss]}")
  printf 'loss=%s median %s Gbit/s (%s ) ratio %s\n' "$loss" "$m" "${r[$loss]}" \
    "$(awk -v a="$m" -v b="$m0" 'BEGIN {printf "%.2f", a / b}')"
done
