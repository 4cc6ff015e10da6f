#!/usr/bin/env bash
# RUSTC_WRAPPER for scripts/fuzz-ci.sh: coverage instrumentation (sanitizer-coverage) only for
# our own crates. A crate from the registry (reed-solomon-simd, the crypto crates, …) is built
# without the sancov pass, so libFuzzer neither steers by nor pays for comparison tracing in
# their inner loops (profiled: 70 % of session_pair's time went to reed-solomon-simd's traced
# comparisons). Debug assertions, overflow checks and --cfg fuzzing stay on everywhere.
rustc="$1"
shift
case " $* " in
*/registry/src/* | */git/checkouts/*)
  args=()
  for a in "$@"; do
    case "$a" in
    -Cpasses=sancov-module | -Cllvm-args=-sanitizer-coverage-*) ;;
    *) args+=("$a") ;;
    esac
  done
  exec "$rustc" "${args[@]}"
  ;;
*) exec "$rustc" "$@" ;;
esac
