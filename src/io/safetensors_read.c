// Safetensors reader (mmap + full validation); the writer is safetensors_write.c.
// Format rules are in safetensors.h; each check below names the rule it enforces.
#include "io/safetensors.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/status.h"
#include "io/atomic.h"
#include "io/mapfile.h"
#include "io/safetensors_internal.h"

// ---------------------------------------------------------------------------------------------
// Types

size_t ds_dtype_size(ds_dtype t) {
    switch (t) {
    case DS_F32: case DS_U32: case DS_I32: return 4;
    case DS_F16: case DS_BF16: return 2;
    case DS_AFFINE4: case DS_AFFINE8: return 0; // in-memory only (stored as U32 + scales + biases)
    default: return 0; // GGUF block types (kernels/ggml_quants.h): bytes per block, not per element
    }
}

// The dtypes callers can use. Safetensors also defines F64, I64, U8, BOOL, F8_*, ...: rejected.
static const struct {
    const char *name;
    ds_dtype type;
} k_dtypes[] = {{"F32", DS_F32}, {"F16", DS_F16}, {"BF16", DS_BF16}, {"U32", DS_U32}, {"I32", DS_I32}};

static int dtype_from_name(const char *s, ds_dtype *out) {
    for (size_t i = 0; i < sizeof k_dtypes / sizeof k_dtypes[0]; i++)
        if (strcmp(s, k_dtypes[i].name) == 0) {
            *out = k_dtypes[i].type;
            return 1;
        }
    return 0;
}

int ds_st_dtype_supported(ds_dtype t) {
    ds_dtype dummy;
    return dtype_from_name(ds_dtype_name(t), &dummy);
}

// ---------------------------------------------------------------------------------------------
// Small helpers (ds_st_quote, ds_st_join_path and ds_st_shape_bytes serve the writer too)

ds_st_qname ds_st_quote(const char *s) {
    ds_st_qname r;
    size_t n = 0;
    for (; s && s[n] && n < 64; n++) {
        unsigned char c = (unsigned char)s[n];
        r.s[n] = (c < 0x20 || c == 0x7f) ? '?' : (char)c;
    }
    if (s && s[n]) memcpy(r.s + n, "...", 4);
    else r.s[n] = '\0';
    return r;
}

char *ds_st_join_path(const char *dir, const char *name) {
    size_t nd = strlen(dir), nn = strlen(name);
    int slash = nd > 0 && dir[nd - 1] != '/';
    char *p = ds_malloc(nd + slash + nn + 1);
    if (!p) return NULL;
    memcpy(p, dir, nd);
    if (slash) p[nd] = '/';
    memcpy(p + nd + slash, name, nn + 1);
    return p;
}

static int ends_with(const char *s, const char *suffix) {
    size_t ns = strlen(s), nx = strlen(suffix);
    return ns >= nx && strcmp(s + ns - nx, suffix) == 0;
}

