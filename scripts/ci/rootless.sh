#!/usr/bin/env bash
# tunneld without privilege on the host (issue #36, docs/rootless.md): the way rootless podman
# runs a container, tunneld runs as an unprivileged user (nobody by default) inside a user
# and network namespace of its own made by `pasta` (passt, the network of rootless podman 5),
# which publishes UDP 500 and 4500 of the "host" to it. No raw socket, no XFRM: IKEv2 and ESP
# in UDP only. The server's config is the README's remote-access example (a pool, the server
# proving itself with a certificate made by `ipsec pki`, users by EAP-MSCHAPv2 from the
# secrets file). A strongSwan 5.9.8 client (charon + kernel-libipsec, `auth = eap-mschapv2`,
# `vips = 0.0.0.0`) in another namespace connects through the published ports and must get an
# address from the pool; pings through the tunnel must all be answered, and tunneld must be,
# seen from the host, a process of that user with no capability.
#
#   rl<PID>h ("the host": pasta and, inside pasta's namespaces, tunneld as mapped root)
#     rl<PID>hv 10.93.0.1/24 ---- rl<PID>cv 10.93.0.2/24   rl<PID>c (charon, the client)
#   inner: 10.92.1.1 on tunneld's ipsec0 (in pasta's namespace); the client's address from
#   the pool 10.92.2.0/24
#
# Usage (as root: it makes the namespaces and drops to the user itself; about 10 s):
#   sudo bash scripts/ci/rootless.sh
#   RL_USER=someone sudo -E bash scripts/ci/rootless.sh   # another unprivileged user
#   bash scripts/ci/rootless.sh --if-possible             # no root / netns / pasta: say why, exit 0
# The work directory (configs, logs) is kept when the test failed (ROOTLESS_KEEP=1: always).
set -euo pipefail
cd "$(dirname "$0")/../.."
NETNS_TAG=rootless
. scripts/lib/netns.sh
. scripts/lib/strongswan.sh
. scripts/lib/roadwarrior.sh
parse_stages "" "$@"
need_netns "network namespaces for the host and the client; the server itself runs unprivileged"
RL_USER=${RL_USER:-nobody}
RL_UID=$(id -u "$RL_USER" 2>/dev/null) || cannot "no user $RL_USER"
RL_GID=$(id -g "$RL_USER")
[ "$RL_UID" -ne 0 ] || fail "RL_USER must not be root"
[ "$(sysctl -n user.max_user_namespaces 2>/dev/null || echo 0)" -gt 0 ] || cannot "user namespaces are disabled (user.max_user_namespaces = 0)"
command -v pasta >/dev/null || apt_install passt
command -v pasta >/dev/null || cannot "pasta (Debian package passt) could not be installed"
swan_install
# charon's eap-mschapv2 (Debian libcharon-extauth-plugins) needs MD4/DES from its gcrypt plugin
rw_swan_eap_plugins mschapv2
locate_tunneld --bin ipsec
IPSEC=$(dirname "$BIN")/ipsec

ID=$$
H=rl${ID}h
C=rl${ID}c
WORK=$(mktemp -d /tmp/rootless.XXXXXX)
chmod 755 "$WORK"
# tunneld runs in pasta's namespaces, not as pasta's child's child we track: stopped by its
# path (this run's own copy) before the rest, so no failure path leaves it behind
trap 'rc=$?; pkill -KILL -f "^$WORK/server/tunneld " 2>/dev/null || true; [ "${ROOTLESS_KEEP:-0}" = 0 ] && [ $rc -eq 0 ] && rm -rf "$WORK"; [ $rc -eq 0 ] || log "files kept in $WORK"; cleanup_all $rc 5' EXIT
trap 'fail "interrupted"' INT TERM

netns_pair "$H" "$C" "${H}v" "${C}v" 10.93.0.1/24 10.93.0.2/24
# pasta copies the address and the default route of the host's outbound interface
ip -n "$H" route add default via 10.93.0.2
# The one host setting a rootless IKE server needs (docs/rootless.md): UDP 500 is below 1024,
# which only root may bind unless ip_unprivileged_port_start allows it (per network
# namespace: here only the test's "host"). 4500 needs nothing.
ip netns exec "$H" sysctl -q -w net.ipv4.ip_unprivileged_port_start=500

