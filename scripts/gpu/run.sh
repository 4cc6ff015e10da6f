#!/usr/bin/env bash
# untether on a GPU machine without X, Mesa, FFmpeg or SDL: unpacks the bundle (ut.tar.xz: the
# binary and every non-glibc library it needs) to /tmp/ut, points GL at the NVIDIA driver's EGL
# (glvnd vendor file under /usr/local/nvidia) and runs, each step under `timeout`, within one
# time budget: diagnostics, the VR late-warp bench with the GL presenter drawing through SDL's
# `offscreen` video driver (EGL device platform, no X server), `untether doctor`, headless
# demos (1080p, 1080p --slices 8, 720p, 1080p with NVDEC via --hwaccel cuda), the 1080p VR bench.
#
#   bash run.sh                         (in the folder `scripts/gpu-bundle.sh pack` made, next to
#                                        ut.tar.xz; results in $OUT)
#
# Issue 34's zero-copy encode: `untether doctor`'s "zero-copy encode" check sets up the VA-API
# DMA-BUF import for real (device, frames, scale_vaapi) and says it engaged or why not (the
# summary's doctor lines and zero_copy_encode; H100/H200 machines have no VA-API: expect the
# reason).
#
# Issue 27's figures among them: the encoder threads auto chose (demo-1080p) against 2
# (demo-1080p-t2), the decoder opened and warmed at connect ("first picture decoded" and the
# glass-to-glass p99 of demo-1080p-cuda), the late warp through the distortion mesh
# (bench-vr-*), and which path took the GL presenter's pictures (demo-gl-cuda: zero-copy or
# the software path's one line) with decode + present at 1080p against the software path
# (demo-gl-cuda-sw, UNTETHER_ZERO_COPY=off).
#
# Results in $OUT (at most 8 files): summary.txt, console.log, logs.tar.gz (every log, the bench
# JSON/HTML reports, doctor, environment), d1080.json, d1080-s8.json, d720.json, d1080-cuda.json.
# Knobs (environment): UT_BUDGET_S (seconds for everything, default 330), UT_DIR (/tmp/ut),
# UT_WORK (/tmp/ut-work), UT_EGL_VENDOR (a glvnd EGL vendor JSON to use instead of NVIDIA's),
# UT_SDL_VIDEODRIVER (default offscreen), UT_BENCH_S (seconds per bench scenario, default 10),
# UT_DEMO_S (seconds per demo, default 10).
set -u
GPU_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
OUT=${OUT:-/tmp/ut-out}
UT=${UT_DIR:-/tmp/ut}
W=${UT_WORK:-/tmp/ut-work}
BUDGET=${UT_BUDGET_S:-330}
BENCH_S=${UT_BENCH_S:-10}
DEMO_S=${UT_DEMO_S:-10}
RESERVE=12 # seconds kept for the summary and packing
LAST_RC=0
T0=$(date +%s)
mkdir -p "$OUT"
rm -rf "$W"
mkdir -p "$W"

left() { echo $((BUDGET - ($(date +%s) - T0))); }
say() { echo "[$(date -u +%H:%M:%S) +$(($(date +%s) - T0))s] $*"; }

# Packs the work folder into $OUT/logs.tar.gz (after every step, so a run cut short still
# returns what it did).
pack() {
    tar -czf "$OUT/logs.tar.gz.tmp" -C "$W" --exclude=./state . 2>/dev/null && mv -f "$OUT/logs.tar.gz.tmp" "$OUT/logs.tar.gz"
}

# step NAME MAX_S NEED_S CMD...: CMD under timeout min(MAX_S, time left - reserve), output in
# $W/NAME.log; skipped when less than NEED_S would be left for it.
step() {
    local name=$1 max=$2 need=$3
    shift 3
    local l t s rc
    l=$(left)
    t=$max
    if ((t > l - RESERVE)); then t=$((l - RESERVE)); fi
    if ((t < need)); then
        say "STEP $name skipped: ${l}s left of ${BUDGET}s"
        LAST_RC=skipped
        echo "$name skipped (${l}s left)" >>"$W/steps.txt"
        return 0
    fi
    say "STEP $name (timeout ${t}s): $*"
    s=$(date +%s)
    timeout -k 5 "$t" "$@" >"$W/$name.log" 2>&1
    rc=$?
    LAST_RC=$rc
    echo "$name rc=$rc $(($(date +%s) - s))s" >>"$W/steps.txt"
    if ((rc != 0)); then
        say "STEP $name failed rc=$rc$( ((rc == 124 || rc == 137)) && echo ' (timed out)'); last lines:"
        tail -n 12 "$W/$name.log" | sed 's/^/    /'
    else
        say "STEP $name ok ($(($(date +%s) - s))s)"
    fi
    # The lines worth seeing at once: what drew, pose-to-photon, the decoder, warnings.
    grep -aE "GL presenter|pose-to-photon p50|decoding .* with|hardware decoding|glass-to-glass p50|first picture decoded|warmed|zero-copy|encoder threads|WARN|ERROR|panicked|GL_RENDERER|video driver|EGL devices|cannot" "$W/$name.log" |
        grep -v "^\s*$" | head -n 12 | sed 's/^/    | /'
    pack
    return 0
}

