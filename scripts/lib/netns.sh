# shellcheck shell=bash
# Shared plumbing of the namespace scripts (netns-test.sh, flood-test.sh, compare-peers.sh,
# adaptive-demo.sh, ipsec-vs-ssl.sh, soak.sh, ike-interop.sh, strongswan-selftest.sh), sourced by them after `cd` to the repository root:
#
#   NETNS_TAG=netns-test          # the prefix of every message (required)
#   NETNS_LOG_FD=2                # where `log` writes (default 1, stdout; `fail` always to 2)
#   . scripts/lib/netns.sh
#   WORK=$(mktemp -d ...)
#   trap 'cleanup_all $? 15' EXIT
#   trap 'fail "interrupted"' INT TERM
#   netns_pair "$NSA" "$NSB" "$VA" "$VB" 10.99.0.1/24 10.99.0.2/24
#
# Every background process a script starts goes into BG, every namespace is made with
# netns_add (or netns_pair), so cleanup_all can kill and delete them all on any exit.
# Plain bash, `set -euo pipefail` safe; nothing here runs anything when sourced.

: "${NETNS_TAG:?set NETNS_TAG before sourcing scripts/lib/netns.sh}"
NETNS_LOG_FD=${NETNS_LOG_FD:-1}
BG=()    # background processes started (daemons, tshark, servers): killed on exit
NETNS=() # namespaces made (netns_add): deleted on exit

log() { echo "$NETNS_TAG: $*" >&"$NETNS_LOG_FD"; }
fail() {
  echo "$NETNS_TAG: FAIL: $*" >&2
  exit 1
}

