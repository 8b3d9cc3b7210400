#!/usr/bin/env bash
# Makes sure Redis and RabbitMQ (with its management and prometheus
# plugins) run on this machine, installing them with apt-get where absent,
# and that Prometheus (prometheus, promtool) is installed for the dashboard
# and alert tests (internal/alerting); it is not started here. `make test` and
# `make run` call this first, so a fresh machine needs nothing by hand.
# Idempotent: services that already answer are left alone.
set -euo pipefail

log() { printf 'services: %s\n' "$*" >&2; }

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

wait_for() { # wait_for SECONDS DESCRIPTION COMMAND...
  local secs=$1 what=$2; shift 2
  for _ in $(seq 1 $((secs * 5))); do
    if "$@"; then return 0; fi
    sleep 0.2
  done
  log "$what did not come up within ${secs}s"
  return 1
}

sudo_cmd() { if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi; }

missing=()
command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)
command -v rabbitmq-server >/dev/null 2>&1 || missing+=(rabbitmq-server)
command -v promtool >/dev/null 2>&1 || missing+=(prometheus)
if [ ${#missing[@]} -gt 0 ]; then
  log "installing ${missing[*]} with apt-get"
  sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive sudo_cmd apt-get install -y -qq "${missing[@]}" >/dev/null
fi

if ! port_open 6379; then
  log "starting redis-server"
  sudo_cmd mkdir -p /var/lib/redis /var/log/redis
  sudo_cmd redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 --save "" --appendonly no \
    --dir /var/lib/redis --logfile /var/log/redis/ci.log
  wait_for 30 "redis" port_open 6379
fi

if ! port_open 5672; then
  log "starting rabbitmq-server"
  sudo_cmd rabbitmq-server -detached
  wait_for 90 "rabbitmq" port_open 5672
fi

mgmt_ok() { curl -sf -o /dev/null -u guest:guest http://127.0.0.1:15672/api/overview; }
if ! mgmt_ok; then
  log "enabling rabbitmq_management"
  sudo_cmd rabbitmq-plugins enable rabbitmq_management >/dev/null
  wait_for 90 "rabbitmq management API" mgmt_ok
fi
# RabbitMQ's own metrics (/metrics/per-object on :15692), which the alert
# rules and the dashboard read; rabbitmq/enabled_plugins enables it too.
prom_ok() { curl -sf -o /dev/null http://127.0.0.1:15692/metrics; }
if ! prom_ok; then
  log "enabling rabbitmq_prometheus"
  sudo_cmd rabbitmq-plugins enable rabbitmq_prometheus >/dev/null
  wait_for 90 "rabbitmq prometheus endpoint" prom_ok
fi
log "redis 127.0.0.1:6379, rabbitmq 127.0.0.1:5672, management 127.0.0.1:15672, metrics 127.0.0.1:15692: up"
