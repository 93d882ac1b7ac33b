// A freshly initialized DeepSpec drafter for any target we can run (the starting point of
// training): config.json per docs/formats/deepspec-checkpoint.md §2 and the tensors of §3. Two layer styles:
//   qwen3   Qwen3DSparkModel: the target's head_dim / num_key_value_heads / rope_theta.
//   gemma4  Gemma4DSparkModel (the default for Gemma 3 / 4 targets): the geometry of the target's
//           GLOBAL (full-attention) layers: their head dim and KV heads, rope_theta and the part of
//           the pairs that rotate (partial_rotary_factor); K = V (no v_proj), four norms, layer_scalar
//           1, the target's final_logit_softcapping.
// In both, the drafter's scaled embedding equals the target's: embed_tokens holds the target's table
// times target_scale / drafter_scale (a verbatim copy when the two scales agree, as for a Qwen3 target
// or a Gemma target written in its own dtype); lm_head is the target's output matrix verbatim.
#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/status.h"
#include "io/atomic.h"
#include "io/json.h"
#include "io/safetensors.h"
#include "kernels/half.h"
#include "dspark/draft.h"
#include "model/model.h"

ds_drafter_init_params ds_drafter_init_default(void) {
    ds_drafter_init_params p = {.n_layers = 5, .block_size = 7, .markov_rank = -1, .markov_head = "vanilla",
                                .confidence = 1, .seed = 0, .dtype = DS_F32, .style = NULL};
    return p;
}

// What the drafter's layers look like and compute (decided from the target and the style).
typedef struct {
    int gemma;         // Gemma4DSparkModel layers (else Qwen3DSparkModel)
    int head_dim, n_kv_heads;
    double theta;      // RoPE base
    double partial;    // partial_rotary_factor (gemma: the fraction of pairs that rotate)
    double softcap;    // final_logit_softcapping (gemma), 0 = none
    float embed_scale; // what the loader multiplies embed_tokens rows by (docs/formats/deepspec-checkpoint.md §4)
} draft_shape;

static ds_status shape_of(const ds_model *t, const char *style, ds_dtype dtype, draft_shape *g) {
    const ds_model_info *in = ds_model_get_info(t);
    memset(g, 0, sizeof *g);
    if (!style) g->gemma = strncmp(t->arch, "gemma", 5) == 0;
    else if (!strcmp(style, "gemma4")) g->gemma = 1;
    else if (strcmp(style, "qwen3")) return ds_fail(DS_ERR_INVALID, "drafter style '%s' (qwen3 or gemma4)", style);
    g->head_dim = in->head_dim;
    g->n_kv_heads = in->n_kv_heads;
    g->theta = in->rope_theta;
    g->partial = 1.0;
    g->embed_scale = 1.0f;
    if (!g->gemma) return DS_OK;
    // The first full-attention (global) layer sets the geometry; a target without one: layer 0.
    int l = 0;
    while (l < in->n_layers && t->layers[l].window) l++;
    const ds_layer *L = &t->layers[l < in->n_layers ? l : 0];
    if (L->head_dim) g->head_dim = L->head_dim;
    if (L->n_kv_heads) g->n_kv_heads = L->n_kv_heads;
    // Rotated pairs: the leading nonzero frequencies of that layer's RoPE set (proportional partial
    // RoPE leaves the rest at 0). rope_theta is the global layers' base. Frequency scaling (Gemma 3's
    // linear factor) has no field in the drafter format: the drafter keeps plain θ^(−2j/d).
    const ds_rope_freqs *rf = &t->rope[L->rope >= 0 && L->rope < t->n_rope ? L->rope : 0];
    const int half = g->head_dim / 2;
    int rot = 0;
    while (rf->inv_freq && rot < half && rot < rf->half && rf->inv_freq[rot] != 0.0f) rot++;
    if (rf->inv_freq && rot < half) { // partial: a factor whose floor(factor·d/2) is exactly rot
        g->partial = rot ? 2.0 * rot / g->head_dim : 1.0 / g->head_dim;
        while ((int)floor(g->partial * g->head_dim / 2) < rot) g->partial = nextafter(g->partial, 2.0);
    }
    g->softcap = t->final_softcap > 0 ? t->final_softcap : 0;
    const float s = sqrtf((float)in->dim); // sqrt(H) rounded to the drafter's weight dtype
    g->embed_scale = dtype == DS_BF16 ? ds_bf16_to_f32(ds_f32_to_bf16(s)) : s;
    return DS_OK;
}

