// GGUF row quantizers and llama-quantize's presets and per-tensor mix (see gguf_quantize.h).
// Each quantizer follows the float operations of ggml's reference (no-imatrix) quantizer in the
// same order, so its blocks are what llama-quantize writes for the same f32 row up to rounding of
// the compiler's float evaluation (plain f32 arithmetic).
#include "quant/gguf_quantize.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "kernels/ggml_quants.h"
#include "kernels/half.h"
#include "kernels/qmatmul.h"

#define EPS_ZERO 1e-15f // ggml's GROUP_MAX_EPS: a group whose absolute maximum is below it is all zero


// ggml's nearest_int: round to nearest (ties to even) via the 1.5·2^23 trick, for |v| <= 2^22.
static inline int nearest_int(float v) {
    float f = v + 12582912.f;
    int32_t i;
    memcpy(&i, &f, 4);
    return (i & 0x007fffff) - 0x00400000;
}

static inline int imin(int a, int b) { return a < b ? a : b; }
static inline int imax(int a, int b) { return a > b ? a : b; }

// ---- 32-element blocks ---------------------------------------------------------------------------

static void q8_0_row(const float *x, int64_t n, ds_block_q8_0 *y) {
    for (int64_t b = 0; b < n / 32; b++, x += 32) {
        float amax = 0;
        for (int j = 0; j < 32; j++) amax = fmaxf(amax, fabsf(x[j]));
        const float d = amax / 127, id = d ? 1.0f / d : 0.0f;
        y[b].d = ds_f32_to_f16(d);
        for (int j = 0; j < 32; j++) y[b].qs[j] = (int8_t)roundf(x[j] * id);
    }
}

// The element of largest magnitude (its sign kept; the first one on ties).
static float signed_absmax(const float *x, int n) {
    float amax = 0, max = 0;
    for (int j = 0; j < n; j++)
        if (amax < fabsf(x[j])) amax = fabsf(x[j]), max = x[j];
    return max;
}

// Q4_0 (bits 4, offset 8) and Q5_0 (bits 5, offset 16): d = max / -offset, q = min(2·off-1, (int8)(x/d + off + 0.5)).
static void q4_0_row(const float *x, int64_t n, ds_block_q4_0 *y) {
    for (int64_t b = 0; b < n / 32; b++, x += 32) {
        const float d = signed_absmax(x, 32) / -8, id = d ? 1.0f / d : 0.0f;
        y[b].d = ds_f32_to_f16(d);
        for (int j = 0; j < 16; j++) {
            const int q0 = imin(15, (int8_t)(x[j] * id + 8.5f)), q1 = imin(15, (int8_t)(x[j + 16] * id + 8.5f));
            y[b].qs[j] = (uint8_t)(q0 | q1 << 4);
        }
    }
}

static void q5_0_row(const float *x, int64_t n, ds_block_q5_0 *y) {
    for (int64_t b = 0; b < n / 32; b++, x += 32) {
        const float d = signed_absmax(x, 32) / -16, id = d ? 1.0f / d : 0.0f;
        y[b].d = ds_f32_to_f16(d);
        uint32_t qh = 0;
        for (int j = 0; j < 16; j++) {
            const int q0 = imin(31, (int8_t)(x[j] * id + 16.5f)), q1 = imin(31, (int8_t)(x[j + 16] * id + 16.5f));
            y[b].qs[j] = (uint8_t)((q0 & 15) | (q1 & 15) << 4);
            qh |= (uint32_t)(q0 >> 4 & 1) << j | (uint32_t)(q1 >> 4 & 1) << (j + 16);
        }
        memcpy(y[b].qh, &qh, 4);
    }
}

// Q5_1: d = (max - min) / 31, m = min, q = (uint8)((x - min)/d + 0.5).
static void q5_1_row(const float *x, int64_t n, ds_block_q5_1 *y) {
    for (int64_t b = 0; b < n / 32; b++, x += 32) {
        float mn = FLT_MAX, mx = -FLT_MAX;
        for (int j = 0; j < 32; j++) mn = fminf(mn, x[j]), mx = fmaxf(mx, x[j]);
        const float d = (mx - mn) / 31, id = d ? 1.0f / d : 0.0f;
        y[b].d = ds_f32_to_f16(d);
        y[b].m = ds_f32_to_f16(mn);
        uint32_t qh = 0;
        for (int j = 0; j < 16; j++) {
            const int q0 = (uint8_t)((x[j] - mn) * id + 0.5f), q1 = (uint8_t)((x[j + 16] - mn) * id + 0.5f);
            y[b].qs[j] = (uint8_t)((q0 & 15) | (q1 & 15) << 4);
            qh |= (uint32_t)(q0 >> 4 & 1) << j | (uint32_t)(q1 >> 4 & 1) << (j + 16);
        }
        memcpy(y[b].qh, &qh, 4);
    }
}

