// Shared by the benchmarks (each bench/*.c is its own executable): the clock, medians, a
// deterministic random stream, memory read bandwidth, a synthetic Hugging Face model writer and
// greedy decode timing. Static inline, as tests/tools/tool_util.h: each bench takes what it uses.
#ifndef DS_BENCH_UTIL_H
#define DS_BENCH_UTIL_H

#include <immintrin.h>
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "dspark.h"
#include "dspark_jobs.h"
#include "io/safetensors.h"
#include "kernels/half.h"
#include "kernels/matmul.h"
#include "train/mpi.h"

// Monotonic seconds.
static inline double bench_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

// qsort comparator for ascending doubles (medians, percentiles).
static inline int bench_cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

// Re-executes the bench with OPENBLAS_CORETYPE set when OpenBLAS needs the hint (see cli/main.c).
static inline void bench_openblas_reexec(char **argv) {
    if (!getenv("OPENBLAS_CORETYPE") && ds_openblas_core_hint()) {
        setenv("OPENBLAS_CORETYPE", ds_openblas_core_hint(), 1);
        execv("/proc/self/exe", argv);
    }
}

// ---- scheduling policies (bench_sched, bench_e2e) -------------------------------------------------

// The policies both scheduling benches compare, by index: 0 none, 1..7 fixed length L, 8 the static
// confidence threshold, 9 auto, 10 none again (the control: its ratio to none is the noise).
#define BENCH_N_POLICIES 11
static inline const char *bench_policy_name(int p, char *buf) {
    if (p == 0) return "none";
    if (p == 10) return "none_control";
    if (p <= 7) return snprintf(buf, 16, "fixed%d", p), buf;
    return p == 8 ? "threshold" : "auto";
}

// ---- deterministic random stream (xorshift64, one per executable) ---------------------------------

static uint64_t bench_rng_state = 0x9e3779b97f4a7c15ULL;

// Uniform in [-1, 1).
static inline float bench_frand(void) {
    bench_rng_state ^= bench_rng_state << 13;
    bench_rng_state ^= bench_rng_state >> 7;
    bench_rng_state ^= bench_rng_state << 17;
    return (float)((bench_rng_state >> 40) * (1.0 / (1 << 23)) - 1.0);
}

// ---- memory read bandwidth ----------------------------------------------------------------------

__attribute__((target("avx2"))) static inline float bench_sum_avx2(const float *p, size_t n) {
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    for (size_t i = 0; i + 32 <= n; i += 32) {
        a0 = _mm256_add_ps(a0, _mm256_load_ps(p + i));
        a1 = _mm256_add_ps(a1, _mm256_load_ps(p + i + 8));
        a2 = _mm256_add_ps(a2, _mm256_load_ps(p + i + 16));
        a3 = _mm256_add_ps(a3, _mm256_load_ps(p + i + 24));
    }
    __m256 s = _mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3));
    float out[8];
    _mm256_storeu_ps(out, s);
    return out[0] + out[1] + out[2] + out[3] + out[4] + out[5] + out[6] + out[7];
}

// The best of 5 rates (units per second) of `part`, run by `threads` threads at once: part(ctx,
// t, nt) does thread t's share of the units and returns a value that keeps it from being optimized
// away.
static inline double bench_best_rate(int threads, float (*part)(void *, int, int), void *ctx, double units) {
    double best = 0;
    volatile float sink = 0;
    for (int rep = 0; rep < 5; rep++) {
        const double t0 = bench_now();
        float total = 0;
#pragma omp parallel num_threads(threads) reduction(+ : total)
        total += part(ctx, omp_get_thread_num(), omp_get_num_threads());
        sink += total;
        const double rate = units / (bench_now() - t0);
        best = rate > best ? rate : best;
    }
    (void)sink;
    return best;
}

typedef struct {
    const float *buf;
    size_t n;
} bench_read_job;

static inline float bench_read_part(void *ctx, int t, int nt) {
    const bench_read_job *j = ctx;
    const size_t per = j->n / (size_t)nt / 32 * 32;
    return bench_sum_avx2(j->buf + per * (size_t)t, per);
}

