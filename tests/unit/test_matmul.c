// Matrix products: ds_matmul against a double-precision reference for every ISA the CPU has, every
// weight type, the multi-row kernel and the sgemm path, awkward shapes; the 16-bit conversions of
// half.h (known values, exhaustive checks, hardware F16C as a second opinion); thread-count
// independence of every path.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <cblas.h>
#include <immintrin.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/threads.h"
#include "kernels/half.h"
#include "kernels/ops.h"
#include "kernels/matmul.h"
#include "round_ref.h"
#include "kernels/simd.h"

static const char *const k_isas[] = {"avx512", "avx2", "scalar"};
#define N_ISAS 3

#define TEST_RNG_SEED 0x9E3779B97F4A7C15ull
#include "test_util.h"

// ---------------------------------------------------------------------------------------------
// Weights stored in each type, and their exact dequantized values.

typedef struct {
    uint16_t d;
    int8_t qs[32];
} q8_block;

typedef struct {
    ds_weight w;
    void *data;
    double *deq; // (rows, cols) the stored values, computed independently of matmul.c
} test_weight;

static void make_weight(test_weight *tw, ds_dtype type, int rows, int cols) {
    const size_t n = (size_t)rows * cols;
    tw->deq = xmalloc(n * sizeof(double));
    memset(&tw->w, 0, sizeof tw->w);
    tw->w.type = type;
    tw->w.rows = rows;
    tw->w.cols = cols;
    // Values of varied magnitude (some rows scaled down, a few exact zeros).
    float *v = xmalloc(n * sizeof(float));
    for (size_t k = 0; k < n; k++) {
        float s = (k / (size_t)cols) % 3 == 1 ? 1e-3f : 1.0f;
        v[k] = (rnd_u64() % 17 == 0) ? 0.0f : rnd_unit() * s;
    }
    switch (type) {
    case DS_F32: {
        float *d = xmalloc(n * 4);
        for (size_t k = 0; k < n; k++) d[k] = v[k], tw->deq[k] = v[k];
        tw->data = d;
        break;
    }
    case DS_F16: {
        uint16_t *d = xmalloc(n * 2);
        for (size_t k = 0; k < n; k++) d[k] = ds_f32_to_f16(v[k]), tw->deq[k] = ds_f16_to_f32(d[k]);
        tw->data = d;
        break;
    }
    case DS_BF16: {
        uint16_t *d = xmalloc(n * 2);
        for (size_t k = 0; k < n; k++) d[k] = ds_f32_to_bf16(v[k]), tw->deq[k] = ds_bf16_to_f32(d[k]);
        tw->data = d;
        break;
    }
    case DS_Q8_0: {
        assert_int_equal(cols % 32, 0);
        const size_t nb = n / 32;
        q8_block *b = xmalloc(nb * sizeof(q8_block));
        for (size_t k = 0; k < nb; k++) {
            float amax = 0;
            for (int j = 0; j < 32; j++) amax = fmaxf(amax, fabsf(v[k * 32 + j]));
            b[k].d = ds_f32_to_f16(amax / 127.0f);
            const float d = ds_f16_to_f32(b[k].d);
            for (int j = 0; j < 32; j++) {
                float q = d > 0 ? roundf(v[k * 32 + j] / d) : 0.0f;
                q = fminf(127.0f, fmaxf(-127.0f, q));
                b[k].qs[j] = (int8_t)q;
                tw->deq[k * 32 + j] = (double)d * (double)b[k].qs[j];
            }
        }
        tw->data = b;
        break;
    }
    default: fail();
    }
    tw->w.data = tw->data;
    free(v);
}

static void free_weight(test_weight *tw) {
    free(tw->data);
    free(tw->deq);
    memset(tw, 0, sizeof *tw);
}

static float *make_x(int n, int cols) {
    float *x = xmalloc((size_t)n * cols * sizeof(float));
    for (size_t k = 0; k < (size_t)n * cols; k++) x[k] = rnd_unit() * 2.0f;
    return x;
}

// y = x · Wᵀ with `tw`'s exact values in double; also the error scale sum |w||x| per output. With
// w.round_inputs (Q8_0's integer path), x rounded per block of 32 by the rule (round_ref.h).
static void reference(const test_weight *tw, const float *x0, int n, double *yref, double *scale) {
    const int rows = tw->w.rows, cols = tw->w.cols;
    float *x = xmalloc((size_t)n * cols * sizeof(float));
    for (int i = 0; i < n; i++) {
        if (tw->w.round_inputs) round_input_ref(x0 + (size_t)i * cols, cols, 32, x + (size_t)i * cols);
        else memcpy(x + (size_t)i * cols, x0 + (size_t)i * cols, (size_t)cols * sizeof(float));
    }
    for (int i = 0; i < n; i++)
        for (int r = 0; r < rows; r++) {
            double s = 0, a = 0;
            for (int j = 0; j < cols; j++) {
                const double w = tw->deq[(size_t)r * cols + j], xv = x[(size_t)i * cols + j];
                s += w * xv;
                a += fabs(w * xv);
            }
            yref[(size_t)i * rows + r] = s;
            scale[(size_t)i * rows + r] = a;
        }
    free(x);
}

