#!/usr/bin/env bash
# A Redis Cluster whose members can be cut off, for the partition
# scenarios (issue 46): nine namespaces (scripts/cluster/netns.sh), rc1 to
# rc9 at 10.246.0.31-39 (r1 to r3 are the RabbitMQ nodes'), each with a
# cluster node on 6379; three masters with two replicas each. Every node
# refuses writes while no replica has acknowledged within 3 s
# (min-replicas-to-write 1, min-replicas-max-lag 3), as shipped
# (docs/cluster.md, "Redis durability"), and a node that cannot reach the
# majority of masters for cluster-node-timeout (2 s here) stops serving.
# Data under $MSGPULSE_CLUSTER_DIR/rediscluster-netns.
#
#   rediscluster-netns.sh start          start the nodes, create the cluster, wait until it is ok
#   rediscluster-netns.sh stop           stop it and delete its namespaces
#   rediscluster-netns.sh url            the REDIS_URL of the cluster (REDIS_MODE=cluster)
#   rediscluster-netns.sh master         the name (rc1..rc9) of the master of slot 0
#   rediscluster-netns.sh owner FROM     the address of slot 0's master as node FROM sees it
#
# Cut a master off from the rest with `netns.sh partition NAME`.
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
DIR=${MSGPULSE_CLUSTER_DIR:-/tmp/msgpulse-cluster}/rediscluster-netns
NODES=(rc1 rc2 rc3 rc4 rc5 rc6 rc7 rc8 rc9)
ip_of() { echo "10.246.0.3${1#rc}"; }
# shellcheck source=redisconf.sh
. "$HERE/redisconf.sh"

start() {
  stop >/dev/null 2>&1 || true
  local specs=() n
  for n in "${NODES[@]}"; do specs+=("$n=3${n#rc}"); done
  "$HERE/netns.sh" up "${specs[@]}"
  mkdir -p "$DIR"
  for n in "${NODES[@]}"; do
    local c
    c=$(redis_conf "$DIR/$n" "$(ip_of "$n")" 6379 "cluster-enabled yes" "cluster-config-file $DIR/$n/nodes.conf" \
      "cluster-node-timeout 2000" "min-replicas-to-write 1" "min-replicas-max-lag 3")
    "$HERE/netns.sh" exec "$n" redis-server "$c"
  done
  local deadline=$((SECONDS + 30)) hosts=()
  for n in "${NODES[@]}"; do
    until redis-cli -h "$(ip_of "$n")" ping 2>/dev/null | grep -q PONG; do
      ((SECONDS < deadline)) || { echo "rediscluster-netns.sh: $n does not answer" >&2; exit 1; }
      sleep 0.1
    done
    hosts+=("$(ip_of "$n"):6379")
  done
  redis-cli --cluster create "${hosts[@]}" --cluster-replicas 2 --cluster-yes >"$DIR/create.log" 2>&1 ||
    { cat "$DIR/create.log" >&2; exit 1; }
  until [[ $(redis-cli -h "$(ip_of rc1)" cluster info 2>/dev/null | tr -d '\r' | grep -c '^cluster_state:ok') -eq 1 ]] && all_replicated; do
    ((SECONDS < deadline + 30)) || { echo "rediscluster-netns.sh: the cluster did not become ok" >&2; exit 1; }
    sleep 0.2
  done
  echo "redis cluster up: $(url)"
}

# all_replicated: every master counts two replicas online, so that it
# takes writes (min-replicas-to-write).
all_replicated() {
  local n
  for n in "${NODES[@]}"; do
    if redis-cli -h "$(ip_of "$n")" role 2>/dev/null | head -1 | grep -q master &&
       [[ $(redis-cli -h "$(ip_of "$n")" info replication | grep -c 'state=online') -lt 2 ]]; then
      return 1
    fi
  done
}

url() {
  local q="redis://$(ip_of rc1):6379?" n
  for n in "${NODES[@]:1}"; do q+="addr=$(ip_of "$n"):6379&"; done
  echo "${q%&}"
}

# owner FROM: slot 0's master address as node FROM's cluster view has it.
owner() {
  redis-cli -h "$(ip_of "$1")" cluster nodes | awk '$3 ~ /master/ && $3 !~ /fail/ { for (i = 9; i <= NF; i++) { split($i, r, "-"); if (r[1] == 0 || (r[1] <= 0 && r[2] >= 0)) { split($2, a, "@"); print a[1] } } }' | head -1
}

master() {
  local addr n
  addr=$(owner rc1)
  for n in "${NODES[@]}"; do
    [[ $addr == "$(ip_of "$n"):6379" ]] && { echo "$n"; return; }
  done
  echo "rediscluster-netns.sh: no master of slot 0" >&2
  exit 1
}

case ${1:-} in
  start) start ;;
  stop) stop ;;
  url) url ;;
  master) master ;;
  owner) owner "$2" ;;
  *) echo "usage: $0 start|stop|url|master|owner FROM" >&2; exit 2 ;;
esac
