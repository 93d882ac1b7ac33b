// Products against quantized weights (MLX affine 4/8 bits in groups of 32/64, GGUF Q8_0): the
// few-rows kernels that dequantize on the fly. matmul.c dispatches to them (and widens tiles for sgemm when rows are many).
#ifndef DS_KERNELS_QMATMUL_H
#define DS_KERNELS_QMATMUL_H

#include <string.h>

#include "kernels/half.h"
#include "kernels/matmul.h"

// y[i*ldy + r] = dot(x_i, W_r) for output rows r in [r0, r1) and nb input rows (stride w->cols),
// W affine. Per group g of a row: scale_g · Σ q_i x_i + bias_g · Σ x_i, with the per-group Σ x
// computed once per input row; each packed row is read once per 8 input rows.
void ds_qrows_avx512(float *y, int ldy, const float *x, int nb, const ds_weight *w, int r0, int r1);
void ds_qrows_avx2(float *y, int ldy, const float *x, int nb, const ds_weight *w, int r0, int r1);
void ds_qrows_scalar(float *y, int ldy, const float *x, int nb, const ds_weight *w, int r0, int r1);

// How far ahead of the weights being multiplied the quantized kernels prefetch (bytes: qmatmul_i8.c,
// qmatmul_isa.inc, ggml_qdot.c). A one-row pass streams the weights at 25-30 GB/s on one core
// against ~100 ns of DRAM latency: 1-2 KB ahead left a quarter of the bandwidth unused (bench_quant
// --ggq, Q4_K 4096 x 4096, one row: 475 -> 360 us with 9-18 KB; docs/results.md).
#define DS_QPREFETCH_BYTES 12288

// ---- Affine weights times the input rounded to int8 (qmatmul_i8.c) ----------------------------
// The numerics of every affine product of few rows (decoding, verification, drafting): each input
// row is rounded per group of the weight's group size gs, r_i = round-half-even(x_i · 127 / amax_g)
// in -127..127 with scale d_g = amax_g / 127 (d_g = 0 for an all-zero group; NaN for a group holding a
// NaN or infinity), and the product is that of the dequantized weights with the rounded input:
// y = Σ_g s_g·d_g·(Σ_{i∈g} q_i r_i) + b_g·(d_g·Σ_{i∈g} r_i), the integer sums exact (VPDPBUSD: u8 q
// times s8 r). The same rounding on every instruction set, so a row's integers never depend on the
// machine; only the float additions' order follows the vector width (as everywhere). Many-row
// affine products (prefill) go to sgemm over dequantized tiles with the f32 input, as before (GGUF
// block types stay on their integer kernels: matmul.c, DS_GGQ_GEMM_ROWS).
// ds_qx_pack's ch for Q4_K / Q5_K on VNNI, one input row: per 128 columns, the quarters 0, 2, 1, 3
// (the order of the quants' low nibbles then high nibbles in 64 bytes, so the kernel needs no shuffle).
#define DS_QX_K4 (-128)
// ds_qx_pack's ch for Q4_K / Q5_K on VNNI + GFNI, several input rows: the rows interleaved by 8 (the
// last block of 8 padded with zero rows), so one VPDPBUSD multiplies 8 weights broadcast to every
// lane by 8 rows' same 8 columns (ggml_qdot.c). Per block of 8 rows and super-block of 256 columns:
// q (32, 8, 8): per 8 columns in natural order, per row, its 8 bytes; d (8): per row; bs (8, 8, 2):
// per pair of 16-column groups, per row, the two per-16 sums (natural order); s is not kept.
#define DS_QX_R8 (-256)
typedef struct {
    const int8_t *q; // (n, cols) the rounded input; 4 bits with ch > 0: per block of ch columns, the
                     // even elements, then the odd ones (the weights' nibble order, no shuffle);
                     // ch = DS_QX_K4: see there
    const float *d;  // (n, cols / gs) per group: amax / 127
    const float *s;  // (n, cols / gs) per group: d · Σ r (the biases' term)
    const int16_t *bs; // gs = 256 only (GGUF K-quants, a Q8_K-style input): (n, cols / 16) Σ r per
                       // 16 packed columns (in q's order), else NULL
    int ch;            // the layout: ds_qx_pack's ch (DS_QX_R8: see there)
} ds_qx;

