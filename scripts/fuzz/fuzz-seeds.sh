#!/usr/bin/env bash
# Writes the seed corpora of the fuzz targets (fuzz/corpus/<target>/) from valid packets
# sealed with the targets' keys: `cargo run --example seeds` in fuzz/ (an ordinary build).
set -euo pipefail
cd "$(dirname "$0")/../../fuzz"
cargo run --quiet --release --example seeds -- "${1:-$PWD/corpus}"
