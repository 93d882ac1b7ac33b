// A loaded target (any source dspark reads: HF directory or GGUF) written as one GGUF file the way
// llama.cpp's convert_hf_to_gguf.py + llama-quantize write it (see gguf_export.c).
#ifndef DS_QUANT_GGUF_EXPORT_H
#define DS_QUANT_GGUF_EXPORT_H

#include "dspark/speculate.h"
#include "dspark/quant.h"
#include "model/model.h"
#include "quant/gguf_quantize.h"

typedef struct {
    const ds_gguf_preset *preset;
    const char *src;             // where m came from (its tokenizer: a GGUF's tokenizer.* keys, or an HF
                                 // directory's tokenizer.gguf / tokenizer.json + tokenizer_config.json)
    int skip_load_smoke;         // do not reload the written file before it is renamed into place
    volatile int *interrupted;
    void (*progress)(void *ctx, const char *stage, int i, int n, const char *name);
    void *progress_ctx;
} ds_gguf_export_params;

// Write m to `out` (atomically; see io/gguf.h for what may stand there). stats may be NULL.
ds_status ds_gguf_export(const ds_model *m, const char *out, const ds_gguf_export_params *p, ds_quantize_stats *stats);

#endif
