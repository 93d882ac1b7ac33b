// dspark inflate: a small llama target and its DeepSpec drafter grown to a realistic size while
// computing exactly what they computed (a memory-bound target with real acceptance, for measuring
// speculation end to end). From the small pair (hidden h, FFN f, L layers) it writes
// OUT/target (a Hugging Face LlamaForCausalLM directory, tokenizer as tokenizer.gguf) and
// OUT/drafter (the matching DeepSpec drafter) of hidden H, FFN F, L' layers:
//   - the residual stream is zero-padded: embedding columns >= h are 0, and every write into the
//     residual (o_proj, down_proj rows >= h; the drafter's fc rows >= h) is 0, so padded
//     dimensions stay exactly 0 through every layer;
//   - RMSNorm over H instead of h dimensions: weight x sqrt(h/H) and eps x h/H;
//   - attention keeps the original heads (head_dim written explicitly);
//   - FFN neurons beyond f have zero down_proj columns; layers beyond L have zero o_proj and
//     down_proj (identities); the real layer l sits at l·L'/L and taps follow it;
//   - every other padded weight is random (uniform, 1/sqrt(fan-in)), so kernels read real bytes;
//   - the drafter is padded the same way (its hidden size is the target's, its FFN F), and its
//     q/k projections are scaled by sqrt(h/H), which its per-head q/k norms (eps x h/H) undo exactly.
// Matrices are written in `dtype` (vectors stay f32), atomically (OUT appears complete or not at all).
//
// dspark inflate (the API: include/dspark_jobs.h). Every output tensor is one call of emit(): a source tensor (or
// none) placed into a bigger one through a row map and a column map, whose entries name a source
// row/column, or say the element is 0 or random. The whole construction is the list of maps below.
#include "dspark_jobs.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/status.h"
#include "draft/drafter.h"
#include "io/atomic.h"
#include "io/json.h"
#include "io/safetensors.h"
#include "kernels/half.h"
#include "model/hf_export.h"
#include "model/model.h"
#include "quant/gguf_export.h"

ds_inflate_params ds_inflate_default(void) {
    ds_inflate_params p;
    memset(&p, 0, sizeof p);
    p.hidden = 2048;
    p.ffn = 5632;
    p.layers = 24;
    p.dtype = DS_BF16;
    p.seed = 1;
    return p;
}

enum { RAND = -1, ZERO = -2 }; // map entries besides source indices

// The tensors of one output directory, kept in memory until written.
typedef struct {
    const ds_inflate_params *p;
    ds_st_writer *w;
    void **bufs;
    int n_bufs, cap_bufs;
    uint64_t stream; // random stream of the next tensor
    const char *stage;
    int i, n;        // progress: tensors emitted, expected
    size_t bytes;
} out_dir;

static ds_status out_init(out_dir *o, const ds_inflate_params *p, const char *stage, int n, uint64_t stream0) {
    memset(o, 0, sizeof *o);
    o->p = p;
    o->stage = stage;
    o->n = n;
    o->stream = stream0;
    o->w = ds_st_writer_new();
    return o->w ? DS_OK : ds_fail(DS_ERR_NOMEM, "out of memory");
}

static void out_free(out_dir *o) {
    for (int i = 0; i < o->n_bufs; i++) free(o->bufs[i]);
    free(o->bufs);
    ds_st_writer_free(o->w);
    memset(o, 0, sizeof *o);
}

// A map of n entries: 0..real-1 are the identity, the rest `pad`.
static int *prefix(int n, int real, int pad) {
    int *m = malloc(sizeof(int) * (size_t)(n > 0 ? n : 1));
    if (m)
        for (int i = 0; i < n; i++) m[i] = i < real ? i : pad;
    return m;
}

