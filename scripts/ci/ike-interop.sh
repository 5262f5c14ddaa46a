#!/usr/bin/env bash
# tunneld's IKEv2 against strongSwan's charon (5.9.8, kernel-libipsec), in network namespaces,
# as root: the interop matrix of docs/ike-interop.md. Three namespaces, made once and reused:
#
#   iia (tunneld)  iiva 10.99.1.1/24 fd00:99:1::1/64 --- iina | iin (router / NAT) | iinb
#   --- iivb 10.99.2.1/24 fd00:99:2::1/64  iib (charon)
#
# inner addresses on lo: 10.100.1.1 and fd00:100:1::1 (tunneld's side, routed into ipsec0),
# 10.100.2.1 and fd00:100:2::1 (charon's; charon routes them through table 220). Each case
# starts charon and tunneld afresh with the case's configuration (PSK, FQDN identities,
# tunneld `encap = true`: its IKE children are always ESP in UDP on 4500, as kernel-libipsec's
# are), captures the link on tunneld's side, and then:
#
#   success cases  both sides list one IKE SA and one child; 5 pings each way between the inner
#                  addresses (both families in v6); one side deletes the IKE SA (ipsec ike
#                  terminate / swanctl --terminate) and within 5 s neither side has an SA;
#                  tshark decrypts every IKE frame after IKE_SA_INIT and finds every ESP ICV
#                  good with the tables tunneld wrote (--keylog), and again with the tables
#                  scripts/lib/charon_keys.py builds from charon's log; the two sets of keys are
#                  equal (scripts/lib/ike_interop_keys.py agree); ESP is opened once more in
#                  Python (ChaCha20-Poly1305, which tshark 4.0 cannot, only there); tunneld's
#                  monitor saw ike.up, child.up, child.down, ike.down; both daemons stop with 0
#   failure cases  the expected notify is on the wire (in the clear or decrypted with the keys
#                  from charon's log), the initiator reports it, and afterwards neither side
#                  has an IKE SA or a child (ipsec show, swanctl --list-sas)
#
# Cases (name: who initiates / underlay / IKE proposal / ESP proposal / who deletes):
#   i-gcm     tunneld / v4 / aes128gcm16-prfsha256-x25519 / aes128gcm16 / tunneld
#             (start_action = start: tunneld initiates when it starts)
#   r-gcm256  charon / v4 / aes256gcm16-prfsha384-ecp384 / aes256gcm16 (tunneld: -esn-noesn) / charon
#   i-cbc     tunneld / v4 / aes128-sha256-ecp256 / chacha20poly1305 (tunneld: -esn-noesn) / charon
#             (the others: tunneld initiates with `ipsec ike initiate gw`)
#   r-modp    charon / v4 / aes256-sha512-modp2048 / aes128-sha256 / tunneld
#   v6        tunneld / v6 (inner v4 and v6) / aes256-sha384-ecp384 / aes128gcm16 / charon
#   r-v6      charon / v6 / aes128gcm16-prfsha256-x25519 / chacha20poly1305 / tunneld
#             (tunneld's remote_addrs = %any: a responder for any address)
#   psk-i     tunneld initiates with a PSK charon does not have: charon answers
#             AUTHENTICATION_FAILED; nothing installed on either side
#   psk-r     the same with charon initiating: tunneld answers AUTHENTICATION_FAILED
#   noprop-i  tunneld offers only aes128gcm16-prfsha256-x25519, charon accepts only
#             aes256-sha256-modp2048: NO_PROPOSAL_CHOSEN in IKE_SA_INIT; nothing installed
#   noprop-r  the same with charon initiating
#   ke-i      tunneld offers x25519 then ecp256 (KE payload for x25519), charon prefers ecp256:
#             INVALID_KE_PAYLOAD (group 19), tunneld retries with ecp256, then a success case
#   ke-r      charon offers x25519 then ecp256 (KE x25519), tunneld accepts only ecp256: tunneld
#             asks for group 19, charon retries (tunneld as responder takes the KE's group
#             whenever one of its proposals allows it, so "accepts it second" does not ask)
#   nat-i     tunneld behind nftables masquerade (UDP source ports 20000-20999) initiates to
#             charon (remote_addrs = %any), charon deletes
#   nat-r     charon behind the NAT initiates to tunneld (remote_addrs = %any), tunneld sees
#             the NAT's address and port, its stats list that peer (added at run time)
#             while the child is up and not after, tunneld deletes
#   The built-in clients' default proposals (docs/ike.md "Built-in clients"), charon offering
#   exactly them to tunneld as a road-warrior responder (remote_addrs = %any):
#   win-r     Windows 10/11: 3des-sha1-modp1024 / aes256-sha1; tunneld: proposals and
#             esp_proposals ["default", "windows"] / charon
#   win-noprop  the same offer to tunneld's defaults alone: NO_PROPOSAL_CHOSEN, nothing installed
#   mac-r     macOS/iOS: aes256-sha256-modp2048 / aes256-sha256; tunneld's defaults / tunneld
#   android-r Android 11+: aes256-sha256-x25519-modp2048 / aes256gcm16, aes256-sha256 (no
#             SHA-1); tunneld's defaults / charon
#
#   sudo bash scripts/ci/ike-interop.sh                  # every case but the clients' (builds tunneld, ipsec)
#   sudo bash scripts/ci/ike-interop.sh i-gcm nat-r      # only those, in the order above
#   sudo bash scripts/ci/ike-interop.sh clients          # the built-in clients' cases (not in CI)
#   TUNNELD_BIN=target/release/tunneld IPSEC_BIN=target/release/ipsec sudo -E bash scripts/ci/ike-interop.sh
#   bash scripts/ci/ike-interop.sh --if-possible         # no root / netns / tunneld IKE: say why, exit 0
#
# Installs strongSwan, tshark and nftables if missing (scripts/lib/strongswan.sh, no service
# started). Namespaces are prefixed ii; every wait is bounded; logs, captures and key tables
# (test keys!) are kept in the work directory when a case fails.
set -euo pipefail
cd "$(dirname "$0")/../.."
START=$SECONDS
NETNS_TAG=ike-interop
# the namespaces and links carry the PID (iia, iin, iib in the comments), so runs side by side
# do not collide
T=ii$(($$ % 100000))
. scripts/lib/netns.sh
. scripts/lib/strongswan.sh
ALL_CASES="i-gcm r-gcm256 i-cbc r-modp v6 r-v6 psk-i psk-r noprop-i noprop-r ke-i ke-r nat-i nat-r"
# The built-in clients' cases (about 20 s each) run only when named or with `clients`: CI
# (scripts/test.sh) runs the cases above.
CLIENT_CASES="win-r win-noprop mac-r android-r"
parse_stages "$ALL_CASES $CLIENT_CASES clients" "$@"
if [[ " ${STAGES[*]} " == *" clients "* ]]; then
  read -r -a STAGES <<<"${STAGES[*]/clients/$CLIENT_CASES}"
