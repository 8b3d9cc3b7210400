#!/usr/bin/env bash
# `make redis-cost`: Redis's instructions per consumed message, counted by
# callgrind (valgrind) in a private redis-server, for the consumer's Redis
# work as dispatch does it (BenchmarkBurstRedisCPU: the claim with its
# "sending" status, the sent mark with its "sent" status, batched by
# burst). Instructions, not seconds: the same binary and inputs give the
# same count within about 1%, whatever else the machine does, so a change
# to a script or to the composite can be judged on a noisy shared machine
# where throughput moves by a third between runs (docs/performance.md).
#
# REDIS_COST_MESSAGES (default 2000) messages, after one warm-up run that
# loads the scripts. About a minute.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v valgrind >/dev/null || { echo "redis-cost: needs valgrind (apt-get install valgrind)" >&2; exit 1; }
command -v redis-server >/dev/null || { echo "redis-cost: needs redis-server" >&2; exit 1; }
n=${REDIS_COST_MESSAGES:-2000}
dir=$(mktemp -d)
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
valgrind --tool=callgrind --callgrind-out-file="$dir/cg.out" \
  redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no >"$dir/valgrind.log" 2>&1 &
vg=$!
trap 'kill $vg 2>/dev/null; wait $vg 2>/dev/null; rm -rf "$dir"' EXIT
for _ in $(seq 200); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.1; done
redis-cli -p "$port" ping >/dev/null
go test -c -o "$dir/dispatch.test" ./internal/dispatch/
run() { TEST_REDIS_URL="redis://127.0.0.1:$port" "$dir/dispatch.test" -test.run '^$' -test.bench '^BenchmarkBurstRedisCPU$' -test.benchtime "$1x" >"$dir/bench.txt" 2>&1 || { cat "$dir/bench.txt" >&2; exit 1; }; }
run 200 # loads the scripts, warms the allocator
callgrind_control -z "$vg" >/dev/null 2>&1
run "$n"
callgrind_control -d "$vg" >/dev/null 2>&1
ir=$(awk '/^(summary|totals):/ {print $2; exit}' "$(ls -t "$dir"/cg.out* | head -1)")
echo "redis-cost: $((ir / n)) instructions per message in redis-server ($n messages, $ir in all; BenchmarkBurstRedisCPU)"
