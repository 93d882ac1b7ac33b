// MLX "affine" quantization (docs/formats/mlx-affine.md, a contract followed exactly):
// per group of `group_size` consecutive elements of a row, w ≈ scale·q + bias with q in
// 0 .. 2^bits − 1, q packed least significant first into little-endian uint32 words.
#ifndef DS_KERNELS_AFFINE_H
#define DS_KERNELS_AFFINE_H

#include <stddef.h>
#include <stdint.h>

#include "dspark/kernels.h"

// bits ∈ {4, 8}, group_size ∈ {32, 64}: returns 1 when supported.
int ds_affine_supported(int bits, int group_size);

// Quantize one row of `cols` floats (cols a multiple of group_size): packed (cols·bits/32 words),
// scales and biases (cols/group_size each, fp32 as computed; the caller rounds them to the stored
// dtype). Every formula is the contract's, in fp32, in its order.
void ds_affine_quantize_row(const float *w, int cols, int bits, int group_size, uint32_t *packed, float *scales,
                            float *biases);

// Element j of a packed row: word j / (32/bits), bit offset (j mod (32/bits))·bits.
static inline unsigned ds_affine_q(const uint32_t *packed, int bits, int j) {
    const int per = 32 / bits;
    return (packed[j / per] >> ((j % per) * bits)) & ((1u << bits) - 1u);
}

// Dequantize one row: out[j] = scale·q_j + bias (scales/biases of `stype` F32/F16/BF16, as stored,
// computed in fp32 without fused multiply-add).
void ds_affine_dequantize_row(const uint32_t *packed, const void *scales, const void *biases, ds_dtype stype,
                              int cols, int bits, int group_size, float *out);

// Scale/bias element g of a row of `stype` as f32.
float ds_affine_load_scale(const void *p, ds_dtype stype, size_t g);

#endif
