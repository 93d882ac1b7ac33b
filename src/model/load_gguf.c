// Load a decoder-only target from GGUF as llama.cpp's convert_hf_to_gguf.py writes it, into the same
// ds_model the Hugging Face loader builds (load_hf.c). general.architecture picks the family:
//   llama      Llama / Mistral: Q/K rows permuted for the interleaved RoPE pairing (DS_ROPE_INTERLEAVED);
//              optional q/k/v/o biases; llama3 RoPE scaling as the per-frequency divisors of the
//              rope_freqs tensor, linear scaling as rope.scaling.type / rope.scaling.factor
//   qwen2      q/k/v biases                                  (NeoX "halves" RoPE, unpermuted, as all below)
//   qwen3      per-head attn_q_norm / attn_k_norm
//   qwen2moe   q/k/v biases, routed experts + the shared expert gated by sigmoid(ffn_gate_inp_shexp · x)
//   qwen3moe   q/k norms, routed experts
//   gemma3     RMSNorm weights stored as 1 + w (the converter adds the one), sandwich norms
//              (post_attention_norm, post_ffw_norm), GeGLU (tanh GELU), embeddings × sqrt(dim), sliding-window
//              layers (llama.cpp's pattern: every 6th layer global unless attention.sliding_window_pattern
//              says otherwise) with RoPE base rope.freq_base_swa (default 10000) and no scaling, attention
//              scale key_length^-0.5 (llama.cpp's rule; (dim / heads)^-0.5 for the 62-layer 27B),
//              final_logit_softcapping when present
//   gemma4     (dense 31B, E-series E2B / E4B, 26B-A4B MoE; conversion/gemma.py Gemma4Model, src/models/
//              gemma4.cpp) Gemma 3's layout with RMSNorm weights as stored (x·w), a weightless RMSNorm on V,
//              attention scale 1, and per layer type: full-attention layers have key_length as head dim,
//              sliding ones key_length_swa; attention.head_count_kv and feed_forward_length may be one
//              value per layer (K = V layers' KV heads; the double-wide MLP of KV-shared layers);
//              attention.sliding_window_pattern flags the sliding layers; full layers rotate with
//              rope.freq_base divided by rope_freqs (the converter's 1e30 divisors leave proportional
//              RoPE's unrotated pairs still), sliding ones with rope.freq_base_swa over all of their head;
//              attn_v absent = V is the raw K projection; the last attention.shared_kv_layers layers have
//              no attn_k / attn_v / attn_k_norm and attend over the last unshared layer of their type;
//              layer_output_scale multiplies a layer's output; per-layer embeddings
//              (embedding_length_per_layer_input > 0: per_layer_token_embd, per_layer_model_proj,
//              per_layer_proj_norm, blk.N.inp_gate / proj / post_norm); MoE layers (ffn_gate_inp) keep
//              the dense MLP and add the router (ffn_gate_inp.weight and .scale), experts (fused
//              ffn_gate_up_exps, gate rows first, or ffn_gate_exps + ffn_up_exps; ffn_down_exps and its
//              .scale per expert) and the norms pre_ffw_norm_2, post_ffw_norm_1, post_ffw_norm_2
// Every other architecture is refused by name.
// Metadata under "<arch>.*", tensors "token_embd", "blk.N.attn_q", ..., "output_norm", "output"
// (absent = tied to token_embd). Routed experts are the stacked 3-D tensors ffn_{gate,up,down}_exps
// (ne = cols, rows, n_expert) with the router ffn_gate_inp; each expert is a view into the mapping.
// A layer of an MoE architecture without ffn_gate_inp keeps a dense MLP (Qwen's mlp_only_layers /
// decoder_sparse_step). Stop ids follow llama.cpp's end-of-generation set: the EOS, EOT and EOM ids,
// FIM pad / repo / separator tokens and tokens whose text llama.cpp recognizes ("<|im_end|>", ...).
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "base/utf8.h"
#include "io/gguf.h"
#include "kernels/half.h"
#include "kernels/ops.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

// ---- architectures -------------------------------------------------------------------------------

typedef struct {
    const char *name;       // general.architecture
    ds_rope_layout rope;
    unsigned char bias;     // q/k/v biases are required (Qwen2); elsewhere optional when present
    unsigned char qk_norm;  // attn_q_norm / attn_k_norm are required
    unsigned char gemma;    // 3 or 4 (Gemma 3 / 4: sandwich norms, GeGLU, embedding scale, sliding layers); 0
    unsigned char moe;      // routed experts on layers with ffn_gate_inp
    unsigned char norm_topk; // default of <arch>.expert_weights_norm (llama.cpp: qwen3moe renormalizes)
} gguf_arch;

static const gguf_arch k_archs[] = {
    {"llama", DS_ROPE_INTERLEAVED, 0, 0, 0, 0, 0},
    {"qwen2", DS_ROPE_HALVES, 1, 0, 0, 0, 0},
    {"qwen3", DS_ROPE_HALVES, 0, 1, 0, 0, 0},
    {"qwen2moe", DS_ROPE_HALVES, 1, 0, 0, 1, 0},
    {"qwen3moe", DS_ROPE_HALVES, 0, 1, 0, 1, 1},
    {"gemma3", DS_ROPE_HALVES, 0, 1, 3, 0, 0},
    {"gemma4", DS_ROPE_HALVES, 0, 1, 4, 1, 1},
};
#define SUPPORTED_ARCHS "llama, qwen2, qwen3, qwen2moe, qwen3moe, gemma3, gemma4"

// What the metadata says beyond ds_model_info.
typedef struct {
    const gguf_arch *a;
    double rope_linear;        // rope.scaling.factor of linear scaling (1 = none)
    double local_theta;        // Gemma 3 sliding-window layers' RoPE base
    int window;                // attention.sliding_window of sliding layers (0 = none)
    unsigned char *sliding;    // (n_layers) 1 = a sliding-window layer
    int n_experts, top_k, expert_ffn, shared_ffn, norm_topk;
    int full_head_dim;         // head dim of full-attention layers (Gemma 4's key_length; else info.head_dim)
    int *kv_heads, *ffn;       // (n_layers) Gemma 4: each layer's KV heads and MLP width
    int n_kv_shared;           // Gemma 4: the last n_kv_shared layers attend over an earlier layer's cache
    int ple_dim;               // Gemma 4 E-series: per-layer input width (0 = none)
} gguf_hparams;

