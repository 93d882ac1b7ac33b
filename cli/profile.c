// dspark profile: measure the target's verification cost table SPS(B) on this machine (the input of
// --schedule auto) and save it as JSON; with -d, also the drafter's cost of drafting one full block.
// The job is ds_profile_run (include/dspark_jobs.h, src/jobs/profile.c).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

typedef struct {
    const char *model, *drafter, *out;
    long threads, bmax, ctx, repeats;
    int quick;
} prof_args;

#define A prof_args
static const cli_opt prof_opts[] = {
    CLI_OPT_MODEL(A, model, .help = "the target (default: stories260K)"),
    CLI_OPT_DRAFTER(A, drafter, .help = "also time the drafter: one full block after --ctx context rows"),
    CLI_OPT_THREADS(A, threads, .help = "threads (default: all cores); the table holds for this count only"),
    CLI_OPT_LONG("--bmax", "B", A, bmax, 1, 512, "largest verification batch in tokens (default 64, at most 512)"),
    {.names = "--ctx", .arg = "C", .type = CLI_LONG, .off = CLI_AT_LONG(A, ctx), .lo = 1, .hi = 1 << 20,
     .expects = "a positive count", .help = "context rows per sequence (default 256)"},
    CLI_OPT_LONG("--repeats", "R", A, repeats, 1, 1000, "timed forwards per point, the median is kept (default 5)"),
    CLI_OPT_FLAG("--quick", A, quick, "measure B = 1, 2, 4, ... only and interpolate"),
    CLI_OPT_STR("-o|--out", "FILE", A, out, "output (default: <model file name>.t<N>.costs.json here)"),
    CLI_OPT_TEXT("SPS(B) is verification steps per second with B new rows in one batched forward (spread\n"
                 "over ceil(B/8) sequences, as the engine batches them); tokens/s = B x SPS(B)."),
    {0},
};
#undef A

const cli_command cli_profile_cmd = {.name = "profile",
    .summary = "measure the target's verification cost table SPS(B) for --schedule auto",
    .usage = "usage: dspark profile [-m TARGET] [-d DRAFTER] [options]", .col = 21, .opts = prof_opts};

static int parse_args(int argc, char **argv, prof_args *a) {
    memset(a, 0, sizeof *a);
    a->bmax = 64;
    a->ctx = 256;
    a->repeats = 5;
    return cli_parse(&cli_profile_cmd, argc, argv, a);
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

int cmd_profile(int argc, char **argv) {
    prof_args a;
    int rc = parse_args(argc, argv, &a);
    if (rc) return rc == CLI_HELP ? 0 : rc;
    const char *path = cli_model_path(a.model);
    if (!path) return 1;
    ds_model *m = NULL;
    ds_drafter *d = NULL;
    ds_set_threads((int)a.threads);
    ds_model_params mp;
    if (cli_model_params(a.threads, &mp)) return 1;
    ds_status st = ds_model_load(path, &mp, &m);
    if (st) return cli_fail(st);
    const int threads = ds_threads(); // what the table holds for
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
    ds_profile_params o = ds_profile_default();
    o.bmax = (int)a.bmax;
    o.ctx = (int)a.ctx;
    o.repeats = (int)a.repeats;
    o.quick = a.quick;
    o.out = out;
    o.drafter_name = a.drafter;
    ds_profile_result r;
    if ((st = ds_profile_run(m, d, &o, &r))) goto fail;
    const ds_cost_table *t = &r.costs;
    printf("cost table of %s, %d threads (%s)\n", in->name, r.threads, a.quick ? "quick" : "every B measured");
    printf("%5s %12s %12s %10s\n", "B", "SPS", "tokens/s", "ms/step");
    for (int b = 1; b <= t->bmax; b++)
        printf("%5d %12.1f %12.1f %10.4f\n", b, t->sps[b], b * t->sps[b], 1e3 / t->sps[b]);
    if (d)
        printf("drafter %s: %.4f ms per round (block of %d after %d context rows; median of %ld)\n", a.drafter,
               r.draft_s * 1e3, r.draft_block, r.draft_ctx, a.repeats);
    printf("written to %s\n", out);
    ds_drafter_free(d);
    ds_model_free(m);
    return 0;
fail:
    rc = cli_fail(st);
    ds_drafter_free(d);
    ds_model_free(m);
    return rc;
}
