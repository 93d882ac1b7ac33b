// Errors: library code returns a ds_status and leaves a one-line message (naming the file and the
// problem) in a thread-local buffer that ds_last_error() returns. Only cli/ prints.
#ifndef DS_BASE_STATUS_H
#define DS_BASE_STATUS_H

#include "dspark/base.h"

// Record a formatted message and return `code`, so callers can write `return ds_fail(...)`.
ds_status ds_fail(ds_status code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

// Prefix the current message with "what: " (for adding context while unwinding).
ds_status ds_fail_prefix(ds_status code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

// Allocation helpers that record DS_ERR_NOMEM on failure.
void *ds_malloc(size_t n);
void *ds_calloc(size_t count, size_t size);
// malloc for large buffers a decode step streams (the KV cache): from 2 MiB on, aligned to 2 MiB and
// advised MADV_HUGEPAGE, so that the kernel backs it with huge pages (each 4 KiB page otherwise costs
// a TLB entry and a new prefetch stream). Freed with free(); records DS_ERR_NOMEM on failure.
void *ds_malloc_huge(size_t n);

// Checked size arithmetic: return false on overflow.
static inline int ds_mul_ok(size_t a, size_t b, size_t *out) { return !__builtin_mul_overflow(a, b, out); }
static inline int ds_add_ok(size_t a, size_t b, size_t *out) { return !__builtin_add_overflow(a, b, out); }

#endif
