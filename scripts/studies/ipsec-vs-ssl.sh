#!/usr/bin/env bash
# IPsec against the SSL tunnels: the design of Alshamsi and Saito, "A Technical Comparison of
# IPSec and SSL" (FreeS/WAN against Stunnel on 100 Mbit/s and 1 Gbit/s links, with and without
# compression; its figures in ../shared/studies/ipsec-vs-ssl.csv), redone with this project's
# tunneld against OpenVPN and stunnel (issue #30). As root:
#
# Two network namespaces (vsa$$, vsb$$) joined by a veth pair (10.91.0.1 <-> 10.91.0.2) whose
# A->B direction (the data's) is limited by tbf to each of LINKS (default "100M 1G"; the same
# tbf as scripts/demos/adaptive-demo.sh: scripts/lib/netns.sh's tbf_shape). Over it, one at a time, each of
# VARIANTS (default all):
#
#   tunneld-off     tunneld, IPComp (DEFLATE) + ESP (AES-128-GCM) tunnel, the raw ESP of
#                   examples/tunnel/comp-esp-{a,b}.toml, `adaptive = "off"`: never compresses
#   tunneld-always  the same, `adaptive = "always"`: compresses every packet it can
#   tunneld-model   the same, `adaptive = "model"` told the link's rate (`link_rate`), as
#                   adaptive-demo does: compresses when its timings say it pays
#   openvpn         OpenVPN, UDP, AES-128-GCM, no compression   } scripts/lib/ssl-tunnels.sh
#   openvpn-lz4     the same with `compress lz4-v2`             }
#   stunnel         stunnel4, TLS 1.3, TLS_AES_128_GCM_SHA256   } (TLS 1.3 has no compression)
#
# Each cell (link, variant, data set) starts the tunnel afresh (the model starts cold) and
# sends a data set of DATASETS (default "book1": the Calgary corpus text, compressible; also
# "random", incompressible) over one TCP connection A -> B through it for XFER_SECONDS (default
# 8), with scripts/lib/xfer.py (as adaptive-demo does). Goodput: payload bytes received / the time
# from the first byte to the end, at the receiver, Mbit/s. CPU per GB: utime + stime of the
# tunnel processes at both ends (/proc/PID/stat, as compare-peers does) over the transfer,
# divided by the bytes received; and the packets the tbf dropped (sent beyond the link's rate:
# encrypted, counted in the CPU, never received). REPS (default 3) repetitions, each with the
# variants in a rotated order (no variant always first or last); the table shows medians.
#
# Output: OUT/ipsec-vs-ssl.csv (a row per transfer), OUT/ipsec-vs-ssl.md (the table: ours
# beside the paper's rows for the same link) with OUT default /tmp/ipsec-vs-ssl, and the plot
# PLOT (default docs/plots/ipsec-vs-ssl.svg), both by scripts/studies/ipsec_vs_ssl_report.py (which
# reruns on a kept CSV without measuring again).
#
#   sudo bash scripts/studies/ipsec-vs-ssl.sh                  # everything: 2 x 6 x 3 cells, ~9 min
#   sudo bash scripts/studies/ipsec-vs-ssl.sh --quick          # 1 repetition of 4 s, ~3 min
#   DATASETS="book1 random" REPS=2 sudo -E bash scripts/studies/ipsec-vs-ssl.sh
#   VARIANTS="tunneld-off tunneld-model stunnel" LINKS=100M sudo -E bash scripts/studies/ipsec-vs-ssl.sh
#   TUNNELD_BIN=target/release/tunneld CORPUS=/path/to/calgary ...
#
# Where the corpus (default ../shared/corpus) is missing, generated stand-ins are used and the
# outputs SAY SO. Every wait has a deadline; the namespaces and every process started are
# removed on exit. Only namespaces named vs* and addresses in 10.91.0.0/16 are used.
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
NETNS_TAG=ipsec-vs-ssl
NETNS_LOG_FD=2
. scripts/lib/netns.sh
. scripts/lib/ssl-tunnels.sh

QUICK=0
for arg in "$@"; do
  case $arg in
    --quick) QUICK=1 ;;
    *) fail "unknown argument \`$arg\` (--quick; the rest through the environment: see the header)" ;;
  esac
done
if [ $QUICK -eq 1 ]; then
  XFER_SECONDS=${XFER_SECONDS:-4}
  REPS=${REPS:-1}
