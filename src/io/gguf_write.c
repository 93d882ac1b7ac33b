// GGUF v3 writer (see gguf.h): metadata and tensor infos are collected in memory, then the header
// is written and each tensor's bytes are streamed in declaration order, each tensor starting at a
// multiple of the alignment (general.alignment, 32). The file goes through io/atomic.c (temporary
// file, fsync, rename); an existing file at the path is replaced only when it is a GGUF this writer
// made (general.quantized_by = "dspark"), so a user's model is never overwritten by mistake.
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/status.h"
#include "io/atomic.h"
#include "io/gguf.h"

#define ALIGN 32

typedef struct {
    char *name;
    ds_dtype type;
    int n_dims;
    int64_t ne[4];
    uint64_t nbytes, offset;
} wtensor;

struct ds_gguf_writer {
    unsigned char *kv;   // serialized key/value pairs
    size_t kv_len, kv_cap;
    uint64_t n_kv;
    wtensor *t;
    int n_t, cap_t;
    int cur;             // tensor being streamed
    uint64_t cur_written;
    uint64_t pos;        // bytes of the data section written
    ds_atomic_file af;
    int open;
    ds_status err;       // first failure of a kv append (reported by ds_gguf_writer_open)
};

ds_status ds_gguf_writer_init(ds_gguf_writer **out) {
    *out = calloc(1, sizeof **out);
    return *out ? DS_OK : ds_fail(DS_ERR_NOMEM, "out of memory");
}

void ds_gguf_writer_free(ds_gguf_writer *w) {
    if (!w) return;
    if (w->open) ds_atomic_abort(&w->af);
    for (int i = 0; i < w->n_t; i++) free(w->t[i].name);
    free(w->t);
    free(w->kv);
    free(w);
}

static void put(ds_gguf_writer *w, const void *p, size_t n) {
    if (w->err) return;
    if (w->kv_len + n > w->kv_cap) {
        size_t cap = w->kv_cap ? w->kv_cap : 4096;
        while (cap < w->kv_len + n) cap *= 2;
        unsigned char *b = realloc(w->kv, cap);
        if (!b) {
            w->err = ds_fail(DS_ERR_NOMEM, "out of memory (GGUF metadata)");
            return;
        }
        w->kv = b, w->kv_cap = cap;
    }
    memcpy(w->kv + w->kv_len, p, n);
    w->kv_len += n;
}

static void put_str(ds_gguf_writer *w, const char *s, uint64_t n) {
    put(w, &n, 8);
    put(w, s, (size_t)n);
}

static void put_key(ds_gguf_writer *w, const char *key, ds_gguf_type t) {
    const uint32_t ty = (uint32_t)t;
    put_str(w, key, strlen(key));
    put(w, &ty, 4);
    w->n_kv++;
}

void ds_gguf_writer_str(ds_gguf_writer *w, const char *key, const char *s, size_t n) {
    put_key(w, key, DS_GGUF_STRING);
    put_str(w, s, n);
}

void ds_gguf_writer_u32(ds_gguf_writer *w, const char *key, uint32_t v) {
    put_key(w, key, DS_GGUF_U32);
    put(w, &v, 4);
}

void ds_gguf_writer_i32(ds_gguf_writer *w, const char *key, int32_t v) {
    put_key(w, key, DS_GGUF_I32);
    put(w, &v, 4);
}

void ds_gguf_writer_f32(ds_gguf_writer *w, const char *key, float v) {
    put_key(w, key, DS_GGUF_F32);
    put(w, &v, 4);
}

void ds_gguf_writer_bool(ds_gguf_writer *w, const char *key, int v) {
    const uint8_t b = v != 0;
    put_key(w, key, DS_GGUF_BOOL);
    put(w, &b, 1);
}