static void gguf_hparams_free(gguf_hparams *h) {
    free(h->sliding);
    free(h->kv_heads);
    free(h->ffn);
}

static void gguf_backing_free(void *p) {
    ds_gguf_close(p);
    free(p);
}

// ---- tensors -------------------------------------------------------------------------------------

// A 2-D GGUF tensor as a weight (ne[0] = cols, contiguous; ne[1] = rows); a 1-D one as one row when
// `allow_row` (llama.cpp reads (dim) and (dim, 1) alike for Qwen2-MoE's shared expert gate).
static ds_status take_matrix(const ds_gguf *g, const char *name, ds_weight *w, int optional, int allow_row) {
    const ds_gguf_tensor *t = ds_gguf_find_tensor(g, name);
    memset(w, 0, sizeof *w);
    if (!t) return optional ? DS_OK : ds_fail(DS_ERR_FORMAT, "%s: missing tensor '%s'", g->map.path, name);
    const int ok2 = t->n_dims == 2 && t->ne[0] <= INT32_MAX && t->ne[1] <= INT32_MAX;
    const int ok1 = allow_row && t->n_dims == 1 && t->ne[0] <= INT32_MAX;
    if (!ok2 && !ok1) return ds_fail(DS_ERR_FORMAT, "%s: tensor '%s' must be a 2-D matrix", g->map.path, name);
    w->type = t->type;
    w->cols = (int)t->ne[0];
    w->rows = ok2 ? (int)t->ne[1] : 1;
    w->data = t->data;
    return DS_OK;
}

// A 1-D GGUF tensor of length n widened to f32 into the model's owned storage; absent: *out = NULL
// when optional.
static ds_status take_vector(ds_model *m, const ds_gguf *g, const char *name, int n, int optional, float **out) {
    const ds_gguf_tensor *t = ds_gguf_find_tensor(g, name);
    *out = NULL;
    if (!t) return optional ? DS_OK : ds_fail(DS_ERR_FORMAT, "%s: missing tensor '%s'", g->map.path, name);
    if (t->n_dims != 1 || t->ne[0] != n)
        return ds_fail(DS_ERR_FORMAT, "%s: tensor '%s' has shape (%lld%s), expected (%d)", g->map.path, name,
                       (long long)t->ne[0], t->n_dims == 1 ? "" : ", ...", n);
    if (t->type != DS_F32 && t->type != DS_F16 && t->type != DS_BF16)
        return ds_fail(DS_ERR_UNSUPPORTED, "%s: vector '%s' is %s (F32, F16 or BF16 expected)", g->map.path, name,
                       ds_dtype_name(t->type));
    ds_weight w = {t->type, 1, n, t->data};
    if (!(*out = ds_model_own(m, (size_t)n))) return ds_fail(DS_ERR_NOMEM, "internal: vector storage too small");
    ds_weight_row_f32(&w, 0, *out);
    if (!ds_all_finite(*out, (size_t)n))
        return ds_fail(DS_ERR_FORMAT, "%s: tensor '%s' holds NaN or Inf values", g->map.path, name);
    return DS_OK;
}

// The n experts of a stacked 3-D tensor (ne = cols, rows, n) as views: expert e starts e matrices in.
static ds_status take_experts(const ds_gguf *g, const char *name, int n, int rows, int cols, ds_weight *out) {
    const ds_gguf_tensor *t = ds_gguf_find_tensor(g, name);
    if (!t) return ds_fail(DS_ERR_FORMAT, "%s: missing tensor '%s'", g->map.path, name);
    if (t->n_dims != 3 || t->ne[0] != cols || t->ne[1] != rows || t->ne[2] != n)
        return ds_fail(DS_ERR_FORMAT, "%s: tensor '%s' has shape (%lld, %lld, %lld), expected (%d, %d, %d)", g->map.path,
                       name, (long long)t->ne[0], (long long)t->ne[1], (long long)(t->n_dims > 2 ? t->ne[2] : 1), cols,
                       rows, n);
    ds_weight one = {t->type, rows, cols, t->data};
    const size_t stride = ds_weight_bytes(&one);
    if (stride == 0 || stride * (size_t)n != t->nbytes)
        return ds_fail(DS_ERR_FORMAT, "%s: tensor '%s' (%s) does not split into %d experts of (%d, %d)", g->map.path,
                       name, ds_dtype_name(t->type), n, rows, cols);
    for (int e = 0; e < n; e++) {
        out[e] = one;
        out[e].data = (const char *)t->data + (size_t)e * stride;
    }
    return DS_OK;
}

// ---- hyper-parameters ----------------------------------------------------------------------------

// "<arch>.<suffix>" as an int in [lo, hi]; def < lo: required.
static ds_status key_int(const ds_gguf *g, const char *arch, const char *suffix, int64_t def, int64_t lo, int64_t hi,
                         int *out) {
    char key[128];
    int64_t v;
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    ds_status st = def < lo ? ds_gguf_get_int(g, key, &v) : ds_gguf_get_int_or(g, key, def, &v);
    if (st) return st;
    if (v < lo || v > hi)
        return ds_fail(DS_ERR_FORMAT, "%s: %s = %lld is out of range (%lld..%lld)", g->map.path, key, (long long)v,
                       (long long)lo, (long long)hi);
    *out = (int)v;
    return DS_OK;
}

static ds_status key_float(const ds_gguf *g, const char *arch, const char *suffix, double def, double *out) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    ds_status st = ds_gguf_get_float_or(g, key, def, out);
    if (!st && !isfinite(*out)) return ds_fail(DS_ERR_FORMAT, "%s: %s is not finite", g->map.path, key);
    return st;
}

// "<arch>.<suffix>" for each of n layers: one int in [lo, hi] for all (def < lo: required), or an
// array of one int per layer.
static ds_status key_layers(const ds_gguf *g, const char *arch, const char *suffix, int64_t def, int64_t lo, int64_t hi,
                            int n, int *out) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    const ds_gguf_kv *kv = ds_gguf_find_kv(g, key);
    if (!kv || kv->type != DS_GGUF_ARRAY) {
        ds_status st = key_int(g, arch, suffix, def, lo, hi, &out[0]);
        for (int i = 1; i < n && !st; i++) out[i] = out[0];
        return st;
    }
    const int t = kv->arr_type;
    if (kv->arr_n != (uint64_t)n || t == DS_GGUF_STRING || t == DS_GGUF_ARRAY || t == DS_GGUF_F32 || t == DS_GGUF_F64)
        return ds_fail(DS_ERR_FORMAT, "%s: %s must be an integer or one integer per layer (%d)", g->map.path, key, n);
    for (int i = 0; i < n; i++) {
        const int64_t v = ds_gguf_arr_i64(kv, (uint64_t)i);
        if (v < lo || v > hi)
            return ds_fail(DS_ERR_FORMAT, "%s: %s[%d] = %lld is out of range (%lld..%lld)", g->map.path, key, i,
                           (long long)v, (long long)lo, (long long)hi);
        out[i] = (int)v;
    }
    return DS_OK;
}

