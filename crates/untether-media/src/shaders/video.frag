// untether's video pass (present_gl.rs). The presenter prepends "#version 300 es" and the
// variant's #defines (GBR, STEREO, LENS, CHROMA, WARP): a software GL runs both sides of every
// branch, so the paths a picture does not take are compiled out. The arithmetic mirrors
// Warp::sample_uv (warp.rs) and LensProfile::distort (lens.rs) exactly.
precision highp float;
in vec2 v_uv;
out vec4 o_color;
uniform highp sampler2D u_tex0;
uniform highp sampler2D u_tex1;
uniform highp sampler2D u_tex2;
uniform mat3 u_yuv;          // (Y, U, V) - u_offset -> R, G, B
uniform vec3 u_offset;
uniform vec4 u_k;            // k1..k4
uniform vec3 u_chroma;       // radius scale of R, G, B
uniform vec2 u_center;       // the left lens centre in its viewport
uniform float u_fit;         // 1 / (fit * f(fit^2))
uniform float u_view_aspect; // eye viewport height / width
uniform float u_pic_aspect;  // eye picture height / width
uniform mat3 u_rot;          // latest head space -> rendered head space
uniform vec2 u_tan;          // tan(fov / 2): horizontal, vertical
uniform vec2 u_texel;        // 1 / picture size

// textureLod: no mipmaps, so no derivatives (cheap in the branches below).
float plane(highp sampler2D s, vec2 t) {
    return textureLod(s, t, 0.0).r;
}

#ifdef GBR
// G, B, R planes.
float red_at(vec2 t) { return plane(u_tex2, t); }
float green_at(vec2 t) { return plane(u_tex0, t); }
float blue_at(vec2 t) { return plane(u_tex1, t); }
vec3 rgb_at(vec2 t) { return vec3(red_at(t), green_at(t), blue_at(t)); }
#else
// Y, U, V planes: red needs no U, blue no V (the matrix has zeros there).
float red_at(vec2 t) {
    float y = plane(u_tex0, t) - u_offset.x;
    float v = plane(u_tex2, t) - u_offset.z;
    return clamp(u_yuv[0].x * y + u_yuv[2].x * v, 0.0, 1.0);
}
float blue_at(vec2 t) {
    float y = plane(u_tex0, t) - u_offset.x;
    float u = plane(u_tex1, t) - u_offset.y;
    return clamp(u_yuv[0].z * y + u_yuv[1].z * u, 0.0, 1.0);
}
vec3 rgb_at(vec2 t) {
    vec3 s = vec3(plane(u_tex0, t), plane(u_tex1, t), plane(u_tex2, t));
    return clamp(u_yuv * (s - u_offset), 0.0, 1.0);
}
float green_at(vec2 t) { return rgb_at(t).g; }
#endif

// A point of the eye's undistorted picture -> its texture coordinate; false: black.
bool to_tex(vec2 p, float eye, out vec2 t) {
    t = vec2(0.0);
#ifdef WARP
    vec3 d = vec3((2.0 * p.x - 1.0) * u_tan.x, (1.0 - 2.0 * p.y) * u_tan.y, -1.0);
    vec3 r = u_rot * d;
    if (r.z > -1e-6) {
        return false;
    }
    p = vec2(0.5 + 0.5 * (r.x / -r.z) / u_tan.x, 0.5 - 0.5 * (r.y / -r.z) / u_tan.y);
#endif
    if (p.x < 0.0 || p.x > 1.0 || p.y < 0.0 || p.y > 1.0) {
        return false;
    }
#ifdef STEREO
    // Never filter across the middle into the other eye.
    float lo = eye * 0.5 + 0.5 * u_texel.x;
    t = vec2(clamp(eye * 0.5 + 0.5 * p.x, lo, lo + 0.5 - u_texel.x), p.y);
#else
    t = p;
#endif
    return true;
}

vec2 lens(vec2 s, vec2 c, float scale) {
    vec2 q = vec2((s.x - c.x) * 2.0, (s.y - c.y) * 2.0 * u_view_aspect) * scale;
    float r2 = dot(q, q);
    float f = 1.0 + r2 * (u_k.x + r2 * (u_k.y + r2 * (u_k.z + r2 * u_k.w)));
    vec2 p = q * f * u_fit;
    return vec2(0.5 + 0.5 * p.x, 0.5 + 0.5 * p.y / u_pic_aspect);
}

void main() {
    float eye = 0.0;
    vec2 s = v_uv;
#ifdef STEREO
    eye = s.x < 0.5 ? 0.0 : 1.0;
    s.x = s.x * 2.0 - eye;
#endif
    vec2 t;
#ifdef LENS
    vec2 c = vec2(eye == 0.0 ? u_center.x : 1.0 - u_center.x, u_center.y);
#ifdef CHROMA
    vec3 col = vec3(0.0);
    if (to_tex(lens(s, c, u_chroma.r), eye, t)) { col.r = red_at(t); }
    if (to_tex(lens(s, c, u_chroma.g), eye, t)) { col.g = green_at(t); }
    if (to_tex(lens(s, c, u_chroma.b), eye, t)) { col.b = blue_at(t); }
    o_color = vec4(col, 1.0);
#else
    o_color = to_tex(lens(s, c, 1.0), eye, t) ? vec4(rgb_at(t), 1.0) : vec4(0.0, 0.0, 0.0, 1.0);
#endif
#elif defined(STEREO) || defined(WARP)
    o_color = to_tex(s, eye, t) ? vec4(rgb_at(t), 1.0) : vec4(0.0, 0.0, 0.0, 1.0);
#else
    // The viewport is the picture: nothing can fall outside it.
    o_color = vec4(rgb_at(s), 1.0);
#endif
}