// Best-of-5 read bandwidth (bytes/s) over 1 GiB (far beyond the caches), with `threads`.
static inline double bench_read_bandwidth(int threads) {
    const size_t n = (size_t)1 << 28; // 1 GiB of floats
    float *buf = aligned_alloc((size_t)2 << 20, n * sizeof(float));
    if (!buf) return 0;
    madvise(buf, n * sizeof(float), MADV_HUGEPAGE); // (as the loader maps weights: ds_mapfile_populate_huge)
    memset(buf, 0, n * sizeof(float));
    bench_read_job j = {buf, n};
    const double best = bench_best_rate(threads, bench_read_part, &j, (double)n * sizeof(float));
    free(buf);
    return best;
}

// ---- compute peak -------------------------------------------------------------------------------

// Best-of-5 f32 multiply-adds per second with `threads`: 16 independent AVX-512 FMA chains per
// thread (enough to cover the latency of two FMA ports), or AVX2 where AVX-512 is absent. The
// roofline's compute side for the kernels, which are f32 FMA after widening.
// One function per instruction set: 16 chains of `iters` FMAs each; returns a sum (keeps them live).
#define BENCH_FMA_LOOP(NAME, TARGET, VEC, SET1, FMADD, ADD, LANES)                                  \
    __attribute__((target(TARGET))) static inline float NAME(long iters) {                           \
        VEC a[16];                                                                                   \
        const VEC m = SET1(0.999999f), c = SET1(1e-7f);                                              \
        for (int i = 0; i < 16; i++) a[i] = SET1((float)i);                                          \
        for (long k = 0; k < iters; k++)                                                             \
            for (int i = 0; i < 16; i++) a[i] = FMADD(a[i], m, c);                                   \
        VEC s = a[0];                                                                                \
        for (int i = 1; i < 16; i++) s = ADD(s, a[i]);                                               \
        float out[LANES];                                                                            \
        memcpy(out, &s, sizeof out);                                                                 \
        return out[0] + out[LANES - 1];                                                              \
    }
BENCH_FMA_LOOP(bench_fma_avx512, "avx512f", __m512, _mm512_set1_ps, _mm512_fmadd_ps, _mm512_add_ps, 16)
BENCH_FMA_LOOP(bench_fma_avx2, "avx2,fma", __m256, _mm256_set1_ps, _mm256_fmadd_ps, _mm256_add_ps, 8)
#undef BENCH_FMA_LOOP

static inline float bench_fma_part(void *ctx, int t, int nt) {
    (void)t, (void)nt;
    const long iters = *(const long *)ctx;
    return __builtin_cpu_supports("avx512f") ? bench_fma_avx512(iters) : bench_fma_avx2(iters);
}

static inline double bench_fma_peak(int threads) {
    __builtin_cpu_init();
    long iters = 1L << 22; // 2^22 x 16 FMAs per thread: ~20-50 ms
    const double lanes = __builtin_cpu_supports("avx512f") ? 16 : 8;
    return bench_best_rate(threads, bench_fma_part, &iters, (double)threads * (double)iters * 16.0 * lanes);
}

// ---- synthetic model ----------------------------------------------------------------------------

typedef struct {
    int dim, layers, ffn, heads, kv_heads, vocab;
    ds_dtype dtype;
    int head_dim;   // 0 = dim / heads
    int qwen3;      // Qwen3ForCausalLM: per-head q/k norms, tied embeddings
    const char *rms_eps; // as config.json spells it; NULL = "1e-6"
    // > 0: a Gemma 4 E-series model (Gemma4ForCausalLM) instead: per-layer embeddings of this
    // width, layer types 5 sliding (window 512, head_dim) : 1 full (2 x head_dim, proportional
    // RoPE 0.25), the last layer full, the last 3/7 of the layers KV-shared (E4B: 18 of 42),
    // tied embeddings, final softcap 30.
    int ple_dim;
} bench_shape;

// The shape options both synthetic-model benches take: --dim --layers --ffn --heads --kv-heads
// --vocab. Returns 1 when `o` is one of them (value `v` taken), else 0.
static inline int bench_shape_option(const char *o, const char *v, bench_shape *s) {
    if (!strcmp(o, "--dim")) s->dim = atoi(v);
    else if (!strcmp(o, "--layers")) s->layers = atoi(v);
    else if (!strcmp(o, "--ffn")) s->ffn = atoi(v);
    else if (!strcmp(o, "--heads")) s->heads = atoi(v);
    else if (!strcmp(o, "--kv-heads")) s->kv_heads = atoi(v);
    else if (!strcmp(o, "--vocab")) s->vocab = atoi(v);
    else return 0;
    return 1;
}

