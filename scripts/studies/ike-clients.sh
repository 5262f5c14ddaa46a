#!/usr/bin/env bash
# Many remote-access clients at once against tunneld, and against strongSwan's charon in the
# same run (issue #36 item 6; docs/performance.md "Many remote-access clients"), in network
# namespaces, as root. The load generator is crates/ike/examples/ike-clients.rs (the project's
# own IKE crate, like strongSwan's load-tester plugin): COUNT clients, each from an address of
# its own, at RATE per second, each an IKE SA with one child to the server's subnet, held
# HOLD seconds. AUTH=eap (the default): each client is the EAP-MSCHAPv2 user `user<i>` (all
# COUNT users in the server's secrets) and checks the server's certificate (strongSwan's pki
# makes a CA and the server's ECDSA certificate, which both servers use); VIPS=1 (the
# default) each asks for a virtual address (CFG_REQUEST) from the server's pool 10.202.0.0/20,
# its child's local selector being the lease. AUTH=psk VIPS=0: the first study's clients (a
# PSK; each its own inner /32 from 10.201.0.1). For each server (tunneld, then charon with
# kernel-libipsec) it reports: IKE SAs set up per second over the ramp, the setup time's
# spread, the server's memory per client (RSS minus RSS before, over COUNT: its peak during
# the run, and once all are up and the data client is done), and, for one more client with a
# data plane (a tunneld initiator), the time to its first packet and its TCP goodput
# (iperf3, IPERF_SECONDS) alone and while the COUNT others are up.
#
#   ics<PID> (server)  icsv 10.98.0.1/16 ---- icv 10.98.0.2/16 (+ COUNT addresses from 10.98.16.1)  icc<PID>
#   server inner 10.200.0.1/24 (ipsec0); clients' inner 10.201.0.0/16 (PSK) or pool 10.202.0.0/20;
#   the data client 10.201.255.1 (always PSK: a second connection on the server)
#
# Usage (as root; bounded: each phase has a timeout):
#   sudo bash scripts/studies/ike-clients.sh                       # COUNT=1000 RATE=500 HOLD=20
#   COUNT=200 SERVERS=tunneld sudo -E bash scripts/studies/ike-clients.sh
#   flock /tmp/ipsec-bench.lock sudo bash scripts/studies/ike-clients.sh   # on a shared machine
#   AUTH=psk VIPS=0 sudo -E bash scripts/studies/ike-clients.sh   # the first study's PSK clients
#   TUNNELD_BIN=/tmp/b/tunneld IPSEC_BIN=/tmp/b/ipsec SERVERS=tunneld ...   # a given build
#   GEN_WAIT=spin ...     # the generator's earlier busy loop (default epoll), to compare
# Besides the table it logs the CPU seconds the generator and the server used while the loaded
# data client ran (the generator shares the 2 cores with what is measured).
set -euo pipefail
cd "$(dirname "$0")/../.."
NETNS_TAG=ike-clients
. scripts/lib/netns.sh
. scripts/lib/strongswan.sh
. scripts/lib/tunneld-conf.sh
parse_stages "" "$@"
need_netns "network namespaces"
COUNT=${COUNT:-1000}
RATE=${RATE:-500}
HOLD=${HOLD:-20}
IPERF_SECONDS=${IPERF_SECONDS:-5}
SERVERS=${SERVERS:-"tunneld charon"}
AUTH=${AUTH:-eap}
VIPS=${VIPS:-1}
GEN_WAIT=${GEN_WAIT:-epoll}
case $AUTH in psk | eap) ;; *) fail "AUTH: psk or eap, not $AUTH" ;; esac
[ "$VIPS" = 0 ] || [ "$AUTH" = eap ] || fail "VIPS=1 needs AUTH=eap (the PSK server has no pool here)"
IKE_PROP=aes128gcm16-prfsha256-x25519
ESP_PROP=aes128gcm16
swan_install
if [ "$AUTH" = eap ]; then
  command -v pki >/dev/null || apt_install strongswan-pki
  [ -e /usr/lib/ipsec/plugins/libstrongswan-eap-mschapv2.so ] || apt_install libcharon-extauth-plugins
  # charon's eap-mschapv2 needs MD4 and DES (gcrypt), eap-identity answers the EAP-Identity
  SWAN_PLUGINS="$SWAN_PLUGINS gcrypt eap-identity eap-mschapv2"
