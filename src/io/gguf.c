// GGUF reader. Layout (little-endian): "GGUF", u32 version, u64 n_tensors, u64 n_kv, then n_kv
// metadata entries (string key, u32 type, value), then n_tensors infos (string name, u32 n_dims,
// u64 ne[n_dims], u32 ggml type, u64 offset), padding to `general.alignment` (default 32), then
// the data section. Strings are u64 length + bytes. Every read goes through a bounds-checked cursor.
#include "io/gguf.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "kernels/ggml_quants.h"

#define GGUF_MAX_DIMS 4
#define GGUF_MAX_ARRAY_DEPTH 8

typedef struct {
    const uint8_t *p, *end;
    const char *path;
    const uint8_t *start; // the file's first byte, for positions in messages
} cursor;

static ds_status truncated(const cursor *c, const char *what) {
    return ds_fail(DS_ERR_FORMAT, "%s: truncated file (reading %s at byte %zu)", c->path, what,
                   (size_t)(c->p - c->start));
}

static ds_status rd(cursor *c, void *out, size_t n, const char *what) {
    if ((size_t)(c->end - c->p) < n) return truncated(c, what);
    memcpy(out, c->p, n);
    c->p += n;
    return DS_OK;
}

static ds_status rd_str(cursor *c, ds_gguf_str *s, const char *what) {
    ds_status st = rd(c, &s->len, 8, what);
    if (st) return st;
    if (s->len > (uint64_t)(c->end - c->p))
        return ds_fail(DS_ERR_FORMAT, "%s: %s has length %llu, past the end of the file", c->path, what,
                       (unsigned long long)s->len);
    s->ptr = (const char *)c->p;
    c->p += s->len;
    return DS_OK;
}

static char *str_dup(ds_gguf_str s) {
    char *r = ds_malloc(s.len + 1);
    if (r) {
        memcpy(r, s.ptr, s.len);
        r[s.len] = 0;
    }
    return r;
}

size_t ds_gguf_scalar_size(ds_gguf_type t) {
    switch (t) {
    case DS_GGUF_U8: case DS_GGUF_I8: case DS_GGUF_BOOL: return 1;
    case DS_GGUF_U16: case DS_GGUF_I16: return 2;
    case DS_GGUF_U32: case DS_GGUF_I32: case DS_GGUF_F32: return 4;
    case DS_GGUF_U64: case DS_GGUF_I64: case DS_GGUF_F64: return 8;
    default: return 0;
    }
}

// Skip (validating) an array of `n` elements of type `t` (nested arrays allowed).
static ds_status skip_array(cursor *c, ds_gguf_type t, uint64_t n, int depth, const char *key) {
    if (depth > GGUF_MAX_ARRAY_DEPTH)
        return ds_fail(DS_ERR_FORMAT, "%s: metadata '%s' nests arrays too deeply", c->path, key);
    size_t es = ds_gguf_scalar_size(t);
    if (es) {
        if (n > (uint64_t)(c->end - c->p) / es)
            return ds_fail(DS_ERR_FORMAT, "%s: metadata array '%s' has %llu elements, past the end of the file",
                           c->path, key, (unsigned long long)n);
        c->p += n * es;
        return DS_OK;
    }
    for (uint64_t i = 0; i < n; i++) {
        ds_status st;
        if (t == DS_GGUF_STRING) {
            ds_gguf_str s = {0};
            st = rd_str(c, &s, "array string");
        } else if (t == DS_GGUF_ARRAY) {
            uint32_t et = 0;
            uint64_t en = 0;
            if ((st = rd(c, &et, 4, "array type")) || (st = rd(c, &en, 8, "array length"))) return st;
            if (et > DS_GGUF_F64)
                return ds_fail(DS_ERR_FORMAT, "%s: metadata '%s' has unknown array element type %u", c->path, key, et);
            st = skip_array(c, (ds_gguf_type)et, en, depth + 1, key);
        } else {
            return ds_fail(DS_ERR_FORMAT, "%s: metadata '%s' has unknown type %d", c->path, key, (int)t);
        }
        if (st) return st;
    }
    return DS_OK;
}