// Run ds_matmul (scratch sized exactly as documented) and compare with the reference.
static void check_matmul(const test_weight *tw, const float *x, int n, const char *what) {
    const int rows = tw->w.rows;
    const size_t ny = (size_t)n * rows;
    float *y = xmalloc(ny * sizeof(float));
    for (size_t k = 0; k < ny; k++) y[k] = NAN; // every output must be written
    double *yref = xmalloc(ny * sizeof(double)), *scale = xmalloc(ny * sizeof(double));
    reference(tw, x, n, yref, scale);
    // ds_matmul_scratch_floats(w) floats per thread, exactly (ASan sees any overrun).
    const size_t ns = ds_matmul_scratch_floats(&tw->w) * (size_t)ds_threads();
    if (tw->w.type == DS_F32) assert_int_equal(ns, 0);
    float *scratch = ns ? xmalloc(ns * sizeof(float)) : NULL;
    ds_matmul(y, x, &tw->w, n, scratch);
    for (size_t k = 0; k < ny; k++) {
        const double tol = 1e-5 * scale[k] + 1e-6;
        const double err = fabs((double)y[k] - yref[k]);
        if (!(err <= tol))
            print_error("%s: isa %s type %s n %d rows %d cols %d: y[%zu] = %.9g, want %.9g (err %.3g, tol %.3g)\n",
                        what, ds_matmul_isa(), ds_dtype_name(tw->w.type), n, rows, tw->w.cols, k, (double)y[k],
                        yref[k], err, tol);
        assert_true(err <= tol);
    }
    free(scratch);
    free(y);
    free(yref);
    free(scale);
}

static int force_isa_or_skip(const char *isa) {
    if (ds_matmul_force_isa(isa)) {
        assert_string_equal(ds_matmul_isa(), isa);
        return 1;
    }
    return 0;
}

// The best ISA again (what ds_matmul picks by itself: "avx512bf16", tested by test_bf16dp.c, where
// the CPU has AVX512-BF16).
static void restore_isa(void) {
    if (ds_matmul_force_isa("avx512bf16")) return;
    for (int k = 0; k < N_ISAS; k++)
        if (ds_matmul_force_isa(k_isas[k])) return;
}

// ---------------------------------------------------------------------------------------------
// ds_matmul against the reference

static const int k_ns[] = {1, 2, 3, 4, 5, 7, 8, 9, 17};
static const int k_rows[] = {1, 3, 33};

static void run_type(ds_dtype type, const int *cols_list, int n_cols) {
    ds_set_threads(1);
    int n_isas = 0;
    for (int is = 0; is < N_ISAS; is++) {
        if (!force_isa_or_skip(k_isas[is])) {
            print_message("(isa %s not supported here: skipped)\n", k_isas[is]);
            continue;
        }
        n_isas++;
        for (int ci = 0; ci < n_cols; ci++)
            for (size_t ri = 0; ri < sizeof k_rows / sizeof k_rows[0]; ri++) {
                test_weight tw;
                make_weight(&tw, type, k_rows[ri], cols_list[ci]);
                // Q8_0: f32 inputs, then the integer path (inputs rounded per block, as loaded GGUF runs)
                for (int round = 0; round <= (type == DS_Q8_0); round++) {
                    tw.w.round_inputs = round;
                    for (size_t ni = 0; ni < sizeof k_ns / sizeof k_ns[0]; ni++) {
                        float *x = make_x(k_ns[ni], cols_list[ci]);
                        check_matmul(&tw, x, k_ns[ni], "shapes"); // the default path for this n
                        ds_matmul_set_gemm_min_rows(k_ns[ni] > 1 ? 2 : 1 << 30); // and the other one
                        check_matmul(&tw, x, k_ns[ni], "shapes, other path");
                        ds_matmul_set_gemm_min_rows(0);
                        free(x);
                    }
                }
                free_weight(&tw);
            }
    }
    assert_true(n_isas >= 1); // scalar is always there
    restore_isa();
    ds_set_threads(0);
}

static const int k_cols[] = {1, 15, 16, 17, 64, 100, 257};
static const int k_cols_q8[] = {32, 64, 96, 256, 1056, 4128}; // up to several 1024-column segments

