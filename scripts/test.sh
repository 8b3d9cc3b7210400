#!/usr/bin/env bash
# make test: every test on the host's RabbitMQ (3.10.8, scripts/services.sh),
# then the suites that touch the broker on RabbitMQ 4.0.5 (Debian trixie's,
# scripts/rabbitmq4.sh), each on classic and on quorum queues
# (TEST_QUEUE_TYPE), the fault scenarios likewise, the cluster scenarios
# on a 3-node cluster of each version, and the partition scenarios on a
# 3-node cluster of each version whose nodes run in network namespaces. Each leg prints how long
# it took; a failed leg does not stop the others, and the run fails at the
# end naming them. Whatever this starts is stopped on exit, also when a
# test fails or the run is interrupted.
#
#   scripts/test.sh              every leg (make test)
#   scripts/test.sh LEG...       only those legs, e.g. 4-classic 4-faults-quorum
#   SUITE=sid scripts/test.sh 4-classic 4-quorum   the RabbitMQ 4 legs on Debian sid's broker (not in CI)
#
# Legs: 3-all (every package, classic), fuzz (each request decoder's fuzz
# target for FUZZ_TIME, 15s), 3-quorum, 3-faults-classic,
# 3-faults-quorum, 4-classic, 4-quorum, 4-faults-classic, 4-faults-quorum,
# 3-cluster, 4-cluster, 3-partitions, 4-partitions.
set -euo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
TIMEOUT=${TEST_TIMEOUT:-30m}
R4=$PWD/scripts/rabbitmq4.sh

# The suites that touch the broker, run on every broker and queue type.
# The others (Redis, providers, the browser, alerting...) see no
# difference between brokers or queue types and run once, in 3-all.
BROKER_PKGS=(./internal/api/... ./internal/broker/... ./internal/declare/... ./internal/delay/...
  ./internal/dispatch/... ./internal/dlq/... ./internal/e2e/... ./internal/console/...)

ALL_LEGS=(3-all fuzz 3-quorum 3-faults-classic 3-faults-quorum 4-classic 4-quorum 4-faults-classic 4-faults-quorum 3-cluster 4-cluster
  3-partitions 4-partitions)
