// Batched matrix product C_b = A_b · B_b for a uniform batch: A (batch×m×k), B (batch×k×n),
// C (batch×m×n), all row-major and contiguous. One block per 64×64 tile of C per batch
// element (grid = (ceil(n/64), ceil(m/64), batch)); edges handled by zero-filled loads, so
// shapes need not be tile multiples. Storage T ∈ {float, double, bf16 bits}; output and
// accumulation in acc_of<T> (float for bf16).
#include "tile_gemm.cuh"

template <typename T>
__global__ void __launch_bounds__(TILE_THREADS)
    bmm_tiled(const T* __restrict__ A, const T* __restrict__ B,
              typename acc_of<T>::type* __restrict__ C, int m, int k, int n) {
    typedef typename acc_of<T>::type Acc;
    const long long bi = blockIdx.z;
    const int i0 = blockIdx.y * TILE_M, j0 = blockIdx.x * TILE_N;
    const T* Ab = A + bi * m * (long long)k + (long long)i0 * k;
    const T* Bb = B + bi * k * (long long)n + j0;
    Acc acc[4][4];
    tile_product<T, Acc, false>(Ab, k, m - i0, Bb, n, n - j0, k, acc);
    Acc* Cb = C + bi * m * (long long)n;
    const int tx = threadIdx.x & 15, ty = threadIdx.x >> 4;
#pragma unroll
    for (int r = 0; r < 4; ++r) {
        const int i = i0 + 4 * ty + r;
        if (i >= m) continue;
#pragma unroll
        for (int c = 0; c < 4; ++c) {
            const int j = j0 + 4 * tx + c;
            if (j < n) Cb[(long long)i * n + j] = acc[r][c];
        }
    }
}
