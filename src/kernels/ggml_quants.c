// GGUF block types: sizes and the exact dequantization (see ggml_quants.h). Every expression below
// keeps ggml's operand order and roundings: a product of an int and a float is (float)int · float, and
// nothing may be contracted into a fused multiply-add (this file is compiled for the baseline ISA,
// which has none; the pragma keeps it so should flags change).
#include "kernels/ggml_quants.h"

#include <string.h>

#include "kernels/half.h"
#include "kernels/qmatmul.h"

#if defined(__clang__)
#pragma clang fp contract(off)
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

_Static_assert(sizeof(ds_block_q4_0) == 18, "Q4_0 block");
_Static_assert(sizeof(ds_block_q4_1) == 20, "Q4_1 block");
_Static_assert(sizeof(ds_block_q5_0) == 22, "Q5_0 block");
_Static_assert(sizeof(ds_block_q5_1) == 24, "Q5_1 block");
_Static_assert(sizeof(ds_block_q8_0) == 34, "Q8_0 block");
_Static_assert(sizeof(ds_block_iq4_nl) == 18, "IQ4_NL block");
_Static_assert(sizeof(ds_block_q2_k) == 84, "Q2_K block");
_Static_assert(sizeof(ds_block_q3_k) == 110, "Q3_K block");
_Static_assert(sizeof(ds_block_q4_k) == 144, "Q4_K block");
_Static_assert(sizeof(ds_block_q5_k) == 176, "Q5_K block");
_Static_assert(sizeof(ds_block_q6_k) == 210, "Q6_K block");
_Static_assert(sizeof(ds_block_iq4_xs) == 136, "IQ4_XS block");

