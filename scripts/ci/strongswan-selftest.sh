#!/usr/bin/env bash
# strongSwan against strongSwan in network namespaces, as root: proves the harness
# (scripts/lib/strongswan.sh) and the key extraction (scripts/lib/charon_keys.py) that the IKE
# interop tests stand on. charon in each namespace with kernel-libipsec as its data plane
# (ESP in UDP through a TUN device ipsec0; this kernel has no XFRM), IKEv2 with a PSK, one
# tunnel-mode child between the inner subnets 10.98.1.0/24 (A, 10.98.1.1 on lo) and
# 10.98.2.0/24 (B, 10.98.2.1 on lo):
#
#   basic  IPv4 underlay swva 10.97.0.1/24 <-> swvb 10.97.0.2/24, aes128gcm16-prfsha256-x25519,
#          ESP aes128gcm16 in UDP (encap = yes): A initiates, 5 pings each way through the
#          tunnel, A terminates; tshark on the veth decrypts every IKE frame after IKE_SA_INIT
#          (checksum correct) and checks every ESP frame's ICV with the Wireshark tables that
#          charon_keys.py builds from the two charon logs (level 4), and fails with a table
#          that has one key byte changed; the keys recompute from the logged DH secret, nonces
#          and PSK (RFC 7296 2.14/2.15/2.17); no error in either log; both charons stop cleanly
#   v6     the same over an IPv6-only underlay (fd00:97::1/64 <-> fd00:97::2/64; inner IPv4
#          and IPv6: 10.98.x.0/24 and fd00:98:x::/64), aes256-sha256-ecp384 / aes128-sha256
#   nat    A (10.97.1.1) -> a NAT namespace swn (nftables masquerade to 10.97.2.254, source
#          ports 20000-20999) -> B (10.97.2.1, the responder, remote_addrs = %any), encap = no:
#          charon detects the NAT from the NAT-D payloads itself and floats to 4500; captured
#          on B's side of the NAT (ESP tables with "*" addresses)
#
# Installs strongSwan, tshark and nftables if missing (apt; no service started). Namespaces
# are prefixed sw; nothing is left running or mounted. About 5-10 s a stage.
#
#   sudo bash scripts/ci/strongswan-selftest.sh              # every stage
#   sudo bash scripts/ci/strongswan-selftest.sh basic nat    # only those
#   bash scripts/ci/strongswan-selftest.sh --if-possible     # without root / netns: say why, exit 0
set -euo pipefail
cd "$(dirname "$0")/../.."
START=$SECONDS
NETNS_TAG=strongswan-selftest
. scripts/lib/netns.sh
. scripts/lib/strongswan.sh
ALL_STAGES="basic v6 nat"
parse_stages "$ALL_STAGES" "$@"
need_netns "network namespaces, charon"

swan_install
WORK=$(mktemp -d /tmp/strongswan-selftest.XXXXXX)
trap 'rc=$?; swan_stop_all; cleanup_all $rc 40' EXIT
trap 'fail "interrupted"' INT TERM
PSK="selftest-$RANDOM-$RANDOM"
KEYS="python3 scripts/lib/charon_keys.py"

# ping_ok NS SRC DST: 5 pings from SRC to DST in NS (0.2 s apart), every one answered.
ping_ok() {
  local out
  out=$(ip netns exec "$1" ping -c 5 -i 0.2 -W 2 -I "$2" "$3" 2>&1) ||
    fail "$STAGE: ping $2 -> $3 in $1 through the tunnel failed: $(echo "$out" | tail -n 2)"
  grep -q ' 0% packet loss' <<<"$out" || fail "$STAGE: ping $2 -> $3 lost packets: $(tail -n 2 <<<"$out")"
}

# capture NS IFACE PCAP: tshark on IFACE in NS (UDP 500/4500) into PCAP; pid in CAP.
capture() {
  ip netns exec "$1" tshark -n -q -i "$2" -F pcap -w "$3" -f 'udp port 500 or udp port 4500' 2>"$3.log" &
  CAP=$!
  BG+=("$CAP")
  swan_wait_capture 10 "$3"
}

