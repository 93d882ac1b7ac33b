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
//              (attn_post_norm, post_ffw_norm), GeGLU (tanh GELU), embeddings × sqrt(dim), sliding-window
//              layers (llama.cpp's pattern: every 6th layer global unless attention.sliding_window_pattern
//              says otherwise) with RoPE base rope.freq_base_swa (default 10000) and no scaling, attention
//              scale key_length^-0.5 (llama.cpp's rule; (dim / heads)^-0.5 for the 62-layer 27B),
//              final_logit_softcapping when present
// Every other architecture (gemma4 included: its converter output has per-layer head geometry,
// proportional RoPE and K = V that this loader does not map) is refused by name.
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
    unsigned char gemma;    // Gemma 3: sandwich norms, GeGLU, embedding scale, sliding-window layers
    unsigned char moe;      // routed experts on layers with ffn_gate_inp
    unsigned char norm_topk; // default of <arch>.expert_weights_norm (llama.cpp: qwen3moe renormalizes)
} gguf_arch;

static const gguf_arch k_archs[] = {
    {"llama", DS_ROPE_INTERLEAVED, 0, 0, 0, 0, 0},
    {"qwen2", DS_ROPE_HALVES, 1, 0, 0, 0, 0},
    {"qwen3", DS_ROPE_HALVES, 0, 1, 0, 0, 0},
    {"qwen2moe", DS_ROPE_HALVES, 1, 0, 0, 1, 0},
    {"qwen3moe", DS_ROPE_HALVES, 0, 1, 0, 1, 1},
    {"gemma3", DS_ROPE_HALVES, 0, 1, 1, 0, 0},
};
#define SUPPORTED_ARCHS "llama, qwen2, qwen3, qwen2moe, qwen3moe, gemma3"

// What the metadata says beyond ds_model_info.
typedef struct {
    const gguf_arch *a;
    double rope_linear;        // rope.scaling.factor of linear scaling (1 = none)
    double local_theta;        // Gemma 3 sliding-window layers' RoPE base
    int window;                // attention.sliding_window of sliding layers (0 = none)
    unsigned char *sliding;    // (n_layers) 1 = a sliding-window layer
    int n_experts, top_k, expert_ffn, shared_ffn, norm_topk;
} gguf_hparams;

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
    int rot;
    ds_status st;
    if ((st = key_float(g, A, "rope.freq_base", h->a->gemma ? 1e6 : 10000.0, &theta)) ||
        (st = key_int(g, A, "rope.dimension_count", in->head_dim, 1, 4096, &rot)) ||
        (st = key_float(g, A, "rope.freq_base_swa", 10000.0, &h->local_theta)))
        return st;
    if (rot != in->head_dim)
        return ds_fail(DS_ERR_UNSUPPORTED, "%s: %s.rope.dimension_count %d != head dim %d: partial RoPE is not supported",
                       g->map.path, A, rot, in->head_dim);
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

static ds_status read_hparams(ds_model *m, const ds_gguf *g, gguf_hparams *h) {
    ds_model_info *in = &m->info;
    const char *A = m->arch;
    ds_status st;
    double eps, softcap;
    static const char *per_layer[] = {"attention.head_count_kv", "feed_forward_length", "attention.head_count"};
    for (size_t i = 0; i < sizeof per_layer / sizeof *per_layer; i++)
        if (key_is_array(g, A, per_layer[i]))
            return ds_fail(DS_ERR_UNSUPPORTED, "%s: %s.%s is a per-layer array; per-layer geometry is not supported for %s",
                           g->map.path, A, per_layer[i], A);
    if ((st = key_int(g, A, "embedding_length", -1, 1, 1 << 16, &in->dim)) ||
        (st = key_int(g, A, "block_count", -1, 1, 4096, &in->n_layers)) ||
        (st = key_int(g, A, "feed_forward_length", h->a->moe ? 0 : -1, 0, 1 << 20, &in->ffn_dim)) ||
        (st = key_int(g, A, "attention.head_count", -1, 1, 4096, &in->n_heads)) ||
        (st = key_int(g, A, "context_length", -1, 1, INT32_MAX, &in->max_ctx)) ||
        (st = key_int(g, A, "attention.head_count_kv", in->n_heads, 1, in->n_heads, &in->n_kv_heads)))
        return st;
    if (in->n_heads % in->n_kv_heads)
        return ds_fail(DS_ERR_FORMAT, "%s: %s.attention.head_count %d is not a multiple of head_count_kv %d", g->map.path,
                       A, in->n_heads, in->n_kv_heads);
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
    return h->a->moe ? read_experts(m, g, h) : DS_OK;
}

