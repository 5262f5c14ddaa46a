# shellcheck shell=bash
# The namespaces, tunneld and charon helpers of scripts/ci/ike-lifecycle.sh, shared with
# scripts/studies/rekey-interval-study.sh, scripts/ci/ike-fragment.sh, scripts/ci/ike-certs.sh and
# scripts/ci/ike-flood.sh; sourced after scripts/lib/netns.sh and scripts/lib/strongswan.sh.
# Needs BIN (tunneld), IPSEC (the ipsec tool) and sets nothing when sourced but the constants
# below, which are ike-lifecycle's topology; a script with a topology of its own sets them
# after sourcing (TOPO, TOPO_ROUTER, A_NET, B_NET, A_IN, B_IN, A_ID, B_ID, IKE_PROP, ESP_PROP).
#
#   lca (side A)  lcva 10.99.1.1/24 --- lcna | lcn (router) | lcnb --- lcvb 10.99.2.1/24  lcb (side B)
#   inner addresses on lo: 10.100.1.1 (A), 10.100.2.1 (B); identities a.lc.test, b.lc.test
#   (TOPO=lc names the namespaces and links; TOPO_ROUTER=0: no router, one link
#   ${TOPO}va --- ${TOPO}vb with A_NET and B_NET on the same /24)
#
#   topo_up                     (re)makes the namespaces (NETNS: deleted by cleanup_all)
#   td_conf DIR KEY=VALUE...    tunneld.toml + secrets.toml with one connection (the rekey
#                               words only when given): td_head, then td_conn
#   td_head DIR KEY=VALUE...    a fresh tunneld.toml ([tunnel], [ike]) and an empty secrets.toml
#   td_conn DIR KEY=VALUE...    one more [[connection]] with its child, and its secrets
#   td_start NS DIR PEER_INNER  tunneld + `ipsec monitor --json` (TD_PID[DIR], MON_PID[DIR])
#   td_ctl DIR ARGS...          ipsec ARGS --control DIR/ctl.sock
#   td_counts DIR               "IKE_SAS CHILDREN ESP_SAS POLICIES"
#   td_stop DIR                 SIGTERM, exit 0 within 5 s
#   td_rekeys DIR               "CHILD IKE": new SAs after the first (monitor events)
#   sw_rekeys LOG               "CHILD_BY_US IKE_BY_US CHILD_FOR_PEER IKE_FOR_PEER FAILED" (charon log)
#   sw_notes LOG                charon's lines about trouble, counted
#   case_bounded SECS CMD...    CMD in a subshell, stopped after SECS; its status in CASE_RC
#   case_fail WHY...            the case ($CASE, in its own subshell) failed: WHY on stderr, in
#                               RESULT_WHY and, with CASE_RESULT_FAIL=1 (a script whose
#                               summary shows it), as "FAIL WHY" in $CD/result; ends the subshell
#   sw_counts                   "IKE_SAS CHILDREN" of the case's charon ($SW)
TOPO=lc
TOPO_ROUTER=1
A_NET=10.99.1.1
B_NET=10.99.2.1
A_IN=10.100.1.1
B_IN=10.100.2.1
A_ID=a.lc.test
B_ID=b.lc.test
IKE_PROP=aes128gcm16-prfsha256-x25519
ESP_PROP=aes128gcm16
# what td_start calls when tunneld does not come up (a script's case_fail, say)
TD_FAIL=fail

case_fail() {
  RESULT_WHY=$*
  echo "$NETNS_TAG: FAIL: ${CASE:-}: $*" >&2
  [ "${CASE_RESULT_FAIL:-0}" != 1 ] || [ ! -d "${CD:-}" ] || echo "FAIL $*" >"$CD/result"
  exit 1
}

sw_counts() { swan_established "$SW"; }

# ---- the namespaces ------------------------------------------------------------------------
# topo_up: ${TOPO}a (A_NET, A_IN on lo) and ${TOPO}b (B_NET, B_IN on lo), through the router
# ${TOPO}n (the .254 of each /24) or, with TOPO_ROUTER=0, on one link; A reaches B when it returns.
topo_up() {
  local ns a=${TOPO}a n=${TOPO}n b=${TOPO}b all
  all=("$a" "$n" "$b")
  [ "$TOPO_ROUTER" = 1 ] || all=("$a" "$b")
  for ns in "${all[@]}"; do ip netns del "$ns" 2>/dev/null || true; done
  NETNS=()
  netns_add "${all[@]}"
  if [ "$TOPO_ROUTER" = 1 ]; then
    ip link add "${TOPO}va" netns "$a" type veth peer name "${TOPO}na" netns "$n"
    ip link add "${TOPO}nb" netns "$n" type veth peer name "${TOPO}vb" netns "$b"
  else
    ip link add "${TOPO}va" netns "$a" type veth peer name "${TOPO}vb" netns "$b"
  fi
  ip -n "$a" addr add "$A_NET/24" dev "${TOPO}va"
  ip -n "$b" addr add "$B_NET/24" dev "${TOPO}vb"
  for ns in "${all[@]}"; do ip -n "$ns" link set lo up; done
  ip -n "$a" link set "${TOPO}va" up
  ip -n "$b" link set "${TOPO}vb" up
  if [ "$TOPO_ROUTER" = 1 ]; then
    ip -n "$n" addr add "${A_NET%.*}.254/24" dev "${TOPO}na"
    ip -n "$n" addr add "${B_NET%.*}.254/24" dev "${TOPO}nb"
    ip -n "$n" link set "${TOPO}na" up
    ip -n "$n" link set "${TOPO}nb" up
    ip -n "$a" route add default via "${A_NET%.*}.254"
    ip -n "$b" route add default via "${B_NET%.*}.254"
    ip netns exec "$n" sysctl -qw net.ipv4.ip_forward=1
  fi
  ip -n "$a" addr add "$A_IN/32" dev lo
  ip -n "$b" addr add "$B_IN/32" dev lo
  # the router learns both hosts now (no neighbour discovery delaying the first IKE message)
  ip netns exec "$a" ping -c 1 -W 3 -q "$B_NET" >/dev/null || fail "topology: $a cannot reach $B_NET"
}

