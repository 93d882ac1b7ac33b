// The DeepSpec drafter's forward pass (docs/formats/deepspec-checkpoint.md §4), one function per step:
//   context projection  c = RMSNorm_hidden_norm(taps · fcᵀ); per layer K_ctx = RoPE(k_norm(c·Wkᵀ)),
//                       V_ctx = c·Wvᵀ (Gemma: v_norm(c·Wkᵀ)) appended to the draft cache;
//   block forward       ids [anchor, MASK × (B−1)] at positions s..s+B−1; queries from the block,
//                       keys/values = context rows then block rows, NO mask;
//   output              h = norm(x), U = h·lm_headᵀ (Gemma: softcap);
//   Markov walk         logits_k = U_k + bias(prev); tok_k = argmax or a sample of the processed
//                       distribution; prev = tok_k;
//   confidence          c_k = σ(proj([h_k ; W1[prev_k]])).
// The layers are the target's decoder block (model/block.c; the K/V of context rows its K/V half):
// only the rows' spans differ. The block's K/V are written after the context rows and dropped again
// (the cache length is not advanced), so the draft side never needs rollback.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/threads.h"
#include "base/status.h"
#include "draft/drafter.h"
#include "kernels/ops.h"

// Rows processed per chunk when appending context (bounds the scratch).
#define DS_DRAFT_CHUNK 64

// ---- state ---------------------------------------------------------------------------------------

// Size b for `rows` rows (grows; frees nothing on failure).
static ds_status bufs_reserve(const ds_drafter *d, ds_draft_bufs *b, int rows) {
    const int u_cols = d->n_vocab < d->V ? d->n_vocab : 0; // scores over a draft vocabulary
    if (rows < b->cap_rows) rows = b->cap_rows;
    if (u_cols != b->u_cols || (u_cols && rows > b->cap_rows)) {
        float *u = realloc(b->u, sizeof(float) * (size_t)rows * (size_t)(u_cols ? u_cols : 1));
        if (!u) return ds_fail(DS_ERR_NOMEM, "out of memory for a draft block of %d rows", rows);
        b->u = u;
        b->u_cols = u_cols;
    }
    if (rows <= b->cap_rows) return DS_OK;
    const size_t wide = (size_t)(d->T * d->H > d->H ? d->T * d->H : d->H);
    const size_t qd = (size_t)d->nq * d->hd, kvd = (size_t)d->nkv * d->hd, r = (size_t)rows;
    float **bufs[] = {&b->x, &b->xn, &b->q, &b->kb, &b->vb, &b->att, &b->hb, &b->hb2, &b->rcos, &b->rsin};
    const size_t sizes[] = {wide, (size_t)d->H, qd, kvd, kvd, qd, (size_t)d->F, (size_t)d->F, (size_t)d->hd / 2,
                            (size_t)d->hd / 2};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) {
        float *p = realloc(*bufs[i], sizeof(float) * r * sizes[i]);
        if (!p) return ds_fail(DS_ERR_NOMEM, "out of memory for a draft block of %d rows", rows);
        *bufs[i] = p;
    }
    int *pos = realloc(b->pos, sizeof(int) * r);
    if (pos) b->pos = pos;
    int *end = pos ? realloc(b->end, sizeof(int) * r) : NULL;
    if (end) b->end = end;
    ds_kvcache **kv = end ? realloc(b->kv, sizeof *kv * r) : NULL;
    if (!kv) return ds_fail(DS_ERR_NOMEM, "out of memory for a draft block of %d rows", rows);
    b->kv = kv;
    if (!b->scratch) {
        size_t sc = 0;
        const ds_weight *ws[] = {&d->fc, &d->lm_head, &d->markov_w2, &d->layers[0].wq, &d->layers[0].w_gate,
                                 &d->layers[0].w_down};
        for (size_t i = 0; i < sizeof ws / sizeof *ws; i++)
            if (ws[i]->data && ds_matmul_scratch_floats(ws[i]) > sc) sc = ds_matmul_scratch_floats(ws[i]);
        if (!(b->scratch = malloc(sizeof(float) * (sc ? sc : 1) * (size_t)ds_threads_max())))
            return ds_fail(DS_ERR_NOMEM, "out of memory for draft scratch");
    }
    b->cap_rows = rows;
    return DS_OK;
}

