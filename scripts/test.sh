#!/usr/bin/env bash
# The project's test command: installs what the interop tests need (tshark, scapy), builds,
# runs the Rust tests and the interop tests against scapy and tshark.
set -euo pipefail
cd "$(dirname "$0")/.."
# Each step says when it starts (seconds into the run), so a slow run shows where its time went.
step() { printf '== scripts/test.sh +%ss: %s\n' "$SECONDS" "$*"; }
bash scripts/install-test-deps.sh
# The strongSwan 6.1 peer of the post-quantum test (a Debian sid chroot, built once per
# machine, about 2 minutes of downloads): made in the background while the Rust builds run,
# waited for before scripts/ci/ike-pq.sh, which fails with the reason if it could not be made.
PQ_CHROOT_PID=""
if [ "$(id -u)" = 0 ]; then
  PQ_CHROOT_LOG=$(mktemp /tmp/pq-chroot.XXXXXX)
  bash scripts/lib/make-pq-chroot.sh >"$PQ_CHROOT_LOG" 2>&1 &
  PQ_CHROOT_PID=$!
fi
# The AH known answers in crates/ah/tests/vectors come from scapy: regenerate and compare.
python3 crates/ah/tests/vectors/gen_scapy.py | diff -u crates/ah/tests/vectors/scapy.txt - >/dev/null ||
  { echo "crates/ah/tests/vectors/scapy.txt differs from what scapy produces now"; exit 1; }
# So do the TCP SYNs of the MSS clamping tests.
python3 crates/tunnel/src/dataplane/mss/gen_scapy.py | diff -u crates/tunnel/src/dataplane/mss/scapy.txt - >/dev/null ||
  { echo "crates/tunnel/src/dataplane/mss/scapy.txt differs from what scapy produces now"; exit 1; }
step "cargo build --release (ipsec)"
cargo build --release --locked --bin ipsec
# docs/architecture.md names files by their paths: every one must exist.
python3 scripts/ci/check-doc-paths.py
# The transform crates must build without std.
step "cargo build (no_std transform crates)"
cargo build --locked -p ipsec-core -p ipsec-esp -p ipsec-ah -p ipsec-ipcomp -p ipsec-engine --no-default-features
# Where this user can create a TUN device, the privileged unit tests must run, not pass unrun.
if [ "$(id -u)" = 0 ] && ip tuntap add dev tnlprobe0 mode tun 2>/dev/null; then
  ip tuntap del dev tnlprobe0 mode tun
  export IPSEC_REQUIRE_PRIVILEGED=1
fi
step "cargo test --workspace"
cargo test --workspace --locked
step "cargo doc"
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --locked
# The lints and the fuzz targets' build are CPU work the namespaced tests below do not need,
# and those tests mostly wait (on timers, peers, pings): both run in the background at the
# lowest priority (nice 19: a test process that wants the CPU gets it) and are waited for at
# the end. This saves their minutes of a CI run. Clippy takes target/debug's lock; the tests
# below build in target/release (and eap-radius.sh's two examples wait for the lock).
# IPSEC_TEST_SERIAL=1: run them in order at the end instead (to time them, or on one core).
BG_LOG=$(mktemp -d /tmp/ipsec-test-bg.XXXXXX)
LINT_PID="" FUZZ_BUILD_PID=""
# A failing step ends the run: the background builds (our children only) end with it.
# (Each command there must not fail: under set -e a failing one in an EXIT trap would make
# the script's status 1 after a run that passed.)
trap 'rc=$?; for p in $LINT_PID $FUZZ_BUILD_PID; do pkill -P "$p" 2>/dev/null || true; kill "$p" 2>/dev/null || true; done; exit $rc' EXIT
if [ "${IPSEC_TEST_SERIAL:-0}" != 1 ]; then
  if cargo clippy --version >/dev/null 2>&1; then
    nice -n 19 cargo clippy --workspace --all-targets --locked -- -D warnings >"$BG_LOG/clippy" 2>&1 &
    LINT_PID=$!
  fi
  # and the seed corpora's generator (scripts/fuzz/fuzz-seeds.sh runs it: a release build of
  # its own, minutes of a CI run when it waited until the fuzz pass)
  (command -v cargo-fuzz >/dev/null || cargo install cargo-fuzz --locked
    nice -n 19 cargo +nightly fuzz build -O &&
    cd fuzz && nice -n 19 cargo build --release --quiet --example seeds) >"$BG_LOG/fuzz-build" 2>&1 &
  FUZZ_BUILD_PID=$!
