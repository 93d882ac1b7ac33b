// MLX affine quantization (docs/formats/mlx-affine.md): hand-computed groups (the edge
// trick, the negative-scale case, constant groups), packing, round-trip error, the quantized
// kernels against dequantize-then-dot on every instruction set, and ds_st_weight_q on good and
// hostile files.
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "io/safetensors.h"
#include "kernels/half.h"
#include "kernels/matmul.h"
#include "kernels/qmatmul.h"
#include "model/st_weights.h"
#include "kernels/affine.h"
#include "io/qconfig.h"
#include "round_ref.h"
#include "tmpdir.h"

// Edge trick, |w_min| > |w_max|: w = [-1.5, 0, 0.5, 0 ...]. scale0 = 2/15, edge = -1.5,
// q0 = rint(-1.5 / (2/15)) = rint(-11.25) = -11, scale = -1.5 / -11 = 0.13636..., bias = -1.5;
// q(-1.5) = 0, q(0) = rint(1.5 / 0.13636) = 11, q(0.5) = rint(2 / 0.13636) = rint(14.67) = 15.
static void test_edge_trick(void **state) {
    (void)state;
    float w[32] = {0}, s, b, out[32];
    uint32_t p[4];
    w[0] = -1.5f;
    w[2] = 0.5f;
    ds_affine_quantize_row(w, 32, 4, 32, p, &s, &b);
    assert_true(s == -1.5f / -11.0f);
    assert_true(b == -1.5f);
    // element 0 in the low nibble of word 0: 0, 11 (0xB), 15 (0xF), then 11s
    assert_int_equal(p[0], 0xBBBBBFB0u);
    for (int k = 1; k < 4; k++) assert_int_equal(p[k], 0xBBBBBBBBu);
    ds_affine_dequantize_row(p, &s, &b, DS_F32, 32, 4, 32, out);
    assert_true(out[0] == -1.5f); // the dominant extreme is exact
    assert_true(fabsf(out[2] - (-1.5f + 15 * s)) == 0.0f);
}

// Negative scale, |w_max| >= |w_min|: w = [2, -0.5, 0 ...]: edge = 2, scale0 = -2.5/15,
// q0 = rint(2 / -0.16667) = -12, scale = 2 / -12, bias = 2; q(2) = 0, q(-0.5) = 15, q(0) = 12.
static void test_negative_scale(void **state) {
    (void)state;
    float w[32] = {0}, s, b, out[32];
    uint32_t p[4];
    w[0] = 2.0f;
    w[1] = -0.5f;
    ds_affine_quantize_row(w, 32, 4, 32, p, &s, &b);
    assert_true(s == 2.0f / -12.0f);
    assert_true(s < 0);
    assert_true(b == 2.0f);
    assert_int_equal(p[0], 0xCCCCCCF0u);
    ds_affine_dequantize_row(p, &s, &b, DS_F32, 32, 4, 32, out);
    assert_true(out[0] == 2.0f);
    assert_true(fabsf(out[1] + 0.5f) < 1e-6f);
    assert_true(fabsf(out[5]) < 1e-6f);
}

// Constant groups: 0.75 everywhere -> scale = 0.75 / rint(0.75 / -1e-7), bias 0.75, all q = 0,
// exact; zeros -> q0 = 0, so bias 0 and scale -1e-7, exact.
static void test_constant_groups(void **state) {
    (void)state;
    float w[64], s[2], b[2], out[64];
    uint32_t p[8];
    for (int i = 0; i < 32; i++) w[i] = 0.75f;
    for (int i = 32; i < 64; i++) w[i] = 0.0f;
    ds_affine_quantize_row(w, 64, 4, 32, p, s, b);
    assert_true(b[0] == 0.75f);
    assert_true(s[0] == 0.75f / rintf(0.75f / -1e-7f));
    assert_true(b[1] == 0.0f);
    assert_true(s[1] == -1e-7f);
    for (int k = 0; k < 8; k++) assert_int_equal(p[k], 0);
    ds_affine_dequantize_row(p, s, b, DS_F32, 64, 4, 32, out);
    for (int i = 0; i < 64; i++) assert_true(out[i] == w[i]);
}

