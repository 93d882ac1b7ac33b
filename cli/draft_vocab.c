// dspark draft-vocab: restrict a drafter to the target's most frequent tokens (draft_vocab.json in
// the drafter's directory, loaded with it): its LM head and Markov head then cost k/vocab of the
// full products. Decoding stays lossless; acceptance can drop (measure it with dspark eval).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

typedef struct {
    const char *model, *drafter, *data;
    long k;
    int full; // --full
} dv_args;

#define A dv_args
static const cli_opt dv_opts[] = {
    CLI_OPT_MODEL(A, model, .help = "the target the drafter is paired with (default: stories260K)"),
    CLI_OPT_DRAFTER(A, drafter, .help = "the drafter; DIR/draft_vocab.json is written (replaced)"),
    CLI_OPT_STR("--data", "FILE", A, data, "datagen output: the target's own text, whose response tokens are counted"),
    {.names = "-k", .arg = "K", .type = CLI_LONG, .off = CLI_AT_LONG(A, k), .lo = 1, .hi = 1 << 30,
     .expects = "a positive count", .help = "how many of the most frequent tokens the drafter may propose"},
    CLI_OPT_FLAG("--full", A, full, "remove DIR/draft_vocab.json (the full vocabulary again)"),
    {0},
};
#undef A

const cli_command cli_draft_vocab_cmd = {.name = "draft-vocab",
    .summary = "let the drafter propose only the target's k most frequent tokens (cheaper drafting)",
    .usage = "usage: dspark draft-vocab [-m TARGET] -d DRAFTER --data FILE -k K", .col = 21, .opts = dv_opts};

int cmd_draft_vocab(int argc, char **argv) {
    dv_args a = {0};
    const int prc = cli_parse(&cli_draft_vocab_cmd, argc, argv, &a);
    if (prc) return prc == CLI_HELP ? 0 : prc;
    const char *model = a.model, *drafter = a.drafter, *data = a.data;
    const long k = a.k;
    const int full = a.full;
    if (!drafter) return cli_usage_error("draft-vocab needs -d DRAFTER");
    char path[4200];
    snprintf(path, sizeof path, "%s/draft_vocab.json", drafter);
    if (full) {
        if (remove(path) != 0) return cli_usage_error("%s: nothing to remove", path);
        printf("removed %s: the drafter proposes from the full vocabulary\n", path);
        return 0;
    }
    if (!data || !k) return cli_usage_error("draft-vocab needs --data FILE and -k K (or --full)");
    const char *mp = cli_model_path(model);
    if (!mp) return 1;
    ds_model *m;
    ds_status st = ds_model_load(mp, NULL, &m);
    if (st) return cli_fail(st);
    ds_drafter *d = cli_load_drafter(drafter, m);
    ds_data *dd = NULL;
    int32_t *ids = NULL;
    int n = 0, rc = 1;
    size_t covered = 0, total = 0;
    if (!d) goto done;
    if ((st = ds_data_open(data, &dd))) {
        rc = cli_fail(st);
        goto done;
    }
    const int V = ds_drafter_get_info(d)->vocab;
    if (ds_data_vocab(dd) != (uint64_t)V) {
        fprintf(stderr, "dspark: %s: vocabulary %llu, the drafter's is %d\n", data,
                (unsigned long long)ds_data_vocab(dd), V);
        goto done;
    }
    ids = malloc(sizeof(int32_t) * (size_t)(k < V ? k : V));
    if (!ids || (st = ds_data_top_tokens(dd, (int)(k < V ? k : V), ids, &n, &covered, &total)) ||
        (st = ds_drafter_set_vocab(d, ids, n)) || (st = ds_drafter_save_vocab(drafter, ids, n))) {
        rc = cli_fail(ids ? st : DS_ERR_NOMEM);
        goto done;
    }
    printf("wrote %s: %d of %d token ids, covering %.2f%% of the %zu response tokens of %s\n", path, n, V,
           total ? 100.0 * (double)covered / (double)total : 0.0, total, data);
    rc = 0;
done:
    free(ids);
    ds_data_close(dd);
    ds_drafter_free(d);
    ds_model_free(m);
    return rc;
}
