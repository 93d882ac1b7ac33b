// The transposed K/V cache of one sequence (kvcache.h).
#include "model/kvcache.h"

#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "kernels/ops.h"

ds_status ds_kvcache_init(ds_kvcache *c, int n_layers, const int *lines, int max_cap) {
    memset(c, 0, sizeof *c);
    c->n_layers = n_layers;
    c->max_cap = max_cap;
    c->lines = malloc(sizeof(int) * (size_t)n_layers);
    c->k = ds_calloc((size_t)n_layers, sizeof(float *));
    c->v = ds_calloc((size_t)n_layers, sizeof(float *));
    if (!c->lines || !c->k || !c->v) {
        ds_kvcache_free(c);
        return DS_ERR_NOMEM;
    }
    memcpy(c->lines, lines, sizeof(int) * (size_t)n_layers);
    return DS_OK;
}

void ds_kvcache_free(ds_kvcache *c) {
    for (int l = 0; c->k && l < c->n_layers; l++) free(c->k[l]);
    for (int l = 0; c->v && l < c->n_layers; l++) free(c->v[l]);
    free(c->k);
    free(c->v);
    free(c->lines);
    memset(c, 0, sizeof *c);
}

ds_status ds_kvcache_reserve(ds_kvcache *c, int need) {
    if (need <= c->cap) return DS_OK;
    int cap = c->cap ? c->cap : 256;
    while (cap < need) cap *= 2;
    if (cap > c->max_cap) cap = c->max_cap;
    // Re-lay each (head, dim) line from the old stride to the new one.
    for (int l = 0; l < c->n_layers; l++) {
        if (!c->lines[l]) continue;
        float *k = ds_transposed_regrow(c->k[l], (size_t)c->lines[l], c->cap, c->len, cap);
        if (!k) return DS_ERR_NOMEM;
        c->k[l] = k;
        float *v = ds_transposed_regrow(c->v[l], (size_t)c->lines[l], c->cap, c->len, cap);
        if (!v) return DS_ERR_NOMEM;
        c->v[l] = v;
    }
    c->cap = cap;
    return DS_OK;
}

void ds_kvcache_put(ds_kvcache *c, int l, int col, const float *k, const float *v) {
    float *K = c->k[l] + col, *V = c->v[l] + col;
    for (int i = 0; i < c->lines[l]; i++) {
        K[(size_t)i * c->cap] = k[i];
        V[(size_t)i * c->cap] = v[i];
    }
}

void ds_kvcache_move(ds_kvcache *c, int dst, const int *src, int n) {
    for (int l = 0; l < c->n_layers; l++)
        for (int kv = 0; kv < 2; kv++) {
            float *base = kv ? c->v[l] : c->k[l];
            for (int i = 0; i < c->lines[l]; i++) {
                float *line = base + (size_t)i * c->cap;
                for (int j = 0; j < n; j++) line[dst + j] = line[src[j]];
            }
        }
}

size_t ds_kvcache_row_floats(const ds_kvcache *c) {
    size_t n = 0;
    for (int l = 0; l < c->n_layers; l++) n += 2 * (size_t)c->lines[l];
    return n;
}

void ds_kvcache_save(const ds_kvcache *c, int n, float *dst) {
    for (int l = 0; l < c->n_layers; l++)
        for (int kv = 0; kv < 2; kv++) {
            const float *src = kv ? c->v[l] : c->k[l];
            for (int i = 0; i < c->lines[l]; i++, dst += n) memcpy(dst, src + (size_t)i * c->cap, sizeof(float) * (size_t)n);
        }
}

ds_status ds_kvcache_load(ds_kvcache *c, const float *src, int stride, int n) {
    c->len = 0;
    if (ds_kvcache_reserve(c, n)) return DS_ERR_NOMEM;
    for (int l = 0; l < c->n_layers; l++)
        for (int kv = 0; kv < 2; kv++) {
            float *dst = kv ? c->v[l] : c->k[l];
            for (int i = 0; i < c->lines[l]; i++, src += stride) memcpy(dst + (size_t)i * c->cap, src, sizeof(float) * (size_t)n);
        }
    c->len = n;
    return DS_OK;
}
