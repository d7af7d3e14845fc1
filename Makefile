# Fawn — common tasks. `make test` is the one command that runs the whole test suite.

CARGO ?= cargo
export TEST_DATABASE_URL ?= postgres://postgres@127.0.0.1:5432/test

PYTHON ?= python3
VENV := .venv
FUZZ_VENV := .venv-fuzz
SDK_JS := tests/sdk/js

.PHONY: test test-build test-envs rust-tests deps fmt-check lint fmt build release dist serve bench clean-data sdk-test sdk-bins fuzz nodes-test

## Everything CI checks: formatting, lints, unit + integration tests (SQLite and Postgres),
## the SDK compatibility suites (real Python and JS LangGraph SDKs against `fawn serve`), the
## multi-node suite and the API fuzz run (schemathesis, bounded time, zero server errors).
## Two phases, each side by side: first the lints and every build (CPU-bound) while the Python
## and JS test environments install (network-bound); then every test suite at once — the cargo
## tests spend most of their time waiting, and each suite spawns its own servers on port 0
## with its own database or schema. The fuzz run is bounded by time, so beside the others it
## tries fewer cases rather than taking longer. Phase 2 prints each suite's output in one
## piece when it ends; a failing suite fails the make.
test: deps
	$(MAKE) --no-print-directory -j3 test-build test-envs
	$(MAKE) --no-print-directory --output-sync=target -j4 rust-tests sdk-test nodes-test fuzz BINS_BUILT=1

## Clippy's lints run inside the test build rather than in a second compilation of every
## crate: the workspace's own crates are compiled by clippy-driver, as `cargo clippy` does
## itself (RUSTC_WORKSPACE_WRAPPER; CLIPPY_ARGS is how cargo-clippy hands `-D warnings` to
## the driver), so one compilation both lints and builds each target, and any clippy
## warning fails the build. Cargo keeps these artifacts apart from a plain `cargo build`'s
## (the wrapper is part of their hash), so `make test` and `cargo test` do not rebuild each
## other's. Every cargo call of the test suites uses it, or it would compile again.
## `make lint` is the plain `cargo clippy` (same lints).
LINTED := RUSTC_WORKSPACE_WRAPPER="$(shell rustc --print sysroot)/bin/clippy-driver" \
	CLIPPY_ARGS=-D__CLIPPY_HACKERY__warnings__CLIPPY_HACKERY__ MAKEFLAGS=

test-build: fmt-check
	$(LINTED) $(CARGO) test --workspace --all-targets --locked --no-run
	$(LINTED) $(CARGO) build --locked --workspace --all-targets

test-envs: $(VENV)/.installed $(FUZZ_VENV)/.installed $(SDK_JS)/node_modules/.installed

## The cargo tests alone (what `test-build` built), then the doc tests.
## (MAKEFLAGS emptied: make shares no jobserver with these cargo calls, so cargo's own
## warning about one it cannot open is noise.)
rust-tests:
	$(LINTED) $(CARGO) test --workspace --all-targets --locked
	$(LINTED) $(CARGO) test --workspace --doc --locked

## Three `fawn serve` on one Postgres behind a round-robin proxy, with and without the Redis
## event bus (Redis at TEST_REDIS_URL, default redis://127.0.0.1:6379), driven by the SDK.
nodes-test: sdk-bins $(VENV)/.installed
	cd tests/nodes && ../../$(VENV)/bin/python -m pytest

## Schemathesis against a spawned `fawn serve` (auth on, its own /openapi.json) for
## FAWN_FUZZ_SECONDS (default 150); any 5xx fails. Pinned in tests/fuzz/requirements.txt.
fuzz: sdk-bins $(FUZZ_VENV)/.installed
	$(FUZZ_VENV)/bin/python tests/fuzz/run.py

$(FUZZ_VENV)/.installed: tests/fuzz/requirements.txt
	$(FUZZ_VENV)/bin/python -m pip --version >/dev/null 2>&1 || { rm -rf $(FUZZ_VENV) && $(PYTHON) -m venv $(FUZZ_VENV); }
	$(FUZZ_VENV)/bin/python -m pip install --quiet --disable-pip-version-check -r tests/fuzz/requirements.txt
	touch $@

## The SDK compatibility suites (tests/sdk): Python `langgraph_sdk` under pytest and JS
## `@langchain/langgraph-sdk` under node:test, each against a spawned `fawn serve` on SQLite
## and on Postgres (TEST_DATABASE_URL) with the testkit mock LLM. Pinned versions.
sdk-test: sdk-bins $(VENV)/.installed $(SDK_JS)/node_modules/.installed
	cd tests/sdk/python && ../../../$(VENV)/bin/python -m pytest
	$(VENV)/bin/python tests/sdk/harness.py -- node --test --test-concurrency=1 --test-timeout=120000 $(SDK_JS)/

## The binaries the suites spawn, built with the same features as the cargo tests (which
## already built them): building `-p fawn --bins` alone would resolve features without the
## dev-dependencies and compile the workspace a second time.
## (`make test` builds them in its first phase and sets BINS_BUILT, so that no cargo build
## waits on the lock the running cargo tests hold.)
sdk-bins:
ifndef BINS_BUILT
	$(LINTED) $(CARGO) build --locked --workspace --all-targets
endif

$(VENV)/.installed: tests/sdk/python/requirements.txt
	$(VENV)/bin/python -m pip --version >/dev/null 2>&1 || { rm -rf $(VENV) && $(PYTHON) -m venv $(VENV); }
	$(VENV)/bin/python -m pip install --quiet --disable-pip-version-check -r tests/sdk/python/requirements.txt
	touch $@

$(SDK_JS)/node_modules/.installed: $(SDK_JS)/package.json $(SDK_JS)/package-lock.json
	cd $(SDK_JS) && npm ci --no-audit --no-fund
	touch $@

## System packages the tests need (bubblewrap for the bash sandbox). Idempotent.
deps:
	@./scripts/install-deps.sh

fmt-check:
	$(CARGO) fmt --all -- --check

lint: fmt-check
	$(CARGO) clippy --workspace --all-targets --locked -- -D warnings

fmt:
	$(CARGO) fmt --all

build:
	$(CARGO) build --locked -p fawn

release:
	$(CARGO) build --locked --release -p fawn

## What ships and what the published figures are measured on (thin LTO, one codegen unit).
dist:
	$(CARGO) build --locked --profile dist -p fawn -p fawn-testkit -p fawn-bench

## Start a server on :2024 (demo model when no model is configured).
serve:
	$(CARGO) run --locked -p fawn -- serve

## The benchmarks behind the figures in the issue notes (release builds; not tests).
bench:
	$(CARGO) build --locked --profile dist -p fawn -p fawn-testkit -p fawn-bench
	$(CARGO) run --locked --profile dist -p fawn-bench --bin agent_steps
	$(CARGO) run --locked --profile dist -p fawn-bench --bin persist_steps
	$(CARGO) run --locked --profile dist -p fawn-bench --bin server_load
