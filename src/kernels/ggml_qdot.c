// Integer dot products of GGUF block weights (Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL, Q2_K..Q6_K, IQ4_XS) with
// the input rounded to int8 (ds_qx, kernels/qmatmul_i8.c), for products of few rows (decode, verify):
// the numerics are in qmatmul.h, the layouts in ggml_quants.h. As llama.cpp does: per weight block,
// unpack to 32 bytes in registers, multiply-add bytes into int32 lanes (VPDPBUSD with AVX512-VNNI on
// 256-bit vectors, else PMADDUBSW + PMADDWD; K-quants with VNNI: 512-bit PMADDUBSW + VPDPWSSD), then
// the block's float scale(s).
//
// Exactness: every integer sum is exact (bounds in the comments); the unsigned x signed byte
// products of PMADDUBSW never saturate (|u| <= 127 when the weights are signed: |w| times r·sign(w);
// u <= 63 otherwise, |r| <= 127: pairs <= 2·127·127 < 2^15). 32-element types: the float part per
// block and input row is one FMA per int32 lane (two with mins), the lanes summed at the end of the
// row, so the VNNI and AVX2 kernels give the same bits. K-quants: the AVX2 kernel does the same per
// super-block (4 input rows per pass over a weight row, whose per-row integer accumulators take the
// registers); the VNNI ones (512-bit: kz_one for one row, kz_few for two, kz_blk for up to 8 per pass,
// and for Q4_K / Q5_K with GFNI the rows-interleaved DS_QX_R8 kernel) sum each super-block's integers
// exactly to one int32 per row and then do the scalar kernel's float operations in its order, so they
// give the scalar kernel's bits. No result depends on the number of input rows in the call (each row's
// arithmetic is the same whatever the others) or on threads (rows of W are independent).
#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "kernels/ggml_quants.h"
#include "kernels/half.h"
#include "kernels/qmatmul.h"
#include "kernels/simd.h"

#define AVX2_TARGET __attribute__((target("avx2,fma,f16c")))
#define VNNI_TARGET __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")))
#define INLINE __attribute__((always_inline)) static inline

#define PF_AHEAD DS_QPREFETCH_BYTES // qmatmul.h
// The lines of the super-block of `bytes` at p, PF_AHEAD further on, into L1 (PF_SB_N) or L2: every
// block's bytes from its own start, so consecutive blocks leave no line out (Q6_K's 210-byte blocks
// need a fourth: with three, one line in 3.3 went unfetched and its load waited on memory; a one-row
// pass over Q6_K 4096 x 4096 took 1079 us against Q4_K's 467 for 2/3 of the bytes).
#define PF_SB_N(p, bytes)                                                                                  \
    (__builtin_prefetch((const char *)(p) + PF_AHEAD), __builtin_prefetch((const char *)(p) + PF_AHEAD + 64), \
     __builtin_prefetch((const char *)(p) + PF_AHEAD + 128),                                                 \
     (bytes) > 192 ? __builtin_prefetch((const char *)(p) + PF_AHEAD + 192) : (void)0)
#define PF_SB_L2_N(p, bytes)                                                                               \
    (__builtin_prefetch((const char *)(p) + PF_AHEAD, 0, 2), __builtin_prefetch((const char *)(p) + PF_AHEAD + 64, 0, 2), \
     __builtin_prefetch((const char *)(p) + PF_AHEAD + 128, 0, 2),                                           \
     (bytes) > 192 ? __builtin_prefetch((const char *)(p) + PF_AHEAD + 192, 0, 2) : (void)0)
#define PF_SB(p) PF_SB_N(p, sizeof *(p))

// ---- Unpacking (AVX2) ------------------------------------------------------------------------------
// 16 bytes of nibbles -> 32 bytes: low nibbles (elements 0..15) in the low lane, high ones (16..31) in
// the high lane, the order of the 32-element blocks (ggml_quants.h).
AVX2_TARGET INLINE __m256i nib32(const uint8_t *p) {
    const __m128i raw = _mm_loadu_si128((const __m128i *)p), m = _mm_set1_epi8(0x0F);
    return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(raw, 4), m), _mm_and_si128(raw, m));
}
// The 32 bits of qh (element j at bit j) as bytes 0x10 (set) or 0.
AVX2_TARGET INLINE __m256i fifth32(const uint8_t *qh) {
    uint32_t u;
    memcpy(&u, qh, 4);
    const __m256i rep = _mm256_shuffle_epi8(_mm256_set1_epi32((int)u),
                                            _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2,
                                                             2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3));
    const __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ull);
    return _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(rep, bit), bit), _mm256_set1_epi8(0x10));
}
AVX2_TARGET INLINE __m256i iq4_table(void) {
    return _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)ds_iq4nl_values));
}

// Per 32-element type: the block's 32 integer values (signed or unsigned bytes), its scale, its min.
AVX2_TARGET INLINE __m256i unpack_q4_0(const ds_block_q4_0 *b, float *d, float *m) {
    *d = _cvtsh_ss(b->d), *m = 0.0f;
    return _mm256_sub_epi8(nib32(b->qs), _mm256_set1_epi8(8)); // -8..7
}
AVX2_TARGET INLINE __m256i unpack_q4_1(const ds_block_q4_1 *b, float *d, float *m) {
    *d = _cvtsh_ss(b->d), *m = _cvtsh_ss(b->m);
    return nib32(b->qs); // 0..15
}
AVX2_TARGET INLINE __m256i unpack_q5_0(const ds_block_q5_0 *b, float *d, float *m) {
    *d = _cvtsh_ss(b->d), *m = 0.0f;
    return _mm256_sub_epi8(_mm256_or_si256(nib32(b->qs), fifth32(b->qh)), _mm256_set1_epi8(16)); // -16..15
}
AVX2_TARGET INLINE __m256i unpack_q5_1(const ds_block_q5_1 *b, float *d, float *m) {
    *d = _cvtsh_ss(b->d), *m = _cvtsh_ss(b->m);
    return _mm256_or_si256(nib32(b->qs), fifth32(b->qh)); // 0..31
}
AVX2_TARGET INLINE __m256i unpack_iq4_nl(const ds_block_iq4_nl *b, float *d, float *m) {
    *d = _cvtsh_ss(b->d), *m = 0.0f;
    return _mm256_shuffle_epi8(iq4_table(), nib32(b->qs)); // -127..113
}

// u8 x s8 -> int32 lanes (lane i: bytes 4i..4i+3): AVX2 and VNNI give the same integers.
#define IDOT_AVX2(u, s) _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1))
#define IDOT_VNNI(u, s) _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, s)

// ---- 32-element types ------------------------------------------------------------------------------
// M (1..8) input rows against one weight row of nblk blocks. xq: the rows' int8 (stride cols), xd /
// xs: per row and block d_x and d_x·Σr (stride nblk).
#define DEF_K32(NAME, TARGET, IDOT, BT, UNPACK, SIGNED, HASMIN)                                                 \
    TARGET INLINE void NAME##_blk(float *y, int ldy, const int8_t *xq, const float *xd, const float *xs, int cols, \
                                  const BT *row, const int M) {                                               \
        const int nblk = cols / 32;                                                                           \
        __m256 acc[8];                                                                                        \
        float macc[8];                                                                                        \
        for (int k = 0; k < M; k++) acc[k] = _mm256_setzero_ps(), macc[k] = 0.0f;                             \
        for (int b = 0; b < nblk; b++) {                                                                      \
            __builtin_prefetch((const char *)(row + b) + PF_AHEAD);                                           \
            float dw, mw;                                                                                     \
            const __m256i wv = UNPACK(row + b, &dw, &mw);                                                     \
            const __m256i wu = SIGNED ? _mm256_sign_epi8(wv, wv) : wv;                                        \
            for (int k = 0; k < M; k++) {                                                                     \
                const __m256i x = _mm256_loadu_si256((const __m256i *)(xq + (size_t)k * cols + (size_t)b * 32)); \
                const __m256i p = IDOT(wu, SIGNED ? _mm256_sign_epi8(x, wv) : x);                             \
                acc[k] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_set1_ps(dw * xd[(size_t)k * nblk + b]), acc[k]); \
                if (HASMIN) macc[k] = fmaf(mw, xs[(size_t)k * nblk + b], macc[k]);                            \
            }                                                                                                 \
        }                                                                                                     \
        for (int k = 0; k < M; k++) y[(size_t)k * ldy] = ds_hsum256(acc[k]) + macc[k];                        \
    }                                                                                                         \
    TARGET static void NAME(float *y, int ldy, const ds_qx *px, int nb, const ds_weight *w, int r0, int r1) {  \
        const int cols = w->cols, nblk = cols / 32;                                                           \
        for (int i = 0; i < nb; i += 8) {                                                                     \
            const int m = nb - i < 8 ? nb - i : 8;                                                            \
            const int8_t *xq = px->q + (size_t)i * cols;                                                      \
            const float *xd = px->d + (size_t)i * nblk, *xs = px->s + (size_t)i * nblk;                       \
            for (int r = r0; r < r1; r++) {                                                                   \
                const BT *row = (const BT *)w->data + (size_t)r * nblk;                                       \
                float *yi = y + (size_t)i * ldy + r;                                                          \
                switch (m) {                                                                                  \
                case 1: NAME##_blk(yi, ldy, xq, xd, xs, cols, row, 1); break;                                 \
                case 2: NAME##_blk(yi, ldy, xq, xd, xs, cols, row, 2); break;                                 \
                case 3: NAME##_blk(yi, ldy, xq, xd, xs, cols, row, 3); break;                                 \
                case 4: NAME##_blk(yi, ldy, xq, xd, xs, cols, row, 4); break;                                 \
                case 5: NAME##_blk(yi, ldy, xq, xd, xs, cols, row, 5); break;                                 \
                case 6: NAME##_blk(yi, ldy, xq, xd, xs, cols, row, 6); break;                                 \
                case 7: NAME##_blk(yi, ldy, xq, xd, xs, cols, row, 7); break;                                 \
                default: NAME##_blk(yi, ldy, xq, xd, xs, cols, row, 8); break;                                \
                }                                                                                             \
            }                                                                                                 \
        }                                                                                                     \
    }

