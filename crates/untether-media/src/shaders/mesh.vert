// untether's VR pass, vertex stage (present_gl.rs, mesh.rs): one vertex of the distortion
// mesh. The lens distortion was evaluated on the CPU for each vertex (a_r/a_g/a_b: the point
// of the undistorted eye picture each colour channel shows there); the late warp's rotation
// homography is applied here, per vertex, from the pose of this draw. Mirrors
// DistortionMesh::sample (mesh.rs) and Warp::sample_uv (warp.rs).
precision highp float;
layout(location = 0) in vec2 a_pos;
layout(location = 1) in float a_eye;
layout(location = 2) in vec2 a_r;
layout(location = 3) in vec2 a_g;
layout(location = 4) in vec2 a_b;
uniform mat3 u_rot;  // latest head space -> rendered head space
uniform vec2 u_tan;  // tan(fov / 2): horizontal, vertical
out vec2 v_r;
out vec2 v_g;
out vec2 v_b;
flat out float v_eye;

vec2 warp(vec2 p) {
#ifdef WARP
    vec3 d = vec3((2.0 * p.x - 1.0) * u_tan.x, (1.0 - 2.0 * p.y) * u_tan.y, -1.0);
    vec3 r = u_rot * d;
    if (r.z > -1e-6) {
        return vec2(-4.0); // behind the eye: black
    }
    return vec2(0.5 + 0.5 * (r.x / -r.z) / u_tan.x, 0.5 - 0.5 * (r.y / -r.z) / u_tan.y);
#else
    return p;
#endif
}

void main() {
    v_eye = a_eye;
#ifdef CHROMA
    v_r = warp(a_r);
    v_b = warp(a_b);
#else
    v_r = vec2(0.0);
    v_b = vec2(0.0);
#endif
    v_g = warp(a_g);
    gl_Position = vec4(a_pos, 0.0, 1.0);
}