# Legs run only when named (none today).
NAMED_LEGS=()
if (($#)); then LEGS=("$@"); else LEGS=("${ALL_LEGS[@]}"); fi
for l in "${LEGS[@]}"; do
  [[ " ${ALL_LEGS[*]} ${NAMED_LEGS[*]} " == *" $l "* ]] || { echo "test.sh: no leg $l (legs: ${ALL_LEGS[*]} ${NAMED_LEGS[*]})" >&2; exit 2; }
done
wants() { [[ " ${LEGS[*]} " == *" $1 "* ]]; }
wants_any() { local l; for l in "$@"; do if wants "$l"; then return 0; fi; done; return 1; }

results=()
failed=()
current= # the leg running now, for the summary of an interrupted run
r4_state=off # RabbitMQ 4's node: off, starting, up, failed
r4_log=$(mktemp -t msgpulse-rabbitmq4.XXXXXX)

summary() {
  if [[ -n $current ]]; then results+=("$(printf '%-18s %s' "$current" "interrupted or aborted")"); fi
  ((${#results[@]})) || return 0
  echo
  echo "legs:"
  printf '  %s\n' "${results[@]}"
  echo "total $((SECONDS / 60))m$((SECONDS % 60))s"
}

cleanup() {
  local rc=$?
  if [[ $r4_state != off ]]; then
    [[ $r4_state != starting ]] || wait "$r4_pid" 2>/dev/null || true
    "$R4" stop >/dev/null 2>&1 || echo "test.sh: stopping RabbitMQ 4 failed; run $R4 stop" >&2
  fi
  rm -f "$r4_log"
  summary
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# leg NAME DESCRIPTION COMMAND...: runs one leg if it was asked for.
leg() {
  local name=$1 what=$2; shift 2
  wants "$name" || return 0
  echo
  echo "=== leg $name: $what"
  local start=$SECONDS rc=0
  current=$name
  "$@" || rc=$?
  current=
  local took=$((SECONDS - start)) verdict=ok
  if ((rc)); then verdict=FAILED; failed+=("$name"); fi
  results+=("$(printf '%-18s %-52s %4dm%02ds  %s' "$name" "$what" $((took / 60)) $((took % 60)) "$verdict")")
  echo "=== leg $name: $verdict in $((took / 60))m$((took % 60))s"
}

# with NAME=VALUE... COMMAND...: runs a command (a function too) with
# those variables in its environment.
with() {
  local vars=()
  while [[ $1 == *=* ]]; do vars+=("$1"); shift; done
  (export "${vars[@]}"; "$@")
}

broker_suites() { $GO test -race -count=1 -timeout "$TIMEOUT" "${BROKER_PKGS[@]}"; }

# fuzz runs each fuzz target for FUZZ_TIME: go test -fuzz takes one
# target at a time. Their seeds also run in 3-all, as plain tests.
FUZZ_TARGETS=(./internal/api:FuzzSendRequest ./internal/api:FuzzBatchRequest ./internal/api:FuzzVerificationCodeRequest ./internal/api:FuzzVerifyRequest ./internal/bounce:FuzzParse)
fuzz() {
  local t rc=0
  for t in "${FUZZ_TARGETS[@]}"; do
    $GO test -run '^$' -fuzz "^${t#*:}\$" -fuzztime "${FUZZ_TIME:-15s}" "${t%%:*}" || rc=1
  done
  return $rc
}

# The fault scenarios, one at a time, their FAULT lines printed. They run
# after the packages, never alongside: one raises a broker-wide memory
# alarm that would stall them.
faults() {
  MSGPULSE_FAULTS=1 $GO test -race -count=1 -p 1 -v -timeout "$TIMEOUT" -run . ./internal/fault/... 2>&1 |
    grep -E '^(FAULT |--- |ok |FAIL|panic:|\s+(Error|Messages):)'
}

# r4 waits for RabbitMQ 4's node, which main starts in the background, and
# runs a command with the tests pointed at it.
r4() {
  if [[ $r4_state == starting ]]; then
    if wait "$r4_pid"; then r4_state=up; cat "$r4_log"; else r4_state=failed; cat "$r4_log" >&2; fi
  fi
  [[ $r4_state == up ]] || { echo "test.sh: RabbitMQ 4 is not running" >&2; return 1; }
  with TEST_AMQP_URL=amqp://guest:guest@127.0.0.1:5673/ TEST_RABBITMQ_MANAGEMENT_URL=http://guest:guest@127.0.0.1:15673 \
    TEST_RABBITMQCTL="$R4 ctl" "$@"
}

main() {
  # RabbitMQ 4's node starts while the 3.10.8 legs run (the first run on a
  # machine also builds its root, under a minute).
  if wants_any 4-classic 4-quorum 4-faults-classic 4-faults-quorum; then
    "$R4" start >"$r4_log" 2>&1 &
    r4_pid=$!
    r4_state=starting
  fi

  v3="RabbitMQ $(rabbitmqctl version 2>/dev/null || echo 3)"
  v4="RabbitMQ $(SUITE=${SUITE:-trixie} "$R4" version 2>/dev/null || echo "4 (${SUITE:-trixie})")"

  leg 3-all "$v3, classic: every package" with TEST_QUEUE_TYPE=classic $GO test -race -count=1 -timeout "$TIMEOUT" ./...
  leg fuzz "the request decoders' fuzz targets, ${FUZZ_TIME:-15s} each" fuzz
  leg 3-quorum "$v3, quorum: the broker's suites" with TEST_QUEUE_TYPE=quorum broker_suites
  leg 3-faults-classic "$v3, classic: the fault scenarios" with TEST_QUEUE_TYPE=classic faults
  leg 3-faults-quorum "$v3, quorum: the fault scenarios" with TEST_QUEUE_TYPE=quorum faults
  leg 4-classic "$v4, classic: the broker's suites" r4 with TEST_QUEUE_TYPE=classic broker_suites
  leg 4-quorum "$v4, quorum: the broker's suites" r4 with TEST_QUEUE_TYPE=quorum broker_suites
  leg 4-faults-classic "$v4, classic: the fault scenarios" r4 with TEST_QUEUE_TYPE=classic faults
  leg 4-faults-quorum "$v4, quorum: the fault scenarios" r4 with TEST_QUEUE_TYPE=quorum faults
  if [[ $r4_state != off ]]; then
    [[ $r4_state != starting ]] || wait "$r4_pid" || true
    r4_state=off
    "$R4" stop
  fi
  # The cluster scenarios, on private clusters with nodes and ports of their own.
  leg 3-cluster "$v3 cluster of 3: Redis Cluster tests, cluster scenarios" scripts/cluster/run.sh
  leg 4-cluster "$v4 cluster of 3: the cluster scenarios" scripts/cluster/run.sh rabbitmq4
  # A node cut off, not killed: nodes in network namespaces, iptables.
  leg 3-partitions "$v3 cluster of 3 in namespaces: the partition scenarios" scripts/cluster/partitions.sh rabbitmq3
  leg 4-partitions "$v4 cluster of 3 in namespaces: the partition scenarios" scripts/cluster/partitions.sh rabbitmq4

  if ((${#failed[@]})); then
    echo "test.sh: failed legs: ${failed[*]} (rerun one: scripts/test.sh LEG)" >&2
    exit 1
  fi
}

# All in functions, and exit on the line that runs them: bash reads a script
# as it goes, and this one runs for half an hour, during which the file may
# change (a checkout).
main "$@"; exit
