// The prompt cache (prompt_cache.h): a handful of entries, each a token prefix with its KV and tap
// rows in one allocation, scanned linearly (there are few; a lookup compares token ids only).
#include "speculate/prompt_cache.h"

#include <stdlib.h>
#include <string.h>

#include "base/status.h"

typedef struct {
    int32_t *toks; // (n)
    int n;
    void *kv;      // (n · kv_bytes) as ds_kv_save lays out n rows
    float *taps;   // (n, tap_floats), NULL without a drafter
    size_t bytes;
    long used;     // the clock at its last use
} entry;

struct ds_prompt_cache {
    size_t cap_bytes, bytes, kv_bytes, tap_floats;
    entry *e;
    int n, cap;
    long clock;
    long lookups, hits, rows_reused;
};

ds_status ds_prompt_cache_init(size_t cap_bytes, size_t kv_bytes, size_t tap_floats, ds_prompt_cache **out) {
    ds_prompt_cache *c = ds_calloc(1, sizeof *c);
    if (!c) return ds_fail(DS_ERR_NOMEM, "out of memory for the prompt cache");
    c->cap_bytes = cap_bytes;
    c->kv_bytes = kv_bytes;
    c->tap_floats = tap_floats;
    *out = c;
    return DS_OK;
}

static void entry_free(entry *x) {
    free(x->toks);
    free(x->kv);
    free(x->taps);
}

void ds_prompt_cache_free(ds_prompt_cache *c) {
    if (!c) return;
    for (int i = 0; i < c->n; i++) entry_free(&c->e[i]);
    free(c->e);
    free(c);
}

static void drop(ds_prompt_cache *c, int i) {
    c->bytes -= c->e[i].bytes;
    entry_free(&c->e[i]);
    c->e[i] = c->e[--c->n];
}

static int common_prefix(const int32_t *a, int na, const int32_t *b, int nb) {
    const int n = na < nb ? na : nb;
    int i = 0;
    while (i < n && a[i] == b[i]) i++;
    return i;
}

int ds_prompt_cache_lookup(ds_prompt_cache *c, const int32_t *toks, int n, int align, const void **kv,
                           const float **taps, int *stride) {
    c->lookups++;
    int best = -1, rows = 0;
    for (int i = 0; i < c->n; i++) {
        const int r = common_prefix(c->e[i].toks, c->e[i].n, toks, n) / align * align;
        if (r > rows) rows = r, best = i;
    }
    if (best < 0) return 0;
    entry *x = &c->e[best];
    x->used = ++c->clock;
    c->hits++;
    c->rows_reused += rows;
    *kv = x->kv;
    *taps = x->taps;
    *stride = x->n;
    return rows;
}

ds_status ds_prompt_cache_insert(ds_prompt_cache *c, const int32_t *toks, int n, const ds_kv *kv, const float *taps) {
    if (n <= 0) return DS_OK;
    for (int i = 0; i < c->n;) {
        entry *x = &c->e[i];
        const int p = common_prefix(x->toks, x->n, toks, n);
        if (p == n) { // it already covers these rows
            x->used = ++c->clock;
            return DS_OK;
        }
        if (p == x->n) drop(c, i); // a prefix of the new one: the new one covers it
        else i++;
    }
    const size_t bytes = (size_t)n * (sizeof(int32_t) + c->kv_bytes + sizeof(float) * c->tap_floats);
    if (bytes > c->cap_bytes) return DS_OK;
    while (c->bytes + bytes > c->cap_bytes) { // evict the least recently used
        int lru = 0;
        for (int i = 1; i < c->n; i++)
            if (c->e[i].used < c->e[lru].used) lru = i;
        drop(c, lru);
    }
    if (c->n == c->cap) {
        const int cap = c->cap ? 2 * c->cap : 8;
        entry *ne = realloc(c->e, sizeof *ne * (size_t)cap);
        if (!ne) return ds_fail(DS_ERR_NOMEM, "out of memory for the prompt cache");
        c->e = ne;
        c->cap = cap;
    }
    entry x = {.n = n, .bytes = bytes, .used = ++c->clock};
    x.toks = malloc(sizeof(int32_t) * (size_t)n);
    x.kv = malloc((size_t)n * c->kv_bytes);
    x.taps = c->tap_floats ? malloc(sizeof(float) * (size_t)n * c->tap_floats) : NULL;
    if (!x.toks || !x.kv || (c->tap_floats && (!x.taps || !taps))) {
        entry_free(&x);
        return x.toks && x.kv && !taps ? ds_fail(DS_ERR_INVALID, "internal: a prompt cache entry without its taps")
                                       : ds_fail(DS_ERR_NOMEM, "out of memory for the prompt cache");
    }
    memcpy(x.toks, toks, sizeof(int32_t) * (size_t)n);
    ds_status st = ds_kv_save(kv, n, x.kv);
    if (st) {
        entry_free(&x);
        return st;
    }
    if (x.taps) memcpy(x.taps, taps, sizeof(float) * (size_t)n * c->tap_floats);
    c->e[c->n++] = x;
    c->bytes += bytes;
    return DS_OK;
}

void ds_prompt_cache_get_stats(const ds_prompt_cache *c, ds_prompt_cache_stats *out) {
    *out = (ds_prompt_cache_stats){.bytes = c->bytes, .cap_bytes = c->cap_bytes, .entries = c->n,
                                   .lookups = c->lookups, .hits = c->hits, .rows_reused = c->rows_reused};
}
