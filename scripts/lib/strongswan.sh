# shellcheck shell=bash
# strongSwan (charon + swanctl) as a test peer inside network namespaces, sourced after
# scripts/lib/netns.sh by scripts/ci/strongswan-selftest.sh and scripts/vectors/record-ike-vectors.sh:
#
#   NETNS_TAG=my-test; . scripts/lib/netns.sh; . scripts/lib/strongswan.sh
#   swan_install                                   # Debian packages, if missing
#   WORK=$(mktemp -d); trap 'cleanup_all $? 40' EXIT   # cleanup_all kills every charon too
#   netns_pair swa swb swva swvb 10.97.0.1/24 10.97.0.2/24
#   swan_instance "$WORK/a"                        # strongswan.conf, swanctl/, run/, charon.log
#   swan_site_conf "$WORK/a" local=10.97.0.1 remote=10.97.0.2 local_id=a.swan.test \
#     remote_id=b.swan.test local_ts=10.98.1.0/24 remote_ts=10.98.2.0/24 \
#     ike=aes128gcm16-prfsha256-x25519 esp=aes128gcm16 psk=some-secret
#   swan_start swa "$WORK/a"                       # charon in swa; waits for its vici socket
#   swan_load "$WORK/a"                            # swanctl --load-all
#   swan_initiate "$WORK/a" net                    # a child (and its IKE_SA); --ike NAME: IKE only
#   swan_list_sas "$WORK/a"                        # swanctl --list-sas --raw (one line per SA)
#   swan_terminate "$WORK/a" --ike sw              # swanctl --terminate ...
#   swan_stop "$WORK/a"                            # SIGTERM, exit status must be 0
#
# One instance = one directory D:
#   D/strongswan.conf   what charon and swanctl read (STRONGSWAN_CONF); nothing from /etc
#   D/swanctl/          swanctl.conf (and its empty x509/, private/ ... dirs)
#   D/run/              bind-mounted on /run inside charon's own mount namespace: charon.pid
#                       and the vici socket charon.vici live here, so swanctl on the host
#                       reaches it as --uri unix://D/run/charon.vici (no nsenter needed)
#   D/charon.log        the filelog (flush_line = yes), time as seconds since the epoch, IKE_SA
#                       name|unique id on every line: `1712345678 14[IKE] <sw|1> message`
#   D/charon.stderr     charon's stdout+stderr;  D/pid  charon's pid (also in lib-netns' BG)
#
# charon runs as `ip netns exec NS unshare -m --propagation private sh -c 'mount --bind D/run
# /run && exec charon'`: the bind mount lives only in charon's mount namespace (the host's /run
# is untouched), and $! is charon itself (each step execs the next). The data plane is
# kernel-libipsec (the kernel here has no XFRM): charon makes a TUN device ipsec0 in the
# namespace and kernel-netlink routes each remote traffic selector into it from routing
# table 220 (rule `220: from all lookup 220`) with `src` = a local address inside the local
# traffic selector, which must exist in the namespace (put it on lo as /32). strongSwan 5.9.8's
# libipsec only does ESP in UDP (port 4500): raw ESP needs 5.9.11+, so connections use
# encap = yes (swan_site_conf's default).
#
# Log levels: SWAN_LOG (default "ike=4 chd=4 knl=2 cfg=2 net=1 enc=1 dmn=1 lib=1 job=1"):
# ike=4 and chd=4 make charon print the DH secret, SKEYSEED, SK_* and the CHILD_SA keys
# (scripts/lib/charon_keys.py turns them into Wireshark tables and test vectors). Such logs hold
# key material: test-only.

SWAN_PACKAGES=(strongswan-charon strongswan-swanctl libcharon-extra-plugins
  libstrongswan-standard-plugins libstrongswan-extra-plugins)
SWAN_CHARON=${SWAN_CHARON:-/usr/lib/ipsec/charon}
# chapoly: ChaCha20-Poly1305; curve25519: x25519; openssl: ECP/MODP groups and AES-GCM.
SWAN_PLUGINS=${SWAN_PLUGINS:-"random nonce aes sha1 sha2 hmac gcm chapoly openssl curve25519 kdf pem pkcs1 pubkey x509 kernel-libipsec kernel-netlink socket-default vici"}
SWAN_LOG=${SWAN_LOG:-"ike=4 chd=4 knl=2 cfg=2 net=1 enc=1 dmn=1 lib=1 job=1"}
SWAN_STARTED=() # instance directories whose charon is running (swan_stop_all)

