#!/usr/bin/env bash
# The offline demo (scripts/demos/demo.sh runs it where a live tunnel is impossible, e.g. without
# root): writes a small capture, seals it with an ESP tunnel SA (AES-CBC + HMAC-SHA1-96),
# opens it again, and checks the round trip is exact; then runs a
# capture through the SA engines of two hosts built from config files (IPComp + ESP, with
# counters as JSON), and prints what the SA costs on a 1500-byte link.
set -euo pipefail
cd "$(dirname "$0")/../.."
command -v cargo >/dev/null || { echo "needs a Rust toolchain (rustup)"; exit 2; }
cargo build --release --quiet --bin ipsec
out=${OUT:-out/demo}
mkdir -p "$out"
python3 scripts/vectors/make_pcap.py "$out/plain.pcap"
SA="proto esp spi 0x1000 mode tunnel src 192.0.2.1 dst 192.0.2.2 \
 enc 'cbc(aes)' 0x000102030405060708090a0b0c0d0e0f \
 auth-trunc 'hmac(sha1)' 0x0001020304050607080910111213141516171819 96"
set -x
target/release/ipsec seal --sa "$SA" --in "$out/plain.pcap" --out "$out/sealed.pcap"
target/release/ipsec open --sa "$SA" --in "$out/sealed.pcap" --out "$out/opened.pcap"
set +x
python3 scripts/vectors/make_pcap.py --compare "$out/plain.pcap" "$out/opened.pcap"
if command -v tshark >/dev/null; then tshark -r "$out/sealed.pcap" 2>/dev/null | head -5; fi

# Two hosts from config files: A's engine seals (policies, IPComp + ESP tunnel), B's opens.
python3 scripts/vectors/make_pcap.py "$out/inner.pcap" 10.100.0.1 10.100.0.2 fd00:100::1 fd00:100::2
set -x
target/release/ipsec check-config examples/tunnel/comp-esp-a.toml
target/release/ipsec process --config examples/tunnel/comp-esp-a.toml --dir out \
  --in "$out/inner.pcap" --out "$out/wire.pcap" --stats "$out/a-stats.json"
target/release/ipsec process --config examples/tunnel/comp-esp-b.toml --dir in \
  --in "$out/wire.pcap" --out "$out/back.pcap" --stats "$out/b-stats.json"
set +x
python3 scripts/vectors/make_pcap.py --compare "$out/inner.pcap" "$out/back.pcap"
echo "counters: $out/a-stats.json, $out/b-stats.json"

# What the first SA adds per packet, and the largest inner packet a 1500-byte link carries.
set -x
target/release/ipsec overhead --sa "$SA" --link-mtu 1500 --payload 4096
