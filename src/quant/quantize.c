// dspark quantize (see quantize.h). Sources are read into a list of named tensors; a policy decides
// per 2-D weight (module) whether and how it is quantized; the writer packs with kernels/affine.c
// (the contract's formulas, ../shared/docs/mlx-affine-quant.md) into a temporary directory that is
// reloaded (smoke test) and then renamed into place.
#include "quant/quantize.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fnmatch.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/status.h"
#include "draft/drafter.h"
#include "io/atomic.h"
#include "io/gguf.h"
#include "io/json.h"
#include "io/safetensors.h"
#include "kernels/half.h"
#include "kernels/matmul.h"
#include "model/hf_export.h"
#include "model/model.h"
#include "model/st_weights.h"
#include "kernels/affine.h"
#include "io/qconfig.h"

ds_quantize_params ds_quantize_default(void) {
    ds_quantize_params p;
    memset(&p, 0, sizeof p);
    p.bits = 4;
    p.group_size = 64;
    return p;
}

#define DS_QUANT_DEFAULT_SHARD ((size_t)5 << 30) // "above ~5 GiB the file is sharded"

// One tensor of the source, as it will be written (name in the output's convention).
typedef struct {
    char *name;
    ds_dtype dtype;      // F32, F16, BF16 (or Q8_0 from GGUF: widened/quantized, never written as is)
    int n_dims;
    int64_t shape[2];    // (rows, cols) or (n)
    const void *data;    // mapped source data, or `owned`
    void *owned;         // data we made (GGUF conversions), freed at the end
} src_tensor;

typedef struct {
    src_tensor *t;
    int n, cap;
    cJSON *config;       // the output config.json (source config + quantization blocks)
    char src_dir[4096];  // directory whose other files are copied ("" = none)
    ds_safetensors *st;  // safetensors source (kept open while writing)
    ds_model *gguf;      // GGUF source (kept open while writing)
    char prefix[32];     // HF target: where the text model's tensors live ("model.", "model.language_model.", ...)
    int n_dropped;       // HF target: tensors the loader never reads (vision tower, projector), not written
} source;

static ds_status add_tensor(source *s, const char *name, ds_dtype dt, int n_dims, const int64_t *shape,
                            const void *data, void *owned) {
    if (s->n == s->cap) {
        int cap = s->cap ? 2 * s->cap : 64;
        src_tensor *t = realloc(s->t, (size_t)cap * sizeof *t);
        if (!t) {
            free(owned);
            return ds_fail(DS_ERR_NOMEM, "out of memory");
        }
        s->t = t;
        s->cap = cap;
    }
    src_tensor *t = &s->t[s->n];
    memset(t, 0, sizeof *t);
    if (!(t->name = strdup(name))) {
        free(owned);
        return ds_fail(DS_ERR_NOMEM, "out of memory");
    }
    t->dtype = dt;
    t->n_dims = n_dims;
    for (int i = 0; i < n_dims && i < 2; i++) t->shape[i] = shape[i];
    t->data = data;
    t->owned = owned;
    s->n++;
    return DS_OK;
}

static void source_free(source *s) {
    for (int i = 0; i < s->n; i++) {
        free(s->t[i].name);
        free(s->t[i].owned);
    }
    free(s->t);
    cJSON_Delete(s->config);
    ds_st_close(s->st);
    ds_model_free(s->gguf);
    memset(s, 0, sizeof *s);
}

static int is_dir(const char *p) {
    struct stat sb;
    return stat(p, &sb) == 0 && S_ISDIR(sb.st_mode);
}

static const char *arch0(const cJSON *cfg) {
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(cfg, "architectures");
    const cJSON *a0 = cJSON_IsArray(a) ? cJSON_GetArrayItem(a, 0) : NULL;
    return cJSON_IsString(a0) ? a0->valuestring : "";
}

static int is_drafter_arch(const char *a) { return !strcmp(a, "Qwen3DSparkModel") || !strcmp(a, "Gemma4DSparkModel"); }
// The Hugging Face architectures model/load_hf.c runs (*ForConditionalGeneration: its text part).
static int is_target_arch(const char *a) {
    static const char *const known[] = {"LlamaForCausalLM",  "MistralForCausalLM", "Qwen2ForCausalLM",
                                        "Qwen3ForCausalLM",  "Gemma3ForCausalLM",  "Gemma3ForConditionalGeneration",
                                        "Gemma4ForCausalLM", "Gemma4ForConditionalGeneration"};
    for (size_t i = 0; i < sizeof known / sizeof *known; i++)
        if (!strcmp(a, known[i])) return 1;
    return 0;
}