static void bufs_free(ds_draft_bufs *b) {
    float *bufs[] = {b->x, b->xn, b->q, b->kb, b->vb, b->att, b->hb, b->hb2, b->rcos, b->rsin, b->scratch, b->u,
                     b->scores};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) free(bufs[i]);
    free(b->pos);
    free(b->end);
    free(b->kv);
    memset(b, 0, sizeof *b);
}

ds_status ds_draft_state_init(const ds_drafter *d, int max_ctx, ds_draft_state **out) {
    *out = NULL;
    if (max_ctx <= 0) return ds_fail(DS_ERR_INVALID, "draft context must hold at least one row");
    ds_draft_state *s = ds_calloc(1, sizeof *s);
    int *lines = malloc(sizeof(int) * (size_t)d->info.n_layers);
    if (!s || !lines) {
        free(s);
        free(lines);
        return DS_ERR_NOMEM;
    }
    s->d = d;
    s->max_ctx = max_ctx;
    for (int l = 0; l < d->info.n_layers; l++) lines[l] = d->nkv * d->hd;
    ds_status st = ds_kvcache_init(&s->kv, d->info.n_layers, lines, max_ctx + d->info.block_size, 0);
    free(lines);
    // Markov/confidence features: v (r) | z (2r + H) | g (3r) | W1[prev] (r) | rnn state (r)
    s->mv = malloc(sizeof(float) * (8 * (size_t)d->r + d->H + 1));
    s->probs = malloc(sizeof(float) * d->V);
    s->sscratch = malloc(ds_sampler_scratch_size(d->V));
    const int rows = d->info.block_size > DS_DRAFT_CHUNK ? d->info.block_size : DS_DRAFT_CHUNK;
    if (st || !s->mv || !s->probs || !s->sscratch || bufs_reserve(d, &s->b, rows)) {
        ds_draft_state_free(s);
        return ds_fail(DS_ERR_NOMEM, "out of memory for a draft state");
    }
    *out = s;
    return DS_OK;
}

void ds_draft_state_free(ds_draft_state *s) {
    if (!s) return;
    ds_kvcache_free(&s->kv);
    bufs_free(&s->b);
    free(s->mv);
    free(s->probs);
    free(s->sscratch);
    free(s);
}

int ds_draft_state_len(const ds_draft_state *s) { return s->kv.len; }

void ds_draft_state_set_history(ds_draft_state *s, const int32_t *hist, int n) {
    s->hist = hist;
    s->n_hist = n;
}

ds_status ds_draft_state_truncate(ds_draft_state *s, int len) {
    if (len < 0 || len > s->kv.len)
        return ds_fail(DS_ERR_INVALID, "cannot truncate a draft context of %d rows to %d", s->kv.len, len);
    s->kv.len = len;
    return DS_OK;
}

// Room for `need` columns in every layer's cache.
static ds_status reserve(ds_draft_state *s, int need) {
    const ds_drafter *d = s->d;
    if (need > s->max_ctx + d->info.block_size)
        return ds_fail(DS_ERR_INVALID, "draft context of %d rows exceeds its limit of %d", need - d->info.block_size,
                       s->max_ctx);
    if (ds_kvcache_reserve(&s->kv, need)) return ds_fail(DS_ERR_NOMEM, "out of memory growing the draft context");
    return DS_OK;
}

