// dspark profile: measure the target's verification cost table SPS(B) on this machine (the input of
// --schedule auto) and save it as JSON; with -d, also the drafter's cost of drafting one full block.
#include <cjson/cJSON.h>
#include <errno.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/threads.h"
#include "cli.h"
#include "io/json.h"

typedef struct {
    const char *model, *drafter, *out;
    long threads, bmax, ctx, repeats;
    int quick;
} prof_args;

static void prof_usage(FILE *f) {
    fprintf(f,
            "usage: dspark profile [-m TARGET] [-d DRAFTER] [options]\n"
            "  -m, --model PATH   the target (default: stories260K)\n"
            "  -d, --drafter DIR  also time the drafter: one full block after --ctx context rows\n"
            "  -t, --threads N    threads (default: all cores); the table holds for this count only\n"
            "  --bmax B           largest verification batch in tokens (default 64, at most 512)\n"
            "  --ctx C            context rows per sequence (default 256)\n"
            "  --repeats R        timed forwards per point, the median is kept (default 5)\n"
            "  --quick            measure B = 1, 2, 4, ... only and interpolate\n"
            "  -o, --out FILE     output (default: <model file name>.t<N>.costs.json here)\n"
            "SPS(B) is verification steps per second with B new rows in one batched forward (spread\n"
            "over ceil(B/8) sequences, as the engine batches them); tokens/s = B x SPS(B).\n");
}

static int parse_args(int argc, char **argv, prof_args *a) {
    memset(a, 0, sizeof *a);
    a->bmax = 64;
    a->ctx = 256;
    a->repeats = 5;
    for (int i = 1; i < argc; i++) {
        const char *o = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(o, "-h") || !strcmp(o, "--help")) {
            prof_usage(stdout);
            exit(0);
        } else if (!strcmp(o, "--quick")) {
            a->quick = 1;
            continue;
        }
        if (!v) return cli_missing_value(o, "profile", prof_usage);
        i++;
        const int r = cli_run_option(o, v, &a->model, &a->drafter, &a->threads, NULL);
        if (r < 0) return -r;
        if (r) continue;
        if (!strcmp(o, "-o") || !strcmp(o, "--out")) a->out = v;
        else if (!strcmp(o, "--bmax")) {
            if (!cli_parse_int(v, 1, 512, &a->bmax)) return cli_usage_error("--bmax expects 1..512, got '%s'", v);
        } else if (!strcmp(o, "--ctx")) {
            if (!cli_parse_int(v, 1, 1 << 20, &a->ctx))
                return cli_usage_error("--ctx expects a positive count, got '%s'", v);
        } else if (!strcmp(o, "--repeats")) {
            if (!cli_parse_int(v, 1, 1000, &a->repeats))
                return cli_usage_error("--repeats expects 1..1000, got '%s'", v);
        } else {
            return cli_usage_error("unknown option '%s' (see dspark profile --help)", o);
        }
    }
    return 0;
}

// "<file name without directory and extension>.t<N>.costs.json" (a Hugging Face directory gives its
// own name).
static void default_out(const char *model_path, int threads, char *out, size_t cap) {
    char name[1024];
    size_t n = strlen(model_path);
    while (n > 1 && model_path[n - 1] == '/') n--; // "dir/" -> "dir"
    size_t s = n;
    while (s > 0 && model_path[s - 1] != '/') s--;
    size_t len = n - s < sizeof name - 1 ? n - s : sizeof name - 1;
    memcpy(name, model_path + s, len);
    name[len] = 0;
    char *dot = strrchr(name, '.');
    if (dot && dot != name) *dot = 0;
    if (!name[0]) snprintf(name, sizeof name, "model");
    snprintf(out, cap, "%s.t%d.costs.json", name, threads);
}

static int cmp_d(const void *x, const void *y) {
    const double a = *(const double *)x, b = *(const double *)y;
    return a < b ? -1 : a > b;
}

