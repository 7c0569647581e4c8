#!/usr/bin/env bash
# Install what rdmacam's build and tests need on a fresh Debian 12 machine. Idempotent.
#  - tshark: the tests check our packets against Wireshark's RoCE dissector
#  - rustup targets: the protocol crate is built for bare-metal ARM (no_std) in CI
set -euo pipefail
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
if ! command -v tshark >/dev/null 2>&1 || ! command -v text2pcap >/dev/null 2>&1; then
  $SUDO apt-get update -q
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends tshark
fi
if ! command -v cargo >/dev/null 2>&1; then
  echo "cargo not found: install Rust with rustup (https://rustup.rs), then run this again" >&2
  exit 1
fi
rustup component add rustfmt clippy >/dev/null
rustup target add thumbv7em-none-eabihf armv7a-none-eabi >/dev/null
echo "setup: ok ($(tshark --version | head -1), $(cargo --version))"
