// untether's video pass outside VR (present_gl.rs): the picture at its aspect, planes.glsl
// before it. VR draws through the distortion mesh instead (mesh.vert, mesh.frag).
in vec2 v_uv;

void main() {
    // The viewport is the picture: nothing can fall outside it.
    o_color = vec4(rgb_at(v_uv), 1.0);
}
