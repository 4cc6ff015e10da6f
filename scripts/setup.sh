#!/usr/bin/env bash
# Installs the system packages untether needs to build, test and run, on Debian 12.
# Idempotent: installs only what is missing. Needs root or sudo.
#
#   scripts/setup.sh           what building and the core tests need
# Optional targets install their extra packages only when asked for (`make test` asks for both;
# `make demo` for neither):
#   scripts/setup.sh arm64     the aarch64 cross build and its qemu test (scripts/setup-arm64.sh)
#   scripts/setup.sh browser   Chromium, Janus and simple-whip-server: the browser and WHIP tests
set -euo pipefail
WANT_BROWSER=0
for a in "$@"; do
  case "$a" in
    browser) WANT_BROWSER=1 ;;
    arm64) ;;
    *) echo "setup: unknown target '$a' (known: arm64, browser)" >&2; exit 2 ;;
  esac
done

PACKAGES=(
  pkg-config clang libclang-dev cmake make
  libavcodec-dev libavformat-dev libavutil-dev libswscale-dev libswresample-dev
  libavfilter-dev libavdevice-dev ffmpeg
  libsvtav1-dev libsvtav1enc-dev
  libx264-dev
  libsdl2-dev
  libgl1-mesa-dri libglx-mesa0 libegl-mesa0 libgles2
  xvfb xauth x11-utils x11-apps imagemagick
  iproute2 nftables
  # RTSP for ordinary players (untether host --rtsp; the binary links gst-rtsp-server):
  # appsrc (base), rtph264pay/rtpopuspay/rtpbin (good; Debian's gst-rtsp-server also pulls
  # bad). The player side of the tests: gst-launch-1.0 (tools) with avdec_h264 (libav).
  libgstrtspserver-1.0-dev libgstreamer1.0-dev libgstreamer-plugins-base1.0-dev
  gstreamer1.0-plugins-base gstreamer1.0-plugins-good gstreamer1.0-tools gstreamer1.0-libav
  libssl-dev
  # The OpenXR runtime (crates/untether-openxr links libGL) and its tests: the loader,
  # hello_xr and openxr_runtime_list, the Khronos validation layer.
  libgl-dev libopenxr-loader1 libopenxr-utils openxr-layer-corevalidation
  # untether run (app capture, docs/CAPTURE.md): the Vulkan loader, lavapipe, vkcube, glxgears,
  # and glmark2, which opens libGL itself (the hook's dlsym interposition).
  libvulkan1 mesa-vulkan-drivers vulkan-tools mesa-utils glmark2-x11
  # hello_xr -g Vulkan2 on the OpenXR runtime enables Khronos' Vulkan validation layer from it.
  vulkan-validationlayers
  # Wayland capture tests (tests/wayland.rs): a headless sway and its solid-colour background.
  sway swaybg
  # Desktop portal capture (--capture portal: pipewiresrc) and its test on that sway.
  dbus pipewire wireplumber xdg-desktop-portal xdg-desktop-portal-wlr gstreamer1.0-pipewire
  # make deb and its test (tests/install.rs): dpkg-shlibdeps, systemd-analyze verify, man, col.
  dpkg-dev systemd man-db bsdextrautils
  # The zsh and fish completions load in their shells (tests/install.rs).
  zsh fish
)
if [ "$WANT_BROWSER" = 1 ]; then
  PACKAGES+=(chromium janus)
fi

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

# simple-whip-server (Debian's, node.js) in front of Janus. Its dependency node-websocket pulls
# Debian's libnode108, which apt refuses beside a node.js from elsewhere (e.g. NodeSource's):
# then its pure-JS dependencies come from apt as usual, and the package itself and
# node-websocket (whose native parts fall back to JS) are unpacked, not installed, under
# /usr/local/lib/untether/simple-whip-server, run with the node.js that is there.
if [ "$WANT_BROWSER" = 1 ] && [ ! -f /usr/share/simple-whip-server/src/server.js ] \
   && [ ! -f /usr/local/lib/untether/simple-whip-server/usr/share/simple-whip-server/src/server.js ]; then
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  node_origin="$(dpkg-query -W -f='${Version}' nodejs 2>/dev/null || true)"
  if [ -z "$node_origin" ] || ! command -v node >/dev/null || [[ "$node_origin" == *deb12* || "$node_origin" == *dfsg* ]]; then
    echo "setup: installing simple-whip-server"
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends simple-whip-server >/dev/null
  else
    echo "setup: node.js $node_origin is not Debian's: unpacking simple-whip-server under /usr/local/lib/untether"
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends \
      node-async node-colors node-cors node-debug node-express node-es5-ext node-typedarray-to-buffer >/dev/null
    tmp="$(mktemp -d)"
    (cd "$tmp" && apt-get download -qq simple-whip-server node-websocket 2>/dev/null)
    $SUDO mkdir -p /usr/local/lib/untether/simple-whip-server
    for deb in "$tmp"/*.deb; do
      $SUDO dpkg-deb -x "$deb" /usr/local/lib/untether/simple-whip-server
    done
    rm -rf "$tmp"
  fi
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
