// dspark eval: speculative decoding over a prompt set against plain decoding in the same run (same
// prompts, same seeds, one request at a time): τ, acceptance by position, tokens/s and the speedup.
// At temperature 0 every prompt's tokens must equal the baseline's (a free losslessness check).
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "train/data.h"

typedef struct {
    const char *model, *drafter, *prompts;
    long max_tokens, threads, seed;
    ds_sampler_params sp;
    ds_spec_params spec;
    int spec_given, json;
} ev_args;

static void ev_usage(FILE *f) {
    fprintf(f,
            "usage: dspark eval [-m TARGET] [-d DRAFTER] [--spec none|dspark|ngram] --prompts FILE [options]\n"
            "  -m, --model PATH     the target (default: stories260K)\n"
            "  -d, --drafter DIR    a DeepSpec drafter paired with the target\n"
            "  --spec KIND          none | dspark | ngram (default: dspark with -d, else none)\n"
            "  --prompts FILE       one prompt per line: plain text, or a JSON object with a \"prompt\" string\n"
            "  --max-tokens L       tokens generated per prompt (default 128; fewer at EOS)\n"
            "  --temp T             temperature; 0 = greedy (default 0), also checked token for token\n"
            "  --top-k K, --top-p P, --min-p M   sampling filters (defaults off)\n"
            "  --draft-max K        most drafted tokens verified per round\n"
            "  --conf-threshold C   verify the slots before the first whose confidence is below C\n"
            "  --ngram N            ngram match length (default 3)\n"
            "  --seed S             prompt i uses seed S + i in both runs (default 0)\n"
            "  -t, --threads N      threads (default: all cores)\n"
            "  --json               one JSON object instead of the table\n"
            "Every prompt runs with the requested drafting and with plain decoding (--spec none), one\n"
            "request at a time; tokens/s counts the time in engine rounds (prefill excluded).\n");
}

static int parse_args(int argc, char **argv, ev_args *a) {
    memset(a, 0, sizeof *a);
    a->max_tokens = 128;
    a->sp = ds_sampler_default();
    for (int i = 1; i < argc; i++) {
        const char *o = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        double f;
        long k;
        if (!strcmp(o, "-h") || !strcmp(o, "--help")) {
            ev_usage(stdout);
            exit(0);
        } else if (!strcmp(o, "--json")) {
            a->json = 1;
            continue;
        }
        if (!v) return cli_usage_error("option %s needs a value", o);
        i++;
        if (!strcmp(o, "-m") || !strcmp(o, "--model")) a->model = v;
        else if (!strcmp(o, "-d") || !strcmp(o, "--drafter")) a->drafter = v;
        else if (!strcmp(o, "--prompts")) a->prompts = v;
        else if (!strcmp(o, "--max-tokens")) {
            if (!cli_parse_int(v, 1, 1 << 24, &a->max_tokens)) return cli_usage_error("--max-tokens expects a positive count, got '%s'", v);
        } else if (!strcmp(o, "-t") || !strcmp(o, "--threads")) {
            if (!cli_parse_int(v, 1, 1024, &a->threads)) return cli_usage_error("-t expects 1..1024, got '%s'", v);
        } else if (!strcmp(o, "--seed")) {
            if (!cli_parse_int(v, 0, 0x7fffffffffffffffL, &a->seed))
                return cli_usage_error("--seed expects a non-negative integer, got '%s'", v);
        } else if (!strcmp(o, "--temp")) {
            if (!cli_parse_float(v, 0, 100, &f)) return cli_usage_error("--temp expects 0..100, got '%s'", v);
            a->sp.temperature = (float)f;
        } else if (!strcmp(o, "--top-k")) {
            if (!cli_parse_int(v, 0, 1 << 24, &k)) return cli_usage_error("--top-k expects a count, got '%s'", v);
            a->sp.top_k = (int)k;
        } else if (!strcmp(o, "--top-p")) {
            if (!cli_parse_float(v, 1e-6, 1, &f)) return cli_usage_error("--top-p expects (0, 1], got '%s'", v);
            a->sp.top_p = (float)f;
        } else if (!strcmp(o, "--min-p")) {
            if (!cli_parse_float(v, 0, 1, &f)) return cli_usage_error("--min-p expects [0, 1], got '%s'", v);
            a->sp.min_p = (float)f;
        } else if (!strcmp(o, "--spec")) {
            a->spec_given = 1;
            if (!strcmp(v, "none")) a->spec.kind = DS_SPEC_NONE;
            else if (!strcmp(v, "dspark")) a->spec.kind = DS_SPEC_DSPARK;
            else if (!strcmp(v, "ngram")) a->spec.kind = DS_SPEC_NGRAM;
            else return cli_usage_error("--spec expects none, dspark or ngram, got '%s'", v);
        } else if (!strcmp(o, "--draft-max")) {
            if (!cli_parse_int(v, 1, 64, &k)) return cli_usage_error("--draft-max expects 1..64, got '%s'", v);
            a->spec.draft_max = (int)k;
        } else if (!strcmp(o, "--conf-threshold")) {
            if (!cli_parse_float(v, 0, 1, &f)) return cli_usage_error("--conf-threshold expects [0, 1], got '%s'", v);
            a->spec.conf_threshold = (float)f;
        } else if (!strcmp(o, "--ngram")) {
            if (!cli_parse_int(v, 1, 64, &k)) return cli_usage_error("--ngram expects 1..64, got '%s'", v);
            a->spec.ngram_n = (int)k;
        } else {
            return cli_usage_error("unknown option '%s' (see dspark eval --help)", o);
        }
    }
    if (!a->prompts) return cli_usage_error("eval needs a prompt file (--prompts FILE)");
    if (!a->spec_given) a->spec.kind = a->drafter ? DS_SPEC_DSPARK : DS_SPEC_NONE;
    if (a->spec.kind == DS_SPEC_DSPARK && !a->drafter) return cli_usage_error("--spec dspark needs a drafter (-d DIR)");
    if (a->spec.kind != DS_SPEC_DSPARK && a->drafter) return cli_usage_error("-d is only used with --spec dspark");
    return 0;
}