// Output (R, C) (n_dims 1: a vector of C) in `dt`: element (i, j) is 0 when rmap[i] or cmap[j] is
// ZERO; scale·src[rmap[i]][cmap[j]] when both are source indices; otherwise uniform random in
// ±1/sqrt(C). The maps are consumed (freed).
static ds_status emit(out_dir *o, const char *name, int n_dims, ds_dtype dt, const ds_hf_tensor *src, float scale,
                      int R, int *rmap, int C, int *cmap) {
    ds_status st = DS_OK;
    const size_t es = ds_dtype_size(dt);
    void *buf = NULL;
    float *row = NULL;
    if (o->p->progress) o->p->progress(o->p->progress_ctx, o->stage, o->i, o->n, name);
    o->i++;
    if (o->p->interrupted && *o->p->interrupted) {
        st = ds_fail(DS_ERR_INTERRUPTED, "interrupted; nothing was written");
        goto done;
    }
    if (!rmap || !cmap) {
        st = ds_fail(DS_ERR_NOMEM, "out of memory");
        goto done;
    }
    if (o->n_bufs == o->cap_bufs) {
        const int cap = o->cap_bufs ? 2 * o->cap_bufs : 64;
        void **b = realloc(o->bufs, sizeof(void *) * (size_t)cap);
        if (!b) {
            st = ds_fail(DS_ERR_NOMEM, "out of memory");
            goto done;
        }
        o->bufs = b;
        o->cap_bufs = cap;
    }
    const size_t n = (size_t)R * (size_t)C;
    buf = malloc(n * es + 1);
    row = src ? malloc(sizeof(float) * (size_t)src->shape[src->n_dims - 1] + 1) : NULL;
    if (!buf || (src && !row)) {
        st = ds_fail(DS_ERR_NOMEM, "out of memory writing '%s' (%d x %d)", name, R, C);
        goto done;
    }
    ds_rng rng = ds_rng_init(o->p->seed, o->stream++);
    const float amp = 1.0f / sqrtf((float)C);
    for (int i = 0; i < R; i++) {
        if (src && rmap[i] >= 0) ds_hf_row(src, rmap[i], row);
        for (int j = 0; j < C; j++) {
            float v;
            if (rmap[i] == ZERO || cmap[j] == ZERO) v = 0.0f;
            else if (src && rmap[i] >= 0 && cmap[j] >= 0) v = scale * row[cmap[j]];
            else v = amp * (float)(2.0 * ds_rng_uniform(&rng) - 1.0);
            const size_t k = (size_t)i * (size_t)C + (size_t)j;
            if (dt == DS_F32) ((float *)buf)[k] = v;
            else ((uint16_t *)buf)[k] = ds_f32_to_bf16(v);
        }
    }
    const int64_t shape[2] = {n_dims == 2 ? R : C, C};
    if ((st = ds_st_writer_add(o->w, name, dt, n_dims, shape, buf))) goto done;
    o->bufs[o->n_bufs++] = buf;
    buf = NULL;
    o->bytes += n * es;
done:
    free(buf);
    free(row);
    free(rmap);
    free(cmap);
    return st;
}

// A matrix of `dt` / a vector (f32) from a source with the given maps.
#define MAT(o, name, src, scale, R, rmap, C, cmap) emit(o, name, 2, (o)->p->dtype, src, scale, R, rmap, C, cmap)
#define VEC(o, name, src, scale, C, cmap) emit(o, name, 1, DS_F32, src, scale, 1, prefix(1, 1, 0), C, cmap)

// A drafter tensor (stored weight or f32 vector) as a source.
static const ds_hf_tensor *wsrc(ds_hf_tensor *t, const ds_weight *w) {
    memset(t, 0, sizeof *t);
    t->n_dims = 2;
    t->shape[0] = w->rows;
    t->shape[1] = w->cols;
    t->w = *w;
    return t;
}

static const ds_hf_tensor *vsrc(ds_hf_tensor *t, const float *v, int n) {
    memset(t, 0, sizeof *t);
    t->n_dims = 1;
    t->shape[0] = n;
    t->vec = v;
    return t;
}

// ---- the target -----------------------------------------------------------------------------------

