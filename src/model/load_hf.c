// Load a Llama-family target from a Hugging Face directory: config.json + model.safetensors (or
// shards through model.safetensors.index.json). Tensors "model.embed_tokens.weight",
// "model.layers.N.self_attn.q_proj.weight", ..., "model.norm.weight", "lm_head.weight" (absent when
// tie_word_embeddings). HF Q/K rows use the "halves" RoPE pairing. Qwen3 adds per-head q/k norms.
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "io/safetensors.h"
#include "model/model.h"

static void st_backing_free(void *p) { ds_st_close(p); }

static char *read_text(const char *path, size_t max) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        ds_fail(DS_ERR_IO, "%s: cannot open", path);
        return NULL;
    }
    char *buf = malloc(max + 1);
    size_t n = buf ? fread(buf, 1, max + 1, f) : 0;
    fclose(f);
    if (!buf) {
        ds_fail(DS_ERR_NOMEM, "out of memory");
        return NULL;
    }
    if (n > max) {
        free(buf);
        ds_fail(DS_ERR_FORMAT, "%s: larger than %zu bytes", path, max);
        return NULL;
    }
    buf[n] = 0;
    return buf;
}

// Integer field of config.json; `def` < 0 means required.
static ds_status cfg_int(const cJSON *cfg, const char *path, const char *key, int def, int *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(cfg, key);
    if (!v || cJSON_IsNull(v)) {
        if (def < 0) return ds_fail(DS_ERR_FORMAT, "%s: missing \"%s\"", path, key);
        *out = def;
        return DS_OK;
    }
    if (!cJSON_IsNumber(v) || v->valuedouble != (double)(int)v->valuedouble || v->valuedouble < 0)
        return ds_fail(DS_ERR_FORMAT, "%s: \"%s\" must be a non-negative integer", path, key);
    *out = (int)v->valuedouble;
    return DS_OK;
}

static double cfg_num(const cJSON *cfg, const char *key, double def) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(cfg, key);
    return cJSON_IsNumber(v) ? v->valuedouble : def;
}

static ds_status take_weight(const ds_safetensors *st, const char *dir, const char *name, ds_weight *w, int optional) {
    const ds_st_tensor *t = ds_st_find(st, name);
    memset(w, 0, sizeof *w);
    if (!t) return optional ? DS_OK : ds_fail(DS_ERR_FORMAT, "%s: missing tensor '%s'", dir, name);
    if (t->n_dims != 2 || t->shape[0] > INT32_MAX || t->shape[1] > INT32_MAX)
        return ds_fail(DS_ERR_FORMAT, "%s: tensor '%s' must be a 2-D matrix", dir, name);
    if (t->dtype != DS_F32 && t->dtype != DS_F16 && t->dtype != DS_BF16)
        return ds_fail(DS_ERR_UNSUPPORTED, "%s: tensor '%s' has dtype %s (F32, F16, BF16 supported)", dir, name,
                       ds_dtype_name(t->dtype));
    w->type = t->dtype;
    w->rows = (int)t->shape[0];
    w->cols = (int)t->shape[1];
    w->data = t->data;
    return DS_OK;
}

static ds_status take_vector(ds_model *m, const ds_safetensors *st, const char *dir, const char *name, int n,
                             float **out) {
    const ds_st_tensor *t = ds_st_find(st, name);
    if (!t) return ds_fail(DS_ERR_FORMAT, "%s: missing tensor '%s'", dir, name);
    if (t->n_dims != 1 || t->shape[0] != n)
        return ds_fail(DS_ERR_FORMAT, "%s: tensor '%s' must have shape [%d]", dir, name, n);
    if (t->dtype != DS_F32 && t->dtype != DS_F16 && t->dtype != DS_BF16)
        return ds_fail(DS_ERR_UNSUPPORTED, "%s: tensor '%s' has dtype %s", dir, name, ds_dtype_name(t->dtype));
    ds_weight w = {t->dtype, 1, n, t->data};
    if (!(*out = ds_model_own(m, (size_t)n))) return ds_fail(DS_ERR_NOMEM, "internal: vector storage too small");
    ds_weight_row_f32(&w, 0, *out);
    return DS_OK;
}

