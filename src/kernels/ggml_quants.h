// GGUF's (ggml's) block-quantized weight types that llama-quantize's CPU presets write: layouts,
// sizes and dequantization. A row of `cols` elements is cols/QK blocks stored back to back, QK = 32
// (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, IQ4_NL) or 256 (the K-quants Q2_K..Q6_K and IQ4_XS, "super-blocks"
// of 8 or 16 sub-blocks). The layouts and formulas are those of ggml (ggml-common.h block structs,
// ggml-quants.c dequantize_row_*), rewritten from those facts.
//
// Numerics: ds_ggml_dequantize_row computes every element with ggml's float operations in ggml's
// order (e.g. Q4_K: (d·sc)·q - (dmin·m), each product and the difference rounded to f32, no fused
// multiply-add), so its result equals ggml's reference dequantization bit for bit
// (tests/reference/test_ggml_quants.py). f16 scales are widened exactly (kernels/half.h). A NaN or
// infinite f16 scale is not an error here: it propagates as in ggml (a NaN scale makes every element
// of its block NaN, an infinite one gives ±Inf, or NaN where it meets a zero quant); the model loaders
// check the 1-D tensors (norms) for finiteness, and a matrix with such a block gives NaN outputs.
// The integer dot-product kernels for these types are in kernels/ggml_qdot.c (see qmatmul.h).
#ifndef DS_KERNELS_GGML_QUANTS_H
#define DS_KERNELS_GGML_QUANTS_H

#include <stddef.h>
#include <stdint.h>

#include "dspark/kernels.h"

#define DS_QK_K 256

// ---- 32-element blocks ---------------------------------------------------------------------------
// Q4_0: w = d·(q - 8), q in 0..15; element j (< 16) is the low nibble of qs[j], element j + 16 its high nibble.
typedef struct {
    uint16_t d;      // scale (f16)
    uint8_t qs[16];  // (32) 4-bit quants, two per byte
} ds_block_q4_0;     // 18 bytes / 32 elements
// Q4_1: w = d·q + m, q in 0..15, nibble order as Q4_0.
typedef struct {
    uint16_t d, m;   // scale and minimum (f16)
    uint8_t qs[16];  // (32) 4-bit quants
} ds_block_q4_1;     // 20 bytes / 32 elements
// Q5_0: w = d·(q - 16), q = nibble (as Q4_0) | bit j of qh (little-endian u32) << 4 for element j.
typedef struct {
    uint16_t d;      // scale (f16)
    uint8_t qh[4];   // (32) the fifth bits, element j at bit j
    uint8_t qs[16];  // (32) low 4 bits
} ds_block_q5_0;     // 22 bytes / 32 elements
// Q5_1: w = d·q + m, q as Q5_0 (0..31).
typedef struct {
    uint16_t d, m;   // scale and minimum (f16)
    uint8_t qh[4];   // (32) fifth bits
    uint8_t qs[16];  // (32) low 4 bits
} ds_block_q5_1;     // 24 bytes / 32 elements
// IQ4_NL: w = d·kvalues[q], q a nibble (order as Q4_0), kvalues the non-linear table below.
typedef struct {
    uint16_t d;      // scale (f16)
    uint8_t qs[16];  // (32) 4-bit indices into ds_iq4nl_values
} ds_block_iq4_nl;   // 18 bytes / 32 elements
// (Q8_0, w = d·q with 32 int8 q, is ds_block_q8_0 in kernels/qmatmul.h: 34 bytes / 32 elements.)

