// Time to first token with and without the prompt cache: requests sharing a long system prompt.
//
//   bench_prompt_cache [--model PATH | --synthetic DIR (shape options, --preset ...)] [--system N]
//                      [--user N] [--requests R] [--threads T] [--cache-mb M]
//
// R requests (default 8), each a shared "system prompt" of N token ids (default 1500) followed by
// its own U ids (default 24), one at a time through two engines of the same model: the prompt cache
// off and on (--cache-mb, default 1024). Requests alternate between the engines (off, on, off, on,
// ...) so load from other processes falls on both alike. TTFT = seconds from ds_engine_add to the
// first generated token (the prefill, then one decoding round). The first request is cold on both
// (it fills the cache); the line reports the median of the others, their min/max, and the ratio.
// Greedy tokens of every request are compared between the engines (they must be identical).
// Default model: a synthetic bf16 Llama (dim 1024, 16 layers, FFN 2816, 16/8 heads, vocab 32000)
// in /tmp/dspark_bench_pc (written once).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_util.h"
#include "dspark.h"

static int run_one(ds_engine *e, const int32_t *ids, int n, int32_t *out, int n_out, double *ttft) {
    const ds_seq_params sp = {.prompt = ids, .n_prompt = n, .max_new = n_out};
    int id, got = 0;
    const double t0 = bench_now();
    if (ds_engine_add(e, &sp, &id)) return 1;
    *ttft = -1;
    while (!ds_engine_finished(e, id)) {
        if (ds_engine_step(e)) return 1;
        got += ds_engine_take(e, id, out + got, n_out - got);
        if (got && *ttft < 0) *ttft = bench_now() - t0;
    }
    got += ds_engine_take(e, id, out + got, n_out - got);
    for (int i = got; i < n_out; i++) out[i] = -1;
    return ds_engine_remove(e, id) != DS_OK;
}

int main(int argc, char **argv) {
    bench_openblas_reexec(argv);
    bench_shape sh = {1024, 16, 2816, 16, 8, 32000, DS_BF16, 0, 0, NULL};
    const char *model = NULL, *synth = NULL;
    int n_sys = 1500, n_user = 24, R = 8, threads = 1, cache_mb = 1024;
    for (int i = 1; i + 1 < argc; i += 2) {
        const char *o = argv[i], *v = argv[i + 1];
        if (bench_model_option(o, v, &sh, &model, &synth)) continue;
        if (!strcmp(o, "--system")) n_sys = atoi(v);
        else if (!strcmp(o, "--user")) n_user = atoi(v);
        else if (!strcmp(o, "--requests")) R = atoi(v);
        else if (!strcmp(o, "--threads")) threads = atoi(v);
        else if (!strcmp(o, "--cache-mb")) cache_mb = atoi(v);
        else {
            fprintf(stderr, "bench_prompt_cache: unknown option %s\n", o);
            return 2;
        }
    }
    if (!model) {
        if (!synth) synth = "/tmp/dspark_bench_pc";
        if (bench_make_synthetic(synth, &sh)) return 1;
        model = synth;
    }
    ds_set_threads(threads);
    ds_model_params mp = {.n_threads = threads};
    ds_model *m;
    if (ds_model_load(model, &mp, &m)) {
        fprintf(stderr, "bench_prompt_cache: %s\n", ds_last_error());
        return 1;
    }
    const ds_model_info *in = ds_model_get_info(m);
    const int n = n_sys + n_user, n_out = 4;
    if (n + n_out > in->max_ctx) {
        fprintf(stderr, "bench_prompt_cache: %d prompt tokens exceed the model's context of %d\n", n, in->max_ctx);
        return 1;
    }
    ds_engine *e[2];
    for (int c = 0; c < 2; c++) {
        ds_spec_params sp = {.kind = DS_SPEC_NONE, .prompt_cache_bytes = c ? (size_t)cache_mb << 20 : 0};
        if (ds_engine_init(m, NULL, &sp, &e[c])) {
            fprintf(stderr, "bench_prompt_cache: %s\n", ds_last_error());
            return 1;
        }
    }
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)n), out[2][4];
    double *t[2] = {malloc(sizeof(double) * R), malloc(sizeof(double) * R)};
    for (int i = 0; i < n_sys; i++) ids[i] = (int32_t)(1 + (i * 7919u) % (unsigned)(in->vocab_size - 1));
    int same = 1;
    for (int r = 0; r < R; r++) {
        for (int i = 0; i < n_user; i++) ids[n_sys + i] = (int32_t)(1 + ((r + 1) * 104729u + i * 31u) % (unsigned)(in->vocab_size - 1));
        for (int c = 0; c < 2; c++)
            if (run_one(e[c], ids, n, out[c], n_out, &t[c][r])) {
                fprintf(stderr, "bench_prompt_cache: %s\n", ds_last_error());
                return 1;
            }
        same &= !memcmp(out[0], out[1], sizeof out[0]);
    }
    ds_prompt_cache_stats pc;
    ds_engine_prompt_cache(e[1], &pc);
    double med[2], lo[2], hi[2];
    for (int c = 0; c < 2; c++) { // requests 1..R-1 (the first fills the cache)
        qsort(t[c] + 1, (size_t)(R - 1), sizeof(double), bench_cmp_double);
        med[c] = t[c][1 + (R - 1) / 2];
        lo[c] = t[c][1];
        hi[c] = t[c][R - 1];
    }
    printf("{\"bench\": \"prompt_cache\", \"model\": \"%s\", \"threads\": %d, \"system_tokens\": %d, \"user_tokens\": %d, "
           "\"requests\": %d, \"ttft_off_s\": %.4f, \"ttft_off_min\": %.4f, \"ttft_off_max\": %.4f, \"ttft_on_s\": %.4f, "
           "\"ttft_on_min\": %.4f, \"ttft_on_max\": %.4f, \"speedup\": %.2f, \"rows_reused\": %ld, \"cache_bytes\": %zu, "
           "\"identical\": %s}\n",
           in->name, threads, n_sys, n_user, R, med[0], lo[0], hi[0], med[1], lo[1], hi[1], med[0] / med[1], pc.rows_reused,
           pc.bytes, same ? "true" : "false");
    for (int c = 0; c < 2; c++) ds_engine_free(e[c]);
    ds_model_free(m);
    free(ids);
    free(t[0]);
    free(t[1]);
    return same ? 0 : 1;
}