// ---- the non-linear 4-bit types ------------------------------------------------------------------

// Index of the value of kv (16, ascending) nearest to x (the lower one on ties).
static int nearest_value(const int8_t *kv, float x) {
    if (x <= kv[0]) return 0;
    if (x >= kv[15]) return 15;
    int lo = 0, hi = 15;
    while (hi - lo > 1) {
        const int mid = (lo + hi) / 2;
        if (x < kv[mid]) hi = mid;
        else lo = mid;
    }
    return x - kv[hi - 1] < kv[hi] - x ? hi - 1 : hi;
}

// One block of 32 (xb): the best scale d (weights w = x², 2·ntry + 1 candidate scales around
// -max / kv[0]), its indices into Lb. Returns d (0 for an all-zero block).
static float iq4_block(const float *xb, uint8_t *Lb, int ntry) {
    const int8_t *kv = ds_iq4nl_values;
    float w[32], amax = 0, max = 0;
    for (int j = 0; j < 32; j++) {
        w[j] = xb[j] * xb[j];
        if (fabsf(xb[j]) > amax) amax = fabsf(xb[j]), max = xb[j];
    }
    if (amax < EPS_ZERO) {
        memset(Lb, 0, 32);
        return 0;
    }
    float d = ntry > 0 ? -max / kv[0] : max / kv[0], id = 1 / d, sumqx = 0, sumq2 = 0;
    for (int j = 0; j < 32; j++) {
        const int l = nearest_value(kv, id * xb[j]);
        Lb[j] = (uint8_t)l;
        const float q = kv[l];
        sumqx += w[j] * q * xb[j];
        sumq2 += w[j] * q * q;
    }
    d = sumq2 > 0 ? sumqx / sumq2 : 0.f;
    float best = d * sumqx;
    for (int t = -ntry; t <= ntry; t++) {
        id = (t + kv[0]) / max;
        sumqx = sumq2 = 0;
        for (int j = 0; j < 32; j++) {
            const float q = kv[nearest_value(kv, id * xb[j])];
            sumqx += w[j] * q * xb[j];
            sumq2 += w[j] * q * q;
        }
        if (sumq2 > 0 && sumqx * sumqx > best * sumq2) d = sumqx / sumq2, best = d * sumqx;
    }
    return d;
}

static void pack_nibbles32(const uint8_t *L, uint8_t *qs) {
    for (int j = 0; j < 16; j++) qs[j] = (uint8_t)(L[j] | L[j + 16] << 4);
}

static void iq4_nl_row(const float *x, int64_t n, ds_block_iq4_nl *y) {
    uint8_t L[32];
    for (int64_t b = 0; b < n / 32; b++, x += 32) {
        const float d = iq4_block(x, L, 7);
        y[b].d = ds_f32_to_f16(d);
        const float id = d ? 1 / d : 0;
        if (d != 0) // (ggml re-picks the indices for the final scale)
            for (int j = 0; j < 32; j++) L[j] = (uint8_t)nearest_value(ds_iq4nl_values, id * x[j]);
        pack_nibbles32(L, y[b].qs);
    }
}

// IQ4_XS: per sub-block of 32 the best scale, then one f16 super-scale d = -max_scale / 32 and
// 6-bit sub-scales l - 32 = round(scale / d); indices re-picked for d·(l - 32).
static void iq4_xs_row(const float *x, int64_t n, ds_block_iq4_xs *y) {
    uint8_t L[256];
    float sc[8];
    for (int64_t b = 0; b < n / 256; b++, x += 256) {
        float max_scale = 0, amax_scale = 0;
        for (int ib = 0; ib < 8; ib++) {
            sc[ib] = iq4_block(x + 32 * ib, L + 32 * ib, 7);
            if (fabsf(sc[ib]) > amax_scale) amax_scale = fabsf(sc[ib]), max_scale = sc[ib];
        }
        const float d = -max_scale / 32, id = d ? 1 / d : 0.f;
        y[b].d = ds_f32_to_f16(d);
        y[b].scales_h = 0;
        memset(y[b].scales_l, 0, 4);
        for (int ib = 0; ib < 8; ib++) {
            int l = imax(-32, imin(31, nearest_int(id * sc[ib])));
            const float dl = d * l, idl = dl ? 1 / dl : 0.f;
            for (int j = 0; j < 32; j++) L[32 * ib + j] = (uint8_t)nearest_value(ds_iq4nl_values, idl * x[32 * ib + j]);
            l += 32;
            y[b].scales_l[ib / 2] |= (uint8_t)((l & 15) << 4 * (ib % 2));
            y[b].scales_h |= (uint16_t)((l >> 4) << 2 * ib);
        }
        for (int i = 0; i < 8; i++) pack_nibbles32(L + 32 * i, y[b].qs + 16 * i);
    }
}

