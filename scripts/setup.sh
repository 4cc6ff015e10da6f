#!/usr/bin/env bash
# Installs the system packages untether needs to build, test and run, on Debian 12.
# Idempotent: installs only what is missing. Needs root or sudo.
#
# Optional targets install their extra packages only when asked for:
#   scripts/setup.sh arm64   the aarch64 cross build and its qemu test (scripts/setup-arm64.sh)
set -euo pipefail

for target in "$@"; do
  case "$target" in
    arm64) ;;
    *) echo "setup: unknown target '$target' (known: arm64)" >&2; exit 2 ;;
  esac
done

PACKAGES=(
  pkg-config clang libclang-dev cmake make
  libavcodec-dev libavformat-dev libavutil-dev libswscale-dev libswresample-dev
  libavfilter-dev libavdevice-dev ffmpeg
  libsvtav1-dev libsvtav1enc-dev
  libx264-dev
  libsdl2-dev
  xvfb xauth x11-utils x11-apps imagemagick
  iproute2 nftables
  # RTSP for ordinary players (untether host --rtsp; the binary links gst-rtsp-server):
  # appsrc (base), rtph264pay/rtpopuspay/rtpbin (good; Debian's gst-rtsp-server also pulls
  # bad). The player side of the tests: gst-launch-1.0 (tools) with avdec_h264 (libav).
  libgstrtspserver-1.0-dev libgstreamer1.0-dev libgstreamer-plugins-base1.0-dev
  gstreamer1.0-plugins-base gstreamer1.0-plugins-good gstreamer1.0-tools gstreamer1.0-libav
)

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null || { echo "setup: need root or sudo to install: ${missing[*]}" >&2; exit 1; }
    SUDO="sudo"
  fi
  echo "setup: installing ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

if ! command -v cargo >/dev/null; then
  if [ -x "$HOME/.cargo/bin/cargo" ]; then
    echo "setup: cargo is in ~/.cargo/bin; add it to PATH" >&2
  else
    echo "setup: no Rust toolchain found: install rustup (https://rustup.rs) and Rust >= 1.88" >&2
  fi
  exit 1
fi

for target in "$@"; do
  case "$target" in
    arm64) "$(dirname "$0")/setup-arm64.sh" ;;
  esac
done
