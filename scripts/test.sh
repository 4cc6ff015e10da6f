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
# The aarch64 binary (tests/arm64.rs in untether-cli runs it under qemu-aarch64 as a client of
# the x86 host, and fails rather than skips when it is missing: UNTETHER_REQUIRE_ARM64) and the
# fuzz targets' instrumented build are built in the background, at nice 19, while the tests
# below run: those mostly wait on real time (streams of a few seconds each, one test at a
# time), and the two builds took 7-8 of the suite's 29 minutes in front of them. The cross
# build's packages are installed first, in the foreground (apt must not change libraries under
# running tests). It has its own target directory: a cross build locks the host's build
# directory too, which would hold up `cargo test`.
./scripts/setup.sh arm64
ARM64_DIR=target/arm64-ci
export UNTETHER_ARM64_BIN="$PWD/$ARM64_DIR/aarch64-unknown-linux-gnu/release/untether"
export UNTETHER_REQUIRE_ARM64=1
rm -f "$UNTETHER_ARM64_BIN"
# In a process group of its own, stopped with the run (Ctrl-C, a failure) rather than left behind.
# A new session is a new scheduler autogroup where the kernel has them
# (/proc/sys/kernel/sched_autogroup_enabled): autogroups share the CPU equally whatever the nice
# of the processes inside, so `nice` alone left the builds half of the two cores, and a test
# that streams x265 at 720p got 10 frames out in 3 s (CI, 2026-11-30). The autogroup's own nice
# is what ranks it: set to 19, two busy loops in it left a foreground pair 97 % of the cores
# instead of 49 %.
ARM64_DIR="$ARM64_DIR" setsid -w bash -c '
  echo 19 >/proc/self/autogroup 2>/dev/null || true
  nice -n 19 env CARGO_TARGET_DIR="$ARM64_DIR" ./scripts/build-arm64.sh >target/arm64-ci.log 2>&1 \
    || echo "test.sh: the aarch64 build failed (exit $?)" >>target/arm64-ci.log
  nice -n 19 ./scripts/fuzz-ci.sh 0 >target/fuzz-build.log 2>&1 \
    || echo "test.sh: the fuzz build failed (exit $?)" >>target/fuzz-build.log
' &
background=$!
trap 'kill -- "-$background" 2>/dev/null || kill "$background" 2>/dev/null || true' EXIT
# --no-fail-fast: one failing crate does not hide the results of the others.
# In the release profile: the dependencies built above are reused as they are (a second,
# test-profile build of FFmpeg's bindings, SDL2, x11rb and the rest would cost minutes on a
# clean clone), and the latency-sensitive tests run the code that ships. The aarch64 test waits
# for its binary: it runs after the background builds (selected from the whole workspace, so
# that features resolve as above and nothing is compiled again).
status=0
xvfb-run -a -s "-screen 0 1920x1080x24" cargo test --release --workspace --locked --no-fail-fast \
  -- --test-threads=1 --skip the_aarch64_client_decodes || status=$?
wait "$background"
trap - EXIT
tail -3 target/arm64-ci.log
cargo test --release --workspace --locked --test arm64 -- --test-threads=1 || status=$?
# 60 s of coverage-guided fuzzing over every fuzz target (stable toolchain, overflow checks on;
# built above).
./scripts/fuzz-ci.sh 60 || status=$?
exit "$status"
