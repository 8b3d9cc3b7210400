# msgpulse — run `make help` for the list of targets.
SHELL := /bin/bash
GO ?= go
BIN := bin
GOLANGCI_VERSION := v2.15.0
GOLANGCI := $(shell command -v golangci-lint 2>/dev/null || ls $$(go env GOPATH)/bin/golangci-lint 2>/dev/null || echo $(CURDIR)/$(BIN)/golangci-lint)
TEST_TIMEOUT ?= 30m

.DEFAULT_GOAL := help

.PHONY: help
help: ## show this help
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z_-]+:.*## / {printf "  \033[36m%-12s\033[0m %s\n", $$1, $$2}' $(MAKEFILE_LIST)

.PHONY: services
services: ## start RabbitMQ (+management) and Redis if they are not running (installs them if absent)
	@./scripts/services.sh

.PHONY: build
build: ## build every command into ./bin
	@mkdir -p $(BIN)
	$(GO) build -o $(BIN)/ ./cmd/...

.PHONY: run
run: services build ## run the whole system locally: topology, mail catcher, API, consumer
	@./scripts/run.sh

.PHONY: browser
browser: ## install Debian's chromium if missing (the console's browser test drives it)
	@./scripts/browser.sh

.PHONY: postfix
postfix: ## install Debian's postfix if missing, its system instance left off (internal/bounce's tests run an instance of their own)
	@./scripts/postfix.sh install

.PHONY: test
test: services browser postfix ## every test, -race: all packages on RabbitMQ 3.10.8, the broker's suites, the fault and the cluster scenarios also on 4.0.5, classic and quorum (scripts/test.sh)
	@TEST_TIMEOUT=$(TEST_TIMEOUT) GO=$(GO) ./scripts/test.sh

.PHONY: test-rabbitmq4
test-rabbitmq4: services ## only make test's RabbitMQ 4 legs (4.0.5 from a Debian trixie chroot; SUITE=sid for sid's, not in CI)
	@TEST_TIMEOUT=$(TEST_TIMEOUT) GO=$(GO) ./scripts/test.sh 4-classic 4-quorum 4-faults-classic 4-faults-quorum 4-cluster

.PHONY: rabbitmq4
rabbitmq4: ## start RabbitMQ 4.0.5 beside the host's (AMQP 5673, management 15673); scripts/rabbitmq4.sh stop stops it
	@./scripts/rabbitmq4.sh start

.PHONY: test-short
test-short: ## unit tests only (no broker, no Redis)
	$(GO) test -race -count=1 -short ./...

.PHONY: test-faults
test-faults: services ## fault scenarios one at a time (AMQP/Redis/SMTP faults, SIGKILL, SIGTERM, a broker alarm): prints FAULT lines, asserts lost=0 duplicates=0
	MSGPULSE_FAULTS=1 $(GO) test -race -count=1 -p 1 -v -timeout $(TEST_TIMEOUT) -run . ./internal/fault/...

.PHONY: test-cluster
test-cluster: ## start a private 3-node RabbitMQ cluster, Redis Cluster and Sentinel (no Docker), run the Redis tests and the cluster scenarios on them, tear down
	@./scripts/cluster/run.sh

.PHONY: test-partitions
test-partitions: ## RabbitMQ nodes in network namespaces (3.10.8, then 4.0.5), one cut off from the others with iptables while clients still reach it: the partition scenarios (root)
	@TEST_TIMEOUT=$(TEST_TIMEOUT) GO=$(GO) ./scripts/cluster/partitions.sh

.PHONY: bench
bench: services ## run the benchmarks and the load generator, printing medians
	@./scripts/bench.sh

.PHONY: bench-peer
bench-peer: services ## the peer alone: hibiken/asynq's no-op worker (bench/asynq) in Redis database 15, tasks/s and CPU per task from /proc (make bench runs it before and after its own runs)
	@mkdir -p .run
	$(GO) build -o .run/loadgen ./cmd/loadgen
	.run/loadgen peer

.PHONY: redis-cost
redis-cost: ## Redis instructions per consumed message (callgrind; steady on a noisy machine, unlike msg/s)
	@./scripts/redis-cost.sh consumer

.PHONY: redis-cost-api
redis-cost-api: ## Redis instructions per accepted code request, inside its take script (callgrind; the api binary under loadgen)
	@./scripts/redis-cost.sh api

.PHONY: lint
lint: ## golangci-lint (installs the pinned version into ./bin if missing)
	@test -x "$(GOLANGCI)" || GOBIN=$(CURDIR)/$(BIN) $(GO) install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_VERSION)
	$(GOLANGCI) run ./...

.PHONY: fmt
fmt: ## gofmt every Go file
	gofmt -w $$(git ls-files '*.go')

.PHONY: docs
docs: ## regenerate pkg/client's generated core from api/openapi.yaml and docs/commands.md from every command's -h
	@./scripts/docs.sh

.PHONY: definitions
definitions: ## regenerate rabbitmq/definitions.json from the topology model
	$(GO) run ./cmd/topology export -dev-user guest:guest -o rabbitmq/definitions.json

.PHONY: clean
clean: ## remove build output
	rm -rf $(BIN) .run
