# shellcheck shell=bash
# The SSL/TLS tunnels people pick instead of IPsec, set up between two network namespaces for
# the comparison scripts (compare-peers.sh, ipsec-vs-ssl.sh), sourced after scripts/lib/netns.sh:
#
#   openvpn       OpenVPN 2.6 (Debian), UDP port 1194, TLS with a two-certificate PKI made here
#                 with openssl, data channel AES-128-GCM, no compression, --tun-mtu 1420
#   openvpn-lz4   the same with `compress lz4-v2` (OpenVPN calls compression insecure,
#                 VORACLE; allowed here with `allow-compression yes` to measure it)
#   stunnel       stunnel4 (Debian) carrying one TCP port over TLS 1.3,
#                 TLS_AES_128_GCM_SHA256 (TCP only)
#
# The caller sets NSA, NSB (the namespaces), A4, B4 (their underlay addresses), WORK (a
# scratch directory) and the array BG (scripts/lib/netns.sh: killed on exit). Then:
#
#   ssl_tunnel_pkgs "$VARIANTS"                  # the Debian packages still missing, one a line
#   ssl_tunnel_up VARIANT INNER_A INNER_B PORT   # starts it; waits (bounded) until it carries
#   stop_pids "${PIDS[@]}"                       # stops it (scripts/lib/netns.sh)
#
# ssl_tunnel_up sets PIDS (the tunnel processes of both ends, for cpu_ticks), TARGET (the address
# in NSB that NSA's traffic goes to), SRV_ADDR and CLI_ADDR, CLI_PORT: a server in NSB listens on
# ${SRV_ADDR:-$TARGET} port PORT and its client in NSA connects to ${CLI_ADDR:-$TARGET} port
# CLI_PORT. OpenVPN's TUN devices get INNER_A (NSA) and INNER_B (NSB); TARGET is INNER_B. stunnel
# takes TCP to 127.0.0.1:PORT+1 in NSA over TLS to B4:5443 and on to 127.0.0.1:PORT in NSB.

SSL_TUNNELS="openvpn openvpn-lz4 stunnel"

# ssl_tunnel_pkgs "VARIANT...": the Debian packages the SSL variants among them need and this
# machine lacks, one a line (nothing when none is named or all are there).
ssl_tunnel_pkgs() {
  local v=" $1 "
  if [[ $v == *" openvpn"* ]] && ! command -v openvpn >/dev/null; then echo openvpn; fi
  if [[ $v == *" stunnel "* ]] && ! command -v stunnel4 >/dev/null; then echo stunnel4; fi
  if [[ $v == *" openvpn"* || $v == *" stunnel "* ]] && ! command -v openssl >/dev/null; then echo openssl; fi
}

# make_pki: a CA and one certificate for each end (EC P-256) in WORK/pki, made once per run.
make_pki() {
  [ -f "$WORK/pki/b.crt" ] && return
  mkdir -p "$WORK/pki"
  (
    cd "$WORK/pki"
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 -subj /CN=ssl-tunnels-ca \
      -keyout ca.key -out ca.crt 2>/dev/null
    for side in a b; do
      openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=ssl-tunnels-$side" \
        -keyout $side.key -out $side.csr 2>/dev/null
      openssl x509 -req -in $side.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 2 -out $side.crt 2>/dev/null
    done
  )
}

ssl_tunnel_up() { # VARIANT INNER_A INNER_B PORT
  local v=$1 inner_a=$2 inner_b=$3 port=$4 side
  PIDS=()
  SRV_ADDR=''
  CLI_ADDR=''
  CLI_PORT=$port
  make_pki
  case $v in
    openvpn | openvpn-lz4)
      local comp=()
      [ "$v" = openvpn-lz4 ] && comp=(--allow-compression yes --compress lz4-v2)
      for side in a b; do
        local ns=$NSA me=$A4 peer=$B4 addr=("$inner_a" "$inner_b") role=--tls-client
        [ $side = b ] && { ns=$NSB; me=$B4; peer=$A4; addr=("$inner_b" "$inner_a"); role=--tls-server; }
        ip netns exec "$ns" openvpn --dev sslovpn --dev-type tun --proto udp --local "$me" --remote "$peer" \
          --port 1194 --ifconfig "${addr[@]}" "$role" --dh none --ca "$WORK/pki/ca.crt" \
          --cert "$WORK/pki/$side.crt" --key "$WORK/pki/$side.key" --data-ciphers AES-128-GCM \
          --tun-mtu 1420 --verb 1 "${comp[@]}" >"$WORK/$v-$side.log" 2>&1 &
        BG+=($!)
        PIDS+=($!)
      done
      TARGET=$inner_b
      wait_for 20 "$v: the TLS handshake" sh -c "grep -q 'Initialization Sequence Completed' '$WORK/$v-a.log' && grep -q 'Initialization Sequence Completed' '$WORK/$v-b.log'"
      ;;
    stunnel)
      printf '%s\n' "foreground = yes" "pid =" "[app]" "accept = $B4:5443" "connect = 127.0.0.1:$port" \
        "cert = $WORK/pki/b.crt" "key = $WORK/pki/b.key" "sslVersion = TLSv1.3" \
        "ciphersuites = TLS_AES_128_GCM_SHA256" >"$WORK/stunnel-b.conf"
      printf '%s\n' "foreground = yes" "pid =" "[app]" "client = yes" "accept = 127.0.0.1:$((port + 1))" \
        "connect = $B4:5443" "CAfile = $WORK/pki/ca.crt" "verifyChain = yes" "sslVersion = TLSv1.3" \
        "ciphersuites = TLS_AES_128_GCM_SHA256" >"$WORK/stunnel-a.conf"
      for side in b a; do
        local ns=$NSA
        [ $side = b ] && ns=$NSB
        ip netns exec "$ns" stunnel4 "$WORK/stunnel-$side.conf" >"$WORK/stunnel-$side.log" 2>&1 &
        BG+=($!)
        PIDS+=($!)
      done
      TARGET=$B4
      SRV_ADDR=127.0.0.1
      CLI_ADDR=127.0.0.1
      CLI_PORT=$((port + 1))
      wait_tcp_listen 10 "stunnel's server end" "$NSB" 5443
      wait_tcp_listen 10 "stunnel's client end" "$NSA" $CLI_PORT
      ;;
    *) fail "ssl_tunnel_up: unknown variant $v (the SSL variants: $SSL_TUNNELS)" ;;
  esac
}
