#!/usr/bin/env bash
# Streams this machine's x86_64 host (target/release/untether, `make build`) to the aarch64
# client (`make arm64`) run under qemu-aarch64, headless, over loopback, and prints the client's
# report: how a Raspberry Pi's binary decodes what a PC sends, short of a Pi.
#
#   scripts/run-arm64-qemu.sh [SECONDS] [host video flags …]
#   scripts/run-arm64-qemu.sh 10 --resolution 360p --fps 60      # the figure in docs/BENCHMARKS.md
#
# The host listens on 127.0.0.1 only (a free port), with --access open and throwaway state
# directories. The client's JSON report is kept in target/arm64-qemu/client.json.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=10
if [ $# -gt 0 ] && [[ $1 =~ ^[0-9]+$ ]]; then
  seconds=$1
  shift
fi
host_bin=target/release/untether
client_bin=target/aarch64-unknown-linux-gnu/release/untether
[ -x "$host_bin" ] || { echo "run-arm64-qemu: no $host_bin: run make build" >&2; exit 1; }
[ -x "$client_bin" ] || { echo "run-arm64-qemu: no $client_bin: run make arm64" >&2; exit 1; }
command -v qemu-aarch64 >/dev/null || { echo "run-arm64-qemu: no qemu-aarch64: run scripts/setup.sh arm64" >&2; exit 1; }

out=target/arm64-qemu
mkdir -p "$out"
state=$(mktemp -d)
host_pid=
cleanup() {
  if [ -n "$host_pid" ] && kill -0 "$host_pid" 2>/dev/null; then
    kill -INT "$host_pid" 2>/dev/null || true
    wait "$host_pid" 2>/dev/null || true
  fi
  rm -rf "$state"
}
trap cleanup EXIT

# The host picks a free port (--bind …:0) and says which in its "listening on udp" line.
RUST_LOG=warn "$host_bin" --state-dir "$state/host" host --access open --bind 127.0.0.1:0 \
  --duration $((seconds + 60)) "$@" 2>"$out/host.log" &
host_pid=$!
addr=
for _ in $(seq 100); do
  addr=$(sed -n 's/.*listening on udp \([0-9.]*:[0-9]*\).*/\1/p' "$out/host.log" | head -1)
  [ -n "$addr" ] && break
  kill -0 "$host_pid" 2>/dev/null || { cat "$out/host.log" >&2; exit 1; }
  sleep 0.1
done
[ -n "$addr" ] || { echo "run-arm64-qemu: the host did not say where it listens" >&2; cat "$out/host.log" >&2; exit 1; }

echo "run-arm64-qemu: x86_64 host on $addr, aarch64 client under $(qemu-aarch64 --version | head -1), $seconds s"
RUST_LOG=warn qemu-aarch64 -L / "$client_bin" --state-dir "$state/client" client "$addr" \
  --headless --duration "$seconds" --report "$out/client.json"
echo "run-arm64-qemu: report in $out/client.json"