// embed_tokens: rows e such that e·drafter_scale = the target's scaled embedding row. A verbatim copy
// when the scales agree; else the nearest f32 quotient (its product with the drafter's scale is within
// one ulp of the target's value; bf16 checkpoints then round it like every other weight).
static void embed_table(const ds_model *t, const draft_shape *g, float *e) {
    const ds_model_info *in = ds_model_get_info(t);
    ds_weight_rows_f32(&t->tok_embd, 0, in->vocab_size, e);
    const float ts = t->embed_scale ? t->embed_scale : 1.0f, ds = g->embed_scale;
    if (ts == ds) return;
    const size_t n = (size_t)in->vocab_size * in->dim;
    for (size_t i = 0; i < n; i++) {
        const float y = e[i] * ts; // the target's embedding value (f32, as ds_model_forward computes it)
        e[i] = (float)((double)y / ds);
    }
}

// Tensors to write. Each is filled in f32 and converted to the checkpoint's dtype (in place) as soon
// as the next one starts, so a bf16 drafter of a large target needs about its own size in memory
// plus one f32 tensor, not the f32 checkpoint and its bf16 copy.
#define DS_INIT_MAX_TENSORS 4096
typedef struct {
    char *names[DS_INIT_MAX_TENSORS];
    float *data[DS_INIT_MAX_TENSORS]; // f32 while filled; then, for a BF16 checkpoint, bf16 values
    int rows[DS_INIT_MAX_TENSORS], cols[DS_INIT_MAX_TENSORS]; // cols 0: a vector of `rows`
    int n, n_sealed; // tensors [0, n_sealed) are already in `dtype`
    ds_dtype dtype;
    ds_rng rng;
} builder;

// Convert every filled tensor not yet converted to the checkpoint's dtype, in place (bf16 value k
// overwrites bytes 2k..2k+1, inside f32 value k/2, already converted), and give back the freed half.
static void seal(builder *b) {
    for (; b->n_sealed < b->n; b->n_sealed++) {
        const int i = b->n_sealed;
        if (b->dtype != DS_BF16) continue;
        const size_t n = (size_t)b->rows[i] * (b->cols[i] ? b->cols[i] : 1);
        char *bytes = (char *)b->data[i];
        for (size_t k = 0; k < n; k += 1024) { // through a buffer: no float/uint16 aliasing
            uint16_t h[1024];
            const size_t m = n - k < 1024 ? n - k : 1024;
            for (size_t j = 0; j < m; j++) h[j] = ds_f32_to_bf16(b->data[i][k + j]);
            memcpy(bytes + k * sizeof(uint16_t), h, m * sizeof(uint16_t)); // over values < k + m, all read
        }
        float *shrunk = realloc(b->data[i], n * sizeof(uint16_t) + 2);
        if (shrunk) b->data[i] = shrunk;
    }
}

static void builder_free(builder *b) {
    for (int i = 0; i < b->n; i++) {
        free(b->names[i]);
        free(b->data[i]);
    }
    b->n = 0;
}

// A zero tensor named `name` of shape (rows, cols), or (rows) when cols is 0.
static float *tensor(builder *b, const char *name, int rows, int cols, ds_status *st) {
    if (*st) return NULL;
    if (b->n == DS_INIT_MAX_TENSORS) {
        *st = ds_fail(DS_ERR_INVALID, "too many draft layers");
        return NULL;
    }
    seal(b); // the previous tensors are complete
    const size_t n = (size_t)rows * (cols ? cols : 1);
    float *f = calloc(n ? n : 1, sizeof(float));
    char *nm = strdup(name);
    if (!f || !nm) {
        free(f);
        free(nm);
        *st = ds_fail(DS_ERR_NOMEM, "out of memory");
        return NULL;
    }
    b->names[b->n] = nm;
    b->data[b->n] = f;
    b->rows[b->n] = rows;
    b->cols[b->n] = cols;
    b->n++;
    return f;
}

// normal(0, std) by Box-Muller on the counter-based stream: same seed, same values, same order.
static void fill_normal(builder *b, float *f, size_t n, float std) {
    for (size_t i = 0; i < n; i += 2) {
        const double u1 = 1.0 - ds_rng_uniform(&b->rng), u2 = ds_rng_uniform(&b->rng);
        const double r = sqrt(-2.0 * log(u1)), t = 6.283185307179586 * u2;
        f[i] = (float)(std * r * cos(t));
        if (i + 1 < n) f[i + 1] = (float)(std * r * sin(t));
    }
}

