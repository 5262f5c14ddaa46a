# shellcheck shell=bash
# A FreeRADIUS of the test's own (Debian's `freeradius` package), sourced by
# scripts/ci/eap-radius.sh and scripts/ci/ike-eap-radius.sh: a config directory of its own
# (clients.conf with one secret for 127.0.0.1, a users file, the eap module with
# default_eap_type = mschapv2, the mschap module with MPPE keys), radiusd in the foreground
# on 127.0.0.1:PORT, optionally inside a network namespace; stopped by its PID only.
#
#   . scripts/lib/freeradius.sh
#   fr_find || { echo "no freeradius"; exit 1; }        # sets RADIUSD
#   fr_conf "$WORK" PORT SECRET "bob:a password" "carol:another"   # USER:PASSWORD each
#   fr_start "$WORK" [NETNS]                             # sets FR_PID; waits until it serves
#   fr_stop                                              # SIGTERM, then SIGKILL after 5 s
#
# The log is $WORK/log/radius.log ("Login OK: [bob/...]", "Login incorrect", ...).
#
# Accounting (RFC 2866): with FR_ACCT_PORT set before fr_conf, radiusd also listens for
# Accounting-Requests on 127.0.0.1:FR_ACCT_PORT and its `detail` module writes each one to
# $WORK/radacct/detail (Acct-Status-Type, Framed-IP-Address, Acct-Input-Octets, ...).

FR_PID=""

# fr_find: RADIUSD, the radiusd binary (freeradius on Debian); false when there is none.
fr_find() {
  RADIUSD=$(command -v freeradius || command -v radiusd || true)
  [ -n "$RADIUSD" ]
}

# fr_conf DIR PORT SECRET USER:PASSWORD...: DIR/raddb, DIR/run, DIR/log.
fr_conf() {
  local w=$1 port=$2 secret=$3 u
  shift 3
  mkdir -p "$w/raddb" "$w/run" "$w/log" "$w/radacct"
  local acct_listen="" acct_section=""
  if [ -n "${FR_ACCT_PORT:-}" ]; then
    acct_listen="listen {
    type = acct
    ipaddr = 127.0.0.1
    port = $FR_ACCT_PORT
  }"
    acct_section="accounting {
    detail
  }"
  fi
  cat >"$w/raddb/dictionary" <<CONF
\$INCLUDE /usr/share/freeradius/dictionary
CONF
  cat >"$w/raddb/clients.conf" <<CONF
client localhost {
  ipaddr = 127.0.0.1
  secret = $secret
  require_message_authenticator = yes
  nas_type = other
}
CONF
  : >"$w/raddb/users"
  for u in "$@"; do
    printf '%s Cleartext-Password := "%s"\n' "${u%%:*}" "${u#*:}" >>"$w/raddb/users"
  done
  chmod 600 "$w/raddb/users" "$w/raddb/clients.conf"
  cat >"$w/raddb/radiusd.conf" <<CONF
prefix = /usr
exec_prefix = /usr
sysconfdir = /etc
localstatedir = /var
sbindir = /usr/sbin
logdir = $w/log
raddbdir = $w/raddb
radacctdir = $w/log
name = freeradius
confdir = $w/raddb
modconfdir = $w/raddb
run_dir = $w/run
db_dir = $w/raddb
libdir = /usr/lib/freeradius
pidfile = $w/run/radiusd.pid
max_request_time = 10
cleanup_delay = 2
max_requests = 1024
hostname_lookups = no
log {
  destination = files
  file = $w/log/radius.log
  auth = yes
  auth_badpass = no
  auth_goodpass = no
}
security {
  allow_core_dumps = no
  max_attributes = 200
  reject_delay = 0
  status_server = no
}
thread pool {
  start_servers = 1
  max_servers = 2
  min_spare_servers = 1
  max_spare_servers = 2
}
\$INCLUDE clients.conf
modules {
  files {
    filename = $w/raddb/users
  }
  mschap {
    use_mppe = yes
    require_encryption = no
    require_strong = yes
  }
  eap {
    default_eap_type = mschapv2
    timer_expire = 30
    ignore_unknown_eap_types = no
    max_sessions = 1024
    mschapv2 {
      send_error = no
    }
  }
  detail {
    filename = $w/radacct/detail
    permissions = 0600
    header = "%t"
  }
}
server default {
  listen {
    type = auth
    ipaddr = 127.0.0.1
    port = $port
  }
  authorize {
    eap {
      ok = return
    }
    files
  }
  authenticate {
    eap
    Auth-Type MSCHAP {
      mschap
    }
  }
  $acct_listen
  $acct_section
}
CONF
}

# fr_start DIR [NETNS]: radiusd with DIR's config (in NETNS if given, whose lo must be up);
# FR_PID its PID; returns 1 (with its last log lines on stderr) if it does not serve in 10 s.
fr_start() {
  local w=$1 ns=${2:-}
  rm -f "$w/log/radius.log"
  if [ -n "$ns" ]; then
    ip netns exec "$ns" "$RADIUSD" -f -d "$w/raddb" -n radiusd -l "$w/log/radius.log" >"$w/log/stdout.log" 2>&1 &
  else
    "$RADIUSD" -f -d "$w/raddb" -n radiusd -l "$w/log/radius.log" >"$w/log/stdout.log" 2>&1 &
  fi
  FR_PID=$!
  local _
  for _ in $(seq 100); do
    if ! kill -0 "$FR_PID" 2>/dev/null; then
      echo "radiusd exited at start:" >&2
      tail -n 20 "$w/log/stdout.log" "$w/log/radius.log" >&2 2>/dev/null || true
      FR_PID=""
      return 1
    fi
    grep -q 'Ready to process requests' "$w/log/radius.log" 2>/dev/null && return 0
    sleep 0.1
  done
  echo "radiusd not ready in 10 s:" >&2
  tail -n 20 "$w/log/radius.log" >&2 2>/dev/null || true
  return 1
}

# fr_stop: the radiusd fr_start started (by its PID): SIGTERM, SIGKILL after 5 s.
fr_stop() {
  [ -n "$FR_PID" ] || return 0
  if kill -0 "$FR_PID" 2>/dev/null; then
    kill -CONT "$FR_PID" 2>/dev/null || true # if a test paused it
    kill "$FR_PID" 2>/dev/null || true
    local _
    for _ in $(seq 50); do kill -0 "$FR_PID" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$FR_PID" 2>/dev/null || true
  fi
  wait "$FR_PID" 2>/dev/null || true
  FR_PID=""
}