// Attention scores over up to `span` columns for every thread (grows by doubling).
static ds_status scores_reserve(ds_draft_bufs *b, int span) {
    const int nthr = ds_threads() > ds_threads_max() ? ds_threads() : ds_threads_max();
    if (span <= b->scores_cap && nthr <= b->scores_thr) return DS_OK;
    int cap = b->scores_cap ? b->scores_cap : 256;
    while (cap < span) cap *= 2;
    const int thr = nthr > b->scores_thr ? nthr : b->scores_thr;
    float *p = realloc(b->scores, sizeof(float) * (size_t)cap * thr * DS_ATTEND_MAX_Q);
    if (!p) return ds_fail(DS_ERR_NOMEM, "out of memory for draft attention");
    b->scores = p;
    b->scores_cap = cap;
    b->scores_thr = thr;
    return DS_OK;
}

// ---- shared pieces -------------------------------------------------------------------------------

// The block rows over b's first n rows, whose pos / end / kv the caller has filled; their RoPE angles.
static ds_block_rows block_rows(const ds_drafter *d, ds_draft_bufs *b, int n) {
    const int half = d->hd / 2;
    for (int i = 0; i < n; i++)
        ds_rope_angles(b->rcos + (size_t)i * half, b->rsin + (size_t)i * half, d->inv_freq, half, b->pos[i]);
    return (ds_block_rows){.n = n, .pos = b->pos, .end = b->end, .kv = b->kv, .rcos = b->rcos, .rsin = b->rsin,
                           .x = b->x, .xb = b->xn, .q = b->q, .k = b->kb, .v = b->vb, .att = b->att, .hb = b->hb,
                           .hb2 = b->hb2, .scores = b->scores, .scores_stride = b->scores_cap, .scratch = b->scratch};
}

// ---- context projection --------------------------------------------------------------------------

ds_status ds_drafter_append(const ds_drafter *d, ds_draft_state *s, const float *taps, int n) {
    if (n < 0 || (n && !taps)) return ds_fail(DS_ERR_INVALID, "append of %d rows without taps", n);
    ds_status st = reserve(s, s->kv.len + n + d->info.block_size);
    if (st) return st;
    for (int done = 0; done < n; done += DS_DRAFT_CHUNK) {
        const int m = n - done < DS_DRAFT_CHUNK ? n - done : DS_DRAFT_CHUNK;
        // c = RMSNorm_hidden_norm(taps · fcᵀ)   (m, H)
        ds_draft_bufs *b = &s->b;
        ds_matmul(b->xn, taps + (size_t)done * d->T * d->H, &d->fc, m, b->scratch);
        ds_rmsnorm_rows(b->xn, b->xn, d->hidden_norm, m, d->H, d->eps);
        for (int i = 0; i < m; i++) {
            b->pos[i] = s->kv.len + i;
            b->kv[i] = &s->kv;
        }
        ds_block_rows rows = block_rows(d, b, m);
        for (int l = 0; l < d->info.n_layers; l++) ds_block_kv(&d->block, &d->layers[l], l, &rows, b->xn);
        s->kv.len += m;
    }
    return DS_OK;
}

// ---- block forward -------------------------------------------------------------------------------

