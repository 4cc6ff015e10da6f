#!/usr/bin/env bash
# The fuzz run of `make test` (and so of CI): every fuzz target of fuzz/ under libFuzzer for
# SECONDS of wall time in total (default 60), two targets at a time, from an empty corpus.
# Built with the stable toolchain and the sanitizer-coverage flags cargo-fuzz passes (without a
# sanitizer: untether-proto has no unsafe code; ring_header drives untether-capture's ring,
# whose unsafe is the mapping, and checks every byte it hands out lies inside it), plus debug
# assertions and overflow checks, so
# neither a nightly toolchain nor cargo-fuzz needs installing. It also builds the
# `cfg(fuzzing)` code paths the normal build never sees. Only our own crates get coverage
# instrumentation (scripts/fuzz-rustc.sh strips it from registry crates: tracing comparisons
# inside reed-solomon-simd's and the crypto crates' inner loops halved session_pair's and
# quartered host_datagrams' executions per second, and steered towards their code, not ours).
# Exits non-zero if a target crashes; the input is kept under fuzz/artifacts/ci/.
# SECONDS=0 only builds (for the long runs in docs/BENCHMARKS.md). FUZZ_TRACE_COMPARES=0 builds
# without comparison tracing, into fuzz/target/fuzz-ci-nocmp: about twice the executions per
# second of session_pair, for long runs over a corpus whose coverage has stopped growing (the CI
# run keeps it on).
set -euo pipefail
cd "$(dirname "$0")/../fuzz"
export PATH="$HOME/.cargo/bin:$PATH"
TOTAL="${1:-60}"
if ! [[ "$TOTAL" =~ ^[0-9]+$ ]]; then
  echo "fuzz-ci.sh: SECONDS must be a whole number of seconds (0 = build only), not '$TOTAL'" >&2
  exit 2
fi
# (Its own target directories: cargo does not rebuild when RUSTC_WRAPPER changes.)
case "${FUZZ_TRACE_COMPARES:-1}" in
1)
  trace_compares="-Cllvm-args=-sanitizer-coverage-trace-compares "
  export CARGO_TARGET_DIR="$PWD/target/fuzz-ci"
  ;;
0)
  trace_compares=""
  export CARGO_TARGET_DIR="$PWD/target/fuzz-ci-nocmp"
  ;;
*)
  echo "fuzz-ci.sh: FUZZ_TRACE_COMPARES must be 0 or 1, not '${FUZZ_TRACE_COMPARES}'" >&2
  exit 2
  ;;
esac
export RUSTC_WRAPPER="$PWD/../scripts/fuzz-rustc.sh"
triple="$(rustc -vV | sed -n 's/^host: //p')"
# --target keeps these flags off build scripts (they cannot link sanitizer-coverage hooks).
RUSTFLAGS="-Cpasses=sancov-module -Cllvm-args=-sanitizer-coverage-level=4 \
-Cllvm-args=-sanitizer-coverage-inline-8bit-counters -Cllvm-args=-sanitizer-coverage-pc-table \
${trace_compares}--cfg fuzzing -Cdebug-assertions -Coverflow-checks" \
  cargo build --release --locked --bins --target "$triple" --quiet
bin="$CARGO_TARGET_DIR/$triple/release"
if [ "$TOTAL" = 0 ]; then
  echo "fuzz: built in $bin"
  exit 0
fi
mapfile -t targets < <(sed -n 's/^name = "\(.*\)"/\1/p' Cargo.toml | grep -v '^untether-fuzz$')
# Two at a time: each target gets 2 × TOTAL / count seconds.
each=$(( (2 * TOTAL + ${#targets[@]} - 1) / ${#targets[@]} ))
mkdir -p artifacts/ci target/fuzz-ci/logs
run_one() {
  local t="$1" each="$2" bin="$3"
  local corpus log
  corpus="$(mktemp -d)"
  log="target/fuzz-ci/logs/$t.log"
  if "$bin/$t" -max_total_time="$each" -max_len=4096 -timeout=10 -rss_limit_mb=2048 \
      -print_final_stats=1 -artifact_prefix="artifacts/ci/$t-" "$corpus" >"$log" 2>&1; then
    result=ok
  else
    result=CRASH
  fi
  rm -rf "$corpus"
  local execs
  execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' | tail -1)
  printf 'fuzz %-20s %3s s  execs=%-10s %s\n' "$t" "$each" "${execs:-?}" "$result"
  if [ "$result" != ok ]; then
    tail -40 "$log"
    return 1
  fi
}
export -f run_one
echo "fuzz: ${#targets[@]} targets, ${each} s each, two at a time"
printf '%s\n' "${targets[@]}" | xargs -P 2 -I{} bash -c 'run_one "$@"' _ {} "$each" "$bin"
