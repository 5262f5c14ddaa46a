#!/usr/bin/env bash
# Installs what the interop tests need on a fresh Debian machine: tshark and promtool (Debian
# packages tshark and prometheus, whose service is not started), openvpn and stunnel4 (for
# the comparisons in scripts/studies/compare-peers.sh), freeradius and eapoltest (scripts/ci/eap-radius.sh) and
# scapy + cryptography (PyPI).
# Idempotent: does nothing for what is already there.
set -euo pipefail
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"
if ! command -v tshark >/dev/null 2>&1; then
  export DEBIAN_FRONTEND=noninteractive
  echo "wireshark-common wireshark-common/install-setuid boolean false" | $SUDO debconf-set-selections || true
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq tshark >/dev/null
fi
if ! command -v promtool >/dev/null 2>&1; then
  export DEBIAN_FRONTEND=noninteractive
  # promtool checks `ipsec show --format prometheus` (the package's server is not started here:
  # the test machines have no init system that would run it).
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends prometheus >/dev/null
fi
if ! command -v openvpn >/dev/null 2>&1 || ! command -v stunnel4 >/dev/null 2>&1; then
  # scripts/studies/compare-peers.sh and scripts/studies/ipsec-vs-ssl.sh compare tunneld with OpenVPN and
  # stunnel (their services are not started: the scripts run them in namespaces).
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends openvpn stunnel4 openssl >/dev/null
fi
if ! command -v freeradius >/dev/null 2>&1 || ! command -v eapol_test >/dev/null 2>&1; then
  # scripts/ci/eap-radius.sh runs its own radiusd (a config of its own, the package's service
  # is not started) for the RADIUS client of crates/eap, and wpa_supplicant's eapol_test
  # against the crate's authenticator.
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends freeradius eapoltest >/dev/null
fi
if [ "$(id -u)" -eq 0 ] && ! command -v debootstrap >/dev/null 2>&1; then
  # scripts/lib/make-pq-chroot.sh builds the strongSwan 6.1 peer of scripts/ci/ike-pq.sh in a sid chroot.
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq debootstrap >/dev/null
fi
PY=${PYTHON:-python3}
if ! "$PY" -c 'import scapy.layers.ipsec, cryptography, pytest' >/dev/null 2>&1; then
  "$PY" -m pip install -q 'scapy==2.6.1' 'cryptography>=41' 'pytest>=7'
fi
command -v tshark >/dev/null && "$PY" -c 'import scapy.layers.ipsec' && echo "test deps ready: $(tshark --version | head -1), scapy $("$PY" -c 'import scapy; print(scapy.VERSION)')"