// The vector W2 multiplies for a slot, from prev's W1 row `w1` (r) and the slot's hidden h (H);
// NULL without a Markov head. `state` (r) is the rnn head's s_{k-1}, updated in place.
static const float *markov_v(const ds_drafter *d, ds_draft_state *s, const float *w1, const float *h, float *state) {
    const int r = d->r, H = d->H;
    float *v = s->mv;          // (r) the vector W2 multiplies
    float *z = v + r;          // (2r + H) head input
    float *g = z + 2 * r + H;  // (3r) head output
    switch (d->markov) {
    case DS_MARKOV_NONE: return NULL;
    case DS_MARKOV_VANILLA: memcpy(v, w1, sizeof(float) * r); break;
    case DS_MARKOV_GATED: // v = σ(gate_proj([h ; W1[prev]])) ⊙ W1[prev]
        memcpy(z, h, sizeof(float) * H);
        memcpy(z + H, w1, sizeof(float) * r);
        ds_matmul(g, z, &d->gate_proj, 1, s->b.scratch);
        for (int i = 0; i < r; i++) v[i] = ds_sigmoid(g[i] + d->gate_bias[i]) * w1[i];
        break;
    case DS_MARKOV_RNN: // z = [s ; W1[prev] ; h]; (g, c, o) = split3(joint_proj(z)); v = tanh(o)
        memcpy(z, state, sizeof(float) * r);
        memcpy(z + r, w1, sizeof(float) * r);
        memcpy(z + 2 * r, h, sizeof(float) * H);
        ds_matmul(g, z, &d->joint_proj, 1, s->b.scratch);
        for (int i = 0; i < 3 * r; i++) g[i] += d->joint_bias[i];
        for (int i = 0; i < r; i++) {
            const float gate = ds_sigmoid(g[i]);
            state[i] = gate * state[i] + (1.0f - gate) * tanhf(g[r + i]);
            v[i] = tanhf(g[2 * r + i]);
        }
        break;
    }
    return v;
}

// Markov bias for a slot added to `logits` (V): W2 · markov_v(...).
static void markov_bias(const ds_drafter *d, ds_draft_state *s, const float *w1, const float *h, float *state,
                        float *logits) {
    const float *v = markov_v(d, s, w1, h, state);
    if (!v) return;
    // logits += W2 · v (s->probs is free until the slot is sampled); over a draft vocabulary only
    // its rows, added at their ids (the others stay -inf)
    if (d->n_vocab < d->V) {
        ds_matmul(s->probs, v, &d->vocab_w2, 1, s->b.scratch);
        for (int j = 0; j < d->n_vocab; j++) logits[d->vocab_ids[j]] += s->probs[j];
        return;
    }
    ds_matmul(s->probs, v, &d->markov_w2, 1, s->b.scratch);
    ds_add(logits, s->probs, d->V);
}

// Slots k0 .. k1-1 of the Markov walk over the slots' hidden states h_rows (k1, H): logits (k1 - k0,
// V) hold their base logits U on entry and their Markov-corrected logits after; tokens (k1) hold the
// tokens of the slots before k0 on entry and get the drawn ones; conf (k1 - k0) their confidences.
// The rnn head's state (in s->mv) is the one after slot k0 - 1.
static ds_status walk_slots(const ds_drafter *d, ds_draft_state *s, int32_t anchor, int k0, int k1,
                            const float *h_rows, const ds_sampler_params *sp, ds_rng *rng, int32_t *tokens,
                            float *logits, float *conf, const ds_draft_seq *cq) {
    const int H = d->H, V = d->V, r = d->r;
    float *w1 = s->mv + 6 * (size_t)r + H; // (r) W1[prev]
    float *state = w1 + r;                 // (r) the rnn head's s_k, s_0 = 0
    for (int k = k0; k < k1; k++) {
        const int32_t prev = k ? tokens[k - 1] : anchor;
        const float *h = h_rows + (size_t)k * H;
        float *lk = logits + (size_t)(k - k0) * V;
        if (r > 0) {
            ds_weight_row_f32(&d->markov_w1, prev, w1);
            markov_bias(d, s, w1, h, state, lk);
        }
        if (conf) {
            if (d->conf_w) { // c_k = σ(w · [h_k ; W1[prev_k]] + b)
                float z = d->conf_b + ds_dot(d->conf_w, h, H);
                if (d->info.confidence_with_markov) z += ds_dot(d->conf_w + H, w1, r);
                const int c = sp->temperature > 0 ? DS_CALIB_SAMPLED : DS_CALIB_GREEDY; // the sequence's class
                if (k < d->n_calib[c]) z /= d->calib[c][k]; // Sequential Temperature Scaling
                conf[k - k0] = ds_sigmoid(z);
            } else {
                conf[k - k0] = NAN;
            }
        }
        if (cq && cq->constrain) { // the grammar's mask on slot k, given the drafts before it
            const int c = cq->constrain(cq->constrain_ctx, k, tokens, lk);
            if (c < 0) return DS_ERR_INVALID;
            if (!c) {
                k1 = k;
                break;
            }
        }
        if (sp->temperature == 0 && !ds_sampler_adjusts(sp)) {
            tokens[k] = ds_argmax(lk, V);
        } else { // the processed distribution, with the history and the drafts before slot k
            ds_status st = ds_probs_process_hist(sp, lk, V, s->hist, s->n_hist, tokens, k, s->probs, s->sscratch);
            if (st) return st;
            if (sp->temperature == 0) tokens[k] = ds_argmax(s->probs, V);
            else tokens[k] = sp->verify == DS_VERIFY_COUPLED ? ds_sample_coupled(s->probs, V, rng, s->kv.len + 1 + k)
                                                        : ds_sample_probs(s->probs, V, rng);
        }
    }
    if (cq && cq->n_drafted) *cq->n_drafted = k1;
    return DS_OK;
}