static float *normal(builder *b, const char *name, int rows, int cols, ds_status *st) {
    float *f = tensor(b, name, rows, cols, st);
    if (f) fill_normal(b, f, (size_t)rows * cols, 0.02f);
    return f;
}

static float *ones(builder *b, const char *name, int n, ds_status *st) {
    float *f = tensor(b, name, n, 0, st);
    for (int i = 0; f && i < n; i++) f[i] = 1.0f;
    return f;
}

// Write the collected tensors to `dir`/model.safetensors in the builder's dtype.
static ds_status write_tensors(builder *b, const char *dir) {
    seal(b);
    ds_st_writer *w = ds_st_writer_new();
    if (!w) return DS_ERR_NOMEM;
    ds_status st = ds_st_writer_set_metadata(w, "format", "pt");
    for (int i = 0; i < b->n && !st; i++) {
        const int64_t shape[2] = {b->rows[i], b->cols[i]};
        st = ds_st_writer_add(w, b->names[i], b->dtype, b->cols[i] ? 2 : 1, shape, b->data[i]);
    }
    if (!st) st = ds_st_writer_write_dir(w, dir, 0);
    ds_st_writer_free(w);
    return st;
}

static void default_taps(int L, int *taps, int *n) {
    int T = L - 1 < 5 ? L - 1 : 5;
    *n = 0;
    if (L < 3 || T < 1) { // tiny targets: the embedding output is the only safe tap
        taps[(*n)++] = -1;
        return;
    }
    for (int i = 0; i < T; i++) {
        const int id = T == 1 ? 1 : (int)lround(1.0 + (double)i * (L - 3) / (T - 1));
        if (!*n || id > taps[*n - 1]) taps[(*n)++] = id;
    }
}

static ds_status write_config(const ds_model *t, const ds_drafter_init_params *p, const draft_shape *g, const int *taps,
                              int n_taps, int r, int mask, const char *mask_src, const char *path) {
    const ds_model_info *in = ds_model_get_info(t);
    cJSON *c = cJSON_CreateObject();
    cJSON *a = cJSON_AddArrayToObject(c, "architectures");
    cJSON_AddItemToArray(a, cJSON_CreateString(g->gemma ? "Gemma4DSparkModel" : "Qwen3DSparkModel"));
    cJSON_AddStringToObject(c, "model_type", g->gemma ? "gemma4_text" : "qwen3");
    // The target's text config ...
    cJSON_AddNumberToObject(c, "hidden_size", in->dim);
    cJSON_AddNumberToObject(c, "intermediate_size", in->ffn_dim);
    cJSON_AddNumberToObject(c, "num_attention_heads", in->n_heads);
    cJSON_AddNumberToObject(c, "num_key_value_heads", in->n_kv_heads);
    cJSON_AddNumberToObject(c, "head_dim", in->head_dim);
    cJSON_AddNumberToObject(c, "rms_norm_eps", in->norm_eps);
    cJSON_AddNumberToObject(c, "vocab_size", in->vocab_size);
    if (g->gemma) { // the drafter uses only the global attention geometry
        cJSON_AddNumberToObject(c, "global_head_dim", g->head_dim);
        cJSON_AddNumberToObject(c, "num_global_key_value_heads", g->n_kv_heads);
        cJSON_AddBoolToObject(c, "attention_k_eq_v", 1);
        if (g->softcap > 0) cJSON_AddNumberToObject(c, "final_logit_softcapping", g->softcap);
        cJSON *rp = cJSON_AddObjectToObject(c, "rope_parameters");
        cJSON *fa = cJSON_AddObjectToObject(rp, "full_attention");
        cJSON_AddStringToObject(fa, "rope_type", g->partial < 1 ? "proportional" : "default");
        cJSON_AddNumberToObject(fa, "rope_theta", g->theta);
        if (g->partial < 1) cJSON_AddNumberToObject(fa, "partial_rotary_factor", g->partial);
        cJSON_AddBoolToObject(c, "enable_moe_block", 0);
        cJSON_AddNumberToObject(c, "hidden_size_per_layer_input", 0);
    } else {
        cJSON_AddNumberToObject(c, "rope_theta", in->rope_theta);
    }
    cJSON_AddNumberToObject(c, "max_position_embeddings", in->max_ctx);
    cJSON_AddBoolToObject(c, "attention_bias", 0);
    if (g->gemma) cJSON_AddStringToObject(c, "hidden_activation", "gelu_pytorch_tanh");
    else cJSON_AddStringToObject(c, "hidden_act", "silu");
    if (in->bos_id >= 0) cJSON_AddNumberToObject(c, "bos_token_id", in->bos_id);
    if (in->eos_id >= 0) cJSON_AddNumberToObject(c, "eos_token_id", in->eos_id);
    cJSON_AddStringToObject(c, "torch_dtype", p->dtype == DS_BF16 ? "bfloat16" : "float32");
    // ... with the draft fields.
    cJSON_AddNumberToObject(c, "num_hidden_layers", p->n_layers);
    cJSON_AddNumberToObject(c, "num_target_layers", in->n_layers);
    cJSON_AddItemToObject(c, "target_layer_ids", cJSON_CreateIntArray(taps, n_taps));
    cJSON_AddNumberToObject(c, "block_size", p->block_size);
    cJSON_AddNumberToObject(c, "mask_token_id", mask);
    cJSON_AddStringToObject(c, "mask_token_source", mask_src);
    cJSON_AddNumberToObject(c, "markov_rank", r);
    if (r > 0) cJSON_AddStringToObject(c, "markov_head_type", p->markov_head);
    cJSON_AddBoolToObject(c, "enable_confidence_head", p->confidence);
    cJSON_AddBoolToObject(c, "confidence_head_with_markov", p->confidence && r > 0);
    cJSON_AddNumberToObject(c, "num_anchors", 512);
    cJSON *lt = cJSON_AddArrayToObject(c, "layer_types");
    for (int i = 0; i < p->n_layers; i++) cJSON_AddItemToArray(lt, cJSON_CreateString("full_attention"));
    cJSON_AddBoolToObject(c, "tie_word_embeddings", 0);
    char id[160];
    ds_model_target_id(t, id, sizeof id);
    cJSON_AddStringToObject(c, "target_id", id);
    ds_status st = ds_json_save(c, path);
    cJSON_Delete(c);
    return st;
}

