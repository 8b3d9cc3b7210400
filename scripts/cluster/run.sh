#!/usr/bin/env bash
# make test-cluster: start a private 3-node RabbitMQ cluster, a Redis
# Cluster and a Sentinel set (scripts/cluster/rabbitmq.sh, redis.sh), run
# the cluster scenarios and the Redis integration tests against them, and
# tear everything down, also when a test fails or the run is interrupted.
set -euo pipefail
cd "$(dirname "$0")/../.."
HERE=scripts/cluster
export MSGPULSE_CLUSTER_DIR=${MSGPULSE_CLUSTER_DIR:-/tmp/msgpulse-cluster}
GO=${GO:-go}
TIMEOUT=${TEST_TIMEOUT:-15m}

cleanup() {
  local rc=$?
  "$HERE/rabbitmq.sh" stop >/dev/null 2>&1 || true
  "$HERE/redis.sh" stop >/dev/null 2>&1 || true
  rmdir "$MSGPULSE_CLUSTER_DIR" 2>/dev/null || true
  exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

start=$SECONDS
"$HERE/redis.sh" start &
redis_pid=$!
"$HERE/rabbitmq.sh" start
wait $redis_pid
echo "engines up in $((SECONDS - start))s"

export MSGPULSE_CLUSTER=1
export TEST_AMQP_URL=amqp://guest:guest@127.0.0.1:5682/,amqp://guest:guest@127.0.0.1:5683/,amqp://guest:guest@127.0.0.1:5684/
export TEST_RABBITMQ_MANAGEMENT_URL=http://guest:guest@127.0.0.1:15682,http://guest:guest@127.0.0.1:15683,http://guest:guest@127.0.0.1:15684
export TEST_REDIS_MODE=cluster
export TEST_REDIS_URL='redis://127.0.0.1:7101?addr=127.0.0.1:7102&addr=127.0.0.1:7103&addr=127.0.0.1:7104&addr=127.0.0.1:7105&addr=127.0.0.1:7106'
export MSGPULSE_SENTINEL_URL='redis://127.0.0.1:27201?addr=127.0.0.1:27202&addr=127.0.0.1:27203&master_name=msgpulse'

# The Redis integration tests, on the Redis Cluster (and the RabbitMQ
# cluster where they need a broker).
$GO test -race -count=1 -timeout "$TIMEOUT" ./internal/rdb/ ./internal/ratelimit/ ./internal/verify/ ./internal/claim/ ./internal/status/ ./internal/dispatch/ ./internal/api/

# The scenarios, one at a time, in file order: they print FAULT lines.
set -o pipefail
$GO test -race -count=1 -p 1 -v -timeout "$TIMEOUT" -run 'TestCluster' ./internal/fault/ 2>&1 |
  grep -E '^(FAULT |--- |ok |FAIL|panic:|\s+(Error|Messages):)' || { echo "cluster scenarios failed (rerun: make test-cluster)"; exit 1; }
echo "make test-cluster took $((SECONDS - start))s"