// HF target: the text model's tensor prefix (as load_hf.c finds it: where embed_tokens lives).
static const char *text_prefix(const ds_safetensors *st) {
    static const char *const prefixes[] = {"model.", "model.language_model.", "language_model.model."};
    char name[128];
    for (size_t i = 0; i < sizeof prefixes / sizeof *prefixes; i++) {
        snprintf(name, sizeof name, "%sembed_tokens.weight", prefixes[i]);
        if (ds_st_find(st, name)) return prefixes[i];
    }
    return "model.";
}

// HF target: whether the loader reads this tensor (the text model and its lm_head). The others (a
// vision tower, a multimodal projector) are dropped: the output is a text-only directory, which the
// loader runs from the same config.json.
static int text_tensor(const char *prefix, const char *name) {
    return !strncmp(name, prefix, strlen(prefix)) || !strcmp(name, "lm_head.weight") ||
           !strcmp(name, "language_model.lm_head.weight");
}

// A safetensors directory (drafter or HF target).
static ds_status open_st_dir(source *s, const char *src, const ds_quantize_params *p) {
    char path[4200];
    snprintf(path, sizeof path, "%s/config.json", src);
    ds_status st = ds_json_load(path, 1 << 20, &s->config);
    if (st) return st;
    const char *a = arch0(s->config);
    if (!p->target && !is_drafter_arch(a))
        return ds_fail(DS_ERR_UNSUPPORTED,
                       "%s: architectures[0] '%s' is not a DeepSpec drafter (Qwen3DSparkModel or Gemma4DSparkModel); "
                       "to quantize a target model use --target",
                       path, a);
    if (p->target && is_drafter_arch(a))
        return ds_fail(DS_ERR_UNSUPPORTED, "%s: this is a DeepSpec drafter (%s); quantize it with --drafter", path, a);
    const cJSON *tc = cJSON_GetObjectItemCaseSensitive(s->config, "text_config");
    if (p->target && (!strcmp(a, "Qwen2MoeForCausalLM") || !strcmp(a, "Qwen3MoeForCausalLM") ||
                      cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(s->config, "enable_moe_block")) ||
                      cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(tc, "enable_moe_block"))))
        return ds_fail(DS_ERR_UNSUPPORTED, "%s: '%s' is a mixture-of-experts target; quantize --target does not "
                       "handle its experts yet (run it in bf16, or from an mlx-lm quantized checkpoint)", path, a);
    if (p->target && !is_target_arch(a))
        return ds_fail(DS_ERR_UNSUPPORTED,
                       "%s: architecture '%s' is not a target dspark runs (Llama, Mistral, Qwen2, Qwen3, Gemma3, "
                       "Gemma4 *ForCausalLM, Gemma3/Gemma4ForConditionalGeneration)",
                       path, a);
    if (cJSON_GetObjectItemCaseSensitive(s->config, "quantization") ||
        cJSON_GetObjectItemCaseSensitive(s->config, "quantization_config"))
        return ds_fail(DS_ERR_INVALID, "%s: the source is already quantized (config.json has a quantization block)",
                       path);
    if ((st = ds_st_open(src, &s->st))) return st;
    if (p->target) snprintf(s->prefix, sizeof s->prefix, "%s", text_prefix(s->st));
    for (int i = 0; i < ds_st_count(s->st); i++) {
        const ds_st_tensor *t = ds_st_at(s->st, i);
        const size_t n = strlen(t->name);
        if (p->target && !text_tensor(s->prefix, t->name)) {
            s->n_dropped++;
            continue;
        }
        if (t->dtype == DS_U32 || (n > 7 && !strcmp(t->name + n - 7, ".scales")))
            return ds_fail(DS_ERR_INVALID, "%s: the source is already quantized (tensor '%s')", src, t->name);
        if (t->dtype != DS_F32 && t->dtype != DS_F16 && t->dtype != DS_BF16)
            return ds_fail(DS_ERR_UNSUPPORTED, "%s: tensor '%s' has dtype %s (F32, F16, BF16 supported)", src, t->name,
                           ds_dtype_name(t->dtype));
        if (t->n_dims > 2)
            return ds_fail(DS_ERR_UNSUPPORTED, "%s: tensor '%s' has %d dimensions (at most 2 supported)", src, t->name,
                           t->n_dims);
        if ((st = add_tensor(s, t->name, t->dtype, t->n_dims, t->shape, t->data, NULL))) return st;
    }
    snprintf(s->src_dir, sizeof s->src_dir, "%s", src);
    return DS_OK;
}