// ---- K-quants ------------------------------------------------------------------------------------

// ggml's make_qkx2_quants: q = clamp(round((x - min)/scale), 0, nmax) with min <= 0, scale and min
// chosen by weighted least squares over nstep + 1 candidate inverse scales. *neg_min = -min.
static float qkx2(int n, int nmax, const float *x, const float *w, uint8_t *L, float *neg_min, float rmin,
                  float rdelta, int nstep) {
    uint8_t Laux[32];
    float mn = x[0], mx = x[0], sum_w = w[0], sum_x = sum_w * x[0];
    for (int i = 1; i < n; i++) {
        if (x[i] < mn) mn = x[i];
        if (x[i] > mx) mx = x[i];
        sum_w += w[i];
        sum_x += w[i] * x[i];
    }
    if (mn > 0) mn = 0;
    if (mx == mn) {
        memset(L, 0, (size_t)n);
        *neg_min = -mn;
        return 0.f;
    }
    float iscale = nmax / (mx - mn), scale = 1 / iscale, best = 0;
    for (int i = 0; i < n; i++) {
        L[i] = (uint8_t)imax(0, imin(nmax, nearest_int(iscale * (x[i] - mn))));
        const float diff = scale * L[i] + mn - x[i];
        best += w[i] * (diff * diff);
    }
    for (int is = 0; is <= nstep; is++) {
        iscale = (rmin + rdelta * is + nmax) / (mx - mn);
        float sum_l = 0, sum_l2 = 0, sum_xl = 0;
        for (int i = 0; i < n; i++) {
            const int l = imax(0, imin(nmax, nearest_int(iscale * (x[i] - mn))));
            Laux[i] = (uint8_t)l;
            sum_l += w[i] * l;
            sum_l2 += w[i] * l * l;
            sum_xl += w[i] * l * x[i];
        }
        const float D = sum_w * sum_l2 - sum_l * sum_l;
        if (D > 0) {
            float s = (sum_w * sum_xl - sum_x * sum_l) / D, m = (sum_l2 * sum_x - sum_l * sum_xl) / D;
            if (m > 0) m = 0, s = sum_xl / sum_l2;
            float err = 0;
            for (int i = 0; i < n; i++) {
                const float diff = s * Laux[i] + m - x[i];
                err += w[i] * (diff * diff);
            }
            if (err < best) {
                memcpy(L, Laux, (size_t)n);
                best = err, scale = s, mn = m;
            }
        }
    }
    *neg_min = -mn;
    return scale;
}