static int cmp_str_ptr(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

// A JSON number that is a non-negative integer, exact in a double (<= 2^53).
static int json_uint(const cJSON *v, uint64_t *out) {
    if (!cJSON_IsNumber(v)) return 0;
    double d = v->valuedouble;
    if (!(d >= 0) || d > DS_ST_JSON_MAX_EXACT || d != floor(d)) return 0; // !(d >= 0) catches NaN
    *out = (uint64_t)d;
    return 1;
}

// cJSON keeps every copy of a repeated key (and lookups see only the first): reject repeats.
static ds_status check_unique_keys(const char *path, const cJSON *obj, const char *what) {
    int n = cJSON_GetArraySize(obj);
    if (n < 2) return DS_OK;
    const char **keys = ds_malloc((size_t)n * sizeof *keys);
    if (!keys) return DS_ERR_NOMEM;
    int i = 0;
    for (const cJSON *c = obj->child; c; c = c->next) keys[i++] = c->string;
    qsort(keys, (size_t)n, sizeof *keys, cmp_str_ptr);
    ds_status st = DS_OK;
    for (i = 1; i < n && st == DS_OK; i++)
        if (strcmp(keys[i - 1], keys[i]) == 0)
            st = ds_fail(DS_ERR_FORMAT, "%s: duplicate %s '%s'", path, what, ds_st_quote(keys[i]).s);
    free(keys);
    return st;
}

// The child `key` of `obj`, or NULL; fails if the key appears more than once.
static ds_status json_field(const char *path, const char *tensor, const cJSON *obj, const char *key,
                            const cJSON **out) {
    *out = NULL;
    for (const cJSON *c = obj->child; c; c = c->next) {
        if (!c->string || strcmp(c->string, key) != 0) continue;
        if (*out)
            return ds_fail(DS_ERR_FORMAT, "%s: tensor '%s' has a duplicate \"%s\" field", path, ds_st_quote(tensor).s, key);
        *out = c;
    }
    return DS_OK;
}

// Parse `n` bytes of JSON that must hold exactly one value (trailing whitespace allowed: the
// format pads the header with spaces). The bytes are copied so that cJSON always sees a NUL.
static ds_status parse_json(const char *path, const uint8_t *bytes, size_t n, cJSON **out) {
    *out = NULL;
    char *buf = ds_malloc(n + 1);
    if (!buf) return DS_ERR_NOMEM;
    if (n) memcpy(buf, bytes, n); // (an empty mapped file has no data pointer)
    buf[n] = '\0';
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithOpts(buf, &end, 0);
    if (!root) {
        size_t at = end ? (size_t)(end - buf) : 0;
        free(buf);
        return ds_fail(DS_ERR_FORMAT, "%s: invalid JSON header (error near byte %zu of %zu)", path, at, n);
    }
    size_t at = (size_t)(end - buf);
    while (at < n && (buf[at] == ' ' || buf[at] == '\t' || buf[at] == '\n' || buf[at] == '\r')) at++;
    free(buf);
    if (at != n) {
        cJSON_Delete(root);
        return ds_fail(DS_ERR_FORMAT, "%s: invalid JSON header (trailing bytes at byte %zu of %zu)", path, at, n);
    }
    *out = root;
    return DS_OK;
}

// Shape as "[2, 3]" for messages.
static void shape_str(const int64_t *shape, int n_dims, char *buf, size_t cap) {
    size_t o = (size_t)snprintf(buf, cap, "[");
    for (int i = 0; i < n_dims && o < cap; i++)
        o += (size_t)snprintf(buf + o, cap - o, "%s%" PRId64, i ? ", " : "", shape[i]);
    if (o < cap) snprintf(buf + o, cap - o, "]");
}

// product(shape) * elem_size, or 0 with *ok = 0 on overflow.
size_t ds_st_shape_bytes(const int64_t *shape, int n_dims, size_t elem_size, int *ok) {
    size_t n = elem_size;
    *ok = 1;
    for (int i = 0; i < n_dims; i++)
        if (shape[i] < 0 || !ds_mul_ok(n, (size_t)shape[i], &n)) {
            *ok = 0;
            return 0;
        }
    return n;
}

// ---------------------------------------------------------------------------------------------
// Reader

typedef struct {
    ds_st_tensor t;
    int file; // index into ds_safetensors.files
} st_entry;

typedef struct {
    char *key, *value;
    int seq; // insertion order: on repeated keys the first one wins
} st_meta;

struct ds_safetensors {
    ds_mapfile *files;
    int n_files;
    st_entry *entries; // sorted by name once open succeeds
    int n_entries, cap_entries;
    st_meta *meta;     // sorted by key once open succeeds
    int n_meta, cap_meta;
};

void ds_st_close(ds_safetensors *st) {
    if (!st) return;
    for (int i = 0; i < st->n_files; i++) ds_mapfile_close(&st->files[i]);
    for (int i = 0; i < st->n_entries; i++) free((char *)st->entries[i].t.name);
    for (int i = 0; i < st->n_meta; i++) {
        free(st->meta[i].key);
        free(st->meta[i].value);
    }
    free(st->files);
    free(st->entries);
    free(st->meta);
    free(st);
}

static ds_status add_meta(ds_safetensors *st, const char *key, const char *value) {
    if (st->n_meta == st->cap_meta) {
        int cap = st->cap_meta ? 2 * st->cap_meta : 8;
        st_meta *m = realloc(st->meta, (size_t)cap * sizeof *m);
        if (!m) return ds_fail(DS_ERR_NOMEM, "out of memory");
        st->meta = m;
        st->cap_meta = cap;
    }
    st_meta *m = &st->meta[st->n_meta];
    m->key = strdup(key);
    m->value = strdup(value);
    m->seq = st->n_meta;
    if (!m->key || !m->value) {
        free(m->key);
        free(m->value);
        return ds_fail(DS_ERR_NOMEM, "out of memory");
    }
    st->n_meta++;
    return DS_OK;
}

// "__metadata__": an object of string values (rule: str -> str).
static ds_status parse_metadata(ds_safetensors *st, const char *path, const cJSON *obj) {
    if (!cJSON_IsObject(obj)) return ds_fail(DS_ERR_FORMAT, "%s: __metadata__ is not an object", path);
    ds_status s = check_unique_keys(path, obj, "__metadata__ key");
    if (s != DS_OK) return s;
    for (const cJSON *c = obj->child; c; c = c->next) {
        if (!cJSON_IsString(c))
            return ds_fail(DS_ERR_FORMAT, "%s: __metadata__ value for '%s' is not a string", path, ds_st_quote(c->string).s);
        if ((s = add_meta(st, c->string, c->valuestring)) != DS_OK) return s;
    }
    return DS_OK;
}

// One tensor entry: {"dtype": str, "shape": [uint...], "data_offsets": [begin, end]}, checked
// against the data buffer (data_size bytes). Fills t (name and data left to the caller).
static ds_status parse_tensor(const char *path, const cJSON *e, size_t data_size, ds_st_tensor *t,
                              size_t *begin_out) {
    const char *name = e->string;
    if (!cJSON_IsObject(e)) return ds_fail(DS_ERR_FORMAT, "%s: tensor '%s' entry is not an object", path, ds_st_quote(name).s);
    const cJSON *dtype, *shape, *offs;
    ds_status s;
    if ((s = json_field(path, name, e, "dtype", &dtype)) != DS_OK) return s;
    if ((s = json_field(path, name, e, "shape", &shape)) != DS_OK) return s;
    if ((s = json_field(path, name, e, "data_offsets", &offs)) != DS_OK) return s;

    // dtype: one of the names we support.
    if (!cJSON_IsString(dtype)) return ds_fail(DS_ERR_FORMAT, "%s: tensor '%s' has no \"dtype\" string", path, ds_st_quote(name).s);
    if (!dtype_from_name(dtype->valuestring, &t->dtype))
        return ds_fail(DS_ERR_UNSUPPORTED, "%s: unsupported dtype '%s' for tensor '%s' (supported: F32, F16, BF16, U32, I32)",
                       path, ds_st_quote(dtype->valuestring).s, ds_st_quote(name).s);

    // shape: an array of at most 8 non-negative integers ([] is a scalar).
    if (!cJSON_IsArray(shape))
        return ds_fail(DS_ERR_FORMAT, "%s: tensor '%s' shape is not an array of non-negative integers", path, ds_st_quote(name).s);
    int n_dims = cJSON_GetArraySize(shape);
    if (n_dims > DS_ST_MAX_DIMS)
        return ds_fail(DS_ERR_FORMAT, "%s: tensor '%s' has %d dims (max %d)", path, ds_st_quote(name).s, n_dims, DS_ST_MAX_DIMS);
    t->n_dims = n_dims;
    int i = 0;
    for (const cJSON *d = shape->child; d; d = d->next, i++) {
        uint64_t v;
        if (!json_uint(d, &v))
            return ds_fail(DS_ERR_FORMAT, "%s: tensor '%s' shape is not an array of non-negative integers", path, ds_st_quote(name).s);
        t->shape[i] = (int64_t)v;
    }
    char sh[160];
    shape_str(t->shape, n_dims, sh, sizeof sh);
    int ok;
    t->nbytes = ds_st_shape_bytes(t->shape, n_dims, ds_dtype_size(t->dtype), &ok);
    if (!ok) return ds_fail(DS_ERR_FORMAT, "%s: tensor '%s' shape %s: byte size overflows", path, ds_st_quote(name).s, sh);

    // data_offsets: [begin, end] with begin <= end <= data size and end - begin = byte size.
    uint64_t b, en;
    if (!cJSON_IsArray(offs) || cJSON_GetArraySize(offs) != 2 || !json_uint(offs->child, &b) ||
        !json_uint(offs->child->next, &en))
        return ds_fail(DS_ERR_FORMAT, "%s: tensor '%s' data_offsets is not [begin, end] (non-negative integers)", path, ds_st_quote(name).s);
    if (en < b)
        return ds_fail(DS_ERR_FORMAT, "%s: tensor '%s' data_offsets [%" PRIu64 ", %" PRIu64 "] end before begin", path,
                       ds_st_quote(name).s, b, en);
    if (en > data_size)
        return ds_fail(DS_ERR_FORMAT, "%s: tensor '%s' data_offsets [%" PRIu64 ", %" PRIu64 "] out of range (data is %zu bytes)",
                       path, ds_st_quote(name).s, b, en, data_size);
    if (en - b != t->nbytes)
        return ds_fail(DS_ERR_FORMAT, "%s: tensor '%s' size mismatch: data_offsets [%" PRIu64 ", %" PRIu64
                       "] hold %" PRIu64 " bytes but %s shape %s needs %zu", path, ds_st_quote(name).s, b, en, en - b,
                       ds_dtype_name(t->dtype), sh, t->nbytes);
    *begin_out = (size_t)b;
    return DS_OK;
}

typedef struct {
    size_t begin, end;
    const char *name;
} st_range;

static int cmp_range(const void *a, const void *b) {
    const st_range *x = a, *y = b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    return x->end < y->end ? -1 : x->end > y->end;
}

// Rule: tensors do not overlap. Sort by begin; each must start at or after the previous end.
static ds_status check_overlaps(const char *path, st_range *r, int n) {
    qsort(r, (size_t)n, sizeof *r, cmp_range);
    for (int i = 1; i < n; i++)
        if (r[i].begin < r[i - 1].end)
            return ds_fail(DS_ERR_FORMAT, "%s: tensors '%s' [%zu, %zu] and '%s' [%zu, %zu] overlap", path,
                           ds_st_quote(r[i - 1].name).s, r[i - 1].begin, r[i - 1].end, ds_st_quote(r[i].name).s, r[i].begin, r[i].end);
    return DS_OK;
}

static ds_status reserve_entries(ds_safetensors *st, int more) {
    if (more <= st->cap_entries - st->n_entries) return DS_OK;
    if (more > INT32_MAX / 2 - st->n_entries) return ds_fail(DS_ERR_FORMAT, "too many tensors");
    int cap = st->n_entries + more;
    st_entry *e = realloc(st->entries, (size_t)cap * sizeof *e);
    if (!e) return ds_fail(DS_ERR_NOMEM, "out of memory");
    st->entries = e;
    st->cap_entries = cap;
    return DS_OK;
}

// Append the tensors of every entry in header `root` of file `fi` (data buffer at `data`).
static ds_status add_tensors(ds_safetensors *st, int fi, const cJSON *root, const uint8_t *data, size_t data_size) {
    const char *path = st->files[fi].path;
    ds_status s = check_unique_keys(path, root, "tensor name");
    if (s != DS_OK) return s;
    int n = cJSON_GetArraySize(root);
    if ((s = reserve_entries(st, n)) != DS_OK) return s;
    st_range *ranges = ds_malloc((size_t)(n ? n : 1) * sizeof *ranges);
    if (!ranges) return DS_ERR_NOMEM;
    int nr = 0;
    for (const cJSON *e = root->child; e && s == DS_OK; e = e->next) {
        if (strcmp(e->string, "__metadata__") == 0) {
            s = parse_metadata(st, path, e);
            continue;
        }
        st_entry *en = &st->entries[st->n_entries];
        memset(en, 0, sizeof *en);
        size_t begin = 0;
        if ((s = parse_tensor(path, e, data_size, &en->t, &begin)) != DS_OK) break;
        en->t.data = data + begin;
        en->file = fi;
        if (!(en->t.name = strdup(e->string))) {
            s = ds_fail(DS_ERR_NOMEM, "out of memory");
            break;
        }
        st->n_entries++;
        ranges[nr++] = (st_range){begin, begin + en->t.nbytes, en->t.name};
    }
    if (s == DS_OK) s = check_overlaps(path, ranges, nr);
    free(ranges);
    return s;
}

// Map file `fi` (already named in files[fi].path by the caller) and read its tensors.
static ds_status load_file(ds_safetensors *st, int fi, const char *path) {
    ds_status s = ds_mapfile_open(&st->files[fi], path);
    if (s != DS_OK) return s;
    const ds_mapfile *m = &st->files[fi];
    // Rule: u64 little-endian header length N, then N bytes of JSON, then the data buffer.
    if (m->size < 8)
        return ds_fail(DS_ERR_FORMAT, "%s: file is %zu bytes, too short for the 8-byte header length", path, m->size);
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--) n = n << 8 | m->data[i];
    if (n > m->size - 8)
        return ds_fail(DS_ERR_FORMAT, "%s: header length %" PRIu64 " runs past the end of the file (%zu bytes)", path, n, m->size);
    if (n > DS_ST_MAX_HEADER)
        return ds_fail(DS_ERR_FORMAT, "%s: header length %" PRIu64 " is too large (limit %" PRIu64 " bytes)", path, n,
                       DS_ST_MAX_HEADER);
    cJSON *root;
    if ((s = parse_json(path, m->data + 8, (size_t)n, &root)) != DS_OK) return s;
    if (!cJSON_IsObject(root)) s = ds_fail(DS_ERR_FORMAT, "%s: header is not a JSON object", path);
    else s = add_tensors(st, fi, root, m->data + 8 + n, m->size - 8 - (size_t)n);
    cJSON_Delete(root);
    return s;
}

