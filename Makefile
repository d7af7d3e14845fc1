# Fawn — common tasks. `make test` is the one command that runs the whole test suite.

CARGO ?= cargo
export TEST_DATABASE_URL ?= postgres://postgres@127.0.0.1:5432/test

.PHONY: test deps lint fmt build release serve bench clean-data

## Everything CI checks: formatting, lints, unit + integration tests (SQLite and Postgres).
test: deps lint
	$(CARGO) test --workspace --all-targets --locked
	$(CARGO) test --workspace --doc --locked

## System packages the tests need (bubblewrap for the bash sandbox). Idempotent.
deps:
	@./scripts/install-deps.sh

lint:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets --locked -- -D warnings

fmt:
	$(CARGO) fmt --all

build:
	$(CARGO) build --locked -p fawn

release:
	$(CARGO) build --locked --release -p fawn

## Start a server on :2024 (demo model when no model is configured).
serve:
	$(CARGO) run --locked -p fawn -- serve

bench:
	$(CARGO) run --locked --release -p fawn-bench
