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

#ifdef __cplusplus
}
#endif

#endif