static ds_status read_kv(cursor *c, ds_gguf_kv *kv) {
    ds_gguf_str key = {0};
    uint32_t type = 0;
    ds_status st = rd_str(c, &key, "metadata key");
    if (st) return st;
    if (!(kv->key = str_dup(key))) return DS_ERR_NOMEM;
    if ((st = rd(c, &type, 4, "metadata type"))) return st;
    if (type > DS_GGUF_F64)
        return ds_fail(DS_ERR_FORMAT, "%s: metadata '%s' has unknown type %u", c->path, kv->key, type);
    kv->type = (ds_gguf_type)type;
    switch (kv->type) {
    case DS_GGUF_U8: { uint8_t v = 0; st = rd(c, &v, 1, kv->key); kv->v.u = v; break; }
    case DS_GGUF_BOOL: { uint8_t v = 0; st = rd(c, &v, 1, kv->key); kv->v.u = v != 0; break; }
    case DS_GGUF_I8: { int8_t v = 0; st = rd(c, &v, 1, kv->key); kv->v.i = v; break; }
    case DS_GGUF_U16: { uint16_t v = 0; st = rd(c, &v, 2, kv->key); kv->v.u = v; break; }
    case DS_GGUF_I16: { int16_t v = 0; st = rd(c, &v, 2, kv->key); kv->v.i = v; break; }
    case DS_GGUF_U32: { uint32_t v = 0; st = rd(c, &v, 4, kv->key); kv->v.u = v; break; }
    case DS_GGUF_I32: { int32_t v = 0; st = rd(c, &v, 4, kv->key); kv->v.i = v; break; }
    case DS_GGUF_U64: st = rd(c, &kv->v.u, 8, kv->key); break;
    case DS_GGUF_I64: st = rd(c, &kv->v.i, 8, kv->key); break;
    case DS_GGUF_F32: { float v = 0; st = rd(c, &v, 4, kv->key); kv->v.f = v; break; }
    case DS_GGUF_F64: st = rd(c, &kv->v.f, 8, kv->key); break;
    case DS_GGUF_STRING: st = rd_str(c, &kv->v.s, kv->key); break;
    case DS_GGUF_ARRAY: {
        uint32_t et = 0;
        if ((st = rd(c, &et, 4, "array type")) || (st = rd(c, &kv->arr_n, 8, "array length"))) return st;
        if (et > DS_GGUF_F64)
            return ds_fail(DS_ERR_FORMAT, "%s: metadata '%s' has unknown array element type %u", c->path, kv->key, et);
        kv->arr_type = (ds_gguf_type)et;
        kv->arr_data = c->p;
        if (kv->arr_type == DS_GGUF_STRING) {
            // Each string takes at least 8 bytes: bound the count before allocating the index.
            if (kv->arr_n > (uint64_t)(c->end - c->p) / 8)
                return ds_fail(DS_ERR_FORMAT, "%s: metadata array '%s' has %llu strings, past the end of the file",
                               c->path, kv->key, (unsigned long long)kv->arr_n);
            if (!(kv->arr_strs = ds_calloc(kv->arr_n, sizeof(ds_gguf_str)))) return DS_ERR_NOMEM;
            for (uint64_t i = 0; i < kv->arr_n && !st; i++) st = rd_str(c, &kv->arr_strs[i], kv->key);
        } else {
            st = skip_array(c, kv->arr_type, kv->arr_n, 1, kv->key);
        }
        break;
    }
    }
    return st;
}

