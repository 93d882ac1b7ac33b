// The decoder-only target (Llama, Qwen2/3, Gemma 3/4 text): model lifetime, KV caches, workspaces
// and the one forward pass.
//
// Per layer (pre-norm decoder, one model/block.c block each):
//   h = x + P(Wo · attn(rope(Wq·n), rope(Wk·n), Wv·n)),  n = RMSNorm(x)
//   x = s · (h + P'(Wdown · (act(Wgate·m) ⊙ Wup·m))),   m = RMSNorm(h)
// logits = softcap(Wout · RMSNorm(x)). P, P' are Gemma's post-norms (identity elsewhere), act is
// SiLU or tanh-GELU, s the layer scalar (Gemma 4). Attention is causal over the sequence's KV cache
// (only its last `window` rows on sliding-window layers), with GQA; optional q/k/v biases, per-head
// q/k(/v) norms and a per-layer geometry (head_dim, kv heads, RoPE set, scale).
// Gemma 4 E-series add per-layer embeddings (after the MLP residual add of layer l, before s:
// x += N(Wple_proj · (gelu_tanh(Wple_gate · x) ⊙ ple_l)), ple_l from a token table and a projection of
// the embedding, see ds_model) and KV sharing (a shared layer attends over an earlier layer's cache).
// Mixture-of-experts layers (model/moe.c) replace or join the MLP: Qwen3-MoE x = h + E(m); Qwen2-MoE
// x = h + E(m) + sigmoid(Wsg·m)·MLP(m) (the shared expert); Gemma 4 26B-A4B
// x = h + P'(P1(MLP(m)) + P2(E(N2(h)))) with the router reading h.
#include "base/threads.h"
#include "model/block.h"
#include "model/model.h"
#include "model/moe.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/status.h"
#include "base/utf8.h"
#include "io/mapfile.h"
#include "kernels/ggml_quants.h"
#include "kernels/ops.h"
#include "tokenizer/tokenizer.h"

// ---- lifetime ------------------------------------------------------------------------------------

void ds_layer_each_weight(ds_layer *L, void (*fn)(ds_weight *, void *), void *ctx) {
    ds_weight *ws[] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->w_gate, &L->w_up, &L->w_down, &L->ple_gate, &L->ple_proj};
    for (size_t i = 0; i < sizeof ws / sizeof *ws; i++) fn(ws[i], ctx);
}

// Every matrix of m a product reads (the embedding gather reads none), through fn.
static void model_each_weight(ds_model *m, void (*fn)(ds_weight *, void *), void *ctx) {
    for (int l = 0; l < m->info.n_layers; l++) ds_layer_each_weight(&m->layers[l], fn, ctx);
    for (int e = 0; e < m->n_moe; e++) {
        ds_moe *E = &m->moe[e];
        fn(&E->router, ctx);
        fn(&E->shared_gate, ctx);
        for (int j = 0; j < E->n_experts; j++) {
            fn(&E->gate[j], ctx);
            fn(&E->up[j], ctx);
            fn(&E->down[j], ctx);
        }
    }
    fn(&m->output, ctx);
    fn(&m->ple_model_proj, ctx);
}

// ds_model_params.int8_inputs: which quantized matrices' products take the integer path. The other
// GGUF block types have no other kernel (the loader leaves their flag unset: it means nothing to them).
static void weight_int8_inputs(ds_weight *w, void *level) {
    const int l = *(const int *)level;
    if (w->data && w->type == DS_Q8_0) w->round_inputs = l >= 0;
    if (w->data && ds_weight_bits(w)) w->round_inputs = l > 0;
}

// ds_model_params.bf16_inputs: every BF16 matrix a product reads rounds its input to bf16
// (kernels/matmul_bf16dp.h; the flag means nothing to the embedding gather, so a tied output is fine).
void ds_weight_bf16_inputs(ds_weight *w, void *unused) {
    (void)unused;
    if (w->data && w->type == DS_BF16) w->round_inputs = 1;
}

static void weight_gemm_rows(ds_weight *w, void *min_rows) {
    if (!w->data) return;
    const int r = ds_matmul_gemm_rows(w);
    if (r < *(int *)min_rows) *(int *)min_rows = r;
}

static void weight_bytes_sum(ds_weight *w, void *sum) {
    if (w->data) *(size_t *)sum += ds_weight_bytes(w);
}

void ds_weight_range(ds_weight *w, void *ranges) {
    ds_weight_ranges *r = ranges;
    if (!w->data) return;
    if (r->p && r->count < r->cap) r->p[r->count] = w->data, r->n[r->count] = ds_weight_data_bytes(w);
    r->count++; // (a first pass with no arrays counts them)
}

// The matrices products read (every expert of a MoE target), entered into the page tables at load
// while they take at most half the machine's memory: the first forward of a fresh process (a
// server's first request, a `dspark generate`) otherwise pays a page fault per few pages of
// weights, ~120 ms of a 12-token prompt's first forward on the inflated 2048 x 24 BF16 target
// (docs/results.md). The weights stay mapped, not copied; llama.cpp maps with MAP_POPULATE alike.
// Embedding tables (a gather reads a few rows: Gemma 4's per-layer ones are gigabytes) and
// larger-than-half-memory models are left to faults. In huge pages where the kernel can
// (ds_mapfile_populate_huge: a decode step then streams the weights ~1.4x faster on Zen 4).
static void model_populate(ds_model *m) {
    size_t sum = 0;
    model_each_weight(m, weight_bytes_sum, &sum);
    const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    if (pages <= 0 || page <= 0 || sum > (size_t)pages * (size_t)page / 2) return;
    ds_weight_ranges r = {0};
    model_each_weight(m, ds_weight_range, &r);
    r.cap = r.count;
    r.p = malloc((size_t)r.cap * sizeof *r.p + 1);
    r.n = malloc((size_t)r.cap * sizeof *r.n + 1);
    r.count = 0;
    if (r.p && r.n) {
        model_each_weight(m, ds_weight_range, &r);
        ds_mapfile_populate_huge(r.p, r.n, r.count, &m->huge);
    }
    free(r.p);
    free(r.n);
}

// (the GGUF block types other than Q8_0 have int8-input kernels only: they always round)
static void weight_rounds(ds_weight *w, void *any) {
    if (w->data && (w->round_inputs || ds_ggml_is_kquant_family(w->type))) *(int *)any = 1;
}