// The model options of the decode benches: --model PATH, --synthetic DIR, --dtype f32|bf16,
// --head-dim, --preset qwen3-0.6b|qwen3-4b (Qwen3 shapes, bf16: see bench_decode.c) and the shape
// options above. Returns 1 when `o` is one of them (value `v` taken), else 0.
static inline int bench_model_option(const char *o, const char *v, bench_shape *s, const char **model,
                                     const char **synth) {
    if (bench_shape_option(o, v, s)) return 1;
    if (!strcmp(o, "--model")) *model = v;
    else if (!strcmp(o, "--synthetic")) *synth = v;
    else if (!strcmp(o, "--dtype")) s->dtype = !strcmp(v, "bf16") ? DS_BF16 : DS_F32;
    else if (!strcmp(o, "--head-dim")) s->head_dim = atoi(v);
    else if (!strcmp(o, "--preset") && !strcmp(v, "qwen3-0.6b"))
        *s = (bench_shape){1024, 28, 3072, 16, 8, 151936, DS_BF16, 128, 1, NULL};
    else if (!strcmp(o, "--preset") && !strcmp(v, "qwen3-4b"))
        *s = (bench_shape){2560, 36, 9728, 32, 8, 151936, DS_BF16, 128, 1, NULL};
    else if (!strcmp(o, "--preset") && !strcmp(v, "gemma4-e4b"))
        *s = (bench_shape){2560, 42, 10240, 8, 2, 262144, DS_BF16, 256, 0, NULL, 256};
    else return 0;
    return 1;
}

// (rows, cols) uniform in [-scale, scale) from bench_frand, as f32 or bf16; NULL when out of memory.
static inline void *bench_random_matrix(int rows, int cols, ds_dtype t, float scale) {
    const size_t n = (size_t)rows * cols;
    void *p = malloc(n * (t == DS_F32 ? 4 : 2));
    if (!p) return NULL;
    for (size_t i = 0; i < n; i++) {
        const float v = bench_frand() * scale;
        if (t == DS_F32) ((float *)p)[i] = v;
        else ((uint16_t *)p)[i] = ds_f32_to_bf16(v);
    }
    return p;
}

static inline int bench_make_synthetic_gemma4e(const char *dir, const bench_shape *s);