static void test_matmul_f32(void **state) { run_type(DS_F32, k_cols, 7); }
static void test_matmul_f16(void **state) { run_type(DS_F16, k_cols, 7); }
static void test_matmul_bf16(void **state) { run_type(DS_BF16, k_cols, 7); }
static void test_matmul_q8_0(void **state) { run_type(DS_Q8_0, k_cols_q8, 6); }

// The sgemm path with several tiles of widened BF16/F16 rows (the last one partial): tile rows are
// max(16, 2^18 / cols), so 16385 columns give tiles of 16 rows over 40 rows.
static void test_matmul_sgemm_tiles(void **state) {
    ds_matmul_set_gemm_min_rows(2); // force the sgemm path
    const ds_dtype types[] = {DS_BF16, DS_F16, DS_F32};
    for (int t = 0; t < 3; t++) {
        test_weight tw;
        make_weight(&tw, types[t], 40, 16385);
        if (types[t] == DS_F16) assert_int_equal(ds_matmul_scratch_floats(&tw.w), (size_t)16 * 16385);
        if (types[t] == DS_BF16) assert_int_equal(ds_matmul_scratch_floats(&tw.w), (size_t)24 * (16385 + 16) + 16);
        float *x = make_x(8, 16385);
        check_matmul(&tw, x, 8, "tiles");
        free(x);
        free_weight(&tw);
    }
    // A tile bigger than the matrix: the scratch is just rows x cols, or for BF16 at least the
    // multi-row kernel's 8 packed input rows (64-byte aligned).
    test_weight tw;
    make_weight(&tw, DS_F16, 5, 100);
    assert_int_equal(ds_matmul_scratch_floats(&tw.w), 500);
    free_weight(&tw);
    make_weight(&tw, DS_BF16, 5, 100);
    assert_int_equal(ds_matmul_scratch_floats(&tw.w), 24 * (100 + 16) + 16); // 24 packed rows, a line apart at most
    free_weight(&tw);
    make_weight(&tw, DS_F16, 1000, 1024);
    assert_int_equal(ds_matmul_scratch_floats(&tw.w), (size_t)256 * 1024);
    free_weight(&tw);
    ds_matmul_set_gemm_min_rows(0);
}

static void test_weight_bytes(void **state) {
    ds_weight w = {DS_F32, 3, 64, NULL};
    assert_int_equal(ds_weight_bytes(&w), 3 * 64 * 4);
    w.type = DS_F16;
    assert_int_equal(ds_weight_bytes(&w), 3 * 64 * 2);
    w.type = DS_BF16;
    assert_int_equal(ds_weight_bytes(&w), 3 * 64 * 2);
    w.type = DS_Q8_0;
    assert_int_equal(ds_weight_bytes(&w), 3 * 2 * 34);
    assert_int_equal(sizeof(q8_block), 34);
}

static void test_force_isa(void **state) {
    assert_int_equal(ds_matmul_force_isa("nonsense"), 0);
    assert_int_equal(ds_matmul_force_isa(""), 0);
    assert_int_equal(ds_matmul_force_isa("scalar"), 1);
    assert_string_equal(ds_matmul_isa(), "scalar");
    // A failed force leaves the current choice alone.
    assert_int_equal(ds_matmul_force_isa("avx1024"), 0);
    assert_string_equal(ds_matmul_isa(), "scalar");
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl"))
        assert_int_equal(ds_matmul_force_isa("avx512"), 1);
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && ds_cpu_has_f16c())
        assert_int_equal(ds_matmul_force_isa("avx2"), 1);
    restore_isa();
}

// ---------------------------------------------------------------------------------------------
// Conversions: ds_weight_row_f32 and the kernels read the stored bits as half.h defines them.

