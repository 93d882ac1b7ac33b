// A DSpark / DFlash drafter in the GGUF form llama.cpp's converter writes for its `draft-dspark`
// (convert_hf_to_gguf.py: Qwen3DSparkModel and DFlashDraftModel become general.architecture
// "dflash"): one file, the drafter's own tensors under llama.cpp's names, no embedding or LM head
// (it shares the target's), its taps as `dflash.target_layers` = target_layer_ids + 1, its mask
// token as tokenizer.ggml.mask_token_id. What llama.cpp's format carries is what it can express: a
// Qwen3-style backbone, the vanilla Markov head (markov_w1, markov_w2) and the confidence head with
// the Markov features (conf_proj over [h ; W1[prev]]); the rank comes from markov_w1's shape.
// Checked tensor for tensor against the DeepSpec original by tests/reference/test_drafter_gguf.py.
//
//   DeepSpec                                  GGUF (llama.cpp)
//   fc.weight                       (H, T·H)  fc.weight
//   hidden_norm.weight                  (H)   enc.output_norm.weight
//   norm.weight                         (H)   output_norm.weight
//   layers.i.input_layernorm            (H)   blk.i.attn_norm.weight
//   layers.i.post_attention_layernorm   (H)   blk.i.ffn_norm.weight
//   layers.i.self_attn.{q,k,v,o}_proj         blk.i.attn_{q,k,v,output}.weight (+ .bias)
//   layers.i.self_attn.{q,k}_norm      (hd)   blk.i.attn_{q,k}_norm.weight
//   layers.i.mlp.{gate,up,down}_proj          blk.i.ffn_{gate,up,down}.weight
//   markov_head.markov_w{1,2}        (V, r)   markov_w{1,2}.weight
//   confidence_head.proj          (1, H + r)  conf_proj.weight, conf_proj.bias (optional: 0)
//   embed_tokens, lm_head                     (none: the target's token_embd / output)
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "draft/drafter.h"
#include "kernels/ops.h"
#include "model/model.h"

static ds_status meta_int(const ds_gguf *g, const char *key, int64_t def, int64_t lo, int64_t hi, int *out) {
    int64_t v;
    ds_status st = def == INT64_MIN ? ds_gguf_get_int(g, key, &v) : ds_gguf_get_int_or(g, key, def, &v);
    if (st) return st;
    if (v < lo || v > hi) return ds_fail(DS_ERR_FORMAT, "%s: %s = %lld is outside %lld..%lld", g->map.path, key, (long long)v,
                                         (long long)lo, (long long)hi);
    *out = (int)v;
    return DS_OK;
}

