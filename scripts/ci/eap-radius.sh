#!/usr/bin/env bash
# The RADIUS client of crates/eap (RFC 2865/3579, docs/eap.md) against a real FreeRADIUS
# (Debian's `freeradius` package): starts its own radiusd in the foreground with a config
# directory of its own (scripts/lib/freeradius.sh: a temp dir with clients.conf with a
# secret for 127.0.0.1, a users file with one user, the eap module with default_eap_type =
# mschapv2, the mschap module) on a port of its own on 127.0.0.1, then runs crates/eap's example radius_driver (this crate's
# EAP-MSCHAPv2 peer <-> its authenticator with the RADIUS backend <-> radiusd) for:
#   accept     the right password: success, the peer's MSK equal to the one made from
#              radiusd's MS-MPPE-Recv/Send-Key; every real answer is also fed with a bit
#              flipped first, and must be dropped as a bad authenticator (counted)
#   reject     a wrong password: Access-Reject
#   badsecret  a wrong shared secret: radiusd drops our requests (their Message-Authenticator
#              fails its check), so no valid answer: the server-down outcome after every try
#   down       nothing listening on the port: the server-down outcome after every try
# and, the other way round, wpa_supplicant's `eapol_test` (Debian's `eapoltest`) as NAS and
# peer against crates/eap's example radius_server (this crate's MSCHAPv2 authenticator behind
# its RADIUS codec), when eapol_test is installed:
#   eapol-accept   the right password: SUCCESS, and eapol_test finds the MS-MPPE keys of the
#                  Access-Accept equal to the MSK its own peer derived ("MPPE keys OK: 1")
#   eapol-reject   a wrong password: FAILURE
# No root needed (radiusd runs as the calling user). Every wait is bounded; only the radiusd
# this script started is stopped (by its PID); the work directory is removed unless the run
# failed (EAP_RADIUS_KEEP=1: always kept).
#
#   bash scripts/ci/eap-radius.sh                 # every case, 1 s retransmissions, 3 tries
#   bash scripts/ci/eap-radius.sh --ci            # the same with 0.3 s retransmissions (CI, ~5 s)
#   bash scripts/ci/eap-radius.sh --if-possible   # no freeradius: say why, exit 0
set -euo pipefail
cd "$(dirname "$0")/../.."
CI=0
IF_POSSIBLE=0
for a in "$@"; do
  case "$a" in
    --ci) CI=1 ;;
    --if-possible) IF_POSSIBLE=1 ;;
    *) echo "usage: $0 [--ci] [--if-possible]" >&2; exit 2 ;;
  esac
done
say() { echo "eap-radius: $*"; }
. scripts/lib/freeradius.sh
if ! fr_find; then
  if [ $IF_POSSIBLE = 1 ]; then say "skipped: freeradius is not installed (scripts/install-test-deps.sh)"; exit 0; fi
  say "freeradius is not installed (scripts/install-test-deps.sh)"; exit 1
fi
if [ $CI = 1 ]; then RETRANSMIT_MS=300; else RETRANSMIT_MS=1000; fi
SECRET="eap-radius-$$-$RANDOM"
PORT=$((20000 + ($$ % 20000)))
DOWN_PORT=$((PORT + 1))
WORK=$(mktemp -d "${TMPDIR:-/tmp}/eap-radius.XXXXXX")
SRV_PID=""
OK=0
cleanup() {
  if [ -n "$SRV_PID" ]; then kill "$SRV_PID" 2>/dev/null || true; fi
  fr_stop
  if [ $OK = 1 ] && [ "${EAP_RADIUS_KEEP:-0}" = 0 ]; then rm -rf "$WORK"; else say "files kept in $WORK"; fi
}
trap cleanup EXIT

# ---- radiusd with a config of its own (scripts/lib/freeradius.sh) ----------------------------
fr_conf "$WORK" "$PORT" "$SECRET" "bob:correct horse battery"
say "$("$RADIUSD" -v | head -1) on 127.0.0.1:$PORT"
fr_start "$WORK" || exit 1

