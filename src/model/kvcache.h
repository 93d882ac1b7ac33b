// One sequence's K/V cache, shared by the target (ds_kv) and the drafter (ds_draft_state): per layer
// K and V stored transposed, (n_kv_heads, head_dim, cap) with position j at column j, so attention
// runs along positions with no horizontal reductions (scores = Σ_d q[d]·K[d][:], out[d] = p·V[d][:],
// kernels/attend.h) whatever the head size. The elements are f32, or IEEE half (f16: half the bytes
// that attention reads at depth; each K and V value rounded to nearest even once, when it is put).
#ifndef DS_MODEL_KVCACHE_H
#define DS_MODEL_KVCACHE_H

#include <stddef.h>

#include "dspark/model.h"

typedef struct {
    int n_layers;
    int len;        // columns held (the rows of the sequence fed so far)
    int cap;        // columns allocated: doubling from 256, at most max_cap
    int max_cap;
    int f16;        // 1: elements are IEEE halves (uint16_t), 0: floats
    int *lines;     // (n_layers) n_kv_heads * head_dim of each layer; 0: no cache of its own
    void **k;       // (n_layers) each (lines[l], cap) elements: K after RoPE; NULL where lines[l] is 0
    void **v;       // (n_layers) each (lines[l], cap)
} ds_kvcache;

// An empty cache of n_layers layers with lines[l] lines each (copied), growing up to max_cap columns,
// of halves when f16 is set (else floats).
ds_status ds_kvcache_init(ds_kvcache *c, int n_layers, const int *lines, int max_cap, int f16);
void ds_kvcache_free(ds_kvcache *c);

// Room for `need` columns (need <= max_cap, which the caller checks with its own message): the
// first len columns of every line are kept, the capacity doubles (amortized; nothing is allocated
// once the cache has grown). DS_ERR_NOMEM (with no message) when out of memory.
ds_status ds_kvcache_reserve(ds_kvcache *c, int need);

// Write one row's K and V (lines[l] values each, in (head, dim) order) at column `col` of layer l.
void ds_kvcache_put(ds_kvcache *c, int l, int col, const float *k, const float *v);

// Move columns src[i] to dst + i (i < n; src increasing and src[i] >= dst + i) in every line.
void ds_kvcache_move(ds_kvcache *c, int dst, const int *src, int n);

// Bytes one row (position) of the cache holds over all layers: K and V.
size_t ds_kvcache_row_bytes(const ds_kvcache *c);
// Copy columns [0, n) of every line out: dst is (layer, K then V, line, n) elements laid out densely,
// n * ds_kvcache_row_bytes bytes (n <= len).
void ds_kvcache_save(const ds_kvcache *c, int n, void *dst);
// The reverse into an empty cache: afterwards it holds n rows, exactly the saved ones. src is a
// saved copy of `stride` >= n columns (its first n are taken). DS_ERR_NOMEM without a message.
ds_status ds_kvcache_load(ds_kvcache *c, const void *src, int stride, int n);

// Bytes of one element.
static inline size_t ds_kvcache_elt(const ds_kvcache *c) { return c->f16 ? 2 : 4; }

// K and V of kv head h of layer l (head_dim lines of cap elements, position j at column j).
static inline const void *ds_kvcache_k(const ds_kvcache *c, int l, int h, int head_dim) {
    return (const char *)c->k[l] + (size_t)h * head_dim * c->cap * ds_kvcache_elt(c);
}
static inline const void *ds_kvcache_v(const ds_kvcache *c, int l, int h, int head_dim) {
    return (const char *)c->v[l] + (size_t)h * head_dim * c->cap * ds_kvcache_elt(c);
}

#endif