# ---- tunneld -------------------------------------------------------------------------------
# td_conf, td_head, td_conn (the tunneld.toml and secrets.toml writer): scripts/lib/tunneld-conf.sh
. scripts/lib/tunneld-conf.sh

# pair_up DIR INITIATOR: tunneld (DIR/a, connection gw) and charon (DIR/b, child net) bring up
# one IKE SA and its child, INITIATOR b (charon: swanctl --initiate) or a (tunneld: ipsec ike
# initiate); both must count one IKE SA and one child within 15 s, else case_fail with both
# sides' last log lines (charon's IKE and ENC lines without the hex dumps).
pair_up() {
  local d=$1 initiator=$2 out rc=0 deadline=$((SECONDS + 15)) a b
  if [ "$initiator" = b ]; then
    out=$(swan_ctl "$d/b" --initiate --child net --timeout 15 2>&1) || rc=$?
    [ $rc -eq 0 ] || case_fail "swanctl --initiate failed: $(echo "$out" | tail -n 6)"
  else
    out=$(td_ctl "$d/a" ike initiate gw 2>&1) || case_fail "ipsec ike initiate gw failed: $out"
  fi
  while :; do
    a=$(td_counts "$d/a")
    a=${a% * *}
    b=$(swan_established "$d/b")
    [ "$a" != "1 1" ] || [ "$b" != "1 1" ] || break
    [ $SECONDS -lt $deadline ] || case_fail "not up within 15 s: tunneld $a, charon $b; tunneld: $(tail -n 3 "$d/a/tunneld.log"); charon: $(grep -E '\[(IKE|ENC)\]' "$d/b/charon.log" | grep -v -E '  [0-9]+: |=>' | tail -n 6)"
    sleep 0.1
  done
}

# td_start NS DIR REMOTE_INNER: tunneld in NS (control DIR/ctl.sock, keys DIR/keys, log
# DIR/tunneld.log, monitor DIR/monitor.log); the route to the peer's inner /24 into ipsec0.
declare -A TD_PID MON_PID
td_start() {
  local ns=$1 d=$2 src
  mkdir -p "$d/keys"
  ip netns exec "$ns" "$BIN" --config "$d/tunneld.toml" --control "$d/ctl.sock" --stats "$d/stats.json" \
    --keylog "$d/keys" 2>"$d/tunneld.log" &
  TD_PID[$d]=$!
  BG+=("$!")
  local deadline=$((SECONDS + 10))
  until [ -S "$d/ctl.sock" ] && ip -n "$ns" link show ipsec0 >/dev/null 2>&1; do
    kill -0 "${TD_PID[$d]}" 2>/dev/null || $TD_FAIL "tunneld in $ns exited at start: $(tail -n 5 "$d/tunneld.log")"
    [ $SECONDS -lt $deadline ] || $TD_FAIL "tunneld in $ns: no control socket / ipsec0 within 10 s"
    sleep 0.1
  done
  "$IPSEC" monitor --control "$d/ctl.sock" --json >"$d/monitor.log" 2>&1 &
  MON_PID[$d]=$!
  BG+=("$!")
  src=$A_IN
  [ "$ns" = "${TOPO}a" ] || src=$B_IN
  ip -n "$ns" route add "${3%.*}.0/24" dev ipsec0 src "$src"
}
td_ctl() { local d=$1; shift; "$IPSEC" "$@" --control "$d/ctl.sock"; }

# td_counts DIR: "IKE CHILD ESP POLICIES" of that tunneld (ipsec show --json, policy list).
td_counts() {
  local show pol
  show=$(td_ctl "$1" show --json 2>/dev/null) || { echo "? ? ? ?"; return; }
  pol=$(td_ctl "$1" policy list --json 2>/dev/null) || pol='{}'
  python3 -c '
import json, sys
j = json.loads(sys.argv[1])
p = json.loads(sys.argv[2]).get("policies", [])
ike = [x for x in j.get("ike_sas", []) if str(x.get("state", "established")).lower() in ("established", "up")]
child = sum(len(x.get("children", x.get("child_sas", []))) for x in ike)
esp = sum(1 for s in j.get("sas", []) if s.get("proto") == "esp")
print(len(ike), child, esp, len(p))' "$show" "$pol"
}

