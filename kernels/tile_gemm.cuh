// smallinit.kernels — one 64×64 output tile of a matrix product, shared by bmm.cu and
// cosine_gram.cu. 256 threads as a 16×16 grid; thread (ty, tx) owns the 4×4 sub-tile
// rows 4ty..4ty+3, columns 4tx..4tx+3, accumulated in registers of type A. K is walked in
// slabs of 16: both operand slabs are staged in shared memory k-major (S[k][row]) so the
// inner loop reads 4 consecutive values per operand per k (8 FMA-pairs per 2 vector loads).
//   C_tile = A[i0:i0+64, :] · B_op, with A row-major (lda), and B_op either
//   B_ROWS = true : the rows j0..j0+63 of a row-major matrix B (ldb), i.e. A·Bᵀ (Gram);
//   B_ROWS = false: the columns j0..j0+63 of a row-major K×N matrix B (ldb), i.e. A·B.
// Out-of-range rows/columns/k are loaded as zeros, so any shape works (no tile multiple).
#pragma once
#include "common.cuh"

#define TILE_M 64
#define TILE_N 64
#define TILE_K 16
#define TILE_PAD 4
#define TILE_THREADS 256

template <typename T, typename A, bool B_ROWS>
__device__ __forceinline__ void tile_product(const T* __restrict__ Ap, long long lda, int mrem,
                                             const T* __restrict__ Bp, long long ldb, int nrem,
                                             int K, A acc[4][4]) {
    __shared__ __align__(16) A As[TILE_K][TILE_M + TILE_PAD];
    __shared__ __align__(16) A Bs[TILE_K][TILE_N + TILE_PAD];
    const int tid = threadIdx.x;
    const int tx = tid & 15, ty = tid >> 4;
#pragma unroll
    for (int r = 0; r < 4; ++r)
#pragma unroll
        for (int c = 0; c < 4; ++c) acc[r][c] = A(0);

    for (int k0 = 0; k0 < K; k0 += TILE_K) {
#pragma unroll
        for (int q = 0; q < 4; ++q) {
            const int e = tid + TILE_THREADS * q;
            const int row = e >> 4, kk = e & 15;
            const bool ok = row < mrem && k0 + kk < K;
            As[kk][row] = ok ? load_as<A, T>(Ap, row * lda + k0 + kk) : A(0);
            if (B_ROWS) {
                const bool okb = row < nrem && k0 + kk < K;
                Bs[kk][row] = okb ? load_as<A, T>(Bp, row * ldb + k0 + kk) : A(0);
            } else {
                const int kb = e >> 6, col = e & 63;
                const bool okb = col < nrem && k0 + kb < K;
                Bs[kb][col] = okb ? load_as<A, T>(Bp, (long long)(k0 + kb) * ldb + col) : A(0);
            }
        }
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < TILE_K; ++kk) {
            A av[4], bv[4];
#pragma unroll
            for (int r = 0; r < 4; ++r) av[r] = As[kk][4 * ty + r];
#pragma unroll
            for (int c = 0; c < 4; ++c) bv[c] = Bs[kk][4 * tx + c];
#pragma unroll
            for (int r = 0; r < 4; ++r)
#pragma unroll
                for (int c = 0; c < 4; ++c) acc[r][c] += av[r] * bv[c];
        }
        __syncthreads();
    }
}
