#!/usr/bin/env bash
# Private Redis deployments on loopback for `make test-cluster`, never the
# shared Redis on 6379, all under $MSGPULSE_CLUSTER_DIR/redis (default
# /tmp/msgpulse-cluster/redis):
#   - a Redis Cluster of 3 masters with two replicas each, ports 7101-7109;
#   - a Sentinel set: master 7201, replicas 7202 and 7203, sentinels
#     27201-27203, watching the master under the name "msgpulse".
#
# Every data node refuses writes while no replica has acknowledged within
# 3 s (min-replicas-to-write 1, min-replicas-max-lag 3; docs/cluster.md,
# "Redis durability"): a master cut off from its replicas stops taking
# writes that a failover would discard. Hence two replicas per master: a
# master that dies leaves its successor one replica, so it keeps taking
# writes until the dead one is replaced.
#
#   redis.sh start         start both and wait until they are ready
#   redis.sh stop          stop everything it started, remove the data
#   redis.sh pid PORT      the pid of the server on PORT
set -euo pipefail

DIR=${MSGPULSE_CLUSTER_DIR:-/tmp/msgpulse-cluster}/redis
CLUSTER_PORTS=(7101 7102 7103 7104 7105 7106 7107 7108 7109)
SENTINEL_DATA_PORTS=(7201 7202 7203)
# Three missed one-second replica ACKs: a slow moment on the machine is
# not a refusal, and a silent replica is found within 3 s (the fence,
# REDIS_WAIT_REPLICAS, covers the writes msgpulse promises before that).
DURABLE=("min-replicas-to-write 1" "min-replicas-max-lag 3")
SENTINEL_PORTS=(27201 27202 27203)

server() { # port, extra config lines...
  local port=$1; shift
  mkdir -p "$DIR/$port"
  {
    echo "port $port"
    echo "bind 127.0.0.1"
    echo "dir $DIR/$port"
    echo "pidfile $DIR/$port/pid"
    echo "logfile $DIR/$port/log"
    echo "daemonize yes"
    echo "save \"\""
    echo "appendonly no"
    printf '%s\n' "$@"
  } >"$DIR/$port/redis.conf"
}

wait_ping() {
  local deadline=$((SECONDS + 20))
  until redis-cli -p "$1" ping 2>/dev/null | grep -q PONG; do
    if ((SECONDS > deadline)); then echo "redis.sh: nothing answers on $1; see $DIR/$1/log" >&2; exit 1; fi
    sleep 0.1
  done
}

start() {
  if [[ -e $DIR ]]; then stop >/dev/null 2>&1 || true; fi
  mkdir -p "$DIR"
  for p in "${CLUSTER_PORTS[@]}"; do
    # A short node timeout makes a replica take over within seconds.
    server "$p" "cluster-enabled yes" "cluster-config-file $DIR/$p/nodes.conf" "cluster-node-timeout 2000" "${DURABLE[@]}"
    redis-server "$DIR/$p/redis.conf"
  done
  server 7201 "${DURABLE[@]}"
  server 7202 "replicaof 127.0.0.1 7201" "${DURABLE[@]}"
  server 7203 "replicaof 127.0.0.1 7201" "${DURABLE[@]}"
  for p in "${SENTINEL_DATA_PORTS[@]}"; do redis-server "$DIR/$p/redis.conf"; done
  for p in "${CLUSTER_PORTS[@]}" "${SENTINEL_DATA_PORTS[@]}"; do wait_ping "$p"; done
  for p in "${SENTINEL_PORTS[@]}"; do
    server "$p" "sentinel monitor msgpulse 127.0.0.1 7201 2" "sentinel down-after-milliseconds msgpulse 1000" \
      "sentinel failover-timeout msgpulse 5000" "sentinel parallel-syncs msgpulse 1"
    redis-server "$DIR/$p/redis.conf" --sentinel
  done
  local hosts=()
  for p in "${CLUSTER_PORTS[@]}"; do hosts+=("127.0.0.1:$p"); done
  redis-cli --cluster create "${hosts[@]}" --cluster-replicas 2 --cluster-yes >"$DIR/create.log" 2>&1 ||
    { cat "$DIR/create.log" >&2; exit 1; }
  local deadline=$((SECONDS + 30))
  until redis-cli -p 7101 cluster info | grep -q 'cluster_state:ok' &&
        [[ $(redis-cli -p 7101 cluster nodes | grep -c slave) -eq 6 ]] && masters_have_replicas; do
    if ((SECONDS > deadline)); then echo "redis.sh: the cluster did not become ok" >&2; redis-cli -p 7101 cluster info >&2; exit 1; fi
    sleep 0.2
  done
  for p in "${SENTINEL_PORTS[@]}"; do wait_ping "$p"; done
  until [[ $(redis-cli -p 27201 sentinel master msgpulse 2>/dev/null | grep -A1 '^num-other-sentinels$' | tail -1) == 2 ]] &&
        [[ $(redis-cli -p 7201 info replication | grep -c 'state=online') -eq 2 ]]; do
    if ((SECONDS > deadline)); then echo "redis.sh: the sentinels did not see each other" >&2; exit 1; fi
    sleep 0.2
  done
  echo "redis cluster up: redis://127.0.0.1:7101?addr=127.0.0.1:7102&addr=127.0.0.1:7103; sentinel: redis://127.0.0.1:27201?addr=127.0.0.1:27202&addr=127.0.0.1:27203&master_name=msgpulse"
}

# masters_have_replicas: every cluster master counts two replicas online,
# so that it takes writes (min-replicas-to-write).
masters_have_replicas() {
  local p
  for p in "${CLUSTER_PORTS[@]}"; do
    if redis-cli -p "$p" role 2>/dev/null | head -1 | grep -q master &&
       [[ $(redis-cli -p "$p" info replication | grep -c 'state=online') -lt 2 ]]; then
      return 1
    fi
  done
}

pid_of() { cat "$DIR/$1/pid" 2>/dev/null || true; }

stop() {
  local pids=()
  for p in "${CLUSTER_PORTS[@]}" "${SENTINEL_DATA_PORTS[@]}" "${SENTINEL_PORTS[@]}"; do
    local pid; pid=$(pid_of "$p")
    [[ -n $pid ]] && pids+=("$pid")
  done
  for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  local deadline=$((SECONDS + 10))
  for pid in "${pids[@]}"; do
    while kill -0 "$pid" 2>/dev/null && ((SECONDS < deadline)); do sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null || true
  done
  rm -rf "$DIR"
}

case ${1:-} in
  start) start ;;
  stop) stop ;;
  pid) pid_of "$2" ;;
  *) echo "usage: $0 start|stop|pid PORT" >&2; exit 2 ;;
esac
