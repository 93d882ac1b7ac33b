// Affine (MLX 4/8-bit) products on integer dot products: the input rounded to int8 per group, then
// u8 weights x s8 inputs summed exactly in int32 (VPDPBUSD with AVX512-VNNI; AVX2 and scalar
// fallbacks compute the same integers). See qmatmul.h for the numerics, qmatmul_i8_isa.inc for
// the kernel.
#include "kernels/qmatmul.h"

#include <float.h>
#include <immintrin.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "kernels/affine.h"
#include "kernels/ggml_quants.h"
#include "kernels/half.h"
#include "kernels/simd.h"

#define DS_QX_GROUPS 512 // the most groups per pass (bounds the per-group tables on the stack)
#define DS_QSEG 1024     // columns of one segment, the unit of the arithmetic (as qmatmul.c)

// ---- The rounded input -------------------------------------------------------------------------

size_t ds_qx_bytes(int n, int cols, int gs, int ch) {
    if (ch == DS_QX_R8) n = (n + 7) & ~7;
    const size_t bs = gs == 256 ? sizeof(int16_t) * (size_t)n * (size_t)(cols / 16) : 0;
    return (size_t)n * (size_t)cols + 2 * sizeof(float) * (size_t)n * (size_t)(cols / gs) + bs + 64;
}

// Where element i of a group goes in the packed input (ds_qx.q): 4-bit affine layouts (ch > 0): per
// block of ch columns, the even elements, then the odd ones; DS_QX_K4: per 128 columns, the quarters
// in the order 0, 2, 1, 3 (a 64-byte load of Q4_K / Q5_K quants holds elements 0-31 and 64-95 in
// its low nibbles, 32-63 and 96-127 in its high ones); 0: natural order.
static inline int qx_pos(int i, int ch) {
    if (ch == DS_QX_K4) {
        static const int quarter[4] = {0, 2, 1, 3};
        return (i & ~127) + quarter[(i >> 5) & 3] * 32 + (i & 31);
    }
    return ch ? (i / ch) * ch + (i % ch) / 2 + (i % 2) * (ch / 2) : i;
}

// One group of gs floats: scale d = amax / 127 and r_i = round-to-nearest-even(x_i · (127 / amax))
// written to q (position of element i: pos(i)); 0 when amax = 0; NaN scale (and r = 0) when the group
// holds a NaN or an infinity, so the product is NaN as the float product would be.
static float quantize_group(const float *x, int gs, int8_t *q, int ch, int *sum) {
    float amax = 0.0f;
    int finite = 1;
    for (int i = 0; i < gs; i++) {
        const float a = fabsf(x[i]);
        if (!(a <= FLT_MAX)) finite = 0;
        else if (a > amax) amax = a;
    }
    int s = 0;
    if (!finite || amax == 0.0f) {
        for (int i = 0; i < gs; i++) q[i] = 0;
        *sum = 0;
        return finite ? 0.0f : NAN;
    }
    const float id = 127.0f / amax;
    for (int i = 0; i < gs; i++) {
        float r = nearbyintf(x[i] * id); // default rounding mode: to nearest, ties to even
        r = r > 127.0f ? 127.0f : r < -127.0f ? -127.0f : r;
        const int v = (int)r;
        q[qx_pos(i, ch)] = (int8_t)v;
        s += v;
    }
    *sum = s;
    return amax / 127.0f;
}