ds_status ds_drafter_gguf_config(ds_drafter *d, const char *path, const ds_model *target, draft_config *c) {
    memset(c, 0, sizeof *c);
    if (!(d->gg = ds_calloc(1, sizeof *d->gg))) return DS_ERR_NOMEM;
    ds_status st = ds_gguf_open(d->gg, path);
    if (st) {
        free(d->gg);
        d->gg = NULL;
        return st;
    }
    const ds_gguf *g = d->gg;
    char arch[64];
    if ((st = ds_gguf_get_str(g, "general.architecture", arch, sizeof arch))) return st;
    if (strcmp(arch, "dflash"))
        return ds_fail(DS_ERR_UNSUPPORTED, "%s: general.architecture '%s' is not a drafter (llama.cpp's 'dflash')", path, arch);
    if (!target)
        return ds_fail(DS_ERR_INVALID, "%s: a GGUF drafter needs its target (it has no embedding or LM head of its own)", path);
    int64_t hc = 0, swa = 0;
    if ((st = ds_gguf_get_int_or(g, "dflash.hyper_connection.count", 0, &hc)) ||
        (st = ds_gguf_get_int_or(g, "dflash.attention.sliding_window", 0, &swa)))
        return st;
    if (hc) return ds_fail(DS_ERR_UNSUPPORTED, "%s: a DeepSeek-V4 DSpark drafter (hyper-connections) is not supported", path);
    if (swa) return ds_fail(DS_ERR_UNSUPPORTED, "%s: sliding-window attention in a drafter is not supported", path);
    d->style = DS_STYLE_QWEN3;
    snprintf(d->arch, sizeof d->arch, "%s", "Qwen3DSparkModel");
    const ds_model_info *t = ds_model_get_info(target);
    if ((st = meta_int(g, "dflash.block_count", INT64_MIN, 1, 1024, &c->layers)) ||
        (st = meta_int(g, "dflash.embedding_length", INT64_MIN, 1, 1 << 16, &d->H)) ||
        (st = meta_int(g, "dflash.feed_forward_length", INT64_MIN, 1, 1 << 20, &d->F)) ||
        (st = meta_int(g, "dflash.attention.head_count", INT64_MIN, 1, 4096, &d->nq)) ||
        (st = meta_int(g, "dflash.attention.head_count_kv", d->nq, 1, 4096, &d->nkv)) ||
        (st = meta_int(g, "dflash.attention.key_length", d->H / d->nq, 2, 4096, &d->hd)) ||
        (st = meta_int(g, "dflash.block_size", 16, 1, 64, &c->block)) ||
        (st = meta_int(g, "tokenizer.ggml.mask_token_id", INT64_MIN, 0, 1 << 30, &c->mask)) ||
        (st = ds_gguf_get_float(g, "dflash.attention.layer_norm_rms_epsilon", &c->eps)) ||
        (st = ds_gguf_get_float_or(g, "dflash.rope.freq_base", 1e6, &c->theta)))
        return st;
    d->V = t->vocab_size; // the target's embedding and LM head
    c->target_layers = t->n_layers; // (not in the file: the taps are checked against the target)
    c->partial = 1.0;
    const ds_gguf_kv *tl = ds_gguf_find_kv(g, "dflash.target_layers");
    if (!tl || tl->type != DS_GGUF_ARRAY || tl->arr_n < 1 || tl->arr_n > 64)
        return ds_fail(DS_ERR_FORMAT, "%s: dflash.target_layers must be an array of 1..64 layer numbers", path);
    d->T = (int)tl->arr_n;
    for (int i = 0; i < d->T; i++) {
        const int64_t v = ds_gguf_arr_i64(tl, (uint64_t)i);
        if (v < 0 || v > 4096) return ds_fail(DS_ERR_FORMAT, "%s: dflash.target_layers holds %lld", path, (long long)v);
        d->tap_ids[i] = (int)v - 1; // llama.cpp counts the embedding output as layer 0
    }
    if (d->nq % d->nkv || d->hd % 2 || !(c->eps > 0) || !(c->theta > 0))
        return ds_fail(DS_ERR_FORMAT, "%s: inconsistent attention geometry or norms (heads %d/%d, head dim %d)", path, d->nq,
                       d->nkv, d->hd);
    const ds_gguf_tensor *w1 = ds_gguf_find_tensor(g, "markov_w1.weight");
    if (w1) {
        if (w1->n_dims != 2 || w1->ne[0] < 1 || w1->ne[0] > 1 << 16)
            return ds_fail(DS_ERR_FORMAT, "%s: markov_w1.weight must be a (vocab, rank) matrix", path);
        c->rank = (int)w1->ne[0];
        d->markov = DS_MARKOV_VANILLA;
        snprintf(d->markov_name, sizeof d->markov_name, "vanilla");
    }
    const ds_gguf_tensor *cp = ds_gguf_find_tensor(g, "conf_proj.weight");
    c->conf = cp != NULL;
    c->conf_markov = cp && c->rank > 0; // llama.cpp's confidence head reads [h ; W1[prev]]
    c->bias = ds_gguf_find_tensor(g, "blk.0.attn_q.bias") != NULL;
    c->k_eq_v = 0;
    return DS_OK;
}

// The tensor `name` as a (rows, cols) weight pointing into the file (ggml order: ne[0] = cols).
static ds_status take(ds_drafter *d, const char *name, int rows, int cols, ds_weight *w) {
    const ds_gguf_tensor *t = ds_gguf_find_tensor(d->gg, name);
    memset(w, 0, sizeof *w);
    if (!t) return ds_fail(DS_ERR_FORMAT, "%s: missing tensor '%s'", d->gg->map.path, name);
    if (t->n_dims != 2 || t->ne[0] != cols || t->ne[1] != rows)
        return ds_fail(DS_ERR_FORMAT, "%s: tensor '%s' has shape (%lld, %lld), expected (%d, %d) (rows, cols)",
                       d->gg->map.path, name, t->n_dims == 2 ? (long long)t->ne[1] : -1LL, (long long)t->ne[0], rows, cols);
    w->type = t->type;
    w->rows = rows;
    w->cols = cols;
    w->data = t->data;
    w->round_inputs = t->type == DS_Q8_0; // llama.cpp's numerics (every other block type always is)
    return DS_OK;
}

// A 1-D tensor of n values widened into the drafter's f32 storage.
static ds_status vec(ds_drafter *d, const char *name, int n, float **out) {
    const ds_gguf_tensor *t = ds_gguf_find_tensor(d->gg, name);
    if (!t) return ds_fail(DS_ERR_FORMAT, "%s: missing tensor '%s'", d->gg->map.path, name);
    if (t->n_dims != 1 || t->ne[0] != n || (t->type != DS_F32 && t->type != DS_F16 && t->type != DS_BF16))
        return ds_fail(DS_ERR_FORMAT, "%s: tensor '%s' must be an F32, F16 or BF16 vector of %d", d->gg->map.path, name, n);
    if (!(*out = ds_drafter_own(d, (size_t)n))) return ds_fail(DS_ERR_NOMEM, "internal: drafter vector storage too small");
    const ds_weight w = {t->type, 1, n, t->data};
    ds_weight_row_f32(&w, 0, *out);
    if (!ds_all_finite(*out, (size_t)n))
        return ds_fail(DS_ERR_FORMAT, "%s: tensor '%s' holds NaN or Inf values", d->gg->map.path, name);
    return DS_OK;
}

