// dspark generate: stream a continuation of a prompt to stdout (timings to stderr), or print one
// JSON object with --json.
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

typedef struct {
    const char *model, *prompt, *drafter;
    long n_predict, threads, seed;
    ds_sampler_params sp;
    ds_spec_params spec;
    ds_cost_table costs;
    unsigned given; // CLI_SPEC_GIVEN | CLI_SCHEDULE_GIVEN
    int json, stats, chat; // --json, --stats, --chat
    long logprobs; // --logprobs N: -1 = off
    const char *grammar_file, *schema_file; // --grammar-file, --json-schema
} gen_args;

#define A gen_args
static const cli_opt gen_opts[] = {
    CLI_OPT_MODEL(A, model, .help = ".gguf file or Hugging Face directory (default: stories260K)"),
    CLI_OPT_STR("-p|--prompt", "TEXT", A, prompt, "the prompt (encoded with BOS)"),
    {.names = "-n|--n-predict", .arg = "N", .type = CLI_LONG, .off = CLI_AT_LONG(A, n_predict), .lo = 0, .hi = 1 << 24,
     .expects = "a count", .help = "tokens to generate (default 64)"},
    CLI_OPT_TEMP(A, sp, .help = "temperature; 0 = greedy (default 0)"),
    CLI_OPT_TOP_K(A, sp, .help = "keep the K most likely tokens (0 = off)"),
    CLI_OPT_TOP_P(A, sp, .help = "nucleus sampling mass (1 = off)"),
    CLI_OPT_MIN_P(A, sp, .help = "drop tokens below M x the top probability (0 = off)"),
    CLI_OPT_SEED(A, seed, LONG, .help = "random seed (default 0)"),
    CLI_OPT_PENALTIES(A, sp, .show = "--presence-penalty P, --frequency-penalty F",
                      .help = "  OpenAI's penalties over the generated tokens"),
    CLI_OPT_LOGIT_BIAS(A, sp, .flags = CLI_REPEATABLE, .help = "add B (-100..100) to token ID's logit (repeatable)"),
    CLI_OPT_VERIFY(A, sp.verify, .help = "coupled (default: the text of --spec none with this seed, whatever the\n"
                                         "drafter) | residual (min(1, p/q) acceptance, residual resampling)"),
    CLI_OPT_THREADS(A, threads, .help = "threads (default: all cores)"),
    CLI_OPT_DRAFTER(A, drafter, .help = "a DeepSpec drafter (DSpark or DFlash) paired with the model"),
    CLI_OPT_SPEC(A, spec, .help = "none | dspark | ngram (default: dspark with -d, else none)"),
    CLI_OPT_DRAFT_MAX(A, spec, .help = "most drafted tokens verified per round (default: the block size; 7 for ngram)"),
    CLI_OPT_CONF_THRESHOLD(A, spec, .help = "verify the slots before the first whose confidence is below C"),
    CLI_OPT_SCHEDULE(A, spec, .help = "fixed | threshold | auto (Algorithm 1; default: threshold with\n"
                                      "--conf-threshold, else fixed)"),
    CLI_OPT_COSTS(A, costs, .help = "cost table for --schedule auto (dspark profile); default: profile now"),
    CLI_OPT_NGRAM(A, spec, .help = "ngram match length (default 3)"),
    CLI_OPT_TREE(A, spec, .help = "token trees: up to N side branches per round at the slots least\nsure (0 = chains, default)"),
    CLI_OPT_TREE_DEPTH(A, spec, .help = "slots each branch continues after its first token (default 2)"),
    CLI_OPT_CACHE_MB(A, spec, .flags = CLI_UNDOCUMENTED), // (one request: nothing to reuse)
    CLI_OPT_FLAG("--chat", A, chat, "the prompt is a user message in the model's chat format (ds_chat_render);\n"
                                    "generation stops at the format's end-of-turn token"),
    CLI_OPT_LONG("--logprobs", "N", A, logprobs, 0, 20, "with --json: each generated token's log-probability and the N most\n"
                                                     "likely alternatives (0..20), from the target's processed distribution"),
    CLI_OPT_STR("--grammar-file", "F", A, grammar_file, "the output must match the GBNF grammar in F (llama.cpp's dialect)"),
    CLI_OPT_STR("--json-schema", "F", A, schema_file, "the output must be JSON valid against the JSON Schema in F"),
    CLI_OPT_FLAG("--stats", A, stats, "print speculation statistics to stderr"),
    CLI_OPT_FLAG("--json", A, json, "print one JSON object instead of streaming text"),
    {0},
};
#undef A

