// Products against quantized weights (MLX affine 4/8 bits in groups of 32/64, GGUF Q8_0): the
// few-rows kernels that dequantize on the fly. matmul.c dispatches to them (and widens tiles for sgemm when rows are many).
#ifndef DS_KERNELS_QMATMUL_H
#define DS_KERNELS_QMATMUL_H

#include "kernels/matmul.h"

// y[i*ldy + r] = dot(x_i, W_r) for output rows r in [r0, r1) and nb input rows (stride w->cols),
// W affine. Per group g of a row: scale_g · Σ q_i x_i + bias_g · Σ x_i, with the per-group Σ x
// computed once per input row; each packed row is read once per 8 input rows.
void ds_qrows_avx512(float *y, int ldy, const float *x, int nb, const ds_weight *w, int r0, int r1);
void ds_qrows_avx2(float *y, int ldy, const float *x, int nb, const ds_weight *w, int r0, int r1);
void ds_qrows_scalar(float *y, int ldy, const float *x, int nb, const ds_weight *w, int r0, int r1);

// GGUF's Q8_0: blocks of 32 int8 with one f16 scale; a row of `cols` is cols/32 blocks.
typedef struct {
    uint16_t d;    // scale (f16)
    int8_t qs[32]; // quants
} ds_block_q8_0;

// The same contract for Q8_0 weights: per block b of a row, d_b · Σ q_i x_i.
void ds_q80rows_avx512(float *y, int ldy, const float *x, int nb, const ds_weight *w, int r0, int r1);
void ds_q80rows_avx2(float *y, int ldy, const float *x, int nb, const ds_weight *w, int r0, int r1);
void ds_q80rows_scalar(float *y, int ldy, const float *x, int nb, const ds_weight *w, int r0, int r1);

#endif
