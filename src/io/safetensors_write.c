// Safetensors writer (atomic, optionally sharded); the reader is safetensors_read.c.
// Format rules are in safetensors.h.
#include "io/safetensors.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/status.h"
#include "base/testpoint.h"
#include "io/atomic.h"
#include "io/safetensors_internal.h"

struct ds_st_writer {
    ds_st_tensor *t; // in add order; names and shapes owned
    int n, cap;
    int *hash;       // open addressing over indices into t (-1 = empty), for duplicate names
    int hash_cap;    // power of two, kept at least twice n
    char **meta_keys, **meta_values; // in insertion order
    int n_meta, cap_meta;
    int n_streamed;  // tensors added with ds_st_writer_add_stream
};

static uint64_t hash_str(const char *s) {
    uint64_t h = 1469598103934665603ull; // FNV-1a
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

// Slot for `name`: where it is, or the empty slot where it would go.
static int hash_slot(const ds_st_writer *w, const char *name) {
    size_t mask = (size_t)w->hash_cap - 1, i = (size_t)hash_str(name) & mask;
    while (w->hash[i] >= 0 && strcmp(w->t[w->hash[i]].name, name) != 0) i = (i + 1) & mask;
    return (int)i;
}

static ds_status grow_writer(ds_st_writer *w) {
    if (w->n < w->cap) return DS_OK;
    int cap = w->cap ? 2 * w->cap : 64;
    ds_st_tensor *t = realloc(w->t, (size_t)cap * sizeof *t);
    int *hash = malloc((size_t)cap * 2 * sizeof *hash);
    if (!t || !hash) {
        if (t) w->t = t;
        free(hash);
        return ds_fail(DS_ERR_NOMEM, "out of memory");
    }
    w->t = t;
    w->cap = cap;
    free(w->hash);
    w->hash = hash;
    w->hash_cap = cap * 2;
    for (int i = 0; i < w->hash_cap; i++) w->hash[i] = -1;
    for (int i = 0; i < w->n; i++) w->hash[hash_slot(w, w->t[i].name)] = i;
    return DS_OK;
}

ds_st_writer *ds_st_writer_new(void) { return ds_calloc(1, sizeof(ds_st_writer)); }

void ds_st_writer_free(ds_st_writer *w) {
    if (!w) return;
    for (int i = 0; i < w->n; i++) free((char *)w->t[i].name);
    for (int i = 0; i < w->n_meta; i++) {
        free(w->meta_keys[i]);
        free(w->meta_values[i]);
    }
    free(w->t);
    free(w->hash);
    free(w->meta_keys);
    free(w->meta_values);
    free(w);
}

// The `data` of a streamed tensor (ds_st_writer_add_stream): its bytes come through a ds_st_sink.
static const char STREAMED[1];

static ds_status add_tensor(ds_st_writer *w, const char *name, ds_dtype dtype, int n_dims, const int64_t *shape,
                            const void *data) {
    if (!name || !name[0]) return ds_fail(DS_ERR_INVALID, "safetensors writer: empty tensor name");
    if (strcmp(name, "__metadata__") == 0)
        return ds_fail(DS_ERR_INVALID, "safetensors writer: '__metadata__' is reserved, not a tensor name");
    if (!ds_st_dtype_supported(dtype))
        return ds_fail(DS_ERR_INVALID, "safetensors writer: tensor '%s': unsupported dtype %s", ds_st_quote(name).s, ds_dtype_name(dtype));
    if (n_dims < 0 || n_dims > DS_ST_MAX_DIMS || (n_dims > 0 && !shape))
        return ds_fail(DS_ERR_INVALID, "safetensors writer: tensor '%s': %d dims (must be 0..%d)", ds_st_quote(name).s, n_dims, DS_ST_MAX_DIMS);
    for (int i = 0; i < n_dims; i++)
        if (shape[i] < 0 || (double)shape[i] > DS_ST_JSON_MAX_EXACT)
            return ds_fail(DS_ERR_INVALID, "safetensors writer: tensor '%s': dim %d is %" PRId64, ds_st_quote(name).s, i, shape[i]);
    int ok;
    size_t nbytes = ds_st_shape_bytes(shape, n_dims, ds_dtype_size(dtype), &ok);
    if (!ok) return ds_fail(DS_ERR_INVALID, "safetensors writer: tensor '%s': byte size overflows", ds_st_quote(name).s);
    if (nbytes > 0 && !data) return ds_fail(DS_ERR_INVALID, "safetensors writer: tensor '%s': no data", ds_st_quote(name).s);
    ds_status s = grow_writer(w);
    if (s != DS_OK) return s;
    int slot = hash_slot(w, name);
    if (w->hash[slot] >= 0) return ds_fail(DS_ERR_INVALID, "safetensors writer: duplicate tensor name '%s'", ds_st_quote(name).s);

    ds_st_tensor *t = &w->t[w->n];
    memset(t, 0, sizeof *t);
    if (!(t->name = strdup(name))) return ds_fail(DS_ERR_NOMEM, "out of memory");
    t->dtype = dtype;
    t->n_dims = n_dims;
    for (int i = 0; i < n_dims; i++) t->shape[i] = shape[i];
    t->data = data;
    t->nbytes = nbytes;
    w->hash[slot] = w->n++;
    return DS_OK;
}

ds_status ds_st_writer_add(ds_st_writer *w, const char *name, ds_dtype dtype, int n_dims, const int64_t *shape,
                           const void *data) {
    return add_tensor(w, name, dtype, n_dims, shape, data);
}

ds_status ds_st_writer_add_stream(ds_st_writer *w, const char *name, ds_dtype dtype, int n_dims, const int64_t *shape,
                                  int *id) {
    ds_status s = add_tensor(w, name, dtype, n_dims, shape, STREAMED);
    if (s == DS_OK) {
        *id = w->n - 1;
        w->n_streamed++;
    }
    return s;
}

ds_status ds_st_writer_set_metadata(ds_st_writer *w, const char *key, const char *value) {
    if (!key || !value) return ds_fail(DS_ERR_INVALID, "safetensors writer: NULL metadata key or value");
    char *v = strdup(value);
    if (!v) return ds_fail(DS_ERR_NOMEM, "out of memory");
    for (int i = 0; i < w->n_meta; i++)
        if (strcmp(w->meta_keys[i], key) == 0) {
            free(w->meta_values[i]);
            w->meta_values[i] = v;
            return DS_OK;
        }
    if (w->n_meta == w->cap_meta) {
        int cap = w->cap_meta ? 2 * w->cap_meta : 8;
        char **k = realloc(w->meta_keys, (size_t)cap * sizeof *k);
        if (k) w->meta_keys = k;
        char **vs = k ? realloc(w->meta_values, (size_t)cap * sizeof *vs) : NULL;
        if (vs) w->meta_values = vs;
        if (!k || !vs) {
            free(v);
            return ds_fail(DS_ERR_NOMEM, "out of memory");
        }
        w->cap_meta = cap;
    }
    char *k = strdup(key);
    if (!k) {
        free(v);
        return ds_fail(DS_ERR_NOMEM, "out of memory");
    }
    w->meta_keys[w->n_meta] = k;
    w->meta_values[w->n_meta++] = v;
    return DS_OK;
}

// --- A growable text buffer for JSON

typedef struct {
    char *p;
    size_t n, cap;
    int oom;
} sbuf;

static void sb_put(sbuf *b, const char *s, size_t n) {
    if (b->oom) return;
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n + 1) cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) {
            b->oom = 1;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = '\0';
}

