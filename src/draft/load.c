// Loading a DeepSpec drafter directory (docs/formats/deepspec-checkpoint.md §1-3) and pairing it with
// a target. Nothing is guessed: every tensor name and shape is checked, extra tensors are rejected
// (a partially loaded drafter still "runs" with near-zero acceptance), and unsupported options are
// refused with a message naming them.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/status.h"
#include "base/utf8.h"
#include "draft/calibration.h"
#include "draft/drafter.h"
#include "io/mapfile.h"
#include "io/json.h"
#include "kernels/half.h"
#include "model/model.h"
#include "model/st_weights.h"
#include "io/qconfig.h"

const ds_drafter_info *ds_drafter_get_info(const ds_drafter *d) { return &d->info; }

ds_status ds_drafter_set_calibration(ds_drafter *d, const float *temps, int n) {
    if (n < 0 || n > 64 || n > d->info.block_size) return ds_fail(DS_ERR_INVALID, "%d calibration temperatures", n);
    for (int i = 0; i < n; i++)
        if (!(temps[i] > 0)) return ds_fail(DS_ERR_INVALID, "calibration temperature %d is not positive", i);
    for (int c = 0; c < DS_CALIB_CLASSES; c++) {
        if (n) memcpy(d->calib[c], temps, sizeof(float) * (size_t)n);
        d->n_calib[c] = n;
    }
    return DS_OK;
}

int ds_drafter_calibration(const ds_drafter *d, int sampled, const float **temps) {
    const int c = sampled ? DS_CALIB_SAMPLED : DS_CALIB_GREEDY;
    *temps = d->calib[c];
    return d->n_calib[c];
}

int ds_drafter_acceptance_prior(const ds_drafter *d, int sampled, const float **accept) {
    const int c = sampled ? DS_CALIB_SAMPLED : DS_CALIB_GREEDY;
    *accept = d->accept_prior[c];
    return d->n_accept_prior[c];
}

// calibration.json next to the weights (calibration.h reads it): each class's temperatures and prior.
static ds_status load_calibration(ds_drafter *d, const char *dir) {
    char path[4096];
    snprintf(path, sizeof path, "%s/calibration.json", dir);
    ds_calibration_class cls[DS_CALIB_CLASSES];
    int found;
    ds_status st = ds_calibration_read(path, d->info.block_size, cls, &found);
    if (st || !found) return st;
    if (!d->conf_w) return ds_fail(DS_ERR_FORMAT, "%s: calibration for a drafter without a confidence head", path);
    for (int c = 0; c < DS_CALIB_CLASSES; c++) {
        memcpy(d->calib[c], cls[c].temps, sizeof d->calib[c]);
        d->n_calib[c] = cls[c].n_temps;
        memcpy(d->accept_prior[c], cls[c].accept, sizeof d->accept_prior[c]);
        d->n_accept_prior[c] = cls[c].n_accept;
    }
    return DS_OK;
}
const char *ds_drafter_warning(const ds_drafter *d) { return d->warning[0] ? d->warning : NULL; }

void ds_drafter_free(ds_drafter *d) {
    if (!d) return;
    ds_st_close(d->st);
    if (d->gg) {
        ds_gguf_close(d->gg);
        free(d->gg);
    }
    ds_quant_config_free(&d->quant);
    ds_drafter_vocab_free(d);
    free(d->layers);
    free(d->owned);
    free(d);
}

float *ds_drafter_own(ds_drafter *d, size_t n) {
    if (d->owned_used + n > d->owned_cap) return NULL;
    float *p = d->owned + d->owned_used;
    d->owned_used += n;
    return p;
}

// ---- config.json ---------------------------------------------------------------------------------

