// Speculative decoding on stories260K: rounds/s, the per-round split between drafting and
// verification, τ, and tokens/s against plain decoding (--spec none) measured in the same run.
//   bench_spec MODEL DRAFTER_DIR [-n TOKENS] [--repeats R]
// DRAFTER_DIR: a drafter paired with MODEL (scripts/bench.sh makes a fresh 5-layer one with
// `dspark init-drafter`; an untrained drafter is accepted ~never, so its line measures the cost
// side of speculation: what a round costs relative to a plain decode step).
// Prints one JSON object per strategy.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench_util.h"
#include "dspark.h"
#include "kernels/matmul.h"

typedef struct {
    double tok_s, rounds_s, tau, draft_ms_per_round, verify_ms_per_round;
} result;

static int run(ds_model *m, ds_drafter *d, ds_spec_kind kind, const int32_t *prompt, int n_prompt, int n, int reps,
               result *out) {
    ds_spec_params sp = {.kind = kind};
    ds_sampler_params smp = ds_sampler_default();
    double best = 0;
    for (int r = 0; r < reps; r++) {
        ds_engine *e;
        int id;
        if (ds_engine_init(m, d, &sp, &e) || ds_engine_add(e, &(ds_seq_params){.prompt = prompt, .n_prompt = n_prompt, .max_new = n, .sp = &smp,
                .seed = 1, .batch_invariant = 1}, &id)) return 1;
        const double t0 = bench_now();
        while (ds_engine_active(e))
            if (ds_engine_step(e)) return 1;
        const double dt = bench_now() - t0;
        const ds_seq_stats *t = ds_engine_stats(e, id);
        if (t->generated / dt > best) {
            best = t->generated / dt;
            out->tok_s = best;
            out->rounds_s = t->rounds / dt;
            out->tau = t->tau;
            out->draft_ms_per_round = 1e3 * t->draft_s / t->rounds;
            out->verify_ms_per_round = 1e3 * t->verify_s / t->rounds;
        }
        ds_engine_free(e);
    }
    return 0;
}

int main(int argc, char **argv) {
    bench_openblas_reexec(argv);
    if (argc < 3) {
        fprintf(stderr, "usage: bench_spec MODEL DRAFTER_DIR [-n TOKENS] [--repeats R]\n");
        return 2;
    }
    int n = 256, reps = 5;
    for (int i = 3; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "-n")) n = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--repeats")) reps = atoi(argv[i + 1]);
    }
    ds_model *m;
    ds_drafter *d;
    ds_model_params mp = {.n_threads = 1};
    if (ds_model_load(argv[1], &mp, &m) || ds_drafter_load(argv[2], m, &d)) {
        fprintf(stderr, "bench_spec: %s\n", ds_last_error());
        return 1;
    }
    const ds_tokenizer *tok = ds_model_tokenizer(m);
    const char *story = "Once upon a time";
    const char *repetitive = "One, two, three, four. One, two, three, four. One, two, three, four. One, two, three,";
    const char *texts[2] = {story, repetitive};
    for (int p = 0; p < 2; p++) {
        int32_t prompt[256];
        int np = 0;
        if (ds_tokenize(tok, texts[p], strlen(texts[p]), 1, prompt, 256, &np)) return 1;
        result base, r;
        if (run(m, NULL, DS_SPEC_NONE, prompt, np, n, reps, &base)) return 1;
        const ds_spec_kind kinds[2] = {DS_SPEC_DSPARK, DS_SPEC_NGRAM};
        const char *names[2] = {"dspark", "ngram"};
        for (int k = 0; k < 2; k++) {
            if (run(m, kinds[k] == DS_SPEC_DSPARK ? d : NULL, kinds[k], prompt, np, n, reps, &r)) {
                fprintf(stderr, "bench_spec: %s\n", ds_last_error());
                return 1;
            }
            printf("{\"bench\": \"spec\", \"prompt\": \"%s\", \"spec\": \"%s\", \"drafter_layers\": %d, \"tokens\": %d, "
                   "\"rounds_per_s\": %.1f, \"tau\": %.3f, \"draft_ms_per_round\": %.4f, \"verify_ms_per_round\": %.4f, "
                   "\"tok_per_s\": %.1f, \"none_tok_per_s\": %.1f, \"speedup_vs_none\": %.3f}\n",
                   p ? "repetitive" : "story", names[k], ds_drafter_get_info(d)->n_layers, n, r.rounds_s, r.tau,
                   r.draft_ms_per_round, r.verify_ms_per_round, r.tok_s, base.tok_s, r.tok_s / base.tok_s);
            fflush(stdout);
        }
    }
    ds_drafter_free(d);
    ds_model_free(m);
    return 0;
}
