# railmq: run `make help` for the targets.
GO        ?= go
STATICCHECK_VERSION ?= v0.8.2
PKGS      := ./...
FUZZTIME  ?= 10s
# The image's version (its label and railmq --version) and tag.
VERSION   ?= $(shell sed -n 's/^var version = "\(.*\)"$$/\1/p' cmd/railmq/main.go)
REVISION  ?= $(shell git rev-parse --short HEAD 2>/dev/null || echo unknown)
IMAGE     ?= railmq:$(VERSION)
LATEST    ?= railmq:latest

.PHONY: help run build image test lint generate check-generate fuzz bench compat compat-amqp091 compat-amqplib compat-clients compat-migrate crash-test cluster-test clean

help: ## list the targets
	@grep -E '^[a-z0-9-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-16s %s\n", $$1, $$2}'

run: build ## run the broker on :5672 with its data under ./data (guest/guest from localhost), the console and API on :15672, metrics on :15692
	./bin/railmq --listen :5672 --data-dir ./data --management-listen :15672 --prometheus-listen :15692

build: ## build bin/railmq and bin/railmqctl
	$(GO) build -o bin/railmq ./cmd/railmq
	$(GO) build -o bin/railmqctl ./cmd/railmqctl

image: ## build the OCI image railmq:VERSION and railmq:latest (IMAGE, LATEST; deploy/docker/Dockerfile, FROM scratch) from static binaries; needs a running Docker engine
	rm -rf bin/image
	mkdir -p bin/image/usr/local/bin bin/image/data bin/image/conf bin/image/tmp
	chmod 1777 bin/image/tmp
	cp -r deploy/docker/rootfs/etc bin/image/etc
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags "-s -w -X main.version=$(VERSION)" -o bin/image/usr/local/bin/railmq ./cmd/railmq
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags "-s -w -X main.version=$(VERSION)" -o bin/image/usr/local/bin/railmqctl ./cmd/railmqctl
	cp bin/image/usr/local/bin/railmqctl bin/image/usr/local/bin/rabbitmqctl
	cp bin/image/usr/local/bin/railmqctl bin/image/usr/local/bin/rabbitmq-diagnostics
	docker build -f deploy/docker/Dockerfile --build-arg VERSION=$(VERSION) --build-arg REVISION=$(REVISION) -t $(IMAGE) $(if $(LATEST),-t $(LATEST)) bin/image

test: ## run every test (unit, fuzz seeds, conformance over real TCP) under the race detector
	$(GO) test -count=1 -race -timeout 30m $(PKGS)

lint: ## go vet, gofmt and staticcheck
	$(GO) vet $(PKGS)
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); echo "gofmt needed"; exit 1; }
	$(GO) run honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION) $(PKGS)

generate: ## regenerate amqp/spec_gen.go from spec/amqp0-9-1.stripped.extended.xml of the amqp091-go module go.mod requires (module cache)
	cd amqp && $(GO) generate

check-generate: ## fail if regenerating the codecs changes them
	@out=$$(mktemp /tmp/railmq_spec_gen.XXXXXX.go) && \
	(cd amqp && $(GO) run gen.go -out "$$out" && diff -u spec_gen.go "$$out"); \
	rc=$$?; rm -f "$$out"; exit $$rc

fuzz: ## run every fuzz target for FUZZTIME each
	@for t in $$(grep -o '^func Fuzz[A-Za-z]*' */*_test.go | sed 's#/[^:]*:func #:#'); do \
		p=$${t%%:*}; f=$${t#*:}; \
		echo "== $$p $$f"; $(GO) test ./$$p -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) || exit 1; done

crash-test: ## kill -9 the real binary under load CRASH_ROUNDS times (default 200) and check nothing confirmed is lost
	RAILMQ_CRASH_ROUNDS=$(or $(CRASH_ROUNDS),200) $(GO) test -count=1 -timeout 60m -run '^TestCrashRecovery$$' -v ./conformance

cluster-test: ## fault rounds on a 3-node cluster (kill -9 leader/follower, restart, empty data dir, partition of 4 s, leader paused or silenced 12 s, partition of 13 s) CLUSTER_ROUNDS times (default 100), checked by a history of every message; the same on a replicated stream
	RAILMQ_CLUSTER_ROUNDS=$(or $(CLUSTER_ROUNDS),100) $(GO) test -count=1 -timeout 120m -run '^TestClusterFaults(Stream)?$$' -v ./conformance

bench: ## run the benchmarks (codecs, routing)
	$(GO) test -run '^$$' -bench . -benchmem $(PKGS)

bench-compare: ## railmq vs a fresh RabbitMQ, scenarios S1-S9 (ROUNDS, DURATION, S6_MESSAGES...: see bench/compare.sh); writes bench/RESULTS.md; AGAINST=REV: vs railmq at git revision REV instead, into bench/RESULTS-against.md
	GO="$(GO)" bash bench/compare.sh

bench-cluster: ## a 3-node railmq cluster vs a 3-node RabbitMQ cluster, S3's workload on a quorum queue (ROUNDS, DURATION); writes bench/RESULTS-cluster.md; AGAINST=REV: vs a 3-node cluster of railmq at git revision REV instead, into bench/RESULTS-cluster-against.md
	GO="$(GO)" bash bench/cluster.sh

bench-smoke: ## 5s railmq-perf run against a freshly started railmq; fails on any lost or duplicated message
	GO="$(GO)" bash bench/compare.sh --smoke

.PHONY: bench-compare bench-cluster bench-smoke

compat: ## compat-amqp091, compat-amqplib, compat-clients against a fresh railmq, and compat-migrate; fails if any has an unexpected failure
	@rc=0; \
	$(MAKE) --no-print-directory compat-amqp091 || rc=1; \
	$(MAKE) --no-print-directory compat-amqplib || rc=1; \
	$(MAKE) --no-print-directory compat-clients || rc=1; \
	$(MAKE) --no-print-directory compat-migrate || rc=1; \
	if [ $$rc != 0 ]; then echo "make compat: FAILED (see the summaries above)"; fi; \
	exit $$rc

compat-amqp091: ## amqp091-go's integration tests against a fresh railmq (allowlist: scripts/compat-expected-failures.txt)
	GO="$(GO)" bash scripts/compat.sh

compat-clients: ## our checks with Python pika and Ruby bunny (scripts/clients/) against a fresh railmq (allowlist: scripts/compat-clients-expected-failures.txt)
	GO="$(GO)" bash scripts/compat-clients.sh

compat-amqplib: ## Node amqplib's own test files against a fresh railmq on localhost:5672 (allowlist: scripts/compat-amqplib-expected-failures.txt)
	GO="$(GO)" bash scripts/compat-amqplib.sh

compat-migrate: ## the blue-green migration from a private RabbitMQ 3.10.8 node to railmq (docs/migrating.md): definitions, federation, consumers then producers moved, a shovel for the rest, kill -9 of each side, history check
	RAILMQ_MIGRATION=1 $(GO) test -count=1 -timeout 15m -run '^TestMigrationFromRabbitMQ$$' -v ./conformance

clean: ## remove build output and ./data
	rm -rf bin data
