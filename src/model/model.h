// The target model's internal layout: a Llama-family decoder whose weights point into mapped files.
#ifndef DS_MODEL_MODEL_H
#define DS_MODEL_MODEL_H

#include "dspark/model.h"
#include "io/mapfile.h"
#include "kernels/matmul.h"
#include "model/kvcache.h"

// Feed-forward gate activation: SwiGLU (Llama, Qwen) or GeGLU with tanh-approximate GELU (Gemma
// targets: ds_geglu's vectorized tanh; Gemma drafters: libm's tanhf, ds_geglu_tanhf, as trained).
typedef enum { DS_ACT_SILU = 0, DS_ACT_GELU_TANH = 1, DS_ACT_GELU_TANHF = 2 } ds_act;

// One set of RoPE inverse frequencies (a layer type may have its own base, scaling and rotated part;
// zero frequencies leave their pairs unrotated: Gemma 4's proportional partial RoPE).
typedef struct {
    float *inv_freq; // (half)
    int half;        // head_dim / 2 of the layers using it
} ds_rope_freqs;

// Routed experts of one layer (Qwen2-MoE, Qwen3-MoE, Gemma 4 26B-A4B): the router picks top_k of
// n_experts per row; the layer's FFN output is Σ_j w_j · expert_j(x) (accumulated in the row's own
// rank order j = 0..top_k-1). Expert matrices are views into the mapped checkpoint (per-expert
// tensors or slices of stacked 3-D ones); only the experts a batch routes to are read.
typedef struct {
    int n_experts, top_k, ffn_dim; // ffn_dim: moe_intermediate_size
    int norm_topk;                 // renormalize the top-k probabilities to sum 1
    ds_weight router;              // (n_experts, dim)
    float *router_scale;           // (dim) Gemma 4: the router reads RMSNorm(x) (no weight) ⊙ scale · dim^-0.5; or NULL
    float *expert_scale;           // (n_experts) Gemma 4 per_expert_scale multiplies the routing weights; or NULL
    ds_weight *gate, *up, *down;   // (n_experts) each (ffn_dim, dim), (ffn_dim, dim), (dim, ffn_dim)
    ds_weight shared_gate;         // (1, dim) Qwen2-MoE shared_expert_gate: the dense MLP (the shared expert) is
                                   // scaled by sigmoid(shared_gate · x); data NULL: unscaled (Gemma 4) or none
    float *pre_norm;               // (dim) Gemma 4 pre_feedforward_layernorm_2: experts read RMSNorm(residual), or NULL
    float *dense_post_norm;        // (dim) Gemma 4 post_feedforward_layernorm_1 on the dense MLP's output, or NULL
    float *post_norm;              // (dim) Gemma 4 post_feedforward_layernorm_2 on the experts' output, or NULL
} ds_moe;

#define DS_MAX_ROPE 2
#define DS_MAX_STOP 16

