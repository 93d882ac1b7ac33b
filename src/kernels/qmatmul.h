// Products against MLX affine weights (4/8 bits, groups of 32/64): the few-rows kernels that
// dequantize on the fly. matmul.c dispatches to them (and widens tiles for sgemm when rows are many).
#ifndef DS_KERNELS_QMATMUL_H
#define DS_KERNELS_QMATMUL_H

#include "kernels/matmul.h"

// y[i*ldy + r] = dot(x_i, W_r) for output rows r in [r0, r1) and nb input rows (stride w->cols),
// W affine. Per group g of a row: scale_g · Σ q_i x_i + bias_g · Σ x_i, with the per-group Σ x
// computed once per input row; each packed row is read once per 8 input rows.
void ds_qrows_avx512(float *y, int ldy, const float *x, int nb, const ds_weight *w, int r0, int r1);
void ds_qrows_avx2(float *y, int ldy, const float *x, int nb, const ds_weight *w, int r0, int r1);
void ds_qrows_scalar(float *y, int ldy, const float *x, int nb, const ds_weight *w, int r0, int r1);

#endif