int ds_model_rounds_inputs(const ds_model *m) {
    int any = m->bf16_inputs;
    model_each_weight((ds_model *)m, weight_rounds, &any); // (reads only)
    return any;
}

void ds_model_memory(const ds_model *m, size_t *resident, size_t *huge, int *reread) {
    *resident = m->huge.resident;
    *huge = m->huge.huge;
    *reread = m->huge.reread;
}

int ds_model_gemm_rows(const ds_model *m) {
    int r = INT_MAX;
    model_each_weight((ds_model *)m, weight_gemm_rows, &r); // (reads only)
    return r;
}

ds_status ds_model_load(const char *path, const ds_model_params *params, ds_model **out) {
    *out = NULL;
    if (!path) return ds_fail(DS_ERR_INVALID, "no model path given");
    struct stat st;
    if (stat(path, &st) != 0) return ds_fail(DS_ERR_IO, "%s: no such file or directory", path);
    if (params) ds_set_threads(params->n_threads);
    ds_status s = S_ISDIR(st.st_mode) ? ds_model_load_hf(path, out) : ds_model_load_gguf(path, out);
    int i8 = params ? params->int8_inputs : 0;
    if (s == DS_OK) model_each_weight(*out, weight_int8_inputs, &i8);
    if (s == DS_OK && params && params->bf16_inputs) {
        (*out)->bf16_inputs = 1; // (a drafter paired with it follows: ds_drafter_load)
        model_each_weight(*out, ds_weight_bf16_inputs, NULL);
    }
    if (s == DS_OK && params) (*out)->kv_f16 = params->kv_f16 == 1;
    if (s == DS_OK && !(params && params->no_populate)) model_populate(*out);
    if (s == DS_OK && !((*out)->path = strdup(path))) {
        ds_model_free(*out);
        *out = NULL;
        return ds_fail(DS_ERR_NOMEM, "out of memory");
    }
    return s;
}

void ds_model_free(ds_model *m) {
    if (!m) return;
    if (m->tok) ds_tokenizer_free(m->tok);
    if (m->backing_free) m->backing_free(m->backing);
    free(m->layers);
    free(m->moe);
    free(m->experts);
    free(m->owned);
    free(m->path);
    free(m);
}

const ds_model_info *ds_model_get_info(const ds_model *m) { return &m->info; }
const ds_tokenizer *ds_model_tokenizer(const ds_model *m) { return m->tok; }
int ds_model_is_stop(const ds_model *m, int32_t id) {
    if (id >= 0 && id == m->info.eos_id) return 1; // (a GGUF tokenizer sets it after ds_model_finish)
    for (int i = 0; i < m->n_stop; i++)
        if (m->stop_ids[i] == id) return 1;
    return 0;
}

void ds_model_add_stop(ds_model *m, int32_t id) {
    if (id < 0 || m->n_stop >= DS_MAX_STOP || ds_model_is_stop(m, id)) return;
    m->stop_ids[m->n_stop++] = id;
}

float *ds_model_own(ds_model *m, size_t n) {
    if (m->owned_used + n > m->owned_cap) return NULL;
    float *p = m->owned + m->owned_used;
    m->owned_used += n;
    return p;
}

static ds_status check_weight(const char *path, const char *what, const ds_weight *w, int rows, int cols) {
    if (!w->data) return ds_fail(DS_ERR_FORMAT, "%s: missing tensor %s", path, what);
    if (w->rows != rows || w->cols != cols)
        return ds_fail(DS_ERR_FORMAT, "%s: tensor %s has shape (%d, %d), expected (%d, %d)", path, what, w->rows,
                       w->cols, rows, cols);
    if (ds_ggml_block_elems(w->type) && cols % ds_ggml_block_elems(w->type))
        return ds_fail(DS_ERR_FORMAT, "%s: %s tensor %s has rows of %d (not a multiple of %d)", path,
                       ds_dtype_name(w->type), what, cols, ds_ggml_block_elems(w->type));
    return DS_OK;
}

// A weight one layer reads: checked like check_weight under the name "layer L <field>", its bytes
// added to the per-token read count.
static ds_status check_layer_weight(const char *path, int l, const char *field, const ds_weight *w, int rows,
                                    int cols, size_t *bytes) {
    char what[64];
    snprintf(what, sizeof what, "layer %d %s", l, field);
    ds_status st = check_weight(path, what, w, rows, cols);
    if (!st) *bytes += ds_weight_bytes(w);
    return st;
}

// The name comes from the file (GGUF general.name) or a path and reaches JSON output
// (/v1/models, cost tables): printable valid UTF-8 only.
static void model_escape_name(ds_model *m) {
    char name[sizeof m->name];
    ds_text_escape(name, sizeof name, m->name, strlen(m->name));
    memcpy(m->name, name, sizeof name);
}

// The model-wide hyper-parameters are within the bounds every buffer size is computed from.
static ds_status check_hparams(const ds_model_info *in, const char *path) {
    if (in->n_layers <= 0 || in->n_layers > 4096 || in->dim <= 0 || in->dim > (1 << 16) || in->n_heads <= 0 ||
        in->n_kv_heads <= 0 || in->n_heads % in->n_kv_heads || in->head_dim <= 0 || in->head_dim % 2 ||
        in->head_dim > 4096 || in->ffn_dim <= 0 || in->ffn_dim > (1 << 20) || in->vocab_size <= 0 ||
        in->vocab_size > (1 << 24) || in->max_ctx <= 0)
        return ds_fail(DS_ERR_FORMAT,
                       "%s: implausible model shape (layers %d, dim %d, heads %d/%d, head_dim %d, ffn %d, vocab %d, ctx %d)",
                       path, in->n_layers, in->dim, in->n_heads, in->n_kv_heads, in->head_dim, in->ffn_dim,
                       in->vocab_size, in->max_ctx);
    if (!(in->norm_eps > 0) || !(in->rope_theta > 0))
        return ds_fail(DS_ERR_FORMAT, "%s: norm epsilon and rope theta must be positive", path);
    return DS_OK;
}

