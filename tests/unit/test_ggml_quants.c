// GGUF block types (kernels/ggml_quants.h, ggml_qdot.c): the integer kernels of every type on every
// instruction set the machine has, against the dequantized weights (bit-exact with ggml: see
// tests/reference/test_ggml_quants.py) times the input rounded by an independent reference rounding
// (round_ref.h), summed in double; batch invariance; VNNI = AVX2 (32-element types) or = scalar
// (K-quants) bitwise; adversarial blocks (zero, -0.0, 65504, subnormal and NaN scales, all-0xFF quants) and inputs (zero, NaN); sizes and rows.
#include <limits.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "base/threads.h"
#include "kernels/ggml_quants.h"
#include "kernels/half.h"
#include "kernels/matmul.h"
#include "kernels/qmatmul.h"
#include "round_ref.h"

static const ds_dtype TYPES[] = {DS_Q4_0, DS_Q4_1, DS_Q5_0, DS_Q5_1, DS_IQ4_NL, DS_Q2_K,
                                 DS_Q3_K, DS_Q4_K, DS_Q5_K, DS_Q6_K, DS_IQ4_XS};
#define NTYPES (sizeof TYPES / sizeof *TYPES)
static const char *ISAS[] = {"avx512", "avx2", "scalar"};
static void restore_isa(void) { // the best path again
    for (int k = 0; k < 3; k++)
        if (ds_matmul_force_isa(ISAS[k])) return;
}

static uint64_t g_rng = 88172645463325252ull;
static uint32_t rnd(void) {
    g_rng ^= g_rng << 13, g_rng ^= g_rng >> 7, g_rng ^= g_rng << 17;
    return (uint32_t)(g_rng >> 16);
}
static float nrand(void) { // roughly N(0, 1)
    float s = 0;
    for (int i = 0; i < 4; i++) s += (float)(rnd() % 65536) / 65536.0f - 0.5f;
    return s * 1.7f;
}

// Byte offsets of a block's f16 scale fields: the scale d and (0 = none) the min / dmin.
static void f16_fields(ds_dtype t, int *d, int *m) {
    *m = -1;
    switch (t) {
    case DS_Q4_1: case DS_Q5_1: case DS_Q4_K: case DS_Q5_K: *d = 0, *m = 2; break;
    case DS_Q2_K: *d = 80, *m = 82; break;
    case DS_Q3_K: *d = 108; break;
    case DS_Q6_K: *d = 208; break;
    default: *d = 0;
    }
}
static void put_f16(uint8_t *p, uint16_t h) { memcpy(p, &h, 2); }

// A (rows, cols) weight of type t: random quant bytes, finite scales of a realistic size (K-quants
// ~ 1/64 per unit of sub-block scale); `special` >= 0 sets every block's scale to that f16 value.
typedef struct {
    ds_weight w;
    uint8_t *data;
    float *deq; // (rows, cols) ds_weight_row_f32
} gmat;

static void gmat_make(gmat *m, ds_dtype t, int rows, int cols, int special, int ff) {
    const int qk = ds_ggml_block_elems(t);
    const size_t bb = ds_ggml_block_bytes(t), nb = (size_t)rows * (size_t)(cols / qk);
    m->data = malloc(nb * bb);
    for (size_t i = 0; i < nb * bb; i++) m->data[i] = ff ? 0xFF : (uint8_t)rnd();
    int od, om;
    f16_fields(t, &od, &om);
    for (size_t b = 0; b < nb; b++) {
        uint8_t *p = m->data + b * bb;
        const float unit = qk == 32 ? 0.05f : 0.002f;
        put_f16(p + od, special >= 0 ? (uint16_t)special : ds_f32_to_f16(unit * nrand()));
        if (om >= 0) put_f16(p + om, ds_f32_to_f16(unit * nrand()));
    }
    memset(&m->w, 0, sizeof m->w);
    m->w.type = t, m->w.rows = rows, m->w.cols = cols, m->w.data = m->data;
    m->deq = malloc(sizeof(float) * (size_t)rows * (size_t)cols);
    for (int r = 0; r < rows; r++) ds_weight_row_f32(&m->w, r, m->deq + (size_t)r * cols);
}
static void gmat_free(gmat *m) {
    free(m->data);
    free(m->deq);
}

