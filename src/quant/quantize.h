// dspark quantize: a DeepSpec drafter or a target (any architecture model/load_hf.c runs) written in MLX's affine format
// (../shared/docs/mlx-affine-quant.md): packed U32 weights with per-group scales/biases, both
// config blocks, safetensors metadata {"format": "mlx"}, sharded above a size limit, written
// atomically (a temporary directory renamed into place), then reloaded as a smoke test.
#ifndef DS_QUANT_QUANTIZE_H
#define DS_QUANT_QUANTIZE_H

#include <stddef.h>

#include "dspark.h"

#define DS_QUANT_MAX_PATTERNS 64

typedef struct {
    int bits;                // 4 or 8
    int group_size;          // 32 or 64
    int target;              // 0: DeepSpec drafter (directory), 1: target (HF directory of an architecture the
                             // HF loader runs, text tensors only; or a llama GGUF)
    const char *keep[DS_QUANT_MAX_PATTERNS]; // module globs (fnmatch) kept in full precision (config: false)
    int n_keep;
    // Per-module overrides: modules matching override[i] get override_bits[i] / override_group[i].
    const char *override[DS_QUANT_MAX_PATTERNS];
    int override_bits[DS_QUANT_MAX_PATTERNS], override_group[DS_QUANT_MAX_PATTERNS];
    int n_override;
    size_t max_shard_bytes;  // 0 = 5 GiB
    int skip_load_smoke;     // skip the reload + one projection check
    volatile int *interrupted; // polled between tensors: nonzero = stop, leave nothing behind
    // Progress (may be NULL): stage "quantize" for tensor i of n, then "write", "smoke", "done".
    void (*progress)(void *ctx, const char *stage, int i, int n, const char *name);
    void *progress_ctx;
} ds_quantize_params;

ds_quantize_params ds_quantize_default(void);

// Statistics of a finished run.
typedef struct {
    int n_tensors, n_quantized;
    size_t src_bytes, out_bytes; // tensor data bytes before and after
    int n_shards;                // 1 = model.safetensors
    int n_dropped;               // target: tensors the loader never reads (vision tower, projector), not written
} ds_quantize_stats;

// Quantize `src` into `out` (which must not exist). On any error or interruption nothing is left
// at `out` (nor a temporary directory).
ds_status ds_quantize(const char *src, const char *out, const ds_quantize_params *p, ds_quantize_stats *stats);

#endif