// Whether the metadata holds a key "<arch>.<suffix>" that is an array (per-layer values).
static int key_is_array(const ds_gguf *g, const char *arch, const char *suffix) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    const ds_gguf_kv *kv = ds_gguf_find_kv(g, key);
    return kv && kv->type == DS_GGUF_ARRAY;
}

// RoPE: base, dimension count (all of head_dim), scaling (none or linear; llama3 comes as rope_freqs).
static ds_status read_rope(ds_model *m, const ds_gguf *g, gguf_hparams *h) {
    ds_model_info *in = &m->info;
    const char *A = m->arch;
    double theta;
    int rot = 0;
    ds_status st;
    if ((st = key_float(g, A, "rope.freq_base", h->a->gemma ? 1e6 : 10000.0, &theta)) ||
        (st = key_int(g, A, "rope.dimension_count", h->full_head_dim, 1, 4096, &rot)) ||
        (st = key_float(g, A, "rope.freq_base_swa", h->a->gemma == 4 ? theta : 10000.0, &h->local_theta)))
        return st;
    if (rot != h->full_head_dim)
        return ds_fail(DS_ERR_UNSUPPORTED, "%s: %s.rope.dimension_count %d != head dim %d: partial RoPE is not supported",
                       g->map.path, A, rot, h->full_head_dim);
    if (h->a->gemma == 4) { // sliding layers rotate all of their head
        if ((st = key_int(g, A, "rope.dimension_count_swa", in->head_dim, 1, 4096, &rot))) return st;
        if (rot != in->head_dim)
            return ds_fail(DS_ERR_UNSUPPORTED, "%s: %s.rope.dimension_count_swa %d != key_length_swa %d: partial RoPE "
                           "is not supported", g->map.path, A, rot, in->head_dim);
    }
    if (!(theta > 0) || !(h->local_theta > 0))
        return ds_fail(DS_ERR_FORMAT, "%s: %s.rope.freq_base must be positive", g->map.path, A);
    in->rope_theta = (float)theta;
    h->rope_linear = 1;
    char key[128], type[32] = "none";
    snprintf(key, sizeof key, "%s.rope.scaling.type", A);
    if (ds_gguf_find_kv(g, key) && (st = ds_gguf_get_str(g, key, type, sizeof type))) return st;
    if (strcmp(type, "linear") == 0) {
        if ((st = key_float(g, A, "rope.scaling.factor", 1.0, &h->rope_linear))) return st;
        if (!(h->rope_linear > 0)) return ds_fail(DS_ERR_FORMAT, "%s: %s.rope.scaling.factor must be positive", g->map.path, A);
    } else if (strcmp(type, "none") != 0) {
        return ds_fail(DS_ERR_UNSUPPORTED, "%s: %s '%s' is not supported (none, linear; llama3 as rope_freqs)",
                       g->map.path, key, type);
    }
    return DS_OK;
}

// Which layers use a sliding window: Gemma 3 by llama.cpp's fixed pattern (every 6th layer is global),
// or by attention.sliding_window_pattern (a period, or one bool per layer) when the file has it.
static ds_status read_sliding(ds_model *m, const ds_gguf *g, gguf_hparams *h) {
    const int n = m->info.n_layers;
    ds_status st;
    if (!(h->sliding = calloc((size_t)n, 1))) return DS_ERR_NOMEM;
    if ((st = key_int(g, m->arch, "attention.sliding_window", 0, 0, 1 << 24, &h->window))) return st;
    if (!h->a->gemma || h->window == 0) return DS_OK; // (llama.cpp ignores a window on llama / qwen files)
    char key[128];
    snprintf(key, sizeof key, "%s.attention.sliding_window_pattern", m->arch);
    const ds_gguf_kv *kv = ds_gguf_find_kv(g, key);
    if (kv && kv->type == DS_GGUF_ARRAY) {
        if (kv->arr_n != (uint64_t)n || kv->arr_type == DS_GGUF_STRING || kv->arr_type == DS_GGUF_ARRAY)
            return ds_fail(DS_ERR_FORMAT, "%s: %s must hold one flag per layer (%d)", g->map.path, key, n);
        for (int i = 0; i < n; i++) h->sliding[i] = ds_gguf_arr_i64(kv, (uint64_t)i) != 0;
        return DS_OK;
    }
    int period;
    if ((st = key_int(g, m->arch, "attention.sliding_window_pattern", 6, 0, 4096, &period))) return st;
    for (int i = 0; i < n; i++) h->sliding[i] = period > 0 && (i + 1) % period != 0;
    return DS_OK;
}

static ds_status read_experts(ds_model *m, const ds_gguf *g, gguf_hparams *h) {
    const char *A = m->arch;
    ds_status st;
    int norm;
    char key[128];
    snprintf(key, sizeof key, "%s.expert_weights_norm", A);
    if ((st = key_int(g, A, "expert_count", -1, 1, 4096, &h->n_experts)) ||
        (st = key_int(g, A, "expert_used_count", -1, 1, 4096, &h->top_k)) ||
        (st = key_int(g, A, "expert_feed_forward_length", -1, 1, 1 << 20, &h->expert_ffn)) ||
        (st = key_int(g, A, "expert_shared_feed_forward_length", 0, 0, 1 << 20, &h->shared_ffn)) ||
        (st = ds_gguf_get_bool_or(g, key, h->a->norm_topk, &norm)))
        return st;
    h->norm_topk = norm;
    if (h->top_k > h->n_experts)
        return ds_fail(DS_ERR_FORMAT, "%s: %s.expert_used_count %d is above expert_count %d", g->map.path, A, h->top_k,
                       h->n_experts);
    return DS_OK;
}

