// Decode throughput against the machine's memory-bandwidth bound.
//
//   bench_decode [--model PATH] [--synthetic DIR --dtype f32|bf16 --dim 2048 --layers 16 ...]
//                [--preset qwen3-0.6b|qwen3-4b|gemma4-e4b] [--threads 1,2] [-n TOKENS] [--repeats R]
//                [--isas avx512,avx512bf16] [--prefill P] [--bf16-inputs 1] [--int8-inputs 1|-1] [--depth D]
//                [--kv-f16 1]
//
// For each thread count: decode tokens/s (median of R runs of N greedy steps after an 8-token
// prefill) and the bound = measured read bandwidth / weight bytes per token, both measured in this
// run. Prints one JSON object per line: the ratio decode/bound is the figure of merit (decode is
// memory-bound for realistic sizes). With --synthetic, a random-weight Llama of the given shape is
// written as a Hugging Face directory first (if DIR does not hold one): weights do not change cost.
// --depth D decodes with D more tokens in the cache first (llama-bench's -d: the attention's share at
// that context; the bound stays the weights'); the prefill line's forward and verify8_over_decode's
// forwards then run that deep too.
// --prefill P first prints a "prefill" line per thread count: tokens/s of one forward over P new
// tokens from an empty cache (median of R), the product path a prompt of P tokens takes (many rows:
// sgemm on widened tiles); -n 0 then skips the decode line (scripts/bench_peer.sh runs both phases
// this way next to llama-bench's pp / tg).
// For small models (which fit in cache) the bound is meaningless; the line then also reports the
// speed-up of our SIMD kernels over the scalar fallback in the same run.
// --bf16-inputs 1 loads the model with ds_model_params.bf16_inputs (what DSPARK_BF16_INPUTS=1 does for
// the CLI and the server: BF16 weights on VDPBF16PS where the CPU has it), without --isas's rounds.
// --kv-f16 1 loads it with ds_model_params.kv_f16 (what DSPARK_KV_F16=1 does: KV caches of halves);
// the lines say which ("kv": "f16" or "f32"). Compare the two by alternating runs.
// --int8-inputs 1 / -1 loads it with ds_model_params.int8_inputs 1 / -1 (DSPARK_INT8_INPUTS=1: MLX
// affine weights on the integer kernels too; =0: GGUF Q8_0 and MLX affine weights on f32 inputs; by
// default Q8_0 rounds its input to int8 per block, as llama.cpp's Q8_0 x Q8_0).
// --isas compares kernel paths (ds_matmul_force_isa names; the model is loaded with
// ds_model_params.bf16_inputs, so "avx512bf16" runs BF16 on VDPBF16PS and "avx512" on f32 FMA) in one run: per thread count, R rounds,
// each measuring every path once in turn (decode rate over N steps, 1- and 8-row forwards, medians
// of 3), then one line per path with the medians of the rounds and their min/max (interleaved, so
// load from other processes falls on all paths alike).
// --preset sets a Qwen3 shape (Qwen3ForCausalLM: q/k norms, head_dim 128, tied embeddings, bf16):
// qwen3-0.6b (hidden 1024, 28 layers, 16/8 heads, FFN 3072, vocab 151936; ~1.2 GB) or qwen3-4b
// (2560, 36 layers, 32/8 heads, FFN 9728; ~8 GB on disk and in memory while written: opt-in only).
// --preset gemma4-e4b sets Gemma 4 E4B's text shape (bf16: hidden 2560, 42 layers, 8/2 heads, head_dim
// 256 / 512 on full layers, FFN 10240, vocab 262144, per-layer embeddings 256 wide, the last 18
// layers KV-shared; ~15 GB: opt-in only, and a later --layers gives a reduced-layer variant). For a
// PLE model the line also gives the table's bytes, the bytes of the one row a token reads (the only
// part of the table in weight_bytes) and the resident memory after load (the matrices a decode step
// reads are entered into the page tables at load, ds_model_params.no_populate; the table stays mapped:
// a copy or widening would show there).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench_util.h"
#include "dspark.h"
#include "kernels/matmul.h"
#include "model/model.h"

// Resident memory of this process in bytes (VmRSS), 0 if unknown.
static size_t rss_bytes(void) {
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    size_t kb = 0;
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, "VmRSS:", 6)) kb = (size_t)strtoull(line + 6, NULL, 10);
    if (f) fclose(f);
    return kb * 1024;
}