// ---- 256-element super-blocks (K-quants) ---------------------------------------------------------
// Q2_K: 16 sub-blocks of 16; w = (d·(sc & 15))·q - (dmin·(sc >> 4)), q in 0..3. Per half h (128
// elements) and j in 0..3: elements 128h + 32j + l (l < 32) are bits 2j..2j+1 of qs[32h + l];
// sub-block index 8h + 2j + (l >= 16).
typedef struct {
    uint8_t scales[16]; // (16) per sub-block: scale (low nibble), min (high nibble)
    uint8_t qs[64];     // (256) 2-bit quants
    uint16_t d, dmin;   // super-block scale for scales and for mins (f16)
} ds_block_q2_k;        // 84 bytes / 256 elements
// Q3_K: 16 sub-blocks of 16; w = (d·(sc - 32))·(q - 4·!hbit), q the 2 low bits (order as Q2_K) and
// hbit bit 4h + j of hmask[l] for element 128h + 32j + l; sc 6 bits: low nibbles in scales[0..7]
// (sub-blocks 0..7 low, 8..15 high nibble), high 2-bit pairs in scales[8..11].
typedef struct {
    uint8_t hmask[32];  // (256) high bits
    uint8_t qs[64];     // (256) low 2 bits
    uint8_t scales[12]; // (16) 6-bit scales, packed
    uint16_t d;         // super-block scale (f16)
} ds_block_q3_k;        // 110 bytes / 256 elements
// Q4_K: 8 sub-blocks of 32; w = (d·sc)·q - (dmin·m), q in 0..15, sc and m 6 bits (ds_ggml_scale_min_k4).
// Per 64 elements c: elements 64c + l are the low nibbles of qs[32c + l], 64c + 32 + l the high ones.
typedef struct {
    uint16_t d, dmin;   // super-block scales (f16)
    uint8_t scales[12]; // (8 + 8) 6-bit scales and mins, packed
    uint8_t qs[128];    // (256) 4-bit quants
} ds_block_q4_k;        // 144 bytes / 256 elements
// Q5_K: as Q4_K with a fifth bit: element 64c + l has bit 2c of qh[l], 64c + 32 + l bit 2c + 1 (value 16).
typedef struct {
    uint16_t d, dmin;   // super-block scales (f16)
    uint8_t scales[12]; // (8 + 8) 6-bit scales and mins
    uint8_t qh[32];     // (256) fifth bits
    uint8_t qs[128];    // (256) low 4 bits
} ds_block_q5_k;        // 176 bytes / 256 elements
// Q6_K: 16 sub-blocks of 16; w = (d·sc)·(q - 32), q 6 bits, sc int8. Per half h: for l < 32,
// elements 128h + l / +32 / +64 / +96 take ql[64h + l] low nibble / ql[64h + 32 + l] low nibble /
// ql[64h + l] high / ql[64h + 32 + l] high, with bits 0-1 / 2-3 / 4-5 / 6-7 of qh[32h + l] on top;
// sub-block 8h + l/16 + 2·(that index 0..3).
typedef struct {
    uint8_t ql[128];    // (256) low 4 bits
    uint8_t qh[64];     // (256) high 2 bits
    int8_t scales[16];  // (16) sub-block scales
    uint16_t d;         // super-block scale (f16)
} ds_block_q6_k;        // 210 bytes / 256 elements
// IQ4_XS: 8 sub-blocks of 32; w = (d·(ls - 32))·kvalues[q], ls 6 bits: low nibble of scales_l[ib/2]
// (ib odd: high nibble) | bits 2ib..2ib+1 of scales_h << 4; per sub-block ib, qs[16ib..] as IQ4_NL.
typedef struct {
    uint16_t d;         // super-block scale (f16)
    uint16_t scales_h;  // (8) high 2 bits of the sub-block scales
    uint8_t scales_l[4];// (8) low 4 bits
    uint8_t qs[128];    // (256) 4-bit indices into ds_iq4nl_values
} ds_block_iq4_xs;      // 136 bytes / 256 elements

// The IQ4_NL / IQ4_XS non-linear values (ggml's kvalues_iq4nl).
extern const int8_t ds_iq4nl_values[16];

// Elements per block of a GGUF block type (Q8_0 included), 0 for any other type.
int ds_ggml_block_elems(ds_dtype t);
// Bytes per block (0 for non-block types).
size_t ds_ggml_block_bytes(ds_dtype t);
// Bytes of a row of `cols` elements (cols a multiple of the block size).
static inline size_t ds_ggml_row_bytes(ds_dtype t, int cols) {
    return (size_t)(cols / ds_ggml_block_elems(t)) * ds_ggml_block_bytes(t);
}
// Whether t is one of the block types added beside Q8_0 (the integer kernels of kernels/ggml_qdot.c).
int ds_ggml_is_kquant_family(ds_dtype t);

// Sub-block j (0..7) of a Q4_K/Q5_K super-block: its 6-bit scale and min from the packed 12 bytes.
static inline void ds_ggml_scale_min_k4(int j, const uint8_t *q, int *sc, int *m) {
    if (j < 4) {
        *sc = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
        *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
}
// The 16 6-bit scales of a Q3_K super-block (0..63, before the -32).
void ds_ggml_q3k_scales(const uint8_t packed[12], int out[16]);

// n elements (a multiple of the type's block size) of blocks of type t, dequantized to out (f32),
// bit-exact with ggml's dequantize_row_* (see above). t must be a block type.
void ds_ggml_dequantize_row(ds_dtype t, const void *blocks, int64_t n, float *out);

#endif