// 8 bits, w_i = i: edge = 31, scale = 31 / -255, bias = 31, q_i = rint((i - 31) / scale):
// 255, 247 (246.8), 239 (238.5), 230 (230.3) in the bytes of word 0, element 0 lowest.
static void test_pack8(void **state) {
    (void)state;
    float w[32], s, b;
    uint32_t p[8];
    for (int i = 0; i < 32; i++) w[i] = (float)i;
    ds_affine_quantize_row(w, 32, 8, 32, p, &s, &b);
    assert_true(s == 31.0f / -255.0f);
    assert_true(b == 31.0f);
    assert_int_equal(p[0], 0xE6EFF7FFu);
    assert_int_equal(p[7] >> 24, 0); // element 31 = the edge
    assert_int_equal(ds_affine_q(p, 8, 1), 247);
}

// The fast dequantization equals the contract's element formula (word j / (32/bits), offset
// (j mod (32/bits))·bits) for both widths.
static void test_dequant_formula(void **state) {
    (void)state;
    uint32_t p[16];
    float s[2] = {0.25f, -0.5f}, b[2] = {1.0f, -2.0f}, out[128];
    for (int k = 0; k < 16; k++) p[k] = 0x9E3779B9u * (uint32_t)(k + 1);
    for (int bits = 4; bits <= 8; bits += 4) {
        const int cols = 16 * 32 / bits, gs = cols / 2;
        ds_affine_dequantize_row(p, s, b, DS_F32, cols, bits, gs, out);
        for (int j = 0; j < cols; j++) {
            const uint32_t qj = (p[j / (32 / bits)] >> ((j % (32 / bits)) * bits)) & ((1u << bits) - 1);
            volatile float sq = s[j / gs] * (float)qj;
            assert_true(out[j] == sq + b[j / gs]);
        }
    }
}