# swan_install: the strongSwan packages (and tshark, nftables, ping) if missing. No service
# is started: a temporary /usr/sbin/policy-rc.d refusing every start is put in place when
# none exists, and with systemd running the units are disabled and stopped; afterwards
# nothing may listen on the host's UDP 500/4500.
swan_install() {
  local want=() p policy_made=0
  [ -x "$SWAN_CHARON" ] && command -v swanctl >/dev/null &&
    [ -e /usr/lib/ipsec/plugins/libstrongswan-kernel-libipsec.so ] &&
    [ -e /usr/lib/ipsec/plugins/libstrongswan-chapoly.so ] || want+=("${SWAN_PACKAGES[@]}")
  command -v tshark >/dev/null || want+=(tshark)
  command -v nft >/dev/null || want+=(nftables)
  command -v ping >/dev/null || want+=(iputils-ping)
  command -v ip >/dev/null || want+=(iproute2)
  command -v unshare >/dev/null || want+=(util-linux)
  [ ${#want[@]} -eq 0 ] && return 0
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
    chmod 755 /usr/sbin/policy-rc.d
    policy_made=1
  fi
  apt_install "${want[@]}"
  [ $policy_made -eq 0 ] || rm -f /usr/sbin/policy-rc.d
  if [ -d /run/systemd/system ]; then
    for p in strongswan-starter.service ipsec.service strongswan.service; do
      systemctl disable --now "$p" >/dev/null 2>&1 || true
    done
  fi
  swan_host_quiet || fail "after installing strongSwan something listens on the host's UDP 500/4500: $(ss -Hlunp 'sport = :500 or sport = :4500')"
}

# swan_host_quiet: whether nothing listens on UDP 500/4500 in the current (host) namespace.
swan_host_quiet() {
  [ -z "$(ss -Hlun 'sport = :500 or sport = :4500' 2>/dev/null)" ]
}

# swan_instance D: makes the instance directory D and its strongswan.conf (log levels from
# SWAN_LOG; extra settings, strongswan.conf syntax inside the charon section, from
# SWAN_CHARON_EXTRA).
swan_instance() {
  local d=$1 kv
  mkdir -p "$d/run" "$d/swanctl"
  for kv in x509 x509ca x509ocsp x509aa x509ac x509crl pubkey private rsa ecdsa bliss pkcs8 pkcs12; do
    mkdir -p "$d/swanctl/$kv"
  done
  : >"$d/charon.log"
  {
    echo "# written by scripts/lib/strongswan.sh for a test instance; its log holds keys"
    echo "charon {"
    echo "  load_modular = no"
    echo "  load = $SWAN_PLUGINS"
    echo "  install_virtual_ip = no"
    echo "  retransmit_tries = 3"
    echo "  retransmit_timeout = 1.0"
    echo "  retransmit_base = 1.4"
    echo "  filelog {"
    echo "    main {"
    echo "      path = $d/charon.log"
    echo "      time_format = %s"
    echo "      ike_name = yes"
    echo "      append = yes"
    echo "      flush_line = yes"
    echo "      default = 1"
    for kv in $SWAN_LOG; do echo "      ${kv%%=*} = ${kv#*=}"; done
    echo "    }"
    echo "  }"
    echo "  syslog {"
    echo "    daemon {"
    echo "      default = -1"
    echo "    }"
    echo "  }"
    echo "  plugins {"
    echo "    vici {"
    echo "      socket = unix:///run/charon.vici"
    echo "    }"
    echo "    kernel-libipsec {"
    echo "      allow_peer_ts = no"
    echo "    }"
    echo "  }"
    [ -z "${SWAN_CHARON_EXTRA:-}" ] || echo "$SWAN_CHARON_EXTRA"
    echo "}"
    echo "swanctl {"
    echo "  socket = unix://$d/run/charon.vici"
    echo "}"
  } >"$d/strongswan.conf"
}

# swan_site_conf D KEY=VALUE...: D/swanctl/swanctl.conf with one IKEv2 PSK connection and one
# child. Keys (defaults in brackets): name [sw], child [net], local, remote (IKE addresses;
# remote may be %any for a responder), local_id, remote_id, psk, local_ts, remote_ts,
# ike [aes128gcm16-prfsha256-x25519], esp [aes128gcm16], encap [yes], mode [tunnel],
# start [none] (the child's start_action), local_port [500], remote_port [500],
# mobike [no], rekey [0] (the IKE_SA's and child's rekey_time; 0 = never during a test),
# ike_rekey and child_rekey [rekey] (each one's rekey_time alone), rand_time [unset: charon's
# default] (written for both the IKE_SA and the child), child_life [unset] (the child's
# life_time), ike_over [unset] (the IKE_SA's over_time), rekey_bytes [unset] (the child's
# rekey_bytes). The unset ones are not written. Note: with rand_time = 0 and no life_time,
# charon 5.9.8 makes the life time equal to the rekey time (life_time = 4, over_time = 0 in its
# config dump) and the SA expires as it rekeys: give child_life and ike_over with rand_time.
swan_site_conf() {
  local d=$1 kv
  shift
  local -A c=([name]=sw [child]=net [ike]=aes128gcm16-prfsha256-x25519 [esp]=aes128gcm16
    [encap]=yes [mode]=tunnel [start]=none [local_port]=500 [remote_port]=500 [mobike]=no
    [rekey]=0)
  for kv in "$@"; do
    case $kv in *=*) c[${kv%%=*}]=${kv#*=} ;; *) fail "swan_site_conf: \`$kv\` is not KEY=VALUE" ;; esac
  done
  c[ike_rekey]=${c[ike_rekey]:-${c[rekey]}}
  c[child_rekey]=${c[child_rekey]:-${c[rekey]}}
  local ike_extra="" child_extra=""
  if [ -n "${c[rand_time]:-}" ]; then
    ike_extra+=$'\n'"    rand_time = ${c[rand_time]}"
    child_extra+=$'\n'"        rand_time = ${c[rand_time]}"
  fi
  [ -z "${c[ike_over]:-}" ] || ike_extra+=$'\n'"    over_time = ${c[ike_over]}"
  [ -z "${c[child_life]:-}" ] || child_extra+=$'\n'"        life_time = ${c[child_life]}"
  [ -z "${c[rekey_bytes]:-}" ] || child_extra+=$'\n'"        rekey_bytes = ${c[rekey_bytes]}"
  for kv in local remote local_id remote_id psk local_ts remote_ts; do
    [ -n "${c[$kv]:-}" ] || fail "swan_site_conf: $kv= missing"
  done
  cat >"$d/swanctl/swanctl.conf" <<EOF
# written by scripts/lib/strongswan.sh
connections {
  ${c[name]} {
    version = 2
    local_addrs = ${c[local]}
    remote_addrs = ${c[remote]}
    local_port = ${c[local_port]}
    remote_port = ${c[remote_port]}
    proposals = ${c[ike]}
    encap = ${c[encap]}
    mobike = ${c[mobike]}
    rekey_time = ${c[ike_rekey]}${ike_extra}
    local {
      auth = psk
      id = ${c[local_id]}
    }
    remote {
      auth = psk
      id = ${c[remote_id]}
    }
    children {
      ${c[child]} {
        local_ts = ${c[local_ts]}
        remote_ts = ${c[remote_ts]}
        esp_proposals = ${c[esp]}
        mode = ${c[mode]}
        start_action = ${c[start]}
        rekey_time = ${c[child_rekey]}${child_extra}
      }
    }
  }
}
secrets {
  ike-${c[name]} {
    id-local = ${c[local_id]}
    id-remote = ${c[remote_id]}
    secret = "${c[psk]}"
  }
}
EOF
}

# swan_start NS D: charon of instance D in namespace NS with D/run as its /run; waits (10 s)
# until its vici socket answers; the pid goes to D/pid and lib-netns' BG.
swan_start() {
  local ns=$1 d=$2
  [ -f "$d/strongswan.conf" ] || fail "swan_start: no instance in $d (swan_instance first)"
  rm -f "$d/run/charon.pid" "$d/run/charon.vici"
  ip netns exec "$ns" unshare -m --propagation private sh -c \
    'mount --bind "$1" /run && exec env STRONGSWAN_CONF="$2" "$3"' charon \
    "$d/run" "$d/strongswan.conf" "$SWAN_CHARON" >"$d/charon.stderr" 2>&1 &
  swan_started "$d" "$ns" $!
}

# swan_started D NS PID: charon PID of instance D (in namespace NS) was just started in the
# background: records it for cleanup and waits (10 s at most) until it answers on its vici
# socket through `swan_ctl` (whichever swan_ctl is defined: the chroot's in scripts/lib/pq-chroot.sh).
swan_started() {
  local d=$1 ns=$2 pid=$3
  BG+=("$pid")
  echo "$pid" >"$d/pid"
  SWAN_STARTED+=("$d")
  local deadline=$((SECONDS + 10))
  until SWAN_CTL_TIMEOUT=2 swan_ctl "$d" --stats >/dev/null 2>&1; do
    kill -0 "$pid" 2>/dev/null || fail "charon in $ns exited at start: $(tail -n 5 "$d/charon.stderr" "$d/charon.log")"
    [ $SECONDS -lt $deadline ] || fail "charon in $ns: no answer on its vici socket within 10 s"
    sleep 0.1
  done
}

# swan_ctl D ARGS...: swanctl talking to instance D's charon (killed after SWAN_CTL_TIMEOUT,
# default 30 s: swanctl itself waits forever for a charon that does not answer).
swan_ctl() {
  local d=$1
  shift
  STRONGSWAN_CONF="$d/strongswan.conf" timeout "${SWAN_CTL_TIMEOUT:-30}" swanctl "$@" --uri "unix://$d/run/charon.vici"
}

# swan_load D: swanctl --load-all of D/swanctl/swanctl.conf; fails with swanctl's output.
swan_load() {
  local out
  out=$(swan_ctl "$1" --load-all --noprompt --file "$1/swanctl/swanctl.conf" 2>&1) ||
    fail "swanctl --load-all ($1) failed: $out"
}

# swan_initiate D CHILD | swan_initiate D --ike NAME: brings up CHILD (with its IKE_SA) or
# only the IKE_SA NAME; at most SWAN_TIMEOUT (10) s; fails with swanctl's output.
swan_initiate() {
  local d=$1 out
  shift
  [ "$1" = --ike ] || set -- --child "$1"
  out=$(swan_ctl "$d" --initiate "$@" --timeout "${SWAN_TIMEOUT:-10}" 2>&1) ||
    fail "swanctl --initiate $* ($d) failed: $(echo "$out" | tail -n 8)"
}

# swan_terminate D --ike NAME | --child NAME | --ike-id N ...: swanctl --terminate, waits.
swan_terminate() {
  local d=$1 out
  shift
  out=$(swan_ctl "$d" --terminate "$@" --timeout "${SWAN_TIMEOUT:-10}" 2>&1) ||
    fail "swanctl --terminate $* ($d) failed: $(echo "$out" | tail -n 8)"
}

# swan_rekey D --ike NAME | --child NAME: swanctl --rekey (asynchronous in charon: poll
# swan_list_sas for the result).
swan_rekey() {
  local d=$1 out
  shift
  out=$(swan_ctl "$d" --rekey "$@" 2>&1) || fail "swanctl --rekey $* ($d) failed: $out"
}

# swan_list_sas D: the SAs as `swanctl --list-sas --raw`: one line per IKE_SA, vici's
# `list-sa event {NAME {uniqueid=1 version=2 state=ESTABLISHED ... child-sas {...}}}`.
swan_list_sas() {
  swan_ctl "$1" --list-sas --raw 2>/dev/null | grep '^list-sa event' || true
}

# swan_established D: how many IKE_SAs are ESTABLISHED and child SAs INSTALLED, as "IKE CHILD".
swan_established() {
  local sas
  sas=$(swan_list_sas "$1")
  echo "$(grep -o 'state=ESTABLISHED' <<<"$sas" | wc -l) $(grep -o 'state=INSTALLED' <<<"$sas" | wc -l)"
}

# swan_stop D: SIGTERM to D's charon, at most 5 s, exit status 0 (else fail).
swan_stop() {
  local d=$1 pid x keep=()
  pid=$(cat "$d/pid")
  stop_pid "$pid" "charon ($d)"
  for x in "${SWAN_STARTED[@]}"; do [ "$x" = "$d" ] || keep+=("$x"); done
  SWAN_STARTED=("${keep[@]}")
}

# swan_stop_all: swan_stop for every instance still running (for an EXIT trap before
# cleanup_all: a clean stop rather than cleanup_all's SIGKILL).
swan_stop_all() {
  local d pids=()
  for d in "${SWAN_STARTED[@]}"; do pids+=("$(cat "$d/pid")"); done
  [ ${#pids[@]} -eq 0 ] || stop_pids "${pids[@]}"
  SWAN_STARTED=()
}

# swan_log_warnings D: the lines of D's charon.log a clean run should not have (errors,
# failed/unable/invalid/no proposal/retransmits), for a check.
swan_log_warnings() {
  grep -E '\] (<[^>]*> )?.*(error|failed|unable|invalid|no proposal chosen|retransmit|AUTHENTICATION_FAILED|NO_PROPOSAL_CHOSEN|TS_UNACCEPTABLE)' "$1/charon.log" |
    grep -v -E 'opening directory|vici client [0-9]+ (connected|disconnected)' || true
}

# swan_wait_capture SECONDS PCAP: until tshark/dumpcap has written the capture file's header.
swan_wait_capture() {
  wait_for "$1" "the capture to start ($2)" test -s "$2"
  sleep 0.3
}
