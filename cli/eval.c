// dspark eval: speculative decoding over a prompt set against plain decoding in the same run (same
// prompts, same seeds, the same concurrency): τ, acceptance by position, tokens/s and the speedup.
// With --concurrency R, R prompts at a time share ONE engine (a new prompt joins as soon as one
// finishes), and both total and per-request tokens/s are reported. At temperature 0, and when
// sampling under the coupled rule (whose output is the seed's, whatever the drafter), every prompt's
// tokens must equal the baseline's (a free losslessness check). The job is ds_eval_run
// (include/dspark_jobs.h, src/jobs/eval.c); this file parses its options and prints its result.
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

typedef struct {
    const char *model, *drafter, *prompts;
    long max_tokens, threads, seed, concurrency;
    ds_sampler_params sp;
    ds_spec_params spec;
    ds_cost_table costs;
    unsigned given; // CLI_SPEC_GIVEN | CLI_SCHEDULE_GIVEN
    int json;
} ev_args;

#define A ev_args
static const cli_opt ev_opts[] = {
    CLI_OPT_MODEL(A, model, .help = "the target (default: stories260K)"),
    CLI_OPT_DRAFTER(A, drafter, .help = "a DeepSpec drafter paired with the target"),
    CLI_OPT_SPEC(A, spec, .help = "none | dspark | ngram (default: dspark with -d, else none)"),
    CLI_OPT_STR("--prompts", "FILE", A, prompts, "one prompt per line: plain text, or a JSON object with a \"prompt\" string"),
    {.names = "--max-tokens", .arg = "L", .type = CLI_LONG, .off = CLI_AT_LONG(A, max_tokens), .lo = 1, .hi = 1 << 24,
     .expects = "a positive count", .help = "tokens generated per prompt (default 128; fewer at EOS)"},
    CLI_OPT_TEMP(A, sp, .help = "temperature; 0 = greedy (default 0); greedy and --verify coupled\n"
                                "outputs are checked token for token against plain decoding"),
    CLI_OPT_TOP_K(A, sp, .show = "--top-k K, --top-p P, --min-p M", .help = "  sampling filters (defaults off)"),
    CLI_OPT_TOP_P(A, sp, .help = NULL),
    CLI_OPT_MIN_P(A, sp, .help = NULL),
    CLI_OPT_PENALTIES(A, sp, .flags = CLI_UNDOCUMENTED),
    CLI_OPT_LOGIT_BIAS(A, sp, .flags = CLI_REPEATABLE | CLI_UNDOCUMENTED),
    CLI_OPT_VERIFY(A, sp.verify, .show = "--verify coupled|residual",
                   .help = "        how sampled drafts are verified (default coupled)"),
    CLI_OPT_DRAFT_MAX(A, spec, .help = "most drafted tokens verified per round"),
    CLI_OPT_CONF_THRESHOLD(A, spec, .help = "verify the slots before the first whose confidence is below C"),
    CLI_OPT_SCHEDULE(A, spec, .help = "fixed | threshold | auto (Algorithm 1; default: threshold with\n"
                                      "--conf-threshold, else fixed)"),
    CLI_OPT_COSTS(A, costs, .help = "cost table for --schedule auto (dspark profile); default: profile now"),
    CLI_OPT_LONG("--concurrency", "R", A, concurrency, 1, 4096, "R prompts at a time through one engine (default 1)"),
    CLI_OPT_NGRAM(A, spec, .help = "ngram match length (default 3)"),
    CLI_OPT_TREE(A, spec, .help = "token trees: up to N side branches per round (0 = chains, default)"),
    CLI_OPT_TREE_DEPTH(A, spec, .help = "slots each branch continues (default 2)"),
    CLI_OPT_CACHE_MB(A, spec, .flags = CLI_UNDOCUMENTED),
    CLI_OPT_SEED(A, seed, LONG, .help = "prompt i uses seed S + i in both runs (default 0)"),
    CLI_OPT_THREADS(A, threads, .help = "threads (default: all cores)"),
    CLI_OPT_FLAG("--json", A, json, "one JSON object instead of the table"),
    CLI_OPT_TEXT("Every prompt runs with the requested drafting and with plain decoding (--spec none), R\n"
                 "requests at a time in both. tok/s: all generated tokens / the time in engine rounds (prefill\n"
                 "excluded); per-request tok/s: the mean over requests of generated tokens / the request's time\n"
                 "from joining (its prefill included) to finishing."),
    {0},
};
#undef A