// RoPE set 0 defaults to the plain one over the model-wide head_dim when the loader set none.
static ds_status model_default_rope(ds_model *m, const char *path) {
    const ds_model_info *in = &m->info;
    if (!m->rope[0].inv_freq) {
        if (!(m->rope[0].inv_freq = ds_model_own(m, (size_t)in->head_dim / 2)))
            return ds_fail(DS_ERR_NOMEM, "%s: internal: vector storage too small", path);
        m->rope[0].half = in->head_dim / 2;
        for (int i = 0; i < in->head_dim / 2; i++)
            m->rope[0].inv_freq[i] = (float)pow((double)in->rope_theta, -2.0 * i / in->head_dim);
    }
    if (m->n_rope < 1) m->n_rope = 1;
    m->inv_freq = m->rope[0].inv_freq;
    return DS_OK;
}

// The model-wide per-layer embedding tensors: the table is (tokens, layers x ple_dim), one row read
// per token.
static ds_status check_ple_tables(const ds_model *m, const char *path, size_t *bytes) {
    const ds_model_info *in = &m->info;
    const int pw = in->n_layers * m->ple_dim;
    if (m->ple_embd.cols != pw || m->ple_embd.rows < in->vocab_size)
        return ds_fail(DS_ERR_FORMAT, "%s: per-layer embedding table has shape (%d, %d), expected (>= %d, %d)", path,
                       m->ple_embd.rows, m->ple_embd.cols, in->vocab_size, pw);
    ds_status st;
    if ((st = check_weight(path, "per_layer_model_projection", &m->ple_model_proj, pw, in->dim))) return st;
    if (!m->ple_proj_norm) return ds_fail(DS_ERR_FORMAT, "%s: missing per_layer_projection_norm", path);
    *bytes += ds_weight_bytes(&m->ple_embd) / (size_t)m->ple_embd.rows + ds_weight_bytes(&m->ple_model_proj);
    return DS_OK;
}

// Layer l's geometry: the model-wide values fill what the loader left 0, a KV-shared layer names an
// earlier unshared layer of the same attention type, and the widths are plausible. Raises the
// model's max_* workspace widths.
static ds_status layer_check_geometry(ds_model *m, int l, const char *path) {
    const ds_model_info *in = &m->info;
    ds_layer *L = &m->layers[l];
    if (!L->head_dim) L->head_dim = in->head_dim;
    if (!L->n_kv_heads) L->n_kv_heads = in->n_kv_heads;
    if (!L->ffn_dim) L->ffn_dim = in->ffn_dim;
    if (!L->kv_shared) L->kv_src = l;
    if (L->kv_shared) {
        const ds_layer *S = L->kv_src >= 0 && L->kv_src < l ? &m->layers[L->kv_src] : NULL;
        if (!S || S->kv_shared || S->head_dim != L->head_dim || S->n_kv_heads != L->n_kv_heads ||
            S->window != L->window || S->rope != L->rope)
            return ds_fail(DS_ERR_FORMAT, "%s: layer %d shares the KV cache of layer %d, which is no earlier "
                           "unshared layer of the same attention type", path, l, L->kv_src);
    }
    if (L->ffn_dim <= 0 || L->ffn_dim > (1 << 20))
        return ds_fail(DS_ERR_FORMAT, "%s: layer %d has an implausible MLP width %d", path, l, L->ffn_dim);
    if (L->ffn_dim > m->max_ffn_dim) m->max_ffn_dim = L->ffn_dim;
    if (L->attn_scale == 0) L->attn_scale = 1.0f / sqrtf((float)L->head_dim);
    if (L->out_scale == 0) L->out_scale = 1.0f;
    const int hd = L->head_dim;
    if (hd <= 0 || hd % 2 || hd > 4096 || L->n_kv_heads <= 0 || in->n_heads % L->n_kv_heads || L->rope < 0 ||
        L->rope >= m->n_rope || m->rope[L->rope].half != hd / 2 || L->window < 0)
        return ds_fail(DS_ERR_FORMAT, "%s: layer %d has an implausible attention geometry (head_dim %d, kv heads %d)",
                       path, l, hd, L->n_kv_heads);
    const int qd = in->n_heads * hd, kvd = L->n_kv_heads * hd;
    if (hd > m->max_head_dim) m->max_head_dim = hd;
    if (qd > m->max_q_dim) m->max_q_dim = qd;
    if (kvd > m->max_kv_dim) m->max_kv_dim = kvd;
    return DS_OK;
}

// Layer l's attention and dense MLP matrices (a KV-shared layer has no k/v of its own, v is optional,
// an MoE layer may have no dense MLP).
static ds_status layer_check_dense(const ds_model *m, int l, const char *path, size_t *bytes) {
    const ds_layer *L = &m->layers[l];
    const int dim = m->info.dim, qd = m->info.n_heads * L->head_dim, kvd = L->n_kv_heads * L->head_dim;
    ds_status st;
    if ((st = check_layer_weight(path, l, "wq", &L->wq, qd, dim, bytes))) return st;
    if (!L->kv_shared && (st = check_layer_weight(path, l, "wk", &L->wk, kvd, dim, bytes))) return st;
    if (L->wv.data && !L->kv_shared && (st = check_layer_weight(path, l, "wv", &L->wv, kvd, dim, bytes))) return st;
    if ((st = check_layer_weight(path, l, "wo", &L->wo, dim, qd, bytes))) return st;
    if (!L->moe || L->w_gate.data) {
        if ((st = check_layer_weight(path, l, "w_gate", &L->w_gate, L->ffn_dim, dim, bytes)) ||
            (st = check_layer_weight(path, l, "w_up", &L->w_up, L->ffn_dim, dim, bytes)) ||
            (st = check_layer_weight(path, l, "w_down", &L->w_down, dim, L->ffn_dim, bytes)))
            return st;
    }
    return DS_OK;
}