const int8_t ds_iq4nl_values[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

int ds_ggml_block_elems(ds_dtype t) {
    switch (t) {
    case DS_Q4_0: case DS_Q4_1: case DS_Q5_0: case DS_Q5_1: case DS_Q8_0: case DS_IQ4_NL: return 32;
    case DS_Q2_K: case DS_Q3_K: case DS_Q4_K: case DS_Q5_K: case DS_Q6_K: case DS_IQ4_XS: return DS_QK_K;
    default: return 0;
    }
}

size_t ds_ggml_block_bytes(ds_dtype t) {
    switch (t) {
    case DS_Q4_0: return sizeof(ds_block_q4_0);
    case DS_Q4_1: return sizeof(ds_block_q4_1);
    case DS_Q5_0: return sizeof(ds_block_q5_0);
    case DS_Q5_1: return sizeof(ds_block_q5_1);
    case DS_Q8_0: return sizeof(ds_block_q8_0);
    case DS_IQ4_NL: return sizeof(ds_block_iq4_nl);
    case DS_Q2_K: return sizeof(ds_block_q2_k);
    case DS_Q3_K: return sizeof(ds_block_q3_k);
    case DS_Q4_K: return sizeof(ds_block_q4_k);
    case DS_Q5_K: return sizeof(ds_block_q5_k);
    case DS_Q6_K: return sizeof(ds_block_q6_k);
    case DS_IQ4_XS: return sizeof(ds_block_iq4_xs);
    default: return 0;
    }
}

int ds_ggml_is_kquant_family(ds_dtype t) { return t != DS_Q8_0 && ds_ggml_block_elems(t) != 0; }

void ds_ggml_q3k_scales(const uint8_t b[12], int out[16]) {
    for (int i = 0; i < 16; i++) {
        const int g = i / 4, k = i % 4;
        const int lo = (b[k + 4 * (g & 1)] >> (4 * (g >> 1))) & 0xF, hi = (b[8 + k] >> (2 * g)) & 3;
        out[i] = lo | (hi << 4);
    }
}

static void deq_q4_0(const ds_block_q4_0 *x, int64_t nb, float *y) {
    for (int64_t i = 0; i < nb; i++, y += 32) {
        const float d = ds_f16_to_f32(x[i].d);
        for (int j = 0; j < 16; j++) {
            y[j] = (float)((x[i].qs[j] & 0x0F) - 8) * d;
            y[j + 16] = (float)((x[i].qs[j] >> 4) - 8) * d;
        }
    }
}

static void deq_q4_1(const ds_block_q4_1 *x, int64_t nb, float *y) {
    for (int64_t i = 0; i < nb; i++, y += 32) {
        const float d = ds_f16_to_f32(x[i].d), m = ds_f16_to_f32(x[i].m);
        for (int j = 0; j < 16; j++) {
            y[j] = (float)(x[i].qs[j] & 0x0F) * d + m;
            y[j + 16] = (float)(x[i].qs[j] >> 4) * d + m;
        }
    }
}

static uint32_t load_u32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static void deq_q5_0(const ds_block_q5_0 *x, int64_t nb, float *y) {
    for (int64_t i = 0; i < nb; i++, y += 32) {
        const float d = ds_f16_to_f32(x[i].d);
        const uint32_t qh = load_u32(x[i].qh);
        for (int j = 0; j < 16; j++) {
            const int h0 = (int)((qh >> j) << 4 & 0x10), h1 = (int)((qh >> (j + 12)) & 0x10);
            y[j] = (float)(((x[i].qs[j] & 0x0F) | h0) - 16) * d;
            y[j + 16] = (float)(((x[i].qs[j] >> 4) | h1) - 16) * d;
        }
    }
}

static void deq_q5_1(const ds_block_q5_1 *x, int64_t nb, float *y) {
    for (int64_t i = 0; i < nb; i++, y += 32) {
        const float d = ds_f16_to_f32(x[i].d), m = ds_f16_to_f32(x[i].m);
        const uint32_t qh = load_u32(x[i].qh);
        for (int j = 0; j < 16; j++) {
            const int h0 = (int)((qh >> j) << 4 & 0x10), h1 = (int)((qh >> (j + 12)) & 0x10);
            y[j] = (float)((x[i].qs[j] & 0x0F) | h0) * d + m;
            y[j + 16] = (float)((x[i].qs[j] >> 4) | h1) * d + m;
        }
    }
}

static void deq_q8_0(const ds_block_q8_0 *x, int64_t nb, float *y) {
    for (int64_t i = 0; i < nb; i++, y += 32) {
        const float d = ds_f16_to_f32(x[i].d);
        for (int j = 0; j < 32; j++) y[j] = (float)x[i].qs[j] * d;
    }
}

static void deq_iq4_nl(const ds_block_iq4_nl *x, int64_t nb, float *y) {
    for (int64_t i = 0; i < nb; i++, y += 32) {
        const float d = ds_f16_to_f32(x[i].d);
        for (int j = 0; j < 16; j++) {
            y[j] = d * (float)ds_iq4nl_values[x[i].qs[j] & 0xF];
            y[j + 16] = d * (float)ds_iq4nl_values[x[i].qs[j] >> 4];
        }
    }
}

static void deq_q2_k(const ds_block_q2_k *x, int64_t nb, float *y) {
    for (int64_t i = 0; i < nb; i++) {
        const float d = ds_f16_to_f32(x[i].d), dmin = ds_f16_to_f32(x[i].dmin);
        const uint8_t *q = x[i].qs;
        int is = 0;
        for (int h = 0; h < 2; h++, q += 32)
            for (int j = 0, shift = 0; j < 4; j++, shift += 2)
                for (int half = 0; half < 2; half++) {
                    const int sc = x[i].scales[is++];
                    const float dl = d * (float)(sc & 0xF), ml = dmin * (float)(sc >> 4);
                    for (int l = 0; l < 16; l++) *y++ = dl * (float)((q[l + 16 * half] >> shift) & 3) - ml;
                }
    }
}

static void deq_q3_k(const ds_block_q3_k *x, int64_t nb, float *y) {
    for (int64_t i = 0; i < nb; i++) {
        const float d = ds_f16_to_f32(x[i].d);
        int sc[16];
        ds_ggml_q3k_scales(x[i].scales, sc);
        const uint8_t *q = x[i].qs, *hm = x[i].hmask;
        int is = 0;
        unsigned m = 1;
        for (int h = 0; h < 2; h++, q += 32)
            for (int j = 0, shift = 0; j < 4; j++, shift += 2, m <<= 1)
                for (int half = 0; half < 2; half++) {
                    const float dl = d * (float)(sc[is++] - 32);
                    for (int l = 16 * half; l < 16 * half + 16; l++)
                        *y++ = dl * (float)(((q[l] >> shift) & 3) - ((hm[l] & m) ? 0 : 4));
                }
    }
}

static void deq_q4_k(const ds_block_q4_k *x, int64_t nb, float *y) {
    for (int64_t i = 0; i < nb; i++) {
        const float d = ds_f16_to_f32(x[i].d), dmin = ds_f16_to_f32(x[i].dmin);
        const uint8_t *q = x[i].qs;
        for (int c = 0; c < 4; c++, q += 32) {
            int sc, m;
            ds_ggml_scale_min_k4(2 * c, x[i].scales, &sc, &m);
            const float d1 = d * (float)sc, m1 = dmin * (float)m;
            ds_ggml_scale_min_k4(2 * c + 1, x[i].scales, &sc, &m);
            const float d2 = d * (float)sc, m2 = dmin * (float)m;
            for (int l = 0; l < 32; l++) *y++ = d1 * (float)(q[l] & 0xF) - m1;
            for (int l = 0; l < 32; l++) *y++ = d2 * (float)(q[l] >> 4) - m2;
        }
    }
}

static void deq_q5_k(const ds_block_q5_k *x, int64_t nb, float *y) {
    for (int64_t i = 0; i < nb; i++) {
        const float d = ds_f16_to_f32(x[i].d), dmin = ds_f16_to_f32(x[i].dmin);
        const uint8_t *ql = x[i].qs, *qh = x[i].qh;
        unsigned u1 = 1, u2 = 2;
        for (int c = 0; c < 4; c++, ql += 32, u1 <<= 2, u2 <<= 2) {
            int sc, m;
            ds_ggml_scale_min_k4(2 * c, x[i].scales, &sc, &m);
            const float d1 = d * (float)sc, m1 = dmin * (float)m;
            ds_ggml_scale_min_k4(2 * c + 1, x[i].scales, &sc, &m);
            const float d2 = d * (float)sc, m2 = dmin * (float)m;
            for (int l = 0; l < 32; l++) *y++ = d1 * (float)((ql[l] & 0xF) + (qh[l] & u1 ? 16 : 0)) - m1;
            for (int l = 0; l < 32; l++) *y++ = d2 * (float)((ql[l] >> 4) + (qh[l] & u2 ? 16 : 0)) - m2;
        }
    }
}

static void deq_q6_k(const ds_block_q6_k *x, int64_t nb, float *y) {
    for (int64_t i = 0; i < nb; i++) {
        const float d = ds_f16_to_f32(x[i].d);
        const uint8_t *ql = x[i].ql, *qh = x[i].qh;
        const int8_t *sc = x[i].scales;
        for (int h = 0; h < 2; h++, y += 128, ql += 64, qh += 32, sc += 8)
            for (int l = 0; l < 32; l++) {
                const int is = l / 16;
                const int q1 = ((ql[l] & 0xF) | ((qh[l] >> 0 & 3) << 4)) - 32;
                const int q2 = ((ql[l + 32] & 0xF) | ((qh[l] >> 2 & 3) << 4)) - 32;
                const int q3 = ((ql[l] >> 4) | ((qh[l] >> 4 & 3) << 4)) - 32;
                const int q4 = ((ql[l + 32] >> 4) | ((qh[l] >> 6 & 3) << 4)) - 32;
                y[l] = d * (float)sc[is] * (float)q1;
                y[l + 32] = d * (float)sc[is + 2] * (float)q2;
                y[l + 64] = d * (float)sc[is + 4] * (float)q3;
                y[l + 96] = d * (float)sc[is + 6] * (float)q4;
            }
    }
}

static void deq_iq4_xs(const ds_block_iq4_xs *x, int64_t nb, float *y) {
    for (int64_t i = 0; i < nb; i++) {
        const float d = ds_f16_to_f32(x[i].d);
        const uint8_t *qs = x[i].qs;
        for (int ib = 0; ib < 8; ib++, y += 32, qs += 16) {
            const int ls = ((x[i].scales_l[ib / 2] >> 4 * (ib % 2)) & 0xF) | (((x[i].scales_h >> 2 * ib) & 3) << 4);
            const float dl = d * (float)(ls - 32);
            for (int j = 0; j < 16; j++) {
                y[j] = dl * (float)ds_iq4nl_values[qs[j] & 0xF];
                y[j + 16] = dl * (float)ds_iq4nl_values[qs[j] >> 4];
            }
        }
    }
}

void ds_ggml_dequantize_row(ds_dtype t, const void *blocks, int64_t n, float *out) {
    const int qk = ds_ggml_block_elems(t);
    if (!qk) return;
    const int64_t nb = n / qk;
    switch (t) {
    case DS_Q4_0: deq_q4_0(blocks, nb, out); break;
    case DS_Q4_1: deq_q4_1(blocks, nb, out); break;
    case DS_Q5_0: deq_q5_0(blocks, nb, out); break;
    case DS_Q5_1: deq_q5_1(blocks, nb, out); break;
    case DS_Q8_0: deq_q8_0(blocks, nb, out); break;
    case DS_IQ4_NL: deq_iq4_nl(blocks, nb, out); break;
    case DS_Q2_K: deq_q2_k(blocks, nb, out); break;
    case DS_Q3_K: deq_q3_k(blocks, nb, out); break;
    case DS_Q4_K: deq_q4_k(blocks, nb, out); break;
    case DS_Q5_K: deq_q5_k(blocks, nb, out); break;
    case DS_Q6_K: deq_q6_k(blocks, nb, out); break;
    case DS_IQ4_XS: deq_iq4_xs(blocks, nb, out); break;
    default: break;
    }
}