#define DEF_K32_BOTH(T, BT, SIGNED, HASMIN)                                         \
    DEF_K32(k32_##T##_avx2, AVX2_TARGET, IDOT_AVX2, BT, unpack_##T, SIGNED, HASMIN) \
    DEF_K32(k32_##T##_vnni, VNNI_TARGET, IDOT_VNNI, BT, unpack_##T, SIGNED, HASMIN)
DEF_K32_BOTH(q4_0, ds_block_q4_0, 1, 0)
DEF_K32_BOTH(q4_1, ds_block_q4_1, 0, 1)
DEF_K32_BOTH(q5_0, ds_block_q5_0, 1, 0)
DEF_K32_BOTH(q5_1, ds_block_q5_1, 0, 1)
DEF_K32_BOTH(iq4_nl, ds_block_iq4_nl, 1, 0)

// The float part of the K-quants and IQ4_XS on the scalar and VNNI kernels: per input row, eight
// accumulators, super-block sb adding into accumulator sb % 8 (y_j += (d·d_x)·isum, then
// y_j += -(dmin·d_x)·imin, each an FMA), combined at the end of the row in this order (that of
// ds_hsum256 on the 8 lanes). Eight independent chains keep a one-row pass from waiting on FMA
// latency, and 8 rows need no transposition: accumulator j of every row is one vector.
#define KQ_SUM8(a0, a1, a2, a3, a4, a5, a6, a7) ((((a0) + (a4)) + ((a2) + (a6))) + (((a1) + (a5)) + ((a3) + (a7))))

// ---- K-quants (256-element super-blocks), AVX2 ----------------------------------------------------
// Per super-block and input row: isum (int32 lanes) = Σ_chunks madd(maddubs(u, r), sc16), u the 32
// unsigned values of a chunk and sc16 its sub-block scales as int16 (two 16-element sub-blocks: low
// lane / high lane); offsets and mins through the per-16 sums bs: imin = madd(bs, m16). Bounds: a
// lane gets 8 chunks of at most 2·2·63·127·|sc| (|sc| <= 128): < 2^25, exact in int32 (and |Σ| < 2^31).
// y += (d·d_x)·float(isum) - (dmin·d_x)·float(imin), lane-wise.

// The 8 scales (bytes 0..7) and 8 mins (bytes 8..15) of a Q4_K / Q5_K super-block, 6 bits each
// (ds_ggml_scale_min_k4 on 32-bit words: scales 0-3 and mins 0-3 are the low 6 bits of bytes 0-3 and
// 4-7; scales 4-7 the low nibbles of bytes 8-11 with the top 2 bits of bytes 0-3; mins 4-7 the high
// nibbles of bytes 8-11 with the top 2 bits of bytes 4-7), from a 16-byte load at the packed scales
// (the 4 bytes past them are the block's quants, read and discarded). In registers: built in a
// stack array by scalar stores and loaded back as one vector, they waited on the stores (no store
// forwarding) in every super-block.
AVX2_TARGET INLINE __m128i k4_scales_v(const uint8_t *packed) {
    const __m128i u = _mm_loadu_si128((const __m128i *)packed); // u0, u1, u2, -
    const __m128i lo6 = _mm_and_si128(u, _mm_set1_epi32(0x3f3f3f3f)); // scales 0-3, mins 0-3
    const __m128i hi2 = _mm_and_si128(_mm_srli_epi32(u, 2), _mm_set1_epi32(0x30303030)); // top 2 bits of u0 / u1, at 4-5
    const __m128i u2 = _mm_srlv_epi32(_mm_shuffle_epi32(u, 0xAA), _mm_setr_epi32(0, 4, 0, 0));
    const __m128i o13 = _mm_or_si128(_mm_and_si128(u2, _mm_set1_epi32(0x0f0f0f0f)), hi2); // scales 4-7, mins 4-7
    return _mm_unpacklo_epi32(lo6, o13);
}

// Q4_K / Q5_K (HIGH = 1: the fifth bits of qh). Sub-blocks of 32: one scale per chunk; mins per 32
// against the per-16 sums: m16 repeats each min twice.
#define DEF_K4(NAME, HIGH, BT)                                                                                 \
    AVX2_TARGET INLINE void NAME##_blk(float *y, int ldy, const int8_t *xq, const float *xd, const int16_t *xb, \
                                       int cols, const BT *row, const int M) {                                \
        const int nsb = cols / 256;                                                                           \
        __m256 acc[4];                                                                                        \
        for (int k = 0; k < M; k++) acc[k] = _mm256_setzero_ps();                                             \
        const __m256i lo4 = _mm256_set1_epi8(0x0F);                                                           \
        for (int sb = 0; sb < nsb; sb++) {                                                                    \
            const BT *b = row + sb;                                                                           \
            PF_SB(b);                                                                                         \
            uint8_t sm[16]; /* (the scalar reads below are forwarded from this one store) */                  \
            const __m128i smv = k4_scales_v(b->scales);                                                       \
            _mm_storeu_si128((__m128i *)sm, smv);                                                             \
            const __m256i m16 = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(_mm_srli_si128(smv, 8), _mm_srli_si128(smv, 8))); \
            const float dd = _cvtsh_ss(b->d), dm = _cvtsh_ss(b->dmin);                                        \
            __m256i is[4];                                                                                    \
            for (int k = 0; k < M; k++) is[k] = _mm256_setzero_si256();                                       \
            __m256i qh = _mm256_setzero_si256();                                                              \
            if (HIGH) qh = _mm256_loadu_si256((const __m256i *)((const ds_block_q5_k *)(const void *)b)->qh);  \
            for (int c = 0; c < 4; c++) {                                                                     \
                const __m256i raw = _mm256_loadu_si256((const __m256i *)(b->qs + 32 * c));                    \
                __m256i u0 = _mm256_and_si256(raw, lo4), u1 = _mm256_and_si256(_mm256_srli_epi16(raw, 4), lo4); \
                if (HIGH) {                                                                                   \
                    const __m256i b0 = _mm256_set1_epi8((char)(1 << (2 * c))), b1 = _mm256_set1_epi8((char)(2 << (2 * c))); \
                    const __m256i v16 = _mm256_set1_epi8(16);                                                 \
                    u0 = _mm256_or_si256(u0, _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(qh, b0), b0), v16)); \
                    u1 = _mm256_or_si256(u1, _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(qh, b1), b1), v16)); \
                }                                                                                             \
                const __m256i s0 = _mm256_set1_epi16(sm[2 * c]), s1 = _mm256_set1_epi16(sm[2 * c + 1]);       \
                for (int k = 0; k < M; k++) {                                                                 \
                    const int8_t *x = xq + (size_t)k * cols + (size_t)sb * 256 + 64 * c;                      \
                    const __m256i p0 = _mm256_madd_epi16(_mm256_maddubs_epi16(u0, _mm256_loadu_si256((const __m256i *)x)), s0); \
                    const __m256i p1 = _mm256_madd_epi16(_mm256_maddubs_epi16(u1, _mm256_loadu_si256((const __m256i *)(x + 32))), s1); \
                    is[k] = _mm256_add_epi32(is[k], _mm256_add_epi32(p0, p1));                                \
                }                                                                                             \
            }                                                                                                 \
            for (int k = 0; k < M; k++) {                                                                     \
                const __m256i bs = _mm256_loadu_si256((const __m256i *)(xb + (size_t)k * (cols / 16) + (size_t)sb * 16)); \
                const __m256i im = _mm256_madd_epi16(bs, m16);                                                \
                const float dx = xd[(size_t)k * nsb + sb];                                                    \
                acc[k] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(is[k]), _mm256_set1_ps(dd * dx), acc[k]);          \
                acc[k] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(im), _mm256_set1_ps(dm * dx), acc[k]);            \
            }                                                                                                 \
        }                                                                                                     \
        for (int k = 0; k < M; k++) y[(size_t)k * ldy] = ds_hsum256(acc[k]);                                  \
    }
DEF_K4(kq4k, 0, ds_block_q4_k)
DEF_K4(kq5k, 1, ds_block_q5_k)

// Two 16-element sub-blocks' scales as int16 for one chunk: a in the low lane, b in the high lane.
AVX2_TARGET INLINE __m256i sc_pair(int a, int b) {
    return _mm256_set_m128i(_mm_set1_epi16((short)b), _mm_set1_epi16((short)a));
}

// Q6_K: u = 6-bit value 0..63 (q = u - 32): Σ sc·q·r = Σ sc·u·r - 32·Σ_j sc_j·bs_j.
AVX2_TARGET INLINE void kq6k_blk(float *y, int ldy, const int8_t *xq, const float *xd, const int16_t *xb, int cols,
                                 const ds_block_q6_k *row, const int M) {
    const int nsb = cols / 256;
    __m256 acc[4];
    for (int k = 0; k < M; k++) acc[k] = _mm256_setzero_ps();
    const __m256i lo4 = _mm256_set1_epi8(0x0F), lo2 = _mm256_set1_epi8(3);
    for (int sb = 0; sb < nsb; sb++) {
        const ds_block_q6_k *b = row + sb;
        PF_SB(b);
        const __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)b->scales));
        const float dd = _cvtsh_ss(b->d);
        __m256i is[4];
        for (int k = 0; k < M; k++) is[k] = _mm256_setzero_si256();
        for (int h = 0; h < 2; h++) {
            const __m256i l0 = _mm256_loadu_si256((const __m256i *)(b->ql + 64 * h));
            const __m256i l1 = _mm256_loadu_si256((const __m256i *)(b->ql + 64 * h + 32));
            const __m256i hb = _mm256_loadu_si256((const __m256i *)(b->qh + 32 * h));
            __m256i u[4];
            u[0] = _mm256_or_si256(_mm256_and_si256(l0, lo4), _mm256_slli_epi16(_mm256_and_si256(hb, lo2), 4));
            u[1] = _mm256_or_si256(_mm256_and_si256(l1, lo4),
                                   _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 2), lo2), 4));
            u[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), lo4),
                                   _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 4), lo2), 4));
            u[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), lo4),
                                   _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 6), lo2), 4));
            for (int c = 0; c < 4; c++) {
                const __m256i s = sc_pair(b->scales[8 * h + 2 * c], b->scales[8 * h + 2 * c + 1]);
                for (int k = 0; k < M; k++) {
                    const __m256i x = _mm256_loadu_si256((const __m256i *)(xq + (size_t)k * cols + (size_t)sb * 256 + 128 * h + 32 * c));
                    is[k] = _mm256_add_epi32(is[k], _mm256_madd_epi16(_mm256_maddubs_epi16(u[c], x), s));
                }
            }
        }
        for (int k = 0; k < M; k++) {
            const __m256i bs = _mm256_loadu_si256((const __m256i *)(xb + (size_t)k * (cols / 16) + (size_t)sb * 16));
            const __m256i v = _mm256_sub_epi32(is[k], _mm256_slli_epi32(_mm256_madd_epi16(bs, sc16), 5));
            acc[k] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(v), _mm256_set1_ps(dd * xd[(size_t)k * nsb + sb]), acc[k]);
        }
    }
    for (int k = 0; k < M; k++) y[(size_t)k * ldy] = ds_hsum256(acc[k]);
}