// Layer l's experts: plausible counts, the router, the optional shared-expert gate and every expert's
// three matrices. A decoded token reads the router and top_k experts (the largest counted); raises
// info.expert_bytes and the model's max_* expert widths.
static ds_status layer_check_experts(ds_model *m, int l, const char *path, size_t *bytes) {
    const ds_moe *E = m->layers[l].moe;
    const int dim = m->info.dim;
    if (E->n_experts < 1 || E->n_experts > 4096 || E->top_k < 1 || E->top_k > E->n_experts || E->ffn_dim < 1 ||
        E->ffn_dim > (1 << 20))
        return ds_fail(DS_ERR_FORMAT, "%s: layer %d: implausible experts (%d experts, top %d, width %d)", path, l,
                       E->n_experts, E->top_k, E->ffn_dim);
    char what[64];
    ds_status st;
    snprintf(what, sizeof what, "layer %d router", l);
    if ((st = check_weight(path, what, &E->router, E->n_experts, dim))) return st;
    if (E->shared_gate.data) {
        snprintf(what, sizeof what, "layer %d shared_expert_gate", l);
        if ((st = check_weight(path, what, &E->shared_gate, 1, dim))) return st;
        *bytes += ds_weight_bytes(&E->shared_gate);
    }
    size_t expert_bytes = 0;
    for (int e = 0; e < E->n_experts; e++) {
        snprintf(what, sizeof what, "layer %d expert %d gate_proj", l, e);
        if ((st = check_weight(path, what, &E->gate[e], E->ffn_dim, dim))) return st;
        snprintf(what, sizeof what, "layer %d expert %d up_proj", l, e);
        if ((st = check_weight(path, what, &E->up[e], E->ffn_dim, dim))) return st;
        snprintf(what, sizeof what, "layer %d expert %d down_proj", l, e);
        if ((st = check_weight(path, what, &E->down[e], dim, E->ffn_dim))) return st;
        const size_t b = ds_weight_bytes(&E->gate[e]) + ds_weight_bytes(&E->up[e]) + ds_weight_bytes(&E->down[e]);
        expert_bytes = b > expert_bytes ? b : expert_bytes;
    }
    *bytes += ds_weight_bytes(&E->router) + (size_t)E->top_k * expert_bytes;
    if (expert_bytes > m->info.expert_bytes) m->info.expert_bytes = expert_bytes;
    if (E->n_experts > m->max_experts) m->max_experts = E->n_experts;
    if (E->top_k > m->max_top_k) m->max_top_k = E->top_k;
    if (E->ffn_dim > m->max_expert_dim) m->max_expert_dim = E->ffn_dim;
    return DS_OK;
}

// Layer l's per-layer embedding gate, projection and post-norm (plus the norm's bytes).
static ds_status layer_check_ple(const ds_model *m, int l, const char *path, size_t *bytes) {
    const ds_layer *L = &m->layers[l];
    const int dim = m->info.dim;
    ds_status st;
    if ((st = check_layer_weight(path, l, "ple_gate", &L->ple_gate, m->ple_dim, dim, bytes)) ||
        (st = check_layer_weight(path, l, "ple_proj", &L->ple_proj, dim, m->ple_dim, bytes)))
        return st;
    if (!L->ple_post_norm) return ds_fail(DS_ERR_FORMAT, "%s: layer %d is missing a norm", path, l);
    *bytes += (size_t)dim * 4;
    return DS_OK;
}

// Layer l, whole: geometry, dense matrices, experts, per-layer embeddings, the two norms.
static ds_status layer_check(ds_model *m, int l, const char *path, size_t *bytes) {
    const ds_layer *L = &m->layers[l];
    ds_status st;
    if ((st = layer_check_geometry(m, l, path)) || (st = layer_check_dense(m, l, path, bytes))) return st;
    if (L->moe && (st = layer_check_experts(m, l, path, bytes))) return st;
    if (m->ple_dim && (st = layer_check_ple(m, l, path, bytes))) return st;
    if (!L->attn_norm || !L->ffn_norm) return ds_fail(DS_ERR_FORMAT, "%s: layer %d is missing a norm", path, l);
    *bytes += (size_t)2 * m->info.dim * 4;
    return DS_OK;
}

// The EOS id is always the first stop id; with no EOS id the first stop id becomes it.
static void model_order_stop_ids(ds_model *m) {
    ds_model_info *in = &m->info;
    if (in->eos_id >= 0) {
        int32_t rest[DS_MAX_STOP];
        int n = 0;
        for (int i = 0; i < m->n_stop; i++)
            if (m->stop_ids[i] != in->eos_id) rest[n++] = m->stop_ids[i];
        m->n_stop = 0;
        ds_model_add_stop(m, in->eos_id);
        for (int i = 0; i < n; i++) ds_model_add_stop(m, rest[i]);
    } else if (m->n_stop) {
        in->eos_id = m->stop_ids[0];
    }
}

ds_status ds_model_finish(ds_model *m, const char *path) {
    ds_model_info *in = &m->info;
    model_escape_name(m);
    in->arch = m->arch;
    in->name = m->name;
    ds_status st;
    if ((st = check_hparams(in, path))) return st;
    if ((st = check_weight(path, "token embedding", &m->tok_embd, in->vocab_size, in->dim)) ||
        (st = check_weight(path, "output", &m->output, in->vocab_size, in->dim)))
        return st;
    if ((st = model_default_rope(m, path))) return st;
    size_t bytes = ds_weight_bytes(&m->output);
    m->max_head_dim = m->max_q_dim = m->max_kv_dim = m->max_ffn_dim = 0;
    m->max_experts = m->max_top_k = m->max_expert_dim = 0;
    if (m->ple_dim && (st = check_ple_tables(m, path, &bytes))) return st;
    for (int l = 0; l < in->n_layers; l++)
        if ((st = layer_check(m, l, path, &bytes))) return st;
    in->weight_bytes = bytes + (size_t)in->dim * 4 * 2; // + one embedding row and the final norm
    in->moe_layers = m->n_moe;
    in->n_experts = m->max_experts;
    in->top_k_experts = m->max_top_k;
    in->weight_type = m->layers[0].wq.type;
    model_order_stop_ids(m);
    return ds_model_check_ids(m, path);
}

ds_status ds_model_check_ids(const ds_model *m, const char *path) {
    const ds_model_info *in = &m->info;
    const int V = in->vocab_size;
    if (in->bos_id >= V)
        return ds_fail(DS_ERR_FORMAT, "%s: bos_token_id %d is outside the vocabulary (0..%d)", path, in->bos_id, V - 1);
    if (in->eos_id >= V)
        return ds_fail(DS_ERR_FORMAT, "%s: eos_token_id %d is outside the vocabulary (0..%d)", path, in->eos_id, V - 1);
    for (int i = 0; i < m->n_stop; i++)
        if (m->stop_ids[i] >= V)
            return ds_fail(DS_ERR_FORMAT, "%s: stop id %d (eos_token_id) is outside the vocabulary (0..%d)", path,
                           m->stop_ids[i], V - 1);
    return DS_OK;
}