fi
# tunneld end to end in two network namespaces: only as root with /dev/net/tun and a working
# `ip netns` (otherwise it says why it was skipped); about 40 s.
step "bash scripts/ci/netns-test.sh"
bash scripts/ci/netns-test.sh --if-possible
# tunneld's IKEv2 against strongSwan (docs/ike-interop.md): root only, like the netns test.
step "bash scripts/ci/ike-interop.sh"
bash scripts/ci/ike-interop.sh --if-possible
# IKEv2 lifecycle (docs/ike-lifecycle.md): child and IKE SA rekeys by either side, collisions,
# strongSwan against itself as the baseline, tunneld against tunneld with 0 lost pings; the
# short form, about 4 minutes (the long form: without --ci).
step "bash scripts/ci/ike-lifecycle.sh"
bash scripts/ci/ike-lifecycle.sh --ci --if-possible
# Side by side (each in its own namespaces; light on CPU), about 30 s together:
# IKEv2 with certificates made by strongSwan's pki (docs/ike-certs.md): RSA, ECDSA through an
# intermediate, Ed25519, and refusals both ways (expired, unknown CA, identity, revoked);
# IKE fragmentation (RFC 7383, docs/ike-fragmentation.md) against strongSwan: IKE_AUTH in
# fragments both ways, either side initiating, a lost fragment retransmitted.
CERTS_LOG=$(mktemp /tmp/ike-certs-ci.XXXXXX)
step "bash scripts/ci/ike-certs.sh"
bash scripts/ci/ike-certs.sh --ci --if-possible >"$CERTS_LOG" 2>&1 &
CERTS_PID=$!
step "bash scripts/ci/ike-fragment.sh"
bash scripts/ci/ike-fragment.sh --ci --if-possible
CERTS_RC=0
wait "$CERTS_PID" || CERTS_RC=$?
cat "$CERTS_LOG"
rm -f "$CERTS_LOG"
[ "$CERTS_RC" -eq 0 ] || { echo "scripts/ci/ike-certs.sh failed ($CERTS_RC)"; exit 1; }
# Post-quantum IKEv2 against strongSwan 6.1 (issue #37, docs/ike-pq.md): x25519 + ML-KEM-768
# with tunneld initiating, ECP-384 + ML-KEM-768 + ML-KEM-1024 with charon initiating, child and
# IKE rekeys with IKE_FOLLOWUP_KE, fallback and refusal against 5.9.8 (no RFC 9370); about 20 s
# (plus ~2 min once per machine for the sid chroot of scripts/lib/make-pq-chroot.sh; a peer that cannot
# be installed fails the run).
if [ -n "$PQ_CHROOT_PID" ]; then
  wait "$PQ_CHROOT_PID" || echo "pq-chroot (background) failed: $(tail -n 3 "$PQ_CHROOT_LOG")"
  rm -f "$PQ_CHROOT_LOG"
