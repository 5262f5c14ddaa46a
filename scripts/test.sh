#!/usr/bin/env bash
# The project's test command: installs what the interop tests need (tshark, scapy), builds,
# runs the Rust tests and the interop tests against scapy and tshark.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-test-deps.sh
cargo build --release --locked --bin ipsec
# The transform crates must build without std.
cargo build --locked -p ipsec-core -p ipsec-esp --no-default-features
cargo test --workspace --locked
IPSEC_BIN="$PWD/target/release/ipsec" python3 -m pytest tests/interop -q -p no:cacheprovider