// ---- KV cache ------------------------------------------------------------------------------------

ds_status ds_kv_init(const ds_model *m, int max_ctx, ds_kv **out) {
    *out = NULL;
    if (max_ctx <= 0) max_ctx = m->info.max_ctx;
    ds_kv *kv = ds_calloc(1, sizeof *kv);
    int *lines = malloc(sizeof(int) * (size_t)m->info.n_layers);
    if (!kv || !lines) {
        free(kv);
        free(lines);
        return DS_ERR_NOMEM;
    }
    kv->model = m;
    kv->max_ctx = max_ctx;
    for (int l = 0; l < m->info.n_layers; l++) {
        const ds_layer *L = &m->layers[l];
        lines[l] = L->kv_shared ? 0 : L->n_kv_heads * L->head_dim; // a shared layer reads kv_src's rows
    }
    ds_status st = ds_kvcache_init(&kv->c, m->info.n_layers, lines, max_ctx, m->kv_f16);
    free(lines);
    if (st) {
        free(kv);
        return st;
    }
    *out = kv;
    return DS_OK;
}

void ds_kv_free(ds_kv *kv) {
    if (!kv) return;
    ds_kvcache_free(&kv->c);
    free(kv);
}

int ds_kv_len(const ds_kv *kv) { return kv->c.len; }

ds_status ds_kv_truncate(ds_kv *kv, int len) {
    if (len < 0 || len > kv->c.len)
        return ds_fail(DS_ERR_INVALID, "cannot truncate a KV cache of %d rows to %d", kv->c.len, len);
    kv->c.len = len; // rows past len are overwritten by the next forward before anything reads them
    return DS_OK;
}

ds_status ds_kv_keep(ds_kv *kv, int from, const int *rows, int n) {
    if (from < 0 || n < 0 || from + n > kv->c.len)
        return ds_fail(DS_ERR_INVALID, "cannot keep %d tree rows from column %d of a KV cache of %d", n, from, kv->c.len);
    if (n > DS_TREE_MAX_ROWS) return ds_fail(DS_ERR_INVALID, "a tree path of %d rows (at most %d)", n, DS_TREE_MAX_ROWS);
    int src[DS_TREE_MAX_ROWS];
    for (int i = 0; i < n; i++) {
        if (rows[i] < i || (i && rows[i] <= rows[i - 1]) || from + rows[i] >= kv->c.len)
            return ds_fail(DS_ERR_INVALID, "tree path row %d (of %d) is not an increasing row of the cache", i, n);
        src[i] = from + rows[i];
    }
    ds_kvcache_move(&kv->c, from, src, n);
    kv->c.len = from + n;
    return DS_OK;
}

size_t ds_kv_row_bytes(const ds_kv *kv) { return ds_kvcache_row_bytes(&kv->c); }

ds_status ds_kv_save(const ds_kv *kv, int n, void *dst) {
    if (n < 0 || n > kv->c.len) return ds_fail(DS_ERR_INVALID, "cannot save %d rows of a KV cache of %d", n, kv->c.len);
    ds_kvcache_save(&kv->c, n, dst);
    return DS_OK;
}

ds_status ds_kv_load(ds_kv *kv, const void *src, int stride, int n) {
    if (n < 0 || n > stride || n > kv->max_ctx)
        return ds_fail(DS_ERR_INVALID, "cannot load %d rows (of %d) into a KV cache of at most %d", n, stride, kv->max_ctx);
    if (ds_kvcache_load(&kv->c, src, stride, n)) return ds_fail(DS_ERR_NOMEM, "out of memory loading %d KV rows", n);
    return DS_OK;
}

ds_status ds_kv_reserve(ds_kv *kv, int need) {
    if (need > kv->max_ctx)
        return ds_fail(DS_ERR_INVALID, "context of %d tokens exceeds the KV cache limit of %d", need, kv->max_ctx);
    if (ds_kvcache_reserve(&kv->c, need))
        return ds_fail(DS_ERR_NOMEM, "out of memory growing the KV cache to %d rows", need);
    return DS_OK;
}

// ---- workspace -----------------------------------------------------------------------------------

struct ds_workspace {
    const ds_model *m;
    int gemm_min_rows; // this forward's kernel choice (ds_matmul_ex): INT_MAX when a sequence asks for
                       // batch invariance, else 0 (the defaults)
    int cap_rows;    // rows the buffers below hold
    float *x;        // (cap_rows, dim) residual stream
    float *xb;       // (cap_rows, dim) normed input of a sub-layer / sub-layer output
    float *q;        // (cap_rows, max_q_dim) rows strided by the layer's n_heads * head_dim
    float *k;        // (cap_rows, max_kv_dim)
    float *v;        // (cap_rows, max_kv_dim)
    float *att;      // (cap_rows, max_q_dim) attention output
    float *hb;       // (cap_rows, max(max_ffn_dim, ple_dim)) gate
    float *hb2;      // (cap_rows, max_ffn_dim) up
    float *ple;      // (cap_rows, n_layers * ple_dim) per-layer inputs (PLE models only)
    float *rcos;     // (cap_rows, n_rope, max_head_dim / 2) RoPE cos per row and RoPE set
    float *rsin;     // (cap_rows, n_rope, max_head_dim / 2)
    float *logit_in; // (cap_rows, dim) gathered rows whose logits are wanted
    float *logits;   // (cap_rows, vocab)
    int *row_seq;    // (cap_rows) which sequence a row belongs to
    int *row_pos;    // (cap_rows) absolute position
    ds_kvcache **row_kv; // (cap_rows) the row's cache
    ds_tree_span *tree;  // (cap_rows) token-tree rows' spans (anc 0 for the others)
    int cap_ctx, n_thr;
    float *gather;   // (n_thr, gather_stride) tree rows' gathered K/V columns
    int gather_stride;
    float *scores;   // (n_thr, DS_ATTEND_MAX_Q, cap_ctx) attention scores per thread
    size_t scratch_per_thread;
    float *scratch;  // (n_thr, scratch_per_thread) matmul tile widening
    float *ple_row;  // (n_layers * ple_dim) one token's row of the per-layer table, as f32
    float *ffn;      // (cap_rows, dim) the dense MLP's output beside the experts (MoE models only)
    ds_moe_ws *moe;  // the experts' scratch (MoE models only)
};

