// dspark eval: speculative decoding over a prompt set against plain decoding in the same run (same
// prompts, same seeds, the same concurrency): τ, acceptance by position, tokens/s and the speedup.
// With --concurrency R, R prompts at a time share ONE engine (a new prompt joins as soon as one
// finishes), and both total and per-request tokens/s are reported. At temperature 0, and when
// sampling under the coupled rule (whose output is the seed's, whatever the drafter), every prompt's
// tokens must equal the baseline's (a free losslessness check).
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "cli.h"
#include "gen/prompts.h"
#include "train/data.h"

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

// Totals over prompts of one configuration.
typedef struct {
    long rounds, generated, drafted, accepted;
    long tried_by_pos[64], accepted_by_pos[64];
    double step_s, draft_s;
    long requests;       // completed requests
    double request_rate; // Σ over them of generated / (finish − join) seconds
} ev_total;

typedef struct {
    ds_model *model;
    ds_drafter *drafter;
    ds_engine *spec, *base;
    ds_prompt_set *prompts;
    ds_gen_prompts pt;            // the prompts tokenized
    int32_t *out_spec, *out_base; // (prompts->n, max_tokens) generated tokens
    int *n_spec, *n_base;         // (prompts->n) how many
    int *done_spec, *done_base;   // (prompts->n) completed
} ev_state;

static void ev_free(ev_state *g) {
    ds_engine_free(g->spec);
    ds_engine_free(g->base);
    ds_drafter_free(g->drafter);
    ds_model_free(g->model);
    ds_gen_prompts_free(&g->pt);
    ds_prompts_free(g->prompts);
    free(g->out_spec);
    free(g->out_base);
    free(g->n_spec);
    free(g->n_base);
    free(g->done_spec);
    free(g->done_base);
}

// Run prompts 0..n-1 through e, up to R at a time (ds_gen_run: a prompt joins as soon as a running
// one finishes). Prompt i uses seed seed0 + i; its tokens go to out + i·L (n_out[i] of them) and
// done[i] is set when it completes. Totals (if t) add up over completed requests; step_s is the
// wall time of every ds_engine_step. Returns DS_ERR_INTERRUPTED (no message) on Ctrl-C.
typedef struct {
    int L;
    int32_t *out;
    int *n_out, *done;
    ev_total *t;
} ev_run;

static void add_stats(ev_total *t, const ds_seq_stats *s, int n, double seconds) {
    t->rounds += s->rounds;
    t->generated += n;
    t->drafted += s->drafted;
    t->accepted += s->accepted;
    for (int k = 0; k < 64; k++) {
        t->tried_by_pos[k] += s->tried_by_pos[k];
        t->accepted_by_pos[k] += s->accepted_by_pos[k];
    }
    t->draft_s += s->draft_s;
    t->requests++;
    t->request_rate += seconds > 0 ? n / seconds : 0;
}

static void on_done(void *ctx, int i, const ds_gen *g) {
    ev_run *r = ctx;
    const ds_text_out *tx = ds_gen_text(g);
    const int n = ds_text_out_tokens(tx);
    for (int k = 0; k < n; k++) r->out[(size_t)i * r->L + k] = ds_text_out_token_id(tx, k);
    r->n_out[i] = n;
    r->done[i] = 1;
    if (r->t) add_stats(r->t, ds_gen_stats(g), n, ds_gen_seconds(g));
}

static int interrupted(void *ctx) { return cli_interrupted; }

static ds_status run_set(ds_engine *e, const ds_tokenizer *tok, int32_t *const *ptoks, const int *plen, int n, int R,
                         int L, const ds_sampler_params *sp, uint64_t seed0, int32_t *out, int *n_out, int *done,
                         ev_total *t) {
    ds_gen_request *req = calloc((size_t)n, sizeof *req);
    if (!req) return ds_fail(DS_ERR_NOMEM, "out of memory");
    for (int i = 0; i < n; i++) {
        req[i] = (ds_gen_request){.ids = ptoks[i], .n_ids = plen[i], .max_new = L, .sp = *sp, .seed = seed0 + (uint64_t)i};
        n_out[i] = done[i] = 0;
    }
    ev_run r = {L, out, n_out, done, t};
    const ds_gen_run_params p = {.max_active = R, .on_done = on_done, .interrupted = interrupted, .ctx = &r};
    const ds_status st = ds_gen_run(e, tok, req, n, &p, t ? &t->step_s : NULL);
    free(req);
    return st;
}

static double tau_of(const ev_total *t) { return t->rounds ? (double)(t->accepted + t->rounds) / (double)t->rounds : 0; }
static double rate_of(const ev_total *t) { return t->step_s > 0 ? (double)t->generated / t->step_s : 0; }
static double request_rate_of(const ev_total *t) { return t->requests ? t->request_rate / (double)t->requests : 0; }