static void sb_puts(sbuf *b, const char *s) { sb_put(b, s, strlen(s)); }

static void sb_printf(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_printf(sbuf *b, const char *fmt, ...) {
    char tmp[256];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    sb_put(b, tmp, n < (int)sizeof tmp ? (size_t)n : sizeof tmp - 1);
}

// A JSON string literal: quote, backslash and control bytes escaped; UTF-8 passes through.
static void sb_json_str(sbuf *b, const char *s) {
    sb_put(b, "\"", 1);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') {
            char e[2] = {'\\', (char)c};
            sb_put(b, e, 2);
        } else if (c < 0x20) {
            sb_printf(b, "\\u%04x", c);
        } else {
            sb_put(b, (const char *)&c, 1);
        }
    }
    sb_put(b, "\"", 1);
}

// --- Writing one file

typedef struct {
    const ds_st_tensor *t;
    uint64_t begin; // data offset
} slot;

static int cmp_tensor_name(const void *a, const void *b) {
    return strcmp((*(const ds_st_tensor *const *)a)->name, (*(const ds_st_tensor *const *)b)->name);
}

// Data order: larger element size first, then name, so that every tensor starts at a multiple
// of its element size (the data buffer itself starts at a multiple of 8).
static int cmp_slot_layout(const void *a, const void *b) {
    const slot *x = *(const slot *const *)a, *y = *(const slot *const *)b;
    size_t ex = ds_dtype_size(x->t->dtype), ey = ds_dtype_size(y->t->dtype);
    if (ex != ey) return ex > ey ? -1 : 1;
    return strcmp(x->t->name, y->t->name);
}