static ds_status build_target(out_dir *o, const ds_model *m, int H, int F, int Lp, const int *src_of) {
    const ds_model_info *in = &m->info;
    const int h = in->dim, f = in->ffn_dim, V = in->vocab_size;
    const int qd = in->n_heads * in->head_dim, kvd = in->n_kv_heads * in->head_dim;
    const float s = sqrtf((float)h / (float)H);
    ds_hf_tensor t;
    ds_status st;
    ds_hf_tensor_of(m, DS_HF_EMBED, 0, &t);
    if ((st = MAT(o, "model.embed_tokens.weight", &t, 1, V, prefix(V, V, 0), H, prefix(H, h, ZERO)))) return st;
    ds_hf_tensor_of(m, DS_HF_LM_HEAD, 0, &t);
    if ((st = MAT(o, "lm_head.weight", &t, 1, V, prefix(V, V, 0), H, prefix(H, h, RAND)))) return st;
    ds_hf_tensor_of(m, DS_HF_NORM, 0, &t);
    if ((st = VEC(o, "model.norm.weight", &t, s, H, prefix(H, h, RAND)))) return st;
    char n[128];
    for (int p = 0; p < Lp; p++) {
        const int l = src_of[p]; // -1: an identity layer
        ds_hf_tensor q, k, v, wo, g, u, dn, an, fn;
        if (l >= 0) {
            ds_hf_tensor_of(m, DS_HF_Q, l, &q);
            ds_hf_tensor_of(m, DS_HF_K, l, &k);
            ds_hf_tensor_of(m, DS_HF_V, l, &v);
            ds_hf_tensor_of(m, DS_HF_O, l, &wo);
            ds_hf_tensor_of(m, DS_HF_GATE, l, &g);
            ds_hf_tensor_of(m, DS_HF_UP, l, &u);
            ds_hf_tensor_of(m, DS_HF_DOWN, l, &dn);
            ds_hf_tensor_of(m, DS_HF_ATTN_NORM, l, &an);
            ds_hf_tensor_of(m, DS_HF_FFN_NORM, l, &fn);
        }
        const int real = l >= 0;
        const ds_hf_tensor *Q = real ? &q : NULL, *K = real ? &k : NULL, *Vv = real ? &v : NULL,
                           *O = real ? &wo : NULL, *G = real ? &g : NULL, *U = real ? &u : NULL,
                           *D = real ? &dn : NULL, *AN = real ? &an : NULL, *FN = real ? &fn : NULL;
        // Source extents: all of them for a real layer, nothing for an identity layer (whose
        // residual writes, o_proj and down_proj, are entirely zero).
        const int hr = real ? h : 0, fr = real ? f : 0, qr = real ? qd : 0, kr = real ? kvd : 0;
#define NAME(x) (snprintf(n, sizeof n, "model.layers.%d.%s", p, x), n)
        if ((st = MAT(o, NAME("self_attn.q_proj.weight"), Q, 1, qd, prefix(qd, qr, RAND), H, prefix(H, hr, RAND))) ||
            (st = MAT(o, NAME("self_attn.k_proj.weight"), K, 1, kvd, prefix(kvd, kr, RAND), H, prefix(H, hr, RAND))) ||
            (st = MAT(o, NAME("self_attn.v_proj.weight"), Vv, 1, kvd, prefix(kvd, kr, RAND), H, prefix(H, hr, RAND))) ||
            (st = MAT(o, NAME("self_attn.o_proj.weight"), O, 1, H, prefix(H, hr, ZERO), qd, prefix(qd, qr, RAND))) ||
            (st = MAT(o, NAME("mlp.gate_proj.weight"), G, 1, F, prefix(F, fr, RAND), H, prefix(H, hr, RAND))) ||
            (st = MAT(o, NAME("mlp.up_proj.weight"), U, 1, F, prefix(F, fr, RAND), H, prefix(H, hr, RAND))) ||
            (st = MAT(o, NAME("mlp.down_proj.weight"), D, 1, H, prefix(H, hr, ZERO), F, prefix(F, fr, ZERO))) ||
            (st = VEC(o, NAME("input_layernorm.weight"), AN, s, H, prefix(H, hr, RAND))) ||
            (st = VEC(o, NAME("post_attention_layernorm.weight"), FN, s, H, prefix(H, hr, RAND))))
            return st;
#undef NAME
    }
    return DS_OK;
}