// The Markov walk and confidences of one sequence over its slots' hidden states h (n_slots, H)
// and base logits U in `logits` (n_slots, V), which become the Markov-corrected logits.
static ds_status walk(const ds_drafter *d, ds_draft_state *s, int32_t anchor, int n_slots, const float *h_rows,
                      const ds_sampler_params *sp, ds_rng *rng, int32_t *tokens, float *logits, float *conf,
                      const ds_draft_seq *cq) {
    memset(s->mv + 7 * (size_t)d->r + d->H, 0, sizeof(float) * (size_t)d->r); // the rnn state s_0 = 0
    return walk_slots(d, s, anchor, 0, n_slots, h_rows, sp, rng, tokens, logits, conf, cq);
}

// Block forward for R sequences with buffers b: rows r·B .. r·B+B−1 belong to st[r] and attend to
// its context and the whole block (no mask). Matrix products run over all R·B rows at once (one pass
// over each layer's weights). h = norm(x) of every row is left in b->xn; b->pos the rows' positions.
static ds_status block_forward(const ds_drafter *d, ds_draft_bufs *b, ds_draft_state *const *st,
                               const int32_t *anchors, int R) {
    const int B = d->info.block_size, H = d->H;
    ds_status e = bufs_reserve(d, b, R * B);
    if (e) return e;
    int span = 0;
    for (int r = 0; r < R; r++) {
        if (anchors[r] < 0 || anchors[r] >= d->V)
            return ds_fail(DS_ERR_INVALID, "anchor token %d is outside the vocabulary", anchors[r]);
        if ((e = reserve(st[r], st[r]->kv.len + B))) return e;
        span = st[r]->kv.len + B > span ? st[r]->kv.len + B : span;
        // x = embed_tokens[anchor, MASK × (B−1)] · embed_scale   (B, H), positions s..s+B−1
        for (int i = 0; i < B; i++) {
            float *x = b->x + (size_t)(r * B + i) * H;
            ds_weight_row_f32(&d->embed, i == 0 ? anchors[r] : d->info.mask_token_id, x);
            if (d->embed_scale != 1.0f) ds_scale(x, d->embed_scale, (size_t)H);
            b->pos[r * B + i] = st[r]->kv.len + i;
            b->end[r * B + i] = st[r]->kv.len + B;
            b->kv[r * B + i] = &st[r]->kv;
        }
    }
    if ((e = scores_reserve(b, span))) return e;
    ds_block_rows rows = block_rows(d, b, R * B);
    for (int l = 0; l < d->info.n_layers; l++) ds_block_forward(&d->block, &d->layers[l], l, &rows);
    ds_rmsnorm_rows(b->xn, b->x, d->norm, R * B, H, d->eps);
    return DS_OK;
}

