// Taking checked weights out of safetensors files (shared by the HF target and drafter loaders).
#ifndef DS_MODEL_ST_WEIGHTS_H
#define DS_MODEL_ST_WEIGHTS_H

#include "io/safetensors.h"
#include "kernels/matmul.h"

// A 2-D F32/F16/BF16 matrix of shape (rows, cols) (-1 = any). Absent: error unless `optional`
// (then w->data stays NULL). `where` names the checkpoint in messages.
ds_status ds_st_weight(const ds_safetensors *st, const char *where, const char *name, int rows, int cols,
                       int optional, ds_weight *w);
// The same, reading MLX affine weights (quantized iff "<module>.scales" exists next to
// "<module>.weight"; layout and bits/group size checked against `q`, the checkpoint's quantization
// block; q NULL or absent: a quantized tensor is an error). The result has the logical (rows, cols).
typedef struct ds_quant_config ds_quant_config;
ds_status ds_st_weight_q(const ds_safetensors *st, const char *where, const char *name, int rows, int cols,
                         int optional, const ds_quant_config *q, ds_weight *w);
// Experts stacked in one 3-D tensor `name` of shape (n, total_rows, cols) (F32/F16/BF16; or MLX
// affine: U32 (n, total_rows, cols·bits/32) with "<module>.scales" / ".biases" (n, total_rows,
// cols/group_size), module = name without ".weight", or name itself for a bare parameter such as
// "experts.gate_up_proj"): w[e] (n of them) = rows row0 .. row0+rows-1 of expert e, as views into
// the mapping. Returns 0 (*found) when the tensor is absent.
ds_status ds_st_experts_q(const ds_safetensors *st, const char *where, const char *name, int n, int total_rows,
                          int row0, int rows, int cols, const ds_quant_config *q, ds_weight *w, int *found);
// "<module>.weight" -> module (returns 0 when the name does not end in ".weight" or is too long).
int ds_st_module_of(const char *name, char *module, size_t cap);
// A 1-D F32/F16/BF16 vector of length n, widened to f32 into out (n floats).
ds_status ds_st_vector(const ds_safetensors *st, const char *where, const char *name, int n, float *out);

#endif
