// Small SIMD helpers shared by the kernel files (matmul.c, qmatmul.c).
#ifndef DS_KERNELS_SIMD_H
#define DS_KERNELS_SIMD_H

#include <cpuid.h>
#include <immintrin.h>
#include <stdatomic.h>
#include <unistd.h>

// Whether the CPU converts half floats (CPUID leaf 1, ECX bit 29). GCC's __builtin_cpu_supports
// knows "f16c", clang's does not, so both compilers ask CPUID directly.
static inline int ds_cpu_has_f16c(void) {
    unsigned a, b, c, d;
    return __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C);
}

// Whether the weights a kernel streams are prefetched into L2 rather than L1: on cores whose L1 data
// cache is under 48 KiB (Zen 4: 32 KiB) prefetches into L1 evicted the input rows kept there (a
// forward of 4 rows of a 2048 x 5632 BF16 target on VDPBF16PS 150 -> 72 ms, one row on the f32
// FMAs 93 -> 80 ms, one thread); with 48 KiB (Zen 5, Intel's AVX-512 cores) L1 as measured there.
// The C library's answer (CPUID underneath), asked once per file and kept.
static inline int ds_cpu_prefetch_l2(void) {
    static _Atomic int cached = -1;
    int v = atomic_load_explicit(&cached, memory_order_relaxed);
    if (v < 0) {
        v = sysconf(_SC_LEVEL1_DCACHE_SIZE) < 48 * 1024;
        atomic_store_explicit(&cached, v, memory_order_relaxed);
    }
    return v;
}

// Sum of the 8 lanes of an AVX vector.
__attribute__((target("avx2,fma"))) static inline float ds_hsum256(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

#endif
