// The target model's internal layout: a Llama-family decoder whose weights point into mapped files.
#ifndef DS_MODEL_MODEL_H
#define DS_MODEL_MODEL_H

#include "dspark.h"
#include "kernels/matmul.h"

typedef struct {
    float *attn_norm; // (dim)                          pre-attention RMSNorm weight
    ds_weight wq;     // (n_heads * head_dim, dim)
    ds_weight wk;     // (n_kv_heads * head_dim, dim)
    ds_weight wv;     // (n_kv_heads * head_dim, dim)
    ds_weight wo;     // (dim, n_heads * head_dim)
    float *q_norm;    // (head_dim) per-head RMSNorm on q (Qwen3), or NULL
    float *k_norm;    // (head_dim) per-head RMSNorm on k (Qwen3), or NULL
    float *ffn_norm;  // (dim)                          pre-MLP RMSNorm weight
    ds_weight w_gate; // (ffn_dim, dim)
    ds_weight w_up;   // (ffn_dim, dim)
    ds_weight w_down; // (dim, ffn_dim)
} ds_layer;

struct ds_model {
    ds_model_info info;
    char arch[32];
    char name[128];
    ds_weight tok_embd;  // (vocab, dim)
    ds_layer *layers;    // (n_layers)
    float *out_norm;     // (dim)
    ds_weight output;    // (vocab, dim); the same matrix as tok_embd when tied
    float *inv_freq;     // (head_dim / 2) RoPE inverse frequencies theta^(-2i/head_dim)
    ds_tokenizer *tok;   // NULL when the checkpoint has no tokenizer we support
    float *owned;        // every f32 vector converted at load (norms), one allocation
    size_t owned_used, owned_cap;
    void *backing;       // the mapped file(s): ds_gguf* or ds_safetensors*
    void (*backing_free)(void *);
};

// Shared by the loaders: size and check the config, take norms as f32, compute weight_bytes and
// RoPE frequencies. Called after the weights are attached.
ds_status ds_model_finish(ds_model *m, const char *path);
// Reserve n floats of the model's owned vector storage (sized by the loader up front).
float *ds_model_own(ds_model *m, size_t n);

ds_status ds_model_load_gguf(const char *path, ds_model **out);
ds_status ds_model_load_hf(const char *dir, ds_model **out);

struct ds_kv {
    const ds_model *model;
    int len;        // rows held
    int cap;        // rows allocated (grows by doubling up to max_ctx)
    int max_ctx;
    // Transposed per head, so attention runs along positions with no horizontal reductions:
    // scores = Σ_d q[d]·K[d][:] (axpys), out[d] = p·V[d][:] (one dot per d), for any head_dim.
    float **k;      // (n_layers) each (n_kv_heads, head_dim, cap), K after RoPE
    float **v;      // (n_layers) each (n_kv_heads, head_dim, cap)
};

// Make room for `need` rows (amortized doubling; no allocation once the cache has grown).
ds_status ds_kv_reserve(ds_kv *kv, int need);

// The SentencePiece tokenizer of a GGUF file (a "tokenizer.gguf" next to an HF directory that
// dspark quantize --target converted from GGUF) into m->tok and the BOS/EOS/UNK ids.
ds_status ds_model_load_gguf_tokenizer(ds_model *m, const char *path);

#endif
