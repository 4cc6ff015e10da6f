#!/usr/bin/env bash
# `scripts/setup.sh arm64` (called by `make arm64` and `make test`): what the aarch64 cross build
# and its qemu test need on Debian 12, on top of what scripts/setup.sh installs:
#   - the arm64 architecture in dpkg (multiarch),
#   - Debian's cross toolchain (gcc-aarch64-linux-gnu) and qemu-user (qemu-aarch64),
#   - the arm64 development packages the `untether` binary links (FFmpeg, x264, SDL2; libopus is
#     built by the opus crate) and the arm64 pkg-config wrapper (aarch64-linux-gnu-pkg-config),
#   - the rustup target aarch64-unknown-linux-gnu.
# They install side by side with the amd64 packages (apt moves amd64 libraries to the same
# version as their arm64 twins where multiarch needs it). Idempotent: does only what is missing.
# Needs root or sudo for apt, and rustup for the Rust target.
set -euo pipefail

TARGET=aarch64-unknown-linux-gnu
PACKAGES=(
  gcc-aarch64-linux-gnu qemu-user
  libc6-dev:arm64 pkgconf:arm64
  libavcodec-dev:arm64 libavformat-dev:arm64 libavutil-dev:arm64 libswscale-dev:arm64
  libswresample-dev:arm64 libavfilter-dev:arm64
  libx264-dev:arm64
  libsdl2-dev:arm64
  libssl-dev:arm64
)

SUDO=""
need_root() {
  if [ "$(id -u)" -ne 0 ] && [ -z "$SUDO" ]; then
    command -v sudo >/dev/null || { echo "setup arm64: need root or sudo to $1" >&2; exit 1; }
    SUDO="sudo"
  fi
}

update=0
if ! dpkg --print-foreign-architectures | grep -qx arm64; then
  need_root "add the arm64 architecture (dpkg --add-architecture arm64)"
  echo "setup arm64: dpkg --add-architecture arm64"
  $SUDO dpkg --add-architecture arm64
  update=1
fi

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -gt 0 ]; then
  need_root "install: ${missing[*]}"
  # Another apt on the machine (a parallel setup) holds the lock for a while: wait for it.
  apt=(-o DPkg::Lock::Timeout=600)
  # A separate download directory: Debian's container images delete
  # /var/cache/apt/archives/*.deb after every dpkg run (/etc/apt/apt.conf.d/docker-clean), and
  # an install this size takes several dpkg runs, so the later ones would find their packages
  # gone ("failed to read archive … No such file or directory").
  archives=/var/cache/untether-apt
  $SUDO mkdir -p "$archives/partial"
  apt+=(-o "Dir::Cache::Archives=$archives")
  echo "setup arm64: installing ${missing[*]}"
  $SUDO apt-get "${apt[@]}" update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get "${apt[@]}" install -y -qq \
    --no-install-recommends "${missing[@]}" >/dev/null
  $SUDO rm -rf "$archives"
elif [ $update -eq 1 ]; then
  $SUDO apt-get -o DPkg::Lock::Timeout=600 update -qq
fi

export PATH="$HOME/.cargo/bin:$PATH"
if ! command -v rustup >/dev/null; then
  # A distribution's Rust has no rustup: its standard library for aarch64 must come from there.
  if rustc --print target-libdir --target "$TARGET" >/dev/null 2>&1 &&
    [ -d "$(rustc --print target-libdir --target "$TARGET")" ]; then
    exit 0
  fi
  echo "setup arm64: no rustup to add the Rust target $TARGET: install rustup (https://rustup.rs)" >&2
  exit 1
fi
if ! rustup target list --installed | grep -qx "$TARGET"; then
  echo "setup arm64: rustup target add $TARGET"
  rustup target add "$TARGET"
fi
