# spate: build, local services, tests, demo. `make help` lists the targets.
# Services (Kafka via tansu, ClickHouse 18.16) are managed by scripts/services.sh;
# their addresses are in build/services.env after `make services`.

SHELL := /bin/bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := help

CARGO ?= cargo
# Extra arguments for `cargo test`, e.g. make test TEST_ARGS='-- --nocapture'
TEST_ARGS ?=
SERVICES := scripts/services.sh
ENV_FILE := $(or $(SPATE_BUILD_DIR),build)/services.env

.PHONY: help build services services-down services-status test loom bench demo clean-services

help: ## list the targets
	@grep -E '^[a-zA-Z_-]+:.*## ' $(MAKEFILE_LIST) | \
	    awk 'BEGIN {FS = ":.*## "}; {printf "  make %-16s %s\n", $$1, $$2}'

build: ## cargo build --release
	$(CARGO) build --release

services: ## start Kafka (tansu) and ClickHouse, installing them if missing
	$(SERVICES) up

services-down: ## stop the services started by `make services`
	$(SERVICES) down

services-status: ## show whether the services run and answer
	$(SERVICES) status

clean-services: ## stop the services and delete their data (build/services)
	$(SERVICES) clean

test: services ## services up, then every test (unit, fakes, proptest, integration, loom) against them
	source $(ENV_FILE) && $(CARGO) test --workspace --release --no-fail-fast $(TEST_ARGS)
	$(MAKE) loom

loom: ## model-check the drain barrier and the pending gate with loom
	RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom $(CARGO) test --release -p spate_core --lib loom

bench: services ## end-to-end benchmarks (BENCH_SUITE, BENCH_MESSAGES); results in bench/results/
	$(CARGO) build --release
	source $(ENV_FILE) && python3 bench/bench.py

demo: ## gen DEMO_COUNT (1000000) events, load them with spate run, show rows/s
	scripts/demo.sh
