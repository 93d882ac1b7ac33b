// dspark/base.h: errors and status names, tensor element types, the process's thread count (src/base).
// Part of the public API (include/dspark.h composes these headers); it includes only the
// headers of the layers below its own (docs/architecture.md), so a layer that includes it
// cannot name a function of a layer above it.
#ifndef DSPARK_BASE_H
#define DSPARK_BASE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

// ---------------------------------------------------------------------------------------------
// Errors

typedef enum {
    DS_OK = 0,
    DS_ERR_IO,          // cannot open / read / write a file
    DS_ERR_FORMAT,      // a file is malformed (truncated, bad magic, offsets out of range, ...)
    DS_ERR_UNSUPPORTED, // well-formed but not something we implement (tensor type, architecture)
    DS_ERR_INVALID,     // a bad argument (wrong shape, out-of-range value, invalid UTF-8, ...)
    DS_ERR_NOMEM,       // allocation failed
    DS_ERR_MISMATCH,    // two inputs that must agree do not (drafter vs target, ...)
    DS_ERR_INTERRUPTED, // the user pressed Ctrl-C
} ds_status;

const char *ds_last_error(void);
void ds_clear_error(void);
const char *ds_status_name(ds_status st);

// ---------------------------------------------------------------------------------------------
// Tensor element types (values match GGUF's ggml_type where one exists).

typedef enum {
    DS_F32 = 0,
    DS_F16 = 1,
    DS_Q4_0 = 2, // GGUF block types (kernels/ggml_quants.h): 32 elements per block
    DS_Q4_1 = 3,
    DS_Q5_0 = 6,
    DS_Q5_1 = 7,
    DS_Q8_0 = 8,
    DS_Q2_K = 10, // K-quants: 256 elements per super-block
    DS_Q3_K = 11,
    DS_Q4_K = 12,
    DS_Q5_K = 13,
    DS_Q6_K = 14,
    DS_IQ4_NL = 20, // 32 elements, non-linear 4-bit values
    DS_IQ4_XS = 23, // 256 elements, non-linear 4-bit values
    DS_BF16 = 30,
    DS_U32 = 1000, // safetensors only
    DS_I32 = 1001, // safetensors only
    DS_AFFINE4 = 1004, // MLX affine 4-bit: packed U32 words + per-group scales/biases (in memory only)
    DS_AFFINE8 = 1008, // MLX affine 8-bit (docs: docs/formats/mlx-affine.md)
} ds_dtype;

const char *ds_dtype_name(ds_dtype t);


// ---------------------------------------------------------------------------------------------
// Threads

// The thread count has one owner: the library's thread pool (src/base/threads.c), process-wide.
// ds_set_threads sets the number of threads used by forward passes and training (OpenBLAS runs
// single-threaded inside them), whichever thread runs them (the server's engine thread included);
// 0 = all cores. No object or job carries a count of its own: front ends call this once. On a busy
// machine the pool falls back to the calling thread by itself when threads lose time.
void ds_set_threads(int n_threads);
// The threads the next parallel region uses: the ds_set_threads value (at most the cores this
// process may run on), or all of them.
int ds_threads(void);

#ifdef __cplusplus
}
#endif

#endif
