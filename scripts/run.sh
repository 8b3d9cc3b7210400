#!/usr/bin/env bash
# `make run`: the whole msgpulse system on this machine, without Docker.
# RabbitMQ and Redis are started by scripts/services.sh (make run depends on
# `services`); this script declares the topology and runs the mail catcher,
# the API and a consumer, then prints the curl command to try. Ctrl-C stops
# everything gracefully.
set -euo pipefail
cd "$(dirname "$0")/.."

RUN_DIR=.run
mkdir -p "$RUN_DIR"
BIN=bin

export LOG_FORMAT="${LOG_FORMAT:-console}"
export AMQP_URL="${AMQP_URL:-amqp://guest:guest@127.0.0.1:5672/}"
export REDIS_URL="${REDIS_URL:-redis://127.0.0.1:6379/0}"
export RABBITMQ_MANAGEMENT_URL="${RABBITMQ_MANAGEMENT_URL:-http://guest:guest@127.0.0.1:15672}"
DEV_KEY="${DEV_API_KEY:-dev-key-change-me}"
# admin must be written (a key without scopes is send+read): the dev key
# also opens the queue stats and the console.
export API_KEYS="${API_KEYS:-dev:$DEV_KEY:send+read+admin}"
# Callbacks are signed per tenant; without a secret a callbackUrl is refused.
export CALLBACK_SECRET="${CALLBACK_SECRET:-dev-callback-secret-change-me}"
export HTTP_ADDR="${HTTP_ADDR:-127.0.0.1:8080}"
export METRICS_ADDR="${METRICS_ADDR:-127.0.0.1:9090}"
export MAILCATCHER_SMTP_ADDR="${MAILCATCHER_SMTP_ADDR:-127.0.0.1:1025}"
export MAILCATCHER_HTTP_ADDR="${MAILCATCHER_HTTP_ADDR:-127.0.0.1:8025}"
export SMTP_HOST="${MAILCATCHER_SMTP_ADDR%:*}" SMTP_PORT="${MAILCATCHER_SMTP_ADDR##*:}" SMTP_TLS=none
export SMS_PROVIDER="${SMS_PROVIDER:-log}"

say() { printf '\033[1m%s\033[0m\n' "$*"; }

busy=()
for addr in "$HTTP_ADDR" "$METRICS_ADDR" "$MAILCATCHER_SMTP_ADDR" "$MAILCATCHER_HTTP_ADDR"; do
  if (exec 3<>"/dev/tcp/${addr%:*}/${addr##*:}") 2>/dev/null; then busy+=("$addr"); fi
done
if [ ${#busy[@]} -gt 0 ]; then
  echo "run: already in use: ${busy[*]} (another make run? set HTTP_ADDR / METRICS_ADDR / MAILCATCHER_*_ADDR)" >&2
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

cat <<EOF2

  msgpulse is running. Send yourself a verification code:

    curl -s -X POST http://$HTTP_ADDR/api/verification-codes \\
      -H 'Content-Type: application/json' -H 'X-API-Key: $DEV_KEY' \\
      -d '{"channel":"email","recipient":"you@example.com","purpose":"login"}'

  The email prints below and shows at http://$MAILCATCHER_HTTP_ADDR
  Status:  curl -s -H 'X-API-Key: $DEV_KEY' http://$HTTP_ADDR/api/messages/<taskId>
  Queues:  curl -s -H 'X-API-Key: $DEV_KEY' http://$HTTP_ADDR/api/queues/stats
  Console: http://$HTTP_ADDR/console (log in with the key $DEV_KEY)
  SMS go to the consumer's log (SMS_PROVIDER=log): $RUN_DIR/consumer.log
  Ctrl-C stops everything.

EOF2
wait -n "${pids[@]}"
echo "run: a process exited; see $RUN_DIR/*.log" >&2
exit 1