// The reference: dequantized weights times the reference-rounded input, in double. Tolerance: the
// kernel's float work per output is one product d_w·d_x and one FMA per block (or two with mins), the
// int32 -> float conversion of lane sums (exact below 2^24), and 8 lane sums: at most nblk·3 + 8
// roundings of relative size 2^-24 of partial sums bounded by S = Σ (|w_i| + |min term_i|)·|x̂_i|;
// the dequantized weights themselves are rounded once or twice (ggml's d·sc, then ·q - m), and for
// types with mins |min term| <= 2|w| + |d·sc·q| (bounded by 4·Σ|w||x̂| on these random blocks, whose
// scales and mins are of the same size). So tol = 4·(3·nblk + 12)·2^-24·Σ|w_i||x̂_i| (+ tiny).
static void check_product(const gmat *m, const float *x, int n, const float *y, const char *what) {
    const int rows = m->w.rows, cols = m->w.cols, qk = ds_ggml_block_elems(m->w.type), gs = qk;
    float *xh = malloc(sizeof(float) * (size_t)cols);
    for (int i = 0; i < n; i++) {
        round_input_ref(x + (size_t)i * cols, cols, gs, xh);
        for (int r = 0; r < rows; r++) {
            const float *wr = m->deq + (size_t)r * cols;
            double ref = 0, mag = 0;
            for (int j = 0; j < cols; j++) ref += (double)wr[j] * xh[j], mag += fabs((double)wr[j] * xh[j]);
            const double tol = 4.0 * (3.0 * (cols / qk) + 12.0) * ldexp(1.0, -24) * mag + 1e-30;
            const float got = y[(size_t)i * rows + r];
            if (isnan(ref) ? !isnan(got) : !(fabs(got - ref) <= tol)) {
                print_error("%s %s: n %d row %d of input %d: %.9g, reference %.9g (tol %.3g)\n", what,
                            ds_dtype_name(m->w.type), n, r, i, got, ref, tol);
                fail();
            }
        }
    }
    free(xh);
}

static void fill_x(float *x, size_t n) {
    for (size_t i = 0; i < n; i++) x[i] = nrand();
}

// Every type x ISA x rows 1..9 and 16, with 512 (2 super-blocks, 16 blocks) and 1280 columns.
static void test_kernels(void **state) {
    (void)state;
    const int ns[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 16};
    const int cols_list[] = {512, 1280};
    int tested = 0;
    for (size_t k = 0; k < 3; k++) {
        if (!ds_matmul_force_isa(ISAS[k])) continue;
        tested++;
        for (size_t t = 0; t < NTYPES; t++)
            for (int c = 0; c < 2; c++) {
                gmat m;
                gmat_make(&m, TYPES[t], 19, cols_list[c], -1, 0);
                float *x = malloc(sizeof(float) * 16 * (size_t)m.w.cols), *y = malloc(sizeof(float) * 16 * 19);
                fill_x(x, 16 * (size_t)m.w.cols);
                for (size_t i = 0; i < sizeof ns / sizeof *ns; i++) {
                    ds_matmul_ex(y, x, &m.w, ns[i], NULL, INT_MAX);
                    check_product(&m, x, ns[i], y, ISAS[k]);
                }
                free(x);
                free(y);
                gmat_free(&m);
            }
    }
    assert_true(tested >= 1);
    restore_isa();
}

