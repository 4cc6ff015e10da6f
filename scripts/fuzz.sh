#!/usr/bin/env bash
# Runs every cargo-fuzz target of fuzz/ for SECONDS each (CI: 60), or for RUNS executions each
# with FUZZ_RUNS=N (the long runs recorded in docs/BENCHMARKS.md). Prints one summary line per
# target: name, executions, seconds, result. Exits non-zero if any target found a crash.
#   scripts/fuzz.sh 60
#   FUZZ_RUNS=10000000 scripts/fuzz.sh
# Needs a nightly toolchain and cargo-fuzz (installed here if missing).
set -euo pipefail
cd "$(dirname "$0")/../fuzz"
export PATH="$HOME/.cargo/bin:$PATH"
SECONDS_EACH="${1:-60}"
RUNS="${FUZZ_RUNS:-}"
SANITIZER="${FUZZ_SANITIZER:-address}"
if ! rustup run nightly rustc --version >/dev/null 2>&1; then
  rustup toolchain install nightly --profile minimal
fi
if ! command -v cargo-fuzz >/dev/null; then
  cargo install cargo-fuzz --locked
fi
mkdir -p logs
cargo +nightly fuzz build -O -s "$SANITIZER" >/dev/null
status=0
for target in $(cargo +nightly fuzz list); do
  if [ -n "$RUNS" ]; then limit=(-runs="$RUNS"); else limit=(-max_total_time="$SECONDS_EACH"); fi
  log="logs/$target.log"
  start=$(date +%s.%N)
  if cargo +nightly fuzz run -O -s "$SANITIZER" "$target" -- "${limit[@]}" -max_len=4096 -print_final_stats=1 >"$log" 2>&1; then
    result=ok
  else
    result=CRASH
    status=1
  fi
  end=$(date +%s.%N)
  execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' | tail -1)
  printf '%-20s execs=%-12s seconds=%-8.1f result=%s\n' "$target" "${execs:-?}" "$(echo "$end - $start" | bc)" "$result"
  if [ "$result" != ok ]; then tail -40 "$log"; fi
done
exit $status
