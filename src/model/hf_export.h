// A loaded llama GGUF target as a Hugging Face LlamaForCausalLM directory sees it: tensor names,
// shapes and rows in HF's layout (llama.cpp's Q/K row permutation undone), the config.json and the
// tokenizer (carried as tokenizer.gguf, which the HF loader reads). Shared by everything that writes
// a GGUF target out as an HF directory (quantize --target, inflate).
#ifndef DS_MODEL_HF_EXPORT_H
#define DS_MODEL_HF_EXPORT_H

#include <cjson/cJSON.h>

#include "model/model.h"

// One tensor of the HF view.
typedef struct {
    char name[96];        // "model.layers.3.self_attn.q_proj.weight", ...
    int n_dims;           // 2 (a matrix in `w`) or 1 (a vector in `vec`)
    int64_t shape[2];     // (rows, cols) or (n)
    ds_weight w;          // 2-D: the stored weight, rows in the source's order
    const float *vec;     // 1-D: (n) f32 values
    int perm_heads;       // > 0: w's rows are llama.cpp's interleaved Q/K order over this many heads
} ds_hf_tensor;

// What each index of the HF view is: embed, lm_head (absent when tied), final norm, then per layer
// the nine tensors in this order.
typedef enum {
    DS_HF_EMBED, DS_HF_LM_HEAD, DS_HF_NORM,
    DS_HF_Q, DS_HF_K, DS_HF_V, DS_HF_O, DS_HF_GATE, DS_HF_UP, DS_HF_DOWN, DS_HF_ATTN_NORM, DS_HF_FFN_NORM,
} ds_hf_kind;
#define DS_HF_PER_LAYER 9

// Whether the model can be exported (a llama GGUF; plain Llama layers); else a one-line error.
ds_status ds_hf_export_check(const ds_model *m, const char *path);
// Number of tensors of the HF view (tied embeddings: no lm_head).
int ds_hf_count(const ds_model *m);
// Tensor i (0 .. ds_hf_count - 1) of the HF view, in HF's file order.
void ds_hf_at(const ds_model *m, int i, ds_hf_tensor *t);
// The tensor of one kind (layer-wise kinds take `layer`; DS_HF_LM_HEAD exists even when tied: it
// is then the embedding, named "lm_head.weight").
void ds_hf_tensor_of(const ds_model *m, ds_hf_kind kind, int layer, ds_hf_tensor *t);
// Row r of t in HF's order, widened to f32 (cols floats); a vector has one row.
void ds_hf_row(const ds_hf_tensor *t, int r, float *out);
// config.json of the HF view (LlamaForCausalLM, explicit head_dim, torch_dtype float32), or NULL
// when out of memory.
cJSON *ds_hf_config(const ds_model *m);
// Write dir/tokenizer.gguf (the source's general.architecture and tokenizer.* keys, no tensors)
// when the GGUF has a tokenizer; *written says whether it did.
ds_status ds_hf_write_tokenizer(const ds_model *m, const char *dir, int *written);

#endif