static void set_num(cJSON *c, const char *key, double v) {
    cJSON_DeleteItemFromObjectCaseSensitive(c, key);
    cJSON_AddNumberToObject(c, key, v);
}

static ds_status target_config(const ds_model *m, const ds_inflate_params *p, const int *layer_of, const char *src,
                               const char *path) {
    const ds_model_info *in = &m->info;
    cJSON *c = ds_hf_config(m);
    if (!c) return ds_fail(DS_ERR_NOMEM, "out of memory");
    set_num(c, "hidden_size", p->hidden);
    set_num(c, "intermediate_size", p->ffn);
    set_num(c, "num_hidden_layers", p->layers);
    set_num(c, "rms_norm_eps", (double)in->norm_eps * in->dim / p->hidden);
    cJSON_DeleteItemFromObjectCaseSensitive(c, "tie_word_embeddings");
    cJSON_AddFalseToObject(c, "tie_word_embeddings");
    cJSON_DeleteItemFromObjectCaseSensitive(c, "torch_dtype");
    cJSON_AddStringToObject(c, "torch_dtype", p->dtype == DS_BF16 ? "bfloat16" : "float32");
    cJSON *inf = cJSON_AddObjectToObject(c, "inflated_from");
    const char *base = strrchr(src, '/');
    cJSON_AddStringToObject(inf, "model", base ? base + 1 : src);
    cJSON_AddNumberToObject(inf, "hidden_size", in->dim);
    cJSON_AddNumberToObject(inf, "intermediate_size", in->ffn_dim);
    cJSON_AddNumberToObject(inf, "num_hidden_layers", in->n_layers);
    cJSON_AddItemToObject(inf, "layer_map", cJSON_CreateIntArray(layer_of, in->n_layers));
    ds_status st = ds_json_save(c, path);
    cJSON_Delete(c);
    return st;
}

// ---- the drafter ----------------------------------------------------------------------------------

static int drafter_tensor_count(const ds_drafter *d) {
    int n = 5 + 11 * d->info.n_layers;
    if (d->r > 0) n += 2 + (d->markov == DS_MARKOV_GATED || d->markov == DS_MARKOV_RNN ? 2 : 0);
    if (d->conf_w) n += 2;
    return n;
}

