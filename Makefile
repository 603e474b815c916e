# The two commands that matter: `make run` and `make test`.
GO       ?= go
BIN      := bin
PROTOC_GEN_GO_VERSION := v1.36.10

FUZZTIME ?= 2m
# package:target pairs of the fuzz targets
FUZZ_TARGETS := ./codec:FuzzDecode ./processors/scheduler:FuzzValidate ./processors/scheduler:FuzzEarliestDue

.PHONY: run test unit vet build proto clean fuzz fuzz-short

## run: the whole product on an embedded broker, with sample onboarding events
run:
	$(GO) run ./cmd/ivrsched run --demo

## test: vet, then every test (unit, end-to-end on the embedded broker, and the
## real Apache Kafka suite, which fetches and starts Kafka itself)
test: vet
	$(GO) test -race -count=1 -timeout 20m $$($(GO) list ./... | grep -v /systemtest)
	$(GO) test -race -count=1 -timeout 20m -v ./systemtest/
	$(MAKE) --no-print-directory fuzz-short

## unit: the fast tests only (no Apache Kafka)
unit:
	$(GO) test -race -count=1 -short ./...

## fuzz: every fuzz target for $(FUZZTIME) each; fuzz-short: 5 s each (part of test)
fuzz:
	@for t in $(FUZZ_TARGETS); do \
		echo "fuzz $${t#*:} in $${t%%:*} for $(FUZZTIME)"; \
		$(GO) test -run='^$$' -fuzz="^$${t#*:}$$" -fuzztime=$(FUZZTIME) $${t%%:*} || exit 1; \
	done

fuzz-short:
	@$(MAKE) --no-print-directory fuzz FUZZTIME=5s

vet:
	$(GO) vet ./...
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

clean:
	rm -rf $(BIN) ivrsched-data