void ds_gguf_writer_arr(ds_gguf_writer *w, const char *key, ds_gguf_type elem, uint64_t n, const void *data,
                        size_t elem_size) {
    const uint32_t et = (uint32_t)elem;
    put_key(w, key, DS_GGUF_ARRAY);
    put(w, &et, 4);
    put(w, &n, 8);
    put(w, data, (size_t)n * elem_size);
}

void ds_gguf_writer_arr_str(ds_gguf_writer *w, const char *key, uint64_t n, const char *const *s, const size_t *len) {
    const uint32_t et = DS_GGUF_STRING;
    put_key(w, key, DS_GGUF_ARRAY);
    put(w, &et, 4);
    put(w, &n, 8);
    for (uint64_t i = 0; i < n; i++) put_str(w, s[i], len ? len[i] : strlen(s[i]));
}

void ds_gguf_writer_copy(ds_gguf_writer *w, const ds_gguf_kv *kv) {
    put_key(w, kv->key, kv->type);
    if (kv->type == DS_GGUF_STRING) {
        put_str(w, kv->v.s.ptr, kv->v.s.len);
    } else if (kv->type == DS_GGUF_ARRAY) {
        const uint32_t et = (uint32_t)kv->arr_type;
        put(w, &et, 4);
        put(w, &kv->arr_n, 8);
        if (kv->arr_type == DS_GGUF_STRING)
            for (uint64_t k = 0; k < kv->arr_n; k++) put_str(w, kv->arr_strs[k].ptr, kv->arr_strs[k].len);
        else if (ds_gguf_scalar_size(kv->arr_type))
            put(w, kv->arr_data, (size_t)kv->arr_n * ds_gguf_scalar_size(kv->arr_type));
        else if (!w->err)
            w->err = ds_fail(DS_ERR_UNSUPPORTED, "GGUF metadata '%s': nested arrays are not copied", kv->key);
    } else {
        unsigned char b[8];
        if (kv->type == DS_GGUF_F32) {
            const float v = (float)kv->v.f;
            memcpy(b, &v, 4);
        } else if (kv->type == DS_GGUF_F64) {
            memcpy(b, &kv->v.f, 8);
        } else {
            memcpy(b, &kv->v.u, 8); // little-endian: the low bytes are the value
        }
        put(w, b, ds_gguf_scalar_size(kv->type));
    }
}

ds_status ds_gguf_writer_tensor(ds_gguf_writer *w, const char *name, ds_dtype type, int n_dims, const int64_t *ne,
                                uint64_t nbytes) {
    if (w->n_t == w->cap_t) {
        const int cap = w->cap_t ? 2 * w->cap_t : 64;
        wtensor *t = realloc(w->t, (size_t)cap * sizeof *t);
        if (!t) return ds_fail(DS_ERR_NOMEM, "out of memory");
        w->t = t, w->cap_t = cap;
    }
    wtensor *t = &w->t[w->n_t];
    memset(t, 0, sizeof *t);
    if (!(t->name = strdup(name))) return ds_fail(DS_ERR_NOMEM, "out of memory");
    t->type = type;
    t->n_dims = n_dims;
    for (int i = 0; i < n_dims && i < 4; i++) t->ne[i] = ne[i];
    t->nbytes = nbytes;
    t->offset = w->n_t ? (w->t[w->n_t - 1].offset + w->t[w->n_t - 1].nbytes + ALIGN - 1) / ALIGN * ALIGN : 0;
    w->n_t++;
    return DS_OK;
}

// An existing file at `path` may be replaced only when it is a dspark-written GGUF.
static ds_status check_replace(const char *path) {
    struct stat sb;
    ds_status st = ds_atomic_check(path);
    if (st) return st;
    if (stat(path, &sb) != 0) return DS_OK; // nothing there
    ds_gguf g;
    char by[32] = "";
    if (ds_gguf_open(&g, path) == DS_OK) {
        if (ds_gguf_find_kv(&g, "general.quantized_by")) ds_gguf_get_str(&g, "general.quantized_by", by, sizeof by);
        ds_gguf_close(&g);
    }
    if (strcmp(by, "dspark") != 0)
        return ds_fail(DS_ERR_IO, "%s: already exists and is not a GGUF written by dspark; not replaced (remove it "
                       "or choose another path)", path);
    return DS_OK;
}

