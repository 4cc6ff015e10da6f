#!/bin/bash
# By hand (not in make test): hello_xr (OpenGL on llvmpipe or Vulkan2 on lavapipe, an Xvfb on :77 started beforehand, /tmp/xr/vidmode.so built from tests/fixtures/vidmode_shim.c) → untether OpenXR runtime → client; $1 = WxH, $2 = fps, $3 = late warp on|off, $4 = presenter mode (headless|window), $5 = hello_xr's graphics (OpenGL, the default, or Vulkan2 / Vulkan)
set -e
mkdir -p /tmp/xr
[ -f /tmp/xr/vidmode.so ] || cc -shared -fPIC -O2 -o /tmp/xr/vidmode.so "$(dirname "$0")/tests/fixtures/vidmode_shim.c"
R=$1; F=$2; W=$3; MODE=$4; G=${5:-OpenGL}; P=9793
cd "$(dirname "$0")/../.."
cat > /tmp/xr/b.toml <<T
[video]
resolution = "$R"
fps = $F
[host]
bind = "127.0.0.1:$P"
access = "open"
state_dir = "/tmp/xr/host"
T
rm -f /tmp/xr/in; mkfifo /tmp/xr/in
( LD_PRELOAD=/tmp/xr/vidmode.so DISPLAY=:77 XR_RUNTIME_JSON=$PWD/crates/untether-openxr/untether_openxr.json UNTETHER_CONFIG=/tmp/xr/b.toml UNTETHER_LOG=info hello_xr -g "$G" < /tmp/xr/in > /tmp/xr/bapp.log 2>&1 & )
exec 3>/tmp/xr/in
sleep 3
EXTRA="--headless"; [ "$MODE" = window ] && EXTRA="--presenter gl"
DISPLAY=:77 target/release/untether client 127.0.0.1:$P $EXTRA --vr --late-warp $W --pose synthetic:turn --duration 10 --state-dir /tmp/xr/client --report /tmp/xr/r.json > /tmp/xr/bclient.log 2>&1 || true
echo >&3; exec 3>&-
sleep 2
grep -o "host stopped.*" /tmp/xr/bapp.log || true
grep -o "[0-9]* frames ended while the previous copy.*" /tmp/xr/bapp.log || true
grep -o "xrEndFrame → pixels.*" /tmp/xr/bapp.log || true
grep -o "predicted display time.*" /tmp/xr/bapp.log || true
python3 - <<'PY'
import json; r=json.load(open('/tmp/xr/r.json'))
f=r['frames']; l=r['latency_ms']
def g(k):
    v=l.get(k) or {}
    return "p50 %s p95 %s p99 %s" % (v.get('p50'), v.get('p95'), v.get('p99'))
print("decoded", f['decoded'], "shown", f['shown'], "lost", f['lost'])
print("glass_to_glass", g('glass_to_glass'))
print("rendered_pose_to_photon", g('rendered_pose_to_photon'))
print("pose_to_photon", g('pose_to_photon'))
print("pose_prediction_error_deg", g('pose_prediction_error_deg'))
st=l.get('stages') or {}
print("stages p50:", ", ".join("%s %s" % (k, (st.get(k) or {}).get('p50')) for k in ('capture','host_queue','convert','encode','send','network','reassemble','decode','present')))
PY
