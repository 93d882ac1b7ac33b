// A loaded target written as one GGUF file (gguf_export.h): the inverse of model/load_gguf.c.
//  - Tensors: llama.cpp's names (token_embd, blk.N.attn_q, ..., output_norm, output; routed experts
//    stacked into 3-D ffn_{gate,up,down}_exps, ne = (cols, rows, n_expert); Gemma 4's gate and up
//    fused into ffn_gate_up_exps, each expert's gate rows first, as its converter writes them) in the
//    converter's order, one table (k_layer) for the per-layer tensors. A Hugging Face llama's Q/K rows (and biases) are
//    permuted per head into llama.cpp's interleaved RoPE order (convert_hf_to_gguf's LlamaModel.permute);
//    a GGUF source is already in that order. Norm vectors are written as the model holds them (the
//    effective multiplier: Gemma 3's 1 + w, as the converter writes it).
//  - Types: llama-quantize's per-tensor mix for the preset (quant/gguf_quantize.c); vectors F32.
//  - Metadata: general.architecture / name / file_type / quantization_version / alignment, the
//    <arch>.* hyper-parameters the converter writes, and the tokenizer: a GGUF source's tokenizer.*
//    keys unchanged; an HF directory's tokenizer.gguf (dspark's own export) likewise; else a byte-level
//    BPE tokenizer.json as the converter stores it (tokenizer.ggml.model "gpt2", tokens padded with
//    [PADn] to the embedding's rows, token_type, merges, pre, BOS/EOS, chat template).
//  - Streaming: a tensor is read a chunk of rows at a time (widened to f32, quantized, written) and its
//    source pages dropped afterwards; memory stays one chunk, not the model. The file is reloaded
//    (smoke test) before it is renamed into place.
#include "quant/gguf_export.h"

#include <cjson/cJSON.h>
#include <ctype.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/status.h"
#include "base/threads.h"
#include "io/gguf.h"
#include "io/json.h"
#include "io/mapfile.h"

typedef enum { SRC_MAT, SRC_VEC, SRC_EXPERTS, SRC_GATE_UP } src_kind;

typedef struct {
    char name[96];
    int n_dims;
    int64_t ne[3];         // ggml order: ne[0] = row width
    src_kind kind;
    const ds_weight *w;    // SRC_MAT: one; SRC_EXPERTS: n_exp of them (ne[2]); SRC_GATE_UP: the gates
    const ds_weight *w2;   // SRC_GATE_UP: the n_exp ups (expert e's rows: w[e]'s, then w2[e]'s)
    const float *vec;      // SRC_VEC
    int perm_hd;           // > 0: output row (vector element) r is source row perm(r), heads of this size
    ds_dtype type;         // the output type
} out_tensor;

typedef struct {
    out_tensor *t;
    int n, cap;
} tensor_list;

static out_tensor *add(tensor_list *l, const char *name, src_kind k) {
    if (l->n == l->cap) {
        int cap = l->cap ? 2 * l->cap : 128;
        out_tensor *t = realloc(l->t, (size_t)cap * sizeof *t);
        if (!t) return NULL;
        l->t = t, l->cap = cap;
    }
    out_tensor *t = &l->t[l->n++];
    memset(t, 0, sizeof *t);
    snprintf(t->name, sizeof t->name, "%s", name);
    t->kind = k;
    return t;
}

static ds_status add_mat(tensor_list *l, const char *name, const ds_weight *w, int perm_hd) {
    if (!w->data) return DS_OK;
    out_tensor *t = add(l, name, SRC_MAT);
    if (!t) return DS_ERR_NOMEM;
    t->w = w;
    t->perm_hd = perm_hd;
    t->ne[0] = w->cols, t->ne[1] = w->rows;
    t->n_dims = 2; // (a (1, n) matrix stays 2-D, as the converter writes it; the type rule sees a vector)
    return DS_OK;
}

static ds_status add_vec(tensor_list *l, const char *name, const float *v, int n, int perm_hd) {
    if (!v) return DS_OK;
    out_tensor *t = add(l, name, SRC_VEC);
    if (!t) return DS_ERR_NOMEM;
    t->vec = v;
    t->perm_hd = perm_hd;
    t->ne[0] = n;
    t->n_dims = 1;
    return DS_OK;
}

static int64_t n_rows(const out_tensor *t) { return t->n_dims == 1 ? 1 : t->n_dims == 2 ? t->ne[1] : t->ne[1] * t->ne[2]; }

// ggml_n_dims: trailing dimensions of 1 do not count (what llama-quantize's rule looks at).
static int ggml_dims(const out_tensor *t) {
    int n = t->n_dims;
    while (n > 1 && t->ne[n - 1] == 1) n--;
    return n;
}

// llama.cpp's interleaved order: output index h·d + 2i is HF's h·d + i, h·d + 2i + 1 is h·d + d/2 + i.
static int64_t perm(int64_t r, int d) {
    const int64_t h = r / d, j = r % d;
    return h * d + (j % 2 ? d / 2 : 0) + j / 2;
}

// Output row r of t as f32 (ne[0] floats).
static void row_f32(const out_tensor *t, int64_t r, float *out) {
    if (t->kind == SRC_VEC) {
        for (int64_t i = 0; i < t->ne[0]; i++) out[i] = t->vec[t->perm_hd ? perm(i, t->perm_hd) : i];
    } else if (t->kind == SRC_MAT) {
        ds_weight_row_f32(t->w, (int)(t->perm_hd ? perm(r, t->perm_hd) : r), out);
    } else if (t->kind == SRC_EXPERTS) {
        ds_weight_row_f32(&t->w[r / t->ne[1]], (int)(r % t->ne[1]), out);
    } else {
        const int64_t e = r / t->ne[1], j = r % t->ne[1], half = t->ne[1] / 2;
        ds_weight_row_f32(j < half ? &t->w[e] : &t->w2[e], (int)(j < half ? j : j - half), out);
    }
}

// The bytes of t's source (what the export reads).
static size_t src_bytes_of(const out_tensor *t) {
    size_t n = t->kind == SRC_VEC ? (size_t)t->ne[0] * 4 : t->kind == SRC_MAT ? ds_weight_data_bytes(t->w) : 0;
    for (int64_t e = 0; t->kind >= SRC_EXPERTS && e < t->ne[2]; e++)
        n += ds_weight_data_bytes(&t->w[e]) + (t->kind == SRC_GATE_UP ? ds_weight_data_bytes(&t->w2[e]) : 0);
    return n;
}

