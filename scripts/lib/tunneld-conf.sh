# The one writer of tunneld configs for the shell tests (sourced; bash 4): td_conf DIR KEYS...
# writes DIR/tunneld.toml and DIR/secrets.toml (mode 0600) with one connection; td_head and
# td_conn build one with several. Used by scripts/ci/* and scripts/studies/* through
# scripts/lib/ike-lifecycle.sh, and directly by scripts/ci/ike-interop.sh and netns-test.sh.

# td_conf DIR KEY=VALUE...: DIR/tunneld.toml and DIR/secrets.toml with one connection: the
# keys of td_head and td_conn.
td_conf() {
  td_head "$@"
  td_conn "$@"
}

# td_head DIR KEY=VALUE...: a fresh DIR/tunneld.toml with its [tunnel] table (local: its
# address) and, if cookie_threshold is given, an [ike] table; an empty DIR/secrets.toml.
td_head() {
  local d=$1 kv
  shift
  local -A c=()
  for kv in "$@"; do c[${kv%%=*}]=${kv#*=}; done
  mkdir -p "$d"
  {
    echo "# written by ${0#./}${CASE:+ (case $CASE)}"
    echo "[tunnel]"
    echo "tun = \"ipsec0\""
    echo "local = \"${c[local]}\""
    echo "secrets = \"$d/secrets.toml\""
    [ -z "${c[cookie_threshold]:-}" ] || printf '\n[ike]\ncookie_threshold = %s\n' "${c[cookie_threshold]}"
  } >"$d/tunneld.toml"
  (umask 077 && : >"$d/secrets.toml")
  chmod 600 "$d/secrets.toml"
}

# td_conn DIR KEY=VALUE...: one more connection in DIR/tunneld.toml, with one child, and its
# secrets in DIR/secrets.toml. Keys:
#   the connection: name (gw), local (local_addrs), remote (remote_addrs; %any), local_id,
#     remote_id (no id when empty), auth (psk, or pubkey: both sides), psk (an [[ike]] secret
#     for the two ids), certs (local certificates), cacerts, crls (for the remote; lists are
#     space-separated file names), key (a private key file: [[private]]), remote_auth (the
#     remote side's auth when it differs: eap-mschapv2), remote_eap_id (its eap_id), eap
#     ("user:password ...": [[eap]] secrets), dpd (dpd_delay;
#     default 0), ike_rekey, fragmentation, fragment_size, ike (IKE proposals; default
#     $IKE_PROP, none: tunneld's defaults), encap (true; "no": not forced), eap_only (RFC 5998;
#     true/false, unset: not written)
#   the child: child (net), local_ts, remote_ts, esp (ESP proposals; default $ESP_PROP, none:
#     tunneld's defaults), start (start_action; none),
#     child_rekey, rand_time, life_time, rekey_bytes, rekey_packets
# Lists are space- or comma-separated. The rekey words (swanctl's, docs/config.md) are written
# only when given.
toml_list() { local x out=() IFS=' '; for x in ${1//,/ }; do out+=("\"$x\""); done; local IFS=,; echo "[${out[*]}]"; }
td_conn() {
  local d=$1 kv lauth rauth
  shift
  local -A c=([name]=gw [child]=net [auth]=psk [start]=none [dpd]=0 [encap]=true
    [ike]=${IKE_PROP:-} [esp]=${ESP_PROP:-})
  for kv in "$@"; do c[${kv%%=*}]=${kv#*=}; done
  lauth="auth = \"${c[auth]}\""
  rauth=$lauth
  [ -z "${c[remote_auth]:-}" ] || rauth="auth = \"${c[remote_auth]}\""
  [ -z "${c[remote_eap_id]:-}" ] || rauth+=", eap_id = \"${c[remote_eap_id]}\""
  [ -z "${c[local_id]:-}" ] || lauth="id = \"${c[local_id]}\", $lauth"
  [ -z "${c[remote_id]:-}" ] || rauth="id = \"${c[remote_id]}\", $rauth"
  [ -z "${c[certs]:-}" ] || lauth+=", certs = $(toml_list "${c[certs]}")"
  [ -z "${c[cacerts]:-}" ] || rauth+=", cacerts = $(toml_list "${c[cacerts]}")"
  [ -z "${c[crls]:-}" ] || rauth+=", crls = $(toml_list "${c[crls]}")"
  {
    echo
    echo "[[connection]]"
    echo "name = \"${c[name]}\""
    echo "local_addrs = [\"${c[local]}\"]"
    echo "remote_addrs = [\"${c[remote]}\"]"
    [ -z "${c[ike]}" ] || echo "proposals = $(toml_list "${c[ike]}")"
    [ "${c[encap]}" = no ] || echo "encap = true"
    echo "local = { $lauth }"
    echo "remote = { $rauth }"
    [ -z "${c[dpd]}" ] || echo "dpd_delay = ${c[dpd]}"
    [ -z "${c[ike_rekey]:-}" ] || echo "rekey_time = \"${c[ike_rekey]}\""
    [ -z "${c[fragmentation]:-}" ] || echo "fragmentation = \"${c[fragmentation]}\""
    [ -z "${c[fragment_size]:-}" ] || echo "fragment_size = ${c[fragment_size]}"
    [ -z "${c[eap_only]:-}" ] || echo "eap_only = ${c[eap_only]}"
    echo
    echo "[[connection.children]]"
    echo "name = \"${c[child]}\""
    echo "local_ts = $(toml_list "${c[local_ts]}")"
    echo "remote_ts = $(toml_list "${c[remote_ts]}")"
    [ -z "${c[esp]}" ] || echo "esp_proposals = $(toml_list "${c[esp]}")"
    echo "start_action = \"${c[start]}\""
    for kv in child_rekey:rekey_time rand_time:rand_time life_time:life_time; do
      [ -z "${c[${kv%%:*}]:-}" ] || echo "${kv#*:} = \"${c[${kv%%:*}]}\""
    done
    for kv in rekey_bytes rekey_packets; do
      [ -z "${c[$kv]:-}" ] || echo "$kv = ${c[$kv]}"
    done
  } >>"$d/tunneld.toml"
  {
    [ ! -s "$d/secrets.toml" ] || echo
    if [ -n "${c[psk]:-}" ]; then
      kv="\"${c[local_id]}\""
      [ -z "${c[remote_id]:-}" ] || kv+=", \"${c[remote_id]}\""
      printf '[[ike]]\nid = [%s]\nsecret = "%s"\n' "$kv" "${c[psk]}"
    fi
    [ -z "${c[key]:-}" ] || printf '[[private]]\nfile = "%s"\n' "${c[key]}"
    for kv in ${c[eap]:-}; do printf '[[eap]]\nid = "%s"\nsecret = "%s"\n' "${kv%%:*}" "${kv#*:}"; done
  } >>"$d/secrets.toml"
}

