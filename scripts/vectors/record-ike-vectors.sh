#!/usr/bin/env bash
# Records IKEv2 exchanges between two strongSwan charons as test vectors for crates/ike, as
# root: for each vector below, fresh charons in two namespaces (swvi: initiator 10.97.0.1,
# swvr: responder 10.97.0.2, over a veth), IKEv2 with a PSK and FQDN identities, ESP in UDP
# (encap = yes: IKE_AUTH onwards on port 4500 with the non-ESP marker), one tunnel-mode child
# 10.98.1.0/24 === 10.98.2.0/24; the initiator brings it up, 3 pings go each way through it,
# the initiator deletes the IKE_SA. Written to tests/data/ike/<name>/ (README.md there says
# what each file is):
#
#   ike.pcap          the IKE datagrams (UDP 500 and non-ESP-marked UDP 4500), Ethernet
#   esp.pcap          the ESP-in-UDP datagrams of the pings (UDP 4500)
#   vector.json       SPIs, KE data, nonces, DH shared secret, SKEYSEED, SK_d/ai/ar/ei/er/pi/pr,
#                     both AUTH computations, the CHILD_SA's SPIs and keys per direction, PSK,
#                     identities, proposals (scripts/lib/charon_keys.py vector)
#   keys.txt          the same flattened, one `a.b = value` a line
#   initiator.charon.log, responder.charon.log   the logs it all came from (ike/chd level 4)
#   swanctl-initiator.conf, swanctl-responder.conf   the configs (PSK included)
#   ikev2_decryption_table, esp_sa                Wireshark 4.0 tables for the two pcaps
#
# Everything is fixed (addresses, identities, PSK, proposals, config) but charon's randomness
# (SPIs, nonces, DH keys), so a rerun gives other bytes of the same shape. Each vector is
# checked before it is written: the keys recompute from the logged secrets (RFC 7296 2.14,
# 2.15, 2.17; charon_keys.py check), tshark decrypts every IKE frame with the tables and
# checks every ESP frame's ICV (Wireshark 4.0 has no ChaCha20-Poly1305 ESP: IKE only there),
# and Python's cryptography opens every ESP datagram with the vector's keys (esp-check).
# Installs strongSwan and tshark if missing. About 6 s a vector.
#
#   sudo bash scripts/vectors/record-ike-vectors.sh                 # all vectors
#   sudo bash scripts/vectors/record-ike-vectors.sh x25519-aesgcm   # only those named
#   OUT=/tmp/v sudo -E bash scripts/vectors/record-ike-vectors.sh   # somewhere else
set -euo pipefail
cd "$(dirname "$0")/../.."
START=$SECONDS
NETNS_TAG=record-ike-vectors
. scripts/lib/netns.sh
. scripts/lib/strongswan.sh
OUT=${OUT:-tests/data/ike}
PSK="strongSwan interop test vector PSK"
ID_I=initiator.ike.test
ID_R=responder.ike.test

# NAME IKE_PROPOSAL ESP_PROPOSAL [RESPONDER'S ESP_PROPOSAL]
# strongSwan 5.9.8's libipsec cannot install an ESN SA ("IPsec SA: ESN not supported", the
# responder answers NO_PROPOSAL_CHOSEN), so the last vector offers ESN and no ESN in one
# proposal and the responder, configured without ESN, picks no ESN.
VECTORS=(
  "x25519-aesgcm     aes128gcm16-prfsha256-x25519  aes128gcm16"
  "ecp384-aescbc     aes256-sha256-ecp384          aes128-sha256"
  "modp2048-chacha   aes128-sha256-modp2048        chacha20poly1305"
  "ecp256-gcm256     aes256gcm16-prfsha384-ecp256  aes256gcm16-esn-noesn  aes256gcm16-noesn"
)
ONLY=("$@")
for n in "${ONLY[@]}"; do
  printf '%s\n' "${VECTORS[@]}" | awk '{print $1}' | grep -qx "$n" ||
    fail "unknown vector \`$n\`: $(printf '%s\n' "${VECTORS[@]}" | awk '{print $1}' | tr '\n' ' ')"
done

[ "$(id -u)" -eq 0 ] || fail "needs root (network namespaces, charon)"
swan_install
WORK=$(mktemp -d /tmp/record-ike-vectors.XXXXXX)
trap 'rc=$?; swan_stop_all; cleanup_all $rc 40' EXIT
trap 'fail "interrupted"' INT TERM
VERSION=$("$SWAN_CHARON" --version 2>/dev/null | grep -o '[0-9][0-9.]*' | head -n 1 || true)
[ -n "$VERSION" ] || VERSION=$(dpkg-query -W -f '${Version}' strongswan-charon 2>/dev/null | cut -d- -f1)

netns_pair swvi swvr swvvi swvvr 10.97.0.1/24 10.97.0.2/24
ip -n swvi addr add 10.98.1.1/32 dev lo
ip -n swvr addr add 10.98.2.1/32 dev lo

