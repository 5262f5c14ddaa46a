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
#           server's certificate was checked
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
# answer the EAP-Identity Request: all three are added to
# SWAN_PLUGINS here.
set -euo pipefail
cd "$(dirname "$0")/../.."
NETNS_TAG=ike-eap
. scripts/lib/netns.sh
. scripts/lib/strongswan.sh
. scripts/lib/ike-lifecycle.sh
CASE_RESULT_FAIL=1   # case_fail writes "FAIL WHY" in the case's result, which the summary shows
ALL_CASES="ok wrong vip"
parse_stages "$ALL_CASES" "$@" # --ci: the same cases (they are short)
[ ${#STAGES[@]} -gt 0 ] || read -r -a STAGES <<<"$ALL_CASES"
need_netns "network namespaces, charon, tunneld"
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
mkdir -p "$P"
pk() { pki "$@" 2> >(grep -v -e "TPM 2.0" -e "plugin .tpm." >>"$P/pki.log"); }
pk --gen --type rsa --size 2048 --outform pem >"$P/ca.key"
pk --self --ca --lifetime 3650 --in "$P/ca.key" --type rsa --dn "C=CH, O=ipsec-test, CN=EAP test CA" \
  --outform pem >"$P/ca.pem"
pk --gen --type ecdsa --size 256 --outform pem >"$P/server.key"
chmod 600 "$P/ca.key" "$P/server.key"
pk --pub --in "$P/server.key" --type priv | pk --issue --cacert "$P/ca.pem" --cakey "$P/ca.key" --type pub \
  --dn "C=CH, O=ipsec-test, CN=vpn.eap.test" --san vpn.eap.test --flag serverAuth --flag ikeIntermediate \
  --lifetime 365 --outform pem >"$P/server.pem"
[ -s "$P/server.pem" ] || fail "pki made no server certificate: $(tail -n 3 "$P/pki.log")"

# sw_conf D PASSWORD [VIP]: charon as the client: EAP-MSCHAPv2 as alice, the server by
# certificate; with VIP a virtual address asked for (vips = 0.0.0.0) and installed.
sw_conf() {
  local d=$1 pw=$2 vip=${3:-} lts="local_ts = 10.93.102.0/24" vips=""
  if [ -n "$vip" ]; then
    lts=""
    vips="vips = 0.0.0.0"
    sed -i 's/install_virtual_ip = no/install_virtual_ip = yes/' "$d/strongswan.conf"
  fi
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
    $vips
    local {
      auth = eap-mschapv2
      eap_id = alice
    }
    remote {
      auth = pubkey
      id = vpn.eap.test
    }
    children {
      net {
        $lts
        remote_ts = 10.93.101.0/24
        esp_proposals = $ESP_PROP
        rekey_time = 0
      }
    }
  }
}
secrets {
  eap-alice {
    id = alice
    secret = "$pw"
  }
}
EOF
}