// Writes a random-weight Llama (or Qwen3, or Gemma 4 E-series) of shape `s` as a Hugging Face
// directory, unless `dir` already holds a config.json. Weights (1/sqrt(cols)-scaled, norms 1) come from bench_frand in
// tensor order, so a given stream position gives the same bytes. Returns 0, or 1 with a message.
static inline int bench_make_synthetic(const char *dir, const bench_shape *s) {
    char path[4096];
    snprintf(path, sizeof path, "%s/config.json", dir);
    struct stat st;
    if (stat(path, &st) == 0) return 0; // already there
    if (s->ple_dim) return bench_make_synthetic_gemma4e(dir, s);
    fprintf(stderr, "bench: writing a synthetic %s %s (dim %d, %d layers) to %s\n", ds_dtype_name(s->dtype),
            s->qwen3 ? "Qwen3" : "Llama", s->dim, s->layers, dir);
    mkdir(dir, 0755);
    ds_st_writer *w = ds_st_writer_new();
    void **owned = calloc((size_t)s->layers * 11 + 3, sizeof(void *));
    int n_owned = 0, rc = 1;
    const int hd = s->head_dim ? s->head_dim : s->dim / s->heads;
    char name[128];
#define ADD2(nm, r, c)                                                                            \
    do {                                                                                          \
        int64_t shape[2] = {r, c};                                                                \
        void *d = owned[n_owned++] = bench_random_matrix(r, c, s->dtype, 1.0f / sqrtf((float)(c))); \
        if (!d || ds_st_writer_add(w, nm, s->dtype, 2, shape, d)) goto done;                      \
    } while (0)
#define ADD1(nm, n)                                                                               \
    do {                                                                                          \
        int64_t shape[1] = {n};                                                                   \
        float *d = owned[n_owned++] = malloc(sizeof(float) * (n));                                \
        if (!d) goto done;                                                                        \
        for (int i = 0; i < (n); i++) d[i] = 1.0f;                                                \
        if (ds_st_writer_add(w, nm, DS_F32, 1, shape, d)) goto done;                              \
    } while (0)
    ADD2("model.embed_tokens.weight", s->vocab, s->dim);
    if (!s->qwen3) ADD2("lm_head.weight", s->vocab, s->dim);
    ADD1("model.norm.weight", s->dim);
    for (int l = 0; l < s->layers; l++) {
        fprintf(stderr, "\rbench: layer %d/%d", l + 1, s->layers);
#define L(suffix) (snprintf(name, sizeof name, "model.layers.%d.%s", l, suffix), name)
        ADD2(L("self_attn.q_proj.weight"), s->heads * hd, s->dim);
        ADD2(L("self_attn.k_proj.weight"), s->kv_heads * hd, s->dim);
        ADD2(L("self_attn.v_proj.weight"), s->kv_heads * hd, s->dim);
        ADD2(L("self_attn.o_proj.weight"), s->dim, s->heads * hd);
        ADD2(L("mlp.gate_proj.weight"), s->ffn, s->dim);
        ADD2(L("mlp.up_proj.weight"), s->ffn, s->dim);
        ADD2(L("mlp.down_proj.weight"), s->dim, s->ffn);
        ADD1(L("input_layernorm.weight"), s->dim);
        ADD1(L("post_attention_layernorm.weight"), s->dim);
        if (s->qwen3) {
            ADD1(L("self_attn.q_norm.weight"), hd);
            ADD1(L("self_attn.k_norm.weight"), hd);
        }
#undef L
    }
#undef ADD1
#undef ADD2
    fprintf(stderr, "\n");
    if (ds_st_writer_write_dir(w, dir, 0)) goto done;
    FILE *f = fopen(path, "w");
    if (!f) goto done;
    fprintf(f,
            "{\"architectures\": [\"%s\"], \"model_type\": \"%s\", \"hidden_size\": %d, "
            "\"intermediate_size\": %d, \"num_hidden_layers\": %d, \"num_attention_heads\": %d, "
            "\"num_key_value_heads\": %d, \"head_dim\": %d, \"vocab_size\": %d, \"max_position_embeddings\": 4096, "
            "\"rms_norm_eps\": %s, \"rope_theta\": %s, \"tie_word_embeddings\": %s}\n",
            s->qwen3 ? "Qwen3ForCausalLM" : "LlamaForCausalLM", s->qwen3 ? "qwen3" : "llama", s->dim, s->ffn,
            s->layers, s->heads, s->kv_heads, hd, s->vocab, s->rms_eps ? s->rms_eps : "1e-6",
            s->qwen3 ? "1000000.0" : "10000.0", s->qwen3 ? "true" : "false");
    fclose(f);
    rc = 0;
done:
    if (rc) fprintf(stderr, "bench: cannot write the synthetic model: %s\n", ds_last_error());
    for (int i = 0; i < n_owned; i++) free(owned[i]);
    free(owned);
    ds_st_writer_free(w);
    return rc;
}

// ---- synthetic mixture-of-experts model (streamed) -----------------------------------------------

// A random-weight Qwen3-MoE (Qwen3MoeForCausalLM: q/k norms, every layer sparse, norm_topk_prob,
// untied head) with the experts one module each (mlp.experts.E.gate_proj.weight, ...: the Hugging
// Face checkpoints' layout). Its tensors are streamed into the shards (ds_st_writer_stream_dir) a
// megabyte at a time, so a many-GB model is written in bounded memory.
typedef struct {
    bench_shape s;  // dim, layers, heads, kv_heads, head_dim, vocab, dtype (F32 or BF16); ffn unused
    int experts, top_k, moe_ffn;
} bench_moe_shape;

// Qwen3-30B-A3B: hidden 2048, 48 layers, 32/4 heads of 128, vocab 151936, 128 experts, top 8, 768 wide.
static inline bench_moe_shape bench_moe_qwen3_30b_a3b(void) {
    return (bench_moe_shape){{2048, 48, 0, 32, 4, 151936, DS_BF16, 128, 1, NULL}, 128, 8, 768};
}

typedef struct {
    const ds_st_writer *w;
    int n;
    int *ids;
    float *scale; // (n) uniform in [-scale, scale); 0 = a norm (all ones)
    size_t *elems;
    ds_dtype *dt;
} bench_moe_fill_ctx;

