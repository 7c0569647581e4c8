#!/usr/bin/env bash
# Run every cargo-fuzz target for SECONDS (default 20), starting from the kept regressions.
# Needs the nightly toolchain and cargo-fuzz (scripts/setup.sh --fuzz installs both).
set -euo pipefail
cd "$(dirname "$0")/../fuzz"
SECONDS_EACH=${1:-20}
for t in gvcp_device orsp_host_messages cm_mads requester_acks camera_hostile inspect_capture; do
  mkdir -p "corpus/$t"
  cp -n regressions/$t/* "corpus/$t/" 2>/dev/null || true
  echo "== fuzz $t for ${SECONDS_EACH}s"
  cargo +nightly fuzz run "$t" "corpus/$t" -- -max_total_time="$SECONDS_EACH" -rss_limit_mb=2048 2>&1 | tail -3
done