// Row i of an n-row call is bitwise row i alone (every type and ISA, threaded shapes included).
// Across ISAs: for the 32-element types, the VNNI and AVX2 kernels agree bitwise (same integers,
// same float operations, lane-wise). For the K-quants and IQ4_XS, the VNNI kernel sums each
// super-block's integers exactly to one int32 and then does the scalar kernel's float operations in
// the scalar kernel's order (ggml_qdot.c), so it equals the scalar kernel bitwise; the AVX2 kernel
// accumulates floats lane-wise (another order: its accuracy is test_kernels' tolerance check).
// 2560 columns: 10 super-blocks, so the one-row VNNI pass's group of 8 and its partial last group
// both run (a bug in either shows as a difference from the scalar kernel).
static void test_batch_invariance(void **state) {
    (void)state;
    const int rows = 300, cols = 2560, nmax = 16;
    for (size_t t = 0; t < NTYPES; t++) {
        gmat m;
        gmat_make(&m, TYPES[t], rows, cols, -1, 0);
        float *x = malloc(sizeof(float) * nmax * cols), *y = malloc(sizeof(float) * nmax * rows);
        float *y1 = malloc(sizeof(float) * rows), *yv = malloc(sizeof(float) * nmax * rows);
        fill_x(x, (size_t)nmax * cols);
        int have_vnni = 0;
        const int kq = ds_ggml_block_elems(TYPES[t]) == 256;
        for (size_t k = 0; k < 3; k++) {
            if (!ds_matmul_force_isa(ISAS[k])) continue;
            const int ns[] = {2, 5, 8, 9, 16};
            for (size_t ni = 0; ni < sizeof ns / sizeof *ns; ni++) {
                ds_matmul_ex(y, x, &m.w, ns[ni], NULL, INT_MAX);
                for (int i = 0; i < ns[ni]; i++) {
                    ds_matmul_ex(y1, x + (size_t)i * cols, &m.w, 1, NULL, INT_MAX);
                    if (memcmp(y1, y + (size_t)i * rows, sizeof(float) * rows)) {
                        print_error("%s %s: row %d of %d differs from it alone\n", ISAS[k], ds_dtype_name(TYPES[t]), i,
                                    ns[ni]);
                        fail();
                    }
                }
            }
            ds_matmul_ex(y, x, &m.w, nmax, NULL, INT_MAX);
            if (k == 0) memcpy(yv, y, sizeof(float) * nmax * rows), have_vnni = __builtin_cpu_supports("avx512vnni");
            if (k == (kq ? 2 : 1) && have_vnni && memcmp(yv, y, sizeof(float) * nmax * rows)) {
                print_error("%s: the avx512 (VNNI) and %s kernels differ\n", ds_dtype_name(TYPES[t]), ISAS[k]);
                fail();
            }
        }
        free(x), free(y), free(y1), free(yv);
        gmat_free(&m);
    }
    restore_isa();
}

