#!/usr/bin/env bash
# perf-ratios.sh — every figure of the sender/host performance work in one sitting, as
# name=value lines (sender_rate_ratio, sender_cpu_ratio, lossless_retransmitted,
# busy_lossless_retransmitted, latency_p99_us_100fps, latency_p99_us_flat, goodput_ratio_1pct,
# goodput_ratio_5pct, gvsp_fps_ratio, gvsp_cpu_ratio, rig_gbit_1/2/4). Needs the release
# binaries and udp_blast, and aravis-tools for the gvsp section:
#   cargo build --release -p rdmacam -p rdmacam-hil && cargo build --release -p rdmacam-io --example udp_blast
#   scripts/perf-ratios.sh [--runs N] [--only sender,busy,...] [--ab OLD/target/release]
# Sections and method: scripts/perf_ratios.py. Results: docs/BENCHMARKS.md.
set -euo pipefail
exec /usr/bin/python3 "$(dirname "$0")/perf_ratios.py" "$@"