ds_status ds_workspace_init(const ds_model *m, ds_workspace **out) {
    *out = NULL;
    ds_workspace *ws = ds_calloc(1, sizeof *ws);
    if (!ws) return DS_ERR_NOMEM;
    ws->m = m;
    size_t s = ds_matmul_scratch_floats(&m->output);
    if (m->ple_dim) {
        const size_t n = ds_matmul_scratch_floats(&m->ple_model_proj);
        s = n > s ? n : s;
        if (!(ws->ple_row = malloc((size_t)m->info.n_layers * m->ple_dim * 4))) {
            free(ws);
            return DS_ERR_NOMEM;
        }
    }
    for (int l = 0; l < m->info.n_layers; l++) { // layers may differ (Gemma 4 global layers)
        const ds_layer *L = &m->layers[l];
        const ds_weight *ws_list[] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->w_gate, &L->w_up, &L->w_down,
                                      &L->ple_gate, &L->ple_proj};
        for (size_t i = 0; i < sizeof ws_list / sizeof ws_list[0]; i++) {
            size_t n = ws_list[i]->data ? ds_matmul_scratch_floats(ws_list[i]) : 0;
            s = n > s ? n : s;
        }
        if (L->moe) { // every expert matrix of a layer has the same shape and type
            const ds_weight *el[] = {&L->moe->router, &L->moe->shared_gate, &L->moe->gate[0], &L->moe->up[0],
                                     &L->moe->down[0]};
            for (size_t i = 0; i < sizeof el / sizeof el[0]; i++) {
                size_t n = el[i]->data ? ds_matmul_scratch_floats(el[i]) : 0;
                s = n > s ? n : s;
            }
        }
    }
    ws->scratch_per_thread = s;
    *out = ws;
    return DS_OK;
}

static void ws_release(ds_workspace *ws) {
    float **bufs[] = {&ws->x, &ws->xb, &ws->q, &ws->k, &ws->v, &ws->att, &ws->hb, &ws->hb2, &ws->rcos, &ws->rsin,
                      &ws->logit_in, &ws->logits, &ws->ple, &ws->ffn};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) {
        free(*bufs[i]);
        *bufs[i] = NULL;
    }
    free(ws->row_seq);
    free(ws->row_pos);
    free(ws->row_kv);
    free(ws->tree);
    ws->row_seq = ws->row_pos = NULL;
    ws->row_kv = NULL;
    ws->tree = NULL;
    ws->cap_rows = 0;
}

void ds_workspace_free(ds_workspace *ws) {
    if (!ws) return;
    ws_release(ws);
    free(ws->scores);
    free(ws->gather);
    free(ws->scratch);
    free(ws->ple_row);
    ds_moe_ws_free(ws->moe);
    free(ws);
}

// Grow the row buffers to `rows` and the score buffers to `ctx` (only when a batch is bigger than
// any before: steady-state decoding never allocates).
static ds_status ws_reserve(ds_workspace *ws, int rows, int ctx) {
    const ds_model_info *in = &ws->m->info;
    if (rows > ws->cap_rows) {
        ws_release(ws);
        const ds_model *m = ws->m;
        const size_t r = (size_t)rows, qd = (size_t)m->max_q_dim, kvd = (size_t)m->max_kv_dim;
        ws->x = malloc(r * in->dim * 4);
        ws->xb = malloc(r * in->dim * 4);
        ws->q = malloc(r * qd * 4);
        ws->k = malloc(r * kvd * 4);
        ws->v = malloc(r * kvd * 4);
        ws->att = malloc(r * qd * 4);
        const size_t hw = (size_t)(m->max_ffn_dim > m->ple_dim ? m->max_ffn_dim : m->ple_dim);
        ws->hb = malloc(r * hw * 4);
        ws->hb2 = malloc(r * m->max_ffn_dim * 4);
        ws->ple = m->ple_dim ? malloc(r * in->n_layers * m->ple_dim * 4) : NULL;
        ws->rcos = malloc(r * m->n_rope * (m->max_head_dim / 2) * 4);
        ws->rsin = malloc(r * m->n_rope * (m->max_head_dim / 2) * 4);
        ws->logit_in = malloc(r * in->dim * 4);
        ws->logits = malloc(r * in->vocab_size * 4);
        ws->row_seq = malloc(r * sizeof(int));
        ws->row_pos = malloc(r * sizeof(int));
        ws->row_kv = malloc(r * sizeof *ws->row_kv);
        ws->tree = malloc(r * sizeof *ws->tree);
        ws->ffn = m->n_moe ? malloc(r * in->dim * 4) : NULL;
        if ((m->n_moe && !ws->ffn) || (m->n_moe && ds_moe_ws_reserve(&ws->moe, m, rows))) {
            ws_release(ws);
            return ds_fail(DS_ERR_NOMEM, "out of memory for a forward batch of %d rows", rows);
        }
        if (!ws->x || !ws->xb || !ws->q || !ws->k || !ws->v || !ws->att || !ws->hb || !ws->hb2 || !ws->rcos ||
            !ws->rsin || !ws->logit_in || !ws->logits || !ws->row_seq || !ws->row_pos || !ws->row_kv || !ws->tree ||
            (m->ple_dim && !ws->ple)) {
            ws_release(ws);
            return ds_fail(DS_ERR_NOMEM, "out of memory for a forward batch of %d rows", rows);
        }
        ws->cap_rows = rows;
    }
    const int nthr = ds_threads();
    if (ctx > ws->cap_ctx || nthr > ws->n_thr) {
        int cap = ws->cap_ctx > ctx ? ws->cap_ctx : ctx;
        if (cap < 256) cap = 256;
        while (cap < ctx) cap *= 2;
        const int t = nthr > ws->n_thr ? nthr : ws->n_thr;
        float *s = realloc(ws->scores, (size_t)t * DS_ATTEND_MAX_Q * cap * 4);
        if (!s) return ds_fail(DS_ERR_NOMEM, "out of memory for attention over %d positions", ctx);
        ws->scores = s;
        ws->gather_stride = 2 * ws->m->max_head_dim * (DS_TREE_MAX_ROWS + DS_ATTEND_LANES);
        if (t > ws->n_thr) {
            float *g = realloc(ws->gather, (size_t)t * ws->gather_stride * 4);
            if (!g) return ds_fail(DS_ERR_NOMEM, "out of memory for tree attention");
            ws->gather = g;
        }
        if (t > ws->n_thr && ws->scratch_per_thread) {
            float *m = realloc(ws->scratch, (size_t)t * ws->scratch_per_thread * 4);
            if (!m) return ds_fail(DS_ERR_NOMEM, "out of memory for matmul scratch");
            ws->scratch = m;
        }
        ws->cap_ctx = cap;
        ws->n_thr = t;
    }
    return DS_OK;
}