// A tensor of the GGUF model's Hugging Face view (model/hf_export.h: Q/K rows un-permuted) as a
// new f32 tensor.
static ds_status add_hf_tensor(source *s, const ds_hf_tensor *t) {
    const size_t rows = t->n_dims == 2 ? (size_t)t->shape[0] : 1, cols = (size_t)t->shape[t->n_dims - 1];
    float *f = malloc(rows * cols * sizeof(float));
    if (!f) return ds_fail(DS_ERR_NOMEM, "out of memory");
    for (size_t r = 0; r < rows; r++) ds_hf_row(t, (int)r, f + r * cols);
    return add_tensor(s, t->name, DS_F32, t->n_dims, t->shape, f, f);
}

// A GGUF target, converted to a Hugging Face Llama directory (halves RoPE order, F32 full-precision
// tensors; Q8_0 sources are dequantized first). The tokenizer travels as tokenizer.gguf (the
// source's tokenizer.* metadata, no tensors), which the HF loader reads.
static ds_status open_gguf(source *s, const char *src) {
    ds_model_params mp = {0};
    ds_status st = ds_model_load(src, &mp, &s->gguf);
    if (st || (st = ds_hf_export_check(s->gguf, src))) return st;
    for (int i = 0; i < ds_hf_count(s->gguf); i++) {
        ds_hf_tensor t;
        ds_hf_at(s->gguf, i, &t);
        if ((st = add_hf_tensor(s, &t))) return st;
    }
    if (!(s->config = ds_hf_config(s->gguf))) return ds_fail(DS_ERR_NOMEM, "out of memory");
    return DS_OK;
}

// ---- policy ---------------------------------------------------------------------------------------

static int matches(const char *const *pats, int n, const char *module) {
    for (int i = 0; i < n; i++)
        if (fnmatch(pats[i], module, 0) == 0) return i;
    return -1;
}

// Decide for tensor t: returns 1 and bits/gs when quantized; 0 otherwise (*record: write `false`
// into the config for this module, i.e. a 2-D weight deliberately left in full precision).
static int plan(const src_tensor *t, const ds_quantize_params *p, char *module, size_t cap, int *bits, int *gs,
                int *record) {
    *record = 0;
    if (t->n_dims != 2 || !ds_st_module_of(t->name, module, cap)) return 0; // 1-D tensors: never
    *record = 1;
    if (!p->target && !strncmp(module, "confidence_head.", 16)) return 0; // policy: full precision
    if (matches(p->keep, p->n_keep, module) >= 0) return 0;
    *bits = p->bits;
    *gs = p->group_size;
    const int o = matches(p->override, p->n_override, module);
    if (o >= 0) {
        *bits = p->override_bits[o];
        *gs = p->override_group[o];
    }
    if (t->shape[1] % *gs) return 0; // not shape-eligible
    return 1;
}

// ---- writing --------------------------------------------------------------------------------------

static ds_status copy_file(const char *from, const char *to) {
    FILE *in = fopen(from, "rb"), *out = in ? fopen(to, "wb") : NULL;
    ds_status st = DS_OK;
    if (!in || !out) st = ds_fail(DS_ERR_IO, "%s: cannot copy: %s", in ? to : from, strerror(errno));
    char buf[1 << 16];
    size_t k;
    while (!st && (k = fread(buf, 1, sizeof buf, in)) > 0)
        if (fwrite(buf, 1, k, out) != k) st = ds_fail(DS_ERR_IO, "%s: write failed", to);
    if (in) fclose(in);
    if (out && fclose(out) != 0 && !st) st = ds_fail(DS_ERR_IO, "%s: write failed", to);
    return st;
}

// Other files of a source directory (tokenizer, generation config, calibration, ...) travel as is.
static ds_status copy_others(const char *src, const char *dst) {
    DIR *d = opendir(src);
    if (!d) return DS_OK;
    struct dirent *e;
    ds_status st = DS_OK;
    char a[4400], b[4400];
    while (!st && (e = readdir(d))) {
        const char *n = e->d_name;
        const size_t len = strlen(n);
        if (n[0] == '.' || !strcmp(n, "config.json") || !strcmp(n, "model.safetensors.index.json") ||
            (len > 12 && !strcmp(n + len - 12, ".safetensors")))
            continue;
        snprintf(a, sizeof a, "%s/%s", src, n);
        struct stat sb;
        if (stat(a, &sb) != 0 || !S_ISREG(sb.st_mode)) continue;
        snprintf(b, sizeof b, "%s/%s", dst, n);
        st = copy_file(a, b);
    }
    closedir(d);
    return st;
}


