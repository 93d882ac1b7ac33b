// dspark inflate: a small llama target and its DeepSpec drafter grown to a realistic size while
// computing exactly what they computed (a memory-bound target with real acceptance, for measuring
// speculation end to end). From the small pair (hidden h, FFN f, L layers) it writes
// OUT/target (a Hugging Face LlamaForCausalLM directory, tokenizer as tokenizer.gguf) and
// OUT/drafter (the matching DeepSpec drafter) of hidden H, FFN F, L' layers:
//   - the residual stream is zero-padded: embedding columns >= h are 0, and every write into the
//     residual (o_proj, down_proj rows >= h; the drafter's fc rows >= h) is 0, so padded
//     dimensions stay exactly 0 through every layer;
//   - RMSNorm over H instead of h dimensions: weight x sqrt(h/H) and eps x h/H;
//   - attention keeps the original heads (head_dim written explicitly);
//   - FFN neurons beyond f have zero down_proj columns; layers beyond L have zero o_proj and
//     down_proj (identities); the real layer l sits at l·L'/L and taps follow it;
//   - every other padded weight is random (uniform, 1/sqrt(fan-in)), so kernels read real bytes;
//   - the drafter is padded the same way (its hidden size is the target's, its FFN F), and its
//     q/k projections are scaled by sqrt(h/H), which its per-head q/k norms (eps x h/H) undo exactly.
// Matrices are written in `dtype` (vectors stay f32), atomically (OUT appears complete or not at all).
#ifndef DS_INFLATE_INFLATE_H
#define DS_INFLATE_INFLATE_H

#include <stddef.h>
#include <stdint.h>

#include "dspark.h"

typedef struct {
    int hidden, ffn, layers;  // inflated shape (defaults 2048, 5632, 24); each >= the source's
    ds_dtype dtype;           // DS_BF16 (default) or DS_F32: the matrices; vectors are f32
    uint64_t seed;            // random padding
    volatile int *interrupted; // polled between tensors: nonzero = stop, leave nothing behind
    // Progress (may be NULL): stage "target" / "drafter" for tensor i of n, then "write" (the
    // directory), "check" (reloading both), "done".
    void (*progress)(void *ctx, const char *stage, int i, int n, const char *name);
    void *progress_ctx;
} ds_inflate_params;

ds_inflate_params ds_inflate_default(void);

typedef struct {
    int layers;               // the inflated target's layer count
    int layer_of[4096];       // (source layers) where each source layer sits in the inflated target
    int n_src_layers;
    size_t target_bytes;      // weight bytes one decoded token reads (ds_model_info.weight_bytes)
    size_t drafter_bytes;     // tensor data written for the drafter
} ds_inflate_stats;

// Inflate `target` (a llama GGUF) and `drafter` (a Qwen3-style DeepSpec drafter paired with it)
// into `out`, which must not exist.
ds_status ds_inflate(const char *target, const char *drafter, const char *out, const ds_inflate_params *p,
                     ds_inflate_stats *stats);

#endif