// Gemma 4's sliding layers: key_length_swa becomes info.head_dim (as the Hugging Face loader's
// head_dim), key_length stays the full-attention layers'; KV sharing and per-layer embeddings.
static ds_status read_gemma4(ds_model *m, const ds_gguf *g, gguf_hparams *h) {
    ds_model_info *in = &m->info;
    const char *A = m->arch;
    int vlen;
    ds_status st;
    if ((st = key_int(g, A, "attention.key_length_swa", -1, 2, 4096, &in->head_dim)) ||
        (st = key_int(g, A, "attention.value_length_swa", in->head_dim, 1, 4096, &vlen)) ||
        (st = key_int(g, A, "attention.shared_kv_layers", 0, 0, in->n_layers - 1, &h->n_kv_shared)) ||
        (st = key_int(g, A, "embedding_length_per_layer_input", 0, 0, 1 << 16, &h->ple_dim)))
        return st;
    if (in->head_dim % 2 || vlen != in->head_dim)
        return ds_fail(DS_ERR_UNSUPPORTED, "%s: %s.attention.key_length_swa %d / value_length_swa %d: an even key length "
                       "equal to the value length is required", g->map.path, A, in->head_dim, vlen);
    return DS_OK;
}

static ds_status read_hparams(ds_model *m, const ds_gguf *g, gguf_hparams *h) {
    ds_model_info *in = &m->info;
    const char *A = m->arch;
    ds_status st;
    double eps, softcap;
    static const char *per_layer[] = {"attention.head_count_kv", "feed_forward_length", "attention.head_count"};
    const size_t first = h->a->gemma == 4 ? 2 : 0; // Gemma 4 may give KV heads and MLP widths per layer
    for (size_t i = first; i < sizeof per_layer / sizeof *per_layer; i++)
        if (key_is_array(g, A, per_layer[i]))
            return ds_fail(DS_ERR_UNSUPPORTED, "%s: %s.%s is a per-layer array; per-layer geometry is not supported for %s",
                           g->map.path, A, per_layer[i], A);
    if ((st = key_int(g, A, "embedding_length", -1, 1, 1 << 16, &in->dim)) ||
        (st = key_int(g, A, "block_count", -1, 1, 4096, &in->n_layers)) ||
        (st = key_int(g, A, "attention.head_count", -1, 1, 4096, &in->n_heads)) ||
        (st = key_int(g, A, "context_length", -1, 1, INT32_MAX, &in->max_ctx)))
        return st;
    if (!(h->kv_heads = calloc((size_t)in->n_layers, sizeof *h->kv_heads)) ||
        !(h->ffn = calloc((size_t)in->n_layers, sizeof *h->ffn)))
        return DS_ERR_NOMEM;
    if ((st = key_layers(g, A, "feed_forward_length", h->a->moe ? 0 : -1, 0, 1 << 20, in->n_layers, h->ffn)) ||
        (st = key_layers(g, A, "attention.head_count_kv", in->n_heads, 1, in->n_heads, in->n_layers, h->kv_heads)))
        return st;
    in->ffn_dim = h->ffn[0];
    in->n_kv_heads = h->kv_heads[0];
    for (int l = 0; l < in->n_layers; l++)
        if (in->n_heads % h->kv_heads[l])
            return ds_fail(DS_ERR_FORMAT, "%s: %s.attention.head_count %d is not a multiple of head_count_kv %d",
                           g->map.path, A, in->n_heads, h->kv_heads[l]);
    char klen[128];
    snprintf(klen, sizeof klen, "%s.attention.key_length", A);
    if (in->dim % in->n_heads && !ds_gguf_find_kv(g, klen))
        return ds_fail(DS_ERR_FORMAT, "%s: embedding_length %d is not divisible by head_count %d (and no %s)",
                       g->map.path, in->dim, in->n_heads, klen);
    int vlen = 0;
    if ((st = key_int(g, A, "attention.key_length", in->dim / in->n_heads, 2, 4096, &in->head_dim)) ||
        (st = key_int(g, A, "attention.value_length", in->head_dim, 1, 4096, &vlen)))
        return st;
    if (in->head_dim % 2 || vlen != in->head_dim)
        return ds_fail(DS_ERR_UNSUPPORTED, "%s: %s.attention.key_length %d / value_length %d: an even key length equal "
                       "to the value length is required", g->map.path, A, in->head_dim, vlen);
    h->full_head_dim = in->head_dim;
    if (h->a->gemma == 4 && (st = read_gemma4(m, g, h))) return st;
    if ((st = key_float(g, A, "attention.layer_norm_rms_epsilon", h->a->gemma ? 1e-6 : 1e-5, &eps)) ||
        (st = key_float(g, A, "final_logit_softcapping", 0, &softcap)))
        return st;
    if (!(eps > 0) || softcap < 0)
        return ds_fail(DS_ERR_FORMAT, "%s: %s: layer_norm_rms_epsilon must be positive, final_logit_softcapping not negative",
                       g->map.path, A);
    in->norm_eps = (float)eps;
    m->final_softcap = (float)softcap;
    in->rope_layout = h->a->rope;
    m->act = h->a->gemma ? DS_ACT_GELU_TANH : DS_ACT_SILU;
    double attn_softcap;
    if ((st = key_float(g, A, "attn_logit_softcapping", 0, &attn_softcap))) return st;
    if (attn_softcap != 0)
        return ds_fail(DS_ERR_UNSUPPORTED, "%s: %s.attn_logit_softcapping is set; attention logit softcapping is not supported",
                       g->map.path, A);
    if ((st = read_rope(m, g, h)) || (st = read_sliding(m, g, h))) return st;
    for (int l = 0; h->a->gemma == 4 && l < in->n_layers; l++) // the model-wide KV heads: the sliding layers'
        if (h->sliding[l]) {
            in->n_kv_heads = h->kv_heads[l];
            break;
        }
    char experts[128];
    snprintf(experts, sizeof experts, "%s.expert_count", A); // (Gemma 4: only 26B-A4B has experts)
    return h->a->moe && (h->a->gemma != 4 || ds_gguf_find_kv(g, experts)) ? read_experts(m, g, h) : DS_OK;
}

// ---- RoPE sets -----------------------------------------------------------------------------------