// Several rows of Q4_K / Q5_K on VNNI take the rows-interleaved layout (DS_QX_R8) and
// its kernel: bitwise the one-row layouts' kernel (ds_ggq_allow_r8(0)) and the scalar one. 4352
// columns (17 super-blocks) take its column tiles (16 + 1), 71 weight rows its row groups of 32 (and
// a partial one), 13 input rows a full block of 8 and a padded one (Q4_K) or the one-row layout's
// kernel for the 5 left (Q5_K), 9 input rows 8 + 1; the scratch is misaligned by 4 bytes (the packed
// input aligns itself inside it).
static void test_rows_interleaved(void **state) {
    (void)state;
    const ds_dtype types[] = {DS_Q4_K, DS_Q5_K, DS_Q6_K}; // Q6_K: kz_blk's tiles (no DS_QX_R8)
    const int rows = 71, cols = 4352, nmax = 13;
    if (!ds_matmul_force_isa("avx512") || strcmp(ds_matmul_isa(), "avx512") || !__builtin_cpu_supports("avx512vnni")) {
        print_message("skipped: DS_QX_R8 needs AVX512-VNNI, which this CPU lacks\n");
        restore_isa();
        return;
    }
    float *x = malloc(sizeof(float) * nmax * cols), *y[3];
    for (int v = 0; v < 3; v++) y[v] = malloc(sizeof(float) * nmax * rows);
    fill_x(x, (size_t)nmax * cols);
    for (size_t tc = 0; tc < 3 * sizeof types / sizeof *types; tc++) {
        // the second pass: every quant bit set (the largest values, 15 / 31) against input rows of
        // one value (every r = 127): the largest lane sums, 30480 / 31496, just below 2^15; the
        // third: 9 rows of random input
        const int n = tc < 6 ? nmax : 9;
        const size_t t = tc % 3, ff = tc / 3 == 1;
        if (ff)
            for (size_t i = 0; i < (size_t)n * cols; i++) x[i] = 1.0f;
        if (tc == 6) fill_x(x, (size_t)nmax * cols);
        gmat m;
        gmat_make(&m, types[t], rows, cols, -1, (int)ff);
        assert_int_equal(ds_qirows_ch("vnni", &m.w, n), types[t] == DS_Q6_K ? 0 : DS_QX_R8);
        float *scratch = malloc(sizeof(float) * (ds_matmul_scratch_floats(&m.w) + 1));
        for (int v = 0; v < 3; v++) { // R8, the one-row layouts' kernel, scalar
            ds_matmul_force_isa(v == 2 ? "scalar" : "avx512");
            ds_ggq_allow_r8(v == 0);
            ds_matmul_ex(y[v], x, &m.w, n, scratch + 1, INT_MAX);
        }
        ds_ggq_allow_r8(1);
        for (int v = 1; v < 3; v++)
            if (memcmp(y[0], y[v], sizeof(float) * n * rows)) {
                print_error("%s: DS_QX_R8 differs from the %s kernel\n", ds_dtype_name(types[t]), v == 1 ? "kz_blk" : "scalar");
                fail();
            }
        free(scratch);
        gmat_free(&m);
    }
    for (int v = 0; v < 3; v++) free(y[v]);
    free(x);
    restore_isa();
}

// Adversarial blocks: every block's scale zero, -0.0, the largest f16, the smallest and the largest
// subnormal, NaN; all-0xFF quant bytes (max nibbles / bits, max sub-block scales); inputs with an
// all-zero block and with a NaN. NaN scales give NaN outputs (as ggml's dequantization: ggml_quants.h).
static void test_adversarial(void **state) {
    (void)state;
    const int specials[] = {0x0000, 0x8000, 0x7BFF, 0x0001, 0x03FF, 0x7E00};
    const int rows = 5, cols = 512, n = 3;
    float *x = malloc(sizeof(float) * n * cols), *y = malloc(sizeof(float) * n * rows);
    for (size_t k = 0; k < 3; k++) {
        if (!ds_matmul_force_isa(ISAS[k])) continue;
        for (size_t t = 0; t < NTYPES; t++)
            for (size_t s = 0; s < sizeof specials / sizeof *specials + 1; s++)
                for (int ff = 0; ff < 2; ff++) {
                    gmat m;
                    gmat_make(&m, TYPES[t], rows, cols, s < 6 ? specials[s] : -1, ff);
                    fill_x(x, (size_t)n * cols);
                    for (int j = 0; j < 256; j++) x[cols + j] = 0.0f; // input row 1: a zero block / super-block
                    ds_matmul_ex(y, x, &m.w, n, NULL, INT_MAX);
                    check_product(&m, x, n, y, ISAS[k]);
                    if (specials[s % 6] == 0x7E00 && s < 6)
                        for (int i = 0; i < n * rows; i++) assert_true(isnan(y[i]));
                    x[2 * cols + 7] = NAN; // input row 2 holds a NaN: its outputs are NaN
                    ds_matmul_ex(y, x, &m.w, n, NULL, INT_MAX);
                    for (int r = 0; r < rows; r++) assert_true(isnan(y[2 * rows + r]));
                    gmat_free(&m);
                }
    }
    free(x);
    free(y);
    restore_isa();
}