static void drop_source(const out_tensor *t) {
    if (t->kind == SRC_MAT) ds_mapfile_drop(t->w->data, ds_weight_data_bytes(t->w));
    for (int64_t e = 0; t->kind >= SRC_EXPERTS && e < t->ne[2]; e++) {
        ds_mapfile_drop(t->w[e].data, ds_weight_data_bytes(&t->w[e]));
        if (t->kind == SRC_GATE_UP) ds_mapfile_drop(t->w2[e].data, ds_weight_data_bytes(&t->w2[e]));
    }
}

// ---- the architecture ----------------------------------------------------------------------------

// GGUF's general.architecture for the model's family (HF loads name some "qwen2_moe").
static const char *gguf_arch(const ds_model *m) {
    static const char *const map[][2] = {{"llama", "llama"}, {"qwen2", "qwen2"}, {"qwen3", "qwen3"},
                                         {"qwen2_moe", "qwen2moe"}, {"qwen2moe", "qwen2moe"},
                                         {"qwen3_moe", "qwen3moe"}, {"qwen3moe", "qwen3moe"}, {"gemma3", "gemma3"},
                                         {"gemma4", "gemma4"}};
    for (size_t i = 0; i < sizeof map / sizeof *map; i++)
        if (!strcmp(m->arch, map[i][0])) return map[i][1];
    return NULL;
}

static int is_gemma4(const ds_model *m) { return !strcmp(m->arch, "gemma4"); }

// What GGUF's gemma4 can say of layer l: the head dim and RoPE of its type (sliding: info.head_dim and
// rope[1]; full: rope[0]'s), the V norm, attention scale 1, KV sharing of the last layers from the last
// unshared layer of their type (first_shared: the first shared layer), one window for sliding layers,
// experts without Qwen's shared-expert gate. llama.cpp takes a shared layer's cache from the layer
// just before the first shared one (full layers) or the one before that (sliding: llama-model.cpp's
// reuse callback), so those two must be a full and a sliding layer, as in every Gemma 4 checkpoint.
static ds_status check_gemma4_layer(const ds_model *m, int l, int first_shared, const char *src) {
    const ds_layer *L = &m->layers[l];
    const int sliding = L->window != 0, full_hd = 2 * m->rope[0].half;
    int src_l = -1, window = 0;
    for (int j = 0; j < m->info.n_layers; j++) {
        const int s = m->layers[j].window != 0;
        if (j < first_shared && s == sliding) src_l = j;
        if (s) window = m->layers[j].window;
    }
    if (!L->v_norm || L->attn_scale != 1.0f || L->head_dim != (sliding ? m->info.head_dim : full_hd) ||
        L->rope != (sliding ? 1 : 0) || (sliding && L->window != window) || L->kv_shared != (l >= first_shared) ||
        (L->kv_shared && L->kv_src != src_l) || (L->moe && L->moe->shared_gate.data))
        return ds_fail(DS_ERR_UNSUPPORTED, "%s: layer %d has a geometry GGUF's gemma4 does not describe (its layer "
                       "type's head dim, RoPE and window, V norm, attention scale 1, KV sharing of the last layers)",
                       src, l);
    if (L->kv_shared && src_l != first_shared - (sliding ? 2 : 1))
        return ds_fail(DS_ERR_UNSUPPORTED, "%s: layer %d shares layer %d's KV cache, where llama.cpp's gemma4 would read "
                       "layer %d's (the last unshared layer must be full attention, the one before it sliding)", src, l,
                       src_l, first_shared - (sliding ? 2 : 1));
    return DS_OK;
}

// Gemma 4's full-attention RoPE: theta^(-2i/d) for the first pairs, 0 for the rest (proportional), which
// rope_freqs' divisors 1 and 1e30 say (anything else is not what GGUF's gemma4 can carry).
static ds_status check_gemma4_rope(const ds_model *m, const char *src) {
    const int half = m->rope[0].half;
    int still = 0;
    for (int i = 0; i < half; i++) {
        const float f = m->rope[0].inv_freq[i], want = (float)pow((double)m->info.rope_theta, -2.0 * i / (2 * half));
        if (f == 0) still = 1;
        else if (still || f != want)
            return ds_fail(DS_ERR_UNSUPPORTED, "%s: the full-attention layers' RoPE is not proportional RoPE of base %g "
                           "(frequency %d): GGUF's gemma4 cannot carry it", src, (double)m->info.rope_theta, i);
    }
    return DS_OK;
}

static ds_status check_model(const ds_model *m, const char *src) {
    const char *A = gguf_arch(m);
    if (!A)
        return ds_fail(DS_ERR_UNSUPPORTED, "%s: architecture '%s' cannot be written as GGUF (llama, qwen2, qwen3, "
                       "qwen2moe, qwen3moe, gemma3, gemma4 can)", src, m->arch);
    const int g4 = is_gemma4(m);
    if (m->ple_dim && !g4) return ds_fail(DS_ERR_UNSUPPORTED, "%s: per-layer embeddings cannot be written as GGUF %s", src, A);
    const ds_model_info *in = &m->info;
    ds_status st;
    int first_shared = in->n_layers;
    while (first_shared > 0 && m->layers[first_shared - 1].kv_shared) first_shared--;
    if (g4 && (st = check_gemma4_rope(m, src))) return st;
    for (int l = 0; l < in->n_layers; l++) {
        const ds_layer *L = &m->layers[l];
        if (g4) {
            if ((st = check_gemma4_layer(m, l, first_shared, src))) return st;
            continue;
        }
        if (L->kv_shared || L->v_norm || !L->wv.data || (L->out_scale != 0 && L->out_scale != 1) ||
            (L->head_dim && L->head_dim != in->head_dim) || (L->n_kv_heads && L->n_kv_heads != in->n_kv_heads))
            return ds_fail(DS_ERR_UNSUPPORTED, "%s: layer %d has a geometry GGUF's %s does not describe (per-layer "
                           "heads, KV sharing, V norm or a layer scale)", src, l, A);
        if (!strcmp(A, "gemma3") && L->attn_scale != 0) { // GGUF gemma3 has no query_pre_attn_scalar: llama.cpp's rule
            const float want = 1.0f / sqrtf((float)(in->n_layers == 62 ? in->dim / in->n_heads : in->head_dim));
            if (fabsf(L->attn_scale - want) > 1e-6f * want)
                return ds_fail(DS_ERR_UNSUPPORTED, "%s: attention scale %g is not the %g GGUF's gemma3 implies "
                               "(query_pre_attn_scalar != head_dim)", src, (double)L->attn_scale, (double)want);
        }
        if (L->moe && (L->moe->router_scale || L->moe->expert_scale || L->moe->pre_norm || L->moe->post_norm))
            return ds_fail(DS_ERR_UNSUPPORTED, "%s: layer %d's experts have Gemma 4 norms/scales, not in GGUF's %s",
                           src, l, A);
    }
    return DS_OK;
}