# td_stop DIR: SIGTERM, exit status 0 within 5 s (stop_pid), then its monitor.
td_stop() {
  local d=$1
  [ -z "${TD_PID[$d]:-}" ] || stop_pid "${TD_PID[$d]}" "tunneld ($d)"
  TD_PID[$d]=""
  [ -z "${MON_PID[$d]:-}" ] || stop_pids "${MON_PID[$d]}"
  MON_PID[$d]=""
}

# td_rekeys DIR: "CHILD IKE": child SAs and IKE SAs tunneld reported up after the first one
# of each (ipsec monitor --json), or its *rekey* events if it has more of those.
td_rekeys() {
  python3 - "$1/monitor.log" <<'PY'
import json, sys
n = {"child.up": 0, "ike.up": 0, "child": 0, "ike": 0}
for line in open(sys.argv[1], errors="replace"):
    try:
        e = json.loads(line)
    except ValueError:
        continue
    ev = str(e.get("event", ""))
    if ev in ("child.up", "ike.up"):
        n[ev] += 1
    if "rekey" in ev:
        n["ike" if ev.startswith("ike") else "child"] += 1
print(max(n["child.up"] - 1, n["child"], 0), max(n["ike.up"] - 1, n["ike"], 0))
PY
}

# ---- a case, bounded in time ----------------------------------------------------------------
# case_bounded SECS CMD ARGS...: CMD in a subshell whose exit stops every charon and kills BG;
# after SECS it gets TERM (case_fail "stopped: the case ran longer than its bound"). Then
# kills what is left in the topology's namespaces (what the case started, if it was killed).
# Its exit status goes to CASE_RC and case_bounded returns 0: call it as a plain command, not
# in `if`, `||` or `&&`, where bash would ignore set -e inside the case.
case_bounded() {
  local secs=$1 pid dog p ns
  CASE_RC=0
  shift
  (
    trap 'swan_stop_all >/dev/null 2>&1; for p in "${BG[@]}"; do kill -KILL "$p" 2>/dev/null || true; done' EXIT
    trap 'case_fail "stopped: the case ran longer than its bound"' TERM
    "$@"
  ) &
  pid=$!
  (
    trap 'kill $sp 2>/dev/null; exit 0' TERM
    sleep "$secs" &
    sp=$!
    wait $sp
    kill -TERM $pid 2>/dev/null
  ) &
  dog=$!
  wait $pid || CASE_RC=$?
  kill $dog 2>/dev/null || true
  wait $dog 2>/dev/null || true
  for ns in "${TOPO}a" "${TOPO}b" "${TOPO}n"; do
    for p in $(ip netns pids "$ns" 2>/dev/null); do kill -KILL "$p" 2>/dev/null || true; done
  done
}

# ---- charon --------------------------------------------------------------------------------
# sw_rekeys LOG: "CHILD_BY_US IKE_BY_US CHILD_FOR_PEER IKE_FOR_PEER FAILED": CREATE_CHILD_SA
# exchanges in charon's log (enc=1): the requests it sent whose response carried an SA (TSi:
# a child rekey, else an IKE rekey), the requests it answered with an SA, the responses
# without one (NO_ADDITIONAL_SAS and the like).
sw_rekeys() {
  python3 - "$1" <<'PY'
import re, sys
ex = re.compile(r"<(?:[^>|]*\|)?(\d+)> (generating|parsed) CREATE_CHILD_SA (request|response) (\d+) \[ (.*) \]")
n = [0, 0, 0, 0, 0]
req = {}
for line in open(sys.argv[1], errors="replace"):
    m = ex.search(line)
    if not m:
        continue
    ctx, verb, rr, mid, pl = m[1], m[2], m[3], m[4], m[5].split()
    ours = (verb == "generating") == (rr == "request")
    if rr == "request":
        # a child rekey has N(REKEY_SA); an IKE rekey has a KE and no TSi; else a new child
        req[(ctx, mid, ours)] = "child" if "N(REKEY_SA)" in pl else ("ike" if "TSi" not in pl and "KE" in pl else None)
        continue
    kind = req.pop((ctx, mid, ours), None)
    if kind is None:
        continue
    if "SA" not in pl:
        n[4] += 1
        continue
    n[(0 if ours else 2) + (0 if kind == "child" else 1)] += 1
print(*n)
PY
}

# sw_notes LOG: charon's lines about what went wrong (for the report), at most 12.
sw_notes() {
  grep -E '\] (<[^>]*> )?.*(NO_ADD_SAS|NO_ADDITIONAL|reauthenticat|failed|retransmit|collision|unable|deleting IKE_SA|giving up|establishing CHILD_SA .* failed)' "$1" |
    grep -v -E '  [0-9]+: |=>' | sed -E 's/^[0-9]+ [0-9]+\[/[/' | sort | uniq -c | sort -rn | head -n 12 || true
}

