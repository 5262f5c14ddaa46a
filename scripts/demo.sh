#!/usr/bin/env bash
# Sets up and runs an example: writes a small capture, seals it with an ESP tunnel SA
# (AES-CBC + HMAC-SHA1-96), opens it again, and checks the round trip is exact.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v cargo >/dev/null || { echo "needs a Rust toolchain (rustup)"; exit 2; }
cargo build --release --quiet --bin ipsec
out=${OUT:-out/demo}
mkdir -p "$out"
python3 scripts/make_pcap.py "$out/plain.pcap"
SA="proto esp spi 0x1000 mode tunnel src 192.0.2.1 dst 192.0.2.2 \
 enc 'cbc(aes)' 0x000102030405060708090a0b0c0d0e0f \
 auth-trunc 'hmac(sha1)' 0x0001020304050607080910111213141516171819 96"
set -x
target/release/ipsec seal --sa "$SA" --in "$out/plain.pcap" --out "$out/sealed.pcap"
target/release/ipsec open --sa "$SA" --in "$out/sealed.pcap" --out "$out/opened.pcap"
set +x
python3 scripts/make_pcap.py --compare "$out/plain.pcap" "$out/opened.pcap"
if command -v tshark >/dev/null; then tshark -r "$out/sealed.pcap" 2>/dev/null | head -5; fi