ds_status ds_drafter_gguf_tensors(ds_drafter *d, const draft_config *c, const ds_model *target) {
    const int H = d->H, qd = d->nq * d->hd, kvd = d->nkv * d->hd, r = c->rank;
    char n[96];
    ds_status st;
    int used = 0; // tensors taken, to refuse any the file has beyond them
#define T(...) (snprintf(n, sizeof n, __VA_ARGS__), used++, n)
    if ((st = take(d, T("fc.weight"), H, d->T * H, &d->fc)) || (st = vec(d, T("enc.output_norm.weight"), H, &d->hidden_norm)) ||
        (st = vec(d, T("output_norm.weight"), H, &d->norm)))
        return st;
    for (int l = 0; l < c->layers; l++) {
        ds_layer *y = &d->layers[l];
        if ((st = vec(d, T("blk.%d.attn_norm.weight", l), H, &y->attn_norm)) ||
            (st = vec(d, T("blk.%d.ffn_norm.weight", l), H, &y->ffn_norm)) ||
            (st = take(d, T("blk.%d.attn_q.weight", l), qd, H, &y->wq)) ||
            (st = take(d, T("blk.%d.attn_k.weight", l), kvd, H, &y->wk)) ||
            (st = take(d, T("blk.%d.attn_v.weight", l), kvd, H, &y->wv)) ||
            (st = take(d, T("blk.%d.attn_output.weight", l), H, qd, &y->wo)) ||
            (st = vec(d, T("blk.%d.attn_q_norm.weight", l), d->hd, &y->q_norm)) ||
            (st = vec(d, T("blk.%d.attn_k_norm.weight", l), d->hd, &y->k_norm)) ||
            (st = take(d, T("blk.%d.ffn_gate.weight", l), d->F, H, &y->w_gate)) ||
            (st = take(d, T("blk.%d.ffn_up.weight", l), d->F, H, &y->w_up)) ||
            (st = take(d, T("blk.%d.ffn_down.weight", l), H, d->F, &y->w_down)))
            return st;
        if (c->bias && ((st = vec(d, T("blk.%d.attn_q.bias", l), qd, &y->bq)) ||
                        (st = vec(d, T("blk.%d.attn_k.bias", l), kvd, &y->bk)) ||
                        (st = vec(d, T("blk.%d.attn_v.bias", l), kvd, &y->bv))))
            return st;
        char ob[64]; // (optional: Qwen2-style biases have none)
        snprintf(ob, sizeof ob, "blk.%d.attn_output.bias", l);
        if (c->bias && ds_gguf_find_tensor(d->gg, ob) && (st = vec(d, T("%s", ob), H, &y->bo))) return st;
        y->out_scale = 1.0f;
        y->head_dim = d->hd;
        y->n_kv_heads = d->nkv;
        y->ffn_dim = d->F;
        y->kv_src = l;
    }
    if (r > 0 && ((st = take(d, T("markov_w1.weight"), d->V, r, &d->markov_w1)) ||
                  (st = take(d, T("markov_w2.weight"), d->V, r, &d->markov_w2))))
        return st;
    if (c->conf) {
        const int in = H + (c->conf_markov ? r : 0);
        ds_weight w;
        float *b = NULL;
        // (ggml stores conf_proj as (in, 1): one row of `in`)
        const ds_gguf_tensor *t = ds_gguf_find_tensor(d->gg, T("conf_proj.weight"));
        if (t && t->n_dims == 1 && t->ne[0] == in) w = (ds_weight){t->type, 1, in, t->data};
        else if ((st = take(d, n, 1, in, &w))) return st;
        if (ds_gguf_find_tensor(d->gg, "conf_proj.bias") && (st = vec(d, T("conf_proj.bias"), 1, &b))) return st;
        if (!(d->conf_w = ds_drafter_own(d, (size_t)in))) return ds_fail(DS_ERR_NOMEM, "internal: drafter vector storage too small");
        ds_weight_row_f32(&w, 0, d->conf_w);
        if (!ds_all_finite(d->conf_w, (size_t)in))
            return ds_fail(DS_ERR_FORMAT, "%s: tensor 'conf_proj.weight' holds NaN or Inf values", d->gg->map.path);
        d->conf_b = b ? b[0] : 0.0f;
    }
#undef T
    if ((uint64_t)used != d->gg->n_tensors)
        return ds_fail(DS_ERR_FORMAT, "%s: %llu tensors, of which %d belong to this drafter (an unexpected tensor)",
                       d->gg->map.path, (unsigned long long)d->gg->n_tensors, used);
    // The target's embedding and LM head (a DeepSpec drafter holds frozen copies of them).
    d->embed = target->tok_embd;
    d->lm_head = target->output;
    return DS_OK;
}
