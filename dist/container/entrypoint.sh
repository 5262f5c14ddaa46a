#!/bin/sh
# tunneld's container entrypoint (dist/container/Containerfile; docs/rootless.md). Runs
# tunneld, then, once its TUN device ipsec0 exists, gives it an address and routes and, if
# asked, masquerades what leaves through an interface. Runs as the container's root, which in
# a rootless container is the unprivileged user who started it (its capabilities reach only
# the container's own namespaces). Environment:
#   TUNNELD_CONFIG  the config file (default /etc/tunneld/tunneld.toml)
#   TUNNELD_ARGS    more tunneld arguments (default: --control /run/tunneld/ctl.sock
#                   --stats /run/tunneld/stats.json --no-af-packet)
#   TUNNELD_ADDR    an address for ipsec0 (CIDR), e.g. the gateway's inner address
#   TUNNELD_ROUTES  prefixes routed into ipsec0 (space-separated), e.g. the clients' pool
#   TUNNELD_NAT     an interface (e.g. eth0): traffic from ipsec0 leaving through it is
#                   masqueraded (nftables), so clients reach the outside with this address
#   TUNNELD_READY   a file written with tunneld's PID once ipsec0 is configured
set -eu
CONFIG=${TUNNELD_CONFIG:-/etc/tunneld/tunneld.toml}
ARGS=${TUNNELD_ARGS:---control /run/tunneld/ctl.sock --stats /run/tunneld/stats.json --no-af-packet}
BIN=${TUNNELD_BIN:-tunneld}
mkdir -p /run/tunneld 2>/dev/null || true
# shellcheck disable=SC2086
"$BIN" --config "$CONFIG" $ARGS &
pid=$!
trap 'kill -TERM "$pid" 2>/dev/null' TERM INT
i=0
until ip link show ipsec0 >/dev/null 2>&1; do
  kill -0 "$pid" 2>/dev/null || { wait "$pid"; exit $?; }
  i=$((i + 1))
  [ $i -lt 100 ] || { echo "entrypoint: no ipsec0 after 10 s" >&2; kill -TERM "$pid"; exit 1; }
  sleep 0.1
done
[ -z "${TUNNELD_ADDR:-}" ] || ip addr add "$TUNNELD_ADDR" dev ipsec0
ip link set ipsec0 up
for r in ${TUNNELD_ROUTES:-}; do
  ip route add "$r" dev ipsec0 ${TUNNELD_ADDR:+src "${TUNNELD_ADDR%/*}"}
done
if [ -n "${TUNNELD_NAT:-}" ]; then
  sysctl -q -w net.ipv4.ip_forward=1 || echo "entrypoint: cannot enable forwarding (set it on the container)" >&2
  nft -f - <<NFT
table ip tunneld_nat {
  chain post { type nat hook postrouting priority srcnat; policy accept;
    iifname "ipsec0" oifname "$TUNNELD_NAT" masquerade
  }
}
NFT
fi
[ -z "${TUNNELD_READY:-}" ] || echo "$pid" >"$TUNNELD_READY"
# wait returns early when the trap runs; wait again for tunneld's own exit status
rc=0
wait "$pid" || rc=$?
kill -0 "$pid" 2>/dev/null && { wait "$pid" || rc=$?; }
exit $rc