// The per-layer tensors in the converter's order: suffix, where the model keeps it.
enum { T_MAT, T_VEC, T_BIAS_Q, T_BIAS_KV, T_QMAT, T_KMAT };
static const struct {
    const char *suffix;
    size_t field;
    unsigned char kind, len; // len: 0 dim, 1 head_dim, 2 q width, 3 kv width
} k_layer[] = {
    {"attn_norm.weight", offsetof(ds_layer, attn_norm), T_VEC, 0},
    {"attn_q.weight", offsetof(ds_layer, wq), T_QMAT, 0},
    {"attn_q.bias", offsetof(ds_layer, bq), T_BIAS_Q, 2},
    {"attn_k.weight", offsetof(ds_layer, wk), T_KMAT, 0},
    {"attn_k.bias", offsetof(ds_layer, bk), T_BIAS_KV, 3},
    {"attn_v.weight", offsetof(ds_layer, wv), T_MAT, 0},
    {"attn_v.bias", offsetof(ds_layer, bv), T_VEC, 3},
    {"attn_output.weight", offsetof(ds_layer, wo), T_MAT, 0},
    {"attn_output.bias", offsetof(ds_layer, bo), T_VEC, 0},
    {"attn_q_norm.weight", offsetof(ds_layer, q_norm), T_VEC, 1},
    {"attn_k_norm.weight", offsetof(ds_layer, k_norm), T_VEC, 1},
    {"post_attention_norm.weight", offsetof(ds_layer, attn_post_norm), T_VEC, 0},
    {"ffn_norm.weight", offsetof(ds_layer, ffn_norm), T_VEC, 0},
};

// Gemma 4 layer i's tensors beyond Gemma 3's: the output scale, the per-layer embedding projections,
// and on an MoE layer the router's scales, the expert norms and the experts (gate and up fused).
static ds_status list_gemma4_layer(const ds_model *m, tensor_list *l, int i) {
    const ds_layer *L = &m->layers[i];
    const int D = m->info.dim;
    char name[96];
    ds_status st = DS_OK;
#define NAME(suffix) (snprintf(name, sizeof name, "blk.%d." suffix, i), name)
    if (L->out_scale != 1.0f) st = add_vec(l, NAME("layer_output_scale.weight"), &L->out_scale, 1, 0);
    if (!st) st = add_mat(l, NAME("inp_gate.weight"), &L->ple_gate, 0);
    if (!st) st = add_mat(l, NAME("proj.weight"), &L->ple_proj, 0);
    if (!st) st = add_vec(l, NAME("post_norm.weight"), L->ple_post_norm, D, 0);
    const ds_moe *E = L->moe;
    if (st || !E) return st;
    if ((st = add_mat(l, NAME("ffn_gate_inp.weight"), &E->router, 0)) ||
        (st = add_vec(l, NAME("ffn_gate_inp.scale"), E->router_scale, D, 0)) ||
        (st = add_vec(l, NAME("ffn_down_exps.scale"), E->expert_scale, E->n_experts, 0)) ||
        (st = add_vec(l, NAME("pre_ffw_norm_2.weight"), E->pre_norm, D, 0)) ||
        (st = add_vec(l, NAME("post_ffw_norm_1.weight"), E->dense_post_norm, D, 0)) ||
        (st = add_vec(l, NAME("post_ffw_norm_2.weight"), E->post_norm, D, 0)))
        return st;
    out_tensor *t = add(l, NAME("ffn_gate_up_exps.weight"), SRC_GATE_UP), *d = t ? add(l, NAME("ffn_down_exps.weight"), SRC_EXPERTS) : NULL;
#undef NAME
    if (!d) return DS_ERR_NOMEM;
    t = d - 1; // (add may have moved the list)
    t->w = E->gate, t->w2 = E->up, d->w = E->down;
    t->n_dims = d->n_dims = 3;
    t->ne[0] = D, t->ne[1] = 2 * (int64_t)E->ffn_dim, t->ne[2] = E->n_experts;
    d->ne[0] = E->ffn_dim, d->ne[1] = D, d->ne[2] = E->n_experts;
    return DS_OK;
}