// Norm vectors hold the effective multiplier: Gemma 3's x·(1 + w) is stored as 1 + w at load.
typedef struct {
    float *attn_norm;      // (dim)                          pre-attention RMSNorm weight
    ds_weight wq;          // (n_heads * head_dim, dim)
    ds_weight wk;          // (n_kv_heads * head_dim, dim)
    ds_weight wv;          // (n_kv_heads * head_dim, dim); data NULL: V = K projection (Gemma 4 K = V)
    ds_weight wo;          // (dim, n_heads * head_dim)
    float *bq, *bk, *bv;   // (n_heads * head_dim), (n_kv_heads * head_dim) x2: projection biases, or NULL
    float *bo;             // (dim) output projection bias, or NULL
    float *q_norm;         // (head_dim) per-head RMSNorm on q (Qwen3, Gemma), or NULL
    float *k_norm;         // (head_dim) per-head RMSNorm on k (Qwen3, Gemma), or NULL
    int v_norm;            // per-head weightless RMSNorm on v (Gemma 4)
    float *attn_post_norm; // (dim) RMSNorm of the attention output before the residual add (Gemma), or NULL
    float *ffn_norm;       // (dim)                          pre-MLP RMSNorm weight
    ds_weight w_gate;      // (ffn_dim, dim); data NULL on an MoE layer without a dense MLP (Qwen3-MoE)
    ds_weight w_up;        // (ffn_dim, dim)
    ds_weight w_down;      // (dim, ffn_dim)
    const ds_moe *moe;     // routed experts (into ds_model.moe), or NULL: a dense layer
    float *ffn_post_norm;  // (dim) RMSNorm of the MLP output before the residual add (Gemma), or NULL
    // Per-layer embeddings (Gemma 4 E-series; data NULL elsewhere): after the MLP residual add,
    // x += ple_post_norm(ple_proj · (gelu_tanh(ple_gate · x) ⊙ per-layer input of this layer)).
    ds_weight ple_gate;    // (ple_dim, dim)
    ds_weight ple_proj;    // (dim, ple_dim)
    float *ple_post_norm;  // (dim)
    // Geometry and options (0 = the model-wide value, filled by ds_model_finish).
    int head_dim, n_kv_heads;
    int ffn_dim;           // MLP width (0 = the model-wide value; Gemma 4 double-wide MLP on shared layers)
    int kv_shared;         // Gemma 4 KV sharing: no wk/wv and no cache of its own; attends over kv_src's
    int kv_src;            // the layer whose KV cache this layer attends over (itself unless kv_shared)
    int window;            // sliding window: attend to the last `window` positions (0 = all)
    int rope;              // index into ds_model.rope
    float attn_scale;      // softmax scale of q·k (0 = head_dim^-0.5)
    float out_scale;       // multiplies the residual stream after the layer (Gemma 4 layer_scalar; 0 = 1)
} ds_layer;

struct ds_model {
    ds_model_info info;
    char arch[32];
    char name[128];
    char *path;          // the file or directory it was loaded from (for messages)
    int bf16_inputs;     // ds_model_params.bf16_inputs: its BF16 products round their inputs to bf16
    int kv_f16;          // ds_model_params.kv_f16: its KV caches hold halves
    ds_weight tok_embd;  // (vocab, dim)
    ds_layer *layers;    // (n_layers)
    float *out_norm;     // (dim)
    ds_weight output;    // (vocab, dim); the same matrix as tok_embd when tied
    float *inv_freq;     // (head_dim / 2) RoPE inverse frequencies of rope[0]
    ds_rope_freqs rope[DS_MAX_ROPE]; // rope[0] defaults to theta^(-2i/head_dim) over info.head_dim
    int n_rope;
    float embed_scale;   // embeddings are multiplied by it (Gemma: sqrt(dim) in the weight dtype); 0 = none
    // Per-layer embeddings (Gemma 4 E-series; ple_dim 0 = none). Per row, the per-layer inputs are
    // (RMSNorm(ple_model_proj · e / sqrt(dim)) + ple_embd[token] · ple_embed_scale) / sqrt(2), one
    // (ple_dim) slice per layer (RMSNorm per slice with ple_proj_norm), e the scaled embedding.
    int ple_dim;             // hidden_size_per_layer_input
    ds_weight ple_embd;      // (vocab_size_per_layer_input, n_layers * ple_dim), mapped; only batch rows are read
    float ple_embed_scale;   // sqrt(ple_dim) in the table's dtype
    ds_weight ple_model_proj; // (n_layers * ple_dim, dim)
    float *ple_proj_norm;    // (ple_dim)
    ds_moe *moe;             // (n_moe) the MoE layers' experts (layers point into it), or NULL
    int n_moe;
    ds_weight *experts;      // (n_moe, 3, n_experts) the expert matrices those point into
    ds_act act;
    float final_softcap; // logits = c·tanh(logits / c) (Gemma), 0 = none
    int32_t stop_ids[DS_MAX_STOP]; // ids that end generation (eos_id first)
    int n_stop;
    int max_head_dim, max_q_dim, max_kv_dim, max_ffn_dim; // over layers (workspace and scratch sizing)
    int max_experts, max_top_k, max_expert_dim;          // over MoE layers (0 without)
    ds_tokenizer *tok;   // NULL when the checkpoint has no tokenizer we support
    float *owned;        // every f32 vector converted at load (norms), one allocation
    size_t owned_used, owned_cap;
    ds_huge_report huge; // how the load populated the matrices (resident bytes, huge-mapped, re-read)
    void *backing;       // the mapped file(s): ds_gguf* or ds_safetensors*
    void (*backing_free)(void *);
};