// The header JSON of `slots` (sorted by name, offsets assigned), padded with spaces so that
// 8 + length is a multiple of 64: the data starts on a cache line, so every tensor whose
// predecessors' sizes are multiples of 64 bytes (all of a model's matrices, in practice) does too,
// and the kernels' weight loads never split a line.
static ds_status build_header(const ds_st_writer *w, const slot *slots, int n, sbuf *b) {
    sb_puts(b, "{");
    if (w->n_meta) {
        sb_puts(b, "\"__metadata__\":{");
        for (int i = 0; i < w->n_meta; i++) {
            if (i) sb_puts(b, ",");
            sb_json_str(b, w->meta_keys[i]);
            sb_puts(b, ":");
            sb_json_str(b, w->meta_values[i]);
        }
        sb_puts(b, "}");
    }
    for (int i = 0; i < n; i++) {
        const ds_st_tensor *t = slots[i].t;
        if (i || w->n_meta) sb_puts(b, ",");
        sb_json_str(b, t->name);
        sb_printf(b, ":{\"dtype\":\"%s\",\"shape\":[", ds_dtype_name(t->dtype));
        for (int d = 0; d < t->n_dims; d++) sb_printf(b, "%s%" PRId64, d ? "," : "", t->shape[d]);
        sb_printf(b, "],\"data_offsets\":[%" PRIu64 ",%" PRIu64 "]}", slots[i].begin, slots[i].begin + t->nbytes);
    }
    sb_puts(b, "}");
    while (!b->oom && (8 + b->n) % 64 != 0) sb_puts(b, " ");
    return b->oom ? ds_fail(DS_ERR_NOMEM, "out of memory building a safetensors header") : DS_OK;
}

// Offsets of tensors (sorted by name) in the data buffer, into slots (name order), and the header.
// `layout` (n) receives the slots in data order.
static ds_status lay_out(const ds_st_writer *w, const ds_st_tensor *const *tensors, int n, slot *slots, slot **layout,
                         sbuf *hdr) {
    for (int i = 0; i < n; i++) {
        slots[i] = (slot){tensors[i], 0};
        layout[i] = &slots[i];
    }
    qsort(layout, (size_t)n, sizeof *layout, cmp_slot_layout);
    uint64_t off = 0;
    for (int i = 0; i < n; i++) {
        layout[i]->begin = off;
        off += layout[i]->t->nbytes;
    }
    return build_header(w, slots, n, hdr);
}

static int write_prefix(const sbuf *hdr, FILE *f) {
    uint8_t len[8];
    for (int i = 0; i < 8; i++) len[i] = (uint8_t)((uint64_t)hdr->n >> (8 * i));
    return fwrite(len, 1, 8, f) == 8 && fwrite(hdr->p, 1, hdr->n, f) == hdr->n;
}