// q3k_scales_v (below, the VNNI kernels' version) without AVX-512's 16-bit variable shifts: in 32-bit
// lanes, then packed (on the VNNI kernels this one took 12-20% more time per super-block).
AVX2_TARGET INLINE __m256i q3k_scales_avx2(const ds_block_q3_k *b) {
    const __m128i v = _mm_loadu_si128((const __m128i *)(const void *)(b->scales - 2));
    const __m128i lo = _mm_shuffle_epi8(v, _mm_setr_epi8(2, 3, 4, 5, 6, 7, 8, 9, 2, 3, 4, 5, 6, 7, 8, 9));
    const __m128i hi = _mm_shuffle_epi8(v, _mm_setr_epi8(10, 11, 12, 13, 10, 11, 12, 13, 10, 11, 12, 13, 10, 11, 12, 13));
    // sub-blocks 0..7 and 8..15 as int32 (written out: the shifts' counts must be constants)
    const __m256i m4 = _mm256_set1_epi32(0xF), m2 = _mm256_set1_epi32(3), k32 = _mm256_set1_epi32(32);
    const __m256i l0 = _mm256_and_si256(_mm256_cvtepu8_epi32(lo), m4);
    const __m256i l1 = _mm256_and_si256(_mm256_srli_epi32(_mm256_cvtepu8_epi32(_mm_srli_si128(lo, 8)), 4), m4);
    const __m256i h0 = _mm256_and_si256(_mm256_srlv_epi32(_mm256_cvtepu8_epi32(hi), _mm256_setr_epi32(0, 0, 0, 0, 2, 2, 2, 2)), m2);
    const __m256i h1 = _mm256_and_si256(_mm256_srlv_epi32(_mm256_cvtepu8_epi32(_mm_srli_si128(hi, 8)), _mm256_setr_epi32(4, 4, 4, 4, 6, 6, 6, 6)), m2);
    const __m256i h32[2] = {_mm256_sub_epi32(_mm256_or_si256(l0, _mm256_slli_epi32(h0, 4)), k32),
                            _mm256_sub_epi32(_mm256_or_si256(l1, _mm256_slli_epi32(h1, 4)), k32)};
    return _mm256_permute4x64_epi64(_mm256_packs_epi32(h32[0], h32[1]), 0xD8); // lanes in order
}

// Q3_K: u = low 2 bits | high bit << 2 (0..7), q = u - 4: Σ sc·q·r = Σ sc·u·r - 4·Σ_j sc_j·bs_j.
AVX2_TARGET INLINE void kq3k_blk(float *y, int ldy, const int8_t *xq, const float *xd, const int16_t *xb, int cols,
                                 const ds_block_q3_k *row, const int M) {
    const int nsb = cols / 256;
    __m256 acc[4];
    for (int k = 0; k < M; k++) acc[k] = _mm256_setzero_ps();
    const __m256i lo2 = _mm256_set1_epi8(3), four = _mm256_set1_epi8(4);
    for (int sb = 0; sb < nsb; sb++) {
        const ds_block_q3_k *b = row + sb;
        PF_SB(b);
        int16_t s16[16]; // (the scalar reads below are forwarded from this one store)
        const __m256i sc16 = q3k_scales_avx2(b);
        _mm256_storeu_si256((__m256i *)s16, sc16);
        const float dd = _cvtsh_ss(b->d);
        const __m256i hm = _mm256_loadu_si256((const __m256i *)b->hmask);
        __m256i is[4];
        for (int k = 0; k < M; k++) is[k] = _mm256_setzero_si256();
        for (int h = 0; h < 2; h++) {
            const __m256i q = _mm256_loadu_si256((const __m256i *)(b->qs + 32 * h));
            for (int j = 0; j < 4; j++) {
                const __m256i bit = _mm256_set1_epi8((char)(1 << (4 * h + j)));
                const __m256i hi = _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(hm, bit), bit), four);
                const __m256i u = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q, 2 * j), lo2), hi);
                const __m256i s = sc_pair(s16[8 * h + 2 * j], s16[8 * h + 2 * j + 1]);
                for (int k = 0; k < M; k++) {
                    const __m256i x = _mm256_loadu_si256((const __m256i *)(xq + (size_t)k * cols + (size_t)sb * 256 + 128 * h + 32 * j));
                    is[k] = _mm256_add_epi32(is[k], _mm256_madd_epi16(_mm256_maddubs_epi16(u, x), s));
                }
            }
        }
        for (int k = 0; k < M; k++) {
            const __m256i bs = _mm256_loadu_si256((const __m256i *)(xb + (size_t)k * (cols / 16) + (size_t)sb * 16));
            const __m256i v = _mm256_sub_epi32(is[k], _mm256_slli_epi32(_mm256_madd_epi16(bs, sc16), 2));
            acc[k] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(v), _mm256_set1_ps(dd * xd[(size_t)k * nsb + sb]), acc[k]);
        }
    }
    for (int k = 0; k < M; k++) y[(size_t)k * ldy] = ds_hsum256(acc[k]);
}

// Q2_K: u = 2 bits (0..3); scales (low nibbles) per 16, mins (high nibbles) per 16 against bs.
AVX2_TARGET INLINE void kq2k_blk(float *y, int ldy, const int8_t *xq, const float *xd, const int16_t *xb, int cols,
                                 const ds_block_q2_k *row, const int M) {
    const int nsb = cols / 256;
    __m256 acc[4];
    for (int k = 0; k < M; k++) acc[k] = _mm256_setzero_ps();
    const __m256i lo2 = _mm256_set1_epi8(3);
    for (int sb = 0; sb < nsb; sb++) {
        const ds_block_q2_k *b = row + sb;
        PF_SB(b);
        const __m128i scr = _mm_loadu_si128((const __m128i *)b->scales);
        const __m256i m16 = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(scr, 4), _mm_set1_epi8(0x0F)));
        const float dd = _cvtsh_ss(b->d), dm = _cvtsh_ss(b->dmin);
        __m256i is[4];
        for (int k = 0; k < M; k++) is[k] = _mm256_setzero_si256();
        for (int h = 0; h < 2; h++) {
            const __m256i q = _mm256_loadu_si256((const __m256i *)(b->qs + 32 * h));
            for (int j = 0; j < 4; j++) {
                const __m256i u = _mm256_and_si256(_mm256_srli_epi16(q, 2 * j), lo2);
                const __m256i s = sc_pair(b->scales[8 * h + 2 * j] & 0xF, b->scales[8 * h + 2 * j + 1] & 0xF);
                for (int k = 0; k < M; k++) {
                    const __m256i x = _mm256_loadu_si256((const __m256i *)(xq + (size_t)k * cols + (size_t)sb * 256 + 128 * h + 32 * j));
                    is[k] = _mm256_add_epi32(is[k], _mm256_madd_epi16(_mm256_maddubs_epi16(u, x), s));
                }
            }
        }
        for (int k = 0; k < M; k++) {
            const __m256i bs = _mm256_loadu_si256((const __m256i *)(xb + (size_t)k * (cols / 16) + (size_t)sb * 16));
            const float dx = xd[(size_t)k * nsb + sb];
            acc[k] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(is[k]), _mm256_set1_ps(dd * dx), acc[k]);
            acc[k] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(_mm256_madd_epi16(bs, m16)), _mm256_set1_ps(dm * dx), acc[k]);
        }
    }
    for (int k = 0; k < M; k++) y[(size_t)k * ldy] = ds_hsum256(acc[k]);
}

// IQ4_XS: signed table values (|v| <= 127) as |v| times r·sign(v); sub-blocks of 32, scale ls - 32.
AVX2_TARGET INLINE void kiq4xs_blk(float *y, int ldy, const int8_t *xq, const float *xd, const int16_t *xb, int cols,
                                   const ds_block_iq4_xs *row, const int M) {
    const int nsb = cols / 256;
    __m256 acc[4];
    for (int k = 0; k < M; k++) acc[k] = _mm256_setzero_ps();
    const __m256i tab = iq4_table();
    for (int sb = 0; sb < nsb; sb++) {
        const ds_block_iq4_xs *b = row + sb;
        PF_SB(b);
        const float dd = _cvtsh_ss(b->d);
        __m256i is[4];
        for (int k = 0; k < M; k++) is[k] = _mm256_setzero_si256();
        for (int ib = 0; ib < 8; ib++) {
            const int ls = ((b->scales_l[ib / 2] >> 4 * (ib % 2)) & 0xF) | (((b->scales_h >> 2 * ib) & 3) << 4);
            const __m256i v = _mm256_shuffle_epi8(tab, nib32(b->qs + 16 * ib)), va = _mm256_sign_epi8(v, v);
            const __m256i s = _mm256_set1_epi16((short)(ls - 32));
            for (int k = 0; k < M; k++) {
                const __m256i x = _mm256_loadu_si256((const __m256i *)(xq + (size_t)k * cols + (size_t)sb * 256 + 32 * ib));
                is[k] = _mm256_add_epi32(is[k], _mm256_madd_epi16(_mm256_maddubs_epi16(va, _mm256_sign_epi8(x, v)), s));
            }
        }
        for (int k = 0; k < M; k++)
            acc[k] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(is[k]), _mm256_set1_ps(dd * xd[(size_t)k * nsb + sb]), acc[k]);
    }
    (void)xb;
    for (int k = 0; k < M; k++) y[(size_t)k * ldy] = ds_hsum256(acc[k]);
}

// Rows [r0, r1) for nb rounded input rows, 4 at a time per weight row.
#define DEF_KROWS(NAME, BT)                                                                                   \
    AVX2_TARGET static void NAME##_rows(float *y, int ldy, const ds_qx *px, int nb, const ds_weight *w, int r0, int r1) { \
        const int cols = w->cols, nsb = cols / 256;                                                           \
        for (int i = 0; i < nb; i += 4) {                                                                     \
            const int m = nb - i < 4 ? nb - i : 4;                                                            \
            const int8_t *xq = px->q + (size_t)i * cols;                                                      \
            const float *xd = px->d + (size_t)i * nsb;                                                        \
            const int16_t *xb = px->bs + (size_t)i * (cols / 16);                                             \
            for (int r = r0; r < r1; r++) {                                                                   \
                const BT *row = (const BT *)w->data + (size_t)r * nsb;                                        \
                float *yi = y + (size_t)i * ldy + r;                                                          \
                switch (m) {                                                                                  \
                case 1: NAME##_blk(yi, ldy, xq, xd, xb, cols, row, 1); break;                                 \
                case 2: NAME##_blk(yi, ldy, xq, xd, xb, cols, row, 2); break;                                 \
                case 3: NAME##_blk(yi, ldy, xq, xd, xb, cols, row, 3); break;                                 \
                default: NAME##_blk(yi, ldy, xq, xd, xb, cols, row, 4); break;                                \
                }                                                                                             \
            }                                                                                                 \
        }                                                                                                     \
    }
DEF_KROWS(kq2k, ds_block_q2_k)
DEF_KROWS(kq3k, ds_block_q3_k)
DEF_KROWS(kq4k, ds_block_q4_k)
DEF_KROWS(kq5k, ds_block_q5_k)
DEF_KROWS(kq6k, ds_block_q6_k)
DEF_KROWS(kiq4xs, ds_block_iq4_xs)

