// Forward and hand-written backward of the drafter's training loss over the anchor blocks of one
// sequence (docs/formats/deepspec-checkpoint.md §6). Notation: H hidden, V vocab, F MLP width, nq/nkv heads, hd head
// dim, T taps, r Markov rank, B block size, A anchors, M = A·B block rows, Nc context rows (the
// largest anchor position). Activations needed by the backward pass are kept per layer.
//
// Forward, per sequence:
//   C  = RMSNorm_hn(R · fcᵀ)                                  (Nc, H) context rows
//   per layer: Kc = RoPE(k_norm(C·Wkᵀ)), Vc = C·Wvᵀ (Gemma: v_norm(C·Wkᵀ))
//   X0 = embed[[anchor, MASK…]] · scale                        (M, H) frozen
//   per layer (Qwen3): n1 = RMSNorm(X); Q = RoPE(q_norm(n1·Wqᵀ)); Kb, Vb like Kc from n1;
//                      O = attn(Q; [Kc rows < p ; Kb block], [Vc ; Vb]);  X += O·Woᵀ
//                      n2 = RMSNorm(X); X += Wdown·(silu(n2·Wgᵀ) ⊙ n2·Wuᵀ)
//   (Gemma: X += post_norm(O·Woᵀ); X += post_ffn_norm(mlp(pre_ffn_norm(X))); X *= layer_scalar)
//   h = RMSNorm_norm(X); U = h·lm_headᵀ (Gemma: softcap); z = U + bias(prev) (teacher forced)
//   zc = conf([h ; W1[prev]]); losses as in train.h.
// Backward: the same steps in reverse; every gradient accumulates with +=.
#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/threads.h"
#include "base/status.h"
#include "kernels/ops.h"
#include "kernels/ops.h"
#include "train/train.h"

// ---- scratch -------------------------------------------------------------------------------------

typedef struct {
    float *x_in;     // (M, H) layer input
    float *n1;       // (M, H) input norm output
    float *inv1;     // (M) its 1/rms
    float *q_raw;    // (M, qd) before q_norm
    float *q_inv;    // (M·nq) q_norm 1/rms
    float *q;        // (M, qd) after RoPE
    float *k_raw;    // (M, kvd) block k_proj output
    float *k_inv;    // (M·nkv)
    float *k;        // (M, kvd) after k_norm, RoPE
    float *v;        // (M, kvd) block values
    float *v_inv;    // (M·nkv) Gemma v_norm 1/rms
    float *o;        // (M, qd) attention output
    float *ao;       // (M, H) O·Woᵀ (+bo)
    float *ao_inv;   // (M) Gemma post-attention norm 1/rms
    float *x_mid;    // (M, H) after the attention residual
    float *n2;       // (M, H) pre-MLP norm output
    float *inv2;     // (M)
    float *hg, *hu;  // (M, F) gate and up projections
    float *act;      // (M, F) activation ⊙ up
    float *mo;       // (M, H) MLP output (Gemma: before its post norm)
    float *mo_inv;   // (M) Gemma post-ffn norm 1/rms
    float *x_pre;    // (M, H) Gemma: before layer_scalar
    float *kc_raw;   // (Nc, kvd) context k_proj output
    float *kc_inv;   // (Nc·nkv)
    float *kc;       // (Nc, kvd)
    float *vc;       // (Nc, kvd)
    float *vc_inv;   // (Nc·nkv)
    float *probs;    // attention probabilities, (A, nq, B, p_a + B) flattened
} layer_acts;

struct ds_tws {
    const ds_tmodel *tm;
    size_t cap_M, cap_Nc, cap_P;
    void *mem;       // every buffer below, one allocation carved by the size table (buffers())
    layer_acts *L;   // (n_layers)
    float *ctx_a;    // (Nc, H) R·fcᵀ
    float *ctx_inv;  // (Nc)
    float *ctx_c;    // (Nc, H)
    float *dctx;     // (Nc, H)
    float *dkc, *dvc;// (Nc, kvd)
    float *dkc_raw;  // (Nc, kvd)
    float *dctx_a;   // (Nc, H)
    float *dr;       // (M, r)
    float *x;        // (M, H) running residual / final
    float *inv_f;    // (M) final norm
    float *h;        // (M, H)
    float *u;        // (M, V) logits before the Markov bias (after softcap)
    float *z;        // (M, V) draft logits, then dz
    float *t;        // (M, V) target probabilities
    float *e;        // (M, r) W1[prev]
    float *vh;       // (M, r) what W2 multiplies
    float *gin;      // (M, H + r) gated input
    float *gate;     // (M, r) gated: sigmoid output
    float *zin;      // (M, 2r + H) rnn inputs
    float *jout;     // (M, 3r) rnn joint outputs (after bias)
    float *st;       // (M + A, r) rnn states, slot -1 first per anchor... see rnn code
    float *zc;       // (M) confidence logits
    float *dzc;      // (M)
    float *w;        // (M) loss weight of each row (0: no label)
    int32_t *prev;   // (M) teacher-forced previous token
    int32_t *label;  // (M)
    int *pos;        // (M) position of each block row
    float *rcos, *rsin; // (max(M, Nc), hd/2)
    float *dx, *dx2, *dn; // (M, H) gradient buffers
    float *dq, *dk, *dv;  // (M, qd) / (M, kvd)
    float *do_;      // (M, qd)
    float *dhg, *dhu;// (M, F)
    float *dtmp;     // (M, max(3r, 2r+H, H+r, F, qd))
    float *de;       // (M, r)
};

ds_status ds_tws_init(const ds_tmodel *tm, ds_tws **out) {
    *out = ds_calloc(1, sizeof(ds_tws));
    if (!*out) return DS_ERR_NOMEM;
    (*out)->tm = tm;
    (*out)->L = ds_calloc((size_t)tm->d->info.n_layers, sizeof(layer_acts));
    if (!(*out)->L) {
        free(*out);
        *out = NULL;
        return DS_ERR_NOMEM;
    }
    return DS_OK;
}

void ds_tws_free(ds_tws *ws) {
    if (!ws) return;
    free(ws->mem);
    free(ws->L);
    free(ws);
}

// One buffer of the scratch: where its pointer lives (f for floats, i for int32s) and its length.
typedef struct {
    float **f;
    int32_t **i;
    size_t n;
} buf_size;

