// dspark quantize: a DeepSpec drafter or a target (any architecture model/load_hf.c runs) written in MLX's affine format
// (docs/formats/mlx-affine.md): packed U32 weights with per-group scales/biases, both
// config blocks, safetensors metadata {"format": "mlx"}, sharded above a size limit, written
// atomically (a temporary directory renamed into place), then reloaded as a smoke test.
//
// dspark quantize (the API: include/dspark_jobs.h). Sources are listed as named tensors (mapped safetensors data, or
// a GGUF target's Hugging Face view read row by row); a policy decides per 2-D weight or 3-D expert
// stack (module) whether and how it is quantized; every output tensor is declared up front (shapes
// only) and then streamed, a chunk of rows at a time, into the safetensors shards of a temporary
// directory (io/safetensors.h ds_st_writer_stream_dir), packed with kernels/affine.c (the contract's
// formulas, docs/formats/mlx-affine.md §5). Memory is bounded by one chunk, not the model: the
// source pages of each chunk are dropped once read (ds_mapfile_drop; a GGUF tensor's at its end) and
// the output goes through the page cache.
// The directory is reloaded (smoke test) and then renamed into place.
#include "dspark_jobs.h"

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
#include "io/mapfile.h"
#include "io/safetensors.h"
#include "kernels/half.h"
#include "kernels/matmul.h"
#include "model/hf_export.h"
#include "model/model.h"
#include "model/st_weights.h"
#include "kernels/affine.h"
#include "io/qconfig.h"
#include "quant/gguf_export.h"

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
    ds_dtype dtype;      // F32, F16, BF16 (safetensors); F32 for a GGUF tensor (rows widened by ds_hf_row)
    int n_dims;          // 1, 2 or 3 (a stack of experts)
    int64_t shape[3];    // (n), (rows, cols) or (experts, rows, cols)
    const void *data;    // mapped safetensors data; NULL for GGUF (read through `hf`)
    ds_hf_tensor hf;     // GGUF: the HF view's tensor
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
                            const void *data, const ds_hf_tensor *hf) {
    if (s->n == s->cap) {
        int cap = s->cap ? 2 * s->cap : 64;
        src_tensor *t = realloc(s->t, (size_t)cap * sizeof *t);
        if (!t) return ds_fail(DS_ERR_NOMEM, "out of memory");
        s->t = t;
        s->cap = cap;
    }
    src_tensor *t = &s->t[s->n];
    memset(t, 0, sizeof *t);
    if (!(t->name = strdup(name))) return ds_fail(DS_ERR_NOMEM, "out of memory");
    t->dtype = dt;
    t->n_dims = n_dims;
    for (int i = 0; i < n_dims && i < 3; i++) t->shape[i] = shape[i];
    t->data = data;
    if (hf) t->hf = *hf;
    s->n++;
    return DS_OK;
}

// Rows and columns of t seen as a matrix: (1, n), (rows, cols), (experts · rows, cols).
static int64_t n_rows(const src_tensor *t) {
    return t->n_dims == 1 ? 1 : t->n_dims == 2 ? t->shape[0] : t->shape[0] * t->shape[1];
}
static int64_t n_cols(const src_tensor *t) { return t->shape[t->n_dims - 1]; }

// Row r of t (as a matrix) widened to f32.
static void src_row(const src_tensor *t, int64_t r, float *out) {
    if (!t->data) {
        ds_hf_row(&t->hf, (int)r, out);
        return;
    }
    const ds_weight w = {t->dtype, (int)n_rows(t), (int)n_cols(t), t->data};
    ds_weight_row_f32(&w, (int)r, out);
}

// Drop the source pages of rows r0 .. r0+k-1 of a mapped safetensors tensor from the resident set
// once they were read (GGUF tensors: at their end, by src_drop; their rows need not be contiguous).
static void src_drop_rows(const src_tensor *t, int64_t r0, int64_t k) {
    const size_t row_bytes = (size_t)n_cols(t) * ds_dtype_size(t->dtype);
    if (t->data) ds_mapfile_drop((const char *)t->data + (size_t)r0 * row_bytes, (size_t)k * row_bytes);
}

