# shellcheck shell=bash
# The road-warrior pieces of the remote-access tests (strongSwan's charon as the client,
# tunneld as the gateway): scripts/ci/ike-eap.sh, ike-eap-tls.sh, ike-eap-radius.sh,
# ike-mobike.sh, ike-roadwarrior.sh, rootless.sh (and the result table of ike-certs.sh).
# Sourced after scripts/lib/netns.sh and scripts/lib/strongswan.sh (and, for the rw_*
# functions of a case - rw_td_certs, rw_td_pool, rw_initiate, rw_wait_*, rw_pings, rw_cases -
# scripts/lib/ike-lifecycle.sh, whose TOPO, A_NET, A_IN, IKE_PROP, ESP_PROP, case_fail,
# td_counts, sw_counts and the case's CD, TD, SW they use). Sets nothing when sourced.
#
#   rw_swan_eap_plugins [mschapv2] [tls]
#                               charon's EAP plugins installed (or `cannot`) and added to
#                               SWAN_PLUGINS: mschapv2 (the default: gcrypt eap-identity
#                               eap-mschapv2), tls (eap-identity eap-tls)
#   rw_swan_pki                 strongSwan's pki tool installed (or `cannot`)
#   rw_bins                     BIN (tunneld: locate_tunneld, built --release with ipsec) and
#                               IPSEC (beside it; IPSEC_BIN when TUNNELD_BIN is given)
#   pk ARGS...                  strongSwan's pki, its TPM chatter and errors to $P/pki.log
#   rw_ca DIR NAME DN [TYPE [SIZE]]
#                               a self-signed CA by pki: DIR/NAME.key, DIR/NAME.pem (ecdsa 256)
#   rw_leaf DIR NAME CA DN SAN FLAG...
#                               an ECDSA P-256 certificate of DIR/CA.pem: DIR/NAME.key, .pem
#   rw_server_cert DIR CN [CA_CN]
#                               CA (RSA 2048, DIR/ca.{key,pem}) and the server's certificate
#                               (ECDSA, DIR/server.{key,pem}: CN and SAN CN, serverAuth,
#                               ikeIntermediate) by pki
#   rw_client_conf DIR KEY=VALUE...
#                               charon's DIR/swanctl/swanctl.conf for a road warrior (one
#                               connection, one child; keys below); with vips, DIR's
#                               strongswan.conf installs the virtual IP
#   rw_client_vip DIR           the virtual IP charon DIR got (empty: none)
#   rw_gw_start NS DIR POOL_NET [ARGS...]
#                               tunneld as the gateway in NS (DIR/tunneld.toml checked by
#                               `ipsec check-config`, ARGS added, DIR/ctl.sock, DIR/tunneld.log),
#                               up within 10 s, `ipsec monitor --json` to DIR/monitor.log,
#                               POOL_NET routed into ipsec0; TD_PID (scripts/ci/ike-mobike.sh,
#                               ike-roadwarrior.sh: their own topologies)
#   rw_gw_stop NS POOL_NET      that tunneld stopped, the pool's route gone
#   rw_case_dirs NAME           CASE=NAME, its directories CD=$WORK/NAME (made), TD=$CD/t
#                               (made), SW=$CD/s
#   rw_td_certs TD              the server's certificate, key (0600) and CA ($P) into TD
#   rw_td_pool TD AUTH NET      the pool `rw` (NET) in TD/tunneld.toml, given to the
#                               connection whose remote auth is AUTH
#   rw_initiate                 charon $SW initiates the child `net` (CD/initiate.out);
#                               RW_RC its status, RW_DEADLINE 12 s from now
#   rw_wait_up                  the initiation succeeded and both sides have 1 IKE SA and
#                               1 child by RW_DEADLINE, or case_fail
#   rw_wait_refused WHAT        the initiation failed (else case_fail "charon's initiation
#                               succeeded WHAT") and neither side has an SA by RW_DEADLINE
#   rw_pings ADDR               3 pings each way between A_IN (in ${TOPO}a) and ADDR (in
#                               ${TOPO}b), or case_fail
#   rw_cases ARGS_FN [ON_EXIT]  each case of STAGES run as `run_case CASE "${A[@]}"` in a
#                               subshell (ARGS_FN CASE sets A; ON_EXIT and a kill of BG when
#                               it ends), then the namespaces ${TOPO}a/b deleted, the table
#                               of results printed, and `fail` if one failed (FAILED=1)
#
# rw_client_conf's keys (defaults in brackets):
#   name [rw], local_addrs [%any], remote_addrs, proposals [$IKE_PROP], mobike [no],
#   rekey [0: `rekey_time = 0` on the IKE SA and the child; empty: charon's default],
#   vips (e.g. 0.0.0.0), auth (eap-mschapv2|eap-tls|pubkey|psk), id (the local identity),
#   eap_id, password (eap-mschapv2's secret), certs (eap-tls, pubkey: a file copied into
#   swanctl/x509 with its .key beside it into private/), cacert (a file copied into x509ca),
#   remote_id, remote_auth [pubkey; psk with auth=psk], psk (auth=psk: the secret of id and
#   remote_id), local_ts, remote_ts, esp [$ESP_PROP], child [net], child_extra (lines put
#   in the child as they are, e.g. "start_action = trap").