static void test_known_values(void **state) {
    assert_true(ds_bf16_to_f32(0x3F80) == 1.0f);
    assert_true(ds_bf16_to_f32(0xBF80) == -1.0f);
    assert_true(ds_bf16_to_f32(0x4049) == bits_f32(0x40490000u));
    assert_true(isinf(ds_bf16_to_f32(0x7F80)) && ds_bf16_to_f32(0x7F80) > 0);
    assert_true(isinf(ds_bf16_to_f32(0xFF80)) && ds_bf16_to_f32(0xFF80) < 0);
    assert_true(isnan(ds_bf16_to_f32(0x7FC0)));
    assert_true(ds_bf16_to_f32(0x0001) == bits_f32(0x00010000u)); // f32 subnormal

    assert_true(ds_f16_to_f32(0x3C00) == 1.0f);
    assert_true(ds_f16_to_f32(0xC000) == -2.0f);
    assert_true(ds_f16_to_f32(0x3555) == bits_f32(0x3EAAA000u)); // 0.333251953125
    assert_true(ds_f16_to_f32(0x0001) == ldexpf(1.0f, -24));    // smallest subnormal
    assert_true(ds_f16_to_f32(0x8001) == -ldexpf(1.0f, -24));
    assert_true(ds_f16_to_f32(0x0200) == ldexpf(1.0f, -15));
    assert_true(ds_f16_to_f32(0x03FF) == 1023.0f * ldexpf(1.0f, -24)); // largest subnormal
    assert_true(ds_f16_to_f32(0x0400) == ldexpf(1.0f, -14));          // smallest normal
    assert_true(ds_f16_to_f32(0x7BFF) == 65504.0f);
    assert_true(ds_f16_to_f32(0x0000) == 0.0f && !signbit(ds_f16_to_f32(0x0000)));
    assert_true(ds_f16_to_f32(0x8000) == 0.0f && signbit(ds_f16_to_f32(0x8000)));
    assert_true(isinf(ds_f16_to_f32(0x7C00)) && ds_f16_to_f32(0x7C00) > 0);
    assert_true(isinf(ds_f16_to_f32(0xFC00)) && ds_f16_to_f32(0xFC00) < 0);
    assert_true(isnan(ds_f16_to_f32(0x7E00)));
    assert_true(isnan(ds_f16_to_f32(0x7C01)));
    assert_true(isnan(ds_f16_to_f32(0xFFFF)));

    // ds_weight_row_f32 gives the same values.
    const uint16_t f16[] = {0x3C00, 0x0001, 0x8001, 0x03FF, 0x0400, 0x7BFF, 0x8000, 0x7C00, 0xFC00, 0x7E00, 0x3555};
    const int nf = sizeof f16 / sizeof f16[0];
    float out[32];
    ds_weight w = {DS_F16, 1, nf, f16};
    ds_weight_row_f32(&w, 0, out);
    for (int k = 0; k < nf; k++) {
        const float want = ds_f16_to_f32(f16[k]);
        if (isnan(want)) assert_true(isnan(out[k]));
        else assert_true(f32_bits(out[k]) == f32_bits(want));
    }
    assert_true(out[0] == 1.0f && out[1] == ldexpf(1.0f, -24));
    const uint16_t bf16[] = {0x3F80, 0xBF80, 0x7F80, 0xFF80, 0x7FC0, 0x0001, 0x8000, 0x4049};
    const int nb = sizeof bf16 / sizeof bf16[0];
    w = (ds_weight){DS_BF16, 1, nb, bf16};
    ds_weight_row_f32(&w, 0, out);
    for (int k = 0; k < nb; k++) {
        const float want = ds_bf16_to_f32(bf16[k]);
        if (isnan(want)) assert_true(isnan(out[k]));
        else assert_true(f32_bits(out[k]) == f32_bits(want));
    }
    assert_true(out[0] == 1.0f);
    // Rows past the first, and several rows at once.
    const float f32[6] = {1, 2, 3, 4, 5, 6};
    w = (ds_weight){DS_F32, 3, 2, f32};
    ds_weight_row_f32(&w, 2, out);
    assert_true(out[0] == 5 && out[1] == 6);
    ds_weight_rows_f32(&w, 1, 2, out);
    assert_true(out[0] == 3 && out[1] == 4 && out[2] == 5 && out[3] == 6);
    // Q8_0: scale (f16) times quant.
    q8_block qb[2];
    for (int b = 0; b < 2; b++) {
        qb[b].d = b ? 0x3800 /* 0.5 */ : 0x0001 /* 2^-24 */;
        for (int j = 0; j < 32; j++) qb[b].qs[j] = (int8_t)(j * (b ? -4 : 4) + (b ? 3 : -127));
    }
    w = (ds_weight){DS_Q8_0, 2, 32, qb};
    ds_weight_row_f32(&w, 0, out);
    float row[32];
    ds_weight_row_f32(&w, 1, row);
    for (int j = 0; j < 32; j++) {
        assert_true(out[j] == ldexpf((float)qb[0].qs[j], -24));
        assert_true(row[j] == 0.5f * (float)qb[1].qs[j]);
    }
}

