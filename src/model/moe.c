// Routed experts (Qwen2-MoE / Qwen3-MoE Qwen*SparseMoeBlock, Gemma 4 Gemma4TextRouter +
// Gemma4TextExperts): per row, p = softmax(router · r) over the experts, the top_k largest (ties:
// the lower expert index first), w = p_top (/ Σ p_top when renormalized) (· expert_scale), and
// y = Σ_j w_j · down_e(act(gate_e · x) ⊙ up_e · x).
//
// Batching: the (row, rank) pairs are grouped by expert (rows ascending inside a group), each
// routed expert runs ONE product per matrix over its gathered rows, and every row sums its own
// outputs in its rank order. So a verification batch of k rows reads each distinct expert once,
// and a row's numbers are the same whichever other rows share its batch.
#include "model/moe.h"

#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "kernels/ops.h"

struct ds_moe_ws {
    int cap_rows;      // rows the buffers hold
    int cap_e, cap_k, cap_f, dim;
    float *rin;        // (cap_rows, dim) the router's input (Gemma 4)
    float *logits;     // (cap_rows, cap_e) router probabilities
    int *top;          // (cap_rows, cap_k) chosen experts in rank order
    float *w;          // (cap_rows, cap_k) their weights
    int *slot;         // (cap_rows, cap_k) where (row, rank) sits in the gathered order
    int *start;        // (cap_e + 1) first gathered slot of each expert
    float *gx;         // (cap_rows * cap_k, dim) gathered inputs
    float *gh;         // (cap_rows * cap_k, cap_f) gate activations
    float *gh2;        // (cap_rows * cap_k, cap_f) up activations
    float *gy;         // (cap_rows * cap_k, dim) expert outputs
    ds_moe_stats stats;
    // Routing history: per MoE layer the last DS_MOE_WINDOW rows' experts, rows fed so far, and the
    // decayed mean distinct experts of each window length (summed over layers, with its weight).
    int n_moe, cap_moe_k;
    int *ring;          // (n_moe, DS_MOE_WINDOW, cap_k)
    long *fed;          // (n_moe)
    int *mark;          // (cap_e) scratch of ds_moe_window_distinct
    int stamp;
    double win[DS_MOE_WINDOW + 1], win_w[DS_MOE_WINDOW + 1];
};

static void ws_bufs_free(ds_moe_ws *w) {
    free(w->rin), free(w->logits), free(w->top), free(w->w), free(w->slot), free(w->start);
    free(w->gx), free(w->gh), free(w->gh2), free(w->gy);
    w->rin = w->logits = w->w = w->gx = w->gh = w->gh2 = w->gy = NULL;
    w->top = w->slot = w->start = NULL;
    w->cap_rows = 0;
}

void ds_moe_ws_free(ds_moe_ws *ws) {
    if (!ws) return;
    ws_bufs_free(ws);
    free(ws->ring), free(ws->fed), free(ws->mark);
    free(ws);
}

ds_status ds_moe_ws_reserve(ds_moe_ws **pws, const ds_model *m, int rows) {
    if (!*pws && !(*pws = ds_calloc(1, sizeof **pws))) return DS_ERR_NOMEM;
    ds_moe_ws *w = *pws;
    if (!w->ring && m->n_moe) {
        w->n_moe = m->n_moe;
        w->cap_moe_k = m->max_top_k;
        w->ring = calloc((size_t)m->n_moe * DS_MOE_WINDOW * m->max_top_k, sizeof(int));
        w->fed = calloc((size_t)m->n_moe, sizeof(long));
        w->mark = calloc((size_t)m->max_experts, sizeof(int));
        w->cap_e = m->max_experts;
        if (!w->ring || !w->fed || !w->mark) return ds_fail(DS_ERR_NOMEM, "out of memory for routing statistics");
    }
    if (rows <= w->cap_rows) return DS_OK;
    ws_bufs_free(w);
    const size_t r = (size_t)rows, E = (size_t)m->max_experts, K = (size_t)m->max_top_k;
    const size_t F = (size_t)m->max_expert_dim, D = (size_t)m->info.dim;
    w->rin = malloc(r * D * 4);
    w->logits = malloc(r * E * 4);
    w->top = malloc(r * K * sizeof(int));
    w->w = malloc(r * K * 4);
    w->slot = malloc(r * K * sizeof(int));
    w->start = malloc((E + 1) * sizeof(int));
    w->gx = malloc(r * K * D * 4);
    w->gh = malloc(r * K * F * 4);
    w->gh2 = malloc(r * K * F * 4);
    w->gy = malloc(r * K * D * 4);
    if (!w->rin || !w->logits || !w->top || !w->w || !w->slot || !w->start || !w->gx || !w->gh || !w->gh2 || !w->gy) {
        ws_bufs_free(w);
        return ds_fail(DS_ERR_NOMEM, "out of memory for the experts of a forward batch of %d rows", rows);
    }
    w->cap_rows = rows;
    w->cap_e = (int)E, w->cap_k = (int)K, w->cap_f = (int)F, w->dim = (int)D;
    return DS_OK;
}