// Add a stop id (ignored when negative, already present, or the set is full).
void ds_model_add_stop(ds_model *m, int32_t id);
// Every matrix of layer L a product reads (the attention and MLP projections, the per-layer-input
// gate and projection), through fn (with ctx); a drafter's layers too.
void ds_layer_each_weight(ds_layer *L, void (*fn)(ds_weight *, void *), void *ctx);
// Matrices' bytes gathered for ds_mapfile_populate_huge (a target's at load, a drafter's): through
// ds_weight_range (a model_each_weight / ds_layer_each_weight callback), which fills p / n up to cap
// and counts every matrix in count (so a first pass with no arrays sizes them).
typedef struct {
    const void **p; // (cap) each matrix's first byte
    size_t *n;      // (cap) its bytes
    int count, cap;
} ds_weight_ranges;
void ds_weight_range(ds_weight *w, void *ranges);
// Marks a BF16 matrix to round its products' inputs to bf16 (ds_model_params.bf16_inputs; the
// VDPBF16PS kernel where the CPU has it, kernels/matmul_bf16dp.h); other matrices are left as they are.
void ds_weight_bf16_inputs(ds_weight *w, void *unused);
// The fewest rows of a forward that send one of m's products to sgemm (ds_matmul_gemm_rows over its
// matrices; INT_MAX if none, as for BF16 on AVX-512, the GGUF block types and Q8_0): a forward of
// fewer rows computes every row bit for bit as it would alone, without batch_invariant.
int ds_model_gemm_rows(const ds_model *m);
// Whether m's products round their inputs (ds_model_params.bf16_inputs, or a GGUF block type's or an
// MLX affine matrix's int8 rounding): a drafter paired with it then rounds its BF16 products' inputs
// too (src/draft/load.c).
int ds_model_rounds_inputs(const ds_model *m);

// Shared by the loaders: size and check the config, take norms as f32, compute weight_bytes and
// RoPE frequencies. Called after the weights are attached.
ds_status ds_model_finish(ds_model *m, const char *path);
// bos/eos/stop ids inside the vocabulary (negative = none); an error naming `path` otherwise.
ds_status ds_model_check_ids(const ds_model *m, const char *path);
// Reserve n floats of the model's owned vector storage (sized by the loader up front).
float *ds_model_own(ds_model *m, size_t n);

ds_status ds_model_load_gguf(const char *path, ds_model **out);
ds_status ds_model_load_hf(const char *dir, ds_model **out);

struct ds_kv {
    const ds_model *model;
    int max_ctx;
    ds_kvcache c;   // per layer (layer n_kv_heads, layer head_dim, cap), K after RoPE; KV-shared layers
                    // have no lines (they read kv_src's); grows by doubling up to max_ctx
};

// Make room for `need` rows (amortized doubling; no allocation once the cache has grown).
ds_status ds_kv_reserve(ds_kv *kv, int need);

// The SentencePiece tokenizer of a GGUF file (a "tokenizer.gguf" next to an HF directory that
// dspark quantize --target converted from GGUF) into m->tok and the BOS/EOS/UNK ids.
ds_status ds_model_load_gguf_tokenizer(ds_model *m, const char *path);

#endif
