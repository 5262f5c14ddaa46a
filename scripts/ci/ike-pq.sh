#!/usr/bin/env bash
# Post-quantum IKEv2 between tunneld and strongSwan 6.1 (docs/ike-pq.md), as root: ML-KEM
# (draft-ietf-ipsecme-ikev2-mlkem) in IKE_SA_INIT and as additional key exchanges (RFC 9370)
# in IKE_INTERMEDIATE (RFC 9242), both roles, in network namespaces named by this script's PID:
#
#   pq<PID>a (tunneld)  pq<PID>va 10.91.1.1/24 --- pq<PID>vb 10.91.1.2/24  pq<PID>b (charon 6.1)
#   inner addresses on lo: 10.91.11.1 (A), 10.91.12.1 (B); identities a.pq.test, b.pq.test
#
# The peer is Debian sid's strongSwan 6.1 (its openssl plugin on OpenSSL 3.6 does ML-KEM) in
# the chroot of scripts/lib/make-pq-chroot.sh (built on first use, reused after): its charon runs
# inside `ip netns exec` and a private mount namespace where the instance directory is bound
# into the chroot at the same path, the instance's run/ on the chroot's /run, and the host's
# /dev/net/tun on the chroot's (kernel-libipsec); swanctl runs in the chroot the same way.
# (scripts/lib/pq-chroot.sh). Its file log has flush_line = yes (scripts/lib/strongswan.sh). A peer that cannot be
# installed makes the run fail with the reason (never a quiet skip).
#
# Cases (who initiates / IKE proposal, both sides):
#   i-x25519-mlkem768   tunneld / aes256gcm16-prfsha384-x25519-ke1_mlkem768
#   r-x25519-mlkem768   charon  / the same
#   i-mlkem1024         tunneld / aes256gcm16-prfsha384-mlkem1024 (ML-KEM alone, IKE_SA_INIT)
#   r-mlkem1024         charon  / the same
#   i-ecp384-2ke        tunneld / aes256gcm16-prfsha384-ecp384-ke1_mlkem768-ke2_mlkem1024
#   r-ecp384-2ke        charon  / the same
#   rekey               tunneld / aes256gcm16-prfsha384-x25519-ke1_mlkem768, children with
#                       esp_proposals aes256gcm16-x25519-ke1_mlkem768 (PFS + an additional
#                       exchange): a child rekey by tunneld, one by charon, an IKE rekey by
#                       tunneld, one by charon (RFC 9370 2.2.4: CREATE_CHILD_SA, then
#                       IKE_FOLLOWUP_KE); pings after each; charon logged one IKE_FOLLOWUP_KE
#                       per additional exchange of each rekey and no failure
#   fallback            tunneld / "...-x25519-ke1_mlkem768", "...-x25519" against the host's
#                       strongSwan 5.9.8 (no RFC 9370, classic proposal only): up with the
#                       classic one, no IKE_INTERMEDIATE, pings
#   refused             tunneld / only "...-x25519-ke1_mlkem768" against 5.9.8: its
#                       NO_PROPOSAL_CHOSEN, tunneld's ike.down with the proposal mismatch,
#                       nothing installed on either side
# Each case checks: both sides up (one IKE SA, one child); PINGS pings each way through the
# tunnel; charon's log shows the proposal it selected with the ML-KEM methods
# (ML_KEM_768 ...) and, with additional exchanges, that many IKE_INTERMEDIATE exchanges;
# `ipsec ike list` on tunneld's side names every key exchange (x25519-ke1_mlkem768 ...);
# both daemons stop with status 0.
#
#   sudo bash scripts/ci/ike-pq.sh                    # every case (builds tunneld, ipsec)
#   sudo bash scripts/ci/ike-pq.sh r-ecp384-2ke       # only that one
#   sudo bash scripts/ci/ike-pq.sh --ci               # i-x25519-mlkem768, r-ecp384-2ke, rekey, fallback,
#                                                  # refused; 3 pings
#   TUNNELD_BIN=... IPSEC_BIN=... sudo -E bash scripts/ci/ike-pq.sh
#   bash scripts/ci/ike-pq.sh --if-possible           # no root / netns: say why, exit 0 (a
#                                                  # missing strongSwan 6.1 still fails)
#
# A failing case prints why, the others still run; the work directory (configs, charon's log
# with every key: test keys only) is kept when a case failed (IKE_PQ_KEEP=1: always). Every
# wait is bounded; a case is stopped after 60 s.
set -euo pipefail
cd "$(dirname "$0")/../.."
START=$SECONDS
NETNS_TAG=ike-pq
. scripts/lib/netns.sh
. scripts/lib/strongswan.sh
. scripts/lib/ike-lifecycle.sh
ALL_CASES="i-x25519-mlkem768 r-x25519-mlkem768 i-mlkem1024 r-mlkem1024 i-ecp384-2ke r-ecp384-2ke rekey fallback refused"
CI_CASES="i-x25519-mlkem768 r-ecp384-2ke rekey fallback refused"
parse_stages "$ALL_CASES" "$@" # also --ci (CI=1)
[ $CI = 0 ] || [ ${#STAGES[@]} -gt 0 ] || read -r -a STAGES <<<"$CI_CASES"
if [ $CI = 1 ]; then PINGS=${PINGS:-3}; else PINGS=${PINGS:-5}; fi
# one link, namespaces and links named by PID (TOPO is at most 9 characters: veths pq<PID>va)
TOPO=pq$(($$ % 10000000))
TOPO_ROUTER=0
TD_FAIL=case_fail
A_NET=10.91.1.1
B_NET=10.91.1.2
A_IN=10.91.11.1
B_IN=10.91.12.1
A_ID=a.pq.test
B_ID=b.pq.test
ESP_PROP=aes256gcm16
need_netns "network namespaces, charon 6.1, tunneld"

# ---- the peer: strongSwan 6.1 in its sid chroot (scripts/lib/pq-chroot.sh) -----------------
. scripts/lib/pq-chroot.sh
pq_swan_ready
SWAN_LOG=${PQ_SWAN_LOG:-"ike=2 chd=1 knl=1 cfg=2 net=1 enc=1 dmn=1 lib=1 job=1"}

# the peer without RFC 9370 is the host's strongSwan (installed if missing, no service)
{ want fallback || want refused; } && swan_install
RAN=()
locate_tunneld --bin ipsec
IPSEC=$(dirname "$BIN")/ipsec
[ -z "${TUNNELD_BIN:-}" ] || IPSEC=${IPSEC_BIN:-$IPSEC}
[ -x "$IPSEC" ] || fail "no ipsec binary at $IPSEC"
grep -q -- '--keylog' <<<"$("$BIN" --help 2>&1)" || cannot "this tunneld has no IKE (no --keylog option)"
WORK=$(mktemp -d /tmp/ike-pq.XXXXXX)
FAILED=0
trap 'rc=$?; [ $rc -ne 0 ] || [ $FAILED -eq 0 ] || rc=1; rm -rf "${PQ_CHROOT:?}$WORK" 2>/dev/null; rmdir -p "$PQ_CHROOT$(dirname "$WORK")" 2>/dev/null || true; [ "${IKE_PQ_KEEP:-0}" = 0 ] || { log "files kept in $WORK"; [ $rc -ne 0 ] || WORK=; }; cleanup_all $rc 5' EXIT
trap 'fail "interrupted"' INT TERM


# pings FROM_NS SRC DST: how many of PINGS were answered.
pings() {
  { ip netns exec "$1" ping -n -c "$PINGS" -i 0.2 -W 2 -I "$2" "$3" 2>&1 || true; } |
    sed -n 's/^[0-9]* packets transmitted, \([0-9]*\) received.*/\1/p'
}

# the methods in strongSwan's log words: x25519 -> CURVE_25519, mlkem768 -> ML_KEM_768 ...
swan_words() {
  sed -e 's/x25519/CURVE_25519/; s/ecp384/ECP_384/; s/mlkem\([0-9]*\)/ML_KEM_\1/g'
}

run_case() {
  CASE=$1
  CD=$WORK/$CASE
  mkdir -p "$CD/a" "$CD/b"
  local initiator=$2 prop=$3 psk="pq-$RANDOM-$RANDOM-$RANDOM" t0=$SECONDS
  IKE_PROP=$prop
  topo_up
  swan_instance "$CD/b"
  swan_site_conf "$CD/b" local=$B_NET remote=$A_NET local_id=$B_ID remote_id=$A_ID \
    local_ts=$B_IN/32 remote_ts=$A_IN/32 psk="$psk" ike="$prop" esp=$ESP_PROP encap=yes
  swan_start "${TOPO}b" "$CD/b"
  swan_load "$CD/b"
  td_conf "$CD/a" local=$A_NET remote=$B_NET local_id=$A_ID remote_id=$B_ID \
    local_ts=$A_IN/32 remote_ts=$B_IN/32 psk="$psk"
  td_start "${TOPO}a" "$CD/a" $B_IN
  local t_init=$SECONDS
  pair_up "$CD" "$initiator"
  local up_s=$((SECONDS - t_init))
  local why=() ab ba list
  ab=$(pings "${TOPO}a" $A_IN $B_IN)
  ba=$(pings "${TOPO}b" $B_IN $A_IN)
  [ "${ab:-0}" -ge "$PINGS" ] || why+=("${ab:-0} of $PINGS pings tunneld -> charon answered")
  [ "${ba:-0}" -ge "$PINGS" ] || why+=("${ba:-0} of $PINGS pings charon -> tunneld answered")
  list=$(td_ctl "$CD/a" ike list 2>&1 || true)
  echo "$list" >"$CD/ike-list"
  grep -q -- "$prop" <<<"$list" || why+=("ipsec ike list does not show $prop: $(head -n 3 <<<"$list")")
  td_stop "$CD/a"
  swan_stop "$CD/b"
  # charon's view: the selected proposal names every method; one IKE_INTERMEDIATE a ADDKE
  local sel want n_add n_int
  sel=$(grep -E 'selected proposal: IKE:' "$CD/b/charon.log" | head -n 1 | sed 's/.*selected proposal: //')
  echo "$sel" >"$CD/selected"
  for want in $(sed 's/-/ /g' <<<"$prop" | swan_words); do
    case $want in aes*|prf*) continue ;; esac
    [[ $sel == *"${want#ke?_}"* ]] || why+=("charon's selected proposal '$sel' lacks ${want#ke?_}")
  done
  n_add=$(grep -o 'ke[1-7]_' <<<"$prop" | grep -c . || true)
  # one per message ID (a fragmented request is logged once a fragment and once whole)
  n_int=$(grep -oE '(generating|parsed) IKE_INTERMEDIATE request [0-9]+' "$CD/b/charon.log" | awk '{print $NF}' | sort -u | grep -c . || true)
  [ "$n_int" = "$n_add" ] || why+=("charon logged $n_int IKE_INTERMEDIATE requests, expected $n_add")
  echo "$up_s ${ab:-0} ${ba:-0} $n_int" >"$CD/result"
  if [ ${#why[@]} -gt 0 ]; then
    local IFS=';'
    case_fail "${why[*]}"
  fi
  log "$CASE: passed ($((SECONDS - t0)) s): up in ${up_s}s, charon selected $sel, $n_int IKE_INTERMEDIATE, pings $ab/$ba"
}

# td_spis DIR: "IKE_SPI_I CHILD_SPI_IN STATE_OK": tunneld's IKE SA and child (the installed one).
td_spis() {
  td_ctl "$1" ike list --json 2>/dev/null | python3 -c '
import json, sys
j = json.load(sys.stdin)
ike = [x for x in j.get("ike_sas", []) if x.get("state") == "established"]
ch = [c for x in ike for c in x.get("children", []) if c.get("state") == "installed"]
print(ike[0]["spi_i"] if len(ike) == 1 else "-", ch[0]["spi_in"] if len(ch) == 1 else "-")' 2>/dev/null || echo "- -"
}

# rekeyed WHAT BEFORE: waits (10 s) until tunneld's IKE SPI (WHAT=ike) or child SPI (child)
# differs from BEFORE, with one IKE SA and one child on both sides; prints the new one.
rekeyed() {
  local what=$1 before=$2 deadline=$((SECONDS + 10)) now ike child b
  while :; do
    read -r ike child <<<"$(td_spis "$CD/a")"
    now=$child
    [ "$what" = child ] || now=$ike
    b=$(swan_established "$CD/b")
    if [ "$now" != - ] && [ "$now" != "$before" ] && [ "$b" = "1 1" ] && [ "$ike" != - ] && [ "$child" != - ]; then
      echo "$now"
      return 0
    fi
    [ $SECONDS -lt $deadline ] || case_fail "$what rekey not done within 10 s: tunneld $ike/$child, charon $b; charon: $(grep -E '\[(IKE|ENC)\]' "$CD/b/charon.log" | tail -n 6)"
    sleep 0.1
  done
}

# A rekey case: up with additional key exchanges for the IKE SA and the child (PFS), then
# a child rekey by tunneld, one by charon, an IKE rekey by tunneld, one by charon; after
# each, pings both ways; charon's log must show the IKE_FOLLOWUP_KE exchanges (one per ADDKE
# of each rekey: RFC 9370 2.2.4) and no failure.
run_rekey_case() {
  CASE=$1
  CD=$WORK/$CASE
  mkdir -p "$CD/a" "$CD/b"
  local prop=$2 esp=$3 psk="pq-$RANDOM-$RANDOM-$RANDOM" t0=$SECONDS
  IKE_PROP=$prop
  ESP_PROP=$esp
  topo_up
  swan_instance "$CD/b"
  swan_site_conf "$CD/b" local=$B_NET remote=$A_NET local_id=$B_ID remote_id=$A_ID \
    local_ts=$B_IN/32 remote_ts=$A_IN/32 psk="$psk" ike="$prop" esp="$esp" encap=yes
  swan_start "${TOPO}b" "$CD/b"
  swan_load "$CD/b"
  td_conf "$CD/a" local=$A_NET remote=$B_NET local_id=$A_ID remote_id=$B_ID \
    local_ts=$A_IN/32 remote_ts=$B_IN/32 psk="$psk"
  td_start "${TOPO}a" "$CD/a" $B_IN
  local out
  out=$(td_ctl "$CD/a" ike initiate gw 2>&1) || case_fail "ipsec ike initiate gw failed: $out"
  local ike child why=() ab ba step
  rekeyed child - >/dev/null
  read -r ike child <<<"$(td_spis "$CD/a")"
  for step in child-by-tunneld child-by-charon ike-by-tunneld ike-by-charon; do
    case $step in
      child-by-tunneld) td_ctl "$CD/a" ike rekey gw/net >/dev/null || case_fail "ipsec ike rekey gw/net failed" ;;
      child-by-charon) swan_rekey "$CD/b" --child net ;;
      ike-by-tunneld) td_ctl "$CD/a" ike rekey gw >/dev/null || case_fail "ipsec ike rekey gw failed" ;;
      ike-by-charon) swan_rekey "$CD/b" --ike sw ;;
    esac
    case $step in
      child-*) child=$(rekeyed child "$child") ;;
      ike-*) ike=$(rekeyed ike "$ike") ;;
    esac
    ab=$(pings "${TOPO}a" $A_IN $B_IN)
    ba=$(pings "${TOPO}b" $B_IN $A_IN)
    [ "${ab:-0}" -ge "$PINGS" ] && [ "${ba:-0}" -ge "$PINGS" ] || why+=("after $step: pings $ab/$ba of $PINGS")
    log "$CASE: $step done ($((SECONDS - t0)) s), pings $ab/$ba"
  done
  td_stop "$CD/a"
  swan_stop "$CD/b"
  local n_add_ike n_add_esp n_fu want_fu bad
  n_add_ike=$(grep -o 'ke[1-7]_' <<<"$prop" | grep -c . || true)
  n_add_esp=$(grep -o 'ke[1-7]_' <<<"$esp" | grep -c . || true)
  want_fu=$((2 * n_add_esp + 2 * n_add_ike))
  # one per IKE SA and message ID (fragments are logged one by one, and the whole message)
  n_fu=$(grep -oE '<[^>]*> (generating|parsed) IKE_FOLLOWUP_KE request [0-9]+' "$CD/b/charon.log" |
    sed -E 's/(generating|parsed) //' | sort -u | grep -c . || true)
  [ "$n_fu" = "$want_fu" ] || why+=("charon logged $n_fu IKE_FOLLOWUP_KE requests, expected $want_fu")
  bad=$(grep -cE 'STATE_NOT_FOUND|INVALID_SYNTAX|NO_PROPOSAL_CHOSEN|failed to establish|rekeying .* failed' "$CD/b/charon.log" || true)
  [ "$bad" = 0 ] || why+=("charon logged $bad failures: $(grep -E 'STATE_NOT_FOUND|INVALID_SYNTAX|NO_PROPOSAL_CHOSEN|failed' "$CD/b/charon.log" | head -n 3)")
  echo "$((SECONDS - t0)) ${ab:-0} ${ba:-0} $n_fu" >"$CD/result"
  if [ ${#why[@]} -gt 0 ]; then
    local IFS=';'
    case_fail "${why[*]}"
  fi
  log "$CASE: passed ($((SECONDS - t0)) s): 2 child and 2 IKE rekeys with $n_fu IKE_FOLLOWUP_KE exchanges, pings after each"
}

# A peer without RFC 9370 (the host's strongSwan 5.9.8): tunneld initiates with an ADDKE
# proposal first. `fallback`: a classic proposal follows it, the tunnel comes up with that one
# (no IKE_INTERMEDIATE) and pings; `refused`: no classic proposal, 5.9.8 answers
# NO_PROPOSAL_CHOSEN, tunneld reports a proposal mismatch and installs nothing.
run_old_peer_case() {
  CASE=$1
  CD=$WORK/$CASE
  mkdir -p "$CD/a" "$CD/b"
  local td_prop=$2 psk="pq-$RANDOM-$RANDOM-$RANDOM" t0=$SECONDS classic=aes256gcm16-prfsha384-x25519
  IKE_PROP=$td_prop
  ESP_PROP=aes256gcm16
  topo_up
  : >"$CD/b/.host"
  SWAN_PLUGINS_SAVED=$SWAN_PLUGINS
  SWAN_PLUGINS="random nonce aes sha1 sha2 hmac gcm openssl curve25519 kdf pem pkcs1 pubkey x509 kernel-libipsec kernel-netlink socket-default vici"
  swan_instance "$CD/b"
  SWAN_PLUGINS=$SWAN_PLUGINS_SAVED
  swan_site_conf "$CD/b" local=$B_NET remote=$A_NET local_id=$B_ID remote_id=$A_ID \
    local_ts=$B_IN/32 remote_ts=$A_IN/32 psk="$psk" ike=$classic esp=aes256gcm16 encap=yes
  swan_start "${TOPO}b" "$CD/b"
  swan_load "$CD/b"
  local version
  version=$(dpkg-query -W -f '${Version}' strongswan-charon 2>/dev/null || echo "?")
  case $version in 6.*) case_fail "the peer is strongSwan $version, not one without RFC 9370" ;; esac
  td_conf "$CD/a" local=$A_NET remote=$B_NET local_id=$A_ID remote_id=$B_ID \
    local_ts=$A_IN/32 remote_ts=$B_IN/32 psk="$psk"
  td_start "${TOPO}a" "$CD/a" $B_IN
  local out why=() deadline=$((SECONDS + 10)) a b list
  out=$(td_ctl "$CD/a" ike initiate gw 2>&1) || case_fail "ipsec ike initiate gw failed: $out"
  if [ "$CASE" = fallback ]; then
    while :; do
      a=$(td_counts "$CD/a")
      a=${a% * *}
      b=$(swan_established "$CD/b")
      [ "$a" != "1 1" ] || [ "$b" != "1 1" ] || break
      [ $SECONDS -lt $deadline ] || case_fail "not up within 10 s: tunneld $a, charon $b"
      sleep 0.1
    done
    local ab
    ab=$(pings "${TOPO}a" $A_IN $B_IN)
    [ "${ab:-0}" -ge "$PINGS" ] || why+=("${ab:-0} of $PINGS pings answered")
    list=$(td_ctl "$CD/a" ike list 2>&1 || true)
    grep -q -- "; $classic\$" <<<"$list" || why+=("ipsec ike list does not show the classic proposal: $list")
    ! grep -q IKE_INTERMEDIATE "$CD/b/charon.log" || why+=("charon $version saw an IKE_INTERMEDIATE")
  else
    until grep -q '"event":"ike.down"' "$CD/a/monitor.log" 2>/dev/null; do
      [ $SECONDS -lt $deadline ] || case_fail "tunneld reported no ike.down within 10 s: $(tail -n 3 "$CD/a/monitor.log")"
      sleep 0.1
    done
    grep -qi 'no proposal\|NoProposal\|proposal.mismatch' "$CD/a/monitor.log" "$CD/a/tunneld.log" ||
      why+=("tunneld's reason is not the proposal mismatch: $(grep -i 'down\|mismatch' "$CD/a/tunneld.log" | tail -n 2)")
    grep -qE 'generating IKE_SA_INIT response 0 \[ N\(NO_PROP\) \]' "$CD/b/charon.log" ||
      why+=("charon $version did not answer NO_PROPOSAL_CHOSEN")
    a=$(td_counts "$CD/a")
    [ "${a% * *}" = "0 0" ] || why+=("tunneld still has IKE/child SAs: $a")
    [ "$(swan_established "$CD/b")" = "0 0" ] || why+=("charon has an SA")
  fi
  td_stop "$CD/a"
  swan_stop "$CD/b"
  echo "$((SECONDS - t0)) - - 0" >"$CD/result"
  if [ ${#why[@]} -gt 0 ]; then
    local IFS=';'
    case_fail "${why[*]}"
  fi
  log "$CASE: passed ($((SECONDS - t0)) s) against strongSwan $version"
}

declare -A INIT=([i-x25519-mlkem768]=a [r-x25519-mlkem768]=b [i-mlkem1024]=a [r-mlkem1024]=b
  [i-ecp384-2ke]=a [r-ecp384-2ke]=b [rekey]=a [fallback]=a [refused]=a)
declare -A PROP=([i-x25519-mlkem768]=aes256gcm16-prfsha384-x25519-ke1_mlkem768
  [r-x25519-mlkem768]=aes256gcm16-prfsha384-x25519-ke1_mlkem768
  [i-mlkem1024]=aes256gcm16-prfsha384-mlkem1024 [r-mlkem1024]=aes256gcm16-prfsha384-mlkem1024
  [i-ecp384-2ke]=aes256gcm16-prfsha384-ecp384-ke1_mlkem768-ke2_mlkem1024
  [r-ecp384-2ke]=aes256gcm16-prfsha384-ecp384-ke1_mlkem768-ke2_mlkem1024
  [rekey]=aes256gcm16-prfsha384-x25519-ke1_mlkem768
  [fallback]="aes256gcm16-prfsha384-x25519-ke1_mlkem768,aes256gcm16-prfsha384-x25519"
  [refused]=aes256gcm16-prfsha384-x25519-ke1_mlkem768)
REKEY_ESP=aes256gcm16-x25519-ke1_mlkem768
ROWS=()
for c in $ALL_CASES; do
  want "$c" || continue
  log "---- $c"
  rm -rf "${WORK:?}/$c"
  if [ "$c" = rekey ]; then
    case_bounded 90 run_rekey_case "$c" "${PROP[$c]}" "$REKEY_ESP"
  elif [ "$c" = fallback ] || [ "$c" = refused ]; then
    case_bounded 60 run_old_peer_case "$c" "${PROP[$c]}"
  else
    case_bounded 60 run_case "$c" "${INIT[$c]}" "${PROP[$c]}"
  fi
  rc=$CASE_RC
  r="? ? ? ?"
  [ ! -s "$WORK/$c/result" ] || r=$(cat "$WORK/$c/result")
  read -r up ab ba ni <<<"$r"
  if [ $rc = 0 ]; then res=pass; else res=FAIL; FAILED=1; fi
  ROWS+=("$(printf '%-18s %-58s %4ss %5s %5s %3s  %s' "$c" "${PROP[$c]}" "$up" "$ab" "$ba" "$ni" "$res")")
done
for ns in "${TOPO}a" "${TOPO}b"; do ip netns del "$ns" 2>/dev/null || true; done
echo
echo "ike-pq: tunneld against strongSwan $SWAN_VERSION ($PQ_CHROOT); up: seconds to both sides up; pings each way; int: IKE_INTERMEDIATE exchanges"
printf '%-18s %-58s %5s %5s %5s %3s  %s\n' case proposal up "a->b" "b->a" int result
for r in "${ROWS[@]}"; do echo "$r"; done
[ $FAILED = 0 ] || { log "some cases failed ($((SECONDS - START)) s)"; exit 1; }
log "all cases passed ($((SECONDS - START)) s)"
