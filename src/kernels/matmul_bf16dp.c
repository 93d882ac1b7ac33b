// BF16 weights on VDPBF16PS. See matmul_bf16dp.h for the numerics.
//
// Layout: a weight row stays as stored; a block of 64 bytes is 32 bf16 weights = 16 lanes of column
// pairs (2i, 2i+1), exactly VDPBF16PS's pairing, so the input needs no permutation, only rounding
// (32 columns per VCVTNE2PS2BF16). The last block of a row is loaded under a mask (the input's
// padding is zero, so the masked lanes add +0).
// Loop order as matmul_isa.inc's: up to 8 input rows at a time, columns in pieces whose bf16 input
// block takes a third of L1 at most (the streaming weights must not evict it: 8 rows read from L2
// ran at 13-15 GB/s of weights against 19-22 for 1 row on Zen 5), RB weight rows sharing every
// input load (1 for 1-4 input rows, 3 for 5-8: 24 accumulators), each weight row's piece
// streaming once for all input rows, weights prefetched two row blocks ahead at the same columns.
// Up to 4 input rows read one weight row at a time: a single stream. With 4 rows in parallel (4
// streams) plain decoding of the inflated 2048 x 5632 target ran at 10.7-14.2 tok/s against 13.2-17.5
// (interleaved, one thread, Zen 5; 2 rows at a time was no better than 4); the input is in L1 either
// way. For 2-4 input rows the single stream took a forward of the same target from 85-93 to 58-71 ms
// (one thread; 2 threads: 48-64 to 33-46), where 3 weight rows at a time were no better than 4. For
// 5-8 rows 3 weight rows stay: 1 or 2 were slower (results.md).
// Where the input stays and how far ahead the weights are fetched depend on the core (tuning_get):
// measured on Zen 5 (48 KiB L1) and Zen 4 (32 KiB L1), the two cores of ours with AVX512-BF16.
#include "kernels/matmul_bf16dp.h"
#include "kernels/simd.h"

#include <cpuid.h>
#include <immintrin.h>
#include <stddef.h>
#include <stdint.h>

#define TARGET __attribute__((target("avx512bf16,avx512f,avx512bw,avx512vl")))
#define BLK 32

// How the kernel streams the weights on this core, from its L1 data cache size:
//   - 48 KiB or more (Zen 5; Intel's AVX512-BF16 cores have 48 too): the input of 1-8 rows in
//     column pieces of at most 16 KiB (a third of L1), weights prefetched into L1 two row blocks
//     ahead (as tuned on Zen 5: results.md).
//   - smaller (Zen 4, 32 KiB): weights prefetched into L2 four row blocks ahead (into L1 they evict
//     the input: a forward of 2-4 rows of the inflated 2048 x 5632 target cost 1.4-1.9 one-row
//     forwards, 1.0 this way; 8 rows 2.2, 1.75 this way; one thread), the input of 1-4 rows in
//     pieces of at most 24 KiB, and 5-8 rows over whole rows (their pieces restart the weight
//     streams at every piece: 8 rows of a 9728 x 2560 product 3.4-3.6 ms against 3.0-3.3 whole);
//     2 input rows take 3 weight rows at a time there: one accumulator chain per weight block is
//     bound by VDPBF16PS's latency (6 cycles on Zen 4, whose 512-bit units also run at half Zen 5's
//     rate), three are not (a one-row forward 72-77 -> 64-65 ms with the L2 prefetch; 3-4 rows stay
//     at one: 81 against 69-70 ms); one input row reads one weight row at a time with no software
//     prefetch at all, faster still (blk_m).
//   Past the first 8 input rows (prefill, verification of several sequences) the Zen 4 tuning reads
//   line-aligned weight rows by one aligned load per block (see seg: sh < 0): the first 8 rows' pass
//   over the same rows (an item of the thread pool, >= 512 KiB of weights) left them in L2, where the
//   second line load and the VPERMT2D only cost (the kernel's weights in L2: 0.65-0.68 VDPBF16PS per
//   cycle for 8 rows joined, 0.76-0.79 by single loads); streamed from memory the joined lines win,
//   so the first 8 rows keep them. A 16-token forward of the inflated 2048 x 24 target 70-71 ->
//   75 tok/s, 64 tokens 77-78 -> 86-87 (one thread; two: 113-116 -> 121-134, 137-139 -> 153-161).
//   Not measured on Zen 5, whose tuning keeps the joined lines.
typedef struct {
    int x_bytes;    // input bytes kept in L1 while the weights stream (the column piece)
    int wide_whole; // 5-8 input rows (3 weight rows at a time): whole rows, no column pieces
    int pf_l2;      // weights prefetched into L2 (PREFETCHT1), else into L1 (PREFETCHT0) ...
    int pf_blocks;  // ... this many row blocks ahead, at the same columns
    int hot_single; // input rows past the first 8: line-aligned weight rows by single loads
} tuning;