// architectures[0] names the drafter style; the options dspark's runtime lacks are refused by name.
static ds_status config_read_arch(ds_drafter *d, const cJSON *j, const char *path) {
    const cJSON *archs = cJSON_GetObjectItemCaseSensitive(j, "architectures");
    const cJSON *a0 = cJSON_IsArray(archs) ? cJSON_GetArrayItem(archs, 0) : NULL;
    const char *arch = cJSON_IsString(a0) ? a0->valuestring : "";
    if (!strcmp(arch, "Qwen3DSparkModel")) d->style = DS_STYLE_QWEN3;
    else if (!strcmp(arch, "Gemma4DSparkModel")) d->style = DS_STYLE_GEMMA4;
    else
        return ds_fail(DS_ERR_UNSUPPORTED,
                       "%s: architectures[0] '%s' is not a DeepSpec drafter (Qwen3DSparkModel or Gemma4DSparkModel)", path,
                       arch);
    snprintf(d->arch, sizeof d->arch, "%s", arch);
    int moe = 0, ple = 0;
    ds_status st;
    if ((st = ds_json_bool(j, path, "enable_moe_block", 0, &moe)) ||
        (st = ds_json_int(j, path, "hidden_size_per_layer_input", 0, 1 << 20, &ple)))
        return st;
    if (moe || ple)
        return ds_fail(DS_ERR_UNSUPPORTED, "%s: %s is not supported by dspark's drafter runtime", path,
                       moe ? "enable_moe_block = true" : "hidden_size_per_layer_input != 0");
    const cJSON *lt = cJSON_GetObjectItemCaseSensitive(j, "layer_types"), *e;
    cJSON_ArrayForEach(e, lt) if (!cJSON_IsString(e) || strcmp(e->valuestring, "full_attention"))
        return ds_fail(DS_ERR_UNSUPPORTED, "%s: layer_types must all be \"full_attention\" (no sliding window in drafters)",
                       path);
    return DS_OK;
}

// The sizes, flags and names every style shares (target_id is printed, so escaped).
static ds_status config_read_sizes(ds_drafter *d, const cJSON *j, const char *path, draft_config *c) {
    const char *tid;
    ds_status st;
    if ((st = ds_json_int(j, path, "hidden_size", -1, 1 << 16, &d->H)) ||
        (st = ds_json_int(j, path, "intermediate_size", -1, 1 << 20, &d->F)) ||
        (st = ds_json_int(j, path, "vocab_size", -1, 1 << 24, &d->V)) ||
        (st = ds_json_int(j, path, "num_attention_heads", -1, 4096, &d->nq)) ||
        (st = ds_json_int(j, path, "num_hidden_layers", -1, 1024, &c->layers)) ||
        (st = ds_json_int(j, path, "num_target_layers", -1, 4096, &c->target_layers)) ||
        (st = ds_json_int(j, path, "block_size", -1, 64, &c->block)) ||
        (st = ds_json_int(j, path, "mask_token_id", -1, 1 << 30, &c->mask)) ||
        (st = ds_json_int(j, path, "markov_rank", 0, 1 << 16, &c->rank)) ||
        (st = ds_json_bool(j, path, "enable_confidence_head", 0, &c->conf)) ||
        (st = ds_json_bool(j, path, "confidence_head_with_markov", 0, &c->conf_markov)) ||
        (st = ds_json_bool(j, path, "attention_bias", 0, &c->bias)) ||
        (st = ds_json_num(j, path, "rms_norm_eps", 1e-6, &c->eps)) ||
        (st = ds_json_str(j, path, "markov_head_type", &c->head_type)) ||
        (st = ds_json_str(j, path, "target_id", &tid)))
        return st;
    ds_text_escape(d->target_id, sizeof d->target_id, tid ? tid : "", tid ? strlen(tid) : 0);
    return DS_OK;
}

// markov_head_type, read only when there is a Markov head (markov_rank > 0).
static ds_status config_read_markov(ds_drafter *d, const char *path, const draft_config *c) {
    if (c->rank <= 0) return DS_OK;
    const char *h = c->head_type ? c->head_type : "vanilla";
    if (!strcmp(h, "vanilla")) d->markov = DS_MARKOV_VANILLA;
    else if (!strcmp(h, "gated")) d->markov = DS_MARKOV_GATED;
    else if (!strcmp(h, "rnn")) d->markov = DS_MARKOV_RNN;
    else return ds_fail(DS_ERR_UNSUPPORTED, "%s: markov_head_type '%s' is not supported (vanilla, gated, rnn)", path, h);
    snprintf(d->markov_name, sizeof d->markov_name, "%s", h);
    return DS_OK;
}