// Median seconds of one forward over `rows` new tokens after a context of `ctx` (rolled back to it
// after each run): ctx 64 and a few rows is a verification of rows-1 drafted tokens, ctx 0 and many
// rows a prompt's prefill. Tokens are arbitrary ids (cost does not depend on them).
static double forward_seconds(ds_model *m, int ctx, int rows, int repeats) {
    const ds_model_info *in = ds_model_get_info(m);
    ds_kv *kv;
    ds_workspace *ws;
    float *logits = malloc(sizeof(float) * (size_t)in->vocab_size * rows);
    int32_t *tok = malloc(sizeof(int32_t) * (size_t)(ctx > rows ? ctx : rows));
    double *t = malloc(sizeof(double) * (size_t)repeats);
    if (!logits || !tok || !t || ds_kv_init(m, ctx + rows, &kv) || ds_workspace_init(m, &ws)) return 0;
    for (int i = 0; i < (ctx > rows ? ctx : rows); i++) tok[i] = (int32_t)((i * 7919 + 1) % in->vocab_size);
    if (ctx) {
        ds_forward_seq pf = {.kv = kv, .tokens = tok, .n_tokens = ctx, .n_logits = 1, .logits = logits};
        ds_model_forward(m, ws, &pf, 1);
    }
    for (int r = 0; r < repeats; r++) {
        ds_forward_seq s = {.kv = kv, .tokens = tok, .n_tokens = rows, .n_logits = ctx ? rows : 1, .logits = logits};
        const double t0 = bench_now();
        ds_model_forward(m, ws, &s, 1);
        t[r] = bench_now() - t0;
        ds_kv_truncate(kv, ctx);
    }
    qsort(t, (size_t)repeats, sizeof *t, bench_cmp_double);
    const double med = t[repeats / 2];
    ds_kv_free(kv);
    ds_workspace_free(ws);
    free(logits);
    free(tok);
    free(t);
    return med;
}

// median, min and max of v[0..n-1] (sorted in place)
static void stats(double *v, int n, double out[3]) {
    qsort(v, (size_t)n, sizeof *v, bench_cmp_double);
    out[0] = v[n / 2], out[1] = v[0], out[2] = v[n - 1];
}

// --isas: the paths interleaved, R rounds (see the header).
static int compare_isas(ds_model *m, const char *isas, int t, int n, int repeats, double bw) {
    enum { MAX_ISAS = 4 };
    char names[MAX_ISAS][32];
    int k = 0;
    for (const char *p = isas; *p && k < MAX_ISAS;) {
        const char *e = strchr(p, ',');
        const size_t len = e ? (size_t)(e - p) : strlen(p);
        snprintf(names[k], sizeof names[k], "%.*s", (int)(len < 31 ? len : 31), p);
        if (!ds_matmul_force_isa(names[k])) {
            fprintf(stderr, "bench_decode: isa %s not available here\n", names[k]);
            return 1;
        }
        k++;
        if (!e) break;
        p = e + 1;
    }
    const ds_model_info *in = ds_model_get_info(m);
    double *tps = malloc(sizeof(double) * (size_t)(k * repeats)), *ratio = malloc(sizeof(double) * (size_t)(k * repeats));
    for (int r = 0; r < repeats; r++)
        for (int i = 0; i < k; i++) {
            ds_matmul_force_isa(names[i]);
            tps[i * repeats + r] = bench_decode_tps(m, n, 1);
            ratio[i * repeats + r] = forward_seconds(m, 64, 8, 3) / forward_seconds(m, 64, 1, 3);
        }
    const double bound = bw / (double)in->weight_bytes;
    for (int i = 0; i < k; i++) {
        double a[3], b[3];
        stats(tps + i * repeats, repeats, a);
        stats(ratio + i * repeats, repeats, b);
        printf("{\"bench\": \"decode\", \"model\": \"%s\", \"weight_bytes\": %zu, \"threads\": %d, \"isa\": \"%s\", "
               "\"rounds\": %d, \"tokens\": %d, \"tok_per_s\": [%.2f, %.2f, %.2f], \"read_gb_per_s\": %.2f, "
               "\"bound_tok_per_s\": %.2f, \"fraction_of_bound\": [%.3f, %.3f, %.3f], "
               "\"verify8_over_decode\": [%.3f, %.3f, %.3f]}\n",
               in->name, in->weight_bytes, t, names[i], repeats, n, a[0], a[1], a[2], bw / 1e9, bound, a[0] / bound,
               a[1] / bound, a[2] / bound, b[0], b[1], b[2]);
    }
    fflush(stdout);
    free(tps);
    free(ratio);
    return 0;
}