for line in "${VECTORS[@]}"; do
  read -r name ike esp esp_r <<<"$line"
  esp_r=${esp_r:-$esp}
  [ ${#ONLY[@]} -eq 0 ] || [[ " ${ONLY[*]} " == *" $name "* ]] || continue
  T0=$SECONDS
  I=$WORK/$name/i R=$WORK/$name/r
  swan_instance "$I"
  swan_instance "$R"
  swan_site_conf "$I" local=10.97.0.1 remote=10.97.0.2 local_id=$ID_I remote_id=$ID_R psk="$PSK" \
    local_ts=10.98.1.0/24 remote_ts=10.98.2.0/24 ike="$ike" esp="$esp" encap=yes
  swan_site_conf "$R" local=10.97.0.2 remote=10.97.0.1 local_id=$ID_R remote_id=$ID_I psk="$PSK" \
    local_ts=10.98.2.0/24 remote_ts=10.98.1.0/24 ike="$ike" esp="$esp_r" encap=yes
  swan_start swvi "$I"
  swan_start swvr "$R"
  swan_load "$I"
  swan_load "$R"
  pcap=$WORK/$name/all.pcap
  ip netns exec swvi tshark -n -q -i swvvi -F pcap -w "$pcap" -f 'udp port 500 or udp port 4500' 2>"$pcap.log" &
  CAP=$!
  BG+=("$CAP")
  swan_wait_capture 10 "$pcap"
  swan_initiate "$I" net
  for d in "$I" "$R"; do
    [ "$(swan_established "$d")" = "1 1" ] || fail "$name: $d: SAs up: $(swan_established "$d"), expected 1 1"
  done
  ip netns exec swvi ping -c 3 -i 0.2 -W 2 -I 10.98.1.1 10.98.2.1 >/dev/null || fail "$name: ping initiator -> responder failed"
  ip netns exec swvr ping -c 3 -i 0.2 -W 2 -I 10.98.2.1 10.98.1.1 >/dev/null || fail "$name: ping responder -> initiator failed"
  swan_terminate "$I" --ike sw
  sleep 0.3
  stop_pids "$CAP"
  swan_stop "$I"
  swan_stop "$R"
  for d in "$I" "$R"; do
    w=$(swan_log_warnings "$d")
    [ -z "$w" ] || fail "$name: $d/charon.log has warnings: $w"
  done

  dst=$WORK/$name/out
  mkdir -p "$dst"
  python3 scripts/lib/charon_keys.py vector "$I/charon.log" "$R/charon.log" -o "$dst" --name "$name" \
    --psk "$PSK" --initiator-id $ID_I --responder-id $ID_R --ike-proposal "$ike" --esp-proposal "$esp" --esp-proposal-responder "$esp_r" \
    --strongswan "$VERSION" >/dev/null
  out=$(python3 scripts/lib/charon_keys.py check "$dst/vector.json") || fail "$name: keys do not recompute"
  python3 scripts/lib/charon_keys.py wireshark "$I/charon.log" "$R/charon.log" \
    --ikev2 "$dst/ikev2_decryption_table" --esp "$dst/esp_sa" >/dev/null 2>"$WORK/$name/ws.err" ||
    fail "$name: no Wireshark tables: $(cat "$WORK/$name/ws.err")"
  tshark -n -r "$pcap" -Y isakmp -F pcap -w "$dst/ike.pcap" 2>/dev/null
  tshark -n -r "$pcap" -Y 'esp || (udp.port == 4500 && !isakmp && !udpencap.nat_keepalive)' -F pcap -w "$dst/esp.pcap" 2>/dev/null
  # IKE_SA_INIT, IKE_AUTH, INFORMATIONAL: 6 datagrams; 2 x 3 pings answered: 12 ESP
  nike=$(tshark -n -r "$dst/ike.pcap" 2>/dev/null | wc -l)
  nesp=$(tshark -n -r "$dst/esp.pcap" 2>/dev/null | wc -l)
  [ "$nike" -eq 6 ] && [ "$nesp" -eq 12 ] || fail "$name: $nike IKE and $nesp ESP datagrams captured, expected 6 and 12"
  if [[ $esp == chacha20poly1305* ]]; then
    # Wireshark 4.0 has no ChaCha20-Poly1305 for ESP: tshark checks the IKE frames only
    v=$(python3 scripts/lib/charon_keys.py verify "$dst/ike.pcap" --ikev2 "$dst/ikev2_decryption_table" --esp "$dst/esp_sa" --ike-frames 6) ||
      fail "$name: tshark did not decrypt every IKE frame"
  else
    v=$(python3 scripts/lib/charon_keys.py verify "$pcap" --ikev2 "$dst/ikev2_decryption_table" --esp "$dst/esp_sa" --ike-frames 6 --esp-frames 12) ||
      fail "$name: tshark did not decrypt/check every frame"
  fi
  # and every ESP datagram opened in Python with the vector's keys (ChaCha20-Poly1305 too)
  e=$(python3 scripts/lib/charon_keys.py esp-check "$dst/esp.pcap" "$dst/vector.json" --frames 12) ||
    fail "$name: the ESP datagrams do not open with the vector's keys"
  cp "$I/charon.log" "$dst/initiator.charon.log"
  cp "$R/charon.log" "$dst/responder.charon.log"
  cp "$I/swanctl/swanctl.conf" "$dst/swanctl-initiator.conf"
  cp "$R/swanctl/swanctl.conf" "$dst/swanctl-responder.conf"
  rm -rf "${OUT:?}/$name"
  mkdir -p "$OUT"
  mv "$dst" "$OUT/$name"
  log "$name: $ike / $esp: ${out#charon_keys: }; ${v#charon_keys: }; ${e#charon_keys: } ($((SECONDS - T0)) s)"
done
log "done: vectors in $OUT ($((SECONDS - START)) s)"