#if defined(__GNUC__)
// The same rounding 16 lanes at a time (cvtps rounds to nearest even under the default MXCSR).
__attribute__((target("avx512f,avx512bw,avx512vl"))) static float quantize_group_avx512(const float *x, int gs, int8_t *q,
                                                                                      int ch, int *sum) {
    __m512 amax = _mm512_setzero_ps();
    __mmask16 bad = 0;
    const __m512 big = _mm512_set1_ps(FLT_MAX);
    for (int i = 0; i < gs; i += 16) {
        const __m512 a = _mm512_abs_ps(_mm512_loadu_ps(x + i));
        bad |= _mm512_cmp_ps_mask(a, big, _CMP_NLE_UQ); // NaN or infinity
        amax = _mm512_max_ps(amax, a);
    }
    const float m = _mm512_reduce_max_ps(amax);
    if (bad || m == 0.0f) {
        for (int i = 0; i < gs; i++) q[i] = 0;
        *sum = 0;
        return bad ? NAN : 0.0f;
    }
    const __m512 id = _mm512_set1_ps(127.0f / m);
    int8_t t[256];
    __m512i s = _mm512_setzero_si512();
    for (int i = 0; i < gs; i += 16) {
        __m512i v = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(x + i), id));
        v = _mm512_max_epi32(_mm512_min_epi32(v, _mm512_set1_epi32(127)), _mm512_set1_epi32(-127));
        s = _mm512_add_epi32(s, v);
        _mm_storeu_si128((__m128i *)(t + i), _mm512_cvtsepi32_epi8(v));
    }
    if (ch == DS_QX_K4)
        for (int i = 0; i < gs; i += 128) {
            memcpy(q + i, t + i, 32), memcpy(q + i + 32, t + i + 64, 32);
            memcpy(q + i + 64, t + i + 32, 32), memcpy(q + i + 96, t + i + 96, 32);
        }
    else if (ch)
        for (int i = 0; i < gs; i++) q[qx_pos(i, ch)] = t[i];
    else memcpy(q, t, (size_t)gs);
    *sum = _mm512_reduce_add_epi32(s);
    return m / 127.0f;
}
#endif

static int has_avx512(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl");
}

// One group rounded into layout ch, by the 512-bit routine where `wide` (gs <= 256 and the CPU has it).
static float round_group(const float *x, int gs, int8_t *q, int ch, int *sum, int wide) {
#if defined(__GNUC__)
    if (wide) return quantize_group_avx512(x, gs, q, ch, sum);
#endif
    return quantize_group(x, gs, q, ch, sum);
}

// DS_QX_R8 (qmatmul.h): the same rounding as the other layouts, the rows interleaved by 8.
static ds_qx qx_pack_r8(void *buf, const float *x, int n, int cols) {
    const int nsb = cols / 256, n8 = (n + 7) & ~7, wide = has_avx512();
    float *d = buf;
    // q and bs on 64-byte boundaries (ds_qx_bytes keeps 64 bytes for it): each 512-bit load of them
    // then reads one cache line, not two
    const uintptr_t end = (uintptr_t)(d + (size_t)n8 * (size_t)nsb);
    int8_t *q = (int8_t *)((end + 63) & ~(uintptr_t)63);
    int16_t *bs = (int16_t *)(q + (size_t)n8 * (size_t)cols);
    for (int i = 0; i < n8; i++)
        for (int sb = 0; sb < nsb; sb++) {
            int8_t t[256];
            int sum = 0;
            float dg = 0.0f;
            if (i < n) dg = round_group(x + (size_t)i * cols + (size_t)sb * 256, 256, t, 0, &sum, wide);
            else memset(t, 0, sizeof t);
            const size_t o = (size_t)(i / 8) * (size_t)nsb + (size_t)sb; // (block, super-block)
            const int k = i % 8;
            d[o * 8 + (size_t)k] = dg;
            for (int g = 0; g < 32; g++) memcpy(q + (o * 32 + (size_t)g) * 64 + (size_t)k * 8, t + 8 * g, 8);
            for (int j = 0; j < 16; j++) {
                int s16 = 0;
                for (int e = 0; e < 16; e++) s16 += t[16 * j + e];
                bs[(o * 8 + (size_t)(j / 2)) * 16 + (size_t)k * 2 + (size_t)(j % 2)] = (int16_t)s16;
            }
        }
    return (ds_qx){.q = q, .d = d, .s = NULL, .bs = bs, .ch = DS_QX_R8};
}