static ds_status list_tensors(const ds_model *m, tensor_list *l, const float *rope_freqs) {
    const ds_model_info *in = &m->info;
    const int permute = !strcmp(gguf_arch(m), "llama") && in->rope_layout == DS_ROPE_HALVES, g4 = is_gemma4(m);
    char name[96];
    ds_status st = add_mat(l, "token_embd.weight", &m->tok_embd, 0);
    if (!st && m->ple_dim) {
        if (!(st = add_mat(l, "per_layer_token_embd.weight", &m->ple_embd, 0)) &&
            !(st = add_mat(l, "per_layer_model_proj.weight", &m->ple_model_proj, 0)))
            st = add_vec(l, "per_layer_proj_norm.weight", m->ple_proj_norm, m->ple_dim, 0);
    }
    for (int i = 0; i < in->n_layers && !st; i++) {
        const ds_layer *L = &m->layers[i];
        const int hd = L->head_dim, lens[] = {in->dim, hd, in->n_heads * hd, L->n_kv_heads * hd};
        for (size_t k = 0; k < sizeof k_layer / sizeof *k_layer && !st; k++) {
            const void *f = (const char *)L + k_layer[k].field;
            snprintf(name, sizeof name, "blk.%d.%s", i, k_layer[k].suffix);
            const int kind = k_layer[k].kind, p = permute && kind != T_MAT && kind != T_VEC ? hd : 0;
            if (kind == T_MAT || kind == T_QMAT || kind == T_KMAT) st = add_mat(l, name, f, p);
            else st = add_vec(l, name, *(float *const *)f, lens[k_layer[k].len], p);
        }
        if (st) break;
        if (g4 && (st = list_gemma4_layer(m, l, i))) break;
        if (L->moe && !g4) {
            const ds_moe *E = L->moe;
            snprintf(name, sizeof name, "blk.%d.ffn_gate_inp.weight", i);
            if ((st = add_mat(l, name, &E->router, 0))) break;
            const ds_weight *ex[] = {E->gate, E->up, E->down};
            static const char *const exn[] = {"ffn_gate_exps", "ffn_up_exps", "ffn_down_exps"};
            for (int k = 0; k < 3; k++) {
                snprintf(name, sizeof name, "blk.%d.%s.weight", i, exn[k]);
                out_tensor *t = add(l, name, SRC_EXPERTS);
                if (!t) return DS_ERR_NOMEM;
                t->w = ex[k];
                t->n_dims = 3;
                t->ne[0] = ex[k][0].cols, t->ne[1] = ex[k][0].rows, t->ne[2] = E->n_experts;
            }
            if (L->w_gate.data) {
                static const char *const shn[] = {"ffn_gate_shexp", "ffn_up_shexp", "ffn_down_shexp"};
                const ds_weight *sh[] = {&L->w_gate, &L->w_up, &L->w_down};
                for (int k = 0; k < 3 && !st; k++) {
                    snprintf(name, sizeof name, "blk.%d.%s.weight", i, shn[k]);
                    st = add_mat(l, name, sh[k], 0);
                }
                snprintf(name, sizeof name, "blk.%d.ffn_gate_inp_shexp.weight", i);
                if (!st) st = add_mat(l, name, &E->shared_gate, 0);
            }
        } else {
            static const char *const mlp[] = {"ffn_gate", "ffn_up", "ffn_down"};
            const ds_weight *w[] = {&L->w_gate, &L->w_up, &L->w_down};
            for (int k = 0; k < 3 && !st; k++) {
                snprintf(name, sizeof name, "blk.%d.%s.weight", i, mlp[k]);
                st = add_mat(l, name, w[k], 0);
            }
        }
        snprintf(name, sizeof name, "blk.%d.post_ffw_norm.weight", i);
        if (!st) st = add_vec(l, name, L->ffn_post_norm, in->dim, 0);
    }
    if (!st) st = add_vec(l, "output_norm.weight", m->out_norm, in->dim, 0);
    if (!st && m->output.data != m->tok_embd.data) st = add_mat(l, "output.weight", &m->output, 0);
    if (!st && rope_freqs) st = add_vec(l, "rope_freqs.weight", rope_freqs, m->rope[0].half, 0);
    return st ? ds_fail(st, "out of memory") : DS_OK;
}

// rope[0]'s divisors of theta^(-2i/d): NULL when they are all 1 (no scaling) or all equal (linear
// scaling: *linear receives the factor, written as rope.scaling.type/factor as the converter does);
// else the per-frequency divisors (llama3 scaling), written as rope_freqs.weight. Gemma 4 (whose
// converter always writes them): 1 for a rotating pair, 1e30 for a still one (check_gemma4_rope).
static float *rope_divisors(const ds_model *m, double *linear) {
    const int half = m->rope[0].half, hd = 2 * half;
    *linear = 1;
    if (!m->rope[0].inv_freq) return NULL;
    float *ff = malloc(sizeof(float) * (size_t)half);
    if (ff && is_gemma4(m)) {
        for (int i = 0; i < half; i++) ff[i] = m->rope[0].inv_freq[i] == 0 ? 1e30f : 1.0f;
        return ff;
    }
    int any = 0, same = 1;
    for (int i = 0; ff && i < half; i++) {
        const double base = pow((double)m->info.rope_theta, -2.0 * i / hd);
        ff[i] = (float)(base / m->rope[0].inv_freq[i]);
        any |= fabs(ff[i] - 1.0) > 1e-6;
        same &= fabs(ff[i] - ff[0]) <= 1e-6 * ff[0];
    }
    if (ff && any && same) *linear = ff[0];
    if (!any || same) free(ff), ff = NULL;
    return ff;
}

// ---- metadata ------------------------------------------------------------------------------------

static void key_u32(ds_gguf_writer *w, const char *A, const char *suffix, uint32_t v) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", A, suffix);
    ds_gguf_writer_u32(w, key, v);
}

static void key_f32(ds_gguf_writer *w, const char *A, const char *suffix, float v) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", A, suffix);
    ds_gguf_writer_f32(w, key, v);
}

// The sliding layers' RoPE base: from base^(-2/d) = inv_freq[1], the nearest integer when that gives
// the table bit for bit (what a config's rope_theta is), so the file loads back to the same frequencies.
static double sliding_base(const ds_model *m) {
    const ds_rope_freqs *r = &m->rope[1];
    const int hd = 2 * r->half;
    const double base = pow((double)r->inv_freq[1], -(double)hd / 2.0), whole = nearbyint(base);
    for (int i = 0; i < r->half; i++)
        if ((float)pow(whole, -2.0 * i / hd) != r->inv_freq[i]) return base;
    return whole;
}

// "<A>.<suffix>": the layers' value of a per-layer int field, or one per layer when they differ.
static void key_layers(ds_gguf_writer *w, const ds_model *m, const char *A, const char *suffix, size_t field) {
    const int n = m->info.n_layers;
    uint32_t *v = malloc(sizeof *v * (size_t)n);
    int same = 1;
    for (int l = 0; v && l < n; l++) {
        v[l] = (uint32_t) * (const int *)((const char *)&m->layers[l] + field);
        same &= v[l] == v[0];
    }
    char key[128];
    snprintf(key, sizeof key, "%s.%s", A, suffix);
    if (v && same) ds_gguf_writer_u32(w, key, v[0]);
    else if (v) ds_gguf_writer_arr(w, key, DS_GGUF_U32, (uint64_t)n, v, 4);
    free(v);
}

// Gemma 4's keys beyond Gemma 3's (conversion/gemma.py Gemma4Model.set_gguf_parameters): each layer
// type's head dim and RoPE, KV heads and MLP widths per layer where they differ, the sliding flags,
// KV sharing, the per-layer input width.
static void write_gemma4(ds_gguf_writer *w, const ds_model *m, const char *A) {
    const ds_model_info *in = &m->info;
    const int n = in->n_layers, full_hd = 2 * m->rope[0].half;
    int shared = 0;
    for (int l = 0; l < n; l++) shared += m->layers[l].kv_shared;
    key_u32(w, A, "attention.key_length", (uint32_t)full_hd);
    key_u32(w, A, "attention.value_length", (uint32_t)full_hd);
    key_u32(w, A, "attention.key_length_swa", (uint32_t)in->head_dim);
    key_u32(w, A, "attention.value_length_swa", (uint32_t)in->head_dim);
    key_u32(w, A, "rope.dimension_count", (uint32_t)full_hd);
    key_u32(w, A, "rope.dimension_count_swa", (uint32_t)in->head_dim);
    key_u32(w, A, "attention.shared_kv_layers", (uint32_t)shared);
    key_u32(w, A, "embedding_length_per_layer_input", (uint32_t)m->ple_dim);
    key_layers(w, m, A, "attention.head_count_kv", offsetof(ds_layer, n_kv_heads));
    key_layers(w, m, A, "feed_forward_length", offsetof(ds_layer, ffn_dim));
}

