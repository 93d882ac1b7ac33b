#include "base/status.h"
#include "base/utf8.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

static _Thread_local char g_msg[1024];

const char *ds_last_error(void) { return g_msg[0] ? g_msg : "no error"; }

void ds_clear_error(void) { g_msg[0] = '\0'; }

// Messages quote names and strings from files (GGUF keys, tensor names, JSON strings, paths): one
// place makes every message one line of valid UTF-8, whatever those bytes are.
static void set_message(const char *text) {
    ds_text_escape(g_msg, sizeof g_msg, text, strlen(text));
}

ds_status ds_fail(ds_status code, const char *fmt, ...) {
    char raw[sizeof g_msg];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(raw, sizeof raw, fmt, ap);
    va_end(ap);
    set_message(raw);
    return code;
}

ds_status ds_fail_prefix(ds_status code, const char *fmt, ...) {
    char prefix[512], old[sizeof g_msg];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    memcpy(old, g_msg, sizeof old);
    char raw[sizeof prefix + sizeof old + 2];
    snprintf(raw, sizeof raw, "%s: %s", prefix, old);
    set_message(raw);
    return code;
}

void *ds_malloc(size_t n) {
    void *p = malloc(n ? n : 1);
    if (!p) ds_fail(DS_ERR_NOMEM, "out of memory allocating %zu bytes", n);
    return p;
}

void *ds_malloc_huge(size_t n) {
    const size_t huge = (size_t)2 << 20;
    if (n < huge) return ds_malloc(n);
    const size_t rounded = (n + huge - 1) & ~(huge - 1); // (aligned_alloc wants a multiple of the alignment)
    void *p = aligned_alloc(huge, rounded);
    if (!p) {
        ds_fail(DS_ERR_NOMEM, "out of memory allocating %zu bytes", n);
        return NULL;
    }
#ifdef MADV_HUGEPAGE
    madvise(p, rounded, MADV_HUGEPAGE); // advice: without it the buffer is the same, in small pages
#endif
    return p;
}

void *ds_calloc(size_t count, size_t size) {
    void *p = calloc(count ? count : 1, size ? size : 1);
    if (!p) ds_fail(DS_ERR_NOMEM, "out of memory allocating %zu x %zu bytes", count, size);
    return p;
}

const char *ds_status_name(ds_status st) {
    switch (st) {
    case DS_OK: return "ok";
    case DS_ERR_IO: return "I/O error";
    case DS_ERR_FORMAT: return "malformed file";
    case DS_ERR_UNSUPPORTED: return "unsupported";
    case DS_ERR_INVALID: return "invalid argument";
    case DS_ERR_NOMEM: return "out of memory";
    case DS_ERR_MISMATCH: return "mismatch";
    case DS_ERR_INTERRUPTED: return "interrupted";
    }
    return "unknown error";
}

const char *ds_dtype_name(ds_dtype t) {
    switch (t) {
    case DS_F32: return "F32";
    case DS_F16: return "F16";
    case DS_BF16: return "BF16";
    case DS_Q4_0: return "Q4_0";
    case DS_Q4_1: return "Q4_1";
    case DS_Q5_0: return "Q5_0";
    case DS_Q5_1: return "Q5_1";
    case DS_Q8_0: return "Q8_0";
    case DS_Q2_K: return "Q2_K";
    case DS_Q3_K: return "Q3_K";
    case DS_Q4_K: return "Q4_K";
    case DS_Q5_K: return "Q5_K";
    case DS_Q6_K: return "Q6_K";
    case DS_IQ4_NL: return "IQ4_NL";
    case DS_IQ4_XS: return "IQ4_XS";
    case DS_U32: return "U32";
    case DS_I32: return "I32";
    case DS_AFFINE4: return "AFFINE4";
    case DS_AFFINE8: return "AFFINE8";
    }
    return "unknown";
}