// Q4_K / Q5_K (nmax 15 / 31): per sub-block of 32 qkx2 with weights rms + |x|, 6-bit scales and mins
// relative to the largest, then quants re-picked for the stored scales. L receives 0..nmax.
static void kquant_scales(const float *x, int nmax, float rmin, int nstep, uint16_t *dd, uint16_t *dmin,
                          uint8_t scales[12], uint8_t L[256]) {
    float sc[8], mins[8], w[32], max_scale = 0, max_min = 0;
    for (int j = 0; j < 8; j++) {
        const float *xs = x + 32 * j;
        float sum_x2 = 0;
        for (int l = 0; l < 32; l++) sum_x2 += xs[l] * xs[l];
        const float av = sqrtf(sum_x2 / 32);
        for (int l = 0; l < 32; l++) w[l] = av + fabsf(xs[l]);
        sc[j] = qkx2(32, nmax, xs, w, L + 32 * j, &mins[j], rmin, 0.1f, nstep);
        if (sc[j] > max_scale) max_scale = sc[j];
        if (mins[j] > max_min) max_min = mins[j];
    }
    const float inv_s = max_scale > 0 ? 63.f / max_scale : 0.f, inv_m = max_min > 0 ? 63.f / max_min : 0.f;
    memset(scales, 0, 12);
    for (int j = 0; j < 8; j++) {
        const int ls = imin(63, (uint8_t)nearest_int(inv_s * sc[j])), lm = imin(63, (uint8_t)nearest_int(inv_m * mins[j]));
        if (j < 4) {
            scales[j] = (uint8_t)ls;
            scales[j + 4] = (uint8_t)lm;
        } else {
            scales[j + 4] = (uint8_t)((ls & 15) | (lm & 15) << 4);
            scales[j - 4] |= (uint8_t)((ls >> 4) << 6);
            scales[j] |= (uint8_t)((lm >> 4) << 6);
        }
    }
    *dd = ds_f32_to_f16(max_scale / 63.f);
    *dmin = ds_f32_to_f16(max_min / 63.f);
    for (int j = 0; j < 8; j++) {
        int s, m;
        ds_ggml_scale_min_k4(j, scales, &s, &m);
        const float d = ds_f16_to_f32(*dd) * s;
        if (!d) continue;
        const float dm = ds_f16_to_f32(*dmin) * m;
        for (int i = 0; i < 32; i++) L[32 * j + i] = (uint8_t)imax(0, imin(nmax, nearest_int((x[32 * j + i] + dm) / d)));
    }
}

static void q4_k_row(const float *x, int64_t n, ds_block_q4_k *y) {
    uint8_t L[256];
    for (int64_t b = 0; b < n / 256; b++, x += 256) {
        kquant_scales(x, 15, -1.f, 20, &y[b].d, &y[b].dmin, y[b].scales, L);
        for (int c = 0; c < 4; c++)
            for (int l = 0; l < 32; l++) y[b].qs[32 * c + l] = (uint8_t)(L[64 * c + l] | L[64 * c + 32 + l] << 4);
    }
}

static void q5_k_row(const float *x, int64_t n, ds_block_q5_k *y) {
    uint8_t L[256];
    for (int64_t b = 0; b < n / 256; b++, x += 256) {
        kquant_scales(x, 31, -0.5f, 15, &y[b].d, &y[b].dmin, y[b].scales, L);
        memset(y[b].qh, 0, 32);
        for (int c = 0; c < 4; c++)
            for (int l = 0; l < 32; l++) {
                const int l1 = L[64 * c + l], l2 = L[64 * c + 32 + l];
                y[b].qs[32 * c + l] = (uint8_t)((l1 & 15) | (l2 & 15) << 4);
                y[b].qh[l] |= (uint8_t)((l1 >> 4) << 2 * c | (l2 >> 4) << (2 * c + 1));
            }
    }
}

// ggml's make_qx_quants with rmse_type 1 (weights x²), nmax 32: q in -32..31 (L = q + 32); the
// scale is the weighted least-squares one over 19 candidate inverse scales.
static float qx_quants(int n, const float *x, int8_t *L) {
    const int nmax = 32;
    float amax = 0, max = 0;
    for (int i = 0; i < n; i++)
        if (fabsf(x[i]) > amax) amax = fabsf(x[i]), max = x[i];
    if (amax < EPS_ZERO) {
        memset(L, 0, (size_t)n);
        return 0.f;
    }
    float iscale = -nmax / max, sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; i++) {
        const int l = imax(-nmax, imin(nmax - 1, nearest_int(iscale * x[i])));
        L[i] = (int8_t)(l + nmax);
        const float w = x[i] * x[i];
        sumlx += w * x[i] * l;
        suml2 += w * l * l;
    }
    float scale = suml2 ? sumlx / suml2 : 0.0f, best = scale * sumlx;
    for (int is = -9; is <= 9; is++) {
        if (is == 0) continue;
        iscale = -(nmax + 0.1f * is) / max;
        sumlx = suml2 = 0;
        for (int i = 0; i < n; i++) {
            const int l = imax(-nmax, imin(nmax - 1, nearest_int(iscale * x[i])));
            const float w = x[i] * x[i];
            sumlx += w * x[i] * l;
            suml2 += w * l * l;
        }
        if (suml2 > 0 && sumlx * sumlx > best * suml2) {
            for (int i = 0; i < n; i++) L[i] = (int8_t)(nmax + imax(-nmax, imin(nmax - 1, nearest_int(iscale * x[i]))));
            scale = sumlx / suml2, best = scale * sumlx;
        }
    }
    return scale;
}