# up_and_check A_DIR B_DIR: A initiates; both ends must show one IKE_SA ESTABLISHED and one
# CHILD_SA INSTALLED.
up_and_check() {
  swan_initiate "$1" net
  local sa
  for d in "$1" "$2"; do
    sa=$(swan_established "$d")
    [ "$sa" = "1 1" ] || fail "$STAGE: $d: IKE_SAs/CHILD_SAs up: $sa, expected 1 1: $(swan_list_sas "$d")"
  done
}

# down_and_check A_DIR B_DIR: A terminates the IKE_SA; within 5 s neither end has an SA.
down_and_check() {
  swan_terminate "$1" --ike sw
  wait_for 5 "$STAGE: B's IKE_SA to go after A's DELETE" sh -c "[ -z \"\$(STRONGSWAN_CONF=$2/strongswan.conf swanctl --list-sas --raw --uri unix://$2/run/charon.vici | grep '^list-sa event')\" ]"
  [ "$(swan_established "$1")" = "0 0" ] || fail "$STAGE: A still has SAs after terminating"
}

# corrupt_key TABLE FIELD...: TABLE (a Wireshark UAT file) with the last hex digit of the first
# non-empty field of FIELDs (0-based, comma-separated) of its first entry changed.
corrupt_key() {
  python3 - "$@" <<'PY'
import sys
lines = open(sys.argv[1]).read().splitlines()
i = next(n for n, l in enumerate(lines) if l and not l.startswith("#"))
f = lines[i].split(",")
k = next(int(k) for k in sys.argv[2:] if f[int(k)].strip('"'))
q = f[k].endswith('"')
v = f[k].rstrip('"')
f[k] = v[:-1] + ("1" if v[-1] == "0" else "0") + ('"' if q else "")
lines[i] = ",".join(f)
print("\n".join(lines))
PY
}

# finish STAGE A_DIR B_DIR PCAP IKE_FRAMES ESP_FRAMES [--esp-any-address]: stops the capture and
# both charons (exit 0), no warning in their logs, Wireshark tables from both logs, tshark
# decrypts everything (and fails with a changed key), keys recompute (RFC 7296).
finish() {
  local a=$2 b=$3 pcap=$4 nike=$5 nesp=$6 any=${7:-} w d out
  sleep 0.3
  stop_pids "$CAP"
  swan_stop "$a"
  swan_stop "$b"
  for d in "$a" "$b"; do
    w=$(swan_log_warnings "$d")
    [ -z "$w" ] || fail "$STAGE: $d/charon.log has warnings: $w"
  done
  # shellcheck disable=SC2086 # $any is a flag or nothing
  $KEYS wireshark "$a/charon.log" "$b/charon.log" --ikev2 "$WORK/$1.ikev2" --esp "$WORK/$1.esp" $any >/dev/null
  out=$($KEYS verify "$pcap" --ikev2 "$WORK/$1.ikev2" --esp "$WORK/$1.esp" --ike-frames "$nike" --esp-frames "$nesp") ||
    fail "$1: tshark did not decrypt/check every frame with the keys from charon's logs"
  log "$1: ${out#charon_keys: }"
  # The check must be able to fail: the last hex digit of SK_ai (SK_ei for AEAD), and of the
  # first ESP SA's integrity key (encryption key for AEAD), changed. (A wrong SK_ei with a
  # right SK_ai fails too, on the garbage it decrypts to; the integrity key makes it certain.)
  corrupt_key "$WORK/$1.ikev2" 5 2 >"$WORK/$1.ikev2.bad"
  corrupt_key "$WORK/$1.esp" 7 5 >"$WORK/$1.esp.bad"
  if $KEYS verify "$pcap" --ikev2 "$WORK/$1.ikev2.bad" --esp "$WORK/$1.esp" >/dev/null 2>&1; then
    fail "$1: tshark accepted the IKE frames with a wrong SK_ai/SK_ei: the check cannot fail"
  fi
  if $KEYS verify "$pcap" --ikev2 "$WORK/$1.ikev2" --esp "$WORK/$1.esp.bad" >/dev/null 2>&1; then
    fail "$1: tshark accepted the ESP frames with a wrong key: the check cannot fail"
  fi
  $KEYS json "$a/charon.log" "$b/charon.log" -o "$WORK/$1.json"
  out=$($KEYS check "$WORK/$1.json") || fail "$1: the logged keys do not follow from the logged secrets"
  log "$1: ${out#charon_keys: }"
  [ ! -e /run/charon.pid ] && [ ! -e /run/charon.vici ] || fail "$1: charon's /run leaked into the host's /run"
}

