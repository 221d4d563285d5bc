// Batched cosine Gram: for W (batch×m×d), G_b[i,j] = (W_i·W_j) · r_i · r_j with
// r_i = 1/‖W_i‖ (0 for a zero row), clipped to [−1, 1].
// row_inv_norms: one warp per row, r = 1/sqrt(Σ w²) (accumulated in acc_of<T>).
// cosine_gram_sym: grid (T, T, batch) with T = ceil(m/64); a block with tile row > tile
// column exits at once (the product is symmetric), the others compute W_I·W_Jᵀ through
// tile_product<B_ROWS=true> and write the tile and its mirror, halving the flops of a
// full GEMM. Storage T ∈ {float, double, bf16 bits}; output in acc_of<T>.
#include "tile_gemm.cuh"

template <typename T>
__global__ void row_inv_norms(const T* __restrict__ W, typename acc_of<T>::type* __restrict__ r,
                              long long rows, int d) {
    typedef typename acc_of<T>::type Acc;
    const long long row = (blockIdx.x * (long long)blockDim.x + threadIdx.x) >> 5;
    const int lane = threadIdx.x & 31;
    if (row >= rows) return;
    Acc s = Acc(0);
    for (int j = lane; j < d; j += 32) {
        const Acc v = load_as<Acc, T>(W, row * d + j);
        s += v * v;
    }
    s = warp_sum(s);
    if (lane == 0) r[row] = s > Acc(0) ? Acc(1) / sqrt(s) : Acc(0);
}

template <typename A> __device__ __forceinline__ A clip1(A v) {
    return v > A(1) ? A(1) : (v < A(-1) ? A(-1) : v);
}

template <typename T>
__global__ void __launch_bounds__(TILE_THREADS)
    cosine_gram_sym(const T* __restrict__ W, const typename acc_of<T>::type* __restrict__ rinv,
                    typename acc_of<T>::type* __restrict__ G, int m, int d) {
    typedef typename acc_of<T>::type Acc;
    if (blockIdx.y > blockIdx.x) return;
    const long long bi = blockIdx.z;
    const int i0 = blockIdx.y * TILE_M, j0 = blockIdx.x * TILE_N;
    const T* Wb = W + bi * m * (long long)d;
    Acc acc[4][4];
    tile_product<T, Acc, true>(Wb + (long long)i0 * d, d, m - i0, Wb + (long long)j0 * d, d,
                               m - j0, d, acc);
    const Acc* rb = rinv + bi * m;
    Acc* Gb = G + bi * m * (long long)m;
    const int tx = threadIdx.x & 15, ty = threadIdx.x >> 4;
    const bool mirror = blockIdx.y != blockIdx.x;
#pragma unroll
    for (int r = 0; r < 4; ++r) {
        const int i = i0 + 4 * ty + r;
        if (i >= m) continue;
        const Acc ri = rb[i];
#pragma unroll
        for (int c = 0; c < 4; ++c) {
            const int j = j0 + 4 * tx + c;
            if (j >= m) continue;
            const Acc v = clip1(acc[r][c] * ri * rb[j]);
            Gb[(long long)i * m + j] = v;
            if (mirror) Gb[(long long)j * m + i] = v;
        }
    }
}
