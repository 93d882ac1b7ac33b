// Load a decoder-only target from a Hugging Face directory: config.json + model.safetensors (or
// shards through model.safetensors.index.json), and the stop ids of generation_config.json.
//
// Architectures (config.json "architectures"[0]):
//   LlamaForCausalLM, MistralForCausalLM   "llama": rope_scaling default / linear / llama3, optional
//                                           attention_bias (q/k/v/o), Mistral's sliding_window
//   Qwen2ForCausalLM                        "qwen2": q/k/v biases
//   Qwen3ForCausalLM                        "qwen3": per-head q/k RMSNorm
//   Gemma3ForCausalLM, Gemma3ForConditionalGeneration (text part)   "gemma3"
//   Gemma4ForCausalLM, Gemma4ForConditionalGeneration (text part)   "gemma4" (dense, E-series, 26B-A4B MoE)
//   Qwen2MoeForCausalLM                     "qwen2_moe": q/k/v biases, routed experts + a gated shared expert
//   Qwen3MoeForCausalLM                     "qwen3_moe": per-head q/k RMSNorm, routed experts
// Tensors "<prefix>embed_tokens.weight", "<prefix>layers.N.self_attn.q_proj.weight", ...,
// "<prefix>norm.weight", "lm_head.weight" (absent when tied); prefix "model." ("model.language_model."
// or "language_model.model." for *ForConditionalGeneration). HF Q/K rows use the "halves" RoPE pairing.
//
// Gemma (transformers' modeling_gemma3 / modeling_gemma4 semantics): embeddings × sqrt(hidden_size)
// rounded to the weight dtype; four norms per layer (input, post_attention, pre_feedforward,
// post_feedforward) and q/k norms; GeGLU with tanh GELU; layer_types (or Gemma 3's
// sliding_window_pattern) pick sliding-window or global layers, each type with its own RoPE;
// final_logit_softcapping. Gemma 3: RMSNorm x·(1 + w), scale query_pre_attn_scalar^-0.5, local
// layers RoPE base rope_local_base_freq, global layers rope_theta (+ rope_scaling). Gemma 4: RMSNorm
// x·w, weightless v_norm on every layer, attention scale 1, global layers with global_head_dim and
// (attention_k_eq_v) num_global_key_value_heads and V = the raw k_proj output (no v_proj),
// rope_parameters per layer type (proportional partial RoPE: the first partial_rotary_factor·d/2
// frequencies θ^(-2i/d) rotate, the rest are 0), and layer_scalar multiplying the layer's output.
// Gemma 4 E-series (E2B, E4B): per-layer embeddings (hidden_size_per_layer_input > 0): the packed
// table embed_tokens_per_layer [vocab_size_per_layer_input, layers x ple_dim] scaled by sqrt(ple_dim)
// in its dtype (memory-mapped; only the batch's rows are read), per_layer_model_projection (scale
// hidden_size^-0.5) with per_layer_projection_norm, mixed with the table rows by 2^-0.5; per layer
// per_layer_input_gate, per_layer_projection and post_per_layer_input_norm after the MLP. KV sharing:
// the last num_kv_shared_layers layers have no k/v projections (nor k_norm) and attend over the cache
// of the last unshared layer of their type; with use_double_wide_mlp their MLP is twice as wide.
// *ForConditionalGeneration: only the text model is loaded (vision / audio tower weights are never read).
// Mixture of experts (modeling_qwen2_moe / modeling_qwen3_moe / modeling_gemma4): num_experts,
// num_experts_per_tok (Gemma 4: top_k_experts), moe_intermediate_size, norm_topk_prob (Gemma 4:
// always), decoder_sparse_step / mlp_only_layers (Qwen: layer i is sparse iff i is not listed and
// (i+1) % step == 0; the others keep a dense MLP of intermediate_size). Qwen2-MoE adds
// mlp.shared_expert (shared_expert_intermediate_size) scaled by sigmoid(mlp.shared_expert_gate · x).
// Gemma 4 enable_moe_block: every layer has its dense MLP plus router (proj, scale, per_expert_scale),
// experts and pre_feedforward_layernorm_2 / post_feedforward_layernorm_1 / _2. Expert tensors in
// any of the layouts checkpoints ship: per expert (mlp.experts.E.gate_proj.weight, ...: Hugging Face
// checkpoints), fused 3-D (experts.gate_up_proj [E, 2·I, H] gate rows first, experts.down_proj
// [E, H, I]: transformers >= 5, Gemma 4), stacked 3-D (mlp.switch_mlp.gate_proj.weight [E, I, H]:
// mlx-lm); MLX affine in each (3-D ones quantized along the last axis).
// Refused with a message naming the field: mixture of experts outside these, per-layer input embeddings and KV
// sharing outside Gemma 4, attention logit softcapping, mlp_bias, unknown RoPE types.
#include <cjson/cJSON.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/status.h"
#include "io/json.h"
#include "io/safetensors.h"
#include "kernels/half.h"
#include "model/model.h"
#include "model/st_weights.h"
#include "io/qconfig.h"

enum { FAM_LLAMA, FAM_QWEN2, FAM_QWEN3, FAM_GEMMA3, FAM_GEMMA4 };
enum { MOE_NONE, MOE_QWEN, MOE_GEMMA4 };
enum { ROPE_DEFAULT, ROPE_LINEAR, ROPE_LLAMA3, ROPE_PROPORTIONAL };

typedef struct {
    int type;
    double theta, factor, low, high, orig, partial;
} rope_spec;

typedef struct {
    int fam, tied;
    int attn_bias;              // q/k/v/o biases (attention_bias)
    int qkv_bias;               // q/k/v biases only (Qwen2)
    int qk_norm, v_norm, norm_plus_one, k_eq_v;
    int window;                 // sliding_window of sliding layers (0 = none)
    int global_head_dim, global_kv_heads;
    double attn_scale;          // 0 = head_dim^-0.5
    double final_softcap;
    rope_spec rope_global;      // full-attention layers (all layers without sliding ones)
    rope_spec rope_local;       // sliding-window layers
    unsigned char *sliding;     // (n_layers) 1 = sliding-window layer
    int ple_dim, ple_vocab;     // Gemma 4 per-layer embeddings (hidden_size_per_layer_input; 0 = none)
    int n_kv_shared;            // Gemma 4: the last n_kv_shared layers reuse an earlier layer's KV cache
    int double_wide;            // Gemma 4 use_double_wide_mlp: KV-shared layers have 2 x intermediate_size
    int moe;                    // MOE_NONE, MOE_QWEN (Qwen2/3-MoE) or MOE_GEMMA4 (enable_moe_block)
    int n_experts, top_k, moe_ffn, norm_topk, shared_ffn; // shared_ffn: Qwen2-MoE shared expert width
    unsigned char *sparse;      // (n_layers) 1 = the layer has routed experts
} hf_config;

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