// U = h · lm_headᵀ for n rows (Gemma: softcapped). With a draft vocabulary only its rows are
// computed (into b->u) and scattered to their ids; every other logit is -inf.
static ds_status output_logits(const ds_drafter *d, ds_draft_bufs *b, const float *h, int n, float *logits) {
    const int V = d->V, K = d->n_vocab;
    float *u = K >= V ? logits : b->u;
    ds_matmul(u, h, K >= V ? &d->lm_head : &d->vocab_head, n, b->scratch);
    if (!ds_all_finite(u, (size_t)n * (K >= V ? V : K))) // (before the softcap, which makes inf finite)
        return ds_fail(DS_ERR_FORMAT, "the drafter computed NaN or infinite logits (its weights hold NaN/Inf values)");
    if (d->softcap > 0) ds_softcap(u, (size_t)n * (K >= V ? V : K), d->softcap); // Gemma
    if (K >= V) return DS_OK;
    for (int i = 0; i < n; i++) {
        float *l = logits + (size_t)i * V;
        const float *ui = b->u + (size_t)i * K;
        for (int t = 0; t < V; t++) l[t] = -INFINITY;
        for (int j = 0; j < K; j++) l[d->vocab_ids[j]] = ui[j];
    }
    return DS_OK;
}

ds_status ds_drafter_draft(const ds_drafter *d, ds_draft_state *s, int32_t anchor, int n_slots,
                           const ds_sampler_params *sp, ds_rng *rng, int32_t *tokens, float *logits, float *conf) {
    const int B = d->info.block_size;
    if (n_slots < 1 || n_slots > B) return ds_fail(DS_ERR_INVALID, "cannot draft %d slots (block size %d)", n_slots, B);
    ds_status st = block_forward(d, &s->b, &s, &anchor, 1);
    if (st) return st;
    if ((st = output_logits(d, &s->b, s->b.xn, n_slots, logits))) return st;
    return walk(d, s, anchor, n_slots, s->b.xn, sp, rng, tokens, logits, conf, NULL);
}

// ---- batches of sequences ------------------------------------------------------------------------

struct ds_draft_batch {
    const ds_drafter *d;
    ds_draft_bufs b;
    float *h;      // (cap rows, H) gathered hidden rows of the slots drafted
    float *U;      // (cap rows, V) their logits
    int cap;
    ds_draft_state **st; // (cap_seqs) the sequences' states and anchors, gathered for block_forward
    int32_t *anchor;     // (cap_seqs)
    int *off;            // (cap_seqs) each sequence's first row in h and U
    int cap_seqs;
};

ds_status ds_draft_batch_init(const ds_drafter *d, ds_draft_batch **out) {
    *out = ds_calloc(1, sizeof **out);
    if (!*out) return DS_ERR_NOMEM;
    (*out)->d = d;
    return DS_OK;
}

void ds_draft_batch_free(ds_draft_batch *bt) {
    if (!bt) return;
    bufs_free(&bt->b);
    free(bt->h);
    free(bt->U);
    free(bt->st);
    free(bt->anchor);
    free(bt->off);
    free(bt);
}

