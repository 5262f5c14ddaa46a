#!/usr/bin/env bash
# EAP-TLS in IKE_AUTH (RFC 7296 2.16, RFC 5216, RFC 9190; issue #36 part 2; docs/ike-eap.md):
# strongSwan's charon 5.9.8 (kernel-libipsec) as a road-warrior client with `auth = eap-tls`
# and its own client certificate, against tunneld as the server (rustls inside EAP), which
# proves itself with its certificate in IKE and in TLS and checks the client's certificate
# against `remote.cacerts`; all certificates made by strongSwan's own pki tool, not by this
# project; in network namespaces, as root:
#
#   kta (tunneld, server)  ktva 10.94.1.1/24 ------ ktvb 10.94.1.2/24  ktb (charon, client)
#   inner address on lo: 10.94.101.1 (tunneld's side); the client's is its lease of the pool
#
# Cases:
#   tls12   charon with `libtls.version_max = 1.2` and `vips = 0.0.0.0`: the EAP-TLS
#           handshake (RFC 5216) in fragments of 1 KiB; both sides list the IKE SA and the
#           child, charon gets an address of tunneld's pool (leased to the identity of its
#           certificate, alice@eap.test, shown by `ipsec ike list` with the method eap-tls),
#           3 pings pass each way;
#           charon's log says EAP-TLS succeeded with TLS 1.2 (the AUTH payloads of both sides
#           are made with the MSK, so an MSK other than RFC 5216 2.3's fails here)
#   tls13   the same with `version_max = 1.3` (RFC 9190: the 1.3 MSK and the protected
#           success indication). Not in the default run: strongSwan 5.9.8 is not RFC 9190's
#           EAP-TLS 1.3. Its libtls has no application for EAP-TLS and dies of SIGSEGV on the
#           server's protected success indication (one octet 0x00 of application data, RFC
#           9190 2.5), and it derives the 1.3 MSK with RFC 5216's label and no context
#           ("client EAP encryption") instead of RFC 9190 2.3's; tried here with the
#           indication left out and that label, it connects. TLS 1.3 is checked against
#           rustls's client in crates/eap/tests/tls.rs; run this case by name with a
#           strongSwan that implements RFC 9190.
#   eaponly the tls12 case with `eap_only = true` on tunneld's connection (RFC 5998) and
#           charon's `remote { auth = eap }`: charon always sends EAP_ONLY_AUTHENTICATION;
#           tunneld's first IKE_AUTH response has no CERT and no AUTH, and the server is proven
#           by its TLS certificate inside EAP-TLS and the AUTH made with the MSK; charon's log
#           says "allow mutual EAP-only authentication" and has no signature check of the
#           server; tunneld counts one EAP-only response; the same lease, pings, ike list
#   otherca charon's certificate is from a CA tunneld does not trust: tunneld refuses it in
#           the handshake (a TLS alert, then EAP-Failure) and logs "the client certificate was
#           refused"; afterwards neither side has an IKE SA, a child, an ESP SA, a policy or
#           a lease
#
#   sudo bash scripts/ci/ike-eap-tls.sh            # tls12, eaponly, otherca (builds tunneld, ipsec)
#   sudo bash scripts/ci/ike-eap-tls.sh tls13      # only that one
#   sudo bash scripts/ci/ike-eap-tls.sh --ci       # tls12, eaponly, otherca (about 15 s)
#   bash scripts/ci/ike-eap-tls.sh --if-possible   # no root / netns / strongSwan: say why, exit 0
#
# charon's eap-tls plugin is in Debian's libcharon-extra-plugins (installed with charon by
# scripts/lib/strongswan.sh); eap-identity answers the EAP-Identity Request, and its TLS stack
# (libtls) takes ECDHE and AES-GCM from the openssl plugin (in SWAN_PLUGINS); both added by
# scripts/lib/roadwarrior.sh's rw_swan_eap_plugins.
set -euo pipefail
cd "$(dirname "$0")/../.."
NETNS_TAG=ike-eap-tls
. scripts/lib/netns.sh
. scripts/lib/strongswan.sh
. scripts/lib/ike-lifecycle.sh
. scripts/lib/roadwarrior.sh
ALL_CASES="tls12 tls13 eaponly otherca"
DEFAULT_CASES="tls12 eaponly otherca" # tls13: see above
CASE_RESULT_FAIL=1 # case_fail (scripts/lib/ike-lifecycle.sh) writes "FAIL WHY" in the case's result
parse_stages "$ALL_CASES" "$@"
[ ${#STAGES[@]} -gt 0 ] || read -r -a STAGES <<<"$DEFAULT_CASES"
need_netns "network namespaces, charon, tunneld"
swan_install
rw_swan_pki
rw_swan_eap_plugins tls
SWAN_LOG="ike=2 cfg=2 knl=1 net=1 enc=1 dmn=1 lib=1 job=1 tls=2"
rw_bins
WORK=$(mktemp -d /tmp/ike-eap-tls.XXXXXX)
FAILED=0
trap 'rc=$?; [ $rc -ne 0 ] || [ $FAILED -eq 0 ] || rc=1; [ "${IKE_EAP_KEEP:-0}" = 0 ] || { log "files kept in $WORK"; [ $rc -ne 0 ] || WORK=; }; cleanup_all $rc 5' EXIT
trap 'fail "interrupted"' INT TERM

TOPO=kt
TOPO_ROUTER=0
A_NET=10.94.1.1
B_NET=10.94.1.2
A_IN=10.94.101.1
TD_FAIL=case_fail

# ---- certificates (strongSwan's pki): our CA with the server and alice, another with mallory
P=$WORK/pki
rw_ca "$P" ca "C=CH, O=ipsec-test, CN=EAP-TLS test CA"
rw_ca "$P" other "C=CH, O=Other, CN=Other CA"
rw_leaf "$P" server ca "C=CH, O=ipsec-test, CN=vpn.eap.test" vpn.eap.test --flag serverAuth --flag ikeIntermediate
rw_leaf "$P" alice ca "C=CH, O=ipsec-test, CN=alice@eap.test" alice@eap.test --flag clientAuth
rw_leaf "$P" mallory other "C=CH, O=Other, CN=mallory@eap.test" mallory@eap.test --flag clientAuth

# sw_conf D WHO [REMOTE_AUTH]: charon as the client: EAP-TLS with WHO's certificate, the
# server by certificate (in IKE and in TLS; REMOTE_AUTH=eap: by EAP alone, RFC 5998), a
# virtual address asked for (vips = 0.0.0.0).
sw_conf() {
  rw_client_conf "$1" local_addrs=$B_NET remote_addrs=$A_NET vips=0.0.0.0 auth=eap-tls id="$2@eap.test" \
    certs="$P/$2.pem" remote_id=vpn.eap.test cacert="$P/ca.pem" remote_ts=10.94.101.0/24 \
    remote_auth="${3:-pubkey}"
}

# run_case NAME WHO MAX_VERSION EXPECT(up|refused) [EAP_ONLY(true|false)]
run_case() {
  rw_case_dirs "$1"
  local who=$2 version=$3 expect=$4 eap_only=${5:-false}
  topo_up
  swan_instance "$SW"
  # strongSwan 5.9's TLS stack takes its highest version from libtls.version_max (1.2 by
  # default); the older charon.plugins.eap-tls.max_version is not read any more
  printf 'libtls {\n  version_max = %s\n}\n' "$version" >>"$SW/strongswan.conf"
  # EAP-only: charon's `remote { auth = eap }` (with `pubkey` it refuses a server that did
  # not sign: "constraint requires public key authentication, but EAP was used")
  sw_conf "$SW" "$who" "$([ "$eap_only" = true ] && echo eap || echo pubkey)"
  swan_start ktb "$SW"
  swan_load "$SW"
  rw_td_certs "$TD"
  td_head "$TD" local=$A_NET
  # the server: its certificate; any client address and identity, EAP-TLS for all with
  # client certificates of ca.pem; addresses from the pool (remote_ts empty: the lease)
  td_conn "$TD" name=rw local=$A_NET remote=%any local_id=vpn.eap.test auth=pubkey \
    certs="$TD/server.pem" key=server.key remote_auth=eap-tls remote_eap_id=%any \
    cacerts="$TD/ca.pem" local_ts=10.94.101.0/24 child_rekey=0 remote_ts= eap_only="$eap_only"
  rw_td_pool "$TD" eap-tls 10.94.3.0/24
  "$IPSEC" check-config "$TD/tunneld.toml" >"$TD/check-config.txt" 2>&1 ||
    case_fail "ipsec check-config: $(tail -n 3 "$TD/check-config.txt")"
  grep -q "EAP-TLS" "$TD/check-config.txt" ||
    case_fail "check-config does not name EAP-TLS: $(head -n 20 "$TD/check-config.txt")"
  td_start kta "$TD" 10.94.3.1
  local cin
  rw_initiate
  if [ "$expect" = up ]; then
    rw_wait_up
    cin=$(rw_client_vip "$SW")
    [[ "$cin" == 10.94.3.* ]] || case_fail "charon has no virtual IP from the pool: \`$cin\`"
    td_ctl "$TD" ike list >"$CD/ike-list.txt" 2>&1 || true
    grep -q "$cin" "$CD/ike-list.txt" || case_fail "ipsec ike list does not show the virtual IP $cin"
    grep -q "alice@eap.test" "$CD/ike-list.txt" ||
      case_fail "ipsec ike list does not show the certificate's identity: $(head -n 5 "$CD/ike-list.txt")"
    grep -q "eap-tls" "$CD/ike-list.txt" ||
      case_fail "ipsec ike list does not show the EAP method eap-tls: $(head -n 5 "$CD/ike-list.txt")"
    rw_pings "$cin"
    grep -q "EAP method EAP_TLS succeeded" "$SW/charon.log" ||
      case_fail "charon's log does not say EAP-TLS succeeded: $(grep -i -e eap -e tls "$SW/charon.log" | tail -n 3)"
    grep -q "negotiated TLS $version" "$SW/charon.log" ||
      case_fail "charon's log does not say TLS $version was negotiated: $(grep -i "negotiated" "$SW/charon.log" | tail -n 2)"
    if [ "$eap_only" = true ]; then
      # RFC 5998: no signature of the server in IKE; charon accepts it for a mutual method
      grep -q "allow mutual EAP-only authentication" "$SW/charon.log" ||
        case_fail "charon's log does not say EAP-only: $(grep -i -e "eap-only" -e authentication "$SW/charon.log" | tail -n 3)"
      ! grep -q "authentication of 'vpn.eap.test' with .*signature successful" "$SW/charon.log" ||
        case_fail "tunneld signed in IKE although EAP-only was asked and allowed"
      td_ctl "$TD" ike list --json >"$CD/ike-list.json" 2>&1 || true
      python3 -c 'import json,sys; sys.exit(json.load(open(sys.argv[1]))["ike_sas"][0]["counters"]["eap_only"] != 1)' "$CD/ike-list.json" ||
        case_fail "tunneld's ike list does not count one EAP-only response: $(head -c 400 "$CD/ike-list.json")"
    else
      grep -q "authentication of 'vpn.eap.test' with .* successful" "$SW/charon.log" ||
        case_fail "charon did not check the server's IKE signature: $(grep -i authentication "$SW/charon.log" | tail -n 3)"
      ! grep -q "allow mutual EAP-only authentication" "$SW/charon.log" ||
        case_fail "EAP-only used although tunneld's connection does not allow it"
    fi
  else
    rw_wait_refused "with a certificate of another CA"
    td_ctl "$TD" ike list >"$CD/ike-list.txt" 2>&1 || true
    ! grep -q -E 'mallory|10\.94\.1\.2|10\.94\.3\.' "$CD/ike-list.txt" || case_fail "an IKE SA is left: $(head -n 5 "$CD/ike-list.txt")"
    grep -q "authentication failed: we refused the peer: .*client certificate was refused" "$TD/tunneld.log" ||
      case_fail "tunneld's log has no refusal line with the reason: $(grep -i 'authentication' "$TD/tunneld.log" | tail -n 2)"
    grep -q -i -e "EAP_TLS method failed" -e "alert" "$SW/charon.log" ||
      case_fail "charon's log does not say its EAP-TLS failed: $(grep -i -e eap -e tls "$SW/charon.log" | tail -n 3)"
  fi
  td_stop "$TD"
  swan_stop "$SW"
  echo "ok" >"$CD/result"
}

# case_args CASE: run_case's arguments in A
case_args() {
  case $1 in
    tls12) A=(alice 1.2 up) ;;
    tls13) A=(alice 1.3 up) ;;
    eaponly) A=(alice 1.2 up true) ;;
    otherca) A=(mallory 1.2 refused) ;;
  esac
}
rw_cases case_args