// Whether a config value switches a feature on: true, a nonzero number, a non-empty string/list/object.
static int truthy(const cJSON *v) {
    if (!v || cJSON_IsNull(v) || cJSON_IsFalse(v)) return 0;
    if (cJSON_IsNumber(v)) return v->valuedouble != 0;
    if (cJSON_IsString(v)) return v->valuestring[0] != 0;
    if (cJSON_IsArray(v) || cJSON_IsObject(v)) return cJSON_GetArraySize(v) > 0;
    return 1;
}

// One line naming the first field of `c` that asks for something we do not implement (for family
// `fam`: Gemma 4 has per-layer embeddings and KV sharing).
static ds_status refuse_unsupported(const cJSON *c, const char *path, int fam, int moe_arch) {
    static const struct { const char *field, *what; int gemma4, moe; } fields[] = { // gemma4 / moe: they have it
        {"num_experts", "mixture of experts", 1, 1},
        {"num_local_experts", "mixture of experts"},
        {"n_routed_experts", "mixture of experts"},
        {"enable_moe_block", "mixture of experts", 1},
        {"top_k_experts", "mixture of experts", 1},
        {"shared_expert_intermediate_size", "a shared expert for this architecture"},
        {"hidden_size_per_layer_input", "per-layer input embeddings", 1},
        {"num_kv_shared_layers", "KV sharing across layers", 1},
        {"attn_logit_softcapping", "attention logit softcapping"},
        {"mlp_bias", "MLP biases"},
        {"use_sliding_window", "sliding-window attention for this architecture"},
    };
    for (size_t i = 0; i < sizeof fields / sizeof *fields; i++)
        if (!(fam == FAM_GEMMA4 && fields[i].gemma4) && !(moe_arch && fields[i].moe) &&
            !(moe_arch && fam == FAM_QWEN2 && strcmp(fields[i].field, "shared_expert_intermediate_size") == 0) &&
            truthy(cJSON_GetObjectItemCaseSensitive(c, fields[i].field)))
            return ds_fail(DS_ERR_UNSUPPORTED, "%s: '%s' is set; %s is not supported", path, fields[i].field,
                           fields[i].what);
    const cJSON *bidi = cJSON_GetObjectItemCaseSensitive(c, "use_bidirectional_attention");
    if (cJSON_IsTrue(bidi) || (cJSON_IsString(bidi) && strcmp(bidi->valuestring, "all") == 0))
        return ds_fail(DS_ERR_UNSUPPORTED, "%s: 'use_bidirectional_attention' is set; only causal text attention is supported",
                       path);
    for (const cJSON *it = c->child; it; it = it->next)
        if (it->string && strncmp(it->string, "moe_", 4) == 0 && truthy(it) &&
            !((moe_arch || fam == FAM_GEMMA4) && strcmp(it->string, "moe_intermediate_size") == 0))
            return ds_fail(DS_ERR_UNSUPPORTED, "%s: '%s' is set; mixture of experts is not supported", path, it->string);
    return DS_OK;
}

static ds_status num_or_null(const cJSON *c, const char *path, const char *key, double def, double *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(c, key);
    if (v && cJSON_IsNull(v)) {
        *out = def;
        return DS_OK;
    }
    return ds_json_num(c, path, key, def, out);
}

// A RoPE description: rope_scaling (legacy, theta given) or one rope_parameters entry (which may hold
// its own rope_theta). NULL / null = default RoPE with `theta`.
static ds_status rope_parse(const cJSON *o, const char *path, const char *field, double theta, rope_spec *r) {
    memset(r, 0, sizeof *r);
    r->type = ROPE_DEFAULT;
    r->theta = theta;
    r->factor = 1;
    r->partial = 1;
    if (!o || cJSON_IsNull(o)) return DS_OK;
    if (!cJSON_IsObject(o)) return ds_fail(DS_ERR_FORMAT, "%s: %s must be an object", path, field);
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(o, "rope_type");
    if (!t) t = cJSON_GetObjectItemCaseSensitive(o, "type");
    const char *type = cJSON_IsString(t) ? t->valuestring : "default";
    ds_status st;
    if ((st = num_or_null(o, path, "rope_theta", theta, &r->theta))) return st;
    if (strcmp(type, "default") == 0) {
        if ((st = num_or_null(o, path, "partial_rotary_factor", 1, &r->partial))) return st;
        if (r->partial != 1)
            return ds_fail(DS_ERR_UNSUPPORTED, "%s: %s.partial_rotary_factor with rope_type 'default' is not supported",
                           path, field);
        return DS_OK;
    }
    if (strcmp(type, "linear") == 0) {
        r->type = ROPE_LINEAR;
        if ((st = ds_json_num(o, path, "factor", -1, &r->factor))) return st;
    } else if (strcmp(type, "llama3") == 0) {
        r->type = ROPE_LLAMA3;
        if ((st = ds_json_num(o, path, "factor", -1, &r->factor)) ||
            (st = ds_json_num(o, path, "low_freq_factor", -1, &r->low)) ||
            (st = ds_json_num(o, path, "high_freq_factor", -1, &r->high)) ||
            (st = ds_json_num(o, path, "original_max_position_embeddings", -1, &r->orig)))
            return st;
        if (!(r->high > r->low) || !(r->low > 0) || !(r->orig > 0))
            return ds_fail(DS_ERR_FORMAT, "%s: %s: llama3 needs high_freq_factor > low_freq_factor > 0", path, field);
    } else if (strcmp(type, "proportional") == 0) {
        r->type = ROPE_PROPORTIONAL;
        if ((st = num_or_null(o, path, "factor", 1, &r->factor)) ||
            (st = num_or_null(o, path, "partial_rotary_factor", 1, &r->partial)))
            return st;
        if (!(r->partial > 0 && r->partial <= 1))
            return ds_fail(DS_ERR_FORMAT, "%s: %s.partial_rotary_factor must be in (0, 1]", path, field);
    } else {
        return ds_fail(DS_ERR_UNSUPPORTED,
                       "%s: %s rope_type '%s' is not supported (default, linear, llama3, proportional are)", path,
                       field, type);
    }
    if (!(r->factor > 0)) return ds_fail(DS_ERR_FORMAT, "%s: %s.factor must be positive", path, field);
    if (!(r->theta > 0)) return ds_fail(DS_ERR_FORMAT, "%s: %s rope_theta must be positive", path, field);
    return DS_OK;
}

// inv_freq (head_dim / 2) as transformers' ROPE_INIT_FUNCTIONS compute it.
static void rope_fill(const rope_spec *r, int head_dim, float *out) {
    const int half = head_dim / 2;
    const int rot = r->type == ROPE_PROPORTIONAL ? (int)floor(r->partial * head_dim / 2) : half;
    for (int i = 0; i < half; i++) {
        double f = i < rot ? pow(r->theta, -2.0 * i / head_dim) : 0.0;
        if (r->type == ROPE_LINEAR || r->type == ROPE_PROPORTIONAL) f /= r->factor;
        if (r->type == ROPE_LLAMA3 && f > 0) {
            const double wavelen = 2 * M_PI / f, low_wl = r->orig / r->low, high_wl = r->orig / r->high;
            if (wavelen > low_wl) f /= r->factor;
            else if (wavelen >= high_wl) { // medium band: interpolate
                const double s = (r->orig / wavelen - r->low) / (r->high - r->low);
                f = (1 - s) * f / r->factor + s * f;
            }
        }
        out[i] = (float)f;
    }
}