static const char *spec_name(ds_spec_kind k) {
    return k == DS_SPEC_DSPARK ? "dspark" : k == DS_SPEC_NGRAM ? "ngram" : "none";
}

// Totals over prompts of one configuration.
typedef struct {
    long rounds, generated, drafted, accepted;
    long tried_by_pos[64], accepted_by_pos[64];
    double step_s, draft_s;
} ev_total;

typedef struct {
    ds_model *model;
    ds_drafter *drafter;
    ds_engine *spec, *base;
    ds_prompt_set *prompts;
    int32_t *ptoks, *out_spec, *out_base;
} ev_state;

static void ev_free(ev_state *g) {
    ds_engine_free(g->spec);
    ds_engine_free(g->base);
    ds_drafter_free(g->drafter);
    ds_model_free(g->model);
    ds_prompts_free(g->prompts);
    free(g->ptoks);
    free(g->out_spec);
    free(g->out_base);
}

// Run one request to the end (or Ctrl-C): its tokens go to out (*n_out of them); totals add up.
static ds_status run_one(ds_engine *e, const int32_t *prompt, int n_prompt, int max_new, const ds_sampler_params *sp,
                         uint64_t seed, int32_t *out, int *n_out, ev_total *t) {
    int id;
    ds_status st = ds_engine_add(e, prompt, n_prompt, max_new, sp, seed, &id);
    if (st) return st;
    int n = 0;
    double step_s = 0;
    while (!ds_engine_finished(e, id)) {
        if (cli_interrupted) {
            ds_engine_remove(e, id);
            return DS_ERR_INTERRUPTED; // no message: the caller stops and reports
        }
        const double t0 = cli_now();
        if ((st = ds_engine_step(e))) {
            ds_engine_remove(e, id);
            return st;
        }
        step_s += cli_now() - t0;
        n += ds_engine_take(e, id, out + n, max_new - n);
    }
    n += ds_engine_take(e, id, out + n, max_new - n);
    *n_out = n;
    if (t) {
        const ds_seq_stats *s = ds_engine_stats(e, id);
        t->rounds += s->rounds;
        t->generated += n;
        t->drafted += s->drafted;
        t->accepted += s->accepted;
        for (int k = 0; k < 64; k++) {
            t->tried_by_pos[k] += s->tried_by_pos[k];
            t->accepted_by_pos[k] += s->accepted_by_pos[k];
        }
        t->step_s += step_s;
        t->draft_s += s->draft_s;
    }
    ds_engine_remove(e, id);
    return DS_OK;
}

static double tau_of(const ev_total *t) { return t->rounds ? (double)(t->accepted + t->rounds) / (double)t->rounds : 0; }
static double rate_of(const ev_total *t) { return t->step_s > 0 ? (double)t->generated / t->step_s : 0; }

