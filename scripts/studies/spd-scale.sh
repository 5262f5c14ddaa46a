#!/usr/bin/env bash
# SPD scaling (issue #30): generates TOML configs with N policies per direction (one ESP SA
# pair; /32 -> /24 policies, every 16th one protect, the rest bypass, each with a name) and
# times `ipsec check-config` on each.
#
#   scripts/studies/spd-scale.sh [IPSEC_BINARY] [N...]
#
# Default binary target/release/ipsec (build it with `cargo build --release`), default sizes
# 1000 10000 100000. On a shared machine, run it under the bench lock:
#   flock /tmp/ipsec-bench.lock scripts/studies/spd-scale.sh
set -euo pipefail
bin=${1:-target/release/ipsec}
shift || true
sizes=("$@")
[ ${#sizes[@]} -eq 0 ] && sizes=(1000 10000 100000)
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT

gen() {
    awk -v n="$1" 'BEGIN {
        print "[[sa]]\nname = \"esp-out\"\nproto = \"esp\"\nspi = 0x1001\nsrc = \"192.0.2.1\"\ndst = \"192.0.2.2\""
        print "aead = { alg = \"rfc4106(gcm(aes))\", key = \"0x101112131415161718191a1b1c1d1e1f20212223\", icv = 128 }\n"
        print "[[sa]]\nname = \"esp-in\"\nproto = \"esp\"\nspi = 0x1002\nsrc = \"192.0.2.2\"\ndst = \"192.0.2.1\""
        print "aead = { alg = \"rfc4106(gcm(aes))\", key = \"0x303132333435363738393a3b3c3d3e3f40414243\", icv = 128 }\n"
        for (i = 0; i < n; i++) {
            a = int(i / 65536) % 256; b = int(i / 256) % 256; c = i % 256
            for (d = 0; d < 2; d++) {
                dirn = d == 0 ? "out" : "in"
                host = sprintf("10.%d.%d.%d", a, b, c); net = sprintf("172.%d.%d.0/24", 16 + a, b)
                printf "[[policy]]\nname = \"p-%s-%d\"\ndir = \"%s\"\n", dirn, i, dirn
                if (d == 0) printf "src = \"%s\"\ndst = \"%s\"\n", host, net
                else printf "src = \"%s\"\ndst = \"%s\"\n", net, host
                if (i % 16 == 0) printf "action = \"protect\"\nbundle = [\"esp-%s\"]\n\n", dirn
                else print "action = \"bypass\"\n"
            }
        }
    }'
}

printf '%-10s %-12s %s\n' "per-dir" "policies" "check-config seconds"
for n in "${sizes[@]}"; do
    f="$dir/spd-$n.toml"
    gen "$n" > "$f"
    start=$(date +%s.%N)
    "$bin" check-config "$f" > /dev/null
    end=$(date +%s.%N)
    printf '%-10s %-12s %.2f\n' "$n" "$((2 * n))" "$(echo "$end - $start" | bc)"
done
