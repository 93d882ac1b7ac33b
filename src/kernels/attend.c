// Attention over a transposed K/V cache head (attend.h). The arithmetic of one query is fixed there;
// ds_attend_many chooses only the loop order around it: queries whose spans start at the same column
// go through K together, a chunk of columns at a time, and through V a few lines at a time in tiles
// of 4, so each K and V element read from memory feeds every query's multiply-adds.
// One instantiation per instruction set (attend_isa.inc), chosen at run time; built without
// floating-point contraction (CMakeLists.txt), so every multiply-add is fused exactly where the
// instantiation says (VFMA, SFMA) and a query's bits never depend on how the compiler scheduled it.
#include "kernels/attend.h"

#include <math.h>
#include <stdatomic.h>
#include <string.h>

#include "kernels/half.h"
#include "kernels/ops.h"
#include "kernels/simd.h"

#define INLINE __attribute__((always_inline)) static inline
#define CAT_(a, b) a##b
#define CAT(a, b) CAT_(a, b)
#define TILE 4 // queries of a tile

// The lanes added by the fixed pairwise tree (l += l + 8, l += l + 4, l += l + 2, 0 += 1).
INLINE float lanes_sum(float acc[DS_ATTEND_LANES]) {
    for (int w = DS_ATTEND_LANES / 2; w; w >>= 1)
        for (int l = 0; l < w; l++) acc[l] += acc[l + w];
    return acc[0];
}

// The end of a product with a V line: lanes l < tail take p[l]·v[l] (one fused multiply-add each,
// the other lanes untouched; vt holds v's tail in lanes, zero elsewhere), then the pairwise tree
// (l += l + 8, l += l + 4, l += l + 2, 0 += 1), done in registers.
__attribute__((target("avx512f,fma"))) INLINE float lanes_end_avx512(__m512 a, const float *p, __m512 vt, int tail) {
    const __mmask16 m = (__mmask16)((1u << tail) - 1);
    a = _mm512_mask3_fmadd_ps(_mm512_maskz_loadu_ps(m, p), vt, a, m);
    const __m256 lo = _mm512_castps512_ps256(a), hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(a), 1));
    return ds_hsum256(_mm256_add_ps(lo, hi));
}

// Over a line of floats, and of halves (loaded under the mask, then widened).
__attribute__((target("avx512f,fma"))) INLINE float lanes_finish_avx512(const __m512 *acc, const float *p,
                                                                        const float *v, int tail) {
    return lanes_end_avx512(acc[0], p, _mm512_maskz_loadu_ps((__mmask16)((1u << tail) - 1), v), tail);
}
__attribute__((target("avx512f,avx512bw,avx512vl,fma"))) INLINE float lanes_finish_f16_avx512(const __m512 *acc,
                                                                                            const float *p,
                                                                                            const uint16_t *v, int tail) {
    return lanes_end_avx512(acc[0], p, _mm512_cvtph_ps(_mm256_maskz_loadu_epi16((__mmask16)((1u << tail) - 1), v)), tail);
}

