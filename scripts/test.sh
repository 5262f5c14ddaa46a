#!/usr/bin/env bash
# The project's test command: installs what the interop tests need (tshark, scapy), builds,
# runs the Rust tests and the interop tests against scapy and tshark.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-test-deps.sh
# The strongSwan 6.1 peer of the post-quantum test (a Debian sid chroot, built once per
# machine, about 2 minutes of downloads): made in the background while the Rust builds run,
# waited for before scripts/ike-pq.sh, which fails with the reason if it could not be made.
PQ_CHROOT_PID=""
if [ "$(id -u)" = 0 ]; then
  PQ_CHROOT_LOG=$(mktemp /tmp/pq-chroot.XXXXXX)
  bash scripts/pq-chroot.sh >"$PQ_CHROOT_LOG" 2>&1 &
  PQ_CHROOT_PID=$!
fi
# The AH known answers in crates/ah/tests/vectors come from scapy: regenerate and compare.
python3 crates/ah/tests/vectors/gen_scapy.py | diff -u crates/ah/tests/vectors/scapy.txt - >/dev/null ||
  { echo "crates/ah/tests/vectors/scapy.txt differs from what scapy produces now"; exit 1; }
# So do the TCP SYNs of the MSS clamping tests.
python3 crates/tunnel/src/dataplane/mss/gen_scapy.py | diff -u crates/tunnel/src/dataplane/mss/scapy.txt - >/dev/null ||
  { echo "crates/tunnel/src/dataplane/mss/scapy.txt differs from what scapy produces now"; exit 1; }
cargo build --release --locked --bin ipsec
# docs/architecture.md names files by their paths: every one must exist.
python3 scripts/check-doc-paths.py
# The transform crates must build without std.
cargo build --locked -p ipsec-core -p ipsec-esp -p ipsec-ah -p ipsec-ipcomp -p ipsec-engine --no-default-features
# Where this user can create a TUN device, the privileged unit tests must run, not pass unrun.
if [ "$(id -u)" = 0 ] && ip tuntap add dev tnlprobe0 mode tun 2>/dev/null; then
  ip tuntap del dev tnlprobe0 mode tun
  export IPSEC_REQUIRE_PRIVILEGED=1
fi
cargo test --workspace --locked
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --locked
# tunneld end to end in two network namespaces: only as root with /dev/net/tun and a working
# `ip netns` (otherwise it says why it was skipped); about 40 s.
bash scripts/netns-test.sh --if-possible
# tunneld's IKEv2 against strongSwan (docs/ike-interop.md): root only, like the netns test.
bash scripts/ike-interop.sh --if-possible
# IKEv2 lifecycle (docs/ike-lifecycle.md): child and IKE SA rekeys by either side, collisions,
# strongSwan against itself as the baseline, tunneld against tunneld with 0 lost pings; the
# short form, about 4 minutes (the long form: without --ci).
bash scripts/ike-lifecycle.sh --ci --if-possible
# Side by side (each in its own namespaces; light on CPU), about 30 s together:
# IKEv2 with certificates made by strongSwan's pki (docs/ike-certs.md): RSA, ECDSA through an
# intermediate, Ed25519, and refusals both ways (expired, unknown CA, identity, revoked);
# IKE fragmentation (RFC 7383, docs/ike-fragmentation.md) against strongSwan: IKE_AUTH in
# fragments both ways, either side initiating, a lost fragment retransmitted.
CERTS_LOG=$(mktemp /tmp/ike-certs-ci.XXXXXX)
bash scripts/ike-certs.sh --ci --if-possible >"$CERTS_LOG" 2>&1 &
CERTS_PID=$!
bash scripts/ike-fragment.sh --ci --if-possible
CERTS_RC=0
wait "$CERTS_PID" || CERTS_RC=$?
cat "$CERTS_LOG"
rm -f "$CERTS_LOG"
[ "$CERTS_RC" -eq 0 ] || { echo "scripts/ike-certs.sh failed ($CERTS_RC)"; exit 1; }
# Post-quantum IKEv2 against strongSwan 6.1 (issue #37, docs/ike-pq.md): x25519 + ML-KEM-768
# with tunneld initiating, ECP-384 + ML-KEM-768 + ML-KEM-1024 with charon initiating, child and
# IKE rekeys with IKE_FOLLOWUP_KE, fallback and refusal against 5.9.8 (no RFC 9370); about 20 s
# (plus ~2 min once per machine for the sid chroot of scripts/pq-chroot.sh; a peer that cannot
# be installed fails the run).
if [ -n "$PQ_CHROOT_PID" ]; then
  wait "$PQ_CHROOT_PID" || echo "pq-chroot (background) failed: $(tail -n 3 "$PQ_CHROOT_LOG")"
  rm -f "$PQ_CHROOT_LOG"
fi
bash scripts/ike-pq.sh --ci --if-possible
# The IKE responder under a flood of spoofed IKE_SA_INITs (issue #29, docs/ike-dos.md):
# 40,000 at 4,000/s while charon connects and an existing tunnel pings; about 30 s.
bash scripts/ike-flood.sh --ci --if-possible
# The soak (issue #22): rekeys, reloads, a garbage flood and control clients during a transfer;
# a 2-minute pass here (scripts/soak.sh runs 10 minutes by default). Same conditions.
SOAK_SECONDS=120 bash scripts/soak.sh --if-possible
# The Debian package installed for real, its man pages and systemd unit checked, then purged.
bash scripts/deb-test.sh --if-possible
# Adaptive IPComp's short demo (issue #23): model >= 90% of the better fixed mode; ~2.5 min.
# The links are 10M and 100M: both decisions are exercised there (book1 compresses, random
# does not); the CPU-bound unlimited cells swing by a third from run to run on 2 shared cores
# (docs/adaptive/adaptive.md), too much for a pass/fail floor.
LINKS="10M 100M" bash scripts/adaptive-demo.sh --ci --if-possible
IPSEC_BIN="$PWD/target/release/ipsec" python3 -m pytest tests/interop -q -p no:cacheprovider
# Short fuzz pass over every cargo-fuzz target (20 s each, two at a time; scripts/fuzz.sh;
# the long form is scripts/fuzz-long.sh).
bash scripts/fuzz.sh 20