const char *ds_ggml_type_name(uint32_t t) {
    // Every ggml_type value (ggml.h), the removed ones (4, 5, 31-33, 36-38) included.
    static const char *names[] = {"F32", "F16", "Q4_0", "Q4_1", "Q4_2", "Q4_3", "Q5_0", "Q5_1", "Q8_0",
                                  "Q8_1", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "Q8_K", "IQ2_XXS",
                                  "IQ2_XS", "IQ3_XXS", "IQ1_S", "IQ4_NL", "IQ3_S", "IQ2_S", "IQ4_XS",
                                  "I8", "I16", "I32", "I64", "F64", "IQ1_M", "BF16", "Q4_0_4_4",
                                  "Q4_0_4_8", "Q4_0_8_8", "TQ1_0", "TQ2_0", "IQ4_NL_4_4", "IQ4_NL_4_8",
                                  "IQ4_NL_8_8", "MXFP4", "NVFP4", "Q1_0", "Q2_0"};
    return t < sizeof names / sizeof names[0] ? names[t] : "unknown";
}

// Bytes of a tensor with `n` elements (ne0 innermost) of a supported type; 0 with an error otherwise.
static ds_status tensor_bytes(const cursor *c, ds_gguf_tensor *t, uint32_t type) {
    uint64_t n = 1;
    for (int d = 0; d < t->n_dims; d++) {
        if (t->ne[d] <= 0)
            return ds_fail(DS_ERR_FORMAT, "%s: tensor '%s' has dimension %d of size %lld", c->path, t->name, d,
                           (long long)t->ne[d]);
        if (__builtin_mul_overflow(n, (uint64_t)t->ne[d], &n))
            return ds_fail(DS_ERR_FORMAT, "%s: tensor '%s' element count overflows", c->path, t->name);
    }
    uint64_t bytes;
    int ok;
    switch (type) {
    case DS_F32: ok = !__builtin_mul_overflow(n, 4, &bytes); break;
    case DS_F16:
    case DS_BF16: ok = !__builtin_mul_overflow(n, 2, &bytes); break;
    default: {
        const int qk = type <= 0xffff ? ds_ggml_block_elems((ds_dtype)type) : 0;
        if (!qk)
            return ds_fail(DS_ERR_UNSUPPORTED,
                           "%s: tensor '%s' has type %s (%u), which dspark does not support (supported: F32, F16, "
                           "BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS)",
                           c->path, t->name, ds_ggml_type_name(type), type);
        if (t->ne[0] % qk)
            return ds_fail(DS_ERR_FORMAT, "%s: %s tensor '%s' has a row of %lld elements (not a multiple of %d)",
                           c->path, ds_ggml_type_name(type), t->name, (long long)t->ne[0], qk);
        ok = !__builtin_mul_overflow(n / (uint64_t)qk, (uint64_t)ds_ggml_block_bytes((ds_dtype)type), &bytes);
        break;
    }
    }
    if (!ok || bytes > SIZE_MAX)
        return ds_fail(DS_ERR_FORMAT, "%s: tensor '%s' byte size overflows", c->path, t->name);
    t->type = (ds_dtype)type;
    t->nbytes = (size_t)bytes;
    return DS_OK;
}

static ds_status read_tensor_info(cursor *c, ds_gguf_tensor *t) {
    ds_gguf_str name = {0};
    uint32_t n_dims = 0, type = 0;
    ds_status st = rd_str(c, &name, "tensor name");
    if (st) return st;
    if (!(t->name = str_dup(name))) return DS_ERR_NOMEM;
    if ((st = rd(c, &n_dims, 4, "tensor dims"))) return st;
    if (n_dims < 1 || n_dims > GGUF_MAX_DIMS)
        return ds_fail(DS_ERR_FORMAT, "%s: tensor '%s' has %u dimensions (1..%d allowed)", c->path, t->name, n_dims,
                       GGUF_MAX_DIMS);
    t->n_dims = (int)n_dims;
    for (int d = 0; d < GGUF_MAX_DIMS; d++) t->ne[d] = 1;
    for (uint32_t d = 0; d < n_dims; d++) {
        uint64_t ne = 0;
        if ((st = rd(c, &ne, 8, "tensor shape"))) return st;
        if (ne > (uint64_t)INT64_MAX)
            return ds_fail(DS_ERR_FORMAT, "%s: tensor '%s' has an absurd dimension %llu", c->path, t->name,
                           (unsigned long long)ne);
        t->ne[d] = (int64_t)ne;
    }
    if ((st = rd(c, &type, 4, "tensor type")) || (st = rd(c, &t->offset, 8, "tensor offset"))) return st;
    return tensor_bytes(c, t, type);
}