// The size table (llm.c's activation sizes): every buffer of the scratch for M block rows, Nc
// context rows and P attention probabilities, in the order they are carved. Returns the count.
static int buffers(ds_tws *ws, size_t M, size_t Nc, size_t P, buf_size *t) {
    const ds_drafter *d = ws->tm->d;
    const size_t H = d->H, V = d->V, F = d->F, qd = (size_t)d->nq * d->hd, kvd = (size_t)d->nkv * d->hd,
                 nq = d->nq, nkv = d->nkv, r = d->r ? d->r : 1, half = d->hd / 2, A = M; // A <= M
    size_t wide = 3 * r > 2 * r + H ? 3 * r : 2 * r + H;
    wide = wide > F ? wide : F;
    wide = wide > qd ? wide : qd;
    int n = 0;
#define F_(field, size) (t[n++] = (buf_size){&(field), NULL, (size)})
#define I_(field, size) (t[n++] = (buf_size){NULL, &(field), (size)})
    for (int l = 0; l < d->info.n_layers; l++) {
        layer_acts *a = &ws->L[l];
        F_(a->x_in, M * H), F_(a->n1, M * H), F_(a->inv1, M), F_(a->q_raw, M * qd), F_(a->q_inv, M * nq);
        F_(a->q, M * qd), F_(a->k_raw, M * kvd), F_(a->k_inv, M * nkv), F_(a->k, M * kvd), F_(a->v, M * kvd);
        F_(a->v_inv, M * nkv), F_(a->o, M * qd), F_(a->ao, M * H), F_(a->ao_inv, M), F_(a->x_mid, M * H);
        F_(a->n2, M * H), F_(a->inv2, M), F_(a->hg, M * F), F_(a->hu, M * F), F_(a->act, M * F), F_(a->mo, M * H);
        F_(a->mo_inv, M), F_(a->x_pre, M * H), F_(a->kc_raw, Nc * kvd), F_(a->kc_inv, Nc * nkv), F_(a->kc, Nc * kvd);
        F_(a->vc, Nc * kvd), F_(a->vc_inv, Nc * nkv), F_(a->probs, P);
    }
    F_(ws->ctx_a, Nc * H), F_(ws->ctx_inv, Nc), F_(ws->ctx_c, Nc * H), F_(ws->dctx, Nc * H), F_(ws->dkc, Nc * kvd);
    F_(ws->dvc, Nc * kvd), F_(ws->dkc_raw, Nc * kvd), F_(ws->dctx_a, Nc * H), F_(ws->dr, M * r), F_(ws->x, M * H);
    F_(ws->inv_f, M), F_(ws->h, M * H), F_(ws->u, M * V), F_(ws->z, M * V), F_(ws->t, M * V), F_(ws->e, M * r);
    F_(ws->vh, M * r), F_(ws->gin, M * (H + r)), F_(ws->gate, M * r), F_(ws->zin, M * (2 * r + H));
    F_(ws->jout, M * 3 * r), F_(ws->st, (M + A) * r), F_(ws->zc, M), F_(ws->dzc, M), F_(ws->w, M);
    F_(ws->rcos, (M > Nc ? M : Nc) * half), F_(ws->rsin, (M > Nc ? M : Nc) * half), F_(ws->dx, M * H);
    F_(ws->dx2, M * H), F_(ws->dn, M * H), F_(ws->dq, M * qd), F_(ws->dk, M * kvd), F_(ws->dv, M * kvd);
    F_(ws->do_, M * qd), F_(ws->dhg, M * F), F_(ws->dhu, M * F), F_(ws->dtmp, M * wide), F_(ws->de, M * r);
    I_(ws->prev, M), I_(ws->label, M), I_(ws->pos, M);
#undef F_
#undef I_
    return n;
}

// Size every buffer for M block rows, Nc context rows and P attention probabilities: one allocation,
// carved in the order of the size table, each buffer on a 64-byte boundary (contents are not kept).
static ds_status reserve(ds_tws *ws, size_t M, size_t Nc, size_t P) {
    if (M <= ws->cap_M && Nc <= ws->cap_Nc && P <= ws->cap_P) return DS_OK;
    M = M > ws->cap_M ? M : ws->cap_M;
    Nc = Nc > ws->cap_Nc ? Nc : ws->cap_Nc;
    P = P > ws->cap_P ? P : ws->cap_P;
    buf_size *t = malloc(sizeof *t * (64 + 29 * (size_t)ws->tm->d->info.n_layers));
    if (!t) return ds_fail(DS_ERR_NOMEM, "out of memory for a training batch of %zu rows", M);
    const int n = buffers(ws, M, Nc, P, t);
    size_t total = 0; // in 4-byte words (floats and int32s alike)
    for (int i = 0; i < n; i++) total += (t[i].n + 15) & ~(size_t)15;
    free(ws->mem);
    ws->cap_M = ws->cap_Nc = ws->cap_P = 0;
    if (!(ws->mem = aligned_alloc(64, (total ? total : 16) * 4))) {
        free(t);
        return ds_fail(DS_ERR_NOMEM, "out of memory for a training batch of %zu rows", M);
    }
    char *p = ws->mem;
    for (int i = 0; i < n; i++) {
        if (t[i].f) *t[i].f = (float *)p;
        else *t[i].i = (int32_t *)p;
        p += ((t[i].n + 15) & ~(size_t)15) * 4;
    }
    free(t);
    ws->cap_M = M;
    ws->cap_Nc = Nc;
    ws->cap_P = P;
    return DS_OK;
}

// ---- dense algebra (f32, row-major) --------------------------------------------------------------

// Y (n, out) = X (n, in) · Wᵀ (+ b)
static void lin(float *Y, const float *X, const float *W, const float *b, int n, int out, int in) {
    ds_weight w = {DS_F32, out, in, W};
    ds_matmul(Y, X, &w, n, NULL);
    ds_add_rows(Y, b, n, out);
}

// Multiply-adds per item of the parallel sgemm loops below (a shape-only split: results never
// depend on the thread count), and the size below which they run as one call.
#define DS_LIN_ITEM_MACS (1u << 20)
#define DS_LIN_PARALLEL_MACS (1u << 18)

typedef struct {
    float *dst;
    const float *a, *b;
    int m, n, k, rows; // rows of dst per item
    int transb;        // C = A·Bᵀ (B (n, k)) instead of A·B (B (k, n))
    float beta;
} lin_job;

// C rows [item·rows, ..) = A rows · op(B) + beta·C: C (m, n), A (m, k).
static void rows_item(void *ctx, int item, int worker) {
    const lin_job *j = ctx;
    const int r0 = item * j->rows, r1 = r0 + j->rows < j->m ? r0 + j->rows : j->m;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, j->transb ? CblasTrans : CblasNoTrans, r1 - r0, j->n, j->k, 1.0f,
                j->a + (size_t)r0 * j->k, j->k, j->b, j->transb ? j->k : j->n, j->beta, j->dst + (size_t)r0 * j->n, j->n);
}