static inline ds_status bench_moe_fill(void *vctx, ds_st_sink *sink) {
    bench_moe_fill_ctx *c = vctx;
    enum { CHUNK = 1 << 19 };
    static float buf[CHUNK];
    ds_status st = DS_OK;
    for (int i = 0; i < c->n && !st; i++) {
        if (i % 64 == 0) fprintf(stderr, "\rbench: tensor %d/%d", i + 1, c->n);
        for (size_t at = 0; at < c->elems[i] && !st; at += CHUNK) {
            const size_t k = c->elems[i] - at < CHUNK ? c->elems[i] - at : CHUNK;
            for (size_t j = 0; j < k; j++) {
                const float v = c->scale[i] ? bench_frand() * c->scale[i] : 1.0f;
                if (c->dt[i] == DS_F32) buf[j] = v;
                else ((uint16_t *)buf)[j] = ds_f32_to_bf16(v);
            }
            st = ds_st_sink_put(sink, c->ids[i], buf, k * ds_dtype_size(c->dt[i]));
        }
    }
    fprintf(stderr, "\n");
    return st;
}

// Writes it to `dir` unless `dir` already holds a config.json (shards of at most 2 GiB). Returns 0,
// or 1 with a message.
static inline int bench_make_synthetic_moe(const char *dir, const bench_moe_shape *ms) {
    const bench_shape *s = &ms->s;
    char path[4096];
    snprintf(path, sizeof path, "%s/config.json", dir);
    struct stat sb;
    if (stat(path, &sb) == 0) return 0; // already there
    const int hd = s->head_dim ? s->head_dim : s->dim / s->heads;
    const int cap = 3 + s->layers * (9 + 3 * ms->experts);
    fprintf(stderr, "bench: writing a synthetic %s Qwen3-MoE (dim %d, %d layers, %d experts top %d of width %d, vocab %d) to %s\n",
            ds_dtype_name(s->dtype), s->dim, s->layers, ms->experts, ms->top_k, ms->moe_ffn, s->vocab, dir);
    mkdir(dir, 0755);
    ds_st_writer *w = ds_st_writer_new();
    bench_moe_fill_ctx c = {w, 0, calloc((size_t)cap, sizeof(int)), calloc((size_t)cap, sizeof(float)),
                            calloc((size_t)cap, sizeof(size_t)), calloc((size_t)cap, sizeof(ds_dtype))};
    int rc = 1;
    char name[160];
    if (!w || !c.ids || !c.scale || !c.elems || !c.dt) goto done;
#define MOE_ADD(nm, r, cols, norm)                                                                  \
    do {                                                                                            \
        const int64_t rows_ = (r), shape[2] = {rows_, cols}; /* rows 0: a vector */                 \
        c.dt[c.n] = norm ? DS_F32 : s->dtype;                                                       \
        c.scale[c.n] = norm ? 0.0f : 1.0f / sqrtf((float)(cols));                                   \
        c.elems[c.n] = (size_t)(rows_ ? rows_ : 1) * (size_t)(cols);                                \
        if (ds_st_writer_add_stream(w, nm, c.dt[c.n], rows_ ? 2 : 1, rows_ ? shape : shape + 1, &c.ids[c.n])) \
            goto done;                                                                              \
        c.n++;                                                                                      \
    } while (0)
    MOE_ADD("model.embed_tokens.weight", s->vocab, s->dim, 0);
    MOE_ADD("lm_head.weight", s->vocab, s->dim, 0);
    MOE_ADD("model.norm.weight", 0, s->dim, 1);
    for (int l = 0; l < s->layers; l++) {
#define L(suffix) (snprintf(name, sizeof name, "model.layers.%d.%s", l, suffix), name)
        MOE_ADD(L("self_attn.q_proj.weight"), s->heads * hd, s->dim, 0);
        MOE_ADD(L("self_attn.k_proj.weight"), s->kv_heads * hd, s->dim, 0);
        MOE_ADD(L("self_attn.v_proj.weight"), s->kv_heads * hd, s->dim, 0);
        MOE_ADD(L("self_attn.o_proj.weight"), s->dim, s->heads * hd, 0);
        MOE_ADD(L("self_attn.q_norm.weight"), 0, hd, 1);
        MOE_ADD(L("self_attn.k_norm.weight"), 0, hd, 1);
        MOE_ADD(L("input_layernorm.weight"), 0, s->dim, 1);
        MOE_ADD(L("post_attention_layernorm.weight"), 0, s->dim, 1);
        MOE_ADD(L("mlp.gate.weight"), ms->experts, s->dim, 0);
        for (int e = 0; e < ms->experts; e++) {
            char sub[96];
            snprintf(sub, sizeof sub, "mlp.experts.%d.gate_proj.weight", e);
            MOE_ADD(L(sub), ms->moe_ffn, s->dim, 0);
            snprintf(sub, sizeof sub, "mlp.experts.%d.up_proj.weight", e);
            MOE_ADD(L(sub), ms->moe_ffn, s->dim, 0);
            snprintf(sub, sizeof sub, "mlp.experts.%d.down_proj.weight", e);
            MOE_ADD(L(sub), s->dim, ms->moe_ffn, 0);
        }
#undef L
    }
#undef MOE_ADD
    if (ds_st_writer_stream_dir(w, dir, (size_t)2 << 30, bench_moe_fill, &c)) goto done;
    FILE *f = fopen(path, "w");
    if (!f) goto done;
    fprintf(f,
            "{\"architectures\": [\"Qwen3MoeForCausalLM\"], \"model_type\": \"qwen3_moe\", \"hidden_size\": %d, "
            "\"intermediate_size\": %d, \"num_hidden_layers\": %d, \"num_attention_heads\": %d, "
            "\"num_key_value_heads\": %d, \"head_dim\": %d, \"vocab_size\": %d, \"max_position_embeddings\": 4096, "
            "\"rms_norm_eps\": 1e-6, \"rope_theta\": 1000000.0, \"tie_word_embeddings\": false, "
            "\"hidden_act\": \"silu\", \"attention_bias\": false, \"num_experts\": %d, \"num_experts_per_tok\": %d, "
            "\"moe_intermediate_size\": %d, \"norm_topk_prob\": true, \"decoder_sparse_step\": 1, "
            "\"mlp_only_layers\": [], \"torch_dtype\": \"%s\", \"bos_token_id\": 1, \"eos_token_id\": 2}\n",
            s->dim, 6 * ms->moe_ffn, s->layers, s->heads, s->kv_heads, hd, s->vocab, ms->experts, ms->top_k,
            ms->moe_ffn, s->dtype == DS_BF16 ? "bfloat16" : "float32");
    fclose(f);
    rc = 0;
done:
    if (rc) fprintf(stderr, "bench: cannot write the synthetic model: %s\n", ds_last_error());
    free(c.ids), free(c.scale), free(c.elems), free(c.dt);
    ds_st_writer_free(w);
    return rc;
}

