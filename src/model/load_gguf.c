// Load a Llama-family target from GGUF (llama.cpp's conversion): metadata under "llama.*", tensors
// "token_embd", "blk.N.attn_q", ..., "output_norm", "output" (absent = tied to token_embd), and the
// SentencePiece tokenizer under "tokenizer.ggml.*". GGUF `llama` Q/K rows are permuted for the
// interleaved RoPE pairing.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "kernels/ggml_quants.h"
#include "kernels/ops.h"
#include "io/gguf.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

static void gguf_backing_free(void *p) {
    ds_gguf_close(p);
    free(p);
}

// A 2-D GGUF tensor as a weight: ne[0] = cols (contiguous), ne[1] = rows.
static ds_status take_weight(const ds_gguf *g, const char *name, ds_weight *w, int optional) {
    const ds_gguf_tensor *t = ds_gguf_find_tensor(g, name);
    memset(w, 0, sizeof *w);
    if (!t) return optional ? DS_OK : ds_fail(DS_ERR_FORMAT, "%s: missing tensor '%s'", g->map.path, name);
    if (t->n_dims != 2 || t->ne[0] > INT32_MAX || t->ne[1] > INT32_MAX)
        return ds_fail(DS_ERR_FORMAT, "%s: tensor '%s' must be a 2-D matrix", g->map.path, name);
    w->type = t->type;
    w->cols = (int)t->ne[0];
    w->rows = (int)t->ne[1];
    w->data = t->data;
    return DS_OK;
}

// A 1-D GGUF tensor of length n, widened to f32 into the model's owned storage.
static ds_status take_vector(ds_model *m, const ds_gguf *g, const char *name, int n, float **out) {
    const ds_gguf_tensor *t = ds_gguf_find_tensor(g, name);
    if (!t) return ds_fail(DS_ERR_FORMAT, "%s: missing tensor '%s'", g->map.path, name);
    if (t->n_dims != 1 || t->ne[0] != n)
        return ds_fail(DS_ERR_FORMAT, "%s: tensor '%s' has %lld elements, expected %d", g->map.path, name,
                       (long long)t->ne[0], n);
    if (ds_ggml_block_elems(t->type))
        return ds_fail(DS_ERR_UNSUPPORTED, "%s: vector '%s' is %s (quantized vectors are not read)", g->map.path, name,
                       ds_dtype_name(t->type));
    ds_weight w = {t->type, 1, n, t->data};
    if (!(*out = ds_model_own(m, (size_t)n))) return ds_fail(DS_ERR_NOMEM, "internal: vector storage too small");
    ds_weight_row_f32(&w, 0, *out);
    if (!ds_all_finite(*out, (size_t)n))
        return ds_fail(DS_ERR_FORMAT, "%s: tensor '%s' holds NaN or Inf values", g->map.path, name);
    return DS_OK;
}

// The tokenizer under tokenizer.ggml.* (src/tokenizer/load.c); none, or a kind other than "llama"
// (SentencePiece) and "gpt2" (byte-level BPE), is not an error: the model then runs on token ids.
static ds_status load_tokenizer(ds_model *m, const ds_gguf *g) {
    char model[32] = "";
    if (!ds_gguf_find_kv(g, "tokenizer.ggml.model")) return DS_OK;
    ds_status st = ds_gguf_get_str(g, "tokenizer.ggml.model", model, sizeof model);
    if (st) return st;
    if (strcmp(model, "llama") != 0 && strcmp(model, "gpt2") != 0) return DS_OK;
    if ((st = ds_tokenizer_load_gguf(g, &m->tok))) return st;
    m->info.bos_id = ds_tokenizer_bos(m->tok);
    m->info.eos_id = ds_tokenizer_eos(m->tok);
    m->info.unk_id = ds_tokenizer_unk(m->tok);
    return DS_OK;
}

ds_status ds_model_load_gguf_tokenizer(ds_model *m, const char *path) {
    ds_gguf g;
    ds_status st = ds_gguf_open(&g, path);
    if (st) return st;
    st = load_tokenizer(m, &g); // the tokenizer copies what it keeps
    ds_gguf_close(&g);
    return st;
}