static int cmp_entry(const void *a, const void *b) {
    return strcmp(((const st_entry *)a)->t.name, ((const st_entry *)b)->t.name);
}

static int cmp_meta(const void *a, const void *b) {
    const st_meta *x = a, *y = b;
    int c = strcmp(x->key, y->key);
    return c ? c : x->seq - y->seq;
}

// Sort tensors (for ds_st_find) and reject a name seen twice; sort metadata, keeping the first
// value of a repeated key.
static ds_status finish_open(ds_safetensors *st) {
    if (st->n_entries > 1) qsort(st->entries, (size_t)st->n_entries, sizeof *st->entries, cmp_entry);
    for (int i = 1; i < st->n_entries; i++) {
        const st_entry *a = &st->entries[i - 1], *b = &st->entries[i];
        if (strcmp(a->t.name, b->t.name) == 0) {
            if (a->file == b->file)
                return ds_fail(DS_ERR_FORMAT, "%s: duplicate tensor name '%s'", st->files[a->file].path, ds_st_quote(a->t.name).s);
            return ds_fail(DS_ERR_FORMAT, "duplicate tensor name '%s' in %s and %s", ds_st_quote(a->t.name).s,
                           st->files[a->file].path, st->files[b->file].path);
        }
    }
    if (st->n_meta > 1) qsort(st->meta, (size_t)st->n_meta, sizeof *st->meta, cmp_meta);
    int w = 0;
    for (int i = 0; i < st->n_meta; i++) {
        if (w > 0 && strcmp(st->meta[w - 1].key, st->meta[i].key) == 0) {
            free(st->meta[i].key);
            free(st->meta[i].value);
            continue;
        }
        st->meta[w++] = st->meta[i];
    }
    st->n_meta = w;
    return DS_OK;
}

