// The HF view of a llama GGUF target (see hf_export.h).
#include "model/hf_export.h"

#include <stdio.h>
#include <string.h>

#include "base/status.h"
#include "io/gguf.h"

ds_status ds_hf_export_check(const ds_model *m, const char *path) {
    if (strcmp(m->arch, "llama") || m->info.rope_layout != DS_ROPE_INTERLEAVED)
        return ds_fail(DS_ERR_UNSUPPORTED, "%s: only llama GGUF targets convert to a Hugging Face directory (this is '%s')",
                       path, m->arch);
    return DS_OK;
}

static int tied(const ds_model *m) { return m->output.data == m->tok_embd.data; }

int ds_hf_count(const ds_model *m) { return 3 - tied(m) + DS_HF_PER_LAYER * m->info.n_layers; }

static void set_w(ds_hf_tensor *t, const ds_weight *w, int perm_heads) {
    t->n_dims = 2;
    t->shape[0] = w->rows;
    t->shape[1] = w->cols;
    t->w = *w;
    t->perm_heads = perm_heads;
}

static void set_v(ds_hf_tensor *t, const float *v, int n) {
    t->n_dims = 1;
    t->shape[0] = n;
    t->vec = v;
}

void ds_hf_tensor_of(const ds_model *m, ds_hf_kind kind, int l, ds_hf_tensor *t) {
    memset(t, 0, sizeof *t);
    const ds_model_info *in = &m->info;
    const ds_layer *L = kind >= DS_HF_Q ? &m->layers[l] : NULL;
    static const char *const names[] = {"model.embed_tokens.weight", "lm_head.weight", "model.norm.weight",
                                        "self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight",
                                        "self_attn.o_proj.weight", "mlp.gate_proj.weight", "mlp.up_proj.weight",
                                        "mlp.down_proj.weight", "input_layernorm.weight",
                                        "post_attention_layernorm.weight"};
    if (L) snprintf(t->name, sizeof t->name, "model.layers.%d.%s", l, names[kind]);
    else snprintf(t->name, sizeof t->name, "%s", names[kind]);
    switch (kind) {
    case DS_HF_EMBED: set_w(t, &m->tok_embd, 0); break;
    case DS_HF_LM_HEAD: set_w(t, &m->output, 0); break;
    case DS_HF_NORM: set_v(t, m->out_norm, in->dim); break;
    case DS_HF_Q: set_w(t, &L->wq, in->n_heads); break;
    case DS_HF_K: set_w(t, &L->wk, in->n_kv_heads); break;
    case DS_HF_V: set_w(t, &L->wv, 0); break;
    case DS_HF_O: set_w(t, &L->wo, 0); break;
    case DS_HF_GATE: set_w(t, &L->w_gate, 0); break;
    case DS_HF_UP: set_w(t, &L->w_up, 0); break;
    case DS_HF_DOWN: set_w(t, &L->w_down, 0); break;
    case DS_HF_ATTN_NORM: set_v(t, L->attn_norm, in->dim); break;
    case DS_HF_FFN_NORM: set_v(t, L->ffn_norm, in->dim); break;
    }
}

void ds_hf_at(const ds_model *m, int i, ds_hf_tensor *t) {
    const int head = 3 - tied(m);
    if (i < head) {
        ds_hf_tensor_of(m, i == 0 ? DS_HF_EMBED : i == head - 1 ? DS_HF_NORM : DS_HF_LM_HEAD, 0, t);
        return;
    }
    i -= head;
    ds_hf_tensor_of(m, (ds_hf_kind)(DS_HF_Q + i % DS_HF_PER_LAYER), i / DS_HF_PER_LAYER, t);
}

// llama.cpp's convert permutes Q/K rows so RoPE pairs are interleaved; HF keeps halves:
// HF row h·d + i (i < d/2) = GGUF row h·d + 2i, HF row h·d + d/2 + i = GGUF row h·d + 2i + 1.
void ds_hf_row(const ds_hf_tensor *t, int r, float *out) {
    if (t->n_dims == 1) {
        memcpy(out, t->vec, sizeof(float) * (size_t)t->shape[0]);
        return;
    }
    int src = r;
    if (t->perm_heads > 0) {
        const int d = t->w.rows / t->perm_heads, h = r / d, i = r % d, half = d / 2;
        src = h * d + (i < half ? 2 * i : 2 * (i - half) + 1);
    }
    ds_weight_row_f32(&t->w, src, out);
}

cJSON *ds_hf_config(const ds_model *m) {
    const ds_model_info *in = &m->info;
    cJSON *c = cJSON_CreateObject();
    if (!c) return NULL;
    cJSON_AddItemToArray(cJSON_AddArrayToObject(c, "architectures"), cJSON_CreateString("LlamaForCausalLM"));
    cJSON_AddStringToObject(c, "model_type", "llama");
    cJSON_AddNumberToObject(c, "hidden_size", in->dim);
    cJSON_AddNumberToObject(c, "intermediate_size", in->ffn_dim);
    cJSON_AddNumberToObject(c, "num_hidden_layers", in->n_layers);
    cJSON_AddNumberToObject(c, "num_attention_heads", in->n_heads);
    cJSON_AddNumberToObject(c, "num_key_value_heads", in->n_kv_heads);
    cJSON_AddNumberToObject(c, "head_dim", in->head_dim);
    cJSON_AddNumberToObject(c, "vocab_size", in->vocab_size);
    cJSON_AddNumberToObject(c, "max_position_embeddings", in->max_ctx);
    cJSON_AddNumberToObject(c, "rms_norm_eps", in->norm_eps);
    cJSON_AddNumberToObject(c, "rope_theta", in->rope_theta);
    cJSON_AddBoolToObject(c, "tie_word_embeddings", tied(m));
    cJSON_AddStringToObject(c, "torch_dtype", "float32");
    cJSON_AddStringToObject(c, "hidden_act", "silu");
    if (in->bos_id >= 0) cJSON_AddNumberToObject(c, "bos_token_id", in->bos_id);
    if (in->eos_id >= 0) cJSON_AddNumberToObject(c, "eos_token_id", in->eos_id);
    cJSON_AddStringToObject(c, "converted_from", "gguf");
    return c;
}

ds_status ds_hf_write_tokenizer(const ds_model *m, const char *dir, int *written) {
    *written = 0;
    const ds_gguf *g = m->backing;
    if (!g || !ds_gguf_find_kv(g, "tokenizer.ggml.model")) return DS_OK;
    char path[4200];
    snprintf(path, sizeof path, "%s/tokenizer.gguf", dir);
    static const char *const keep[] = {"general.architecture", "tokenizer.", NULL};
    ds_status st = ds_gguf_write_metadata(g, keep, path);
    *written = !st;
    return st;
}