// dW rows [item·rows, ..) += (dY columns)ᵀ · X: dW (m = out, n = in), dY (k = rows, out), X (k, in).
static void dw_item(void *ctx, int item, int worker) {
    const lin_job *j = ctx;
    const int r0 = item * j->rows, r1 = r0 + j->rows < j->m ? r0 + j->rows : j->m;
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, r1 - r0, j->n, j->k, 1.0f, j->a + r0, j->m, j->b, j->n, 1.0f,
                j->dst + (size_t)r0 * j->n, j->n);
}

// Rows per item when `total` rows of `row_macs` multiply-adds each are split (all of them in one
// item when the product is small).
static int lin_rows(int total, size_t row_macs) {
    if ((size_t)total * row_macs <= DS_LIN_PARALLEL_MACS) return total > 0 ? total : 1;
    const size_t r = (DS_LIN_ITEM_MACS + row_macs - 1) / row_macs;
    return r < (size_t)total ? (int)r : total;
}

// C (m, n) = A (m, k) · op(B) + beta·C, rows of C split over threads (every sgemm of training runs
// through the pool, which keeps OpenBLAS single-threaded).
static void sgemm_rows(float *C, const float *A, const float *B, int m, int n, int k, int transb, float beta) {
    lin_job j = {C, A, B, m, n, k, lin_rows(m, (size_t)n * k), transb, beta};
    ds_parallel_for((m + j.rows - 1) / j.rows, rows_item, &j);
}

// dX (n, in) += dY (n, out) · W (out, in); rows split over threads.
static void lin_dx(float *dX, const float *dY, const float *W, int n, int out, int in) {
    sgemm_rows(dX, dY, W, n, in, out, 0, 1.0f);
}

// dW (out, in) += dYᵀ (out, n) · X (n, in); db (out) += Σ_rows dY. Output rows split over threads.
static void lin_dw(float *dW, float *db, const float *dY, const float *X, int n, int out, int in) {
    lin_job j = {dW, dY, X, out, in, n, lin_rows(out, (size_t)n * in), 0, 1.0f};
    ds_parallel_for((out + j.rows - 1) / j.rows, dw_item, &j);
    if (db)
        for (int i = 0; i < n; i++) ds_add(db, dY + (size_t)i * out, out);
}

// RoPE (halves pairing) on `heads` heads of row x at position pos; sign −1 undoes it (the backward
// pass of a rotation is the inverse rotation).
static void rope_row(const ds_drafter *d, float *x, int heads, int pos, float sign, float *c, float *s) {
    ds_rope_at(x, heads, d->hd, d->inv_freq, pos, sign < 0, DS_ROPE_HALVES, c, s);
}

// ---- K/V projection (shared by context and block rows) -------------------------------------------

// From normed rows src (n, H): k_raw = src·Wkᵀ + bk; k = RoPE(k_norm(k_raw)); v = src·Wvᵀ + bv
// (Gemma: v = v_norm(k_raw)). Positions pos[i] (or pos0 + i when pos is NULL).
static void kv_fwd(const ds_tmodel *tm, const ds_tlayer *y, const float *src, int n, const int *pos, int pos0,
                   float *k_raw, float *k_inv, float *k, float *v, float *v_inv, float *rc, float *rs) {
    const ds_drafter *d = tm->d;
    const int kvd = d->nkv * d->hd;
    lin(k_raw, src, y->wk, y->bk, n, kvd, d->H);
    ds_rmsnorm_fwd(k, k_inv, k_raw, y->k_norm, n * d->nkv, d->hd, d->eps);
    for (int i = 0; i < n; i++) rope_row(d, k + (size_t)i * kvd, d->nkv, pos ? pos[i] : pos0 + i, 1, rc, rs);
    if (d->style == DS_STYLE_QWEN3) lin(v, src, y->wv, y->bv, n, kvd, d->H);
    else ds_rmsnorm_fwd(v, v_inv, k_raw, NULL, n * d->nkv, d->hd, d->eps);
}

// Backward of kv_fwd: dk, dv (n, kvd) are consumed (dk is un-rotated in place); adds to dsrc and
// the layer's gradients g.
static void kv_bwd(const ds_tmodel *tm, const ds_tlayer *y, ds_tlayer *g, const float *src, int n, const int *pos,
                   int pos0, const float *k_raw, const float *k_inv, const float *v_inv, float *dk, float *dv,
                   float *dk_raw, float *dsrc, float *rc, float *rs) {
    const ds_drafter *d = tm->d;
    const int kvd = d->nkv * d->hd;
    for (int i = 0; i < n; i++) rope_row(d, dk + (size_t)i * kvd, d->nkv, pos ? pos[i] : pos0 + i, -1, rc, rs);
    memset(dk_raw, 0, sizeof(float) * (size_t)n * kvd);
    ds_rmsnorm_bwd(dk_raw, g->k_norm, dk, k_raw, y->k_norm, k_inv, n * d->nkv, d->hd);
    if (d->style == DS_STYLE_QWEN3) {
        lin_dx(dsrc, dv, y->wv, n, kvd, d->H);
        lin_dw(g->wv, g->bv, dv, src, n, kvd, d->H);
    } else {
        ds_rmsnorm_bwd(dk_raw, NULL, dv, k_raw, NULL, v_inv, n * d->nkv, d->hd); // V = v_norm(k_raw)
    }
    lin_dx(dsrc, dk_raw, y->wk, n, kvd, d->H);
    lin_dw(g->wk, g->bk, dk_raw, src, n, kvd, d->H);
}

// ---- attention -----------------------------------------------------------------------------------

// Offsets of anchor a's probabilities in the flattened (A, nq, B, p_a + B) array.
static size_t probs_offset(const ds_tsample *s, int a, int nq, int B) {
    size_t off = 0;
    for (int i = 0; i < a; i++) off += (size_t)nq * B * (s->anchors[i] + B);
    return off;
}

typedef struct {
    const ds_drafter *d;
    const ds_tsample *s;
    const layer_acts *a;
    const float *dO;
    float *dQ, *dK, *dV, *dkc, *dvc;
    int B, max_ctx;
    float scale;
} attn_job;