// The first id, and every id, of an "eos_token_id" (an integer or a list of integers).
// eos_token_id: one id or a list of ids (null or absent: none). Ids are range-checked against the
// vocabulary in ds_model_finish.
static ds_status read_eos(ds_model *m, const cJSON *eos, const char *path) {
    if (!eos || cJSON_IsNull(eos)) return DS_OK;
    const cJSON *one[1] = {eos};
    const int n = cJSON_IsArray(eos) ? cJSON_GetArraySize(eos) : 1;
    const cJSON *e = cJSON_IsArray(eos) ? eos->child : one[0];
    for (int i = 0; i < n && e; i++, e = e->next) {
        if (!ds_json_is_int(e, 0, INT32_MAX))
            return ds_fail(DS_ERR_FORMAT, "%s: eos_token_id must be a token id or a list of token ids", path);
        if (m->info.eos_id < 0) m->info.eos_id = (int)e->valuedouble;
        ds_model_add_stop(m, (int32_t)e->valuedouble);
    }
    return DS_OK;
}

// generation_config.json (optional): its eos_token_id ids stop generation too.
static ds_status read_generation_config(ds_model *m, const char *dir) {
    char path[4096];
    snprintf(path, sizeof path, "%s/generation_config.json", dir);
    FILE *f = fopen(path, "rb");
    if (!f) return DS_OK;
    fclose(f);
    cJSON *g;
    ds_status st = ds_json_load(path, 1 << 20, &g);
    if (st) return st;
    st = read_eos(m, cJSON_GetObjectItemCaseSensitive(g, "eos_token_id"), path);
    cJSON_Delete(g);
    return st;
}

static ds_status read_layer_types(const cJSON *c, const char *path, int n_layers, int fam, hf_config *h) {
    h->sliding = calloc((size_t)n_layers, 1);
    if (!h->sliding) return DS_ERR_NOMEM;
    const cJSON *lt = cJSON_GetObjectItemCaseSensitive(c, "layer_types");
    if (lt && !cJSON_IsNull(lt)) {
        if (!cJSON_IsArray(lt) || cJSON_GetArraySize(lt) != n_layers)
            return ds_fail(DS_ERR_FORMAT, "%s: layer_types must list one type per layer (%d, not %d)", path, n_layers,
                           cJSON_IsArray(lt) ? cJSON_GetArraySize(lt) : 0);
        int i = 0;
        for (const cJSON *e = lt->child; e; e = e->next, i++) {
            const char *s = cJSON_IsString(e) ? e->valuestring : "";
            if (strcmp(s, "sliding_attention") == 0) h->sliding[i] = 1;
            else if (strcmp(s, "full_attention") != 0)
                return ds_fail(DS_ERR_UNSUPPORTED, "%s: layer_types[%d] '%s' is not supported", path, i, s);
        }
    } else if (fam == FAM_GEMMA3) {
        int pattern;
        ds_status st = ds_json_int(c, path, "sliding_window_pattern", 6, 4096, &pattern);
        if (st) return st;
        for (int i = 0; i < n_layers; i++) h->sliding[i] = pattern > 0 && (i + 1) % pattern != 0;
    } else if (fam == FAM_LLAMA && truthy(cJSON_GetObjectItemCaseSensitive(c, "sliding_window"))) {
        for (int i = 0; i < n_layers; i++) h->sliding[i] = 1; // Mistral: every layer
    } else if (fam == FAM_GEMMA4) {
        return ds_fail(DS_ERR_FORMAT, "%s: layer_types is missing", path);
    }
    if (fam == FAM_QWEN2 || fam == FAM_QWEN3)
        for (int i = 0; i < n_layers; i++)
            if (h->sliding[i])
                return ds_fail(DS_ERR_UNSUPPORTED, "%s: layer_types: sliding-window Qwen layers are not supported", path);
    int any = 0;
    for (int i = 0; i < n_layers; i++) any |= h->sliding[i];
    if (any) {
        ds_status st = ds_json_int(c, path, "sliding_window", fam == FAM_GEMMA3 ? 4096 : -1, 1 << 24, &h->window);
        if (st) return st;
        if (h->window <= 0) return ds_fail(DS_ERR_FORMAT, "%s: sliding_window must be positive", path);
    }
    return DS_OK;
}

// The RoPE of each layer type: rope_parameters (per layer type, or one set) when present, else the
// legacy rope_theta + rope_scaling (+ Gemma 3's rope_local_base_freq for sliding layers).
static ds_status read_rope(const cJSON *c, const char *path, int fam, hf_config *h) {
    const cJSON *rp = cJSON_GetObjectItemCaseSensitive(c, "rope_parameters");
    double theta, local_theta;
    ds_status st;
    if ((st = num_or_null(c, path, "rope_theta", fam == FAM_GEMMA3 ? 1e6 : 10000.0, &theta)) ||
        (st = num_or_null(c, path, "rope_local_base_freq", 10000.0, &local_theta)))
        return st;
    if (cJSON_IsObject(rp)) {
        const cJSON *full = cJSON_GetObjectItemCaseSensitive(rp, "full_attention");
        const cJSON *slide = cJSON_GetObjectItemCaseSensitive(rp, "sliding_attention");
        if (full || slide) {
            if ((st = rope_parse(full, path, "rope_parameters.full_attention", theta, &h->rope_global)) ||
                (st = rope_parse(slide, path, "rope_parameters.sliding_attention", local_theta, &h->rope_local)))
                return st;
            return DS_OK;
        }
        if ((st = rope_parse(rp, path, "rope_parameters", theta, &h->rope_global))) return st;
        return rope_parse(NULL, path, "rope_parameters", fam == FAM_GEMMA3 ? local_theta : h->rope_global.theta,
                          &h->rope_local);
    }
    if (fam == FAM_GEMMA4) return ds_fail(DS_ERR_FORMAT, "%s: rope_parameters is missing", path);
    if ((st = rope_parse(cJSON_GetObjectItemCaseSensitive(c, "rope_scaling"), path, "rope_scaling", theta,
                         &h->rope_global)))
        return st;
    if (fam == FAM_GEMMA3) return rope_parse(NULL, path, "rope_local_base_freq", local_theta, &h->rope_local);
    h->rope_local = h->rope_global; // Mistral's sliding layers: the same RoPE
    return DS_OK;
}