static void write_hparams(ds_gguf_writer *w, const ds_model *m, const char *A, double linear) {
    const ds_model_info *in = &m->info;
    const int g4 = is_gemma4(m);
    key_u32(w, A, "context_length", (uint32_t)in->max_ctx);
    key_u32(w, A, "embedding_length", (uint32_t)in->dim);
    key_u32(w, A, "block_count", (uint32_t)in->n_layers);
    if (in->ffn_dim && !g4) key_u32(w, A, "feed_forward_length", (uint32_t)in->ffn_dim);
    key_u32(w, A, "attention.head_count", (uint32_t)in->n_heads);
    if (!g4) key_u32(w, A, "attention.head_count_kv", (uint32_t)in->n_kv_heads);
    key_f32(w, A, "rope.freq_base", in->rope_theta);
    key_f32(w, A, "attention.layer_norm_rms_epsilon", in->norm_eps);
    if (g4) {
        write_gemma4(w, m, A);
    } else {
        key_u32(w, A, "attention.key_length", (uint32_t)in->head_dim); // (the converter: whenever config.json has head_dim)
        key_u32(w, A, "attention.value_length", (uint32_t)in->head_dim);
    }
    if (linear != 1) {
        char key[128];
        snprintf(key, sizeof key, "%s.rope.scaling.type", A);
        ds_gguf_writer_str(w, key, "linear", 6);
        key_f32(w, A, "rope.scaling.factor", (float)linear);
    }
    if (!strcmp(A, "llama")) {
        key_u32(w, A, "vocab_size", (uint32_t)in->vocab_size);
        key_u32(w, A, "rope.dimension_count", (uint32_t)in->head_dim);
    }
    const ds_moe *E = m->n_moe ? &m->moe[0] : NULL;
    if (E) {
        key_u32(w, A, "expert_count", (uint32_t)E->n_experts);
        key_u32(w, A, "expert_used_count", (uint32_t)E->top_k);
        key_u32(w, A, "expert_feed_forward_length", (uint32_t)E->ffn_dim);
        for (int l = 0; !g4 && l < in->n_layers; l++) // (Gemma 4's dense MLP is no shared expert)
            if (m->layers[l].moe && m->layers[l].w_gate.data) {
                key_u32(w, A, "expert_shared_feed_forward_length", (uint32_t)m->layers[l].w_gate.rows);
                break;
            }
        const int def = !strcmp(A, "qwen3moe") || g4;
        if (E->norm_topk != def) {
            char key[128];
            snprintf(key, sizeof key, "%s.expert_weights_norm", A);
            ds_gguf_writer_bool(w, key, E->norm_topk);
        }
    }
    if (!strcmp(A, "gemma3") || g4) {
        int window = 0, n_sliding = 0, pattern6 = !g4; // (Gemma 4's converter always writes the flags)
        for (int l = 0; l < in->n_layers; l++) {
            const int s = m->layers[l].window != 0;
            if (s) window = m->layers[l].window, n_sliding++;
            pattern6 &= s == ((l + 1) % 6 != 0);
        }
        if (window) key_u32(w, A, "attention.sliding_window", (uint32_t)window);
        if (window && !pattern6) {
            char key[128];
            uint8_t *flags = malloc((size_t)in->n_layers);
            snprintf(key, sizeof key, "%s.attention.sliding_window_pattern", A);
            for (int l = 0; flags && l < in->n_layers; l++) flags[l] = m->layers[l].window != 0;
            if (flags) ds_gguf_writer_arr(w, key, DS_GGUF_BOOL, (uint64_t)in->n_layers, flags, 1);
            free(flags);
        }
        if (n_sliding && m->n_rope > 1 && m->rope[1].half > 1) { // base^(-2/d) = inv_freq[1]
            const double base = sliding_base(m);
            if (g4 || fabs(base - 10000.0) > 1e-3 * 10000.0) key_f32(w, A, "rope.freq_base_swa", (float)base);
        }
        if (m->final_softcap > 0) key_f32(w, A, "final_logit_softcapping", m->final_softcap);
    }
}

static int is_file(const char *p) {
    struct stat sb;
    return stat(p, &sb) == 0 && S_ISREG(sb.st_mode);
}

// Every tokenizer.* key of a GGUF file.
static ds_status copy_tokenizer(ds_gguf_writer *w, const ds_gguf *g) {
    for (uint64_t i = 0; i < g->n_kv; i++)
        if (!strncmp(g->kv[i].key, "tokenizer.", 10)) ds_gguf_writer_copy(w, &g->kv[i]);
    return DS_OK;
}

// The pre-tokenizer regex of a tokenizer.json (a Split, alone or in a Sequence), or NULL.
static const char *split_regex(const cJSON *pt) {
    if (!cJSON_IsObject(pt)) return NULL;
    const cJSON *ty = cJSON_GetObjectItemCaseSensitive(pt, "type");
    if (cJSON_IsString(ty) && !strcmp(ty->valuestring, "Sequence")) {
        const cJSON *it;
        cJSON_ArrayForEach(it, cJSON_GetObjectItemCaseSensitive(pt, "pretokenizers")) {
            const char *r = split_regex(it);
            if (r) return r;
        }
        return NULL;
    }
    if (!cJSON_IsString(ty) || strcmp(ty->valuestring, "Split")) return NULL;
    const cJSON *re = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(pt, "pattern"), "Regex");
    return cJSON_IsString(re) ? re->valuestring : NULL;
}

// llama.cpp's tokenizer.ggml.pre for a byte-level BPE regex: digits one at a time = "qwen2", up to
// three = "llama-bpe", anything else "default" (GPT-2's).
static const char *pre_name(const char *re) {
    if (!re) return "default";
    if (strstr(re, "\\p{N}{1,3}")) return "llama-bpe";
    if (strstr(re, "\\p{N}|")) return "qwen2";
    return "default";
}

