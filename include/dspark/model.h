// dspark/model.h: targets: loading, KV caches, workspaces, the forward pass (src/model).
// Part of the public API (include/dspark.h composes these headers); it includes only the
// headers of the layers below its own (docs/architecture.md), so a layer that includes it
// cannot name a function of a layer above it.
#ifndef DSPARK_MODEL_H
#define DSPARK_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "dspark/base.h"
#include "dspark/kernels.h"
#include "dspark/tokenizer.h"

#ifdef __cplusplus
extern "C" {
#endif

// ---------------------------------------------------------------------------------------------
// Models

typedef struct ds_model ds_model;
typedef struct ds_kv ds_kv;
typedef struct ds_workspace ds_workspace;

typedef struct {
    const char *arch;     // "llama", "qwen3", ...
    const char *name;     // model name from metadata, or the file name
    int n_layers;
    int dim;              // hidden size
    int ffn_dim;          // intermediate size
    int n_heads;          // query heads
    int n_kv_heads;       // key/value heads (GQA when < n_heads)
    int head_dim;
    int vocab_size;
    int max_ctx;          // context length the model was configured for
    float norm_eps;       // RMSNorm epsilon
    float rope_theta;
    ds_rope_layout rope_layout;
    ds_dtype weight_type; // dominant weight type (of the matrices)
    size_t weight_bytes;  // bytes of all weights that one decoded token reads
    int bos_id, eos_id;   // -1 when unknown
    int unk_id;           // the tokenizer's unknown-token id (never produced by encoding), or -1
    // Mixture of experts (all 0 for dense targets): layers with routed experts, experts per layer,
    // experts each row routes to, and the bytes of one expert (its three matrices). weight_bytes
    // counts top_k_experts of them per MoE layer.
    int moe_layers, n_experts, top_k_experts;
    size_t expert_bytes;
} ds_model_info;

typedef struct {
    int n_threads;   // shorthand: ds_model_load calls ds_set_threads(n_threads) (0 = all cores); pass
                     // NULL params to keep the process's count as it is
    int int8_inputs; // Which few-row products with quantized weights round their inputs to int8 per
                     // group and run on integer dot products (kernels/qmatmul.h). 0 (default): every
                     // GGUF block type, Q8_0 included (llama.cpp's numerics and speed: decoding a Q8_0
                     // file 1.4x faster than on f32 inputs), MLX affine weights on f32 inputs (MLX's
                     // numerics); 1: MLX affine weights too (1.4-3x faster at verification sizes);
                     // -1: f32 inputs wherever a kernel has them (GGUF Q8_0 and MLX affine; the other
                     // GGUF block types have only the integer kernels, as in llama.cpp). Drafters
                     // always take the integer path (their numbers only steer proposals).
    int bf16_inputs; // 1: few-row products with BF16 weights round their inputs to bf16 and run on
                     // VDPBF16PS where the CPU has AVX512-BF16 (llama.cpp's numerics for BF16; verifying
                     // 8 rows 1.4-2x cheaper); 0 (default): f32 inputs, one f32 FMA per weight.
    int kv_f16;      // 1: KV caches hold IEEE halves, each K and V value rounded to nearest even once
                     // when it is stored (llama.cpp's default cache type): half the memory, and half
                     // the bytes attention reads at depth; values beyond ±65504 become infinite.
                     // 0 (default): floats, the values exactly as computed.
    int no_populate; // 1: leave the weights to page faults (a job reading them once, as quantize, keeps
                     // its resident memory bounded); 0 (default): the matrices products read (all
                     // experts) enter the page tables at load, while they take at most half the
                     // machine's memory (still mapped, not copied): the first forward takes no faults
} ds_model_params;

// Load a target model: `path` is a .gguf file or a Hugging Face directory (config.json +
// model.safetensors or sharded model-*.safetensors with model.safetensors.index.json).
ds_status ds_model_load(const char *path, const ds_model_params *params, ds_model **out);
void ds_model_free(ds_model *m);
const ds_model_info *ds_model_get_info(const ds_model *m);
// How the load left the matrices a decode step reads: bytes resident, of which mapped by huge pages,
// and whether their small cached pages were dropped and read again into huge ones (the load does that
// where the kernel can: docs/architecture.md, "Weights in huge pages"). All 0 when the load left them
// to page faults (ds_model_params.no_populate, or more than half the machine's memory).
void ds_model_memory(const ds_model *m, size_t *resident, size_t *huge, int *reread);
// The model's tokenizer, or NULL when the checkpoint has none we support.
const ds_tokenizer *ds_model_tokenizer(const ds_model *m);
// Whether generating `id` ends a sequence: the EOS id, and any further stop ids the checkpoint
// declares (Hugging Face generation_config.json "eos_token_id" may list several).
int ds_model_is_stop(const ds_model *m, int32_t id);

// KV cache of one sequence. Grows as rows are appended (amortized doubling) up to max_ctx.
ds_status ds_kv_init(const ds_model *m, int max_ctx, ds_kv **out);
void ds_kv_free(ds_kv *kv);
int ds_kv_len(const ds_kv *kv);
// Roll back to an earlier length: afterwards the state is exactly as if the rows past `len` had
// never been fed.
ds_status ds_kv_truncate(ds_kv *kv, int len);
// After a token tree was fed at column `from` (ds_forward_seq.parent): keep the path of its rows
// rows[0..n) (increasing) at columns from .. from + n - 1; the cache then ends there, exactly as if
// only the path had been fed.
ds_status ds_kv_keep(ds_kv *kv, int from, const int *rows, int n);
// A copy of a cache's first rows (the engine's prompt cache keeps them): bytes per row, the copy
// of rows [0, n) out (n <= ds_kv_len) and into an empty cache of the same model, which then holds
// exactly those rows (`src` holds `stride` >= n rows as ds_kv_save wrote them; its first n are taken).
size_t ds_kv_row_bytes(const ds_kv *kv);
ds_status ds_kv_save(const ds_kv *kv, int n, void *dst);
ds_status ds_kv_load(ds_kv *kv, const void *src, int stride, int n);

ds_status ds_workspace_init(const ds_model *m, ds_workspace **out);
void ds_workspace_free(ds_workspace *ws);
// MoE targets: the mean number of distinct experts a window of w consecutive rows (w = 1..n, as fed
// to forwards through this workspace) routes to, per MoE layer, from decayed routing statistics;
// out[w - 1], 0 where nothing is known yet. Returns how many windows it filled (0 for dense targets).
int ds_workspace_expert_windows(const ds_workspace *ws, float *out, int n);
// MoE targets: distinct experts per MoE layer pass in the last forward (mean over its MoE layers; 0 dense).
double ds_workspace_last_experts(const ds_workspace *ws);

// The new rows of one sequence in a forward pass. Rows are appended to `kv` at positions
// kv_len .. kv_len + n_tokens - 1 and attend causally to everything before them.
typedef struct {
    ds_kv *kv;
    const int32_t *tokens; // (n_tokens)
    int n_tokens;
    // Logits of the last `n_logits` rows (0 = none; n_tokens = every row).
    int n_logits;
    float *logits;         // (n_logits, vocab_size)
    // Hidden-state taps: for each id in tap_layers (in order; -1 = embedding output, L = residual
    // stream after decoder layer L, before the final norm), every new row. Concatenated per row,
    // the layout drafters consume.
    const int *tap_layers; // (n_taps)
    int n_taps;
    float *taps;           // (n_tokens, n_taps * dim), or NULL
    float *hidden;         // (n_tokens, dim) final normed hidden state, or NULL
    // This sequence's rows must not depend on what else is in the batch: every product of this
    // forward then runs on the multi-row kernel (whose result for a row is a function of that row
    // alone) instead of sgemm for large batches. Costs nothing on memory-bound decoding.
    int batch_invariant;
    // A token tree instead of a chain (NULL: a chain): row i's parent row (< i), or -1 for a row that
    // follows the cache's last row. Row i sits at position len + its depth (the roots' depth is 0)
    // and attends to the cache's rows and its own ancestors only, bit for bit as if its path had been
    // fed as a chain; its K/V go to column len + i, so keep a path with ds_kv_keep. At most
    // DS_TREE_MAX_ROWS rows (a row's ancestors are one 64-bit mask).
    const int32_t *parent;  // (n_tokens)
} ds_forward_seq;
#define DS_TREE_MAX_ROWS 64

// One forward pass over a ragged batch of sequences (prefill, single-token decode and multi-token
// verification are all this call). Matrix products run over the rows of all sequences at once.
ds_status ds_model_forward(const ds_model *m, ds_workspace *ws, ds_forward_seq *seqs, int n_seqs);

#ifdef __cplusplus
}
#endif

#endif
