// What the safetensors reader (safetensors_read.c) and writer (safetensors_write.c) share: the file
// names of a model directory, the dtype check, and the message and size helpers.
#ifndef DS_IO_SAFETENSORS_INTERNAL_H
#define DS_IO_SAFETENSORS_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "io/safetensors.h"

#define DS_ST_INDEX_NAME "model.safetensors.index.json"
#define DS_ST_SINGLE_NAME "model.safetensors"
#define DS_ST_JSON_MAX_EXACT 9007199254740992.0 // 2^53: larger JSON numbers are not exact in a double

// A name from an untrusted file, made safe for a one-line message: control bytes become '?',
// long names are cut with "...".
typedef struct {
    char s[72];
} ds_st_qname;
ds_st_qname ds_st_quote(const char *s);

// dir + "/" + name (no second slash when dir ends in one), malloc'd; NULL when out of memory.
char *ds_st_join_path(const char *dir, const char *name);

// product(shape) * elem_size, or 0 with *ok = 0 on overflow.
size_t ds_st_shape_bytes(const int64_t *shape, int n_dims, size_t elem_size, int *ok);

// A dtype safetensors files may carry here (F32, F16, BF16, U32, I32).
int ds_st_dtype_supported(ds_dtype t);

#endif
