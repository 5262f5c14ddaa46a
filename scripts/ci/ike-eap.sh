#!/usr/bin/env bash
# EAP-MSCHAPv2 in IKE_AUTH (RFC 7296 2.16; issue #36 part 2; docs/ike-eap.md): strongSwan's
# charon 5.9.8 (kernel-libipsec) as a road-warrior client with `auth = eap-mschapv2`,
# `eap_id = alice`, against tunneld as the server, which proves itself with a certificate
# (made by strongSwan's own pki tool, not by this project) and checks the user against the
# secrets file's [[eap]], in network namespaces, as root:
#
#   kea (tunneld, server)  keva 10.93.1.1/24 ------ kevb 10.93.1.2/24  keb (charon, client)
#   inner addresses on lo: 10.93.101.1 (tunneld's side), 10.93.102.1 (charon's)
#
# Cases:
#   ok      charon initiates with the right password: both sides list the IKE SA and the child,
#           3 pings pass each way through the tunnel, `ipsec ike list` shows the client as
#           its EAP identity `alice`, charon's log says the EAP method succeeded and the
#           server's certificate was checked. tunneld's connection says `eap_only = true` and
#           charon asks for EAP-only (it always sends EAP_ONLY_AUTHENTICATION): EAP-MSCHAPv2
#           is not a safe method (RFC 5998 4), so tunneld ignores it and signs (RFC 5998 3);
#           tunneld counts no EAP-only response
#   wrong   charon initiates with a wrong password: charon gets the MSCHAPv2 Failure-Request
#           and gives up (an INFORMATIONAL with AUTHENTICATION_FAILED), tunneld logs the
#           refusal with its reason ("wrong password"); afterwards neither side has an IKE
#           SA, a child, an ESP SA or a policy, and no password is in tunneld's log
#   vip     as ok, with `vips = 0.0.0.0` (issue #36's road warrior): tunneld leases an address
#           of its pool to the EAP identity (the first IKE_AUTH request's CFG_REQUEST answered
#           after EAP), charon installs it, pings both ways between it and tunneld's side
#
#   sudo bash scripts/ci/ike-eap.sh            # both cases (builds tunneld and ipsec)
#   sudo bash scripts/ci/ike-eap.sh ok         # only that one
#   sudo bash scripts/ci/ike-eap.sh --ci       # both (about 10 s)
#   bash scripts/ci/ike-eap.sh --if-possible   # no root / netns / strongSwan: say why, exit 0
#
# charon's eap-mschapv2 plugin (Debian libcharon-extauth-plugins) needs MD4 and DES, which
# its gcrypt plugin gives (OpenSSL 3 keeps them in its legacy provider), and eap-identity to
# answer the EAP-Identity Request: all three are added to SWAN_PLUGINS by
# scripts/lib/roadwarrior.sh's rw_swan_eap_plugins.
set -euo pipefail
cd "$(dirname "$0")/../.."
NETNS_TAG=ike-eap
. scripts/lib/netns.sh
. scripts/lib/strongswan.sh
. scripts/lib/ike-lifecycle.sh
. scripts/lib/roadwarrior.sh
CASE_RESULT_FAIL=1   # case_fail writes "FAIL WHY" in the case's result, which the summary shows
ALL_CASES="ok wrong vip"
parse_stages "$ALL_CASES" "$@" # --ci: the same cases (they are short)
[ ${#STAGES[@]} -gt 0 ] || read -r -a STAGES <<<"$ALL_CASES"
need_netns "network namespaces, charon, tunneld"
swan_install
rw_swan_pki
rw_swan_eap_plugins mschapv2
SWAN_LOG="ike=2 cfg=2 knl=1 net=1 enc=1 dmn=1 lib=1 job=1"
rw_bins
WORK=$(mktemp -d /tmp/ike-eap.XXXXXX)
FAILED=0
trap 'rc=$?; [ $rc -ne 0 ] || [ $FAILED -eq 0 ] || rc=1; [ "${IKE_EAP_KEEP:-0}" = 0 ] || { log "files kept in $WORK"; [ $rc -ne 0 ] || WORK=; }; cleanup_all $rc 5' EXIT
trap 'fail "interrupted"' INT TERM

TOPO=ke
TOPO_ROUTER=0
A_NET=10.93.1.1
B_NET=10.93.1.2
A_IN=10.93.101.1
B_IN=10.93.102.1
TD_FAIL=case_fail
PASSWORD="Mschap-$RANDOM$RANDOM"

# ---- the server's certificate (strongSwan's pki) ---------------------------------------------
P=$WORK/pki
rw_server_cert "$P" vpn.eap.test "EAP test CA"

# sw_conf D PASSWORD [VIP]: charon as the client: EAP-MSCHAPv2 as alice, the server by
# certificate; with VIP a virtual address asked for (vips = 0.0.0.0) and installed.
sw_conf() {
  local lts=local_ts=10.93.102.0/24 vips=vips=
  [ -z "${3:-}" ] || { lts=local_ts=; vips=vips=0.0.0.0; }
  rw_client_conf "$1" local_addrs=$B_NET remote_addrs=$A_NET "$vips" auth=eap-mschapv2 eap_id=alice \
    password="$2" remote_id=vpn.eap.test cacert="$P/ca.pem" "$lts" remote_ts=10.93.101.0/24
}

# run_case NAME CLIENT_PASSWORD EXPECT(up|refused|vip)
run_case() {
  rw_case_dirs "$1"
  local pw=$2 expect=$3
  topo_up
  swan_instance "$SW"
  sw_conf "$SW" "$pw" "$([ "$expect" != vip ] || echo vip)"
  swan_start keb "$SW"
  swan_load "$SW"
  rw_td_certs "$TD"
  td_head "$TD" local=$A_NET
  # the server: its certificate; any client address and identity, EAP-MSCHAPv2 for all;
  # two users in the secrets file
  td_conn "$TD" name=rw local=$A_NET remote=%any local_id=vpn.eap.test auth=pubkey \
    certs="$TD/server.pem" key=server.key remote_auth=eap-mschapv2 remote_eap_id=%any \
    eap="alice:$PASSWORD bob:bobs-password" local_ts=10.93.101.0/24 child_rekey=0 \
    remote_ts="$([ "$expect" = vip ] || echo 10.93.102.0/24)" eap_only="$([ "$1" != ok ] || echo true)"
  local peer_net=$B_IN
  if [ "$expect" = vip ]; then
    # the pool; the client's selector is its lease (remote_ts empty: dynamic)
    rw_td_pool "$TD" eap-mschapv2 10.93.3.0/24
    peer_net=10.93.3.1
  fi
  "$IPSEC" check-config "$TD/tunneld.toml" >"$TD/check-config.txt" 2>&1 ||
    case_fail "ipsec check-config: $(tail -n 3 "$TD/check-config.txt")"
  td_start kea "$TD" $peer_net
  rw_initiate
  if [ "$expect" != refused ]; then
    rw_wait_up
    local cin=$B_IN
    if [ "$expect" = vip ]; then
      cin=$(rw_client_vip "$SW")
      [[ "$cin" == 10.93.3.* ]] || case_fail "charon has no virtual IP from the pool: \`$cin\`"
      grep -q "$cin" <<<"$(td_ctl "$TD" ike list 2>&1)" || case_fail "ipsec ike list does not show the virtual IP $cin"
    fi
    rw_pings "$cin"
    td_ctl "$TD" ike list >"$CD/ike-list.txt" 2>&1 || true
    grep -q alice "$CD/ike-list.txt" ||
      case_fail "ipsec ike list does not show the EAP identity alice: $(head -n 5 "$CD/ike-list.txt")"
    grep -q "EAP method EAP_MSCHAPV2 succeeded" "$SW/charon.log" ||
      case_fail "charon's log does not say EAP-MSCHAPv2 succeeded: $(grep -i eap "$SW/charon.log" | tail -n 3)"
    grep -q "authentication of 'vpn.eap.test' with .* successful" "$SW/charon.log" ||
      case_fail "charon did not check the server's certificate signature: $(grep -i authentication "$SW/charon.log" | tail -n 3)"
    if [ "$1" = ok ]; then
      # RFC 5998: asked for, allowed by the connection, refused for an unsafe method
      grep -q "generating IKE_AUTH request 1 .*N(EAP_ONLY)" "$SW/charon.log" ||
        case_fail "charon did not ask for EAP-only: $(grep "IKE_AUTH request 1" "$SW/charon.log")"
      ! grep -q "EAP-only authentication" "$SW/charon.log" || case_fail "EAP-only used with EAP-MSCHAPv2"
      td_ctl "$TD" ike list --json >"$CD/ike-list.json" 2>&1 || true
      python3 -c 'import json,sys; sys.exit(json.load(open(sys.argv[1]))["ike_sas"][0]["counters"]["eap_only"] != 0)' "$CD/ike-list.json" ||
        case_fail "tunneld counts an EAP-only response for EAP-MSCHAPv2: $(head -c 400 "$CD/ike-list.json")"
    fi
  else
    rw_wait_refused "with a wrong password"
    td_ctl "$TD" ike list >"$CD/ike-list.txt" 2>&1 || true
    ! grep -q -E 'alice|10\.93\.1\.2' "$CD/ike-list.txt" || case_fail "an IKE SA is left: $(head -n 5 "$CD/ike-list.txt")"
    grep -q "authentication failed: we refused the peer: .*wrong password" "$TD/tunneld.log" ||
      case_fail "tunneld's log has no refusal line with the reason: $(grep -i 'authentication' "$TD/tunneld.log" | tail -n 2)"
    # charon stops at the MSCHAPv2 Failure-Request ("E=691") and reports AUTHENTICATION_FAILED
    # in an INFORMATIONAL rather than sending its Failure-Response
    grep -q "EAP_MSCHAPV2 method failed" "$SW/charon.log" ||
      case_fail "charon's log does not say its EAP-MSCHAPv2 failed: $(grep -i eap "$SW/charon.log" | tail -n 3)"
    ! grep -q "$pw\|$PASSWORD" "$TD/tunneld.log" "$TD/monitor.log" || case_fail "a password is in tunneld's log"
  fi
  td_stop "$TD"
  swan_stop "$SW"
  echo "ok" >"$CD/result"
}

# case_args CASE: run_case's arguments in A
case_args() {
  case $1 in
    ok) A=("$PASSWORD" up) ;;
    vip) A=("$PASSWORD" vip) ;;
    wrong) A=("not-$PASSWORD" refused) ;;
  esac
}
rw_cases case_args
