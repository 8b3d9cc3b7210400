# Sourced by scripts/run.sh (`make run`): the settings of the local system,
# each overridable from the environment, and the banner that tells a
# newcomer how to use it. internal/e2e's TestMakeRunBannerLogsInToTheConsole
# sources it too, and logs in to the console with what the banner prints.

export LOG_FORMAT="${LOG_FORMAT:-console}"
export AMQP_URL="${AMQP_URL:-amqp://guest:guest@127.0.0.1:5672/}"
export REDIS_URL="${REDIS_URL:-redis://127.0.0.1:6379/0}"
export RABBITMQ_MANAGEMENT_URL="${RABBITMQ_MANAGEMENT_URL:-http://guest:guest@127.0.0.1:15672}"
DEV_KEY_NAME="${DEV_API_KEY_NAME:-dev}"
DEV_KEY="${DEV_API_KEY:-dev-key-change-me-0123456789}"
# admin must be written (a key without scopes is send+read): the dev key
# also opens the queue stats and the console.
export API_KEYS="${API_KEYS:-$DEV_KEY_NAME:$DEV_KEY:send+read+admin}"
# Callbacks are signed per tenant; without a secret a callbackUrl is refused.
export CALLBACK_SECRET="${CALLBACK_SECRET:-dev-callback-secret-change-me}"
export HTTP_ADDR="${HTTP_ADDR:-127.0.0.1:8080}"
# What comes back after sent (docs/bounces.md, docs/bulk-mail.md): mail
# leaves with a signed VERP return path at a local bounce domain, whose
# receiver listens on BOUNCE_SMTP_ADDR (a bounce can be tried by hand with
# curl, docs/bounces.md), and notices carry a one-click unsubscribe link to
# this API (http is accepted on loopback only).
export RECEIPT_SECRET="${RECEIPT_SECRET:-dev-receipt-secret-change-me-0123456789}"
export PUBLIC_BASE_URL="${PUBLIC_BASE_URL:-http://$HTTP_ADDR}"
export MAIL_BOUNCE_DOMAIN="${MAIL_BOUNCE_DOMAIN:-bounce.localhost}"
export BOUNCE_SMTP_ADDR="${BOUNCE_SMTP_ADDR:-127.0.0.1:2525}"
export METRICS_ADDR="${METRICS_ADDR:-127.0.0.1:9090}"
export MAILCATCHER_SMTP_ADDR="${MAILCATCHER_SMTP_ADDR:-127.0.0.1:1025}"
export MAILCATCHER_HTTP_ADDR="${MAILCATCHER_HTTP_ADDR:-127.0.0.1:8025}"
export SMTP_HOST="${MAILCATCHER_SMTP_ADDR%:*}" SMTP_PORT="${MAILCATCHER_SMTP_ADDR##*:}" SMTP_TLS=none
export SMS_PROVIDER="${SMS_PROVIDER:-log}"
RUN_DIR="${RUN_DIR:-.run}"

# key_with SCOPE sets KEY_NAME and KEY to the first key of API_KEYS that
# has SCOPE, read as the API reads API_KEYS: name:key or name:key:scopes
# (send, read, admin joined by +; none: send+read); a key given as
# sha256=HEX has no key to show. Returns 1 when there is none.
key_with() {
  local entry rest scopes
  local IFS=,
  for entry in $API_KEYS; do
    entry="${entry#"${entry%%[![:space:]]*}"}"
    entry="${entry%"${entry##*[![:space:]]}"}"
    if [[ $entry == *:* ]]; then
      KEY_NAME=${entry%%:*} rest=${entry#*:}
    else
      KEY_NAME=key rest=$entry
    fi
    scopes=send+read
    if [[ $entry == *:*:* && ${rest##*:} =~ ^[a-z+]+$ ]]; then
      scopes=${rest##*:} rest=${rest%:*}
    fi
    [[ "+$scopes+" == *"+$1+"* ]] || continue
    KEY=$rest
    [[ ${KEY,,} == sha256=* ]] && KEY="(the key whose SHA-256 API_KEYS holds)"
    return 0
  done
  return 1
}

# banner prints how to use the running system: a code to send, where it
# shows, and everything the console's login form asks for.
banner() {
  local console send=$DEV_KEY admin=$DEV_KEY
  key_with send && send=$KEY
  if key_with admin; then
    admin=$KEY
    console="http://$HTTP_ADDR/console
           key name: $KEY_NAME
           key:      $KEY"
  else
    console="http://$HTTP_ADDR/console (needs a key with the admin scope: none in API_KEYS)"
  fi
  cat <<EOF2

  msgpulse is running. Send yourself a verification code:

    curl -s -X POST http://$HTTP_ADDR/api/verification-codes \\
      -H 'Content-Type: application/json' -H 'X-API-Key: $send' \\
      -d '{"channel":"email","recipient":"you@example.com","purpose":"login"}'

  The email prints below and shows at http://$MAILCATCHER_HTTP_ADDR
  Status:  curl -s -H 'X-API-Key: $send' http://$HTTP_ADDR/api/messages/<taskId>
  Queues:  curl -s -H 'X-API-Key: $admin' http://$HTTP_ADDR/api/queues/stats
  Console: $console
  SMS go to the consumer's log (SMS_PROVIDER=log): $RUN_DIR/consumer.log
  Ctrl-C stops everything.

EOF2
}
