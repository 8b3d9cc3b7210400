# Sourced by the namespaced Redis scripts (sentinel-netns.sh,
# rediscluster-netns.sh): the one way they write a node's configuration,
# and stop their nodes.

# redis_conf DIR ADDR PORT [LINE...]: write DIR/redis.conf for a node that
# listens on ADDR:PORT, keeps its pid, log and data in DIR, runs in the
# background without persistence, and adds LINEs; print its path.
redis_conf() {
  local d=$1 addr=$2 port=$3; shift 3
  mkdir -p "$d"
  {
    echo "port $port"
    echo "bind $addr"
    echo "protected-mode no"
    echo "dir $d"
    echo "pidfile $d/pid"
    echo "logfile $d/log"
    echo "daemonize yes"
    echo "save \"\""
    echo "appendonly no"
    printf '%s\n' "$@"
  } >"$d/redis.conf"
  echo "$d/redis.conf"
}

# stop: kill every node under $DIR (their pid files), delete the
# namespaces $NODES and the data. The sourcing script sets DIR, NODES and
# HERE.
stop() {
  local f
  for f in "$DIR"/*/pid; do
    [[ -e $f ]] && kill -KILL "$(cat "$f")" 2>/dev/null || true
  done
  "$HERE/netns.sh" down "${NODES[@]}"
  rm -rf "$DIR"
}