// Bytes ds_qx_pack needs for n rows of `cols` in groups of gs and layout ch (16-byte aligned buffer;
// gs = 256 adds the per-16 sums; DS_QX_R8 counts n rounded up to 8).
size_t ds_qx_bytes(int n, int cols, int gs, int ch);
// Round n input rows (stride cols) into buf (ds_qx_bytes of it); ch: the layout of the kernel that
// will read it (ds_qirows_ch): 0 natural order, > 0 the 4-bit column block, DS_QX_K4, DS_QX_R8.
ds_qx ds_qx_pack(void *buf, const float *x, int n, int cols, int gs, int ch);
// The ch an ISA's kernel reads ("vnni", "avx2", "scalar") for n input rows at a time.
int ds_qirows_ch(const char *isa, const ds_weight *w, int n);
// y[i*ldy + r] for output rows [r0, r1) of the nb packed rows (group size 32 or 64, bits 4 or 8).
void ds_qirows_vnni(float *y, int ldy, const ds_qx *px, int nb, const ds_weight *w, int r0, int r1);
void ds_qirows_avx2(float *y, int ldy, const ds_qx *px, int nb, const ds_weight *w, int r0, int r1);
void ds_qirows_scalar(float *y, int ldy, const ds_qx *px, int nb, const ds_weight *w, int r0, int r1);

// ---- GGUF block types times the rounded input (kernels/ggml_qdot.c) ---------------------------
// Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL: the input rounded per block of 32 (as Q8_0: a Q8_0-style block with
// an f32 scale); per block y += (d_w·d_x)·Σ q_i r_i (+ m_w·(d_x·Σ r) for Q4_1 / Q5_1), q the block's
// integer values (Q4_0: nibble - 8, IQ4_NL: the table's value). K-quants and IQ4_XS: rounded per 256
// (a Q8_K-style block: one f32 scale and the per-16 sums bs); per super-block
// y += (d·d_x)·Σ_j sc_j·Σ_{i∈j} q_i r_i - (dmin·d_x)·Σ_j m_j·bs_j, the sums exact integers (offsets
// such as Q6_K's -32 or Q3_K's -4 enter through bs). ds_qirows_* call these for those types. Every
// kernel computes the same integers; the scalar one adds the float terms per block in order (for
// the K-quants and IQ4_XS into eight accumulators, super-block sb into sb % 8, combined at the end
// of the row: ggml_qdot.c's KQ_SUM8), and so does the VNNI one for the K-quants and IQ4_XS
// (bitwise the scalar results); the AVX2 kernels
// and the VNNI 32-element ones (bitwise equal to each other) accumulate them per int32 lane.
void ds_ggq_rows_vnni(float *y, int ldy, const ds_qx *px, int nb, const ds_weight *w, int r0, int r1);
void ds_ggq_rows_avx2(float *y, int ldy, const ds_qx *px, int nb, const ds_weight *w, int r0, int r1);
void ds_ggq_rows_scalar(float *y, int ldy, const ds_qx *px, int nb, const ds_weight *w, int r0, int r1);
// Tests: 0 keeps several rows of Q4_K / Q5_K on the one-row layouts' kernel (kz_blk) even where
// the CPU has the DS_QX_R8 one (AVX512-VNNI and GFNI), 1 (the default) allows it. Both give the same bits.
void ds_ggq_allow_r8(int on);

// Scales and biases of groups [o, o + ng) of an affine weight (o counts groups from the matrix's
// start: row · cols/gs + first group), widened to f32.
static inline void ds_affine_row_scales(const ds_weight *w, size_t o, int ng, float *sf, float *bf) {
    switch (w->scale_type) {
    case DS_BF16:
        for (int g = 0; g < ng; g++) {
            sf[g] = ds_bf16_to_f32(((const uint16_t *)w->scales)[o + g]);
            bf[g] = ds_bf16_to_f32(((const uint16_t *)w->biases)[o + g]);
        }
        break;
    case DS_F16:
        for (int g = 0; g < ng; g++) {
            sf[g] = ds_f16_to_f32(((const uint16_t *)w->scales)[o + g]);
            bf[g] = ds_f16_to_f32(((const uint16_t *)w->biases)[o + g]);
        }
        break;
    default:
        memcpy(sf, (const float *)w->scales + o, sizeof(float) * (size_t)ng);
        memcpy(bf, (const float *)w->biases + o, sizeof(float) * (size_t)ng);
    }
}

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