# ---- basic: IPv4 underlay, encap = yes ---------------------------------------------------
if want basic; then
  STAGE=basic
  T0=$SECONDS
  netns_pair swa swb swva swvb 10.97.0.1/24 10.97.0.2/24
  ip -n swa addr add 10.98.1.1/32 dev lo
  ip -n swb addr add 10.98.2.1/32 dev lo
  A=$WORK/basic-a B=$WORK/basic-b
  swan_instance "$A"
  swan_instance "$B"
  common=(psk="$PSK" ike=aes128gcm16-prfsha256-x25519 esp=aes128gcm16 encap=yes)
  swan_site_conf "$A" local=10.97.0.1 remote=10.97.0.2 local_id=a.swan.test remote_id=b.swan.test \
    local_ts=10.98.1.0/24 remote_ts=10.98.2.0/24 "${common[@]}"
  swan_site_conf "$B" local=10.97.0.2 remote=10.97.0.1 local_id=b.swan.test remote_id=a.swan.test \
    local_ts=10.98.2.0/24 remote_ts=10.98.1.0/24 "${common[@]}"
  swan_start swa "$A"
  swan_start swb "$B"
  swan_load "$A"
  swan_load "$B"
  capture swa swva "$WORK/basic.pcap"
  up_and_check "$A" "$B"
  grep -q '^10.98.2.0/24 dev ipsec0 .*src 10.98.1.1' <<<"$(ip -n swa route show table 220)" ||
    fail "basic: no route to B's subnet through ipsec0 in table 220: $(ip -n swa route show table 220)"
  ping_ok swa 10.98.1.1 10.98.2.1
  ping_ok swb 10.98.2.1 10.98.1.1
  down_and_check "$A" "$B"
  # IKE_SA_INIT, IKE_AUTH, INFORMATIONAL (delete): 6 frames; 2 x 5 pings, each answered: 20 ESP
  finish basic "$A" "$B" "$WORK/basic.pcap" 6 20
  for ns in swa swb; do ip netns del $ns; done
  log "basic: IKEv2 PSK up, 10 pings through kernel-libipsec both ways, tshark decrypted it all, keys recomputed, clean stop ($((SECONDS - T0)) s)"
fi

# ---- v6: IPv6-only underlay, inner IPv4 and IPv6 ---------------------------------------------
if want v6; then
  STAGE=v6
  T0=$SECONDS
  netns_add swa6 swb6
  ip link add swva6 netns swa6 type veth peer name swvb6 netns swb6
  ip -n swa6 addr add fd00:97::1/64 dev swva6 nodad
  ip -n swb6 addr add fd00:97::2/64 dev swvb6 nodad
  for ns in swa6 swb6; do ip -n $ns link set lo up; done
  ip -n swa6 link set swva6 up
  ip -n swb6 link set swvb6 up
  ip -n swa6 addr add 10.98.1.1/32 dev lo
  ip -n swa6 addr add fd00:98:1::1/128 dev lo nodad
  ip -n swb6 addr add 10.98.2.1/32 dev lo
  ip -n swb6 addr add fd00:98:2::1/128 dev lo nodad
  A=$WORK/v6-a B=$WORK/v6-b
  swan_instance "$A"
  swan_instance "$B"
  common=(psk="$PSK" ike=aes256-sha256-ecp384 esp=aes128-sha256 encap=yes)
  swan_site_conf "$A" local=fd00:97::1 remote=fd00:97::2 local_id=a.swan.test remote_id=b.swan.test \
    local_ts=10.98.1.0/24,fd00:98:1::/64 remote_ts=10.98.2.0/24,fd00:98:2::/64 "${common[@]}"
  swan_site_conf "$B" local=fd00:97::2 remote=fd00:97::1 local_id=b.swan.test remote_id=a.swan.test \
    local_ts=10.98.2.0/24,fd00:98:2::/64 remote_ts=10.98.1.0/24,fd00:98:1::/64 "${common[@]}"
  swan_start swa6 "$A"
  swan_start swb6 "$B"
  swan_load "$A"
  swan_load "$B"
  capture swa6 swva6 "$WORK/v6.pcap"
  up_and_check "$A" "$B"
  ping_ok swa6 10.98.1.1 10.98.2.1
  ping_ok swb6 10.98.2.1 10.98.1.1
  ping_ok swa6 fd00:98:1::1 fd00:98:2::1
  ping_ok swb6 fd00:98:2::1 fd00:98:1::1
  down_and_check "$A" "$B"
  finish v6 "$A" "$B" "$WORK/v6.pcap" 6 40
  for ns in swa6 swb6; do ip netns del $ns; done
  log "v6: IKEv2 over an IPv6 underlay, pings of both inner families both ways, tshark decrypted it all ($((SECONDS - T0)) s)"