ds_qx ds_qx_pack(void *buf, const float *x, int n, int cols, int gs, int ch) {
    if (ch == DS_QX_R8) return qx_pack_r8(buf, x, n, cols);
    const size_t ng = (size_t)(cols / gs);
    ds_qx p;
    p.ch = ch;
    float *d = buf, *s = d + (size_t)n * ng;
    int8_t *q = (int8_t *)(((uintptr_t)(s + (size_t)n * ng) + 63) & ~(uintptr_t)63); // as qx_pack_r8's
    const int wide = gs <= 256 && has_avx512();
    for (size_t i = 0; i < (size_t)n; i++)
        for (size_t g = 0; g < ng; g++) {
            const float *xg = x + i * (size_t)cols + g * (size_t)gs;
            int8_t *qg = q + i * (size_t)cols + g * (size_t)gs;
            int sum;
            const float dg = round_group(xg, gs, qg, ch, &sum, wide);
            d[i * ng + g] = dg;
            s[i * ng + g] = dg * (float)sum;
        }
    p.q = q;
    p.d = d;
    p.s = s;
    p.bs = NULL;
    if (gs == 256) { // after the int8 rows (16-byte aligned: cols is a multiple of 256)
        int16_t *bs = (int16_t *)(q + (size_t)n * (size_t)cols);
        for (size_t i = 0; i < (size_t)n * (size_t)(cols / 16); i++) {
            int sum = 0;
            for (int j = 0; j < 16; j++) sum += q[i * 16 + (size_t)j];
            bs[i] = (int16_t)sum;
        }
        p.bs = bs;
    }
    return p;
}

// The same with F16C's conversion (the vector kernels' targets all have it; ds_f16_to_f32 is the
// portable bit-exact one, equal on every finite and infinite half).
__attribute__((target("f16c"))) static inline void scales_f32_f16c(const ds_weight *w, size_t o, int ng, float *sf,
                                                                  float *bf) {
    if (w->scale_type != DS_F16) {
        ds_affine_row_scales(w, o, ng, sf, bf);
        return;
    }
    for (int g = 0; g < ng; g++) {
        sf[g] = _cvtsh_ss(((const uint16_t *)w->scales)[o + g]);
        bf[g] = _cvtsh_ss(((const uint16_t *)w->biases)[o + g]);
    }
}
#define ds_affine_scales_f32 scales_f32_f16c

// ---- AVX-512 VNNI, 64 columns per vector (groups of 64) -----------------------------------------
#define VNNI_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,fma,f16c")))
// 32 bytes = 64 nibbles: the low nibbles (even elements) in bytes 0..31, the high ones (odd) in 32..63.
VNNI_TARGET static inline __m512i w4load_vnni512(const uint8_t *p) {
    const __m512i v = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)p));
    const __m512i sh = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(4), 1);
    return _mm512_and_si512(_mm512_srlv_epi16(v, sh), _mm512_set1_epi8(0x0F));
}
#define ISA vnni512
#define ISA_TARGET VNNI_TARGET
#define CH 64
#define IVEC __m512i
#define IZERO _mm512_setzero_si512()
#define W8LOAD(p) _mm512_loadu_si512((const void *)(p))
#define W4LOAD(p) w4load_vnni512(p)
#define IDOT4(acc, w, xp) _mm512_dpbusd_epi32(acc, w, _mm512_loadu_si512((const void *)(xp)))
#define IDOT8 IDOT4
#define FVEC __m512
#define FZERO _mm512_setzero_ps()
#define FLEN 16
#define ICVT(v) _mm512_cvtepi32_ps(v)
#define FFMA(a, b, c) _mm512_fmadd_ps(a, b, c)
#define FMUL(a, b) _mm512_mul_ps(a, b)
#define FSET1(f) _mm512_set1_ps(f)
#define FLOAD(p) _mm512_loadu_ps(p)
#define FSTORE(p, v) _mm512_storeu_ps(p, v)
#define FSUM(v) _mm512_reduce_add_ps(v)
#include "kernels/qmatmul_i8_isa.inc"
#include "kernels/qmatmul_i8_undef.inc"

// ---- AVX-512 VNNI on 256-bit vectors, 32 columns per vector (groups of 32) ----------------------
// 16 bytes = 32 nibbles: low nibbles (even elements) in bytes 0..15, high ones (odd) in 16..31.
#define W4LOAD_128(p)                                                                                     \
    ({                                                                                                    \
        const __m128i raw_ = _mm_loadu_si128((const __m128i *)(p)), m_ = _mm_set1_epi8(0x0F);             \
        _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(raw_, 4), m_), _mm_and_si128(raw_, m_));            \
    })
#define ISA vnni256
#define ISA_TARGET VNNI_TARGET
#define CH 32
#define IVEC __m256i
#define IZERO _mm256_setzero_si256()
#define W8LOAD(p) _mm256_loadu_si256((const __m256i *)(p))
#define W4LOAD(p) W4LOAD_128(p)
#define IDOT4(acc, w, xp) _mm256_dpbusd_epi32(acc, w, _mm256_loadu_si256((const __m256i *)(xp)))
#define IDOT8 IDOT4
#include "kernels/qmatmul_i8_f256.inc"
#include "kernels/qmatmul_i8_isa.inc"
#include "kernels/qmatmul_i8_undef.inc"