ds_status ds_drafter_draft_batch(const ds_drafter *d, ds_draft_batch *bt, const ds_draft_seq *seqs, int R) {
    const int B = d->info.block_size, H = d->H, V = d->V;
    if (R <= 0) return DS_OK;
    for (int r = 0; r < R; r++)
        if (seqs[r].n_slots < 1 || seqs[r].n_slots > B)
            return ds_fail(DS_ERR_INVALID, "cannot draft %d slots (block size %d)", seqs[r].n_slots, B);
    if (R > bt->cap_seqs) {
        ds_draft_state **s = realloc(bt->st, sizeof *s * (size_t)R);
        if (s) bt->st = s;
        int32_t *a = s ? realloc(bt->anchor, sizeof *a * (size_t)R) : NULL;
        if (a) bt->anchor = a;
        int *o = a ? realloc(bt->off, sizeof *o * (size_t)R) : NULL;
        if (!o) return ds_fail(DS_ERR_NOMEM, "out of memory drafting for %d sequences", R);
        bt->off = o;
        bt->cap_seqs = R;
    }
    for (int r = 0; r < R; r++) {
        bt->st[r] = seqs[r].state;
        bt->anchor[r] = seqs[r].anchor;
    }
    const int M = R * B;
    if (M > bt->cap) {
        float *h = realloc(bt->h, sizeof(float) * (size_t)M * H);
        if (h) bt->h = h;
        float *u = h ? realloc(bt->U, sizeof(float) * (size_t)M * V) : NULL;
        if (!u) return ds_fail(DS_ERR_NOMEM, "out of memory drafting for %d sequences", R);
        bt->U = u;
        bt->cap = M;
    }
    ds_status st = block_forward(d, &bt->b, bt->st, bt->anchor, R);
    if (st) return st;
    // One pass over lm_head for the drafted slots of every sequence.
    int n = 0;
    for (int r = 0; r < R; r++) {
        memcpy(bt->h + (size_t)n * H, bt->b.xn + (size_t)r * B * H, sizeof(float) * (size_t)seqs[r].n_slots * H);
        bt->off[r] = n;
        n += seqs[r].n_slots;
    }
    if ((st = output_logits(d, &bt->b, bt->h, n, bt->U))) return st;
    n = 0;
    for (int r = 0; r < R; r++) {
        const ds_draft_seq *q = &seqs[r];
        memcpy(q->logits, bt->U + (size_t)n * V, sizeof(float) * (size_t)q->n_slots * V);
        if ((st = walk(d, q->state, q->anchor, q->n_slots, bt->h + (size_t)n * H, q->sp, q->rng, q->tokens, q->logits,
                       q->conf, q)))
            return st;
        n += q->n_slots;
    }
    return DS_OK;
}

ds_status ds_drafter_draft_branch(const ds_drafter *d, const ds_draft_batch *bt, int j, const ds_draft_seq *q, int k,
                                  int32_t t, int m, int32_t *tokens, float *logits, float *conf) {
    const int H = d->H, V = d->V, r = d->r;
    if (j < 0 || j >= bt->cap_seqs || k < 0 || m < 0 || k + 1 + m > q->n_slots)
        return ds_fail(DS_ERR_INVALID, "cannot branch at slot %d for %d slots (sequence %d drafted %d)", k, m, j,
                       q->n_slots);
    if (t < 0 || t >= V) return ds_fail(DS_ERR_INVALID, "branch token %d is outside the vocabulary", t);
    ds_draft_state *s = q->state;
    const float *h_rows = bt->h + (size_t)bt->off[j] * H;
    int32_t path[64]; // the drafted tokens before slot k, then t, then the branch's
    memcpy(path, q->tokens, sizeof(int32_t) * (size_t)k);
    path[k] = t;
    // The rnn head's state after slot k (the other heads keep none): replayed along the drafted path.
    float *w1 = s->mv + 6 * (size_t)r + H, *state = w1 + r;
    memset(state, 0, sizeof(float) * (size_t)r);
    for (int i = 0; d->markov == DS_MARKOV_RNN && i <= k; i++) {
        ds_weight_row_f32(&d->markov_w1, i ? path[i - 1] : q->anchor, w1);
        markov_v(d, s, w1, h_rows + (size_t)i * H, state);
    }
    if (!m) return DS_OK;
    memcpy(logits, bt->U + (size_t)(bt->off[j] + k + 1) * V, sizeof(float) * (size_t)m * V);
    ds_status st = walk_slots(d, s, q->anchor, k + 1, k + 1 + m, h_rows, q->sp, q->rng, path, logits, conf, NULL);
    if (!st) memcpy(tokens, path + k + 1, sizeof(int32_t) * (size_t)m);
    return st;
}