// The required sizes are positive and layer_types, when given, has one entry per layer.
static ds_status config_check_sizes(const ds_drafter *d, const cJSON *j, const char *path, const draft_config *c) {
    if (d->nq == 0 || c->layers == 0 || c->block == 0 || d->H == 0 || d->V == 0)
        return ds_fail(DS_ERR_FORMAT, "%s: hidden_size, vocab_size, heads, layers and block_size must be positive", path);
    const cJSON *lt = cJSON_GetObjectItemCaseSensitive(j, "layer_types");
    if (lt && !cJSON_IsNull(lt) && (!cJSON_IsArray(lt) || cJSON_GetArraySize(lt) != c->layers))
        return ds_fail(DS_ERR_FORMAT, "%s: layer_types must list one type per layer (%d), not %d", path, c->layers,
                       cJSON_IsArray(lt) ? cJSON_GetArraySize(lt) : -1);
    return DS_OK;
}

// target_layer_ids: the target layers the drafter taps (their order is checked against the target later).
static ds_status config_read_taps(ds_drafter *d, const cJSON *j, const char *path) {
    const cJSON *taps = cJSON_GetObjectItemCaseSensitive(j, "target_layer_ids"), *e;
    if (!cJSON_IsArray(taps) || cJSON_GetArraySize(taps) < 1 || cJSON_GetArraySize(taps) > 64)
        return ds_fail(DS_ERR_FORMAT, "%s: target_layer_ids must be a list of 1..64 layer ids", path);
    d->T = 0;
    cJSON_ArrayForEach(e, taps) {
        if (!ds_json_is_int(e, -1, 4096)) return ds_fail(DS_ERR_FORMAT, "%s: target_layer_ids must hold integers", path);
        d->tap_ids[d->T++] = (int)e->valuedouble;
    }
    return DS_OK;
}

// Qwen3 attention: kv heads, head_dim and rope_theta (rope_parameters.rope_theta over the top-level one).
static ds_status config_read_qwen3_attention(ds_drafter *d, const cJSON *j, const char *path, draft_config *c) {
    ds_status st;
    if ((st = ds_json_int(j, path, "num_key_value_heads", d->nq, 4096, &d->nkv)) ||
        (st = ds_json_int(j, path, "head_dim", d->H / d->nq, 4096, &d->hd)))
        return st;
    double th1;
    if ((st = ds_json_num(j, path, "rope_theta", 1e6, &th1))) return st;
    const cJSON *rp = cJSON_GetObjectItemCaseSensitive(j, "rope_parameters");
    if ((st = ds_json_num(rp, path, "rope_theta", th1, &c->theta))) return st;
    c->partial = 1.0;
    c->k_eq_v = 0;
    return DS_OK;
}

// Gemma 4 attention: the global (full-attention) geometry, K = V, the logit softcap and
// rope_parameters.full_attention.
static ds_status config_read_gemma4_attention(ds_drafter *d, const cJSON *j, const char *path, draft_config *c) {
    int kv_local;
    ds_status st;
    if ((st = ds_json_int(j, path, "global_head_dim", -1, 4096, &d->hd)) ||
        (st = ds_json_int(j, path, "num_key_value_heads", d->nq, 4096, &kv_local)) ||
        (st = ds_json_bool(j, path, "attention_k_eq_v", 0, &c->k_eq_v)) ||
        (st = ds_json_num(j, path, "final_logit_softcapping", 0, &c->softcap)))
        return st;
    if ((st = ds_json_int(j, path, "num_global_key_value_heads", kv_local, 4096, &d->nkv))) return st;
    if (!c->k_eq_v) // released Gemma drafters share K and V; dspark has no v_proj path for Gemma
        return ds_fail(DS_ERR_UNSUPPORTED, "%s: attention_k_eq_v = false (a Gemma drafter with v_proj) is not supported",
                       path);
    const cJSON *rp = cJSON_GetObjectItemCaseSensitive(j, "rope_parameters");
    const cJSON *fa = cJSON_GetObjectItemCaseSensitive(rp, "full_attention");
    if (!cJSON_IsObject(fa)) return ds_fail(DS_ERR_FORMAT, "%s: Gemma drafters need rope_parameters.full_attention", path);
    if ((st = ds_json_num(fa, path, "rope_theta", 1e6, &c->theta)) ||
        (st = ds_json_num(fa, path, "partial_rotary_factor", 1.0, &c->partial)))
        return st;
    if (!(c->partial > 0 && c->partial <= 1))
        return ds_fail(DS_ERR_FORMAT, "%s: partial_rotary_factor must be in (0, 1]", path);
    return DS_OK;
}

