#!/usr/bin/env bash
# ipsec-ike's example peer (crates/ike/examples/ike-peer.rs) against strongSwan's charon in
# network namespaces (prefix ike), as root, on scripts/lib/netns.sh and
# scripts/lib/strongswan.sh (SWAN_SCRIPTS=DIR takes them from elsewhere). Per stage:
#
#   i2c-SUITE  ike-peer initiates to charon (responder): both report the IKE_SA and CHILD_SA
#              up with the same SPIs; tshark decrypts every IKE frame after IKE_SA_INIT with
#              the ikev2_decryption_table ike-peer wrote (so our SK_* are charon's); our
#              CHILD_SA keys equal those charon logs (level 4, scripts/lib/charon_keys.py json);
#              ike-peer deletes the IKE_SA and charon has none left
#   c2i        charon initiates to ike-peer (responder), then charon terminates: the same checks
#
#   sudo bash crates/ike/tests/interop/charon.sh [STAGE...]     (none: all)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../../../.." && pwd)
cd "$ROOT"
LIB=${SWAN_SCRIPTS:-$ROOT/scripts/lib}
NETNS_TAG=ike-interop
. "$LIB/netns.sh"
. "$LIB/strongswan.sh"
[ "$(id -u)" -eq 0 ] || fail "needs root"
swan_install
cargo build -q -p ipsec-ike --example ike-peer
PEER=$ROOT/target/debug/examples/ike-peer
KEYS="python3 $LIB/charon_keys.py"
WORK=$(mktemp -d /tmp/ike-interop.XXXXXX)
trap 'rc=$?; swan_stop_all; cleanup_all $rc 40' EXIT
PSK="ike-interop-$RANDOM"
ALL="i2c-gcm i2c-cbc i2c-modp c2i"
STAGES=("$@")
[ ${#STAGES[@]} -gt 0 ] || read -r -a STAGES <<<"$ALL"
PASSED=()

# json_field FILE EVENT KEY: KEY of the first EVENT line of FILE.
json_field() {
  python3 -c 'import json,sys
for l in open(sys.argv[1]):
    e = json.loads(l)
    if e.get("event") == sys.argv[2]:
        print(e.get(sys.argv[3], "")); break' "$1" "$2" "$3"
}

# keys_match PEER_JSON CHARON_LOG: our child_up keys equal the CHILD_SA keys charon logged.
keys_match() {
  $KEYS json "$2" -o "$WORK/$STAGE.charon.json"
  python3 - "$1" "$WORK/$STAGE.charon.json" <<'PY'
import json, sys
ours = next(json.loads(l) for l in open(sys.argv[1]) if '"child_up"' in l)
theirs = json.dumps(json.load(open(sys.argv[2]))).lower()
keys = [ours[k] for k in ("encr_out", "encr_in", "integ_out", "integ_in") if ours[k]]
missing = [k[:8] + "..." for k in keys if k not in theirs]
if missing:
    sys.exit(f"keys of ours not in charon's log: {missing}")
print(f"{len(keys)} child keys equal charon's")
PY
}

run_stage() {
  local name=$1 ike=$2 esp=$3 dir=$4 a b out n
  STAGE=$name
  T0=$SECONDS
  netns_pair ikea ikeb ikeva ikevb 10.96.0.1/24 10.96.0.2/24
  ip -n ikeb addr add 10.96.2.1/32 dev lo
  B=$WORK/$name-charon
  swan_instance "$B"
  swan_site_conf "$B" local=10.96.0.2 remote=10.96.0.1 local_id=charon.ike.test remote_id=peer.ike.test \
    local_ts=10.96.2.0/24 remote_ts=10.96.1.0/24 psk="$PSK" ike="$ike" esp="$esp" encap=yes
  swan_start ikeb "$B"
  swan_load "$B"
  ip netns exec ikea tshark -n -q -i ikeva -F pcap -w "$WORK/$name.pcap" -f 'udp port 500 or udp port 4500' 2>"$WORK/$name.pcap.log" &
  CAP=$!
  BG+=("$CAP")
  swan_wait_capture 10 "$WORK/$name.pcap"
  mkdir -p "$WORK/$name-keys"
  local args=(--local 10.96.0.1 --remote 10.96.0.2 --psk "$PSK" --local-id peer.ike.test --remote-id charon.ike.test
    --ike "$ike" --esp "$esp" --local-ts 10.96.1.0/24 --remote-ts 10.96.2.0/24 --print-keys --keylog-dir "$WORK/$name-keys" --timeout 30)
  if [ "$dir" = i2c ]; then
    ip netns exec ikea "$PEER" --role initiator --encap --terminate-after 2 "${args[@]}" >"$WORK/$name.peer.json" &
    local pid=$!
    BG+=("$pid")
    sleep 1
    [ "$(swan_established "$B")" = "1 1" ] || fail "$name: charon has $(swan_established "$B") SAs up: $(tail -n 20 "$WORK/$name.peer.json") $(grep -E 'IKE|CHD' "$B/charon.log" | tail -n 15)"
    wait "$pid" || fail "$name: ike-peer failed: $(cat "$WORK/$name.peer.json")"
  else
    ip netns exec ikea "$PEER" --role responder "${args[@]}" >"$WORK/$name.peer.json" &
    local pid=$!
    BG+=("$pid")
    sleep 0.5
    swan_initiate "$B" net
    [ "$(swan_established "$B")" = "1 1" ] || fail "$name: charon has $(swan_established "$B") SAs up"
    swan_terminate "$B" --ike sw
    wait "$pid" || fail "$name: ike-peer failed: $(cat "$WORK/$name.peer.json")"
  fi
  grep -q '"event":"child_up"' "$WORK/$name.peer.json" || fail "$name: no child_up from ike-peer: $(cat "$WORK/$name.peer.json")"
  grep -q '"event":"ike_down"' "$WORK/$name.peer.json" || fail "$name: no ike_down from ike-peer"
  a=$(json_field "$WORK/$name.peer.json" child_up spi_in)
  grep -qi "$a" "$B/charon.log" || fail "$name: our inbound SPI $a is not in charon's log"
  wait_for 5 "$name: charon's IKE_SA to go" sh -c "[ \"\$(STRONGSWAN_CONF=$B/strongswan.conf swanctl --list-sas --raw --uri unix://$B/run/charon.vici | grep -c '^list-sa event')\" = 0 ]"
  sleep 0.3
  stop_pids "$CAP"
  out2=$(keys_match "$WORK/$name.peer.json" "$B/charon.log") || fail "$name: $out2"
  n=$(tshark -r "$WORK/$name.pcap" -Y isakmp 2>/dev/null | wc -l)
  out=$($KEYS verify "$WORK/$name.pcap" --ikev2 "$WORK/$name-keys/ikev2_decryption_table" --esp /dev/null --ike-frames "$n" 2>&1) ||
    fail "$name: tshark did not decrypt the IKE frames with our keys: $out"
  swan_stop "$B"
  local w
  w=$(swan_log_warnings "$B")
  [ -z "$w" ] || log "$name: charon.log warnings: $w"
  ip netns del ikea
  ip netns del ikeb
  log "$name ($ike / $esp): up, $out2, ${out#charon_keys: }, deleted ($((SECONDS - T0)) s)"
  PASSED+=("$name")
}

for s in "${STAGES[@]}"; do
  case $s in
    i2c-gcm) run_stage i2c-gcm aes128gcm16-prfsha256-x25519 aes128gcm16 i2c ;;
    i2c-cbc) run_stage i2c-cbc aes256-sha256-ecp384 aes128-sha256 i2c ;;
    i2c-modp) run_stage i2c-modp aes128-sha512-modp2048 chacha20poly1305 i2c ;;
    c2i) run_stage c2i aes256gcm16-prfsha384-ecp256 aes256gcm16 c2i ;;
    *) fail "unknown stage $s (stages: $ALL)" ;;
  esac
done
log "passed: ${PASSED[*]}"
