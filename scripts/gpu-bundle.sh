#!/usr/bin/env bash
# untether's GPU check, for anyone with an NVIDIA machine (no display needed).
#
#   scripts/gpu-bundle.sh pack [BINARY]   here (Debian 12 with the build's libraries): packs the
#                                         release binary (default target/release/untether) and
#                                         every library it needs but glibc into
#                                         target/gpu-bundle/ (ut.tar.xz, run.sh, summary.py;
#                                         about 2 min, ~41 MiB; UT_XZ_LEVEL=0 packs faster
#                                         on a loaded machine, ~50 MiB)
#   scripts/gpu-bundle.sh run [DIR]       on the GPU machine, from a copy of that folder (or in
#                                         it: DIR defaults to target/gpu-bundle): unpacks to
#                                         /tmp/ut and runs the GPU figures (presenter, late warp
#                                         through the distortion mesh, NVDEC with the warm
#                                         decoder, zero-copy decode and encode (doctor) or
#                                         their fallback lines, encoder threads auto
#                                         against 2), each step under a timeout,
#                                         within UT_BUDGET_S (default 330 s). Results in $OUT
#                                         (default /tmp/ut-out): summary.txt first.
#
# What the bundle carries and how GL reaches the GPU without an X server: scripts/gpu/README.md.
# Needs for pack: python3, gcc, binutils (readelf, strip), xz, libsdl2-dev, libegl-dev.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
GPU=$ROOT/scripts/gpu
cmd=${1:-}
case "$cmd" in
pack)
    bin=${2:-$ROOT/target/release/untether}
    out=${UT_BUNDLE_OUT:-$ROOT/target/gpu-bundle}
    if [ ! -x "$bin" ]; then
        echo "gpu-bundle: no binary at $bin: build it first (cargo build --release -p untether-cli)" >&2
        exit 2
    fi
    mkdir -p "$out"
    cp "$GPU/run.sh" "$GPU/summary.py" "$out/"
    UT_BUNDLE_OUT=$out python3 "$GPU/build_bundle.py" "$bin"
    echo "gpu-bundle: $out is ready: copy it to the GPU machine and run 'bash run.sh' in it (or scripts/gpu-bundle.sh run DIR)"
    ;;
run)
    dir=${2:-$ROOT/target/gpu-bundle}
    if [ ! -f "$dir/ut.tar.xz" ]; then
        echo "gpu-bundle: no $dir/ut.tar.xz: run 'scripts/gpu-bundle.sh pack' first" >&2
        exit 2
    fi
    exec bash "$dir/run.sh"
    ;;
*)
    echo "usage: scripts/gpu-bundle.sh pack [BINARY] | run [DIR]" >&2
    exit 2
    ;;
esac