// ---- AVX2, 32 columns per vector ----------------------------------------------------------------
#define AVX2_TARGET __attribute__((target("avx2,fma,f16c")))
// u8 · s8 pairs into i16 (cannot saturate: 15 · 127 · 2 < 2^15), then pairs of i16 into i32.
#define IDOT4_AVX2(acc, w, xp)                                                                            \
    _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(w, _mm256_loadu_si256((const __m256i *)(xp))), \
                                            _mm256_set1_epi16(1)))
// 8 bits would saturate maddubs (255 · 127 · 2 > 2^15): widen both to i16 and multiply-add pairs.
AVX2_TARGET static inline __m256i idot8_avx2(__m256i acc, __m256i w, const int8_t *xp) {
    const __m256i x = _mm256_loadu_si256((const __m256i *)xp);
    const __m256i w0 = _mm256_cvtepu8_epi16(_mm256_castsi256_si128(w)), w1 = _mm256_cvtepu8_epi16(_mm256_extracti128_si256(w, 1));
    const __m256i x0 = _mm256_cvtepi8_epi16(_mm256_castsi256_si128(x)), x1 = _mm256_cvtepi8_epi16(_mm256_extracti128_si256(x, 1));
    return _mm256_add_epi32(acc, _mm256_add_epi32(_mm256_madd_epi16(w0, x0), _mm256_madd_epi16(w1, x1)));
}
#define ISA avx2
#define ISA_TARGET AVX2_TARGET
#define CH 32
#define IVEC __m256i
#define IZERO _mm256_setzero_si256()
#define W8LOAD(p) _mm256_loadu_si256((const __m256i *)(p))
#define W4LOAD(p) W4LOAD_128(p)
#define IDOT4(acc, w, xp) IDOT4_AVX2(acc, w, xp)
#define IDOT8(acc, w, xp) idot8_avx2(acc, w, xp)
#include "kernels/qmatmul_i8_f256.inc"
#include "kernels/qmatmul_i8_isa.inc"
#include "kernels/qmatmul_i8_undef.inc"

// ---- Scalar -------------------------------------------------------------------------------------
// The same sums in natural column order (ds_qx_pack with ch = 0): per segment, per group, the
// exact integer dot product scaled by s·d, plus b·(d·Σr).
static void qi_rows_scalar(float *y, int ldy, const ds_qx *px, int nb, const ds_weight *w, int r0, int r1) {
    const int cols = w->cols, gs = w->group_size, bits = ds_weight_bits(w), ng = cols / gs;
    const int seg = cols < DS_QSEG ? cols : DS_QSEG;
    const size_t row_bytes = (size_t)cols * (size_t)bits / 8;
    for (int r = r0; r < r1; r++) {
        const uint8_t *row = (const uint8_t *)w->data + (size_t)r * row_bytes;
        for (int i = 0; i < nb; i++) {
            const int8_t *xq = px->q + (size_t)i * cols;
            const float *d = px->d + (size_t)i * ng, *s = px->s + (size_t)i * ng;
            float acc = 0.0f;
            for (int c0 = 0; c0 < cols; c0 += seg) {
                const int len = cols - c0 < seg ? cols - c0 : seg;
                float v = 0.0f;
                for (int g = c0 / gs; g < (c0 + len) / gs; g++) {
                    int32_t isum = 0;
                    for (int j = g * gs; j < (g + 1) * gs; j++) {
                        const int q = bits == 8 ? row[j] : (row[j / 2] >> ((j % 2) * 4)) & 15;
                        isum += q * xq[j];
                    }
                    float sg, bg;
                    ds_affine_row_scales(w, (size_t)r * ng + (size_t)g, 1, &sg, &bg);
                    v += (sg * d[g]) * (float)isum + bg * s[g];
                }
                acc = c0 ? acc + v : v;
            }
            y[(size_t)i * ldy + r] = acc;
        }
    }
}