const cli_command cli_eval_cmd = {.name = "eval",
    .summary = "measure speculative decoding against plain decoding on a prompt set",
    .usage = "usage: dspark eval [-m TARGET] [-d DRAFTER] [--spec none|dspark|ngram] --prompts FILE [options]",
    .col = 23, .opts = ev_opts, .given_off = offsetof(ev_args, given)};

static int parse_args(int argc, char **argv, ev_args *a) {
    memset(a, 0, sizeof *a);
    a->max_tokens = 128;
    a->concurrency = 1;
    a->sp = ds_sampler_default();
    const int rc = cli_parse(&cli_eval_cmd, argc, argv, a);
    if (rc) return rc;
    if (!a->prompts) return cli_usage_error("eval needs a prompt file (--prompts FILE)");
    return cli_spec_finish(&a->spec, &a->costs, a->given, a->drafter);
}

static const char *schedule_name(ds_schedule_kind k) {
    return k == DS_SCHEDULE_AUTO ? "auto" : k == DS_SCHEDULE_THRESHOLD ? "threshold" : "fixed";
}

static double tau_of(const ds_eval_totals *t) { return t->rounds ? (double)(t->accepted + t->rounds) / (double)t->rounds : 0; }
static double rate_of(const ds_eval_totals *t) { return t->step_s > 0 ? (double)t->generated / t->step_s : 0; }
static double request_rate_of(const ds_eval_totals *t) { return t->requests ? t->request_rate / (double)t->requests : 0; }

static void print_json(const ev_args *a, int n_prompts, const ds_eval_totals *s, const ds_eval_totals *b, int checked) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "spec", cli_spec_name(a->spec.kind));
    cJSON_AddStringToObject(o, "schedule", schedule_name(a->spec.schedule));
    cJSON_AddNumberToObject(o, "concurrency", (double)a->concurrency);
    cJSON_AddNumberToObject(o, "prompts", n_prompts);
    cJSON_AddNumberToObject(o, "rounds", (double)s->rounds);
    cJSON_AddNumberToObject(o, "tau", tau_of(s));
    cJSON *acc = cJSON_AddArrayToObject(o, "acceptance_by_position");
    for (int k = 0; k < 64 && s->tried_by_pos[k]; k++)
        cJSON_AddItemToArray(acc, cJSON_CreateNumber((double)s->accepted_by_pos[k] / (double)s->tried_by_pos[k]));
    cJSON_AddNumberToObject(o, "generated_tokens", (double)s->generated);
    cJSON_AddNumberToObject(o, "drafted", (double)s->drafted);
    cJSON_AddNumberToObject(o, "accepted", (double)s->accepted);
    if (a->spec.tree_branches) {
        cJSON_AddNumberToObject(o, "tree_rounds", (double)s->tree_rounds);
        cJSON_AddNumberToObject(o, "branch_accepted", (double)s->branch_accepted);
    }
    cJSON_AddNumberToObject(o, "tok_per_s", rate_of(s));
    cJSON_AddNumberToObject(o, "baseline_tok_per_s", rate_of(b));
    cJSON_AddNumberToObject(o, "baseline_generated_tokens", (double)b->generated);
    cJSON_AddNumberToObject(o, "speedup", rate_of(b) > 0 ? rate_of(s) / rate_of(b) : 0);
    cJSON_AddNumberToObject(o, "request_tok_per_s", request_rate_of(s));
    cJSON_AddNumberToObject(o, "baseline_request_tok_per_s", request_rate_of(b));
    cJSON_AddNumberToObject(o, "request_speedup", request_rate_of(b) > 0 ? request_rate_of(s) / request_rate_of(b) : 0);
    cJSON_AddNumberToObject(o, "draft_ms", s->draft_s * 1e3);
    cJSON_AddNumberToObject(o, "step_ms", s->step_s * 1e3);
    cJSON_AddNumberToObject(o, "baseline_step_ms", b->step_s * 1e3);
    cJSON_AddNumberToObject(o, "temp", a->sp.temperature);
    cJSON_AddBoolToObject(o, "lossless_checked", checked);
    char *str = cJSON_PrintUnformatted(o);
    if (str) puts(str);
    free(str);
    cJSON_Delete(o);
}

