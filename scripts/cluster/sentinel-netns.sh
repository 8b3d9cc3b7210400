#!/usr/bin/env bash
# A Redis Sentinel set whose members can be cut off, for the partition
# scenarios (issue 46): three namespaces (scripts/cluster/netns.sh), d1 to
# d3 at 10.246.0.21-23, each with a data node on 6379 and a Sentinel on
# 26379. d1's node starts as the master; the others replicate it. Every
# data node refuses writes while no replica has acknowledged within 3 s
# (min-replicas-to-write 1, min-replicas-max-lag 3), as shipped
# (docs/cluster.md, "Redis durability"). Data under
# $MSGPULSE_CLUSTER_DIR/sentinel-netns.
#
#   sentinel-netns.sh start       start the set and wait until the Sentinels see each other
#   sentinel-netns.sh stop        stop it and delete its namespaces
#   sentinel-netns.sh master      print the master's address as the Sentinels on d2 see it
#   sentinel-netns.sh url         the REDIS_URL of the set (REDIS_MODE=sentinel), d1's Sentinel first
#
# Cut the master and its Sentinel off with `netns.sh partition d1`.
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
DIR=${MSGPULSE_CLUSTER_DIR:-/tmp/msgpulse-cluster}/sentinel-netns
NODES=(d1 d2 d3)
ip_of() { echo "10.246.0.2${1#d}"; }

# shellcheck source=redisconf.sh
. "$HERE/redisconf.sh"
conf() { local name=$1 port=$2; shift 2; redis_conf "$DIR/$name-$port" "$(ip_of "$name")" "$port" "$@"; }

cli() { local name=$1 port=$2; shift 2; redis-cli -h "$(ip_of "$name")" -p "$port" "$@"; }

start() {
  stop >/dev/null 2>&1 || true
  "$HERE/netns.sh" up d1=21 d2=22 d3=23
  mkdir -p "$DIR"
  local n c
  for n in "${NODES[@]}"; do
    local extra=("min-replicas-to-write 1" "min-replicas-max-lag 3")
    [[ $n == d1 ]] || extra+=("replicaof $(ip_of d1) 6379")
    c=$(conf "$n" 6379 "${extra[@]}")
    "$HERE/netns.sh" exec "$n" redis-server "$c"
  done
  local deadline=$((SECONDS + 30))
  until [[ $(cli d1 6379 info replication 2>/dev/null | grep -c 'state=online') -eq 2 ]]; do
    ((SECONDS < deadline)) || { echo "sentinel-netns.sh: the replicas did not sync" >&2; exit 1; }
    sleep 0.2
  done
  for n in "${NODES[@]}"; do
    c=$(conf "$n" 26379 "sentinel monitor msgpulse $(ip_of d1) 6379 2" "sentinel down-after-milliseconds msgpulse 1000" \
      "sentinel failover-timeout msgpulse 5000" "sentinel parallel-syncs msgpulse 1" "sentinel announce-ip $(ip_of "$n")")
    "$HERE/netns.sh" exec "$n" redis-server "$c" --sentinel
  done
  until [[ $(cli d2 26379 sentinel master msgpulse 2>/dev/null | grep -A1 '^num-other-sentinels$' | tail -1) == 2 ]]; do
    ((SECONDS < deadline)) || { echo "sentinel-netns.sh: the sentinels did not see each other" >&2; exit 1; }
    sleep 0.2
  done
  echo "sentinel set up: $(url)"
}

master() { cli d2 26379 sentinel get-master-addr-by-name msgpulse | head -1; }

url() { echo "redis://$(ip_of d1):26379?addr=$(ip_of d2):26379&addr=$(ip_of d3):26379&master_name=msgpulse"; }

case ${1:-} in
  start) start ;;
  stop) stop ;;
  master) master ;;
  url) url ;;
  *) echo "usage: $0 start|stop|master|url" >&2; exit 2 ;;
esac
