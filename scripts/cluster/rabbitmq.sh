#!/usr/bin/env bash
# A private 3-node RabbitMQ cluster on loopback, without Docker, for
# `make test-cluster`. It never touches the shared broker: its own node
# names (mpc1..3@localhost), ports (AMQP 5682-5684, management 15682-15684,
# distribution 25682-25684), epmd (port 4382), Erlang cookie and data, all
# under $MSGPULSE_CLUSTER_DIR (default /tmp/msgpulse-cluster/rabbitmq).
#
#   rabbitmq.sh start          start the three nodes and wait until they form one cluster
#   rabbitmq.sh stop           stop them (SIGKILL what does not stop), remove the data
#   rabbitmq.sh kill N         SIGKILL node N (1..3), as a crash would
#   rabbitmq.sh revive N       start node N again on its data (after kill), wait until it runs
#   rabbitmq.sh pid N          print node N's OS pid
#   rabbitmq.sh ctl N ARGS...  rabbitmqctl against node N
#   rabbitmq.sh partition N    cut node N off from the other two (MSGPULSE_NETNS=1 only)
#   rabbitmq.sh heal           undo every cut
#
# With MSGPULSE_NETNS=1 each node runs in a network namespace of its own
# (scripts/cluster/netns.sh, which this starts and stops): node N at
# 10.246.0.1N, named mpcN@10.246.0.1N (long names), on the same ports, so
# that one node can be cut off from the others and still be reached from
# here (netns.sh partition rN / heal).
set -euo pipefail

BIN=${RABBITMQ_BIN:-/usr/lib/rabbitmq/bin}
DIR=${MSGPULSE_CLUSTER_DIR:-/tmp/msgpulse-cluster}/rabbitmq
NETNS=${MSGPULSE_NETNS:-0}
NETNS_SH=$(cd "$(dirname "$0")" && pwd)/netns.sh
export ERL_EPMD_PORT=4382
# rabbitmqctl and the nodes read the cookie from $HOME/.erlang.cookie.
export HOME=$DIR/home
NODES=(1 2 3)

# host N is node N's address, and inns (with MSGPULSE_NETNS) runs a
# command in node N's namespace.
host() { if [[ $NETNS == 1 ]]; then echo "10.246.0.1$1"; else echo 127.0.0.1; fi; }
nodename() { if [[ $NETNS == 1 ]]; then echo "mpc$1@$(host "$1")"; else echo "mpc$1@localhost"; fi; }
inns() {
  local n=$1; shift
  if [[ $NETNS == 1 ]]; then "$NETNS_SH" exec "r$n" "$@"; else "$@"; fi
}
# exec_in is inns replacing the shell (a node's subshell must not stay
# behind as its parent).
exec_in() {
  local n=$1; shift
  if [[ $NETNS == 1 ]]; then exec "$NETNS_SH" exec "r$n" "$@"; else exec "$@"; fi
}

node_env() {
  local n=$1
  export RABBITMQ_NODENAME; RABBITMQ_NODENAME=$(nodename "$n")
  if [[ $NETNS == 1 ]]; then export RABBITMQ_USE_LONGNAME=true ERL_EPMD_ADDRESS=$(host "$n"); else export ERL_EPMD_ADDRESS=127.0.0.1; fi
  export RABBITMQ_NODE_IP_ADDRESS; RABBITMQ_NODE_IP_ADDRESS=$(host "$n")
  export RABBITMQ_NODE_PORT=$((5681 + n))
  export RABBITMQ_DIST_PORT=$((25681 + n))
  export RABBITMQ_MNESIA_BASE=$DIR/node$n/mnesia
  export RABBITMQ_LOG_BASE=$DIR/node$n/log
  export RABBITMQ_PID_FILE=$DIR/node$n/pid
  export RABBITMQ_CONFIG_FILE=$DIR/node$n/rabbitmq.conf
  export RABBITMQ_ADVANCED_CONFIG_FILE=$DIR/node$n/advanced.config
  export RABBITMQ_ENABLED_PLUGINS_FILE=$DIR/node$n/enabled_plugins
  export RABBITMQ_CONF_ENV_FILE=$DIR/node$n/rabbitmq-env.conf
  unset RABBITMQ_FEATURE_FLAGS; export RABBITMQ_ALLOW_INPUT=
  export ERL_FLAGS; ERL_FLAGS="-kernel inet_dist_use_interface {$(host "$n" | tr . ,)}"
}

ctl() {
  local n=$1; shift
  node_env "$n"
  inns "$n" "$BIN/rabbitmqctl" -n "$(nodename "$n")" "$@"
}

