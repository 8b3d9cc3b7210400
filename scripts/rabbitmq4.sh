#!/usr/bin/env bash
# RabbitMQ 4.x beside the host's 3.10.8, without Docker: Debian trixie's
# rabbitmq-server (4.0.5, on Erlang 27) runs in a chroot, on ports of its
# own. Erlang 27 needs trixie's libc, so it cannot be installed on this
# bookworm machine; a trixie root made once with mmdebstrap holds it. The
# root is cached outside the repository, in $MSGPULSE_CACHE (default
# /var/cache/msgpulse), and reused by later runs and clean clones; it is
# rebuilt when it is missing or broken.
#
#   rabbitmq4.sh root            build the root if it is missing or broken (start does this)
#   rabbitmq4.sh start           one node, rmq4@localhost: AMQP 5673, management 15673, prometheus 15693
#   rabbitmq4.sh stop            stop it and its epmd (SIGKILL what does not stop), remove its data
#   rabbitmq4.sh ctl ARGS...     rabbitmqctl against it
#   rabbitmq4.sh version         the RabbitMQ version in the root
#   rabbitmq4.sh cluster start|stop|kill N|revive N|pid N|ctl N ARGS...
#                                three nodes, rmq4c1..3@localhost: AMQP 5692-5694, management
#                                15702-15704; the commands of scripts/cluster/rabbitmq.sh
#                                (partition N and heal with MSGPULSE_NETNS=1: each node then runs in
#                                a network namespace of its own, at 10.246.0.1N, see scripts/cluster/netns.sh)
#
# SUITE=sid runs Debian sid's rabbitmq-server instead (4.3 as of this
# writing) from a root of its own, on the same ports (so one suite at a
# time): a look at what the next series changes before users meet it. CI
# runs trixie only.
#
# Guest may log in from anywhere (loopback_users = none) because the tests
# reach the node through 127.0.0.1 only; every listener binds 127.0.0.1.
# Transient non-exclusive queues are denied, as RabbitMQ 4.3 does by
# default, so a test or a declare that still makes one fails here first.
#
# Safety: nothing of the host is mounted into the root. The node runs in a
# private mount namespace (unshare), where /proc is mounted for it; that
# mount is invisible to the host and ends with the node, so removing the
# root can never reach the host's /proc or /dev. The device nodes Erlang
# opens are made inside the root with mknod. The script still refuses to
# remove a root with anything mounted under it, or with a process in it.
# Every process started carries MSGPULSE_RABBITMQ4=<its run> in its
# environment; stop kills each one that does (the node, its epmd, their
# children), so nothing of a run outlives it.
set -euo pipefail

if [[ $(id -u) -ne 0 ]]; then exec sudo -E "$0" "$@"; fi

SUITE=${SUITE:-trixie}
CACHE=${MSGPULSE_CACHE:-/var/cache/msgpulse}
ROOT=$CACHE/rabbitmq-$SUITE
KEYRING=/usr/share/keyrings/debian-archive-keyring.gpg
RUNS=/srv/msgpulse # inside the root: each run's data, config and logs
LOCK=$CACHE/rabbitmq-$SUITE.lock

log() { printf 'rabbitmq4.sh: %s\n' "$*" >&2; }
die() { log "$*"; exit 1; }

# mounted_under prints the mount points at or below $1 (from the host's view).
mounted_under() {
  awk -v r="$1" '$5 == r || index($5, r "/") == 1 { print $5 }' /proc/self/mountinfo
}

