#!/usr/bin/env bash
# The Debian package, installed for real (as root): builds it (scripts/packaging/make-deb.sh), installs
# it with dpkg -i, runs tunneld --version and ipsec --version from /usr/bin, finds the man
# pages with man -w, checks the config directory's mode and owner, verifies the systemd unit
# with systemd-analyze verify, then purges the package and checks it left nothing behind.
#   bash scripts/ci/deb-test.sh [--if-possible]   # without root or dpkg: says why, exits 0
set -euo pipefail
cd "$(dirname "$0")/../.."
log() { echo "deb-test: $*"; }
fail() { echo "deb-test: FAIL: $*" >&2; exit 1; }
if [ "$(id -u)" != 0 ] || ! command -v dpkg >/dev/null; then
  [ "${1:-}" = --if-possible ] && { log "skipped: needs root and dpkg"; exit 0; }
  fail "needs root and dpkg"
fi
if [ "$(dpkg-query -W -f='${Status}' ipsec-tunneld 2>/dev/null)" = "install ok installed" ]; then
  fail "ipsec-tunneld is already installed here: not touching it"
fi
command -v man >/dev/null || { export DEBIAN_FRONTEND=noninteractive; apt-get install -y -qq man-db >/dev/null; }
DEB=$(bash scripts/packaging/make-deb.sh | tail -1)
log "built $DEB ($(du -h "$DEB" | cut -f1))"
trap 'dpkg --purge ipsec-tunneld >/dev/null 2>&1 || true' EXIT
dpkg -i "$DEB" >/dev/null || fail "dpkg -i $DEB"
V=$(/usr/bin/tunneld --version) || fail "tunneld --version"
log "installed: $V; $(/usr/bin/ipsec --version)"
for p in tunneld ipsec ipsec-show ipsec-ike; do
  man -w "$p" >/dev/null 2>&1 || fail "man -w $p: no man page"
done
log "man pages: $(man -w tunneld)"
[ -f /usr/share/bash-completion/completions/tunneld ] || fail "no bash completion"
[ "$(stat -c '%a %U' /etc/ipsec-tunneld)" = "700 ipsec-tunneld" ] ||
  fail "/etc/ipsec-tunneld is $(stat -c '%a %U' /etc/ipsec-tunneld), not 700 ipsec-tunneld"
U=$(mktemp -d /tmp/deb-unit.XXXXXX)
cp /lib/systemd/system/tunneld@.service "$U/tunneld@site.service"
if systemd-analyze --version >/dev/null 2>&1; then
  out=$(systemd-analyze verify "$U/tunneld@site.service" 2>&1) || fail "systemd-analyze verify: $out"
  # verify loads the units around ours too: what it says of other packages' units installed
  # on this machine (e.g. freeradius.service's MemoryLimit=) is theirs, not ours
  others=$(grep -E '^/(lib|usr/lib|etc|run)/systemd/' <<<"$out" || true)
  out=$(grep -v -E '^/(lib|usr/lib|etc|run)/systemd/' <<<"$out" || true)
  [ -z "$others" ] || log "systemd-analyze verify on other units (not ours, ignored): $(wc -l <<<"$others") line(s)"
  [ -z "$out" ] || fail "systemd-analyze verify says: $out"
  score=$(systemd-analyze security --offline=true "$U/tunneld@site.service" 2>/dev/null | sed -n 's/.*Overall exposure level for .*: \([0-9.]*\).*/\1/p')
  log "systemd-analyze verify: clean; security exposure $score"
else
  log "NOTE: no systemd-analyze here: the unit was not verified"
fi
rm -rf "$U"
dpkg --purge ipsec-tunneld >/dev/null || fail "dpkg --purge"
trap - EXIT
[ ! -e /usr/bin/tunneld ] && [ ! -e /etc/ipsec-tunneld ] && ! getent passwd ipsec-tunneld >/dev/null ||
  fail "the purge left files or the user behind"
log "all checks passed"
