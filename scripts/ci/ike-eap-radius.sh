#!/usr/bin/env bash
# EAP passed to a RADIUS server inside IKE_AUTH (RFC 3579 inside RFC 7296 2.16; issue #36
# part 2, "EAP-RADIUS"; docs/ike-eap.md): tunneld as the server with `remote.auth =
# "eap-radius"` and a pool, a real FreeRADIUS (Debian's `freeradius`, started here with a
# config of the test's own, scripts/lib/freeradius.sh) with two users, and strongSwan's
# charon 5.9.8 (kernel-libipsec) as the road-warrior client with `auth = eap-mschapv2` and
# `vips = 0.0.0.0`, in network namespaces, as root:
#
#   kra (tunneld, radiusd on 127.0.0.1)  krva 10.94.1.1/24 ---- krvb 10.94.1.2/24  krb (charon)
#   inner addresses on lo: 10.94.101.1 (tunneld's side); the client's is its lease (10.94.3.x)
#
# tunneld's secrets file has no [[eap]] user: every password check is radiusd's.
#
# Cases:
#   ok      alice with her password: radiusd logs "Login OK", charon gets an address of the
#           pool, pings pass both ways, `ipsec ike list` shows alice and her address
#   wrong   bob with a wrong password: radiusd answers Access-Reject, tunneld refuses with
#           the reason ("the RADIUS server refused": log line and ike.auth_failed event),
#           charon gets AUTHENTICATION_FAILED; afterwards neither side has an IKE SA, a
#           child, an ESP SA or a policy, no lease was assigned, and no password or RADIUS
#           secret is in tunneld's log
#   down    radiusd not running: tunneld retransmits its Access-Request (1 s apart, 2 tries)
#           then refuses with the server-down reason (log line and ike.auth_failed event
#           "the RADIUS server did not answer"); nothing left on either side, no lease
#   slow    (not in --ci: about 10 s) radiusd paused (SIGSTOP) for 5.5 s while alice connects
#           (tunneld: 3 s between its tries, 3 tries): charon retransmits its IKE_AUTH request
#           at 4 s, which tunneld absorbs (the response waits for the server, RFC 7296 2.1);
#           tunneld retransmits its Access-Request; once radiusd runs again the conversation
#           completes: up, pings (radiusd itself ignores the duplicate Access-Request)
#
#   sudo bash scripts/ci/ike-eap-radius.sh          # every case (builds tunneld and ipsec)
#   sudo bash scripts/ci/ike-eap-radius.sh wrong    # only that one
#   sudo bash scripts/ci/ike-eap-radius.sh --ci     # ok, wrong, down (about 15 s)
#   bash scripts/ci/ike-eap-radius.sh --if-possible # no root / netns / strongSwan / FreeRADIUS: say why, exit 0
set -euo pipefail
cd "$(dirname "$0")/../.."
NETNS_TAG=ike-eap-radius
. scripts/lib/netns.sh
. scripts/lib/strongswan.sh
. scripts/lib/ike-lifecycle.sh
. scripts/lib/freeradius.sh
ALL_CASES="ok wrong down slow"
parse_stages "$ALL_CASES" "$@"
if [ ${#STAGES[@]} -eq 0 ]; then
  if [ "$CI" = 1 ]; then read -r -a STAGES <<<"ok wrong down"; else read -r -a STAGES <<<"$ALL_CASES"; fi
fi
need_netns "network namespaces, charon, tunneld, radiusd"
fr_find || apt_install freeradius
fr_find || cannot "no FreeRADIUS (Debian freeradius)"
swan_install
command -v pki >/dev/null || apt_install strongswan-pki
command -v pki >/dev/null || cannot "no strongSwan pki tool (Debian strongswan-pki)"
[ -e /usr/lib/ipsec/plugins/libstrongswan-eap-mschapv2.so ] || apt_install libcharon-extauth-plugins
[ -e /usr/lib/ipsec/plugins/libstrongswan-eap-mschapv2.so ] ||
  cannot "no charon eap-mschapv2 plugin (Debian libcharon-extauth-plugins)"
SWAN_PLUGINS="$SWAN_PLUGINS gcrypt eap-identity eap-mschapv2"
SWAN_LOG="ike=2 cfg=2 knl=1 net=1 enc=1 dmn=1 lib=1 job=1"
locate_tunneld --bin ipsec
IPSEC=$(dirname "$BIN")/ipsec
[ -z "${TUNNELD_BIN:-}" ] || IPSEC=${IPSEC_BIN:-$IPSEC}
[ -x "$IPSEC" ] || fail "no ipsec binary at $IPSEC"
WORK=$(mktemp -d /tmp/ike-eap-radius.XXXXXX)
FAILED=0
trap 'rc=$?; fr_stop; [ $rc -ne 0 ] || [ $FAILED -eq 0 ] || rc=1; [ "${IKE_EAP_KEEP:-0}" = 0 ] || { log "files kept in $WORK"; [ $rc -ne 0 ] || WORK=; }; cleanup_all $rc 5' EXIT
trap 'fail "interrupted"' INT TERM

TOPO=kr
TOPO_ROUTER=0
A_NET=10.94.1.1
B_NET=10.94.1.2
A_IN=10.94.101.1
B_IN=10.94.102.1
TD_FAIL=case_fail
CASE_RESULT_FAIL=1 # case_fail (scripts/lib/ike-lifecycle.sh) writes "FAIL WHY" in the case's result
ALICE_PW="Alice-$RANDOM$RANDOM"
BOB_PW="Bob-$RANDOM$RANDOM"
RADIUS_SECRET="radius-$$-$RANDOM"
RADIUS_PORT=$((20000 + ($$ % 20000)))
fr_conf "$WORK/radius" "$RADIUS_PORT" "$RADIUS_SECRET" "alice:$ALICE_PW" "bob:$BOB_PW"

# ---- the server's certificate (strongSwan's pki) ---------------------------------------------
P=$WORK/pki
mkdir -p "$P"
pk() { pki "$@" 2> >(grep -v -e "TPM 2.0" -e "plugin .tpm." >>"$P/pki.log"); }
pk --gen --type rsa --size 2048 --outform pem >"$P/ca.key"
pk --self --ca --lifetime 3650 --in "$P/ca.key" --type rsa --dn "C=CH, O=ipsec-test, CN=EAP-RADIUS test CA" \
  --outform pem >"$P/ca.pem"
pk --gen --type ecdsa --size 256 --outform pem >"$P/server.key"
chmod 600 "$P/ca.key" "$P/server.key"
pk --pub --in "$P/server.key" --type priv | pk --issue --cacert "$P/ca.pem" --cakey "$P/ca.key" --type pub \
  --dn "C=CH, O=ipsec-test, CN=vpn.radius.test" --san vpn.radius.test --flag serverAuth --flag ikeIntermediate \
  --lifetime 365 --outform pem >"$P/server.pem"
[ -s "$P/server.pem" ] || fail "pki made no server certificate: $(tail -n 3 "$P/pki.log")"

# sw_conf D USER PASSWORD: charon as the client: EAP-MSCHAPv2 as USER, the server by
# certificate, a virtual address asked for (vips = 0.0.0.0) and installed.
sw_conf() {
  local d=$1 user=$2 pw=$3
  sed -i 's/install_virtual_ip = no/install_virtual_ip = yes/' "$d/strongswan.conf"
  cp "$P/ca.pem" "$d/swanctl/x509ca/"
  cat >"$d/swanctl/swanctl.conf" <<EOF
connections {
  rw {
    version = 2
    local_addrs = $B_NET
    remote_addrs = $A_NET
    proposals = $IKE_PROP
    encap = yes
    mobike = no
    rekey_time = 0
    vips = 0.0.0.0
    local {
      auth = eap-mschapv2
      eap_id = $user
    }
    remote {
      auth = pubkey
      id = vpn.radius.test
    }
    children {
      net {
        remote_ts = 10.94.101.0/24
        esp_proposals = $ESP_PROP
        rekey_time = 0
      }
    }
  }
}
secrets {
  eap-$user {
    id = $user
    secret = "$pw"
  }
}
EOF
}

# radius_stat DIR FIELD: tunneld's stats file's ike.radius_FIELD (empty if not there yet).
radius_stat() {
  python3 -c 'import json,sys
try: print(json.load(open(sys.argv[1]))["ike"]["radius_" + sys.argv[2]])
except Exception: print("")' "$1/stats.json" "$2"
}

# wait_stat DIR FIELD MIN: until tunneld's stats file counts at least MIN (5 s), or fail.
wait_stat() {
  local d=$1 f=$2 min=$3 v deadline=$((SECONDS + 5))
  until v=$(radius_stat "$d" "$f") && [ -n "$v" ] && [ "$v" -ge "$min" ]; do
    [ $SECONDS -lt $deadline ] || case_fail "stats: radius_$f is \`$v\`, expected at least $min"
    sleep 0.2
  done
}

# run_case NAME USER PASSWORD EXPECT(up|refused|down|slow)
run_case() {
  CASE=$1
  CD=$WORK/$CASE
  TD=$CD/t
  SW=$CD/s
  mkdir -p "$CD" "$TD"
  local user=$2 pw=$3 expect=$4
  topo_up
  if [ "$expect" != down ]; then
    fr_start "$WORK/radius" "${TOPO}a" 2>"$CD/radiusd-start.txt" ||
      case_fail "radiusd did not start: $(tail -n 3 "$CD/radiusd-start.txt")"
  fi
  swan_instance "$SW"
  sw_conf "$SW" "$user" "$pw"
  swan_start krb "$SW"
  swan_load "$SW"
  cp "$P/server.pem" "$P/ca.pem" "$TD/"
  cp "$P/server.key" "$TD/server.key"
  chmod 600 "$TD/server.key"
  td_head "$TD" local=$A_NET
  # the server: its certificate; any client, EAP passed to radiusd; the client's selector
  # is its lease (remote_ts empty: dynamic); no [[eap]] user here
  td_conn "$TD" name=rw local=$A_NET remote=%any local_id=vpn.radius.test auth=pubkey \
    certs="$TD/server.pem" key=server.key remote_auth=eap-radius remote_eap_id=%any \
    local_ts=10.94.101.0/24 child_rekey=0 remote_ts=
  sed -i 's/^remote = { auth = "eap-radius".*/&\npools = ["rw"]/' "$TD/tunneld.toml"
  printf '\n[[pool]]\nname = "rw"\naddrs = "10.94.3.0/24"\n' >>"$TD/tunneld.toml"
  local rt=1 tries=2
  [ "$expect" != slow ] || { rt=3; tries=3; }
  printf '\n[radius]\naddress = "127.0.0.1:%s"\nnas_identifier = "tunneld-test"\nretransmit_timeout = %s\nretransmit_tries = %s\n' \
    "$RADIUS_PORT" "$rt" "$tries" >>"$TD/tunneld.toml"
  printf '\n[radius]\nsecret = "%s"\n' "$RADIUS_SECRET" >>"$TD/secrets.toml"
  "$IPSEC" check-config "$TD/tunneld.toml" >"$TD/check-config.txt" 2>&1 ||
    case_fail "ipsec check-config: $(tail -n 3 "$TD/check-config.txt")"
  td_start kra "$TD" 10.94.3.1
  if [ "$expect" = slow ]; then
    kill -STOP "$FR_PID"
    (sleep 5.5 && kill -CONT "$FR_PID") &
    BG+=("$!")
  fi
  local out rc=0 deadline tc
  out=$(SWAN_CTL_TIMEOUT=20 swan_ctl "$SW" --initiate --child net --timeout 12 2>&1) || rc=$?
  echo "$out" >"$CD/initiate.out"
  deadline=$((SECONDS + 12))
  if [ "$expect" = up ] || [ "$expect" = slow ]; then
    [ $rc -eq 0 ] || case_fail "initiation failed: $(tail -n 4 "$CD/initiate.out"); tunneld: $(tail -n 3 "$TD/tunneld.log")"
    until read -r -a tc <<<"$(td_counts "$TD")" && [ "${tc[0]}" = 1 ] && [ "${tc[1]}" = 1 ] && [ "$(sw_counts)" = "1 1" ]; do
      [ $SECONDS -lt $deadline ] || case_fail "not up within 12 s: tunneld (IKE child ESP policies) ${tc[*]}, charon $(sw_counts)"
      sleep 0.2
    done
    local cin
    cin=$(swan_list_sas "$SW" | grep -o 'local-vips=\[[0-9.]*\]' | head -n 1 | tr -d '[]' | cut -d= -f2)
    [[ "$cin" == 10.94.3.* ]] || case_fail "charon has no virtual IP from the pool: \`$cin\`"
    ip netns exec kra ping -n -c 3 -i 0.2 -W 2 -I $A_IN "$cin" >"$CD/ping-ts.out" 2>&1 ||
      case_fail "pings tunneld -> charon failed: $(tail -n 2 "$CD/ping-ts.out")"
    ip netns exec krb ping -n -c 3 -i 0.2 -W 2 -I "$cin" $A_IN >"$CD/ping-st.out" 2>&1 ||
      case_fail "pings charon -> tunneld failed: $(tail -n 2 "$CD/ping-st.out")"
    td_ctl "$TD" ike list >"$CD/ike-list.txt" 2>&1 || true
    grep -q "$user" "$CD/ike-list.txt" ||
      case_fail "ipsec ike list does not show the EAP identity $user: $(head -n 5 "$CD/ike-list.txt")"
    grep -q "$cin" "$CD/ike-list.txt" || case_fail "ipsec ike list does not show the virtual IP $cin"
    grep -q "Login OK: \[$user" "$WORK/radius/log/radius.log" ||
      case_fail "radiusd logged no 'Login OK' for $user: $(tail -n 3 "$WORK/radius/log/radius.log")"
    grep -q "EAP method EAP_MSCHAPV2 succeeded" "$SW/charon.log" ||
      case_fail "charon's log does not say EAP-MSCHAPv2 succeeded: $(grep -i eap "$SW/charon.log" | tail -n 3)"
    wait_stat "$TD" accepted 1
    wait_stat "$TD" sent 3
    if [ "$expect" = slow ]; then
      grep -q "retransmit 1 of request with message ID 2" "$SW/charon.log" ||
        case_fail "charon did not retransmit its IKE_AUTH request while radiusd was paused: $(grep -i retransmit "$SW/charon.log" | head -n 2)"
      wait_stat "$TD" retransmitted 1
    fi
  else
    [ $rc -ne 0 ] || case_fail "charon's initiation succeeded"
    sleep 1
    until read -r -a tc <<<"$(td_counts "$TD")" && [ "${tc[*]}" = "0 0 0 0" ] && [ "$(sw_counts)" = "0 0" ]; do
      [ $SECONDS -lt $deadline ] || case_fail "SAs left after the refusal: tunneld (IKE child ESP policies) ${tc[*]}, charon $(sw_counts)"
      sleep 0.2
    done
    td_ctl "$TD" ike list >"$CD/ike-list.txt" 2>&1 || true
    ! grep -q -E "$user|10\.94\.1\.2" "$CD/ike-list.txt" || case_fail "an IKE SA is left: $(head -n 5 "$CD/ike-list.txt")"
    ! grep -q '"ike.lease_assigned"' "$TD/monitor.log" || case_fail "a lease was assigned: $(grep lease "$TD/monitor.log" | head -n 2)"
    local why="the RADIUS server refused"
    [ "$expect" = refused ] || why="the RADIUS server did not answer"
    grep -q "authentication failed: we refused the peer: .*$why" "$TD/tunneld.log" ||
      case_fail "tunneld's log has no refusal line saying \"$why\": $(grep -i 'authentication' "$TD/tunneld.log" | tail -n 2)"
    grep -q "\"ike.auth_failed\".*$why\|$why.*\"ike.auth_failed\"" "$TD/monitor.log" ||
      case_fail "no ike.auth_failed event with \"$why\": $(grep auth_failed "$TD/monitor.log" | tail -n 2)"
    grep -q "AUTHENTICATION_FAILED" "$SW/charon.log" ||
      case_fail "charon's log has no AUTHENTICATION_FAILED: $(grep -i -e eap -e auth "$SW/charon.log" | tail -n 3)"
    if [ "$expect" = refused ]; then
      grep -q "Login incorrect.*\[$user" "$WORK/radius/log/radius.log" ||
        case_fail "radiusd logged no 'Login incorrect' for $user: $(tail -n 3 "$WORK/radius/log/radius.log")"
      wait_stat "$TD" rejected 1
    else
      wait_stat "$TD" server_down 1
      wait_stat "$TD" retransmitted 1
    fi
  fi
  ! grep -q -e "$pw" -e "$RADIUS_SECRET" "$TD/tunneld.log" "$TD/monitor.log" ||
    case_fail "a password or the RADIUS secret is in tunneld's log"
  td_stop "$TD"
  swan_stop "$SW"
  fr_stop
  echo "ok" >"$CD/result"
}

RESULTS=()
for c in "${STAGES[@]}"; do
  case $c in
    ok) args=(alice "$ALICE_PW" up) ;;
    wrong) args=(bob "not-$BOB_PW" refused) ;;
    down) args=(alice "$ALICE_PW" down) ;;
    slow) args=(alice "$ALICE_PW" slow) ;;
  esac
  t0=$SECONDS
  if (trap 'fr_stop; for p in "${BG[@]}"; do kill -KILL "$p" 2>/dev/null || true; done' EXIT; run_case "$c" "${args[@]}"); then
    RESULTS+=("$c ok $((SECONDS - t0))s")
  else
    FAILED=1
    RESULTS+=("$c FAIL $((SECONDS - t0))s $(sed 's/^FAIL //' "$WORK/$c/result" 2>/dev/null | head -c 160)")
    swan_stop_all 2>/dev/null || true
  fi
done
for ns in "${TOPO}a" "${TOPO}b"; do ip netns del "$ns" 2>/dev/null || true; done
echo
printf '%s\n' "${RESULTS[@]}" | column -t -l 4 2>/dev/null || printf '%s\n' "${RESULTS[@]}"
[ $FAILED = 0 ] || fail "some cases failed (files in $WORK)"
log "all ${#STAGES[@]} cases passed"
