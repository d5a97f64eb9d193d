SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c

.PHONY: build run test lint bench

build:
	go build -o bin/queen ./cmd/queen
	go build -o bin/queen-proxy ./cmd/queen-proxy
	go build -o bin/bench ./bench

run: build
	./bin/queen

# The fuzz smoke finds every Fuzz function itself, so a new one is run without editing this file.
# It runs a fixed number of inputs rather than a duration: a time limit that expires while a
# worker is busy makes go test report "context deadline exceeded" as a failure.
# The alerting rules are checked and unit-tested by promtool, from Debian's prometheus package
# (.ci/run installs it).
test:
	@command -v promtool >/dev/null || { echo "make test: promtool not found; install Debian's prometheus package (apt-get install prometheus)" >&2; exit 1; }
	promtool check rules deploy/prometheus/alerts.yml
	promtool test rules deploy/prometheus/alerts_test.yml
	go test -race -count=1 -timeout 15m ./...
	@list=$$(go test -list '^Fuzz' ./... | awk '/^Fuzz/ { names = names " " $$1; next } /^ok / { if (names != "") print $$2 names; names = "" }'); \
	while read -r pkg names; do \
		[ -n "$$pkg" ] || continue; \
		for name in $$names; do \
			echo "fuzz $$pkg $$name"; \
			go test -run '^$$' -fuzz "^$$name\$$" -fuzztime 20000x -fuzzminimizetime 0 "$$pkg"; \
		done; \
	done <<< "$$list"

lint:
	go vet ./...
	@unformatted=$$(gofmt -l .); \
	if [ -n "$$unformatted" ]; then echo "gofmt -l reports unformatted files:"; echo "$$unformatted"; exit 1; fi

bench:
	mkdir -p bench/results
	go run ./bench all --json bench/results/latest.json
