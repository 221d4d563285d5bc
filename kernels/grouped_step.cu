// Grouped two-layer step: loss and gradients of G independent two-layer networks of
// different widths (a ragged batch) in one launch. Model and loss (docs/science.md §2):
//   z_ik = w_k·x_i + b_k,  f_g(x_i) = (1/α_g) Σ_{k∈g} a_k σ(z_ik),
//   e_gi = f_g(x_i) − y_gi,  R_g = (1/2n) Σ_i e_gi²,
//   ∂R/∂a_k = c Σ_i e_i σ(z_ik),  ∂R/∂w_k = c a_k Σ_i e_i σ'(z_ik) x_i,
//   ∂R/∂b_k = c a_k Σ_i e_i σ'(z_ik),  with c = 1/(n α_g).
// Layout: neurons concatenated, network g owns rows offsets[g]..offsets[g+1] of W (M×d),
// a, b (M). X is (n×d) shared (x_stride = 0) or (G×n×d) per network (x_stride = n·d);
// y is (G×n). Outputs: loss (G), f (G×n), ga (M), gW (M×d), gb (M).
// The math is the one definition of the two-layer step (kernels/two_layer.py, with the
// output scale 1/α and the bias as the weight of an input fixed at 1), which a CUDA kernel
// cannot call: tests/kernel_cases.py holds this kernel to the per-network loop over that
// module (kernels/cpu.py), on a GPU and in the CPU emulation, with planted errors.
//
// One block per network. Forward: for each data point i every thread sums a_k σ(z_ik)
// over its neurons (k = lo + tid, step blockDim), the block reduces with warp shuffles
// and shared-memory atomics into F[i]. Then e_i = F[i]/α − y_i is kept in shared memory
// and each thread runs the backward pass for its own neurons with w_k and the gradient
// accumulator held in registers (d ≤ DMAX; instantiated DMAX ∈ {4, 8, 16, 32} and 64 for
// float only, where double would spill), so no atomics touch global memory.
#include "common.cuh"

// Activation codes: relu 0, tanh 1, sigmoid 2, softplus 3, xtanh 4, x2tanh 5, gelu 6
// (same order as activations.CODES in Python).
template <typename T> __device__ __forceinline__ void act_fwd_bwd(int code, T z, T& h, T& dh) {
    const T one = T(1);
    switch (code) {
        case 0:
            h = z > T(0) ? z : T(0);
            dh = z > T(0) ? one : T(0);
            break;
        case 2: {
            T s = T(0.5) * (one + tanh(T(0.5) * z));
            h = s;
            dh = s * (one - s);
            break;
        }
        case 3: {
            T s = T(0.5) * (one + tanh(T(0.5) * z));
            h = z > T(0) ? z + log1p(exp(-z)) : log1p(exp(z));
            dh = s;
            break;
        }
        case 6: {
            T cdf = T(0.5) * (one + erf(z * T(0.7071067811865476)));
            h = z * cdf;
            dh = cdf + z * T(0.3989422804014327) * exp(T(-0.5) * z * z);
            break;
        }
        default: {
            T t = tanh(z);
            T dt = one - t * t;
            if (code == 1) {
                h = t;
                dh = dt;
            } else if (code == 4) {
                h = z * t;
                dh = t + z * dt;
            } else {
                h = z * z * t;
                dh = T(2) * z * t + z * z * dt;
            }
        }
    }
}

template <typename T, int DMAX>
__global__ void grouped_two_layer_step(const T* __restrict__ X, long long x_stride,
                                       const T* __restrict__ y, const T* __restrict__ a,
                                       const T* __restrict__ W, const T* __restrict__ b,
                                       const long long* __restrict__ offsets,
                                       const T* __restrict__ alpha, int n, int d, int act,
                                       int has_bias, T* __restrict__ loss, T* __restrict__ f,
                                       T* __restrict__ ga, T* __restrict__ gW,
                                       T* __restrict__ gb) {
    extern __shared__ unsigned char smem_raw[];
    T* E = reinterpret_cast<T*>(smem_raw);  // F[i], then e_i
    __shared__ T red[32];
    const int g = blockIdx.x;
    const long long lo = offsets[g], hi = offsets[g + 1];
    const T* Xg = X + g * x_stride;
    const T* yg = y + static_cast<long long>(g) * n;
    const T inv_alpha = T(1) / alpha[g];
    const int lane = threadIdx.x & 31;

    for (int i = threadIdx.x; i < n; i += blockDim.x) E[i] = T(0);
    __syncthreads();

    // forward: F[i] = Σ_k a_k σ(z_ik)
    for (int i = 0; i < n; ++i) {
        const T* xi = Xg + static_cast<long long>(i) * d;
        T part = T(0);
        for (long long k = lo + threadIdx.x; k < hi; k += blockDim.x) {
            const T* wk = W + k * d;
            T z = has_bias ? b[k] : T(0);
            for (int j = 0; j < d; ++j) z += wk[j] * xi[j];
            T h, dh;
            act_fwd_bwd<T>(act, z, h, dh);
            part += a[k] * h;
        }
        part = warp_sum(part);
        if (lane == 0 && part != T(0)) atomicAdd(&E[i], part);
    }
    __syncthreads();

    // outputs, errors and loss
    T sq = T(0);
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        T fi = E[i] * inv_alpha;
        f[static_cast<long long>(g) * n + i] = fi;
        T e = fi - yg[i];
        E[i] = e;
        sq += e * e;
    }
    sq = warp_sum(sq);
    if (lane == 0) red[threadIdx.x >> 5] = sq;
    __syncthreads();
    if (threadIdx.x == 0) {
        T tot = T(0);
        for (int w = 0; w < (blockDim.x + 31) / 32; ++w) tot += red[w];
        loss[g] = T(0.5) * tot / T(n);
    }

    // backward: one neuron per thread, registers for w_k and its gradient
    const T c = inv_alpha / T(n);
    for (long long k = lo + threadIdx.x; k < hi; k += blockDim.x) {
        T wk[DMAX], gw[DMAX];
#pragma unroll
        for (int j = 0; j < DMAX; ++j) {
            wk[j] = j < d ? W[k * d + j] : T(0);
            gw[j] = T(0);
        }
        const T bk = has_bias ? b[k] : T(0);
        T sa = T(0), sb = T(0);
        for (int i = 0; i < n; ++i) {
            const T* xi = Xg + static_cast<long long>(i) * d;
            T z = bk;
#pragma unroll
            for (int j = 0; j < DMAX; ++j)
                if (j < d) z += wk[j] * xi[j];
            T h, dh;
            act_fwd_bwd<T>(act, z, h, dh);
            const T e = E[i];
            sa += e * h;
            const T s = e * dh;
            sb += s;
#pragma unroll
            for (int j = 0; j < DMAX; ++j)
                if (j < d) gw[j] += s * xi[j];
        }
        const T ca = c * a[k];
        ga[k] = c * sa;
        if (has_bias) gb[k] = ca * sb;
#pragma unroll
        for (int j = 0; j < DMAX; ++j)
            if (j < d) gW[k * d + j] = ca * gw[j];
    }
}