static ds_status read_config(ds_model *m, const char *dir, int *tied, int *qk_norm) {
    char path[4096];
    snprintf(path, sizeof path, "%s/config.json", dir);
    char *text = read_text(path, 1 << 20);
    if (!text) return DS_ERR_IO;
    cJSON *cfg = cJSON_Parse(text);
    free(text);
    if (!cfg || !cJSON_IsObject(cfg)) {
        cJSON_Delete(cfg);
        return ds_fail(DS_ERR_FORMAT, "%s: not valid JSON (or not a JSON object)", path);
    }
    ds_status st = DS_OK;
    ds_model_info *in = &m->info;
    const cJSON *archs = cJSON_GetObjectItemCaseSensitive(cfg, "architectures");
    const cJSON *a0 = cJSON_IsArray(archs) ? cJSON_GetArrayItem(archs, 0) : NULL;
    const char *arch = cJSON_IsString(a0) ? a0->valuestring : "";
    if (strcmp(arch, "LlamaForCausalLM") == 0 || strcmp(arch, "MistralForCausalLM") == 0) {
        snprintf(m->arch, sizeof m->arch, "llama");
        *qk_norm = 0;
    } else if (strcmp(arch, "Qwen3ForCausalLM") == 0) {
        snprintf(m->arch, sizeof m->arch, "qwen3");
        *qk_norm = 1;
    } else {
        st = ds_fail(DS_ERR_UNSUPPORTED,
                     "%s: architecture '%s' is not supported (LlamaForCausalLM, MistralForCausalLM, Qwen3ForCausalLM are)",
                     path, arch);
        goto done;
    }
    const cJSON *scaling = cJSON_GetObjectItemCaseSensitive(cfg, "rope_scaling");
    if (scaling && !cJSON_IsNull(scaling)) {
        st = ds_fail(DS_ERR_UNSUPPORTED, "%s: rope_scaling is not supported yet", path);
        goto done;
    }
    if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(cfg, "attention_bias")) ||
        cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(cfg, "mlp_bias"))) {
        st = ds_fail(DS_ERR_UNSUPPORTED, "%s: attention_bias / mlp_bias are not supported yet", path);
        goto done;
    }
    if ((st = cfg_int(cfg, path, "hidden_size", -1, &in->dim)) ||
        (st = cfg_int(cfg, path, "intermediate_size", -1, &in->ffn_dim)) ||
        (st = cfg_int(cfg, path, "num_hidden_layers", -1, &in->n_layers)) ||
        (st = cfg_int(cfg, path, "num_attention_heads", -1, &in->n_heads)) ||
        (st = cfg_int(cfg, path, "vocab_size", -1, &in->vocab_size)))
        goto done;
    if (in->n_heads == 0 || in->dim % in->n_heads) {
        st = ds_fail(DS_ERR_FORMAT, "%s: hidden_size %d is not divisible by num_attention_heads %d", path, in->dim,
                     in->n_heads);
        goto done;
    }
    if ((st = cfg_int(cfg, path, "num_key_value_heads", in->n_heads, &in->n_kv_heads)) ||
        (st = cfg_int(cfg, path, "head_dim", in->dim / in->n_heads, &in->head_dim)) ||
        (st = cfg_int(cfg, path, "max_position_embeddings", 2048, &in->max_ctx)))
        goto done;
    in->norm_eps = (float)cfg_num(cfg, "rms_norm_eps", 1e-6);
    in->rope_theta = (float)cfg_num(cfg, "rope_theta", 10000.0);
    in->rope_layout = DS_ROPE_HALVES;
    *tied = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(cfg, "tie_word_embeddings"));
    in->bos_id = (int)cfg_num(cfg, "bos_token_id", -1);
    in->eos_id = cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(cfg, "eos_token_id")) ? (int)cfg_num(cfg, "eos_token_id", -1) : -1;
done:
    cJSON_Delete(cfg);
    return st;
}

ds_status ds_model_load_hf(const char *dir, ds_model **out) {
    *out = NULL;
    ds_model *m = ds_calloc(1, sizeof *m);
    if (!m) return DS_ERR_NOMEM;
    m->info.bos_id = m->info.eos_id = -1;
    int tied = 0, qk_norm = 0;
    ds_status st = read_config(m, dir, &tied, &qk_norm);
    if (st) goto fail;
    const char *base = strrchr(dir, '/');
    snprintf(m->name, sizeof m->name, "%s", base && base[1] ? base + 1 : dir);
    ds_model_info *in = &m->info;
    if (in->n_layers > 4096 || in->dim > (1 << 16) || in->head_dim > 4096) {
        st = ds_fail(DS_ERR_FORMAT, "%s: implausible model shape (layers %d, dim %d)", dir, in->n_layers, in->dim);
        goto fail;
    }
    ds_safetensors *sf = NULL;
    if ((st = ds_st_open(dir, &sf))) goto fail;
    m->backing = sf;
    m->backing_free = st_backing_free;
    m->owned_cap = (size_t)in->n_layers * (2 * in->dim + 2 * in->head_dim) + in->dim + (size_t)in->head_dim;
    m->owned = ds_malloc(m->owned_cap * sizeof(float));
    m->layers = ds_calloc((size_t)in->n_layers, sizeof *m->layers);
    if (!m->owned || !m->layers) {
        st = DS_ERR_NOMEM;
        goto fail;
    }
    if ((st = take_weight(sf, dir, "model.embed_tokens.weight", &m->tok_embd, 0)) ||
        (st = take_weight(sf, dir, "lm_head.weight", &m->output, tied)) ||
        (st = take_vector(m, sf, dir, "model.norm.weight", in->dim, &m->out_norm)))
        goto fail;
    if (!m->output.data) m->output = m->tok_embd;
    for (int l = 0; l < in->n_layers; l++) {
        ds_layer *L = &m->layers[l];
        char name[128];
#define W(field, suffix)                                                  \
    snprintf(name, sizeof name, "model.layers.%d.%s.weight", l, suffix);  \
    if ((st = take_weight(sf, dir, name, &L->field, 0))) goto fail;
#define V(field, suffix, n)                                               \
    snprintf(name, sizeof name, "model.layers.%d.%s.weight", l, suffix);  \
    if ((st = take_vector(m, sf, dir, name, n, &L->field))) goto fail;
        W(wq, "self_attn.q_proj") W(wk, "self_attn.k_proj") W(wv, "self_attn.v_proj") W(wo, "self_attn.o_proj")
        W(w_gate, "mlp.gate_proj") W(w_up, "mlp.up_proj") W(w_down, "mlp.down_proj")
        V(attn_norm, "input_layernorm", in->dim) V(ffn_norm, "post_attention_layernorm", in->dim)
        if (qk_norm) {
            V(q_norm, "self_attn.q_norm", in->head_dim) V(k_norm, "self_attn.k_norm", in->head_dim)
        }
#undef W
#undef V
    }
    if ((st = ds_model_finish(m, dir))) goto fail;
    *out = m;
    return DS_OK;
fail:
    ds_model_free(m);
    return st;
}
