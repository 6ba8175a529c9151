// Toolchain smoke kernel, OpenCL C 1.2: what nablac's kernels do, written by hand.
// Philox4x32-10 (TAPE-FORMAT.md), an f64 normal by Box-Muller, an opaque bit-cast XOR, and a
// fixed-order f64 local-memory tree reduction with barriers; one partial sum per work-group.
// Entry point: smoke.
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
#define BLOCK 128

uint4 philox4x32_10(uint4 c, uint k0, uint k1) {
    for (int r = 0; r < 10; ++r) {
        uint hi0 = mul_hi(0xD2511F53u, c.x), lo0 = 0xD2511F53u * c.x;
        uint hi1 = mul_hi(0xCD9E8D57u, c.z), lo1 = 0xCD9E8D57u * c.z;
        c = (uint4)(hi1 ^ c.y ^ k0, lo1, hi0 ^ c.w ^ k1, lo0);
        k0 += 0x9E3779B9u;
        k1 += 0xBB67AE85u;
    }
    return c;
}

__kernel __attribute__((reqd_work_group_size(BLOCK, 1, 1)))
void smoke(ulong seed, ulong n_paths, __global double* restrict partial) {
    __local double sh[BLOCK];
    const uint tid = get_local_id(0);
    const ulong p = (ulong)get_group_id(0) * BLOCK + tid;
    double v = 0.0;
    if (p < n_paths) {
        uint4 x = philox4x32_10((uint4)(0u, (uint)p, (uint)(p >> 32), 0u), (uint)seed, (uint)(seed >> 32));
        double u1 = ((double)(((((ulong)x.x) << 32) | x.y) >> 11) + 0.5) * 0x1p-53;
        double u2 = (double)(((((ulong)x.z) << 32) | x.w) >> 11) * 0x1p-53;
        double z = sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
        // Opaque negation: through the integer bits, so no algebraic rewrite can see it.
        v = as_double(as_ulong(z) ^ 0x8000000000000000UL);
        v = v * v;
    }
    sh[tid] = v;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (uint s = BLOCK / 2; s > 0; s >>= 1) {
        if (tid < s) sh[tid] += sh[tid + s];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (tid == 0) partial[get_group_id(0)] = sh[0];
}