// Job (anchor, head) `job` of attn_fwd.
static void attn_fwd_item(void *ctx, int job, int worker) {
    const attn_job *t = ctx;
    const ds_drafter *d = t->d;
    const ds_tsample *s = t->s;
    const layer_acts *a = t->a;
    const int nq = d->nq, hd = d->hd, qd = nq * hd, kvd = d->nkv * hd, group = nq / d->nkv, B = t->B;
    const float scale = t->scale;
    const int an = job / nq, h = job % nq, kh = h / group, p = s->anchors[an], n_ctx = p + B;
    float *P = a->probs + probs_offset(s, an, nq, B) + (size_t)h * B * n_ctx;
    for (int i = 0; i < B; i++) {
        const int row = an * B + i;
        const float *q = a->q + (size_t)row * qd + (size_t)h * hd;
        float *pi = P + (size_t)i * n_ctx;
        for (int j = 0; j < n_ctx; j++) {
            const float *k = j < p ? a->kc + (size_t)j * kvd + kh * hd : a->k + (size_t)(an * B + j - p) * kvd + kh * hd;
            pi[j] = scale * ds_dot(q, k, hd);
        }
        ds_softmax(pi, n_ctx);
        float *o = a->o + (size_t)row * qd + (size_t)h * hd;
        memset(o, 0, sizeof(float) * hd);
        for (int j = 0; j < n_ctx; j++) {
            const float *v = j < p ? a->vc + (size_t)j * kvd + kh * hd : a->v + (size_t)(an * B + j - p) * kvd + kh * hd;
            ds_axpy(o, pi[j], v, hd);
        }
    }
}

// O (M, qd) for every anchor block: queries Q, keys [Kc rows < p ; block K], values likewise.
static void attn_fwd(const ds_drafter *d, const ds_tsample *s, layer_acts *a, int B, float scale) {
    attn_job t = {.d = d, .s = s, .a = a, .B = B, .scale = scale};
    ds_parallel_for(s->n_anchors * d->nq, attn_fwd_item, &t);
}

// Kv head `kh` of attn_bwd (all its query heads and anchors, in a fixed order).
static void attn_bwd_item(void *ctx, int kh, int worker) {
    const attn_job *t = ctx;
    const ds_drafter *d = t->d;
    const ds_tsample *s = t->s;
    const layer_acts *a = t->a;
    const int nq = d->nq, hd = d->hd, qd = nq * hd, kvd = d->nkv * hd, group = nq / d->nkv, B = t->B;
    const float scale = t->scale, *dO = t->dO;
    float *dQ = t->dQ, *dK = t->dK, *dV = t->dV, *dkc = t->dkc, *dvc = t->dvc;
    float *dp = malloc(sizeof(float) * (size_t)t->max_ctx);
    for (int an = 0; an < s->n_anchors; an++)
        for (int h = kh * group; h < (kh + 1) * group; h++) {
            const int p = s->anchors[an], n_ctx = p + B;
            const float *P = a->probs + probs_offset(s, an, nq, B) + (size_t)h * B * n_ctx;
            for (int i = 0; i < B; i++) {
                const int row = an * B + i;
                const float *pi = P + (size_t)i * n_ctx, *doi = dO + (size_t)row * qd + (size_t)h * hd;
                const float *q = a->q + (size_t)row * qd + (size_t)h * hd;
                float *dq = dQ + (size_t)row * qd + (size_t)h * hd;
                double sum = 0;
                for (int j = 0; j < n_ctx; j++) {
                    const float *v = j < p ? a->vc + (size_t)j * kvd + kh * hd
                                           : a->v + (size_t)(an * B + j - p) * kvd + kh * hd;
                    dp[j] = ds_dot(doi, v, hd);
                    sum += (double)pi[j] * dp[j];
                }
                memset(dq, 0, sizeof(float) * hd);
                for (int j = 0; j < n_ctx; j++) {
                    const float ds = pi[j] * (dp[j] - (float)sum) * scale;
                    const int blk = j >= p;
                    const size_t krow = blk ? (size_t)(an * B + j - p) : (size_t)j;
                    const float *k = (blk ? a->k : a->kc) + krow * kvd + kh * hd;
                    float *dk = (blk ? dK : dkc) + krow * kvd + kh * hd;
                    float *dv = (blk ? dV : dvc) + krow * kvd + kh * hd;
                    ds_axpy(dq, ds, k, hd);
                    ds_axpy(dk, ds, q, hd);
                    ds_axpy(dv, pi[j], doi, hd);
                }
            }
        }
    free(dp);
}

// Backward: from dO (M, qd) to dQ (M, qd) (=), dK/dV of block rows (M, kvd) (+=) and of context
// rows dkc/dvc (Nc, kvd) (+=). dP_ij = dO_i·v_j; dS_ij = P_ij (dP_ij − Σ_j P_ij dP_ij);
// dq_i = scale Σ_j dS_ij k_j; dk_j += scale Σ_i dS_ij q_i; dv_j += Σ_i P_ij dO_i.
// Threads own kv heads, so the shared context gradients never race.
static void attn_bwd(const ds_drafter *d, const ds_tsample *s, const layer_acts *a, int B, float scale,
                     const float *dO, float *dQ, float *dK, float *dV, float *dkc, float *dvc) {
    int max_ctx = 0;
    for (int an = 0; an < s->n_anchors; an++) max_ctx = s->anchors[an] + B > max_ctx ? s->anchors[an] + B : max_ctx;
    attn_job t = {d, s, a, dO, dQ, dK, dV, dkc, dvc, B, max_ctx, scale};
    ds_parallel_for(d->nkv, attn_bwd_item, &t);
}

// ---- one layer -----------------------------------------------------------------------------------