const cli_command cli_generate_cmd = {.name = "generate",
    .summary = "generate text, optionally with speculative decoding (dspark generate --help)",
    .usage = "usage: dspark generate [-m MODEL] -p PROMPT [-n N] [options]", .col = 21, .opts = gen_opts,
    .given_off = offsetof(gen_args, given)};

static int parse_args(int argc, char **argv, gen_args *a) {
    memset(a, 0, sizeof *a);
    a->n_predict = 64;
    a->logprobs = -1;
    a->sp = ds_sampler_default();
    const int rc = cli_parse(&cli_generate_cmd, argc, argv, a);
    if (rc) return rc;
    if (!a->prompt) return cli_usage_error("generate needs a prompt (-p TEXT)");
    if (a->grammar_file && a->schema_file) return cli_usage_error("give --grammar-file or --json-schema, not both");
    return cli_spec_finish(&a->spec, &a->costs, a->given, a->drafter);
}

// State of one generation, so that clean-up happens in one place.
typedef struct {
    ds_model *model;
    ds_drafter *drafter;
    ds_engine *engine;
    ds_gen *gen;       // the request: its prompt ids, its text (the continuation) and its tokens
} gen_state;

// The GBNF text of --grammar-file / --json-schema (NULL: none; *bad: failed, after printing why).
static char *load_grammar(const gen_args *a, int *bad) {
    *bad = 0;
    if (!a->grammar_file && !a->schema_file) return NULL;
    char *text = cli_read_file(a->grammar_file ? a->grammar_file : a->schema_file);
    if (!text || a->grammar_file) {
        *bad = !text;
        return text;
    }
    char *gbnf = NULL;
    const char *kw = NULL;
    ds_status st = ds_json_schema_to_gbnf(text, strlen(text), &gbnf, &kw);
    free(text);
    if (st) {
        fprintf(stderr, "dspark: %s: %s\n", a->schema_file, ds_last_error());
        *bad = 1;
        return NULL;
    }
    return gbnf;
}

static void gen_free(gen_state *g) {
    ds_gen_free(g->gen);
    ds_engine_free(g->engine);
    ds_drafter_free(g->drafter);
    ds_model_free(g->model);
}

// Prompt rows prefilled per second.
static double prompt_rate(const ds_seq_stats *t) { return t->prefill_s > 0 ? t->prefill_rows / t->prefill_s : 0; }

// Generated tokens per second of the rounds after the prefill (as llama.cpp's eval rate): without a
// drafter the first token comes out of the prefill, which computed the prompt's last row too.
static double gen_rate(const ds_seq_stats *t, int n_prompt, int n_gen) {
    const double s = t->draft_s + t->verify_s;
    const int first_in_prefill = n_gen > 0 && t->prefill_rows + t->cached_tokens == n_prompt;
    return s > 0 ? (n_gen - first_in_prefill) / s : 0;
}