// Norm epsilon, RoPE base and attention geometry, whichever style set them.
static ds_status config_check_attention(const ds_drafter *d, const char *path, const draft_config *c) {
    if (!(c->eps > 0)) return ds_fail(DS_ERR_FORMAT, "%s: rms_norm_eps must be positive", path);
    if (!(c->theta > 0)) return ds_fail(DS_ERR_FORMAT, "%s: rope_theta must be positive", path);
    if (d->nkv == 0 || d->nq % d->nkv || d->hd == 0 || d->hd % 2)
        return ds_fail(DS_ERR_FORMAT, "%s: inconsistent attention geometry (heads %d/%d, head dim %d)", path, d->nq,
                       d->nkv, d->hd);
    return DS_OK;
}

static ds_status read_config(ds_drafter *d, const char *dir, draft_config *c) {
    char path[4096];
    snprintf(path, sizeof path, "%s/config.json", dir);
    cJSON *j;
    ds_status st = ds_json_load(path, 1 << 20, &j);
    if (st) return st;
    memset(c, 0, sizeof *c);
    if (!(st = config_read_arch(d, j, path)) && !(st = config_read_sizes(d, j, path, c)) &&
        !(st = config_read_markov(d, path, c)) && !(st = config_check_sizes(d, j, path, c)) &&
        !(st = config_read_taps(d, j, path)) &&
        !(st = d->style == DS_STYLE_QWEN3 ? config_read_qwen3_attention(d, j, path, c)
                                          : config_read_gemma4_attention(d, j, path, c)) &&
        !(st = config_check_attention(d, path, c)))
        // MLX affine quantization (docs/formats/mlx-affine.md): the block says which modules are quantized
        // and how; ds_st_weight_q checks every quantized tensor against it.
        st = ds_quant_config_parse(j, path, &d->quant);
    cJSON_Delete(j);
    return st;
}

// ---- pairing -------------------------------------------------------------------------------------

static ds_status check_pairing(ds_drafter *d, const draft_config *c, const ds_model *target, const char *dir) {
    const ds_model_info *t = ds_model_get_info(target);
    if (d->H != t->dim)
        return ds_fail(DS_ERR_MISMATCH, "%s: drafter hidden_size %d does not match the target's hidden size %d", dir,
                       d->H, t->dim);
    if (d->V != t->vocab_size)
        return ds_fail(DS_ERR_MISMATCH, "%s: drafter vocab_size %d does not match the target's vocabulary of %d", dir,
                       d->V, t->vocab_size);
    if (c->target_layers != t->n_layers)
        return ds_fail(DS_ERR_MISMATCH, "%s: num_target_layers %d, but the target has %d layers", dir, c->target_layers,
                       t->n_layers);
    for (int i = 0; i < d->T; i++) {
        if (d->tap_ids[i] < -1 || d->tap_ids[i] > t->n_layers - 2)
            return ds_fail(DS_ERR_MISMATCH,
                           "%s: target_layer_ids has layer %d; taps must be in -1..%d (never the target's last layer)",
                           dir, d->tap_ids[i], t->n_layers - 2);
        if (i && d->tap_ids[i] <= d->tap_ids[i - 1])
            return ds_fail(DS_ERR_FORMAT, "%s: target_layer_ids must be strictly increasing", dir);
    }
    if (c->mask < 0 || c->mask >= d->V)
        return ds_fail(DS_ERR_MISMATCH, "%s: mask_token_id %d is outside the vocabulary (0..%d)", dir, c->mask, d->V - 1);
    char id[160];
    ds_model_target_id(target, id, sizeof id);
    if (d->target_id[0] && strcmp(id, d->target_id))
        snprintf(d->warning, sizeof d->warning,
                 "%s: drafter was made for target '%s' but this target is '%s'; acceptance may be poor", dir,
                 d->target_id, id);
    return DS_OK;
}

// ---- tensors -------------------------------------------------------------------------------------

#define DS_DRAFT_MAX_TENSORS 4096

typedef struct {
    ds_drafter *d;
    const char *dir;
    int n_expected;                      // tensors taken so far
    char names[DS_DRAFT_MAX_TENSORS][96]; // their names, to find any the file has beyond them
} loader;

static int cmp_names(const void *a, const void *b) { return strcmp((const char *)a, (const char *)b); }
static int cmp_key_name(const void *key, const void *b) { return strcmp(*(const char *const *)key, (const char *)b); }