// The Gemma 4 E-series case of bench_make_synthetic (see bench_shape.ple_dim).
static inline int bench_make_synthetic_gemma4e(const char *dir, const bench_shape *s) {
    char path[4096];
    snprintf(path, sizeof path, "%s/config.json", dir);
    const int L = s->layers, P = s->ple_dim, hd = s->head_dim ? s->head_dim : s->dim / s->heads, ghd = 2 * hd;
    const int n_shared = L * 3 / 7;
    fprintf(stderr, "bench: writing a synthetic %s Gemma 4 E-series (dim %d, %d layers, %d KV-shared, PLE %d) to %s\n",
            ds_dtype_name(s->dtype), s->dim, L, n_shared, P, dir);
    mkdir(dir, 0755);
    ds_st_writer *w = ds_st_writer_new();
    void **owned = calloc((size_t)L * 20 + 8, sizeof(void *));
    int n_owned = 0, rc = 1;
    char name[128], types[8192] = "";
    size_t tl = 0;
#define ADD2(nm, r, c)                                                                            \
    do {                                                                                          \
        int64_t shape[2] = {r, c};                                                                \
        void *d = owned[n_owned++] = bench_random_matrix(r, c, s->dtype, 1.0f / sqrtf((float)(c))); \
        if (!d || ds_st_writer_add(w, nm, s->dtype, 2, shape, d)) goto done;                      \
    } while (0)
#define ADD1(nm, n)                                                                               \
    do {                                                                                          \
        int64_t shape[1] = {n};                                                                   \
        float *d = owned[n_owned++] = malloc(sizeof(float) * (n));                                \
        if (!d) goto done;                                                                        \
        for (int i = 0; i < (n); i++) d[i] = 1.0f;                                                \
        if (ds_st_writer_add(w, nm, DS_F32, 1, shape, d)) goto done;                              \
    } while (0)
    ADD2("model.embed_tokens.weight", s->vocab, s->dim);
    ADD1("model.norm.weight", s->dim);
    ADD2("model.embed_tokens_per_layer.weight", s->vocab, L * P);
    ADD2("model.per_layer_model_projection.weight", L * P, s->dim);
    ADD1("model.per_layer_projection_norm.weight", P);
    for (int l = 0; l < L; l++) {
        fprintf(stderr, "\rbench: layer %d/%d", l + 1, L);
        const int full = (l + 1) % 6 == 0 || l == L - 1, lhd = full ? ghd : hd, shared = l >= L - n_shared;
        tl += (size_t)snprintf(types + tl, sizeof types - tl, "%s\"%s\"", l ? ", " : "",
                               full ? "full_attention" : "sliding_attention");
#define LN(suffix) (snprintf(name, sizeof name, "model.layers.%d.%s", l, suffix), name)
        ADD2(LN("self_attn.q_proj.weight"), s->heads * lhd, s->dim);
        ADD1(LN("self_attn.q_norm.weight"), lhd);
        if (!shared) {
            ADD2(LN("self_attn.k_proj.weight"), s->kv_heads * lhd, s->dim);
            ADD2(LN("self_attn.v_proj.weight"), s->kv_heads * lhd, s->dim);
            ADD1(LN("self_attn.k_norm.weight"), lhd);
        }
        ADD2(LN("self_attn.o_proj.weight"), s->dim, s->heads * lhd);
        ADD2(LN("mlp.gate_proj.weight"), s->ffn, s->dim);
        ADD2(LN("mlp.up_proj.weight"), s->ffn, s->dim);
        ADD2(LN("mlp.down_proj.weight"), s->dim, s->ffn);
        ADD2(LN("per_layer_input_gate.weight"), P, s->dim);
        ADD2(LN("per_layer_projection.weight"), s->dim, P);
        ADD1(LN("input_layernorm.weight"), s->dim);
        ADD1(LN("post_attention_layernorm.weight"), s->dim);
        ADD1(LN("pre_feedforward_layernorm.weight"), s->dim);
        ADD1(LN("post_feedforward_layernorm.weight"), s->dim);
        ADD1(LN("post_per_layer_input_norm.weight"), s->dim);
#undef LN
    }
#undef ADD1
#undef ADD2
    fprintf(stderr, "\n");
    if (ds_st_writer_write_dir(w, dir, 0)) goto done;
    FILE *f = fopen(path, "w");
    if (!f) goto done;
    fprintf(f,
            "{\"architectures\": [\"Gemma4ForCausalLM\"], \"model_type\": \"gemma4_text\", \"hidden_size\": %d, "
            "\"intermediate_size\": %d, \"num_hidden_layers\": %d, \"num_attention_heads\": %d, "
            "\"num_key_value_heads\": %d, \"head_dim\": %d, \"global_head_dim\": %d, \"vocab_size\": %d, "
            "\"max_position_embeddings\": 4096, \"rms_norm_eps\": 1e-6, \"hidden_activation\": \"gelu_pytorch_tanh\", "
            "\"tie_word_embeddings\": true, \"sliding_window\": 512, \"final_logit_softcapping\": 30.0, "
            "\"attention_k_eq_v\": false, \"hidden_size_per_layer_input\": %d, \"vocab_size_per_layer_input\": %d, "
            "\"num_kv_shared_layers\": %d, \"use_double_wide_mlp\": false, \"enable_moe_block\": false, "
            "\"layer_types\": [%s], \"rope_parameters\": {\"sliding_attention\": {\"rope_type\": \"default\", "
            "\"rope_theta\": 10000.0}, \"full_attention\": {\"rope_type\": \"proportional\", "
            "\"partial_rotary_factor\": 0.25, \"rope_theta\": 1000000.0}}, \"torch_dtype\": \"%s\"}\n",
            s->dim, s->ffn, L, s->heads, s->kv_heads, hd, ghd, s->vocab, P, s->vocab, n_shared, types,
            s->dtype == DS_BF16 ? "bfloat16" : "float32");
    fclose(f);
    rc = 0;
done:
    if (rc) fprintf(stderr, "bench: cannot write the synthetic model: %s\n", ds_last_error());
    for (int i = 0; i < n_owned; i++) free(owned[i]);
    free(owned);
    ds_st_writer_free(w);
    return rc;
}

