// One decoder block (attention + MLP, pre-norm, residual), shared by the target's forward
// (model.c) and the drafter's block forward and context append (draft/forward.c). What differs
// between them is data, not code: the layer (ds_layer: biases, q/k/v norms, K = V, post norms,
// experts, per-layer embeddings, output scale), the model-wide options (ds_block_cfg) and, per row,
// its position, its cache and the columns it attends over (causal for the target; the drafter's
// block rows see their context and the whole block).
#ifndef DS_MODEL_BLOCK_H
#define DS_MODEL_BLOCK_H

#include "kernels/attend.h"
#include "model/kvcache.h"
#include "model/model.h"
#include "model/moe.h"

#include <stdint.h>

// Model-wide options of the blocks.
typedef struct {
    const ds_model *model;     // the target (its experts' products need it), or NULL (drafter)
    int dim, n_heads, n_layers;
    float eps;
    ds_rope_layout rope_layout;
    ds_act act;
    int n_rope, rope_half;     // RoPE sets and the stride of a row's angles (max head_dim / 2)
    int ple_dim;               // Gemma 4 per-layer embeddings (0 = none)
} ds_block_cfg;

// A token-tree row's span: the committed columns [0, base) of its cache, then the tree rows (columns
// base + i) whose bit i is set in `anc` (its ancestors and itself), in column order, as if they were
// consecutive positions base, base + 1, ... (ds_forward_seq.parent).
typedef struct {
    int base;
    uint64_t anc; // 0: not a tree row (causal over its span)
} ds_tree_span;

// The rows of one call and their scratch (sized by the caller for n rows).
typedef struct {
    int n;                    // rows
    const int *pos;           // (n) each row's position: its RoPE angle and the cache column of its K/V
    const int *end;           // (n) the row attends over columns [end - window, end) of its cache (all when
                              // the layer has no window); NULL: causal, end = pos + 1
    ds_kvcache *const *kv;    // (n) each row's cache
    const float *rcos, *rsin; // (n, n_rope, rope_half) RoPE angles of each row and RoPE set
    float *x;                 // (n, dim) residual stream, updated in place
    float *xb;                // (n, dim) a sub-layer's normed input, then its output
    float *q;                 // (n, n_heads * head_dim)
    float *k, *v;             // (n, n_kv_heads * head_dim)
    float *att;               // (n, n_heads * head_dim) attention output
    float *hb;                // (n, max(ffn_dim, ple_dim)) gate
    float *hb2;               // (n, ffn_dim) up
    float *scores;            // (threads, DS_ATTEND_MAX_Q, scores_stride) attention scores of each worker
    int scores_stride;        // at least every row's span (kernels/attend.h)
    float *scratch;           // matmul widening scratch (ds_matmul_ex)
    int gemm_min_rows;        // this call's kernel choice (ds_matmul_ex)
    // Only for layers that have them (NULL otherwise):
    float *ple;               // (n, n_layers, ple_dim) per-layer inputs
    float *ffn;               // (n, dim) the dense MLP's output beside the experts
    float *moe_in;            // (n, dim) the experts' normed input (Gemma 4)
    ds_moe_ws *moe;           // the experts' scratch
    // Token trees (target only; NULL otherwise):
    const ds_tree_span *tree; // (n) each row's tree span (anc 0: an ordinary row)
    float *gather;            // (threads, gather_stride) a tree row's last columns of K and V, gathered
    int gather_stride;        // 2 · max head_dim · (DS_TREE_MAX_ROWS + DS_ATTEND_LANES)
} ds_block_rows;

// K and V of every row from its normed input `in` (n, dim) into its cache at column pos[r] (layer
// l's own cache; nothing for a KV-shared layer): k = RoPE(k_norm(Wk·in + bk)), v = Wv·in + bv, or
// with K = V v = v_norm(Wk·in + bk) (weightless, when L->v_norm). Uses rows->k, rows->v.
void ds_block_kv(const ds_block_cfg *c, const ds_layer *L, int l, ds_block_rows *rows, const float *in);

// Layer l over the rows: x += P(Wo·attn(...)); x += P'(MLP or experts); PLE; x *= out_scale.
void ds_block_forward(const ds_block_cfg *c, const ds_layer *L, int l, ds_block_rows *rows);

#endif
