// Test tool for the statistical losslessness test (tests/reference/test_spec_sampling.py): run the
// engine from a fixed prompt with many seeds and count the first `gen` generated tokens.
//   ds_spec_sample MODEL --prompt-ids 1,2,3 [--drafter DIR] [--spec none|dspark|ngram] [--draft-max K]
//                  [--temp T --top-k K --top-p P --min-p M] [--verify coupled|residual]
//                  [--presence P --frequency F --bias ID:B,ID:B] --seeds N [--seed0 S]
//                  [--gen 2] [--batch R] [--grammar GBNF]
// Prints one line per distinct outcome: "count t1 t2 ..." (-1 where the sequence ended at EOS).
// --batch R runs R sequences at a time through one engine (the batched path).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dspark.h"
#include "tool_util.h"

static int die(const char *what) {
    fprintf(stderr, "ds_spec_sample: %s: %s\n", what, ds_last_error());
    return 1;
}

typedef struct {
    int32_t key[4];
    int count;
} outcome;

static int cmp_outcome(const void *a, const void *b) {
    return memcmp(((const outcome *)a)->key, ((const outcome *)b)->key, sizeof(((const outcome *)a)->key));
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: ds_spec_sample MODEL --prompt-ids IDS --seeds N [options]\n");
        return 2;
    }
    int prompt[4096], n_prompt = 0;
    const char *drafter = NULL;
    ds_spec_params spec = {0};
    ds_sampler_params sp = ds_sampler_default();
    sp.temperature = 1.0f;
    long seeds = 0, seed0 = 0;
    ds_logit_bias bias[64];
    int n_bias = 0;
    int gen = 2, batch = 1;
    const char *grammar = NULL;
    for (int i = 2; i + 1 < argc; i += 2) {
        const char *o = argv[i];
        char *v = argv[i + 1];
        if (!strcmp(o, "--prompt-ids")) n_prompt = parse_list(v, prompt, 4096);
        else if (!strcmp(o, "--drafter")) drafter = v;
        else if (!strcmp(o, "--spec")) spec.kind = !strcmp(v, "dspark") ? DS_SPEC_DSPARK : !strcmp(v, "ngram") ? DS_SPEC_NGRAM : DS_SPEC_NONE;
        else if (!strcmp(o, "--draft-max")) spec.draft_max = atoi(v);
        else if (!strcmp(o, "--temp")) sp.temperature = (float)atof(v);
        else if (!strcmp(o, "--top-k")) sp.top_k = atoi(v);
        else if (!strcmp(o, "--top-p")) sp.top_p = (float)atof(v);
        else if (!strcmp(o, "--min-p")) sp.min_p = (float)atof(v);
        else if (!strcmp(o, "--verify")) sp.verify = !strcmp(v, "residual") ? DS_VERIFY_RESIDUAL : DS_VERIFY_COUPLED;
        else if (!strcmp(o, "--presence")) sp.presence_penalty = (float)atof(v);
        else if (!strcmp(o, "--frequency")) sp.frequency_penalty = (float)atof(v);
        else if (!strcmp(o, "--bias")) { // id:bias,id:bias
            for (char *t = strtok(v, ","); t && n_bias < 64; t = strtok(NULL, ","))
                bias[n_bias++] = (ds_logit_bias){(int32_t)atoi(t), (float)atof(strchr(t, ':') ? strchr(t, ':') + 1 : "0")};
            sp.logit_bias = bias;
            sp.n_logit_bias = n_bias;
        }
        else if (!strcmp(o, "--seeds")) seeds = atol(v);
        else if (!strcmp(o, "--seed0")) seed0 = atol(v);
        else if (!strcmp(o, "--gen")) gen = atoi(v);
        else if (!strcmp(o, "--grammar")) grammar = v;
        else if (!strcmp(o, "--batch")) batch = atoi(v);
        else if (!strcmp(o, "--tree")) spec.tree_branches = atoi(v);
        else if (!strcmp(o, "--tree-depth")) spec.tree_depth = atoi(v);
        else {
            fprintf(stderr, "ds_spec_sample: unknown option %s\n", o);
            return 2;
        }
    }
    if (n_prompt <= 0 || seeds <= 0 || gen < 1 || gen > 4 || batch < 1) {
        fprintf(stderr, "ds_spec_sample: need --prompt-ids, --seeds > 0, --gen 1..4, --batch >= 1\n");
        return 2;
    }
    ds_model *m;
    ds_drafter *d = NULL;
    ds_model_params mp = {.n_threads = 1};
    if (ds_model_load(argv[1], &mp, &m)) return die("model");
    if (drafter && ds_drafter_load(drafter, m, &d)) return die("drafter");
    ds_engine *e;
    if (ds_engine_init(m, d, &spec, &e)) return die("engine");
    outcome *out = calloc((size_t)seeds, sizeof *out);
    int32_t got[64];
    int *ids = malloc(sizeof(int) * batch);
    for (long s0 = 0; s0 < seeds; s0 += batch) {
        const int r = seeds - s0 < batch ? (int)(seeds - s0) : batch;
        for (int j = 0; j < r; j++)
            if (ds_engine_add(e, &(ds_seq_params){.prompt = prompt, .n_prompt = n_prompt, .max_new = gen, .sp = &sp,
                    .seed = (uint64_t)(seed0 + s0 + j), .batch_invariant = 1, .grammar = grammar}, &ids[j])) return die("add");
        while (ds_engine_active(e))
            if (ds_engine_step(e)) return die("step");
        for (int j = 0; j < r; j++) {
            const int n = ds_engine_take(e, ids[j], got, 64);
            outcome *o = &out[s0 + j];
            for (int k = 0; k < 4; k++) o->key[k] = k < n ? got[k] : -1; // -1: ended early (EOS)
            o->count = 1;
            ds_engine_remove(e, ids[j]);
        }
    }
    qsort(out, (size_t)seeds, sizeof *out, cmp_outcome);
    for (long i = 0; i < seeds;) {
        long j = i;
        while (j < seeds && !cmp_outcome(&out[i], &out[j])) j++;
        printf("%ld", j - i);
        for (int k = 0; k < gen; k++) printf(" %d", out[i].key[k]);
        printf("\n");
        i = j;
    }
    free(out);
    free(ids);
    ds_engine_free(e);
    ds_drafter_free(d);
    ds_model_free(m);
    return 0;
}
