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
// "<module>.weight" -> module (returns 0 when the name does not end in ".weight" or is too long).
int ds_st_module_of(const char *name, char *module, size_t cap);
// A 1-D F32/F16/BF16 vector of length n, widened to f32 into out (n floats).
ds_status ds_st_vector(const ds_safetensors *st, const char *where, const char *name, int n, float *out);

#endif