// Write tensors (sorted by name) to the already opened temporary file `af`.
static ds_status write_tensors(const ds_st_writer *w, const ds_st_tensor *const *tensors, int n, ds_atomic_file *af) {
    slot *slots = ds_malloc((size_t)(n ? n : 1) * sizeof *slots);
    slot **layout = ds_malloc((size_t)(n ? n : 1) * sizeof *layout);
    ds_status s = DS_OK;
    if (!slots || !layout) s = DS_ERR_NOMEM;
    sbuf hdr = {0};
    if (s == DS_OK) s = lay_out(w, tensors, n, slots, layout, &hdr);
    if (s == DS_OK) {
        int ok = write_prefix(&hdr, af->f);
        for (int i = 0; ok && i < n; i++) {
            const ds_st_tensor *t = layout[i]->t;
            if (i == n / 2) ds_test_point(); // a test may stop the process halfway through the file
            ok = t->nbytes == 0 || fwrite(t->data, 1, t->nbytes, af->f) == t->nbytes;
        }
        if (!ok) s = ds_fail(DS_ERR_IO, "%s: write failed: %s", af->name, strerror(errno));
    }
    free(hdr.p);
    free(slots);
    free(layout);
    return s;
}

// All tensors sorted by name (pointers into w->t).
static const ds_st_tensor **sorted_tensors(const ds_st_writer *w) {
    const ds_st_tensor **v = ds_malloc((size_t)(w->n ? w->n : 1) * sizeof *v);
    if (!v) return NULL;
    for (int i = 0; i < w->n; i++) v[i] = &w->t[i];
    qsort(v, (size_t)w->n, sizeof *v, cmp_tensor_name);
    return v;
}

static ds_status write_one_file(const ds_st_writer *w, const ds_st_tensor *const *tensors, int n, const char *path) {
    ds_atomic_file af;
    ds_status s = ds_atomic_open(&af, path);
    if (s != DS_OK) return s;
    if ((s = write_tensors(w, tensors, n, &af)) != DS_OK) {
        ds_atomic_abort(&af);
        return s;
    }
    return ds_atomic_commit(&af);
}

static ds_status refuse_streamed(const ds_st_writer *w) {
    return w->n_streamed ? ds_fail(DS_ERR_INVALID, "safetensors writer: %d tensors are streamed; write them with "
                                   "ds_st_writer_stream_dir", w->n_streamed)
                         : DS_OK;
}

ds_status ds_st_writer_write_file(const ds_st_writer *w, const char *path) {
    if (refuse_streamed(w)) return DS_ERR_INVALID;
    const ds_st_tensor **v = sorted_tensors(w);
    if (!v) return DS_ERR_NOMEM;
    ds_status s = write_one_file(w, v, w->n, path);
    free(v);
    return s;
}

// --- Writing a directory

// Remove a file we own by name if it exists (a stale one would shadow what we just wrote).
static ds_status remove_stale(const char *dir, const char *name) {
    char *p = ds_st_join_path(dir, name);
    if (!p) return DS_ERR_NOMEM;
    ds_status s = DS_OK;
    if (unlink(p) != 0 && errno != ENOENT) s = ds_fail(DS_ERR_IO, "%s: cannot remove stale file: %s", p, strerror(errno));
    free(p);
    return s;
}

// The index: {"metadata": {"total_size": N}, "weight_map": {tensor: shard file}} (name order).
static ds_status write_index(const char *dir, const ds_st_tensor *const *v, const int *shard_of, int n, int n_shards,
                             uint64_t total) {
    sbuf b = {0};
    char fname[64];
    sb_printf(&b, "{\n  \"metadata\": {\n    \"total_size\": %" PRIu64 "\n  },\n  \"weight_map\": {\n", total);
    for (int i = 0; i < n; i++) {
        snprintf(fname, sizeof fname, "model-%05d-of-%05d.safetensors", shard_of[i] + 1, n_shards);
        sb_puts(&b, "    ");
        sb_json_str(&b, v[i]->name);
        sb_printf(&b, ": \"%s\"%s\n", fname, i + 1 < n ? "," : "");
    }
    sb_puts(&b, "  }\n}\n");
    ds_status s = b.oom ? ds_fail(DS_ERR_NOMEM, "out of memory building the index") : DS_OK;
    char *path = s == DS_OK ? ds_st_join_path(dir, DS_ST_INDEX_NAME) : NULL;
    ds_atomic_file af;
    if (s == DS_OK && !path) s = DS_ERR_NOMEM;
    if (s == DS_OK) s = ds_atomic_open(&af, path);
    if (s == DS_OK) {
        if (fwrite(b.p, 1, b.n, af.f) != b.n) {
            s = ds_fail(DS_ERR_IO, "%s: write failed: %s", af.name, strerror(errno));
            ds_atomic_abort(&af);
        } else {
            s = ds_atomic_commit(&af);
        }
    }
    free(path);
    free(b.p);
    return s;
}