// Every finite F16 and BF16 value (subnormals, extremes, -0) goes through every kernel exactly:
// with a one-hot x, y = w_j.
static void test_kernel_conversions_exact(void **state) {
    ds_set_threads(1);
    const int cols = 40; // vector part and a tail for every ISA
    for (int type = 0; type < 2; type++) {
        // Rows of finite bit patterns: a spread over all 16-bit values plus the special ones.
        enum { ROWS = 64 };
        uint16_t *wd = xmalloc((size_t)ROWS * cols * 2);
        for (int k = 0; k < ROWS * cols; k++) {
            uint16_t h = (uint16_t)(k * 1637u + 11u);
            if (k % 7 == 0) h = (uint16_t)(k % 1024); // f16 subnormals / tiny bf16
            if (k % 11 == 0) h = type == 0 ? 0x7BFF : 0x7F7F; // largest finite
            if (k % 13 == 0) h = 0x8000;
            // Keep finite: replace inf/NaN exponents.
            if (type == 0 && (h & 0x7C00) == 0x7C00) h &= 0xBFFF;
            if (type == 1 && (h & 0x7F80) == 0x7F80) h &= 0xBFFF;
            wd[k] = h;
        }
        ds_weight w = {type == 0 ? DS_F16 : DS_BF16, ROWS, cols, wd};
        for (int is = 0; is < N_ISAS; is++) {
            if (!force_isa_or_skip(k_isas[is])) continue;
            for (int n = 1; n <= 4; n += 3) { // the single-row and the multi-row kernel
                float *x = xmalloc((size_t)n * cols * 4), *y = xmalloc((size_t)n * ROWS * 4);
                for (int j0 = 0; j0 < cols; j0 += n) {
                    memset(x, 0, (size_t)n * cols * 4);
                    for (int i = 0; i < n; i++) x[(size_t)i * cols + (j0 + i) % cols] = 1.0f;
                    ds_matmul(y, x, &w, n, NULL);
                    for (int i = 0; i < n; i++)
                        for (int r = 0; r < ROWS; r++) {
                            const uint16_t h = wd[(size_t)r * cols + (j0 + i) % cols];
                            const float want = type == 0 ? ds_f16_to_f32(h) : ds_bf16_to_f32(h);
                            const float got = y[(size_t)i * ROWS + r];
                            if (got != want)
                                print_error("isa %s type %d n %d: 0x%04x -> %.9g, want %.9g\n", k_isas[is], type, n,
                                            h, (double)got, (double)want);
                            assert_true(got == want);
                        }
                }
                free(x);
                free(y);
            }
        }
        free(wd);
    }
    restore_isa();
    ds_set_threads(0);
}

// ds_f16_to_f32 for all 65536 inputs against the definition, and f16 -> f32 -> f16 round trips.
static void test_f16_exhaustive(void **state) {
    for (uint32_t h = 0; h < 65536; h++) {
        const int s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
        const float got = ds_f16_to_f32((uint16_t)h);
        if (e == 31) {
            if (m) assert_true(isnan(got));
            else assert_true(isinf(got) && (got < 0) == s);
            assert_int_equal(ds_f32_to_f16(got) & 0xFC00, h & 0xFC00);
            if (m) assert_true((ds_f32_to_f16(got) & 0x3FF) != 0); // NaN stays NaN
            continue;
        }
        double v = e == 0 ? ldexp(m, -24) : ldexp(1024 + m, e - 25);
        if (s) v = -v;
        assert_true((double)got == v);
        assert_int_equal(signbit(got) != 0, s);
        assert_int_equal(ds_f32_to_f16(got), h);
    }
    for (uint32_t b = 0; b < 65536; b++) {
        const float f = ds_bf16_to_f32((uint16_t)b);
        assert_true(f32_bits(f) == b << 16);
        if (!isnan(f)) assert_int_equal(ds_f32_to_bf16(f), b);
        else assert_true(isnan(ds_bf16_to_f32(ds_f32_to_bf16(f))));
    }
}

static void test_bf16_rounding(void **state) {
    struct {
        uint32_t in;
        uint16_t out;
    } cases[] = {
        {0x3F800000u, 0x3F80}, // 1.0
        {0x3F808000u, 0x3F80}, // halfway, even below: stays
        {0x3F818000u, 0x3F82}, // halfway, odd below: rounds up to even
        {0x3F808001u, 0x3F81}, // above halfway
        {0x3F807FFFu, 0x3F80}, // below halfway
        {0xBF808000u, 0xBF80}, // negative halfway
        {0xBF818000u, 0xBF82},
        {0x3F80FFFFu, 0x3F81},
        {0x3FFF8000u, 0x4000}, // carry into the exponent
        {0x7F7FFFFFu, 0x7F80}, // FLT_MAX rounds to infinity
        {0x7F7F7FFFu, 0x7F7F},
        {0x7F800000u, 0x7F80}, // inf
        {0xFF800000u, 0xFF80}, // -inf
        {0x00000000u, 0x0000},
        {0x80000000u, 0x8000}, // -0
        {0x00008000u, 0x0000}, // subnormal halfway to even (0)
        {0x00018000u, 0x0002}, // subnormal halfway to even (2)
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        const uint16_t got = ds_f32_to_bf16(bits_f32(cases[k].in));
        if (got != cases[k].out) print_error("0x%08x -> 0x%04x, want 0x%04x\n", cases[k].in, got, cases[k].out);
        assert_int_equal(got, cases[k].out);
    }
    // NaNs stay NaN (never become infinity), even those whose payload is only in the low bits.
    const uint32_t nans[] = {0x7F800001u, 0xFF800001u, 0x7FC00000u, 0x7FFFFFFFu, 0x7F80FFFFu};
    for (size_t k = 0; k < sizeof nans / sizeof nans[0]; k++)
        assert_true(isnan(ds_bf16_to_f32(ds_f32_to_bf16(bits_f32(nans[k])))));
    // Random floats: the result is the nearest bf16 (ties to even).
    for (int k = 0; k < 200000; k++) {
        const uint32_t u = (uint32_t)rnd_u64();
        const float f = bits_f32(u);
        if (isnan(f) || isinf(f)) continue;
        const uint16_t h = ds_f32_to_bf16(f);
        // The two candidates: truncated, and the next bf16 away from zero (infinity counts as 2^128,
        // as IEEE rounding does).
        const uint32_t lo = u & 0xFFFF0000u, hi = lo + 0x10000u;
        const double vlo = bits_f32(lo);
        const double vhi = (hi & 0x7FFFFFFFu) == 0x7F800000u ? copysign(ldexp(1, 128), f) : bits_f32(hi);
        const double dlo = fabs((double)f - vlo), dhi = fabs(vhi - (double)f);
        const uint16_t want = dlo < dhi   ? (uint16_t)(lo >> 16)
                              : dhi < dlo ? (uint16_t)(hi >> 16)
                                          : (uint16_t)(((lo >> 16) & 1) ? hi >> 16 : lo >> 16);
        if (h != want) print_error("0x%08x -> 0x%04x, want 0x%04x\n", u, h, want);
        assert_int_equal(h, want);
    }
}

