// The planes of a picture and their colour (present_gl.rs): prepended to video.frag and
// mesh.frag after "#version 300 es" and the variant's #defines (GBR, STEREO, CHROMA, WARP).
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

