// Test tool: greedy generation from token ids through the engine, and the model's stop ids.
//   ds_greedy MODEL --prompt-ids 1,2,3 -n N [--drafter DIR]   prints the generated ids, then
//                                                            "stopped" or "max" on a second line
//   ds_greedy MODEL --stops                                   prints every id with ds_model_is_stop
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dspark.h"
#include "tool_util.h"

static int die(const char *what) {
    fprintf(stderr, "ds_greedy: %s: %s\n", what, ds_last_error());
    return 1;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: ds_greedy MODEL (--prompt-ids IDS -n N [--drafter DIR] | --stops)\n");
        return 2;
    }
    static int prompt[4096];
    int n_prompt = 0, n = 0, stops = 0;
    const char *drafter = NULL;
    for (int i = 2; i < argc; i++) {
        if (!strcmp(argv[i], "--stops")) stops = 1;
        else if (i + 1 < argc && !strcmp(argv[i], "--prompt-ids")) n_prompt = parse_list(argv[++i], prompt, 4096);
        else if (i + 1 < argc && !strcmp(argv[i], "-n")) n = atoi(argv[++i]);
        else if (i + 1 < argc && !strcmp(argv[i], "--drafter")) drafter = argv[++i];
        else {
            fprintf(stderr, "ds_greedy: unknown option %s\n", argv[i]);
            return 2;
        }
    }
    ds_model *m;
    ds_model_params mp = {.n_threads = 1};
    if (ds_model_load(argv[1], &mp, &m)) return die("model");
    if (stops) {
        for (int id = 0; id < ds_model_get_info(m)->vocab_size; id++)
            if (ds_model_is_stop(m, id)) printf("%d\n", id);
        ds_model_free(m);
        return 0;
    }
    if (n_prompt <= 0 || n <= 0 || n > 4096) {
        fprintf(stderr, "ds_greedy: need --prompt-ids and -n 1..4096\n");
        return 2;
    }
    ds_drafter *d = NULL;
    if (drafter && ds_drafter_load(drafter, m, &d)) return die("drafter");
    ds_spec_params spec = {0};
    spec.kind = d ? DS_SPEC_DSPARK : DS_SPEC_NONE;
    ds_sampler_params sp = ds_sampler_default();
    sp.temperature = 0;
    ds_engine *e;
    int id;
    if (ds_engine_init(m, d, &spec, &e)) return die("engine");
    if (ds_engine_add(e, &(ds_seq_params){.prompt = prompt, .n_prompt = n_prompt, .max_new = n, .sp = &sp,
            .seed = 0, .batch_invariant = 1}, &id)) return die("add");
    while (ds_engine_active(e))
        if (ds_engine_step(e)) return die("step");
    int32_t *got = malloc(sizeof(int32_t) * (size_t)n);
    const int k = ds_engine_take(e, id, got, n);
    for (int i = 0; i < k; i++) printf(i ? ",%d" : "%d", got[i]);
    printf("\n%s\n", k < n ? "stopped" : "max");
    free(got);
    ds_engine_free(e);
    ds_drafter_free(d);
    ds_model_free(m);
    return 0;
}
