#!/usr/bin/env bash
# `make arm64`: cross-builds the `untether` binary for aarch64-unknown-linux-gnu (a Raspberry Pi 4
# or 5 on a 64-bit OS, any arm64 Linux) against Debian's arm64 multiarch libraries.
# Run `scripts/setup.sh arm64` first (the Makefile does): it installs the cross toolchain, the
# :arm64 development packages, qemu-user and the rustup target.
#
# The binary lands in target/aarch64-unknown-linux-gnu/release/untether. Host-side units (build
# scripts, proc macros) are shared with the native build in target/release; the native build's
# own artifacts are left as they are. Every variable below is named for the aarch64 target, so
# none of them reaches a native build.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PATH"
TARGET=aarch64-unknown-linux-gnu
T=${TARGET//-/_}

# pkg-config: Debian's cross wrapper (pkgconf:arm64) searches only the arm64 .pc files
# (/usr/lib/aarch64-linux-gnu/pkgconfig, /usr/share/pkgconfig) with the multiarch sysroot "/".
export "PKG_CONFIG_$T=aarch64-linux-gnu-pkg-config"
export "PKG_CONFIG_ALLOW_CROSS_$T=1"
export "PKG_CONFIG_SYSROOT_DIR_$T=/"
# bindgen (ffmpeg-sys-next): clang parses FFmpeg's headers for aarch64 (bindgen passes the
# target) with the arm64 multiarch include directory first (avconfig.h and libc's bits/ differ
# per architecture).
export "BINDGEN_EXTRA_CLANG_ARGS_$T=--target=$TARGET -isystem /usr/include/aarch64-linux-gnu"
# cc / cmake (ring, libopus): the cross compiler by name.
export "CC_$T=aarch64-linux-gnu-gcc"
export "AR_$T=aarch64-linux-gnu-ar"

for tool in aarch64-linux-gnu-gcc aarch64-linux-gnu-pkg-config; do
  command -v "$tool" >/dev/null || { echo "build-arm64: $tool is missing: run scripts/setup.sh arm64" >&2; exit 1; }
done
rustup target list --installed 2>/dev/null | grep -qx "$TARGET" \
  || { echo "build-arm64: the rustup target $TARGET is missing: run scripts/setup.sh arm64" >&2; exit 1; }

# Without the `rtsp` feature: Debian 12 cannot install the arm64 GStreamer development packages
# beside the amd64 ones, and a Pi client does not serve RTSP (`--rtsp` says so there).
cargo build --release --locked --target "$TARGET" -p untether-cli --no-default-features "$@"
bin="${CARGO_TARGET_DIR:-target}/$TARGET/release/untether"
machine=$(aarch64-linux-gnu-readelf -h "$bin" | sed -n 's/^ *Machine: *//p')
echo "build-arm64: $bin ($machine)"
