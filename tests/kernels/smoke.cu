// Toolchain smoke kernel, CUDA: what nablac's kernels do, written by hand.
// Philox4x32-10 (TAPE-FORMAT.md), an f64 normal by Box-Muller, an opaque bit-cast XOR (the
// optimiser cannot fold it), and a fixed-order f64 shared-memory tree reduction with barriers;
// one partial sum per block. Entry point: smoke.
#define BLOCK 128

__device__ __forceinline__ uint4 philox4x32_10(uint4 c, unsigned int k0, unsigned int k1) {
#pragma unroll
    for (int r = 0; r < 10; ++r) {
        unsigned int hi0 = __umulhi(0xD2511F53u, c.x), lo0 = 0xD2511F53u * c.x;
        unsigned int hi1 = __umulhi(0xCD9E8D57u, c.z), lo1 = 0xCD9E8D57u * c.z;
        c = make_uint4(hi1 ^ c.y ^ k0, lo1, hi0 ^ c.w ^ k1, lo0);
        k0 += 0x9E3779B9u;
        k1 += 0xBB67AE85u;
    }
    return c;
}

extern "C" __global__ void __launch_bounds__(BLOCK)
smoke(unsigned long long seed, unsigned long long n_paths, double* __restrict__ partial) {
    __shared__ double sh[BLOCK];
    const unsigned int tid = threadIdx.x;
    const unsigned long long p = (unsigned long long)blockIdx.x * BLOCK + tid;
    double v = 0.0;
    if (p < n_paths) {
        uint4 x = philox4x32_10(make_uint4(0u, (unsigned int)p, (unsigned int)(p >> 32), 0u),
                                (unsigned int)seed, (unsigned int)(seed >> 32));
        double u1 = ((double)(((((unsigned long long)x.x) << 32) | x.y) >> 11) + 0.5) * 0x1p-53;
        double u2 = (double)(((((unsigned long long)x.z) << 32) | x.w) >> 11) * 0x1p-53;
        double z = sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
        // Opaque negation: through the integer bits, so no algebraic rewrite can see it.
        v = __longlong_as_double(__double_as_longlong(z) ^ (long long)0x8000000000000000ull);
        v = v * v;
    }
    sh[tid] = v;
    __syncthreads();
    for (unsigned int s = BLOCK / 2; s > 0; s >>= 1) {
        if (tid < s) sh[tid] += sh[tid + s];
        __syncthreads();
    }
    if (tid == 0) partial[blockIdx.x] = sh[0];
}