void ds_moe_ws_stats(const ds_moe_ws *ws, ds_moe_stats *out) {
    if (ws) *out = ws->stats;
    else memset(out, 0, sizeof *out);
}

void ds_moe_ws_reset_stats(ds_moe_ws *ws) {
    if (ws) memset(&ws->stats, 0, sizeof ws->stats);
}

int ds_moe_window_distinct(const int *ring, long n, int k, int w, int *mark, int stamp) {
    int d = 0;
    for (long i = n - w; i < n; i++)
        for (int j = 0; j < k; j++) {
            const int e = ring[(size_t)(i % DS_MOE_WINDOW) * k + j];
            if (mark[e] != stamp) mark[e] = stamp, d++;
        }
    return d;
}

int ds_moe_ws_windows(const ds_moe_ws *ws, float *out, int n) {
    if (!ws || !ws->n_moe) return 0;
    if (n > DS_MOE_WINDOW) n = DS_MOE_WINDOW;
    for (int w = 1; w <= n; w++) out[w - 1] = ws->win_w[w] > 0 ? (float)(ws->win[w] / ws->win_w[w]) : 0.0f;
    return n;
}

// Push this pass's rows into layer `layer`'s history; update the windows that end at each new row.
static void record_routing(ds_moe_ws *ws, int layer, const int *top, int R, int k) {
    int *ring = ws->ring + (size_t)layer * DS_MOE_WINDOW * ws->cap_moe_k;
    for (int r = 0; r < R; r++) {
        const long i = ws->fed[layer]++;
        memcpy(ring + (size_t)(i % DS_MOE_WINDOW) * k, top + (size_t)r * k, (size_t)k * sizeof(int));
        if (r < R - DS_MOE_WINDOW) continue; // only windows ending in the last rows (bounded work)
        const long fed = i + 1;
        for (int w = 1; w <= DS_MOE_WINDOW && w <= fed; w++) {
            if (ws->stamp == INT_MAX) { // (stamps wrap: start over)
                memset(ws->mark, 0, (size_t)ws->cap_e * sizeof(int));
                ws->stamp = 0;
            }
            const int d = ds_moe_window_distinct(ring, fed, k, w, ws->mark, ++ws->stamp);
            ws->win[w] = 0.999 * ws->win[w] + d;
            ws->win_w[w] = 0.999 * ws->win_w[w] + 1;
        }
    }
}

// The top k of p (n) into idx/val in descending order; equal values: the lower index first.
static void top_k(const float *p, int n, int k, int *idx, float *val) {
    for (int j = 0; j < k; j++) idx[j] = -1;
    for (int e = 0; e < n; e++) {
        int j = k;
        while (j > 0 && (idx[j - 1] < 0 || p[e] > val[j - 1])) j--; // strict: an equal value stays behind
        if (j == k) continue;
        for (int t = k - 1; t > j; t--) idx[t] = idx[t - 1], val[t] = val[t - 1];
        idx[j] = e, val[j] = p[e];
    }
}