// ---- K-quants with AVX512-VNNI (512-bit, all input rows of a call in one pass per super-block) ------
// Per super-block, the weights are unpacked once into 4 vectors of 64 unsigned bytes in natural
// element order, with per-lane int16 sub-block scales; each input row then costs, per 64 elements,
// one VPMADDUBSW (u·r pairs, exact in int16: bounds above) and one VPDPWSSD with the scales into the
// row's int32 lanes. The offsets (Q6_K -32, Q3_K -4) enter the same lanes as VPDPWSSD of the per-16
// sums bs with -32·sc / -4·sc; the mins (Q4_K, Q5_K, Q2_K) as bs·m in lanes of their own. The lanes
// of each row are then summed exactly (int32; |Σ| < 2^29 for every type) to one integer per
// super-block, isum and imin, and the float part is the scalar kernel's, row by row:
// acc = fma(d·d_x, isum, acc), acc = fma(-(dmin·d_x), imin, acc) (the second only with mins: for
// the others it adds -0). So these kernels give ds_ggq_rows_scalar's bits, whatever the number of
// rows in the call: the integers are exact however they are summed, and each row's float
// operations are the same sequence (done in one lane of a vector of 8 rows, or in scalar for 1).
// IQ4_XS: the table values are signed; |v| multiplies r negated where v < 0 (no 512-bit VPSIGNB).
enum { KT_Q2, KT_Q3, KT_Q4, KT_Q5, KT_Q6, KT_IQ4XS };
typedef struct {
    __m512i w[4];      // (256) unsigned values, natural order, 64 per vector
    __m512i sc[4];     // (4, 32) int16 scale of each VPMADDUBSW lane (2 elements) of w
    __mmask64 neg[4];  // IQ4_XS: elements whose value is negative
    __m256i off, mn;   // (16) int16 per 16 elements: offset (bs·off joins isum) and min (bs·mn = imin)
    float d, dmin;
} ksb;

// The int16 scale vector of VPMADDUBSW lanes for 64 elements from 16 int16 per-16 scales s16 (lane
// L covers elements 2L, 2L + 1: sub-block of 16 index 4n + L/8).
#define IDX16(n) _mm512_set_epi16(4 * n + 3, 4 * n + 3, 4 * n + 3, 4 * n + 3, 4 * n + 3, 4 * n + 3, 4 * n + 3, 4 * n + 3, \
                                  4 * n + 2, 4 * n + 2, 4 * n + 2, 4 * n + 2, 4 * n + 2, 4 * n + 2, 4 * n + 2, 4 * n + 2, \
                                  4 * n + 1, 4 * n + 1, 4 * n + 1, 4 * n + 1, 4 * n + 1, 4 * n + 1, 4 * n + 1, 4 * n + 1, \
                                  4 * n, 4 * n, 4 * n, 4 * n, 4 * n, 4 * n, 4 * n, 4 * n)
VNNI_TARGET INLINE void scales_per16(__m256i s16, __m512i sc[4]) {
    const __m512i s = _mm512_castsi256_si512(s16);
    sc[0] = _mm512_permutexvar_epi16(IDX16(0), s), sc[1] = _mm512_permutexvar_epi16(IDX16(1), s);
    sc[2] = _mm512_permutexvar_epi16(IDX16(2), s), sc[3] = _mm512_permutexvar_epi16(IDX16(3), s);
}
// The same from 8 per-32 scales (int16 in lanes 0..7 of s8): sub-block of 32 index 2n + L/16.
VNNI_TARGET INLINE void scales_per32(__m128i s8, __m512i sc[4]) {
    const __m256i s16 = _mm256_cvtepu16_epi32(s8); // lane 2j = s_j (as int16), 2j + 1 = 0
    const __m256i dup = _mm256_or_si256(s16, _mm256_slli_epi32(s16, 16)); // lanes 2j, 2j + 1 = s_j
    scales_per16(dup, sc);
}
// The same for Q4_K / Q5_K weights and a DS_QX_K4 input, from their 8 unsigned per-32 scales in
// bytes 0..7 of s8: vector n holds sub-blocks 4(n / 2) + n % 2 (low 256 bits) and that + 2 (high),
// one byte shuffle each (zero-extended to int16).
VNNI_TARGET INLINE void scales_per32_k4(__m128i s8, __m512i sc[4]) {
    const __m512i s = _mm512_broadcast_i32x4(s8);
#define PICK(a, b) _mm512_inserti64x4(_mm512_set1_epi16((short)(0xFF00 | (a))), _mm256_set1_epi16((short)(0xFF00 | (b))), 1)
    sc[0] = _mm512_shuffle_epi8(s, PICK(0, 2)), sc[1] = _mm512_shuffle_epi8(s, PICK(1, 3));
    sc[2] = _mm512_shuffle_epi8(s, PICK(4, 6)), sc[3] = _mm512_shuffle_epi8(s, PICK(5, 7));
#undef PICK
}
// Bit masks of a byte vector's two 256-bit halves.
#define BITS2(a, b) _mm512_inserti64x4(_mm512_set1_epi8((char)(a)), _mm256_set1_epi8((char)(b)), 1)
#define SHIFTS2(a, b) _mm512_inserti64x4(_mm512_set1_epi16(a), _mm256_set1_epi16(b), 1)

// A Q4_K / Q5_K super-block's 256 values (0..15 / 0..31), 64 per vector in DS_QX_K4's order: w[2h]
// the low nibbles of qs[64h..64h+63] (columns 128h + 0..31, then 128h + 64..95), w[2h + 1] the high
// ones (128h + 32..63, 128h + 96..127).
VNNI_TARGET INLINE void k45_unpack(const int T, const void *blk, __m512i w[4]) {
    const __m512i lo4 = _mm512_set1_epi8(0x0F);
    const uint8_t *qs = T == KT_Q4 ? ((const ds_block_q4_k *)blk)->qs : ((const ds_block_q5_k *)blk)->qs;
    for (int h = 0; h < 2; h++) {
        const __m512i raw = _mm512_loadu_si512((const void *)(qs + 64 * h));
        w[2 * h] = _mm512_and_si512(raw, lo4);
        w[2 * h + 1] = _mm512_and_si512(_mm512_srli_epi16(raw, 4), lo4);
    }
    if (T == KT_Q5) { // fifth bits: chunk c (64 elements) has bit 2c (low nibbles) and 2c + 1 (high)
        const __m512i qh = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)((const ds_block_q5_k *)blk)->qh));
        // bit k of each qh byte moved to bit 4 (a shift of 16-bit lanes: the bit that lands on bit 4
        // of a byte comes from the same byte) and ORed in by one VPTERNLOG (w | (s & 0x10)), where a
        // VPTESTMB + masked VPADDB per vector was: a one-row pass over Q5_K 4096 x 4096 8.9 -> 8.0 ns
        // per super-block in L2, 9.6 -> 8.8 from memory; 2-3 rows 3-4% slower (Zen 4)
        const __m512i v16 = _mm512_set1_epi8(16);
        w[0] = _mm512_ternarylogic_epi32(w[0], _mm512_sllv_epi16(qh, SHIFTS2(4, 2)), v16, 0xF8); // bits 0, 2
        w[1] = _mm512_ternarylogic_epi32(w[1], _mm512_sllv_epi16(qh, SHIFTS2(3, 1)), v16, 0xF8); // bits 1, 3
        w[2] = _mm512_ternarylogic_epi32(w[2], _mm512_srlv_epi16(qh, SHIFTS2(0, 2)), v16, 0xF8); // bits 4, 6
        w[3] = _mm512_ternarylogic_epi32(w[3], _mm512_srlv_epi16(qh, SHIFTS2(1, 3)), v16, 0xF8); // bits 5, 7
    }
}

// A Q6_K super-block's 256 values (0..63) in natural order, 64 per vector.
VNNI_TARGET INLINE void q6_unpack(const ds_block_q6_k *b, __m512i w[4]) {
    const __m512i lo4 = _mm512_set1_epi8(0x0F), m30 = _mm512_set1_epi8(0x30);
    for (int h = 0; h < 2; h++) {
        const __m512i raw = _mm512_loadu_si512((const void *)(b->ql + 64 * h));
        const __m512i hb = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(b->qh + 32 * h)));
        const __m512i h01 = _mm512_and_si512(_mm512_sllv_epi16(hb, SHIFTS2(4, 2)), m30); // bits 0-1 / 2-3 at 4-5
        const __m512i h23 = _mm512_and_si512(_mm512_srlv_epi16(hb, SHIFTS2(0, 2)), m30); // bits 4-5 / 6-7
        w[2 * h] = _mm512_or_si512(_mm512_and_si512(raw, lo4), h01);
        w[2 * h + 1] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(raw, 4), lo4), h23);
    }
}

// Q3_K's 16 scales minus 32 (ds_ggml_q3k_scales: sub-block i = 4g + k: low nibble of scales[k + 4(g & 1)]
// shifted by 4(g >> 1), bits 2g..2g+1 of scales[8 + k] on top) as int16, computed in registers from
// the 16 bytes that end the block (scales at 2..13; d after them), not through an array on the stack
// (16 scalar stores read back as one vector wait for the stores: no forwarding).
VNNI_TARGET INLINE __m256i q3k_scales_v(const ds_block_q3_k *b) {
    const __m128i v = _mm_loadu_si128((const __m128i *)(const void *)(b->scales - 2));
    const __m128i lo = _mm_shuffle_epi8(v, _mm_setr_epi8(2, 3, 4, 5, 6, 7, 8, 9, 2, 3, 4, 5, 6, 7, 8, 9));
    const __m128i hi = _mm_shuffle_epi8(v, _mm_setr_epi8(10, 11, 12, 13, 10, 11, 12, 13, 10, 11, 12, 13, 10, 11, 12, 13));
    const __m256i l = _mm256_and_si256(_mm256_srlv_epi16(_mm256_cvtepu8_epi16(lo), _mm256_setr_epi16(0, 0, 0, 0, 0, 0, 0, 0, 4, 4, 4, 4, 4, 4, 4, 4)),
                                       _mm256_set1_epi16(0xF));
    const __m256i h = _mm256_and_si256(_mm256_srlv_epi16(_mm256_cvtepu8_epi16(hi), _mm256_setr_epi16(0, 0, 0, 0, 2, 2, 2, 2, 4, 4, 4, 4, 6, 6, 6, 6)),
                                       _mm256_set1_epi16(3));
    return _mm256_sub_epi16(_mm256_or_si256(l, _mm256_slli_epi16(h, 4)), _mm256_set1_epi16(32));
}
// IQ4_XS's 8 scales minus 32 (low nibble of scales_l[ib / 2], the high one for odd ib, | bits
// 2ib..2ib+1 of scales_h << 4) as int16 in lanes 0..7, in registers from the block's first 8 bytes.
VNNI_TARGET INLINE __m128i iq4xs_scales_v(const ds_block_iq4_xs *b) {
    const __m128i v = _mm_loadl_epi64((const __m128i *)(const void *)b); // d, scales_h, scales_l[4]
    const __m128i l = _mm_shuffle_epi8(v, _mm_setr_epi8(4, -1, 4, -1, 5, -1, 5, -1, 6, -1, 6, -1, 7, -1, 7, -1));
    const __m128i h = _mm_shuffle_epi8(v, _mm_setr_epi8(2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3));
    const __m128i lo = _mm_and_si128(_mm_srlv_epi16(l, _mm_setr_epi16(0, 4, 0, 4, 0, 4, 0, 4)), _mm_set1_epi16(0xF));
    const __m128i hb = _mm_and_si128(_mm_srlv_epi16(h, _mm_setr_epi16(0, 2, 4, 6, 8, 10, 12, 14)), _mm_set1_epi16(3));
    return _mm_sub_epi16(_mm_or_si128(lo, _mm_slli_epi16(hb, 4)), _mm_set1_epi16(32));
}

