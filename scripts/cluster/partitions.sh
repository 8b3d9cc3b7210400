#!/usr/bin/env bash
# make test-partitions: the partition scenarios (internal/fault,
# TestPartition*) on a 3-node RabbitMQ cluster whose nodes run in network
# namespaces of their own (scripts/cluster/netns.sh), so that one node can
# be cut off from the others while this machine's processes still reach
# it. Each broker version in turn; everything is torn down on exit, also
# when a test fails or the run is interrupted. With 3.10.8 it also starts a
# Sentinel set in namespaces of its own (scripts/cluster/sentinel-netns.sh)
# and a Redis Cluster (scripts/cluster/rediscluster-netns.sh) for
# partition-redis-master (MSGPULSE_PARTITIONS_REDIS=0 leaves them out).
#
#   partitions.sh              RabbitMQ 3.10.8 (the host's package), then 4.0.5 (scripts/rabbitmq4.sh)
#   partitions.sh rabbitmq3    only 3.10.8
#   partitions.sh rabbitmq4    only 4.0.5
#
# Needs root (namespaces, iptables); iptables is installed from Debian's
# packages when missing.
set -euo pipefail
cd "$(dirname "$0")/../.."
HERE=$PWD/scripts/cluster
export MSGPULSE_NETNS=1 MSGPULSE_CLUSTER_DIR=${MSGPULSE_PARTITIONS_DIR:-/tmp/msgpulse-partitions}
GO=${GO:-go}
TIMEOUT=${TEST_TIMEOUT:-15m}
VERSIONS=("$@")
((${#VERSIONS[@]})) || VERSIONS=(rabbitmq3 rabbitmq4)

RABBITMQ=()
cleanup() {
  local rc=$?
  if ((${#RABBITMQ[@]})); then "${RABBITMQ[@]}" stop >/dev/null 2>&1 || true; fi
  "$HERE/sentinel-netns.sh" stop >/dev/null 2>&1 || true
  "$HERE/rediscluster-netns.sh" stop >/dev/null 2>&1 || true
  "$HERE/netns.sh" down >/dev/null 2>&1 || true
  rmdir "$MSGPULSE_CLUSTER_DIR" 2>/dev/null || true
  exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

failed=()
for v in "${VERSIONS[@]}"; do
  case $v in
    rabbitmq3) RABBITMQ=("$HERE/rabbitmq.sh") PORTS=(5682 5683 5684) MGMT=(15682 15683 15684); unset MSGPULSE_CLUSTER_RABBITMQ ;;
    rabbitmq4) RABBITMQ=("$PWD/scripts/rabbitmq4.sh" cluster) PORTS=(5692 5693 5694) MGMT=(15702 15703 15704)
      export MSGPULSE_CLUSTER_RABBITMQ="${RABBITMQ[*]}" ;;
    *) echo "usage: $0 [rabbitmq3|rabbitmq4]..." >&2; exit 2 ;;
  esac
  start=$SECONDS
  "${RABBITMQ[@]}" start
  # The Redis scenario is about Redis: one broker version runs it.
  unset MSGPULSE_PARTITION_SENTINEL_URL MSGPULSE_PARTITION_REDIS_CLUSTER_URL
  if [[ $v == rabbitmq3 && ${MSGPULSE_PARTITIONS_REDIS:-1} == 1 ]]; then
    "$HERE/sentinel-netns.sh" start
    "$HERE/rediscluster-netns.sh" start
    export MSGPULSE_PARTITION_SENTINEL_URL MSGPULSE_PARTITION_REDIS_CLUSTER_URL
    MSGPULSE_PARTITION_SENTINEL_URL=$("$HERE/sentinel-netns.sh" url)
    MSGPULSE_PARTITION_REDIS_CLUSTER_URL=$("$HERE/rediscluster-netns.sh" url)
  fi
  amqp= mgmt=
  for i in 0 1 2; do
    amqp+="amqp://guest:guest@10.246.0.1$((i + 1)):${PORTS[$i]}/,"
    mgmt+="http://guest:guest@10.246.0.1$((i + 1)):${MGMT[$i]},"
  done
  export TEST_AMQP_URL=${amqp%,} TEST_RABBITMQ_MANAGEMENT_URL=${mgmt%,} MSGPULSE_PARTITIONS=1
  if ! $GO test -race -count=1 -p 1 -v -timeout "$TIMEOUT" -run 'TestPartition' ./internal/fault/ 2>&1 |
      grep -E '^(FAULT |--- |ok |FAIL|panic:|\s+(Error|Messages):|\s+[a-z_]+_test\.go:[0-9]+: )'; then
    failed+=("$v")
  fi
  "${RABBITMQ[@]}" stop >/dev/null 2>&1 || true
  "$HERE/sentinel-netns.sh" stop >/dev/null 2>&1 || true
  "$HERE/rediscluster-netns.sh" stop >/dev/null 2>&1 || true
  RABBITMQ=()
  echo "partition scenarios ($v) took $((SECONDS - start))s"
done
if ((${#failed[@]})); then echo "partition scenarios failed on: ${failed[*]} (rerun: $0 ${failed[*]})"; exit 1; fi