static ds_status expect(loader *L, const char *name) {
    if (L->n_expected >= DS_DRAFT_MAX_TENSORS)
        return ds_fail(DS_ERR_FORMAT, "%s: too many draft layers", L->dir);
    snprintf(L->names[L->n_expected++], sizeof L->names[0], "%s", name);
    return DS_OK;
}

static ds_status W(loader *L, const char *name, int rows, int cols, ds_weight *w) {
    ds_status st = expect(L, name);
    if (!st) st = ds_st_weight_q(L->d->st, L->dir, name, rows, cols, 0, &L->d->quant, w);
    if (!st && ds_weight_bits(w)) { // a quantized module also owns <module>.scales and .biases
        // A drafter's outputs only steer the proposals (the target decides every token), so its
        // quantized products take the fast integer path: inputs rounded to int8 (kernels/qmatmul.h).
        w->round_inputs = 1;
        char m[256], n[300];
        ds_st_module_of(name, m, sizeof m);
        snprintf(n, sizeof n, "%s.scales", m);
        if (!(st = expect(L, n))) {
            snprintf(n, sizeof n, "%s.biases", m);
            st = expect(L, n);
        }
    }
    return st;
}

static ds_status Vec(loader *L, const char *name, int n, float **out) {
    ds_status st = expect(L, name);
    if (st) return st;
    if (!(*out = ds_drafter_own(L->d, (size_t)n))) return ds_fail(DS_ERR_NOMEM, "internal: drafter vector storage too small");
    return ds_st_vector(L->d->st, L->dir, name, n, *out);
}

static ds_status load_layer(loader *L, int l, const draft_config *c) {
    ds_drafter *d = L->d;
    ds_layer *y = &d->layers[l];
    const int H = d->H, qd = d->nq * d->hd, kvd = d->nkv * d->hd;
    const int gemma = d->style == DS_STYLE_GEMMA4;
    char n[128];
    ds_status st;
#define NAME(s) (snprintf(n, sizeof n, "layers.%d.%s", l, s), n)
    // Qwen3's post_attention_layernorm is the pre-MLP norm; Gemma's normalizes the attention output.
    if ((st = Vec(L, NAME("input_layernorm.weight"), H, &y->attn_norm)) ||
        (st = Vec(L, NAME("post_attention_layernorm.weight"), H, gemma ? &y->attn_post_norm : &y->ffn_norm)) ||
        (st = W(L, NAME("self_attn.q_proj.weight"), qd, H, &y->wq)) ||
        (st = W(L, NAME("self_attn.k_proj.weight"), kvd, H, &y->wk)) ||
        (st = W(L, NAME("self_attn.o_proj.weight"), H, qd, &y->wo)) ||
        (st = Vec(L, NAME("self_attn.q_norm.weight"), d->hd, &y->q_norm)) ||
        (st = Vec(L, NAME("self_attn.k_norm.weight"), d->hd, &y->k_norm)) ||
        (st = W(L, NAME("mlp.gate_proj.weight"), d->F, H, &y->w_gate)) ||
        (st = W(L, NAME("mlp.up_proj.weight"), d->F, H, &y->w_up)) ||
        (st = W(L, NAME("mlp.down_proj.weight"), H, d->F, &y->w_down)))
        return st;
    if (!c->k_eq_v && (st = W(L, NAME("self_attn.v_proj.weight"), kvd, H, &y->wv))) return st;
    if (c->bias && d->style == DS_STYLE_QWEN3) {
        if ((st = Vec(L, NAME("self_attn.q_proj.bias"), qd, &y->bq)) ||
            (st = Vec(L, NAME("self_attn.k_proj.bias"), kvd, &y->bk)) ||
            (st = Vec(L, NAME("self_attn.v_proj.bias"), kvd, &y->bv)) ||
            (st = Vec(L, NAME("self_attn.o_proj.bias"), H, &y->bo)))
            return st;
    }
    y->out_scale = 1.0f;
    if (gemma) { // K = V: V = v_norm(k_proj x), weightless
        float *s;
        if ((st = Vec(L, NAME("pre_feedforward_layernorm.weight"), H, &y->ffn_norm)) ||
            (st = Vec(L, NAME("post_feedforward_layernorm.weight"), H, &y->ffn_post_norm)) ||
            (st = Vec(L, NAME("layer_scalar"), 1, &s)))
            return st;
        y->out_scale = s[0];
        y->v_norm = 1;
    }
    y->head_dim = d->hd;
    y->n_kv_heads = d->nkv;
    y->ffn_dim = d->F;
    y->kv_src = l;
#undef NAME
    return DS_OK;
}

