// Decode throughput against the machine's memory-bandwidth bound.
//
//   bench_decode [--model PATH] [--synthetic DIR --dtype f32|bf16 --dim 2048 --layers 16 ...]
//                [--preset qwen3-0.6b|qwen3-4b] [--threads 1,2] [-n TOKENS] [--repeats R]
//
// For each thread count: decode tokens/s (median of R runs of N greedy steps after an 8-token
// prefill) and the bound = measured read bandwidth / weight bytes per token, both measured in this
// run. Prints one JSON object per line: the ratio decode/bound is the figure of merit (decode is
// memory-bound for realistic sizes). With --synthetic, a random-weight Llama of the given shape is
// written as a Hugging Face directory first (if DIR does not hold one): weights do not change cost.
// For small models (which fit in cache) the bound is meaningless; the line then also reports the
// speed-up of our SIMD kernels over the scalar fallback in the same run.
// --preset sets a Qwen3 shape (Qwen3ForCausalLM: q/k norms, head_dim 128, tied embeddings, bf16):
// qwen3-0.6b (hidden 1024, 28 layers, 16/8 heads, FFN 3072, vocab 151936; ~1.2 GB) or qwen3-4b
// (2560, 36 layers, 32/8 heads, FFN 9728; ~8 GB on disk and in memory while written: opt-in only).
#include <immintrin.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "dspark.h"
#include "io/safetensors.h"
#include "kernels/half.h"
#include "kernels/matmul.h"

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

// ---- memory read bandwidth ----------------------------------------------------------------------

