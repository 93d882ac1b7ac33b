// dspark eval: speculative decoding over a prompt set against plain decoding in the same run (same
// prompts, same seeds, the same concurrency): τ, acceptance by position, tokens/s and the speedup.
// With --concurrency R, R prompts at a time share ONE engine (a new prompt joins as soon as one
// finishes), and both total and per-request tokens/s are reported. At temperature 0, and when
// sampling under the coupled rule (whose output is the seed's, whatever the drafter), every prompt's
// tokens must equal the baseline's (a free losslessness check). The job is ds_eval_run
// (include/dspark_jobs.h, src/gen/eval.c); this file parses its options and prints its result.
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

static void ev_usage(FILE *f) {
    fprintf(f,
            "usage: dspark eval [-m TARGET] [-d DRAFTER] [--spec none|dspark|ngram] --prompts FILE [options]\n"
            "  -m, --model PATH     the target (default: stories260K)\n"
            "  -d, --drafter DIR    a DeepSpec drafter paired with the target\n"
            "  --spec KIND          none | dspark | ngram (default: dspark with -d, else none)\n"
            "  --prompts FILE       one prompt per line: plain text, or a JSON object with a \"prompt\" string\n"
            "  --max-tokens L       tokens generated per prompt (default 128; fewer at EOS)\n"
            "  --temp T             temperature; 0 = greedy (default 0); greedy and --verify coupled\n"
            "                       outputs are checked token for token against plain decoding\n"
            "  --top-k K, --top-p P, --min-p M   sampling filters (defaults off)\n"
            "  --verify coupled|residual         how sampled drafts are verified (default coupled)\n"
            "  --draft-max K        most drafted tokens verified per round\n"
            "  --conf-threshold C   verify the slots before the first whose confidence is below C\n"
            "  --schedule S         fixed | threshold | auto (Algorithm 1; default: threshold with\n"
            "                       --conf-threshold, else fixed)\n"
            "  --costs FILE         cost table for --schedule auto (dspark profile); default: profile now\n"
            "  --concurrency R      R prompts at a time through one engine (default 1)\n"
            "  --ngram N            ngram match length (default 3)\n"
            "  --seed S             prompt i uses seed S + i in both runs (default 0)\n"
            "  -t, --threads N      threads (default: all cores)\n"
            "  --json               one JSON object instead of the table\n"
            "Every prompt runs with the requested drafting and with plain decoding (--spec none), R\n"
            "requests at a time in both. tok/s: all generated tokens / the time in engine rounds (prefill\n"
            "excluded); per-request tok/s: the mean over requests of generated tokens / the request's time\n"
            "from joining (its prefill included) to finishing.\n");
}

static int parse_args(int argc, char **argv, ev_args *a) {
    memset(a, 0, sizeof *a);
    a->max_tokens = 128;
    a->concurrency = 1;
    a->sp = ds_sampler_default();
    for (int i = 1; i < argc; i++) {
        const char *o = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(o, "-h") || !strcmp(o, "--help")) {
            ev_usage(stdout);
            exit(0);
        } else if (!strcmp(o, "--json")) {
            a->json = 1;
            continue;
        }
        if (!v) return cli_missing_value(o, "eval", ev_usage);
        i++;
        int r = cli_sampling_option(o, v, &a->sp);
        if (!r) r = cli_spec_option(o, v, &a->spec, &a->costs, &a->given);
        if (!r) r = cli_run_option(o, v, &a->model, &a->drafter, &a->threads, &a->seed);
        if (r < 0) return -r;
        if (r) continue;
        if (!strcmp(o, "--prompts")) a->prompts = v;
        else if (!strcmp(o, "--max-tokens")) {
            if (!cli_parse_int(v, 1, 1 << 24, &a->max_tokens)) return cli_usage_error("--max-tokens expects a positive count, got '%s'", v);
        } else if (!strcmp(o, "--concurrency")) {
            if (!cli_parse_int(v, 1, 4096, &a->concurrency))
                return cli_usage_error("--concurrency expects 1..4096, got '%s'", v);
        } else {
            return cli_usage_error("unknown option '%s' (see dspark eval --help)", o);
        }
    }
    if (!a->prompts) return cli_usage_error("eval needs a prompt file (--prompts FILE)");
    return cli_spec_finish(&a->spec, a->given, a->drafter);
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
    if (checked) printf("lossless: every prompt's tokens equal plain decoding's\n");
}

int cmd_eval(int argc, char **argv) {
    ev_args a;
    int rc = parse_args(argc, argv, &a);
    if (rc) return rc;
    ds_model *m = NULL;
    ds_drafter *d = NULL;
    if (!(m = cli_load_text_model(a.model, a.threads)) || cli_pick_drafter(&a.drafter, a.spec.kind, m) ||
        (a.drafter && !(d = cli_load_drafter(a.drafter, m)))) {
        ds_model_free(m);
        return 1;
    }
    ds_eval_options o = ds_eval_options_default();
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