static void q6_k_row(const float *x, int64_t n, ds_block_q6_k *y) {
    int8_t L[256];
    float sc[16];
    for (int64_t b = 0; b < n / 256; b++, x += 256) {
        float max_scale = 0, max_abs = 0;
        for (int ib = 0; ib < 16; ib++) {
            sc[ib] = qx_quants(16, x + 16 * ib, L + 16 * ib);
            if (fabsf(sc[ib]) > max_abs) max_abs = fabsf(sc[ib]), max_scale = sc[ib];
        }
        memset(&y[b], 0, sizeof y[b]);
        if (max_abs < EPS_ZERO) continue;
        const float iscale = -128.f / max_scale;
        y[b].d = ds_f32_to_f16(1 / iscale);
        for (int ib = 0; ib < 16; ib++) y[b].scales[ib] = (int8_t)imin(127, nearest_int(iscale * sc[ib]));
        for (int j = 0; j < 16; j++) {
            const float d = ds_f16_to_f32(y[b].d) * y[b].scales[j];
            if (!d) continue;
            for (int i = 0; i < 16; i++) L[16 * j + i] = (int8_t)(imax(-32, imin(31, nearest_int(x[16 * j + i] / d))) + 32);
        }
        for (int h = 0; h < 2; h++) {
            const int8_t *Lh = L + 128 * h;
            uint8_t *ql = y[b].ql + 64 * h, *qh = y[b].qh + 32 * h;
            for (int l = 0; l < 32; l++) {
                ql[l] = (uint8_t)((Lh[l] & 15) | (Lh[l + 64] & 15) << 4);
                ql[l + 32] = (uint8_t)((Lh[l + 32] & 15) | (Lh[l + 96] & 15) << 4);
                qh[l] = (uint8_t)((Lh[l] >> 4) | (Lh[l + 32] >> 4) << 2 | (Lh[l + 64] >> 4) << 4 | (Lh[l + 96] >> 4) << 6);
            }
        }
    }
}

// ---- dispatch ------------------------------------------------------------------------------------

int ds_gguf_write_block(ds_dtype t) {
    switch (t) {
    case DS_F32: case DS_F16: case DS_BF16: return 1;
    case DS_Q8_0: case DS_Q4_0: case DS_Q5_0: case DS_Q5_1: case DS_IQ4_NL: return 32;
    case DS_Q4_K: case DS_Q5_K: case DS_Q6_K: case DS_IQ4_XS: return 256;
    default: return 0;
    }
}

size_t ds_gguf_write_row_bytes(ds_dtype t, int64_t n) {
    if (t == DS_F32) return (size_t)n * 4;
    if (t == DS_F16 || t == DS_BF16) return (size_t)n * 2;
    return (size_t)(n / ds_ggml_block_elems(t)) * ds_ggml_block_bytes(t);
}

void ds_gguf_quantize_row(ds_dtype t, const float *x, int64_t n, void *out) {
    switch (t) {
    case DS_F32: memcpy(out, x, (size_t)n * 4); break;
    case DS_F16:
        for (int64_t i = 0; i < n; i++) ((uint16_t *)out)[i] = ds_f32_to_f16(x[i]);
        break;
    case DS_BF16:
        for (int64_t i = 0; i < n; i++) ((uint16_t *)out)[i] = ds_f32_to_bf16(x[i]);
        break;
    case DS_Q8_0: q8_0_row(x, n, out); break;
    case DS_Q4_0: q4_0_row(x, n, out); break;
    case DS_Q5_0: q5_0_row(x, n, out); break;
    case DS_Q5_1: q5_1_row(x, n, out); break;
    case DS_IQ4_NL: iq4_nl_row(x, n, out); break;
    case DS_Q4_K: q4_k_row(x, n, out); break;
    case DS_Q5_K: q5_k_row(x, n, out); break;
    case DS_Q6_K: q6_k_row(x, n, out); break;
    case DS_IQ4_XS: iq4_xs_row(x, n, out); break;
    default: break;
    }
}

// ---- presets and the per-tensor mix --------------------------------------------------------------

static const ds_gguf_preset k_presets[] = {
    {"F32", 0, DS_F32},      {"F16", 1, DS_F16},       {"BF16", 32, DS_BF16},    {"Q8_0", 7, DS_Q8_0},
    {"Q4_0", 2, DS_Q4_0},    {"Q5_0", 8, DS_Q5_0},     {"Q5_1", 9, DS_Q5_1},     {"Q4_K_S", 14, DS_Q4_K},
    {"Q4_K_M", 15, DS_Q4_K}, {"Q5_K_S", 16, DS_Q5_K},  {"Q5_K_M", 17, DS_Q5_K},  {"Q6_K", 18, DS_Q6_K},
    {"IQ4_NL", 25, DS_IQ4_NL}, {"IQ4_XS", 30, DS_IQ4_XS},
};
#define N_PRESETS (sizeof k_presets / sizeof *k_presets)

