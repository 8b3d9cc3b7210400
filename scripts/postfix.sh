#!/usr/bin/env bash
# A Postfix of the tests' own (Debian's `postfix` package, installed with
# apt-get where absent): its own config, queue and data directories under
# POSTFIX_BASE and its own port, never the system's default instance
# (/etc/postfix/main.cf is neither read nor written). The bounce tests
# (internal/bounce) start it and stop it; `make test` runs `install` first.
#
#   scripts/postfix.sh install   install the package if absent (no default instance is configured)
#   scripts/postfix.sh start     configure and start the instance (stops a leftover one first)
#   scripts/postfix.sh stop      stop it and remove its directories
#   scripts/postfix.sh flush     deliver the deferred queue now (postqueue -f)
#   scripts/postfix.sh queue     list its queue (postqueue -p)
#
# Settings (environment; the defaults are the bounce tests'):
#   POSTFIX_BASE          directory of the instance          (/tmp/msgpulse-postfix-25250)
#   POSTFIX_PORT          its SMTP port, on 127.0.0.1         (25250; the tests use 25250-25259)
#   POSTFIX_DOMAIN        the local test domain: any RCPT is accepted, and
#                         local delivery to an unknown user bounces 5.1.1  (mx.msgpulse.test)
#   POSTFIX_BOUNCE_ROUTES the bounce domains (MAIL_BOUNCE_DOMAIN) and their
#                         receivers, "domain=host:port,...": mail to each goes
#                         there   (bounce.msgpulse.test=127.0.0.1:25251)
#
# Nothing leaves the machine: every other destination is the error
# transport. Retries are seconds apart (queue_run_delay, minimal_backoff_time
# 1s), so a 4xx from the receiver is retried at once.
set -euo pipefail

PORT=${POSTFIX_PORT:-25250}
BASE=${POSTFIX_BASE:-/tmp/msgpulse-postfix-$PORT}
DOMAIN=${POSTFIX_DOMAIN:-mx.msgpulse.test}
ROUTES=${POSTFIX_BOUNCE_ROUTES:-bounce.msgpulse.test=127.0.0.1:25251}
CONF=$BASE/etc

log() { printf 'postfix: %s\n' "$*" >&2; }
sudo_cmd() { if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi; }

install() {
  if [ -x /usr/sbin/postfix ] && [ -x /usr/lib/postfix/sbin/master ]; then
    return 0
  fi
  log "installing postfix with apt-get (no configuration: the system's instance stays off)"
  echo "postfix postfix/main_mailer_type select No configuration" | sudo_cmd debconf-set-selections
  sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive sudo_cmd apt-get install -y -qq --no-install-recommends postfix >/dev/null
  test -x /usr/sbin/postfix || { log "postfix did not install"; exit 1; }
}

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

running() { [ -f "$CONF/main.cf" ] && sudo_cmd postfix -c "$CONF" status >/dev/null 2>&1; }