// rope[0] (every layer, or Gemma's full-attention ones; head dim d): theta^(-2i/d) / (linear factor) /
// rope_freqs[i] (llama3's per-frequency divisors; Gemma 4's 1 for the rotated pairs, 1e30 for the still
// ones); rope[1] (Gemma's sliding layers; head dim d'): local_theta^(-2i/d'), unscaled.
static ds_status fill_rope(ds_model *m, const ds_gguf *g, const gguf_hparams *h) {
    const int hd = h->full_head_dim, half = hd / 2, shd = m->info.head_dim;
    int any_sliding = 0;
    for (int l = 0; l < m->info.n_layers; l++) any_sliding |= h->sliding[l];
    float *ff = NULL;
    ds_status st = take_vector(m, g, "rope_freqs.weight", half, 1, &ff);
    if (st) return st;
    m->n_rope = any_sliding ? 2 : 1;
    m->rope[0].half = half;
    m->rope[1].half = shd / 2;
    for (int r = 0; r < m->n_rope; r++)
        if (!(m->rope[r].inv_freq = ds_model_own(m, (size_t)m->rope[r].half)))
            return ds_fail(DS_ERR_NOMEM, "internal: vector storage too small");
    for (int i = 0; i < half; i++) {
        double f = pow((double)m->info.rope_theta, -2.0 * i / hd) / h->rope_linear;
        if (ff) {
            if (!(ff[i] > 0)) return ds_fail(DS_ERR_FORMAT, "%s: rope_freqs.weight[%d] must be positive", g->map.path, i);
            f /= ff[i];
        }
        m->rope[0].inv_freq[i] = (float)f;
    }
    for (int i = 0; any_sliding && i < shd / 2; i++) m->rope[1].inv_freq[i] = (float)pow(h->local_theta, -2.0 * i / shd);
    return DS_OK;
}

// ---- layers --------------------------------------------------------------------------------------

enum { REQ, OPT, REQ_BIAS, REQ_QKNORM, REQ_GEMMA };          // when a tensor must be there
enum { LEN_DIM, LEN_HEAD, LEN_Q, LEN_KV };                    // a vector's length

// The per-layer vectors: "blk.N.<suffix>" into a float * field of ds_layer.
static const struct {
    const char *suffix;
    size_t field;
    unsigned char need, len;
} k_layer_vectors[] = {
    {"attn_norm.weight", offsetof(ds_layer, attn_norm), REQ, LEN_DIM},
    {"ffn_norm.weight", offsetof(ds_layer, ffn_norm), REQ, LEN_DIM},
    {"attn_q.bias", offsetof(ds_layer, bq), REQ_BIAS, LEN_Q},
    {"attn_k.bias", offsetof(ds_layer, bk), REQ_BIAS, LEN_KV},
    {"attn_v.bias", offsetof(ds_layer, bv), REQ_BIAS, LEN_KV},
    {"attn_output.bias", offsetof(ds_layer, bo), OPT, LEN_DIM},
    {"attn_q_norm.weight", offsetof(ds_layer, q_norm), REQ_QKNORM, LEN_HEAD},
    {"attn_k_norm.weight", offsetof(ds_layer, k_norm), REQ_QKNORM, LEN_HEAD},
    {"post_attention_norm.weight", offsetof(ds_layer, attn_post_norm), REQ_GEMMA, LEN_DIM},
    {"post_ffw_norm.weight", offsetof(ds_layer, ffn_post_norm), REQ_GEMMA, LEN_DIM},
};

static int needed(const gguf_arch *a, int need) {
    return need == REQ || (need == REQ_BIAS && a->bias) || (need == REQ_QKNORM && a->qk_norm) ||
           (need == REQ_GEMMA && a->gemma);
}

// Gemma 4's experts of layer l: the router's input scale, the per-expert output scale, the three
// extra norms, and gate / up as one fused tensor (each expert's gate rows first) or two.
static ds_status load_gemma4_experts(ds_model *m, const ds_gguf *g, const gguf_hparams *h, int l, ds_moe *E) {
    const int D = m->info.dim, n = h->n_experts, I = h->expert_ffn;
    char name[96];
    ds_status st;
    static const struct { const char *suffix; size_t field; int optional; } vecs[] = {
        {"ffn_gate_inp.scale", offsetof(ds_moe, router_scale), 0}, {"ffn_down_exps.scale", offsetof(ds_moe, expert_scale), 1},
        {"pre_ffw_norm_2.weight", offsetof(ds_moe, pre_norm), 0}, {"post_ffw_norm_1.weight", offsetof(ds_moe, dense_post_norm), 0},
        {"post_ffw_norm_2.weight", offsetof(ds_moe, post_norm), 0},
    };
    for (size_t i = 0; i < sizeof vecs / sizeof *vecs; i++) {
        snprintf(name, sizeof name, "blk.%d.%s", l, vecs[i].suffix);
        const int len = vecs[i].field == offsetof(ds_moe, expert_scale) ? n : D;
        if ((st = take_vector(m, g, name, len, vecs[i].optional, (float **)((char *)E + vecs[i].field)))) return st;
    }
    snprintf(name, sizeof name, "blk.%d.ffn_gate_up_exps.weight", l);
    if (ds_gguf_find_tensor(g, name)) {
        if ((st = take_experts(g, name, n, 2 * I, D, E->gate))) return st;
        const ds_weight half = {.type = E->gate[0].type, .rows = I, .cols = D};
        for (int e = 0; e < n; e++) {
            E->gate[e].rows = I;
            E->up[e] = E->gate[e];
            E->up[e].data = (const char *)E->gate[e].data + ds_weight_bytes(&half);
        }
    } else {
        snprintf(name, sizeof name, "blk.%d.ffn_gate_exps.weight", l);
        if ((st = take_experts(g, name, n, I, D, E->gate))) return st;
        snprintf(name, sizeof name, "blk.%d.ffn_up_exps.weight", l);
        if ((st = take_experts(g, name, n, I, D, E->up))) return st;
    }
    snprintf(name, sizeof name, "blk.%d.ffn_down_exps.weight", l);
    return take_experts(g, name, n, D, I, E->down);
}

