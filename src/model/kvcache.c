// The transposed K/V cache of one sequence (kvcache.h).
#include "model/kvcache.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "kernels/ops.h"

ds_status ds_kvcache_init(ds_kvcache *c, int n_layers, const int *lines, int max_cap, int f16) {
    memset(c, 0, sizeof *c);
    c->n_layers = n_layers;
    c->max_cap = max_cap;
    c->f16 = !!f16;
    c->lines = malloc(sizeof(int) * (size_t)n_layers);
    c->k = ds_calloc((size_t)n_layers, sizeof(void *));
    c->v = ds_calloc((size_t)n_layers, sizeof(void *));
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
    const size_t e = ds_kvcache_elt(c);
    for (int l = 0; l < c->n_layers; l++) {
        if (!c->lines[l]) continue;
        void *k = ds_transposed_regrow(c->k[l], (size_t)c->lines[l], c->cap, c->len, cap, e);
        if (!k) return DS_ERR_NOMEM;
        c->k[l] = k;
        void *v = ds_transposed_regrow(c->v[l], (size_t)c->lines[l], c->cap, c->len, cap, e);
        if (!v) return DS_ERR_NOMEM;
        c->v[l] = v;
    }
    c->cap = cap;
    return DS_OK;
}

void ds_kvcache_put(ds_kvcache *c, int l, int col, const float *k, const float *v) {
    const size_t cap = (size_t)c->cap;
    if (c->f16) {
        uint16_t *K = (uint16_t *)c->k[l] + col, *V = (uint16_t *)c->v[l] + col, hk[256], hv[256];
        for (int i0 = 0; i0 < c->lines[l]; i0 += 256) { // (rounded 256 at a time, then scattered)
            const int n = c->lines[l] - i0 < 256 ? c->lines[l] - i0 : 256;
            ds_f32_to_f16_n(hk, k + i0, n);
            ds_f32_to_f16_n(hv, v + i0, n);
            for (int i = 0; i < n; i++) {
                K[(size_t)(i0 + i) * cap] = hk[i];
                V[(size_t)(i0 + i) * cap] = hv[i];
            }
        }
        return;
    }
    float *K = (float *)c->k[l] + col, *V = (float *)c->v[l] + col;
    for (int i = 0; i < c->lines[l]; i++) {
        K[(size_t)i * cap] = k[i];
        V[(size_t)i * cap] = v[i];
    }
}

void ds_kvcache_move(ds_kvcache *c, int dst, const int *src, int n) {
    const size_t e = ds_kvcache_elt(c);
    for (int l = 0; l < c->n_layers; l++)
        for (int kv = 0; kv < 2; kv++) {
            char *base = kv ? c->v[l] : c->k[l];
            for (int i = 0; i < c->lines[l]; i++) {
                char *line = base + (size_t)i * c->cap * e;
                for (int j = 0; j < n; j++) memcpy(line + (size_t)(dst + j) * e, line + (size_t)src[j] * e, e);
            }
        }
}

size_t ds_kvcache_row_bytes(const ds_kvcache *c) {
    size_t n = 0;
    for (int l = 0; l < c->n_layers; l++) n += 2 * (size_t)c->lines[l];
    return n * ds_kvcache_elt(c);
}

void ds_kvcache_save(const ds_kvcache *c, int n, void *dst) {
    const size_t e = ds_kvcache_elt(c), row = (size_t)n * e;
    char *d = dst;
    for (int l = 0; l < c->n_layers; l++)
        for (int kv = 0; kv < 2; kv++) {
            const char *src = kv ? c->v[l] : c->k[l];
            for (int i = 0; i < c->lines[l]; i++, d += row) memcpy(d, src + (size_t)i * c->cap * e, row);
        }
}

ds_status ds_kvcache_load(ds_kvcache *c, const void *src, int stride, int n) {
    c->len = 0;
    if (ds_kvcache_reserve(c, n)) return DS_ERR_NOMEM;
    const size_t e = ds_kvcache_elt(c);
    const char *s = src;
    for (int l = 0; l < c->n_layers; l++)
        for (int kv = 0; kv < 2; kv++) {
            char *dst = kv ? c->v[l] : c->k[l];
            for (int i = 0; i < c->lines[l]; i++, s += (size_t)stride * e)
                memcpy(dst + (size_t)i * c->cap * e, s, (size_t)n * e);
        }
    c->len = n;
    return DS_OK;
}