// --- Sharded directories: model.safetensors.index.json

typedef struct {
    const char *tensor; // key in weight_map (owned by the cJSON tree)
    int shard;          // index into the unique shard names
    int found;
} map_entry;

static int cmp_map_entry(const void *a, const void *b) {
    return strcmp(((const map_entry *)a)->tensor, ((const map_entry *)b)->tensor);
}

// Rule (ours): shard names are plain file names in the index's directory: no '/', '\\', ".."
// or control bytes.
static int safe_file_name(const char *s) {
    for (const char *c = s; *c; c++)
        if ((unsigned char)*c < 0x20 || *c == 0x7f) return 0;
    return s[0] && !strchr(s, '/') && !strchr(s, '\\') && !strstr(s, "..");
}

// Index "metadata" values as text: strings as-is, anything else as compact JSON.
static ds_status add_index_metadata(ds_safetensors *st, const char *path, const cJSON *meta) {
    if (!meta) return DS_OK;
    if (!cJSON_IsObject(meta)) return ds_fail(DS_ERR_FORMAT, "%s: \"metadata\" is not an object", path);
    ds_status s = check_unique_keys(path, meta, "metadata key");
    for (const cJSON *c = meta->child; c && s == DS_OK; c = c->next) {
        uint64_t u;
        char num[32];
        if (cJSON_IsString(c)) {
            s = add_meta(st, c->string, c->valuestring);
        } else if (json_uint(c, &u)) {
            snprintf(num, sizeof num, "%" PRIu64, u);
            s = add_meta(st, c->string, num);
        } else {
            char *txt = cJSON_PrintUnformatted(c);
            if (!txt) return ds_fail(DS_ERR_NOMEM, "out of memory");
            s = add_meta(st, c->string, txt);
            cJSON_free(txt);
        }
    }
    return s;
}

