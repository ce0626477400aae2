# spate: build, local services, tests, demo. `make help` lists the targets.
# Services (Kafka via nisshi, ClickHouse 18.16 and 26.9) are managed by scripts/services.sh;
# their addresses are in build/services.env after `make services`.

SHELL := /bin/bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := help

CARGO ?= cargo
# Extra arguments for `cargo test`, e.g. make test TEST_ARGS='-- --nocapture'
TEST_ARGS ?=
SERVICES := scripts/services.sh
ENV_FILE := $(or $(SPATE_BUILD_DIR),build)/services.env

.PHONY: help prereqs build lint services services-down services-status test loom bench bench-scaling bench-levers demo clean-services

help: ## list the targets
	@grep -E '^[a-zA-Z_-]+:.*## ' $(MAKEFILE_LIST) | \
	    awk 'BEGIN {FS = ":.*## "}; {printf "  make %-16s %s\n", $$1, $$2}'

prereqs: ## install the OS packages the build and the services need (apt; only what is missing)
	scripts/prereqs.sh

build: prereqs ## cargo build --release
	$(CARGO) build --release

services: ## start Kafka (nisshi) and ClickHouse, installing them if missing
	$(SERVICES) up

services-down: ## stop the services started by `make services`
	$(SERVICES) down

services-status: ## show whether the services run and answer
	$(SERVICES) status

clean-services: ## stop the services and delete their data (build/services)
	$(SERVICES) clean

# The ci profile and the test run's features: the build scripts (librdkafka,
# OpenSSL and curl from source) then run once for lint and tests, not twice.
lint: prereqs ## cargo clippy on every crate and target, warnings as errors
	$(CARGO) clippy --workspace --all-targets --profile ci --features spate/fault-injection -- -D warnings

# lint comes first, so a lint fails before services start and tests build.
test: lint services ## clippy, services up, then every test (unit, fakes, proptest, integration, loom) against them
	source $(ENV_FILE) && $(CARGO) test --workspace --profile ci --features spate/fault-injection --no-fail-fast $(TEST_ARGS)
	$(MAKE) loom

loom: ## model-check the drain barrier and the pending gate with loom
	RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom $(CARGO) test --profile ci -p spate_core --lib loom

BENCH_VENV := $(or $(SPATE_BUILD_DIR),build)/bench-venv

bench: prereqs services $(BENCH_VENV)/.ready ## micro + end-to-end benchmarks, ceilings, peers (BENCH_MESSAGES, BENCH_SUITE); results in bench/results/
	$(CARGO) build --release
	$(CARGO) build --release -p spate_kafka --example consume_ceiling
	# HTTPS inserts as a ratio to plain HTTP, CDC beside plain JSON, and
	# routing's 1/10/200-table curve, freshness at 20k events/s and at
	# saturation (one line each), then the main bench,
	# whose fixed-form summary line stays last.
	source $(ENV_FILE) && python3 bench/https_ratio.py
	source $(ENV_FILE) && python3 bench/cdc_ratio.py
	source $(ENV_FILE) && python3 bench/routing_curve.py
	source $(ENV_FILE) && python3 bench/freshness.py
	source $(ENV_FILE) && python3 bench/insert_modes.py
	source $(ENV_FILE) && $(BENCH_VENV)/bin/python bench/bench.py

bench-levers: prereqs ## issue 20's encoder levers: spate's JSON scan against simd-json and sonic-rs, the Native transposition's share (criterion, no services)
	$(CARGO) bench -p spate_clickhouse --bench encode_levers -- --noplot

bench-scaling: prereqs services ## issue 20's scaling table: partitions x small/wide events x 1/2 shards (BENCH_SCALING_*); bench/results/scaling-<date>.md
	$(CARGO) build --release
	source $(ENV_FILE) && BENCH_SUITE=scaling python3 bench/bench.py

# matplotlib for the plot, in a venv of its own (the bench's only non-stdlib module).
$(BENCH_VENV)/.ready:
	python3 -m venv $(BENCH_VENV)
	$(BENCH_VENV)/bin/pip install --quiet --disable-pip-version-check 'matplotlib>=3.8,<4'
	touch $@

demo: prereqs ## gen DEMO_COUNT (1000000) events, load them with spate run, show rows/s
	scripts/demo.sh