static int cmp_offset(const void *a, const void *b) {
    const ds_gguf_tensor *x = *(const ds_gguf_tensor *const *)a, *y = *(const ds_gguf_tensor *const *)b;
    return x->offset < y->offset ? -1 : x->offset > y->offset;
}

// Data section: every tensor aligned, inside the file, and no two overlapping.
static ds_status check_layout(ds_gguf *g) {
    const char *path = g->map.path;
    const size_t data_size = g->map.size - g->data_offset;
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        ds_gguf_tensor *t = &g->tensors[i];
        if (t->offset % g->alignment)
            return ds_fail(DS_ERR_FORMAT, "%s: tensor '%s' offset %llu is not aligned to %llu", path, t->name,
                           (unsigned long long)t->offset, (unsigned long long)g->alignment);
        if (t->offset > data_size || t->nbytes > data_size - t->offset)
            return ds_fail(DS_ERR_FORMAT, "%s: tensor '%s' (%zu bytes at offset %llu) extends past the end of the file",
                           path, t->name, t->nbytes, (unsigned long long)t->offset);
        t->data = g->map.data + g->data_offset + t->offset;
    }
    if (g->n_tensors < 2) return DS_OK;
    ds_gguf_tensor **order = ds_malloc(g->n_tensors * sizeof *order);
    if (!order) return DS_ERR_NOMEM;
    for (uint64_t i = 0; i < g->n_tensors; i++) order[i] = &g->tensors[i];
    qsort(order, g->n_tensors, sizeof *order, cmp_offset);
    ds_status st = DS_OK;
    for (uint64_t i = 1; i < g->n_tensors && !st; i++)
        if (order[i - 1]->offset + order[i - 1]->nbytes > order[i]->offset)
            st = ds_fail(DS_ERR_FORMAT, "%s: tensors '%s' and '%s' overlap", path, order[i - 1]->name, order[i]->name);
    free(order);
    return st;
}

