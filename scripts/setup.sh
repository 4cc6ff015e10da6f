#!/usr/bin/env bash
# Installs the system packages untether needs to build, test and run, on Debian 12.
# Idempotent: installs only what is missing. Needs root or sudo.
set -euo pipefail

PACKAGES=(
  pkg-config clang libclang-dev cmake make
  libavcodec-dev libavformat-dev libavutil-dev libswscale-dev libswresample-dev
  libavfilter-dev libavdevice-dev ffmpeg
  libx264-dev
  libsdl2-dev
  xvfb xauth x11-utils x11-apps imagemagick
  iproute2 nftables
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
