# The two commands (see README.md):
#   make demo   — install what is missing, build (release), stream the test scene host→client
#                 on this machine for 10 s, print the latency report.
#   make test   — install what is missing, run the whole test suite (unit, simulation,
#                 loopback integration, SDL window under Xvfb).
SHELL := /bin/bash
CARGO ?= cargo
DEMO_ARGS ?=
export PATH := $(HOME)/.cargo/bin:$(PATH)

.PHONY: demo test setup build bench lint fmt clean

setup:
	@./scripts/setup.sh

build: setup
	$(CARGO) build --release --locked -p untether-cli

demo: build
	./target/release/untether demo --duration 10 --report target/demo-report.json $(DEMO_ARGS)

test: setup
	./scripts/test.sh

lint: setup
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets --locked -- -D warnings

bench: build
	./scripts/bench.sh

clean:
	$(CARGO) clean