VNNI_TARGET INLINE void ksb_prep(const int T, const void *blk, ksb *s) {
    const __m512i lo4 = _mm512_set1_epi8(0x0F);
    s->off = s->mn = _mm256_setzero_si256();
    s->dmin = 0.0f;
    if (T == KT_Q4 || T == KT_Q5) { // the input in DS_QX_K4 order: no shuffle of the nibbles
        const ds_block_q4_k *b = blk; // Q5_K: the same header; qs after qh
        s->d = _cvtsh_ss(b->d), s->dmin = _cvtsh_ss(b->dmin);
        const __m128i smv = k4_scales_v(b->scales);
        scales_per32_k4(smv, s->sc);
        // bs per 16 packed columns: sub-blocks of 32 in the order 0, 2, 1, 3, 4, 6, 5, 7, each twice
        s->mn = _mm256_shuffle_epi8(_mm256_broadcastsi128_si256(smv),
                                    _mm256_setr_epi8(8, -1, 8, -1, 10, -1, 10, -1, 9, -1, 9, -1, 11, -1, 11, -1, 12, -1,
                                                     12, -1, 14, -1, 14, -1, 13, -1, 13, -1, 15, -1, 15, -1));
        k45_unpack(T, blk, s->w);
    } else if (T == KT_Q6) {
        const ds_block_q6_k *b = blk;
        s->d = _cvtsh_ss(b->d);
        const __m256i s16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)b->scales));
        scales_per16(s16, s->sc);
        s->off = _mm256_sub_epi16(_mm256_setzero_si256(), _mm256_slli_epi16(s16, 5));
        q6_unpack(b, s->w);
    } else if (T == KT_Q3 || T == KT_Q2) {
        const uint8_t *qs;
        __m256i s16;
        if (T == KT_Q3) {
            const ds_block_q3_k *b = blk;
            s16 = q3k_scales_v(b);
            s->off = _mm256_sub_epi16(_mm256_setzero_si256(), _mm256_slli_epi16(s16, 2));
            s->d = _cvtsh_ss(b->d);
            qs = b->qs;
        } else {
            const ds_block_q2_k *b = blk;
            const __m256i raw = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)b->scales));
            s16 = _mm256_and_si256(raw, _mm256_set1_epi16(15));
            s->mn = _mm256_srli_epi16(raw, 4);
            s->d = _cvtsh_ss(b->d), s->dmin = _cvtsh_ss(b->dmin);
            qs = b->qs;
        }
        scales_per16(s16, s->sc);
        const __m512i lo2 = _mm512_set1_epi8(3);
        __m512i hm = _mm512_setzero_si512();
        if (T == KT_Q3) hm = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)((const ds_block_q3_k *)blk)->hmask));
        for (int h = 0; h < 2; h++) {
            const __m512i q = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(qs + 32 * h)));
            for (int p = 0; p < 2; p++) { // elements 128h + 64p ..: j = 2p (low half), 2p + 1 (high half)
                __m512i u = _mm512_and_si512(_mm512_srlv_epi16(q, SHIFTS2(4 * p, 4 * p + 2)), lo2);
                if (T == KT_Q3) {
                    const __mmask64 m = _mm512_test_epi8_mask(hm, BITS2(1 << (4 * h + 2 * p), 1 << (4 * h + 2 * p + 1)));
                    u = _mm512_mask_add_epi8(u, m, u, _mm512_set1_epi8(4));
                }
                s->w[2 * h + p] = u;
            }
        }
    } else { // IQ4_XS
        const ds_block_iq4_xs *b = blk;
        s->d = _cvtsh_ss(b->d);
        scales_per32(iq4xs_scales_v(b), s->sc);
        const __m512i tab = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)ds_iq4nl_values));
        for (int h = 0; h < 2; h++) { // 64 bytes: sub-blocks 4h..4h+3, 16 bytes each (low nibbles 0..15, high 16..31)
            const __m512i raw = _mm512_loadu_si512((const void *)(b->qs + 64 * h));
            const __m512i lo = _mm512_and_si512(raw, lo4), hi = _mm512_and_si512(_mm512_srli_epi16(raw, 4), lo4);
            const __m512i i0 = _mm512_set_epi64(11, 10, 3, 2, 9, 8, 1, 0), i1 = _mm512_set_epi64(15, 14, 7, 6, 13, 12, 5, 4);
            const __m512i v0 = _mm512_shuffle_epi8(tab, _mm512_permutex2var_epi64(lo, i0, hi));
            const __m512i v1 = _mm512_shuffle_epi8(tab, _mm512_permutex2var_epi64(lo, i1, hi));
            s->neg[2 * h] = _mm512_movepi8_mask(v0), s->neg[2 * h + 1] = _mm512_movepi8_mask(v1);
            s->w[2 * h] = _mm512_abs_epi8(v0), s->w[2 * h + 1] = _mm512_abs_epi8(v1);
        }
    }
}

// KQ_SUM8 lane-wise over 8 vectors of accumulators.
VNNI_TARGET INLINE __m256 KQ_SUM8_V(const __m256 a[8]) {
    return _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(a[0], a[4]), _mm256_add_ps(a[2], a[6])),
                         _mm256_add_ps(_mm256_add_ps(a[1], a[5]), _mm256_add_ps(a[3], a[7])));
}

// Exact sums of the lanes of v[k], k < 8: lane k of the result.
VNNI_TARGET INLINE __m256i hsum_8x8(const __m512i p[4]) { // p[i]: rows 2i (low 256 bits) and 2i + 1
    const __m512i q0 = _mm512_add_epi32(_mm512_shuffle_i64x2(p[0], p[1], 0x88), _mm512_shuffle_i64x2(p[0], p[1], 0xDD));
    const __m512i q1 = _mm512_add_epi32(_mm512_shuffle_i64x2(p[2], p[3], 0x88), _mm512_shuffle_i64x2(p[2], p[3], 0xDD));
    // q0: 128-bit lane i holds 4 partial sums of row i; q1 of row 4 + i
    __m512i u = _mm512_add_epi32(_mm512_unpacklo_epi32(q0, q1), _mm512_unpackhi_epi32(q0, q1));
    u = _mm512_add_epi32(u, _mm512_shuffle_epi32(u, (_MM_PERM_ENUM)0x4E)); // lane i: row i, row 4 + i, again
    return _mm512_castsi512_si256(_mm512_permutexvar_epi32(_mm512_set_epi32(0, 0, 0, 0, 0, 0, 0, 0, 13, 9, 5, 1, 12, 8, 4, 0), u));
}
VNNI_TARGET INLINE __m256i hsum_8x16(const __m512i v[8]) {
    __m512i p[4];
    for (int i = 0; i < 4; i++)
        p[i] = _mm512_add_epi32(_mm512_shuffle_i64x2(v[2 * i], v[2 * i + 1], 0x44),
                                _mm512_shuffle_i64x2(v[2 * i], v[2 * i + 1], 0xEE));
    return hsum_8x8(p);
}

// One input row (x: its 256 values of the super-block, xb: its 16 per-16 sums) against a prepared
// super-block: the integer lanes of isum into *a and, with mins, the 8 lanes of imin (bs·mn).
VNNI_TARGET INLINE void ksb_dot(const int T, const ksb *s, const int8_t *x, const int16_t *xb, __m512i *a, __m256i *im) {
    const int HASMIN = T == KT_Q2 || T == KT_Q4 || T == KT_Q5, HASOFF = T == KT_Q3 || T == KT_Q6;
    for (int c = 0; c < 4; c++) {
        __m512i xv = _mm512_loadu_si512((const void *)(x + 64 * c));
        if (T == KT_IQ4XS) xv = _mm512_mask_sub_epi8(xv, s->neg[c], _mm512_setzero_si512(), xv);
        *a = _mm512_dpwssd_epi32(*a, _mm512_maddubs_epi16(s->w[c], xv), s->sc[c]);
    }
    if (HASOFF || HASMIN) {
        const __m256i bs = _mm256_loadu_si256((const __m256i *)xb);
        if (HASOFF) *a = _mm512_dpwssd_epi32(*a, _mm512_zextsi256_si512(bs), _mm512_zextsi256_si512(s->off));
        if (HASMIN) *im = _mm256_madd_epi16(bs, s->mn);
    }
}

// M (2..8) input rows against super-blocks [sb0, sb1) of one weight row of bb-byte super-blocks (the
// ds_qx layout of DEF_K4's kernels; cols: the row length): per super-block, the rows' integers
// summed to one int32 each (lane k: row k), and the float part into acc (KQ_SUM8's accumulators,
// lane k: row k), which the caller combines after the last super-block.
VNNI_TARGET INLINE void kz_blk(const int T, __m256 acc[8], const int8_t *xq, const float *xd, const int16_t *xb,
                               int cols, const uint8_t *row, const size_t bb, const int M, int sb0, int sb1, size_t pf) {
    const int nsb = cols / 256, HASMIN = T == KT_Q2 || T == KT_Q4 || T == KT_Q5;
    const __m256i vidx = _mm256_mullo_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7), _mm256_set1_epi32(nsb));
    const __mmask8 live = (__mmask8)((1u << M) - 1);
    for (int sb = sb0; sb < sb1; sb++) {
        const uint8_t *b = row + (size_t)sb * bb;
        __builtin_prefetch(b + pf), __builtin_prefetch(b + pf + 64), __builtin_prefetch(b + pf + 128);
        if (bb > 192) __builtin_prefetch(b + pf + 192);
        ksb s;
        ksb_prep(T, b, &s);
        __m512i a[8], mp[4];
        for (int k = 0; k < 8; k++) a[k] = _mm512_setzero_si512();
        for (int k = 0; k < 4; k++) mp[k] = _mm512_setzero_si512();
        for (int k = 0; k < M; k++) {
            __m256i im = _mm256_setzero_si256();
            ksb_dot(T, &s, xq + (size_t)k * cols + (size_t)sb * 256, xb + (size_t)k * (cols / 16) + (size_t)sb * 16, &a[k], &im);
            if (HASMIN) mp[k / 2] = k % 2 ? _mm512_inserti64x4(mp[k / 2], im, 1) : _mm512_zextsi256_si512(im);
        }
        const __m256 dx = _mm256_mmask_i32gather_ps(_mm256_setzero_ps(), live, vidx, xd + sb, 4);
        __m256 *aj = &acc[sb % 8];
        *aj = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_set1_ps(s.d), dx), _mm256_cvtepi32_ps(hsum_8x16(a)), *aj);
        if (HASMIN) *aj = _mm256_fnmadd_ps(_mm256_mul_ps(_mm256_set1_ps(s.dmin), dx), _mm256_cvtepi32_ps(hsum_8x8(mp)), *aj);
    }
}