static const tuning g_tunings[2] = {{16384, 0, 0, 2, 0}, {24576, 1, 1, 4, 1}}; // 48 KiB L1, smaller
static int g_forced = -1;                                                  // ds_bf16dp_set_tuning

static const tuning *tuning_get(void) { return &g_tunings[g_forced >= 0 ? g_forced : ds_cpu_prefetch_l2()]; }

void ds_bf16dp_set_tuning(int which) { g_forced = which == 0 || which == 1 ? which : -1; }

// Prefetch of the weight line at p into L2 (l2 = 1) or L1 (0), or none (2: the hardware's prefetchers
// alone); the hint must be a constant.
#define PREFETCH_W(p, l2) ((l2) == 2 ? (void)0 : (l2) ? __builtin_prefetch((p), 0, 2) : __builtin_prefetch((p), 0, 3))

int ds_bf16dp_supported(void) {
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("avx512f") || !__builtin_cpu_supports("avx512bw") ||
        !__builtin_cpu_supports("avx512vl"))
        return 0; // (these also say the OS saves the AVX-512 registers)
    unsigned a, b, c, d;
    return __get_cpuid_count(7, 1, &a, &b, &c, &d) && (a & (1u << 5));
}

// The packed input's row stride (bf16 elements): cols rounded up to whole blocks, plus one cache line
// where that is a multiple of 512 (1 KiB), so that 8 rows do not fall into the same few sets of L1
// (8-way): at a 4 KiB stride all 8 rows of a block map to one set, and with the weight lines
// streaming through it they evict each other.
static inline int stride_of(int cols) {
    const int p = (cols + BLK - 1) / BLK * BLK;
    return p % 512 == 0 ? p + BLK : p;
}

// Mask of the valid lanes of the block at column j of a row of `len` columns (all 32 if whole).
static inline __mmask32 block_mask(int j, int len) {
    const int v = len - j;
    return v >= BLK ? (__mmask32)0xffffffffu : (__mmask32)((1u << v) - 1u);
}

// m rows of x (stride xs) columns [0, len) rounded to bf16 into xb (stride ps, a multiple of 32),
// zero-padded to the next multiple of 32.
TARGET static void round_rows(uint16_t *xb, size_t ps, const float *x, size_t xs, int m, int len) {
    for (int k = 0; k < m; k++) {
        const float *xr = x + (size_t)k * xs;
        uint16_t *o = xb + (size_t)k * ps;
        for (int j = 0; j < len; j += BLK) {
            __m512 lo, hi;
            if (j + BLK <= len) {
                lo = _mm512_loadu_ps(xr + j);
                hi = _mm512_loadu_ps(xr + j + 16);
            } else {
                const __mmask32 mk = block_mask(j, len);
                lo = _mm512_maskz_loadu_ps((__mmask16)mk, xr + j);
                hi = _mm512_maskz_loadu_ps((__mmask16)(mk >> 16), xr + j + 16);
            }
            _mm512_storeu_si512((void *)(o + j), (__m512i)_mm512_cvtne2ps_pbh(hi, lo));
        }
    }
}