// Every weight_map entry must be in its shard, and every shard tensor in the map (same shard).
static ds_status check_weight_map(ds_safetensors *st, const char *path, map_entry *map, int n_map, char **shards) {
    for (int i = 0; i < st->n_entries; i++) {
        const st_entry *e = &st->entries[i];
        map_entry key = {e->t.name, 0, 0};
        map_entry *m = bsearch(&key, map, (size_t)n_map, sizeof *map, cmp_map_entry);
        if (!m)
            return ds_fail(DS_ERR_FORMAT, "%s: tensor '%s' in %s is not in the index's weight_map", path,
                           ds_st_quote(e->t.name).s, st->files[e->file].path);
        if (m->shard != e->file)
            return ds_fail(DS_ERR_FORMAT, "%s: tensor '%s' is in %s but the weight_map puts it in '%s'", path,
                           ds_st_quote(e->t.name).s, st->files[e->file].path, ds_st_quote(shards[m->shard]).s);
        m->found = 1;
    }
    for (int i = 0; i < n_map; i++)
        if (!map[i].found)
            return ds_fail(DS_ERR_FORMAT, "%s: weight_map puts tensor '%s' in '%s', which has no such tensor", path,
                           ds_st_quote(map[i].tensor).s, ds_st_quote(shards[map[i].shard]).s);
    return DS_OK;
}