// The mixture-of-experts fields (h->moe set): experts, top k, widths, which layers are sparse.
static ds_status read_moe(const cJSON *c, const char *path, int n_layers, hf_config *h) {
    const int q = h->moe == MOE_QWEN;
    ds_status st;
    int step = 1;
    if ((st = ds_json_int(c, path, "num_experts", -1, 4096, &h->n_experts)) ||
        (st = ds_json_int(c, path, q ? "num_experts_per_tok" : "top_k_experts", -1, 4096, &h->top_k)) ||
        (st = ds_json_int(c, path, "moe_intermediate_size", -1, 1 << 20, &h->moe_ffn)))
        return st;
    if (q && ((st = ds_json_bool(c, path, "norm_topk_prob", 0, &h->norm_topk)) ||
              (st = ds_json_int(c, path, "decoder_sparse_step", 1, 4096, &step))))
        return st;
    if (!q) h->norm_topk = 1; // Gemma4TextRouter always renormalizes
    if (h->fam == FAM_QWEN2 && (st = ds_json_int(c, path, "shared_expert_intermediate_size", 0, 1 << 20, &h->shared_ffn)))
        return st;
    if (h->n_experts < 1 || h->top_k < 1 || h->top_k > h->n_experts || h->moe_ffn < 1)
        return ds_fail(DS_ERR_FORMAT, "%s: num_experts %d, %s %d, moe_intermediate_size %d: need 1 <= top k <= experts",
                       path, h->n_experts, q ? "num_experts_per_tok" : "top_k_experts", h->top_k, h->moe_ffn);
    if (step < 1) return ds_fail(DS_ERR_FORMAT, "%s: decoder_sparse_step must be positive", path);
    if (!(h->sparse = calloc((size_t)n_layers, 1))) return DS_ERR_NOMEM;
    for (int i = 0; i < n_layers; i++) h->sparse[i] = q ? (i + 1) % step == 0 : 1;
    const cJSON *only = q ? cJSON_GetObjectItemCaseSensitive(c, "mlp_only_layers") : NULL;
    if (only && !cJSON_IsNull(only)) {
        if (!cJSON_IsArray(only)) return ds_fail(DS_ERR_FORMAT, "%s: mlp_only_layers must be a list of layer indices", path);
        for (const cJSON *e = only->child; e; e = e->next) {
            if (!cJSON_IsNumber(e) || e->valuedouble != (int)e->valuedouble || e->valuedouble < 0 ||
                e->valuedouble >= n_layers)
                return ds_fail(DS_ERR_FORMAT, "%s: mlp_only_layers holds %g, not a layer index below %d", path,
                               cJSON_IsNumber(e) ? e->valuedouble : -1.0, n_layers);
            h->sparse[(int)e->valuedouble] = 0;
        }
    }
    return DS_OK;
}

// The supported architectures (config.json "architectures"[0]).
static const struct {
    const char *hf, *name;
    int fam, multimodal, moe;
} k_archs[] = {
    {"LlamaForCausalLM", "llama", FAM_LLAMA, 0},
    {"Qwen2MoeForCausalLM", "qwen2_moe", FAM_QWEN2, 0, 1},
    {"Qwen3MoeForCausalLM", "qwen3_moe", FAM_QWEN3, 0, 1},
    {"MistralForCausalLM", "llama", FAM_LLAMA, 0},
    {"Qwen2ForCausalLM", "qwen2", FAM_QWEN2, 0},
    {"Qwen3ForCausalLM", "qwen3", FAM_QWEN3, 0},
    {"Gemma3ForCausalLM", "gemma3", FAM_GEMMA3, 0},
    {"Gemma3ForConditionalGeneration", "gemma3", FAM_GEMMA3, 1},
    {"Gemma4ForCausalLM", "gemma4", FAM_GEMMA4, 0},
    {"Gemma4ForConditionalGeneration", "gemma4", FAM_GEMMA4, 1},
};

// The MLP activation: SiLU, or Gemma's tanh GELU.
static ds_status read_activation(ds_model *m, const cJSON *c, const char *path, int gemma) {
    const cJSON *act = cJSON_GetObjectItemCaseSensitive(c, gemma ? "hidden_activation" : "hidden_act");
    if (gemma && (!act || cJSON_IsNull(act))) act = cJSON_GetObjectItemCaseSensitive(c, "hidden_act");
    const char *want = gemma ? "gelu_pytorch_tanh" : "silu";
    if (act && !cJSON_IsNull(act) && (!cJSON_IsString(act) || strcmp(act->valuestring, want) != 0))
        return ds_fail(DS_ERR_UNSUPPORTED, "%s: %s '%s' is not supported (%s is)", path, act->string,
                       cJSON_IsString(act) ? act->valuestring : "?", want);
    m->act = gemma ? DS_ACT_GELU_TANH : DS_ACT_SILU;
    return DS_OK;
}

// The shape, the norm epsilon, tied embeddings, biases, the final softcap (Gemma 3 defaults are
// Gemma3TextConfig's, which its multimodal configs rely on). cfg: the whole config.json, c: the text model's.
static ds_status read_shape(ds_model *m, const cJSON *cfg, const cJSON *c, const char *path, int fam, int multimodal,
                            hf_config *h) {
    ds_model_info *in = &m->info;
    const int gemma = fam == FAM_GEMMA3 || fam == FAM_GEMMA4;
    const int g3 = fam == FAM_GEMMA3;
    ds_status st;
    if ((st = ds_json_int(c, path, "hidden_size", g3 ? 2304 : -1, 1 << 16, &in->dim)) ||
        (st = ds_json_int(c, path, "intermediate_size", g3 ? 9216 : -1, 1 << 20, &in->ffn_dim)) ||
        (st = ds_json_int(c, path, "num_hidden_layers", g3 ? 26 : -1, 4096, &in->n_layers)) ||
        (st = ds_json_int(c, path, "num_attention_heads", g3 ? 8 : -1, 4096, &in->n_heads)) ||
        (st = ds_json_int(c, path, "vocab_size", g3 ? 262208 : -1, 1 << 24, &in->vocab_size)))
        return st;
    if (in->n_heads == 0 || (!gemma && in->dim % in->n_heads))
        return ds_fail(DS_ERR_FORMAT, "%s: hidden_size %d is not divisible by num_attention_heads %d", path, in->dim,
                       in->n_heads);
    double eps;
    if ((st = ds_json_int(c, path, "num_key_value_heads", g3 ? 4 : in->n_heads, 4096, &in->n_kv_heads)) ||
        (st = ds_json_int(c, path, "head_dim", g3 ? 256 : fam == FAM_GEMMA4 ? -1 : in->dim / in->n_heads, 4096,
                          &in->head_dim)) ||
        (st = ds_json_int(c, path, "max_position_embeddings", g3 ? 131072 : 2048, 1 << 24, &in->max_ctx)) ||
        (st = num_or_null(c, path, "rms_norm_eps", 1e-6, &eps)) ||
        (st = ds_json_bool(c, path, "tie_word_embeddings", gemma, &h->tied)) ||
        (st = ds_json_bool(c, path, "attention_bias", 0, &h->attn_bias)) ||
        (st = num_or_null(c, path, "final_logit_softcapping", 0, &h->final_softcap)))
        return st;
    if (multimodal && !cJSON_GetObjectItemCaseSensitive(c, "tie_word_embeddings") &&
        (st = ds_json_bool(cfg, path, "tie_word_embeddings", 1, &h->tied)))
        return st;
    if (in->n_layers > 4096 || in->n_layers <= 0)
        return ds_fail(DS_ERR_FORMAT, "%s: num_hidden_layers %d is implausible", path, in->n_layers);
    in->norm_eps = (float)eps;
    h->qkv_bias = fam == FAM_QWEN2;
    h->qk_norm = fam == FAM_QWEN3 || gemma;
    h->v_norm = fam == FAM_GEMMA4;
    h->norm_plus_one = g3;
    h->global_head_dim = in->head_dim;
    h->global_kv_heads = in->n_kv_heads;
    return DS_OK;
}