const float *ds_bf16dp_pack(float *buf, const float *x, int n, int cols) {
    if (cols < 16) return NULL; // the padded rows might not fit in n x cols floats
    uint16_t *xb = (uint16_t *)(((uintptr_t)buf + 63) & ~(uintptr_t)63);
    round_rows(xb, (size_t)stride_of(cols), x, (size_t)cols, n, cols);
    return (const float *)(const void *)xb;
}

// The 16 lanes' sum in the documented tree: halves, then quarters, then pairs.
TARGET static inline float hsum16(__m512 v) {
    const __m256 s8 = _mm256_add_ps(_mm512_castps512_ps256(v),
                                    _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
    const __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
    const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
    return _mm_cvtss_f32(_mm_add_ss(s2, _mm_movehdup_ps(s2)));
}

// One segment (nblk whole blocks, then the block under `tail` if nonzero) of RB weight rows
// (stride ws) against M bf16 input rows (stride xs): y[k*ldy + rr] = (add ? y : 0) + its sum.
// sh >= 0 (whole 64-byte blocks, rows starting 4·sh bytes past a line boundary; tail is then 0):
// each block is read as the two aligned cache lines it touches, joined by one VPERMT2D, the line
// before the first block and the line after the last under a mask of the lanes inside the segment
// (no byte outside it is read). On Zen 5 that beat one load per block for 8 input rows at every
// offset (bench_bf16dp --offset: 8-row products 1.0-1.3 one-row products against 1.2-1.5 at offset
// 0, and a split load per block at other offsets, 1.4-1.7); sh < 0: one (masked) load per block.
TARGET __attribute__((always_inline)) static inline void seg(float *y, int ldy, const uint16_t *x, size_t xs,
                                                             const uint16_t *w, size_t ws, int nblk, __mmask32 tail,
                                                             int sh, const int M, const int RB, int add, size_t pf,
                                                             const int l2) {
    __m512 a[4][8];
    for (int rr = 0; rr < RB; rr++)
        for (int k = 0; k < M; k++) a[rr][k] = _mm512_setzero_ps();
// a[rr][k] += the block at column j of input row k times wv[rr] (a macro: GCC keeps the
// accumulators in registers only when the loop bodies stay this plain).
#define BLOCK_DP(j)                                                                                    \
    for (int k = 0; k < M; k++) {                                                                      \
        const __m512bh xv = (__m512bh)_mm512_loadu_si512((const void *)(x + (size_t)k * xs + (j)));   \
        for (int rr = 0; rr < RB; rr++) a[rr][k] = _mm512_dpbf16_ps(a[rr][k], xv, (__m512bh)wv[rr]);  \
    }
    __m512i wv[4];
    if (sh >= 0) {
        const __m512i idx = _mm512_add_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                             _mm512_set1_epi32(sh));
        // wv = block b's lines joined, the first line under mask mlo, the second under mhi.
#define LOAD_SHIFTED(b, mlo, mhi)                                                                      \
    for (int rr = 0; rr < RB; rr++) {                                                                  \
        const char *line = (const char *)(w + (size_t)rr * ws + (b) * BLK) - 4 * sh;                   \
        PREFETCH_W(line + pf, l2);                                                                     \
        wv[rr] = _mm512_permutex2var_epi32(_mm512_maskz_load_epi32(mlo, line), idx,                    \
                                           _mm512_maskz_load_epi32(mhi, line + 64));                   \
    }
        const __mmask16 all = 0xffff, first = (__mmask16)(0xffffu << sh), last = (__mmask16)((1u << sh) - 1u);
        LOAD_SHIFTED(0, first, nblk > 1 ? all : last)
        BLOCK_DP(0)
        for (int b = 1; b + 1 < nblk; b++) {
            for (int rr = 0; rr < RB; rr++) {
                const char *line = (const char *)(w + (size_t)rr * ws + b * BLK) - 4 * sh;
                PREFETCH_W(line + pf, l2);
                wv[rr] = _mm512_permutex2var_epi32(_mm512_load_si512(line), idx, _mm512_load_si512(line + 64));
            }
            BLOCK_DP(b * BLK)
        }
        if (nblk > 1) {
            LOAD_SHIFTED(nblk - 1, all, last)
            BLOCK_DP((nblk - 1) * BLK)
        }
#undef LOAD_SHIFTED
    } else {
        for (int b = 0; b < nblk; b++) {
            const int j = b * BLK;
            for (int rr = 0; rr < RB; rr++) {
                const uint16_t *p = w + (size_t)rr * ws + j;
                PREFETCH_W((const char *)p + pf, l2);
                wv[rr] = _mm512_loadu_si512((const void *)p);
            }
            BLOCK_DP(j)
        }
        if (tail) {
            for (int rr = 0; rr < RB; rr++) wv[rr] = _mm512_maskz_loadu_epi16(tail, w + (size_t)rr * ws + nblk * BLK);
            BLOCK_DP(nblk * BLK)
        }
    }
#undef BLOCK_DP
    for (int k = 0; k < M; k++)
        for (int rr = 0; rr < RB; rr++) {
            const float s = hsum16(a[rr][k]);
            float *o = y + (size_t)k * ldy + rr;
            *o = add ? *o + s : s;
        }
}