fi
command -v iperf3 >/dev/null || apt_install iperf3
locate_tunneld --bin ipsec
IPSEC=$(dirname "$BIN")/ipsec
[ -z "${TUNNELD_BIN:-}" ] || IPSEC=${IPSEC_BIN:-$IPSEC}
cargo build --release --locked --quiet -p ipsec-ike --example ike-clients
GEN=$(release_dir)/examples/ike-clients
[ -x "$GEN" ] || fail "no load generator at $GEN"
ulimit -n $((4 * COUNT + 1024))

ID=$$
S=ics$ID
C=icc$ID
WORK=$(mktemp -d /tmp/ike-clients.XXXXXX)
trap 'rc=$?; [ "${IKE_CLIENTS_KEEP:-0}" = 0 ] || { log "files kept in $WORK"; WORK=; }; cleanup_all $rc 10' EXIT
trap 'fail "interrupted"' INT TERM
netns_pair "$S" "$C" icsv$ID icv$ID 10.98.0.1/16 10.98.0.2/16
python3 - "$COUNT" >"$WORK/addrs" <<'EOF'
import ipaddress, sys
base = int(ipaddress.IPv4Address("10.98.16.1"))
for i in range(int(sys.argv[1])):
    print(f"address add {ipaddress.IPv4Address(base + i)}/16 dev icv__ID__")
EOF
sed -i "s/__ID__/$ID/" "$WORK/addrs"
ip -n "$C" -batch "$WORK/addrs"
ip -n "$S" addr add 10.200.0.1/32 dev lo
PSK="ike clients $RANDOM$RANDOM"
PASSWORD="Mschap-$RANDOM$RANDOM"
GEN_AUTH=(--auth psk --psk "$PSK")
if [ "$AUTH" = eap ]; then
  # the server's certificate (strongSwan's pki, as scripts/ci/ike-eap.sh): ECDSA P-256, its name
  # gw.load.test as a SAN, signed by a CA the clients trust
  P=$WORK/pki
  mkdir -p "$P"
  pk() { pki "$@" 2> >(grep -v -e "TPM 2.0" -e "plugin .tpm." >>"$P/pki.log"); }
  pk --gen --type ecdsa --size 256 --outform pem >"$P/ca.key"
  pk --self --ca --lifetime 30 --in "$P/ca.key" --type ecdsa --dn "O=ipsec-test, CN=load test CA" --outform pem >"$P/ca.pem"
  pk --gen --type ecdsa --size 256 --outform pem >"$P/server.key"
  chmod 600 "$P/ca.key" "$P/server.key"
  pk --pub --in "$P/server.key" --type priv | pk --issue --cacert "$P/ca.pem" --cakey "$P/ca.key" --type pub \
    --dn "O=ipsec-test, CN=gw.load.test" --san gw.load.test --flag serverAuth --flag ikeIntermediate \
    --lifetime 30 --outform pem >"$P/server.pem"
  [ -s "$P/server.pem" ] || fail "pki made no server certificate: $(tail -n 3 "$P/pki.log")"
  GEN_AUTH=(--auth eap --eap-id 'user{i}' --password "$PASSWORD" --cacert "$P/ca.pem")
  USERS=$(seq 0 $((COUNT - 1)) | sed "s/.*/user&:$PASSWORD/" | tr '\n' ' ')
fi
GEN_VIPS=(--inner-first 10.201.0.1)
[ "$VIPS" = 0 ] || GEN_VIPS=(--vips)

rss_kb() { awk '/^VmRSS/ {print $2}' "/proc/$1/status" 2>/dev/null || echo 0; }
# CPU ticks (user + system, all threads) a process has used so far
cpu_ticks() { sed 's/.*) //' "/proc/$1/stat" 2>/dev/null | awk '{print $12 + $13}' || echo 0; }

