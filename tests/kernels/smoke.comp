// Toolchain smoke kernel, Vulkan GLSL compute: what nablac's kernels do, written by hand.
// Philox4x32-10 (TAPE-FORMAT.md), an f64 Box-Muller normal, an opaque bit-cast XOR, and a
// fixed-order f64 shared-memory tree reduction with barriers; one partial sum per workgroup.
// Needs shaderFloat64 and shaderInt64 (lavapipe has both). Entry point: main.
//
// GLSL has no f64 transcendentals (log, cos, exp, pow take only float): here log and cos go
// through f32; nablac's f64 GLSL must bring its own. sqrt, fma, abs, floor do exist for double.
#version 450
#extension GL_ARB_gpu_shader_int64 : require
#define BLOCK 128
layout(local_size_x = BLOCK, local_size_y = 1, local_size_z = 1) in;

layout(push_constant) uniform Params {
    uint64_t seed;
    uint64_t n_paths;
} pc;
layout(std430, set = 0, binding = 0) writeonly buffer Partial { double partial[]; };

shared double sh[BLOCK];

uvec4 philox4x32_10(uvec4 c, uint k0, uint k1) {
    for (int r = 0; r < 10; ++r) {
        uint hi0, lo0, hi1, lo1;
        umulExtended(0xD2511F53u, c.x, hi0, lo0);
        umulExtended(0xCD9E8D57u, c.z, hi1, lo1);
        c = uvec4(hi1 ^ c.y ^ k0, lo1, hi0 ^ c.w ^ k1, lo0);
        k0 += 0x9E3779B9u;
        k1 += 0xBB67AE85u;
    }
    return c;
}

void main() {
    const uint tid = gl_LocalInvocationID.x;
    const uint64_t p = uint64_t(gl_WorkGroupID.x) * BLOCK + tid;
    double v = 0.0LF;
    if (p < pc.n_paths) {
        uvec4 x = philox4x32_10(uvec4(0u, uint(p), uint(p >> 32), 0u), uint(pc.seed), uint(pc.seed >> 32));
        double u1 = (double(((uint64_t(x.x) << 32) | x.y) >> 11) + 0.5LF) * 1.1102230246251565404236316680908203125e-16LF;
        double u2 = double(((uint64_t(x.z) << 32) | x.w) >> 11) * 1.1102230246251565404236316680908203125e-16LF;
        double z = sqrt(-2.0LF * double(log(float(u1)))) * double(cos(float(6.283185307179586LF * u2)));
        // Opaque negation: through the integer bits, so no algebraic rewrite can see it.
        v = uint64BitsToDouble(doubleBitsToUint64(z) ^ 0x8000000000000000UL);
        v = v * v;
    }
    sh[tid] = v;
    barrier();
    for (uint s = BLOCK / 2; s > 0; s >>= 1) {
        if (tid < s) sh[tid] += sh[tid + s];
        barrier();
    }
    if (tid == 0) partial[gl_WorkGroupID.x] = sh[0];
}