// Layer l forward on ws->x (M, H) in place; keeps what the backward pass needs.
static void layer_fwd(const ds_tmodel *tm, ds_tws *ws, const ds_tsample *s, int l, int M, int B) {
    const ds_drafter *d = tm->d;
    const ds_tlayer *y = &tm->p.layers[l];
    layer_acts *a = &ws->L[l];
    const int H = d->H, F = d->F, qd = d->nq * d->hd;
    memcpy(a->x_in, ws->x, sizeof(float) * (size_t)M * H);
    ds_rmsnorm_fwd(a->n1, a->inv1, ws->x, y->input_norm, M, H, d->eps);
    lin(a->q_raw, a->n1, y->wq, y->bq, M, qd, H);
    ds_rmsnorm_fwd(a->q, a->q_inv, a->q_raw, y->q_norm, M * d->nq, d->hd, d->eps);
    for (int i = 0; i < M; i++) rope_row(d, a->q + (size_t)i * qd, d->nq, ws->pos[i], 1, ws->rcos, ws->rsin);
    kv_fwd(tm, y, a->n1, M, ws->pos, 0, a->k_raw, a->k_inv, a->k, a->v, a->v_inv, ws->rcos, ws->rsin);
    attn_fwd(d, s, a, B, d->attn_scale);
    lin(a->ao, a->o, y->wo, y->bo, M, H, qd);
    if (d->style == DS_STYLE_QWEN3) {
        for (size_t i = 0; i < (size_t)M * H; i++) ws->x[i] += a->ao[i];
        memcpy(a->x_mid, ws->x, sizeof(float) * (size_t)M * H);
        ds_rmsnorm_fwd(a->n2, a->inv2, ws->x, y->post_attn_norm, M, H, d->eps);
    } else {
        ds_rmsnorm_fwd(ws->dn, a->ao_inv, a->ao, y->post_attn_norm, M, H, d->eps); // dn: scratch here
        for (size_t i = 0; i < (size_t)M * H; i++) ws->x[i] += ws->dn[i];
        memcpy(a->x_mid, ws->x, sizeof(float) * (size_t)M * H);
        ds_rmsnorm_fwd(a->n2, a->inv2, ws->x, y->pre_ffn_norm, M, H, d->eps);
    }
    lin(a->hg, a->n2, y->w_gate, NULL, M, F, H);
    lin(a->hu, a->n2, y->w_up, NULL, M, F, H);
    for (size_t i = 0; i < (size_t)M * F; i++) {
        const float act = d->style == DS_STYLE_QWEN3 ? a->hg[i] * ds_sigmoid(a->hg[i]) : ds_gelu_tanh(a->hg[i], NULL);
        a->act[i] = act * a->hu[i];
    }
    lin(a->mo, a->act, y->w_down, NULL, M, H, F);
    if (d->style == DS_STYLE_QWEN3) {
        for (size_t i = 0; i < (size_t)M * H; i++) ws->x[i] += a->mo[i];
    } else {
        ds_rmsnorm_fwd(ws->dn, a->mo_inv, a->mo, y->post_ffn_norm, M, H, d->eps);
        for (size_t i = 0; i < (size_t)M * H; i++) ws->x[i] += ws->dn[i];
        memcpy(a->x_pre, ws->x, sizeof(float) * (size_t)M * H);
        ds_scale(ws->x, y->layer_scalar[0], (size_t)M * H);
    }
}

// Layer l backward: ws->dx (M, H) holds dL/d(layer output) and becomes dL/d(layer input). Context
// K/V gradients accumulate in ws->dkc / ws->dvc (reset per layer by the caller).
static void layer_bwd(const ds_tmodel *tm, ds_tws *ws, const ds_tsample *s, ds_tview *g, int l, int M, int B) {
    const ds_drafter *d = tm->d;
    const ds_tlayer *y = &tm->p.layers[l];
    ds_tlayer *gy = &g->layers[l];
    layer_acts *a = &ws->L[l];
    const int H = d->H, F = d->F, qd = d->nq * d->hd, kvd = d->nkv * d->hd;
    const size_t MH = (size_t)M * H;
    float *dx = ws->dx, *dmo = ws->dx2;
    if (d->style == DS_STYLE_GEMMA4) {
        // x_out = scalar · x_pre: d scalar = Σ dx ⊙ x_pre; dx_pre = scalar · dx
        double dsc = 0;
        for (size_t i = 0; i < MH; i++) dsc += (double)dx[i] * a->x_pre[i];
        gy->layer_scalar[0] += (float)dsc;
        for (size_t i = 0; i < MH; i++) dx[i] *= y->layer_scalar[0];
        // x_pre = x_mid + post_ffn_norm(mo)
        memset(dmo, 0, sizeof(float) * MH);
        ds_rmsnorm_bwd(dmo, gy->post_ffn_norm, dx, a->mo, y->post_ffn_norm, a->mo_inv, M, H);
    } else {
        memcpy(dmo, dx, sizeof(float) * MH); // x_out = x_mid + mo
    }
    // mo = act · Wdownᵀ;  act = f(hg) ⊙ hu
    float *dact = ws->dtmp;
    memset(dact, 0, sizeof(float) * (size_t)M * F);
    lin_dx(dact, dmo, y->w_down, M, H, F);
    lin_dw(gy->w_down, NULL, dmo, a->act, M, H, F);
    for (size_t i = 0; i < (size_t)M * F; i++) {
        float f, df;
        if (d->style == DS_STYLE_QWEN3) {
            const float sg = ds_sigmoid(a->hg[i]);
            f = a->hg[i] * sg;
            df = sg * (1.0f + a->hg[i] * (1.0f - sg)); // silu'
        } else {
            f = ds_gelu_tanh(a->hg[i], &df);
        }
        ws->dhg[i] = dact[i] * a->hu[i] * df;
        ws->dhu[i] = dact[i] * f;
    }
    float *dn2 = ws->dn;
    memset(dn2, 0, sizeof(float) * MH);
    lin_dx(dn2, ws->dhg, y->w_gate, M, F, H);
    lin_dx(dn2, ws->dhu, y->w_up, M, F, H);
    lin_dw(gy->w_gate, NULL, ws->dhg, a->n2, M, F, H);
    lin_dw(gy->w_up, NULL, ws->dhu, a->n2, M, F, H);
    // n2 = norm(x_mid): dx_mid = dx (residual) + norm backward
    ds_rmsnorm_bwd(dx, d->style == DS_STYLE_QWEN3 ? gy->post_attn_norm : gy->pre_ffn_norm, dn2, a->x_mid,
            d->style == DS_STYLE_QWEN3 ? y->post_attn_norm : y->pre_ffn_norm, a->inv2, M, H);
    // x_mid = x_in + ao (Gemma: + post_attn_norm(ao))
    float *dao = ws->dx2;
    if (d->style == DS_STYLE_QWEN3) {
        memcpy(dao, dx, sizeof(float) * MH);
    } else {
        memset(dao, 0, sizeof(float) * MH);
        ds_rmsnorm_bwd(dao, gy->post_attn_norm, dx, a->ao, y->post_attn_norm, a->ao_inv, M, H);
    }
    // ao = o · Woᵀ + bo
    memset(ws->do_, 0, sizeof(float) * (size_t)M * qd);
    lin_dx(ws->do_, dao, y->wo, M, H, qd);
    lin_dw(gy->wo, gy->bo, dao, a->o, M, H, qd);
    // attention
    memset(ws->dk, 0, sizeof(float) * (size_t)M * kvd);
    memset(ws->dv, 0, sizeof(float) * (size_t)M * kvd);
    attn_bwd(d, s, a, B, d->attn_scale, ws->do_, ws->dq, ws->dk, ws->dv, ws->dkc, ws->dvc);
    // q = RoPE(q_norm(n1·Wqᵀ + bq))
    for (int i = 0; i < M; i++) rope_row(d, ws->dq + (size_t)i * qd, d->nq, ws->pos[i], -1, ws->rcos, ws->rsin);
    float *dq_raw = ws->dtmp;
    memset(dq_raw, 0, sizeof(float) * (size_t)M * qd);
    ds_rmsnorm_bwd(dq_raw, gy->q_norm, ws->dq, a->q_raw, y->q_norm, a->q_inv, M * d->nq, d->hd);
    float *dn1 = ws->dn;
    memset(dn1, 0, sizeof(float) * MH);
    lin_dx(dn1, dq_raw, y->wq, M, qd, H);
    lin_dw(gy->wq, gy->bq, dq_raw, a->n1, M, qd, H);
    kv_bwd(tm, y, gy, a->n1, M, ws->pos, 0, a->k_raw, a->k_inv, a->v_inv, ws->dk, ws->dv, ws->dtmp, dn1, ws->rcos,
           ws->rsin);
    // n1 = norm(x_in); the residual already carries dx
    ds_rmsnorm_bwd(dx, gy->input_norm, dn1, a->x_in, y->input_norm, a->inv1, M, H);
}

