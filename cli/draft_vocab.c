// dspark draft-vocab: restrict a drafter to the target's most frequent tokens (draft_vocab.json in
// the drafter's directory, loaded with it): its LM head and Markov head then cost k/vocab of the
// full products. Decoding stays lossless; acceptance can drop (measure it with dspark eval).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static void dv_usage(FILE *f) {
    fprintf(f,
            "usage: dspark draft-vocab [-m TARGET] -d DRAFTER --data FILE -k K\n"
            "  -m, --model PATH   the target the drafter is paired with (default: stories260K)\n"
            "  -d, --drafter DIR  the drafter; DIR/draft_vocab.json is written (replaced)\n"
            "  --data FILE        datagen output: the target's own text, whose response tokens are counted\n"
            "  -k K               how many of the most frequent tokens the drafter may propose\n"
            "  --full             remove DIR/draft_vocab.json (the full vocabulary again)\n");
}

int cmd_draft_vocab(int argc, char **argv) {
    const char *model = NULL, *drafter = NULL, *data = NULL;
    long k = 0;
    int full = 0;
    for (int i = 1; i < argc; i++) {
        const char *o = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(o, "-h") || !strcmp(o, "--help")) {
            dv_usage(stdout);
            return 0;
        }
        if (!strcmp(o, "--full")) {
            full = 1;
            continue;
        }
        if (!v) return cli_usage_error("option %s needs a value", o);
        i++;
        const int r = cli_run_option(o, v, &model, &drafter, NULL, NULL);
        if (r < 0) return -r;
        if (r) continue;
        if (!strcmp(o, "--data")) data = v;
        else if (!strcmp(o, "-k")) {
            if (!cli_parse_int(v, 1, 1 << 30, &k)) return cli_usage_error("-k expects a positive count, got '%s'", v);
        } else {
            return cli_usage_error("unknown option '%s' (see dspark draft-vocab --help)", o);
        }
    }
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