// Drop t's source pages from the resident set once they were read.
static void src_drop(const src_tensor *t) {
    if (t->data) ds_mapfile_drop(t->data, (size_t)(n_rows(t) * n_cols(t)) * ds_dtype_size(t->dtype));
    else if (t->n_dims == 2) ds_mapfile_drop(t->hf.w.data, ds_weight_data_bytes(&t->hf.w));
}

static void source_free(source *s) {
    for (int i = 0; i < s->n; i++) free(s->t[i].name);
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
                                        "Gemma4ForCausalLM", "Gemma4ForConditionalGeneration",
                                        "Qwen2MoeForCausalLM", "Qwen3MoeForCausalLM"};
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
    if (p->target && !is_target_arch(a))
        return ds_fail(DS_ERR_UNSUPPORTED,
                       "%s: architecture '%s' is not a target dspark runs (Llama, Mistral, Qwen2, Qwen3, Gemma3, "
                       "Gemma4 *ForCausalLM, Gemma3/Gemma4ForConditionalGeneration, Qwen2Moe/Qwen3MoeForCausalLM)",
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
        const int max_dims = p->target ? 3 : 2; // targets: 3-D stacks of experts
        if (t->n_dims > max_dims || t->n_dims < 1)
            return ds_fail(DS_ERR_UNSUPPORTED, "%s: tensor '%s' has %d dimensions (%s supported)", src, t->name,
                           t->n_dims, p->target ? "1 to 3, experts stacked in 3-D," : "1 or 2");
        if ((st = add_tensor(s, t->name, t->dtype, t->n_dims, t->shape, t->data, NULL))) return st;
    }
    snprintf(s->src_dir, sizeof s->src_dir, "%s", src);
    return DS_OK;
}