static ds_status build(const ds_model *t, const ds_drafter_init_params *p, const draft_shape *g, int T, int r,
                       builder *b) {
    const ds_model_info *in = ds_model_get_info(t);
    const int H = in->dim, V = in->vocab_size, F = in->ffn_dim, hd = g->head_dim;
    const int qd = in->n_heads * hd, kvd = g->n_kv_heads * hd;
    ds_status st = DS_OK;
    // Frozen copies of the target's input and output embeddings.
    float *e = tensor(b, "embed_tokens.weight", V, H, &st);
    if (e) embed_table(t, g, e);
    float *o = tensor(b, "lm_head.weight", V, H, &st);
    if (o) ds_weight_rows_f32(&t->output, 0, V, o);
    normal(b, "fc.weight", H, T * H, &st);
    ones(b, "hidden_norm.weight", H, &st);
    char n[128];
    for (int l = 0; l < p->n_layers; l++) {
#define NAME(s) (snprintf(n, sizeof n, "layers.%d.%s", l, s), n)
        ones(b, NAME("input_layernorm.weight"), H, &st);
        normal(b, NAME("self_attn.q_proj.weight"), qd, H, &st);
        normal(b, NAME("self_attn.k_proj.weight"), kvd, H, &st);
        if (!g->gemma) normal(b, NAME("self_attn.v_proj.weight"), kvd, H, &st); // Gemma: V = v_norm(K projection)
        normal(b, NAME("self_attn.o_proj.weight"), H, qd, &st);
        ones(b, NAME("self_attn.q_norm.weight"), hd, &st);
        ones(b, NAME("self_attn.k_norm.weight"), hd, &st);
        ones(b, NAME("post_attention_layernorm.weight"), H, &st);
        if (g->gemma) { // sandwich norms (plain w: 1 is the identity) and the layer's output scale
            ones(b, NAME("pre_feedforward_layernorm.weight"), H, &st);
            ones(b, NAME("post_feedforward_layernorm.weight"), H, &st);
            ones(b, NAME("layer_scalar"), 1, &st);
        }
        normal(b, NAME("mlp.gate_proj.weight"), F, H, &st);
        normal(b, NAME("mlp.up_proj.weight"), F, H, &st);
        normal(b, NAME("mlp.down_proj.weight"), H, F, &st);
#undef NAME
    }
    ones(b, "norm.weight", H, &st);
    if (r > 0) {
        normal(b, "markov_head.markov_w1.weight", V, r, &st);
        tensor(b, "markov_head.markov_w2.weight", V, r, &st); // 0: starts as a pure parallel drafter
        if (!strcmp(p->markov_head, "gated")) {
            normal(b, "markov_head.gate_proj.weight", r, H + r, &st);
            tensor(b, "markov_head.gate_proj.bias", r, 0, &st);
        } else if (!strcmp(p->markov_head, "rnn")) {
            normal(b, "markov_head.joint_proj.weight", 3 * r, 2 * r + H, &st);
            tensor(b, "markov_head.joint_proj.bias", 3 * r, 0, &st);
        }
    }
    if (p->confidence) { // zero: c = σ(0) = 0.5 everywhere
        tensor(b, "confidence_head.proj.weight", 1, H + r, &st);
        tensor(b, "confidence_head.proj.bias", 1, 0, &st);
    }
    return st;
}

