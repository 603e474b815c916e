# The two commands that matter: `make run` and `make test`.
GO       ?= go
BIN      := bin
PROTOC_GEN_GO_VERSION := v1.36.10

FUZZTIME ?= 2m
SUDO     := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
# package:target pairs of the fuzz targets
FUZZ_TARGETS := ./codec:FuzzDecode ./processors/scheduler:FuzzValidate ./processors/scheduler:FuzzParseValue ./internal/policy:FuzzEffective

# Benchmark: this project against etf1's Kafka scheduler, asynq on Redis and
# the seeds' re-enqueue loop (bench/ is a module of its own), with the
# broker's one-hop floor measured in the same run (kafka-floor), every phase
# three times; then the dialer alone, at 0, 50 and 300 ms of provider latency.
BENCH_DIALER := -dialer 20000 -dialer-latencies 0ms,50ms,300ms -dialer-args '--max-in-flight 500'
BENCH_QUICK := -systems kafka-floor,ivrsched-kafka,ivrsched-kafka-sched,ivrsched-kafka-dnc1m,ivrsched-embedded,asynq-default,asynq-100ms,etf1-warn-log,reenqueue-hold60s \
	-n 10000 -burst 150000 -crash 2000 -lead 5s -window 8s -crash-wait 60s -repeat 3 -prefire 2000 -idle 60s $(BENCH_DIALER)
BENCH_RETENTION := -systems none -retention 1000000 -retention-pending 100000 -retention-compact -lead 5s -crash-wait 120s
BENCH_FULL  := -systems all -n 200000 -crash 20000 -lead 20s -window 20s -crash-wait 150s -scale 1000000 -prefire 2000 $(BENCH_DIALER)

.PHONY: run test test-clients unit vet build proto clean fuzz fuzz-short bench bench-full bench-retention bench-test redis-server chromium

## run: the whole product on an embedded broker, with sample onboarding events
run:
	$(GO) run ./cmd/ivrsched run --demo --default-policy none

## test: vet, then every test (unit, end-to-end on the embedded broker, and the
## real Apache Kafka suite, which fetches and starts Kafka itself)
test: vet chromium
	$(GO) test -race -count=1 -timeout 20m $$($(GO) list ./... | grep -v /systemtest)
	$(GO) test -race -count=1 -timeout 20m -v ./systemtest/
	cd bench && $(GO) vet ./... && $(GO) test -race -count=1 ./harness/ ./systems/ivrsched/
	$(MAKE) --no-print-directory fuzz-short

## test-clients: the Java (Maven, with the Spring Boot example) and Node.js
## clients' tests and the Go/Java/Node.js contract check, against Apache Kafka
## and a live ivrsched (part of test, through ./systemtest/)
test-clients:
	$(GO) test -race -count=1 -timeout 20m -v -run 'TestClients$$|TestClientSnippetsInReadme|TestCrossClientKafkaJS' ./systemtest/

## unit: the fast tests only (no Apache Kafka)
unit:
	$(GO) test -race -count=1 -short ./...

## fuzz: every fuzz target for $(FUZZTIME) each; fuzz-short: 20,000 inputs each
## (part of test; 1.5 to 5 s each on 2 cores). A count, not a duration: with a
## duration Go 1.26's fuzzing coordinator can fail a target with "context
## deadline exceeded" as the time runs out, no input at fault (go.dev/issue/75804,
## fixed in Go 1.27).
fuzz:
	@for t in $(FUZZ_TARGETS); do \
		echo "fuzz $${t#*:} in $${t%%:*}, -fuzztime $(FUZZTIME)"; \
		$(GO) test -run='^$$' -fuzz="^$${t#*:}$$" -fuzztime=$(FUZZTIME) $${t%%:*} || exit 1; \
	done

fuzz-short:
	@$(MAKE) --no-print-directory fuzz FUZZTIME=20000x

## vet: go vet; the import rules between our packages (.ci/imports lists
## them: nothing imports internal/app, the leaves import nothing of ours but
## codec, no package imports an ancestor's, processors stay apart); gofmt
vet:
	$(GO) vet ./...
	GO=$(GO) ./.ci/imports
	@unformatted=$$(gofmt -l $$(git ls-files '*.go' | grep -v '\.pb\.go$$')); \
	if [ -n "$$unformatted" ]; then echo "gofmt needed: $$unformatted"; exit 1; fi

build:
	$(GO) build -o $(BIN)/ivrsched ./cmd/ivrsched

## proto: regenerate codec/ivrschedpb from codec/ivrsched.proto
## (protoc from Debian's protobuf-compiler; protoc-gen-go is installed here)
proto:
	@command -v protoc >/dev/null || { echo "protoc not found: apt-get install protobuf-compiler"; exit 1; }
	GOBIN=$(CURDIR)/$(BIN) $(GO) install google.golang.org/protobuf/cmd/protoc-gen-go@$(PROTOC_GEN_GO_VERSION)
	PATH=$(CURDIR)/$(BIN):$$PATH protoc -I codec --go_out=codec/ivrschedpb --go_opt=paths=source_relative codec/ivrsched.proto

## bench: nine systems side by side, three runs each, then each Kafka system
## idle for 60 s, then the dialer alone (about 55 minutes); bench-full: every
## variant, 200 k per phase
bench: redis-server
	cd bench && $(GO) run ./cmd/ivrbench $(BENCH_QUICK) -out ../docs/bench

bench-full: redis-server
	cd bench && $(GO) run ./cmd/ivrbench $(BENCH_FULL) -out ../docs/bench-full

## bench-retention: restart and rebalance of ivrsched with 100 k pending, then
## with 1 M idle users too, then after retention removed them (about 15 minutes)
bench-retention:
	cd bench && $(GO) run ./cmd/ivrbench $(BENCH_RETENTION) -out ../docs/bench-retention

## bench-test: the benchmark subjects' own tests (Apache Kafka, redis-server, a cgo build of etf1)
bench-test: redis-server
	cd bench && $(GO) test -count=1 -timeout 20m ./...

# asynq needs a local redis-server, from Debian's package.
redis-server:
	@command -v redis-server >/dev/null || { \
		echo "installing redis-server (Debian package)"; \
		$(SUDO) apt-get update -qq && $(SUDO) apt-get install -y -qq redis-server >/dev/null; }

# The web page's browser test (cmd/ivrsched) drives Debian's chromium.
chromium:
	@command -v chromium >/dev/null || { \
		echo "installing chromium (Debian package)"; \
		$(SUDO) apt-get update -qq && $(SUDO) apt-get install -y -qq chromium >/dev/null; }

clean:
	rm -rf $(BIN) ivrsched-data
