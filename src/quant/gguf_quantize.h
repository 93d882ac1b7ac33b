// GGUF weight types as dspark writes them: row quantizers for ggml's block types (the semantics of
// ggml's reference quantizers, which llama-quantize uses without an importance matrix: Q8_0 / Q4_0 /
// Q5_0 / Q5_1 by the block's absolute maximum or range, Q4_K / Q5_K by make_qkx2_quants' weighted
// scale-and-min search, Q6_K by make_qx_quants' scale search, IQ4_NL / IQ4_XS by the best-scale search
// over the non-linear values), and llama-quantize's file types ("presets": Q4_K_M, ...) with the
// per-tensor type mix of llama.cpp's llama_tensor_get_type (src/llama-quant.cpp), facts rewritten.
// The block layouts are kernels/ggml_quants.h's; the output dequantizes with ds_ggml_dequantize_row.
#ifndef DS_QUANT_GGUF_QUANTIZE_H
#define DS_QUANT_GGUF_QUANTIZE_H

#include <stddef.h>
#include <stdint.h>

#include "dspark/speculate.h"
#include "dspark/quant.h"

// Elements per block of a writable type (1 for F32, F16, BF16), 0 when dspark cannot write it.
int ds_gguf_write_block(ds_dtype t);
// Bytes of a row of n elements of t (n a multiple of ds_gguf_write_block(t)).
size_t ds_gguf_write_row_bytes(ds_dtype t, int64_t n);
// Encode n floats (a multiple of the block size) as type t at out (ds_gguf_write_row_bytes bytes).
void ds_gguf_quantize_row(ds_dtype t, const float *x, int64_t n, void *out);

// A llama-quantize file type (general.file_type).
typedef struct {
    const char *name;    // "Q4_K_M"
    int file_type;       // llama_ftype value
    ds_dtype base;       // the default type of matrices
} ds_gguf_preset;

// The preset named `name` (case-insensitive), or NULL.
const ds_gguf_preset *ds_gguf_preset_find(const char *name);
// The list of preset names, for messages ("F32, F16, ...").
const char *ds_gguf_preset_names(void);

// What the mix rule needs to know of the model.
typedef struct {
    int n_layers;     // block_count
    int n_attn_v;     // number of attn_v tensors in the file
    int n_gqa;        // n_heads / n_kv_heads
    int n_expert;     // routed experts (0 or 1: dense)
    int tied;         // no output.weight: token_embd is the output
} ds_gguf_mix;

// The type tensor `name` (ggml dims n_dims, ne0 its row width) gets under preset p: 1-D tensors,
// norms and routers stay F32, Gemma 4's per_layer_model_proj keeps `src` (its source's float type,
// which llama-quantize never changes); i_attn_v is how many attn_v tensors came before this one (file
// order).
ds_dtype ds_gguf_tensor_type(const ds_gguf_preset *p, const ds_gguf_mix *mix, const char *name, int n_dims,
                             int64_t ne0, int i_attn_v, ds_dtype src);

#endif