static ds_status read_config(ds_model *m, const ds_gguf *g) {
    ds_model_info *in = &m->info;
    int64_t v;
    double f;
    ds_status st;
    char key[96];
#define GET_INT(field, suffix)                                          \
    snprintf(key, sizeof key, "%s.%s", m->arch, suffix);                \
    if ((st = ds_gguf_get_int(g, key, &v))) return st;                  \
    if (v <= 0 || v > INT32_MAX)                                        \
        return ds_fail(DS_ERR_FORMAT, "%s: %s = %lld is out of range", g->map.path, key, (long long)v); \
    in->field = (int)v;
    GET_INT(dim, "embedding_length")
    GET_INT(n_layers, "block_count")
    GET_INT(ffn_dim, "feed_forward_length")
    GET_INT(n_heads, "attention.head_count")
    GET_INT(max_ctx, "context_length")
#undef GET_INT
    snprintf(key, sizeof key, "%s.attention.head_count_kv", m->arch);
    if ((st = ds_gguf_get_int_or(g, key, in->n_heads, &v))) return st;
    if (v <= 0 || v > in->n_heads)
        return ds_fail(DS_ERR_FORMAT, "%s: %s = %lld is out of range (1..%d)", g->map.path, key, (long long)v, in->n_heads);
    in->n_kv_heads = (int)v;
    if (in->n_heads <= 0 || in->dim % in->n_heads)
        return ds_fail(DS_ERR_FORMAT, "%s: embedding_length %d is not divisible by head_count %d", g->map.path,
                       in->dim, in->n_heads);
    snprintf(key, sizeof key, "%s.attention.key_length", m->arch);
    if ((st = ds_gguf_get_int_or(g, key, in->dim / in->n_heads, &v))) return st;
    if (v <= 0 || v > 4096 || v % 2)
        return ds_fail(DS_ERR_FORMAT, "%s: %s = %lld is out of range (an even 2..4096)", g->map.path, key, (long long)v);
    in->head_dim = (int)v;
    snprintf(key, sizeof key, "%s.attention.layer_norm_rms_epsilon", m->arch);
    if ((st = ds_gguf_get_float_or(g, key, 1e-5, &f))) return st;
    in->norm_eps = (float)f;
    snprintf(key, sizeof key, "%s.rope.freq_base", m->arch);
    if ((st = ds_gguf_get_float_or(g, key, 10000.0, &f))) return st;
    in->rope_theta = (float)f;
    in->rope_layout = DS_ROPE_INTERLEAVED;
    return DS_OK;
}

ds_status ds_model_load_gguf(const char *path, ds_model **out) {
    *out = NULL;
    ds_model *m = ds_calloc(1, sizeof *m);
    ds_gguf *g = ds_calloc(1, sizeof *g);
    ds_status st = DS_ERR_NOMEM;
    if (!m || !g) goto fail;
    m->info.bos_id = m->info.eos_id = m->info.unk_id = -1;
    if ((st = ds_gguf_open(g, path))) goto fail;
    m->backing = g;
    m->backing_free = gguf_backing_free;
    g = NULL;
    const ds_gguf *G = m->backing;
    if ((st = ds_gguf_get_str(G, "general.architecture", m->arch, sizeof m->arch))) goto fail;
    if (strcmp(m->arch, "llama") != 0) {
        st = ds_fail(DS_ERR_UNSUPPORTED, "%s: architecture '%s' is not supported from GGUF (llama is)", path, m->arch);
        goto fail;
    }
    if (ds_gguf_find_kv(G, "general.name")) ds_gguf_get_str(G, "general.name", m->name, sizeof m->name);
    else snprintf(m->name, sizeof m->name, "%s", strrchr(path, '/') ? strrchr(path, '/') + 1 : path);
    if ((st = read_config(m, G))) goto fail;
    ds_model_info *in = &m->info;
    if (in->n_layers > 4096 || in->dim > (1 << 16) || in->head_dim > 4096) {
        st = ds_fail(DS_ERR_FORMAT, "%s: implausible model shape (layers %d, dim %d)", path, in->n_layers, in->dim);
        goto fail;
    }
    m->owned_cap = (size_t)in->n_layers * 2 * in->dim + in->dim + (size_t)in->head_dim;
    m->owned = ds_malloc(m->owned_cap * sizeof(float));
    m->layers = ds_calloc((size_t)in->n_layers, sizeof *m->layers);
    if (!m->owned || !m->layers) {
        st = DS_ERR_NOMEM;
        goto fail;
    }
    if ((st = take_weight(G, "token_embd.weight", &m->tok_embd, 0)) ||
        (st = take_weight(G, "output.weight", &m->output, 1)) ||
        (st = take_vector(m, G, "output_norm.weight", in->dim, &m->out_norm)))
        goto fail;
    if (!m->output.data) m->output = m->tok_embd; // tied embeddings
    in->vocab_size = m->tok_embd.rows;
    for (int l = 0; l < in->n_layers; l++) {
        ds_layer *L = &m->layers[l];
        char name[96];
#define W(field, suffix)                                               \
    snprintf(name, sizeof name, "blk.%d.%s.weight", l, suffix);        \
    if ((st = take_weight(G, name, &L->field, 0))) goto fail;
#define V(field, suffix)                                               \
    snprintf(name, sizeof name, "blk.%d.%s.weight", l, suffix);        \
    if ((st = take_vector(m, G, name, in->dim, &L->field))) goto fail;
        W(wq, "attn_q") W(wk, "attn_k") W(wv, "attn_v") W(wo, "attn_output")
        W(w_gate, "ffn_gate") W(w_up, "ffn_up") W(w_down, "ffn_down")
        V(attn_norm, "attn_norm") V(ffn_norm, "ffn_norm")
#undef W
#undef V
    }
    if ((st = ds_model_finish(m, path)) || (st = load_tokenizer(m, G)) || (st = ds_model_check_ids(m, path))) goto fail;
    if (m->tok && ds_tokenizer_vocab_size(m->tok) != in->vocab_size) {
        st = ds_fail(DS_ERR_FORMAT, "%s: tokenizer has %d tokens but the embedding has %d rows", path,
                     ds_tokenizer_vocab_size(m->tok), in->vocab_size);
        goto fail;
    }
    *out = m;
    return DS_OK;
fail:
    free(g);
    ds_model_free(m);
    return st;
}
