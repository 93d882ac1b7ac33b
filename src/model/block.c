// One decoder block (block.h): pre-norm attention and MLP with residual adds, over rows that each
// have their own position, cache and attended span.
//   h = x + P(Wo · attn(rope(Wq·n), rope(Wk·n), Wv·n)),  n = RMSNorm(x)
//   x = s · (h + P'(Wdown · (act(Wgate·m) ⊙ Wup·m))),   m = RMSNorm(h)
// P, P' are Gemma's post-norms (identity when absent), act SiLU or tanh-GELU, s the layer scalar.
// Mixture-of-experts layers replace or join the MLP: Qwen3-MoE x = h + E(m); Qwen2-MoE
// x = h + E(m) + sigmoid(Wsg·m)·MLP(m) (the shared expert); Gemma 4 26B-A4B
// x = h + P'(P1(MLP(m)) + P2(E(N2(h)))) with the router reading h. Gemma 4 E-series add
// x += N(Wple_proj · (gelu_tanh(Wple_gate · x) ⊙ ple_l)) after the MLP, before s.
#include "model/block.h"

#include <string.h>

#include "base/threads.h"
#include "kernels/attend.h"
#include "kernels/ops.h"

void ds_block_kv(const ds_block_cfg *c, const ds_layer *L, int l, ds_block_rows *b, const float *in) {
    if (L->kv_shared) return; // keys and values are kv_src's
    const int R = b->n, hd = L->head_dim, nkv = L->n_kv_heads, kvd = nkv * hd, nr = c->n_rope, mhalf = c->rope_half;
    ds_matmul_ex(b->k, in, &L->wk, R, b->scratch, b->gemm_min_rows);
    if (L->wv.data) ds_matmul_ex(b->v, in, &L->wv, R, b->scratch, b->gemm_min_rows);
    for (int r = 0; r < R; r++) {
        float *k = b->k + (size_t)r * kvd, *v = b->v + (size_t)r * kvd;
        if (L->bk) ds_add(k, L->bk, kvd);
        if (!L->wv.data) memcpy(v, k, (size_t)kvd * 4); // K = V: the raw key projection
        else if (L->bv) ds_add(v, L->bv, kvd);
        if (L->k_norm) ds_rmsnorm_rows(k, k, L->k_norm, nkv, hd, c->eps);
        if (L->v_norm) ds_rmsnorm_rows(v, v, NULL, nkv, hd, c->eps);
        const size_t ro = ((size_t)r * nr + L->rope) * mhalf;
        ds_rope(k, nkv, hd, b->rcos + ro, b->rsin + ro, c->rope_layout);
        ds_kvcache_put(b->kv[r], l, b->pos[r], k, v);
    }
}

typedef struct {
    const ds_block_cfg *c;
    const ds_layer *L;
    const ds_block_rows *b;
} attention_job;

// One head of a token-tree row: its span is the committed columns then its ancestors (t), virtual
// columns [start, T) with T = base + |anc|. The whole 16-column blocks of committed columns are read
// in place, the rest gathered into g (K lines, then V lines, `cols` apart, elements of the cache's
// type), so the result is bit for bit the same row attending over a cache that holds its path at
// consecutive columns.
static void tree_attend(float *out, const float *q, const ds_kvcache *kv, const void *K, const void *V, int hd,
                        float scale, int win, const ds_tree_span *t, float *sc, void *g) {
    const int T = t->base + __builtin_popcountll(t->anc), start = win && T > win ? T - win : 0;
    const int n1 = t->base > start ? (t->base - start) / DS_ATTEND_LANES * DS_ATTEND_LANES : 0;
    const int from = start + n1, cols = T - from;
    int anc[DS_TREE_MAX_ROWS], n_anc = 0, col[DS_TREE_MAX_ROWS + DS_ATTEND_LANES]; // physical columns
    for (uint64_t a = t->anc; a; a &= a - 1) anc[n_anc++] = t->base + __builtin_ctzll(a);
    for (int v = from; v < T; v++) col[v - from] = v < t->base ? v : anc[v - t->base];
    const size_t e = ds_kvcache_elt(kv), cap = (size_t)kv->cap;
    char *Kg = g, *Vg = Kg + (size_t)hd * cols * e;
    const char *Kc = K, *Vc = V;
    for (int d = 0; d < hd; d++)
        for (int i = 0; i < cols; i++) {
            memcpy(Kg + ((size_t)d * cols + i) * e, Kc + ((size_t)d * cap + col[i]) * e, e);
            memcpy(Vg + ((size_t)d * cols + i) * e, Vc + ((size_t)d * cap + col[i]) * e, e);
        }
    ds_attend2(out, q, Kc + start * e, Vc + start * e, n1, kv->cap, Kg, Vg, cols, cols, kv->f16, hd, scale, sc);
}