# run_case NAME CLIENT_PASSWORD EXPECT(up|refused|vip)
run_case() {
  CASE=$1
  CD=$WORK/$CASE
  TD=$CD/t
  SW=$CD/s
  mkdir -p "$CD" "$TD"
  local pw=$2 expect=$3
  topo_up
  swan_instance "$SW"
  sw_conf "$SW" "$pw" "$([ "$expect" != vip ] || echo vip)"
  swan_start keb "$SW"
  swan_load "$SW"
  cp "$P/server.pem" "$P/ca.pem" "$TD/"
  cp "$P/server.key" "$TD/server.key"
  chmod 600 "$TD/server.key"
  td_head "$TD" local=$A_NET
  # the server: its certificate; any client address and identity, EAP-MSCHAPv2 for all;
  # two users in the secrets file
  td_conn "$TD" name=rw local=$A_NET remote=%any local_id=vpn.eap.test auth=pubkey \
    certs="$TD/server.pem" key=server.key remote_auth=eap-mschapv2 remote_eap_id=%any \
    eap="alice:$PASSWORD bob:bobs-password" local_ts=10.93.101.0/24 child_rekey=0 \
    remote_ts="$([ "$expect" = vip ] || echo 10.93.102.0/24)"
  local peer_net=$B_IN
  if [ "$expect" = vip ]; then
    # the pool; the client's selector is its lease (remote_ts empty: dynamic)
    sed -i 's/^remote = { auth = "eap-mschapv2".*/&\npools = ["rw"]/' "$TD/tunneld.toml"
    printf '\n[[pool]]\nname = "rw"\naddrs = "10.93.3.0/24"\n' >>"$TD/tunneld.toml"
    peer_net=10.93.3.1
  fi
  "$IPSEC" check-config "$TD/tunneld.toml" >"$TD/check-config.txt" 2>&1 ||
    case_fail "ipsec check-config: $(tail -n 3 "$TD/check-config.txt")"
  td_start kea "$TD" $peer_net
  local out rc=0 deadline tc
  out=$(SWAN_CTL_TIMEOUT=20 swan_ctl "$SW" --initiate --child net --timeout 12 2>&1) || rc=$?
  echo "$out" >"$CD/initiate.out"
  deadline=$((SECONDS + 12))
  if [ "$expect" != refused ]; then
    [ $rc -eq 0 ] || case_fail "initiation failed: $(tail -n 4 "$CD/initiate.out"); tunneld: $(tail -n 3 "$TD/tunneld.log")"
    until read -r -a tc <<<"$(td_counts "$TD")" && [ "${tc[0]}" = 1 ] && [ "${tc[1]}" = 1 ] && [ "$(sw_counts)" = "1 1" ]; do
      [ $SECONDS -lt $deadline ] || case_fail "not up within 12 s: tunneld (IKE child ESP policies) ${tc[*]}, charon $(sw_counts)"
      sleep 0.2
    done
    local cin=$B_IN
    if [ "$expect" = vip ]; then
      cin=$(swan_list_sas "$SW" | grep -o 'local-vips=\[[0-9.]*\]' | head -n 1 | tr -d '[]' | cut -d= -f2)
      [[ "$cin" == 10.93.3.* ]] || case_fail "charon has no virtual IP from the pool: \`$cin\`"
      grep -q "$cin" <<<"$(td_ctl "$TD" ike list 2>&1)" || case_fail "ipsec ike list does not show the virtual IP $cin"
    fi
    ip netns exec kea ping -n -c 3 -i 0.2 -W 2 -I $A_IN $cin >"$CD/ping-ts.out" 2>&1 ||
      case_fail "pings tunneld -> charon failed: $(tail -n 2 "$CD/ping-ts.out")"
    ip netns exec keb ping -n -c 3 -i 0.2 -W 2 -I $cin $A_IN >"$CD/ping-st.out" 2>&1 ||
      case_fail "pings charon -> tunneld failed: $(tail -n 2 "$CD/ping-st.out")"
    td_ctl "$TD" ike list >"$CD/ike-list.txt" 2>&1 || true
    grep -q alice "$CD/ike-list.txt" ||
      case_fail "ipsec ike list does not show the EAP identity alice: $(head -n 5 "$CD/ike-list.txt")"
    grep -q "EAP method EAP_MSCHAPV2 succeeded" "$SW/charon.log" ||
      case_fail "charon's log does not say EAP-MSCHAPv2 succeeded: $(grep -i eap "$SW/charon.log" | tail -n 3)"
    grep -q "authentication of 'vpn.eap.test' with .* successful" "$SW/charon.log" ||
      case_fail "charon did not check the server's certificate signature: $(grep -i authentication "$SW/charon.log" | tail -n 3)"
  else
    [ $rc -ne 0 ] || case_fail "charon's initiation succeeded with a wrong password"
    sleep 1
    until read -r -a tc <<<"$(td_counts "$TD")" && [ "${tc[*]}" = "0 0 0 0" ] && [ "$(sw_counts)" = "0 0" ]; do
      [ $SECONDS -lt $deadline ] || case_fail "SAs left after the refusal: tunneld (IKE child ESP policies) ${tc[*]}, charon $(sw_counts)"
      sleep 0.2
    done
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

RESULTS=()
for c in "${STAGES[@]}"; do
  case $c in
    ok) args=("$PASSWORD" up) ;;
    vip) args=("$PASSWORD" vip) ;;
    wrong) args=("not-$PASSWORD" refused) ;;
  esac
  t0=$SECONDS
  if (trap 'for p in "${BG[@]}"; do kill -KILL "$p" 2>/dev/null || true; done' EXIT; run_case "$c" "${args[@]}"); then
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
