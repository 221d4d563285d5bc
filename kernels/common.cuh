// smallinit.kernels — shared device helpers for the .cu kernels.
//
// Storage types: float, double, and bfloat16 carried as its raw 16-bit pattern
// (`bf16_t`, an unsigned short): CuPy has no bfloat16 dtype, so bf16 tensors are handed
// over as uint16 views and widened here (bf16 = the top 16 bits of an IEEE float32).
// Accumulation is in float for float/bf16 and in double for double.
#pragma once

typedef unsigned short bf16_t;

template <typename T> struct acc_of { typedef T type; };
template <> struct acc_of<bf16_t> { typedef float type; };

template <typename A, typename T> __device__ __forceinline__ A load_as(const T* p, long long i) {
    return static_cast<A>(p[i]);
}
template <> __device__ __forceinline__ float load_as<float, bf16_t>(const bf16_t* p, long long i) {
    return __uint_as_float(static_cast<unsigned int>(p[i]) << 16);
}

template <typename T> __device__ __forceinline__ T warp_sum(T v) {
    for (int off = 16; off > 0; off >>= 1) v += __shfl_down_sync(0xffffffffu, v, off);
    return v;
}
