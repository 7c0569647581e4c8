#!/usr/bin/env bash
# The data mover in Verilog (fpga/, docs/firmware.md "The data mover in Verilog"):
#  1. lint: verilator --lint-only -Wall, which must stay clean;
#  2. vectors: the RC requester in data-mover mode writes descriptors, frame memory and the
#     frames offload::move_packet makes of them (protocol/examples/mover_vectors.rs);
#  3. simulate: mover-sim (Verilator) runs the RTL on them and compares every frame byte for
#     byte, plain, under random output back-pressure and memory stalls (several seeds), and
#     through the AXI4-Lite descriptor window; refused descriptors and read errors must be
#     the ones expected;
#  4. check the frames with tools that are not the RTL: zlib's CRC-32 (scripts/icrc_check.py)
#     and `rdmacam inspect`;
#  5. size: yosys synth_xilinx for the Zynq-7000's 7-series fabric;
#  6. print the figures as name=value lines, and fail past the targets (3,000 LUTs; 0.95 of
#     8 bytes a clock over a 1080p frame of 4 KiB packets; no mismatch).
# Needs verilator and yosys (scripts/setup.sh installs them). Output in target/fpga/.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=target/fpga
RTL=(fpga/rtl/rdmacam_mover.v fpga/rtl/mover_desc.v fpga/rtl/mover_read.v fpga/rtl/mover_fifo.v fpga/rtl/mover_tx.v)
mkdir -p "$OUT"
say() { echo "fpga-check: $*" >&2; }

say "lint (verilator --lint-only -Wall)"
verilator --lint-only -Wall --top-module rdmacam_mover "${RTL[@]}"

say "build mover-sim"
verilator --cc --exe --build -j 2 -O3 --x-assign fast --x-initial fast --noassert \
  --top-module rdmacam_mover -Mdir "$OUT/obj" -o mover-sim \
  "${RTL[@]/#/$PWD/}" "$PWD/fpga/sim/mover_sim.cpp" -CFLAGS "-O2 -std=c++17" >"$OUT/build.log" 2>&1 \
  || { cat "$OUT/build.log" >&2; exit 1; }
SIM="$OUT/obj/mover-sim"

say "vectors from the requester and offload::move_packet"
cargo run --release -q -p rdmacam-protocol --example mover_vectors -- "$OUT/vectors" >&2

compared=0
mismatches=0
runs=0
# run CASE NAME [mover-sim options]: one simulation, its figures in $OUT/NAME.txt
run() {
  local c=$1 name=$2
  shift 2
  local v="$OUT/vectors/$c"
  # shellcheck disable=SC2046 # the case's args file holds several options
  if ! "$SIM" --quiet --descriptors "$v/descriptors.bin" --memory "$v/memory.bin" \
      --pcap "$OUT/$name.pcap" --expect "$v/expected.pcap" $(cat "$v/args") "$@" >"$OUT/$name.txt"; then
    say "FAILED: $c $*"
    cat "$OUT/$name.txt" >&2
    exit 1
  fi
  compared=$((compared + $(sed -n 's/^compared=//p' "$OUT/$name.txt")))
  mismatches=$((mismatches + $(sed -n 's/^mismatches=//p' "$OUT/$name.txt")))
  runs=$((runs + 1))
}
fig() { sed -n "s/^$2=//p" "$OUT/$1.txt"; }

say "simulate: every case plain, under back-pressure and stalls, and through the window"
for c in contract frame-1k frame-4k refusals read-error; do
  run "$c" "$c"
  for seed in 1 2 3; do
    run "$c" "$c-stress-$seed" --backpressure 0.3 --stall 0.3 --seed "$seed"
  done
  run "$c" "$c-window" --window --backpressure 0.1 --stall 0.1 --seed 9
done
# a descriptor abandoned half-way in the window is refused whole; its second writing goes out
run contract contract-window-disorder --window --window-disorder 5 --expect-refused 1 --expect-error 0x0b

say "the frames, checked by zlib's CRC-32 and by rdmacam inspect"
python3 scripts/icrc_check.py "$OUT/contract-stress-1.pcap" >&2
python3 scripts/icrc_check.py "$OUT/frame-4k.pcap" >&2
python3 scripts/icrc_check.py "$OUT/read-error.pcap" --expect-bad "$(fig read-error read_errors)" >&2
cargo run --release -q -p rdmacam -- inspect "$OUT/contract-window.pcap" | tail -1 >&2

say "synthesis (yosys synth_xilinx, 7-series)"
yosys -q -l "$OUT/yosys.log" -p "read_verilog ${RTL[*]}; synth_xilinx -family xc7 -top rdmacam_mover -noiopad -noclkbuf -flatten; stat" >/dev/null
# the cell count of the last statistics printed (synth_xilinx prints its own first)
cells() { awk -v re="$1" '/=== rdmacam_mover ===/ { n = 0 } $1 ~ re { n += $2 } END { print n + 0 }' "$OUT/yosys.log"; }
# LUTs: logic LUTs and inverters, and the LUTs of distributed RAM (4 per RAM32M/RAM64M)
luts=$(( $(cells '^(LUT[1-6]|INV)$') + 4 * $(cells '^RAM(32|64)M$') ))
ffs=$(cells '^FD[A-Z]*$')
brams=$(awk -v a="$(cells '^RAMB36E1$')" -v b="$(cells '^RAMB18E1$')" 'BEGIN { print a + b / 2 }')

bpc=$(fig frame-4k bytes_per_cycle)
cat <<FIGS
fpga_luts=$luts
fpga_ffs=$ffs
fpga_brams=$brams
fpga_bytes_per_cycle_4k=$bpc
fpga_efficiency_4k=$(awk -v b="$bpc" 'BEGIN { printf "%.3f", b / 8 }')
fpga_cycles_per_packet_4k=$(fig frame-4k cycles_per_frame)
fpga_cycles_per_packet_1k=$(fig frame-1k cycles_per_frame)
fpga_packets_compared=$compared
fpga_mismatches=$mismatches
fpga_simulations=$runs
FIGS

fail=0
[ "$mismatches" -eq 0 ] || { say "frames differ from offload::move_packet's"; fail=1; }
[ "$luts" -le 3000 ] || { say "over 3,000 LUTs"; fail=1; }
awk -v b="$bpc" 'BEGIN { exit !(b / 8 >= 0.95) }' || { say "below 0.95 of 8 bytes a clock"; fail=1; }
exit $fail