__attribute__((target("avx2,fma"))) INLINE float lanes_finish_avx2(const __m256 *acc, const float *p, const float *v,
                                                                   int tail) {
    __m256 a[2] = {acc[0], acc[1]};
    for (int w = 0; w < 2 && tail > 8 * w; w++) {
        const __m256i m = _mm256_cmpgt_epi32(_mm256_set1_epi32(tail - 8 * w), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
        const __m256 f = _mm256_fmadd_ps(_mm256_maskload_ps(p + 8 * w, m), _mm256_maskload_ps(v + 8 * w, m), a[w]);
        a[w] = _mm256_blendv_ps(a[w], f, _mm256_castsi256_ps(m));
    }
    return ds_hsum256(_mm256_add_ps(a[0], a[1]));
}

// AVX-512: 16 lanes in one register, fused multiply-adds.
#define ISA avx512
#define ISA_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,fma,f16c")))
#define LANES_FINISH_F16 lanes_finish_f16_avx512
#define VEC __m512
#define VLEN 16
#define VZERO _mm512_setzero_ps()
#define VSET1(a) _mm512_set1_ps(a)
#define VLOAD(p) _mm512_loadu_ps(p)
#define VLOAD_F16(p) _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)(p)))
#define SCVT_F16(h) _cvtsh_ss(h)
#define VSTORE(p, v) _mm512_storeu_ps(p, v)
#define VFMA(a, b, c) _mm512_fmadd_ps(a, b, c)
#define SFMA(a, b, c) __builtin_fmaf(a, b, c)
#define SBLOCK 64
#define DQ 4
#define VCHUNK 256
#include "kernels/attend_isa.inc"
#include "kernels/isa_undef.inc"

// AVX2: 16 lanes in two registers, fused multiply-adds (the same bits as AVX-512).
#define ISA avx2
#define ISA_TARGET __attribute__((target("avx2,fma,f16c")))
#define VEC __m256
#define VLEN 8
#define VZERO _mm256_setzero_ps()
#define VSET1(a) _mm256_set1_ps(a)
#define VLOAD(p) _mm256_loadu_ps(p)
#define VLOAD_F16(p) _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)(p)))
#define SCVT_F16(h) _cvtsh_ss(h)
#define VSTORE(p, v) _mm256_storeu_ps(p, v)
#define VFMA(a, b, c) _mm256_fmadd_ps(a, b, c)
#define SFMA(a, b, c) __builtin_fmaf(a, b, c)
#define SBLOCK 32
#define DQ 2
#define VCHUNK 256
#include "kernels/attend_isa.inc"
#include "kernels/isa_undef.inc"

// Anything else: the compiler's generic vectors of 16 floats, a multiply then an add.
typedef float v16 __attribute__((vector_size(64), aligned(4), may_alias));

INLINE float lanes_finish_scalar(const v16 *acc, const float *p, const float *v, int tail) {
    float l[DS_ATTEND_LANES];
    *(v16 *)l = acc[0];
    for (int i = 0; i < tail; i++) l[i] = p[i] * v[i] + l[i];
    return lanes_sum(l);
}
#define ISA scalar
#define ISA_TARGET
#define VEC v16
#define VLEN 16
#define VZERO ((v16){0})
#define VSET1(a) ((v16){0} + (a))
#define VLOAD(p) (*(const v16 *)(p))
#define VLOAD_F16(p) ({ v16 w_; for (int l_ = 0; l_ < 16; l_++) w_[l_] = ds_f16_to_f32((p)[l_]); w_; })
#define SCVT_F16(h) ds_f16_to_f32(h)
#define VSTORE(p, v) (*(v16 *)(p) = (v))
#define VFMA(a, b, c) ((a) * (b) + (c))
#define SFMA(a, b, c) ((a) * (b) + (c))
#define SBLOCK 64
#define DQ 4
#define VCHUNK 256
#include "kernels/attend_isa.inc"
#include "kernels/isa_undef.inc"

// 2: AVX-512, 1: AVX2 + FMA, 0: neither; -1 until asked (then the CPU's best, or what
// ds_attend_force_isa set).
static _Atomic int g_isa = -1;

// (F16C, which the half caches' loads use, comes with every CPU that has AVX2, as the matmul kernels
// assume too; clang's __builtin_cpu_supports cannot ask for it.)
static int isa_supported(int isa) {
    return isa == 0 || (isa == 1 && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) ||
           (isa == 2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
            __builtin_cpu_supports("avx512vl"));
}

static int attend_isa(void) {
    int v = atomic_load_explicit(&g_isa, memory_order_relaxed);
    if (v < 0) {
        v = isa_supported(2) ? 2 : isa_supported(1);
        atomic_store_explicit(&g_isa, v, memory_order_relaxed);
    }
    return v;
}

int ds_attend_force_isa(const char *isa) {
    const char *names[] = {"scalar", "avx2", "avx512"};
    for (int i = 0; i < 3; i++)
        if (!strcmp(isa, names[i])) {
            if (!isa_supported(i)) return 0;
            atomic_store_explicit(&g_isa, i, memory_order_relaxed);
            return 1;
        }
    return 0;
}

void ds_attend_many(int nq, float *const *out, const float *const *q, const int *start, const int *end,
                    const void *K, const void *V, int f16, int stride, int head_dim, float scale, float *scores,
                    int scores_stride) {
#define CALL(name) name(nq, out, q, start, end, K, V, stride, head_dim, scale, scores, scores_stride)
    switch (attend_isa() * 2 + !!f16) {
    case 5: CALL(attend_many_avx512_f16); break;
    case 4: CALL(attend_many_avx512_f32); break;
    case 3: CALL(attend_many_avx2_f16); break;
    case 2: CALL(attend_many_avx2_f32); break;
    case 1: CALL(attend_many_scalar_f16); break;
    default: CALL(attend_many_scalar_f32);
    }
#undef CALL
}

void ds_attend2(float *out, const float *q, const void *K, const void *V, int n1, int stride, const void *K2,
                const void *V2, int n2, int stride2, int f16, int head_dim, float scale, float *scores) {
#define CALL(name) name(out, q, K, V, n1, stride, K2, V2, n2, stride2, head_dim, scale, scores)
    switch (attend_isa() * 2 + !!f16) {
    case 5: CALL(attend2_avx512_f16); break;
    case 4: CALL(attend2_avx512_f32); break;
    case 3: CALL(attend2_avx2_f16); break;
    case 2: CALL(attend2_avx2_f32); break;
    case 1: CALL(attend2_scalar_f16); break;
    default: CALL(attend2_scalar_f32);
    }
#undef CALL
}