__attribute__((target("avx2"))) static float sum_avx2(const float *p, size_t n) {
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

// Best-of-5 read bandwidth (bytes/s) over a buffer far larger than the caches, with `threads`.
static double read_bandwidth(int threads) {
    const size_t n = (size_t)1 << 28; // 1 GiB of floats
    float *buf = aligned_alloc(64, n * sizeof(float));
    if (!buf) return 0;
    memset(buf, 0, n * sizeof(float));
    double best = 0;
    volatile float sink = 0;
    for (int rep = 0; rep < 5; rep++) {
        const double t0 = now();
        float total = 0;
#pragma omp parallel num_threads(threads) reduction(+ : total)
        {
            const int nt = omp_get_num_threads(), t = omp_get_thread_num();
            const size_t per = n / (size_t)nt / 32 * 32;
            total += sum_avx2(buf + per * (size_t)t, per);
        }
        sink += total;
        const double bw = (double)n * sizeof(float) / (now() - t0);
        best = bw > best ? bw : best;
    }
    (void)sink;
    free(buf);
    return best;
}

// ---- synthetic model ----------------------------------------------------------------------------

typedef struct {
    int dim, layers, ffn, heads, kv_heads, vocab;
    ds_dtype dtype;
    int head_dim; // 0 = dim / heads
    int qwen3;    // Qwen3ForCausalLM: per-head q/k norms, tied embeddings
} synth_shape;

static uint64_t rng_state = 0x9e3779b97f4a7c15ULL;
static float frand(void) { // uniform in [-1, 1)
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (float)((rng_state >> 40) * (1.0 / (1 << 23)) - 1.0);
}

static void *random_matrix(int rows, int cols, ds_dtype t, float scale) {
    const size_t n = (size_t)rows * cols;
    void *p = malloc(n * (t == DS_F32 ? 4 : 2));
    if (!p) return NULL;
    for (size_t i = 0; i < n; i++) {
        const float v = frand() * scale;
        if (t == DS_F32) ((float *)p)[i] = v;
        else ((uint16_t *)p)[i] = ds_f32_to_bf16(v);
    }
    return p;
}

static int make_synthetic(const char *dir, const synth_shape *s) {
    char path[4096];
    snprintf(path, sizeof path, "%s/config.json", dir);
    struct stat st;
    if (stat(path, &st) == 0) return 0; // already there
    fprintf(stderr, "bench: writing a synthetic %s %s (dim %d, %d layers) to %s\n", ds_dtype_name(s->dtype),
            s->qwen3 ? "Qwen3" : "Llama", s->dim, s->layers, dir);
    mkdir(dir, 0755);
    ds_st_writer *w = ds_st_writer_new();
    void **owned = calloc((size_t)s->layers * 11 + 3, sizeof(void *));
    int n_owned = 0;
    const int hd = s->head_dim ? s->head_dim : s->dim / s->heads;
    char name[128];
#define ADD2(nm, r, c)                                                                           \
    do {                                                                                         \
        int64_t shape[2] = {r, c};                                                               \
        void *d = owned[n_owned++] = random_matrix(r, c, s->dtype, 1.0f / sqrtf((float)(c)));    \
        if (!d || ds_st_writer_add(w, nm, s->dtype, 2, shape, d)) goto fail;                     \
    } while (0)
#define ADD1(nm, n)                                                                              \
    do {                                                                                         \
        int64_t shape[1] = {n};                                                                  \
        float *d = owned[n_owned++] = malloc(sizeof(float) * (n));                               \
        if (!d) goto fail;                                                                       \
        for (int i = 0; i < (n); i++) d[i] = 1.0f;                                               \
        if (ds_st_writer_add(w, nm, DS_F32, 1, shape, d)) goto fail;                             \
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
    fprintf(stderr, "\n");
    if (ds_st_writer_write_dir(w, dir, 0)) goto fail;
    FILE *f = fopen(path, "w");
    if (!f) goto fail;
    fprintf(f,
            "{\"architectures\": [\"%s\"], \"model_type\": \"%s\", \"hidden_size\": %d, "
            "\"intermediate_size\": %d, \"num_hidden_layers\": %d, \"num_attention_heads\": %d, "
            "\"num_key_value_heads\": %d, \"head_dim\": %d, \"vocab_size\": %d, \"max_position_embeddings\": 4096, "
            "\"rms_norm_eps\": 1e-6, \"rope_theta\": %s, \"tie_word_embeddings\": %s}\n",
            s->qwen3 ? "Qwen3ForCausalLM" : "LlamaForCausalLM", s->qwen3 ? "qwen3" : "llama", s->dim, s->ffn,
            s->layers, s->heads, s->kv_heads, hd, s->vocab, s->qwen3 ? "1000000.0" : "10000.0",
            s->qwen3 ? "true" : "false");
    fclose(f);
    for (int i = 0; i < n_owned; i++) free(owned[i]);
    free(owned);
    ds_st_writer_free(w);
    return 0;
fail:
    fprintf(stderr, "bench: cannot write the synthetic model: %s\n", ds_last_error());
    for (int i = 0; i < n_owned; i++) free(owned[i]);
    free(owned);
    ds_st_writer_free(w);
    return 1;
}

// ---- decode timing ------------------------------------------------------------------------------

// Median tokens/s of `repeats` runs of n greedy decode steps after an 8-token prefill.
static double decode_tps(ds_model *m, int n, int repeats) {
    const ds_model_info *in = ds_model_get_info(m);
    ds_kv *kv;
    ds_workspace *ws;
    float *logits = malloc(sizeof(float) * in->vocab_size);
    double *rates = malloc(sizeof(double) * repeats);
    if (ds_kv_init(m, n + 16, &kv) || ds_workspace_init(m, &ws)) return 0;
    for (int r = 0; r < repeats; r++) {
        ds_kv_truncate(kv, 0);
        int32_t prompt[8];
        for (int i = 0; i < 8; i++) prompt[i] = (int32_t)((i * 7919 + 1) % in->vocab_size);
        ds_forward_seq pf = {.kv = kv, .tokens = prompt, .n_tokens = 8, .n_logits = 1, .logits = logits};
        ds_model_forward(m, ws, &pf, 1);
        const double t0 = now();
        for (int i = 0; i < n; i++) {
            int32_t next = ds_argmax(logits, in->vocab_size);
            ds_forward_seq s = {.kv = kv, .tokens = &next, .n_tokens = 1, .n_logits = 1, .logits = logits};
            ds_model_forward(m, ws, &s, 1);
        }
        rates[r] = n / (now() - t0);
    }
    qsort(rates, (size_t)repeats, sizeof *rates, cmp_double);
    const double med = rates[repeats / 2];
    ds_kv_free(kv);
    ds_workspace_free(ws);
    free(logits);
    free(rates);
    return med;
}

// Median seconds of one forward over `rows` new tokens (a verification of rows-1 drafted tokens)
// at a context of 64, rolled back after each run.
static double forward_seconds(ds_model *m, int rows, int repeats) {
    const ds_model_info *in = ds_model_get_info(m);
    ds_kv *kv;
    ds_workspace *ws;
    float *logits = malloc(sizeof(float) * (size_t)in->vocab_size * rows);
    double *t = malloc(sizeof(double) * repeats);
    int32_t tok[64];
    for (int i = 0; i < 64; i++) tok[i] = (int32_t)((i * 7919 + 1) % in->vocab_size);
    if (ds_kv_init(m, 128, &kv) || ds_workspace_init(m, &ws)) return 0;
    ds_forward_seq pf = {.kv = kv, .tokens = tok, .n_tokens = 64, .n_logits = 1, .logits = logits};
    ds_model_forward(m, ws, &pf, 1);
    for (int r = 0; r < repeats; r++) {
        ds_forward_seq s = {.kv = kv, .tokens = tok, .n_tokens = rows, .n_logits = rows, .logits = logits};
        const double t0 = now();
        ds_model_forward(m, ws, &s, 1);
        t[r] = now() - t0;
        ds_kv_truncate(kv, 64);
    }
    qsort(t, (size_t)repeats, sizeof *t, cmp_double);
    const double med = t[repeats / 2];
    ds_kv_free(kv);
    ds_workspace_free(ws);
    free(logits);
    free(t);
    return med;
}

int main(int argc, char **argv) {
    if (!getenv("OPENBLAS_CORETYPE") && ds_openblas_core_hint()) { // see cli/main.c
        setenv("OPENBLAS_CORETYPE", ds_openblas_core_hint(), 1);
        execv("/proc/self/exe", argv);
    }
    const char *model = NULL, *synth = NULL, *threads = "1,2";
    synth_shape s = {2048, 16, 5632, 32, 8, 32000, DS_F32, 0, 0};
    int n = 64, repeats = 5;
    for (int i = 1; i + 1 < argc; i += 2) {
        const char *o = argv[i], *v = argv[i + 1];
        if (!strcmp(o, "--model")) model = v;
        else if (!strcmp(o, "--synthetic")) synth = v;
        else if (!strcmp(o, "--dtype")) s.dtype = !strcmp(v, "bf16") ? DS_BF16 : DS_F32;
        else if (!strcmp(o, "--dim")) s.dim = atoi(v);
        else if (!strcmp(o, "--layers")) s.layers = atoi(v);
        else if (!strcmp(o, "--ffn")) s.ffn = atoi(v);
        else if (!strcmp(o, "--heads")) s.heads = atoi(v);
        else if (!strcmp(o, "--kv-heads")) s.kv_heads = atoi(v);
        else if (!strcmp(o, "--vocab")) s.vocab = atoi(v);
        else if (!strcmp(o, "--head-dim")) s.head_dim = atoi(v);
        else if (!strcmp(o, "--preset") && !strcmp(v, "qwen3-0.6b"))
            s = (synth_shape){1024, 28, 3072, 16, 8, 151936, DS_BF16, 128, 1};
        else if (!strcmp(o, "--preset") && !strcmp(v, "qwen3-4b"))
            s = (synth_shape){2560, 36, 9728, 32, 8, 151936, DS_BF16, 128, 1};
        else if (!strcmp(o, "--threads")) threads = v;
        else if (!strcmp(o, "-n")) n = atoi(v);
        else if (!strcmp(o, "--repeats")) repeats = atoi(v);
        else {
            fprintf(stderr, "bench_decode: unknown option %s\n", o);
            return 2;
        }
    }
    if (synth) {
        if (make_synthetic(synth, &s)) return 1;
        model = synth;
    }
    if (!model || repeats < 1 || n < 1) {
        fprintf(stderr, "usage: bench_decode (--model PATH | --synthetic DIR [shape options]) [--threads 1,2] [-n N]\n");
        return 2;
    }
    ds_model *m;
    if (ds_model_load(model, NULL, &m)) {
        fprintf(stderr, "bench_decode: %s\n", ds_last_error());
        return 1;
    }
    const ds_model_info *in = ds_model_get_info(m);
    const int small = in->weight_bytes < ((size_t)64 << 20); // fits in caches: compute-bound
    for (const char *p = threads; *p;) {
        const int t = atoi(p);
        ds_set_threads(t);
        const double bw = small ? 0 : read_bandwidth(t);
        const double tps = decode_tps(m, n, repeats);
        printf("{\"bench\": \"decode\", \"model\": \"%s\", \"weights\": \"%s\", \"weight_bytes\": %zu, \"threads\": %d, "
               "\"isa\": \"%s\", \"tokens\": %d, \"tok_per_s\": %.1f",
               in->name, ds_dtype_name(in->weight_type), in->weight_bytes, t, ds_matmul_isa(), n, tps);
        if (small) {
            const char *isa = ds_matmul_isa();
            char saved[16];
            snprintf(saved, sizeof saved, "%s", isa);
            ds_matmul_force_isa("scalar");
            const double scalar = decode_tps(m, n, repeats);
            ds_matmul_force_isa(saved);
            printf(", \"scalar_tok_per_s\": %.1f, \"simd_speedup\": %.2f", scalar, tps / scalar);
        } else {
            const double bound = bw / (double)in->weight_bytes;
            printf(", \"read_gb_per_s\": %.2f, \"bound_tok_per_s\": %.2f, \"fraction_of_bound\": %.3f", bw / 1e9, bound,
                   tps / bound);
        }
        // Speculative decoding lives on this ratio: verifying a block of 7 drafts (8 rows) should
        // cost about one decode step when decoding is memory-bound.
        const double t1 = forward_seconds(m, 1, repeats * 3), t8 = forward_seconds(m, 8, repeats * 3);
        printf(", \"verify8_over_decode\": %.2f}\n", t8 / t1);
        fflush(stdout);
        p = strchr(p, ',');
        if (!p) break;
        p++;
    }
    ds_model_free(m);
    return 0;
}