// Router, stacked experts and (Qwen2-MoE) the shared expert of layer l; ex holds 3 x n_experts weights.
static ds_status load_moe_layer(ds_model *m, const ds_gguf *g, const gguf_hparams *h, int l, ds_layer *L, ds_moe *E,
                                ds_weight *ex) {
    const int D = m->info.dim, n = h->n_experts, I = h->expert_ffn;
    char name[96];
    ds_status st;
    if (n <= 0)
        return ds_fail(DS_ERR_FORMAT, "%s: layer %d has a router (ffn_gate_inp) but %s.expert_count is missing",
                       g->map.path, l, m->arch);
    E->n_experts = n;
    E->top_k = h->top_k;
    E->ffn_dim = I;
    E->norm_topk = h->norm_topk;
    E->gate = ex, E->up = ex + n, E->down = ex + 2 * n;
    snprintf(name, sizeof name, "blk.%d.ffn_gate_inp.weight", l);
    if ((st = take_matrix(g, name, &E->router, 0, 0))) return st;
    if (h->a->gemma == 4) return load_gemma4_experts(m, g, h, l, E);
#define EXPERTS(dst, suffix, rows, cols)                                   \
    snprintf(name, sizeof name, "blk.%d.%s.weight", l, suffix);            \
    if ((st = take_experts(g, name, n, rows, cols, dst))) return st;
    EXPERTS(E->gate, "ffn_gate_exps", I, D)
    EXPERTS(E->up, "ffn_up_exps", I, D)
    EXPERTS(E->down, "ffn_down_exps", D, I)
#undef EXPERTS
    snprintf(name, sizeof name, "blk.%d.ffn_gate_shexp.weight", l);
    if (!ds_gguf_find_tensor(g, name)) return DS_OK; // no shared expert (Qwen3-MoE)
    static const char *shexp[] = {"ffn_gate_shexp", "ffn_up_shexp", "ffn_down_shexp"};
    ds_weight *dst[] = {&L->w_gate, &L->w_up, &L->w_down};
    for (int k = 0; k < 3; k++) {
        snprintf(name, sizeof name, "blk.%d.%s.weight", l, shexp[k]);
        if ((st = take_matrix(g, name, dst[k], 0, 0))) return st;
    }
    L->ffn_dim = h->shared_ffn ? h->shared_ffn : L->w_gate.rows;
    snprintf(name, sizeof name, "blk.%d.ffn_gate_inp_shexp.weight", l);
    return take_matrix(g, name, &E->shared_gate, 0, 1);
}

// Gemma 4 layer l's shape: its type's head dim, its KV heads and MLP width, attention scale 1 (the q/k
// norms replace it), the weightless V norm, and for the last shared_kv_layers layers the KV cache of the
// last unshared layer of the same type (none: kv_src -1, refused by ds_model_finish).
static void gemma4_layer_shape(ds_model *m, const gguf_hparams *h, int l) {
    ds_layer *L = &m->layers[l];
    const int first_shared = m->info.n_layers - h->n_kv_shared;
    L->head_dim = h->sliding[l] ? m->info.head_dim : h->full_head_dim;
    L->n_kv_heads = h->kv_heads[l];
    L->ffn_dim = h->ffn[l];
    L->attn_scale = 1.0f;
    L->v_norm = 1;
    if (l < first_shared) return;
    L->kv_shared = 1;
    L->kv_src = -1;
    for (int j = 0; j < first_shared; j++)
        if (h->sliding[j] == h->sliding[l]) L->kv_src = j;
}

// Gemma 4 layer l's per-layer-embedding matrices and norm (E-series) and its output scale.
static ds_status load_gemma4_extras(ds_model *m, const ds_gguf *g, const gguf_hparams *h, int l) {
    ds_layer *L = &m->layers[l];
    char name[96];
    ds_status st;
    if (h->ple_dim) {
        snprintf(name, sizeof name, "blk.%d.inp_gate.weight", l);
        if ((st = take_matrix(g, name, &L->ple_gate, 0, 0))) return st;
        snprintf(name, sizeof name, "blk.%d.proj.weight", l);
        if ((st = take_matrix(g, name, &L->ple_proj, 0, 0))) return st;
        snprintf(name, sizeof name, "blk.%d.post_norm.weight", l);
        if ((st = take_vector(m, g, name, m->info.dim, 0, &L->ple_post_norm))) return st;
    }
    float *s;
    snprintf(name, sizeof name, "blk.%d.layer_output_scale.weight", l);
    if ((st = take_vector(m, g, name, 1, 1, &s))) return st;
    if (s && s[0] == 0) return ds_fail(DS_ERR_FORMAT, "%s: tensor '%s' must be nonzero", g->map.path, name);
    if (s) L->out_scale = s[0];
    return DS_OK;
}

// Layer l: attention, its vectors, then a dense MLP or experts (Gemma 4: experts beside the MLP).
static ds_status load_layer(ds_model *m, const ds_gguf *g, const gguf_hparams *h, int l, int *n_moe) {
    ds_layer *L = &m->layers[l];
    const ds_model_info *in = &m->info;
    const int g4 = h->a->gemma == 4;
    char name[96];
    ds_status st;
    L->window = h->sliding[l] ? h->window : 0;
    L->rope = h->sliding[l] ? 1 : 0;
    if (h->a->gemma == 3) // llama.cpp: key_length^-0.5, (dim / heads)^-0.5 for Gemma 3 27B (62 layers)
        L->attn_scale = 1.0f / sqrtf((float)(in->n_layers == 62 ? in->dim / in->n_heads : in->head_dim));
    if (g4) gemma4_layer_shape(m, h, l);
    const int hd = L->head_dim ? L->head_dim : in->head_dim, kv = L->n_kv_heads ? L->n_kv_heads : in->n_kv_heads;
    static const struct { const char *suffix; size_t field; } mats[] = {
        {"attn_q", offsetof(ds_layer, wq)}, {"attn_k", offsetof(ds_layer, wk)},
        {"attn_v", offsetof(ds_layer, wv)}, {"attn_output", offsetof(ds_layer, wo)},
    };
    for (size_t i = 0; i < sizeof mats / sizeof *mats; i++) {
        const int kv_mat = mats[i].field == offsetof(ds_layer, wk) || mats[i].field == offsetof(ds_layer, wv);
        if (kv_mat && L->kv_shared) continue; // it reads kv_src's cache (a file may still carry its k / v)
        snprintf(name, sizeof name, "blk.%d.%s.weight", l, mats[i].suffix);
        const int optional = g4 && mats[i].field == offsetof(ds_layer, wv); // absent: V = the K projection
        if ((st = take_matrix(g, name, (ds_weight *)((char *)L + mats[i].field), optional, 0))) return st;
    }
    const int lens[] = {in->dim, hd, in->n_heads * hd, kv * hd};
    for (size_t i = 0; i < sizeof k_layer_vectors / sizeof *k_layer_vectors; i++) {
        if (L->kv_shared && k_layer_vectors[i].field == offsetof(ds_layer, k_norm)) continue;
        snprintf(name, sizeof name, "blk.%d.%s", l, k_layer_vectors[i].suffix);
        float **dst = (float **)((char *)L + k_layer_vectors[i].field);
        if ((st = take_vector(m, g, name, lens[k_layer_vectors[i].len], !needed(h->a, k_layer_vectors[i].need), dst)))
            return st;
    }
    if (g4 && (st = load_gemma4_extras(m, g, h, l))) return st;
    snprintf(name, sizeof name, "blk.%d.ffn_gate_inp.weight", l);
    if (h->a->moe && ds_gguf_find_tensor(g, name)) {
        ds_moe *E = &m->moe[*n_moe];
        if ((st = load_moe_layer(m, g, h, l, L, E, m->experts + (size_t)*n_moe * 3 * h->n_experts))) return st;
        L->moe = E;
        ++*n_moe;
        if (!g4) return DS_OK;
    }
    static const char *mlp[] = {"ffn_gate", "ffn_up", "ffn_down"};
    ds_weight *dst[] = {&L->w_gate, &L->w_up, &L->w_down};
    for (int k = 0; k < 3; k++) {
        snprintf(name, sizeof name, "blk.%d.%s.weight", l, mlp[k]);
        if ((st = take_matrix(g, name, dst[k], 0, 0))) return st;
    }
    if (!in->ffn_dim) L->ffn_dim = L->w_gate.rows; // (an MoE file may omit feed_forward_length)
    return DS_OK;
}