# procs_in prints the pids of processes whose root directory is $1.
procs_in() {
  local d p
  for d in /proc/[0-9]*; do
    p=${d#/proc/}
    [[ $(readlink "$d/root" 2>/dev/null) == "$1" ]] && echo "$p"
  done
  return 0
}

# remove_root deletes a root, but only when nothing is mounted under it and
# no process runs in it: a mount there (a bind-mounted /dev, a /proc) would
# be deleted through.
remove_root() {
  local r=$1 m p
  [[ -e $r ]] || return 0
  m=$(mounted_under "$r")
  [[ -z $m ]] || die "refusing to remove $r: mounted under it: $m (unmount first)"
  p=$(procs_in "$r")
  [[ -z $p ]] || die "refusing to remove $r: processes run in it: $(echo "$p" | tr '\n' ' ')"
  rm -rf --one-file-system "$r"
}

# root_ok says whether the root holds a working rabbitmq-server: the marker
# written when it was built, the package installed, and Erlang starting.
root_ok() {
  [[ -f $ROOT/.msgpulse-root && -x $ROOT/usr/lib/rabbitmq/bin/rabbitmq-server && -x $ROOT/usr/bin/curl ]] || return 1
  local d
  for d in null zero full random urandom tty; do [[ -c $ROOT/dev/$d ]] || return 1; done
  [[ $(chroot "$ROOT" dpkg-query -W -f '${db:Status-Status}' rabbitmq-server 2>/dev/null) == installed ]] || return 1
  in_ns /usr/bin/env -i HOME=/tmp PATH=/usr/bin:/bin erl -noshell -eval 'halt().' >/dev/null 2>&1
}

# make_dev creates the device nodes Erlang and the shell scripts open, in
# the root itself: a bind mount of the host's /dev would let an rm -rf of
# the root delete the host's devices.
make_dev() {
  local r=$1 spec name major minor
  mkdir -p "$r/dev"
  for spec in null:1:3 zero:1:5 full:1:7 random:1:8 urandom:1:9 tty:5:0; do
    IFS=: read -r name major minor <<<"$spec"
    if [[ ! -c $r/dev/$name ]]; then
      rm -f "$r/dev/$name"
      mknod -m 666 "$r/dev/$name" c "$major" "$minor"
    fi
  done
}

build_root() {
  mkdir -p "$CACHE"
  exec 9>"$LOCK"
  flock 9 # one build at a time; a second run waits and finds it built
  if root_ok; then exec 9>&-; return 0; fi
  if ! command -v mmdebstrap >/dev/null 2>&1; then
    log "installing mmdebstrap with apt-get"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq mmdebstrap debian-archive-keyring >/dev/null
  fi
  log "building a Debian $SUITE root with rabbitmq-server in $ROOT (once; about a minute)"
  remove_root "$ROOT.new"
  local start=$SECONDS
  # The archive's signature is checked; its Valid-Until is not: sid's Release
  # expires within a week, and a mirror or a clock a few weeks apart would
  # stop the build of a root that only runs tests.
  mmdebstrap --quiet --mode=root --variant=apt --include=rabbitmq-server,curl \
    --aptopt='Acquire::Check-Valid-Until "false"' \
    --keyring="$KEYRING" "$SUITE" "$ROOT.new" >&2 || { remove_root "$ROOT.new"; die "mmdebstrap failed; nothing kept"; }
  make_dev "$ROOT.new"
  echo '127.0.0.1 localhost' >"$ROOT.new/etc/hosts"
  local v
  v=$(chroot "$ROOT.new" dpkg-query -W -f '${Version}' rabbitmq-server)
  printf 'suite=%s rabbitmq-server=%s built=%s\n' "$SUITE" "$v" "$(date -u +%FT%TZ)" >"$ROOT.new/.msgpulse-root"
  remove_root "$ROOT"
  mv "$ROOT.new" "$ROOT"
  root_ok || die "the new root in $ROOT does not start Erlang"
  log "root ready in $((SECONDS - start))s: rabbitmq-server $v ($(du -sh "$ROOT" | cut -f1))"
  exec 9>&-
}

# version prints the upstream version in the root (4.0.5 of 4.0.5-6+deb13u2).
version() {
  local v
  v=$(chroot "$ROOT" dpkg-query -W -f '${Version}' rabbitmq-server)
  v=${v#*:}
  echo "${v%%-*}"
}

# A node: its name, AMQP, management, prometheus (0: none) and
# distribution ports, and the epmd port it shares with its cluster.
NODE= AMQP= MGMT= PROM= DIST= EPMD= RUN= TAG= HOST=127.0.0.1 NS=()
NETNS=${MSGPULSE_NETNS:-0}
NETNS_SH=$(cd "$(dirname "$0")" && pwd)/cluster/netns.sh

single_node() { NODE=rmq4; AMQP=5673; MGMT=15673; PROM=15693; DIST=25673; EPMD=4373; RUN=$RUNS/rmq4; TAG=$SUITE/rmq4; }
cluster_node() {
  local n=$1
  [[ $n =~ ^[123]$ ]] || die "node $n: must be 1, 2 or 3"
  NODE=rmq4c$n; AMQP=$((5691 + n)); MGMT=$((15701 + n)); PROM=0; DIST=$((25691 + n)); EPMD=4392
  RUN=$RUNS/cluster; TAG=$SUITE/cluster
  if [[ $NETNS == 1 ]]; then HOST=10.246.0.1$n NS=(ip netns exec "mp-r$n"); fi
}

# nodename is the current node's Erlang name: long, by address, in a
# namespace of its own.
nodename() { if [[ $NETNS == 1 && $NODE != rmq4 ]]; then echo "$NODE@$HOST"; else echo "$NODE@localhost"; fi; }

# in_ns runs a command in the root, in a private mount namespace with its
# own /proc: the host never sees that mount, and it ends with the command.
# With EXEC=exec it replaces the shell, so the node's process tree holds no
# bash that would read this file again after the node ends.
EXEC=
in_ns() {
  $EXEC "${NS[@]}" unshare --mount --propagation private -- /bin/sh -c 'mount -t proc proc "$0/proc" && exec chroot "$0" "$@"' "$ROOT" "$@"
}

# in_root runs a command in the root with the current node's environment
# only.
in_root() {
  local nd=$RUN/$NODE
  in_ns /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8 LC_ALL=C.UTF-8 \
    HOME="$RUN/home" MSGPULSE_RABBITMQ4="$TAG" \
    ERL_EPMD_PORT="$EPMD" ERL_EPMD_ADDRESS="$HOST" RABBITMQ_USE_LONGNAME="$([[ $HOST == 127.0.0.1 ]] && echo false || echo true)" \
    RABBITMQ_NODENAME="$(nodename)" RABBITMQ_NODE_IP_ADDRESS="$HOST" RABBITMQ_NODE_PORT="$AMQP" \
    RABBITMQ_DIST_PORT="$DIST" RABBITMQ_MNESIA_BASE="$nd/mnesia" RABBITMQ_LOG_BASE="$nd/log" \
    RABBITMQ_PID_FILE="$nd/pid" RABBITMQ_CONFIG_FILE="$nd/rabbitmq.conf" \
    RABBITMQ_ADVANCED_CONFIG_FILE="$nd/advanced.config" RABBITMQ_ENABLED_PLUGINS_FILE="$nd/enabled_plugins" \
    RABBITMQ_CONF_ENV_FILE="$nd/rabbitmq-env.conf" \
    ERL_FLAGS="-kernel inet_dist_use_interface {${HOST//./,}}" "$@"
}

ctl() { in_root /usr/lib/rabbitmq/bin/rabbitmqctl -n "$(nodename)" "$@"; }

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# write_node writes the node's configuration into the run; peers lists the
# cluster's nodes (none for the single node).
write_node() {
  local nd=$ROOT$RUN/$NODE p i=1
  mkdir -p "$nd/mnesia" "$nd/log"
  if ((PROM)); then echo '[rabbitmq_management,rabbitmq_prometheus].' >"$nd/enabled_plugins"
  else echo '[rabbitmq_management].' >"$nd/enabled_plugins"; fi
  echo '[].' >"$nd/advanced.config"
  : >"$nd/rabbitmq-env.conf"
  {
    echo "listeners.tcp.default = $HOST:$AMQP"
    echo "management.tcp.port = $MGMT"
    echo "management.tcp.ip = $HOST"
    if ((PROM)); then echo "prometheus.tcp.port = $PROM"; echo "prometheus.tcp.ip = 127.0.0.1"; fi
    echo "loopback_users = none"
    echo "deprecated_features.permit.transient_nonexcl_queues = false"
    echo "disk_free_limit.absolute = 50MB"
    echo "log.console = false"
    echo "log.file.level = warning"
    for p in "$@"; do
      echo "cluster_formation.peer_discovery_backend = classic_config"
      echo "cluster_formation.classic_config.nodes.$i = $p"
      i=$((i + 1))
    done
    if (($#)); then echo "cluster_name = msgpulse-test-rmq4"; echo "cluster_partition_handling = pause_minority"; fi
  } >"$nd/rabbitmq.conf"
}

# new_run makes the run's directory with a private Erlang cookie, so no
# other node on this machine (the host's, another run's) can join it.
new_run() {
  local h=$ROOT$RUN/home
  mkdir -p "$h"
  head -c 24 /dev/urandom | base64 | tr -dc 'A-Za-z0-9' >"$h/.erlang.cookie"
  chmod 400 "$h/.erlang.cookie"
}

launch() { # start the current node in the background, in a session of its own, its output appended to its log
  local nd=$ROOT$RUN/$NODE
  ( SUITE=$SUITE MSGPULSE_CACHE=$CACHE MSGPULSE_RABBITMQ4=$TAG exec setsid "$0" _server "$NODE" >>"$nd/log/stdout" 2>&1 </dev/null & )
}

await_node() { # wait until the current node runs its apps, or fail naming its log
  local deadline=$((SECONDS + ${1:-120}))
  until ctl await_startup --timeout 5 >/dev/null 2>&1; do
    if ((SECONDS > deadline)); then
      log "node $NODE did not start; its log: $ROOT$RUN/$NODE/log"
      tail -n 20 "$ROOT$RUN/$NODE/log/stdout" >&2 2>/dev/null || true
      return 1
    fi
    sleep 1
  done
}

pid_of() { cat "$ROOT$RUN/$NODE/pid" 2>/dev/null || true; }

# tagged prints the pids of processes started for run tag $1.
tagged() {
  local d
  for d in /proc/[0-9]*; do
    if tr '\0' '\n' 2>/dev/null <"$d/environ" | grep -qxF "MSGPULSE_RABBITMQ4=$1"; then echo "${d#/proc/}"; fi
  done
  return 0
}

# stop_run stops every process of run tag $1 (TERM, then KILL after 20 s)
# and removes the run's data. pids lists the nodes, stopped first so that
# they leave their cluster in order; epmd and the rest follow.
stop_run() {
  local tag=$1 dir=$2; shift 2
  local p deadline=$((SECONDS + 20))
  for p in "$@"; do kill -TERM "$p" 2>/dev/null || true; done
  for p in "$@"; do
    while kill -0 "$p" 2>/dev/null && ((SECONDS < deadline)); do sleep 0.2; done
  done
  local left
  left=$(tagged "$tag")
  # shellcheck disable=SC2086 # pids, one per word
  [[ -z $left ]] || kill -TERM $left 2>/dev/null || true
  deadline=$((SECONDS + 5))
  while [[ -n $(tagged "$tag") ]] && ((SECONDS < deadline)); do sleep 0.2; done
  left=$(tagged "$tag")
  # shellcheck disable=SC2086
  [[ -z $left ]] || kill -KILL $left 2>/dev/null || true
  deadline=$((SECONDS + 5))
  while [[ -n $(tagged "$tag") ]]; do
    ((SECONDS < deadline)) || die "processes of $tag survived SIGKILL: $(tagged "$tag" | tr '\n' ' ')"
    sleep 0.2
  done
  rm -rf --one-file-system "$ROOT$dir"
}

busy_ports() { local p; for p in "$@"; do if port_open "$p"; then echo "$p"; fi; done; }

start_single() {
  build_root
  single_node
  stop_run "$TAG" "$RUN" "$(pid_of)" >/dev/null 2>&1 || true
  local busy; busy=$(busy_ports "$AMQP" "$MGMT" "$PROM" "$DIST" "$EPMD")
  [[ -z $busy ]] || die "ports in use: $(echo "$busy" | tr '\n' ' ')(another RabbitMQ 4 run? stop it with: SUITE=... $0 stop)"
  new_run
  write_node
  launch
  await_node 120 || { stop_single; exit 1; }
  local d=$((SECONDS + 60))
  until curl -sf -o /dev/null -u guest:guest "http://127.0.0.1:$MGMT/api/overview"; do
    ((SECONDS < d)) || { log "management API on $MGMT did not answer"; stop_single; exit 1; }
    sleep 0.5
  done
  echo "rabbitmq $(version) ($SUITE) up: amqp://guest:guest@127.0.0.1:$AMQP/ management http://guest:guest@127.0.0.1:$MGMT metrics :$PROM"
}

stop_single() { single_node; stop_run "$TAG" "$RUN" "$(pid_of)"; }

cluster_start() {
  build_root
  local n pids=()
  for n in 1 2 3; do cluster_node "$n"; pids+=("$(pid_of)"); done
  stop_run "$TAG" "$RUN" "${pids[@]}" >/dev/null 2>&1 || true
  if [[ $NETNS == 1 ]]; then
    "$NETNS_SH" up r1=11 r2=12 r3=13
  else
    local busy; busy=$(busy_ports 5692 5693 5694 15702 15703 15704 25692 25693 25694 4392)
    [[ -z $busy ]] || die "ports in use: $(echo "$busy" | tr '\n' ' ')(another RabbitMQ 4 cluster? stop it with: $0 cluster stop)"
  fi
  new_run
  local peers=()
  for n in 1 2 3; do cluster_node "$n"; peers+=("$(nodename)"); done
  for n in 1 2 3; do cluster_node "$n"; write_node "${peers[@]}"; done
  for n in 1 2 3; do cluster_node "$n"; launch; done
  for n in 1 2 3; do cluster_node "$n"; await_node 180 || { cluster_stop; exit 1; }; done
  local deadline=$((SECONDS + 120))
  cluster_node 1
  until ctl cluster_status --formatter json 2>/dev/null |
      python3 -c 'import json,sys; d=json.load(sys.stdin); sys.exit(0 if len(d["running_nodes"])==3 else 1)'; do
    if ((SECONDS > deadline)); then log "the nodes did not form one cluster"; ctl cluster_status >&2 || true; cluster_stop; exit 1; fi
    sleep 1
  done
  ctl enable_feature_flag all >/dev/null
  echo "rabbitmq $(version) ($SUITE) cluster up: amqp://guest:guest@$(for n in 1 2 3; do cluster_node "$n"; printf '%s:%s ' "$HOST" "$AMQP"; done)management 15702-15704"
}

cluster_stop() {
  local n pids=()
  for n in 1 2 3; do cluster_node "$n"; pids+=("$(pid_of)"); done
  stop_run "$TAG" "$RUN" "${pids[@]}"
  if [[ $NETNS == 1 ]]; then "$NETNS_SH" down r1 r2 r3; fi
}

# cluster_revive starts a killed node again on its data, so it rejoins.
cluster_revive() {
  cluster_node "$1"
  local p; p=$(pid_of)
  if [[ -n $p ]] && kill -0 "$p" 2>/dev/null; then return 0; fi
  launch
  await_node 120
}

cluster() {
  local cmd=${1:-}; shift || true
  case $cmd in
    start) cluster_start ;;
    stop) cluster_stop ;;
    kill) cluster_node "$1"; p=$(pid_of); [[ -n $p ]] && kill -KILL "$p" ;;
    revive) cluster_revive "$1" ;;
    pid) cluster_node "$1"; printf '%s\n' "$(pid_of)" ;;
    ctl) cluster_node "$1"; shift; ctl "$@" ;;
    partition) [[ $NETNS == 1 ]] || die "partition needs MSGPULSE_NETNS=1"; "$NETNS_SH" partition "r$1" ;;
    heal) "$NETNS_SH" heal ;;
    *) die "usage: $0 cluster start|stop|kill N|revive N|pid N|ctl N ARGS...|partition N|heal" ;;
  esac
}

main() {
  case ${1:-} in
    root) build_root; echo "$ROOT: $(cat "$ROOT/.msgpulse-root")" ;;
    start) start_single ;;
    stop) stop_single ;;
    ctl) shift; single_node; ctl "$@" ;;
    version) version ;;
    cluster) shift; cluster "$@" ;;
    _server) # launch's: the node itself, in the foreground
      if [[ $2 == rmq4 ]]; then single_node; else cluster_node "${2#rmq4c}"; fi
      EXEC=exec in_root /usr/lib/rabbitmq/bin/rabbitmq-server ;;
    *) echo "usage: $0 root|start|stop|ctl ARGS...|version|cluster start|stop|kill N|revive N|pid N|ctl N ARGS..." >&2; exit 2 ;;
  esac
}

# All in functions, and exit on the line that runs them: bash reads a script
# as it goes, and the file may change (a checkout) while a command runs.
main "$@"; exit
