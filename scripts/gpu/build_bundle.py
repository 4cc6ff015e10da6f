"""Builds ut.tar.xz (in $UT_BUNDLE_OUT, default this folder; scripts/gpu-bundle.sh pack sets it): the untether binary (stripped), glprobe, and every library they need
but glibc, for a machine that has only glibc (>= 2.36) and the NVIDIA driver.

    python3 scripts/gpu/build_bundle.py PATH/TO/untether

- The libraries: the recursive `ldd` closure of untether, glprobe and the glvnd libraries SDL
  and the GL presenter dlopen (libEGL, libGLESv2, libGLdispatch, libGL, libGLX, libOpenGL), and
  libudev (SDL dlopens it), from this Debian 12 system; glibc's own libraries are left out.
- Size: a few libraries that only FFmpeg features untether never uses pull in (ICU data for
  libxml2, the flite voices, codec2, librsvg, libplacebo, pocketsphinx) are replaced by stubs
  (gen_stub.py: same SONAME and symbols, a call aborts with a message), which drops their own
  dependencies too (LLVM-free: no Mesa is bundled; the EGL vendor is the NVIDIA driver's).
- Checks: `ldd -r` with only the bundle's folder resolves everything but glibc.
"""
import collections
import os
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = sys.argv[1] if len(sys.argv) > 1 else "target/release/untether"
BUILD = os.environ.get("UT_BUILD", "/tmp/ut-build")
SYSLIB = "/usr/lib/x86_64-linux-gnu"
DLOPENED = ["libEGL.so.1", "libGLESv2.so.2", "libGLdispatch.so.0", "libGL.so.1", "libGLX.so.0",
            "libOpenGL.so.0", "libudev.so.1"]
STUBS = ["libicuuc.so.72", "libflite.so.1", "libflite_cmu_us_awb.so.1", "libflite_cmu_us_kal.so.1",
         "libflite_cmu_us_kal16.so.1", "libflite_cmu_us_rms.so.1", "libflite_cmu_us_slt.so.1",
         "librsvg-2.so.2", "libcodec2.so.1.0", "libplacebo.so.208", "libpocketsphinx.so.3",
         "libsphinxbase.so.3"]


def run(*cmd, **kw):
    return subprocess.run(cmd, check=True, capture_output=True, text=True, **kw).stdout


def needed(path):
    out = run("readelf", "-d", path)
    return [l.split("[")[1].split("]")[0] for l in out.splitlines() if "(NEEDED)" in l]


def ldd_map(path):
    m = {}
    for l in run("ldd", path).splitlines():
        p = l.split()
        if len(p) >= 3 and p[1] == "=>" and p[2].startswith("/"):
            m[p[0]] = p[2]
    return m


glibc = set()
for f in run("dpkg", "-L", "libc6:amd64").split():
    b = os.path.basename(f)
    if ".so" in b and (f.startswith("/lib/x86_64-linux-gnu/") or f.startswith(SYSLIB + "/") or "ld-linux" in b):
        glibc.add(b)

shutil.rmtree(BUILD, ignore_errors=True)
ut = os.path.join(BUILD, "ut")
lib = os.path.join(ut, "lib")
os.makedirs(lib)
run("strip", "-o", os.path.join(ut, "untether"), SRC)
run("gcc", "-O1", "-o", os.path.join(ut, "glprobe"), os.path.join(HERE, "glprobe.c"), "-lEGL", "-lSDL2")

roots = [os.path.join(ut, "untether"), os.path.join(ut, "glprobe")] + [os.path.join(SYSLIB, n) for n in DLOPENED]
where = {}
for r in roots:
    where.update(ldd_map(r))
for n in DLOPENED:
    where[n] = os.path.join(SYSLIB, n)

# The closure, not descending into stubbed libraries.
keep, todo = set(), [os.path.basename(r) if not r.startswith(ut) else r for r in roots]
while todo:
    x = todo.pop()
    name = os.path.basename(x)
    if name in glibc or name in keep:
        continue
    if not x.startswith(ut):
        keep.add(name)
    if name in STUBS:
        continue
    path = x if x.startswith(ut) else where[name]
    todo += needed(path)

stubdir = os.path.join(BUILD, "stubs")
os.makedirs(stubdir)
for name in sorted(keep):
    if name in STUBS:
        run(sys.executable, os.path.join(HERE, "gen_stub.py"), where[name], stubdir)
        shutil.copy(os.path.join(stubdir, name), os.path.join(lib, name))
    else:
        shutil.copy(where[name], os.path.join(lib, name))  # follows the symlink: the SONAME file
with open(os.path.join(lib, "STUBBED.txt"), "w") as f:
    f.write("\n".join(sorted(keep & set(STUBS))) + "\n")

# Check: with only the bundle on the path, nothing but glibc comes from elsewhere, and
# `ldd -r` finds every symbol (libtheoraenc's th_comment_* come from libtheoradec at run time).
env = dict(os.environ, LD_LIBRARY_PATH=lib)
bad = []
for f in [os.path.join(ut, "untether"), os.path.join(ut, "glprobe")] + sorted(
        os.path.join(lib, n) for n in os.listdir(lib) if ".so" in n):
    out = subprocess.run(["ldd", "-r", f], capture_output=True, text=True, env=env)
    for l in (out.stdout + out.stderr).splitlines():
        p = l.split()
        if "not found" in l or ("undefined symbol" in l and "th_comment" not in l) or (
                len(p) >= 3 and p[1] == "=>" and not p[2].startswith(lib) and p[0] not in glibc):
            bad.append(f"{os.path.basename(f)}: {l.strip()}")
if bad:
    print("\n".join(bad))
    sys.exit("bundle check failed")

size = sum(os.path.getsize(os.path.join(lib, n)) for n in os.listdir(lib))
print(f"{len(os.listdir(lib)) - 1} libraries ({len(keep & set(STUBS))} stubs), {size / 2**20:.1f} MiB + "
      f"untether {os.path.getsize(os.path.join(ut, 'untether')) / 2**20:.1f} MiB; ldd -r clean")
OUTDIR = os.environ.get("UT_BUNDLE_OUT", HERE)
os.makedirs(OUTDIR, exist_ok=True)
tarball = os.path.join(OUTDIR, "ut.tar.xz")
# UT_XZ_LEVEL (0-9, default 9): xz -9 at nice 19 takes many minutes on a loaded 2-core box; 0 is
# ~1.5 min there and ~25 % bigger.
level = os.environ.get("UT_XZ_LEVEL", "9")
if level not in [str(i) for i in range(10)]:
    sys.exit(f"UT_XZ_LEVEL={level!r}: allowed values are 0 to 9")
subprocess.run(f"tar -C {BUILD} -cf - ut | nice -n 19 xz -{level} -T1 > {tarball}.tmp && mv {tarball}.tmp {tarball}",
               shell=True, check=True)
subprocess.run("sha256sum ut.tar.xz > ut.tar.xz.sha256", shell=True, check=True, cwd=OUTDIR)
print(f"{tarball}: {os.path.getsize(tarball) / 2**20:.1f} MiB")
