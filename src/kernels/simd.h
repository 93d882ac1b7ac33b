// Small SIMD helpers shared by the kernel files (matmul.c, qmatmul.c).
#ifndef DS_KERNELS_SIMD_H
#define DS_KERNELS_SIMD_H

#include <cpuid.h>
#include <immintrin.h>

// Whether the CPU converts half floats (CPUID leaf 1, ECX bit 29). GCC's __builtin_cpu_supports
// knows "f16c", clang's does not, so both compilers ask CPUID directly.
static inline int ds_cpu_has_f16c(void) {
    unsigned a, b, c, d;
    return __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C);
}

// Sum of the 8 lanes of an AVX vector.
__attribute__((target("avx2,fma"))) static inline float ds_hsum256(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

#endif
