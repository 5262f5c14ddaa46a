#!/usr/bin/env bash
# scripts/lib/make-pq-chroot.sh [--rebuild] [--print]: a Debian sid chroot holding strongSwan 6.1 (the
# first Debian strongSwan that negotiates ML-KEM: its openssl plugin on sid's OpenSSL 3.5+),
# the post-quantum test peer of scripts/ci/ike-pq.sh. Debian bookworm's strongSwan 5.9.8 predates
# RFC 9370 and trixie's 6.0.1 has no ML-KEM, so the peer lives in its own root.
#
# Built once (debootstrap --variant=minbase sid, then strongswan-charon, strongswan-swanctl and
# libcharon-extra-plugins, which holds kernel-libipsec) under a stable path, PQ_CHROOT
# (default /var/lib/ipsec-test/sid-strongswan); a later run (CI's too) finds the stamp file
# and reuses it. --rebuild makes it anew; --print prints the path and the charon version.
# Exits non-zero with the reason when the peer cannot be installed (no mirror, no sid
# strongSwan >= 6.1): the test that needs it then fails, it never skips quietly.
#
# Only Debian's package mirror is reached (PQ_MIRROR, default deb.debian.org). The mirror's
# Release file may be past its Valid-Until date: apt in the chroot is told not to check it.
# No service is started in the chroot (policy-rc.d refuses all), nothing is mounted outside a
# private mount namespace: scripts/ci/ike-pq.sh bind-mounts /dev/net/tun and the instance
# directory inside charon's own mount namespace only.
set -euo pipefail

PQ_CHROOT=${PQ_CHROOT:-/var/lib/ipsec-test/sid-strongswan}
PQ_MIRROR=${PQ_MIRROR:-http://deb.debian.org/debian}
PQ_PACKAGES=(strongswan-charon strongswan-swanctl libcharon-extra-plugins libstrongswan-standard-plugins
  libstrongswan-extra-plugins)
STAMP=.ipsec-pq-ready

die() {
  echo "pq-chroot: $*" >&2
  exit 1
}

# The charon version the chroot holds ("6.1.0"), empty if none.
chroot_version() {
  chroot "$PQ_CHROOT" dpkg-query -W -f '${Version}' strongswan-charon 2>/dev/null | sed 's/-.*//' || true
}

# Whether version $1 is at least 6.1.
at_least_61() {
  local maj min
  IFS=. read -r maj min _ <<<"$1"
  [ -n "$maj" ] && { [ "$maj" -gt 6 ] || { [ "$maj" -eq 6 ] && [ "${min:-0}" -ge 1 ]; }; }
}

rebuild=0
print=0
for a in "$@"; do
  case $a in
    --rebuild) rebuild=1 ;;
    --print) print=1 ;;
    *) die "usage: $0 [--rebuild] [--print]" ;;
  esac
done
[ "$(id -u)" -eq 0 ] || die "must run as root (debootstrap, chroot)"

if [ $rebuild -eq 0 ] && [ -e "$PQ_CHROOT/$STAMP" ]; then
  v=$(chroot_version)
  at_least_61 "$v" || die "$PQ_CHROOT holds strongSwan '${v:-none}', not 6.1+: run $0 --rebuild"
  [ $print -eq 0 ] || echo "$PQ_CHROOT strongswan $v"
  exit 0
fi

command -v debootstrap >/dev/null || {
  apt-get update -qq >/dev/null 2>&1 || true
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null ||
    die "debootstrap cannot be installed"
}

tmp=$PQ_CHROOT.new.$$
rm -rf "$tmp"
mkdir -p "$(dirname "$PQ_CHROOT")"
trap 'rm -rf "$tmp"' EXIT
echo "pq-chroot: debootstrap --variant=minbase sid $tmp ($PQ_MIRROR)" >&2
debootstrap --variant=minbase sid "$tmp" "$PQ_MIRROR" >"$tmp.log" 2>&1 ||
  die "debootstrap of sid failed (mirror unreachable?): $(tail -n 5 "$tmp.log")"
echo 'Acquire::Check-Valid-Until "false";' >"$tmp/etc/apt/apt.conf.d/99ipsec-test-no-valid-until"
printf '#!/bin/sh\nexit 101\n' >"$tmp/usr/sbin/policy-rc.d"
chmod 755 "$tmp/usr/sbin/policy-rc.d"
cp /etc/resolv.conf "$tmp/etc/resolv.conf" 2>/dev/null || true
echo "pq-chroot: apt-get install ${PQ_PACKAGES[*]}" >&2
chroot "$tmp" sh -c 'apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@"' \
  apt "${PQ_PACKAGES[@]}" >>"$tmp.log" 2>&1 ||
  die "installing strongSwan in the sid chroot failed: $(tail -n 5 "$tmp.log")"
PQ_CHROOT_SAVED=$PQ_CHROOT
PQ_CHROOT=$tmp
v=$(chroot_version)
PQ_CHROOT=$PQ_CHROOT_SAVED
at_least_61 "$v" || die "sid's strongSwan is '${v:-none}', not 6.1+"
[ -e "$tmp/usr/lib/ipsec/plugins/libstrongswan-kernel-libipsec.so" ] ||
  die "the chroot has no kernel-libipsec plugin (libcharon-extra-plugins)"
mkdir -p "$tmp/run" "$tmp/dev/net"
rm -f "$tmp.log"
chroot "$tmp" apt-get clean >/dev/null 2>&1 || true
date -u +%FT%TZ >"$tmp/$STAMP"
echo "strongswan $v" >>"$tmp/$STAMP"
rm -rf "$PQ_CHROOT"
mv "$tmp" "$PQ_CHROOT"
trap - EXIT
echo "pq-chroot: ready, $PQ_CHROOT, strongSwan $v" >&2
[ $print -eq 0 ] || echo "$PQ_CHROOT strongswan $v"