// Rows [r0, r1), columns [c0, c1) (c0 a multiple of DS_BF16DP_SEG; c1 one too, or cols) for M
// input rows x (bf16, stride xs, seen at column 0): blocks of RB weight rows, segment after segment.
TARGET __attribute__((always_inline)) static inline void rowblk(float *y, int ldy, const uint16_t *x, size_t xs,
                                                                const uint16_t *W, int cols, int c0, int c1, int r0,
                                                                int r1, int sh, size_t pf, const int M, const int RB,
                                                                const int l2) {
    int r = r0;
    for (; r + RB <= r1; r += RB)
        for (int c = c0; c < c1; c += DS_BF16DP_SEG) {
            const int len = c1 - c < DS_BF16DP_SEG ? c1 - c : DS_BF16DP_SEG;
            seg(y + r, ldy, x + c, xs, W + (size_t)r * cols + c, (size_t)cols, len / BLK,
                len % BLK ? block_mask(len / BLK * BLK, len) : 0, sh, M, RB, c > 0, pf, l2);
        }
    for (; r < r1; r++)
        for (int c = c0; c < c1; c += DS_BF16DP_SEG) {
            const int len = c1 - c < DS_BF16DP_SEG ? c1 - c : DS_BF16DP_SEG;
            seg(y + r, ldy, x + c, xs, W + (size_t)r * cols + c, (size_t)cols, len / BLK,
                len % BLK ? block_mask(len / BLK * BLK, len) : 0, sh, M, 1, c > 0, pf, l2);
        }
}

// M input rows: from the packed rows xk (stride xs) in L1-sized pieces of columns (or whole rows,
// as the tuning says), or, without them, segments outer with each segment of x rounded into `tmp`
// (M x DS_BF16DP_SEG bf16). Weights prefetched pf_blocks row blocks ahead, into L2 if l2.
TARGET __attribute__((always_inline)) static inline void blk(float *y, int ldy, const float *x, const uint16_t *xk,
                                                             size_t xs, uint16_t *tmp, const uint16_t *W, int cols,
                                                             int r0, int r1, int sh, const tuning *tn, const int M,
                                                             const int RB, const int l2) {
    const size_t pf = (size_t)cols * RB * sizeof(uint16_t) * (size_t)tn->pf_blocks;
    if (!xk) {
        for (int c0 = 0; c0 < cols; c0 += DS_BF16DP_SEG) {
            const int len = cols - c0 < DS_BF16DP_SEG ? cols - c0 : DS_BF16DP_SEG;
            round_rows(tmp, DS_BF16DP_SEG, x + c0, (size_t)cols, M, len);
            rowblk(y, ldy, tmp - c0, DS_BF16DP_SEG, W, cols, c0, c0 + len, r0, r1, sh, pf, M, RB, l2);
        }
        return;
    }
    int S = (int)((size_t)tn->x_bytes / ((size_t)M * sizeof(uint16_t))) / DS_BF16DP_SEG * DS_BF16DP_SEG;
    if (S < DS_BF16DP_SEG) S = DS_BF16DP_SEG;
    if (RB > 1 && tn->wide_whole) S = cols;
    for (int c0 = 0; c0 < cols; c0 += S)
        rowblk(y, ldy, xk, xs, W, cols, c0, cols - c0 < S ? cols : c0 + S, r0, r1, sh, pf, M, RB, l2);
}