static void test_f16_rounding(void **state) {
    struct {
        float in;
        uint16_t out;
    } cases[] = {
        {1.0f, 0x3C00},
        {65504.0f, 0x7BFF},
        {65519.0f, 0x7BFF},            // below halfway to 65536
        {65520.0f, 0x7C00},            // halfway: ties to even = infinity
        {1e10f, 0x7C00},
        {-1e10f, 0xFC00},
        {0x1p-24f, 0x0001},
        {0x1p-25f, 0x0000},            // halfway between 0 and 2^-24: even is 0
        {0x1.8p-25f, 0x0001},
        {0x3p-25f, 0x0002},            // 1.5 x 2^-24: halfway between 1 and 2: even is 2
        {0x5p-25f, 0x0002},            // 2.5 x 2^-24 -> 2
        {0x1p-26f, 0x0000},
        {0x1p-14f, 0x0400},            // smallest normal
        {0x1.ff8p-15f, 0x03FF},        // largest subnormal
        {0x1.ffcp-15f, 0x0400},        // largest subnormal + half ulp: ties to even, the smallest normal
        {0x1.ffbp-15f, 0x03FF},
        {1.0f + 0x1p-11f, 0x3C00},     // halfway, even below
        {1.0f + 0x3p-11f, 0x3C02},     // halfway, odd below
        {-0.0f, 0x8000},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        const uint16_t got = ds_f32_to_f16(cases[k].in);
        if (got != cases[k].out) print_error("%a -> 0x%04x, want 0x%04x\n", (double)cases[k].in, got, cases[k].out);
        assert_int_equal(got, cases[k].out);
    }
    assert_true(isnan(ds_f16_to_f32(ds_f32_to_f16(NAN))));
    assert_true(isnan(ds_f16_to_f32(ds_f32_to_f16(bits_f32(0x7F800001u)))));
    assert_int_equal(ds_f32_to_f16(INFINITY), 0x7C00);
}

// Hardware F16C as a second opinion on both directions (when the CPU has it).
__attribute__((target("f16c"))) static uint16_t hw_f32_to_f16(float f) {
    return (uint16_t)_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT);
}
__attribute__((target("f16c"))) static float hw_f16_to_f32(uint16_t h) { return _cvtsh_ss(h); }

static void test_f16_vs_hardware(void **state) {
    __builtin_cpu_init();
    if (!ds_cpu_has_f16c()) {
        print_message("(no F16C: skipped)\n");
        return;
    }
    for (uint32_t h = 0; h < 65536; h++) {
        const float a = ds_f16_to_f32((uint16_t)h), b = hw_f16_to_f32((uint16_t)h);
        if (isnan(b)) assert_true(isnan(a));
        else assert_true(f32_bits(a) == f32_bits(b));
    }
    for (int k = 0; k < 1000000; k++) {
        // Random bits, biased to the f16 range (exponents around 2^-30 .. 2^17).
        uint32_t u = (uint32_t)rnd_u64();
        if (k & 1) u = (u & 0x807FFFFFu) | ((uint32_t)(97 + rnd_u64() % 48) << 23);
        const float f = bits_f32(u);
        const uint16_t a = ds_f32_to_f16(f), b = hw_f32_to_f16(f);
        if (isnan(f)) {
            assert_true((a & 0x7C00) == 0x7C00 && (a & 0x3FF));
            continue;
        }
        if (a != b) print_error("%a: 0x%04x, hardware 0x%04x\n", (double)f, a, b);
        assert_int_equal(a, b);
    }
}