int main(int argc, char **argv) {
    bench_openblas_reexec(argv);
    const char *model = NULL, *synth = NULL, *threads = "1,2", *isas = NULL;
    bench_shape s = {2048, 16, 5632, 32, 8, 32000, DS_F32, 0, 0, NULL};
    int n = 64, repeats = 5, prefill = 0, bf16 = 0, int8 = 0, depth = 0, kv16 = 0;
    for (int i = 1; i + 1 < argc; i += 2) {
        const char *o = argv[i], *v = argv[i + 1];
        if (bench_model_option(o, v, &s, &model, &synth)) continue;
        if (!strcmp(o, "--threads")) threads = v;
        else if (!strcmp(o, "-n")) n = atoi(v);
        else if (!strcmp(o, "--repeats")) repeats = atoi(v);
        else if (!strcmp(o, "--isas")) isas = v;
        else if (!strcmp(o, "--prefill")) prefill = atoi(v);
        else if (!strcmp(o, "--bf16-inputs")) bf16 = atoi(v);
        else if (!strcmp(o, "--int8-inputs")) int8 = atoi(v);
        else if (!strcmp(o, "--depth")) depth = atoi(v);
        else if (!strcmp(o, "--kv-f16")) kv16 = atoi(v);
        else {
            fprintf(stderr, "bench_decode: unknown option %s\n", o);
            return 2;
        }
    }
    if (synth) {
        if (bench_make_synthetic(synth, &s)) return 1;
        model = synth;
    }
    if (!model || repeats < 1 || n < 0 || prefill < 0 || depth < 0 || (n == 0 && prefill == 0)) {
        fprintf(stderr, "usage: bench_decode (--model PATH | --synthetic DIR [shape options]) [--threads 1,2] [-n N]\n");
        return 2;
    }
    ds_model *m;
    // --isas: BF16 weights opt in to rounded inputs, which only the avx512bf16 path acts on.
    const ds_model_params params = {.n_threads = 0, .bf16_inputs = isas || bf16, .int8_inputs = int8,
                                    .kv_f16 = kv16 == 1};
    const char *kv = kv16 == 1 ? "f16" : "f32";
    if (ds_model_load(model, &params, &m)) {
        fprintf(stderr, "bench_decode: %s\n", ds_last_error());
        return 1;
    }
    const ds_model_info *in = ds_model_get_info(m);
    const size_t rss_load = rss_bytes();
    const int small = in->weight_bytes < ((size_t)64 << 20); // fits in caches: compute-bound
    for (const char *p = threads; *p;) {
        const int t = atoi(p);
        ds_set_threads(t);
        if (prefill) {
            printf("{\"bench\": \"prefill\", \"model\": \"%s\", \"weights\": \"%s\", \"threads\": %d, \"isa\": \"%s\", "
                   "\"kv\": \"%s\", \"depth\": %d, \"tokens\": %d, \"tok_per_s\": %.1f}\n",
                   in->name, ds_dtype_name(in->weight_type), t, ds_matmul_isa(), kv, depth, prefill,
                   prefill / forward_seconds(m, depth, prefill, repeats));
            fflush(stdout);
        }
        if (n == 0) goto next;
        const double bw = small ? 0 : bench_read_bandwidth(t);
        if (isas) {
            if (compare_isas(m, isas, t, n, repeats, bw)) return 1;
            p = strchr(p, ',');
            if (!p) break;
            p++;
            continue;
        }
        const double tps = bench_decode_tps_at(m, n, repeats, depth);
        printf("{\"bench\": \"decode\", \"model\": \"%s\", \"weights\": \"%s\", \"weight_bytes\": %zu, \"threads\": %d, "
               "\"isa\": \"%s\", \"kv\": \"%s\", \"depth\": %d, \"tokens\": %d, \"tok_per_s\": %.1f",
               in->name, ds_dtype_name(in->weight_type), in->weight_bytes, t, ds_matmul_isa(), kv, depth, n, tps);
        if (small) {
            const char *isa = ds_matmul_isa();
            char saved[16];
            snprintf(saved, sizeof saved, "%s", isa);
            ds_matmul_force_isa("scalar");
            const double scalar = bench_decode_tps(m, n, repeats);
            ds_matmul_force_isa(saved);
            printf(", \"scalar_tok_per_s\": %.1f, \"simd_speedup\": %.2f", scalar, tps / scalar);
        } else {
            const double bound = bw / (double)in->weight_bytes;
            printf(", \"read_gb_per_s\": %.2f, \"bound_tok_per_s\": %.2f, \"fraction_of_bound\": %.3f", bw / 1e9, bound,
                   tps / bound);
            // (the share of the populated matrices mapped by huge pages, and whether the load re-read them)
            printf(", \"huge_share\": %.2f, \"reread\": %d", m->huge.resident ? (double)m->huge.huge / (double)m->huge.resident : 0,
                   m->huge.reread);
        }
        // Speculative decoding lives on this ratio: verifying a block of 7 drafts (8 rows) should
        // cost about one decode step when decoding is memory-bound.
        const int vctx = depth > 64 ? depth : 64; // (at --depth: a verification that deep)
        const double t1 = forward_seconds(m, vctx, 1, repeats * 3), t8 = forward_seconds(m, vctx, 8, repeats * 3);
        printf(", \"verify8_over_decode\": %.2f", t8 / t1);
        if (m->ple_dim)
            printf(", \"ple_table_bytes\": %zu, \"ple_row_bytes_per_token\": %zu, \"rss_after_load_bytes\": %zu",
                   ds_weight_bytes(&m->ple_embd), ds_weight_bytes(&m->ple_embd) / (size_t)m->ple_embd.rows, rss_load);
        printf("}\n");
        fflush(stdout);
    next:
        p = strchr(p, ',');
        if (!p) break;
        p++;
    }
    ds_model_free(m);
    return 0;
}
