// MLX affine quantization: quantize, pack, dequantize. Numerics follow
// docs/formats/mlx-affine.md §5 to the letter (fp32 throughout, rint = round half to even, the
// "edge trick"), so our files are bit-identical to what the contract's formulas give
// (tests/reference/test_quant_bits.py checks words, scales and biases against a numpy version).
#include "kernels/affine.h"

#include <math.h>
#include <string.h>

#include "kernels/half.h"

int ds_affine_supported(int bits, int group_size) {
    return (bits == 4 || bits == 8) && (group_size == 32 || group_size == 64);
}

// Contract, "Quantize": one group of gs elements.
static void quantize_group(const float *w, int gs, int bits, uint8_t *q, float *scale_out, float *bias_out) {
    float w_min = w[0], w_max = w[0];
    for (int i = 1; i < gs; i++) {
        w_min = w[i] < w_min ? w[i] : w_min;
        w_max = w[i] > w_max ? w[i] : w_max;
    }
    const float n_bins = (float)((1 << bits) - 1);
    float scale = (w_max - w_min) / n_bins;
    if (!(scale > 1e-7f)) scale = 1e-7f; // max(·, 1e-7) in fp32
    float edge;
    if (fabsf(w_min) > fabsf(w_max)) {
        edge = w_min;
    } else {
        edge = w_max;
        scale = -scale;
    }
    const float q0 = rintf(edge / scale);
    float bias = 0.0f;
    if (q0 != 0.0f) {
        scale = edge / q0; // the dominant extreme becomes exactly representable
        bias = edge;
    }
    for (int i = 0; i < gs; i++) {
        float v = rintf((w[i] - bias) / scale);
        // clamp(·, 0, n_bins); NaN (0/0 of a degenerate group) clamps to 0
        v = v > 0.0f ? v : 0.0f;
        v = v < n_bins ? v : n_bins;
        q[i] = (uint8_t)v;
    }
    *scale_out = scale;
    *bias_out = bias;
}

void ds_affine_quantize_row(const float *w, int cols, int bits, int group_size, uint32_t *packed, float *scales,
                            float *biases) {
    const int per = 32 / bits, words = cols / per;
    memset(packed, 0, sizeof(uint32_t) * (size_t)words);
    uint8_t q[64];
    for (int g = 0; g < cols / group_size; g++) {
        quantize_group(w + (size_t)g * group_size, group_size, bits, q, &scales[g], &biases[g]);
        for (int i = 0; i < group_size; i++) {
            const int j = g * group_size + i; // contract, "Packing": LSB first within each word
            packed[j / per] |= (uint32_t)q[i] << ((j % per) * bits);
        }
    }
}

float ds_affine_load_scale(const void *p, ds_dtype stype, size_t g) {
    switch (stype) {
    case DS_BF16: return ds_bf16_to_f32(((const uint16_t *)p)[g]);
    case DS_F16: return ds_f16_to_f32(((const uint16_t *)p)[g]);
    default: return ((const float *)p)[g];
    }
}

// fp-contract=off: scale·q + bias rounds twice, as the contract's fp32 formula does, on every target.
// GCC takes it per function; clang only as a pragma, which holds to the end of the file.
#if defined(__clang__)
#pragma clang fp contract(off)
#define DS_NO_FP_CONTRACT
#else
#define DS_NO_FP_CONTRACT __attribute__((optimize("fp-contract=off")))
#endif
// Element j of a row sits at byte j·bits/8 (low nibble first for 4 bits): the words are
// little-endian, as on every machine we build for.
DS_NO_FP_CONTRACT void ds_affine_dequantize_row(const uint32_t *packed, const void *scales, const void *biases,
                                                ds_dtype stype, int cols, int bits, int group_size, float *out) {
    const uint8_t *q = (const uint8_t *)packed;
    for (int g = 0; g < cols / group_size; g++) {
        const float s = ds_affine_load_scale(scales, stype, (size_t)g), b = ds_affine_load_scale(biases, stype, (size_t)g);
        float *o = out + (size_t)g * group_size;
        if (bits == 8) {
            const uint8_t *p = q + (size_t)g * group_size;
            for (int i = 0; i < group_size; i++) o[i] = s * (float)p[i] + b; // w = scale·q + bias
        } else {
            const uint8_t *p = q + (size_t)g * group_size / 2;
            for (int i = 0; i < group_size / 2; i++) {
                o[2 * i] = s * (float)(p[i] & 15) + b;
                o[2 * i + 1] = s * (float)(p[i] >> 4) + b;
            }
        }
    }
}