// ---- tokens --------------------------------------------------------------------------------------

// llama.cpp's FIM pad / repo / separator tokens recognized by their text (llama-vocab.cpp), which end
// generation too (beside ds_tok_is_eog_text's).
static const char *const k_fim_texts[] = {
    "<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>",
    "<reponame>", "<|file_sep|>", "<file_sep>",
};

static int is_stop_text(const ds_gguf_str *s) {
    for (size_t k = 0; k < sizeof k_fim_texts / sizeof *k_fim_texts; k++)
        if (s->len == strlen(k_fim_texts[k]) && memcmp(s->ptr, k_fim_texts[k], s->len) == 0) return 1;
    return ds_tok_is_eog_text(s->ptr, (size_t)s->len);
}

// BOS / EOS from tokenizer.ggml.* (also without a token list), the stop ids llama.cpp ends generation
// on, and the tokenizer when it is one we support (none, or another kind, is not an error: the model
// then runs on token ids).
static ds_status load_vocab(ds_model *m, const ds_gguf *g) {
    static const char *ids[] = {"tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id",
                                "tokenizer.ggml.eom_token_id", "tokenizer.ggml.fim_pad_token_id",
                                "tokenizer.ggml.fim_rep_token_id", "tokenizer.ggml.fim_sep_token_id"};
    int64_t v;
    ds_status st;
    if ((st = ds_gguf_get_int_or(g, "tokenizer.ggml.bos_token_id", -1, &v))) return st;
    if (v >= 0 && v < INT32_MAX) m->info.bos_id = (int)v;
    for (size_t i = 0; i < sizeof ids / sizeof *ids; i++) {
        if ((st = ds_gguf_get_int_or(g, ids[i], -1, &v))) return st;
        if (v < 0 || v >= INT32_MAX) continue;
        if (i == 0) m->info.eos_id = (int)v;
        ds_model_add_stop(m, (int32_t)v);
    }
    const ds_gguf_kv *toks = ds_gguf_find_kv(g, "tokenizer.ggml.tokens");
    if (toks && toks->type == DS_GGUF_ARRAY && toks->arr_type == DS_GGUF_STRING) {
        int tool_response = 0; // llama.cpp's Gemma 4 workaround: then "</s>" does not end generation
        for (uint64_t i = 0; i < toks->arr_n; i++)
            tool_response |= toks->arr_strs[i].len == 16 && memcmp(toks->arr_strs[i].ptr, "<|tool_response>", 16) == 0;
        for (uint64_t i = 0; i < toks->arr_n && i < INT32_MAX; i++) {
            const ds_gguf_str *s = &toks->arr_strs[i];
            if (is_stop_text(s) && !(tool_response && s->len == 4 && memcmp(s->ptr, "</s>", 4) == 0))
                ds_model_add_stop(m, (int32_t)i);
        }
    }
    char model[32] = "";
    if (!ds_gguf_find_kv(g, "tokenizer.ggml.model")) return DS_OK;
    if ((st = ds_gguf_get_str(g, "tokenizer.ggml.model", model, sizeof model))) return st;
    if (strcmp(model, "llama") != 0 && strcmp(model, "gpt2") != 0 && strcmp(model, "gemma4") != 0) return DS_OK;
    if ((st = ds_tokenizer_load_gguf(g, &m->tok))) return st;
    m->info.bos_id = ds_tokenizer_bos(m->tok);
    m->info.eos_id = ds_tokenizer_eos(m->tok);
    m->info.unk_id = ds_tokenizer_unk(m->tok);
    ds_model_add_stop(m, m->info.eos_id);
    return DS_OK;
}

ds_status ds_model_load_gguf_tokenizer(ds_model *m, const char *path) {
    ds_gguf g;
    ds_status st = ds_gguf_open(&g, path);
    if (st) return st;
    st = load_vocab(m, &g); // the tokenizer copies what it keeps
    ds_gguf_close(&g);
    return st;
}

// ---- the model -----------------------------------------------------------------------------------

static ds_status find_arch(ds_model *m, const ds_gguf *g, const gguf_arch **out) {
    ds_status st;
    if (!ds_gguf_find_kv(g, "general.architecture"))
        return ds_fail(DS_ERR_FORMAT, "%s: missing metadata 'general.architecture'", g->map.path);
    if ((st = ds_gguf_get_str(g, "general.architecture", m->arch, sizeof m->arch))) return st;
    for (size_t i = 0; i < sizeof k_archs / sizeof *k_archs; i++)
        if (strcmp(m->arch, k_archs[i].name) == 0) {
            *out = &k_archs[i];
            return DS_OK;
        }
    char shown[sizeof m->arch];
    ds_text_escape(shown, sizeof shown, m->arch, strlen(m->arch));
    return ds_fail(DS_ERR_UNSUPPORTED, "%s: architecture '%s' is not supported from GGUF (" SUPPORTED_ARCHS " are)",
                   g->map.path, shown);
}