// Shards: all are written to temporary files first and renamed only once every one succeeded,
// so a failure leaves the directory as it was; the index is written last.
static ds_status write_shards(const ds_st_writer *w, const char *dir, const ds_st_tensor *const *v, const int *shard_of,
                              int n_shards, uint64_t total) {
    ds_atomic_file *af = ds_calloc((size_t)n_shards, sizeof *af);
    if (!af) return DS_ERR_NOMEM;
    ds_status s = DS_OK;
    int n_open = 0, start = 0;
    for (int k = 0; k < n_shards && s == DS_OK; k++) {
        int end = start;
        while (end < w->n && shard_of[end] == k) end++;
        char fname[64];
        snprintf(fname, sizeof fname, "model-%05d-of-%05d.safetensors", k + 1, n_shards);
        char *path = ds_st_join_path(dir, fname);
        if (!path) s = DS_ERR_NOMEM;
        if (s == DS_OK && (s = ds_atomic_open(&af[k], path)) == DS_OK) n_open++;
        if (s == DS_OK) s = write_tensors(w, v + start, end - start, &af[k]);
        free(path);
        start = end;
    }
    int k = 0;
    for (; s == DS_OK && k < n_shards; k++) s = ds_atomic_commit(&af[k]);
    for (; k < n_open; k++) ds_atomic_abort(&af[k]); // after a failure: drop the rest
    free(af);
    if (s == DS_OK) s = write_index(dir, v, shard_of, w->n, n_shards, total);
    if (s == DS_OK) s = remove_stale(dir, DS_ST_SINGLE_NAME);
    return s;
}

// Create `dir` if missing (its parent must exist). *created tells whether we made it.
static ds_status ensure_dir(const char *dir, int *created) {
    *created = 0;
    struct stat sb;
    if (stat(dir, &sb) == 0) {
        if (!S_ISDIR(sb.st_mode)) return ds_fail(DS_ERR_IO, "%s: exists and is not a directory", dir);
        return DS_OK;
    }
    if (mkdir(dir, 0777) != 0) return ds_fail(DS_ERR_IO, "%s: cannot create directory: %s", dir, strerror(errno));
    *created = 1;
    return DS_OK;
}

// Greedy in name order (v sorted by name): start a new shard when the next tensor would overflow
// this one. Returns the number of shards.
static int assign_shards(const ds_st_tensor *const *v, int n, size_t max_shard_bytes, int *shard_of) {
    int n_shards = 1;
    uint64_t in_shard = 0;
    for (int i = 0; i < n; i++) {
        size_t nb = v[i]->nbytes;
        if (max_shard_bytes && in_shard > 0 && in_shard + nb > max_shard_bytes) {
            n_shards++;
            in_shard = 0;
        }
        in_shard += nb;
        shard_of[i] = n_shards - 1;
    }
    return n_shards;
}