rw_swan_eap_plugins() {
  local m
  [ $# -gt 0 ] || set -- mschapv2
  for m in "$@"; do
    case $m in
      mschapv2)
        # eap-mschapv2 (Debian libcharon-extauth-plugins) needs MD4 and DES, which the gcrypt
        # plugin gives (OpenSSL 3 keeps them in its legacy provider); eap-identity answers
        # the EAP-Identity Request
        [ -e /usr/lib/ipsec/plugins/libstrongswan-eap-mschapv2.so ] || apt_install libcharon-extauth-plugins
        [ -e /usr/lib/ipsec/plugins/libstrongswan-eap-mschapv2.so ] ||
          cannot "no charon eap-mschapv2 plugin (Debian libcharon-extauth-plugins)"
        SWAN_PLUGINS="$SWAN_PLUGINS gcrypt eap-identity eap-mschapv2"
        ;;
      tls)
        # libtls takes ECDHE and AES-GCM from the openssl plugin (already in SWAN_PLUGINS)
        [ -e /usr/lib/ipsec/plugins/libstrongswan-eap-tls.so ] || apt_install libcharon-extra-plugins
        [ -e /usr/lib/ipsec/plugins/libstrongswan-eap-tls.so ] ||
          cannot "no charon eap-tls plugin (Debian libcharon-extra-plugins)"
        SWAN_PLUGINS="$SWAN_PLUGINS eap-identity eap-tls"
        ;;
      *) fail "rw_swan_eap_plugins: no method $m" ;;
    esac
  done
}

rw_bins() {
  locate_tunneld --bin ipsec
  IPSEC=$(dirname "$BIN")/ipsec
  [ -z "${TUNNELD_BIN:-}" ] || IPSEC=${IPSEC_BIN:-$IPSEC}
  [ -x "$IPSEC" ] || fail "no ipsec binary at $IPSEC"
}

rw_swan_pki() {
  command -v pki >/dev/null || apt_install strongswan-pki
  command -v pki >/dev/null || cannot "no strongSwan pki tool (Debian strongswan-pki)"
}

# ---- certificates (strongSwan's pki, not this project's) -----------------------------------
pk() { pki "$@" 2> >(grep -v -e "TPM 2.0" -e "plugin .tpm." >>"$P/pki.log"); }

rw_ca() {
  local P=$1 n=$2 dn=$3 type=${4:-ecdsa} size=${5:-256}
  mkdir -p "$P"
  pk --gen --type "$type" --size "$size" --outform pem >"$P/$n.key"
  chmod 600 "$P/$n.key"
  pk --self --ca --lifetime 3650 --in "$P/$n.key" --type "$type" --dn "$dn" --outform pem >"$P/$n.pem"
  [ -s "$P/$n.pem" ] || fail "pki made no CA certificate $n: $(tail -n 3 "$P/pki.log")"
}

rw_leaf() {
  local P=$1 n=$2 c=$3 dn=$4 san=$5
  shift 5
  pk --gen --type ecdsa --size 256 --outform pem >"$P/$n.key"
  chmod 600 "$P/$n.key"
  pk --pub --in "$P/$n.key" --type priv | pk --issue --cacert "$P/$c.pem" --cakey "$P/$c.key" --type pub \
    --dn "$dn" --san "$san" "$@" --lifetime 365 --outform pem >"$P/$n.pem"
  [ -s "$P/$n.pem" ] || fail "pki made no certificate $n: $(tail -n 3 "$P/pki.log")"
}

rw_server_cert() {
  local d=$1 cn=$2 cacn=${3:-test CA}
  rw_ca "$d" ca "C=CH, O=ipsec-test, CN=$cacn" rsa 2048
  rw_leaf "$d" server ca "C=CH, O=ipsec-test, CN=$cn" "$cn" --flag serverAuth --flag ikeIntermediate
}