static int cmp_key(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

// As llama.cpp: a metadata key may appear only once (sorted copy: no quadratic scan on hostile files).
static ds_status check_unique_keys(const ds_gguf *g) {
    if (g->n_kv < 2) return DS_OK;
    char **keys = ds_malloc(g->n_kv * sizeof *keys);
    if (!keys) return DS_ERR_NOMEM;
    for (uint64_t i = 0; i < g->n_kv; i++) keys[i] = g->kv[i].key;
    qsort(keys, g->n_kv, sizeof *keys, cmp_key);
    ds_status st = DS_OK;
    for (uint64_t i = 1; i < g->n_kv && !st; i++)
        if (strcmp(keys[i - 1], keys[i]) == 0)
            st = ds_fail(DS_ERR_FORMAT, "%s: metadata key '%s' appears twice", g->map.path, keys[i]);
    free(keys);
    return st;
}

static int cmp_name(const void *a, const void *b) {
    return strcmp(((const ds_gguf_tensor *)a)->name, ((const ds_gguf_tensor *)b)->name);
}

static ds_status gguf_parse(ds_gguf *g) {
    if (g->map.size < 4 || memcmp(g->map.data, "GGUF", 4) != 0) // (before any arithmetic on data: NULL when empty)
        return ds_fail(DS_ERR_FORMAT, "%s: not a GGUF file (bad magic)", g->map.path);
    cursor c = {g->map.data, g->map.data + g->map.size, g->map.path, g->map.data};
    ds_status st;
    c.p += 4;
    if ((st = rd(&c, &g->version, 4, "version"))) return st;
    if (g->version != 2 && g->version != 3)
        return ds_fail(DS_ERR_UNSUPPORTED, "%s: GGUF version %u is not supported (2 and 3 are)", c.path, g->version);
    if ((st = rd(&c, &g->n_tensors, 8, "tensor count")) || (st = rd(&c, &g->n_kv, 8, "metadata count"))) return st;
    // The smallest metadata entry is 13 bytes and the smallest tensor info 32: bound the counts by
    // the file size before allocating anything.
    const size_t left = (size_t)(c.end - c.p);
    if (g->n_kv > left / 13)
        return ds_fail(DS_ERR_FORMAT, "%s: metadata count %llu is impossible for a %zu-byte file", c.path,
                       (unsigned long long)g->n_kv, g->map.size);
    if (g->n_tensors > left / 32)
        return ds_fail(DS_ERR_FORMAT, "%s: tensor count %llu is impossible for a %zu-byte file", c.path,
                       (unsigned long long)g->n_tensors, g->map.size);
    if (!(g->kv = ds_calloc(g->n_kv, sizeof *g->kv))) return DS_ERR_NOMEM;
    for (uint64_t i = 0; i < g->n_kv; i++)
        if ((st = read_kv(&c, &g->kv[i]))) return st;
    if ((st = check_unique_keys(g))) return st;
    if (!(g->tensors = ds_calloc(g->n_tensors, sizeof *g->tensors))) return DS_ERR_NOMEM;
    for (uint64_t i = 0; i < g->n_tensors; i++)
        if ((st = read_tensor_info(&c, &g->tensors[i]))) return st;

    g->alignment = 32;
    const ds_gguf_kv *al = ds_gguf_find_kv(g, "general.alignment");
    if (al) {
        if (al->type != DS_GGUF_U32 || al->v.u == 0 || (al->v.u & (al->v.u - 1)))
            return ds_fail(DS_ERR_FORMAT, "%s: general.alignment must be a power-of-two u32", c.path);
        g->alignment = al->v.u;
    }
    size_t pos = (size_t)(c.p - g->map.data);
    size_t aligned = (pos + g->alignment - 1) / g->alignment * g->alignment;
    if (aligned > g->map.size && g->n_tensors > 0) return truncated(&c, "data section");
    g->data_offset = aligned < g->map.size ? aligned : g->map.size;
    if ((st = check_layout(g))) return st;

    // Sorted by name for lookup; duplicate names are malformed.
    qsort(g->tensors, g->n_tensors, sizeof *g->tensors, cmp_name);
    for (uint64_t i = 1; i < g->n_tensors; i++)
        if (strcmp(g->tensors[i - 1].name, g->tensors[i].name) == 0)
            return ds_fail(DS_ERR_FORMAT, "%s: tensor '%s' appears twice", c.path, g->tensors[i].name);
    return DS_OK;
}

ds_status ds_gguf_open(ds_gguf *g, const char *path) {
    memset(g, 0, sizeof *g);
    ds_status st = ds_mapfile_open(&g->map, path);
    if (st) return st;
    if ((st = gguf_parse(g))) ds_gguf_close(g);
    return st;
}

void ds_gguf_close(ds_gguf *g) {
    for (uint64_t i = 0; g->kv && i < g->n_kv; i++) {
        free(g->kv[i].key);
        free(g->kv[i].arr_strs);
    }
    for (uint64_t i = 0; g->tensors && i < g->n_tensors; i++) free(g->tensors[i].name);
    free(g->kv);
    free(g->tensors);
    ds_mapfile_close(&g->map);
    memset(g, 0, sizeof *g);
}

const ds_gguf_kv *ds_gguf_find_kv(const ds_gguf *g, const char *key) {
    for (uint64_t i = 0; i < g->n_kv; i++)
        if (g->kv[i].key && strcmp(g->kv[i].key, key) == 0) return &g->kv[i];
    return NULL;
}

const ds_gguf_tensor *ds_gguf_find_tensor(const ds_gguf *g, const char *name) {
    ds_gguf_tensor probe = {.name = (char *)name};
    return bsearch(&probe, g->tensors, g->n_tensors, sizeof *g->tensors, cmp_name);
}

static int is_int_type(ds_gguf_type t) {
    return t == DS_GGUF_U8 || t == DS_GGUF_I8 || t == DS_GGUF_U16 || t == DS_GGUF_I16 || t == DS_GGUF_U32 ||
           t == DS_GGUF_I32 || t == DS_GGUF_U64 || t == DS_GGUF_I64;
}
static int is_signed(ds_gguf_type t) {
    return t == DS_GGUF_I8 || t == DS_GGUF_I16 || t == DS_GGUF_I32 || t == DS_GGUF_I64;
}

ds_status ds_gguf_get_int_or(const ds_gguf *g, const char *key, int64_t def, int64_t *out) {
    const ds_gguf_kv *kv = ds_gguf_find_kv(g, key);
    if (!kv) {
        *out = def;
        return DS_OK;
    }
    if (!is_int_type(kv->type))
        return ds_fail(DS_ERR_FORMAT, "%s: metadata '%s' is not an integer", g->map.path, key);
    if (!is_signed(kv->type) && kv->v.u > (uint64_t)INT64_MAX)
        return ds_fail(DS_ERR_FORMAT, "%s: metadata '%s' is out of range", g->map.path, key);
    *out = is_signed(kv->type) ? kv->v.i : (int64_t)kv->v.u;
    return DS_OK;
}

ds_status ds_gguf_get_int(const ds_gguf *g, const char *key, int64_t *out) {
    if (!ds_gguf_find_kv(g, key)) return ds_fail(DS_ERR_FORMAT, "%s: missing metadata '%s'", g->map.path, key);
    return ds_gguf_get_int_or(g, key, 0, out);
}

ds_status ds_gguf_get_float_or(const ds_gguf *g, const char *key, double def, double *out) {
    const ds_gguf_kv *kv = ds_gguf_find_kv(g, key);
    if (!kv) {
        *out = def;
        return DS_OK;
    }
    if (kv->type == DS_GGUF_F32 || kv->type == DS_GGUF_F64) *out = kv->v.f;
    else if (is_int_type(kv->type)) *out = is_signed(kv->type) ? (double)kv->v.i : (double)kv->v.u;
    else return ds_fail(DS_ERR_FORMAT, "%s: metadata '%s' is not a number", g->map.path, key);
    return DS_OK;
}

ds_status ds_gguf_get_float(const ds_gguf *g, const char *key, double *out) {
    if (!ds_gguf_find_kv(g, key)) return ds_fail(DS_ERR_FORMAT, "%s: missing metadata '%s'", g->map.path, key);
    return ds_gguf_get_float_or(g, key, 0, out);
}

ds_status ds_gguf_get_bool_or(const ds_gguf *g, const char *key, int def, int *out) {
    const ds_gguf_kv *kv = ds_gguf_find_kv(g, key);
    if (!kv) {
        *out = def;
        return DS_OK;
    }
    if (kv->type != DS_GGUF_BOOL) return ds_fail(DS_ERR_FORMAT, "%s: metadata '%s' is not a bool", g->map.path, key);
    *out = (int)kv->v.u;
    return DS_OK;
}

ds_status ds_gguf_get_bool(const ds_gguf *g, const char *key, int *out) {
    if (!ds_gguf_find_kv(g, key)) return ds_fail(DS_ERR_FORMAT, "%s: missing metadata '%s'", g->map.path, key);
    return ds_gguf_get_bool_or(g, key, 0, out);
}

ds_status ds_gguf_get_str(const ds_gguf *g, const char *key, char *buf, size_t cap) {
    const ds_gguf_kv *kv = ds_gguf_find_kv(g, key);
    if (!kv) return ds_fail(DS_ERR_FORMAT, "%s: missing metadata '%s'", g->map.path, key);
    if (kv->type != DS_GGUF_STRING) return ds_fail(DS_ERR_FORMAT, "%s: metadata '%s' is not a string", g->map.path, key);
    if (cap == 0) return ds_fail(DS_ERR_INVALID, "no room to copy metadata '%s'", key);
    size_t n = kv->v.s.len < cap - 1 ? (size_t)kv->v.s.len : cap - 1;
    memcpy(buf, kv->v.s.ptr, n);
    buf[n] = 0;
    return DS_OK;
}

double ds_gguf_arr_f64(const ds_gguf_kv *kv, uint64_t i) {
    const uint8_t *p = kv->arr_data + i * ds_gguf_scalar_size(kv->arr_type);
    switch (kv->arr_type) {
    case DS_GGUF_F32: { float v; memcpy(&v, p, 4); return v; }
    case DS_GGUF_F64: { double v; memcpy(&v, p, 8); return v; }
    default: return (double)ds_gguf_arr_i64(kv, i);
    }
}

// A float as int64, truncated toward zero and saturated (NaN gives 0): converting an out-of-range
// float is undefined behaviour, and the file decides the value.
static int64_t f64_to_i64(double v) {
    if (!(v == v)) return 0;
    if (v >= 9223372036854775807.0) return INT64_MAX;
    if (v <= -9223372036854775808.0) return INT64_MIN;
    return (int64_t)v;
}

int64_t ds_gguf_arr_i64(const ds_gguf_kv *kv, uint64_t i) {
    const uint8_t *p = kv->arr_data + i * ds_gguf_scalar_size(kv->arr_type);
    switch (kv->arr_type) {
    case DS_GGUF_U8: case DS_GGUF_BOOL: return *p;
    case DS_GGUF_I8: return (int8_t)*p;
    case DS_GGUF_U16: { uint16_t v; memcpy(&v, p, 2); return v; }
    case DS_GGUF_I16: { int16_t v; memcpy(&v, p, 2); return v; }
    case DS_GGUF_U32: { uint32_t v; memcpy(&v, p, 4); return v; }
    case DS_GGUF_I32: { int32_t v; memcpy(&v, p, 4); return v; }
    case DS_GGUF_U64: { uint64_t v; memcpy(&v, p, 8); return (int64_t)v; }
    case DS_GGUF_I64: { int64_t v; memcpy(&v, p, 8); return v; }
    case DS_GGUF_F32: { float v; memcpy(&v, p, 4); return f64_to_i64(v); }
    case DS_GGUF_F64: { double v; memcpy(&v, p, 8); return f64_to_i64(v); }
    default: return 0;
    }
}

static int key_selected(const char *key, const char *const *keep) {
    for (; *keep; keep++) {
        const size_t n = strlen(*keep);
        if ((*keep)[n - 1] == '.' ? !strncmp(key, *keep, n) : !strcmp(key, *keep)) return 1;
    }
    return 0;
}

ds_status ds_gguf_write_metadata(const ds_gguf *g, const char *const *keep, const char *path) {
    ds_gguf_writer *w;
    ds_status st = ds_gguf_writer_init(&w);
    if (st) return st;
    for (uint64_t i = 0; i < g->n_kv; i++)
        if (key_selected(g->kv[i].key, keep)) ds_gguf_writer_copy(w, &g->kv[i]);
    if (!(st = ds_gguf_writer_open(w, path))) st = ds_gguf_writer_commit(w);
    ds_gguf_writer_free(w);
    return st;
}
