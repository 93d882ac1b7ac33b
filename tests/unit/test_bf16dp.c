// The VDPBF16PS path of BF16 products (ISA "avx512bf16", kernels/matmul_bf16dp.h), bit for bit:
//   - an emulation of VCVTNE2PS2BF16 and VDPBF16PS written from Intel's documented operation (SDM:
//     round to nearest even, input denormals read as zero, output denormals flushed, MXCSR ignored,
//     NaN priorities src1 low, src2 low, src1 high, src2 high, srcdest), checked against the
//     instructions on millions of random and adversarial lanes;
//   - the whole product (ds_matmul on the forced ISA, with and without scratch, 1 and 2 threads)
//     against a scalar reimplementation of the documented order (segments, lane tree), exactly;
//   - batch invariance for 1..24 input rows, and closeness to the f32-FMA path within the bound
//     of the input rounding (2^-9 relative per element);
//   - BF16 products of many rows stay on the kernels (never sgemm) on AVX-512, at default settings;
//   - a drafter loaded next to a target with bf16_inputs rounds its BF16 products' inputs too.
// Skipped, saying why, on CPUs without AVX512-BF16.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <immintrin.h>
#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/threads.h"
#include "draft/drafter.h"
#include "kernels/half.h"
#include "kernels/matmul.h"
#include "kernels/matmul_bf16dp.h"
#include "kernels/matmul_bf16dp.h"

#define TARGET __attribute__((target("avx512bf16,avx512f,avx512bw,avx512vl")))

#define TEST_RNG_SEED 0x2545F4914F6CDD1Dull
#include "test_util.h"
#include "stories.h"

static int have_bf16(void) {
    if (ds_bf16dp_supported()) return 1;
    print_message("(this CPU has no AVX512-BF16: the VDPBF16PS path is not tested here)\n");
    return 0;
}

// ---------------------------------------------------------------------------------------------
// The emulation (Intel SDM, VCVTNE2PS2BF16 and VDPBF16PS "Operation").

static int is_nan32(uint32_t u) { return (u & 0x7fffffffu) > 0x7f800000u; }
static int is_denorm32(uint32_t u) { return (u & 0x7f800000u) == 0 && (u & 0x007fffffu) != 0; }
static uint32_t daz32(uint32_t u) { return is_denorm32(u) ? u & 0x80000000u : u; }