// The f16 scales d (and dmin: Q2_K, Q4_K, Q5_K) of the g <= 8 super-blocks of bb bytes from blk as
// floats in lanes 0..g-1 (live), by one masked gather of the 4 bytes that hold them: d in their low
// half (Q4_K / Q5_K at 0 and Q2_K at 80 with dmin in the high half; IQ4_XS at 0) or, where d ends the
// block (Q3_K, Q6_K), in the high half of the 4 bytes before its end. Kept in arrays instead (8
// scalar stores read back as one vector: no store forwarding), a one-row pass over Q4_K / Q5_K
// 4096 x 4096 in L2 took 6.9 / 7.9 ns per super-block against 6.2 / 7.5, and decoding a Q4_K_M
// file 3-11% longer (Zen 4, docs/results.md).
VNNI_TARGET INLINE void kz_scales8(const int T, const uint8_t *blk, size_t bb, __mmask8 live, __m256 *d, __m256 *dmin) {
    const int off = T == KT_Q2 ? 80 : T == KT_Q3 ? 106 : T == KT_Q6 ? 206 : 0, high = T == KT_Q3 || T == KT_Q6;
    const __m256i idx = _mm256_mullo_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7), _mm256_set1_epi32((int)bb));
    const __m256i w = _mm256_mmask_i32gather_epi32(_mm256_setzero_si256(), live, idx, blk + off, 1);
    *d = _mm256_cvtph_ps(_mm256_cvtepi32_epi16(high ? _mm256_srli_epi32(w, 16) : w));
    *dmin = _mm256_cvtph_ps(_mm256_cvtepi32_epi16(_mm256_srli_epi32(w, 16)));
}

// One super-block of a one-row pass (kz_one): its integers into a (isum's lanes) and, with mins, the
// half j % 2 of mp (imin's 8 lanes). The weights ahead are prefetched into
// L2 (PF_SB_L2_N): a one-row forward of a Q4_K_M 2048 x 5632 x 24 target 34-37 -> 29-31 ms on Zen 4
// (one thread; not measured on Zen 5). Multi-row passes keep L1's prefetch (no gain there, and a
// runtime choice between the two here ran no faster than L1's: code layout).
VNNI_TARGET INLINE void kz_one_sb(const int T, const uint8_t *b, const int8_t *x, const int16_t *xb,
                                  const int j, __m512i *a, __m512i *mp) {
    PF_SB_L2_N(b, T == KT_Q6 ? sizeof(ds_block_q6_k) : 0);
    ksb s;
    ksb_prep(T, b, &s);
    __m256i im = _mm256_setzero_si256();
    *a = _mm512_setzero_si512();
    ksb_dot(T, &s, x, xb, a, &im);
    *mp = j % 2 ? _mm512_inserti64x4(*mp, im, 1) : _mm512_zextsi256_si512(im);
}

// One input row (decoding): 8 super-blocks at a time, lane j of every vector being super-block
// s0 + j, i.e. KQ_SUM8's accumulator j: the integers summed with the same transposition as 8 rows,
// the float part one vector FMA (two with mins) per 8 super-blocks. The 8 steps are written out
// so that their accumulators stay in registers; a last partial group masks its missing lanes.
VNNI_TARGET INLINE void kz_one(const int T, float *y, const int8_t *xq, const float *xd, const int16_t *xb, int cols,
                               const uint8_t *row, const size_t bb) {
    const int nsb = cols / 256, HASMIN = T == KT_Q2 || T == KT_Q4 || T == KT_Q5;
    __m256 acc = _mm256_setzero_ps();
    for (int s0 = 0; s0 < nsb; s0 += 8) {
        const int g = nsb - s0 < 8 ? nsb - s0 : 8;
        __m512i a[8], mp[4];
        for (int j = 0; j < 8; j++) a[j] = _mm512_setzero_si512();
        for (int j = 0; j < 4; j++) mp[j] = _mm512_setzero_si512();
        if (g == 8) {
#define KZ_STEP(j)                                                                                                  \
    kz_one_sb(T, row + (size_t)(s0 + j) * bb, xq + (size_t)(s0 + j) * 256, xb + (size_t)(s0 + j) * 16, j, &a[j], \
              &mp[(j) / 2])
            KZ_STEP(0); KZ_STEP(1); KZ_STEP(2); KZ_STEP(3); KZ_STEP(4); KZ_STEP(5); KZ_STEP(6); KZ_STEP(7);
        } else {
            for (int j = 0; j < g; j++) KZ_STEP(j);
#undef KZ_STEP
        }
        const __mmask8 live = (__mmask8)((1u << g) - 1);
        const __m256 dx = _mm256_maskz_loadu_ps(live, xd + s0);
        __m256 d, dmin;
        kz_scales8(T, row + (size_t)s0 * bb, bb, live, &d, &dmin);
        acc = _mm256_mask3_fmadd_ps(_mm256_mul_ps(d, dx), _mm256_cvtepi32_ps(hsum_8x16(a)), acc, live);
        if (HASMIN) acc = _mm256_mask3_fnmadd_ps(_mm256_mul_ps(dmin, dx), _mm256_cvtepi32_ps(hsum_8x8(mp)), acc, live);
    }
    y[0] = ds_hsum256(acc);
}

// Two input rows (a verification of one draft): kz_one's pass for each row, the super-block unpacked
// once for both; row k's lanes and float part exactly kz_one's (the same bits). ns per super-block
// and weight row, 512 x 4096 in L2, AMD EPYC: Q4_K 6.8 against kz_blk's 10.3-10.6, Q6_K 6.2-7.5
// against 7.2-9.8; with 3 rows (M = 3, registers spill) 9.8 against 9.3-9.7, so 3 rows stay on kz_blk.
VNNI_TARGET INLINE void kz_few(const int T, const int M, float *y, int ldy, const int8_t *xq, const float *xd,
                               const int16_t *xb, int cols, const uint8_t *row, const size_t bb) {
    const int nsb = cols / 256, HASMIN = T == KT_Q2 || T == KT_Q4 || T == KT_Q5;
    __m256 acc[2];
    for (int k = 0; k < M; k++) acc[k] = _mm256_setzero_ps();
    for (int s0 = 0; s0 < nsb; s0 += 8) {
        const int g = nsb - s0 < 8 ? nsb - s0 : 8;
        __m512i a[2][8], mp[2][4];
        for (int k = 0; k < M; k++) {
            for (int j = 0; j < 8; j++) a[k][j] = _mm512_setzero_si512();
            for (int j = 0; j < 4; j++) mp[k][j] = _mm512_setzero_si512();
        }
        for (int j = 0; j < g; j++) {
            const uint8_t *b = row + (size_t)(s0 + j) * bb;
            PF_SB_N(b, bb);
            ksb s;
            ksb_prep(T, b, &s);
            for (int k = 0; k < M; k++) {
                __m256i im = _mm256_setzero_si256();
                ksb_dot(T, &s, xq + (size_t)k * cols + (size_t)(s0 + j) * 256, xb + (size_t)k * (cols / 16) + (size_t)(s0 + j) * 16,
                        &a[k][j], &im);
                mp[k][j / 2] = j % 2 ? _mm512_inserti64x4(mp[k][j / 2], im, 1) : _mm512_zextsi256_si512(im);
            }
        }
        const __mmask8 live = (__mmask8)((1u << g) - 1);
        __m256 d, dmin;
        kz_scales8(T, row + (size_t)s0 * bb, bb, live, &d, &dmin);
        for (int k = 0; k < M; k++) {
            const __m256 dx = _mm256_maskz_loadu_ps(live, xd + (size_t)k * nsb + s0);
            acc[k] = _mm256_mask3_fmadd_ps(_mm256_mul_ps(d, dx), _mm256_cvtepi32_ps(hsum_8x16(a[k])), acc[k], live);
            if (HASMIN)
                acc[k] = _mm256_mask3_fnmadd_ps(_mm256_mul_ps(dmin, dx), _mm256_cvtepi32_ps(hsum_8x8(mp[k])), acc[k], live);
        }
    }
    for (int k = 0; k < M; k++) y[(size_t)k * ldy] = ds_hsum256(acc[k]);
}

// Several input rows are walked in tiles (kz_blk and the DS_QX_R8 kernel): a block of 8 input rows is
// 2 KB per super-block, so a long row's (12288 columns: 96 KB) would not stay in L1 while the weight
// rows pass by. Where the XR input rows read per super-block exceed a tile, they are walked in column
// tiles of tile_sb super-blocks, up to KZ_TILE_ROWS weight rows at a time, their accumulators kept
// between tiles (the same operations in the same order per row, so the same bits), each row
// prefetching the one two rows on in its tile (else, untiled, 12 KB ahead as everywhere). Measured
// (2048 x 5632 Q6_K, 8 rows, from DRAM): untiled 3.8 one-row products. A tile of 8 rows is 32 KB
// (16 super-blocks) where L1 has 48 KB (Zen 5), 16 KB (8) where it is smaller (Zen 4's 32 KB: a
// 32 KB tile left the input to L2, and 8 rows of Q4_K 4096 wide, in L2, took 22.2 ns per super-block
// and weight row against 17.8 with 16 KB tiles; Q6_K's kz_blk, bound by its multiplies, the same).
#define KZ_TILE_ROWS 32
#define KZ_TILES(RB, XR, ...)                                                                                \
    for (int rg = r0, tile_sb = ds_cpu_prefetch_l2() ? 8 : 16; rg < r1; rg += KZ_TILE_ROWS) {               \
        const int re = r1 - rg < KZ_TILE_ROWS ? r1 : rg + KZ_TILE_ROWS, tiled = (XR) * nsb > 8 * tile_sb;   \
        for (int r = 0; r < re - rg; r++)                                                                    \
            for (int j = 0; j < 8; j++) tacc[r][j] = _mm256_setzero_ps();                                    \
        for (int s0 = 0; s0 < nsb; s0 += tile_sb) {                                                          \
            const int s1 = tiled ? (nsb - s0 < tile_sb ? nsb : s0 + tile_sb) : nsb;                         \
            for (int r = rg; r < re; r++) {                                                                  \
                const uint8_t *row = (const uint8_t *)w->data + (size_t)r * (RB);                            \
                const size_t pf = tiled && r + 2 < re ? 2 * (RB) : PF_AHEAD;                                 \
                __m256 *acc = tacc[r - rg];                                                                  \
                __VA_ARGS__;                                                                                 \
            }                                                                                                \
            if (!tiled) break;                                                                               \
        }                                                                                                    \
        for (int r = rg; r < re; r++) {                                                                      \
            float o[8];                                                                                      \
            _mm256_storeu_ps(o, KQ_SUM8_V(tacc[r - rg]));                                                    \
            for (int k = 0; k < m; k++) y[(size_t)(i + k) * ldy + r] = o[k];                                 \
        }                                                                                                    \
    }