static void print_table(const ev_args *a, int n_prompts, const ds_eval_totals *s, const ds_eval_totals *b, int checked) {
    printf("eval: %d prompts, spec %s, schedule %s, temp %g, up to %ld tokens each, concurrency %ld\n", n_prompts,
           cli_spec_name(a->spec.kind), schedule_name(a->spec.schedule), (double)a->sp.temperature, a->max_tokens,
           a->concurrency);
    printf("%-16s %10s %8s %7s %11s %13s\n", "", "tokens", "rounds", "tau", "tok/s", "request tok/s");
    printf("%-16s %10ld %8ld %7.3f %11.1f %13.1f\n", cli_spec_name(a->spec.kind), s->generated, s->rounds, tau_of(s),
           rate_of(s), request_rate_of(s));
    printf("%-16s %10ld %8ld %7.3f %11.1f %13.1f\n", "none (baseline)", b->generated, b->rounds, tau_of(b), rate_of(b),
           request_rate_of(b));
    printf("speedup %.3fx (per request %.3fx)\n", rate_of(b) > 0 ? rate_of(s) / rate_of(b) : 0.0,
           request_rate_of(b) > 0 ? request_rate_of(s) / request_rate_of(b) : 0.0);
    if (s->tried_by_pos[0]) {
        printf("acceptance by position:");
        for (int k = 0; k < 64 && s->tried_by_pos[k]; k++)
            printf(" %.3f", (double)s->accepted_by_pos[k] / (double)s->tried_by_pos[k]);
        printf("\n");
    }
    if (a->spec.tree_branches)
        printf("token trees in %ld rounds; the accepted path took a branch in %ld\n", s->tree_rounds, s->branch_accepted);
    if (checked) printf("lossless: every prompt's tokens equal plain decoding's\n");
}

int cmd_eval(int argc, char **argv) {
    ev_args a;
    int rc = parse_args(argc, argv, &a);
    if (rc) return rc == CLI_HELP ? 0 : rc;
    ds_model *m = NULL;
    ds_drafter *d = NULL;
    if (!(m = cli_load_text_model(a.model, a.threads)) || cli_pick_drafter(&a.drafter, a.spec.kind, m) ||
        (a.drafter && !(d = cli_load_drafter(a.drafter, m)))) {
        ds_model_free(m);
        return 1;
    }
    ds_eval_params o = ds_eval_default();
    o.prompts = a.prompts;
    o.max_tokens = (int)a.max_tokens;
    o.concurrency = (int)a.concurrency;
    o.seed = (uint64_t)a.seed;
    o.sp = a.sp;
    o.interrupted = &cli_interrupted;
    cli_catch_interrupt();
    ds_eval_result r;
    const ds_status st = ds_eval_run(m, d, &a.spec, &o, &r);
    ds_drafter_free(d);
    ds_model_free(m);
    if (st && st != DS_ERR_MISMATCH) return cli_fail(st);
    if (r.interrupted) fprintf(stderr, "dspark: interrupted: reporting the %d of %d prompts completed\n", r.n_done, r.n_prompts);
    if (st) return cli_fail(st); // NOT LOSSLESS
    if (a.json) print_json(&a, r.n_done, &r.spec, &r.base, r.checked);
    else print_table(&a, r.n_done, &r.spec, &r.base, r.checked);
    fflush(stdout);
    return r.interrupted ? 130 : 0;
}