// convert_fp32_to_bfloat16: zero or denormal -> signed zero; inf kept; NaN truncated with the
// quiet bit set; normal: integer add of 0x7fff + bit 16, the top half.
static uint16_t emu_round_bf16(uint32_t u) {
    if ((u & 0x7f800000u) == 0) return (uint16_t)((u >> 16) & 0x8000u);
    if ((u & 0x7fffffffu) == 0x7f800000u) return (uint16_t)(u >> 16);
    if (is_nan32(u)) return (uint16_t)((u >> 16) | 0x40u);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

// Whether acc + a*b (f32 values, a and b with 8 significant bits) is tiny after rounding: rounded
// to 24 bits with an unbounded exponent, below FLT_MIN in magnitude, i.e. the exact value below
// FLT_MIN - 2^-151 (the midpoint, a tie, rounds to the even FLT_MIN). The product is exact in
// double, and a two-sum gives the exact sum s + e.
static int exact_tiny(float acc, float a, float b) {
    const double p = (double)a * (double)b, s = (double)acc + p, bb = s - acc;
    const double e = ((double)acc - (s - bb)) + (p - bb);
    const double t = (double)FLT_MIN - ldexp(1.0, -151);
    return fabs(s) < t || (fabs(s) == t && e != 0 && (e < 0) != (s < 0));
}

// acc + a*b as one VDPBF16PS step (a, b: bf16 values in the top half of a dword): NaN operands in
// priority a, b, acc (returned quiet); inputs DAZ; one rounding to nearest even (fmaf); an invalid
// operation gives the default NaN; a tiny result (tininess after rounding, as x86 detects it) is
// flushed to zero of its sign (FTZ). (Measured on an AMD Zen 5: tininess before rounding, or
// flushing every denormal fmaf result, each disagree with the instruction on some lanes.)
static uint32_t emu_step(uint32_t acc, uint32_t a, uint32_t b) {
    if (is_nan32(a)) return a | 0x00400000u;
    if (is_nan32(b)) return b | 0x00400000u;
    if (is_nan32(acc)) return acc | 0x00400000u;
    const float fa = bits_f32(daz32(a)), fb = bits_f32(daz32(b)), fc = bits_f32(daz32(acc));
    const uint32_t r = f32_bits(fmaf(fa, fb, fc));
    if (is_nan32(r)) return 0xffc00000u;
    if ((r & 0x7f800000u) != 0x7f800000u && exact_tiny(fc, fa, fb)) return r & 0x80000000u;
    return r;
}

// One lane: src1, src2 hold the bf16 pair (even element low, odd high); the odd pair first.
static uint32_t emu_lane(uint32_t acc, uint32_t src1, uint32_t src2) {
    acc = emu_step(acc, src1 & 0xffff0000u, src2 & 0xffff0000u);
    return emu_step(acc, src1 << 16, src2 << 16);
}

TARGET static void hw_dp(uint32_t out[16], const uint32_t acc[16], const uint32_t s1[16], const uint32_t s2[16]) {
    const __m512 r = _mm512_dpbf16_ps(_mm512_loadu_ps((const float *)acc),
                                      (__m512bh)_mm512_loadu_si512((const void *)s1),
                                      (__m512bh)_mm512_loadu_si512((const void *)s2));
    _mm512_storeu_ps((float *)out, r);
}

TARGET static void hw_round(uint16_t out[32], const uint32_t in[32]) {
    const __m512 lo = _mm512_loadu_ps((const float *)in), hi = _mm512_loadu_ps((const float *)in + 16);
    _mm512_storeu_si512((void *)out, (__m512i)_mm512_cvtne2ps_pbh(hi, lo));
}

// Interesting f32 patterns: zeros, denormals, FLT_MIN and its neighbours, rounding ties, the
// largest finite values (which round to inf), inf, NaNs (quiet, signalling, with payloads).
static uint32_t special32(uint64_t r) {
    static const uint32_t k[] = {0x00000000u, 0x80000000u, 0x00000001u, 0x807fffffu, 0x00400000u, 0x00800000u,
                                 0x80800000u, 0x00800001u, 0x007fffffu, 0x00807fffu, 0x00808000u, 0x00818000u,
                                 0x3f808000u, 0x3f818000u, 0x3f807fffu, 0x3f80ffffu, 0x7f7fffffu, 0xff7f8000u,
                                 0x7f7f7fffu, 0x7f800000u, 0xff800000u, 0x7fc00000u, 0xffc00001u, 0x7f800001u,
                                 0xff80ffffu, 0x7fbfffffu, 0x3f800000u, 0xbf800000u, 0x01000000u, 0x00ffffffu};
    return k[r % (sizeof k / sizeof k[0])];
}

// Random f32 bits of several kinds: any pattern, moderate values, tiny (near the denormal range),
// huge, or a special one.
static uint32_t rnd_f32_bits(void) {
    const uint64_t r = rnd_u64();
    const uint32_t u = (uint32_t)(r >> 32);
    switch (r % 8) {
    case 0: return u;
    case 1: return special32(r >> 8);
    case 2: return (u & 0x807fffffu) | ((uint32_t)(1 + (r >> 3) % 40) << 23); // tiny normals
    case 3: return u & 0x80ffffffu;                                            // denormals, FLT_MIN range
    case 4: return (u & 0x807fffffu) | ((uint32_t)(254 - (r >> 3) % 20) << 23); // huge
    default: return (u & 0x807fffffu) | ((uint32_t)(110 + (r >> 3) % 30) << 23); // moderate
    }
}
static uint16_t rnd_bf16_bits(void) { return (uint16_t)(rnd_f32_bits() >> 16); }

// Every f32 pattern whose low half is one of a set around the rounding boundaries (all 65536 top
// halves each), plus random ones: the instruction equals the emulation.
static void test_round_emulation(void **state) {
    if (!have_bf16()) skip();
    static const uint32_t lows[] = {0x0000u, 0x0001u, 0x7fffu, 0x8000u, 0x8001u, 0xffffu, 0x4000u, 0xc000u};
    uint32_t in[32];
    uint16_t out[32];
    long n = 0, bad = 0;
    for (int l = 0; l < 8 + 64; l++)
        for (uint32_t top = 0; top < 65536; top += 32) {
            for (int i = 0; i < 32; i++) {
                const uint32_t low = l < 8 ? lows[l] : (uint32_t)(rnd_u64() & 0xffffu);
                in[i] = ((top + (uint32_t)i) << 16) | low;
            }
            hw_round(out, in);
            for (int i = 0; i < 32; i++, n++)
                if (out[i] != emu_round_bf16(in[i]) && bad++ < 10)
                    print_error("round 0x%08x: hardware 0x%04x, emulation 0x%04x\n", in[i], out[i],
                                emu_round_bf16(in[i]));
        }
    print_message("rounding: %ld patterns\n", n);
    assert_int_equal(bad, 0);
}

// ds_bf16dp_pack: each row rounded by the emulation, the padding to whole blocks zero (a stride a
// multiple of 512 gets one more block, unused), the buffer's room respected (n x cols + 16 floats) and NULL below 16 columns.
static void test_pack(void **state) {
    if (!have_bf16()) skip();
    const int cols_list[] = {15, 16, 17, 31, 32, 33, 100, 481, 512, 1025, 2048};
    for (int ci = 0; ci < 11; ci++) {
        const int cols = cols_list[ci], n = 5, blocks = (cols + 31) / 32 * 32, ps = blocks + (blocks % 512 ? 0 : 32);
        float *x = xmalloc((size_t)n * cols * 4);
        uint32_t *xu = (uint32_t *)x;
        for (int k = 0; k < n * cols; k++) xu[k] = rnd_f32_bits();
        const size_t room = (size_t)n * cols + 16;
        float *buf = xmalloc(room * 4);
        const uint16_t *p = (const uint16_t *)(const void *)ds_bf16dp_pack(buf, x, n, cols);
        if (cols < 16) {
            assert_null(p);
        } else {
            assert_non_null(p);
            assert_int_equal((uintptr_t)p % 64, 0);
            assert_true((const char *)(p + (size_t)n * ps) <= (const char *)(buf + room));
            for (int k = 0; k < n; k++)
                for (int j = 0; j < blocks; j++)
                    assert_int_equal(p[(size_t)k * ps + j], j < cols ? emu_round_bf16(xu[(size_t)k * cols + j]) : 0);
        }
        free(buf);
        free(x);
    }
}

// The instruction against the emulation, 16 lanes at a time: random lanes of every kind, then
// adversarial ones (an accumulator at the denormal boundary and a product that lands across it;
// cancellation to exact zeros of either sign; overflow; NaN priorities).
static void test_dp_emulation(void **state) {
    if (!have_bf16()) skip();
    uint32_t acc[16], s1[16], s2[16], out[16];
    long n = 0, bad = 0;
    for (int it = 0; it < 262144; it++) { // 4.2 million lanes
        const int kind = it % 5;
        for (int i = 0; i < 16; i++) {
            acc[i] = rnd_f32_bits();
            s1[i] = (uint32_t)rnd_bf16_bits() << 16 | rnd_bf16_bits();
            s2[i] = (uint32_t)rnd_bf16_bits() << 16 | rnd_bf16_bits();
            if (kind == 1) { // products near FLT_MIN against an accumulator near it
                // biased exponents summing to about 128: products about 2^-126 (FLT_MIN)
                const uint32_t e1 = 3 + (uint32_t)(rnd_u64() % 120), e2 = 128 - e1 + (uint32_t)(rnd_u64() % 6);
                const uint32_t lo1 = (uint32_t)(rnd_u64() & 0x807f), lo2 = (uint32_t)(rnd_u64() & 0x807f);
                const uint32_t hi1 = (uint32_t)(rnd_u64() & 0x807f), hi2 = (uint32_t)(rnd_u64() & 0x807f);
                s1[i] = (hi1 | (e1 << 7)) << 16 | (lo1 | (e1 << 7));
                s2[i] = (hi2 | ((e2 - 3) << 7)) << 16 | (lo2 | ((e2 - 3) << 7));
                acc[i] = ((uint32_t)(rnd_u64() & 0x807fffffu)) | ((uint32_t)(rnd_u64() % 3) << 23);
            } else if (kind == 2) { // exact cancellation: acc = -(x_hi*w_hi), then the even pair
                const uint16_t a = (uint16_t)(rnd_u64() & 0x3fffu) | 0x3c00u, b = (uint16_t)(rnd_u64() & 0xbfffu) | 0x3c00u;
                s1[i] = (uint32_t)a << 16 | (rnd_u64() % 2 ? 0x8000u : 0u);
                s2[i] = (uint32_t)b << 16 | rnd_bf16_bits();
                acc[i] = f32_bits(-(bits_f32((uint32_t)a << 16) * bits_f32((uint32_t)b << 16)));
            } else if (kind == 4) { // FTZ's window: acc = ±FLT_MIN (+ 0..3 ulp), the odd product of
                                    // opposite sign and 2^-155..2^-146, the even product zero
                const uint32_t sg = (uint32_t)(rnd_u64() & 1) << 31;
                acc[i] = sg | (0x00800000u + (uint32_t)(rnd_u64() % 4));
                const uint32_t e1 = 40 + (uint32_t)(rnd_u64() % 30), e2 = 100 + (uint32_t)(rnd_u64() % 10) - e1;
                const uint32_t a = ((sg >> 16) ^ 0x8000u) | e1 << 7 | (uint32_t)(rnd_u64() & 0x7f);
                const uint32_t b = e2 << 7 | (uint32_t)(rnd_u64() & 0x7f);
                s1[i] = a << 16 | (uint32_t)(rnd_u64() & 0xffffu);
                s2[i] = b << 16 | (rnd_u64() % 2 ? 0x8000u : 0u);
            } else if (kind == 3) { // huge: overflow and inf - inf
                s1[i] = (uint32_t)(0x7e00u | (rnd_u64() & 0x80ffu)) << 16 | (0x7e00u | (rnd_u64() & 0x80ffu));
                s2[i] = (uint32_t)(0x4000u | (rnd_u64() & 0x80ffu)) << 16 | (0x4000u | (rnd_u64() & 0x80ffu));
                if (rnd_u64() % 4 == 0) s2[i] = (s2[i] & 0xffffu) | 0x7f800000u;
                if (rnd_u64() % 4 == 0) s2[i] = (s2[i] & 0xffff0000u) | 0xff80u;
            }
        }
        hw_dp(out, acc, s1, s2);
        for (int i = 0; i < 16; i++, n++) {
            const uint32_t want = emu_lane(acc[i], s1[i], s2[i]);
            if (out[i] != want && bad++ < 10)
                print_error("dp acc 0x%08x src1 0x%08x src2 0x%08x: hardware 0x%08x, emulation 0x%08x\n", acc[i], s1[i],
                            s2[i], out[i], want);
        }
    }
    print_message("VDPBF16PS: %ld lanes\n", n);
    assert_int_equal(bad, 0);
}

// ---------------------------------------------------------------------------------------------
// The whole product.

// x · w for one input row and one bf16 weight row by the documented order (matmul_bf16dp.h).
static float ref_dot(const float *x, const uint16_t *w, int cols) {
    float y = 0.0f;
    for (int c = 0; c < cols; c += DS_BF16DP_SEG) {
        const int len = cols - c < DS_BF16DP_SEG ? cols - c : DS_BF16DP_SEG;
        uint32_t acc[16] = {0};
        for (int j = 0; j < len; j += 32)
            for (int i = 0; i < 16; i++) {
                const int c0 = c + j + 2 * i, c1 = c0 + 1;
                const uint32_t x0 = c0 < cols ? emu_round_bf16(f32_bits(x[c0])) : 0, w0 = c0 < cols ? w[c0] : 0;
                const uint32_t x1 = c1 < cols ? emu_round_bf16(f32_bits(x[c1])) : 0, w1 = c1 < cols ? w[c1] : 0;
                acc[i] = emu_lane(acc[i], x1 << 16 | x0, w1 << 16 | w0);
            }
        float s8[8], s4[4], s2[2];
        for (int i = 0; i < 8; i++) s8[i] = bits_f32(acc[i]) + bits_f32(acc[i + 8]);
        for (int i = 0; i < 4; i++) s4[i] = s8[i] + s8[i + 4];
        for (int i = 0; i < 2; i++) s2[i] = s4[i] + s4[i + 2];
        const float s = s2[0] + s2[1];
        y = c > 0 ? y + s : s;
    }
    return y;
}

static uint16_t *make_w(int rows, int cols) {
    uint16_t *w = xmalloc((size_t)rows * cols * 2);
    for (size_t k = 0; k < (size_t)rows * cols; k++) {
        const float s = (k / (size_t)cols) % 3 == 1 ? 1e-3f : 1.0f;
        w[k] = rnd_u64() % 17 == 0 ? 0 : ds_f32_to_bf16(rnd_unit() * s);
    }
    return w;
}
static float *make_x(int n, int cols) {
    float *x = xmalloc((size_t)n * cols * 4);
    for (size_t k = 0; k < (size_t)n * cols; k++) x[k] = rnd_unit() * 2.0f;
    return x;
}

// y (n, rows) through ds_matmul_ex on the kernel at every n, with a scratch of the documented size
// (or none); every output must be written.
static void product(float *y, const float *x, const ds_weight *w, int n, int with_scratch) {
    const size_t ns = ds_matmul_scratch_floats(w) * (size_t)ds_threads_max();
    float *scratch = with_scratch ? xmalloc(ns * 4) : NULL;
    for (size_t k = 0; k < (size_t)n * w->rows; k++) y[k] = NAN;
    ds_matmul_ex(y, x, w, n, scratch, INT_MAX);
    free(scratch);
}

// Shapes: column tails of every length class, several segments and L1 pieces, row counts leaving
// remainders of the register blocks; 1 and 2 threads; with and without scratch: bit for bit the
// scalar reimplementation, and every row of a batch equal to the row alone.
static void kernel_exact_with(void) {
    assert_int_equal(ds_matmul_force_isa("avx512bf16"), 1);
    assert_string_equal(ds_matmul_isa(), "avx512bf16");
    const int cols_list[] = {1, 15, 16, 17, 31, 32, 33, 64, 100, 257, 1024, 1056, 2047, 3072, 4100, 16400};
    const int rows_list[] = {1, 3, 5, 34, 203};
    for (int ci = 0; ci < 16; ci++)
        for (int ri = 0; ri < 5; ri++) {
            const int cols = cols_list[ci], rows = rows_list[ri];
            if ((size_t)cols * rows > 1u << 20 && ri < 4) continue; // the big shapes once
            uint16_t *wd = make_w(rows, cols);
            ds_weight w = {DS_BF16, rows, cols, wd};
            w.round_inputs = 1; // the opt-in (matmul.h)
            const int nmax = 24;
            float *x = make_x(nmax, cols), *ref = xmalloc((size_t)nmax * rows * 4);
            float *y = xmalloc((size_t)nmax * rows * 4), *y1 = xmalloc((size_t)rows * 4);
            for (int k = 0; k < nmax; k++)
                for (int r = 0; r < rows; r++)
                    ref[(size_t)k * rows + r] = ref_dot(x + (size_t)k * cols, wd + (size_t)r * cols, cols);
            for (int n = 1; n <= nmax; n++)
                for (int variant = 0; variant < 3; variant++) { // scratch 1 thread, none, scratch 2 threads
                    if ((n % 5 != 1 && n != 8 && n != nmax) && variant) continue;
                    ds_set_threads(variant == 2 ? 2 : 1);
                    product(y, x, &w, n, variant != 1);
                    for (size_t k = 0; k < (size_t)n * rows; k++)
                        if (f32_bits(y[k]) != f32_bits(ref[k])) {
                            print_error("cols %d rows %d n %d variant %d: y[%zu] = %.9g (0x%08x), want %.9g (0x%08x)\n",
                                        cols, rows, n, variant, k, (double)y[k], f32_bits(y[k]), (double)ref[k],
                                        f32_bits(ref[k]));
                            fail();
                        }
                }
            // Batch invariance in the kernel's own terms: each row of the 24-row call alone.
            ds_set_threads(1);
            product(y, x, &w, nmax, 1);
            for (int k = 0; k < nmax; k++) {
                product(y1, x + (size_t)k * cols, &w, 1, 1);
                assert_memory_equal(y1, y + (size_t)k * rows, (size_t)rows * 4);
            }
            free(wd);
            free(x);
            free(ref);
            free(y);
            free(y1);
        }
    ds_set_threads(0);
    assert_int_equal(ds_matmul_force_isa("avx512bf16"), 1);
}

// The check under both streaming tunings (matmul_bf16dp.c: a 48 KiB L1's and a smaller one's),
// whichever this core would pick: they change the loop order, never a bit of the result.
static void under_both_tunings(void (*check)(void)) {
    for (int tuning = 0; tuning < 2; tuning++) {
        ds_bf16dp_set_tuning(tuning);
        check();
    }
    ds_bf16dp_set_tuning(-1);
}

static void test_kernel_exact(void **state) {
    if (!have_bf16()) skip();
    under_both_tunings(kernel_exact_with);
}

// Weights at every 2-byte offset from a 64-byte line: rows that start 4·sh bytes past a line take
// the aligned-lines path (two lines joined by VPERMT2D, matmul_bf16dp.c's seg), other offsets the
// unaligned loads; each must give exactly the scalar reimplementation, for 1-8 and 13 input rows.
// The bytes around the weights hold NaN, which no output may see.
static void kernel_misaligned_with(void) {
    assert_int_equal(ds_matmul_force_isa("avx512bf16"), 1);
    const int cols_list[] = {32, 64, 1056, 3072, 100};
    const int rows_list[] = {1, 4, 35};
    const int ns[] = {1, 2, 3, 5, 8, 13};
    for (int ci = 0; ci < 5; ci++)
        for (int ri = 0; ri < 3; ri++) {
            const int cols = cols_list[ci], rows = rows_list[ri];
            const size_t nw = (size_t)rows * cols;
            uint16_t *wd = make_w(rows, cols);
            uint16_t *buf = aligned_alloc(64, ((nw + 128) * 2 + 63) / 64 * 64); // (a multiple of 64: C11)
            assert_non_null(buf);
            float *x = make_x(13, cols), *ref = xmalloc((size_t)13 * rows * 4), *y = xmalloc((size_t)13 * rows * 4);
            for (int k = 0; k < 13; k++)
                for (int r = 0; r < rows; r++)
                    ref[(size_t)k * rows + r] = ref_dot(x + (size_t)k * cols, wd + (size_t)r * cols, cols);
            for (int off = 0; off < 32; off++) { // offset in bf16 elements: 0-62 bytes
                for (size_t k = 0; k < nw + 128; k++) buf[k] = 0x7fc0; // NaN
                memcpy(buf + off, wd, nw * 2);
                ds_weight w = {DS_BF16, rows, cols, buf + off};
                w.round_inputs = 1;
                for (int t = 0; t < 6; t++) {
                    ds_set_threads(1);
                    product(y, x, &w, ns[t], 1);
                    for (size_t k = 0; k < (size_t)ns[t] * rows; k++)
                        if (f32_bits(y[k]) != f32_bits(ref[k])) {
                            print_error("cols %d rows %d offset %d bytes n %d: y[%zu] = %.9g, want %.9g\n", cols, rows,
                                        2 * off, ns[t], k, (double)y[k], (double)ref[k]);
                            fail();
                        }
                }
            }
            free(wd);
            free(buf);
            free(x);
            free(ref);
            free(y);
        }
    ds_set_threads(0);
}

static void test_kernel_misaligned(void **state) {
    if (!have_bf16()) skip();
    under_both_tunings(kernel_misaligned_with);
}

// NaN and inf inputs still say so: a NaN in x row k makes row k's outputs NaN (the rounding keeps
// NaN), an inf gives ±inf or NaN, the other rows are untouched.
static void test_kernel_specials(void **state) {
    if (!have_bf16()) skip();
    assert_int_equal(ds_matmul_force_isa("avx512bf16"), 1);
    const int rows = 7, cols = 100, n = 3;
    uint16_t *wd = make_w(rows, cols);
    for (int r = 0; r < rows; r++) wd[(size_t)r * cols + 40] = ds_f32_to_bf16(0.5f);
    ds_weight w = {DS_BF16, rows, cols, wd};
    w.round_inputs = 1;
    float *x = make_x(n, cols), y[3 * 7];
    x[40] = NAN;
    x[2 * cols + 40] = INFINITY;
    product(y, x, &w, n, 1);
    for (int r = 0; r < rows; r++) {
        assert_true(isnan(y[r]));
        assert_true(isfinite(y[rows + r]));
        assert_true(isinf(y[2 * rows + r]) && y[2 * rows + r] > 0);
        for (int k = 0; k < n; k++) {
            const float want = ref_dot(x + (size_t)k * cols, wd + (size_t)r * cols, cols);
            assert_true(isnan(want) ? isnan(y[k * rows + r]) : f32_bits(y[k * rows + r]) == f32_bits(want));
        }
    }
    free(wd);
    free(x);
}

// Against the f32-FMA path ("avx512", or "avx512bf16" without the opt-in: the same bits): the input rounding moves each product by at most 2^-9 of
// |w x| (round to nearest even at 8 significant bits), so |y_dp - y_f32| <= 2^-9 sum |w x| plus the
// two paths' f32 summation error (1e-5 of the same sum is far above it for these lengths).
static void test_close_to_f32_path(void **state) {
    if (!have_bf16()) skip();
    const int rows = 33, cols = 2065, n = 9;
    uint16_t *wd = make_w(rows, cols);
    ds_weight w = {DS_BF16, rows, cols, wd};
    w.round_inputs = 1;
    float *x = make_x(n, cols), *yd = xmalloc((size_t)n * rows * 4), *yf = xmalloc((size_t)n * rows * 4);
    assert_int_equal(ds_matmul_force_isa("avx512bf16"), 1);
    product(yd, x, &w, n, 1);
    // Without the opt-in the avx512bf16 ISA computes BF16 exactly as avx512 does (f32 inputs).
    float *yo = xmalloc((size_t)n * rows * 4);
    w.round_inputs = 0;
    product(yo, x, &w, n, 1);
    w.round_inputs = 1;
    assert_int_equal(ds_matmul_force_isa("avx512"), 1);
    product(yf, x, &w, n, 1); // the flag is ignored there
    double worst = 0;
    int differ = 0;
    for (int k = 0; k < n; k++)
        for (int r = 0; r < rows; r++) {
            double a = 0;
            for (int j = 0; j < cols; j++)
                a += fabs((double)ds_bf16_to_f32(wd[(size_t)r * cols + j]) * x[(size_t)k * cols + j]);
            const double err = fabs((double)yd[k * rows + r] - yf[k * rows + r]);
            assert_true(err <= (1.0 / 512 + 1e-5) * a);
            if (a > 0 && err / a > worst) worst = err / a;
            differ += yd[k * rows + r] != yf[k * rows + r];
        }
    assert_memory_equal(yo, yf, (size_t)n * rows * 4);
    free(yo);
    print_message("dp vs f32 path: worst |diff| / sum|wx| = %.3g (bound 2^-9 = %.3g), %d of %d differ\n", worst,
                  1.0 / 512, differ, n * rows);
    assert_true(differ > 0); // the rounding path is really a different computation
    assert_int_equal(ds_matmul_force_isa("avx512bf16"), 1);
    free(wd);
    free(x);
    free(yd);
    free(yf);
}

// On the AVX-512 ISAs a BF16 product of 32 or 64 rows at default settings runs on the kernel, not
// on sgemm over widened weights (the kernel took 0.2-0.7 of sgemm's time up to 256 rows on Zen 5,
// kernels/matmul.c): every row equals the row alone, bit for bit (sgemm's blocking would not).
static void test_many_rows_stay_on_kernel(void **state) {
    const char *isas[2] = {"avx512", "avx512bf16"};
    int ran = 0;
    for (int k = 0; k < 2; k++) {
        if (!ds_matmul_force_isa(isas[k])) continue;
        ran++;
        const int rows = 48, cols = 2048, ns[2] = {32, 64};
        uint16_t *wd = make_w(rows, cols);
        ds_weight w = {DS_BF16, rows, cols, wd};
        w.round_inputs = k == 1;
        float *x = make_x(64, cols), *y = xmalloc((size_t)64 * rows * 4), *y1 = xmalloc((size_t)rows * 4);
        float *scratch = xmalloc(ds_matmul_scratch_floats(&w) * (size_t)ds_threads_max() * 4);
        for (int i = 0; i < 2; i++) {
            ds_matmul(y, x, &w, ns[i], scratch); // default kernel choice
            for (int r = 0; r < ns[i]; r++) {
                ds_matmul(y1, x + (size_t)r * cols, &w, 1, scratch);
                assert_memory_equal(y1, y + (size_t)r * rows, (size_t)rows * 4);
            }
        }
        free(wd), free(x), free(y), free(y1), free(scratch);
    }
    if (!ran) print_message("(no AVX-512 here: BF16 products of 24+ rows go to sgemm, nothing to test)\n");
    if (ds_bf16dp_supported()) assert_int_equal(ds_matmul_force_isa("avx512bf16"), 1);
}

// For test_drafter_follows_target: that each of a fresh BF16 drafter's matrices for m (written to
// dir, loaded, freed, removed, with m) rounds its inputs exactly when `rounds` says.
static void check_drafter_rounds(ds_model *m, const char *dir, int rounds) {
    ds_drafter_init_params p = ds_drafter_init_default();
    p.n_layers = 1;
    p.markov_rank = 16;
    p.dtype = DS_BF16;
    ds_drafter *d;
    assert_int_equal(ds_drafter_init_write(m, &p, dir), DS_OK);
    assert_int_equal(ds_drafter_load(dir, m, &d), DS_OK);
    const ds_weight *ws[] = {&d->fc, &d->lm_head, &d->markov_w2, &d->layers[0].wq, &d->layers[0].w_up,
                             &d->layers[0].w_down};
    for (size_t i = 0; i < sizeof ws / sizeof *ws; i++) {
        assert_int_equal(ws[i]->type, DS_BF16);
        assert_int_equal(ws[i]->round_inputs, rounds);
    }
    ds_drafter_free(d);
    ds_model_free(m);
    char cmd[4300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);
}

// One switch for the pair: a target whose products round their inputs (bf16_inputs, or a GGUF
// block type's int8 inputs) makes its drafter's BF16 products round theirs too (the drafter only
// proposes, so this never changes what is generated); without it, neither does.
static void test_drafter_follows_target(void **state) {
    char dir[4200];
    const char *tmp = getenv("DSPARK_TMP");
    snprintf(dir, sizeof dir, "%s/bf16dp_drafter_%ld", tmp ? tmp : "/tmp", (long)getpid());
    for (int on = 0; on < 2; on++) {
        ds_model *m;
        const ds_model_params mp = {.n_threads = 1, .bf16_inputs = on};
        assert_int_equal(stories_load_with(&m, &mp), 0);
        check_drafter_rounds(m, dir, on);
    }
    // A quantized GGUF target rounds its inputs to int8 (by default: Q8_0 takes f32 ones with
    // int8_inputs = -1; the K-quants always): its drafter rounds too, without the switch.
    const char *shared = getenv("DSPARK_SHARED");
    for (int i8 = -1; i8 <= 1; i8++) {
        char path[4200];
        snprintf(path, sizeof path, "%s/models/gguf-fixtures/llama-tiny/%s.gguf", shared ? shared : "../shared",
                 i8 <= 0 ? "Q8_0" : "Q4_K_M");
        ds_model *m;
        const ds_model_params mp = {.n_threads = 1, .int8_inputs = i8 < 1 ? i8 : 0};
        assert_int_equal(ds_model_load(path, &mp, &m), DS_OK);
        check_drafter_rounds(m, dir, i8 != -1);
    }
}

// Dispatch: "avx512bf16" is the default where the CPU has it, and can be left for "avx512".
static void test_dispatch(void **state) {
    if (!ds_bf16dp_supported()) {
        assert_int_equal(ds_matmul_force_isa("avx512bf16"), 0);
        print_message("(this CPU has no AVX512-BF16: only the refusal is tested)\n");
        return;
    }
    assert_int_equal(ds_matmul_force_isa("avx512"), 1);
    assert_string_equal(ds_matmul_isa(), "avx512");
    assert_int_equal(ds_matmul_force_isa("avx512bf16"), 1);
    assert_string_equal(ds_matmul_isa(), "avx512bf16");
}

// Must run first in the process: nothing forced yet, so this is the choice ds_matmul makes alone.
static void test_default_first(void **state) {
    if (ds_bf16dp_supported()) assert_string_equal(ds_matmul_isa(), "avx512bf16");
    else assert_string_not_equal(ds_matmul_isa(), "avx512bf16");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_default_first), // first: see above
        cmocka_unit_test(test_dispatch),
        cmocka_unit_test(test_round_emulation),
        cmocka_unit_test(test_pack),
        cmocka_unit_test(test_dp_emulation),
        cmocka_unit_test(test_kernel_exact),
        cmocka_unit_test(test_kernel_misaligned),
        cmocka_unit_test(test_kernel_specials),
        cmocka_unit_test(test_close_to_f32_path),
        cmocka_unit_test(test_many_rows_stay_on_kernel),
        cmocka_unit_test(test_drafter_follows_target),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