fi
XFER_SECONDS=${XFER_SECONDS:-8}
REPS=${REPS:-3}
LINKS=${LINKS:-"100M 1G"}
VARIANTS=${VARIANTS:-"tunneld-off tunneld-always tunneld-model openvpn openvpn-lz4 stunnel"}
DATASETS=${DATASETS:-book1}
CORPUS=${CORPUS:-$ROOT/../shared/corpus}
PAPER=${PAPER:-$ROOT/../shared/studies/ipsec-vs-ssl.csv}
OUT=${OUT:-/tmp/ipsec-vs-ssl}
PLOT=${PLOT:-$ROOT/docs/plots/ipsec-vs-ssl.svg}
[[ $XFER_SECONDS =~ ^[0-9]+$ && $XFER_SECONDS -ge 1 && $XFER_SECONDS -le 60 ]] || fail "XFER_SECONDS: 1 to 60"
[[ $REPS =~ ^[0-9]+$ && $REPS -ge 1 && $REPS -le 10 ]] || fail "REPS: 1 to 10"
for l in $LINKS; do [[ $l =~ ^[0-9]+[kMG]$ ]] || fail "LINKS: rates such as 100M and 1G, not $l"; done
for v in $VARIANTS; do
  [[ " tunneld-off tunneld-always tunneld-model $SSL_TUNNELS " == *" $v "* ]] || fail "unknown variant $v"
done
for d in $DATASETS; do [[ $d =~ ^[A-Za-z0-9_]+$ ]] || fail "DATASETS: corpus file names or random, not $d"; done

