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
#   otherca charon's certificate is from a CA tunneld does not trust: tunneld refuses it in
#           the handshake (a TLS alert, then EAP-Failure) and logs "the client certificate was
#           refused"; afterwards neither side has an IKE SA, a child, an ESP SA, a policy or
#           a lease
#
#   sudo bash scripts/ci/ike-eap-tls.sh            # tls12 and otherca (builds tunneld, ipsec)
#   sudo bash scripts/ci/ike-eap-tls.sh tls13      # only that one
#   sudo bash scripts/ci/ike-eap-tls.sh --ci       # tls12 and otherca (about 10 s)
#   bash scripts/ci/ike-eap-tls.sh --if-possible   # no root / netns / strongSwan: say why, exit 0
#
# charon's eap-tls plugin is in Debian's libcharon-extra-plugins (installed with charon by
# scripts/lib/strongswan.sh); eap-identity answers the EAP-Identity Request, and its TLS stack
# (libtls) takes ECDHE and AES-GCM from the openssl plugin (in SWAN_PLUGINS).
set -euo pipefail
cd "$(dirname "$0")/../.."
NETNS_TAG=ike-eap-tls
. scripts/lib/netns.sh
. scripts/lib/strongswan.sh
. scripts/lib/ike-lifecycle.sh
ALL_CASES="tls12 tls13 otherca"
DEFAULT_CASES="tls12 otherca" # tls13: see above
parse_stages "$ALL_CASES" "$@"
[ ${#STAGES[@]} -gt 0 ] || read -r -a STAGES <<<"$DEFAULT_CASES"
need_netns "network namespaces, charon, tunneld"
swan_install
command -v pki >/dev/null || apt_install strongswan-pki
command -v pki >/dev/null || cannot "no strongSwan pki tool (Debian strongswan-pki)"
[ -e /usr/lib/ipsec/plugins/libstrongswan-eap-tls.so ] || apt_install libcharon-extra-plugins
[ -e /usr/lib/ipsec/plugins/libstrongswan-eap-tls.so ] ||
  cannot "no charon eap-tls plugin (Debian libcharon-extra-plugins)"
SWAN_PLUGINS="$SWAN_PLUGINS eap-identity eap-tls"
SWAN_LOG="ike=2 cfg=2 knl=1 net=1 enc=1 dmn=1 lib=1 job=1 tls=2"
locate_tunneld --bin ipsec
IPSEC=$(dirname "$BIN")/ipsec
[ -z "${TUNNELD_BIN:-}" ] || IPSEC=${IPSEC_BIN:-$IPSEC}
[ -x "$IPSEC" ] || fail "no ipsec binary at $IPSEC"
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
mkdir -p "$P"
pk() { pki "$@" 2> >(grep -v -e "TPM 2.0" -e "plugin .tpm." >>"$P/pki.log"); }
ca() { # NAME DN
  pk --gen --type ecdsa --size 256 --outform pem >"$P/$1.key"
  pk --self --ca --lifetime 3650 --in "$P/$1.key" --type ecdsa --dn "$2" --outform pem >"$P/$1.pem"
}
leaf() { # NAME CA DN SAN FLAG...
  local n=$1 c=$2 dn=$3 san=$4
  shift 4
  pk --gen --type ecdsa --size 256 --outform pem >"$P/$n.key"
  pk --pub --in "$P/$n.key" --type priv | pk --issue --cacert "$P/$c.pem" --cakey "$P/$c.key" --type pub \
    --dn "$dn" --san "$san" "$@" --lifetime 365 --outform pem >"$P/$n.pem"
  [ -s "$P/$n.pem" ] || fail "pki made no certificate $n: $(tail -n 3 "$P/pki.log")"
}
ca ca "C=CH, O=ipsec-test, CN=EAP-TLS test CA"
ca other "C=CH, O=Other, CN=Other CA"
leaf server ca "C=CH, O=ipsec-test, CN=vpn.eap.test" vpn.eap.test --flag serverAuth --flag ikeIntermediate
leaf alice ca "C=CH, O=ipsec-test, CN=alice@eap.test" alice@eap.test --flag clientAuth
leaf mallory other "C=CH, O=Other, CN=mallory@eap.test" mallory@eap.test --flag clientAuth
chmod 600 "$P"/*.key

# sw_conf D WHO: charon as the client: EAP-TLS with WHO's certificate, the server by
# certificate (in IKE and in TLS), a virtual address asked for (vips = 0.0.0.0).
sw_conf() {
  local d=$1 who=$2
  sed -i 's/install_virtual_ip = no/install_virtual_ip = yes/' "$d/strongswan.conf"
  cp "$P/ca.pem" "$d/swanctl/x509ca/"
  cp "$P/$who.pem" "$d/swanctl/x509/"
  cp "$P/$who.key" "$d/swanctl/private/"
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
      auth = eap-tls
      id = $who@eap.test
      certs = $who.pem
    }
    remote {
      auth = pubkey
      id = vpn.eap.test
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
EOF
}

sw_counts() { swan_established "$SW"; } # "IKE_SAS CHILDREN" of charon

case_fail() {
  echo "$NETNS_TAG: FAIL: $CASE: $*" >&2
  echo "FAIL $*" >"$CD/result"
  exit 1
}

# run_case NAME WHO MAX_VERSION EXPECT(up|refused)
run_case() {
  CASE=$1
  CD=$WORK/$CASE
  TD=$CD/t
  SW=$CD/s
  mkdir -p "$CD" "$TD"
  local who=$2 version=$3 expect=$4
  topo_up
  swan_instance "$SW"
  # strongSwan 5.9's TLS stack takes its highest version from libtls.version_max (1.2 by
  # default); the older charon.plugins.eap-tls.max_version is not read any more
  printf 'libtls {\n  version_max = %s\n}\n' "$version" >>"$SW/strongswan.conf"
  sw_conf "$SW" "$who"
  swan_start ktb "$SW"
  swan_load "$SW"
  cp "$P/server.pem" "$P/ca.pem" "$TD/"
  cp "$P/server.key" "$TD/server.key"
  chmod 600 "$TD/server.key"
  td_head "$TD" local=$A_NET
  # the server: its certificate; any client address and identity, EAP-TLS for all with
  # client certificates of ca.pem; addresses from the pool (remote_ts empty: the lease)
  td_conn "$TD" name=rw local=$A_NET remote=%any local_id=vpn.eap.test auth=pubkey \
    certs="$TD/server.pem" key=server.key remote_auth=eap-tls remote_eap_id=%any \
    cacerts="$TD/ca.pem" local_ts=10.94.101.0/24 child_rekey=0 remote_ts=
  sed -i 's/^remote = { auth = "eap-tls".*/&\npools = ["rw"]/' "$TD/tunneld.toml"
  printf '\n[[pool]]\nname = "rw"\naddrs = "10.94.3.0/24"\n' >>"$TD/tunneld.toml"
  "$IPSEC" check-config "$TD/tunneld.toml" >"$TD/check-config.txt" 2>&1 ||
    case_fail "ipsec check-config: $(tail -n 3 "$TD/check-config.txt")"
  grep -q "EAP-TLS" "$TD/check-config.txt" ||
    case_fail "check-config does not name EAP-TLS: $(head -n 20 "$TD/check-config.txt")"
  td_start kta "$TD" 10.94.3.1
  local out rc=0 deadline tc cin
  out=$(SWAN_CTL_TIMEOUT=20 swan_ctl "$SW" --initiate --child net --timeout 12 2>&1) || rc=$?
  echo "$out" >"$CD/initiate.out"
  deadline=$((SECONDS + 12))
  if [ "$expect" = up ]; then
    [ $rc -eq 0 ] || case_fail "initiation failed: $(tail -n 4 "$CD/initiate.out"); tunneld: $(tail -n 3 "$TD/tunneld.log")"
    until read -r -a tc <<<"$(td_counts "$TD")" && [ "${tc[0]}" = 1 ] && [ "${tc[1]}" = 1 ] && [ "$(sw_counts)" = "1 1" ]; do
      [ $SECONDS -lt $deadline ] || case_fail "not up within 12 s: tunneld (IKE child ESP policies) ${tc[*]}, charon $(sw_counts)"
      sleep 0.2
    done
    cin=$(swan_list_sas "$SW" | grep -o 'local-vips=\[[0-9.]*\]' | head -n 1 | tr -d '[]' | cut -d= -f2)
    [[ "$cin" == 10.94.3.* ]] || case_fail "charon has no virtual IP from the pool: \`$cin\`"
    td_ctl "$TD" ike list >"$CD/ike-list.txt" 2>&1 || true
    grep -q "$cin" "$CD/ike-list.txt" || case_fail "ipsec ike list does not show the virtual IP $cin"
    grep -q "alice@eap.test" "$CD/ike-list.txt" ||
      case_fail "ipsec ike list does not show the certificate's identity: $(head -n 5 "$CD/ike-list.txt")"
    grep -q "eap-tls" "$CD/ike-list.txt" ||
      case_fail "ipsec ike list does not show the EAP method eap-tls: $(head -n 5 "$CD/ike-list.txt")"
    ip netns exec kta ping -n -c 3 -i 0.2 -W 2 -I $A_IN "$cin" >"$CD/ping-ts.out" 2>&1 ||
      case_fail "pings tunneld -> charon failed: $(tail -n 2 "$CD/ping-ts.out")"
    ip netns exec ktb ping -n -c 3 -i 0.2 -W 2 -I "$cin" $A_IN >"$CD/ping-st.out" 2>&1 ||
      case_fail "pings charon -> tunneld failed: $(tail -n 2 "$CD/ping-st.out")"
    grep -q "EAP method EAP_TLS succeeded" "$SW/charon.log" ||
      case_fail "charon's log does not say EAP-TLS succeeded: $(grep -i -e eap -e tls "$SW/charon.log" | tail -n 3)"
    grep -q "negotiated TLS $version" "$SW/charon.log" ||
      case_fail "charon's log does not say TLS $version was negotiated: $(grep -i "negotiated" "$SW/charon.log" | tail -n 2)"
    grep -q "authentication of 'vpn.eap.test' with .* successful" "$SW/charon.log" ||
      case_fail "charon did not check the server's IKE signature: $(grep -i authentication "$SW/charon.log" | tail -n 3)"
  else
    [ $rc -ne 0 ] || case_fail "charon's initiation succeeded with a certificate of another CA"
    sleep 1
    until read -r -a tc <<<"$(td_counts "$TD")" && [ "${tc[*]}" = "0 0 0 0" ] && [ "$(sw_counts)" = "0 0" ]; do
      [ $SECONDS -lt $deadline ] || case_fail "SAs left after the refusal: tunneld (IKE child ESP policies) ${tc[*]}, charon $(sw_counts)"
      sleep 0.2
    done
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

RESULTS=()
for c in "${STAGES[@]}"; do
  case $c in
    tls12) args=(alice 1.2 up) ;;
    tls13) args=(alice 1.3 up) ;;
    otherca) args=(mallory 1.2 refused) ;;
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