static void print_json(const ev_args *a, int n_prompts, const ev_total *s, const ev_total *b, int checked) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "spec", spec_name(a->spec.kind));
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
    printf("eval: %d prompts, spec %s, temp %g, up to %ld tokens each\n", n_prompts, spec_name(a->spec.kind),
           (double)a->sp.temperature, a->max_tokens);
    printf("%-16s %10s %8s %7s %11s\n", "", "tokens", "rounds", "tau", "tok/s");
    printf("%-16s %10ld %8ld %7.3f %11.1f\n", spec_name(a->spec.kind), s->generated, s->rounds, tau_of(s), rate_of(s));
    printf("%-16s %10ld %8ld %7.3f %11.1f\n", "none (baseline)", b->generated, b->rounds, tau_of(b), rate_of(b));
    printf("speedup %.3fx\n", rate_of(b) > 0 ? rate_of(s) / rate_of(b) : 0.0);
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
    const char *path = cli_model_path(a.model);
    if (!path) {
        ev_free(&g);
        return 1;
    }
    ds_model_params mp = {.n_threads = (int)a.threads};
    if ((st = ds_model_load(path, &mp, &g.model))) goto fail;
    const ds_model_info *info = ds_model_get_info(g.model);
    const ds_tokenizer *tok = ds_model_tokenizer(g.model);
    if (!tok) {
        fprintf(stderr, "dspark: %s has no tokenizer dspark supports, so it cannot take text prompts\n", path);
        ev_free(&g);
        return 1;
    }
    if (a.drafter) {
        if ((st = ds_drafter_load(a.drafter, g.model, &g.drafter))) goto fail;
        if (ds_drafter_warning(g.drafter)) fprintf(stderr, "dspark: warning: %s\n", ds_drafter_warning(g.drafter));
    }
    const ds_spec_params none = {.kind = DS_SPEC_NONE};
    if ((st = ds_engine_init(g.model, g.drafter, &a.spec, &g.spec)) || (st = ds_engine_init(g.model, NULL, &none, &g.base)))
        goto fail;
    const int L = (int)a.max_tokens;
    g.out_spec = malloc(sizeof(int32_t) * (size_t)L);
    g.out_base = malloc(sizeof(int32_t) * (size_t)L);
    if (!g.out_spec || !g.out_base) goto oom;
    int ptok_cap = 0;

    cli_catch_interrupt();
    ev_total ts = {0}, tb = {0};
    const int greedy = a.sp.temperature == 0;
    int n_done = 0, n_diff = 0;
    char first_diff[512] = "";
    for (int i = 0; i < g.prompts->n && !cli_interrupted; i++) {
        const char *text = g.prompts->text[i];
        const int line = g.prompts->line[i];
        int n = 0;
        if ((st = ds_tokenize(tok, text, strlen(text), 1, NULL, 0, &n))) goto fail_line;
        if (n > ptok_cap) {
            int32_t *p = realloc(g.ptoks, sizeof(int32_t) * (size_t)n);
            if (!p) goto oom;
            g.ptoks = p;
            ptok_cap = n;
        }
        if ((st = ds_tokenize(tok, text, strlen(text), 1, g.ptoks, n, &n))) goto fail_line;
        if (n < 1 || (long)n + L > info->max_ctx) {
            fprintf(stderr, "dspark: %s:%d: prompt (%d tokens) + %d new tokens %s the model's context of %d\n", a.prompts,
                    line, n, L, n < 1 ? "(no BOS?) do not fit" : "exceed", info->max_ctx);
            ev_free(&g);
            return 1;
        }
        const uint64_t seed = (uint64_t)a.seed + (uint64_t)i;
        if (i == 0) { // warm-up (page faults, caches), not counted
            int nw;
            if ((st = run_one(g.base, g.ptoks, n, L < 8 ? L : 8, &a.sp, seed, g.out_base, &nw, NULL))) goto fail_run;
        }
        int ns, nb;
        ev_total ts1 = ts, tb1 = tb; // counted only when both runs of the prompt complete
        if ((st = run_one(g.spec, g.ptoks, n, L, &a.sp, seed, g.out_spec, &ns, &ts1))) goto fail_run;
        if ((st = run_one(g.base, g.ptoks, n, L, &a.sp, seed, g.out_base, &nb, &tb1))) goto fail_run;
        ts = ts1;
        tb = tb1;
        n_done++;
        if (greedy && (ns != nb || memcmp(g.out_spec, g.out_base, sizeof(int32_t) * (size_t)ns) != 0)) {
            if (!n_diff++) {
                int k = 0;
                while (k < ns && k < nb && g.out_spec[k] == g.out_base[k]) k++;
                snprintf(first_diff, sizeof first_diff,
                         "%s:%d differs at generated token %d (%s: %d, plain: %d; %d vs %d tokens)", a.prompts, line, k,
                         spec_name(a.spec.kind), k < ns ? g.out_spec[k] : -1, k < nb ? g.out_base[k] : -1, ns, nb);
            }
        }
        continue;
    fail_line:
        fprintf(stderr, "dspark: %s:%d: %s\n", a.prompts, line, ds_last_error());
        ev_free(&g);
        return 1;
    fail_run:
        if (st == DS_ERR_INTERRUPTED) break;
        goto fail;
    }
    if (cli_interrupted) fprintf(stderr, "dspark: interrupted: reporting the %d of %d prompts completed\n", n_done, g.prompts->n);
    if (n_diff) {
        fprintf(stderr,
                "dspark: eval: NOT LOSSLESS: %d of %d prompts decoded with --spec %s differ from plain greedy decoding; "
                "first: %s\n",
                n_diff, n_done, spec_name(a.spec.kind), first_diff);
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
