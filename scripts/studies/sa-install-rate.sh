#!/usr/bin/env bash
# SAs installed per second through tunneld's control socket, and tunneld's memory per SA
# (issue #30), as root: one tunneld in a network namespace (ps30-sa-PID, underlay veth
# 10.93.1.1 <-> 10.93.1.2 into a second namespace, so the daemon starts as it does for
# real), then a client adds N tunnel-mode ESP SAs (AES-128-GCM, each its own SPI and
# destination 10.93.128.0/17) with `sa.add` requests, one line each, waiting for every
# answer, reconnecting before the socket's 10 s limit. Prints the rate per block of 1,000
# SAs and overall, and the daemon's resident memory (VmRSS) before and after.
#
#   sudo bash scripts/studies/sa-install-rate.sh                  # 20,000 SAs
#   N=5000 TUNNELD_BIN=target/release/tunneld sudo -E bash scripts/studies/sa-install-rate.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
NETNS_TAG=sa-install-rate
NETNS_LOG_FD=2
. scripts/lib/netns.sh
[ "$(id -u)" -eq 0 ] || fail "needs root (network namespaces, TUN devices)"
N=${N:-20000}
[[ $N =~ ^[0-9]+$ && $N -ge 1 && $N -le 30000 ]] || fail "N: 1 to 30000 SAs"
BIN=''
locate_tunneld
ID=$$
NSA=ps30-sa-a-$ID
NSB=ps30-sa-b-$ID
WORK=$(mktemp -d /tmp/sa-install-rate.XXXXXX)
trap 'cleanup_all $? 10; rm -rf "$WORK"' EXIT
trap 'fail "interrupted"' INT TERM
netns_pair "$NSA" "$NSB" ps30sa$ID ps30sb$ID 10.93.1.1/24 10.93.1.2/24
cat >"$WORK/a.toml" <<TOML
sa = []
policy = []

[tunnel]
tun = "ps30tun"
local = "10.93.1.1"
peer = "10.93.1.2"
control = "$WORK/ctl.sock"
TOML
ip netns exec "$NSA" "$BIN" --config "$WORK/a.toml" --log warn 2>"$WORK/tunneld.log" &
PID=$!
BG+=($PID)
wait_for 10 "the control socket" test -S "$WORK/ctl.sock"
python3 - "$WORK/ctl.sock" "$N" "$PID" <<'PY'
import json, socket, sys, time
path, n, pid = sys.argv[1], int(sys.argv[2]), sys.argv[3]

def rss():
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0

def connect():
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(path)
    return s, s.makefile("rb"), time.monotonic()

before = rss()
s, f, since = connect()
t0 = time.monotonic()
block = t0
for i in range(n):
    if time.monotonic() - since > 8:  # the socket closes a client after 10 s
        s.close()
        s, f, since = connect()
    dst = f"10.93.{128 + i // 250}.{1 + i % 250}"
    key = "0x" + f"{i:08x}" * 5
    spec = f"proto esp spi {0x10000000 + i:#x} mode tunnel src 10.93.1.1 dst {dst} aead rfc4106(gcm(aes)) {key} 128"
    req = {"v": 1, "op": "sa.add", "name": f"sa{i}", "spec": spec}
    s.sendall((json.dumps(req) + "\n").encode())
    r = json.loads(f.readline())
    if not r.get("ok"):
        sys.exit(f"sa.add {i}: {r}")
    if (i + 1) % 1000 == 0:
        now = time.monotonic()
        print(f"SAs {i + 1 - 999}-{i + 1}: {1000 / (now - block):.0f} SAs/s", flush=True)
        block = now
took = time.monotonic() - t0
after = rss()
print(f"total: {n} SAs in {took:.2f} s, {n / took:.0f} SAs/s; tunneld VmRSS {before / 1e6:.1f} -> {after / 1e6:.1f} MB, {(after - before) / n:.0f} bytes per SA")
PY
