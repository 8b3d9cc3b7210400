#!/usr/bin/env bash
# Network namespaces for cluster nodes that can be cut off, not just
# killed (issue 46). Each node gets a namespace of its own, mp-<name>, with
# a veth pair to a bridge that lives in a namespace of its own (mp-bridge),
# and an address of 10.246.0.0/24 that exists only there. The root
# namespace (where the tests and msgpulse's programs run) joins the bridge
# as 10.246.0.1, so it reaches every node, also a cut-off one: the hard
# case, a client on the minority side.
#
#   netns.sh up NAME=N...     create the bridge (once) and one namespace per node, NAME at 10.246.0.N
#                             (a namespace of that name left by a killed run is replaced)
#   netns.sh down [NAME...]   delete those nodes' namespaces; without names, every namespace
#                             this script made, the bridge's too (also what a killed run left)
#   netns.sh partition NAME   cut NAME off from every other node (iptables DROP inside NAME's
#                             namespace, both directions, as Jepsen does); clients still reach it
#   netns.sh heal             remove every cut
#   netns.sh exec NAME CMD... run CMD in NAME's namespace
#   netns.sh ip NAME          print NAME's address
#
# Needs root, iproute2 and iptables (installed from Debian's packages when
# missing). The nodes' names and addresses are kept under $NETNS_DIR
# (default /tmp/msgpulse-netns).
set -euo pipefail

DIR=${NETNS_DIR:-/tmp/msgpulse-netns}
NET=10.246.0
BR=mp-bridge

need_tools() {
  command -v ip >/dev/null || { echo "netns.sh: needs iproute2" >&2; exit 1; }
  if ! command -v iptables >/dev/null; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq iptables >/dev/null ||
      { echo "netns.sh: could not install iptables (apt-get install iptables)" >&2; exit 1; }
  fi
}

ip_of() { cat "$DIR/$1" 2>/dev/null || { echo "netns.sh: no node $1" >&2; exit 2; }; }

up() {
  need_tools
  mkdir -p "$DIR"
  if ! ip netns list | grep -qw $BR; then
    ip link delete mp-root 2>/dev/null || true
    ip netns add $BR
    ip -n $BR link add br0 type bridge
    ip -n $BR link set br0 up
    ip -n $BR link set lo up
    # The root namespace's leg.
    ip link add mp-root type veth peer name root0 netns $BR
    ip -n $BR link set root0 master br0 up
    ip addr add $NET.1/24 dev mp-root
    ip link set mp-root up
  fi
  local spec name n
  for spec in "$@"; do
    name=${spec%%=*} n=${spec#*=}
    [[ $name =~ ^[a-z0-9]{1,8}$ && $n =~ ^[0-9]+$ && $n -ge 2 && $n -le 254 ]] ||
      { echo "netns.sh: want NAME=N (NAME a-z0-9, at most 8; N 2..254), got $spec" >&2; exit 2; }
    remove "$name" # what a killed run left
    ip netns add "mp-$name"
    ip link add "mpv-$name" type veth peer name "p-$name" netns $BR
    ip link set "mpv-$name" netns "mp-$name"
    ip -n "mp-$name" link set "mpv-$name" name eth0
    ip -n "mp-$name" addr add "$NET.$n/24" dev eth0
    ip -n "mp-$name" link set eth0 up
    ip -n "mp-$name" link set lo up
    ip -n $BR link set "p-$name" master br0 up
    echo "$NET.$n" >"$DIR/$name"
  done
}

# remove deletes node NAME's namespace, killing what runs in it.
remove() {
  if ip netns list | grep -qw "mp-$1"; then
    ip netns pids "mp-$1" 2>/dev/null | xargs -r kill -KILL 2>/dev/null || true
    ip netns delete "mp-$1" 2>/dev/null || true
  fi
  ip -n $BR link delete "p-$1" 2>/dev/null || true
  rm -f "$DIR/$1"
}

down() {
  local ns
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep '^mp-' || true); do
    # Whatever still runs in it would keep it alive as a process's netns.
    ip netns pids "$ns" 2>/dev/null | xargs -r kill -KILL 2>/dev/null || true
    ip netns delete "$ns" 2>/dev/null || true
  done
  ip link delete mp-root 2>/dev/null || true
  rm -rf "$DIR"
}

partition() {
  local name=$1 me peer f
  me=$(ip_of "$name")
  for f in "$DIR"/*; do
    peer=$(basename "$f")
    [[ $peer == "$name" ]] && continue
    local pip; pip=$(cat "$f")
    ip netns exec "mp-$name" iptables -w -A INPUT -s "$pip" -j DROP
    ip netns exec "mp-$name" iptables -w -A OUTPUT -d "$pip" -j DROP
  done
  echo "netns.sh: $name ($me) cut off from its peers"
}

heal() {
  local f
  for f in "$DIR"/*; do
    [[ -e $f ]] || continue
    ip netns exec "mp-$(basename "$f")" iptables -w -F INPUT
    ip netns exec "mp-$(basename "$f")" iptables -w -F OUTPUT
  done
}

case ${1:-} in
  up) shift; up "$@" ;;
  down)
    shift
    if (($#)); then
      for n in "$@"; do remove "$n"; done
      # The last node out takes the bridge with it.
      if [[ -z $(ls -A "$DIR" 2>/dev/null) ]]; then down; fi
    else
      down
    fi ;;
  partition) partition "$2" ;;
  heal) heal ;;
  exec) shift; name=$1; shift; exec ip netns exec "mp-$name" "$@" ;;
  ip) ip_of "$2" ;;
  *) echo "usage: $0 up NAME=N...|down|partition NAME|heal|exec NAME CMD...|ip NAME" >&2; exit 2 ;;
esac