ds_status ds_st_writer_write_dir(const ds_st_writer *w, const char *dir, size_t max_shard_bytes) {
    if (refuse_streamed(w)) return DS_ERR_INVALID;
    uint64_t total = 0;
    for (int i = 0; i < w->n; i++) total += w->t[i].nbytes; // each fits in size_t; the sum in u64 in practice
    const ds_st_tensor **v = sorted_tensors(w);
    int *shard_of = ds_malloc((size_t)(w->n ? w->n : 1) * sizeof *shard_of);
    if (!v || !shard_of) {
        free(v);
        free(shard_of);
        return DS_ERR_NOMEM;
    }
    const int n_shards = assign_shards(v, w->n, max_shard_bytes, shard_of);
    int created;
    ds_status s = ensure_dir(dir, &created);
    if (s == DS_OK) {
        if (n_shards == 1) {
            char *path = ds_st_join_path(dir, DS_ST_SINGLE_NAME);
            s = path ? write_one_file(w, v, w->n, path) : DS_ERR_NOMEM;
            free(path);
            if (s == DS_OK) s = remove_stale(dir, DS_ST_INDEX_NAME);
        } else if (n_shards > 99999) {
            s = ds_fail(DS_ERR_INVALID, "%s: %d shards is too many (limit 99999); raise max_shard_bytes", dir, n_shards);
        } else {
            s = write_shards(w, dir, v, shard_of, n_shards, total);
        }
        if (s != DS_OK && created) rmdir(dir); // only succeeds when nothing was left inside
    }
    free(v);
    free(shard_of);
    return s;
}

// --- Streaming a directory

struct ds_st_sink {
    const ds_st_writer *w;
    int *fd;            // (w->n) descriptor of the (temporary) file holding tensor i
    uint64_t *at, *end; // (w->n) next file offset to write, end of tensor i in its file
    const char **path;  // (w->n) that file's temporary path, for messages
};

static ds_status put_at(int fd, const char *path, uint64_t at, const void *data, size_t n) {
    const char *p = data;
    while (n > 0) {
        ssize_t k = pwrite(fd, p, n, (off_t)at);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return ds_fail(DS_ERR_IO, "%s: write failed: %s", path, k < 0 ? strerror(errno) : "no progress");
        p += k, at += (uint64_t)k, n -= (size_t)k;
    }
    return DS_OK;
}

ds_status ds_st_sink_put(ds_st_sink *s, int id, const void *data, size_t n) {
    if (id < 0 || id >= s->w->n || s->w->t[id].data != STREAMED)
        return ds_fail(DS_ERR_INVALID, "safetensors writer: %d is not a streamed tensor", id);
    if (n > s->end[id] - s->at[id])
        return ds_fail(DS_ERR_INVALID, "safetensors writer: tensor '%s': %zu bytes more than its %zu", ds_st_quote(s->w->t[id].name).s,
                       n - (size_t)(s->end[id] - s->at[id]), s->w->t[id].nbytes);
    ds_status st = put_at(s->fd[id], s->path[id], s->at[id], data, n);
    if (st == DS_OK) s->at[id] += n;
    return st;
}

// Open shard k's temporary file (tensors v[0 .. n-1], sorted by name), write its header and the
// tensors that have data, and point the sink at the streamed ones.
static ds_status open_stream_file(const ds_st_writer *w, const ds_st_tensor *const *v, int n, const char *path,
                                  ds_atomic_file *af, ds_st_sink *sink) {
    slot *slots = ds_malloc((size_t)(n ? n : 1) * sizeof *slots);
    slot **layout = ds_malloc((size_t)(n ? n : 1) * sizeof *layout);
    sbuf hdr = {0};
    ds_status s = !slots || !layout ? DS_ERR_NOMEM : lay_out(w, v, n, slots, layout, &hdr);
    if (s == DS_OK && (!write_prefix(&hdr, af->f) || fflush(af->f) != 0))
        s = ds_fail(DS_ERR_IO, "%s: write failed: %s", af->name, strerror(errno));
    const uint64_t data0 = 8 + (uint64_t)hdr.n;
    uint64_t size = data0;
    for (int i = 0; s == DS_OK && i < n; i++) {
        const int id = (int)(slots[i].t - w->t);
        sink->fd[id] = fileno(af->f);
        sink->path[id] = af->name;
        sink->at[id] = data0 + slots[i].begin;
        sink->end[id] = sink->at[id] + slots[i].t->nbytes;
        if (sink->end[id] > size) size = sink->end[id];
        if (slots[i].t->data != STREAMED && slots[i].t->nbytes) {
            s = put_at(sink->fd[id], af->name, sink->at[id], slots[i].t->data, slots[i].t->nbytes);
            sink->at[id] = sink->end[id];
        }
    }
    if (s == DS_OK && ftruncate(fileno(af->f), (off_t)size) != 0)
        s = ds_fail(DS_ERR_IO, "%s: cannot size the file: %s", path, strerror(errno));
    free(hdr.p);
    free(slots);
    free(layout);
    return s;
}