// ---- GGUF Q8_0 times the rounded input (blocks of 32, as llama.cpp's Q8_0 x Q8_0) ---------------
// Per block b of a row: d_b·dx_b·Σ w_i r_i, the signed products formed as |w| (unsigned) times
// r·sign(w) (signed), which VPDPBUSD and PMADDUBSW take (|w| ≤ 128, |r| ≤ 127: no saturation).
// The scale d_b·dx_b is formed in the loop, from the block being read (a pass of its own over the
// row's block scales, before the products, took a fifth of a one-row product: its scalar loop met
// every line of the row first; dx: input row k's block scales at dx + k·dxs).
#define DEFINE_Q80I_BLOCK(NAME, TARGET, IDOT)                                                                      \
    TARGET __attribute__((always_inline)) static inline void q80iblock_##NAME(                                \
        float *y, int ldy, const int8_t *xq, size_t xstride, const ds_block_q8_0 *blk, int nblk,             \
        const float *dx, size_t dxs, const int M, int acc) {                                                  \
        __m256 a[8];                                                                                          \
        for (int k = 0; k < M; k++) a[k] = _mm256_setzero_ps();                                               \
        for (int b = 0; b < nblk; b++) {                                                                      \
            __builtin_prefetch((const char *)(blk + b) + DS_QPREFETCH_BYTES);                                \
            const __m256i w = _mm256_loadu_si256((const __m256i *)blk[b].qs), wa = _mm256_sign_epi8(w, w);    \
            const float dw = _cvtsh_ss(blk[b].d);                                                             \
            for (int k = 0; k < M; k++) {                                                                     \
                const __m256i x = _mm256_loadu_si256((const __m256i *)(xq + (size_t)k * xstride + (size_t)b * 32)); \
                const __m256i p = IDOT(wa, _mm256_sign_epi8(x, w));                                           \
                a[k] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_set1_ps(dw * dx[(size_t)k * dxs + b]), a[k]); \
            }                                                                                                 \
        }                                                                                                     \
        for (int k = 0; k < M; k++) {                                                                         \
            const float v = ds_hsum256(a[k]);                                                                 \
            y[(size_t)k * ldy] = acc ? y[(size_t)k * ldy] + v : v;                                            \
        }                                                                                                     \
    }
#define DEFINE_Q80I_ROWS(NAME, TARGET)                                                                       \
    TARGET static void q80i_rows_##NAME(float *y, int ldy, const ds_qx *px, int nb, const ds_weight *w, int r0, int r1) { \
        const int cols = w->cols, nblk = cols / 32, seg = cols < DS_QSEG ? cols : DS_QSEG;                   \
        const ds_block_q8_0 *W = w->data;                                                                     \
        for (int i = 0; i < nb; i += 8) {                                                                     \
            const int m = nb - i < 8 ? nb - i : 8, pass = nblk <= DS_QX_GROUPS ? cols : seg;                  \
            for (int p0 = 0; p0 < cols; p0 += pass) {                                                         \
                const int len = cols - p0 < pass ? cols - p0 : pass, b0 = p0 / 32;                            \
                for (int r = r0; r < r1; r++) {                                                               \
                    const ds_block_q8_0 *row = W + (size_t)r * nblk + b0;                                     \
                    float *yi = y + (size_t)i * ldy + r;                                                      \
                    for (int s0 = 0; s0 < len; s0 += seg) {                                                   \
                        const int c0 = p0 + s0, sb = (len - s0 < seg ? len - s0 : seg) / 32;                  \
                        const int8_t *xs = px->q + (size_t)i * cols + c0;                                     \
                        const float *dx = px->d + (size_t)i * nblk + c0 / 32;                                 \
                        const ds_block_q8_0 *rs = row + s0 / 32;                                              \
                        switch (m) {                                                                          \
                        case 1: q80iblock_##NAME(yi, ldy, xs, cols, rs, sb, dx, nblk, 1, c0 > 0); break;      \
                        case 2: q80iblock_##NAME(yi, ldy, xs, cols, rs, sb, dx, nblk, 2, c0 > 0); break;      \
                        case 3: q80iblock_##NAME(yi, ldy, xs, cols, rs, sb, dx, nblk, 3, c0 > 0); break;      \
                        case 4: q80iblock_##NAME(yi, ldy, xs, cols, rs, sb, dx, nblk, 4, c0 > 0); break;      \
                        case 5: q80iblock_##NAME(yi, ldy, xs, cols, rs, sb, dx, nblk, 5, c0 > 0); break;      \
                        case 6: q80iblock_##NAME(yi, ldy, xs, cols, rs, sb, dx, nblk, 6, c0 > 0); break;      \
                        case 7: q80iblock_##NAME(yi, ldy, xs, cols, rs, sb, dx, nblk, 7, c0 > 0); break;      \
                        default: q80iblock_##NAME(yi, ldy, xs, cols, rs, sb, dx, nblk, 8, c0 > 0); break;     \
                        }                                                                                     \
                    }                                                                                         \
                }                                                                                             \
            }                                                                                                 \
        }                                                                                                     \
    }