// Many rows (a prefill) stay on the integer kernels by default: 70 rows give bitwise the rows computed
// one at a time. A caller's min_rows still sends them to sgemm over dequantized tiles (f32 input, no
// rounding): the same products as the dequantized weights in double, to f32 sgemm accuracy.
static void test_gemm_path(void **state) {
    (void)state;
    const int rows = 40, cols = 768, n = 70;
    float *x = malloc(sizeof(float) * n * cols), *y = malloc(sizeof(float) * n * rows);
    fill_x(x, (size_t)n * cols);
    for (size_t t = 0; t < NTYPES; t++) {
        gmat m;
        gmat_make(&m, TYPES[t], rows, cols, -1, 0);
        float *scratch = malloc(sizeof(float) * ds_matmul_scratch_floats(&m.w) * (size_t)ds_threads());
        float one[40];
        ds_matmul_ex(y, x, &m.w, n, scratch, 0);
        for (int i = 0; i < n; i++) {
            ds_matmul_ex(one, x + (size_t)i * cols, &m.w, 1, scratch, 0);
            assert_memory_equal(one, y + (size_t)i * rows, sizeof one);
        }
        ds_matmul_ex(y, x, &m.w, n, scratch, 64);
        free(scratch);
        for (int i = 0; i < n; i++)
            for (int r = 0; r < rows; r++) {
                double ref = 0, mag = 0;
                for (int j = 0; j < cols; j++) {
                    const double p = (double)m.deq[(size_t)r * cols + j] * x[(size_t)i * cols + j];
                    ref += p, mag += fabs(p);
                }
                assert_true(fabs(y[(size_t)i * rows + r] - ref) <= 1e-5 * mag);
            }
        gmat_free(&m);
    }
    free(x), free(y);
}

// Sizes: bytes per row = cols/QK blocks, ds_weight_bytes, row selection.
static void test_sizes(void **state) {
    (void)state;
    const size_t want[] = {18, 20, 22, 24, 18, 84, 110, 144, 176, 210, 136};
    for (size_t t = 0; t < NTYPES; t++) {
        assert_int_equal(ds_ggml_block_bytes(TYPES[t]), want[t]);
        gmat m;
        gmat_make(&m, TYPES[t], 6, 512, -1, 0);
        const size_t rb = 512 / (size_t)ds_ggml_block_elems(TYPES[t]) * want[t];
        assert_int_equal(ds_weight_bytes(&m.w), 6 * rb);
        assert_int_equal(ds_weight_data_bytes(&m.w), 6 * rb);
        const int32_t ids[] = {4, 1};
        ds_weight sel;
        void *bufs[3];
        assert_int_equal(ds_weight_select_rows(&m.w, ids, 2, &sel, bufs), 0);
        float row[512];
        ds_weight_row_f32(&sel, 0, row);
        assert_memory_equal(row, m.deq + 4 * 512, sizeof row);
        ds_weight_row_f32(&sel, 1, row);
        assert_memory_equal(row, m.deq + 1 * 512, sizeof row);
        free(bufs[0]), free(bufs[1]), free(bufs[2]);
        gmat_free(&m);
    }
    assert_string_equal(ds_dtype_name(DS_Q4_K), "Q4_K");
    assert_string_equal(ds_dtype_name(DS_IQ4_XS), "IQ4_XS");
    assert_int_equal(ds_ggml_block_elems(DS_F32), 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sizes), cmocka_unit_test(test_kernels), cmocka_unit_test(test_batch_invariance), cmocka_unit_test(test_rows_interleaved),
        cmocka_unit_test(test_adversarial), cmocka_unit_test(test_gemm_path),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