static ds_status load_tensors_with(loader *L, ds_drafter *d, const draft_config *c, const char *dir) {
    const int H = d->H, r = c->rank;
    ds_status st;
    if ((st = W(L, "embed_tokens.weight", d->V, H, &d->embed)) || (st = W(L, "lm_head.weight", d->V, H, &d->lm_head)) ||
        (st = W(L, "fc.weight", H, d->T * H, &d->fc)) || (st = Vec(L, "hidden_norm.weight", H, &d->hidden_norm)) ||
        (st = Vec(L, "norm.weight", H, &d->norm)))
        return st;
    for (int l = 0; l < c->layers; l++)
        if ((st = load_layer(L, l, c))) return st;
    if (r > 0) {
        if ((st = W(L, "markov_head.markov_w1.weight", d->V, r, &d->markov_w1)) ||
            (st = W(L, "markov_head.markov_w2.weight", d->V, r, &d->markov_w2)))
            return st;
        if (d->markov == DS_MARKOV_GATED &&
            ((st = W(L, "markov_head.gate_proj.weight", r, H + r, &d->gate_proj)) ||
             (st = Vec(L, "markov_head.gate_proj.bias", r, &d->gate_bias))))
            return st;
        if (d->markov == DS_MARKOV_RNN &&
            ((st = W(L, "markov_head.joint_proj.weight", 3 * r, 2 * r + H, &d->joint_proj)) ||
             (st = Vec(L, "markov_head.joint_proj.bias", 3 * r, &d->joint_bias))))
            return st;
    }
    if (c->conf) {
        if (c->conf_markov && r == 0)
            return ds_fail(DS_ERR_FORMAT, "%s: confidence_head_with_markov needs markov_rank > 0", dir);
        const int in = H + (c->conf_markov ? r : 0);
        ds_weight w;
        float *b;
        if ((st = W(L, "confidence_head.proj.weight", 1, in, &w)) ||
            (st = Vec(L, "confidence_head.proj.bias", 1, &b)))
            return st;
        if (!(d->conf_w = ds_drafter_own(d, (size_t)in))) return ds_fail(DS_ERR_NOMEM, "internal: drafter vector storage too small");
        ds_weight_row_f32(&w, 0, d->conf_w);
        d->conf_b = b[0];
    }
    // Anything else in the checkpoint is a tensor we would silently ignore: refuse it by name.
    qsort(L->names, (size_t)L->n_expected, sizeof *L->names, cmp_names);
    for (int i = 0; i < ds_st_count(d->st); i++) {
        const char *name = ds_st_at(d->st, i)->name;
        if (!bsearch(&name, L->names, (size_t)L->n_expected, sizeof *L->names, cmp_key_name))
            return ds_fail(DS_ERR_FORMAT, "%s: unexpected tensor '%s' (not part of this drafter's configuration)", dir,
                           name);
    }
    return DS_OK;
}

static ds_status load_tensors(ds_drafter *d, const draft_config *c, const char *dir) {
    loader *L = ds_calloc(1, sizeof *L); // ~400 KB of names: not on the stack
    if (!L) return DS_ERR_NOMEM;
    L->d = d;
    L->dir = dir;
    ds_status st = load_tensors_with(L, d, c, dir);
    free(L);
    return st;
}

// ---- public --------------------------------------------------------------------------------------

static int ds_path_is_file(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0 && S_ISREG(sb.st_mode);
}

size_t ds_drafter_own_size(const ds_drafter *d, const draft_config *c) {
    const size_t per_layer = (size_t)6 * d->H + 2 * (size_t)d->hd + (size_t)(d->nq + 2 * d->nkv) * d->hd + 1;
    return (size_t)c->layers * per_layer + 2 * (size_t)d->H + (size_t)d->hd + 5 * (size_t)c->rank + d->H + 8;
}

