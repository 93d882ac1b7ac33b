// dspark/quant.h: what a quantized file came to (src/quant, used by the quantize job).
// Part of the public API (include/dspark_jobs.h includes it); it includes only the headers of the
// layers below its own (docs/architecture.md), so a layer that includes it cannot name a function
// of a layer above it.
#ifndef DSPARK_QUANT_H
#define DSPARK_QUANT_H

#include <stddef.h>
#include <stdint.h>

#include "dspark/base.h"

#ifdef __cplusplus
extern "C" {
#endif

// ---------------------------------------------------------------------------------------------
// Quantization totals (src/quant/gguf_export.c and the quantize job fill them).

typedef struct {
    int n_tensors, n_quantized;
    size_t src_bytes, out_bytes; // tensor data bytes before and after
    int n_shards;                // 1 = model.safetensors
    int n_dropped;               // target: tensors the loader never reads (vision tower, projector), not written
} ds_quantize_stats;

#ifdef __cplusplus
}
#endif

#endif