// Rows of a pool item: ds_attend_many takes at most DS_ATTEND_MAX_Q queries, a row's heads of one
// kv head (`group` of them) each.
static int rows_per_item(int group) { return group < DS_ATTEND_MAX_Q ? DS_ATTEND_MAX_Q / group : 1; }

// Pool item (rows chunk, kv head g) of attention(): the chunk's consecutive rows of one sequence
// (not tree rows) attend together, their `group` query heads sharing each read of g's K and V; a
// tree row's heads attend one at a time.
static void attention_item(void *ctx, int item, int worker) {
    const attention_job *a = ctx;
    const ds_layer *L = a->L;
    const ds_block_rows *b = a->b;
    const int hd = L->head_dim, nh = a->c->n_heads, nkv = L->n_kv_heads, group = nh / nkv, win = L->window;
    const int per = rows_per_item(group), g = item % nkv, r0 = item / nkv * per;
    const int r1 = r0 + per < b->n ? r0 + per : b->n;
    float *sc = b->scores + (size_t)worker * DS_ATTEND_MAX_Q * b->scores_stride;
    for (int r = r0; r < r1;) {
        const ds_kvcache *kv = b->kv[r];
        const void *K = ds_kvcache_k(kv, L->kv_src, g, hd), *V = ds_kvcache_v(kv, L->kv_src, g, hd);
        if (b->tree && b->tree[r].anc) {
            for (int h = g * group; h < (g + 1) * group; h++)
                tree_attend(b->att + ((size_t)r * nh + h) * hd, b->q + ((size_t)r * nh + h) * hd, kv, K, V, hd,
                            L->attn_scale, win, &b->tree[r], sc, b->gather + (size_t)worker * b->gather_stride);
            r++;
            continue;
        }
        float *out[DS_ATTEND_MAX_Q];
        const float *q[DS_ATTEND_MAX_Q];
        int start[DS_ATTEND_MAX_Q], end[DS_ATTEND_MAX_Q], nq = 0;
        for (; r < r1 && b->kv[r] == kv && !(b->tree && b->tree[r].anc); r++) {
            const int e = b->end ? b->end[r] : b->pos[r] + 1, s = win && e > win ? e - win : 0;
            for (int h = g * group; h < (g + 1) * group; h++, nq++) {
                out[nq] = b->att + ((size_t)r * nh + h) * hd;
                q[nq] = b->q + ((size_t)r * nh + h) * hd;
                start[nq] = s;
                end[nq] = e;
            }
        }
        ds_attend_many(nq, out, q, start, end, K, V, kv->f16, kv->cap, hd, L->attn_scale, sc, b->scores_stride);
    }
}

// GQA attention of every row against its cache (which already holds the rows' own K and V) over its
// span; a sliding-window layer sees only the last `window` columns of it. att (n, n_heads * head_dim).
static void attention(const ds_block_cfg *c, const ds_layer *L, const ds_block_rows *b) {
    const int nh = c->n_heads, hd = L->head_dim, nkv = L->n_kv_heads, per = rows_per_item(nh / nkv);
    long work = 0;
    for (int r = 0; r < b->n; r++) work += (long)(b->end ? b->end[r] : b->pos[r] + 1) * nh * hd;
    attention_job a = {c, L, b};
    const int items = (b->n + per - 1) / per * nkv;
    if (work > (1L << 16)) ds_parallel_for(items, attention_item, &a);
    else
        for (int i = 0; i < items; i++) attention_item(&a, i, 0);
}

// out (n, dim) = Wdown · (act(Wgate · in) ⊙ Wup · in); out may be in.
static void dense_mlp(const ds_block_cfg *c, const ds_layer *L, ds_block_rows *b, const float *in, float *out) {
    const int R = b->n;
    ds_matmul_ex(b->hb, in, &L->w_gate, R, b->scratch, b->gemm_min_rows);
    ds_matmul_ex(b->hb2, in, &L->w_up, R, b->scratch, b->gemm_min_rows);
    if (c->act == DS_ACT_GELU_TANH) ds_geglu(b->hb, b->hb2, R * L->ffn_dim);
    else if (c->act == DS_ACT_GELU_TANHF) ds_geglu_tanhf(b->hb, b->hb2, R * L->ffn_dim);
    else ds_swiglu(b->hb, b->hb2, R * L->ffn_dim);
    ds_matmul_ex(out, b->hb, &L->w_down, R, b->scratch, b->gemm_min_rows);
}

