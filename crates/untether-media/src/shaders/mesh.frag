// untether's VR pass, fragment stage (present_gl.rs, mesh.rs), planes.glsl before it: the
// mesh interpolated the point of the rendered eye picture each channel shows; here it is only
// tested against the picture's edges and read.
in vec2 v_r;
in vec2 v_g;
in vec2 v_b;
flat in float v_eye;

// A point of the eye's picture -> its texture coordinate in the side-by-side picture; false:
// outside it (black).
bool to_tex(vec2 p, out vec2 t) {
    t = vec2(0.0);
    if (p.x < 0.0 || p.x > 1.0 || p.y < 0.0 || p.y > 1.0) {
        return false;
    }
    // Never filter across the middle into the other eye.
    float lo = v_eye * 0.5 + 0.5 * u_texel.x;
    t = vec2(clamp(v_eye * 0.5 + 0.5 * p.x, lo, lo + 0.5 - u_texel.x), p.y);
    return true;
}

void main() {
    vec2 t;
#ifdef CHROMA
    vec3 col = vec3(0.0);
    if (to_tex(v_r, t)) { col.r = red_at(t); }
    if (to_tex(v_g, t)) { col.g = green_at(t); }
    if (to_tex(v_b, t)) { col.b = blue_at(t); }
    o_color = vec4(col, 1.0);
#else
    o_color = to_tex(v_g, t) ? vec4(rgb_at(t), 1.0) : vec4(0.0, 0.0, 0.0, 1.0);
#endif
}
