#!/usr/bin/env bash
# The whole test suite: formatting and lints, then every test of every crate (the aarch64 client
# under qemu among them), then a 60 s fuzz run. Tests that need a display run under Xvfb
# (xvfb-run provides DISPLAY); tests that need root skip themselves with a message when not root.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PATH"
cargo fmt --all -- --check
cargo clippy --workspace --all-targets --locked -- -D warnings
# The protocol's simulation is not in what ships (feature `sim`): its example, linted apart.
cargo clippy -p untether-proto --features sim --examples --locked -- -D warnings
# One build for everything below, in the release profile: the libraries (the C library, the
# OpenXR runtime and the capture hook are cdylibs the tests load), the `untether` binary the
# integration tests drive as a separate process, every test executable and the examples (`cargo
# test` builds those too). `--tests` brings in the dev-dependencies, so shared crates resolve the
# same features as in `cargo test` below and nothing is compiled twice. `make example deb` get the
# same command and find it all built: with their own `-p` selections, features of shared crates
# resolved differently and the untether crate was compiled twice more.
BUILD_ALL="cargo build --release --locked --workspace --lib --bins --tests --examples"
$BUILD_ALL
# The C example the FFI test streams from.
make --no-print-directory example CARGO_BUILD="$BUILD_ALL"
# The Debian package (make install into a staging root, dpkg-deb): tests/install.rs in
# untether-cli installs it into an empty root, and fails rather than skips without it.
DEB_COMPRESSION=gzip make --no-print-directory deb CARGO_BUILD="$BUILD_ALL"
export UNTETHER_REQUIRE_DEB=1
# The aarch64 binary (cross build; installs its packages on first use): tests/arm64.rs in
# untether-cli runs it under qemu-aarch64 as a client of the x86 host, and fails rather than
# skips when it is missing (UNTETHER_REQUIRE_ARM64).
make --no-print-directory arm64
export UNTETHER_REQUIRE_ARM64=1
# --no-fail-fast: one failing crate does not hide the results of the others.
# In the release profile: the dependencies built above are reused as they are (a second,
# test-profile build of FFmpeg's bindings, SDL2, x11rb and the rest would cost minutes on a
# clean clone), and the latency-sensitive tests run the code that ships.
xvfb-run -a -s "-screen 0 1920x1080x24" cargo test --release --workspace --locked --no-fail-fast -- --test-threads=1
# 60 s of coverage-guided fuzzing over every fuzz target (stable toolchain, overflow checks on).
./scripts/fuzz-ci.sh 60
