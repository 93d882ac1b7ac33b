// Affine (MLX 4/8-bit) matrix products for few rows, one instantiation per instruction set.
// See qmatmul.h and ../shared/docs/mlx-affine-quant.md (the packing read here: element j of a row
// at byte j·bits/8, low nibble first for 4 bits, because words are little-endian).
#include "kernels/qmatmul.h"

#include <immintrin.h>
#include <string.h>

#include "quant/affine.h"

// Bytes of input rows kept in L1 per pass (as DS_X_BLOCK_BYTES in matmul.c) and the most groups
// per pass (bounds the per-group Σx table on the stack: 8 × 512 floats).
#define DS_QX_BLOCK_BYTES 32768
#define DS_QX_GROUPS 512

// ---- AVX-512 ---------------------------------------------------------------------------------
#define ISA avx512
#define ISA_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,fma,f16c")))
#define VLEN 16
#define VEC __m512
#define VZERO _mm512_setzero_ps()
#define VSET1(f) _mm512_set1_ps(f)
#define VFMA(a, b, c) _mm512_fmadd_ps(a, b, c)
#define VSUM(v) _mm512_reduce_add_ps(v)
#define VLOAD_F32(p) _mm512_loadu_ps(p)
// 16 bytes -> 16 floats
#define VQ8(b, j) _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)((b) + (j)))))
// 8 bytes = 16 nibbles: split low/high nibbles and interleave them back into element order
#define VQ4(b, j) _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(nib16_avx512((b) + (j) / 2)))
__attribute__((target("avx512f,avx512bw,avx512vl"))) static inline __m128i nib16_avx512(const uint8_t *p) {
    const __m128i v = _mm_loadl_epi64((const __m128i *)p), m = _mm_set1_epi8(0x0F);
    return _mm_unpacklo_epi8(_mm_and_si128(v, m), _mm_and_si128(_mm_srli_epi16(v, 4), m));
}
#include "kernels/qmatmul_isa.inc"
#undef ISA
#undef ISA_TARGET
#undef VLEN
#undef VEC
#undef VZERO
#undef VSET1
#undef VFMA
#undef VSUM
#undef VLOAD_F32
#undef VQ8
#undef VQ4

// ---- AVX2 + FMA ------------------------------------------------------------------------------
__attribute__((target("avx2,fma"))) static inline float qhsum256(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}
__attribute__((target("avx2,fma"))) static inline __m128i nib8_avx2(const uint8_t *p) {
    uint32_t u;
    memcpy(&u, p, 4);
    const __m128i v = _mm_cvtsi32_si128((int)u), m = _mm_set1_epi8(0x0F);
    return _mm_unpacklo_epi8(_mm_and_si128(v, m), _mm_and_si128(_mm_srli_epi16(v, 4), m));
}
#define ISA avx2
#define ISA_TARGET __attribute__((target("avx2,fma,f16c")))
#define VLEN 8
#define VEC __m256
#define VZERO _mm256_setzero_ps()
#define VSET1(f) _mm256_set1_ps(f)
#define VFMA(a, b, c) _mm256_fmadd_ps(a, b, c)
#define VSUM(v) qhsum256(v)
#define VLOAD_F32(p) _mm256_loadu_ps(p)
#define VQ8(b, j) _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)((b) + (j)))))
#define VQ4(b, j) _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(nib8_avx2((b) + (j) / 2)))
#include "kernels/qmatmul_isa.inc"
#undef ISA
#undef ISA_TARGET
#undef VLEN
#undef VEC
#undef VZERO
#undef VSET1
#undef VFMA
#undef VSUM
#undef VLOAD_F32
#undef VQ8
#undef VQ4

// ---- Scalar fallback -------------------------------------------------------------------------
#define ISA scalar
#define ISA_TARGET
#define VLEN 1
#define VEC float
#define VZERO 0.0f
#define VSET1(f) (f)
#define VFMA(a, b, c) ((a) * (b) + (c))
#define VSUM(v) (v)
#define VLOAD_F32(p) (*(p))
#define VQ8(b, j) ((float)(b)[j])
#define VQ4(b, j) ((float)(((b)[(j) / 2] >> (((j) & 1) * 4)) & 15))
#include "kernels/qmatmul_isa.inc"