// Gemma 3's attention scale; Gemma 4's global layers, per-layer embeddings and KV sharing.
static ds_status read_gemma(const cJSON *c, const char *path, int fam, const ds_model_info *in, hf_config *h) {
    ds_status st;
    if (fam == FAM_GEMMA3) {
        double qpas;
        if ((st = num_or_null(c, path, "query_pre_attn_scalar", 256, &qpas))) return st;
        if (!(qpas > 0)) return ds_fail(DS_ERR_FORMAT, "%s: query_pre_attn_scalar must be positive", path);
        h->attn_scale = pow(qpas, -0.5);
    }
    if (fam != FAM_GEMMA4) return DS_OK;
    h->attn_scale = 1.0; // q/k norms replace the 1/sqrt(d) scale
    if ((st = ds_json_int(c, path, "global_head_dim", in->head_dim, 4096, &h->global_head_dim)) ||
        (st = ds_json_bool(c, path, "attention_k_eq_v", 0, &h->k_eq_v)) ||
        (st = ds_json_int(c, path, "num_global_key_value_heads", in->n_kv_heads, 4096, &h->global_kv_heads)))
        return st;
    if (!h->k_eq_v) h->global_kv_heads = in->n_kv_heads;
    if ((st = ds_json_int(c, path, "hidden_size_per_layer_input", 0, 1 << 16, &h->ple_dim)) ||
        (st = ds_json_int(c, path, "vocab_size_per_layer_input", in->vocab_size, 1 << 24, &h->ple_vocab)) ||
        (st = ds_json_int(c, path, "num_kv_shared_layers", 0, 4096, &h->n_kv_shared)) ||
        (st = ds_json_bool(c, path, "use_double_wide_mlp", 0, &h->double_wide)))
        return st;
    if (h->ple_dim && h->ple_vocab < in->vocab_size)
        return ds_fail(DS_ERR_FORMAT, "%s: vocab_size_per_layer_input %d is smaller than vocab_size %d", path,
                       h->ple_vocab, in->vocab_size);
    if (h->n_kv_shared >= in->n_layers)
        return ds_fail(DS_ERR_FORMAT, "%s: num_kv_shared_layers %d leaves no layer to share from (num_hidden_layers %d)",
                       path, h->n_kv_shared, in->n_layers);
    return DS_OK;
}

// Every KV-shared layer needs an unshared layer of its type before it to read the cache of.
static ds_status check_kv_sharing(const char *path, int n_layers, const hf_config *h) {
    for (int l = n_layers - h->n_kv_shared; l < n_layers; l++) {
        int src = -1;
        for (int j = 0; j < n_layers - h->n_kv_shared; j++)
            if (h->sliding[j] == h->sliding[l]) src = j;
        if (src < 0)
            return ds_fail(DS_ERR_FORMAT, "%s: num_kv_shared_layers %d: shared layer %d (%s) has no unshared %s layer "
                           "before it in layer_types", path, h->n_kv_shared, l, h->sliding[l] ? "sliding_attention" :
                           "full_attention", h->sliding[l] ? "sliding_attention" : "full_attention");
    }
    return DS_OK;
}

// Token ids: every eos_token_id (int or list) stops generation; the first is the EOS id.
static ds_status read_token_ids(ds_model *m, const cJSON *cfg, const cJSON *c, const char *path) {
    ds_status st;
    const cJSON *bos = cJSON_GetObjectItemCaseSensitive(c, "bos_token_id");
    if (!bos) bos = cJSON_GetObjectItemCaseSensitive(cfg, "bos_token_id");
    if (cJSON_IsNumber(bos) && !ds_json_is_int(bos, 0, INT32_MAX)) return ds_fail(DS_ERR_FORMAT, "%s: bos_token_id must be a token id", path);
    m->info.bos_id = cJSON_IsNumber(bos) ? (int)bos->valuedouble : -1;
    if ((st = read_eos(m, cJSON_GetObjectItemCaseSensitive(c, "eos_token_id"), path))) return st;
    if (c != cfg && (st = read_eos(m, cJSON_GetObjectItemCaseSensitive(cfg, "eos_token_id"), path))) return st;
    return DS_OK;
}

// The text model's fields of config.json: those of config.json itself, or of its text_config
// (multimodal checkpoints).
static ds_status read_text_config(ds_model *m, const cJSON *cfg, const char *path, hf_config *h) {
    ds_model_info *in = &m->info;
    const cJSON *archs = cJSON_GetObjectItemCaseSensitive(cfg, "architectures");
    const cJSON *a0 = cJSON_IsArray(archs) ? cJSON_GetArrayItem(archs, 0) : NULL;
    const char *arch = cJSON_IsString(a0) ? a0->valuestring : "";
    int k = -1;
    for (size_t i = 0; i < sizeof k_archs / sizeof *k_archs; i++)
        if (strcmp(arch, k_archs[i].hf) == 0) k = (int)i;
    if (k < 0)
        return ds_fail(DS_ERR_UNSUPPORTED,
                       "%s: architecture '%s' is not supported (Llama, Mistral, Qwen2, Qwen3, Qwen2Moe, Qwen3Moe, "
                       "Gemma3, Gemma4 *ForCausalLM and Gemma3/Gemma4ForConditionalGeneration are)",
                       path, arch);
    snprintf(m->arch, sizeof m->arch, "%s", k_archs[k].name);
    const int fam = h->fam = k_archs[k].fam;
    const cJSON *c = cfg;
    ds_status st;
    if (k_archs[k].multimodal) {
        c = cJSON_GetObjectItemCaseSensitive(cfg, "text_config");
        if (!cJSON_IsObject(c)) return ds_fail(DS_ERR_FORMAT, "%s: %s without a text_config object", path, arch);
        if ((st = refuse_unsupported(cfg, path, fam, 0))) return st;
    }
    if ((st = refuse_unsupported(c, path, fam, k_archs[k].moe)) ||
        (st = read_activation(m, c, path, fam == FAM_GEMMA3 || fam == FAM_GEMMA4)) ||
        (st = read_shape(m, cfg, c, path, fam, k_archs[k].multimodal, h)) || (st = read_gemma(c, path, fam, in, h)))
        return st;
    if (h->final_softcap < 0) return ds_fail(DS_ERR_FORMAT, "%s: final_logit_softcapping must be positive", path);
    if ((st = read_layer_types(c, path, in->n_layers, fam, h)) || (st = read_rope(c, path, fam, h))) return st;
    if (fam == FAM_GEMMA4 && (st = ds_json_bool(c, path, "enable_moe_block", 0, &h->moe))) return st;
    h->moe = k_archs[k].moe ? MOE_QWEN : h->moe ? MOE_GEMMA4 : MOE_NONE;
    if ((h->moe && (st = read_moe(c, path, in->n_layers, h))) || (st = check_kv_sharing(path, in->n_layers, h))) return st;
    in->rope_theta = (float)h->rope_global.theta;
    in->rope_layout = DS_ROPE_HALVES;
    return read_token_ids(m, cfg, c, path);
}