# cleanup_all RC TAIL: the EXIT trap. Kills BG, deletes NETNS; WORK is removed when RC is 0,
# else kept with the last TAIL lines of each of its logs printed.
cleanup_all() {
  local rc=$1 tail=$2 p ns f
  for p in "${BG[@]}"; do kill -KILL "$p" 2>/dev/null || true; done
  for p in "${BG[@]}"; do wait "$p" 2>/dev/null || true; done
  for ns in "${NETNS[@]}"; do ip netns del "$ns" 2>/dev/null || true; done
  [ -n "${WORK:-}" ] || return 0
  if [ "$rc" -ne 0 ]; then
    for f in "$WORK"/*.log; do
      [ -s "$f" ] && { echo "---- $f (last lines)"; tail -n "$tail" "$f"; }
    done
    log "files kept in $WORK"
  else
    rm -rf "$WORK"
  fi
}

# parse_stages "ALL" ARG...: the command line of a staged script. Sets STAGES (the stages
# named, each checked against the space-separated list ALL; none named: all run) and
# IF_POSSIBLE (1 when --if-possible was given) and CI (1 when --ci was given: the script's
# short form). With ALL empty only --if-possible and --ci are taken.
parse_stages() {
  local all=$1 arg
  shift
  IF_POSSIBLE=0
  CI=0
  STAGES=()
  for arg in "$@"; do
    if [ "$arg" = --if-possible ]; then
      IF_POSSIBLE=1
    elif [ "$arg" = --ci ]; then
      CI=1
    elif [ -n "$all" ] && [[ " $all " == *" $arg "* ]]; then
      STAGES+=("$arg")
    elif [ -n "$all" ]; then
      fail "unknown stage \`$arg\`: the stages are $all (none named: all)"
    else
      fail "unknown argument \`$arg\` (only --if-possible, --ci)"
    fi
  done
}

# want STAGE: whether STAGE runs (every stage does when none was named); RAN records it.
RAN=()
want() {
  if [ ${#STAGES[@]} -eq 0 ] || [[ " ${STAGES[*]} " == *" $1 "* ]]; then
    RAN+=("$1")
    return 0
  fi
  return 1
}

# cannot REASON: what this machine lacks. With --if-possible say so and exit 0, else fail.
cannot() {
  if [ "${IF_POSSIBLE:-0}" -eq 1 ]; then
    log "skipped: $*"
    exit 0
  fi
  fail "$*"
}

# need_netns WHY: root, /dev/net/tun and a working `ip netns`, or `cannot` (WHY says what
# root is needed for).
need_netns() {
  local probe=probe-$NETNS_TAG-$$
  [ "$(id -u)" -eq 0 ] || cannot "needs root ($1)"
  [ -c /dev/net/tun ] || cannot "/dev/net/tun is missing"
  ip netns add "${probe:0:60}" 2>/dev/null || cannot "\`ip netns add\` does not work here"
  ip netns del "${probe:0:60}"
}

# netns_add NAME...: new namespaces, deleted on exit.
netns_add() {
  local ns
  for ns in "$@"; do
    NETNS+=("$ns")
    ip netns add "$ns"
  done
}

# netns_pair NSA NSB VA VB ADDR_A ADDR_B: two new namespaces joined by the veth pair VA (in
# NSA, ADDR_A as CIDR) <-> VB (in NSB, ADDR_B); loopback and the veths up.
netns_pair() {
  local nsa=$1 nsb=$2 va=$3 vb=$4 ns
  netns_add "$nsa" "$nsb"
  ip link add "$va" netns "$nsa" type veth peer name "$vb" netns "$nsb"
  ip -n "$nsa" addr add "$5" dev "$va"
  ip -n "$nsb" addr add "$6" dev "$vb"
  for ns in "$nsa" "$nsb"; do ip -n "$ns" link set lo up; done
  ip -n "$nsa" link set "$va" up
  ip -n "$nsb" link set "$vb" up
}

# wait_for SECONDS DESCRIPTION COMMAND...: until COMMAND succeeds, or fail.
wait_for() {
  local deadline=$((SECONDS + $1)) what=$2
  shift 2
  until "$@" >/dev/null 2>&1; do
    [ $SECONDS -lt $deadline ] || fail "timed out waiting for $what"
    sleep 0.1
  done
}

# wait_tcp_listen SECONDS DESCRIPTION NS PORT: until a TCP socket listens on PORT in NS, or fail.
wait_tcp_listen() {
  wait_for "$1" "$2" ip netns exec "$3" sh -c "ss -Hltn 'sport = :$4' | grep -q ."
}

# start_tunneld_pair CONFIG_A CONFIG_B STEM WHAT: $BIN with CONFIG_A in NSA and CONFIG_B in NSB
# (stats STEM-a.json, STEM-b.json; stderr STEM-a.log, STEM-b.log), pids in DA and DB; waits
# 10 s each for the stats files ("WHAT in NS"), then ipsec0 gets 10.100.0.1/24 in NSA and
# 10.100.0.2/24 in NSB.
start_tunneld_pair() {
  local stem=$3 what=$4
  ip netns exec "$NSA" "$BIN" --config "$1" --stats "$stem-a.json" 2>"$stem-a.log" &
  DA=$!
  BG+=("$DA")
  ip netns exec "$NSB" "$BIN" --config "$2" --stats "$stem-b.json" 2>"$stem-b.log" &
  DB=$!
  BG+=("$DB")
  wait_for 10 "$what in $NSA" test -s "$stem-a.json"
  wait_for 10 "$what in $NSB" test -s "$stem-b.json"
  ip -n "$NSA" addr add 10.100.0.1/24 dev ipsec0
  ip -n "$NSB" addr add 10.100.0.2/24 dev ipsec0
}

# stop_pid PID NAME: SIGTERM, at most 5 s, then the exit status must be 0.
stop_pid() {
  local pid=$1 name=$2 rc=0
  kill -TERM "$pid" 2>/dev/null || true
  for _ in $(seq 50); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  kill -0 "$pid" 2>/dev/null && { kill -KILL "$pid"; fail "$name did not stop within 5 s of SIGTERM"; }
  wait "$pid" || rc=$?
  [ $rc -eq 0 ] || fail "$name exited with status $rc"
}

# stop_pids PID...: SIGTERM to all, at most 5 s each, then SIGKILL; exit statuses ignored.
stop_pids() {
  local p
  for p in "$@"; do kill -TERM "$p" 2>/dev/null || true; done
  for p in "$@"; do
    for _ in $(seq 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$p" 2>/dev/null || true
    wait "$p" 2>/dev/null || true
  done
}

# cpu_ticks PID...: the sum of their utime + stime, in clock ticks.
cpu_ticks() {
  local t=0 p
  for p in "$@"; do
    t=$((t + $(awk '{ print $14 + $15 }' "/proc/$p/stat")))
  done
  echo $t
}

# apt_install PKG...: installs the Debian packages (noninteractive, no daemon started, no
# setuid dumpcap); the list refreshed first; on failure apt's output is shown, then fail.
apt_install() {
  log "installing $*"
  export DEBIAN_FRONTEND=noninteractive
  { echo "wireshark-common wireshark-common/install-setuid boolean false"
    echo "iperf3 iperf3/start_daemon boolean false"; } | debconf-set-selections 2>/dev/null || true
  local apt_log
  apt_log=$(mktemp)
  { apt-get update -qq && apt-get install -y -qq --no-install-recommends "$@"; } >"$apt_log" 2>&1 ||
    { cat "$apt_log" >&2; rm -f "$apt_log"; fail "could not install $*"; }
  rm -f "$apt_log"
}

# release_dir: the absolute path of the cargo target's release directory.
release_dir() {
  local td=${CARGO_TARGET_DIR:-target}
  case $td in /*) ;; *) td=$PWD/$td ;; esac
  echo "$td/release"
}

# locate_tunneld [CARGO_ARGS...]: BIN = $TUNNELD_BIN, or else tunneld built (release; CARGO_ARGS
# such as `--bin ipsec` build more in the same run); fail unless BIN is executable.
locate_tunneld() {
  if [ -n "${TUNNELD_BIN:-}" ]; then
    BIN=$TUNNELD_BIN
  else
    cargo build --release --locked --quiet --bin tunneld "$@"
    BIN=$(release_dir)/tunneld
  fi
  [ -x "$BIN" ] || fail "no tunneld binary at $BIN"
}

# tbf_shape NS DEV RATE: DEV in NS limited to RATE (100M, 1G, 10M, 500k, a plain bit rate) by
# a tbf qdisc (burst: 10 ms at the rate, at least 32 KB; 50 ms of queue), or unlimited
# (RATE `unlimited`: the qdisc removed).
tbf_shape() {
  ip netns exec "$1" tc qdisc del dev "$2" root 2>/dev/null || true
  [ "$3" = unlimited ] && return 0
  local bps burst
  bps=$(python3 -c "import sys; s=sys.argv[1]; m={'k':1e3,'M':1e6,'G':1e9}; print(int(float(s[:-1])*m[s[-1]]) if s[-1] in m else int(s))" "$3")
  burst=$((bps / 8 / 100))
  [ $burst -ge 32768 ] || burst=32768
  ip netns exec "$1" tc qdisc add dev "$2" root tbf rate "$bps"bit burst "$burst" latency 50ms
}