// Rows [r0, r1) for nb rounded input rows, 8 at a time per weight row: one row kz_one, two kz_few,
// more kz_blk in tiles.
VNNI_TARGET INLINE void kz_rows(const int T, size_t bb, float *y, int ldy, const ds_qx *px, int nb, const ds_weight *w,
                                int r0, int r1) {
    const int cols = w->cols, nsb = cols / 256;
    __m256 tacc[KZ_TILE_ROWS][8];
    for (int i = 0; i < nb; i += 8) {
        const int m = nb - i < 8 ? nb - i : 8;
        const int8_t *xq = px->q + (size_t)i * cols;
        const float *xd = px->d + (size_t)i * nsb;
        const int16_t *xb = px->bs + (size_t)i * (cols / 16);
        if (m <= 2) {
            for (int r = r0; r < r1; r++) {
                const uint8_t *row = (const uint8_t *)w->data + (size_t)r * nsb * bb;
                if (m == 1) kz_one(T, y + (size_t)i * ldy + r, xq, xd, xb, cols, row, bb);
                else kz_few(T, 2, y + (size_t)i * ldy + r, ldy, xq, xd, xb, cols, row, bb);
            }
            continue;
        }
        switch (m) {
#define KZ_CASE(M) KZ_TILES((size_t)nsb * bb, M, kz_blk(T, acc, xq, xd, xb, cols, row, bb, M, s0, s1, pf))
        case 3: KZ_CASE(3); break;
        case 4: KZ_CASE(4); break;
        case 5: KZ_CASE(5); break;
        case 6: KZ_CASE(6); break;
        case 7: KZ_CASE(7); break;
        default: KZ_CASE(8); break;
#undef KZ_CASE
        }
    }
}
#define DEF_KZ(NAME, T, BT)                                                                                   \
    VNNI_TARGET static void NAME(float *y, int ldy, const ds_qx *px, int nb, const ds_weight *w, int r0, int r1) { \
        kz_rows(T, sizeof(BT), y, ldy, px, nb, w, r0, r1);                                                    \
    }
DEF_KZ(kz_q2k, KT_Q2, ds_block_q2_k)
DEF_KZ(kz_q3k, KT_Q3, ds_block_q3_k)
DEF_KZ(kz_q4k, KT_Q4, ds_block_q4_k)
DEF_KZ(kz_q5k, KT_Q5, ds_block_q5_k)
DEF_KZ(kz_q6k, KT_Q6, ds_block_q6_k)
DEF_KZ(kz_iq4xs, KT_IQ4XS, ds_block_iq4_xs)

// ---- Several input rows, Q4_K / Q5_K with VNNI: the rows interleaved (DS_QX_R8) ----------------------
// kz_blk spends two multiplies per 64 weights and input row (VPMADDUBSW, then VPDPWSSD by the scales).
// Here one VPDPBUSD does 64 useful products: 8 consecutive weights of the row, broadcast to every lane,
// times the same 8 columns of 8 input rows (qmatmul.h, DS_QX_R8): lane 2k + h sums row k's columns
// 4h..4h+3 of the 8. Per weight row and super-block that is 32 VPDPBUSD for all 8 rows (kz_blk: 64
// multiplies), and the weights are unpacked once for the 8 rows: Q4_K straight from 8 bytes of quants
// broadcast (AND for the low nibbles, AND-NOT for 16 times the high ones: the sums of those are
// shifted right by 4 before the scales, exactly, since every product is a multiple of 16. On Zen 5 a
// register loop of VPDPBUSD runs at 5.4 G/s alone, 5.3 G/s beside as many VPANDN, 3.1 G/s beside as
// many GF2P8AFFINEQB, which did the shift before: they share pipes; and the AVX512-VNNI CPUs without
// GFNI get this kernel), Q5_K unpacked whole
// (k45_unpack) and broadcast by VPERMQ. A scale's lanes are multiplied by it with VPDPWSSD by the pair
// (sc, 0) (exact while a lane stays below 2^15: its high half is then its sign, times 0); the two
// halves of each row are summed at the end of the super-block. Bounds (|r| <= 127): a Q4_K lane sums 16
// products of a sub-block, <= 16·15·127 = 30480 (the high nibbles' 16 times that, 487680, before
// the shift); a Q5_K one 8 (two accumulators per sub-block),
// <= 8·31·127 = 31496. The integers are exact, so isum and imin are kz_blk's and kz_one's, and the
// float part is the same sequence: the same bits whatever the number of rows. (Q6_K was tried the same
// way, its values unpacked whole: per 16 columns VPMULLD or VPMADDUBSW + VPDPWSSD, 16-20 ns per
// super-block and weight row for 8 rows against kz_blk's 13; it stays on kz_blk.)
#define R8_TARGET __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")))

// One super-block of one weight row against 8 input rows (X: its 32 x 64 interleaved bytes, B: the 4 x
// 64 bytes of per-16 sums): isum and imin per row (lane k: row k).
R8_TARGET INLINE void r8_sb(const int T, const uint8_t *blk, const int8_t *X, const int16_t *B, __m256i *isum,
                            __m256i *imin, float *d, float *dmin) {
    const __m512i zero = _mm512_setzero_si512();
    __m512i is = zero, io = zero; // is: lanes 2k + h; io (mins): lanes k and 8 + k
#define R8_X(g) _mm512_loadu_si512((const void *)(X + 64 * (g)))
#define R8_BCAST(p) _mm512_set1_epi64(*(const long long *)(const void *)(p))
    {
        const ds_block_q4_k *b = (const void *)blk; // Q5_K: the same header; qs after qh
        *d = _cvtsh_ss(b->d), *dmin = _cvtsh_ss(b->dmin);
        const __m512i sv = _mm512_broadcast_i32x4(k4_scales_v(b->scales)); // bytes 0-7 scales, 8-15 mins
        const __m512i lo4 = _mm512_set1_epi8(0x0F);
        __m512i wv[4]; // Q5_K: the values unpacked whole (k45_unpack), each 8 broadcast by VPERMQ
        if (T == KT_Q5) k45_unpack(T, blk, wv);
        for (int c = 0; c < 4; c++) { // columns 64c..64c+63: sub-blocks 2c (low nibbles), 2c + 1 (high)
            __m512i aL = zero, aH = zero, aL2 = zero, aH2 = zero;
            for (int t = 0; t < 4; t++) { // low: columns 64c + 8t.., high: 64c + 32 + 8t..
                __m512i lo, hi;
                if (T == KT_Q4) { // 8 bytes of quants broadcast, their nibbles split in every lane
                    const __m512i w = R8_BCAST(b->qs + 32 * c + 8 * t);
                    lo = _mm512_and_si512(w, lo4);
                    hi = _mm512_andnot_si512(lo4, w); // 16 x the high nibble: aH is divided by 16 below
                } else {
                    const __m512i q = _mm512_set1_epi64(4 * (c % 2) + t);
                    lo = _mm512_permutexvar_epi64(q, wv[2 * (c / 2)]), hi = _mm512_permutexvar_epi64(q, wv[2 * (c / 2) + 1]);
                }
                if (T == KT_Q5 && t >= 2) { // Q5_K: a lane sums at most 8 products per accumulator
                    aL2 = _mm512_dpbusd_epi32(aL2, lo, R8_X(8 * c + t));
                    aH2 = _mm512_dpbusd_epi32(aH2, hi, R8_X(8 * c + 4 + t));
                } else {
                    aL = _mm512_dpbusd_epi32(aL, lo, R8_X(8 * c + t));
                    aH = _mm512_dpbusd_epi32(aH, hi, R8_X(8 * c + 4 + t));
                }
            }
            if (T == KT_Q4) aH = _mm512_srai_epi32(aH, 4); // exact: every product was a multiple of 16
            const __m512i sL = _mm512_shuffle_epi8(sv, _mm512_set1_epi32(2 * c | (int)0x80808000));
            const __m512i sH = _mm512_shuffle_epi8(sv, _mm512_set1_epi32((2 * c + 1) | (int)0x80808000));
            is = _mm512_dpwssd_epi32(_mm512_dpwssd_epi32(is, aL, sL), aH, sH);
            if (T == KT_Q5) is = _mm512_dpwssd_epi32(_mm512_dpwssd_epi32(is, aL2, sL), aH2, sH);
        }
        for (int v = 0; v < 4; v++) { // imin: sub-block 2v (lanes 0-7), 2v + 1 (8-15), each min twice (int16)
            const int a = (8 + 2 * v) * 0x10001 | (int)0x80008000, e = (9 + 2 * v) * 0x10001 | (int)0x80008000;
            const __m512i mn = _mm512_shuffle_epi8(sv, _mm512_inserti64x4(_mm512_set1_epi32(a), _mm256_set1_epi32(e), 1));
            io = _mm512_dpwssd_epi32(io, _mm512_loadu_si512((const void *)(B + 32 * v)), mn);
        }
    }
#undef R8_X
#undef R8_BCAST
    *imin = _mm256_add_epi32(_mm512_castsi512_si256(io), _mm512_extracti64x4_epi64(io, 1));
    *isum = _mm512_cvtepi64_epi32(_mm512_add_epi32(is, _mm512_srli_epi64(is, 32))); // row k: lanes 2k + 2k+1
}

// Rows [r0, r1) for nb input rows in DS_QX_R8 blocks of 8: per weight row, each super-block once per
// block of 8 input rows, the float part as kz_blk's, in kz_rows' tiles (KZ_TILES).
R8_TARGET INLINE void r8_rows(const int T, size_t bb, float *y, int ldy, const ds_qx *px, int nb, const ds_weight *w,
                              int r0, int r1) {
    const int cols = w->cols, nsb = cols / 256;
    __m256 tacc[KZ_TILE_ROWS][8];
    for (int i = 0; i < nb; i += 8) {
        const int m = nb - i < 8 ? nb - i : 8;
        const int8_t *X = px->q + (size_t)i * cols;           // (nsb, 32, 8, 8)
        const float *D = px->d + (size_t)i * nsb;             // (nsb, 8)
        const int16_t *B = px->bs + (size_t)i * (cols / 16); // (nsb, 8, 8, 2)
        KZ_TILES((size_t)nsb * bb, 8, for (int sb = s0; sb < s1; sb++) {
            const uint8_t *blk = row + (size_t)sb * bb;
            __builtin_prefetch(blk + pf), __builtin_prefetch(blk + pf + 64), __builtin_prefetch(blk + pf + 128);
            if (bb > 192) __builtin_prefetch(blk + pf + 192);
            __m256i isum, imin;
            float d, dmin;
            r8_sb(T, blk, X + (size_t)sb * 2048, B + (size_t)sb * 128, &isum, &imin, &d, &dmin);
            const __m256 dx = _mm256_loadu_ps(D + 8 * sb);
            __m256 *aj = &acc[sb % 8];
            *aj = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_set1_ps(d), dx), _mm256_cvtepi32_ps(isum), *aj);
            *aj = _mm256_fnmadd_ps(_mm256_mul_ps(_mm256_set1_ps(dmin), dx), _mm256_cvtepi32_ps(imin), *aj);
        })
    }
}
#define DEF_R8(NAME, T, BT)                                                                                 \
    R8_TARGET static void NAME(float *y, int ldy, const ds_qx *px, int nb, const ds_weight *w, int r0, int r1) { \
        r8_rows(T, sizeof(BT), y, ldy, px, nb, w, r0, r1);                                                  \
    }
DEF_R8(r8_q4k, KT_Q4, ds_block_q4_k)
DEF_R8(r8_q5k, KT_Q5, ds_block_q5_k)