static ds_status interrupted(const ds_quantize_params *p) {
    return p->interrupted && *p->interrupted ? ds_fail(DS_ERR_INTERRUPTED, "interrupted; nothing was written")
                                             : DS_OK;
}

// Convert n floats to `dt` (F32 / F16 / BF16) into a new buffer.
static void *convert(const float *f, size_t n, ds_dtype dt) {
    void *o = malloc(n * (dt == DS_F32 ? 4 : 2) + 1);
    if (!o) return NULL;
    for (size_t i = 0; i < n; i++) {
        if (dt == DS_F32) ((float *)o)[i] = f[i];
        else if (dt == DS_BF16) ((uint16_t *)o)[i] = ds_f32_to_bf16(f[i]);
        else ((uint16_t *)o)[i] = ds_f32_to_f16(f[i]);
    }
    return o;
}

typedef struct {
    void **bufs;
    int n;
} owned_bufs;

static void *keep(owned_bufs *o, void *p) {
    if (p) o->bufs[o->n++] = p;
    return p;
}

// Reload what was written and run one quantized projection against the source numbers: a wrong
// layout fails here, not at serve time.
static ds_status smoke(const source *s, const char *tmp, const ds_quantize_params *p) {
    char want[160];
    snprintf(want, sizeof want, "%s", "fc.weight");
    if (p->target) snprintf(want, sizeof want, "%slayers.0.self_attn.q_proj.weight", s->prefix[0] ? s->prefix : "model.");
    const src_tensor *ref = NULL;
    for (int i = 0; i < s->n; i++)
        if (!strcmp(s->t[i].name, want)) ref = &s->t[i];
    ds_drafter *d = NULL;
    ds_model *m = NULL;
    ds_status st;
    const ds_weight *w;
    if (p->target) {
        ds_model_params mp = {0};
        if ((st = ds_model_load(tmp, &mp, &m))) return ds_fail_prefix(st, "load smoke test");
        w = &m->layers[0].wq;
    } else {
        if ((st = ds_drafter_load(tmp, NULL, &d))) return ds_fail_prefix(st, "load smoke test");
        w = &d->fc;
    }
    if (!ref || ref->n_dims != 2 || w->rows != ref->shape[0] || w->cols != ref->shape[1]) {
        st = ds_fail(DS_ERR_FORMAT, "load smoke test: %s reloads as (%d, %d)", want, w->rows, w->cols);
        goto done;
    }
    const int rows = w->rows, cols = w->cols;
    float *x = malloc(sizeof(float) * (size_t)cols), *y = malloc(sizeof(float) * (size_t)rows);
    float *yr = malloc(sizeof(float) * (size_t)rows), *row = malloc(sizeof(float) * (size_t)cols);
    float *scratch = malloc(sizeof(float) * (ds_matmul_scratch_floats(w) + 1));
    if (!x || !y || !yr || !row || !scratch) {
        st = ds_fail(DS_ERR_NOMEM, "out of memory");
    } else {
        for (int j = 0; j < cols; j++) x[j] = (float)sin(0.37 * j + 0.1);
        ds_matmul(y, x, w, 1, scratch); // output shape: (1, rows)
        const ds_weight src = {ref->dtype, rows, cols, ref->data};
        double num = 0, den = 0;
        for (int r = 0; r < rows; r++) {
            ds_weight_row_f32(&src, r, row);
            double a = 0;
            for (int j = 0; j < cols; j++) a += (double)row[j] * x[j];
            num += (y[r] - a) * (y[r] - a);
            den += a * a;
        }
        // 4-bit groups keep relative errors near 0.1; a wrong layout gives ~1 or more.
        if (!(num <= 0.25 * den + 1e-12))
            st = ds_fail(DS_ERR_FORMAT, "load smoke test: quantized %s gives relative error %.3f (layout broken?)", want,
                         sqrt(num / (den > 0 ? den : 1)));
    }
    free(x);
    free(y);
    free(yr);
    free(row);
    free(scratch);
done:
    ds_drafter_free(d);
    ds_model_free(m);
    return st;
}

