// Affine (MLX 4/8-bit) matrix products for few rows, one instantiation per instruction set.
// See qmatmul.h and docs/formats/mlx-affine.md §3 (the packing read here: element j of a row
// at byte j·bits/8, low nibble first for 4 bits, because words are little-endian).
#include "kernels/qmatmul.h"

#include <immintrin.h>
#include <string.h>

#include "kernels/half.h"
#include "kernels/simd.h"
#include "kernels/affine.h"

// Bytes of input rows kept in L1 per pass (as DS_X_BLOCK_BYTES in matmul.c), the most groups per
// pass (bounds the per-group Σx table on the stack: 8 × 512 floats), and the columns of one
// segment, the unit of the arithmetic (qmatmul_isa.inc): 8 input rows of one segment fill the block.
#define DS_QX_BLOCK_BYTES 32768
#define DS_QX_GROUPS 512
#define DS_QSEG 1024

// ---- AVX-512 ---------------------------------------------------------------------------------
#define ISA avx512
#define ISA_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,fma,f16c")))
#define VLEN 16
#define VEC __m512
#define VZERO _mm512_setzero_ps()
#define VSET1(f) _mm512_set1_ps(f)
#define VHALF(h) _cvtsh_ss(h) // F16C: ds_f16_to_f32's value, without its branches
#define VFMA(a, b, c) _mm512_fmadd_ps(a, b, c)
#define VSUM(v) _mm512_reduce_add_ps(v)
#define VLOAD_F32(p) _mm512_loadu_ps(p)
// 2 x 16 bytes -> 2 x 16 floats
#define VQ8S(b, j, v0, v1) /* signed: Q8_0 */                                                          \
    do {                                                                                              \
        v0 = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)((b) + (j))))); \
        v1 = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)((b) + (j) + 16)))); \
    } while (0)
#define VQ8(b, j, v0, v1)                                                                             \
    do {                                                                                              \
        v0 = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)((b) + (j))))); \
        v1 = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)((b) + (j) + 16)))); \
    } while (0)
// 16 bytes = 32 nibbles: low nibbles (elements 0, 2, .., 30) and high nibbles (1, 3, .., 31) as two
// vectors, no shuffles; the kernel pairs them with x de-interleaved the same way (QX_PERM4).
#define VQ4(b, j, v0, v1)                                                                           \
    do {                                                                                            \
        const __m128i raw_ = _mm_loadu_si128((const __m128i *)((b) + (j) / 2)), m_ = _mm_set1_epi8(0x0F); \
        v0 = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_and_si128(raw_, m_)));                     \
        v1 = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_and_si128(_mm_srli_epi16(raw_, 4), m_)));  \
    } while (0)
#include "kernels/qmatmul_isa.inc"
#include "kernels/isa_undef.inc"

// ---- AVX2 + FMA ------------------------------------------------------------------------------
#define ISA avx2
#define ISA_TARGET __attribute__((target("avx2,fma,f16c")))
#define VLEN 8
#define VEC __m256
#define VZERO _mm256_setzero_ps()
#define VSET1(f) _mm256_set1_ps(f)
#define VHALF(h) _cvtsh_ss(h)
#define VFMA(a, b, c) _mm256_fmadd_ps(a, b, c)
#define VSUM(v) ds_hsum256(v)
#define VLOAD_F32(p) _mm256_loadu_ps(p)
// 16 bytes -> 2 x 8 floats
#define VQ8S(b, j, v0, v1) /* signed: Q8_0 */                                              \
    do {                                                                                   \
        const __m128i raw_ = _mm_loadu_si128((const __m128i *)((b) + (j)));                \
        v0 = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(raw_));                               \
        v1 = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_unpackhi_epi64(raw_, raw_)));     \
    } while (0)
#define VQ8(b, j, v0, v1)                                                                  \
    do {                                                                                   \
        const __m128i raw_ = _mm_loadu_si128((const __m128i *)((b) + (j)));                \
        v0 = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(raw_));                               \
        v1 = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_unpackhi_epi64(raw_, raw_)));     \
    } while (0)
// 8 bytes = 16 nibbles: low nibbles (even elements), high nibbles (odd elements), as for AVX-512
#define VQ4(b, j, v0, v1)                                                                          \
    do {                                                                                           \
        const __m128i raw_ = _mm_loadl_epi64((const __m128i *)((b) + (j) / 2)), m_ = _mm_set1_epi8(0x0F); \
        v0 = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_and_si128(raw_, m_)));                   \
        v1 = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_and_si128(_mm_srli_epi16(raw_, 4), m_))); \
    } while (0)
#include "kernels/qmatmul_isa.inc"
#include "kernels/isa_undef.inc"

// ---- Scalar fallback -------------------------------------------------------------------------
#define ISA scalar
#define ISA_TARGET
#define VLEN 1
#define VEC float
#define VZERO 0.0f
#define VSET1(f) (f)
#define VHALF(h) ds_f16_to_f32(h)
#define VFMA(a, b, c) ((a) * (b) + (c))
#define VSUM(v) (v)
#define VLOAD_F32(p) (*(p))
#define VQ8(b, j, v0, v1) (v0 = (float)(b)[j], v1 = (float)(b)[(j) + 1])
#define VQ8S(b, j, v0, v1) (v0 = (float)((const int8_t *)(b))[j], v1 = (float)((const int8_t *)(b))[(j) + 1])
#define VQ4(b, j, v0, v1) (v0 = (float)((b)[(j) / 2] & 15), v1 = (float)((b)[(j) / 2] >> 4))
#include "kernels/qmatmul_isa.inc"
