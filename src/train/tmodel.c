// The trainable drafter: an f32 master copy of every trainable tensor in one flat buffer, named as
// in the DeepSpec checkpoint, and writing it back as a checkpoint.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "io/safetensors.h"
#include "kernels/half.h"
#include "train/train.h"

// Enumerate the trainable tensors in checkpoint order; `fn` sees each (name, rows, cols, slot).
typedef void (*entry_fn)(void *ctx, const char *name, int rows, int cols, float **slot);

static void layout(const ds_drafter *d, ds_tview *v, entry_fn fn, void *ctx) {
    const int H = d->H, qd = d->nq * d->hd, kvd = d->nkv * d->hd, r = d->r;
    char n[128];
    fn(ctx, "fc.weight", H, d->T * H, &v->fc);
    fn(ctx, "hidden_norm.weight", H, 0, &v->hidden_norm);
    for (int l = 0; l < d->info.n_layers; l++) {
        ds_tlayer *y = &v->layers[l];
        const ds_layer *dl = &d->layers[l];
#define E(s, rows, cols, slot) (snprintf(n, sizeof n, "layers.%d.%s", l, s), fn(ctx, n, rows, cols, slot))
        E("input_layernorm.weight", H, 0, &y->input_norm);
        E("self_attn.q_proj.weight", qd, H, &y->wq);
        E("self_attn.k_proj.weight", kvd, H, &y->wk);
        if (d->style == DS_STYLE_QWEN3) E("self_attn.v_proj.weight", kvd, H, &y->wv);
        E("self_attn.o_proj.weight", H, qd, &y->wo);
        if (dl->bq) {
            E("self_attn.q_proj.bias", qd, 0, &y->bq);
            E("self_attn.k_proj.bias", kvd, 0, &y->bk);
            E("self_attn.v_proj.bias", kvd, 0, &y->bv);
            E("self_attn.o_proj.bias", H, 0, &y->bo);
        }
        E("self_attn.q_norm.weight", d->hd, 0, &y->q_norm);
        E("self_attn.k_norm.weight", d->hd, 0, &y->k_norm);
        E("post_attention_layernorm.weight", H, 0, &y->post_attn_norm);
        if (d->style == DS_STYLE_GEMMA4) {
            E("pre_feedforward_layernorm.weight", H, 0, &y->pre_ffn_norm);
            E("post_feedforward_layernorm.weight", H, 0, &y->post_ffn_norm);
            E("layer_scalar", 1, 0, &y->layer_scalar);
        }
        E("mlp.gate_proj.weight", d->F, H, &y->w_gate);
        E("mlp.up_proj.weight", d->F, H, &y->w_up);
        E("mlp.down_proj.weight", H, d->F, &y->w_down);
#undef E
    }
    fn(ctx, "norm.weight", H, 0, &v->norm);
    if (r > 0) {
        fn(ctx, "markov_head.markov_w1.weight", d->V, r, &v->w1);
        fn(ctx, "markov_head.markov_w2.weight", d->V, r, &v->w2);
        if (d->markov == DS_MARKOV_GATED) {
            fn(ctx, "markov_head.gate_proj.weight", r, H + r, &v->gate_w);
            fn(ctx, "markov_head.gate_proj.bias", r, 0, &v->gate_b);
        } else if (d->markov == DS_MARKOV_RNN) {
            fn(ctx, "markov_head.joint_proj.weight", 3 * r, 2 * r + H, &v->joint_w);
            fn(ctx, "markov_head.joint_proj.bias", 3 * r, 0, &v->joint_b);
        }
    }
    if (d->conf_w) {
        fn(ctx, "confidence_head.proj.weight", 1, H + (d->info.confidence_with_markov ? r : 0), &v->conf_w);
        fn(ctx, "confidence_head.proj.bias", 1, 0, &v->conf_b);
    }
}

typedef struct {
    ds_tmodel *tm;
    float *base;
    size_t off;
    int count_only;
} layout_ctx;

static void place(void *c, const char *name, int rows, int cols, float **slot) {
    layout_ctx *x = c;
    const size_t n = (size_t)rows * (cols ? cols : 1);
    if (x->count_only) {
        ds_tentry *e = &x->tm->entries[x->tm->n_entries++];
        snprintf(e->name, sizeof e->name, "%s", name);
        e->rows = rows;
        e->cols = cols;
        e->offset = x->off;
    }
    if (x->base) *slot = x->base + x->off;
    x->off += n;
}

void ds_tmodel_views(const ds_tmodel *tm, float *base, ds_tview *v) {
    ds_tlayer *layers = v->layers; // caller-provided array of n_layers
    memset(v, 0, sizeof *v);
    v->layers = layers;
    memset(v->layers, 0, sizeof(ds_tlayer) * (size_t)tm->d->info.n_layers);
    layout_ctx x = {(ds_tmodel *)tm, base, 0, 0};
    layout(tm->d, v, place, &x);
}