static ds_status write_out(source *s, const char *tmp, const ds_quantize_params *p, ds_quantize_stats *stats) {
    ds_st_writer *w = ds_st_writer_new();
    owned_bufs o = {calloc((size_t)s->n * 3 + 1, sizeof(void *)), 0};
    cJSON *q = cJSON_CreateObject();
    ds_status st = !w || !o.bufs || !q ? ds_fail(DS_ERR_NOMEM, "out of memory") : DS_OK;
    if (!st) st = ds_st_writer_set_metadata(w, "format", "mlx");
    if (q) {
        cJSON_AddNumberToObject(q, "group_size", p->group_size);
        cJSON_AddNumberToObject(q, "bits", p->bits);
        cJSON_AddStringToObject(q, "mode", "affine");
    }
    float *f = NULL, *sc = NULL, *bi = NULL;
    for (int i = 0; i < s->n && !st; i++) {
        const src_tensor *t = &s->t[i];
        char module[256], name[300];
        int bits = 0, gs = 0, record;
        const int quant = plan(t, p, module, sizeof module, &bits, &gs, &record);
        if (p->progress) p->progress(p->progress_ctx, "quantize", i, s->n, t->name);
        if ((st = interrupted(p))) break;
        const int64_t rows = t->n_dims == 2 ? t->shape[0] : 1, cols = t->n_dims == 2 ? t->shape[1] : t->shape[0];
        const size_t n = (size_t)rows * (size_t)cols;
        stats->n_tensors++;
        stats->src_bytes += t->dtype == DS_Q8_0 ? n / 32 * 34 : n * ds_dtype_size(t->dtype);
        const ds_dtype out_dt = t->dtype == DS_Q8_0 ? DS_F16 : t->dtype; // Q8_0 only from GGUF (converted to F32)
        if (!quant) {
            if (record && q) cJSON_AddFalseToObject(q, module);
            stats->out_bytes += n * ds_dtype_size(out_dt);
            st = ds_st_writer_add(w, t->name, out_dt, t->n_dims, t->shape, t->data);
            continue;
        }
        if (bits != p->bits || gs != p->group_size) {
            cJSON *e = cJSON_AddObjectToObject(q, module);
            cJSON_AddNumberToObject(e, "bits", bits);
            cJSON_AddNumberToObject(e, "group_size", gs);
        }
        const int64_t G = cols / gs, P = cols * bits / 32;
        uint32_t *packed = keep(&o, malloc((size_t)rows * (size_t)P * 4 + 4));
        f = realloc(f, sizeof(float) * (size_t)cols);
        sc = realloc(sc, sizeof(float) * (size_t)rows * (size_t)G);
        bi = realloc(bi, sizeof(float) * (size_t)rows * (size_t)G);
        if (!packed || !f || !sc || !bi) {
            st = ds_fail(DS_ERR_NOMEM, "out of memory quantizing '%s'", t->name);
            break;
        }
        const ds_weight src = {t->dtype, (int)rows, (int)cols, t->data};
        for (int64_t r = 0; r < rows && !st; r++) {
            ds_weight_row_f32(&src, (int)r, f);
            for (int64_t j = 0; j < cols; j++)
                if (!isfinite(f[j])) {
                    st = ds_fail(DS_ERR_INVALID, "tensor '%s' has a non-finite value at (%lld, %lld)", t->name,
                                 (long long)r, (long long)j);
                    break;
                }
            ds_affine_quantize_row(f, (int)cols, bits, gs, packed + r * P, sc + r * G, bi + r * G);
        }
        if (st) break;
        // scales/biases "stored in the source dtype" (the contract)
        void *scv = keep(&o, convert(sc, (size_t)(rows * G), out_dt));
        void *biv = keep(&o, convert(bi, (size_t)(rows * G), out_dt));
        if (!scv || !biv) {
            st = ds_fail(DS_ERR_NOMEM, "out of memory");
            break;
        }
        const int64_t ps[2] = {rows, P}, ss[2] = {rows, G};
        snprintf(name, sizeof name, "%s.scales", module);
        if (!st) st = ds_st_writer_add(w, name, DS_F32 == out_dt ? DS_F32 : out_dt, 2, ss, scv);
        snprintf(name, sizeof name, "%s.biases", module);
        if (!st) st = ds_st_writer_add(w, name, out_dt, 2, ss, biv);
        if (!st) st = ds_st_writer_add(w, t->name, DS_U32, 2, ps, packed);
        stats->n_quantized++;
        stats->out_bytes += (size_t)(rows * P * 4) + 2 * (size_t)(rows * G) * ds_dtype_size(out_dt);
    }
    free(f);
    free(sc);
    free(bi);
    if (!st && !stats->n_quantized)
        st = ds_fail(DS_ERR_INVALID, "group size %d divides no eligible tensor's input width: nothing to quantize",
                     p->group_size);
    if (!st && p->progress) p->progress(p->progress_ctx, "write", s->n, s->n, tmp);
    if (!st) st = ds_st_writer_write_dir(w, tmp, p->max_shard_bytes ? p->max_shard_bytes : DS_QUANT_DEFAULT_SHARD);
    if (!st) st = interrupted(p);
    if (!st) { // config.json: the source's, with both blocks (mlx-affine-quant.md, "config.json block")
        cJSON_AddItemToObject(s->config, "quantization", q);
        cJSON_AddItemToObject(s->config, "quantization_config", cJSON_Duplicate(q, 1));
        q = NULL;
        char path[4200];
        snprintf(path, sizeof path, "%s/config.json", tmp);
        st = ds_json_save(s->config, path);
        if (!st && s->src_dir[0]) st = copy_others(s->src_dir, tmp);
        int written;
        if (!st && s->gguf) st = ds_hf_write_tokenizer(s->gguf, tmp, &written);
        char idx[4200];
        snprintf(idx, sizeof idx, "%s/model.safetensors.index.json", tmp);
        stats->n_shards = 1;
        if (!access(idx, F_OK)) {
            DIR *d = opendir(tmp);
            struct dirent *e;
            stats->n_shards = 0;
            while (d && (e = readdir(d)))
                if (!strncmp(e->d_name, "model-", 6)) stats->n_shards++;
            if (d) closedir(d);
        }
    }
    cJSON_Delete(q);
    for (int i = 0; i < o.n; i++) free(o.bufs[i]);
    free(o.bufs);
    ds_st_writer_free(w);
    return st;
}