need_netns "network namespaces, TUN devices, tc"
command -v tc >/dev/null || cannot "tc (iproute2) is missing"
mapfile -t pkgs < <(ssl_tunnel_pkgs "$VARIANTS")
[ ${#pkgs[@]} -eq 0 ] || apt_install "${pkgs[@]}"
BIN=''
[[ " $VARIANTS " != *" tunneld-"* ]] || locate_tunneld

ID=$$
NSA=vsa$ID
NSB=vsb$ID
VA=vsva$ID
VB=vsvb$ID
A4=10.91.0.1
B4=10.91.0.2
# The tunnels' inner addresses: tunneld 10.91.1.0/24, OpenVPN 10.91.2.0/24.
WORK=$(mktemp -d /tmp/ipsec-vs-ssl.XXXXXX)
mkdir -p "$OUT" "$(dirname "$PLOT")"
trap 'cleanup_all $? 10' EXIT
trap 'fail "interrupted"' INT TERM

# ---- data -----------------------------------------------------------------------------------
# shellcheck disable=SC2086
GENERATED=$(XFER_TAG=$NETNS_TAG python3 scripts/lib/xfer.py data "$CORPUS" "$WORK" $DATASETS)

netns_pair "$NSA" "$NSB" "$VA" "$VB" $A4/24 $B4/24

# ---- tunneld: the adaptive demo's IPComp + ESP pair, moved to 10.91.0.0/16 --------------------
tunneld_config() { # SIDE MODE RATE -> the file's path
  local f=$WORK/tunneld-$2-$3-$1.toml
  sed -e 's/"10\.99\.0\./"10.91.0./g' -e 's#"10\.100\.0\.0/24"#"10.91.1.0/24"#g' -e 's/^tun = "ipsec0"/tun = "vstun0"/' \
    -e "s/^comp = \"deflate\"/&\nadaptive = \"$2\"\nlink_rate = \"$3\"/" "examples/tunnel/comp-esp-$1.toml" >"$f"
  grep -q '^local = "10.91.0.' "$f" && grep -q "^adaptive = \"$2\"" "$f" ||
    fail "examples/tunnel/comp-esp-$1.toml changed shape: $f is not the pair moved to 10.91.0.0/16"
  echo "$f"
}

# comp-ab's counters in a stats file: "compressed flips decision" (- where there is no model).
comp_stats() {
  python3 -c "import json,sys; c=[s['comp'] for s in json.load(open(sys.argv[1]))['engine']['sas'] if s['name']=='comp-ab'][0]; m=c.get('model') or {}; print(c['compressed'], m.get('flips', 0), m.get('decision') or '-')" "$1"
}

PIDS=()
TARGET='' SRV_ADDR='' CLI_ADDR='' CLI_PORT=''
up() { # VARIANT RATE PORT: starts it; sets PIDS, TARGET and the receiver's and sender's ends
  local side ns cfg mode=${1#tunneld-}
  if [[ $1 == tunneld-* ]]; then
    PIDS=()
    for side in a b; do
      ns=$NSA
      [ $side = b ] && ns=$NSB
      cfg=$(tunneld_config $side "$mode" "$2")
      rm -f "$WORK/stats-$side.json"
      ip netns exec "$ns" "$BIN" --config "$cfg" --stats "$WORK/stats-$side.json" 2>"$WORK/tunneld-$mode-$2-$side.log" &
      BG+=($!)
      PIDS+=($!)
    done
    wait_for 10 "tunneld's stats in both namespaces" test -s "$WORK/stats-a.json" -a -s "$WORK/stats-b.json"
    ip -n "$NSA" addr add 10.91.1.1/24 dev vstun0
    ip -n "$NSB" addr add 10.91.1.2/24 dev vstun0
    TARGET=10.91.1.2 SRV_ADDR='' CLI_ADDR='' CLI_PORT=$3
  else
    ssl_tunnel_up "$1" 10.91.2.11 10.91.2.12 "$3"
  fi
  wait_for 10 "$1: a ping through" ip netns exec "$NSA" ping -c1 -W1 "$TARGET"
}

CSV=$OUT/ipsec-vs-ssl.csv
# Packets the tbf dropped so far (the tunnel's packets sent beyond the link's rate: sealed, and
# counted in the CPU, but never received).
tbf_drops() {
  ip netns exec "$NSA" tc -s qdisc show dev "$VA" | awk '/dropped/ && n == "" { gsub(",", ""); for (i = 1; i < NF; i++) if ($i == "(dropped") n = $(i + 1) } END { print n + 0 }'
}
cell() { # VARIANT RATE DATA REP: one transfer; appends a row to CSV
  local v=$1 rate=$2 data=$3 rep=$4 rpid c0 c1 d0 d1 before='' after='' bytes secs
  PORT=$((PORT + 2))
  up "$v" "$rate" $PORT
  ip netns exec "$NSB" timeout $((XFER_SECONDS + 40)) python3 scripts/lib/xfer.py recv "${SRV_ADDR:-$TARGET}" $PORT $((XFER_SECONDS + 30)) \
    >"$WORK/recv.out" 2>"$WORK/recv.log" &
  rpid=$!
  BG+=("$rpid")
  wait_tcp_listen 10 "the receiver" "$NSB" $PORT
  [[ $v != tunneld-* ]] || before=$(comp_stats "$WORK/stats-a.json")
  c0=$(cpu_ticks "${PIDS[@]}")
  d0=$(tbf_drops)
  timeout $((XFER_SECONDS + 40)) ip netns exec "$NSA" python3 scripts/lib/xfer.py send "${CLI_ADDR:-$TARGET}" "$CLI_PORT" "$WORK/$data.bin" "$XFER_SECONDS" \
    2>"$WORK/send.log" || fail "$rate $v $data: the sender failed: $(tail -n 2 "$WORK/send.log")"
  wait "$rpid" || fail "$rate $v $data: the receiver failed: $(tail -n 2 "$WORK/recv.log")"
  c1=$(cpu_ticks "${PIDS[@]}")
  d1=$(tbf_drops)
  if [[ $v == tunneld-* ]]; then
    sleep 1.2 # the stats file is rewritten once a second
    after=$(comp_stats "$WORK/stats-a.json")
  fi
  stop_pids "${PIDS[@]}"
  read -r bytes secs <"$WORK/recv.out"
  # shellcheck disable=SC2086
  python3 - "$rate" "$v" "$data" "$rep" "$bytes" "$secs" $((c1 - c0)) "$(getconf CLK_TCK)" $((d1 - d0)) $before $after >>"$CSV" <<'EOF'
import sys
rate, v, data, rep, nbytes, secs, ticks, hz, drops = sys.argv[1:10]
nbytes, secs, cpu = int(nbytes), float(secs), int(ticks) / int(hz)
extra = ["", "", ""]
if len(sys.argv) == 16:  # tunneld: comp-ab's packets compressed and the model's flips in the cell
    c0, f0, _, c1, f1, decision = sys.argv[10:]
    extra = [str(int(c1) - int(c0)), str(int(f1) - int(f0)) if decision != "-" else "", decision if decision != "-" else ""]
print(",".join([rate, v, data, rep, str(nbytes), f"{secs:.3f}", f"{nbytes * 8 / secs / 1e6:.2f}", f"{cpu:.2f}",
                f"{cpu / (nbytes / 1e9):.2f}", drops] + extra))
EOF
  log "$(tail -n 1 "$CSV")"
}

# ---- the runs -------------------------------------------------------------------------------
read -r -a VS <<<"$VARIANTS"
echo "link,variant,data,rep,bytes,seconds,goodput_mbps,cpu_s,cpu_s_per_gb,tbf_dropped,ipcomp_compressed,model_flips,model_decision" >"$CSV"
PORT=5400
k=${#VS[@]}
T0=$SECONDS
for rep in $(seq "$REPS"); do
  for rate in $LINKS; do
    tbf_shape "$NSA" "$VA" "$rate"
    for i in $(seq 0 $((k - 1))); do
      v=${VS[$(((i + rep - 1) % k))]}
      for data in $DATASETS; do cell "$v" "$rate" "$data" "$rep"; done
    done
  done
  log "repetition $rep of $REPS done ($((SECONDS - T0)) s)"
done

COMMIT="$(git rev-parse --short HEAD 2>/dev/null || echo '?')$(git diff --quiet HEAD -- crates src scripts 2>/dev/null || echo '+changes')"
python3 scripts/studies/ipsec_vs_ssl_report.py "$CSV" "$PAPER" "$OUT/ipsec-vs-ssl.md" "$PLOT" \
  "$(date -u +%Y-%m-%d), commit $COMMIT, ${XFER_SECONDS} s transfers, medians of $REPS" "$GENERATED"
log "done: $CSV, $OUT/ipsec-vs-ssl.md, $PLOT"
