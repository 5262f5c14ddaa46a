# shellcheck shell=bash
# strongSwan 6.1 from the Debian sid chroot of scripts/lib/make-pq-chroot.sh as a test peer, for
# scripts/ci/ike-pq.sh and scripts/studies/pq-bench.sh; sourced after scripts/lib/netns.sh and
# scripts/lib/strongswan.sh, whose swan_start and swan_ctl it replaces: charon runs inside
# `ip netns exec` and a private mount namespace where the instance directory is bound into the
# chroot at the same path, the instance's run/ on the chroot's /run and the host's
# /dev/net/tun on the chroot's (kernel-libipsec); swanctl runs in the chroot the same way.
# Everything else of lib-strongswan (swan_instance, swan_site_conf, swan_load, ...) is used as
# it is. pq_swan_ready builds the chroot if missing (or fails with the reason).
PQ_CHROOT=${PQ_CHROOT:-/var/lib/ipsec-test/sid-strongswan}
export PQ_CHROOT
SWAN_PLUGINS="random nonce aes sha1 sha2 hmac gcm openssl curve25519 kdf pem pkcs1 pubkey x509 kernel-libipsec kernel-netlink socket-default vici"

# pq_swan_ready: the chroot is there with strongSwan 6.1+ (built now if missing); sets
# SWAN_VERSION. A peer that cannot be installed fails the script (never a quiet skip).
pq_swan_ready() {
  bash scripts/lib/make-pq-chroot.sh || fail "strongSwan 6.1 (the post-quantum peer) cannot be installed: see above"
  SWAN_VERSION=$(chroot "$PQ_CHROOT" dpkg-query -W -f '${Version}' strongswan-charon)
  mkdir -p "$PQ_CHROOT/dev/net"
  [ -e "$PQ_CHROOT/dev/net/tun" ] || touch "$PQ_CHROOT/dev/net/tun"
}

# lib-strongswan's own swan_start and swan_ctl, kept as host_swan_start and host_swan_ctl:
# an instance directory with a file `.host` runs the host's charon (Debian bookworm's 5.9.8,
# which predates RFC 9370: the peer without additional key exchanges) instead.
eval "$(declare -f swan_start | sed '1s/^swan_start/host_swan_start/')"
eval "$(declare -f swan_ctl | sed '1s/^swan_ctl/host_swan_ctl/')"

# swan_start NS D (lib-strongswan's, in the chroot): charon in NS, D bound at the same path
# inside the chroot, D/run on its /run, /dev/net/tun from the host; waits for vici (10 s).
swan_start() {
  local ns=$1 d=$2
  if [ -e "$d/.host" ]; then
    host_swan_start "$@"
    return
  fi
  [ -f "$d/strongswan.conf" ] || fail "swan_start: no instance in $d (swan_instance first)"
  rm -f "$d/run/charon.pid" "$d/run/charon.vici"
  mkdir -p "$PQ_CHROOT$d"
  ip netns exec "$ns" unshare -m --propagation private sh -c \
    'mount --bind "$2" "$1$2" && mount --bind "$2/run" "$1/run" && mount --bind /dev/net/tun "$1/dev/net/tun" &&
     exec chroot "$1" env STRONGSWAN_CONF="$2/strongswan.conf" /usr/lib/ipsec/charon' charon \
    "$PQ_CHROOT" "$d" >"$d/charon.stderr" 2>&1 &
  swan_started "$d" "$ns" $!
}

# swan_ctl D ARGS...: the chroot's swanctl (6.1) talking to instance D's charon.
swan_ctl() {
  local d=$1
  if [ -e "$d/.host" ]; then
    host_swan_ctl "$@"
    return
  fi
  shift
  mkdir -p "$PQ_CHROOT$d"
  timeout "${SWAN_CTL_TIMEOUT:-30}" unshare -m --propagation private sh -c \
    'c=$1 d=$2; shift 2; mount --bind "$d" "$c$d" &&
     exec chroot "$c" env STRONGSWAN_CONF="$d/strongswan.conf" swanctl "$@" --uri "unix://$d/run/charon.vici"' \
    swanctl "$PQ_CHROOT" "$d" "$@"
}