# data_client NAME: a tunneld initiator in the clients' namespace (10.98.0.2, inner
# 10.201.255.1): seconds from start to its first answered ping, then iperf3 goodput (Mbit/s)
data_client() {
  local d=$WORK/data-$1 t0 first="" mbps
  td_conf "$d" name=dc local=10.98.0.2 remote=10.98.0.1 local_id=data.load.test remote_id=gw.load.test \
    psk="$PSK" local_ts=10.201.255.1/32 remote_ts=10.200.0.0/24 start=start
  ip -n "$C" addr add 10.201.255.1/32 dev lo 2>/dev/null || true
  t0=$(date +%s.%N)
  ip netns exec "$C" "$BIN" --config "$d/tunneld.toml" --control "$d/ctl.sock" --stats "$d/stats.json" 2>"$d/tunneld.log" &
  local pid=$!
  BG+=("$pid")
  wait_for 10 "the data client's ipsec0" ip -n "$C" link show ipsec0
  ip -n "$C" link set ipsec0 up
  ip -n "$C" route replace 10.200.0.0/24 dev ipsec0 src 10.201.255.1
  for _ in $(seq 300); do
    if ip netns exec "$C" ping -n -c 1 -W 0.1 -I 10.201.255.1 10.200.0.1 >/dev/null 2>&1; then
      first=$(python3 -c "print(f'{$(date +%s.%N) - $t0:.3f}')")
      break
    fi
  done
  ip netns exec "$C" iperf3 -c 10.200.0.1 -B 10.201.255.1 -t "$IPERF_SECONDS" -J >"$d/iperf3.json" 2>&1 || true
  mbps=$(python3 -c 'import json,sys; print(round(json.load(open(sys.argv[1]))["end"]["sum_received"]["bits_per_second"] / 1e6))' "$d/iperf3.json" 2>/dev/null || echo "?")
  stop_pids "$pid"
  ip -n "$C" link del ipsec0 2>/dev/null || true
  echo "${first:-?} $mbps"
}

