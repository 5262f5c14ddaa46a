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
#           pool, pings pass both ways, `ipsec ike list` shows alice and her address; with
#           `accounting = true` radiusd's detail file has an Accounting-Request Start for
#           alice with her lease as Framed-IP-Address, an Interim-Update (interim_interval
#           2 s) with the pings counted, and after charon terminates its IKE SA a Stop with
#           non-zero Acct-Input/Output-Octets and -Packets (tunneld's stats: the
#           Accounting-Responses taken)
#   wrong   bob with a wrong password: radiusd answers Access-Reject, tunneld refuses with
#           the reason ("the RADIUS server refused": log line and ike.auth_failed event),
#           charon gets AUTHENTICATION_FAILED; afterwards neither side has an IKE SA, a
#           child, an ESP SA or a policy, no lease was assigned, and no password or RADIUS
#           secret is in tunneld's log
#   down    radiusd not running: tunneld retransmits its Access-Request (1 s apart, 2 tries)
#           then refuses with the server-down reason (log line and ike.auth_failed event
#           "the RADIUS server did not answer"); nothing left on either side, no lease
#   failover two servers ([[radius]]): the first by preference is a closed port (nothing
#           listens; its own secret in the secrets file), the second radiusd: tunneld's
#           Access-Request times out on the first (1 s apart, 2 tries), which is marked down
#           (log line), and goes to radiusd with a new Identifier and radiusd's secret: alice
#           gets in (address, pings); the stats file counts per server (the first: timeouts
#           and marked down; the second: the failover and the answers)
#   slow    (not in --ci: about 10 s) radiusd paused (SIGSTOP) for 5.5 s while alice connects
#           (tunneld: 3 s between its tries, 3 tries): charon retransmits its IKE_AUTH request
#           at 4 s, which tunneld absorbs (the response waits for the server, RFC 7296 2.1);
#           tunneld retransmits its Access-Request; once radiusd runs again the conversation
#           completes: up, pings (radiusd itself ignores the duplicate Access-Request)
#
#   sudo bash scripts/ci/ike-eap-radius.sh          # every case (builds tunneld and ipsec)
#   sudo bash scripts/ci/ike-eap-radius.sh wrong    # only that one
#   sudo bash scripts/ci/ike-eap-radius.sh --ci     # ok, wrong, down, failover (about 20 s)
#   bash scripts/ci/ike-eap-radius.sh --if-possible # no root / netns / strongSwan / FreeRADIUS: say why, exit 0
set -euo pipefail
cd "$(dirname "$0")/../.."
NETNS_TAG=ike-eap-radius
. scripts/lib/netns.sh
. scripts/lib/strongswan.sh
. scripts/lib/ike-lifecycle.sh
. scripts/lib/freeradius.sh
. scripts/lib/roadwarrior.sh
ALL_CASES="ok wrong down failover slow"
parse_stages "$ALL_CASES" "$@"
if [ ${#STAGES[@]} -eq 0 ]; then
  if [ "$CI" = 1 ]; then read -r -a STAGES <<<"ok wrong down failover"; else read -r -a STAGES <<<"$ALL_CASES"; fi
fi
need_netns "network namespaces, charon, tunneld, radiusd"
fr_find || apt_install freeradius
fr_find || cannot "no FreeRADIUS (Debian freeradius)"
swan_install
rw_swan_pki
rw_swan_eap_plugins mschapv2
SWAN_LOG="ike=2 cfg=2 knl=1 net=1 enc=1 dmn=1 lib=1 job=1"
rw_bins
WORK=$(mktemp -d /tmp/ike-eap-radius.XXXXXX)
FAILED=0
trap 'rc=$?; fr_stop; [ $rc -ne 0 ] || [ $FAILED -eq 0 ] || rc=1; [ "${IKE_EAP_KEEP:-0}" = 0 ] || { log "files kept in $WORK"; [ $rc -ne 0 ] || WORK=; }; cleanup_all $rc 5' EXIT
trap 'fail "interrupted"' INT TERM

TOPO=kr$(($$ % 100000)) # the PID: runs side by side do not collide
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
CLOSED_PORT=$((RADIUS_PORT + 1)) # nothing listens there (the failover case's first server)
FR_ACCT_PORT=$((RADIUS_PORT + 2)) # radiusd's accounting port (the ok case's accounting)
fr_conf "$WORK/radius" "$RADIUS_PORT" "$RADIUS_SECRET" "alice:$ALICE_PW" "bob:$BOB_PW"

# ---- the server's certificate (strongSwan's pki) ---------------------------------------------
P=$WORK/pki
rw_server_cert "$P" vpn.radius.test "EAP-RADIUS test CA"

# sw_conf D USER PASSWORD: charon as the client: EAP-MSCHAPv2 as USER, the server by
# certificate, a virtual address asked for (vips = 0.0.0.0) and installed.
sw_conf() {
  rw_client_conf "$1" local_addrs=$B_NET remote_addrs=$A_NET vips=0.0.0.0 auth=eap-mschapv2 eap_id="$2" \
    password="$3" remote_id=vpn.radius.test cacert="$P/ca.pem" remote_ts=10.94.101.0/24
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

# server_stat DIR N FIELD: tunneld's stats file's ike.radius_servers[N].FIELD (empty if not there).
server_stat() {
  python3 -c 'import json,sys
try: print(json.load(open(sys.argv[1]))["ike"]["radius_servers"][int(sys.argv[2])][sys.argv[3]])
except Exception: print("")' "$1/stats.json" "$2" "$3"
}

# wait_server_stat DIR N FIELD MIN: until ike.radius_servers[N].FIELD is at least MIN (5 s).
wait_server_stat() {
  local d=$1 n=$2 f=$3 min=$4 v deadline=$((SECONDS + 5))
  until v=$(server_stat "$d" "$n" "$f") && [ -n "$v" ] && [ "$v" -ge "$min" ]; do
    [ $SECONDS -lt $deadline ] || case_fail "stats: radius_servers[$n].$f is \`$v\`, expected at least $min"
    sleep 0.2
  done
}

# detail_field STATUS ATTR: ATTR's value in radiusd's detail file's last record with
# Acct-Status-Type = STATUS (empty if none).
detail_field() {
  python3 - "$WORK/radius/radacct/detail" "$1" "$2" <<'PY'
import sys
try:
    text = open(sys.argv[1]).read()
except OSError:
    sys.exit(0)
out = ""
for rec in text.split("\n\n"):
    kv = {}
    for line in rec.splitlines():
        if "=" in line:
            k, v = line.split("=", 1)
            kv[k.strip()] = v.strip().strip('"')
    if kv.get("Acct-Status-Type") == sys.argv[2]:
        out = kv.get(sys.argv[3], "")
print(out)
PY
}

# check_accounting LEASE: a Start for alice with LEASE as Framed-IP-Address; the client
# leaves; a Stop with non-zero octets and packets both ways, the same Acct-Session-Id.
check_accounting() {
  local lease=$1 deadline=$((SECONDS + 5)) f
  until [ "$(detail_field Start Framed-IP-Address)" = "$lease" ]; do
    [ $SECONDS -lt $deadline ] || case_fail "radiusd's detail file has no Accounting Start with Framed-IP-Address $lease: $(tail -n 30 "$WORK/radius/radacct/detail" 2>&1)"
    sleep 0.2
  done
  [ "$(detail_field Start User-Name)" = alice ] || case_fail "the Accounting Start's User-Name is \`$(detail_field Start User-Name)\`"
  [ "$(detail_field Start Calling-Station-Id)" = "$B_NET" ] || case_fail "the Accounting Start's Calling-Station-Id is \`$(detail_field Start Calling-Station-Id)\`"
  [ "$(detail_field Start NAS-IP-Address)" = "$A_NET" ] || case_fail "the Accounting Start's NAS-IP-Address is \`$(detail_field Start NAS-IP-Address)\`"
  # an Interim-Update (interim_interval 2 s) with the pings' counts so far
  deadline=$((SECONDS + 5))
  until [ "$(detail_field Interim-Update Acct-Input-Octets)" -gt 0 ] 2>/dev/null; do
    [ $SECONDS -lt $deadline ] || case_fail "radiusd's detail file has no Interim-Update with Acct-Input-Octets above 0: $(tail -n 30 "$WORK/radius/radacct/detail" 2>&1)"
    sleep 0.2
  done
  swan_terminate "$SW" --ike rw
  deadline=$((SECONDS + 5))
  until [ -n "$(detail_field Stop Acct-Session-Id)" ]; do
    [ $SECONDS -lt $deadline ] || case_fail "radiusd's detail file has no Accounting Stop after the client left: $(tail -n 30 "$WORK/radius/radacct/detail" 2>&1)"
    sleep 0.2
  done
  [ "$(detail_field Stop Acct-Session-Id)" = "$(detail_field Start Acct-Session-Id)" ] || case_fail "Start and Stop have different Acct-Session-Ids"
  for f in Acct-Input-Octets Acct-Output-Octets Acct-Input-Packets Acct-Output-Packets; do
    [ "$(detail_field Stop $f)" -gt 0 ] 2>/dev/null || case_fail "the Accounting Stop's $f is \`$(detail_field Stop $f)\`, not above 0"
  done
  [ "$(detail_field Stop Acct-Terminate-Cause)" = User-Request ] || case_fail "the Accounting Stop's Acct-Terminate-Cause is \`$(detail_field Stop Acct-Terminate-Cause)\`"
  wait_stat "$TD" acct_responses 3
}

# run_case NAME USER PASSWORD EXPECT(up|refused|down|slow|failover)
run_case() {
  rw_case_dirs "$1"
  local user=$2 pw=$3 expect=$4
  topo_up
  if [ "$expect" != down ]; then
    fr_start "$WORK/radius" "${TOPO}a" 2>"$CD/radiusd-start.txt" ||
      case_fail "radiusd did not start: $(tail -n 3 "$CD/radiusd-start.txt")"
  fi
  swan_instance "$SW"
  sw_conf "$SW" "$user" "$pw"
  swan_start ${TOPO}b "$SW"
  swan_load "$SW"
  rw_td_certs "$TD"
  td_head "$TD" local=$A_NET
  # the server: its certificate; any client, EAP passed to radiusd; the client's selector
  # is its lease (remote_ts empty: dynamic); no [[eap]] user here
  td_conn "$TD" name=rw local=$A_NET remote=%any local_id=vpn.radius.test auth=pubkey \
    certs="$TD/server.pem" key=server.key remote_auth=eap-radius remote_eap_id=%any \
    local_ts=10.94.101.0/24 child_rekey=0 remote_ts=
  rw_td_pool "$TD" eap-radius 10.94.3.0/24
  # down and failover: a silent server given up on after 2 s; ok and refused: radiusd answers
  # within 6 s (3 tries 2 s apart), room for a loaded machine (1 s x 2 failed once at load 11)
  local rt=2 tries=3
  case $expect in down | failover) rt=1 tries=2 ;; slow) rt=3 tries=3 ;; esac
  if [ "$expect" = failover ]; then
    # The first server by preference: a port nothing listens on, with a secret of its own.
    printf '\n[[radius]]\naddress = "127.0.0.1:%s"\nnas_identifier = "tunneld-test"\nretransmit_timeout = %s\nretransmit_tries = %s\n' \
      "$RADIUS_PORT" "$rt" "$tries" >>"$TD/tunneld.toml"
    printf '\n[[radius]]\naddress = "127.0.0.1:%s"\npreference = 10\n' "$CLOSED_PORT" >>"$TD/tunneld.toml"
    printf '\n[[radius]]\nsecret = "%s"\n[[radius]]\naddress = "127.0.0.1:%s"\nsecret = "closed-%s"\n' \
      "$RADIUS_SECRET" "$CLOSED_PORT" "$RADIUS_SECRET" >>"$TD/secrets.toml"
  else
    printf '\n[radius]\naddress = "127.0.0.1:%s"\nnas_identifier = "tunneld-test"\nretransmit_timeout = %s\nretransmit_tries = %s\n' \
      "$RADIUS_PORT" "$rt" "$tries" >>"$TD/tunneld.toml"
    # accounting in the ok case (to radiusd's accounting port)
    [ "$1" != ok ] || printf 'accounting = true\nacct_port = %s\ninterim_interval = "2s"\n' "$FR_ACCT_PORT" >>"$TD/tunneld.toml"
    printf '\n[radius]\nsecret = "%s"\n' "$RADIUS_SECRET" >>"$TD/secrets.toml"
  fi
  "$IPSEC" check-config "$TD/tunneld.toml" >"$TD/check-config.txt" 2>&1 ||
    case_fail "ipsec check-config: $(tail -n 3 "$TD/check-config.txt")"
  td_start ${TOPO}a "$TD" 10.94.3.1
  if [ "$expect" = slow ]; then
    kill -STOP "$FR_PID"
    (sleep 5.5 && kill -CONT "$FR_PID") &
    BG+=("$!")
  fi
  rw_initiate
  if [ "$expect" = up ] || [ "$expect" = slow ] || [ "$expect" = failover ]; then
    rw_wait_up
    local cin
    cin=$(rw_client_vip "$SW")
    [[ "$cin" == 10.94.3.* ]] || case_fail "charon has no virtual IP from the pool: \`$cin\`"
    rw_pings "$cin"
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
    if [ "$1" = ok ]; then
      check_accounting "$cin"
    fi
    if [ "$expect" = failover ]; then
      grep -q "RADIUS server 127.0.0.1:$CLOSED_PORT marked down" "$TD/tunneld.log" ||
        case_fail "tunneld's log does not say the closed server was marked down: $(grep -i radius "$TD/tunneld.log" | tail -n 3)"
      wait_server_stat "$TD" 0 timeouts 1
      wait_server_stat "$TD" 0 marked_down 1
      wait_server_stat "$TD" 0 sent 2
      wait_server_stat "$TD" 1 failovers_to 1
      wait_server_stat "$TD" 1 answers 3
      [ "$(server_stat "$TD" 0 server)" = "127.0.0.1:$CLOSED_PORT" ] ||
        case_fail "stats: radius_servers[0] is not the closed port (preference 10 first): $(server_stat "$TD" 0 server)"
    fi
    if [ "$expect" = slow ]; then
      grep -q "retransmit 1 of request with message ID 2" "$SW/charon.log" ||
        case_fail "charon did not retransmit its IKE_AUTH request while radiusd was paused: $(grep -i retransmit "$SW/charon.log" | head -n 2)"
      wait_stat "$TD" retransmitted 1
    fi
  else
    rw_wait_refused
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

# case_args CASE: run_case's arguments in A
case_args() {
  case $1 in
    ok) A=(alice "$ALICE_PW" up) ;;
    wrong) A=(bob "not-$BOB_PW" refused) ;;
    down) A=(alice "$ALICE_PW" down) ;;
    slow) A=(alice "$ALICE_PW" slow) ;;
    failover) A=(alice "$ALICE_PW" failover) ;;
  esac
}
rw_cases case_args fr_stop