// A GGUF target, converted to a Hugging Face Llama directory (halves RoPE order, F32 full-precision
// tensors; Q8_0 sources are dequantized row by row while writing). The tokenizer travels as tokenizer.gguf (the
// source's tokenizer.* metadata, no tensors), which the HF loader reads.
static ds_status open_gguf(source *s, const char *src) {
    ds_model_params mp = {.no_populate = 1}; // (read once, in bounded memory)
    ds_status st = ds_model_load(src, &mp, &s->gguf);
    if (st || (st = ds_hf_export_check(s->gguf, src))) return st;
    for (int i = 0; i < ds_hf_count(s->gguf); i++) {
        ds_hf_tensor t;
        ds_hf_at(s->gguf, i, &t);
        if ((st = add_tensor(s, t.name, DS_F32, t.n_dims, t.shape, NULL, &t))) return st;
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

static int ends_with(const char *s, const char *suffix) {
    const size_t n = strlen(s), k = strlen(suffix);
    return n >= k && !strcmp(s + n - k, suffix);
}

// A mixture-of-experts router (Qwen mlp.gate and mlp.shared_expert_gate, Gemma 4 router.proj): its
// small matrix decides which experts run, so it gets 8 bits (mlx-lm's quant_predicate for its MoE
// models does the same) unless --keep / --override say otherwise.
static int is_router(const char *module) {
    return ends_with(module, ".mlp.gate") || ends_with(module, ".mlp.shared_expert_gate") ||
           ends_with(module, ".router.proj");
}

// Decide for tensor t: returns 1 and bits/gs when quantized; 0 otherwise (*record: write `false`
// into the config for this module, i.e. a matrix deliberately left in full precision). A module is
// "<module>.weight" of a 2-D or 3-D tensor, or a bare 3-D parameter itself (experts.gate_up_proj).
static int plan(const src_tensor *t, const ds_quantize_params *p, char *module, size_t cap, int *bits, int *gs,
                int *record) {
    *record = 0;
    if (t->n_dims < 2) return 0; // 1-D tensors: never
    if (!ds_st_module_of(t->name, module, cap)) {
        if (t->n_dims != 3 || strlen(t->name) >= cap) return 0;
        snprintf(module, cap, "%s", t->name);
    }
    *record = 1;
    if (!p->target && !strncmp(module, "confidence_head.", 16)) return 0; // policy: full precision
    if (matches(p->keep, p->n_keep, module) >= 0) return 0;
    *bits = p->target && is_router(module) && p->bits < 8 ? 8 : p->bits;
    *gs = p->group_size;
    const int o = matches(p->override, p->n_override, module);
    if (o >= 0) {
        *bits = p->override_bits[o];
        *gs = p->override_group[o];
    }
    if (n_cols(t) % *gs) return 0; // not shape-eligible
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
        if (fwrite(buf, 1, k, out) != k) st = ds_fail(DS_ERR_IO, "%s: write failed: %s", to, strerror(errno));
    if (!st && in && ferror(in)) st = ds_fail(DS_ERR_IO, "%s: read failed", from);
    if (in) fclose(in);
    if (out && fclose(out) != 0 && !st) st = ds_fail(DS_ERR_IO, "%s: write failed: %s", to, strerror(errno));
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

// Convert n floats to `dt` (F32 / F16 / BF16) into `o`.
static void convert(const float *f, size_t n, ds_dtype dt, void *o) {
    for (size_t i = 0; i < n; i++) {
        if (dt == DS_F32) ((float *)o)[i] = f[i];
        else if (dt == DS_BF16) ((uint16_t *)o)[i] = ds_f32_to_bf16(f[i]);
        else ((uint16_t *)o)[i] = ds_f32_to_f16(f[i]);
    }
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
        ds_model_params mp = {.no_populate = 1};
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
        double num = 0, den = 0;
        for (int r = 0; r < rows; r++) {
            src_row(ref, r, row);
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

// What one source tensor becomes: streamed output tensors (io/safetensors.h ids).
typedef struct {
    int quant, bits, gs;
    int id_w, id_s, id_b; // the weight (packed words when quantized); scales, biases (quantized only)
    ds_dtype out_dt;      // the full-precision dtype written: the tensor's, or its scales' and biases'
} out_plan;

typedef struct {
    const source *s;
    const ds_quantize_params *p;
    const out_plan *o;
} fill_ctx;

#define DS_QUANT_CHUNK_BYTES ((size_t)4 << 20) // rows handled (and written) at a time: ~4 MiB of f32

static ds_status grow(void **buf, size_t *cap, size_t n) {
    if (n <= *cap) return DS_OK;
    void *b = realloc(*buf, n);
    if (!b) return ds_fail(DS_ERR_NOMEM, "out of memory");
    *buf = b;
    *cap = n;
    return DS_OK;
}

// The bytes of every output tensor, source tensor by source tensor, a chunk of rows at a time.
static ds_status fill(void *vctx, ds_st_sink *sink) {
    const fill_ctx *c = vctx;
    const source *s = c->s;
    const ds_quantize_params *p = c->p;
    void *f = NULL, *packed = NULL, *sb = NULL, *outs = NULL; // (chunk, cols) f32; words; (2, chunk, G) f32; out dtype
    size_t cap_f = 0, cap_p = 0, cap_sb = 0, cap_o = 0;
    ds_status st = DS_OK;
    for (int i = 0; i < s->n && !st; i++) {
        const src_tensor *t = &s->t[i];
        const out_plan *o = &c->o[i];
        if (p->progress) p->progress(p->progress_ctx, "quantize", i, s->n, t->name);
        if ((st = interrupted(p))) break;
        const int64_t rows = n_rows(t), cols = n_cols(t);
        const size_t es = ds_dtype_size(o->out_dt);
        int64_t chunk = (int64_t)(DS_QUANT_CHUNK_BYTES / ((size_t)cols * 4));
        if (chunk < 1) chunk = 1;
        if (chunk > rows) chunk = rows;
        if (!o->quant && t->data) { // full precision, mapped: as is
            const size_t row_bytes = (size_t)cols * es;
            for (int64_t r = 0; r < rows && !st; r += chunk) {
                const int64_t k = rows - r < chunk ? rows - r : chunk;
                st = ds_st_sink_put(sink, o->id_w, (const char *)t->data + (size_t)r * row_bytes, (size_t)k * row_bytes);
                src_drop_rows(t, r, k);
            }
            src_drop(t);
            continue;
        }
        if ((st = grow(&f, &cap_f, (size_t)chunk * (size_t)cols * 4))) break;
        if (!o->quant) { // full precision from GGUF: f32 rows
            for (int64_t r = 0; r < rows && !st; r += chunk) {
                const int64_t k = rows - r < chunk ? rows - r : chunk;
                for (int64_t j = 0; j < k; j++) src_row(t, r + j, (float *)f + j * cols);
                st = ds_st_sink_put(sink, o->id_w, f, (size_t)k * (size_t)cols * 4);
            }
            src_drop(t);
            continue;
        }
        const int64_t G = cols / o->gs, P = cols * o->bits / 32;
        if ((st = grow(&packed, &cap_p, (size_t)chunk * (size_t)P * 4)) ||
            (st = grow(&sb, &cap_sb, 2 * (size_t)chunk * (size_t)G * 4)) ||
            (st = grow(&outs, &cap_o, 2 * (size_t)chunk * (size_t)G * es)))
            break;
        float *sc = sb, *bi = (float *)sb + chunk * G;
        for (int64_t r = 0; r < rows && !st; r += chunk) {
            const int64_t k = rows - r < chunk ? rows - r : chunk;
            float *row = f;
            for (int64_t j = 0; j < k && !st; j++) {
                src_row(t, r + j, row);
                for (int64_t x = 0; x < cols; x++)
                    if (!isfinite(row[x])) {
                        const long long rr = (long long)(r + j);
                        if (t->n_dims == 3)
                            st = ds_fail(DS_ERR_INVALID, "tensor '%s' has a non-finite value at (%lld, %lld, %lld)",
                                         t->name, rr / t->shape[1], rr % t->shape[1], (long long)x);
                        else
                            st = ds_fail(DS_ERR_INVALID, "tensor '%s' has a non-finite value at (%lld, %lld)", t->name, rr,
                                         (long long)x);
                        break;
                    }
                ds_affine_quantize_row(row, (int)cols, o->bits, o->gs, (uint32_t *)packed + j * P, sc + j * G, bi + j * G);
            }
            if (st) break;
            src_drop_rows(t, r, k);
            // scales/biases "stored in the source dtype" (the contract)
            convert(sc, (size_t)(k * G), o->out_dt, outs);
            convert(bi, (size_t)(k * G), o->out_dt, (char *)outs + (size_t)(k * G) * es);
            if (!(st = ds_st_sink_put(sink, o->id_w, packed, (size_t)(k * P) * 4)) &&
                !(st = ds_st_sink_put(sink, o->id_s, outs, (size_t)(k * G) * es)))
                st = ds_st_sink_put(sink, o->id_b, (char *)outs + (size_t)(k * G) * es, (size_t)(k * G) * es);
        }
        src_drop(t);
    }
    free(f);
    free(packed);
    free(sb);
    free(outs);
    return st;
}

// Declare every output tensor and the config block, then stream the data into `tmp`.
static ds_status write_out(source *s, const char *tmp, const ds_quantize_params *p, ds_quantize_stats *stats) {
    ds_st_writer *w = ds_st_writer_new();
    out_plan *o = calloc((size_t)s->n + 1, sizeof *o);
    cJSON *q = cJSON_CreateObject();
    ds_status st = !w || !o || !q ? ds_fail(DS_ERR_NOMEM, "out of memory") : DS_OK;
    if (!st) st = ds_st_writer_set_metadata(w, "format", "mlx");
    if (q) {
        cJSON_AddNumberToObject(q, "group_size", p->group_size);
        cJSON_AddNumberToObject(q, "bits", p->bits);
        cJSON_AddStringToObject(q, "mode", "affine");
    }
    for (int i = 0; i < s->n && !st; i++) {
        const src_tensor *t = &s->t[i];
        char module[256], name[300];
        int record;
        o[i].quant = plan(t, p, module, sizeof module, &o[i].bits, &o[i].gs, &record);
        const int64_t rows = n_rows(t), cols = n_cols(t);
        const size_t n = (size_t)rows * (size_t)cols;
        stats->n_tensors++;
        stats->src_bytes += n * ds_dtype_size(t->dtype);
        o[i].out_dt = t->dtype;
        if (!o[i].quant) {
            if (record) cJSON_AddFalseToObject(q, module);
            stats->out_bytes += n * ds_dtype_size(o[i].out_dt);
            st = ds_st_writer_add_stream(w, t->name, o[i].out_dt, t->n_dims, t->shape, &o[i].id_w);
            continue;
        }
        if (o[i].bits != p->bits || o[i].gs != p->group_size) {
            cJSON *e = cJSON_AddObjectToObject(q, module);
            cJSON_AddNumberToObject(e, "bits", o[i].bits);
            cJSON_AddNumberToObject(e, "group_size", o[i].gs);
        }
        const int64_t G = cols / o[i].gs, P = cols * o[i].bits / 32;
        int64_t ps[3], ss[3]; // the source's shape with the last dimension packed / grouped
        for (int d = 0; d < t->n_dims; d++) ps[d] = ss[d] = t->shape[d];
        ps[t->n_dims - 1] = P;
        ss[t->n_dims - 1] = G;
        snprintf(name, sizeof name, "%s.scales", module);
        st = ds_st_writer_add_stream(w, name, o[i].out_dt, t->n_dims, ss, &o[i].id_s);
        snprintf(name, sizeof name, "%s.biases", module);
        if (!st) st = ds_st_writer_add_stream(w, name, o[i].out_dt, t->n_dims, ss, &o[i].id_b);
        if (!st) st = ds_st_writer_add_stream(w, t->name, DS_U32, t->n_dims, ps, &o[i].id_w);
        stats->n_quantized++;
        stats->out_bytes += (size_t)(rows * P * 4) + 2 * (size_t)(rows * G) * ds_dtype_size(o[i].out_dt);
    }
    if (!st && !stats->n_quantized)
        st = ds_fail(DS_ERR_INVALID, "group size %d divides no eligible tensor's input width: nothing to quantize",
                     p->group_size);
    fill_ctx ctx = {s, p, o};
    if (!st)
        st = ds_st_writer_stream_dir(w, tmp, p->max_shard_bytes ? p->max_shard_bytes : DS_QUANT_DEFAULT_SHARD, fill, &ctx);
    if (!st && p->progress) p->progress(p->progress_ctx, "write", s->n, s->n, tmp);
    if (!st) st = interrupted(p);
    if (!st) { // config.json: the source's, with both blocks (docs/formats/mlx-affine.md §4)
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
    free(o);
    ds_st_writer_free(w);
    return st;
}

// --gguf TYPE: load the target (any loader) and write it as one GGUF file (quant/gguf_export.c).
static ds_status quantize_gguf(const char *src, const char *out, const ds_quantize_params *p, ds_quantize_stats *stats) {
    const ds_gguf_preset *preset = ds_gguf_preset_find(p->gguf_type);
    if (!preset)
        return ds_fail(DS_ERR_INVALID, "GGUF type '%s' is not supported (%s)", p->gguf_type, ds_gguf_preset_names());
    ds_status st = ds_gguf_writer_check(out); // before the (possibly long) load
    if (st) return st;
    ds_model *m = NULL;
    const ds_model_params mp = {.n_threads = ds_threads(), .no_populate = 1}; // (read once)
    if ((st = ds_model_load(src, &mp, &m))) return st;
    ds_gguf_export_params ep = {preset, src, p->skip_load_smoke, p->interrupted, p->progress, p->progress_ctx};
    st = ds_gguf_export(m, out, &ep, stats);
    ds_model_free(m);
    return st;
}

ds_status ds_quantize_run(const char *src, const char *out_arg, const ds_quantize_params *p, ds_quantize_stats *stats) {
    char out[4096]; // without trailing slashes: OUT.tmp.<pid> must be its sibling
    snprintf(out, sizeof out, "%s", out_arg);
    for (size_t n = strlen(out); n > 1 && out[n - 1] == '/'; n--) out[n - 1] = 0;
    ds_quantize_stats dummy;
    if (!stats) stats = &dummy;
    memset(stats, 0, sizeof *stats);
    if (p->gguf_type) return quantize_gguf(src, out, p, stats);
    if (!ds_affine_supported(p->bits, p->group_size))
        return ds_fail(DS_ERR_INVALID, "bits %d, group size %d: supported are bits 4 or 8 and group size 32 or 64",
                       p->bits, p->group_size);
    for (int i = 0; i < p->n_override; i++)
        if (!ds_affine_supported(p->override_bits[i], p->override_group[i]))
            return ds_fail(DS_ERR_INVALID, "override '%s': bits %d, group size %d are not supported", p->override[i],
                           p->override_bits[i], p->override_group[i]);
    ds_status st0 = ds_atomic_dir_check(out); // nothing there, or a dspark output (replaced at the end)
    if (st0) return st0;
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