# ---- the client: charon as a road warrior ---------------------------------------------------
rw_client_conf() {
  local d=$1 kv
  shift
  local -A c=([name]=rw [local_addrs]=%any [proposals]=${IKE_PROP:-} [mobike]=no [rekey]=0
    [esp]=${ESP_PROP:-} [child]=net [remote_auth]=pubkey)
  for kv in "$@"; do
    case $kv in *=*) c[${kv%%=*}]=${kv#*=} ;; *) fail "rw_client_conf: \`$kv\` is not KEY=VALUE" ;; esac
  done
  [ "${c[auth]:-}" != psk ] || [[ " $* " == *" remote_auth="* ]] || c[remote_auth]=psk
  [ -z "${c[vips]:-}" ] || sed -i 's/install_virtual_ip = no/install_virtual_ip = yes/' "$d/strongswan.conf"
  [ -z "${c[cacert]:-}" ] || cp "${c[cacert]}" "$d/swanctl/x509ca/"
  if [ -n "${c[certs]:-}" ]; then
    cp "${c[certs]}" "$d/swanctl/x509/"
    cp "${c[certs]%.pem}.key" "$d/swanctl/private/"
  fi
  local rk=""
  [ -z "${c[rekey]}" ] || rk="rekey_time = ${c[rekey]}"
  {
    echo "connections {"
    echo "  ${c[name]} {"
    echo "    version = 2"
    echo "    local_addrs = ${c[local_addrs]}"
    echo "    remote_addrs = ${c[remote_addrs]}"
    echo "    proposals = ${c[proposals]}"
    echo "    encap = yes"
    echo "    mobike = ${c[mobike]}"
    [ -z "$rk" ] || echo "    $rk"
    [ -z "${c[vips]:-}" ] || echo "    vips = ${c[vips]}"
    echo "    local {"
    echo "      auth = ${c[auth]}"
    [ -z "${c[id]:-}" ] || echo "      id = ${c[id]}"
    [ -z "${c[eap_id]:-}" ] || echo "      eap_id = ${c[eap_id]}"
    [ -z "${c[certs]:-}" ] || echo "      certs = ${c[certs]##*/}"
    echo "    }"
    echo "    remote {"
    echo "      auth = ${c[remote_auth]}"
    [ -z "${c[remote_id]:-}" ] || echo "      id = ${c[remote_id]}"
    echo "    }"
    echo "    children {"
    echo "      ${c[child]} {"
    [ -z "${c[local_ts]:-}" ] || echo "        local_ts = ${c[local_ts]}"
    [ -z "${c[remote_ts]:-}" ] || echo "        remote_ts = ${c[remote_ts]}"
    echo "        esp_proposals = ${c[esp]}"
    [ -z "$rk" ] || echo "        $rk"
    [ -z "${c[child_extra]:-}" ] || printf '%s\n' "${c[child_extra]}" | sed 's/^/        /'
    echo "      }"
    echo "    }"
    echo "  }"
    echo "}"
    if [ -n "${c[password]:-}" ]; then
      printf 'secrets {\n  eap-%s {\n    id = %s\n    secret = "%s"\n  }\n}\n' \
        "${c[eap_id]}" "${c[eap_id]}" "${c[password]}"
    elif [ -n "${c[psk]:-}" ]; then
      printf 'secrets {\n  ike-gw {\n    id-local = %s\n    id-remote = %s\n    secret = "%s"\n  }\n}\n' \
        "${c[id]}" "${c[remote_id]}" "${c[psk]}"
    fi
  } >"$d/swanctl/swanctl.conf"
}

rw_client_vip() {
  swan_list_sas "$1" | grep -o 'local-vips=\[[0-9.]*\]' | head -n 1 | tr -d '[]' | cut -d= -f2
}

# ---- tunneld as the gateway of a script's own topology --------------------------------------
rw_gw_start() {
  local ns=$1 d=$2 pool=$3
  shift 3
  "$IPSEC" check-config "$d/tunneld.toml" >"$d/check-config.txt" 2>&1 || fail "ipsec check-config: $(tail -n 3 "$d/check-config.txt")"
  ip netns exec "$ns" "$BIN" --config "$d/tunneld.toml" --control "$d/ctl.sock" "$@" 2>"$d/tunneld.log" &
  TD_PID=$!
  BG+=("$TD_PID")
  local deadline=$((SECONDS + 10))
  until [ -S "$d/ctl.sock" ] && ip -n "$ns" link show ipsec0 >/dev/null 2>&1; do
    kill -0 "$TD_PID" 2>/dev/null || fail "tunneld exited at start: $(tail -n 5 "$d/tunneld.log")"
    [ $SECONDS -lt $deadline ] || fail "tunneld: no control socket / ipsec0 within 10 s"
    sleep 0.1
  done
  "$IPSEC" monitor --control "$d/ctl.sock" --json >"$d/monitor.log" 2>&1 &
  BG+=("$!")
  # the pool is routed into the TUN device (docs/remote-access.md)
  ip -n "$ns" route replace "$pool" dev ipsec0
}