static void print_json(const gen_args *a, const gen_state *g, const ds_seq_stats *t) {
    const ds_text_out *tx = ds_gen_text(g->gen);
    int n_prompt;
    const int32_t *prompt_ids = ds_gen_prompt(g->gen, &n_prompt);
    const int n_gen = ds_text_out_tokens(tx), id = ds_gen_seq(g->gen);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "text", ds_text_out_text(tx, NULL));
    cJSON *pi = cJSON_AddArrayToObject(o, "prompt_ids");
    for (int i = 0; i < n_prompt; i++) cJSON_AddItemToArray(pi, cJSON_CreateNumber(prompt_ids[i]));
    cJSON *ti = cJSON_AddArrayToObject(o, "tokens");
    for (int i = 0; i < n_gen; i++) cJSON_AddItemToArray(ti, cJSON_CreateNumber(ds_text_out_token_id(tx, i)));
    const ds_finish_reason fr = ds_gen_finish_reason(g->gen);
    cJSON_AddStringToObject(o, "finish_reason", fr == DS_FINISH_STOP ? "stop" : fr == DS_FINISH_LENGTH ? "length" : "none");
    cJSON_AddNumberToObject(o, "prompt_tokens", n_prompt);
    cJSON_AddNumberToObject(o, "generated_tokens", n_gen);
    cJSON_AddNumberToObject(o, "prompt_tok_per_s", prompt_rate(t));
    cJSON_AddNumberToObject(o, "gen_tok_per_s", gen_rate(t, n_prompt, n_gen));
    cJSON_AddStringToObject(o, "spec", cli_spec_name(a->spec.kind));
    cJSON_AddNumberToObject(o, "rounds", t->rounds);
    cJSON_AddNumberToObject(o, "tau", t->tau);
    if (a->spec.tree_branches) { // token trees: rounds that verified one, and whose path left the chain
        cJSON_AddNumberToObject(o, "tree_rounds", t->tree_rounds);
        cJSON_AddNumberToObject(o, "branch_accepted", t->branch_accepted);
    }
    cJSON *acc = cJSON_AddArrayToObject(o, "acceptance_by_position");
    for (int k = 0; k < 64 && t->tried_by_pos[k]; k++)
        cJSON_AddItemToArray(acc, cJSON_CreateNumber((double)t->accepted_by_pos[k] / t->tried_by_pos[k]));
    if (a->logprobs >= 0) { // [[logprob, [[id, logprob], ...]], ...]
        cJSON *lps = cJSON_AddArrayToObject(o, "logprobs");
        for (int i = 0; i < n_gen; i++) {
            float lp, top_lp[20];
            int32_t top_id[20];
            const int n = ds_engine_logprobs(g->engine, id, i, &lp, top_id, top_lp);
            cJSON *e = cJSON_CreateArray(), *tops = cJSON_CreateArray();
            cJSON_AddItemToArray(e, cJSON_CreateNumber(lp));
            for (int j = 0; j < n; j++) {
                cJSON *pair = cJSON_CreateArray();
                cJSON_AddItemToArray(pair, cJSON_CreateNumber(top_id[j]));
                cJSON_AddItemToArray(pair, cJSON_CreateNumber(top_lp[j]));
                cJSON_AddItemToArray(tops, pair);
            }
            cJSON_AddItemToArray(e, tops);
            cJSON_AddItemToArray(lps, e);
        }
    }
    cJSON_AddNumberToObject(o, "draft_ms", t->draft_s * 1e3);
    cJSON_AddNumberToObject(o, "verify_ms", t->verify_s * 1e3);
    char *s = cJSON_PrintUnformatted(o);
    if (s) puts(s);
    free(s);
    cJSON_Delete(o);
}

static void print_stats(const gen_args *a, const ds_seq_stats *t, const ds_model *m) {
    size_t resident, huge;
    int reread;
    ds_model_memory(m, &resident, &huge, &reread);
    if (resident)
        fprintf(stderr, "dspark: weights: %.1f MB resident, %.0f%% in huge pages%s\n", resident / 1e6,
                100.0 * (double)huge / (double)resident, reread ? " (read again into huge pages at load)" : "");
    fprintf(stderr, "dspark: spec %s: %d rounds, tau %.3f, %d/%d drafts accepted; draft %.1f ms, verify %.1f ms\n",
            cli_spec_name(a->spec.kind), t->rounds, t->tau, t->accepted, t->drafted, t->draft_s * 1e3, t->verify_s * 1e3);
    if (a->spec.tree_branches)
        fprintf(stderr, "dspark: token trees in %d rounds; the accepted path took a branch in %d\n", t->tree_rounds,
                t->branch_accepted);
    if (t->tried_by_pos[0]) {
        fprintf(stderr, "dspark: acceptance by position:");
        for (int k = 0; k < 64 && t->tried_by_pos[k]; k++)
            fprintf(stderr, " %.3f", (double)t->accepted_by_pos[k] / t->tried_by_pos[k]);
        fprintf(stderr, "\n");
    }
}