start() {
  if [[ -e $DIR ]]; then stop >/dev/null 2>&1 || true; fi
  if [[ $NETNS == 1 ]]; then "$NETNS_SH" up r1=11 r2=12 r3=13; fi
  mkdir -p "$HOME"
  # A private cookie: no other Erlang node on this machine can join.
  head -c 24 /dev/urandom | base64 | tr -dc 'A-Za-z0-9' >"$HOME/.erlang.cookie"
  chmod 400 "$HOME/.erlang.cookie"
  for n in "${NODES[@]}"; do
    mkdir -p "$DIR/node$n/mnesia" "$DIR/node$n/log"
    echo '[rabbitmq_management].' >"$DIR/node$n/enabled_plugins"
    echo '[].' >"$DIR/node$n/advanced.config"
    : >"$DIR/node$n/rabbitmq-env.conf"
    cat >"$DIR/node$n/rabbitmq.conf" <<CONF
listeners.tcp.default = $(host "$n"):$((5681 + n))
management.tcp.port = $((15681 + n))
management.tcp.ip = $(host "$n")
loopback_users = none
cluster_formation.peer_discovery_backend = classic_config
cluster_formation.classic_config.nodes.1 = $(nodename 1)
cluster_formation.classic_config.nodes.2 = $(nodename 2)
cluster_formation.classic_config.nodes.3 = $(nodename 3)
cluster_name = msgpulse-test
cluster_partition_handling = pause_minority
vm_memory_high_watermark.relative = 0.2
disk_free_limit.absolute = 50MB
log.console = false
log.file.level = warning
CONF
  done
  for n in "${NODES[@]}"; do
    ( node_env "$n"; exec_in "$n" setsid "$BIN/rabbitmq-server" >"$DIR/node$n/log/stdout" 2>&1 ) &
  done
  local deadline=$((SECONDS + 120))
  for n in "${NODES[@]}"; do
    until ctl "$n" await_startup --timeout 5 >/dev/null 2>&1; do
      if ((SECONDS > deadline)); then echo "rabbitmq.sh: node mpc$n did not start; see $DIR/node$n/log" >&2; exit 1; fi
      sleep 1
    done
  done
  until [[ $(ctl 1 cluster_status --formatter json 2>/dev/null | grep -oE 'mpc[0-9]@(localhost|10\.246\.0\.1[0-9])' | sort -u | wc -l) -ge 3 ]] &&
        ctl 1 cluster_status --formatter json 2>/dev/null | python3 -c 'import json,sys; d=json.load(sys.stdin); sys.exit(0 if len(d["running_nodes"])==3 else 1)'; do
    if ((SECONDS > deadline)); then echo "rabbitmq.sh: the nodes did not form one cluster" >&2; ctl 1 cluster_status >&2 || true; exit 1; fi
    sleep 1
  done
  # Quorum queues need their feature flags on every node.
  ctl 1 enable_feature_flag all >/dev/null
  echo "rabbitmq cluster up: amqp://guest:guest@$(host 1):5682, $(host 2):5683, $(host 3):5684; management on 15682-15684"
}

pid_of() { cat "$DIR/node$1/pid" 2>/dev/null || true; }

# revive restarts a killed node on its data, so that it rejoins the
# cluster: a scenario that kills a node gives the next one three again.
revive() {
  local n=$1 p; p=$(pid_of "$n")
  if [[ -n $p ]] && kill -0 "$p" 2>/dev/null; then return 0; fi
  ( node_env "$n"; exec_in "$n" setsid "$BIN/rabbitmq-server" >>"$DIR/node$n/log/stdout" 2>&1 ) &
  local deadline=$((SECONDS + 120))
  until ctl "$n" await_startup --timeout 5 >/dev/null 2>&1; do
    if ((SECONDS > deadline)); then echo "rabbitmq.sh: node mpc$n did not start again; see $DIR/node$n/log" >&2; exit 1; fi
    sleep 1
  done
}

stop() {
  local pids=()
  for n in "${NODES[@]}"; do
    local p; p=$(pid_of "$n")
    [[ -n $p ]] && pids+=("$p")
  done
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  local deadline=$((SECONDS + 20))
  for p in "${pids[@]}"; do
    while kill -0 "$p" 2>/dev/null && ((SECONDS < deadline)); do sleep 0.2; done
    kill -KILL "$p" 2>/dev/null || true
  done
  # The private epmd was started by the first node; only ours listens on
  # 4382 (in the namespaces, deleting them ends each node's own).
  if [[ $NETNS == 1 ]]; then
    "$NETNS_SH" down r1 r2 r3
  else
    local epmd; epmd=$(ss -ltnpH 'sport = :4382' 2>/dev/null | grep -o 'pid=[0-9]*' | cut -d= -f2 | sort -u)
    for p in $epmd; do kill -TERM "$p" 2>/dev/null || true; done
  fi
  rm -rf "$DIR"
}

case ${1:-} in
  start) start ;;
  stop) stop ;;
  kill) p=$(pid_of "$2"); [[ -n $p ]] && kill -KILL "$p" ;;
  revive) revive "$2" ;;
  pid) pid_of "$2" ;;
  ctl) shift; n=$1; shift; ctl "$n" "$@" ;;
  partition) [[ $NETNS == 1 ]] || { echo "rabbitmq.sh: partition needs MSGPULSE_NETNS=1" >&2; exit 2; }; "$NETNS_SH" partition "r$2" ;;
  heal) "$NETNS_SH" heal ;;
  *) echo "usage: $0 start|stop|kill N|revive N|pid N|ctl N ARGS...|partition N|heal" >&2; exit 2 ;;
esac