// Read the weight_map: fills map (sorted by tensor) and the sorted unique shard names.
static ds_status read_weight_map(const char *path, const cJSON *wm, map_entry **map_out, int *n_map_out,
                                 char ***shards_out, int *n_shards_out) {
    if (!cJSON_IsObject(wm)) return ds_fail(DS_ERR_FORMAT, "%s: no \"weight_map\" object", path);
    int n = cJSON_GetArraySize(wm);
    if (n == 0) return ds_fail(DS_ERR_FORMAT, "%s: \"weight_map\" is empty", path);
    ds_status s = check_unique_keys(path, wm, "weight_map tensor");
    if (s != DS_OK) return s;
    map_entry *map = ds_calloc((size_t)n, sizeof *map);
    char **shards = ds_calloc((size_t)n, sizeof *shards);
    if (!map || !shards) {
        free(map);
        free(shards);
        return DS_ERR_NOMEM;
    }
    int i = 0;
    for (const cJSON *c = wm->child; c; c = c->next, i++) {
        if (!cJSON_IsString(c)) {
            s = ds_fail(DS_ERR_FORMAT, "%s: weight_map value for '%s' is not a file name string", path, ds_st_quote(c->string).s);
            break;
        }
        if (!safe_file_name(c->valuestring)) {
            s = ds_fail(DS_ERR_FORMAT, "%s: unsafe shard file name '%s' for tensor '%s' (must be a plain file name)", path,
                        ds_st_quote(c->valuestring).s, ds_st_quote(c->string).s);
            break;
        }
        map[i].tensor = c->string;
        shards[i] = c->valuestring;
    }
    int ns = 0;
    if (s == DS_OK) {
        // Unique shard names (each shard file is opened once), then each entry's shard index.
        qsort(shards, (size_t)n, sizeof *shards, cmp_str_ptr);
        for (i = 0; i < n; i++)
            if (ns == 0 || strcmp(shards[ns - 1], shards[i]) != 0) shards[ns++] = shards[i];
        i = 0;
        for (const cJSON *c = wm->child; c; c = c->next, i++) {
            char *const *f = bsearch(&c->valuestring, shards, (size_t)ns, sizeof *shards, cmp_str_ptr);
            map[i].shard = (int)(f - shards);
        }
        qsort(map, (size_t)n, sizeof *map, cmp_map_entry);
    }
    if (s != DS_OK) {
        free(map);
        free(shards);
        return s;
    }
    *map_out = map;
    *n_map_out = n;
    *shards_out = shards;
    *n_shards_out = ns;
    return DS_OK;
}