// ---- heads and losses ----------------------------------------------------------------------------

// z = U + bias(prev) for every row; zc; keeps the head activations.
static void heads_fwd(const ds_tmodel *tm, ds_tws *ws, int M, int B) {
    const ds_drafter *d = tm->d;
    const ds_tview *p = &tm->p;
    const int H = d->H, V = d->V, r = d->r;
    memcpy(ws->z, ws->u, sizeof(float) * (size_t)M * V);
    if (r > 0) {
        for (int i = 0; i < M; i++) memcpy(ws->e + (size_t)i * r, p->w1 + (size_t)ws->prev[i] * r, sizeof(float) * r);
        if (d->markov == DS_MARKOV_VANILLA) {
            memcpy(ws->vh, ws->e, sizeof(float) * (size_t)M * r);
        } else if (d->markov == DS_MARKOV_GATED) { // v = σ(Wg [h ; e] + bg) ⊙ e
            for (int i = 0; i < M; i++) {
                memcpy(ws->gin + (size_t)i * (H + r), ws->h + (size_t)i * H, sizeof(float) * H);
                memcpy(ws->gin + (size_t)i * (H + r) + H, ws->e + (size_t)i * r, sizeof(float) * r);
            }
            lin(ws->gate, ws->gin, p->gate_w, p->gate_b, M, r, H + r);
            for (size_t i = 0; i < (size_t)M * r; i++) {
                ws->gate[i] = ds_sigmoid(ws->gate[i]);
                ws->vh[i] = ws->gate[i] * ws->e[i];
            }
        } else { // rnn, slot by slot: z_in = [s_{k-1} ; e ; h], (g, c, o) = Wj z_in + bj
            const int A = M / B;
            float *S = ws->st; // (A, B + 1, r): state before slot k at index k
            for (int an = 0; an < A; an++) memset(S + (size_t)an * (B + 1) * r, 0, sizeof(float) * r);
            for (int k = 0; k < B; k++) {
                for (int an = 0; an < A; an++) {
                    const int row = an * B + k;
                    float *zi = ws->zin + (size_t)row * (2 * r + H);
                    memcpy(zi, S + ((size_t)an * (B + 1) + k) * r, sizeof(float) * r);
                    memcpy(zi + r, ws->e + (size_t)row * r, sizeof(float) * r);
                    memcpy(zi + 2 * r, ws->h + (size_t)row * H, sizeof(float) * H);
                    float *j = ws->jout + (size_t)row * 3 * r;
                    lin(j, zi, p->joint_w, p->joint_b, 1, 3 * r, 2 * r + H);
                    const float *sp = S + ((size_t)an * (B + 1) + k) * r;
                    float *sn = S + ((size_t)an * (B + 1) + k + 1) * r;
                    for (int q = 0; q < r; q++) {
                        const float gg = ds_sigmoid(j[q]);
                        sn[q] = gg * sp[q] + (1.0f - gg) * tanhf(j[r + q]);
                        ws->vh[(size_t)row * r + q] = tanhf(j[2 * r + q]);
                    }
                }
            }
        }
        // z += vh · W2ᵀ
        sgemm_rows(ws->z, ws->vh, p->w2, M, V, r, 1, 1.0f);
    }
    if (p->conf_w)
        for (int i = 0; i < M; i++) {
            float zc = p->conf_b[0] + ds_dot(p->conf_w, ws->h + (size_t)i * H, H);
            if (d->info.confidence_with_markov) zc += ds_dot(p->conf_w + H, ws->e + (size_t)i * r, r);
            ws->zc[i] = zc;
        }
}

// Losses per labeled row: turns ws->z into dL/dz and fills ws->dzc; adds to the stats.
static void losses(const ds_tmodel *tm, ds_tws *ws, const ds_loss_weights *lw, int M, int B, ds_loss_stats *st) {
    const ds_drafter *d = tm->d;
    const int V = d->V;
    const int has_conf = tm->p.conf_w != NULL;
    double ce_s = 0, l1_s = 0, bce_s = 0, kl_s = 0, w_s = 0, ptau = 0;
    int slots = 0, blocks = 0;
    double surv = 1;
    for (int i = 0; i < M; i++) {
        float *z = ws->z + (size_t)i * V;
        const float w = ws->w[i];
        ws->dzc[i] = 0;
        if (i % B == 0) {
            surv = 1;
            if (w > 0) {
                blocks++;
                ptau += 1;
            }
        }
        if (w <= 0) {
            memset(z, 0, sizeof(float) * V);
            continue;
        }
        ds_softmax(z, V); // z now holds p_d
        const float *t = ws->t + (size_t)i * V;
        const int y = ws->label[i];
        const double ce = -log(fmax(z[y], 1e-30));
        double l1 = 0, gs = 0;
        for (int v = 0; v < V; v++) {
            const float diff = z[v] - t[v];
            l1 += fabsf(diff);
            gs += (diff > 0 ? 1.0 : diff < 0 ? -1.0 : 0.0) * z[v];
        }
        float kl = 0; // KL(t ‖ p_d), its gradient in z p_d − t; only when weighted (V logs a row: ~17% of a step)
        if (lw->kl != 0)
            for (int v = 0; v < V; v++)
                if (t[v] > 0) kl += t[v] * logf(t[v] / fmaxf(z[v], 1e-30f));
        const float cstar = (float)fmin(1.0, fmax(0.0, 1.0 - 0.5 * l1)); // detached soft label
        surv *= cstar;
        ptau += surv;
        // dz = w·(ce·(p − onehot(y)) + l1·p ⊙ (sign(p − t) − Σ_v sign·p) + kl·(p − t))
        for (int v = 0; v < V; v++) {
            const float diff = z[v] - t[v];
            const float sg = diff > 0 ? 1.0f : diff < 0 ? -1.0f : 0.0f;
            z[v] = w * (lw->ce * (z[v] - (v == y)) + lw->l1 * z[v] * (sg - (float)gs) + lw->kl * diff);
        }
        double bce = 0;
        if (has_conf) {
            const float zc = ws->zc[i];
            bce = fmax(zc, 0) - zc * cstar + log1p(exp(-fabs(zc)));
            ws->dzc[i] = w * lw->conf * (ds_sigmoid(zc) - cstar);
        }
        ce_s += w * ce;
        l1_s += w * l1;
        kl_s += w * kl;
        bce_s += w * bce;
        w_s += w;
        slots++;
    }
    st->ce += ce_s;
    st->l1 += l1_s;
    st->conf += bce_s;
    st->kl += kl_s;
    st->loss += lw->ce * ce_s + lw->l1 * l1_s + lw->conf * bce_s + lw->kl * kl_s;
    st->weight += w_s;
    st->slots += slots;
    st->ptau += ptau;
    st->blocks += blocks;
}