# ---- the server: files the user owns (the binary copied where it can read it) -----------
# The README's remote-access config, as a new user writes it: a pool, a certificate from
# `ipsec pki`, the users in the secrets file.
D=$WORK/server
mkdir -p "$D"
PASSWORD="alice's rootless password $RANDOM"
"$IPSEC" pki ca --cn "Rootless test CA" --org ipsec-test --cert "$D/ca.pem" --key "$D/ca.key" >"$WORK/pki.log" 2>&1 &&
  "$IPSEC" pki server --ca-cert "$D/ca.pem" --ca-key "$D/ca.key" --name vpn.rl.test \
    --cert "$D/server.pem" --key "$D/server.key" >>"$WORK/pki.log" 2>&1 ||
  fail "ipsec pki: $(tail -n 3 "$WORK/pki.log")"
cat >"$D/tunneld.toml" <<EOF
# written by scripts/ci/rootless.sh: the README's remote-access example
[tunnel]
tun = "ipsec0"
local = "10.93.0.1"
secrets = "$D/secrets.toml"

[[pool]]
name = "rw"
addrs = "10.92.2.0/24"
dns = ["10.92.1.53"]

[[connection]]
name = "rw"
local_addrs = ["10.93.0.1"]
remote_addrs = ["%any"]
pools = ["rw"]
local = { id = "vpn.rl.test", auth = "pubkey", certs = ["$D/server.pem"] }
remote = { auth = "eap-mschapv2", eap_id = "%any" }

[[connection.children]]
name = "net"
local_ts = ["10.92.1.0/24"]
EOF
(umask 077 && printf '[[private]]\nfile = "server.key"\n\n[[eap]]\nid = "alice"\nsecret = "%s"\n' "$PASSWORD" >"$D/secrets.toml")
chmod 600 "$D/server.key"
"$IPSEC" check-config "$D/tunneld.toml" >"$WORK/check-config.txt" 2>&1 ||
  fail "ipsec check-config: $(tail -n 3 "$WORK/check-config.txt")"
cp "$BIN" "$D/tunneld"
cp "$IPSEC" "$D/ipsec"
# what runs inside is the container's entrypoint (dist/container/entrypoint.sh), as a
# rootless podman would run it: ipsec0 addressed and routed, the clients masqueraded out
cp dist/container/entrypoint.sh "$D/entrypoint.sh"
chown -R "$RL_UID:$RL_GID" "$D"
# pasta: a new user + network namespace, the host's address and route copied into it
# (--config-net), UDP 500 and 4500 of the host forwarded in; nothing else forwarded.
# --no-map-gw: the client here is the host's gateway, which pasta would otherwise take for
# the host itself
ip netns exec "$H" setpriv --reuid="$RL_UID" --regid="$RL_GID" --clear-groups --inh-caps=-all \
  env TUNNELD_BIN="$D/tunneld" TUNNELD_CONFIG="$D/tunneld.toml" TUNNELD_READY="$D/ready" \
  TUNNELD_ARGS="--control $D/ctl.sock --stats $D/stats.json --no-af-packet" \
  TUNNELD_ADDR=10.92.1.1/24 TUNNELD_ROUTES=10.92.2.0/24 TUNNELD_NAT="${H}v" \
  pasta --config-net --no-map-gw -f -q -u 500,4500 -t none -T none -U none -- sh "$D/entrypoint.sh" >"$WORK/pasta.log" 2>&1 &
PASTA=$!
BG+=("$PASTA")
wait_for 15 "tunneld (as $RL_USER, under pasta) to write its stats" test -s "$D/stats.json"
wait_for 5 "the entrypoint to configure ipsec0" test -s "$D/ready"
TPID=$(pgrep -f -- "^$D/tunneld --config" | head -n 1) || fail "no tunneld process found"

