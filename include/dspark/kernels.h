// dspark/kernels.h: what the kernels say about the machine (src/kernels).
// Part of the public API (include/dspark.h composes these headers); it includes only the
// headers of the layers below its own (docs/architecture.md), so a layer that includes it
// cannot name a function of a layer above it.
#ifndef DSPARK_KERNELS_H
#define DSPARK_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include "dspark/base.h"

#ifdef __cplusplus
extern "C" {
#endif

// ---------------------------------------------------------------------------------------------
// Kernels

// OpenBLAS picks its kernels from the CPU model at load time and falls back to generic SSE3
// ("Prescott") kernels on CPUs newer than it knows (Debian 12's 0.3.21 on Sapphire/Emerald Rapids:
// 4x slower sgemm). Returns the OPENBLAS_CORETYPE value that matches this CPU's instruction sets
// ("SkylakeX", "Haswell") when OpenBLAS chose a weaker one, else NULL. Programs set it in the
// environment and re-execute themselves (it is read only at load).
const char *ds_openblas_core_hint(void);

// ---------------------------------------------------------------------------------------------
// RoPE (kernels/ops.c rotates; a model records which layout its Q/K use)

// How the two halves of each rotated pair are laid out inside a head.
typedef enum {
    DS_ROPE_INTERLEAVED = 0, // pairs (2i, 2i+1): GGUF `llama` tensors (llama.cpp's permuted Q/K)
    DS_ROPE_HALVES = 1,      // pairs (i, i + d/2): Hugging Face checkpoints
} ds_rope_layout;

#ifdef __cplusplus
}
#endif

#endif
