#!/usr/bin/env bash
# Builds the Debian package from a `make install PREFIX=/usr DESTDIR=ROOT` staging root:
#   scripts/make-deb.sh ROOT VERSION OUTDIR   →   OUTDIR/untether_VERSION_ARCH.deb
# (`make deb` runs it.) Man pages are compressed as Debian wants, the licences go to
# /usr/share/doc/untether/copyright, and Depends comes from dpkg-shlibdeps (the shared
# libraries the binary and the C library really link: FFmpeg, SDL2, GStreamer, OpenSSL, …).
set -euo pipefail
root=$1 version=$2 outdir=$3
arch=$(dpkg --print-architecture)
commit=$(git rev-parse --short=12 HEAD 2>/dev/null || true)
# A Debian version: the crate's, plus the commit when built from a git checkout.
debver=$version${commit:+~git$commit}

gzip -9nf "$root"/usr/share/man/man1/*.1
# Debian ships libraries without debug information (the binary is stripped by make install).
strip --strip-unneeded "$root/usr/lib/libuntether.so"
strip --strip-debug "$root/usr/lib/libuntether.a"
cat LICENSE-MIT LICENSE-APACHE > "$root/usr/share/doc/untether/copyright"

# dpkg-shlibdeps reads a debian/control: give it a minimal one in a scratch folder.
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/debian"
printf 'Source: untether\n\nPackage: untether\nArchitecture: any\n' > "$work/debian/control"
abs=$(cd "$root" && pwd)
depends=$(cd "$work" && dpkg-shlibdeps -O -e"$abs/usr/bin/untether" -e"$abs/usr/lib/libuntether.so" 2>/dev/null \
  | sed -n 's/^shlibs:Depends=//p')
if [ -z "$depends" ]; then
  echo "make-deb: dpkg-shlibdeps found no dependencies (is dpkg-dev installed?)" >&2
  exit 1
fi

mkdir -p "$root/DEBIAN"
cat > "$root/DEBIAN/control" <<CONTROL
Package: untether
Version: $debver
Architecture: $arch
Maintainer: the untether developers <untether@invalid>
Section: video
Priority: optional
Installed-Size: $(du -sk --exclude=DEBIAN "$root" | cut -f1)
Depends: $depends
Description: low-latency streaming for untethered VR and interactive games
 A host renders or captures frames, encodes them (H.264, HEVC or AV1) and sends them
 over UDP; a client decodes and shows them and sends input back. Includes the
 untether command, its man pages and shell completions, a systemd user unit for
 the host (untether-host.service) and the C library (libuntether).
CONTROL
mkdir -p "$outdir"
deb="$outdir/untether_${debver}_${arch}.deb"
rm -f "$outdir"/untether_*.deb
# xz as Debian ships (~45 s of CPU here); DEB_COMPRESSION=gzip for a quick one (make test).
case "${DEB_COMPRESSION:-xz}" in
  gzip) compress=(-Zgzip -z1) ;;
  *) compress=(-Zxz) ;;
esac
dpkg-deb --root-owner-group "${compress[@]}" --build "$root" "$deb" >/dev/null
echo "$deb"
