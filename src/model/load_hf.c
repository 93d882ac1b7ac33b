// Load a Llama-family target from a Hugging Face directory: config.json + model.safetensors (or
// shards through model.safetensors.index.json). Tensors "model.embed_tokens.weight",
// "model.layers.N.self_attn.q_proj.weight", ..., "model.norm.weight", "lm_head.weight" (absent when
// tie_word_embeddings). HF Q/K rows use the "halves" RoPE pairing. Qwen3 adds per-head q/k norms.
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/status.h"
#include "io/json.h"
#include "io/safetensors.h"
#include "model/model.h"
#include "model/st_weights.h"
#include "quant/qconfig.h"

static void st_backing_free(void *p) { ds_st_close(p); }

static ds_status take_weight(const ds_safetensors *st, const char *dir, const char *name, ds_weight *w, int optional,
                             const ds_quant_config *q) {
    // shapes are checked in ds_model_finish; MLX affine weights against q (config.json's block)
    return ds_st_weight_q(st, dir, name, -1, -1, optional, q, w);
}

static ds_status take_vector(ds_model *m, const ds_safetensors *st, const char *dir, const char *name, int n,
                             float **out) {
    if (!(*out = ds_model_own(m, (size_t)n))) return ds_fail(DS_ERR_NOMEM, "internal: vector storage too small");
    return ds_st_vector(st, dir, name, n, *out);
}

static ds_status read_config(ds_model *m, const char *dir, int *tied, int *qk_norm) {
    char path[4096];
    snprintf(path, sizeof path, "%s/config.json", dir);
    cJSON *cfg;
    ds_status st0 = ds_json_load(path, 1 << 20, &cfg);
    if (st0) return st0;
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
    if ((st = ds_json_int(cfg, path, "hidden_size", -1, 1 << 16, &in->dim)) ||
        (st = ds_json_int(cfg, path, "intermediate_size", -1, 1 << 20, &in->ffn_dim)) ||
        (st = ds_json_int(cfg, path, "num_hidden_layers", -1, 4096, &in->n_layers)) ||
        (st = ds_json_int(cfg, path, "num_attention_heads", -1, 4096, &in->n_heads)) ||
        (st = ds_json_int(cfg, path, "vocab_size", -1, 1 << 24, &in->vocab_size)))
        goto done;
    if (in->n_heads == 0 || in->dim % in->n_heads) {
        st = ds_fail(DS_ERR_FORMAT, "%s: hidden_size %d is not divisible by num_attention_heads %d", path, in->dim,
                     in->n_heads);
        goto done;
    }
    double eps, theta;
    if ((st = ds_json_int(cfg, path, "num_key_value_heads", in->n_heads, 4096, &in->n_kv_heads)) ||
        (st = ds_json_int(cfg, path, "head_dim", in->dim / in->n_heads, 4096, &in->head_dim)) ||
        (st = ds_json_int(cfg, path, "max_position_embeddings", 2048, 1 << 24, &in->max_ctx)) ||
        (st = ds_json_num(cfg, path, "rms_norm_eps", 1e-6, &eps)) ||
        (st = ds_json_num(cfg, path, "rope_theta", 10000.0, &theta)) ||
        (st = ds_json_bool(cfg, path, "tie_word_embeddings", 0, tied)))
        goto done;
    in->norm_eps = (float)eps;
    in->rope_theta = (float)theta;
    in->rope_layout = DS_ROPE_HALVES;
    // Token ids are informative here (no tokenizer from HF directories yet); a list of EOS ids keeps -1.
    const cJSON *bos = cJSON_GetObjectItemCaseSensitive(cfg, "bos_token_id");
    const cJSON *eos = cJSON_GetObjectItemCaseSensitive(cfg, "eos_token_id");
    in->bos_id = cJSON_IsNumber(bos) ? (int)bos->valuedouble : -1;
    in->eos_id = cJSON_IsNumber(eos) ? (int)eos->valuedouble : -1;
done:
    cJSON_Delete(cfg);
    return st;
}

ds_status ds_model_load_hf(const char *dir, ds_model **out) {
    *out = NULL;
    ds_model *m = ds_calloc(1, sizeof *m);
    if (!m) return DS_ERR_NOMEM;
    m->info.bos_id = m->info.eos_id = m->info.unk_id = -1;
    int tied = 0, qk_norm = 0;
    ds_quant_config qc = {0};
    ds_status st = read_config(m, dir, &tied, &qk_norm);
    if (!st) st = ds_quant_config_load(dir, &qc);
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
    if ((st = take_weight(sf, dir, "model.embed_tokens.weight", &m->tok_embd, 0, &qc)) ||
        (st = take_weight(sf, dir, "lm_head.weight", &m->output, tied, &qc)) ||
        (st = take_vector(m, sf, dir, "model.norm.weight", in->dim, &m->out_norm)))
        goto fail;
    if (!m->output.data) m->output = m->tok_embd;
    for (int l = 0; l < in->n_layers; l++) {
        ds_layer *L = &m->layers[l];
        char name[128];
#define W(field, suffix)                                                  \
    snprintf(name, sizeof name, "model.layers.%d.%s.weight", l, suffix);  \
    if ((st = take_weight(sf, dir, name, &L->field, 0, &qc))) goto fail;
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
    char tp[4200]; // a GGUF conversion's tokenizer (dspark quantize --target)
    snprintf(tp, sizeof tp, "%s/tokenizer.gguf", dir);
    if (!access(tp, R_OK) && (st = ds_model_load_gguf_tokenizer(m, tp))) goto fail;
    if ((st = ds_model_finish(m, dir))) goto fail;
    ds_quant_config_free(&qc);
    *out = m;
    return DS_OK;
fail:
    ds_quant_config_free(&qc);
    ds_model_free(m);
    return st;
}
