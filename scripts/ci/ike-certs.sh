#!/usr/bin/env bash
# IKEv2 with certificates (RFC 7296 2.15 signatures, RFC 7427, CERT/CERTREQ) between tunneld
# and strongSwan's charon (5.9.8, kernel-libipsec) in network namespaces, as root
# (docs/ike-certs.md). The certificates are made by strongSwan's own `pki` tool (Debian
# strongswan-pki), not by this project:
#
#   kca (tunneld)  kcva 10.92.1.1/24 ------ kcvb 10.92.1.2/24  kcb (charon)
#   inner addresses on lo: 10.92.101.1 (tunneld's side), 10.92.102.1 (charon's)
#
# A root CA (RSA-3072) signs an intermediate CA (ECDSA P-384); end entities are signed by the
# root or the intermediate as each case says. Each case starts charon and tunneld afresh and
# checks (success cases) both sides list the IKE SA and the child, and 3 pings pass each way
# through the tunnel; (refusal cases) the initiator is refused with AUTHENTICATION_FAILED, the
# side that refused says why in one log line, and afterwards neither side has an IKE SA, a
# child, an ESP SA or a policy.
#
# The certificates make IKE_AUTH larger than charon's default fragment_size (1280 bytes): rsa-i
# and ecdsa-r also check that both sides sent it in IKE fragments (RFC 7383).
#
# Cases (name: who initiates / key types / identities / chain):
#   rsa-i       tunneld / RSA-2048 both / FQDN (subjectAltName) / root only; PKCS#1 key file
#   ecdsa-r     charon / ECDSA P-256 both / DN; tunneld's remote id `C=CH, O=ipsec-test, CN=*`
#               / both end entities under the intermediate, which each sends; tunneld has a
#               PSK connection for %any first, so it must switch connections at IKE_AUTH by
#               the identity and method charon proves; SEC1 key file
#   ed25519-i   tunneld / Ed25519 both / IP addresses (subjectAltName) / root; PKCS#8 key
#   expired-r   charon presents an expired certificate: tunneld refuses ("expired")
#   unknown-i   tunneld presents a certificate of a CA charon does not trust: charon refuses
#   mismatch-r  charon proves an identity (in its certificate) other than the one tunneld
#               requires: tunneld refuses ("identity"); a certificate that does not carry the
#               identity claimed is refused in crates/ike/tests/certs.rs (charon will not lie)
#   revoked-r   charon's certificate is on the root's CRL, which tunneld loads: tunneld refuses
#   revoked-i   tunneld's certificate is on the CRL charon loads: charon refuses
#   rsa1-r      charon / RSA-2048 both / FQDN / root, charon with `signature_authentication = no`
#               (no SIGNATURE_HASH_ALGORITHMS, RFC 7427, either way, as the built-in Windows
#               client): both sides sign AUTH method 1, RSA PKCS#1 v1.5 with SHA-1 (RFC 7296
#               3.8); tunneld verifies charon's and signs its own with RustCrypto rsa
#   rsa1-i      the same with tunneld initiating (it sends the notify; charon ignores it)
#   pki-r       certificates made by `ipsec pki` (ECDSA P-256, its own CA): charon, as a
#               remote-access client would, initiates to tunneld's server certificate (EKU
#               serverAuth + ikeIntermediate) by its FQDN, with a client certificate (clientAuth,
#               SAN DNS); both sides accept the other's
#   pki-ip-r    the same with tunneld's IP address as its identity (the iPAddress SAN)
#
#   sudo bash scripts/ci/ike-certs.sh                 # every case (builds tunneld and ipsec)
#   sudo bash scripts/ci/ike-certs.sh rsa-i ecdsa-r   # only those
#   sudo bash scripts/ci/ike-certs.sh --ci            # every case (they are short)
#   bash scripts/ci/ike-certs.sh --if-possible        # no root / netns / strongSwan: say why, exit 0
#
# A failing case prints why and the others still run; the summary table comes last; the work
# directory (certificates, configs, logs) is kept when a case failed (IKE_CERTS_KEEP=1: always).
set -euo pipefail
cd "$(dirname "$0")/../.."
NETNS_TAG=ike-certs
. scripts/lib/netns.sh
. scripts/lib/strongswan.sh
. scripts/lib/ike-lifecycle.sh
. scripts/lib/roadwarrior.sh # pk, rw_bins, rw_case_dirs, rw_cases
CASE_RESULT_FAIL=1   # case_fail writes "FAIL WHY" in the case's result, which the summary shows
ALL_CASES="rsa-i ecdsa-r ed25519-i expired-r unknown-i mismatch-r revoked-r revoked-i rsa1-r rsa1-i pki-r pki-ip-r"
parse_stages "$ALL_CASES" "$@" # --ci: the same cases (they take about 40 s)
[ ${#STAGES[@]} -gt 0 ] || read -r -a STAGES <<<"$ALL_CASES"
need_netns "network namespaces, charon, tunneld"
swan_install
command -v pki >/dev/null || apt_install strongswan-pki
command -v pki >/dev/null || fail "no strongSwan pki tool (Debian strongswan-pki)"
# pkcs8: Ed25519 keys; revocation: CRLs; constraints: path length of the intermediate.
SWAN_PLUGINS="$SWAN_PLUGINS pkcs8 revocation constraints"
SWAN_LOG="ike=2 cfg=2 knl=1 net=1 enc=1 dmn=1 lib=1 job=1"
rw_bins
WORK=$(mktemp -d /tmp/ike-certs.XXXXXX)
FAILED=0
trap 'rc=$?; [ $rc -ne 0 ] || [ $FAILED -eq 0 ] || rc=1; [ "${IKE_CERTS_KEEP:-0}" = 0 ] || { log "files kept in $WORK"; [ $rc -ne 0 ] || WORK=; }; cleanup_all $rc 5' EXIT
trap 'fail "interrupted"' INT TERM

# the topology of scripts/lib/ike-lifecycle.sh without its router, in namespaces kc* on
# 10.92.0.0/16: side A (kca) is tunneld, side B (kcb) charon
TOPO=kc$(($$ % 100000)) # the PID: runs side by side do not collide
TOPO_ROUTER=0
A_NET=10.92.1.1
B_NET=10.92.1.2
A_IN=10.92.101.1
B_IN=10.92.102.1
TD_FAIL=case_fail

# ---- certificates (strongSwan's pki) -------------------------------------------------------
P=$WORK/pki
mkdir -p "$P"
O="C=CH, O=ipsec-test"
# key NAME TYPE [SIZE]: PEM private key (RSA: PKCS#1, ECDSA: SEC1, Ed25519: PKCS#8, as pki writes them)
key() { pk --gen --type "$2" ${3:+--size $3} --outform pem >"$P/$1.key"; chmod 600 "$P/$1.key"; }
# issue NAME ISSUER TYPE DN [pki --issue options...]: NAME.pem signed by ISSUER
issue() {
  local n=$1 ca=$2 t=$3 dn=$4
  shift 4
  pk --pub --in "$P/$n.key" --type priv | pk --issue --cacert "$P/$ca.pem" --cakey "$P/$ca.key" \
    --type pub --dn "$dn" --outform pem "$@" >"$P/$n.pem"
}
key root rsa 3072
pk --self --ca --lifetime 3650 --in "$P/root.key" --type rsa --dn "$O, CN=ipsec-test Root CA" --outform pem >"$P/root.pem"
key int ecdsa 384
issue int root ecdsa "$O, CN=ipsec-test Intermediate CA" --ca --pathlen 0 --lifetime 3650
key other rsa 2048
pk --self --ca --lifetime 3650 --in "$P/other.key" --type rsa --dn "$O, CN=Other CA" --outform pem >"$P/other.pem"
key t-rsa rsa 2048
issue t-rsa root rsa "$O, CN=td.cert.test" --san td.cert.test --flag serverAuth --lifetime 365
key s-rsa rsa 2048
issue s-rsa root rsa "$O, CN=sw.cert.test" --san sw.cert.test --flag serverAuth --lifetime 365
key t-ec ecdsa 256
issue t-ec int ecdsa "$O, CN=td-ec" --lifetime 365
key s-ec ecdsa 256
issue s-ec int ecdsa "$O, CN=sw-ec" --lifetime 365
key t-ed ed25519
issue t-ed root ed25519 "$O, CN=td-ed" --san $A_NET --lifetime 365
key s-ed ed25519
issue s-ed root ed25519 "$O, CN=sw-ed" --san $B_NET --lifetime 365
key s-old rsa 2048
issue s-old root rsa "$O, CN=sw.old.test" --san sw.old.test --dateform '%Y-%m-%d' \
  --not-before 2020-01-01 --not-after 2021-01-01
key t-unk rsa 2048
issue t-unk other rsa "$O, CN=td.unknown.test" --san td.unknown.test --lifetime 365
key s-rev rsa 2048
issue s-rev root rsa "$O, CN=sw.revoked.test" --san sw.revoked.test --lifetime 365
key t-rev rsa 2048
issue t-rev root rsa "$O, CN=td.revoked.test" --san td.revoked.test --lifetime 365
pk --signcrl --cacert "$P/root.pem" --cakey "$P/root.key" --lifetime 30 --cert "$P/s-rev.pem" \
  --cert "$P/t-rev.pem" --outform pem >"$P/root.crl"
# `ipsec pki` (this project's): a CA of its own, a server certificate for tunneld (its name
# and address), a client certificate for charon
"$IPSEC" pki ca --cn "ipsec pki test CA" --org ipsec-test --days 30 --cert "$P/pki-ca.pem" --key "$P/pki-ca.key" >>"$P/pki.log"
"$IPSEC" pki server --ca-cert "$P/pki-ca.pem" --ca-key "$P/pki-ca.key" --name td.pki.test --name $A_NET \
  --days 30 --cert "$P/t-pki.pem" --key "$P/t-pki.key" >>"$P/pki.log"
"$IPSEC" pki client --ca-cert "$P/pki-ca.pem" --ca-key "$P/pki-ca.key" --cn sw-pki --dns sw.pki.test \
  --days 30 --cert "$P/s-pki.pem" --key "$P/s-pki.key" >>"$P/pki.log"
for f in root int t-rsa s-ec s-old pki-ca t-pki s-pki; do [ -s "$P/$f.pem" ] || fail "pki made no $f.pem: $(tail -n 3 "$P/pki.log")"; done
[ -s "$P/root.crl" ] || fail "pki made no CRL: $(tail -n 3 "$P/pki.log")"

# ---- charon --------------------------------------------------------------------------------
# sw_conf D LOCAL_ID REMOTE_ID CERT [CRL]: charon's swanctl.conf with certificate auth; the
# root and intermediate CAs trusted, CERT (and its key) as charon's, CRL loaded if given.
sw_conf() {
  local d=$1 lid=$2 rid=$3 cert=$4 crl=${5:-}
  cp "$P/root.pem" "$P/int.pem" "$P/pki-ca.pem" "$d/swanctl/x509ca/"
  cp "$P/$cert.pem" "$d/swanctl/x509/"
  cp "$P/$cert.key" "$d/swanctl/private/"
  [ -z "$crl" ] || cp "$P/$crl" "$d/swanctl/x509crl/"
  cat >"$d/swanctl/swanctl.conf" <<EOF
connections {
  sw {
    version = 2
    local_addrs = $B_NET
    remote_addrs = $A_NET
    proposals = $IKE_PROP
    encap = yes
    mobike = no
    rekey_time = 0
    local {
      auth = pubkey
      certs = $cert.pem
      id = "$lid"
    }
    remote {
      auth = pubkey
      id = "$rid"
    }
    children {
      net {
        local_ts = 10.92.102.0/24
        remote_ts = 10.92.101.0/24
        esp_proposals = $ESP_PROP
        rekey_time = 0
      }
    }
  }
}
EOF
}

# ---- tunneld (scripts/lib/ike-lifecycle.sh: td_head, td_conn, td_start, td_counts, td_stop) ----
# td_certs_conf D LOCAL_ID REMOTE_ID CERT [CRL] [EXTRA_CERT]: tunneld.toml with a PSK connection
# for %any first (never matching charon's method) and the certificate connection `gw`.
td_certs_conf() {
  local d=$1 lid=$2 rid=$3 cert=$4 crl=${5:-} extra=${6:-}
  mkdir -p "$d"
  cp "$P/$cert.pem" "$P/root.pem" "$P/int.pem" "$P/pki-ca.pem" "$d/"
  cp "$P/$cert.key" "$d/my.key"
  chmod 600 "$d/my.key"
  local certs="$d/$cert.pem" crls=""
  [ -z "$extra" ] || certs+=" $d/$extra.pem"
  [ -z "$crl" ] || { cp "$P/$crl" "$d/"; crls="$d/$crl"; }
  td_head "$d" local=$A_NET
  td_conn "$d" name=psk-any local=$A_NET remote=%any local_id=psk.cert.test psk="psk-$RANDOM$RANDOM" \
    child=psknet local_ts=10.92.201.0/24 remote_ts=10.92.202.0/24
  td_conn "$d" name=gw local=$A_NET remote=$B_NET local_id="$lid" remote_id="$rid" auth=pubkey \
    certs="$certs" cacerts="$d/$TD_CA.pem" crls="$crls" key=my.key \
    local_ts=10.92.101.0/24 remote_ts=10.92.102.0/24 child_rekey=0
}


# run_case NAME INITIATOR(t|s) EXPECT(up|refused-by-t|refused-by-s) T_ID T_CERT S_ID S_CERT
#          T_REMOTE_ID S_REMOTE_ID [T_CRL] [S_CRL] [T_EXTRA] [WHY]
run_case() {
  rw_case_dirs "$1"
  # the CA tunneld trusts: `ipsec pki`'s for the pki cases, else the root
  TD_CA=root
  case $CASE in pki-*) TD_CA=pki-ca ;; esac
  local init=$2 expect=$3 tid=$4 tcert=$5 sid=$6 scert=$7 trid=$8 srid=$9 tcrl=${10:-} scrl=${11:-} textra=${12:-} why=${13:-}
  topo_up
  SWAN_CHARON_EXTRA=$SW_EXTRA swan_instance "$SW"
  sw_conf "$SW" "$sid" "$srid" "$scert" "$scrl"
  swan_start ${TOPO}b "$SW"
  swan_load "$SW"
  td_certs_conf "$TD" "$tid" "$trid" "$tcert" "$tcrl" "$textra"
  "$IPSEC" check-config "$TD/tunneld.toml" >"$TD/check-config.txt" 2>&1 || case_fail "ipsec check-config: $(tail -n 3 "$TD/check-config.txt")"
  td_start ${TOPO}a "$TD" $B_IN
  local out rc=0
  if [ "$init" = s ]; then
    out=$(SWAN_CTL_TIMEOUT=20 swan_ctl "$SW" --initiate --child net --timeout 12 2>&1) || rc=$?
  else
    out=$(td_ctl "$TD" ike initiate gw 2>&1) || rc=$?
  fi
  echo "$out" >"$CD/initiate.out"
  local deadline=$((SECONDS + 12)) tc sc
  if [ "$expect" = up ]; then
    [ $rc -eq 0 ] || case_fail "initiation failed: $(tail -n 4 "$CD/initiate.out")"
    until read -r -a tc <<<"$(td_counts "$TD")" && [ "${tc[0]}" = 1 ] && [ "${tc[1]}" = 1 ] && [ "$(sw_counts)" = "1 1" ]; do
      [ $SECONDS -lt $deadline ] || case_fail "not up within 12 s: tunneld (IKE child ESP policies) ${tc[*]}, charon $(sw_counts); $(grep -i -E 'fail|refus|error' "$TD/tunneld.log" | tail -n 2)"
      sleep 0.2
    done
    ip netns exec ${TOPO}a ping -n -c 3 -i 0.2 -W 2 -I $A_IN $B_IN >"$CD/ping-ts.out" 2>&1 || case_fail "pings tunneld -> charon failed: $(tail -n 2 "$CD/ping-ts.out")"
    ip netns exec ${TOPO}b ping -n -c 3 -i 0.2 -W 2 -I $B_IN $A_IN >"$CD/ping-st.out" 2>&1 || case_fail "pings charon -> tunneld failed: $(tail -n 2 "$CD/ping-st.out")"
    # certificates make IKE_AUTH larger than charon's fragment_size (1280): both sides
    # fragment it (RFC 7383) where the chain is big enough (RSA, and ECDSA with its intermediate)
    if [ "$CASE" = rsa-i ] || [ "$CASE" = ecdsa-r ]; then
      grep -q 'splitting IKE message' "$SW/charon.log" && grep -q 'received fragment #' "$SW/charon.log" ||
        case_fail "IKE_AUTH was not fragmented both ways (charon's log: $(grep -c -E 'splitting IKE message|received fragment #' "$SW/charon.log") fragment lines)"
    fi
    # both sides proved who they are with the identity configured
    td_ctl "$TD" ike list >"$CD/ike-list.txt" 2>&1 || true
    grep -q "$srid" "$CD/ike-list.txt" 2>/dev/null || grep -q "${sid}" "$CD/ike-list.txt" 2>/dev/null ||
      case_fail "ipsec ike list does not show the peer's identity: $(head -n 5 "$CD/ike-list.txt")"
    if [[ $CASE == rsa1-* ]]; then
      # AUTH method 1 both ways: charon signed it and verified tunneld's (its log says "RSA
      # signature", the method's name, where method 14 names the scheme, RSA_EMSA_PKCS1_SHA2_256),
      # no RFC 7427 notify from charon, no method 14 (SHA-2) anywhere
      grep -q "authentication of '$tid' with RSA signature successful" "$SW/charon.log" ||
        case_fail "charon did not verify a method-1 (SHA-1) signature of tunneld: $(grep 'authentication of' "$SW/charon.log" | head -n 2)"
      grep -q "authentication of '$sid' (myself) with RSA signature successful" "$SW/charon.log" ||
        case_fail "charon did not sign with method 1 (SHA-1): $(grep 'authentication of' "$SW/charon.log" | head -n 2)"
      ! grep -q 'with RSA_EMSA_PKCS1_SHA2' "$SW/charon.log" || case_fail "a method-14 SHA-2 signature was used"
      ! grep -q 'N(HASH_ALG)' <<<"$(grep -E 'sending packet|generating IKE_SA_INIT' "$SW/charon.log")" ||
        case_fail "charon sent SIGNATURE_HASH_ALGORITHMS"
    fi
  else
    # refused: the refusing side says why; nothing is left anywhere
    sleep 1
    until read -r -a tc <<<"$(td_counts "$TD")" && [ "${tc[*]}" = "0 0 0 0" ] && [ "$(sw_counts)" = "0 0" ]; do
      [ $SECONDS -lt $deadline ] || case_fail "SAs left after the refusal: tunneld (IKE child ESP policies) ${tc[*]}, charon $(sw_counts)"
      sleep 0.2
    done
    if [ "$expect" = refused-by-t ]; then
      grep -q "authentication failed: we refused the peer: .*$why" "$TD/tunneld.log" ||
        case_fail "tunneld's log has no refusal line with \`$why\`: $(grep -i 'authentication' "$TD/tunneld.log" | tail -n 2)"
      [ "$init" = t ] || grep -q 'AUTHENTICATION_FAILED' "$SW/charon.log" ||
        case_fail "charon did not receive AUTHENTICATION_FAILED"
    else
      grep -q "authentication failed: the peer refused us" "$TD/tunneld.log" ||
        case_fail "tunneld does not report that the peer refused it: $(grep -i 'auth' "$TD/tunneld.log" | tail -n 2)"
      grep -q -i -E "$why" "$SW/charon.log" ||
        case_fail "charon's log does not say \`$why\`: $(grep -i -E 'cert|auth' "$SW/charon.log" | tail -n 3)"
    fi
  fi
  td_stop "$TD"
  swan_stop "$SW"
  echo "ok" >"$CD/result"
}

T_DN="$O, CN=td-ec"
S_DN="$O, CN=sw-ec"
# case_args NAME: the run_case arguments after NAME:
#   INITIATOR EXPECT T_ID T_CERT S_ID S_CERT T_REMOTE_ID S_REMOTE_ID T_CRL S_CRL T_EXTRA WHY
case_args() {
  SW_EXTRA=""
  case $1 in
    rsa-i) A=(t up td.cert.test t-rsa sw.cert.test s-rsa sw.cert.test td.cert.test "" "" "" "") ;;
    ecdsa-r) A=(s up "$T_DN" t-ec "$S_DN" s-ec "$O, CN=*" "$T_DN" "" "" int "") ;;
    ed25519-i) A=(t up $A_NET t-ed $B_NET s-ed $B_NET $A_NET "" "" "" "") ;;
    expired-r) A=(s refused-by-t td.cert.test t-rsa sw.old.test s-old sw.old.test td.cert.test "" "" "" expired) ;;
    unknown-i) A=(t refused-by-s td.unknown.test t-unk sw.cert.test s-rsa sw.cert.test td.unknown.test "" "" ""
      "no trusted .*public key found|no issuer certificate found") ;;
    # charon proves sw.cert.test, tunneld's connection wants sw.expected.test
    mismatch-r) A=(s refused-by-t td.cert.test t-rsa sw.cert.test s-rsa sw.expected.test td.cert.test "" "" "" identity) ;;
    revoked-r) A=(s refused-by-t td.cert.test t-rsa sw.revoked.test s-rev sw.revoked.test td.cert.test root.crl "" "" revoked) ;;
    revoked-i) A=(t refused-by-s td.revoked.test t-rev sw.cert.test s-rsa sw.cert.test td.revoked.test "" root.crl "" revoked) ;;
    rsa1-r | rsa1-i)
      local who=s
      [ "$1" = rsa1-r ] || who=t
      SW_EXTRA="  signature_authentication = no"
      A=($who up td.cert.test t-rsa sw.cert.test s-rsa sw.cert.test td.cert.test "" "" "" "")
      ;;
    pki-r) A=(s up td.pki.test t-pki sw.pki.test s-pki sw.pki.test td.pki.test "" "" "" "") ;;
    pki-ip-r) A=(s up $A_NET t-pki sw.pki.test s-pki sw.pki.test $A_NET "" "" "" "") ;;
    *) fail "no case $1" ;;
  esac
}
rw_cases case_args