// A target whose products round their inputs (ds_model_rounds_inputs: bf16_inputs, or the int8 inputs
// of GGUF block types and Q8_0, the default for those files) has its drafter's BF16 products round
// their inputs too (VDPBF16PS where the CPU has it, kernels/matmul_bf16dp.h): one switch for the pair.
// A drafter only proposes, so its rounding never changes what is generated; it makes drafting 1.5-2.6x
// faster (4 sequences' block of the inflated stories260K drafter, 2 threads, Zen 5: 50 -> 19 ms; one
// sequence on the Q4_K_M file, Zen 4: 1.8x, docs/results.md).
// (A draft vocabulary's heads, made later from lm_head and markov_w2, copy the flag.)
static void drafter_bf16_inputs(ds_drafter *d, int n_layers) {
    ds_weight *ws[] = {&d->lm_head, &d->fc, &d->markov_w2, &d->gate_proj, &d->joint_proj};
    for (size_t i = 0; i < sizeof ws / sizeof *ws; i++) ds_weight_bf16_inputs(ws[i], NULL);
    for (int l = 0; l < n_layers; l++) ds_layer_each_weight(&d->layers[l], ds_weight_bf16_inputs, NULL);
}

// The matrices a drafting round reads (every round: the backbone, the heads), entered into the page
// tables now and in huge pages where the kernel can (io/mapfile.h), as the target's are: the first
// round takes no page faults, and each round streams them as fast as the target's. Not the embedding
// and Markov lookup tables (a gather reads a few rows).
static void drafter_populate(ds_drafter *d, int n_layers) {
    const int cap = 5 + 16 * n_layers; // (ds_layer_each_weight passes 9 matrices per layer)
    ds_weight_ranges r = {malloc((size_t)cap * sizeof *r.p), malloc((size_t)cap * sizeof *r.n), 0, cap};
    if (r.p && r.n) {
        ds_weight *ws[] = {&d->lm_head, &d->fc, &d->markov_w2, &d->gate_proj, &d->joint_proj};
        for (size_t i = 0; i < sizeof ws / sizeof *ws; i++) ds_weight_range(ws[i], &r);
        for (int l = 0; l < n_layers; l++) ds_layer_each_weight(&d->layers[l], ds_weight_range, &r);
        ds_mapfile_populate_huge(r.p, r.n, r.count < cap ? r.count : cap, NULL);
    }
    free(r.p);
    free(r.n);
}