#define IDOT_AVX2(wa, xs) _mm256_madd_epi16(_mm256_maddubs_epi16(wa, xs), _mm256_set1_epi16(1))
DEFINE_Q80I_BLOCK(avx2, AVX2_TARGET, IDOT_AVX2)
DEFINE_Q80I_ROWS(avx2, AVX2_TARGET)
// AVX-512 VNNI takes two blocks per 512-bit vector (lanes 0-7 the first block, 8-15 the second,
// scaled by a vector of the two blocks' s·d); AVX-512 has no byte sign instruction, so r·sign(w)
// is a masked negation; an odd last block goes through 256 bits.
VNNI_TARGET __attribute__((always_inline)) static inline void q80iblock_vnni(float *y, int ldy, const int8_t *xq, size_t xstride,
                                                                           const ds_block_q8_0 *blk, int nblk,
                                                                           const float *dx, size_t dxs, const int M,
                                                                           int acc) {
    __m512 a[8];
    __m256 a1[8];
    for (int k = 0; k < M; k++) a[k] = _mm512_setzero_ps(), a1[k] = _mm256_setzero_ps();
    const __m512i idx = _mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0);
    int b = 0;
    for (; b + 2 <= nblk; b += 2) { // (68 bytes a step: both blocks' starts, so that no line is skipped)
        __builtin_prefetch((const char *)(blk + b) + DS_QPREFETCH_BYTES);
        __builtin_prefetch((const char *)(blk + b + 1) + DS_QPREFETCH_BYTES);
        const __m512i w = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)blk[b].qs)),
                                             _mm256_loadu_si256((const __m256i *)blk[b + 1].qs), 1);
        const __m512i wa = _mm512_abs_epi8(w);
        const __mmask64 neg = _mm512_movepi8_mask(w);
        const __m128 dw = _mm_cvtph_ps(_mm_insert_epi16(_mm_cvtsi32_si128(blk[b].d), blk[b + 1].d, 1)); // d_b, d_b+1
        for (int k = 0; k < M; k++) {
            const __m512i x = _mm512_loadu_si512((const void *)(xq + (size_t)k * xstride + (size_t)b * 32));
            const __m512i xs = _mm512_mask_sub_epi8(x, neg, _mm512_setzero_si512(), x);
            const __m512i p = _mm512_dpbusd_epi32(_mm512_setzero_si512(), wa, xs);
            const __m128 dxb = _mm_castsi128_ps(_mm_loadl_epi64((const __m128i *)(const void *)(dx + (size_t)k * dxs + b)));
            const __m128 s2 = _mm_mul_ps(dw, dxb); // (the two floats need not be 8-byte aligned)
            const __m512 sv = _mm512_permutexvar_ps(idx, _mm512_castps128_ps512(s2));
            a[k] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), sv, a[k]);
        }
    }
    if (b < nblk) { // the odd block
        const __m256i w = _mm256_loadu_si256((const __m256i *)blk[b].qs), wa = _mm256_sign_epi8(w, w);
        for (int k = 0; k < M; k++) {
            const __m256i x = _mm256_loadu_si256((const __m256i *)(xq + (size_t)k * xstride + (size_t)b * 32));
            const __m256i p = _mm256_dpbusd_epi32(_mm256_setzero_si256(), wa, _mm256_sign_epi8(x, w));
            a1[k] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_set1_ps(_cvtsh_ss(blk[b].d) * dx[(size_t)k * dxs + b]), a1[k]);
        }
    }
    for (int k = 0; k < M; k++) {
        const float v = _mm512_reduce_add_ps(a[k]) + ds_hsum256(a1[k]);
        y[(size_t)k * ldy] = acc ? y[(size_t)k * ldy] + v : v;
    }
}
DEFINE_Q80I_ROWS(vnni, VNNI_TARGET)
#undef DEFINE_Q80I_BLOCK
#undef DEFINE_Q80I_ROWS

