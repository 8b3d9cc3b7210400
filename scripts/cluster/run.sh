#!/usr/bin/env bash
# make test-cluster: start a private 3-node RabbitMQ cluster, a Redis
# Cluster and a Sentinel set (scripts/cluster/rabbitmq.sh, redis.sh), run
# the cluster scenarios and the Redis integration tests against them, and
# tear everything down, also when a test fails or the run is interrupted.
#
#   run.sh             RabbitMQ 3.10 (the host's package): the Redis tests and the scenarios
#   run.sh rabbitmq4   RabbitMQ 4 (scripts/rabbitmq4.sh cluster; SUITE=sid for sid's): the scenarios
set -euo pipefail
cd "$(dirname "$0")/../.."
HERE=scripts/cluster
export MSGPULSE_CLUSTER_DIR=${MSGPULSE_CLUSTER_DIR:-/tmp/msgpulse-cluster}
GO=${GO:-go}
TIMEOUT=${TEST_TIMEOUT:-15m}

case ${1:-rabbitmq3} in
  rabbitmq3)
    RABBITMQ=("$HERE/rabbitmq.sh") AMQP_PORTS=(5682 5683 5684) MGMT_PORTS=(15682 15683 15684) ;;
  rabbitmq4)
    # The scenarios kill and revive its nodes through the same command.
    RABBITMQ=("$PWD/scripts/rabbitmq4.sh" cluster) AMQP_PORTS=(5692 5693 5694) MGMT_PORTS=(15702 15703 15704)
    export MSGPULSE_CLUSTER_RABBITMQ="${RABBITMQ[*]}" ;;
  *) echo "usage: $0 [rabbitmq3|rabbitmq4]" >&2; exit 2 ;;
esac
VERSION=${1:-rabbitmq3}

cleanup() {
  local rc=$?
  "${RABBITMQ[@]}" stop >/dev/null 2>&1 || true
  "$HERE/redis.sh" stop >/dev/null 2>&1 || true
  rmdir "$MSGPULSE_CLUSTER_DIR" 2>/dev/null || true
  exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

start=$SECONDS
"$HERE/redis.sh" start &
redis_pid=$!
"${RABBITMQ[@]}" start
wait $redis_pid
echo "engines up in $((SECONDS - start))s"

export MSGPULSE_CLUSTER=1
TEST_AMQP_URL=$(printf 'amqp://guest:guest@127.0.0.1:%s/,' "${AMQP_PORTS[@]}")
TEST_RABBITMQ_MANAGEMENT_URL=$(printf 'http://guest:guest@127.0.0.1:%s,' "${MGMT_PORTS[@]}")
export TEST_AMQP_URL=${TEST_AMQP_URL%,} TEST_RABBITMQ_MANAGEMENT_URL=${TEST_RABBITMQ_MANAGEMENT_URL%,}
export TEST_REDIS_MODE=cluster
export TEST_REDIS_URL='redis://127.0.0.1:7101?addr=127.0.0.1:7102&addr=127.0.0.1:7103&addr=127.0.0.1:7104&addr=127.0.0.1:7105&addr=127.0.0.1:7106&addr=127.0.0.1:7107&addr=127.0.0.1:7108&addr=127.0.0.1:7109'
export MSGPULSE_SENTINEL_URL='redis://127.0.0.1:27201?addr=127.0.0.1:27202&addr=127.0.0.1:27203&master_name=msgpulse'

# The Redis integration tests, on the Redis Cluster (and the RabbitMQ
# cluster where they need a broker). They are about Redis: one RabbitMQ
# version runs them.
if [[ $VERSION == rabbitmq3 ]]; then
  $GO test -race -count=1 -timeout "$TIMEOUT" ./internal/rdb/ ./internal/ratelimit/ ./internal/verify/ ./internal/claim/ ./internal/status/ ./internal/dispatch/ ./internal/api/
fi

# The scenarios, one at a time, in file order: they print FAULT lines.
set -o pipefail
$GO test -race -count=1 -p 1 -v -timeout "$TIMEOUT" -run 'TestCluster' ./internal/fault/ 2>&1 |
  grep -E '^(FAULT |--- |ok |FAIL|panic:|\s+(Error|Messages):)|redis log ' || { echo "cluster scenarios failed (rerun: $0 $VERSION)"; exit 1; }
echo "cluster scenarios ($VERSION) took $((SECONDS - start))s"