static ds_status read_config(ds_model *m, const char *dir, hf_config *h) {
    char path[4096];
    snprintf(path, sizeof path, "%s/config.json", dir);
    cJSON *cfg;
    ds_status st = ds_json_load(path, 1 << 20, &cfg);
    if (st) return st;
    st = read_text_config(m, cfg, path, h);
    cJSON_Delete(cfg);
    return st;
}

// Where the text model's tensors live inside the checkpoint.
static const char *find_prefix(const ds_safetensors *sf) {
    static const char *prefixes[] = {"model.", "model.language_model.", "language_model.model."};
    char name[128];
    for (size_t i = 0; i < sizeof prefixes / sizeof *prefixes; i++) {
        snprintf(name, sizeof name, "%sembed_tokens.weight", prefixes[i]);
        if (ds_st_find(sf, name)) return prefixes[i];
    }
    return "model.";
}

// s as the embedding module multiplies it: rounded to the table's dtype (quantized: as stored).
static float scale_in_dtype(const ds_weight *w, float s) {
    const ds_dtype et = ds_weight_bits(w) ? w->scale_type : w->type;
    return et == DS_BF16 ? ds_bf16_to_f32(ds_f32_to_bf16(s)) : et == DS_F16 ? ds_f16_to_f32(ds_f32_to_f16(s)) : s;
}

static void add_one(float *w, int n) {
    for (int i = 0; i < n; i++) w[i] += 1.0f;
}

// The experts' matrices of one layer (module path `mp`, e.g. "model.layers.3.mlp.experts") in whichever
// layout the checkpoint uses: fused 3-D gate_up_proj / down_proj, mlx-lm's stacked switch_mlp
// (`sp`), or one module per expert. gate/up/down (n) each.
static ds_status take_experts(const ds_safetensors *sf, const char *dir, const char *mp, const char *sp, int n, int I,
                              int H, const ds_quant_config *qc, ds_weight *gate, ds_weight *up, ds_weight *down) {
    char name[256];
    int found = 0;
    ds_status st;
    snprintf(name, sizeof name, "%s.gate_up_proj", mp);
    if ((st = ds_st_experts_q(sf, dir, name, n, 2 * I, 0, I, H, qc, gate, &found))) return st;
    if (found) {
        if ((st = ds_st_experts_q(sf, dir, name, n, 2 * I, I, I, H, qc, up, &found))) return st;
        snprintf(name, sizeof name, "%s.down_proj", mp);
        if ((st = ds_st_experts_q(sf, dir, name, n, H, 0, H, I, qc, down, &found))) return st;
        return found ? DS_OK : ds_fail(DS_ERR_FORMAT, "%s: missing tensor '%s' (beside %s.gate_up_proj)", dir, name, mp);
    }
    if (sp) {
        static const char *proj[] = {"gate_proj", "up_proj", "down_proj"};
        ds_weight *dst[] = {gate, up, down};
        for (int k = 0; k < 3; k++) {
            snprintf(name, sizeof name, "%s.%s.weight", sp, proj[k]);
            if ((st = ds_st_experts_q(sf, dir, name, n, k == 2 ? H : I, 0, k == 2 ? H : I, k == 2 ? I : H, qc, dst[k],
                                      &found)))
                return st;
            if (!found && k) return ds_fail(DS_ERR_FORMAT, "%s: missing tensor '%s'", dir, name);
            if (!found) break;
        }
        if (found) return DS_OK;
    }
    for (int e = 0; e < n; e++) {
        snprintf(name, sizeof name, "%s.%d.gate_proj.weight", mp, e);
        if ((st = take_weight(sf, dir, name, &gate[e], 0, qc))) return st;
        snprintf(name, sizeof name, "%s.%d.up_proj.weight", mp, e);
        if ((st = take_weight(sf, dir, name, &up[e], 0, qc))) return st;
        snprintf(name, sizeof name, "%s.%d.down_proj.weight", mp, e);
        if ((st = take_weight(sf, dir, name, &down[e], 0, qc))) return st;
    }
    return DS_OK;
}

// Router, experts and (Gemma 4) the extra norms of MoE layer l into E; `ex` holds 3 x n_experts weights.
static ds_status load_moe_layer(ds_model *m, const ds_safetensors *sf, const char *dir, const char *pre, int l,
                                const hf_config *h, const ds_quant_config *qc, ds_moe *E, ds_weight *ex) {
    const int D = m->info.dim, n = h->n_experts;
    char name[200], mp[160], sp[160];
    ds_status st;
    E->n_experts = n;
    E->top_k = h->top_k;
    E->ffn_dim = h->moe_ffn;
    E->norm_topk = h->norm_topk;
    E->gate = ex, E->up = ex + n, E->down = ex + 2 * n;
    if (h->moe == MOE_QWEN) {
        snprintf(name, sizeof name, "%slayers.%d.mlp.gate.weight", pre, l);
        if ((st = take_weight(sf, dir, name, &E->router, 0, qc))) return st;
        if (h->shared_ffn) {
            snprintf(name, sizeof name, "%slayers.%d.mlp.shared_expert_gate.weight", pre, l);
            if ((st = take_weight(sf, dir, name, &E->shared_gate, 0, qc))) return st;
        }
        snprintf(mp, sizeof mp, "%slayers.%d.mlp.experts", pre, l);
        snprintf(sp, sizeof sp, "%slayers.%d.mlp.switch_mlp", pre, l);
        return take_experts(sf, dir, mp, sp, n, h->moe_ffn, D, qc, E->gate, E->up, E->down);
    }
    snprintf(name, sizeof name, "%slayers.%d.router.proj.weight", pre, l);
    if ((st = take_weight(sf, dir, name, &E->router, 0, qc))) return st;
#define V(field, suffix, len)                                                \
    snprintf(name, sizeof name, "%slayers.%d.%s", pre, l, suffix);           \
    if ((st = take_vector(m, sf, dir, name, len, &E->field))) return st;
    V(router_scale, "router.scale", D)
    V(expert_scale, "router.per_expert_scale", n)
    V(pre_norm, "pre_feedforward_layernorm_2.weight", D)
    V(dense_post_norm, "post_feedforward_layernorm_1.weight", D)
    V(post_norm, "post_feedforward_layernorm_2.weight", D)
#undef V
    snprintf(mp, sizeof mp, "%slayers.%d.experts", pre, l);
    snprintf(sp, sizeof sp, "%slayers.%d.experts.switch_glu", pre, l);
    return take_experts(sf, dir, mp, sp, n, h->moe_ffn, D, qc, E->gate, E->up, E->down);
}