void ds_moe_forward(const ds_model *m, const ds_moe *moe, ds_moe_ws *ws, const float *route, const float *x, float *out,
                    int R, float *scratch, int gemm_min_rows) {
    const int D = m->info.dim, E = moe->n_experts, K = moe->top_k, F = moe->ffn_dim;
    const float eps = m->info.norm_eps;
    // Routing.
    const float *rin = route;
    if (moe->router_scale) { // Gemma 4: RMSNorm without weight, ⊙ scale · dim^-0.5
        const float s = 1.0f / sqrtf((float)D);
        for (int r = 0; r < R; r++) {
            float *o = ws->rin + (size_t)r * D;
            ds_rmsnorm(o, route + (size_t)r * D, NULL, D, eps);
            for (int i = 0; i < D; i++) o[i] *= moe->router_scale[i] * s;
        }
        rin = ws->rin;
    }
    ds_matmul_ex(ws->logits, rin, &moe->router, R, scratch, gemm_min_rows);
    for (int r = 0; r < R; r++) {
        float *p = ws->logits + (size_t)r * E, *w = ws->w + (size_t)r * K;
        int *top = ws->top + (size_t)r * K;
        ds_softmax(p, E);
        top_k(p, E, K, top, w);
        if (moe->norm_topk) {
            float sum = 0;
            for (int j = 0; j < K; j++) sum += w[j];
            for (int j = 0; j < K; j++) w[j] /= sum;
        }
        if (moe->expert_scale)
            for (int j = 0; j < K; j++) w[j] *= moe->expert_scale[top[j]];
    }
    // Group (row, rank) pairs by expert: counts, starts, then gather rows in ascending order.
    int *start = ws->start;
    memset(start, 0, (size_t)(E + 1) * sizeof(int));
    for (int i = 0; i < R * K; i++) start[ws->top[i] + 1]++;
    int distinct = 0;
    for (int e = 0; e < E; e++) {
        distinct += start[e + 1] > 0;
        start[e + 1] += start[e];
    }
    for (int r = 0; r < R; r++)
        for (int j = 0; j < K; j++) {
            const int e = ws->top[(size_t)r * K + j], s = start[e]++;
            ws->slot[(size_t)r * K + j] = s;
            memcpy(ws->gx + (size_t)s * D, x + (size_t)r * D, (size_t)D * 4);
        }
    for (int e = E; e > 0; e--) start[e] = start[e - 1]; // back to the starts
    start[0] = 0;
    // One pass per routed expert over all of its rows.
    for (int e = 0; e < E; e++) {
        const int s = start[e], n = start[e + 1] - s;
        if (!n) continue;
        float *gh = ws->gh + (size_t)s * F, *gh2 = ws->gh2 + (size_t)s * F;
        ds_matmul_ex(gh, ws->gx + (size_t)s * D, &moe->gate[e], n, scratch, gemm_min_rows);
        ds_matmul_ex(gh2, ws->gx + (size_t)s * D, &moe->up[e], n, scratch, gemm_min_rows);
        if (m->act == DS_ACT_GELU_TANH) ds_geglu(gh, gh2, n * F);
        else ds_swiglu(gh, gh2, n * F);
        ds_matmul_ex(ws->gy + (size_t)s * D, gh, &moe->down[e], n, scratch, gemm_min_rows);
    }
    // Each row: its own outputs in its rank order.
    for (int r = 0; r < R; r++) {
        float *o = out + (size_t)r * D;
        for (int j = 0; j < K; j++) {
            const float w = ws->w[(size_t)r * K + j], *y = ws->gy + (size_t)ws->slot[(size_t)r * K + j] * D;
            if (j == 0)
                for (int i = 0; i < D; i++) o[i] = w * y[i];
            else
                for (int i = 0; i < D; i++) o[i] += w * y[i];
        }
    }
    if (ws->ring && moe >= m->moe && moe < m->moe + m->n_moe && K <= ws->cap_moe_k)
        record_routing(ws, (int)(moe - m->moe), ws->top, R, K);
    ws->stats.passes++;
    ws->stats.distinct += distinct;
    ws->stats.rows += R;
}