// ---- forward -------------------------------------------------------------------------------------

static ds_status check_seq(const ds_model *m, const ds_forward_seq *s, int idx) {
    const ds_model_info *in = &m->info;
    if (!s->kv || s->kv->model != m) return ds_fail(DS_ERR_INVALID, "sequence %d: KV cache of another model", idx);
    if (s->n_tokens <= 0 || !s->tokens) return ds_fail(DS_ERR_INVALID, "sequence %d: no tokens", idx);
    if (s->n_logits < 0 || s->n_logits > s->n_tokens || (s->n_logits && !s->logits))
        return ds_fail(DS_ERR_INVALID, "sequence %d: n_logits %d for %d tokens", idx, s->n_logits, s->n_tokens);
    for (int i = 0; i < s->n_tokens; i++)
        if (s->tokens[i] < 0 || s->tokens[i] >= in->vocab_size)
            return ds_fail(DS_ERR_INVALID, "sequence %d: token id %d is outside the vocabulary (0..%d)", idx,
                           s->tokens[i], in->vocab_size - 1);
    if (s->n_taps < 0 || (s->n_taps && (!s->tap_layers || !s->taps)))
        return ds_fail(DS_ERR_INVALID, "sequence %d: taps requested without layers or output", idx);
    for (int t = 0; t < s->n_taps; t++)
        if (s->tap_layers[t] < -1 || s->tap_layers[t] >= in->n_layers)
            return ds_fail(DS_ERR_INVALID, "sequence %d: tap layer %d outside -1..%d", idx, s->tap_layers[t],
                           in->n_layers - 1);
    if (s->parent && s->n_tokens > DS_TREE_MAX_ROWS)
        return ds_fail(DS_ERR_INVALID, "sequence %d: a token tree of %d rows (at most %d)", idx, s->n_tokens,
                       DS_TREE_MAX_ROWS);
    for (int i = 0; s->parent && i < s->n_tokens; i++)
        if (s->parent[i] < -1 || s->parent[i] >= i)
            return ds_fail(DS_ERR_INVALID, "sequence %d: tree row %d has parent %d (not -1 or an earlier row)", idx, i,
                           s->parent[i]);
    for (int j = 0; j < idx; j++)
        if ((s - idx + j)->kv == s->kv) return ds_fail(DS_ERR_INVALID, "sequence %d shares a KV cache with %d", idx, j);
    return ds_kv_reserve(s->kv, s->kv->c.len + s->n_tokens);
}

// Copy the residual stream x (rows of all sequences) into the taps requested at layer `layer`.
static void copy_taps(const ds_model *m, ds_forward_seq *seqs, int n_seqs, const float *x, int layer) {
    const int dim = m->info.dim;
    int row0 = 0;
    for (int s = 0; s < n_seqs; s++) {
        ds_forward_seq *q = &seqs[s];
        for (int t = 0; t < q->n_taps; t++) {
            if (q->tap_layers[t] != layer) continue;
            for (int i = 0; i < q->n_tokens; i++)
                memcpy(q->taps + ((size_t)i * q->n_taps + t) * dim, x + (size_t)(row0 + i) * dim, (size_t)dim * 4);
        }
        row0 += q->n_tokens;
    }
}

// Per-layer inputs of every row (Gemma 4 PLE): ws->ple (R, n_layers, ple_dim) from the scaled
// embeddings ws->x and the rows of the per-layer table for the rows' tokens (the only rows read).
static void ple_inputs(const ds_model *m, ds_workspace *ws, const ds_forward_seq *seqs, int n_seqs, int R) {
    const int P = m->ple_dim, n = m->info.n_layers, dim = m->info.dim;
    const float eps = m->info.norm_eps, s2 = 0.70710678118654752f; // 2^-0.5
    ds_matmul_ex(ws->ple, ws->x, &m->ple_model_proj, R, ws->scratch, ws->gemm_min_rows);
    ds_scale(ws->ple, 1.0f / sqrtf((float)dim), (size_t)R * n * P);
    for (int s = 0, r = 0; s < n_seqs; s++)
        for (int i = 0; i < seqs[s].n_tokens; i++, r++) {
            float *row = ws->ple + (size_t)r * n * P;
            ds_weight_row_f32(&m->ple_embd, seqs[s].tokens[i], ws->ple_row);
            ds_rmsnorm_rows(row, row, m->ple_proj_norm, n, P, eps);
            for (int j = 0; j < n * P; j++) row[j] = (row[j] + ws->ple_row[j] * m->ple_embed_scale) * s2;
        }
}

int ds_workspace_expert_windows(const ds_workspace *ws, float *out, int n) {
    return ws->moe ? ds_moe_ws_windows(ws->moe, out, n) : 0;
}

double ds_workspace_last_experts(const ds_workspace *ws) {
    ds_moe_stats s;
    ds_moe_ws_stats(ws->moe, &s);
    return s.passes ? (double)s.distinct / (double)s.passes : 0;
}