// Open every shard named by the index `path` (in directory `dir`) and check the weight_map.
static ds_status open_index(ds_safetensors *st, const char *dir, const char *path) {
    ds_mapfile f;
    ds_status s = ds_mapfile_open(&f, path);
    if (s != DS_OK) return s;
    cJSON *root = NULL;
    if (f.size > DS_ST_MAX_HEADER) s = ds_fail(DS_ERR_FORMAT, "%s: index is too large (%zu bytes)", path, f.size);
    else s = parse_json(path, f.data, f.size, &root);
    ds_mapfile_close(&f);
    if (s != DS_OK) return s;

    map_entry *map = NULL;
    char **shards = NULL;
    int n_map = 0, n_shards = 0;
    if (!cJSON_IsObject(root)) s = ds_fail(DS_ERR_FORMAT, "%s: index is not a JSON object", path);
    if (s == DS_OK) s = check_unique_keys(path, root, "index key");
    if (s == DS_OK) s = add_index_metadata(st, path, cJSON_GetObjectItemCaseSensitive(root, "metadata"));
    if (s == DS_OK)
        s = read_weight_map(path, cJSON_GetObjectItemCaseSensitive(root, "weight_map"), &map, &n_map, &shards, &n_shards);
    if (s == DS_OK && !(st->files = ds_calloc((size_t)n_shards, sizeof *st->files))) s = DS_ERR_NOMEM;
    for (int i = 0; s == DS_OK && i < n_shards; i++) {
        char *shard_path = ds_st_join_path(dir, shards[i]);
        if (!shard_path) {
            s = DS_ERR_NOMEM;
            break;
        }
        st->n_files = i + 1;
        s = load_file(st, i, shard_path);
        if (s != DS_OK) ds_fail_prefix(s, "%s", path);
        free(shard_path);
    }
    if (s == DS_OK) s = finish_open(st);
    if (s == DS_OK) s = check_weight_map(st, path, map, n_map, shards);
    free(map);
    free(shards);
    cJSON_Delete(root);
    return s;
}