// m (1-8) input rows, each count its own instance: 1 weight row at a time for up to 4, 3 for 5-8;
// under the L2 tuning 3 for 2 rows as well, and one input row reads one weight row at a time without
// software prefetch: a single sequential stream, which the hardware's prefetchers follow best (plain
// decoding of the inflated 2048 x 24 target 14.3-15.0 -> 15.1-16.5 tok/s on one thread, 18.7-24.8 ->
// 28.2-29.0 on two, interleaved; the 3 weight rows prefetched into L2 that it replaces had beaten one
// weight row with that prefetch, 72-77 -> 64-65 ms a forward, results.md).
TARGET __attribute__((always_inline)) static inline void blk_m(float *y, int ldy, const float *x, const uint16_t *xk,
                                                               size_t xs, uint16_t *tmp, const uint16_t *W, int cols,
                                                               int r0, int r1, int sh, const tuning *tn, int m,
                                                               const int l2) {
    switch (m) {
    case 1:
        if (l2) blk(y, ldy, x, xk, xs, tmp, W, cols, r0, r1, sh, tn, 1, 1, 2);
        else blk(y, ldy, x, xk, xs, tmp, W, cols, r0, r1, sh, tn, 1, 1, 0);
        break;
    case 2: blk(y, ldy, x, xk, xs, tmp, W, cols, r0, r1, sh, tn, 2, l2 ? 3 : 1, l2); break;
    case 3: blk(y, ldy, x, xk, xs, tmp, W, cols, r0, r1, sh, tn, 3, 1, l2); break;
    case 4: blk(y, ldy, x, xk, xs, tmp, W, cols, r0, r1, sh, tn, 4, 1, l2); break;
    case 5: blk(y, ldy, x, xk, xs, tmp, W, cols, r0, r1, sh, tn, 5, 3, l2); break;
    case 6: blk(y, ldy, x, xk, xs, tmp, W, cols, r0, r1, sh, tn, 6, 3, l2); break;
    case 7: blk(y, ldy, x, xk, xs, tmp, W, cols, r0, r1, sh, tn, 7, 3, l2); break;
    default: blk(y, ldy, x, xk, xs, tmp, W, cols, r0, r1, sh, tn, 8, 3, l2); break;
    }
}

TARGET void ds_bf16dp_rows(float *y, int ldy, const float *x, int nb, const void *Wv, int cols, int r0, int r1,
                           const float *xp) {
    const uint16_t *W = Wv, *xb = (const uint16_t *)(const void *)xp;
    const size_t ps = (size_t)stride_of(cols);
    if (cols <= 0) {
        for (int k = 0; k < nb; k++)
            for (int r = r0; r < r1; r++) y[(size_t)k * ldy + r] = 0.0f;
        return;
    }
    _Alignas(64) uint16_t tmp[xb ? 1 : 8 * DS_BF16DP_SEG];
    // Rows of whole 64-byte blocks that all start 4·sh bytes past a line boundary, or -1 (see seg).
    const int sh = cols % BLK == 0 && (uintptr_t)W % 4 == 0 ? (int)((uintptr_t)W % 64 / 4) : -1;
    const tuning *tn = tuning_get();
    for (int i = 0; i < nb; i += 8) {
        const int m = nb - i < 8 ? nb - i : 8;
        const float *xi = x + (size_t)i * cols;
        float *yi = y + (size_t)i * ldy;
        const uint16_t *xk = xb ? xb + (size_t)i * ps : NULL;
        const int shi = i > 0 && sh == 0 && tn->hot_single ? -1 : sh; // (the weights in L2 now)
        if (tn->pf_l2) blk_m(yi, ldy, xi, xk, ps, tmp, W, cols, r0, r1, shi, tn, m, 1);
        else blk_m(yi, ldy, xi, xk, ps, tmp, W, cols, r0, r1, shi, tn, m, 0);
    }
}