# ---- the client: charon as a road warrior, EAP-MSCHAPv2 as alice, asking for an address --
S=$WORK/client
swan_instance "$S"
# (no rekey_time: charon's defaults, as a user's config would have)
rw_client_conf "$S" local_addrs=10.93.0.2 remote_addrs=10.93.0.1 proposals=aes128gcm16-prfsha256-x25519 \
  rekey= vips=0.0.0.0 auth=eap-mschapv2 eap_id=alice password="$PASSWORD" remote_id=vpn.rl.test \
  cacert="$D/ca.pem" remote_ts=10.92.1.0/24 esp=aes128gcm16
swan_start "$C" "$S"
swan_load "$S"
out=$(swan_initiate "$S" net 2>&1) || fail "the client could not connect: $(echo "$out" | tail -n 5); tunneld: $(tail -n 5 "$D/tunneld.log")"
VIP=$(rw_client_vip "$S")
[[ "$VIP" == 10.92.2.* ]] || fail "the client got no address from the pool: \`$VIP\`"

# ---- checks ------------------------------------------------------------------------------
WHY=()
ping_out=$(ip netns exec "$C" ping -n -c 5 -i 0.2 -W 2 -I "$VIP" 10.92.1.1 2>&1 || true)
recv=$(sed -n 's/^[0-9]* packets transmitted, \([0-9]*\) received.*/\1/p' <<<"$ping_out")
[ "${recv:-0}" -eq 5 ] || WHY+=("${recv:-0} of 5 pings through the tunnel answered")
# the control socket admits tunneld's own root: the user's, i.e. `ipsec` inside its user
# namespace (nsenter -U makes us its uid 0); the host's root is refused there (checked)
list=$(nsenter -t "$TPID" -U "$D/ipsec" ike list --control "$D/ctl.sock" 2>&1 || true)
out=$("$IPSEC" ike list --control "$D/ctl.sock" 2>&1) && WHY+=("the host's root, unmapped in tunneld's namespace, was let in: $out")
grep -q alice <<<"$list" || WHY+=("ipsec ike list does not show the client alice: $list")
grep -q "$VIP" <<<"$list" || WHY+=("ipsec ike list does not show the client's address $VIP: $list")
# seen from the host: the user's process, no capability in the host's user namespace
uid=$(stat -c %u "/proc/$TPID")
[ "$uid" = "$RL_UID" ] || WHY+=("tunneld runs as uid $uid, not $RL_USER ($RL_UID)")
[ "$(readlink "/proc/$TPID/ns/user")" != "$(readlink /proc/self/ns/user)" ] ||
  WHY+=("tunneld is in the host's user namespace")
# its capabilities are those of the mapped root of its own user namespace only: against the
# host's namespaces it holds none (the kernel checks capabilities against the owning userns)
nsenter -t "$TPID" -U -n ip link show ipsec0 >/dev/null 2>&1 || WHY+=("no ipsec0 in tunneld's namespace")
grep -q masquerade <<<"$(nsenter -t "$TPID" -U -n nft list table ip tunneld_nat 2>/dev/null)" ||
  WHY+=("the entrypoint's masquerade (TUNNELD_NAT) is not in place")
# encapsulated only: the client's SAs use UDP 4500 (NAT-T forced, no raw ESP anywhere)
grep -q 'encap=yes\|encap yes' <<<"$(swan_list_sas "$S")" || WHY+=("the client's SA is not UDP-encapsulated")
swan_stop "$S"
kill -TERM "$TPID" 2>/dev/null || true
for _ in $(seq 50); do kill -0 "$TPID" 2>/dev/null || break; sleep 0.1; done
! kill -0 "$TPID" 2>/dev/null || WHY+=("tunneld did not stop within 5 s of SIGTERM")
if [ ${#WHY[@]} -gt 0 ]; then
  for w in "${WHY[@]}"; do log "FAIL: $w"; done
  log "tunneld's log: $(tail -n 5 "$D/tunneld.log")"
  exit 1
fi
log "passed: tunneld as $RL_USER (uid $RL_UID) in pasta's user namespace, UDP 500/4500 published, the README's road-warrior config; a strongSwan client (EAP-MSCHAPv2) got $VIP from the pool, 5 of 5 pings answered ($SECONDS s)"