rw_gw_stop() {
  stop_pid "$TD_PID" tunneld
  ip -n "$1" route del "$2" dev ipsec0 2>/dev/null || true
}

# ---- a case of the EAP scripts (scripts/lib/ike-lifecycle.sh's topology) --------------------
rw_case_dirs() {
  CASE=$1
  CD=$WORK/$CASE
  TD=$CD/t
  SW=$CD/s
  mkdir -p "$CD" "$TD"
}

rw_td_certs() {
  cp "$P/server.pem" "$P/ca.pem" "$1/"
  cp "$P/server.key" "$1/server.key"
  chmod 600 "$1/server.key"
}

rw_td_pool() {
  sed -i "s/^remote = { auth = \"$2\".*/&\npools = [\"rw\"]/" "$1/tunneld.toml"
  printf '\n[[pool]]\nname = "rw"\naddrs = "%s"\n' "$3" >>"$1/tunneld.toml"
}

rw_initiate() {
  local out
  RW_RC=0
  out=$(SWAN_CTL_TIMEOUT=20 swan_ctl "$SW" --initiate --child net --timeout 12 2>&1) || RW_RC=$?
  echo "$out" >"$CD/initiate.out"
  RW_DEADLINE=$((SECONDS + 12))
}

# rw_wait_sas TUNNELD CHARON WHY: until td_counts matches the pattern TUNNELD and sw_counts is
# CHARON, by RW_DEADLINE, or case_fail "WHY: ..."
rw_wait_sas() {
  local tc
  # shellcheck disable=SC2053 # $1 is a pattern
  until read -r -a tc <<<"$(td_counts "$TD")" && [[ "${tc[*]}" == $1 ]] && [ "$(sw_counts)" = "$2" ]; do
    [ $SECONDS -lt "$RW_DEADLINE" ] || case_fail "$3: tunneld (IKE child ESP policies) ${tc[*]}, charon $(sw_counts)"
    sleep 0.2
  done
}

rw_wait_up() {
  [ "$RW_RC" -eq 0 ] || case_fail "initiation failed: $(tail -n 4 "$CD/initiate.out"); tunneld: $(tail -n 3 "$TD/tunneld.log")"
  rw_wait_sas "1 1 *" "1 1" "not up within 12 s"
}

rw_wait_refused() {
  [ "$RW_RC" -ne 0 ] || case_fail "charon's initiation succeeded${1:+ $1}"
  sleep 1
  rw_wait_sas "0 0 0 0" "0 0" "SAs left after the refusal"
}

rw_pings() {
  ip netns exec "${TOPO}a" ping -n -c 3 -i 0.2 -W 2 -I "$A_IN" "$1" >"$CD/ping-ts.out" 2>&1 ||
    case_fail "pings tunneld -> charon failed: $(tail -n 2 "$CD/ping-ts.out")"
  ip netns exec "${TOPO}b" ping -n -c 3 -i 0.2 -W 2 -I "$1" "$A_IN" >"$CD/ping-st.out" 2>&1 ||
    case_fail "pings charon -> tunneld failed: $(tail -n 2 "$CD/ping-st.out")"
}

rw_cases() {
  local fn=$1 c t0 results=() ns
  local stop='for p in "${BG[@]}"; do kill -KILL "$p" 2>/dev/null || true; done'
  [ -z "${2:-}" ] || stop="$2; $stop"
  for c in "${STAGES[@]}"; do
    A=()
    "$fn" "$c"
    t0=$SECONDS
    # a case that failed leaves nothing running (tunneld, its monitor)
    if (trap "$stop" EXIT; run_case "$c" "${A[@]}"); then
      results+=("$c ok $((SECONDS - t0))s")
    else
      FAILED=1
      results+=("$c FAIL $((SECONDS - t0))s $(sed 's/^FAIL //' "$WORK/$c/result" 2>/dev/null | head -c 160)")
      swan_stop_all 2>/dev/null || true
    fi
  done
  # the cases made the namespaces in their subshells: delete them here
  for ns in "${TOPO}a" "${TOPO}b"; do ip netns del "$ns" 2>/dev/null || true; done
  echo
  printf '%s\n' "${results[@]}" | column -t -l 4 2>/dev/null || printf '%s\n' "${results[@]}"
  [ "$FAILED" = 0 ] || fail "some cases failed (files in $WORK)"
  log "all ${#STAGES[@]} cases passed"
}