main() {
    say "untether GPU run: budget ${BUDGET}s, bundle $GPU_DIR/ut.tar.xz -> $UT, work $W, OUT=$OUT"

    # 1. Unpack (reused when this very tarball was unpacked there before).
    local stamp
    stamp=$(stat -c %s-%Y "$GPU_DIR/ut.tar.xz" 2>/dev/null)
    if [ -x "$UT/untether" ] && [ "$(cat "$UT/.stamp" 2>/dev/null)" = "$stamp" ]; then
        say "bundle already unpacked in $UT"
    else
        say "unpacking $(du -h "$GPU_DIR/ut.tar.xz" | cut -f1) ..."
        if [ -f "$GPU_DIR/ut.tar.xz.sha256" ] && command -v sha256sum >/dev/null; then
            (cd "$GPU_DIR" && sha256sum -c --quiet ut.tar.xz.sha256 >/dev/null 2>&1) &&
                say "ut.tar.xz checksum ok" || say "WARNING: ut.tar.xz does not match ut.tar.xz.sha256 (a broken copy?)"
        fi
        rm -rf "$UT" "$UT.new"
        mkdir -p "$UT.new"
        if ! tar -C "$UT.new" -xJf "$GPU_DIR/ut.tar.xz" 2>"$W/unpack.err"; then
            say "tar -xJ failed ($(head -c 300 "$W/unpack.err")); unpacking with python3's tarfile"
            rm -rf "$UT.new"
            mkdir -p "$UT.new"
            python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1], "r:xz").extractall(sys.argv[2], **({"filter": "tar"} if hasattr(tarfile, "tar_filter") else {}))' \
                "$GPU_DIR/ut.tar.xz" "$UT.new" || say "UNPACK FAILED"
        fi
        mv "$UT.new/ut" "$UT" && rm -rf "$UT.new"
        echo "$stamp" >"$UT/.stamp"
    fi
    if [ ! -x "$UT/untether" ]; then
        say "FATAL: $UT/untether missing after unpacking"
        return 1
    fi
    say "unpacked: $(ls "$UT/lib" | wc -l) libraries, $(du -sh "$UT" | cut -f1)"

    # 2. The environment: the bundle first, the NVIDIA driver's libraries after it.
    local vendor="" c
    for c in "${UT_EGL_VENDOR:-}" /usr/local/nvidia/share/glvnd/egl_vendor.d/10_nvidia.json \
        /usr/share/glvnd/egl_vendor.d/10_nvidia.json /etc/glvnd/egl_vendor.d/10_nvidia.json \
        /usr/local/share/glvnd/egl_vendor.d/10_nvidia.json; do
        if [ -n "$c" ] && [ -f "$c" ]; then
            vendor=$c
            break
        fi
    done
    if [ -z "$vendor" ]; then
        for c in /usr/share/glvnd/egl_vendor.d/50_mesa.json; do
            [ -f "$c" ] && vendor=$c
        done
        say "WARNING: no NVIDIA EGL vendor file found; using ${vendor:-none} (GL will not be on an NVIDIA GPU)"
    fi
    export __EGL_VENDOR_LIBRARY_FILENAMES=$vendor
    export LD_LIBRARY_PATH="$UT/lib:/usr/local/nvidia/lib64:/usr/local/nvidia/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    export SDL_VIDEODRIVER=${UT_SDL_VIDEODRIVER:-offscreen}
    export SDL_AUDIODRIVER=dummy
    export PATH="$PATH:/usr/local/nvidia/bin"
    export UNTETHER_STATE_DIR="$W/state"
    # bench --vr insists on a display variable; SDL's offscreen driver never opens it.
    local display=${DISPLAY:-:0}
    say "EGL vendor: $vendor; SDL_VIDEODRIVER=$SDL_VIDEODRIVER; LD_LIBRARY_PATH=$LD_LIBRARY_PATH"

    {
        echo "== date: $(date -u)"
        echo "== uname: $(uname -a)"
        grep -E '^(PRETTY_NAME|VERSION)=' /etc/os-release 2>/dev/null
        echo "== glibc: $(ldd --version 2>&1 | head -n1)"
        echo "== cpus: $(nproc); $(grep -m1 'model name' /proc/cpuinfo)"
        free -g 2>/dev/null | head -n2
        echo "== nvidia-smi -L"
        if command -v nvidia-smi >/dev/null; then
            nvidia-smi -L 2>&1
            nvidia-smi --query-gpu=name,driver_version,memory.total,mig.mode.current,compute_mode --format=csv 2>&1
        else
            echo "(no nvidia-smi on PATH)"
        fi
        echo "== devices"
        ls -la /dev/nvidia* /dev/dri 2>&1
        echo "== EGL vendor file $vendor"
        cat "$vendor" 2>&1
        echo "== driver libraries (/usr/local/nvidia/lib64, lib)"
        ls /usr/local/nvidia/lib64 /usr/local/nvidia/lib 2>&1 | grep -iE "egl|gles|glx|glsi|eglcore|glcore|gpucomp|cuda|nvcuvid|encode|:" | tr '\n' ' '
        echo
        echo "== other EGL/GL vendor files and external platforms"
        ls /usr/share/glvnd/egl_vendor.d /etc/glvnd/egl_vendor.d /usr/share/egl/egl_external_platform.d /usr/local/nvidia/share/egl/egl_external_platform.d 2>&1
        echo "== environment"
        env | grep -E "^(NVIDIA|CUDA|LD_LIBRARY|__EGL|__GLX|SDL|DISPLAY|WAYLAND)" | sort
        echo "== libraries of the bundle that do not resolve (expected: none)"
        for f in "$UT/untether" "$UT/glprobe" "$UT"/lib/*.so*; do
            ldd "$f" 2>&1 | grep -E "not found" | sed "s|^|$(basename "$f"): |"
        done
        echo "== libraries loaded from outside the bundle by 'untether --version' (expected: glibc only)"
        LD_DEBUG=libs "$UT/untether" --version 2>&1 | grep -a "calling init: /" | grep -v "$UT/lib" | sed 's/^ *[0-9]*: *//'
        echo "== stubbed libraries (never called by untether; left out for size): $(tr '\n' ' ' <"$UT/lib/STUBBED.txt" 2>/dev/null)"
    } >"$W/env.txt" 2>&1
    sed -n '/== nvidia-smi -L/,/== devices/p' "$W/env.txt" | grep -v "^==" | sed 's/^/    /'
    grep -A3 "do not resolve" "$W/env.txt" | sed 's/^/    /'
    pack

    # GL diagnostics: every EGL device with its GL strings, then SDL's GLES 3 context the way
    # the GL presenter makes it.
    step glprobe-egl 30 5 "$UT/glprobe" egl
    local nvdev
    nvdev=$(awk '/^device [0-9]+:/ {d=$2; sub(":", "", d)} /GL_VENDOR=NVIDIA/ {print d; exit}' "$W/glprobe-egl.log")
    if [ -n "$nvdev" ] && [ "$nvdev" != 0 ]; then
        export SDL_HINT_EGL_DEVICE=$nvdev
        say "NVIDIA is EGL device $nvdev: SDL_HINT_EGL_DEVICE=$nvdev"
    fi
    step glprobe-sdl 30 5 env DISPLAY="$display" "$UT/glprobe" sdl 1280 720
    if [ "$LAST_RC" = 124 ] || [ "$LAST_RC" = 137 ]; then
        # GL hangs here: the window steps would hang too. SDL's dummy driver has no GL, so the
        # presenter falls back to SDL's renderer at once (display "sdl-window" in the reports).
        export SDL_VIDEODRIVER=dummy
        say "WARNING: SDL's GL context hung; the window steps run with SDL_VIDEODRIVER=dummy (SDL renderer, no GPU, no late warp)"
    elif [ "$LAST_RC" != 0 ]; then
        say "WARNING: no GLES 3 context through SDL ($SDL_VIDEODRIVER): the bench's presenter will fall back to SDL's renderer (display sdl-window, no late warp)"
    fi

    # 3. Version, then the VR late-warp bench at 720p: the GL presenter on the GPU.
    step version 15 3 "$UT/untether" --version
    step bench-vr-720p 150 40 env DISPLAY="$display" "$UT/untether" bench --vr --late-warp on,off \
        --resolution 720p --encoder libx264 --duration "${BENCH_S}s" --out "$W/bench-vr-720p"

    # 4. doctor, then the headless demos (the CPU pipeline on this machine's cores) and NVDEC.
    step doctor 90 20 sh -c '"$0" doctor --json >"$1"' "$UT/untether" "$W/doctor.json"
    step demo-1080p 40 15 "$UT/untether" demo --headless --resolution 1080p --encoder libx264 --duration "$DEMO_S" \
        --report "$OUT/d1080.json"
    printf '[video]\nencoder_threads = 2\n' >"$W/threads2.toml"
    step demo-1080p-t2 40 15 "$UT/untether" demo --headless --resolution 1080p --encoder libx264 --config "$W/threads2.toml" \
        --duration "$DEMO_S" --report "$OUT/d1080-t2.json"
    step demo-1080p-s8 40 15 "$UT/untether" demo --headless --resolution 1080p --encoder libx264 --slices 8 \
        --duration "$DEMO_S" --report "$OUT/d1080-s8.json"
    step demo-720p 40 15 "$UT/untether" demo --headless --resolution 720p --encoder libx264 --duration "$DEMO_S" \
        --report "$OUT/d720.json"
    step demo-1080p-cuda 45 15 "$UT/untether" demo --headless --resolution 1080p --encoder libx264 \
        --hwaccel cuda --duration "$DEMO_S" --report "$OUT/d1080-cuda.json"

    # The GL presenter in a window at 1080p decoding with NVDEC: zero-copy (CUDA-GL interop)
    # when the driver allows it, else the one line naming why not; then the same with
    # UNTETHER_ZERO_COPY=off (downloaded and uploaded again): decode + present p50, side by side
    # in the summary.
    step demo-gl-cuda 40 15 env DISPLAY="$display" "$UT/untether" demo --presenter gl --hwaccel cuda \
        --resolution 1080p --encoder libx264 --duration "$DEMO_S" --report "$W/demo-gl-cuda.json"
    step demo-gl-cuda-sw 40 15 env DISPLAY="$display" UNTETHER_ZERO_COPY=off "$UT/untether" demo --presenter gl \
        --hwaccel cuda --resolution 1080p --encoder libx264 --duration "$DEMO_S" --report "$W/demo-gl-cuda-sw.json"

    # 5. The VR bench at 1080p when there is time for it.
    step bench-vr-1080p 150 40 env DISPLAY="$display" "$UT/untether" bench --vr --late-warp on,off \
        --resolution 1080p --encoder libx264 --duration "${BENCH_S}s" --out "$W/bench-vr-1080p"

    # 6. Extra, when there is time: the VR demo in a window (GL presenter, late warp on) decoding
    # with NVDEC, the head turning as in the bench.
    step demo-vr-cuda 40 25 env DISPLAY="$display" "$UT/untether" demo --vr --pose synthetic:turn --input-probe 0 \
        --presenter gl --late-warp on --hwaccel cuda --resolution 720p --encoder libx264 \
        --duration "$DEMO_S" --report "$W/demo-vr-cuda.json"
    return 0
}

main 2>&1 | tee "$OUT/console.log"
# The summary: key figures of every report, next to the local baseline when there is one.
{
    if command -v python3 >/dev/null; then
        timeout 60 python3 "$GPU_DIR/summary.py" "$W" "$OUT" "$GPU_DIR/baseline-local.json" ||
            echo "summary.py failed rc=$?"
    else
        echo "no python3: the bench lines only"
        grep -ahE "pose-to-photon|glass-to-glass p50" "$W"/bench-*.log
    fi
    echo
    echo "steps:"
    sed 's/^/  /' "$W/steps.txt" 2>/dev/null
    echo "total $(($(date +%s) - T0))s of a ${BUDGET}s budget"
} 2>&1 | tee "$OUT/summary.txt"
pack
ls -la "$OUT" | tee -a "$OUT/console.log"