static ds_status build_drafter(out_dir *o, const ds_drafter *d, int H, int F) {
    const int h = d->H, V = d->V, Fd = d->F, T = d->T, r = d->r, hd = d->hd;
    const int qd = d->nq * hd, kvd = d->nkv * hd;
    const float s = sqrtf((float)h / (float)H);
    ds_hf_tensor t;
    ds_status st;
    if ((st = MAT(o, "embed_tokens.weight", wsrc(&t, &d->embed), 1, V, prefix(V, V, 0), H, prefix(H, h, ZERO))) ||
        (st = MAT(o, "lm_head.weight", wsrc(&t, &d->lm_head), 1, V, prefix(V, V, 0), H, prefix(H, h, RAND))))
        return st;
    // fc: T tap blocks of H columns, each holding the small drafter's block of h in front.
    int *fc_cols = malloc(sizeof(int) * (size_t)T * (size_t)H);
    if (fc_cols)
        for (int b = 0; b < T; b++)
            for (int j = 0; j < H; j++) fc_cols[b * H + j] = j < h ? b * h + j : RAND;
    if ((st = MAT(o, "fc.weight", wsrc(&t, &d->fc), 1, H, prefix(H, h, ZERO), T * H, fc_cols)) ||
        (st = VEC(o, "hidden_norm.weight", vsrc(&t, d->hidden_norm, h), s, H, prefix(H, h, RAND))) ||
        (st = VEC(o, "norm.weight", vsrc(&t, d->norm, h), s, H, prefix(H, h, RAND))))
        return st;
    char n[128];
    for (int l = 0; l < d->info.n_layers; l++) {
        const ds_layer *y = &d->layers[l];
#define NAME(x) (snprintf(n, sizeof n, "layers.%d.%s", l, x), n)
        // q and k scaled by s: their per-head norms, with eps x h/H, give back exactly the small
        // drafter's normalized q and k.
        if ((st = VEC(o, NAME("input_layernorm.weight"), vsrc(&t, y->attn_norm, h), s, H, prefix(H, h, RAND))) ||
            (st = VEC(o, NAME("post_attention_layernorm.weight"), vsrc(&t, y->ffn_norm, h), s, H,
                      prefix(H, h, RAND))) ||
            (st = MAT(o, NAME("self_attn.q_proj.weight"), wsrc(&t, &y->wq), s, qd, prefix(qd, qd, 0), H,
                      prefix(H, h, RAND))) ||
            (st = MAT(o, NAME("self_attn.k_proj.weight"), wsrc(&t, &y->wk), s, kvd, prefix(kvd, kvd, 0), H,
                      prefix(H, h, RAND))) ||
            (st = MAT(o, NAME("self_attn.v_proj.weight"), wsrc(&t, &y->wv), 1, kvd, prefix(kvd, kvd, 0), H,
                      prefix(H, h, RAND))) ||
            (st = MAT(o, NAME("self_attn.o_proj.weight"), wsrc(&t, &y->wo), 1, H, prefix(H, h, ZERO), qd,
                      prefix(qd, qd, 0))) ||
            (st = VEC(o, NAME("self_attn.q_norm.weight"), vsrc(&t, y->q_norm, hd), 1, hd, prefix(hd, hd, 0))) ||
            (st = VEC(o, NAME("self_attn.k_norm.weight"), vsrc(&t, y->k_norm, hd), 1, hd, prefix(hd, hd, 0))) ||
            (st = MAT(o, NAME("mlp.gate_proj.weight"), wsrc(&t, &y->w_gate), 1, F, prefix(F, Fd, RAND), H,
                      prefix(H, h, RAND))) ||
            (st = MAT(o, NAME("mlp.up_proj.weight"), wsrc(&t, &y->w_up), 1, F, prefix(F, Fd, RAND), H,
                      prefix(H, h, RAND))) ||
            (st = MAT(o, NAME("mlp.down_proj.weight"), wsrc(&t, &y->w_down), 1, H, prefix(H, h, ZERO), F,
                      prefix(F, Fd, ZERO))))
            return st;
#undef NAME
    }
    if (r > 0) {
        if ((st = MAT(o, "markov_head.markov_w1.weight", wsrc(&t, &d->markov_w1), 1, V, prefix(V, V, 0), r,
                      prefix(r, r, 0))) ||
            (st = MAT(o, "markov_head.markov_w2.weight", wsrc(&t, &d->markov_w2), 1, V, prefix(V, V, 0), r,
                      prefix(r, r, 0))))
            return st;
        if (d->markov == DS_MARKOV_GATED) { // input [h_k ; W1[prev]]: h_k's padding in between
            int *cols = malloc(sizeof(int) * (size_t)(H + r));
            if (cols)
                for (int j = 0; j < H + r; j++) cols[j] = j < h ? j : j < H ? RAND : h + (j - H);
            if ((st = MAT(o, "markov_head.gate_proj.weight", wsrc(&t, &d->gate_proj), 1, r, prefix(r, r, 0), H + r,
                          cols)) ||
                (st = VEC(o, "markov_head.gate_proj.bias", vsrc(&t, d->gate_bias, r), 1, r, prefix(r, r, 0))))
                return st;
        } else if (d->markov == DS_MARKOV_RNN) { // input [s ; W1[prev] ; h_k]: h_k last
            if ((st = MAT(o, "markov_head.joint_proj.weight", wsrc(&t, &d->joint_proj), 1, 3 * r, prefix(3 * r, 3 * r, 0),
                          2 * r + H, prefix(2 * r + H, 2 * r + h, RAND))) ||
                (st = VEC(o, "markov_head.joint_proj.bias", vsrc(&t, d->joint_bias, 3 * r), 1, 3 * r,
                          prefix(3 * r, 3 * r, 0))))
                return st;
        }
    }
    if (d->conf_w) { // [1, H (+ r)], input [h_k (; W1[prev])]; kept in f32 (as quantize keeps it)
        const int cm = d->info.confidence_with_markov ? r : 0;
        int *cols = malloc(sizeof(int) * (size_t)(H + cm));
        if (cols)
            for (int j = 0; j < H + cm; j++) cols[j] = j < h ? j : j < H ? RAND : h + (j - H);
        const float b = d->conf_b;
        if ((st = emit(o, "confidence_head.proj.weight", 2, DS_F32, vsrc(&t, d->conf_w, h + cm), 1, 1, prefix(1, 1, 0),
                       H + cm, cols)) ||
            (st = VEC(o, "confidence_head.proj.bias", vsrc(&t, &b, 1), 1, 1, prefix(1, 1, 0))))
            return st;
    }
    return DS_OK;
}

