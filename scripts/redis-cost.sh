#!/usr/bin/env bash
# `make redis-cost` / `make redis-cost-api`: Redis's instructions per
# consumed message, or per accepted code request, counted by callgrind
# (valgrind) in a private redis-server. Instructions, not seconds: the same
# binary and inputs give the same count within about 1%, whatever else the
# machine does, so a change to a script or to the composite can be judged
# on a noisy shared machine where throughput moves by a third between runs
# (docs/performance.md).
#
#   redis-cost.sh [consumer]  the consumer's Redis work as dispatch does it
#                             (BenchmarkBurstRedisCPU: the claim with its
#                             "sending" status, the sent mark with its
#                             "sent" status, batched by burst); everything
#                             redis-server executes, per message.
#   redis-cost.sh api         the real api binary driven by `loadgen api
#                             --rate` (one take script per code request:
#                             limits, cooldown, code, status record); only
#                             what runs inside EVALSHA is counted
#                             (--toggle-collect), per EVALSHA call, since
#                             the load generator's own setup and cleanup
#                             share the server.
#
# REDIS_COST_MESSAGES (default 2000) messages or requests, after one
# warm-up run that loads the scripts. About a minute. REDIS_COST_KEEP=FILE
# keeps the callgrind profile (read it with callgrind_annotate FILE).
set -euo pipefail
cd "$(dirname "$0")/.."
mode=${1:-consumer}
case $mode in consumer | api) ;; *) echo "usage: redis-cost.sh [consumer|api]" >&2; exit 2 ;; esac
command -v valgrind >/dev/null || { echo "redis-cost: needs valgrind (apt-get install valgrind)" >&2; exit 1; }
command -v redis-server >/dev/null || { echo "redis-cost: needs redis-server" >&2; exit 1; }
n=${REDIS_COST_MESSAGES:-2000}
dir=$(mktemp -d)
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
toggle=()
if [[ $mode == api ]]; then toggle=(--toggle-collect=evalShaCommand); fi
valgrind --tool=callgrind --callgrind-out-file="$dir/cg.out" "${toggle[@]}" \
  redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no >"$dir/valgrind.log" 2>&1 &
vg=$!
# dump writes the profile counted since the last zeroing and sets ir to
# its instructions (keeping it at $REDIS_COST_KEEP when set).
dump() {
  callgrind_control -d "$vg" >/dev/null 2>&1
  local profile
  profile=$(ls -t "$dir"/cg.out* | head -1)
  ir=$(awk '/^(summary|totals):/ {print $2; exit}' "$profile")
  if [[ -n ${REDIS_COST_KEEP:-} ]]; then cp "$profile" "$REDIS_COST_KEEP"; fi
}
trap 'kill $vg 2>/dev/null; wait $vg 2>/dev/null; rm -rf "$dir"' EXIT
for _ in $(seq 200); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.1; done
redis-cli -p "$port" ping >/dev/null
url="redis://127.0.0.1:$port"

if [[ $mode == consumer ]]; then
  go test -c -o "$dir/dispatch.test" ./internal/dispatch/
  run() { TEST_REDIS_URL=$url "$dir/dispatch.test" -test.run '^$' -test.bench '^BenchmarkBurstRedisCPU$' -test.benchtime "$1x" >"$dir/bench.txt" 2>&1 || { cat "$dir/bench.txt" >&2; exit 1; }; }
  run 200 # loads the scripts, warms the allocator
  callgrind_control -z "$vg" >/dev/null 2>&1
  run "$n"
  dump
  echo "redis-cost: $((ir / n)) instructions per message in redis-server ($n messages, $ir in all; BenchmarkBurstRedisCPU)"
  exit 0
fi

# api: a low fixed rate (valgrind slows Redis some 50 times), long enough
# for n requests. loadgen's 1 s closed-loop warm-up adds requests of its
# own; every EVALSHA is divided into the count, whichever phase sent it.
go build -o "$dir/" ./cmd/api ./cmd/consumer ./cmd/loadgen # loadgen wants both
rate=150
run() { REDIS_URL=$url "$dir/loadgen" api --bin-dir "$dir" --rounds 1 --rate "$rate" --duration "$1" >"$dir/load.txt" 2>&1 || { cat "$dir/load.txt" >&2; exit 1; }; }
run 2s # loads the scripts, warms the allocator
callgrind_control -z "$vg" >/dev/null 2>&1
redis-cli -p "$port" config resetstat >/dev/null
run "$(((n + rate - 1) / rate))s"
dump
calls=$(redis-cli -p "$port" info commandstats | sed -n 's/^cmdstat_evalsha:calls=\([0-9]*\),.*/\1/p')
[[ ${calls:-0} -gt 0 ]] || { echo "redis-cost: no EVALSHA reached redis-server" >&2; cat "$dir/load.txt" >&2; exit 1; }
echo "redis-cost: $((ir / calls)) instructions per code request inside EVALSHA in redis-server ($calls take scripts, $ir in all; loadgen api --rate $rate)"