// ---- RoPE sets -----------------------------------------------------------------------------------

// rope[0]: theta^(-2i/d) / (linear factor) / rope_freqs[i] (llama3's per-frequency divisors); rope[1]
// (Gemma 3 sliding layers): local_theta^(-2i/d), unscaled.
static ds_status fill_rope(ds_model *m, const ds_gguf *g, const gguf_hparams *h) {
    const int hd = m->info.head_dim, half = hd / 2;
    int any_sliding = 0;
    for (int l = 0; l < m->info.n_layers; l++) any_sliding |= h->sliding[l];
    float *ff = NULL;
    ds_status st = take_vector(m, g, "rope_freqs.weight", half, 1, &ff);
    if (st) return st;
    m->n_rope = any_sliding ? 2 : 1;
    for (int r = 0; r < m->n_rope; r++) {
        m->rope[r].half = half;
        if (!(m->rope[r].inv_freq = ds_model_own(m, (size_t)half)))
            return ds_fail(DS_ERR_NOMEM, "internal: vector storage too small");
    }
    for (int i = 0; i < half; i++) {
        double f = pow((double)m->info.rope_theta, -2.0 * i / hd) / h->rope_linear;
        if (ff) {
            if (!(ff[i] > 0)) return ds_fail(DS_ERR_FORMAT, "%s: rope_freqs.weight[%d] must be positive", g->map.path, i);
            f /= ff[i];
        }
        m->rope[0].inv_freq[i] = (float)f;
        if (any_sliding) m->rope[1].inv_freq[i] = (float)pow(h->local_theta, -2.0 * i / hd);
    }
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
    {"attn_post_norm.weight", offsetof(ds_layer, attn_post_norm), REQ_GEMMA, LEN_DIM},
    {"post_ffw_norm.weight", offsetof(ds_layer, ffn_post_norm), REQ_GEMMA, LEN_DIM},
};

static int needed(const gguf_arch *a, int need) {
    return need == REQ || (need == REQ_BIAS && a->bias) || (need == REQ_QKNORM && a->qk_norm) ||
           (need == REQ_GEMMA && a->gemma);
}