static ds_status drafter_config(const char *src_dir, const ds_drafter *d, const ds_inflate_params *p,
                                const int *layer_of, const char *target_id, const char *path) {
    char cp[4200];
    snprintf(cp, sizeof cp, "%s/config.json", src_dir);
    cJSON *c;
    ds_status st = ds_json_load(cp, 1 << 20, &c);
    if (st) return st;
    double eps;
    if ((st = ds_json_num(c, cp, "rms_norm_eps", 1e-6, &eps))) goto done;
    set_num(c, "hidden_size", p->hidden);
    set_num(c, "intermediate_size", p->ffn);
    set_num(c, "head_dim", d->hd);
    set_num(c, "num_key_value_heads", d->nkv);
    set_num(c, "rms_norm_eps", eps * d->H / p->hidden);
    set_num(c, "num_target_layers", p->layers);
    int taps[64];
    for (int i = 0; i < d->T; i++) taps[i] = d->tap_ids[i] < 0 ? d->tap_ids[i] : layer_of[d->tap_ids[i]];
    cJSON_DeleteItemFromObjectCaseSensitive(c, "target_layer_ids");
    cJSON_AddItemToObject(c, "target_layer_ids", cJSON_CreateIntArray(taps, d->T));
    cJSON_DeleteItemFromObjectCaseSensitive(c, "target_id");
    cJSON_AddStringToObject(c, "target_id", target_id);
    cJSON_DeleteItemFromObjectCaseSensitive(c, "torch_dtype");
    cJSON_AddStringToObject(c, "torch_dtype", p->dtype == DS_BF16 ? "bfloat16" : "float32");
    cJSON_DeleteItemFromObjectCaseSensitive(c, "quantization");
    cJSON_DeleteItemFromObjectCaseSensitive(c, "quantization_config");
    st = ds_json_save(c, path);
done:
    cJSON_Delete(c);
    return st;
}

// calibration.json travels as is: the inflated drafter's confidences are the small one's.
static ds_status copy_calibration(const char *src_dir, const char *dst_dir) {
    char a[4200], b[4200];
    snprintf(a, sizeof a, "%s/calibration.json", src_dir);
    snprintf(b, sizeof b, "%s/calibration.json", dst_dir);
    if (access(a, F_OK) != 0) return DS_OK;
    cJSON *j;
    ds_status st = ds_json_load(a, 1 << 20, &j);
    if (!st) st = ds_json_save(j, b);
    cJSON_Delete(j);
    return st;
}

// ---- checks and the whole run ---------------------------------------------------------------------