static int kquant_rows(float *y, int ldy, const ds_qx *px, int nb, const ds_weight *w, int r0, int r1) {
    switch (w->type) {
    case DS_Q2_K: kq2k_rows(y, ldy, px, nb, w, r0, r1); return 1;
    case DS_Q3_K: kq3k_rows(y, ldy, px, nb, w, r0, r1); return 1;
    case DS_Q4_K: kq4k_rows(y, ldy, px, nb, w, r0, r1); return 1;
    case DS_Q5_K: kq5k_rows(y, ldy, px, nb, w, r0, r1); return 1;
    case DS_Q6_K: kq6k_rows(y, ldy, px, nb, w, r0, r1); return 1;
    case DS_IQ4_XS: kiq4xs_rows(y, ldy, px, nb, w, r0, r1); return 1;
    default: return 0;
    }
}

void ds_ggq_rows_avx2(float *y, int ldy, const ds_qx *px, int nb, const ds_weight *w, int r0, int r1) {
    switch (w->type) {
    case DS_Q4_0: k32_q4_0_avx2(y, ldy, px, nb, w, r0, r1); break;
    case DS_Q4_1: k32_q4_1_avx2(y, ldy, px, nb, w, r0, r1); break;
    case DS_Q5_0: k32_q5_0_avx2(y, ldy, px, nb, w, r0, r1); break;
    case DS_Q5_1: k32_q5_1_avx2(y, ldy, px, nb, w, r0, r1); break;
    case DS_IQ4_NL: k32_iq4_nl_avx2(y, ldy, px, nb, w, r0, r1); break;
    default: kquant_rows(y, ldy, px, nb, w, r0, r1);
    }
}

void ds_ggq_rows_vnni(float *y, int ldy, const ds_qx *px, int nb, const ds_weight *w, int r0, int r1) {
    switch (w->type) {
    case DS_Q4_0: k32_q4_0_vnni(y, ldy, px, nb, w, r0, r1); break;
    case DS_Q4_1: k32_q4_1_vnni(y, ldy, px, nb, w, r0, r1); break;
    case DS_Q5_0: k32_q5_0_vnni(y, ldy, px, nb, w, r0, r1); break;
    case DS_Q5_1: k32_q5_1_vnni(y, ldy, px, nb, w, r0, r1); break;
    case DS_IQ4_NL: k32_iq4_nl_vnni(y, ldy, px, nb, w, r0, r1); break;
    case DS_Q2_K: kz_q2k(y, ldy, px, nb, w, r0, r1); break;
    case DS_Q3_K: kz_q3k(y, ldy, px, nb, w, r0, r1); break;
    case DS_Q4_K: (px->ch == DS_QX_R8 ? r8_q4k : kz_q4k)(y, ldy, px, nb, w, r0, r1); break;
    case DS_Q5_K: (px->ch == DS_QX_R8 ? r8_q5k : kz_q5k)(y, ldy, px, nb, w, r0, r1); break;
    case DS_Q6_K: kz_q6k(y, ldy, px, nb, w, r0, r1); break;
    case DS_IQ4_XS: kz_iq4xs(y, ldy, px, nb, w, r0, r1); break;
    default: break;
    }
}

// ---- Scalar ------------------------------------------------------------------------------------------
// One block decoded to integers: w_i = d·sc_j·q_i - dmin·mn_j (K-quants) or d·q_i + dmin (Q4_1 / Q5_1,
// dmin = the block's m), for the sub-block j of 16 or 32 elements that holds i.
typedef struct {
    int q[256];
    int sc[16], mn[16];
    float d, dmin;
    int sub; // elements per sub-block
} int_block;

static void decode_block(ds_dtype t, const void *blk, int_block *o) {
    o->dmin = 0.0f;
    switch (t) {
    case DS_Q4_0: case DS_IQ4_NL: case DS_Q4_1: {
        const ds_block_q4_0 *b = blk; // Q4_0 and IQ4_NL share the layout; Q4_1 has m after d
        const uint8_t *qs = t == DS_Q4_1 ? ((const ds_block_q4_1 *)blk)->qs : b->qs;
        o->d = ds_f16_to_f32(b->d);
        if (t == DS_Q4_1) o->dmin = ds_f16_to_f32(((const ds_block_q4_1 *)blk)->m);
        for (int j = 0; j < 16; j++) {
            int lo = qs[j] & 15, hi = qs[j] >> 4;
            if (t == DS_Q4_0) lo -= 8, hi -= 8;
            if (t == DS_IQ4_NL) lo = ds_iq4nl_values[lo], hi = ds_iq4nl_values[hi];
            o->q[j] = lo, o->q[j + 16] = hi;
        }
        o->sub = 32, o->sc[0] = 1, o->mn[0] = 0;
        break;
    }
    case DS_Q5_0: case DS_Q5_1: {
        const uint8_t *qh = t == DS_Q5_0 ? ((const ds_block_q5_0 *)blk)->qh : ((const ds_block_q5_1 *)blk)->qh;
        const uint8_t *qs = t == DS_Q5_0 ? ((const ds_block_q5_0 *)blk)->qs : ((const ds_block_q5_1 *)blk)->qs;
        o->d = ds_f16_to_f32(*(const uint16_t *)blk);
        if (t == DS_Q5_1) o->dmin = ds_f16_to_f32(((const ds_block_q5_1 *)blk)->m);
        const uint32_t h = (uint32_t)qh[0] | (uint32_t)qh[1] << 8 | (uint32_t)qh[2] << 16 | (uint32_t)qh[3] << 24;
        for (int j = 0; j < 32; j++) {
            const int nib = j < 16 ? qs[j] & 15 : qs[j - 16] >> 4;
            o->q[j] = (nib | (int)((h >> j) & 1) << 4) - (t == DS_Q5_0 ? 16 : 0);
        }
        o->sub = 32, o->sc[0] = 1, o->mn[0] = 0;
        break;
    }
    case DS_Q2_K: {
        const ds_block_q2_k *b = blk;
        o->d = ds_f16_to_f32(b->d), o->dmin = ds_f16_to_f32(b->dmin), o->sub = 16;
        for (int j = 0; j < 16; j++) o->sc[j] = b->scales[j] & 15, o->mn[j] = b->scales[j] >> 4;
        for (int i = 0; i < 256; i++) {
            const int h = i / 128, j = (i % 128) / 32, l = i % 32;
            o->q[i] = (b->qs[32 * h + l] >> (2 * j)) & 3;
        }
        break;
    }
    case DS_Q3_K: {
        const ds_block_q3_k *b = blk;
        o->d = ds_f16_to_f32(b->d), o->sub = 16;
        ds_ggml_q3k_scales(b->scales, o->sc);
        for (int j = 0; j < 16; j++) o->sc[j] -= 32, o->mn[j] = 0;
        for (int i = 0; i < 256; i++) {
            const int h = i / 128, j = (i % 128) / 32, l = i % 32;
            o->q[i] = ((b->qs[32 * h + l] >> (2 * j)) & 3) - ((b->hmask[l] >> (4 * h + j)) & 1 ? 0 : 4);
        }
        break;
    }
    case DS_Q4_K: case DS_Q5_K: {
        const ds_block_q4_k *b4 = blk;
        const ds_block_q5_k *b5 = blk;
        const uint8_t *scales = t == DS_Q4_K ? b4->scales : b5->scales, *qs = t == DS_Q4_K ? b4->qs : b5->qs;
        o->d = ds_f16_to_f32(b4->d), o->dmin = ds_f16_to_f32(b4->dmin), o->sub = 32;
        for (int j = 0; j < 8; j++) ds_ggml_scale_min_k4(j, scales, &o->sc[j], &o->mn[j]);
        for (int i = 0; i < 256; i++) {
            const int c = i / 64, hi = (i % 64) / 32, l = i % 32;
            o->q[i] = (qs[32 * c + l] >> (4 * hi)) & 15;
            if (t == DS_Q5_K) o->q[i] += ((b5->qh[l] >> (2 * c + hi)) & 1) << 4;
        }
        break;
    }
    case DS_Q6_K: {
        const ds_block_q6_k *b = blk;
        o->d = ds_f16_to_f32(b->d), o->sub = 16;
        for (int j = 0; j < 16; j++) o->sc[j] = b->scales[j], o->mn[j] = 0;
        for (int i = 0; i < 256; i++) {
            const int h = i / 128, c = (i % 128) / 32, l = i % 32;
            const int low = (b->ql[64 * h + 32 * (c & 1) + l] >> (4 * (c >> 1))) & 15;
            o->q[i] = (low | ((b->qh[32 * h + l] >> (2 * c)) & 3) << 4) - 32;
        }
        break;
    }
    case DS_IQ4_XS: {
        const ds_block_iq4_xs *b = blk;
        o->d = ds_f16_to_f32(b->d), o->sub = 32;
        for (int ib = 0; ib < 8; ib++) {
            o->sc[ib] = (((b->scales_l[ib / 2] >> 4 * (ib % 2)) & 0xF) | (((b->scales_h >> 2 * ib) & 3) << 4)) - 32;
            o->mn[ib] = 0;
            for (int j = 0; j < 16; j++) {
                o->q[32 * ib + j] = ds_iq4nl_values[b->qs[16 * ib + j] & 15];
                o->q[32 * ib + j + 16] = ds_iq4nl_values[b->qs[16 * ib + j] >> 4];
            }
        }
        break;
    }
    default: memset(o, 0, sizeof *o);
    }
}

void ds_ggq_rows_scalar(float *y, int ldy, const ds_qx *px, int nb, const ds_weight *w, int r0, int r1) {
    const int cols = w->cols, qk = ds_ggml_block_elems(w->type), nblk = cols / qk;
    const size_t bb = ds_ggml_block_bytes(w->type);
    const int has_min = w->type == DS_Q4_1 || w->type == DS_Q5_1;
    int_block ib;
    for (int r = r0; r < r1; r++)
        for (int i = 0; i < nb; i++) {
            const int8_t *xq = px->q + (size_t)i * cols;
            float acc = 0.0f, acc8[8] = {0}; // acc8: K-quants, per super-block index mod 8 (KQ_SUM8)
            for (int b = 0; b < nblk; b++) {
                decode_block(w->type, (const char *)w->data + ((size_t)r * nblk + b) * bb, &ib);
                const int8_t *x = xq + (size_t)b * qk;
                const float dx = px->d[(size_t)i * nblk + b];
                int32_t isum = 0, imin = 0;
                for (int j = 0; j < qk / ib.sub; j++) {
                    int32_t s = 0, sr = 0;
                    for (int e = j * ib.sub; e < (j + 1) * ib.sub; e++) s += ib.q[e] * x[e], sr += x[e];
                    isum += ib.sc[j] * s;
                    imin += ib.mn[j] * sr;
                }
                if (qk == 32) {
                    acc = fmaf(ib.d * dx, (float)isum, acc);
                    if (has_min) acc = fmaf(ib.dmin, px->s[(size_t)i * nblk + b], acc);
                } else {
                    float *a = &acc8[b % 8];
                    *a = fmaf(ib.d * dx, (float)isum, *a);
                    *a = fmaf(-(ib.dmin * dx), (float)imin, *a);
                }
            }
            if (qk != 32) acc = KQ_SUM8(acc8[0], acc8[1], acc8[2], acc8[3], acc8[4], acc8[5], acc8[6], acc8[7]);
            y[(size_t)i * ldy + r] = acc;
        }
}
