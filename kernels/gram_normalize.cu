// The normalization after a library (cuBLAS) Gram product: for G = W Wᵀ (batch×m×m, in
// place) and r_i = 1/‖W_i‖ (batch×m, 0 for a zero row, from row_inv_norms of
// cosine_gram.cu), G_b[i,j] ← clip(G_b[i,j] · r_i · r_j, −1, 1): the cosine Gram.
// cosine_normalize: a grid-stride loop over the batch·m·m elements (any grid covers them
// all); A ∈ {float, double}, the product's and the norms' type.
#include "common.cuh"

template <typename A>
__global__ void cosine_normalize(A* __restrict__ G, const A* __restrict__ rinv,
                                 long long batch, int m) {
    const long long mm = (long long)m * m, total = batch * mm;
    const long long stride = (long long)gridDim.x * blockDim.x;
    for (long long k = blockIdx.x * (long long)blockDim.x + threadIdx.x; k < total;
         k += stride) {
        const long long b = k / mm, rem = k - b * mm;
        const long long i = rem / m, j = rem - i * m;
        const A v = G[k] * rinv[b * m + i] * rinv[b * m + j];
        G[k] = v > A(1) ? A(1) : (v < A(-1) ? A(-1) : v);
    }
}