// ---- decode timing ------------------------------------------------------------------------------

// Median tokens/s of `repeats` runs of n greedy decode steps after an 8-token prefill; 0 on failure.
// ... with `depth` more tokens in the cache before the timed steps (prefilled 256 at a time): the
// attention's share at that context, as llama-bench's -d.
static inline double bench_decode_tps_at(ds_model *m, int n, int repeats, int depth) {
    const ds_model_info *in = ds_model_get_info(m);
    ds_kv *kv;
    ds_workspace *ws;
    float *logits = malloc(sizeof(float) * in->vocab_size);
    double *rates = malloc(sizeof(double) * repeats);
    int32_t *prompt = malloc(sizeof(int32_t) * (size_t)(depth + 8));
    if (!logits || !rates || !prompt || ds_kv_init(m, n + depth + 16, &kv) || ds_workspace_init(m, &ws)) return 0;
    for (int i = 0; i < depth + 8; i++) prompt[i] = (int32_t)((i * 7919 + 1) % in->vocab_size);
    for (int r = 0; r < repeats; r++) {
        ds_kv_truncate(kv, 0);
        for (int at = 0; at < depth + 8; at += 256) {
            const int k = depth + 8 - at < 256 ? depth + 8 - at : 256;
            ds_forward_seq pf = {.kv = kv, .tokens = prompt + at, .n_tokens = k, .n_logits = 1, .logits = logits};
            ds_model_forward(m, ws, &pf, 1);
        }
        const double t0 = bench_now();
        for (int i = 0; i < n; i++) {
            int32_t next = ds_argmax(logits, in->vocab_size);
            ds_forward_seq s = {.kv = kv, .tokens = &next, .n_tokens = 1, .n_logits = 1, .logits = logits};
            ds_model_forward(m, ws, &s, 1);
        }
        rates[r] = n / (bench_now() - t0);
    }
    qsort(rates, (size_t)repeats, sizeof *rates, bench_cmp_double);
    const double med = rates[repeats / 2];
    ds_kv_free(kv);
    ds_workspace_free(ws);
    free(logits);
    free(rates);
    free(prompt);
    return med;
}