static void print_json(const ev_args *a, int n_prompts, const ev_total *s, const ev_total *b, int checked) {
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

static void print_table(const ev_args *a, int n_prompts, const ev_total *s, const ev_total *b, int checked) {
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
    ev_state g = {0};
    ds_status st;
    if ((st = ds_prompts_load(a.prompts, &g.prompts))) return cli_fail(st);
    if (!(g.model = cli_load_text_model(a.model, a.threads)) ||
        cli_pick_drafter(&a.drafter, a.spec.kind, g.model) || (a.drafter && !(g.drafter = cli_load_drafter(a.drafter, g.model)))) {
        ev_free(&g);
        return 1;
    }
    const ds_tokenizer *tok = ds_model_tokenizer(g.model);
    const ds_spec_params none = {.kind = DS_SPEC_NONE};
    if ((st = ds_engine_init(g.model, g.drafter, &a.spec, &g.spec)) || (st = ds_engine_init(g.model, NULL, &none, &g.base)))
        goto fail;
    const int L = (int)a.max_tokens, P = g.prompts->n, R = (int)a.concurrency;
    g.out_spec = malloc(sizeof(int32_t) * (size_t)L * P);
    g.out_base = malloc(sizeof(int32_t) * (size_t)L * P);
    g.n_spec = calloc((size_t)P, sizeof(int));
    g.n_base = calloc((size_t)P, sizeof(int));
    g.done_spec = calloc((size_t)P, sizeof(int));
    g.done_base = calloc((size_t)P, sizeof(int));
    if (!g.out_spec || !g.out_base || !g.n_spec || !g.n_base || !g.done_spec || !g.done_base)
        goto oom;
    if ((st = ds_gen_prompts_tokenize(g.model, g.prompts, L, &g.pt))) goto fail; // (naming the file and line)

    cli_catch_interrupt();
    ev_total ts = {0}, tb = {0};
    // Greedy, and coupled sampling (the target's own draws at every position), decode exactly the
    // baseline's tokens with any drafter; the residual rule only matches it in distribution.
    const int greedy = a.sp.temperature == 0 || a.sp.verify == DS_VERIFY_COUPLED;
    // Warm-up (page faults, caches), not counted: the first prompt, 8 tokens, plain decoding.
    if ((st = run_set(g.base, tok, g.pt.ids, g.pt.len, 1, 1, L < 8 ? L : 8, &a.sp, (uint64_t)a.seed, g.out_base, g.n_base,
                      g.done_base, NULL)) &&
        st != DS_ERR_INTERRUPTED)
        goto fail;
    // The whole set with the requested drafting, then the baseline at the same concurrency.
    if (!cli_interrupted && (st = run_set(g.spec, tok, g.pt.ids, g.pt.len, P, R, L, &a.sp, (uint64_t)a.seed, g.out_spec, g.n_spec,
                                          g.done_spec, &ts)) &&
        st != DS_ERR_INTERRUPTED)
        goto fail;
    memset(g.done_base, 0, sizeof(int) * (size_t)P);
    if (!cli_interrupted && (st = run_set(g.base, tok, g.pt.ids, g.pt.len, P, R, L, &a.sp, (uint64_t)a.seed, g.out_base, g.n_base,
                                          g.done_base, &tb)) &&
        st != DS_ERR_INTERRUPTED)
        goto fail;
    int n_done = 0, n_diff = 0;
    char first_diff[512] = "";
    for (int i = 0; i < P; i++) {
        if (!g.done_spec[i] || !g.done_base[i]) continue;
        n_done++;
        const int ns = g.n_spec[i], nb = g.n_base[i];
        const int32_t *os = g.out_spec + (size_t)i * L, *ob = g.out_base + (size_t)i * L;
        if (greedy && (ns != nb || memcmp(os, ob, sizeof(int32_t) * (size_t)ns) != 0)) {
            if (!n_diff++) {
                int k = 0;
                while (k < ns && k < nb && os[k] == ob[k]) k++;
                snprintf(first_diff, sizeof first_diff,
                         "%s:%d differs at generated token %d (%s: %d, plain: %d; %d vs %d tokens)", a.prompts,
                         g.prompts->line[i], k, cli_spec_name(a.spec.kind), k < ns ? os[k] : -1, k < nb ? ob[k] : -1, ns, nb);
            }
        }
    }
    if (cli_interrupted) fprintf(stderr, "dspark: interrupted: reporting the %d of %d prompts completed\n", n_done, g.prompts->n);
    if (n_diff) {
        fprintf(stderr,
                "dspark: eval: NOT LOSSLESS: %d of %d prompts decoded with --spec %s differ from plain decoding; "
                "first: %s\n",
                n_diff, n_done, cli_spec_name(a.spec.kind), first_diff);
        ev_free(&g);
        return 1;
    }
    const int checked = greedy && n_done > 0;
    if (a.json) print_json(&a, n_done, &ts, &tb, checked);
    else print_table(&a, n_done, &ts, &tb, checked);
    fflush(stdout);
    ev_free(&g);
    return cli_interrupted ? 130 : 0;
oom:
    ev_free(&g);
    fprintf(stderr, "dspark: out of memory\n");
    return 1;
fail:
    rc = cli_fail(st);
    ev_free(&g);
    return rc;
}