int cmd_generate(int argc, char **argv) {
    gen_args a;
    int rc = parse_args(argc, argv, &a);
    if (rc) return rc == CLI_HELP ? 0 : rc;
    gen_state g = {0};
    if (!(g.model = cli_load_text_model(a.model, a.threads))) return 1;
    const ds_model_info *info = ds_model_get_info(g.model);
    const ds_tokenizer *tok = ds_model_tokenizer(g.model);
    ds_status st;
    if (cli_pick_drafter(&a.drafter, a.spec.kind, g.model) || (a.drafter && !(g.drafter = cli_load_drafter(a.drafter, g.model)))) {
        gen_free(&g);
        return 1;
    }
    // --chat: the prompt is one user turn (the rendered text holds BOS where the format puts it) and
    // the output ends at the format's end-of-turn token (not shown).
    const ds_chat_message msg = {"user", a.prompt};
    int bad_grammar;
    char *gbnf = load_grammar(&a, &bad_grammar);
    if (bad_grammar) {
        gen_free(&g);
        return 1;
    }
    const ds_gen_request req = {.grammar = gbnf, .text = a.chat ? NULL : a.prompt, .msgs = a.chat ? &msg : NULL, .n_msgs = 1,
                                .max_new = (int)a.n_predict, .sp = a.sp, .seed = (uint64_t)a.seed,
                                .logprobs = a.logprobs >= 0, .top_logprobs = a.logprobs >= 0 ? (int)a.logprobs : 0};
    st = ds_gen_init(tok, &req, &g.gen);
    free(gbnf); // (copied by the request)
    if (st) {
        if (a.chat) goto fail;
        fprintf(stderr, "dspark: prompt: %s\n", ds_last_error());
        gen_free(&g);
        return 1;
    }
    int n_prompt;
    ds_gen_prompt(g.gen, &n_prompt);
    if (n_prompt + a.n_predict > info->max_ctx) {
        rc = cli_usage_error("prompt (%d tokens) + %ld new tokens exceed the model's context of %d", n_prompt,
                             a.n_predict, info->max_ctx);
        gen_free(&g); // info points into the model: report first
        return rc;
    }
    if ((st = ds_engine_init(g.model, g.drafter, &a.spec, &g.engine)) || (st = ds_gen_begin(g.gen, g.engine, req.max_new)))
        goto fail;
    cli_catch_interrupt();
    size_t shown = 0; // the text streams as it is generated (not with --json)
    const ds_gen_run_params run = {.on_update = a.json ? NULL : cli_gen_show, .interrupted = cli_gen_interrupted,
                                   .ctx = &shown};
    st = ds_gen_run_begun(g.engine, &g.gen, 1, &run, NULL);
    if (st && st != DS_ERR_INTERRUPTED) goto fail;
    if ((st = ds_gen_end(g.gen))) goto fail; // (interrupted: the text so far, an incomplete character flushed)
    const ds_seq_stats *t = ds_gen_stats(g.gen);
    const int n_gen = ds_text_out_tokens(ds_gen_text(g.gen));
    if (a.json) {
        print_json(&a, &g, t);
    } else {
        cli_gen_show(&shown, 0, g.gen);
        putchar('\n');
    }
    fflush(stdout); // the text before the timings, also when both go to one log
    fprintf(stderr, "dspark: prompt %d tokens (%.1f tok/s), generated %d tokens (%.1f tok/s)%s\n", n_prompt,
            prompt_rate(t), n_gen, gen_rate(t, n_prompt, n_gen), cli_interrupted ? ", interrupted" : "");
    if (a.stats) print_stats(&a, t, g.model);
    gen_free(&g);
    return cli_interrupted ? 130 : 0;
fail:
    rc = cli_fail(st);
    gen_free(&g);
    return rc;
}