// Router, stacked experts and (Qwen2-MoE) the shared expert of layer l; ex holds 3 x n_experts weights.
static ds_status load_moe_layer(ds_model *m, const ds_gguf *g, const gguf_hparams *h, int l, ds_layer *L, ds_moe *E,
                                ds_weight *ex) {
    const int D = m->info.dim, n = h->n_experts, I = h->expert_ffn;
    char name[96];
    ds_status st;
    E->n_experts = n;
    E->top_k = h->top_k;
    E->ffn_dim = I;
    E->norm_topk = h->norm_topk;
    E->gate = ex, E->up = ex + n, E->down = ex + 2 * n;
    snprintf(name, sizeof name, "blk.%d.ffn_gate_inp.weight", l);
    if ((st = take_matrix(g, name, &E->router, 0, 0))) return st;
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

// Layer l: attention, its vectors, then a dense MLP or experts.
static ds_status load_layer(ds_model *m, const ds_gguf *g, const gguf_hparams *h, int l, int *n_moe) {
    ds_layer *L = &m->layers[l];
    const ds_model_info *in = &m->info;
    char name[96];
    ds_status st;
    L->window = h->sliding[l] ? h->window : 0;
    L->rope = h->sliding[l] ? 1 : 0;
    if (h->a->gemma) // llama.cpp: key_length^-0.5, (dim / heads)^-0.5 for Gemma 3 27B (62 layers)
        L->attn_scale = 1.0f / sqrtf((float)(in->n_layers == 62 ? in->dim / in->n_heads : in->head_dim));
    static const struct { const char *suffix; size_t field; } mats[] = {
        {"attn_q", offsetof(ds_layer, wq)}, {"attn_k", offsetof(ds_layer, wk)},
        {"attn_v", offsetof(ds_layer, wv)}, {"attn_output", offsetof(ds_layer, wo)},
    };
    for (size_t i = 0; i < sizeof mats / sizeof *mats; i++) {
        snprintf(name, sizeof name, "blk.%d.%s.weight", l, mats[i].suffix);
        if ((st = take_matrix(g, name, (ds_weight *)((char *)L + mats[i].field), 0, 0))) return st;
    }
    const int lens[] = {in->dim, in->head_dim, in->n_heads * in->head_dim, in->n_kv_heads * in->head_dim};
    for (size_t i = 0; i < sizeof k_layer_vectors / sizeof *k_layer_vectors; i++) {
        snprintf(name, sizeof name, "blk.%d.%s", l, k_layer_vectors[i].suffix);
        float **dst = (float **)((char *)L + k_layer_vectors[i].field);
        if ((st = take_vector(m, g, name, lens[k_layer_vectors[i].len], !needed(h->a, k_layer_vectors[i].need), dst)))
            return st;
    }
    snprintf(name, sizeof name, "blk.%d.ffn_gate_inp.weight", l);
    if (h->a->moe && ds_gguf_find_tensor(g, name)) {
        ds_moe *E = &m->moe[*n_moe];
        if ((st = load_moe_layer(m, g, h, l, L, E, m->experts + (size_t)*n_moe * 3 * h->n_experts))) return st;
        L->moe = E;
        ++*n_moe;
        return DS_OK;
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

// llama.cpp's end-of-generation tokens recognized by their text (llama-vocab.cpp), FIM pad / repo /
// separator tokens included.
static const char *const k_eog_texts[] = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<end_of_turn>", "<|endoftext|>",
    "<|eom_id|>", "<EOT>", "_<EOT>", "<|end_of_text|>", "<end_of_utterance>", "</s>",
    "<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>",
    "<reponame>", "<|file_sep|>", "<file_sep>",
};

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
    if (toks && toks->type == DS_GGUF_ARRAY && toks->arr_type == DS_GGUF_STRING)
        for (uint64_t i = 0; i < toks->arr_n && i < INT32_MAX; i++)
            for (size_t k = 0; k < sizeof k_eog_texts / sizeof *k_eog_texts; k++)
                if (toks->arr_strs[i].len == strlen(k_eog_texts[k]) &&
                    memcmp(toks->arr_strs[i].ptr, k_eog_texts[k], toks->arr_strs[i].len) == 0)
                    ds_model_add_stop(m, (int32_t)i);
    char model[32] = "";
    if (!ds_gguf_find_kv(g, "tokenizer.ggml.model")) return DS_OK;
    if ((st = ds_gguf_get_str(g, "tokenizer.ggml.model", model, sizeof model))) return st;
    if (strcmp(model, "llama") != 0 && strcmp(model, "gpt2") != 0) return DS_OK;
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
    if (strcmp(m->arch, "gemma4") == 0) // llama.cpp's converter writes it; we do not map it (yet)
        return ds_fail(DS_ERR_UNSUPPORTED, "%s: architecture 'gemma4' (Gemma 4: dense, E-series and 26B-A4B) is not "
                       "supported from GGUF (per-layer head geometry, proportional RoPE, K = V are not mapped); load "
                       "its Hugging Face directory", g->map.path);
    char shown[sizeof m->arch];
    ds_text_escape(shown, sizeof shown, m->arch, strlen(m->arch));
    return ds_fail(DS_ERR_UNSUPPORTED, "%s: architecture '%s' is not supported from GGUF (" SUPPORTED_ARCHS " are)",
                   g->map.path, shown);
}

// Room for every vector the loader widens to f32 and for the model's MoE tables.
static ds_status alloc_model(ds_model *m, const ds_gguf *g, const gguf_hparams *h) {
    const ds_model_info *in = &m->info;
    const size_t D = (size_t)in->dim, hd = (size_t)in->head_dim;
    m->owned_cap = (size_t)in->n_layers * (6 * D + 2 * hd + (size_t)(in->n_heads + 2 * in->n_kv_heads) * hd) + D +
                   3 * hd + 16;
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
    free(h.sliding);
    *out = m;
    return DS_OK;
fail:
    free(h.sliding);
    free(g);
    ds_model_free(m);
    return st;
}
