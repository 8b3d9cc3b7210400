#!/usr/bin/env bash
# `make bench`: Go benchmarks (several runs each: read the medians), then the
# load generator: API latency, consumer throughput and delay accuracy, each
# against a baseline measured in the same run. Numbers only; nothing asserts.
# LOADGEN_ARGS overrides the load generator's flags (default: everything,
# with a 3-minute mix of delays).
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .run
echo "== Go benchmarks (-count 5)"
go test -run '^$' -bench . -benchmem -count 5 ./internal/... | tee .run/bench.txt | grep -E '^(Benchmark|pkg:)'
if command -v benchstat >/dev/null 2>&1; then
  benchstat .run/bench.txt
else
  echo "(install benchstat for medians and spread: go install golang.org/x/perf/cmd/benchstat@latest)"
fi
echo
echo "== loadgen"
go run ./cmd/loadgen ${LOADGEN_ARGS:-all}