// The model's own float storage (norm vectors, RoPE frequencies, ...: sized for the shape), the
// layers and the MoE layers' slots.
static ds_status alloc_storage(ds_model *m, const hf_config *h) {
    const ds_model_info *in = &m->info;
    const size_t mhd = (size_t)(in->head_dim > h->global_head_dim ? in->head_dim : h->global_head_dim);
    const size_t mkv = (size_t)(in->n_kv_heads > h->global_kv_heads ? in->n_kv_heads : h->global_kv_heads);
    m->owned_cap = (size_t)in->n_layers * (7 * (size_t)in->dim + 3 * mhd + (size_t)in->n_heads * mhd + 2 * mkv * mhd + 2) +
                   in->dim + 2 * mhd + (size_t)h->ple_dim + 16 +
                   (h->moe ? (size_t)in->n_layers * (4 * (size_t)in->dim + (size_t)h->n_experts) : 0);
    m->owned = ds_malloc(m->owned_cap * sizeof(float));
    m->layers = ds_calloc((size_t)in->n_layers, sizeof *m->layers);
    if (!m->owned || !m->layers) return DS_ERR_NOMEM;
    if (h->moe) {
        for (int l = 0; l < in->n_layers; l++) m->n_moe += h->sparse[l];
        m->moe = ds_calloc((size_t)m->n_moe + 1, sizeof *m->moe);
        m->experts = ds_calloc((size_t)(m->n_moe + 1) * 3 * h->n_experts, sizeof *m->experts);
        if (!m->moe || !m->experts) return DS_ERR_NOMEM;
    }
    return DS_OK;
}

// The token embeddings, the output projection (or the tied embeddings) and the final norm.
static ds_status load_ends(ds_model *m, const ds_safetensors *sf, const char *dir, const char *pre, const hf_config *h,
                           const ds_quant_config *qc) {
    char name[160];
    ds_status st;
    snprintf(name, sizeof name, "%sembed_tokens.weight", pre);
    if ((st = take_weight(sf, dir, name, &m->tok_embd, 0, qc))) return st;
    if ((st = take_weight(sf, dir, "lm_head.weight", &m->output, 1, qc))) return st;
    if (!m->output.data && (st = take_weight(sf, dir, "language_model.lm_head.weight", &m->output, 1, qc))) return st;
    if (!m->output.data && !h->tied)
        return ds_fail(DS_ERR_FORMAT, "%s: missing tensor 'lm_head.weight' (and tie_word_embeddings is false)", dir);
    snprintf(name, sizeof name, "%snorm.weight", pre);
    if ((st = take_vector(m, sf, dir, name, m->info.dim, &m->out_norm))) return st;
    if (h->norm_plus_one) add_one(m->out_norm, m->info.dim);
    if (!m->output.data) m->output = m->tok_embd;
    return DS_OK;
}

// RoPE sets: 0 = full-attention layers, 1 = sliding-window layers (when there are any).
static ds_status setup_rope(ds_model *m, const hf_config *h) {
    const ds_model_info *in = &m->info;
    int any_sliding = 0, any_full = 0;
    for (int l = 0; l < in->n_layers; l++) any_sliding |= h->sliding[l], any_full |= !h->sliding[l];
    const int full_hd = h->global_head_dim;
    m->n_rope = any_sliding ? 2 : 1;
    m->rope[0].half = full_hd / 2;
    m->rope[0].inv_freq = ds_model_own(m, (size_t)full_hd / 2);
    if (any_sliding) {
        m->rope[1].half = in->head_dim / 2;
        m->rope[1].inv_freq = ds_model_own(m, (size_t)in->head_dim / 2);
    }
    if (!m->rope[0].inv_freq || (any_sliding && !m->rope[1].inv_freq))
        return ds_fail(DS_ERR_NOMEM, "internal: vector storage too small");
    rope_fill(&h->rope_global, full_hd, m->rope[0].inv_freq);
    if (any_sliding) rope_fill(&h->rope_local, in->head_dim, m->rope[1].inv_freq);
    if (!any_full && full_hd != in->head_dim) { // only sliding layers: rope[0] unused, keep it consistent
        m->rope[0] = m->rope[1];
    }
    return DS_OK;
}

// Gemma 4 E-series per-layer embeddings: the packed table, its projection from the hidden state
// and that projection's norm.
static ds_status load_ple(ds_model *m, const ds_safetensors *sf, const char *dir, const char *pre, const hf_config *h,
                          const ds_quant_config *qc) {
    const int pw = m->info.n_layers * h->ple_dim;
    char name[160];
    ds_status st;
    m->ple_dim = h->ple_dim;
    snprintf(name, sizeof name, "%sembed_tokens_per_layer.weight", pre);
    if ((st = take_weight(sf, dir, name, &m->ple_embd, 0, qc))) return st;
    if (m->ple_embd.rows != h->ple_vocab || m->ple_embd.cols != pw)
        return ds_fail(DS_ERR_FORMAT, "%s: tensor '%s' has shape (%d, %d), expected (%d, %d) (vocab_size_per_layer_input, "
                       "num_hidden_layers x hidden_size_per_layer_input)", dir, name, m->ple_embd.rows,
                       m->ple_embd.cols, h->ple_vocab, pw);
    m->ple_embed_scale = scale_in_dtype(&m->ple_embd, sqrtf((float)h->ple_dim));
    snprintf(name, sizeof name, "%sper_layer_model_projection.weight", pre);
    if ((st = take_weight(sf, dir, name, &m->ple_model_proj, 0, qc))) return st;
    snprintf(name, sizeof name, "%sper_layer_projection_norm.weight", pre);
    return take_vector(m, sf, dir, name, h->ple_dim, &m->ple_proj_norm);
}