// The id of token text s in a tokenizer.json (its vocabulary or its added tokens), or -1.
static int token_id(const cJSON *vocab, const cJSON *added, const char *s) {
    const cJSON *v = s ? cJSON_GetObjectItemCaseSensitive(vocab, s) : NULL, *it;
    if (cJSON_IsNumber(v)) return v->valueint;
    cJSON_ArrayForEach(it, added) {
        const cJSON *c = cJSON_GetObjectItemCaseSensitive(it, "content"), *id = cJSON_GetObjectItemCaseSensitive(it, "id");
        if (s && cJSON_IsString(c) && !strcmp(c->valuestring, s) && cJSON_IsNumber(id)) return id->valueint;
    }
    return -1;
}

// A special token's text in tokenizer_config.json: a string or {"content": string}.
static const char *config_token(const cJSON *v) {
    if (cJSON_IsObject(v)) v = cJSON_GetObjectItemCaseSensitive(v, "content");
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

static const char *const k_named[] = {"bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token",
                                      "mask_token"};

// Gemma 4's token types as its converter gives them (gguf-py's LlamaHfVocab, Gemma4Model.set_vocab):
// 1 normal, 3 control for the ids of transformers' all_special_ids (the named tokens of
// tokenizer_config.json, additional_special_tokens, extra_special_tokens), 4 user-defined for the
// other added tokens past the base vocabulary and for the tokens it always renders, 6 byte for the
// base vocabulary's "<0xHH>".
static void gemma4_types(const cJSON *vocab, const cJSON *added, const cJSON *tc, const char **tok, int n, int32_t *tt) {
    static const char *const visible[] = {"<|channel>", "<channel|>", "<|tool_call>", "<tool_call|>", "<|tool_response>",
                                          "<tool_response|>", "<|\"|>"};
    const int n_base = cJSON_GetArraySize(vocab);
    for (int i = 0; i < n; i++) {
        const char *t = tok[i];
        const int byte = strlen(t) == 6 && !strncmp(t, "<0x", 3) && isxdigit((unsigned char)t[3]) &&
                         isxdigit((unsigned char)t[4]) && t[5] == '>';
        tt[i] = i >= n_base ? 4 : byte ? 6 : 1;
    }
    const cJSON *it;
    for (size_t k = 0; k < sizeof k_named / sizeof *k_named; k++) {
        const int id = token_id(vocab, added, config_token(cJSON_GetObjectItemCaseSensitive(tc, k_named[k])));
        if (id >= 0 && id < n) tt[id] = 3;
    }
    const cJSON *lists[] = {cJSON_GetObjectItemCaseSensitive(tc, "additional_special_tokens"),
                            cJSON_GetObjectItemCaseSensitive(tc, "extra_special_tokens")};
    for (int l = 0; l < 2; l++)
        cJSON_ArrayForEach(it, lists[l]) { // (an object's values or an array's items)
            const int id = token_id(vocab, added, config_token(it));
            if (id >= 0 && id < n) tt[id] = 3;
        }
    for (int i = 0; i < n; i++)
        for (size_t k = 0; k < sizeof visible / sizeof *visible; k++)
            if (!strcmp(tok[i], visible[k])) tt[i] = 4;
}

// Gemma 4's special-token keys: the named tokens' ids, add_eos_token (the post-processor's, then
// tokenizer_config.json's), no space prefix, BOS always.
static void gemma4_special(ds_gguf_writer *w, const cJSON *tj, const cJSON *vocab, const cJSON *added, const cJSON *tc) {
    static const char *const keys[] = {"bos", "eos", "unknown", "seperator", "padding", NULL, "mask"}; // (gguf's spelling)
    for (size_t k = 0; k < sizeof k_named / sizeof *k_named; k++) {
        const int id = token_id(vocab, added, config_token(cJSON_GetObjectItemCaseSensitive(tc, k_named[k])));
        char key[64];
        snprintf(key, sizeof key, "tokenizer.ggml.%s_token_id", keys[k] ? keys[k] : "cls"); // (no cls key is written)
        if (keys[k] && id >= 0) ds_gguf_writer_u32(w, key, (uint32_t)id);
    }
    const cJSON *single = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(tj, "post_processor"), "single");
    const cJSON *last = cJSON_GetArraySize(single) > 1 ? cJSON_GetArrayItem(single, cJSON_GetArraySize(single) - 1) : NULL;
    const cJSON *sp = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(last, "SpecialToken"), "id");
    const char *eos = config_token(cJSON_GetObjectItemCaseSensitive(tc, "eos_token"));
    int add_eos = -1;
    if (cJSON_IsString(sp)) add_eos = eos && !strcmp(sp->valuestring, eos);
    const cJSON *ae = cJSON_GetObjectItemCaseSensitive(tc, "add_eos_token");
    if (cJSON_IsBool(ae)) add_eos = cJSON_IsTrue(ae);
    if (add_eos >= 0) ds_gguf_writer_bool(w, "tokenizer.ggml.add_eos_token", add_eos);
    ds_gguf_writer_bool(w, "tokenizer.ggml.add_space_prefix", 0);
    ds_gguf_writer_bool(w, "tokenizer.ggml.add_bos_token", 1);
}