// Backward of heads_fwd from dz (ws->z) and dzc: adds to dU (= dz, written to ws->u), dh
// (ws->dx), and the head gradients.
static void heads_bwd(const ds_tmodel *tm, ds_tws *ws, ds_tview *g, int M, int B) {
    const ds_drafter *d = tm->d;
    const ds_tview *p = &tm->p;
    const int H = d->H, V = d->V, r = d->r;
    float *dh = ws->dx;
    memset(dh, 0, sizeof(float) * (size_t)M * H);
    if (r > 0) {
        float *dvh = ws->dtmp, *de = ws->de;
        // z = U + vh·W2ᵀ: dvh = dz·W2; dW2 += dzᵀ·vh
        sgemm_rows(dvh, ws->z, p->w2, M, r, V, 0, 0.0f);
        lin_dw(g->w2, NULL, ws->z, ws->vh, M, V, r);
        memset(de, 0, sizeof(float) * (size_t)M * r);
        if (d->markov == DS_MARKOV_VANILLA) {
            memcpy(de, dvh, sizeof(float) * (size_t)M * r);
        } else if (d->markov == DS_MARKOV_GATED) {
            // vh = gate ⊙ e: dgate_pre = dvh ⊙ e ⊙ gate(1 − gate); de += dvh ⊙ gate
            float *dpre = ws->dr;
            for (size_t i = 0; i < (size_t)M * r; i++) {
                const float gt = ws->gate[i];
                dpre[i] = dvh[i] * ws->e[i] * gt * (1.0f - gt);
                de[i] = dvh[i] * gt;
            }
            lin_dw(g->gate_w, g->gate_b, dpre, ws->gin, M, r, H + r);
            float *dgin = ws->dtmp; // (M, H + r); dvh no longer needed
            memset(dgin, 0, sizeof(float) * (size_t)M * (H + r));
            lin_dx(dgin, dpre, p->gate_w, M, r, H + r);
            for (int i = 0; i < M; i++) {
                ds_add(dh + (size_t)i * H, dgin + (size_t)i * (H + r), H);
                ds_add(de + (size_t)i * r, dgin + (size_t)i * (H + r) + H, r);
            }
        } else { // rnn, backwards through the slots
            const int A = M / B;
            const float *S = ws->st;
            float *ds = malloc(sizeof(float) * (size_t)A * r * 2), *dj = malloc(sizeof(float) * 3 * r);
            float *dz_in = malloc(sizeof(float) * (2 * r + H));
            memset(ds, 0, sizeof(float) * (size_t)A * r);
            for (int k = B - 1; k >= 0; k--)
                for (int an = 0; an < A; an++) {
                    const int row = an * B + k;
                    const float *j = ws->jout + (size_t)row * 3 * r, *sp = S + ((size_t)an * (B + 1) + k) * r;
                    float *dsa = ds + (size_t)an * r;
                    for (int q = 0; q < r; q++) {
                        const float gg = ds_sigmoid(j[q]), tc = tanhf(j[r + q]), to = tanhf(j[2 * r + q]);
                        dj[q] = dsa[q] * (sp[q] - tc) * gg * (1.0f - gg);          // d gate pre
                        dj[r + q] = dsa[q] * (1.0f - gg) * (1.0f - tc * tc);        // d candidate pre
                        dj[2 * r + q] = dvh[(size_t)row * r + q] * (1.0f - to * to); // d output pre
                        dsa[q] *= gg;                                                // through s_{k-1}
                    }
                    lin_dw(g->joint_w, g->joint_b, dj, ws->zin + (size_t)row * (2 * r + H), 1, 3 * r, 2 * r + H);
                    memset(dz_in, 0, sizeof(float) * (2 * r + H));
                    lin_dx(dz_in, dj, p->joint_w, 1, 3 * r, 2 * r + H);
                    ds_add(dsa, dz_in, r);
                    ds_add(de + (size_t)row * r, dz_in + r, r);
                    ds_add(dh + (size_t)row * H, dz_in + 2 * r, H);
                }
            free(ds);
            free(dj);
            free(dz_in);
        }
        if (p->conf_w && d->info.confidence_with_markov)
            for (int i = 0; i < M; i++) ds_axpy(de + (size_t)i * r, ws->dzc[i], p->conf_w + H, r);
        for (int i = 0; i < M; i++) ds_add(g->w1 + (size_t)ws->prev[i] * r, de + (size_t)i * r, r); // gather backward
    }
    if (p->conf_w)
        for (int i = 0; i < M; i++) {
            if (ws->dzc[i] == 0) continue;
            const float dz = ws->dzc[i];
            g->conf_b[0] += dz;
            ds_axpy(g->conf_w, dz, ws->h + (size_t)i * H, H);
            if (d->info.confidence_with_markov) ds_axpy(g->conf_w + H, dz, ws->e + (size_t)i * r, r);
            ds_axpy(dh + (size_t)i * H, dz, p->conf_w, H);
        }
}

// ---- the whole sequence --------------------------------------------------------------------------