ds_status ds_quantize(const char *src, const char *out_arg, const ds_quantize_params *p, ds_quantize_stats *stats) {
    char out[4096]; // without trailing slashes: OUT.tmp.<pid> must be its sibling
    snprintf(out, sizeof out, "%s", out_arg);
    for (size_t n = strlen(out); n > 1 && out[n - 1] == '/'; n--) out[n - 1] = 0;
    ds_quantize_stats dummy;
    if (!stats) stats = &dummy;
    memset(stats, 0, sizeof *stats);
    if (!ds_affine_supported(p->bits, p->group_size))
        return ds_fail(DS_ERR_INVALID, "bits %d, group size %d: supported are bits 4 or 8 and group size 32 or 64",
                       p->bits, p->group_size);
    for (int i = 0; i < p->n_override; i++)
        if (!ds_affine_supported(p->override_bits[i], p->override_group[i]))
            return ds_fail(DS_ERR_INVALID, "override '%s': bits %d, group size %d are not supported", p->override[i],
                           p->override_bits[i], p->override_group[i]);
    struct stat sb;
    if (lstat(out, &sb) == 0) return ds_fail(DS_ERR_IO, "%s: already exists (refusing to overwrite)", out);
    source s;
    memset(&s, 0, sizeof s);
    ds_status st;
    if (is_dir(src)) {
        st = open_st_dir(&s, src, p);
    } else if (!p->target) {
        st = ds_fail(DS_ERR_UNSUPPORTED, "%s: not a DeepSpec drafter directory; to quantize a target model use --target",
                     src);
    } else {
        st = open_gguf(&s, src);
    }
    if (st) {
        source_free(&s);
        return st;
    }
    stats->n_dropped = s.n_dropped;
    char tmp[4200];
    if ((st = ds_atomic_dir_open(out, tmp, sizeof tmp))) {
        source_free(&s);
        return st;
    }
    st = write_out(&s, tmp, p, stats);
    if (!st && !p->skip_load_smoke) {
        if (p->progress) p->progress(p->progress_ctx, "smoke", 0, 1, tmp);
        st = smoke(&s, tmp, p);
    }
    if (!st) st = interrupted(p);
    if (st) ds_atomic_dir_abort(tmp);
    else st = ds_atomic_dir_commit(tmp, out);
    if (!st && p->progress) p->progress(p->progress_ctx, "done", 1, 1, out);
    source_free(&s);
    return st;
}