static ds_status check_args(const ds_model *m, const ds_drafter *d, const ds_inflate_params *p, const char *target,
                            const char *drafter) {
    const ds_model_info *in = &m->info;
    if (p->dtype != DS_BF16 && p->dtype != DS_F32)
        return ds_fail(DS_ERR_INVALID, "inflate writes bf16 or f32 weights (got %s)", ds_dtype_name(p->dtype));
    if (p->hidden < in->dim || p->hidden > (1 << 16))
        return ds_fail(DS_ERR_INVALID, "%s: hidden size %d must be in %d..65536 (the target's is %d)", target, p->hidden,
                       in->dim, in->dim);
    if (p->layers < in->n_layers || p->layers > 4096)
        return ds_fail(DS_ERR_INVALID, "%s: %d layers must be in %d..4096 (the target has %d)", target, p->layers,
                       in->n_layers, in->n_layers);
    const int fmin = d && d->F > in->ffn_dim ? d->F : in->ffn_dim;
    if (p->ffn < fmin || p->ffn > (1 << 20))
        return ds_fail(DS_ERR_INVALID, "%s: FFN size %d must be at least %d (the target's%s)", target, p->ffn, fmin,
                       d && d->F > in->ffn_dim ? " and drafter's" : "");
    for (int l = 0; l < in->n_layers; l++) {
        const ds_layer *L = &m->layers[l];
        if (L->bq || L->bk || L->bv || L->bo || L->q_norm || L->k_norm || L->attn_post_norm || L->ffn_post_norm)
            return ds_fail(DS_ERR_UNSUPPORTED, "%s: layer %d is not a plain Llama layer (biases or extra norms)", target, l);
    }
    if (d->style != DS_STYLE_QWEN3)
        return ds_fail(DS_ERR_UNSUPPORTED, "%s: only Qwen3-style (Qwen3DSparkModel) drafters inflate, not %s", drafter,
                       d->arch);
    if (d->layers[0].bq)
        return ds_fail(DS_ERR_UNSUPPORTED, "%s: drafters with attention_bias do not inflate", drafter);
    return DS_OK;
}