ds_status ds_tmodel_load(const char *dir, const ds_model *target, ds_tmodel *tm) {
    memset(tm, 0, sizeof *tm);
    ds_status st = ds_drafter_load(dir, target, &tm->d);
    if (st) return st;
    const ds_drafter *d = tm->d;
    if (d->quant.present) { // packed 4/8-bit weights have no gradient to follow
        ds_drafter_free(tm->d);
        tm->d = NULL;
        return ds_fail(DS_ERR_UNSUPPORTED,
                       "%s: this drafter is quantized (config.json has a quantization block); train the full-precision "
                       "drafter and quantize it afterwards with dspark quantize",
                       dir);
    }
    tm->entries = ds_calloc(64 + (size_t)d->info.n_layers * 20, sizeof *tm->entries);
    tm->p.layers = ds_calloc((size_t)d->info.n_layers, sizeof(ds_tlayer));
    if (!tm->entries || !tm->p.layers) {
        ds_tmodel_free(tm);
        return DS_ERR_NOMEM;
    }
    ds_tview tmp = {.layers = tm->p.layers};
    layout_ctx x = {tm, NULL, 0, 1};
    layout(d, &tmp, place, &x); // names, shapes, offsets
    tm->n_params = x.off;
    tm->params = ds_malloc(tm->n_params * sizeof(float));
    tm->lm_head = ds_malloc((size_t)d->V * d->H * sizeof(float));
    if (!tm->params || !tm->lm_head) {
        ds_tmodel_free(tm);
        return DS_ERR_NOMEM;
    }
    ds_tmodel_views(tm, tm->params, &tm->p);
    for (int i = 0; i < tm->n_entries; i++) { // widen every trainable tensor from the checkpoint
        const ds_tentry *e = &tm->entries[i];
        const ds_st_tensor *t = ds_st_find(d->st, e->name);
        const int rows = e->cols ? e->rows : 1, cols = e->cols ? e->cols : e->rows;
        ds_weight w = {t->dtype, rows, cols, t->data};
        ds_weight_rows_f32(&w, 0, rows, tm->params + e->offset);
    }
    ds_weight_rows_f32(&d->lm_head, 0, d->V, tm->lm_head);
    return DS_OK;
}

void ds_tmodel_free(ds_tmodel *tm) {
    ds_drafter_free(tm->d);
    free(tm->entries);
    free(tm->p.layers);
    free(tm->params);
    free(tm->lm_head);
    memset(tm, 0, sizeof *tm);
}

ds_status ds_tmodel_write(const ds_tmodel *tm, const float *params, ds_dtype dtype, const char *dir) {
    const ds_drafter *d = tm->d;
    ds_st_writer *w = ds_st_writer_new();
    if (!w) return DS_ERR_NOMEM;
    const size_t VH = (size_t)d->V * d->H;
    float *frozen = malloc(sizeof(float) * VH * 2);
    uint16_t *half = dtype == DS_BF16 ? malloc(sizeof(uint16_t) * (tm->n_params + 2 * VH)) : NULL;
    ds_status st = (!frozen || (dtype == DS_BF16 && !half)) ? ds_fail(DS_ERR_NOMEM, "out of memory") : DS_OK;
    if (!st) {
        ds_weight_rows_f32(&d->embed, 0, d->V, frozen);
        memcpy(frozen + VH, tm->lm_head, sizeof(float) * VH);
        st = ds_st_writer_set_metadata(w, "format", "pt");
    }
    // Tensor i's data, in the requested dtype.
#define DATA(f32, n, off) (dtype == DS_BF16 ? (const void *)(half + (off)) : (const void *)(f32))
    if (!st && half) {
        for (size_t i = 0; i < tm->n_params; i++) half[i] = ds_f32_to_bf16(params[i]);
        for (size_t i = 0; i < 2 * VH; i++) half[tm->n_params + i] = ds_f32_to_bf16(frozen[i]);
    }
    const int64_t vh[2] = {d->V, d->H};
    if (!st) st = ds_st_writer_add(w, "embed_tokens.weight", dtype, 2, vh, DATA(frozen, VH, tm->n_params));
    if (!st) st = ds_st_writer_add(w, "lm_head.weight", dtype, 2, vh, DATA(frozen + VH, VH, tm->n_params + VH));
    for (int i = 0; i < tm->n_entries && !st; i++) {
        const ds_tentry *e = &tm->entries[i];
        const int64_t shape[2] = {e->rows, e->cols};
        st = ds_st_writer_add(w, e->name, dtype, e->cols ? 2 : 1, shape, DATA(params + e->offset, 0, e->offset));
    }
#undef DATA
    if (!st) st = ds_st_writer_write_dir(w, dir, 0);
    ds_st_writer_free(w);
    free(frozen);
    free(half);
    return st;
}