ds_status ds_model_forward(const ds_model *m, ds_workspace *ws, ds_forward_seq *seqs, int n_seqs) {
    const ds_model_info *in = &m->info;
    if (!ws || ws->m != m) return ds_fail(DS_ERR_INVALID, "workspace belongs to another model");
    if (n_seqs <= 0) return ds_fail(DS_ERR_INVALID, "forward with no sequences");
    int R = 0, max_ctx = 0, n_logit_rows = 0;
    ds_status st;
    for (int s = 0; s < n_seqs; s++) {
        if ((st = check_seq(m, &seqs[s], s))) return st;
        R += seqs[s].n_tokens;
        n_logit_rows += seqs[s].n_logits;
        const int end = seqs[s].kv->c.len + seqs[s].n_tokens;
        max_ctx = end > max_ctx ? end : max_ctx;
    }
    if ((st = ws_reserve(ws, R, max_ctx))) return st;
    ds_moe_ws_reset_stats(ws->moe); // (routing statistics of this forward)
    ws->gemm_min_rows = 0;
    for (int s = 0; s < n_seqs; s++)
        if (seqs[s].batch_invariant) ws->gemm_min_rows = INT_MAX;

    const int dim = in->dim, nh = in->n_heads, mhalf = m->max_head_dim / 2, nr = m->n_rope;
    // Rows: cache columns, owners, token-tree spans, RoPE angles (per RoPE set, at the row's position:
    // its column, or in a tree the tree's first column + its depth), embeddings.
    int any_tree = 0;
    for (int s = 0, r = 0; s < n_seqs; s++)
        for (int i = 0; i < seqs[s].n_tokens; i++, r++) {
            const int len = seqs[s].kv->c.len;
            const int32_t *par = seqs[s].parent;
            ws->row_seq[r] = s;
            ws->row_kv[r] = &seqs[s].kv->c;
            ws->row_pos[r] = len + i;
            ws->tree[r] = (ds_tree_span){len, 0};
            if (par) { // ancestors: the parent's (row r - i + parent) and itself
                ws->tree[r].anc = (par[i] >= 0 ? ws->tree[r - i + par[i]].anc : 0) | (1ull << i);
                any_tree = 1;
            }
            const int pos = par ? len + __builtin_popcountll(ws->tree[r].anc) - 1 : len + i;
            for (int k = 0; k < nr; k++)
                ds_rope_angles(ws->rcos + ((size_t)r * nr + k) * mhalf, ws->rsin + ((size_t)r * nr + k) * mhalf,
                               m->rope[k].inv_freq, m->rope[k].half, pos);
            ds_weight_row_f32(&m->tok_embd, seqs[s].tokens[i], ws->x + (size_t)r * dim);
            if (m->embed_scale) ds_scale(ws->x + (size_t)r * dim, m->embed_scale, (size_t)dim);
        }
    copy_taps(m, seqs, n_seqs, ws->x, -1);
    if (m->ple_dim) ple_inputs(m, ws, seqs, n_seqs, R);

    // The layers (model/block.c): causal attention over each row's own cache.
    const ds_block_cfg cfg = {m,  dim, nh, in->n_layers, in->norm_eps, in->rope_layout, m->act, nr, mhalf,
                              m->ple_dim};
    ds_block_rows rows = {R, ws->row_pos, NULL, ws->row_kv, ws->rcos, ws->rsin, ws->x, ws->xb, ws->q, ws->k, ws->v,
                          ws->att, ws->hb, ws->hb2, ws->scores, ws->cap_ctx, ws->scratch, ws->gemm_min_rows, ws->ple,
                          ws->ffn, ws->logit_in, ws->moe, any_tree ? ws->tree : NULL, ws->gather,
                          ws->gather_stride};
    for (int l = 0; l < in->n_layers; l++) {
        ds_block_forward(&cfg, &m->layers[l], l, &rows);
        copy_taps(m, seqs, n_seqs, ws->x, l);
    }

    // Final norm, hidden states, logits for the requested trailing rows.
    ds_rmsnorm_rows(ws->xb, ws->x, m->out_norm, R, dim, in->norm_eps);
    for (int s = 0, r0 = 0; s < n_seqs; r0 += seqs[s].n_tokens, s++)
        if (seqs[s].hidden) memcpy(seqs[s].hidden, ws->xb + (size_t)r0 * dim, (size_t)seqs[s].n_tokens * dim * 4);
    if (n_seqs == 1 && n_logit_rows) {
        const int first = seqs[0].n_tokens - seqs[0].n_logits;
        ds_matmul_ex(seqs[0].logits, ws->xb + (size_t)first * dim, &m->output, n_logit_rows, ws->scratch, ws->gemm_min_rows);
    } else if (n_logit_rows) {
        int g = 0;
        for (int s = 0, r0 = 0; s < n_seqs; r0 += seqs[s].n_tokens, s++) {
            if (!seqs[s].n_logits) continue; // (a prefill chunk; its logits pointer may be NULL)
            const int first = r0 + seqs[s].n_tokens - seqs[s].n_logits;
            memcpy(ws->logit_in + (size_t)g * dim, ws->xb + (size_t)first * dim, (size_t)seqs[s].n_logits * dim * 4);
            g += seqs[s].n_logits;
        }
        ds_matmul_ex(ws->logits, ws->logit_in, &m->output, n_logit_rows, ws->scratch, ws->gemm_min_rows);
        g = 0;
        for (int s = 0; s < n_seqs; s++) {
            if (!seqs[s].n_logits) continue;
            memcpy(seqs[s].logits, ws->logits + (size_t)g * in->vocab_size,
                   (size_t)seqs[s].n_logits * in->vocab_size * 4);
            g += seqs[s].n_logits;
        }
    }
    // NaN/Inf weights (or an overflow) surface here: one pass over the logits, before the softcap
    // (which would turn inf into finite values). The cache does not advance.
    for (int s = 0; s < n_seqs; s++)
        if (!ds_all_finite(seqs[s].logits, (size_t)seqs[s].n_logits * in->vocab_size))
            return ds_fail(DS_ERR_FORMAT, "%s: the model computed NaN or infinite logits (its weights hold NaN/Inf "
                                          "values or overflow)", m->path ? m->path : m->name);
    if (m->final_softcap > 0)
        for (int s = 0; s < n_seqs; s++)
            ds_softcap(seqs[s].logits, (size_t)seqs[s].n_logits * in->vocab_size, m->final_softcap);
    for (int s = 0; s < n_seqs; s++) seqs[s].kv->c.len += seqs[s].n_tokens;
    return DS_OK;
}