stop() {
  if running; then
    sudo_cmd postfix -c "$CONF" stop >/dev/null 2>&1 || true
  fi
  # master's pid file, in case status could not be asked (a broken config).
  if [ -f "$BASE/queue/pid/master.pid" ]; then
    pid=$(tr -d ' ' <"$BASE/queue/pid/master.pid")
    if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
      sudo_cmd kill "$pid" 2>/dev/null || true
      for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    fi
  fi
  case "$BASE" in /tmp/*|/var/tmp/*|"${TMPDIR:-/nonexistent}"/*) sudo_cmd rm -rf "$BASE" ;; *) log "not removing $BASE (not under a temporary directory)" ;; esac
}

start() {
  install
  stop
  sudo_cmd mkdir -p "$CONF" "$BASE/queue" "$BASE/data"
  sudo_cmd chown postfix "$BASE/data"
  local transports="" route dom addr
  IFS=, read -ra routes <<<"$ROUTES"
  for route in "${routes[@]}"; do
    dom=${route%%=*} addr=${route#*=}
    [[ $dom =~ ^[a-z0-9.-]+$ && $addr =~ ^[0-9.]+:[0-9]+$ ]] || { log "POSTFIX_BOUNCE_ROUTES: bad route $route"; exit 2; }
    transports+="${transports:+, }$dom=smtp:[${addr%:*}]:${addr##*:}"
  done
  sudo_cmd tee "$CONF/main.cf" >/dev/null <<CF
# The msgpulse tests' own Postfix (scripts/postfix.sh); generated, not edited.
compatibility_level = 3.6
queue_directory = $BASE/queue
data_directory = $BASE/data
command_directory = /usr/sbin
daemon_directory = /usr/lib/postfix/sbin
meta_directory = /etc/postfix
shlib_directory = /usr/lib/postfix
mail_owner = postfix
setgid_group = postdrop
myhostname = $DOMAIN
mydomain = msgpulse.test
myorigin = \$myhostname
mydestination = $DOMAIN
inet_interfaces = 127.0.0.1
inet_protocols = ipv4
mynetworks = 127.0.0.0/8
smtpd_relay_restrictions = permit_mynetworks, reject_unauth_destination
# Any RCPT at the test domain is taken, so that Postfix itself writes the
# DSN (local(8): "unknown user", 5.1.1) instead of refusing at RCPT.
local_recipient_maps =
alias_maps =
alias_database =
biff = no
append_dot_mydomain = no
smtputf8_enable = no
smtp_tls_security_level = none
smtpd_tls_security_level = none
# The bounce domain's mail (the DSNs) goes to msgpulse's receiver; nothing
# else leaves.
transport_maps = inline:{ $transports }
default_transport = error:the msgpulse test Postfix sends nowhere else
relay_transport = error:the msgpulse test Postfix sends nowhere else
smtp_connection_cache_on_demand = no
# Retries seconds apart, so a 4xx from the receiver is tried again at once.
queue_run_delay = 1s
minimal_backoff_time = 1s
maximal_backoff_time = 2s
smtp_connect_timeout = 5s
maillog_file_prefixes = $BASE
maillog_file = $BASE/maillog
CF
  sudo_cmd tee "$CONF/master.cf" >/dev/null <<CF
127.0.0.1:$PORT inet n - n - - smtpd
pickup     unix  n - n 60   1 pickup
cleanup    unix  n - n -    0 cleanup
qmgr       unix  n - n 300  1 qmgr
rewrite    unix  - - n -    - trivial-rewrite
bounce     unix  - - n -    0 bounce
defer      unix  - - n -    0 bounce
trace      unix  - - n -    0 bounce
verify     unix  - - n -    1 verify
flush      unix  n - n 1000? 0 flush
proxymap   unix  - - n -    - proxymap
proxywrite unix  - - n -    1 proxymap
smtp       unix  - - n -    - smtp
relay      unix  - - n -    - smtp
showq      unix  n - n -    - showq
error      unix  - - n -    - error
retry      unix  - - n -    - error
discard    unix  - - n -    - discard
local      unix  - n n -    - local
anvil      unix  - - n -    1 anvil
scache     unix  - - n -    1 scache
postlog    unix-dgram n - n - 1 postlogd
CF
  sudo_cmd postfix -c "$CONF" post-install create-missing >/dev/null 2>&1 || true
  if ! sudo_cmd postfix -c "$CONF" start >/dev/null 2>&1; then
    # postfix logs to its maillog, which a config error never reaches.
    sudo_cmd postfix -c "$CONF" check >&2 || true
    log "did not start"
    return 1
  fi
  for _ in $(seq 1 100); do
    if port_open "$PORT"; then
      log "up: SMTP 127.0.0.1:$PORT, test domain $DOMAIN, bounce routes $ROUTES, directory $BASE"
      return 0
    fi
    sleep 0.1
  done
  log "did not listen on 127.0.0.1:$PORT within 10s"
  [ -f "$BASE/maillog" ] && tail -20 "$BASE/maillog" >&2
  return 1
}

case "${1:-}" in
  install) install ;;
  start) start ;;
  stop) stop ;;
  flush) sudo_cmd postqueue -c "$CONF" -f ;;
  queue) sudo_cmd postqueue -c "$CONF" -p ;;
  *) echo "usage: $0 install|start|stop|flush|queue" >&2; exit 2 ;;
esac