# swan_eap_conf D: charon as the EAP server, as tunneld's: the certificate, EAP-MSCHAPv2 for
# any identity with the COUNT users in the secrets, the pool (VIPS=1); and the data client's
# PSK connection
swan_eap_conf() {
  local d=$1 i pools="" rts="remote_ts = 10.201.0.0/16"
  cp "$P/ca.pem" "$d/swanctl/x509ca/"
  cp "$P/server.pem" "$d/swanctl/x509/"
  cp "$P/server.key" "$d/swanctl/ecdsa/"
  [ "$VIPS" = 0 ] || { pools="pools = rw"; rts=""; }
  {
    cat <<EOF
connections {
  rw {
    version = 2
    local_addrs = 10.98.0.1
    proposals = $IKE_PROP
    encap = yes
    mobike = no
    rekey_time = 0
    send_cert = always
    $pools
    local {
      auth = pubkey
      certs = server.pem
      id = gw.load.test
    }
    remote {
      auth = eap-mschapv2
      eap_id = %any
    }
    children {
      net {
        local_ts = 10.200.0.0/24
        $rts
        esp_proposals = $ESP_PROP
        rekey_time = 0
      }
    }
  }
  dc {
    version = 2
    local_addrs = 10.98.0.1
    remote_addrs = 10.98.0.2
    proposals = $IKE_PROP
    encap = yes
    mobike = no
    rekey_time = 0
    local {
      auth = psk
      id = gw.load.test
    }
    remote {
      auth = psk
      id = data.load.test
    }
    children {
      net {
        local_ts = 10.200.0.0/24
        remote_ts = 10.201.255.1/32
        esp_proposals = $ESP_PROP
        rekey_time = 0
      }
    }
  }
}
pools {
  rw {
    addrs = 10.202.0.0/20
  }
}
secrets {
  ike-dc {
    id-local = gw.load.test
    id-remote = data.load.test
    secret = "$PSK"
  }
EOF
    for ((i = 0; i < COUNT; i++)); do printf '  eap-u%d {\n    id = user%d\n    secret = "%s"\n  }\n' $i $i "$PASSWORD"; done
    echo "}"
  } >"$d/swanctl/swanctl.conf"
}

# the server: start_server NAME -> SPID
start_server() {
  if [ "$1" = tunneld ]; then
    local d=$WORK/server
    if [ "$AUTH" = eap ]; then
      mkdir -p "$d"
      cp "$P/server.pem" "$P/server.key" "$d/"
      td_head "$d" local=10.98.0.1
      td_conn "$d" name=rw local=10.98.0.1 remote=%any local_id=gw.load.test auth=pubkey \
        certs="$d/server.pem" key="$d/server.key" remote_auth=eap-mschapv2 remote_eap_id=%any \
        eap="$USERS" local_ts=10.200.0.0/24 remote_ts="$([ "$VIPS" = 1 ] || echo 10.201.0.0/16)" dpd=
      if [ "$VIPS" = 1 ]; then
        sed -i 's/^remote = { auth = "eap-mschapv2".*/&\npools = ["rw"]/' "$d/tunneld.toml"
        printf '\n[[pool]]\nname = "rw"\naddrs = "10.202.0.0/20"\n' >>"$d/tunneld.toml"
      fi
      # the data client: a PSK connection of its own (its address and identity)
      td_conn "$d" name=dc local=10.98.0.1 remote=10.98.0.2 local_id=gw.load.test remote_id=data.load.test \
        psk="$PSK" local_ts=10.200.0.0/24 remote_ts=10.201.255.1/32 dpd=
      "$IPSEC" check-config "$d/tunneld.toml" >"$d/check-config.txt" 2>&1 ||
        fail "ipsec check-config: $(tail -n 3 "$d/check-config.txt")"
    else
      td_conf "$d" name=rw local=10.98.0.1 remote=%any local_id=gw.load.test remote_id= psk="$PSK" \
        local_ts=10.200.0.0/24 remote_ts=10.201.0.0/16 dpd=
    fi
    ip netns exec "$S" "$BIN" --config "$d/tunneld.toml" --control "$d/ctl.sock" --stats "$d/stats.json" \
      --log warn 2>"$d/tunneld.log" &
    SPID=$!
    BG+=("$SPID")
    wait_for 10 "tunneld's ipsec0" ip -n "$S" link show ipsec0
    ip -n "$S" link set ipsec0 up
    ip -n "$S" route replace 10.201.0.0/16 dev ipsec0 src 10.200.0.1
    ip -n "$S" route replace 10.202.0.0/20 dev ipsec0 src 10.200.0.1
  else
    local d=$WORK/charon
    SWAN_LOG="ike=0 chd=0 knl=0 cfg=0 net=0 enc=0 dmn=1 lib=1 job=0" swan_instance "$d"
    if [ "$AUTH" = eap ]; then
      swan_eap_conf "$d"
    else
      swan_site_conf "$d" name=rw local=10.98.0.1 remote=%any local_id=gw.load.test remote_id=%any psk="$PSK" \
        local_ts=10.200.0.0/24 remote_ts=10.201.0.0/16 ike=$IKE_PROP esp=$ESP_PROP
    fi
    swan_start "$S" "$d"
    swan_load "$d"
    SPID=$(cat "$d/pid")
  fi
  ip netns exec "$S" iperf3 -s -D -B 10.200.0.1 --pidfile "$WORK/iperf3-$1.pid"
}

stop_server() {
  [ ! -s "$WORK/iperf3-$1.pid" ] || kill "$(cat "$WORK/iperf3-$1.pid")" 2>/dev/null || true
  if [ "$1" = tunneld ]; then stop_pids "$SPID"; ip -n "$S" link del ipsec0 2>/dev/null || true; else swan_stop "$WORK/charon"; fi
}

ROWS=()
FAILED=0
for server in $SERVERS; do
  log "---- $server: $COUNT clients at $RATE/s, held $HOLD s"
  start_server "$server"
  sleep 1
  a0=$(cpu_ticks "$SPID")
  read -r first_alone mbps_alone <<<"$(data_client "$server-alone")"
  log "$server: CPU seconds while the lone data client ran: server $(python3 -c "print(f'{($(cpu_ticks "$SPID") - $a0) / $(getconf CLK_TCK):.2f}')")"
  rss0=$(rss_kb "$SPID")
  ip netns exec "$C" "$GEN" --first 10.98.16.1 --count "$COUNT" --remote 10.98.0.1 "${GEN_AUTH[@]}" --remote-id gw.load.test \
    "${GEN_VIPS[@]}" --remote-ts 10.200.0.0/24 --rate "$RATE" --hold "$HOLD" --timeout 60 \
    --ike "$IKE_PROP" --esp "$ESP_PROP" --wait "$GEN_WAIT" >"$WORK/gen-$server.json" 2>"$WORK/gen-$server.log" &
  GPID=$!
  BG+=("$GPID")
  # the peak RSS while the clients come and stay; the data client once all are up
  peak=$rss0
  loaded="? ?"
  rss_up=""
  gen_cpu="?"
  ramp_deadline=$((SECONDS + COUNT / RATE + 60))
  while kill -0 "$GPID" 2>/dev/null; do
    r=$(rss_kb "$SPID")
    [ "$r" -le "$peak" ] || peak=$r
    if [ "$loaded" = "? ?" ] && [ $SECONDS -lt $ramp_deadline ]; then
      if [ "$server" = tunneld ]; then
        n=$("$IPSEC" show --json --control "$WORK/server/ctl.sock" 2>/dev/null |
          python3 -c 'import json,sys; print(len(json.load(sys.stdin).get("ike_sas", [])))' 2>/dev/null || echo 0)
      else
        n=$(swan_established "$WORK/charon" | cut -d' ' -f1)
      fi
      if [ "${n:-0}" -ge "$COUNT" ]; then
        log "$server: $n IKE SAs up; the data client now"
        g0=$(cpu_ticks "$GPID") s0=$(cpu_ticks "$SPID")
        loaded=$(data_client "$server-loaded")
        rss_up=$(rss_kb "$SPID")
        g1=$(cpu_ticks "$GPID") s1=$(cpu_ticks "$SPID")
        CLK=$(getconf CLK_TCK)
        gen_cpu=$(python3 -c "print(f'{($g1 - $g0) / $CLK:.2f}')")
        log "$server: CPU seconds while the loaded data client ran (its ping, then iperf3 for ${IPERF_SECONDS} s): generator $gen_cpu, server $(python3 -c "print(f'{($s1 - $s0) / $CLK:.2f}')")"
      fi
    fi
    sleep 0.5
  done
  gen_rc=0
  wait "$GPID" || gen_rc=$?
  read -r first_loaded mbps_loaded <<<"$loaded"
  json=$(cat "$WORK/gen-$server.json")
  log "$server: generator: $json (exit $gen_rc)"
  [ $gen_rc -eq 0 ] || { FAILED=1; log "$server: the generator failed: $(tail -n 3 "$WORK/gen-$server.log")"; }
  per_client=$(python3 -c "print(f'{($peak - $rss0) / $COUNT:.1f}')")
  # RSS once all are up and the data client is done (the ramp's transient peak left behind)
  per_client_up=$([ -z "$rss_up" ] && echo "?" || python3 -c "print(f'{($rss_up - $rss0) / $COUNT:.1f}')")
  log "$server: RSS before $rss0 KiB, peak $peak KiB, once up $rss_up KiB"
  row=$(python3 - "$json" <<EOF
import json, sys
j = json.loads(sys.argv[1]) if sys.argv[1].strip() else {}
s = j.get("setup_ms") or {}
print(f"%-8s %5s/%-5s %8s %8s %8s %9s %9s %8s %8s %8s %8s %8s %5s %8s" % ("$server", j.get("up", "?"), $COUNT,
      j.get("setups_per_second", "?"), s.get("median", "?"), s.get("p90", "?"), "$per_client", "$per_client_up",
      "$first_alone", "$first_loaded", "$mbps_alone", "$mbps_loaded", j.get("held", "?"), j.get("vips", "?"), "$gen_cpu"))
EOF
)
  ROWS+=("$row")
  stop_server "$server"
done
echo
log "$COUNT clients at $RATE/s (auth $AUTH, vips $VIPS, generator waits: $GEN_WAIT; x25519, AES-GCM), each its own address; gen_cpu: the generator's CPU seconds while the loaded data client ran; memory per client: server RSS (peak, and once all are up) - before, over COUNT"
printf '%-8s %11s %8s %8s %8s %9s %9s %8s %8s %8s %8s %8s %5s %8s\n' server up setups/s med_ms p90_ms KiB/cl_pk KiB/cl_up 1st_pkt 1st_load Mb/s_1 Mb/s_ld held vips gen_cpu
for r in "${ROWS[@]}"; do echo "$r"; done
[ $FAILED -eq 0 ] || fail "not every client came up and stayed up (see above)"