elif [ ${#STAGES[@]} -eq 0 ]; then
  read -r -a STAGES <<<"$ALL_CASES"
fi
need_netns "network namespaces, charon, tunneld"

swan_install
locate_tunneld --bin ipsec
IPSEC=$(dirname "$BIN")/ipsec
[ -z "${TUNNELD_BIN:-}" ] || IPSEC=${IPSEC_BIN:-$IPSEC} # IPSEC_BIN only goes with TUNNELD_BIN
[ -x "$IPSEC" ] || fail "no ipsec binary at $IPSEC"
grep -q -- '--keylog' <<<"$("$BIN" --help 2>&1)" || cannot "this tunneld has no IKE (no --keylog option)"
IPSEC_IKE=0
"$IPSEC" ike --help >/dev/null 2>&1 && IPSEC_IKE=1
WORK=$(mktemp -d /tmp/ike-interop.XXXXXX)
# IKE_INTEROP_KEEP=1 keeps the work directory after a passing run too.
trap 'rc=$?; swan_stop_all; [ "${IKE_INTEROP_KEEP:-0}" = 0 ] || { log "files kept in $WORK"; [ $rc -ne 0 ] || WORK=; }; cleanup_all $rc 30' EXIT
trap 'fail "interrupted"' INT TERM
KEYS="python3 scripts/lib/charon_keys.py"
CHECK="python3 scripts/lib/ike_interop_keys.py"
PASSED=()
TIMES=()
CAP=""
TD=""
MON=""

# ---- the namespaces ------------------------------------------------------------------------
# topo_up: (re)makes iia, iin, iib and their links (a fresh iin also forgets the NAT's
# conntrack mappings, which outlive a flushed ruleset).
topo_up() {
  local ns
  for ns in ${T}a ${T}n ${T}b; do ip netns del "$ns" 2>/dev/null || true; done
  NETNS=()
  netns_add ${T}a ${T}n ${T}b
  ip link add ${T}va netns ${T}a type veth peer name ${T}na netns ${T}n
  ip link add ${T}nb netns ${T}n type veth peer name ${T}vb netns ${T}b
  ip -n ${T}a addr add 10.99.1.1/24 dev ${T}va
  ip -n ${T}a addr add fd00:99:1::1/64 dev ${T}va nodad
  ip -n ${T}n addr add 10.99.1.254/24 dev ${T}na
  ip -n ${T}n addr add fd00:99:1::254/64 dev ${T}na nodad
  ip -n ${T}n addr add 10.99.2.254/24 dev ${T}nb
  ip -n ${T}n addr add fd00:99:2::254/64 dev ${T}nb nodad
  ip -n ${T}b addr add 10.99.2.1/24 dev ${T}vb
  ip -n ${T}b addr add fd00:99:2::1/64 dev ${T}vb nodad
  for ns in ${T}a ${T}n ${T}b; do ip -n "$ns" link set lo up; done
  ip -n ${T}a link set ${T}va up
  ip -n ${T}n link set ${T}na up
  ip -n ${T}n link set ${T}nb up
  ip -n ${T}b link set ${T}vb up
  ip -n ${T}a route add default via 10.99.1.254
  ip -n ${T}a -6 route add default via fd00:99:1::254
  ip -n ${T}b route add default via 10.99.2.254
  ip -n ${T}b -6 route add default via fd00:99:2::254
  ip netns exec ${T}n sysctl -qw net.ipv4.ip_forward=1 net.ipv6.conf.all.forwarding=1
  ip -n ${T}a addr add 10.100.1.1/32 dev lo
  ip -n ${T}a addr add fd00:100:1::1/128 dev lo nodad
  ip -n ${T}b addr add 10.100.2.1/32 dev lo
  ip -n ${T}b addr add fd00:100:2::1/128 dev lo nodad
  # The router learns both hosts now: otherwise the first IKE message through it waits (up to
  # ~2 s for IPv6) on neighbour discovery, charon retransmits, and its log says so.
  local a
  for a in 10.99.2.1 fd00:99:2::1; do
    ip netns exec ${T}a ping -c 1 -W 3 -q "$a" >/dev/null || fail "topology: ${T}a cannot reach $a through ${T}n"
  done
  NAT_USED=0
}

# nat_on OUT_IF IN_IF: iin masquerades what leaves through OUT_IF (UDP to ports 20000-20999)
# and forwards from OUT_IF's side only what answers a connection made from IN_IF's side.
nat_on() {
  ip netns exec ${T}n nft -f - <<EOF || fail "$CASE: nft could not load the NAT rules"
table ip iinat {
  chain post {
    type nat hook postrouting priority srcnat; policy accept;
    oifname "$1" meta l4proto udp masquerade to :20000-20999
    oifname "$1" masquerade
  }
}
table ip iiguard {
  chain guard {
    type filter hook forward priority filter; policy drop;
    ct state established,related accept
    iifname "$2" oifname "$1" accept
  }
}
EOF
  NAT_USED=1
}

# ---- tunneld -------------------------------------------------------------------------------
# td_conf DIR KEY=VALUE...: DIR/tunneld.toml and DIR/secrets.toml (mode 0600) by the shared
# writer (scripts/lib/tunneld-conf.sh) with this matrix's identities. Keys: local, remote (or
# %any), ike, esp (comma-separated lists), psk, start (start_action), local_ts, remote_ts.
. scripts/lib/tunneld-conf.sh
td_conf() {
  local d=$1
  shift
  td_head "$d" "$@"
  td_conn "$d" local_id=tunneld.ii.test remote_id=charon.ii.test "$@"
}

# td_start DIR: tunneld in iia with DIR's config (control DIR/ctl.sock, stats DIR/stats.json,
# key tables in DIR/keys, stderr DIR/tunneld.log), its monitor into DIR/monitor.log; waits
# for the control socket and ipsec0, then routes the remote selectors into ipsec0.
td_start() {
  local d=$1
  mkdir -p "$d/keys"
  ip netns exec ${T}a "$BIN" --config "$d/tunneld.toml" --control "$d/ctl.sock" --stats "$d/stats.json" \
    --keylog "$d/keys" 2>"$d/tunneld.log" &
  TD=$!
  BG+=("$TD")
  wait_for 10 "$CASE: tunneld's control socket" test -S "$d/ctl.sock"
  wait_for 10 "$CASE: tunneld's ipsec0" ip -n ${T}a link show ipsec0
  "$IPSEC" monitor --control "$d/ctl.sock" --json >"$d/monitor.log" 2>&1 &
  MON=$!
  BG+=("$MON")
  ip -n ${T}a route add 10.100.2.0/24 dev ipsec0 src 10.100.1.1
  ip -n ${T}a -6 route add fd00:100:2::/64 dev ipsec0 src fd00:100:1::1
}

td_ctl() { "$IPSEC" "$@" --control "$CD/ctl.sock"; }

# td_ike initiate|terminate: `ipsec ike OP gw`; an ipsec without the `ike` subcommand gets the
# control socket's own request ({"v":1,"op":"ike.OP","name":"gw"}, docs/control.md) instead.
td_ike() {
  if [ "$IPSEC_IKE" = 1 ]; then
    td_ctl ike "$1" gw
  else
    python3 - "$CD/ctl.sock" "$1" <<'PY'
import json, socket, sys
s = socket.socket(socket.AF_UNIX)
s.settimeout(5)
s.connect(sys.argv[1])
s.sendall(json.dumps({"v": 1, "op": "ike." + sys.argv[2], "name": "gw"}).encode() + b"\n")
r = b""
while not r.endswith(b"\n"):
    c = s.recv(65536)
    if not c:
        break
    r += c
print(r.decode().strip())
sys.exit(0 if json.loads(r).get("ok") else 1)
PY
  fi
}

# td_counts: "IKE CHILD": how many IKE SAs tunneld's `ipsec show --json` lists established and
# how many child SAs (ESP SA pairs).
td_counts() {
  td_ctl show --json 2>/dev/null | python3 -c '
import json, sys
j = json.load(sys.stdin)
ike = [x for x in j.get("ike_sas", []) if str(x.get("state", "established")).lower() in ("established", "up")]
child = sum(len(x.get("children", x.get("child_sas", []))) for x in ike)
esp = sum(1 for s in j.get("sas", []) if s.get("proto") == "esp")
print(len(ike), max(child, (esp + 1) // 2))'
}

# td_policies: how many policies tunneld has (IKE installs two per selector pair).
td_policies() {
  td_ctl policy list --json | python3 -c 'import json, sys; print(len(json.load(sys.stdin)["policies"]))'
}

# td_stop: SIGTERM to tunneld (exit 0 within 5 s) and its monitor.
td_stop() {
  [ -z "$TD" ] || stop_pid "$TD" "tunneld ($CASE)"
  TD=""
  [ -z "$MON" ] || stop_pids "$MON"
  MON=""
}

# ---- charon --------------------------------------------------------------------------------
sw_counts() { swan_established "$SD"; }

# ---- captures ------------------------------------------------------------------------------
cap_start() {
  ip netns exec ${T}a dumpcap -q -P -i ${T}va -w "$CD/link.pcap" -f 'udp port 500 or udp port 4500' 2>"$CD/dumpcap.log" &
  CAP=$!
  BG+=("$CAP")
  swan_wait_capture 10 "$CD/link.pcap"
}
cap_stop() {
  sleep 0.3
  stop_pids "$CAP"
  CAP=""
}

# notify_seen PCAP TABLE TYPE: tshark (with the IKE table TABLE, or none) shows a Notify of TYPE.
notify_seen() {
  local conf
  conf=$(mktemp -d "$WORK/ws.XXXXXX")
  [ -z "$2" ] || cp "$2" "$conf/ikev2_decryption_table"
  [ -n "$(WIRESHARK_CONFIG_DIR=$conf tshark -n -r "$1" -Y "isakmp.notify.msgtype == $3" 2>/dev/null)" ]
}

# ---- the checks ----------------------------------------------------------------------------
# wait_counts SECONDS WANT: both sides list WANT ("IKE CHILD") SAs.
wait_counts() {
  local deadline=$((SECONDS + $1)) t s
  while :; do
    t=$(td_counts || echo "? ?")
    s=$(sw_counts)
    [ "$t" = "$2" ] && [ "$s" = "$2" ] && return 0
    [ $SECONDS -lt $deadline ] || fail "$CASE: SAs (IKE, child): tunneld $t, charon $s, expected $2 on both; tunneld: $(tail -n 8 "$CD/tunneld.log"); charon: $(grep -E '\[(IKE|CFG|CHD)\]' "$SD/charon.log" | grep -v -E '  [0-9]+: |=>' | tail -n 8)"
    sleep 0.1
  done
}

# nothing_left: within 5 s neither side lists an IKE SA or a child SA, and tunneld has no
# policy (IKE's are removed with its SAs; the configs here have no others).
nothing_left() {
  wait_counts 5 "0 0"
  [ "$(td_policies)" = 0 ] || fail "$CASE: tunneld has policies left: $(td_ctl policy list)"
}

ping_ok() {
  local out
  out=$(ip netns exec "$1" ping -c 5 -i 0.2 -W 2 -I "$2" "$3" 2>&1) ||
    fail "$CASE: ping $2 -> $3 in $1 through the tunnel failed: $(echo "$out" | tail -n 2)"
  # a here-string, not `echo | grep -q` (under pipefail grep's early exit can fail the echo)
  grep -q ' 0% packet loss' <<<"$out" || fail "$CASE: ping $2 -> $3 lost packets: $(tail -n 2 <<<"$out")"
}

# stats_peers FILE: the peers in tunneld's stats file, one per line: address, endpoint, learned.
stats_peers() {
  python3 -c 'import json, sys
for p in json.load(open(sys.argv[1])).get("peers", []):
    print(p["peer"], p.get("endpoint"), p.get("learned"))' "$1" 2>/dev/null
}
export -f stats_peers

# monitor_has EVENT...: tunneld's monitor printed each EVENT.
monitor_has() {
  local e
  for e in "$@"; do
    grep -q "\"event\":\"$e\"" "$CD/monitor.log" || fail "$CASE: tunneld's monitor did not report $e: $(cat "$CD/monitor.log")"
  done
}

# corrupt_key TABLE FIELD...: TABLE with the last hex digit of the first non-empty field of
# FIELDs of its first entry changed (as strongswan-selftest.sh does).
corrupt_key() {
  python3 - "$@" <<'PY'
import sys
lines = open(sys.argv[1]).read().splitlines()
i = next(n for n, l in enumerate(lines) if l and not l.startswith("#"))
f = lines[i].split(",")
k = next(int(k) for k in sys.argv[2:] if f[int(k)].strip('"') not in ('', '0x'))
q = f[k].endswith('"')
v = f[k].rstrip('"')
f[k] = v[:-1] + ("1" if v[-1] == "0" else "0") + ('"' if q else "")
lines[i] = ",".join(f)
print("\n".join(lines))
PY
}

# verify_capture NIKE NESP: tshark with tunneld's tables, then with charon_keys.py's from
# charon's log; the keys agree; ESP opened in Python.
CHECKED_CAN_FAIL=0
verify_capture() {
  local nike=$1 nesp=$2 pcap=$CD/link.pcap tike=$CD/keys/ikev2_decryption_table td_esp=$CD/keys/esp_sa out
  [ -s "$tike" ] || fail "$CASE: tunneld wrote no $tike"
  [ -s "$td_esp" ] || fail "$CASE: tunneld wrote no $td_esp"
  if [ "$NAT" != none ]; then
    $CHECK any-address "$td_esp" >"$CD/td.esp"
  else
    cp "$td_esp" "$CD/td.esp"
  fi
  local any=()
  [ "$NAT" = none ] || any=(--esp-any-address)
  $KEYS wireshark "$SD/charon.log" --ikev2 "$CD/sw.ikev2" --esp "$CD/sw.esp" "${any[@]}" >/dev/null 2>"$CD/charon_keys.log" ||
    fail "$CASE: charon_keys.py found no keys in charon's log: $(cat "$CD/charon_keys.log")"
  # tshark 4.0 has no ChaCha20-Poly1305 for ESP: then tshark checks the IKE frames only (ESP
  # filtered out of a copy of the capture) and Python opens the ESP frames below.
  local tpcap=$pcap tesp=$nesp
  if [[ $ESP_ALG == chacha20poly1305* ]]; then
    tshark -n -r "$pcap" -Y '!esp' -F pcap -w "$CD/ike-only.pcap" 2>/dev/null
    tpcap=$CD/ike-only.pcap
    tesp=0
    grep -v 'ChaCha20' "$CD/td.esp" >"$CD/td.esp.ws" || true
  else
    cp "$CD/td.esp" "$CD/td.esp.ws"
  fi
  out=$($KEYS verify "$tpcap" --ikev2 "$tike" --esp "$CD/td.esp.ws" --ike-frames "$nike" --esp-frames "$tesp" 2>&1) ||
    fail "$CASE: tshark with tunneld's key tables: $out"
  log "$CASE: tunneld's tables: ${out#charon_keys: }"
  out=$($KEYS verify "$tpcap" --ikev2 "$CD/sw.ikev2" --esp "$CD/sw.esp" --ike-frames "$nike" --esp-frames "$tesp" 2>&1) ||
    fail "$CASE: tshark with the tables from charon's log: $out"
  $KEYS json "$SD/charon.log" -o "$CD/charon.json"
  out=$($CHECK agree "$CD/charon.json" --ikev2 "$tike" --esp "$td_esp" 2>&1) || fail "$CASE: $out"
  log "$CASE: ${out#ike_interop_keys: }"
  out=$($CHECK esp "$pcap" --esp "$td_esp" --frames "$nesp" 2>&1) || fail "$CASE: $out"
  log "$CASE: ${out#ike_interop_keys: }"
  if [ $CHECKED_CAN_FAIL -eq 0 ] && [[ $ESP_ALG != chacha20poly1305* ]]; then
    # The check must be able to fail: one key hex digit changed in tunneld's tables.
    corrupt_key "$tike" 5 2 >"$CD/bad.ikev2"
    corrupt_key "$CD/td.esp.ws" 7 5 >"$CD/bad.esp"
    if $KEYS verify "$pcap" --ikev2 "$CD/bad.ikev2" --esp "$CD/td.esp.ws" >/dev/null 2>&1; then
      fail "$CASE: tshark accepted the IKE frames with a wrong SK_ai/SK_ei: the check cannot fail"
    fi
    if $KEYS verify "$pcap" --ikev2 "$tike" --esp "$CD/bad.esp" >/dev/null 2>&1; then
      fail "$CASE: tshark accepted the ESP frames with a wrong key: the check cannot fail"
    fi
    CHECKED_CAN_FAIL=1
    log "$CASE: (and tshark rejects a table with one key digit changed)"
  fi
}

# log_clean: no warning in charon's log (but the expected INVALID_KE_PAYLOAD) nor tunneld's
# (but the key log warning).
log_clean() {
  local w
  w=$(swan_log_warnings "$SD" | grep -v -E 'INVALID_KE_PAYLOAD|requested DH group|retrying IKE_SA_INIT' || true)
  [ -z "$w" ] || fail "$CASE: charon.log has warnings: $w"
  # (tunneld warns at start that no inbound policy protects anything: IKE installs them later)
  w=$(grep -E '^[^ ]+ +(WARN|ERROR) ' "$CD/tunneld.log" | grep -v -E -e '--keylog .*EVERY IKE AND ESP KEY' \
    -e 'no inbound policy protects anything' || true)
  [ -z "$w" ] || fail "$CASE: tunneld.log has warnings: $w"
}

# ---- one case ------------------------------------------------------------------------------
# run_case NAME KEY=VALUE...: who=t|s (initiator: tunneld or strongSwan), fam=4|6, ike_t, ike_s,
# esp_t, esp_s (proposal lists; ike=/esp= set both), psk_s (charon's PSK, default tunneld's),
# nat=none|t|s (who is behind the NAT), expect=up|auth|noprop, del=t|s (who deletes),
# inner6=yes|no, ke=yes (INVALID_KE_PAYLOAD expected first), start=none|start, sel_ike and
# sel_esp (the proposals charon must log as selected, e.g. IKE:AES_CBC_256/HMAC_SHA2_256_128/...).
run_case() {
  CASE=$1
  shift
  local -A o=([who]=t [fam]=4 [nat]=none [expect]=up [del]=t [inner6]=no [ke]=no [start]=none [any]=no)
  local kv
  for kv in "$@"; do o[${kv%%=*}]=${kv#*=}; done
  [ -z "${o[ike]:-}" ] || { o[ike_t]=${o[ike]}; o[ike_s]=${o[ike]}; }
  [ -z "${o[esp]:-}" ] || { o[esp_t]=${o[esp]}; o[esp_s]=${o[esp]}; }
  local psk="ii-$RANDOM-$RANDOM-$RANDOM"
  o[psk_s]=${o[psk_s]:-$psk}
  NAT=${o[nat]}
  ESP_ALG=${o[esp_t]}
  local t0=$SECONDS
  [ "$NAT_USED" = 0 ] || topo_up
  case $NAT in
    t) nat_on ${T}nb ${T}na ;;
    s) nat_on ${T}na ${T}nb ;;
  esac
  CD=$WORK/$CASE
  SD=$CD/charon
  mkdir -p "$CD"
  local ta=10.99.1.1 sa=10.99.2.1
  [ "${o[fam]}" = 4 ] || { ta=fd00:99:1::1; sa=fd00:99:2::1; }
  local tts=10.100.1.0/24 sts=10.100.2.0/24
  [ "${o[inner6]}" = no ] || { tts=$tts,fd00:100:1::/64; sts=$sts,fd00:100:2::/64; }
  local t_remote=$sa s_remote=$ta
  [ "$NAT" != t ] || s_remote=%any
  # tunneld as a responder for any address (road warriors; charon behind a NAT)
  [ "${o[any]}" = no ] || t_remote=%any
  td_conf "$CD" local=$ta remote=$t_remote ike="${o[ike_t]}" esp="${o[esp_t]}" psk="$psk" \
    local_ts=$tts remote_ts=$sts start="${o[start]}"
  swan_instance "$SD"
  swan_site_conf "$SD" local=$sa remote=$s_remote local_id=charon.ii.test remote_id=tunneld.ii.test \
    local_ts=$sts remote_ts=$tts psk="${o[psk_s]}" ike="${o[ike_s]}" esp="${o[esp_s]}" encap=yes
  cap_start
  swan_start ${T}b "$SD"
  swan_load "$SD"
  td_start "$CD"
  local out rc
  if [ "${o[who]}" = t ]; then
    [ "${o[start]}" = start ] || td_ike initiate >"$CD/initiate.out" 2>&1 || true
  else
    rc=0
    out=$(swan_ctl "$SD" --initiate --child net --timeout 10 2>&1) || rc=$?
    echo "$out" >"$CD/initiate.out"
    if [ "${o[expect]}" = up ] && [ $rc -ne 0 ]; then
      fail "$CASE: swanctl --initiate failed: $(echo "$out" | tail -n 8); tunneld: $(tail -n 8 "$CD/tunneld.log")"
    fi
    if [ "${o[expect]}" != up ] && [ $rc -eq 0 ]; then
      fail "$CASE: swanctl --initiate succeeded where it should fail: $(echo "$out" | tail -n 4)"
    fi
  fi
  local nike=6 nesp=20
  [ "${o[inner6]}" = no ] || nesp=40
  [ "${o[ke]}" = no ] || nike=8
  case ${o[expect]} in
    up)
      wait_counts 10 "1 1"
      # the proposals charon says were chosen (sel_ike=, sel_esp=: charon's words)
      for kv in "${o[sel_ike]:-}" "${o[sel_esp]:-}"; do
        [ -z "$kv" ] || grep -q "selected proposal: $kv\$" "$SD/charon.log" ||
          fail "$CASE: charon did not select $kv: $(grep 'selected proposal' "$SD/charon.log")"
      done
      td_ctl ike list >"$CD/ike-list.out" 2>&1 || fail "$CASE: ipsec ike list failed: $(cat "$CD/ike-list.out")"
      td_ctl show >"$CD/show.out" 2>&1 || fail "$CASE: ipsec show failed: $(cat "$CD/show.out")"
      # The child's SPIs as `ipsec ike list` prints them are the ones charon lists (reversed).
      local spis sw_sas
      spis=$(sed -n 's/^ *child net: in \([0-9a-f]*\), out \([0-9a-f]*\)$/\1 \2/p' "$CD/ike-list.out")
      sw_sas=$(swan_list_sas "$SD")
      [[ -n $spis && $sw_sas == *"spi-in=${spis#* }"* && $sw_sas == *"spi-out=${spis% *}"* ]] ||
        fail "$CASE: the child's SPIs differ: ipsec ike list: $(cat "$CD/ike-list.out"); charon: $sw_sas"
      ping_ok ${T}a 10.100.1.1 10.100.2.1
      ping_ok ${T}b 10.100.2.1 10.100.1.1
      if [ "${o[inner6]}" = yes ]; then
        ping_ok ${T}a fd00:100:1::1 fd00:100:2::1
        ping_ok ${T}b fd00:100:2::1 fd00:100:1::1
      fi
      if [ "$NAT" != none ]; then
        local peer
        peer=$(swan_list_sas "$SD" | grep -o 'remote-host=[^ ]* remote-port=[0-9]*' | head -n 1)
        if [ "$NAT" = t ]; then
          [[ $peer == "remote-host=10.99.2.254 remote-port=2"???? ]] || fail "$CASE: charon sees tunneld at \`$peer\`, not the NAT's 10.99.2.254:20000-20999"
          grep -q 'remote host is behind NAT' "$SD/charon.log" || fail "$CASE: charon did not see the NAT"
          peer="charon sees tunneld at ${peer#remote-host=}"
        else
          grep -q 'local host is behind NAT' "$SD/charon.log" || fail "$CASE: charon did not see its NAT"
          grep -q 'IKE: gw up (Responder, 10.99.1.1:4500 <-> 10.99.1.254:2[0-9]\{4\},' "$CD/tunneld.log" ||
            fail "$CASE: tunneld does not see charon at the NAT's 10.99.1.254:20000-20999: $(grep 'IKE: gw up' "$CD/tunneld.log")"
          peer="tunneld's view: $(grep -o 'IKE: gw up ([^)]*)' "$CD/tunneld.log"); charon's: $peer"
          # remote_addrs = %any: the NAT's address is a peer added at run time, in the stats
          wait_for 5 "$CASE: the NAT's address as a peer in tunneld's stats" \
            bash -c "stats_peers '$CD/stats.json' | grep -qx '10.99.1.254 10.99.1.254:2[0-9]\{4\} True'"
        fi
        log "$CASE: through the NAT: $peer"
      fi
      if [ "${o[del]}" = t ]; then
        td_ike terminate >"$CD/terminate.out" 2>&1 || fail "$CASE: ipsec ike terminate failed: $(cat "$CD/terminate.out")"
      else
        swan_terminate "$SD" --ike sw
      fi
      nothing_left
      if [ "${o[any]}" = yes ]; then
        wait_for 5 "$CASE: the peer added at run time gone from tunneld's stats with its IKE SA" \
          bash -c "[ -z \"\$(stats_peers '$CD/stats.json')\" ]"
      fi
      cap_stop
      [ "${o[ke]}" = no ] || notify_seen "$CD/link.pcap" "" 17 || fail "$CASE: no INVALID_KE_PAYLOAD on the wire"
      if [ "${o[start]}" = start ]; then
        # tunneld initiated as it started, before its monitor connected: the log says it
        grep -q 'INFO IKE: gw up' "$CD/tunneld.log" && grep -q 'INFO IKE: gw/net up' "$CD/tunneld.log" ||
          fail "$CASE: tunneld did not log the IKE SA and child up"
        monitor_has child.down ike.down
      else
        monitor_has ike.up child.up child.down ike.down
      fi
      td_stop
      swan_stop "$SD"
      log_clean
      verify_capture $nike $nesp
      ;;
    auth)
      # who detects it: the responder (it checks the initiator's AUTH first)
      local deadline=$((SECONDS + 10))
      if [ "${o[who]}" = t ]; then
        until grep -q 'received AUTHENTICATION_FAILED\|"event":"ike.auth_failed"' "$CD/monitor.log" 2>/dev/null ||
          grep -q 'N(AUTH_FAILED)' "$SD/charon.log"; do
          [ $SECONDS -lt $deadline ] || fail "$CASE: no AUTHENTICATION_FAILED within 10 s: tunneld $(tail -n 5 "$CD/tunneld.log"); charon $(grep -E '\[(IKE|ENC)\]' "$SD/charon.log" | grep -v -E '  [0-9]+: |=>' | tail -n 5)"
          sleep 0.1
        done
        sleep 0.5
        monitor_has ike.auth_failed
        grep -q '"by":"peer"' <<<"$(grep '"event":"ike.auth_failed"' "$CD/monitor.log")" ||
          fail "$CASE: tunneld's ike.auth_failed does not say the peer refused us: $(grep auth_failed "$CD/monitor.log")"
      else
        grep -q 'received AUTHENTICATION_FAILED notify error' "$SD/charon.log" ||
          fail "$CASE: charon did not receive AUTHENTICATION_FAILED: $(echo "$out" | tail -n 5)"
        monitor_has ike.auth_failed
        grep -q '"by":"us"' <<<"$(grep '"event":"ike.auth_failed"' "$CD/monitor.log")" ||
          fail "$CASE: tunneld's ike.auth_failed does not say it refused the peer: $(grep auth_failed "$CD/monitor.log")"
      fi
      nothing_left
      if [ "${o[any]}" = yes ]; then
        wait_for 5 "$CASE: the peer added at run time gone from tunneld's stats with its IKE SA" \
          bash -c "[ -z \"\$(stats_peers '$CD/stats.json')\" ]"
      fi
      cap_stop
      # The IKE SA's keys from charon's log, its SPIs from the wire (see ike_interop_keys.py).
      $KEYS json "$SD/charon.log" -o "$CD/charon.json" 2>"$CD/charon_keys.log" ||
        fail "$CASE: no IKE keys in charon's log: $(cat "$CD/charon_keys.log")"
      local spis
      spis=$(tshark -n -r "$CD/link.pcap" -Y 'isakmp.exchangetype == 34 && isakmp.rspi != 00:00:00:00:00:00:00:00' \
        -T fields -e isakmp.ispi -e isakmp.rspi 2>/dev/null | head -n 1)
      [ -n "$spis" ] || fail "$CASE: no IKE_SA_INIT response on the wire"
      $CHECK ike-table "$CD/charon.json" --spi-i "${spis%%$'\t'*}" --spi-r "${spis##*$'\t'}" >"$CD/sw.ikev2"
      notify_seen "$CD/link.pcap" "$CD/sw.ikev2" 24 || fail "$CASE: no AUTHENTICATION_FAILED notify decrypted on the wire"
      td_stop
      swan_stop "$SD"
      ;;
    noprop)
      local deadline=$((SECONDS + 10))
      until grep -q 'NO_PROP' "$SD/charon.log"; do
        [ $SECONDS -lt $deadline ] || fail "$CASE: charon logged no NO_PROPOSAL_CHOSEN within 10 s"
        sleep 0.1
      done
      sleep 0.5
      nothing_left
      if [ "${o[any]}" = yes ]; then
        wait_for 5 "$CASE: the peer added at run time gone from tunneld's stats with its IKE SA" \
          bash -c "[ -z \"\$(stats_peers '$CD/stats.json')\" ]"
      fi
      cap_stop
      notify_seen "$CD/link.pcap" "" 14 || fail "$CASE: no NO_PROPOSAL_CHOSEN notify on the wire"
      [ "$(tshark -n -r "$CD/link.pcap" -Y 'isakmp.exchangetype != 34' 2>/dev/null | wc -l)" = 0 ] ||
        fail "$CASE: more than IKE_SA_INIT on the wire"
      monitor_has ike.no_proposal
      td_stop
      swan_stop "$SD"
      ;;
  esac
  [ ! -e /run/charon.pid ] || fail "$CASE: charon's /run leaked into the host's"
  PASSED+=("$CASE")
  TIMES+=("$CASE $((SECONDS - t0))s")
  log "$CASE: passed ($((SECONDS - t0)) s)"
}