// Room for every vector the loader widens to f32 and for the model's MoE tables.
static ds_status alloc_model(ds_model *m, const ds_gguf *g, const gguf_hparams *h) {
    const ds_model_info *in = &m->info;
    const size_t D = (size_t)in->dim;
    const size_t hd = (size_t)(in->head_dim > h->full_head_dim ? in->head_dim : h->full_head_dim);
    size_t kv = 0;
    for (int l = 0; l < in->n_layers; l++) kv = (size_t)h->kv_heads[l] > kv ? (size_t)h->kv_heads[l] : kv;
    // per layer: up to 9 vectors of D (norms, bias, PLE, router scale), q/k norms, q/k/v biases, expert
    // scales, the output scale; then the final norm, RoPE tables and rope_freqs, the PLE projection norm
    m->owned_cap = (size_t)in->n_layers * (9 * D + 2 * hd + ((size_t)in->n_heads + 2 * kv) * hd + (size_t)h->n_experts + 1) +
                   D + 3 * hd + (size_t)h->ple_dim + 16;
    m->owned = ds_malloc(m->owned_cap * sizeof(float));
    m->layers = ds_calloc((size_t)in->n_layers, sizeof *m->layers);
    if (!m->owned || !m->layers) return DS_ERR_NOMEM;
    if (!h->a->moe) return DS_OK;
    for (int l = 0; l < in->n_layers; l++) {
        char name[96];
        snprintf(name, sizeof name, "blk.%d.ffn_gate_inp.weight", l);
        m->n_moe += ds_gguf_find_tensor(g, name) != NULL;
    }
    m->moe = ds_calloc((size_t)m->n_moe + 1, sizeof *m->moe);
    m->experts = ds_calloc((size_t)(m->n_moe + 1) * 3 * h->n_experts, sizeof *m->experts);
    return m->moe && m->experts ? DS_OK : DS_ERR_NOMEM;
}

// s as transformers' embedding module multiplies it: rounded to the table's dtype (Gemma).
static float scale_in_dtype(ds_dtype t, float s) {
    return t == DS_BF16 ? ds_bf16_to_f32(ds_f32_to_bf16(s)) : t == DS_F16 ? ds_f16_to_f32(ds_f32_to_f16(s)) : s;
}

// Gemma 4 E-series per-layer embeddings: the table (one row per token, a slice per layer), its
// projection from the hidden state and that projection's norm.
static ds_status load_ple(ds_model *m, const ds_gguf *g, const gguf_hparams *h) {
    const int pw = m->info.n_layers * h->ple_dim;
    ds_status st;
    m->ple_dim = h->ple_dim;
    if ((st = take_matrix(g, "per_layer_token_embd.weight", &m->ple_embd, 0, 0)) ||
        (st = take_matrix(g, "per_layer_model_proj.weight", &m->ple_model_proj, 0, 0)) ||
        (st = take_vector(m, g, "per_layer_proj_norm.weight", h->ple_dim, 0, &m->ple_proj_norm)))
        return st;
    if (m->ple_embd.cols != pw || m->ple_embd.rows < m->info.vocab_size)
        return ds_fail(DS_ERR_FORMAT, "%s: tensor 'per_layer_token_embd.weight' has shape (%d, %d), expected (>= %d, %d) "
                       "(the vocabulary, block_count x embedding_length_per_layer_input)", g->map.path,
                       m->ple_embd.rows, m->ple_embd.cols, m->info.vocab_size, pw);
    m->ple_embed_scale = scale_in_dtype(m->ple_embd.type, sqrtf((float)h->ple_dim));
    return DS_OK;
}

static ds_status load_weights(ds_model *m, const ds_gguf *g, const gguf_hparams *h) {
    ds_model_info *in = &m->info;
    ds_status st;
    if ((st = take_matrix(g, "token_embd.weight", &m->tok_embd, 0, 0)) ||
        (st = take_matrix(g, "output.weight", &m->output, 1, 0)) ||
        (st = take_vector(m, g, "output_norm.weight", in->dim, 0, &m->out_norm)))
        return st;
    if (!m->output.data) m->output = m->tok_embd; // tied embeddings
    in->vocab_size = m->tok_embd.rows;
    if (h->a->gemma) m->embed_scale = scale_in_dtype(m->tok_embd.type, sqrtf((float)in->dim));
    if (h->ple_dim && (st = load_ple(m, g, h))) return st;
    int n_moe = 0;
    for (int l = 0; l < in->n_layers; l++)
        if ((st = load_layer(m, g, h, l, &n_moe))) return st;
    return fill_rope(m, g, h);
}

ds_status ds_model_load_gguf(const char *path, ds_model **out) {
    *out = NULL;
    ds_model *m = ds_calloc(1, sizeof *m);
    ds_gguf *g = ds_calloc(1, sizeof *g);
    gguf_hparams h;
    memset(&h, 0, sizeof h);
    ds_status st = DS_ERR_NOMEM;
    if (!m || !g) goto fail;
    m->info.bos_id = m->info.eos_id = m->info.unk_id = -1;
    if ((st = ds_gguf_open(g, path))) goto fail;
    m->backing = g;
    m->backing_free = gguf_backing_free;
    g = NULL;
    const ds_gguf *G = m->backing;
    if ((st = find_arch(m, G, &h.a))) goto fail;
    if (ds_gguf_find_kv(G, "general.name")) ds_gguf_get_str(G, "general.name", m->name, sizeof m->name);
    else snprintf(m->name, sizeof m->name, "%s", strrchr(path, '/') ? strrchr(path, '/') + 1 : path);
    if ((st = read_hparams(m, G, &h)) || (st = alloc_model(m, G, &h)) || (st = load_weights(m, G, &h)) ||
        (st = load_vocab(m, G)) || (st = ds_model_finish(m, path)))
        goto fail;
    if (m->tok && ds_tokenizer_vocab_size(m->tok) != m->info.vocab_size) {
        st = ds_fail(DS_ERR_FORMAT, "%s: tokenizer has %d tokens but the embedding has %d rows", path,
                     ds_tokenizer_vocab_size(m->tok), m->info.vocab_size);
        goto fail;
    }
    gguf_hparams_free(&h);
    *out = m;
    return DS_OK;
fail:
    gguf_hparams_free(&h);
    free(g);
    ds_model_free(m);
    return st;
}