ds_status ds_drafter_load(const char *dir, const ds_model *target, ds_drafter **out) {
    *out = NULL;
    ds_drafter *d = ds_calloc(1, sizeof *d);
    if (!d) return DS_ERR_NOMEM;
    draft_config c;
    // A file is a GGUF drafter (llama.cpp's converter's form), a directory DeepSpec's.
    const int gguf = ds_path_is_file(dir);
    ds_status st = gguf ? ds_drafter_gguf_config(d, dir, target, &c) : read_config(d, dir, &c);
    // No target (quantize's load smoke test): the drafter alone, unpaired.
    if (!st && target) st = check_pairing(d, &c, target, dir);
    if (!st && !target && (c.mask < 0 || c.mask >= d->V))
        st = ds_fail(DS_ERR_FORMAT, "%s: mask_token_id %d is outside the vocabulary (0..%d)", dir, c.mask, d->V - 1);
    if (st) goto fail;
    if (!gguf && (st = ds_st_open(dir, &d->st))) goto fail;
    d->r = c.rank;
    d->eps = (float)c.eps;
    d->owned_cap = ds_drafter_own_size(d, &c);
    d->owned = ds_malloc(d->owned_cap * sizeof(float));
    d->layers = ds_calloc((size_t)c.layers, sizeof *d->layers);
    if (!d->owned || !d->layers) {
        st = DS_ERR_NOMEM;
        goto fail;
    }
    if ((st = gguf ? ds_drafter_gguf_tensors(d, &c, target) : load_tensors(d, &c, dir))) goto fail;
    if (target && ds_model_rounds_inputs(target)) drafter_bf16_inputs(d, c.layers);
    if (target) drafter_populate(d, c.layers); // (quantize's smoke test, no target, reads it once)

    // Numerics fixed by the format (docs/formats/deepspec-checkpoint.md §3-4).
    if (d->style == DS_STYLE_GEMMA4) {
        // embed scale = sqrt(H) rounded to the weight dtype (bf16(sqrt(3840)) = 62.0)
        const float s = sqrtf((float)d->H);
        const ds_dtype et = ds_weight_bits(&d->embed) ? d->embed.scale_type : d->embed.type; // quantized: as stored
        d->embed_scale = et == DS_BF16 ? ds_bf16_to_f32(ds_f32_to_bf16(s))
                         : et == DS_F16 ? ds_f16_to_f32(ds_f32_to_f16(s))
                                        : s;
        d->attn_scale = 1.0f; // q/k norms replace the scale
        d->softcap = (float)c.softcap;
    } else {
        d->embed_scale = 1.0f;
        d->attn_scale = 1.0f / sqrtf((float)d->hd);
        d->softcap = 0;
    }
    for (int l = 0; l < c.layers; l++) d->layers[l].attn_scale = d->attn_scale;
    d->block = (ds_block_cfg){.dim = d->H, .n_heads = d->nq, .n_layers = c.layers, .eps = d->eps,
                              .rope_layout = DS_ROPE_HALVES, .act = d->style == DS_STYLE_GEMMA4 ? DS_ACT_GELU_TANHF : DS_ACT_SILU, .n_rope = 1, .rope_half = d->hd / 2};
    // RoPE, halves pairing: inv_freq[j] = θ^(−2j/hd). Gemma's proportional partial RoPE rotates
    // only the first partial·hd/2 pairs (same divisor, the full head dim); the rest stay put.
    d->inv_freq = ds_drafter_own(d, (size_t)d->hd / 2);
    const int rot = (int)(c.partial * d->hd / 2 + 1e-6);
    for (int i = 0; i < d->hd / 2; i++) d->inv_freq[i] = i < rot ? (float)pow(c.theta, -2.0 * i / d->hd) : 0.0f;

    ds_drafter_info *in = &d->info;
    in->arch = d->arch;
    in->n_layers = c.layers;
    in->block_size = c.block;
    in->markov_rank = c.rank;
    in->markov_head = d->markov_name;
    in->has_confidence = c.conf;
    in->confidence_with_markov = c.conf && c.conf_markov;
    in->n_taps = d->T;
    in->tap_layers = d->tap_ids;
    in->mask_token_id = c.mask;
    in->hidden = d->H;
    in->vocab = d->V;
    in->target_id = d->target_id;
    d->n_vocab = d->V;
    // (a GGUF drafter is one file: no calibration.json or draft_vocab.json beside it)
    if (!gguf && ((st = load_calibration(d, dir)) || (st = ds_drafter_load_vocab(d, dir)))) goto fail;
    *out = d;
    return DS_OK;
fail:
    ds_drafter_free(d);
    return st;
}

// FNV-1a over the architecture and, per tensor, its shape and 64 evenly spaced 64-byte windows:
// a fingerprint that tells targets apart without reading gigabytes.
static uint64_t fnv(uint64_t h, const void *p, size_t n) {
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001b3ULL;
    return h;
}

static uint64_t hash_weight(uint64_t h, const ds_weight *w) {
    const size_t bytes = ds_weight_data_bytes(w); // the bytes at w->data (affine: packed words only)
    h = fnv(h, &w->type, sizeof w->type);
    h = fnv(h, &w->rows, sizeof w->rows);
    h = fnv(h, &w->cols, sizeof w->cols);
    if (!w->data || !bytes) return h;
    for (int i = 0; i < 64; i++) {
        const size_t off = bytes <= 64 ? 0 : (bytes - 64) / 63 * (size_t)i;
        h = fnv(h, (const char *)w->data + off, bytes < 64 ? bytes : 64);
    }
    return h;
}

void ds_model_target_id(const ds_model *m, char *out, size_t cap) {
    const ds_model_info *in = &m->info;
    uint64_t h = 0xcbf29ce484222325ULL;
    h = fnv(h, m->arch, strlen(m->arch));
    const int dims[] = {in->n_layers, in->dim, in->ffn_dim, in->n_heads, in->n_kv_heads, in->head_dim, in->vocab_size};
    h = fnv(h, dims, sizeof dims);
    h = hash_weight(h, &m->tok_embd);
    h = hash_weight(h, &m->output);
    for (int l = 0; l < in->n_layers; l++) {
        const ds_layer *L = &m->layers[l];
        const ds_weight *ws[] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->w_gate, &L->w_up, &L->w_down};
        for (size_t k = 0; k < sizeof ws / sizeof *ws; k++) h = hash_weight(h, ws[k]);
    }
    snprintf(out, cap, "%s:%016llx", m->name, (unsigned long long)h);
}