topo_up
A128=aes128gcm16-prfsha256-x25519
want i-gcm && run_case i-gcm who=t ike=$A128 esp=aes128gcm16 del=t start=start
# ESN: libipsec has none, so tunneld offers (i-cbc) or accepts (r-gcm256) ESN and no ESN and
# must settle on no ESN with charon.
want r-gcm256 && run_case r-gcm256 who=s ike=aes256gcm16-prfsha384-ecp384 esp_t=aes256gcm16-esn-noesn esp_s=aes256gcm16 del=s
want i-cbc && run_case i-cbc who=t ike=aes128-sha256-ecp256 esp_t=chacha20poly1305-esn-noesn esp_s=chacha20poly1305 del=s
want r-modp && run_case r-modp who=s ike=aes256-sha512-modp2048 esp=aes128-sha256 del=t
want v6 && run_case v6 who=t fam=6 inner6=yes ike=aes256-sha384-ecp384 esp=aes128gcm16 del=s
want r-v6 && run_case r-v6 who=s fam=6 ike=$A128 esp=chacha20poly1305 del=t any=yes
want psk-i && run_case psk-i who=t ike=$A128 esp=aes128gcm16 psk_s=not-the-same-key expect=auth
want psk-r && run_case psk-r who=s ike=$A128 esp=aes128gcm16 psk_s=not-the-same-key expect=auth
want noprop-i && run_case noprop-i who=t ike_t=$A128 ike_s=aes256-sha256-modp2048 esp=aes128gcm16 expect=noprop
want noprop-r && run_case noprop-r who=s ike_t=aes256-sha256-modp2048 ike_s=$A128 esp=aes128gcm16 expect=noprop
want ke-i && run_case ke-i who=t ike_t=aes128gcm16-prfsha256-x25519-ecp256 ike_s=aes128gcm16-prfsha256-ecp256-x25519 esp=aes128gcm16 ke=yes del=s
want ke-r && run_case ke-r who=s ike_s=aes128gcm16-prfsha256-x25519-ecp256 ike_t=aes128gcm16-prfsha256-ecp256 esp=aes128gcm16 ke=yes del=t
want nat-i && run_case nat-i who=t nat=t ike=$A128 esp=aes128gcm16 del=s
want nat-r && run_case nat-r who=s nat=s ike=aes128-sha256-ecp256 esp=aes256gcm16 del=t any=yes
# The built-in clients' proposals (IKE_PROP/ESP_PROP "default": tunneld's defaults).
want win-r && run_case win-r who=s any=yes ike_s=3des-sha1-modp1024 esp_s=aes256-sha1 \
  ike_t=default,windows esp_t=default,windows del=s \
  sel_ike=IKE:3DES_CBC/HMAC_SHA1_96/PRF_HMAC_SHA1/MODP_1024 sel_esp=ESP:AES_CBC_256/HMAC_SHA1_96/NO_EXT_SEQ
want win-noprop && run_case win-noprop who=s any=yes ike_s=3des-sha1-modp1024 esp_s=aes256-sha1 \
  ike_t=default esp_t=default expect=noprop
want mac-r && run_case mac-r who=s any=yes ike_s=aes256-sha256-modp2048 esp_s=aes256-sha256 \
  ike_t=default esp_t=default del=t \
  sel_ike=IKE:AES_CBC_256/HMAC_SHA2_256_128/PRF_HMAC_SHA2_256/MODP_2048 sel_esp=ESP:AES_CBC_256/HMAC_SHA2_256_128/NO_EXT_SEQ
want android-r && run_case android-r who=s any=yes ike_s=aes256-sha256-x25519-modp2048 \
  esp_s=aes256gcm16,aes256-sha256 ike_t=default esp_t=default del=s \
  sel_ike=IKE:AES_CBC_256/HMAC_SHA2_256_128/PRF_HMAC_SHA2_256/CURVE_25519 sel_esp=ESP:AES_GCM_16_256/NO_EXT_SEQ

swan_host_quiet || fail "something listens on the host's UDP 500/4500 after the run"
log "passed: ${PASSED[*]}"
log "times: ${TIMES[*]}"
log "all cases passed ($((SECONDS - START)) s)"