static uint64_t g_rng = 88172645463325252ull;
static float frand(void) { // uniform (-1, 1)
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return (float)((double)(g_rng >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}
static float nrand(void) { return frand() + frand() + frand(); }

// Round trip: with fp32 scales every element is within half a step (|scale| / 2) of its
// original, except elements whose q was clamped to 2^bits - 1. The contract's edge trick rounds q0
// = rint(edge / scale0), which can shrink the step so that the far extreme lands past the last bin;
// those (and only those, at the far end) are within one step. Counted so the exception stays rare
// (about 1% of elements at 4 bits, fewer at 8).
static void test_round_trip(void **state) {
    (void)state;
    const int cols = 256;
    float w[256], out[256], s[8], b[8];
    uint32_t p[64];
    for (int bits = 4; bits <= 8; bits += 4)
        for (int gs = 32; gs <= 64; gs += 32) {
            int clamped = 0, total = 0;
            for (int row = 0; row < 200; row++) {
                for (int i = 0; i < cols; i++) w[i] = nrand() * (row % 7 + 1);
                ds_affine_quantize_row(w, cols, bits, gs, p, s, b);
                ds_affine_dequantize_row(p, s, b, DS_F32, cols, bits, gs, out);
                for (int i = 0; i < cols; i++) {
                    const int g = i / gs;
                    const float step = fabsf(s[g]), err = fabsf(out[i] - w[i]);
                    const float raw = rintf((w[i] - b[g]) / s[g]);
                    total++;
                    if (raw > (float)((1 << bits) - 1)) {
                        clamped++;
                        assert_true(err <= step * 1.0001f);
                    } else {
                        assert_true(err <= step * 0.5001f + 1e-6f);
                    }
                }
            }
            print_message("bits %d gs %d: %d of %d elements clamped\n", bits, gs, clamped, total);
            assert_true(clamped * 100 < 3 * total); // rare: < 3% of elements
        }
}

// ---- kernels ----------------------------------------------------------------------------------

typedef struct {
    ds_weight w;
    uint32_t *packed;
    void *scales, *biases;
    float *deq; // (rows, cols) dequantized
} qmat;

static void qmat_make(qmat *m, int rows, int cols, int bits, int gs, ds_dtype st) {
    const int G = cols / gs, P = cols * bits / 32;
    float *f = malloc(sizeof(float) * (size_t)cols), *sc = malloc(sizeof(float) * (size_t)rows * G),
          *bi = malloc(sizeof(float) * (size_t)rows * G);
    m->packed = malloc(sizeof(uint32_t) * (size_t)rows * P);
    m->deq = malloc(sizeof(float) * (size_t)rows * cols);
    const size_t ssz = st == DS_F32 ? 4 : 2;
    m->scales = malloc(ssz * (size_t)rows * G);
    m->biases = malloc(ssz * (size_t)rows * G);
    for (int r = 0; r < rows; r++) {
        for (int j = 0; j < cols; j++) f[j] = nrand() * 0.1f;
        ds_affine_quantize_row(f, cols, bits, gs, m->packed + (size_t)r * P, sc + (size_t)r * G, bi + (size_t)r * G);
    }
    for (size_t k = 0; k < (size_t)rows * G; k++) {
        if (st == DS_F32) {
            ((float *)m->scales)[k] = sc[k];
            ((float *)m->biases)[k] = bi[k];
        } else {
            ((uint16_t *)m->scales)[k] = ds_f32_to_bf16(sc[k]);
            ((uint16_t *)m->biases)[k] = ds_f32_to_bf16(bi[k]);
        }
    }
    for (int r = 0; r < rows; r++)
        ds_affine_dequantize_row(m->packed + (size_t)r * P, (char *)m->scales + (size_t)r * G * ssz,
                                 (char *)m->biases + (size_t)r * G * ssz, st, cols, bits, gs, m->deq + (size_t)r * cols);
    ds_weight w = {bits == 4 ? DS_AFFINE4 : DS_AFFINE8, rows, cols, m->packed, gs, st, m->scales, m->biases};
    m->w = w;
    free(f);
    free(sc);
    free(bi);
}

static void qmat_free(qmat *m) {
    free(m->packed);
    free(m->scales);
    free(m->biases);
    free(m->deq);
}

// ds_matmul against the dequantized matrix in double, for n input rows; with m->w.round_inputs,
// against the dequantized matrix times the input rounded by the rule above.
static void check_product(const qmat *m, int n) {
    const int rows = m->w.rows, cols = m->w.cols;
    float *x = malloc(sizeof(float) * (size_t)n * cols), *y = malloc(sizeof(float) * (size_t)n * rows);
    float *xr = malloc(sizeof(float) * (size_t)n * cols);
    float *scratch = malloc(sizeof(float) * (ds_matmul_scratch_floats(&m->w) * 64 + 1));
    for (size_t k = 0; k < (size_t)n * cols; k++) x[k] = nrand();
    ds_matmul(y, x, &m->w, n, scratch);
    const int rounded = m->w.round_inputs && n < 64; // 64 rows and more: sgemm, f32 inputs
    for (int i = 0; i < n; i++) {
        if (rounded) round_input_ref(x + (size_t)i * cols, cols, m->w.group_size, xr + (size_t)i * cols);
        else memcpy(xr + (size_t)i * cols, x + (size_t)i * cols, sizeof(float) * (size_t)cols);
    }
    for (int i = 0; i < n; i++)
        for (int r = 0; r < rows; r++) {
            double ref = 0, mag = 0;
            for (int j = 0; j < cols; j++) {
                ref += (double)m->deq[(size_t)r * cols + j] * xr[(size_t)i * cols + j];
                mag += fabs((double)m->deq[(size_t)r * cols + j] * xr[(size_t)i * cols + j]);
            }
            if (!(fabs(y[(size_t)i * rows + r] - ref) <= 1e-5 * mag + 1e-6)) {
                print_error("%s bits %d gs %d n %d rounded %d: y[%d][%d] = %g, expected %g\n", ds_matmul_isa(),
                            ds_weight_bits(&m->w), m->w.group_size, n, rounded, i, r, y[(size_t)i * rows + r], ref);
                fail();
            }
        }
    free(x);
    free(xr);
    free(y);
    free(scratch);
}

static void test_kernels(void **state) {
    (void)state;
    const char *isas[] = {"avx512", "avx2", "scalar"};
    const int ns[] = {1, 2, 3, 7, 8, 9, 16, 23, 33, 70};
    int tested = 0;
    for (size_t k = 0; k < 3; k++) {
        if (!ds_matmul_force_isa(isas[k])) continue;
        tested++;
        for (int bits = 4; bits <= 8; bits += 4)
            for (int gs = 32; gs <= 64; gs += 32)
                for (int st = 0; st < 2; st++) {
                    qmat m;
                    qmat_make(&m, 37, 320, bits, gs, st ? DS_BF16 : DS_F32);
                    for (int round = 0; round < 2; round++) { // f32 inputs, then the integer path
                        m.w.round_inputs = round;
                        for (size_t i = 0; i < sizeof ns / sizeof *ns; i++) check_product(&m, ns[i]);
                    }
                    qmat_free(&m);
                }
    }
    assert_true(tested >= 1);
    if (!ds_matmul_force_isa(isas[0]) && !ds_matmul_force_isa(isas[1])) ds_matmul_force_isa(isas[2]);
}

// Threaded (macs above the serial threshold) and columns beyond one L1 chunk (accumulation).
static void test_kernels_large(void **state) {
    (void)state;
    qmat m;
    qmat_make(&m, 96, 9216, 4, 64, DS_BF16);
    check_product(&m, 1);
    check_product(&m, 5);
    check_product(&m, 20);
    check_product(&m, 66); // sgemm over dequantized tiles
    m.w.round_inputs = 1;
    check_product(&m, 1);
    check_product(&m, 7);
    check_product(&m, 20);
    check_product(&m, 66);
    qmat_free(&m);
    qmat_make(&m, 70, 4096, 8, 32, DS_F16);
    check_product(&m, 3);
    m.w.round_inputs = 1;
    check_product(&m, 3);
    check_product(&m, 9);
    qmat_free(&m);
}

// Each row of a product through the few-rows kernel is bitwise that row computed alone, for every
// ISA, bit width, group size and a column count below, at, and well past one segment (1024) and past
// what fits in L1 for 1 row (8192): the arithmetic depends on the columns alone, so verifying a
// block gives the tokens decoding gives (the old kernel cut columns into chunks sized by the number
// of input rows: 4096 columns were one chunk alone and four in a batch of 7).
static void test_qrows_batch_invariant(void **state) {
    (void)state;
    const char *isas[] = {"avx512", "avx2", "scalar"};
    const int cols_list[] = {320, 1024, 4096, 9216}, ns[] = {2, 3, 5, 7, 8, 9, 13, 17};
    ds_matmul_set_gemm_min_rows(1 << 30); // the kernel at every n
    int tested = 0;
    for (size_t k = 0; k < 3; k++) {
        if (!ds_matmul_force_isa(isas[k])) continue;
        tested++;
        for (int bits = 4; bits <= 8; bits += 4)
            for (int gs = 32; gs <= 64; gs += 32)
                for (int ci = 0; ci < 8; ci++) { // each column count with f32 inputs and rounded ones
                    const int rows = 21, cols = cols_list[ci % 4], nmax = 17;
                    qmat m;
                    qmat_make(&m, rows, cols, bits, gs, ci % 2 ? DS_BF16 : DS_F32);
                    m.w.round_inputs = ci >= 4;
                    float *x = malloc(sizeof(float) * (size_t)nmax * cols), *y = malloc(sizeof(float) * (size_t)nmax * rows);
                    float *y1 = malloc(sizeof(float) * (size_t)rows);
                    for (size_t t = 0; t < (size_t)nmax * cols; t++) x[t] = nrand();
                    for (size_t ni = 0; ni < sizeof ns / sizeof *ns; ni++) {
                        ds_matmul(y, x, &m.w, ns[ni], NULL);
                        for (int i = 0; i < ns[ni]; i++) {
                            ds_matmul(y1, x + (size_t)i * cols, &m.w, 1, NULL);
                            if (memcmp(y1, y + (size_t)i * rows, sizeof(float) * (size_t)rows) != 0) {
                                print_error("%s bits %d gs %d cols %d rounded %d: row %d of %d differs from it alone\n",
                                            isas[k], bits, gs, cols, m.w.round_inputs, i, ns[ni]);
                                fail();
                            }
                        }
                    }
                    free(x);
                    free(y);
                    free(y1);
                    qmat_free(&m);
                }
    }
    ds_matmul_set_gemm_min_rows(0);
    assert_true(tested >= 1);
    if (!ds_matmul_force_isa(isas[0]) && !ds_matmul_force_isa(isas[1])) ds_matmul_force_isa(isas[2]);
}

// ds_qx_pack follows the rounding rule exactly: ties to even (x·127/amax = k + 0.5), the extremes
// at ±127, an all-zero group (d = 0), a NaN or infinity (d = NaN, so the product is NaN), the group
// sums, and the 4-bit layouts (per block of ch columns, even elements then odd ones).
static void test_qx_pack_rounding(void **state) {
    (void)state;
    enum { GS = 64, COLS = 4 * GS };
    float x[COLS], xhat[COLS];
    for (int j = 0; j < COLS; j++) x[j] = nrand();
    // group 0: amax 127 (id = 1 exactly), so x = k + 0.5 are exact ties
    for (int j = 0; j < GS; j++) x[j] = (float)(j % 16) - 7.5f;
    x[0] = 127.0f;
    x[1] = -127.0f;
    for (int j = 0; j < GS; j++) x[GS + j] = 0.0f;   // group 1: all zero
    x[3 * GS + 5] = NAN;                              // group 3: a NaN
    _Alignas(64) unsigned char buf[8192];
    assert_true(ds_qx_bytes(1, COLS, GS, 0) <= sizeof buf);
    for (int ch = 0; ch <= 64; ch += 32) {
        const ds_qx p = ds_qx_pack(buf, x, 1, COLS, GS, ch);
        round_input_ref(x, 3 * GS, GS, xhat); // groups 0..2 (the reference knows no NaN)
        for (int g = 0; g < 3; g++) {
            int sum = 0;
            for (int j = 0; j < GS; j++) {
                const int pos = ch ? (j / ch) * ch + (j % ch) / 2 + (j % 2) * (ch / 2) : j;
                const int r = p.q[g * GS + pos];
                const float want = p.d[g] > 0 ? xhat[g * GS + j] / p.d[g] : 0.0f;
                if ((float)r != rintf(want)) {
                    print_error("ch %d group %d element %d: r = %d, expected %g (x = %g)\n", ch, g, j, r, want, x[g * GS + j]);
                    fail();
                }
                sum += r;
            }
            assert_true(p.s[g] == p.d[g] * (float)sum);
        }
        assert_true(p.q[0] == 127 && p.q[ch ? ch / 2 : 1] == -127); // x[1] is an odd element
        assert_true(p.d[0] == 1.0f);
        assert_true(p.q[ch ? 1 : 2] == -6 && p.q[ch ? 2 : 4] == -4); // x[2] = -5.5 -> -6, x[4] = -3.5 -> -4 (even)
        assert_true(p.d[1] == 0.0f && p.s[1] == 0.0f);
        assert_true(isnan(p.d[3]) && isnan(p.s[3]));
    }
    // The product of a weight row with a NaN in its input is NaN on the integer path, as on f32.
    qmat m;
    qmat_make(&m, 16, COLS, 4, GS, DS_BF16);
    m.w.round_inputs = 1;
    float y[16];
    ds_matmul(y, x, &m.w, 1, NULL);
    for (int r = 0; r < 16; r++) assert_true(isnan(y[r]));
    qmat_free(&m);
}

// The quantized embedding gather and ds_weight_bytes.
static void test_gather_bytes(void **state) {
    (void)state;
    qmat m;
    qmat_make(&m, 10, 128, 4, 32, DS_BF16);
    float row[128];
    ds_weight_row_f32(&m.w, 7, row);
    assert_memory_equal(row, m.deq + 7 * 128, sizeof row);
    float rows[3 * 128];
    ds_weight_rows_f32(&m.w, 2, 3, rows);
    assert_memory_equal(rows, m.deq + 2 * 128, sizeof rows);
    assert_int_equal(ds_weight_bytes(&m.w), 10 * 128 / 2 + 2 * 10 * 4 * 2);
    qmat_free(&m);
}

// ---- ds_st_weight_q ------------------------------------------------------------------------------

static int setup(void **state) {
    (void)state;
    return tmpdir_create("test_quant");
}
static int teardown(void **state) {
    (void)state;
    return tmpdir_remove();
}

// Write a file holding "m.weight" (U32 [4, packed_w]), "m.scales" ([4, G] of sdt) and, unless
// no_biases, "m.biases" ([4, G] of bdt); open it.
static ds_safetensors *write_q(int packed_w, int G, ds_dtype sdt, ds_dtype bdt, int no_biases) {
    static uint32_t words[4 * 64];
    static float fl[4 * 64];
    ds_st_writer *w = ds_st_writer_new();
    const int64_t ws[2] = {4, packed_w}, ss[2] = {4, G};
    assert_int_equal(ds_st_writer_add(w, "m.weight", DS_U32, 2, ws, words), DS_OK);
    assert_int_equal(ds_st_writer_add(w, "m.scales", sdt, 2, ss, fl), DS_OK);
    if (!no_biases) assert_int_equal(ds_st_writer_add(w, "m.biases", bdt, 2, ss, fl), DS_OK);
    char path[1024];
    tmpdir_path(path, sizeof path, "q", ".safetensors");
    assert_int_equal(ds_st_writer_write_file(w, path), DS_OK);
    ds_st_writer_free(w);
    ds_safetensors *st;
    assert_int_equal(ds_st_open(path, &st), DS_OK);
    return st;
}

static ds_quant_config qconf(const char *json) {
    cJSON *j = cJSON_Parse(json);
    ds_quant_config q;
    assert_int_equal(ds_quant_config_parse(j, "config.json", &q), DS_OK);
    cJSON_Delete(j);
    return q;
}

static void test_st_weight(void **state) {
    (void)state;
    ds_quant_config q = qconf("{\"quantization\": {\"bits\": 4, \"group_size\": 64, \"mode\": \"affine\"}}");
    ds_quant_config q8 = qconf("{\"quantization_config\": {\"bits\": 8, \"group_size\": 32, \"m\": {\"bits\": 4, "
                               "\"group_size\": 64}}}");
    ds_quant_config qoff = qconf("{\"quantization\": {\"bits\": 4, \"group_size\": 64, \"m\": false}}");
    ds_weight w;
    // Good: 128 columns at 4 bits = 16 words, 2 groups of 64.
    ds_safetensors *st = write_q(16, 2, DS_BF16, DS_BF16, 0);
    assert_int_equal(ds_st_weight_q(st, "f", "m.weight", 4, 128, 0, &q, &w), DS_OK);
    assert_int_equal(w.type, DS_AFFINE4);
    assert_int_equal(w.cols, 128);
    assert_int_equal(w.group_size, 64);
    assert_int_equal(w.scale_type, DS_BF16);
    assert_int_equal(ds_st_weight_q(st, "f", "m.weight", -1, -1, 0, &q, &w), DS_OK); // shape from the config
    assert_int_equal(w.cols, 128);
    assert_int_equal(ds_st_weight_q(st, "f", "m.weight", 4, 128, 0, &q8, &w), DS_OK); // per-module override
    // The same bytes read as 8-bit/32 over 128 columns would need 32 words and 4 groups.
    ds_quant_config q8only = qconf("{\"quantization\": {\"bits\": 8, \"group_size\": 32}}");
    assert_int_equal(ds_st_weight_q(st, "f", "m.weight", 4, 128, 0, &q8only, &w), DS_ERR_FORMAT);
    assert_non_null(strstr(ds_last_error(), "not 8-bit with group size 32"));
    assert_int_equal(ds_st_weight_q(st, "f", "m.weight", 4, 128, 0, &qoff, &w), DS_ERR_FORMAT);
    assert_non_null(strstr(ds_last_error(), "not quantized"));
    assert_int_equal(ds_st_weight_q(st, "f", "m.weight", 4, 128, 0, NULL, &w), DS_ERR_FORMAT);
    assert_non_null(strstr(ds_last_error(), "no quantization block"));
    assert_int_equal(ds_st_weight(st, "f", "m.weight", 4, 128, 0, &w), DS_ERR_FORMAT);
    assert_int_equal(ds_st_weight_q(st, "f", "m.weight", 5, 128, 0, &q, &w), DS_ERR_FORMAT); // rows
    ds_st_close(st);
    // Wrong packed width (15 words for 128 columns).
    st = write_q(15, 2, DS_BF16, DS_BF16, 0);
    assert_int_equal(ds_st_weight_q(st, "f", "m.weight", 4, 128, 0, &q, &w), DS_ERR_FORMAT);
    assert_non_null(strstr(ds_last_error(), "packed shape [4, 15]"));
    ds_st_close(st);
    // Missing biases.
    st = write_q(16, 2, DS_BF16, DS_BF16, 1);
    assert_int_equal(ds_st_weight_q(st, "f", "m.weight", 4, 128, 0, &q, &w), DS_ERR_FORMAT);
    assert_non_null(strstr(ds_last_error(), "no 'm.biases'"));
    ds_st_close(st);
    // Scales and biases of different dtypes.
    st = write_q(16, 2, DS_BF16, DS_F32, 0);
    assert_int_equal(ds_st_weight_q(st, "f", "m.weight", 4, 128, 0, &q, &w), DS_ERR_FORMAT);
    assert_non_null(strstr(ds_last_error(), "must match"));
    ds_st_close(st);
    // Packed words with no scales at all.
    {
        static uint32_t words[4 * 16];
        ds_st_writer *wr = ds_st_writer_new();
        const int64_t ws[2] = {4, 16};
        assert_int_equal(ds_st_writer_add(wr, "m.weight", DS_U32, 2, ws, words), DS_OK);
        char path[1024];
        tmpdir_path(path, sizeof path, "q", ".safetensors");
        assert_int_equal(ds_st_writer_write_file(wr, path), DS_OK);
        ds_st_writer_free(wr);
        assert_int_equal(ds_st_open(path, &st), DS_OK);
        assert_int_equal(ds_st_weight_q(st, "f", "m.weight", 4, 128, 0, &q, &w), DS_ERR_FORMAT);
        assert_non_null(strstr(ds_last_error(), "no scales"));
        ds_st_close(st);
    }
    // Scales of an integer dtype.
    st = write_q(16, 2, DS_I32, DS_I32, 0);
    assert_int_equal(ds_st_weight_q(st, "f", "m.weight", 4, 128, 0, &q, &w), DS_ERR_FORMAT);
    ds_st_close(st);
    ds_quant_config_free(&q);
    ds_quant_config_free(&q8);
    ds_quant_config_free(&q8only);
    ds_quant_config_free(&qoff);
}

static void test_config_refusals(void **state) {
    (void)state;
    const char *bad[] = {
        "{\"quantization\": {\"bits\": 3, \"group_size\": 64}}",
        "{\"quantization\": {\"bits\": 4, \"group_size\": 128}}",
        "{\"quantization\": {\"bits\": 4, \"group_size\": 64, \"mode\": \"mxfp4\"}}",
        "{\"quantization\": {\"bits\": 4, \"group_size\": 64, \"x\": {\"bits\": 2}}}",
        "{\"quantization\": {\"bits\": 4, \"group_size\": 64, \"x\": true}}",
        "{\"quantization\": {\"group_size\": 64}}",
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        cJSON *j = cJSON_Parse(bad[i]);
        ds_quant_config q;
        assert_int_not_equal(ds_quant_config_parse(j, "config.json", &q), DS_OK);
        assert_non_null(strstr(ds_last_error(), "config.json"));
        cJSON_Delete(j);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_edge_trick),      cmocka_unit_test(test_negative_scale),
        cmocka_unit_test(test_constant_groups), cmocka_unit_test(test_pack8),
        cmocka_unit_test(test_dequant_formula),
        cmocka_unit_test(test_round_trip),      cmocka_unit_test(test_kernels),
        cmocka_unit_test(test_kernels_large),
        cmocka_unit_test(test_qrows_batch_invariant), cmocka_unit_test(test_qx_pack_rounding),   cmocka_unit_test(test_gather_bytes),
        cmocka_unit_test(test_st_weight),       cmocka_unit_test(test_config_refusals),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