// Median seconds of ds_drafter_draft for a full block after `ctx` committed context rows, whose tap
// rows come from a real target forward over deterministic tokens.
// An allocation failure is reported here (DS_ERR_NOMEM with no library message).
static ds_status time_drafter(const ds_model *m, const ds_drafter *d, int ctx, int repeats, double *out_s,
                              int *ctx_used) {
    const ds_model_info *in = ds_model_get_info(m);
    const ds_drafter_info *di = ds_drafter_get_info(d);
    const int K = di->block_size, tap_w = di->n_taps * di->hidden;
    if (ctx + K + 2 > in->max_ctx) ctx = in->max_ctx - K - 2;
    if (ctx < 1) ctx = 1;
    *ctx_used = ctx;
    ds_kv *kv = NULL;
    ds_workspace *ws = NULL;
    ds_draft_state *s = NULL;
    int32_t *tok = malloc(sizeof(int32_t) * (size_t)ctx), dtok[64];
    float *taps = malloc(sizeof(float) * (size_t)ctx * tap_w);
    float *logits = malloc(sizeof(float) * (size_t)K * di->vocab), conf[64];
    double *t = malloc(sizeof(double) * (size_t)repeats);
    ds_status st = DS_OK;
    if (!tok || !taps || !logits || !t) {
        fprintf(stderr, "dspark: out of memory\n");
        st = DS_ERR_NOMEM;
        goto done;
    }
    for (int i = 0; i < ctx; i++) tok[i] = (int32_t)((i * 7919 + 13) % in->vocab_size);
    if (in->bos_id >= 0) tok[0] = in->bos_id;
    if ((st = ds_kv_init(m, ctx, &kv)) || (st = ds_workspace_init(m, &ws))) goto done;
    ds_forward_seq f = {.kv = kv, .tokens = tok, .n_tokens = ctx, .tap_layers = di->tap_layers, .n_taps = di->n_taps,
                        .taps = taps};
    if ((st = ds_model_forward(m, ws, &f, 1))) goto done;
    if ((st = ds_draft_state_init(d, ctx + K + 1, &s)) || (st = ds_drafter_append(d, s, taps, ctx))) goto done;
    const ds_sampler_params sp = ds_sampler_default(); // greedy
    for (int r = 0; r <= repeats; r++) {             // the first run warms up
        ds_rng rng = ds_rng_init(1, 0);
        const double t0 = cli_now();
        if ((st = ds_drafter_draft(d, s, tok[ctx - 1], K, &sp, &rng, dtok, logits, conf))) goto done;
        if (r) t[r - 1] = cli_now() - t0;
    }
    qsort(t, (size_t)repeats, sizeof *t, cmp_d);
    *out_s = t[repeats / 2];
done:
    ds_draft_state_free(s);
    ds_workspace_free(ws);
    ds_kv_free(kv);
    free(tok);
    free(taps);
    free(logits);
    free(t);
    return st;
}

int cmd_profile(int argc, char **argv) {
    prof_args a;
    int rc = parse_args(argc, argv, &a);
    if (rc) return rc;
    const char *path = cli_model_path(a.model);
    if (!path) return 1;
    ds_model *m = NULL;
    ds_drafter *d = NULL;
    cJSON *j = NULL;
    ds_model_params mp = {.n_threads = (int)a.threads};
    ds_status st = ds_model_load(path, &mp, &m);
    if (st) return cli_fail(st);
    const int threads = a.threads ? (int)a.threads : ds_threads();
    if (a.drafter) {
        if ((st = ds_drafter_load(a.drafter, m, &d))) goto fail;
        if (ds_drafter_warning(d)) fprintf(stderr, "dspark: warning: %s\n", ds_drafter_warning(d));
    }
    char out[4096];
    if (a.out) snprintf(out, sizeof out, "%s", a.out);
    else default_out(path, threads, out, sizeof out);
    if (!cli_check_writable(out)) {
        ds_drafter_free(d);
        ds_model_free(m);
        return 1;
    }

    const ds_model_info *in = ds_model_get_info(m);
    fprintf(stderr, "dspark: profiling %s with %d threads: B = 1..%ld, %ld context rows, median of %ld%s\n", in->name,
            threads, a.bmax, a.ctx, a.repeats, a.quick ? " (quick: powers of two, interpolated)" : "");
    ds_cost_table t;
    if ((st = ds_profile_costs(m, (int)a.bmax, (int)a.ctx, (int)a.repeats, a.quick, &t))) goto fail;
    double draft_s = 0;
    int draft_ctx = 0;
    if (d && (st = time_drafter(m, d, (int)a.ctx, (int)a.repeats, &draft_s, &draft_ctx))) {
        if (st == DS_ERR_NOMEM) goto quit; // already reported
        goto fail;
    }
    if ((st = ds_cost_table_save(&t, in->name, threads, out))) goto fail;
    if (d) {
        // ds_cost_table_save writes the table; the drafter's cost is added to the same file.
        if ((st = ds_json_load(out, 1 << 24, &j))) goto fail;
        cJSON_AddNumberToObject(j, "draft_round_s", draft_s);
        cJSON_AddNumberToObject(j, "draft_block", ds_drafter_get_info(d)->block_size);
        cJSON_AddStringToObject(j, "drafter", a.drafter);
        if ((st = ds_json_save(j, out))) goto fail;
    }

    printf("cost table of %s, %d threads (%s)\n", in->name, threads, a.quick ? "quick" : "every B measured");
    printf("%5s %12s %12s %10s\n", "B", "SPS", "tokens/s", "ms/step");
    for (int b = 1; b <= t.bmax; b++)
        printf("%5d %12.1f %12.1f %10.4f\n", b, t.sps[b], b * t.sps[b], 1e3 / t.sps[b]);
    if (d)
        printf("drafter %s: %.4f ms per round (block of %d after %d context rows; median of %ld)\n", a.drafter,
               draft_s * 1e3, ds_drafter_get_info(d)->block_size, draft_ctx, a.repeats);
    printf("written to %s\n", out);
    cJSON_Delete(j);
    ds_drafter_free(d);
    ds_model_free(m);
    return 0;
fail:
    rc = cli_fail(st);
    cJSON_Delete(j);
    ds_drafter_free(d);
    ds_model_free(m);
    return rc;
quit:
    cJSON_Delete(j);
    ds_drafter_free(d);
    ds_model_free(m);
    return 1;
}