ds_status ds_gguf_writer_check(const char *path) { return check_replace(path); }

static int fput(ds_gguf_writer *w, const void *p, size_t n) { return fwrite(p, 1, n, w->af.f) == n; }

ds_status ds_gguf_writer_open(ds_gguf_writer *w, const char *path) {
    ds_status st;
    if (w->err) return w->err;
    if ((st = check_replace(path)) || (st = ds_atomic_open(&w->af, path))) return st;
    w->open = 1;
    const uint32_t magic = 0x46554747, version = 3;
    const uint64_t nt = (uint64_t)w->n_t;
    int ok = fput(w, &magic, 4) && fput(w, &version, 4) && fput(w, &nt, 8) && fput(w, &w->n_kv, 8) &&
             fput(w, w->kv, w->kv_len);
    uint64_t pos = 24 + w->kv_len;
    for (int i = 0; i < w->n_t && ok; i++) {
        const wtensor *t = &w->t[i];
        const uint64_t n = strlen(t->name);
        const uint32_t nd = (uint32_t)t->n_dims, ty = (uint32_t)t->type;
        ok = fput(w, &n, 8) && fput(w, t->name, n) && fput(w, &nd, 4);
        for (int d = 0; d < t->n_dims && ok; d++) ok = fput(w, &t->ne[d], 8);
        ok = ok && fput(w, &ty, 4) && fput(w, &t->offset, 8);
        pos += 8 + n + 4 + 8 * (uint64_t)t->n_dims + 4 + 8;
    }
    static const unsigned char zeros[ALIGN];
    if (ok && pos % ALIGN) ok = fput(w, zeros, (size_t)(ALIGN - pos % ALIGN));
    if (!ok) return ds_fail(DS_ERR_IO, "%s: write failed: %s", w->af.name, strerror(errno));
    w->cur = 0, w->cur_written = 0, w->pos = 0;
    return DS_OK;
}

ds_status ds_gguf_writer_data(ds_gguf_writer *w, const void *p, size_t n) {
    static const unsigned char zeros[ALIGN];
    while (w->cur < w->n_t && w->cur_written == w->t[w->cur].nbytes && n) w->cur++, w->cur_written = 0;
    if (w->cur >= w->n_t || w->cur_written + n > w->t[w->cur].nbytes)
        return ds_fail(DS_ERR_INVALID, "internal: GGUF tensor data beyond the declared sizes");
    const wtensor *t = &w->t[w->cur];
    if (w->cur_written == 0 && w->pos < t->offset) { // padding before this tensor
        if (!fput(w, zeros, (size_t)(t->offset - w->pos)))
            return ds_fail(DS_ERR_IO, "%s: write failed: %s", w->af.name, strerror(errno));
        w->pos = t->offset;
    }
    if (!fput(w, p, n)) return ds_fail(DS_ERR_IO, "%s: write failed: %s", w->af.name, strerror(errno));
    w->cur_written += n;
    w->pos += n;
    return DS_OK;
}

ds_status ds_gguf_writer_commit(ds_gguf_writer *w) {
    uint64_t want = w->n_t ? w->t[w->n_t - 1].offset + w->t[w->n_t - 1].nbytes : 0;
    if (w->pos != want) return ds_fail(DS_ERR_INVALID, "internal: GGUF data section incomplete (%llu of %llu bytes)",
                                       (unsigned long long)w->pos, (unsigned long long)want);
    w->open = 0;
    return ds_atomic_commit(&w->af);
}

const char *ds_gguf_writer_flush(ds_gguf_writer *w) {
    if (!w->open || fflush(w->af.f) != 0) return NULL;
    return w->af.tmp_path;
}