static inline double bench_decode_tps(ds_model *m, int n, int repeats) { return bench_decode_tps_at(m, n, repeats, 0); }

// ---- training throughput ------------------------------------------------------------------------

// Anchor blocks per second of `steps` steps (8 sequences, 64 anchors each) training a fresh drafter
// of `layers` layers for `target` on `data` with `threads` threads (read back from the run's metrics
// log; the run's folder is removed afterwards). *blocks gets the count; 0 on failure (message out).
static inline double bench_train_blocks_per_s(const char *target, const char *data, int threads, int steps, int layers,
                                              double *blocks) {
    char out[64];
    snprintf(out, sizeof out, "/tmp/dspark_bench_train.%d.%d", (int)getpid(), threads);
    ds_train_params o = ds_train_default();
    o.target = target;
    o.data = data;
    o.out = out;
    o.steps = steps;
    o.batch = 8;
    o.anchors = 64;
    ds_set_threads(threads); // (the process's thread count: the job carries none)
    o.shape.n_layers = layers;
    const double t0 = bench_now();
    if (ds_train_run(&o)) {
        fprintf(stderr, "bench: training failed: %s\n", ds_last_error());
        return 0;
    }
    const double dt = bench_now() - t0;
    char path[128], line[512];
    snprintf(path, sizeof path, "%s/metrics.jsonl", out);
    FILE *f = fopen(path, "r");
    double n = 0;
    while (f && fgets(line, sizeof line, f)) {
        const char *b = strstr(line, "\"blocks\":");
        if (b) n += atof(b + 9);
    }
    if (f) fclose(f);
    char cmd[160];
    snprintf(cmd, sizeof cmd, "rm -rf %s", out);
    if (system(cmd) != 0) fprintf(stderr, "bench: could not remove %s\n", out);
    if (blocks) *blocks = n;
    return n / dt;
}

#endif