// An MoE layer's FFN output into b->xb (which holds m = ffn_norm(h) on entry; b->x holds h).
static void moe_block(const ds_block_cfg *c, const ds_layer *L, ds_block_rows *b) {
    const ds_moe *E = L->moe;
    const int R = b->n, dim = c->dim;
    const float eps = c->eps;
    if (L->w_gate.data) { // the dense MLP beside the experts (Qwen2-MoE shared expert, Gemma 4)
        dense_mlp(c, L, b, b->xb, b->ffn);
        if (E->shared_gate.data) {
            ds_matmul_ex(b->hb, b->xb, &E->shared_gate, R, b->scratch, b->gemm_min_rows); // (R, 1)
            for (int r = 0; r < R; r++) ds_scale(b->ffn + (size_t)r * dim, ds_sigmoid(b->hb[r]), dim);
        }
        if (E->dense_post_norm) ds_rmsnorm_rows(b->ffn, b->ffn, E->dense_post_norm, R, dim, eps);
    }
    const float *route = b->xb, *in = b->xb;
    if (E->pre_norm) { // Gemma 4: the router reads h, the experts N2(h)
        ds_rmsnorm_rows(b->moe_in, b->x, E->pre_norm, R, dim, eps);
        route = b->x;
        in = b->moe_in;
    }
    ds_moe_forward(c->model, E, b->moe, route, in, b->xb, R, b->scratch, b->gemm_min_rows);
    if (E->post_norm) ds_rmsnorm_rows(b->xb, b->xb, E->post_norm, R, dim, eps);
    if (L->w_gate.data) ds_add(b->xb, b->ffn, R * dim);
}

void ds_block_forward(const ds_block_cfg *c, const ds_layer *L, int l, ds_block_rows *b) {
    const int R = b->n, dim = c->dim, nh = c->n_heads, hd = L->head_dim, qd = nh * hd;
    const int nr = c->n_rope, mhalf = c->rope_half;
    const float eps = c->eps;
    // Attention block.
    ds_rmsnorm_rows(b->xb, b->x, L->attn_norm, R, dim, eps);
    ds_matmul_ex(b->q, b->xb, &L->wq, R, b->scratch, b->gemm_min_rows);
    ds_block_kv(c, L, l, b, b->xb);
    for (int r = 0; r < R; r++) {
        float *q = b->q + (size_t)r * qd;
        if (L->bq) ds_add(q, L->bq, qd);
        if (L->q_norm) ds_rmsnorm_rows(q, q, L->q_norm, nh, hd, eps);
        const size_t ro = ((size_t)r * nr + L->rope) * mhalf;
        ds_rope(q, nh, hd, b->rcos + ro, b->rsin + ro, c->rope_layout);
    }
    attention(c, L, b);
    ds_matmul_ex(b->xb, b->att, &L->wo, R, b->scratch, b->gemm_min_rows);
    for (int r = 0; r < R; r++) {
        float *o = b->xb + (size_t)r * dim;
        if (L->bo) ds_add(o, L->bo, dim);
        if (L->attn_post_norm) ds_rmsnorm(o, o, L->attn_post_norm, dim, eps);
    }
    ds_add(b->x, b->xb, R * dim);
    // MLP block (SwiGLU or GeGLU), routed experts, or both.
    ds_rmsnorm_rows(b->xb, b->x, L->ffn_norm, R, dim, eps);
    if (L->moe) moe_block(c, L, b);
    else dense_mlp(c, L, b, b->xb, b->xb);
    if (L->ffn_post_norm) ds_rmsnorm_rows(b->xb, b->xb, L->ffn_post_norm, R, dim, eps);
    ds_add(b->x, b->xb, R * dim);
    if (c->ple_dim) { // x += N(Wproj · (gelu_tanh(Wgate · x) ⊙ ple_l))
        const int P = c->ple_dim;
        ds_matmul_ex(b->hb, b->x, &L->ple_gate, R, b->scratch, b->gemm_min_rows);
        for (int r = 0; r < R; r++) ds_geglu(b->hb + (size_t)r * P, b->ple + ((size_t)r * c->n_layers + l) * P, P);
        ds_matmul_ex(b->xb, b->hb, &L->ple_proj, R, b->scratch, b->gemm_min_rows);
        ds_rmsnorm_rows(b->xb, b->xb, L->ple_post_norm, R, dim, eps);
        ds_add(b->x, b->xb, R * dim);
    }
    if (L->out_scale != 1.0f) ds_scale(b->x, L->out_scale, (size_t)R * dim);
}