// ds_f32_to_f16_n (the KV cache's rounding of a row, on F16C where the CPU has it) gives
// ds_f32_to_f16's bits for every value but NaN (which stays NaN), at every length and offset.
static void test_f16_rows(void **state) {
    enum { N = 4096 };
    float *f = malloc(sizeof(float) * N);
    uint16_t *h = malloc(sizeof(uint16_t) * N);
    for (int k = 0; k < N; k++) {
        uint32_t u = (uint32_t)rnd_u64();
        if (k % 3) u = (u & 0x807FFFFFu) | ((uint32_t)(97 + rnd_u64() % 48) << 23); // around the half range
        f[k] = bits_f32(u);
    }
    f[0] = INFINITY, f[1] = -0.0f, f[2] = 65520.0f, f[3] = 65519.99f, f[4] = 0x1p-25f, f[5] = NAN;
    for (int n = 0; n <= 40; n++)
        for (int off = 0; off < 3; off++) {
            ds_f32_to_f16_n(h, f + off, n);
            for (int i = 0; i < n; i++) {
                if (isnan(f[off + i])) assert_true((h[i] & 0x7C00) == 0x7C00 && (h[i] & 0x3FF));
                else assert_int_equal(h[i], ds_f32_to_f16(f[off + i]));
            }
        }
    ds_f32_to_f16_n(h, f, N);
    for (int i = 0; i < N; i++)
        if (!isnan(f[i])) assert_int_equal(h[i], ds_f32_to_f16(f[i]));
    free(f);
    free(h);
}

// ---------------------------------------------------------------------------------------------
// Threads: every path (our kernels and sgemm) gives bitwise the results of one thread on every
// thread count (the work is split by shape alone, each output computed by one thread with the same
// code, OpenBLAS single-threaded inside each item), and matches the reference.
static void test_threads(void **state) {
    const ds_dtype types[] = {DS_F32, DS_F16, DS_BF16, DS_Q8_0, DS_Q8_0}; // the last: the integer path
    const int rows_list[] = {512, 515, 4099};
    const int cols = 1024;
    const int ns[] = {1, 3, 4, 5, 9, 30};
    for (int t = 0; t < 5; t++)
        for (int ri = 0; ri < 3; ri++) {
            test_weight tw;
            make_weight(&tw, types[t], rows_list[ri], cols);
            tw.w.round_inputs = t == 4;
            const size_t nsc = ds_matmul_scratch_floats(&tw.w) * (size_t)ds_threads_max();
            float *scratch = nsc ? xmalloc(nsc * 4) : NULL;
            for (int ni = 0; ni < 6; ni++) {
                const int n = ns[ni], rows = rows_list[ri];
                float *x = make_x(n, cols);
                const size_t ny = (size_t)n * rows;
                float *y1 = xmalloc(ny * 4), *y2 = xmalloc(ny * 4);
                for (int is = 0; is < N_ISAS; is++) {
                    if (!force_isa_or_skip(k_isas[is])) continue;
                    ds_set_threads(1);
                    ds_matmul(y1, x, &tw.w, n, scratch);
                    for (int nt = 2; nt <= ds_threads_max(); nt++)
                        for (int rep = 0; rep < 3; rep++) {
                            ds_set_threads(nt);
                            assert_int_equal(ds_threads(), nt);
                            for (size_t k = 0; k < ny; k++) y2[k] = NAN;
                            ds_matmul(y2, x, &tw.w, n, scratch);
                            if (memcmp(y1, y2, ny * 4) != 0)
                                print_error("isa %s type %s n %d rows %d threads %d: differs from 1 thread\n",
                                            k_isas[is], ds_dtype_name(types[t]), n, rows, nt);
                            assert_memory_equal(y1, y2, ny * 4);
                        }
                    // And both agree with the reference.
                    if (rows < 1000) check_matmul(&tw, x, n, "threads");
                    // sgemm and the f32-input Q8_0 kernel do not depend on the ISA.
                    if ((n >= 8 && t != 4) || t == 3) break;
                }
                free(x);
                free(y1);
                free(y2);
            }
            free(scratch);
            free_weight(&tw);
        }
    restore_isa();
    ds_set_threads(0);
}