// Layer l: its attention shape (sliding or global, KV sharing), its tensors, its experts (MoE
// layers take the next of m->moe; *n_moe counts them).
static ds_status load_layer(ds_model *m, const ds_safetensors *sf, const char *dir, const char *pre, int l,
                            const hf_config *h, const ds_quant_config *qc, int *n_moe) {
    const ds_model_info *in = &m->info;
    const int gemma = h->fam == FAM_GEMMA3 || h->fam == FAM_GEMMA4;
    char name[160];
    ds_status st;
    ds_layer *L = &m->layers[l];
    const int sl = h->sliding[l];
    L->head_dim = sl ? in->head_dim : h->global_head_dim;
    L->n_kv_heads = sl ? in->n_kv_heads : h->global_kv_heads;
    L->window = sl ? h->window : 0;
    L->rope = sl ? 1 : 0;
    L->attn_scale = (float)h->attn_scale;
    L->v_norm = h->v_norm;
    const int first_shared = in->n_layers - h->n_kv_shared;
    if (l >= first_shared) { // attends over the last unshared layer of its type (read_config checked it exists)
        L->kv_shared = 1;
        for (int j = 0; j < first_shared; j++)
            if (h->sliding[j] == sl) L->kv_src = j;
        if (h->double_wide) L->ffn_dim = 2 * in->ffn_dim;
    }
    const int hd = L->head_dim, qd = in->n_heads * hd, kvd = L->n_kv_heads * hd;
#define W(field, suffix, optional)                                        \
    snprintf(name, sizeof name, "%slayers.%d.%s.weight", pre, l, suffix); \
    if ((st = take_weight(sf, dir, name, &L->field, optional, qc))) return st;
#define V(field, suffix, n)                                               \
    snprintf(name, sizeof name, "%slayers.%d.%s", pre, l, suffix);        \
    if ((st = take_vector(m, sf, dir, name, n, &L->field))) return st;    \
    if (h->norm_plus_one && strstr(suffix, "norm")) add_one(L->field, n);
    W(wq, "self_attn.q_proj", 0) W(wo, "self_attn.o_proj", 0)
    if (!L->kv_shared) { // (a checkpoint may still carry a shared layer's k/v tensors; they are unused)
        W(wk, "self_attn.k_proj", 0)
        W(wv, "self_attn.v_proj", h->k_eq_v && !sl) // K = V layers have no v_proj
    }
    if (h->moe && h->sparse[l]) {
        if ((st = load_moe_layer(m, sf, dir, pre, l, h, qc, &m->moe[*n_moe], m->experts + (size_t)*n_moe * 3 * h->n_experts)))
            return st;
        L->moe = &m->moe[(*n_moe)++];
    }
    if (h->moe == MOE_QWEN && h->sparse[l]) { // Qwen2-MoE: the shared expert is the layer's dense MLP
        if (h->shared_ffn) {
            L->ffn_dim = h->shared_ffn;
            W(w_gate, "mlp.shared_expert.gate_proj", 0) W(w_up, "mlp.shared_expert.up_proj", 0)
            W(w_down, "mlp.shared_expert.down_proj", 0)
        }
    } else {
        W(w_gate, "mlp.gate_proj", 0) W(w_up, "mlp.up_proj", 0) W(w_down, "mlp.down_proj", 0)
    }
    V(attn_norm, "input_layernorm.weight", in->dim)
    if (gemma) {
        V(attn_post_norm, "post_attention_layernorm.weight", in->dim)
        V(ffn_norm, "pre_feedforward_layernorm.weight", in->dim)
        V(ffn_post_norm, "post_feedforward_layernorm.weight", in->dim)
    } else {
        V(ffn_norm, "post_attention_layernorm.weight", in->dim)
    }
    if (h->qk_norm) {
        V(q_norm, "self_attn.q_norm.weight", hd)
        if (!L->kv_shared) {
            V(k_norm, "self_attn.k_norm.weight", hd)
        }
    }
    if (h->ple_dim) {
        W(ple_gate, "per_layer_input_gate", 0) W(ple_proj, "per_layer_projection", 0)
        V(ple_post_norm, "post_per_layer_input_norm.weight", in->dim)
    }
    if (h->attn_bias || h->qkv_bias) {
        V(bq, "self_attn.q_proj.bias", qd)
        if (!L->kv_shared) {
            V(bk, "self_attn.k_proj.bias", kvd)
        }
        if (L->wv.data) {
            V(bv, "self_attn.v_proj.bias", kvd)
        }
    }
    if (h->attn_bias) {
        V(bo, "self_attn.o_proj.bias", in->dim)
    }
#undef W
#undef V
    if (h->fam == FAM_GEMMA4) { // layer_scalar [1]; absent = 1
        snprintf(name, sizeof name, "%slayers.%d.layer_scalar", pre, l);
        if (ds_st_find(sf, name)) {
            float *s;
            if ((st = take_vector(m, sf, dir, name, 1, &s))) return st;
            L->out_scale = s[0];
            if (!(L->out_scale != 0 && isfinite(L->out_scale)))
                return ds_fail(DS_ERR_FORMAT, "%s: tensor '%s' must be finite and nonzero", dir, name);
        }
    }
    return DS_OK;
}

// The tokenizer, when the directory has one: tokenizer.json + tokenizer_config.json, or a GGUF
// conversion's tokenizer.gguf (dspark quantize --target).
static ds_status load_tokenizer(ds_model *m, const char *dir) {
    char tokjson[4096];
    ds_status st;
    snprintf(tokjson, sizeof tokjson, "%s/tokenizer.json", dir);
    if (access(tokjson, F_OK) == 0 && (st = ds_tokenizer_load(dir, &m->tok))) return st;
    snprintf(tokjson, sizeof tokjson, "%s/tokenizer.gguf", dir);
    if (!m->tok && access(tokjson, R_OK) == 0 && (st = ds_model_load_gguf_tokenizer(m, tokjson))) return st;
    return DS_OK;
}

// config.json (+ generation_config.json) and the quantization config, then the tensors.
static ds_status load_hf(ds_model *m, const char *dir, hf_config *h, ds_quant_config *qc) {
    ds_status st = read_config(m, dir, h);
    if (!st) st = ds_quant_config_load(dir, qc); // MLX affine weights (dspark quantize)
    if (st) return st;
    if ((st = read_generation_config(m, dir))) return st;
    const char *base = strrchr(dir, '/');
    snprintf(m->name, sizeof m->name, "%s", base && base[1] ? base + 1 : dir);
    ds_model_info *in = &m->info;
    if (in->n_layers > 4096 || in->dim > (1 << 16) || in->head_dim > 4096 || h->global_head_dim > 4096 ||
        h->global_head_dim <= 0 || h->global_head_dim % 2 || in->head_dim % 2)
        return ds_fail(DS_ERR_FORMAT, "%s: implausible model shape (layers %d, dim %d, head_dim %d)", dir, in->n_layers,
                       in->dim, in->head_dim);
    ds_safetensors *sf = NULL;
    if ((st = ds_st_open(dir, &sf))) return st;
    m->backing = sf;
    m->backing_free = st_backing_free;
    const char *pre = find_prefix(sf);
    if ((st = alloc_storage(m, h)) || (st = load_ends(m, sf, dir, pre, h, qc)) || (st = setup_rope(m, h))) return st;
    if (h->fam == FAM_GEMMA3 || h->fam == FAM_GEMMA4) m->embed_scale = scale_in_dtype(&m->tok_embd, sqrtf((float)in->dim)); // sqrt(hidden_size)
    if (h->ple_dim && (st = load_ple(m, sf, dir, pre, h, qc))) return st;
    m->final_softcap = (float)h->final_softcap;
    int n_moe = 0;
    for (int l = 0; l < in->n_layers; l++)
        if ((st = load_layer(m, sf, dir, pre, l, h, qc, &n_moe))) return st;
    return load_tokenizer(m, dir);
}

ds_status ds_model_load_hf(const char *dir, ds_model **out) {
    *out = NULL;
    ds_model *m = ds_calloc(1, sizeof *m);
    if (!m) return DS_ERR_NOMEM;
    m->info.bos_id = m->info.eos_id = m->info.unk_id = -1;
    hf_config h;
    memset(&h, 0, sizeof h);
    ds_quant_config qc = {0};
    ds_status st = load_hf(m, dir, &h, &qc);
    free(h.sliding);
    free(h.sparse);
    if (!st) st = ds_model_finish(m, dir);
    ds_quant_config_free(&qc);
    if (st) {
        ds_model_free(m);
        return st;
    }
    *out = m;
    return DS_OK;
}