fi
step "bash scripts/ci/ike-pq.sh"
bash scripts/ci/ike-pq.sh --ci --if-possible
# EAP-MSCHAPv2 road-warrior clients (issue #36, docs/ike-eap.md): charon with
# auth = eap-mschapv2 against tunneld with a certificate; a wrong password; about 10 s.
step "bash scripts/ci/ike-eap.sh"
bash scripts/ci/ike-eap.sh --ci --if-possible
# EAP-TLS road-warrior clients (issue #36, docs/ike-eap.md): charon with auth = eap-tls and
# its certificate against tunneld (rustls in EAP), TLS 1.2, a pool and pings; a client
# certificate of another CA refused with nothing installed; about 6 s.
step "bash scripts/ci/ike-eap-tls.sh"
bash scripts/ci/ike-eap-tls.sh --ci --if-possible
# EAP-RADIUS (issue #36, docs/ike-eap.md): the same client against tunneld passing EAP to a
# real FreeRADIUS: accepted with a lease and pings, a wrong password, the server down; ~15 s.
step "bash scripts/ci/ike-eap-radius.sh"
bash scripts/ci/ike-eap-radius.sh --ci --if-possible
# Remote access (issue #36, docs/remote-access.md): tunneld with an address pool, two strongSwan
# clients with vips behind one masquerading NAT: leases, DNS, pings, a full pool; about 10 s.
step "bash scripts/ci/ike-roadwarrior.sh"
bash scripts/ci/ike-roadwarrior.sh --ci --if-possible
# MOBIKE (RFC 4555, docs/ike-mobike.md): a strongSwan client with two addresses moves while it
# pings and keeps its IKE SA; with mobike = false it does not; about 15 s.
step "bash scripts/ci/ike-mobike.sh"
bash scripts/ci/ike-mobike.sh --ci --if-possible
# MOBIKE as the initiator whose own address changes: tunneld (client) against charon, by
# `ipsec ike update` and by itself (rtnetlink); without MOBIKE refused; ~22 s.
step "bash scripts/ci/ike-mobike-init.sh"
bash scripts/ci/ike-mobike-init.sh --ci --if-possible
# The EAP crate's RADIUS client against a real FreeRADIUS, and its authenticator against
# wpa_supplicant's eapol_test (docs/eap.md): accept with equal MSKs, reject, a wrong shared
# secret, a server that is down; no root needed, about 5 s.
step "bash scripts/ci/eap-radius.sh"
bash scripts/ci/eap-radius.sh --ci --if-possible
# The IKE responder under a flood of spoofed IKE_SA_INITs (issue #29, docs/ike-dos.md):
# 40,000 at 4,000/s while charon connects and an existing tunnel pings; about 30 s.
step "bash scripts/ci/ike-flood.sh"
bash scripts/ci/ike-flood.sh --ci --if-possible
# tunneld without privilege (issue #36, docs/rootless.md): as nobody under pasta (rootless
# podman's network), the container's entrypoint, a strongSwan client through UDP 500/4500; ~5 s.
step "bash scripts/ci/rootless.sh"
bash scripts/ci/rootless.sh --if-possible
# The soak (issue #22): rekeys, reloads, a garbage flood and control clients during a transfer;
# a 2-minute pass here (scripts/ci/soak.sh runs 10 minutes by default). Same conditions.
step "scripts/ci/soak.sh"
SOAK_SECONDS=120 bash scripts/ci/soak.sh --if-possible
# The Debian package installed for real, its man pages and systemd unit checked, then purged.
step "bash scripts/ci/deb-test.sh"
bash scripts/ci/deb-test.sh --if-possible
# Adaptive IPComp's short demo (issue #23): model >= 90% of the better fixed mode; ~2.5 min.
# The links are 10M and 100M: both decisions are exercised there (book1 compresses, random
# does not); the CPU-bound unlimited cells swing by a third from run to run on 2 shared cores
# (docs/adaptive/adaptive.md), too much for a pass/fail floor.
step "scripts/demos/adaptive-demo.sh"
LINKS="10M 100M" bash scripts/demos/adaptive-demo.sh --ci --if-possible
step "IPSEC_BIN=PWD/target/release/ipsec python3 -m pytest"
IPSEC_BIN="$PWD/target/release/ipsec" python3 -m pytest tests/interop -q -p no:cacheprovider
# Short fuzz pass over every cargo-fuzz target (15 s each, two at a time; scripts/fuzz/fuzz.sh;
# the long form is scripts/fuzz/fuzz-long.sh).
if [ -n "$FUZZ_BUILD_PID" ]; then
  step "wait: the fuzz targets' build (background)"
  wait "$FUZZ_BUILD_PID" || { tail -40 "$BG_LOG/fuzz-build"; echo "the fuzz targets did not build"; exit 1; }
fi
step "bash scripts/fuzz/fuzz.sh"
bash scripts/fuzz/fuzz.sh 15
if [ -n "$LINT_PID" ]; then
  step "wait: cargo clippy (background)"
  wait "$LINT_PID" || { tail -60 "$BG_LOG/clippy"; echo "cargo clippy found warnings"; exit 1; }
elif cargo clippy --version >/dev/null 2>&1; then
  step "cargo clippy"
  cargo clippy --workspace --all-targets --locked -- -D warnings
fi
rm -rf "$BG_LOG"
step "all passed"