// Batch invariance: the multi-row kernel computes every output element with arithmetic fixed by
// the number of columns alone, so a row of a batch is bitwise the row computed alone (greedy
// verification then equals decoding by construction). Shapes reach each loop order of
// matmul_isa.inc (input rows whole from L1, two passes over L2 panels, segments outer), row
// counts that leave remainders of the register blocks and several panels, and column tails.
static void test_rows_batch_invariant(void **state) {
    const ds_dtype types[] = {DS_F32, DS_F16, DS_BF16, DS_Q8_0, DS_Q8_0}; // the last: the integer path
    const int cols_list[] = {100, 1500, 2065, 4100};
    const int cols_q8[] = {96, 1024, 1504, 4128}; // Q8_0 rows are whole blocks of 32
    const int rows_list[] = {19, 203};
    const int ns[] = {2, 3, 4, 5, 6, 7, 8, 9, 12, 17, 23};
    ds_matmul_set_gemm_min_rows(1 << 30); // the kernel at every n
    for (int is = 0; is < N_ISAS; is++) {
        if (!force_isa_or_skip(k_isas[is])) continue;
        for (int t = 0; t < 5; t++)
            for (int ci = 0; ci < 4; ci++)
                for (int ri = 0; ri < 2; ri++) {
                    const int rows = rows_list[ri], cols = types[t] == DS_Q8_0 ? cols_q8[ci] : cols_list[ci];
                    test_weight tw;
                    make_weight(&tw, types[t], rows, cols);
                    tw.w.round_inputs = t == 4;
                    const size_t nsc = ds_matmul_scratch_floats(&tw.w) * (size_t)ds_threads_max();
                    float *scratch = nsc ? xmalloc(nsc * 4) : NULL;
                    float *x = make_x(23, cols), *y = xmalloc((size_t)23 * rows * 4), *y1 = xmalloc((size_t)rows * 4);
                    float *y2 = xmalloc((size_t)23 * rows * 4);
                    for (int ni = 0; ni < (int)(sizeof ns / sizeof ns[0]); ni++) {
                        const int n = ns[ni];
                        ds_matmul(y, x, &tw.w, n, scratch);
                        // Without scratch BF16 takes the segments-outer order: the same numbers.
                        ds_matmul(y2, x, &tw.w, n, NULL);
                        assert_memory_equal(y, y2, (size_t)n * rows * 4);
                        for (int i = 0; i < n; i++) {
                            ds_matmul(y1, x + (size_t)i * cols, &tw.w, 1, scratch);
                            if (memcmp(y1, y + (size_t)i * rows, (size_t)rows * 4) != 0)
                                print_error("isa %s type %s%s rows %d cols %d: row %d of %d differs from it alone\n",
                                            k_isas[is], ds_dtype_name(types[t]), t == 4 ? " (int8 inputs)" : "", rows,
                                            cols, i, n);
                            assert_memory_equal(y1, y + (size_t)i * rows, (size_t)rows * 4);
                        }
                    }
                    free(x);
                    free(y);
                    free(y1);
                    free(y2);
                    free(scratch);
                    free_weight(&tw);
                }
    }
    ds_matmul_set_gemm_min_rows(0);
    restore_isa();
}

// OpenBLAS runs single-threaded inside ds_matmul's slices (matmul.h), from the very first product,
// even when it takes the sgemm path and when an ISA was forced before any product ran. Must run
// first in the process (before anything else initializes matmul.c).
static void test_openblas_single_threaded_first(void **state) {
    omp_set_num_threads(2);
    assert_int_equal(ds_matmul_force_isa("scalar"), 1);
    ds_matmul_set_gemm_min_rows(8);
    test_weight tw;
    make_weight(&tw, DS_BF16, 64, 64);
    float *x = make_x(8, 64); // 8 rows: the sgemm path
    check_matmul(&tw, x, 8, "first");
    free(x);
    free_weight(&tw);
    if (openblas_get_num_threads() != 1)
        print_error("OpenBLAS runs %d threads after the first ds_matmul\n", openblas_get_num_threads());
    assert_int_equal(openblas_get_num_threads(), 1);
    ds_matmul_set_gemm_min_rows(0);
    restore_isa();
    omp_set_num_threads(omp_get_num_procs());
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_openblas_single_threaded_first), // first: see above
        cmocka_unit_test(test_known_values),
        cmocka_unit_test(test_rows_batch_invariant),
        cmocka_unit_test(test_f16_exhaustive),
        cmocka_unit_test(test_bf16_rounding),
        cmocka_unit_test(test_f16_rounding),
        cmocka_unit_test(test_f16_vs_hardware),
        cmocka_unit_test(test_f16_rows),
        cmocka_unit_test(test_kernel_conversions_exact),
        cmocka_unit_test(test_weight_bytes),
        cmocka_unit_test(test_force_isa),
        cmocka_unit_test(test_matmul_f32),
        cmocka_unit_test(test_matmul_f16),
        cmocka_unit_test(test_matmul_bf16),
        cmocka_unit_test(test_matmul_q8_0),
        cmocka_unit_test(test_matmul_sgemm_tiles),
        cmocka_unit_test(test_threads),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
