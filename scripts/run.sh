#!/usr/bin/env bash
# `make run`: the whole msgpulse system on this machine, without Docker.
# RabbitMQ and Redis are started by scripts/services.sh (make run depends on
# `services`); this script declares the topology and runs the mail catcher,
# the API and a consumer, then prints the curl command to try. Ctrl-C stops
# everything gracefully.
set -euo pipefail
cd "$(dirname "$0")/.."

# The settings (each overridable from the environment) and the banner.
. scripts/run-env.sh
mkdir -p "$RUN_DIR"
BIN=bin

say() { printf '\033[1m%s\033[0m\n' "$*"; }

busy=()
for addr in "$HTTP_ADDR" "$METRICS_ADDR" "$MAILCATCHER_SMTP_ADDR" "$MAILCATCHER_HTTP_ADDR" "$BOUNCE_SMTP_ADDR"; do
  if (exec 3<>"/dev/tcp/${addr%:*}/${addr##*:}") 2>/dev/null; then busy+=("$addr"); fi
done
if [ ${#busy[@]} -gt 0 ]; then
  echo "run: already in use: ${busy[*]} (another make run? set HTTP_ADDR / METRICS_ADDR / MAILCATCHER_*_ADDR / BOUNCE_SMTP_ADDR)" >&2
  exit 1
fi

say "== declaring the topology"
"$BIN/topology" declare

pids=()
stop() {
  trap - INT TERM EXIT
  say "== stopping (graceful: in-flight messages finish)"
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  wait "${pids[@]}" 2>/dev/null || true
}
trap stop INT TERM EXIT

say "== mail catcher: SMTP $MAILCATCHER_SMTP_ADDR, web http://$MAILCATCHER_HTTP_ADDR (mails print below)"
"$BIN/mailcatcher" & pids+=($!)
say "== consumer (logs: $RUN_DIR/consumer.log)"
"$BIN/consumer" >"$RUN_DIR/consumer.log" 2>&1 & pids+=($!)
say "== api on http://$HTTP_ADDR (logs: $RUN_DIR/api.log)"
"$BIN/api" >"$RUN_DIR/api.log" 2>&1 & pids+=($!)

for _ in $(seq 1 100); do
  if "$BIN/healthcheck" "http://$HTTP_ADDR/readyz" 2>/dev/null; then break; fi
  for p in "${pids[@]}"; do
    if ! kill -0 "$p" 2>/dev/null; then
      echo "run: a process exited early; see $RUN_DIR/*.log" >&2
      tail -n 20 "$RUN_DIR"/api.log "$RUN_DIR"/consumer.log >&2 || true
      exit 1
    fi
  done
  sleep 0.1
done

banner
wait -n "${pids[@]}"
echo "run: a process exited; see $RUN_DIR/*.log" >&2
exit 1