static void q80i_rows_scalar(float *y, int ldy, const ds_qx *px, int nb, const ds_weight *w, int r0, int r1) {
    const int cols = w->cols, nblk = cols / 32, seg = cols < DS_QSEG ? cols : DS_QSEG;
    const ds_block_q8_0 *W = w->data;
    for (int r = r0; r < r1; r++)
        for (int i = 0; i < nb; i++) {
            const int8_t *xq = px->q + (size_t)i * cols;
            const float *d = px->d + (size_t)i * nblk;
            float acc = 0.0f;
            for (int c0 = 0; c0 < cols; c0 += seg) {
                const int len = cols - c0 < seg ? cols - c0 : seg;
                float v = 0.0f;
                for (int b = c0 / 32; b < (c0 + len) / 32; b++) {
                    const ds_block_q8_0 *blk = W + (size_t)r * nblk + b;
                    int32_t isum = 0;
                    for (int j = 0; j < 32; j++) isum += blk->qs[j] * xq[b * 32 + j];
                    v += (ds_f16_to_f32(blk->d) * d[b]) * (float)isum;
                }
                acc = c0 ? acc + v : v;
            }
            y[(size_t)i * ldy + r] = acc;
        }
}

// ---- Entry points -------------------------------------------------------------------------------

void ds_qirows_vnni(float *y, int ldy, const ds_qx *px, int nb, const ds_weight *w, int r0, int r1) {
    if (ds_ggml_is_kquant_family(w->type)) ds_ggq_rows_vnni(y, ldy, px, nb, w, r0, r1);
    else if (w->type == DS_Q8_0) q80i_rows_vnni(y, ldy, px, nb, w, r0, r1);
    else if (w->group_size == 32) qi_rows_vnni256(y, ldy, px, nb, w, r0, r1);
    else qi_rows_vnni512(y, ldy, px, nb, w, r0, r1);
}
void ds_qirows_avx2(float *y, int ldy, const ds_qx *px, int nb, const ds_weight *w, int r0, int r1) {
    if (ds_ggml_is_kquant_family(w->type)) ds_ggq_rows_avx2(y, ldy, px, nb, w, r0, r1);
    else if (w->type == DS_Q8_0) q80i_rows_avx2(y, ldy, px, nb, w, r0, r1);
    else qi_rows_avx2(y, ldy, px, nb, w, r0, r1);
}
void ds_qirows_scalar(float *y, int ldy, const ds_qx *px, int nb, const ds_weight *w, int r0, int r1) {
    if (ds_ggml_is_kquant_family(w->type)) ds_ggq_rows_scalar(y, ldy, px, nb, w, r0, r1);
    else if (w->type == DS_Q8_0) q80i_rows_scalar(y, ldy, px, nb, w, r0, r1);
    else qi_rows_scalar(y, ldy, px, nb, w, r0, r1);
}

static int g_r8_off; // tests: DS_QX_R8 not used (ds_ggq_allow_r8)
void ds_ggq_allow_r8(int on) { g_r8_off = !on; }

int ds_qirows_ch(const char *isa, const ds_weight *w, int n) {
    const int vnni = !strcmp(isa, "vnni");
    // DS_QX_R8 from the row count where it beats kz_blk (ns per super-block and weight row, 512 x 4096
    // in L2, AMD EPYC: Q4_K 1-3 rows 9.0-9.6 vs 10.0-10.4, 4 rows 10.7 vs 10.2; Q5_K 5 rows 13.3 vs
    // 15.1, 8 rows 17.1 vs 15.5): it costs the same for 1..8 rows
    const int r8_rows = w->type == DS_Q4_K ? 4 : 7;
    if (vnni && n >= r8_rows && !g_r8_off && (w->type == DS_Q4_K || w->type == DS_Q5_K))
        return DS_QX_R8;
    if ((w->type == DS_Q4_K || w->type == DS_Q5_K) && vnni) return DS_QX_K4;
    if (ds_weight_bits(w) != 4) return 0; // 8 bits: natural order everywhere
    if (!strcmp(isa, "scalar")) return 0;
    if (!strcmp(isa, "vnni")) return w->group_size == 32 ? 32 : 64;
    return 32;
}