static ds_status open_single(ds_safetensors *st, const char *path) {
    if (!(st->files = ds_calloc(1, sizeof *st->files))) return DS_ERR_NOMEM;
    st->n_files = 1;
    ds_status s = load_file(st, 0, path);
    return s == DS_OK ? finish_open(st) : s;
}

// A directory: model.safetensors if present, else model.safetensors.index.json.
static ds_status open_dir(ds_safetensors *st, const char *dir) {
    char *single = ds_st_join_path(dir, DS_ST_SINGLE_NAME), *index = ds_st_join_path(dir, DS_ST_INDEX_NAME);
    ds_status s = DS_OK;
    struct stat sb;
    if (!single || !index) s = DS_ERR_NOMEM;
    else if (stat(single, &sb) == 0) s = open_single(st, single);
    else if (stat(index, &sb) == 0) s = open_index(st, dir, index);
    else s = ds_fail(DS_ERR_IO, "%s: no " DS_ST_SINGLE_NAME " or " DS_ST_INDEX_NAME " in this directory", dir);
    free(single);
    free(index);
    return s;
}

ds_status ds_st_open(const char *path, ds_safetensors **out) {
    *out = NULL;
    struct stat sb;
    if (stat(path, &sb) != 0) return ds_fail(DS_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    ds_safetensors *st = ds_calloc(1, sizeof *st);
    if (!st) return DS_ERR_NOMEM;
    ds_status s;
    if (S_ISDIR(sb.st_mode)) {
        s = open_dir(st, path);
    } else if (ends_with(path, ".index.json")) {
        // An index opened directly: its shards live next to it.
        char *dir = strdup(path);
        if (!dir) {
            s = ds_fail(DS_ERR_NOMEM, "out of memory");
        } else {
            char *slash = strrchr(dir, '/');
            if (slash) slash[slash == dir] = '\0'; // "/x.json" -> "/", "a/x.json" -> "a"
            s = open_index(st, slash ? dir : ".", path);
            free(dir);
        }
    } else {
        s = open_single(st, path);
    }
    if (s != DS_OK) {
        ds_st_close(st);
        return s;
    }
    *out = st;
    return DS_OK;
}

int ds_st_count(const ds_safetensors *st) { return st ? st->n_entries : 0; }

const ds_st_tensor *ds_st_at(const ds_safetensors *st, int i) {
    return st && i >= 0 && i < st->n_entries ? &st->entries[i].t : NULL;
}

const ds_st_tensor *ds_st_find(const ds_safetensors *st, const char *name) {
    if (!st || !name || st->n_entries == 0) return NULL;
    st_entry key = {.t.name = name};
    const st_entry *e = bsearch(&key, st->entries, (size_t)st->n_entries, sizeof key, cmp_entry);
    return e ? &e->t : NULL;
}

const char *ds_st_metadata(const ds_safetensors *st, const char *key) {
    if (!st || !key) return NULL;
    int lo = 0, hi = st->n_meta - 1;
    while (lo <= hi) {
        int mid = lo + (hi - lo) / 2, c = strcmp(key, st->meta[mid].key);
        if (c == 0) return st->meta[mid].value;
        if (c < 0) hi = mid - 1;
        else lo = mid + 1;
    }
    return NULL;
}

int ds_st_metadata_count(const ds_safetensors *st) { return st ? st->n_meta : 0; }

const char *ds_st_metadata_at(const ds_safetensors *st, int i, const char **value) {
    if (!st || i < 0 || i >= st->n_meta) return NULL;
    if (value) *value = st->meta[i].value;
    return st->meta[i].key;
}