const ds_gguf_preset *ds_gguf_preset_find(const char *name) {
    for (size_t i = 0; i < N_PRESETS; i++)
        if (!strcasecmp(name, k_presets[i].name)) return &k_presets[i];
    return NULL;
}

const char *ds_gguf_preset_names(void) {
    return "F32, F16, BF16, Q8_0, Q4_0, Q5_0, Q5_1, Q4_K_S, Q4_K_M, Q5_K_S, Q5_K_M, Q6_K, IQ4_NL, IQ4_XS";
}

static int has(const char *s, const char *sub) { return strstr(s, sub) != NULL; }

// llama.cpp's use_more_bits: the first and last eighth of the layers and every third one between.
static int more_bits(int i, int n) { return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2; }

// llama.cpp's tensor_type_fallback for a row width the block size does not divide.
static ds_dtype fallback(ds_dtype t, int64_t ne0) {
    if (ne0 % ds_gguf_write_block(t) == 0) return t;
    ds_dtype f = t == DS_IQ4_XS ? DS_IQ4_NL : t == DS_Q4_K ? DS_Q5_0 : t == DS_Q5_K ? DS_Q5_1 : t == DS_Q6_K ? DS_Q8_0 : t;
    return ne0 % ds_gguf_write_block(f) == 0 ? f : DS_F16;
}

ds_dtype ds_gguf_tensor_type(const ds_gguf_preset *p, const ds_gguf_mix *mix, const char *name, int n_dims,
                             int64_t ne0, int i_attn_v, ds_dtype src) {
    const size_t len = strlen(name);
    // What llama-quantize leaves as the converter wrote it (F32 here): vectors, norms, routers.
    if (n_dims < 2 || len < 6 || strcmp(name + len - 6, "weight") || has(name, "_norm.weight") ||
        has(name, "ffn_gate_inp.weight"))
        return DS_F32;
    ds_dtype t = p->base;
    if (ds_gguf_write_block(t) == 1) return t; // F32 / F16 / BF16: every matrix
    if (has(name, "per_layer_model_proj")) return src == DS_F16 || src == DS_BF16 ? src : DS_F32; // "not too big"
    const int f = p->file_type;
    // (llama-quantize's token-embedding category holds Gemma's per-layer table too)
    const int is_output = !strcmp(name, "output.weight"),
              is_embd = !strcmp(name, "token_embd.weight") || !strcmp(name, "per_layer_token_embd.weight");
    int layer = -1;
    if (!strncmp(name, "blk.", 4)) layer = atoi(name + 4);
    if (is_output || (mix->tied && is_embd)) {
        if (ne0 % ds_gguf_write_block(t)) t = DS_Q8_0;
        else if (t != DS_Q8_0) t = DS_Q6_K;
    } else if (is_embd) {
        // the default type
    } else if (has(name, "attn_v.weight")) {
        if ((f == 25 || f == 30) && mix->n_gqa >= 4) t = DS_Q5_K;
        else if ((f == 15 || f == 17) && more_bits(i_attn_v, mix->n_attn_v)) t = DS_Q6_K;
        else if (f == 14 && i_attn_v < 4) t = DS_Q5_K;
        if (mix->n_expert == 8) t = DS_Q8_0;
    } else if (has(name, "attn_k.weight")) {
        if (mix->n_expert == 8) t = DS_Q8_0;
    } else if (has(name, "ffn_down")) {
        const int n = mix->n_layers, i = layer;
        if (f == 15) {
            if (more_bits(i, n)) t = DS_Q6_K;
        } else if (i < n / 8 && (f == 25 || f == 30)) {
            t = DS_Q5_K;
        } else if (f == 17 && more_bits(i, n)) {
            t = DS_Q6_K;
        } else if (f == 14 && i < n / 8) {
            t = DS_Q5_K;
        }
    } else if (has(name, "attn_output.weight")) {
        if (mix->n_expert == 8 && (f == 14 || f == 15 || f == 25 || f == 30)) t = DS_Q5_K;
    }
    return fallback(t, ne0);
}
