// The planes of a picture and their colour (present_gl.rs): prepended to video.frag and
// mesh.frag after "#version 300 es" and the variant's #defines (GBR, NV12, STEREO, CHROMA,
// WARP). NV12: U and V interleaved in u_tex1 (red, green), imported without a copy.
precision highp float;
out vec4 o_color;
uniform highp sampler2D u_tex0;
uniform highp sampler2D u_tex1;
uniform highp sampler2D u_tex2;
uniform mat3 u_yuv;          // (Y, U, V) - u_offset -> R, G, B
uniform vec3 u_offset;
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
#ifdef NV12
float u_at(vec2 t) { return textureLod(u_tex1, t, 0.0).r; }
float v_at(vec2 t) { return textureLod(u_tex1, t, 0.0).g; }
vec2 uv_at(vec2 t) { return textureLod(u_tex1, t, 0.0).rg; }
#else
float u_at(vec2 t) { return plane(u_tex1, t); }
float v_at(vec2 t) { return plane(u_tex2, t); }
vec2 uv_at(vec2 t) { return vec2(plane(u_tex1, t), plane(u_tex2, t)); }
#endif
// Y, U, V planes: red needs no U, blue no V (the matrix has zeros there).
float red_at(vec2 t) {
    float y = plane(u_tex0, t) - u_offset.x;
    float v = v_at(t) - u_offset.z;
    return clamp(u_yuv[0].x * y + u_yuv[2].x * v, 0.0, 1.0);
}
float blue_at(vec2 t) {
    float y = plane(u_tex0, t) - u_offset.x;
    float u = u_at(t) - u_offset.y;
    return clamp(u_yuv[0].z * y + u_yuv[1].z * u, 0.0, 1.0);
}
vec3 rgb_at(vec2 t) {
    vec3 s = vec3(plane(u_tex0, t), uv_at(t));
    return clamp(u_yuv * (s - u_offset), 0.0, 1.0);
}
float green_at(vec2 t) { return rgb_at(t).g; }
#endif