// A BPE tokenizer.json (+ tokenizer_config.json) as the converter stores it: byte-level as "gpt2";
// for Gemma 4 (SentencePiece-style, whatever its decoder) as "gemma4". *ok 0 when the directory holds
// no tokenizer of that kind (the GGUF then has none: it runs on token ids).
static ds_status bpe_tokenizer(ds_gguf_writer *w, const ds_model *m, const char *dir, int *ok) {
    char path[4200];
    cJSON *tj = NULL, *tc = NULL;
    *ok = 0;
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    if (!is_file(path)) return DS_OK;
    ds_status st = ds_json_load(path, (size_t)1 << 30, &tj);
    if (st) return st;
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(tj, "model");
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(model, "type");
    const cJSON *vocab = cJSON_GetObjectItemCaseSensitive(model, "vocab");
    const cJSON *merges = cJSON_GetObjectItemCaseSensitive(model, "merges");
    const cJSON *dec = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(tj, "decoder"), "type");
    const int g4 = is_gemma4(m);
    if (!cJSON_IsString(type) || strcmp(type->valuestring, "BPE") || !cJSON_IsObject(vocab) || !cJSON_IsArray(merges) ||
        (!g4 && (!cJSON_IsString(dec) || strcmp(dec->valuestring, "ByteLevel")))) {
        cJSON_Delete(tj);
        return DS_OK; // (a SentencePiece-style tokenizer.json is not converted but for Gemma 4)
    }
    int n = m->info.vocab_size; // ids must lie in the embedding's rows (the loader checks the same)
    const cJSON *it, *added = cJSON_GetObjectItemCaseSensitive(tj, "added_tokens");
    cJSON_ArrayForEach(it, vocab) if (cJSON_IsNumber(it) && (it->valueint < 0 || it->valueint >= n)) break;
    const cJSON *bad = it;
    if (!bad) cJSON_ArrayForEach(it, added) {
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(it, "id");
        if (cJSON_IsNumber(id) && (id->valueint < 0 || id->valueint >= n)) break;
    }
    if (bad || it) {
        cJSON_Delete(tj);
        return ds_fail(DS_ERR_FORMAT, "%s: token id outside the embedding's %d rows", path, n);
    }
    const char **tok = calloc((size_t)n, sizeof *tok);
    char (*pad)[24] = calloc((size_t)n, sizeof *pad);
    int32_t *tt = calloc((size_t)n, sizeof *tt);
    const int n_merges = cJSON_GetArraySize(merges);
    const char **mg = calloc((size_t)n_merges + 1, sizeof *mg);
    char **mg_owned = calloc((size_t)n_merges + 1, sizeof *mg_owned);
    if (!tok || !pad || !tt || !mg || !mg_owned) {
        st = ds_fail(DS_ERR_NOMEM, "out of memory");
        goto done;
    }
    for (int i = 0; i < n; i++) tt[i] = 1;
    cJSON_ArrayForEach(it, vocab) if (cJSON_IsNumber(it) && it->valueint >= 0) tok[it->valueint] = it->string;
    cJSON_ArrayForEach(it, added) {
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(it, "id"), *c = cJSON_GetObjectItemCaseSensitive(it, "content");
        if (!cJSON_IsNumber(id) || id->valueint < 0 || !cJSON_IsString(c)) continue;
        tok[id->valueint] = c->valuestring;
        tt[id->valueint] = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(it, "special")) ? 3 : 4;
    }
    for (int i = 0; i < n; i++)
        if (!tok[i]) snprintf(pad[i], sizeof pad[i], "[PAD%d]", i), tok[i] = pad[i], tt[i] = 1;
    int k = 0;
    cJSON_ArrayForEach(it, merges) {
        if (cJSON_IsString(it)) {
            mg[k++] = it->valuestring;
        } else if (cJSON_IsArray(it) && cJSON_GetArraySize(it) == 2 && cJSON_IsString(cJSON_GetArrayItem(it, 0)) &&
                   cJSON_IsString(cJSON_GetArrayItem(it, 1))) {
            const char *a = cJSON_GetArrayItem(it, 0)->valuestring, *b = cJSON_GetArrayItem(it, 1)->valuestring;
            char *s = malloc(2 * (strlen(a) + strlen(b)) + 2), *o = s;
            if (!s) {
                st = ds_fail(DS_ERR_NOMEM, "out of memory");
                goto done;
            }
            for (int part = 0; part < 2; part++) { // a space inside a piece as "Ġ" (gguf-py's SpecialVocab)
                for (const char *c = part ? b : a; *c; c++)
                    if (*c == ' ') *o++ = '\xc4', *o++ = '\xa0';
                    else *o++ = *c;
                *o++ = part ? 0 : ' ';
            }
            mg[k] = mg_owned[k] = s;
            k++;
        }
    }
    snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
    if (is_file(path) && (st = ds_json_load(path, (size_t)64 << 20, &tc))) goto done;
    if (g4) gemma4_types(vocab, added, tc, tok, n, tt);
    ds_gguf_writer_str(w, "tokenizer.ggml.model", g4 ? "gemma4" : "gpt2", g4 ? 6 : 4);
    const char *pre = pre_name(split_regex(cJSON_GetObjectItemCaseSensitive(tj, "pre_tokenizer")));
    if (!g4) ds_gguf_writer_str(w, "tokenizer.ggml.pre", pre, strlen(pre));
    ds_gguf_writer_arr_str(w, "tokenizer.ggml.tokens", (uint64_t)n, tok, NULL);
    if (g4) { // every score -1000, as LlamaHfVocab gives a BPE vocabulary
        float *sc = malloc(sizeof *sc * (size_t)n);
        if (!sc) {
            st = ds_fail(DS_ERR_NOMEM, "out of memory");
            goto done;
        }
        for (int i = 0; i < n; i++) sc[i] = -1000.0f;
        ds_gguf_writer_arr(w, "tokenizer.ggml.scores", DS_GGUF_F32, (uint64_t)n, sc, 4);
        free(sc);
    }
    ds_gguf_writer_arr(w, "tokenizer.ggml.token_type", DS_GGUF_I32, (uint64_t)n, tt, 4);
    ds_gguf_writer_arr_str(w, "tokenizer.ggml.merges", (uint64_t)k, mg, NULL);
    if (g4) {
        gemma4_special(w, tj, vocab, added, tc);
    } else {
        if (m->info.bos_id >= 0) ds_gguf_writer_u32(w, "tokenizer.ggml.bos_token_id", (uint32_t)m->info.bos_id);
        if (m->info.eos_id >= 0) ds_gguf_writer_u32(w, "tokenizer.ggml.eos_token_id", (uint32_t)m->info.eos_id);
        if (tc) ds_gguf_writer_bool(w, "tokenizer.ggml.add_bos_token", cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(tc, "add_bos_token")));
    }
    const cJSON *ct = cJSON_GetObjectItemCaseSensitive(tc, "chat_template");
    if (cJSON_IsString(ct)) ds_gguf_writer_str(w, "tokenizer.chat_template", ct->valuestring, strlen(ct->valuestring));
    *ok = 1;
done:
    for (int i = 0; mg_owned && i < n_merges; i++) free(mg_owned[i]);
    free(mg_owned), free(mg), free(tt), free(pad), free(tok);
    cJSON_Delete(tc);
    cJSON_Delete(tj);
    return st;
}