static ds_status run(const char *target, const char *drafter, const char *tmp, const ds_inflate_params *p,
                     ds_inflate_stats *stats) {
    ds_model *m = NULL, *big = NULL;
    ds_drafter *d = NULL, *dbig = NULL;
    int *src_of = NULL;
    out_dir o;
    memset(&o, 0, sizeof o);
    char tdir[4200], ddir[4200], path[4300];
    snprintf(tdir, sizeof tdir, "%s/target", tmp);
    snprintf(ddir, sizeof ddir, "%s/drafter", tmp);
    ds_model_params mp = {.no_populate = 1}; // (its weights are read once, to be written out)
    ds_status st = ds_model_load(target, &mp, &m);
    if (!st) st = ds_hf_export_check(m, target);
    if (!st) st = ds_drafter_load(drafter, m, &d);
    if (!st) st = check_args(m, d, p, target, drafter);
    if (st) goto done;
    const ds_model_info *in = &m->info;
    // Real layer l at l·L'/L; the others are identities.
    if (!(src_of = malloc(sizeof(int) * (size_t)p->layers))) {
        st = ds_fail(DS_ERR_NOMEM, "out of memory");
        goto done;
    }
    for (int i = 0; i < p->layers; i++) src_of[i] = -1;
    stats->n_src_layers = in->n_layers;
    stats->layers = p->layers;
    for (int l = 0; l < in->n_layers; l++) {
        stats->layer_of[l] = (int)((long long)l * p->layers / in->n_layers);
        src_of[stats->layer_of[l]] = l;
    }
    // The target.
    if ((st = out_init(&o, p, "target", 3 + DS_HF_PER_LAYER * p->layers, 0)) ||
        (st = build_target(&o, m, p->hidden, p->ffn, p->layers, src_of)))
        goto done;
    if (mkdir(tdir, 0755) != 0) {
        st = ds_fail(DS_ERR_IO, "%s: cannot create: %s", tdir, strerror(errno));
        goto done;
    }
    if (p->progress) p->progress(p->progress_ctx, "write", 0, 1, tdir);
    int tok;
    snprintf(path, sizeof path, "%s/config.json", tdir);
    if ((st = ds_st_writer_write_dir(o.w, tdir, 0)) || (st = target_config(m, p, stats->layer_of, target, path)) ||
        (st = ds_hf_write_tokenizer(m, tdir, &tok)))
        goto done;
    out_free(&o);
    // The drafter, paired with the written target (whose identity it records).
    if (p->progress) p->progress(p->progress_ctx, "check", 0, 2, tdir);
    if ((st = ds_model_load(tdir, &mp, &big))) {
        st = ds_fail_prefix(st, "reloading the inflated target");
        goto done;
    }
    stats->target_bytes = big->info.weight_bytes;
    char id[160];
    ds_model_target_id(big, id, sizeof id);
    if ((st = out_init(&o, p, "drafter", drafter_tensor_count(d), 1u << 20)) ||
        (st = build_drafter(&o, d, p->hidden, p->ffn)))
        goto done;
    if (mkdir(ddir, 0755) != 0) {
        st = ds_fail(DS_ERR_IO, "%s: cannot create: %s", ddir, strerror(errno));
        goto done;
    }
    if (p->progress) p->progress(p->progress_ctx, "write", 1, 2, ddir);
    snprintf(path, sizeof path, "%s/config.json", ddir);
    if ((st = ds_st_writer_write_dir(o.w, ddir, 0)) ||
        (st = drafter_config(drafter, d, p, stats->layer_of, id, path)) || (st = copy_calibration(drafter, ddir)))
        goto done;
    stats->drafter_bytes = o.bytes;
    out_free(&o);
    if (p->progress) p->progress(p->progress_ctx, "check", 1, 2, ddir);
    if ((st = ds_drafter_load(ddir, big, &dbig))) {
        st = ds_fail_prefix(st, "reloading the inflated drafter");
        goto done;
    }
    if (p->gguf_type) { // OUT/target.gguf: the inflated target as GGUF (quant/gguf_export.c), reloaded there
        snprintf(path, sizeof path, "%s/target.gguf", tmp);
        if (p->progress) p->progress(p->progress_ctx, "write", 0, 1, path);
        ds_gguf_export_params ep = {ds_gguf_preset_find(p->gguf_type), tdir, 0, p->interrupted, NULL, NULL};
        st = ds_gguf_export(big, path, &ep, NULL);
    }
done:
    out_free(&o);
    free(src_of);
    ds_drafter_free(dbig);
    ds_drafter_free(d);
    ds_model_free(big);
    ds_model_free(m);
    return st;
}

ds_status ds_inflate_run(const char *target, const char *drafter, const char *out_arg, const ds_inflate_params *p,
                     ds_inflate_stats *stats) {
    ds_inflate_stats *dummy = NULL;
    if (!stats && !(stats = dummy = malloc(sizeof *stats))) return ds_fail(DS_ERR_NOMEM, "out of memory");
    memset(stats, 0, sizeof *stats);
    if (p->gguf_type && !ds_gguf_preset_find(p->gguf_type)) {
        free(dummy);
        return ds_fail(DS_ERR_INVALID, "GGUF type '%s' is not supported (%s)", p->gguf_type, ds_gguf_preset_names());
    }
    char tmp[4200];
    ds_status st = ds_atomic_dir_open(out_arg, tmp, sizeof tmp);
    if (!st) {
        st = run(target, drafter, tmp, p, stats);
        if (!st && p->interrupted && *p->interrupted) st = ds_fail(DS_ERR_INTERRUPTED, "interrupted; nothing was written");
        if (st) ds_atomic_dir_abort(tmp);
        else st = ds_atomic_dir_commit(tmp, out_arg);
        if (!st && p->progress) p->progress(p->progress_ctx, "done", 1, 1, out_arg);
    }
    free(dummy);
    return st;
}