ds_status ds_drafter_init_write(const ds_model *t, const ds_drafter_init_params *p0, const char *dir) {
    const ds_model_info *in = ds_model_get_info(t);
    ds_drafter_init_params p = *p0;
    if (!p.n_layers) p.n_layers = 5;
    if (!p.block_size) p.block_size = 7;
    if (!p.markov_head) p.markov_head = "vanilla";
    if (p.n_layers < 1 || p.n_layers > 64) return ds_fail(DS_ERR_INVALID, "draft layers must be 1..64");
    if (p.block_size < 1 || p.block_size > 64) return ds_fail(DS_ERR_INVALID, "block size must be 1..64");
    if (strcmp(p.markov_head, "vanilla") && strcmp(p.markov_head, "gated") && strcmp(p.markov_head, "rnn"))
        return ds_fail(DS_ERR_INVALID, "markov head '%s' (vanilla, gated or rnn)", p.markov_head);
    if (p.dtype != DS_F32 && p.dtype != DS_BF16) return ds_fail(DS_ERR_INVALID, "drafters are written in F32 or BF16");
    const int r = p.markov_rank < 0 ? (in->dim < 256 ? in->dim : 256) : p.markov_rank;
    int taps[64], T = 0;
    if (p.n_taps > 0) {
        if (p.n_taps > 64) return ds_fail(DS_ERR_INVALID, "at most 64 taps");
        for (int i = 0; i < p.n_taps; i++) {
            const int id = p.tap_layers[i];
            if (id < -1 || id > in->n_layers - 2)
                return ds_fail(DS_ERR_INVALID, "tap layer %d: taps must be in -1..%d (never the target's last layer)", id,
                               in->n_layers - 2);
            if (i && id <= taps[i - 1]) return ds_fail(DS_ERR_INVALID, "tap layers must be strictly increasing");
            taps[T++] = id;
        }
    } else {
        default_taps(in->n_layers, taps, &T);
    }
    draft_shape g;
    ds_status st0 = shape_of(t, p.style, p.dtype, &g);
    if (st0) return st0;
    char tmp[4096];
    if ((st0 = ds_atomic_dir_open(dir, tmp, sizeof tmp))) return st0;
    builder *b = ds_calloc(1, sizeof *b);
    if (!b) {
        ds_atomic_dir_abort(tmp);
        return DS_ERR_NOMEM;
    }
    b->rng = ds_rng_init(p.seed, 0x696e6974); // "init"
    b->dtype = p.dtype;
    const int mask = in->unk_id >= 0 ? in->unk_id : in->vocab_size - 1;
    char cfg[4200];
    snprintf(cfg, sizeof cfg, "%s/config.json", tmp);
    ds_status st = build(t, &p, &g, T, r, b);
    if (!st) st = write_tensors(b, tmp);
    if (!st) st = write_config(t, &p, &g, taps, T, r, mask, in->unk_id >= 0 ? "unk" : "last_id", cfg);
    if (st) ds_atomic_dir_abort(tmp);
    else st = ds_atomic_dir_commit(tmp, dir);
    builder_free(b);
    free(b);
    return st;
}
