// Matrix products against stored weights: y = x · Wᵀ, the one operation that dominates inference.
// Weights stay in their file's type (mapped); activations are f32.
#ifndef DS_KERNELS_MATMUL_H
#define DS_KERNELS_MATMUL_H

#include <stddef.h>
#include <stdint.h>

#include "dspark/kernels.h"

// A 2-D weight matrix in PyTorch layout: `rows` output features, each a contiguous row of `cols`
// input features.
typedef struct {
    ds_dtype type;    // F32, F16, BF16, Q8_0, AFFINE4 or AFFINE8
    int rows, cols;
    const void *data; // (rows, cols) elements of `type` (Q8_0: rows * cols/32 blocks;
                      //  AFFINE4/8: (rows, cols * bits/32) packed uint32 words, see kernels/affine.h)
    // MLX affine quantization only (docs/formats/mlx-affine.md):
    int group_size;       // 32 or 64 elements per (scale, bias)
    ds_dtype scale_type;  // F32, F16 or BF16: the stored type of scales and biases
    const void *scales;   // (rows, cols / group_size)
    const void *biases;   // (rows, cols / group_size)
    int round_inputs;     // affine / Q8_0: few-row products round the input to int8 per group (Q8_0:
                          // block) and run on integer dot products (kernels/qmatmul.h); 0: f32 inputs.
                          // Set by ds_model_load (src/model/model.c) and the drafter loaders
                          // (src/draft/load.c, load_gguf.c): drafters' affine weights and every GGUF
                          // block type (llama.cpp's
                          // numerics; Q8_0 and the other 32-blocks per 32, K-quants and IQ4_XS per
                          // 256: the other block types have no f32-input kernel, Q8_0 keeps f32
                          // inputs only with ds_model_params.int8_inputs = -1); affine targets keep
                          // f32 inputs (MLX's) unless ds_model_params.int8_inputs = 1 asks.
                          // BF16: on the "avx512bf16" ISA (CPUs with AVX512-BF16), few-row products
                          // round the input to bf16 once per product (round to nearest even, relative
                          // error <= 2^-9 per element) and run on VDPBF16PS (kernels/matmul_bf16dp.h);
                          // 0, other ISAs and the sgemm path: f32 inputs, one f32 FMA per weight.
                          // Set only by ds_model_params.bf16_inputs (opt-in: see architecture.md)
} ds_weight;

// Bits per element of an affine weight (4 or 8), 0 for other types.
static inline int ds_weight_bits(const ds_weight *w) {
    return w->type == DS_AFFINE4 ? 4 : w->type == DS_AFFINE8 ? 8 : 0;
}

// Bytes one weight occupies (what a decode step reads; affine: packed words + scales + biases).
size_t ds_weight_bytes(const ds_weight *w);
// Bytes at w->data alone (affine: the packed words only).
size_t ds_weight_data_bytes(const ds_weight *w);

// y (n, w->rows) = x (n, w->cols) · Wᵀ. Few rows run a hand-vectorized kernel that reads each
// weight row once for all rows (memory-bound decode/verify); many rows go to OpenBLAS sgemm (BF16/F16
// weights are widened tile by tile into `scratch`, which must hold ds_matmul_scratch_floats(w) floats
// per thread, ds_threads() of them). Threads: the pool (base/threads.h) over items of output rows
// sized from the shape alone, each item one kernel or sgemm call (OpenBLAS itself runs
// single-threaded, so there is one thread pool, not two competing ones).
void ds_matmul(float *y, const float *x, const ds_weight *w, int n, float *scratch);
size_t ds_matmul_scratch_floats(const ds_weight *w);

// ds_matmul with the kernel choice of this call: products of at least min_rows rows go to sgemm
// (0 = the process default below; INT_MAX = always the multi-row kernel, whose result for a row never
// depends on the other rows: batch invariance, ds_forward_seq.batch_invariant).
void ds_matmul_ex(float *y, const float *x, const ds_weight *w, int n, float *scratch, int min_rows);

// The process default of ds_matmul: products of at least this many rows go to sgemm (0 = the
// measured defaults per weight type). A test and benchmark hook for the kernels; library code
// passes its choice per call (ds_matmul_ex).
void ds_matmul_set_gemm_min_rows(int n);
// The value set (0 = the defaults).
int ds_matmul_gemm_min_rows_setting(void);
// The fewest rows of a product ds_matmul (min_rows 0) sends to sgemm for w on this CPU and ISA,
// INT_MAX if none: below it, a row's result never depends on the other rows of the product.
int ds_matmul_gemm_rows(const ds_weight *w);

// Rows ids[0..n-1] of w (each in 0..rows-1) copied, in that order, into a new weight *out of the same
// type and layout (affine: the packed rows and their scales and biases). bufs[0..2] get the
// allocations to free (unused ones NULL). Returns 0, or -1 when out of memory (nothing allocated).
int ds_weight_select_rows(const ds_weight *w, const int32_t *ids, int n, ds_weight *out, void *bufs[3]);

// Rows `first .. first+n-1` of w as f32 (embedding lookup): out (n, cols).
void ds_weight_rows_f32(const ds_weight *w, int first, int n, float *out);
// Row `r` of w as f32.
void ds_weight_row_f32(const ds_weight *w, int r, float *out);

// Which SIMD path ds_matmul uses on this machine ("avx512bf16", "avx512", "avx2", "scalar";
// "avx512bf16" is "avx512" plus VDPBF16PS for BF16 weights with round_inputs).
const char *ds_matmul_isa(void);
// Force a path (for tests comparing implementations); returns 0 if the CPU lacks it.
int ds_matmul_force_isa(const char *isa);

// ds_openblas_core_hint (which OPENBLAS_CORETYPE this CPU deserves) is public: include/dspark.h.

#endif
