#!/usr/bin/env bash
# The whole test suite: formatting and lints, then every test of every crate. Tests that need
# a display run under Xvfb (xvfb-run provides DISPLAY); tests that need root skip themselves
# with a message when not root.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PATH"
cargo fmt --all -- --check
cargo clippy --workspace --all-targets --locked -- -D warnings
# Build the release binary the integration tests drive as a separate process.
cargo build --release --locked -p untether-cli -p untether-ffi
# The C example the FFI test streams from.
make --no-print-directory example
xvfb-run -a -s "-screen 0 1920x1080x24" cargo test --workspace --locked -- --test-threads=1
