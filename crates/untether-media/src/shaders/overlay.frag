// The statistics overlay's quad (present_gl.rs prepends "#version 300 es"): its texture, blended.
precision mediump float;
in vec2 v_uv;
out vec4 o_color;
uniform sampler2D u_overlay;
void main() {
    o_color = texture(u_overlay, v_uv);
}