fi

# ---- nat: A -> masquerading NAT -> B, encap = no (NAT-D detects it) ---------------------------
if want nat; then
  STAGE=nat
  T0=$SECONDS
  netns_add swan swnn swbn
  ip link add swva netns swan type veth peer name swna netns swnn
  ip link add swnb netns swnn type veth peer name swvb netns swbn
  ip -n swan addr add 10.97.1.1/24 dev swva
  ip -n swnn addr add 10.97.1.254/24 dev swna
  ip -n swnn addr add 10.97.2.254/24 dev swnb
  ip -n swbn addr add 10.97.2.1/24 dev swvb
  for ns in swan swnn swbn; do ip -n $ns link set lo up; done
  ip -n swan link set swva up
  ip -n swnn link set swna up
  ip -n swnn link set swnb up
  ip -n swbn link set swvb up
  ip -n swan route add default via 10.97.1.254
  ip netns exec swnn sysctl -qw net.ipv4.ip_forward=1
  ip netns exec swnn nft -f - <<'EOF' || fail "nat: nft could not load the NAT rules"
table ip nat {
  chain post {
    type nat hook postrouting priority srcnat; policy accept;
    oifname "swnb" meta l4proto udp masquerade to :20000-20999
    oifname "swnb" masquerade
  }
}
table ip filter {
  chain guard {
    type filter hook forward priority filter; policy drop;
    ct state established,related accept
    iifname "swna" oifname "swnb" accept
  }
}
EOF
  ip -n swan addr add 10.98.1.1/32 dev lo
  ip -n swbn addr add 10.98.2.1/32 dev lo
  A=$WORK/nat-a B=$WORK/nat-b
  swan_instance "$A"
  swan_instance "$B"
  common=(psk="$PSK" ike=aes128gcm16-prfsha256-x25519 esp=aes128gcm16 encap=no)
  swan_site_conf "$A" local=10.97.1.1 remote=10.97.2.1 local_id=a.swan.test remote_id=b.swan.test \
    local_ts=10.98.1.0/24 remote_ts=10.98.2.0/24 "${common[@]}"
  swan_site_conf "$B" local=10.97.2.1 remote=%any local_id=b.swan.test remote_id=a.swan.test \
    local_ts=10.98.2.0/24 remote_ts=10.98.1.0/24 "${common[@]}"
  swan_start swan "$A"
  swan_start swbn "$B"
  swan_load "$A"
  swan_load "$B"
  capture swbn swvb "$WORK/nat.pcap"
  up_and_check "$A" "$B"
  grep -q 'local host is behind NAT' "$A/charon.log" || fail "nat: A did not detect the NAT"
  grep -q 'remote host is behind NAT' "$B/charon.log" || fail "nat: B did not detect the NAT"
  peer=$(swan_list_sas "$B" | grep -o 'remote-host=[^ ]* remote-port=[0-9]*' | head -n 1)
  [[ $peer == "remote-host=10.97.2.254 remote-port=2"???? ]] || fail "nat: B sees A at \`$peer\`, not the NAT's 10.97.2.254:20000-20999"
  ping_ok swan 10.98.1.1 10.98.2.1
  ping_ok swbn 10.98.2.1 10.98.1.1
  down_and_check "$A" "$B"
  finish nat "$A" "$B" "$WORK/nat.pcap" 6 20 --esp-any-address
  for ns in swan swnn swbn; do ip netns del $ns; done
  log "nat: through nftables masquerade (B sees A at ${peer#remote-host=}), NAT detected by both, pings both ways, tshark decrypted it all ($((SECONDS - T0)) s)"
fi

swan_host_quiet || fail "something listens on the host's UDP 500/4500 after the run"
log "all stages passed ($((SECONDS - START)) s)"