ds_status ds_st_writer_stream_dir(const ds_st_writer *w, const char *dir, size_t max_shard_bytes, ds_st_fill fill,
                                  void *ctx) {
    uint64_t total = 0;
    for (int i = 0; i < w->n; i++) total += w->t[i].nbytes;
    const size_t n1 = (size_t)(w->n ? w->n : 1);
    const ds_st_tensor **v = sorted_tensors(w);
    int *shard_of = ds_malloc(n1 * sizeof *shard_of);
    ds_st_sink sink = {w, ds_calloc(n1, sizeof(int)), ds_calloc(n1, sizeof(uint64_t)), ds_calloc(n1, sizeof(uint64_t)),
                       ds_calloc(n1, sizeof(char *))};
    ds_atomic_file *af = NULL;
    int n_shards = 0, n_open = 0, created = 0;
    ds_status s = !v || !shard_of || !sink.fd || !sink.at || !sink.end || !sink.path ? DS_ERR_NOMEM : DS_OK;
    if (s == DS_OK) n_shards = assign_shards(v, w->n, max_shard_bytes, shard_of);
    if (s == DS_OK && n_shards > 99999)
        s = ds_fail(DS_ERR_INVALID, "%s: %d shards is too many (limit 99999); raise max_shard_bytes", dir, n_shards);
    if (s == DS_OK && !(af = ds_calloc((size_t)n_shards, sizeof *af))) s = DS_ERR_NOMEM;
    if (s == DS_OK) s = ensure_dir(dir, &created);
    for (int k = 0, start = 0; s == DS_OK && k < n_shards; k++) {
        int end = start;
        while (end < w->n && shard_of[end] == k) end++;
        char fname[64];
        if (n_shards == 1) snprintf(fname, sizeof fname, "%s", DS_ST_SINGLE_NAME);
        else snprintf(fname, sizeof fname, "model-%05d-of-%05d.safetensors", k + 1, n_shards);
        char *path = ds_st_join_path(dir, fname);
        if (!path) s = DS_ERR_NOMEM;
        if (s == DS_OK && (s = ds_atomic_open(&af[k], path)) == DS_OK) n_open++;
        if (s == DS_OK) s = open_stream_file(w, v + start, end - start, path, &af[k], &sink);
        free(path);
        start = end;
    }
    if (s == DS_OK) s = fill(ctx, &sink);
    for (int i = 0; s == DS_OK && i < w->n; i++)
        if (sink.at[i] != sink.end[i])
            s = ds_fail(DS_ERR_INVALID, "safetensors writer: tensor '%s' got %" PRIu64 " of its %zu bytes", ds_st_quote(w->t[i].name).s,
                        w->t[i].nbytes - (sink.end[i] - sink.at[i]), w->t[i].nbytes);
    int k = 0;
    for (; s == DS_OK && k < n_shards; k++) s = ds_atomic_commit(&af[k]);
    for (; k < n_open; k++) ds_atomic_abort(&af[k]); // after a failure: drop the rest
    if (s == DS_OK && n_shards > 1) s = write_index(dir, v, shard_of, w->n, n_shards, total);
    if (s == DS_OK) s = remove_stale(dir, n_shards > 1 ? DS_ST_SINGLE_NAME : DS_ST_INDEX_NAME);
    if (s != DS_OK && created) rmdir(dir);
    free(af);
    free(v);
    free(shard_of);
    free(sink.fd), free(sink.at), free(sink.end), free(sink.path);
    return s;
}