ds_status ds_train_sequence(const ds_tmodel *tm, ds_tws *ws, const ds_tsample *s, const ds_loss_weights *lw,
                            float *grad, ds_loss_stats *st) {
    const ds_drafter *d = tm->d;
    const int B = d->info.block_size, A = s->n_anchors, M = A * B, H = d->H, V = d->V;
    const int kvd = d->nkv * d->hd, T = d->T;
    if (A <= 0) return DS_OK;
    int Nc = 0;
    size_t P = 0;
    for (int a = 0; a < A; a++) {
        const int p = s->anchors[a];
        if (p < 0 || p + 1 >= s->n || p < s->n_prompt)
            return ds_fail(DS_ERR_INVALID, "anchor %d is not a valid position (sequence of %d, prompt %d)", p, s->n,
                           s->n_prompt);
        Nc = p > Nc ? p : Nc;
        P += (size_t)d->nq * B * (p + B);
    }
    ds_status stt = reserve(ws, (size_t)M, (size_t)(Nc ? Nc : 1), P);
    if (stt) return stt;
    ds_tlayer *glayers = malloc(sizeof(ds_tlayer) * (size_t)d->info.n_layers);
    if (!glayers) return DS_ERR_NOMEM;
    ds_tview g = {.layers = glayers};
    ds_tmodel_views(tm, grad, &g);

    // Block rows: inputs, positions, teacher-forced prevs, labels and weights.
    for (int a = 0; a < A; a++) {
        const int p = s->anchors[a];
        int valid = 1;
        for (int k = 0; k < B; k++) {
            const int row = a * B + k, q = p + 1 + k;
            ws->pos[row] = p + k;
            ws->prev[row] = s->tokens[p + k < s->n ? p + k : s->n - 1]; // prev_0 = anchor, prev_k = label_{k-1}
            valid = valid && q < s->n && q >= s->n_prompt;
            ws->label[row] = valid ? s->tokens[q] : 0;
            ws->w[row] = valid ? expf(-(float)k / lw->decay) : 0.0f;
            ds_weight_row_f32(&d->embed, k == 0 ? s->tokens[p] : d->info.mask_token_id, ws->x + (size_t)row * H);
            if (d->embed_scale != 1.0f) ds_scale(ws->x + (size_t)row * H, d->embed_scale, (size_t)H);
        }
    }
    // Context rows 0..Nc-1: C = RMSNorm_hn(R·fcᵀ); per layer K/V.
    if (Nc) {
        lin(ws->ctx_a, s->taps, tm->p.fc, NULL, Nc, H, T * H);
        ds_rmsnorm_fwd(ws->ctx_c, ws->ctx_inv, ws->ctx_a, tm->p.hidden_norm, Nc, H, d->eps);
        for (int l = 0; l < d->info.n_layers; l++) {
            layer_acts *a = &ws->L[l];
            kv_fwd(tm, &tm->p.layers[l], ws->ctx_c, Nc, NULL, 0, a->kc_raw, a->kc_inv, a->kc, a->vc, a->vc_inv, ws->rcos,
                   ws->rsin);
        }
    }
    for (int l = 0; l < d->info.n_layers; l++) layer_fwd(tm, ws, s, l, M, B);
    // h = RMSNorm(x); U = h·lm_headᵀ (Gemma: softcap, keeping tanh for the backward pass in u)
    ds_rmsnorm_fwd(ws->h, ws->inv_f, ws->x, tm->p.norm, M, H, d->eps);
    lin(ws->u, ws->h, tm->lm_head, NULL, M, V, H);
    if (d->softcap > 0) ds_softcap(ws->u, (size_t)M * V, d->softcap);
    // Target distributions t = softmax(softcap(lm_head · G[p + k])) for labeled rows (the target's
    // own softcap, as its logits have it; none for Llama/Qwen).
    const float tc = s->target_softcap;
    for (int i = 0; i < M; i++) {
        if (ws->w[i] <= 0) continue;
        float *ti = ws->t + (size_t)i * V;
        lin(ti, s->hidden + (size_t)ws->pos[i] * H, tm->lm_head, NULL, 1, V, H);
        if (tc > 0) ds_softcap(ti, (size_t)V, tc);
        ds_softmax(ti, V);
    }
    heads_fwd(tm, ws, M, B);
    losses(tm, ws, lw, M, B, st);

    // ---- backward ----
    heads_bwd(tm, ws, &g, M, B); // ws->z = dU, ws->dx = dh (from the heads)
    if (d->softcap > 0) // U = c·tanh(U0/c): dU0 = dU·(1 − (U/c)²)
        for (size_t i = 0; i < (size_t)M * V; i++) {
            const float t = ws->u[i] / d->softcap;
            ws->z[i] *= 1.0f - t * t;
        }
    lin_dx(ws->dx, ws->z, tm->lm_head, M, V, H); // dh += dU·lm_head (frozen: no weight gradient)
    memcpy(ws->dn, ws->dx, sizeof(float) * (size_t)M * H);
    memset(ws->dx, 0, sizeof(float) * (size_t)M * H);
    ds_rmsnorm_bwd(ws->dx, g.norm, ws->dn, ws->x, tm->p.norm, ws->inv_f, M, H);
    if (Nc) memset(ws->dctx, 0, sizeof(float) * (size_t)Nc * H);
    for (int l = d->info.n_layers - 1; l >= 0; l--) {
        if (Nc) {
            memset(ws->dkc, 0, sizeof(float) * (size_t)Nc * kvd);
            memset(ws->dvc, 0, sizeof(float) * (size_t)Nc * kvd);
        }
        layer_bwd(tm, ws, s, &g, l, M, B);
        if (Nc) {
            layer_acts *a = &ws->L[l];
            kv_bwd(tm, &tm->p.layers[l], &g.layers[l], ws->ctx_c, Nc, NULL, 0, a->kc_raw, a->kc_inv, a->vc_inv, ws->dkc,
                   ws->dvc, ws->dkc_raw, ws->dctx, ws->rcos, ws->rsin);
        }
    }
    if (Nc) { // C = RMSNorm_hn(a), a = R·fcᵀ
        float *da = ws->dctx_a;
        memset(da, 0, sizeof(float) * (size_t)Nc * H);
        ds_rmsnorm_bwd(da, g.hidden_norm, ws->dctx, ws->ctx_a, tm->p.hidden_norm, ws->ctx_inv, Nc, H);
        lin_dw(g.fc, NULL, da, s->taps, Nc, H, T * H);
    }
    free(glayers);
    return DS_OK;
}