static ds_status write_tokenizer(ds_gguf_writer *w, const ds_model *m, const char *src) {
    struct stat sb;
    if (stat(src, &sb) == 0 && !S_ISDIR(sb.st_mode)) return copy_tokenizer(w, (const ds_gguf *)m->backing);
    char path[4200];
    snprintf(path, sizeof path, "%s/tokenizer.gguf", src);
    if (is_file(path)) {
        ds_gguf g;
        ds_status st = ds_gguf_open(&g, path);
        if (st) return st;
        copy_tokenizer(w, &g);
        ds_gguf_close(&g);
        return DS_OK;
    }
    int ok;
    return bpe_tokenizer(w, m, src, &ok);
}

// ---- writing -------------------------------------------------------------------------------------

// One chunk of rows, quantized in parallel (rows are independent; each worker has its own f32 row).
typedef struct {
    const out_tensor *t;
    int64_t r0;
    size_t rb;
    float *f;            // (ds_threads_max(), cols) per-worker rows
    unsigned char *o;    // (chunk, rb) output
} chunk_job;

static void chunk_row(void *ctx, int r, int worker) {
    const chunk_job *j = ctx;
    float *f = j->f + (size_t)worker * (size_t)j->t->ne[0];
    row_f32(j->t, j->r0 + r, f);
    ds_gguf_quantize_row(j->t->type, f, j->t->ne[0], j->o + (size_t)r * j->rb);
}

static ds_status write_tensor(ds_gguf_writer *w, const out_tensor *t, const ds_gguf_export_params *p) {
    const int64_t cols = t->ne[0], rows = n_rows(t);
    const size_t rb = ds_gguf_write_row_bytes(t->type, cols);
    int64_t chunk = ((int64_t)1 << 22) / (cols * 4);
    if (chunk < 1) chunk = 1;
    if (chunk > rows) chunk = rows;
    chunk_job j = {t, 0, rb, malloc(sizeof(float) * (size_t)cols * (size_t)ds_threads_max()), malloc(rb * (size_t)chunk)};
    ds_status st = j.f && j.o ? DS_OK : ds_fail(DS_ERR_NOMEM, "out of memory (%s)", t->name);
    for (int64_t r0 = 0; r0 < rows && !st; r0 += chunk) {
        const int64_t k = rows - r0 < chunk ? rows - r0 : chunk;
        j.r0 = r0;
        ds_parallel_for((int)k, chunk_row, &j);
        st = ds_gguf_writer_data(w, j.o, rb * (size_t)k);
        if (!st && p->interrupted && *p->interrupted) st = ds_fail(DS_ERR_INTERRUPTED, "interrupted; nothing was written");
    }
    drop_source(t);
    free(j.f);
    free(j.o);
    return st;
}

ds_status ds_gguf_export(const ds_model *m, const char *out, const ds_gguf_export_params *p, ds_quantize_stats *stats) {
    ds_status st;
    if ((st = check_model(m, p->src)) || (st = ds_gguf_writer_check(out))) return st;
    const char *A = gguf_arch(m);
    const ds_model_info *in = &m->info;
    tensor_list l = {0};
    ds_gguf_writer *w = NULL;
    double linear;
    float *ff = rope_divisors(m, &linear);
    if ((st = list_tensors(m, &l, ff)) || (st = ds_gguf_writer_init(&w))) goto done;
    // Types: llama-quantize's mix (attn_v counted in file order).
    ds_gguf_mix mix = {in->n_layers, 0, in->n_heads / in->n_kv_heads, m->n_moe ? m->moe[0].n_experts : 0,
                       m->output.data == m->tok_embd.data};
    for (int i = 0; i < l.n; i++) mix.n_attn_v += strstr(l.t[i].name, "attn_v.weight") != NULL;
    int i_v = 0;
    size_t src_bytes = 0, out_bytes = 0;
    int n_quant = 0;
    for (int i = 0; i < l.n; i++) {
        out_tensor *t = &l.t[i];
        t->type = ds_gguf_tensor_type(p->preset, &mix, t->name, ggml_dims(t), t->ne[0], i_v,
                                      t->kind == SRC_MAT ? t->w->type : DS_F32);
        i_v += strstr(t->name, "attn_v.weight") != NULL;
        n_quant += t->type != DS_F32 && t->type != DS_F16 && t->type != DS_BF16;
        const size_t nb = ds_gguf_write_row_bytes(t->type, t->ne[0]) * (size_t)n_rows(t);
        out_bytes += nb;
        src_bytes += src_bytes_of(t);
        if ((st = ds_gguf_writer_tensor(w, t->name, t->type, t->n_dims, t->ne, nb))) goto done;
    }
    ds_gguf_writer_str(w, "general.architecture", A, strlen(A));
    ds_gguf_writer_str(w, "general.type", "model", 5);
    ds_gguf_writer_str(w, "general.name", m->name, strlen(m->name));
    ds_gguf_writer_str(w, "general.quantized_by", "dspark", 6);
    write_hparams(w, m, A, linear);
    ds_gguf_writer_u32(w, "general.file_type", (uint32_t)p->preset->file_type);
    ds_gguf_writer_u32(w, "general.quantization_version", 2);
    ds_gguf_writer_u32(w, "general.alignment", 32);
    if ((st = write_tokenizer(w, m, p->src))) goto done;
    if ((st = ds_gguf_writer_open(w, out))) goto done;
    for (int i = 0; i < l.n && !st; i++) {
        if (p->progress) p->progress(p->progress_ctx, "quantize", i, l.n, l.t[i].name);
        st = write_tensor(w, &l.t[i], p);
    }
    if (st) goto done;
    if (p->progress) p->progress(p->progress_ctx, "write", 0, 1, out);
    if (!p->skip_load_smoke) {
        const char *tmp = ds_gguf_writer_flush(w);
        ds_model *back = NULL;
        if (p->progress) p->progress(p->progress_ctx, "smoke", 0, 1, out);
        if (!tmp) st = ds_fail(DS_ERR_IO, "%s: write failed", out);
        else if ((st = ds_model_load(tmp, NULL, &back)))
            st = ds_fail_prefix(st, "%s: the written GGUF does not load back", out);
        ds_model_free(back);
        if (st) goto done;
    }
    if ((st = ds_gguf_writer_commit(w))) goto done;
    if (stats) {
        memset(stats, 0, sizeof *stats);
        stats->n_tensors = l.n, stats->n_quantized = n_quant;
        stats->src_bytes = src_bytes, stats->out_bytes = out_bytes, stats->n_shards = 1;
    }
    if (p->progress) p->progress(p->progress_ctx, "done", 0, 1, out);
done:
    ds_gguf_writer_free(w);
    free(l.t);
    free(ff);
    return st;
}