# ---- the cases -------------------------------------------------------------------------------
cargo build -q --locked -p ipsec-eap --example radius_driver
DRIVER=target/debug/examples/radius_driver
fails=0
run_case() { # CASE ADDR SECRET PASSWORD
  if EAP_RADIUS_ADDR="$2" EAP_RADIUS_SECRET="$3" EAP_USER=bob EAP_PASSWORD="$4" \
    EAP_RADIUS_RETRANSMIT_MS=$RETRANSMIT_MS EAP_RADIUS_TRIES=3 timeout 30 "$DRIVER" "$1"; then :
  else fails=$((fails + 1)); fi
}
run_case accept "127.0.0.1:$PORT" "$SECRET" "correct horse battery"
run_case reject "127.0.0.1:$PORT" "$SECRET" "wrong horse"
run_case badsecret "127.0.0.1:$PORT" "not-$SECRET" "correct horse battery"
run_case down "127.0.0.1:$DOWN_PORT" "$SECRET" "correct horse battery"
# ---- wpa_supplicant's eapol_test against the crate's authenticator ------------------------
if command -v eapol_test >/dev/null 2>&1; then
  cargo build -q --locked -p ipsec-eap --example radius_server
  SRV_PORT=$((PORT + 2))
  EAP_RADIUS_LISTEN="127.0.0.1:$SRV_PORT" EAP_RADIUS_SECRET="$SECRET" EAP_USER=bob \
    EAP_PASSWORD="correct horse battery" EAP_SERVER_SECONDS=25 \
    target/debug/examples/radius_server >"$WORK/log/radius_server.log" 2>&1 &
  SRV_PID=$!
  for _ in $(seq 50); do grep -q listening "$WORK/log/radius_server.log" 2>/dev/null && break; sleep 0.1; done
  eapol_case() { # NAME PASSWORD EXPECTED
    printf 'network={\n\tkey_mgmt=IEEE8021X\n\teap=MSCHAPV2\n\tidentity="bob"\n\tpassword="%s"\n}\n' "$2" >"$WORK/$1.conf"
    timeout 20 eapol_test -c "$WORK/$1.conf" -a 127.0.0.1 -p "$SRV_PORT" -s "$SECRET" -t 5 >"$WORK/log/$1.log" 2>&1 || true
    local result mppe
    result=$(tail -n 1 "$WORK/log/$1.log")
    mppe=$(grep -o 'MPPE keys OK: [0-9]*  mismatch: [0-9]*' "$WORK/log/$1.log" || echo "no MPPE comparison")
    if [ "$result" = "$3" ] && { [ "$3" = FAILURE ] || [ "$mppe" = "MPPE keys OK: 1  mismatch: 0" ]; }; then
      echo "$1: ok - eapol_test says $result ($mppe)"
    else
      echo "$1: FAILED - eapol_test says $result ($mppe), expected $3; log $WORK/log/$1.log"; fails=$((fails + 1))
    fi
  }
  eapol_case eapol-accept "correct horse battery" SUCCESS
  eapol_case eapol-reject "wrong horse" FAILURE
  kill "$SRV_PID" 2>/dev/null || true
  wait "$SRV_PID" 2>/dev/null || true
else
  say "eapol_test not installed (Debian eapoltest): the authenticator-side cases were not run"
  [ $IF_POSSIBLE = 1 ] || fails=$((fails + 1))
fi
# radiusd's own view: one accepted and one rejected login, and the wrong secret noticed.
grep -q 'Login OK: \[bob' "$WORK/log/radius.log" || { say "radiusd logged no 'Login OK' for bob"; fails=$((fails + 1)); }
grep -q 'Login incorrect' "$WORK/log/radius.log" || { say "radiusd logged no 'Login incorrect'"; fails=$((fails + 1)); }
grep -qi 'Message-Authenticator' "$WORK/log/radius.log" ||
  { say "radiusd logged nothing about the wrong secret's Message-Authenticator"; fails=$((fails + 1)); }
if [ $fails -ne 0 ]; then say "$fails check(s) failed; radiusd log: $WORK/log/radius.log"; exit 1; fi
OK=1
say "all cases passed"
