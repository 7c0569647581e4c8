#!/usr/bin/env bash
# Install what rdmacam's build and tests need on a fresh Debian 12 machine. Idempotent.
#  - tshark: the tests check our packets against Wireshark's RoCE dissector
#  - tcpdump: the Zynq run checks what its zero-copy path put on the wire; valgrind: callgrind
#    counts instructions per packet (scripts/packet-cost.sh)
#  - aravis tools + GObject bindings: a GigE Vision host no one here wrote, for the camera tests
#  - iproute2, nftables: network namespaces and random loss for the lossy-link tests
#  - rustup targets: the protocol crate is built for bare-metal ARM (no_std) in CI
#  - verilator, yosys: the data mover in Verilog is linted, simulated against the crate and
#    synthesized for the Zynq-7000's fabric (scripts/fpga-check.sh)
#  - EMVA's reference GenApi (PyPI `genicam`) in a venv at .venv/genicam, and xmllint: the
#    camera's XML must load in the implementation vendor SDKs use and validate against the
#    GenApi 1.1 schema (which the tests take out of Debian's arv-test-0.8 with gresource)
# With --verbs: also cmake and libclang (sideway's build needs them for the `verbs` cargo
# feature) and libibverbs with its providers (loaded at run time by --transport verbs).
# With --fuzz: also the nightly toolchain and cargo-fuzz (scripts/fuzz.sh; CI fuzzes briefly).
# With --vm (root only; implies --verbs): also qemu (x86 and arm), rdma-core/pyverbs and a Debian
# kernel with rdma_rxe, for the Soft-RoCE scenarios (hil/vm/run-scenarios) and the Zynq firmware
# in qemu (firmware/scripts/qemu-zynq.sh); about a minute and 250 MB.
set -euo pipefail
VM=0
VERBS=0
FUZZ=0
for a in "$@"; do
  case "$a" in
    --vm) VM=1; VERBS=1 ;;
    --verbs) VERBS=1 ;;
    --fuzz) FUZZ=1 ;;
    *) echo "usage: scripts/setup.sh [--verbs] [--vm] [--fuzz]" >&2; exit 2 ;;
  esac
done
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
PKGS="tshark tcpdump valgrind verilator yosys aravis-tools aravis-tools-cli gir1.2-aravis-0.8 python3-gi iproute2 nftables python3-venv libxml2-utils libglib2.0-bin"
[ "$VERBS" = 1 ] && PKGS="$PKGS cmake libclang-dev libibverbs1 ibverbs-providers"
missing=""
for p in $PKGS; do dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"; done
if [ -n "$missing" ]; then
  $SUDO apt-get update -q
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $missing
fi
if ! command -v cargo >/dev/null 2>&1; then
  echo "cargo not found: install Rust with rustup (https://rustup.rs), then run this again" >&2
  exit 1
fi
rustup component add rustfmt clippy >/dev/null
rustup target add thumbv7em-none-eabihf armv7a-none-eabi >/dev/null
if [ "$FUZZ" = 1 ]; then
  rustup toolchain install nightly --profile minimal >/dev/null
  command -v cargo-fuzz >/dev/null 2>&1 || cargo install cargo-fuzz --locked -q
fi
VENV="$(dirname "$0")/../.venv/genicam"
if [ ! -x "$VENV/bin/python" ] || ! "$VENV/bin/python" -c "import genicam.genapi" 2>/dev/null; then
  /usr/bin/python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q --disable-pip-version-check "genicam==1.6.0"
fi
if [ "$VM" = 1 ]; then
  [ "$(id -u)" -eq 0 ] || { echo "setup.sh --vm must run as root (qemu's 9p export of /)" >&2; exit 1; }
  "$(dirname "$0")/../hil/vm/build-image.sh" --install-deps
fi
echo "setup: ok ($(tshark --version | head -1), $(cargo --version))"
