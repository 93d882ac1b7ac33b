// dspark generate: stream a continuation of a prompt to stdout (timings to stderr), or print one
// JSON object with --json.
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

typedef struct {
    const char *model, *prompt;
    long n_predict, threads, seed;
    ds_sampler_params sp;
    int json;
} gen_args;

static void gen_usage(FILE *f) {
    fprintf(f,
            "usage: dspark generate [-m MODEL] -p PROMPT [-n N] [options]\n"
            "  -m, --model PATH   .gguf file or Hugging Face directory (default: stories260K)\n"
            "  -p, --prompt TEXT  the prompt (encoded with BOS)\n"
            "  -n, --n-predict N  tokens to generate (default 64)\n"
            "  --temp T           temperature; 0 = greedy (default 0)\n"
            "  --top-k K          keep the K most likely tokens (0 = off)\n"
            "  --top-p P          nucleus sampling mass (1 = off)\n"
            "  --min-p M          drop tokens below M x the top probability (0 = off)\n"
            "  --seed S           random seed (default 0)\n"
            "  -t, --threads N    threads (default: all cores)\n"
            "  --json             print one JSON object instead of streaming text\n");
}

static int parse_args(int argc, char **argv, gen_args *a) {
    memset(a, 0, sizeof *a);
    a->n_predict = 64;
    a->sp = ds_sampler_default();
    for (int i = 1; i < argc; i++) {
        const char *o = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        double f;
        if (!strcmp(o, "-h") || !strcmp(o, "--help")) {
            gen_usage(stdout);
            exit(0);
        } else if (!strcmp(o, "--json")) {
            a->json = 1;
            continue;
        }
        if (!v) return cli_usage_error("option %s needs a value", o);
        i++;
        if (!strcmp(o, "-m") || !strcmp(o, "--model")) a->model = v;
        else if (!strcmp(o, "-p") || !strcmp(o, "--prompt")) a->prompt = v;
        else if (!strcmp(o, "-n") || !strcmp(o, "--n-predict")) {
            if (!cli_parse_int(v, 0, 1 << 24, &a->n_predict)) return cli_usage_error("-n expects a count, got '%s'", v);
        } else if (!strcmp(o, "-t") || !strcmp(o, "--threads")) {
            if (!cli_parse_int(v, 1, 1024, &a->threads)) return cli_usage_error("-t expects 1..1024, got '%s'", v);
        } else if (!strcmp(o, "--seed")) {
            if (!cli_parse_int(v, 0, 0x7fffffffffffffffL, &a->seed)) return cli_usage_error("--seed expects a non-negative integer, got '%s'", v);
        } else if (!strcmp(o, "--temp")) {
            if (!cli_parse_float(v, 0, 100, &f)) return cli_usage_error("--temp expects 0..100, got '%s'", v);
            a->sp.temperature = (float)f;
        } else if (!strcmp(o, "--top-k")) {
            long k;
            if (!cli_parse_int(v, 0, 1 << 24, &k)) return cli_usage_error("--top-k expects a count, got '%s'", v);
            a->sp.top_k = (int)k;
        } else if (!strcmp(o, "--top-p")) {
            if (!cli_parse_float(v, 1e-6, 1, &f)) return cli_usage_error("--top-p expects (0, 1], got '%s'", v);
            a->sp.top_p = (float)f;
        } else if (!strcmp(o, "--min-p")) {
            if (!cli_parse_float(v, 0, 1, &f)) return cli_usage_error("--min-p expects [0, 1], got '%s'", v);
            a->sp.min_p = (float)f;
        } else {
            return cli_usage_error("unknown option '%s' (see dspark generate --help)", o);
        }
    }
    if (!a->prompt) return cli_usage_error("generate needs a prompt (-p TEXT)");
    return 0;
}

// State of one generation, so that clean-up happens in one place.
typedef struct {
    ds_model *model;
    ds_kv *kv;
    ds_workspace *ws;
    int32_t *prompt_ids, *out_ids;
    float *logits, *probs;
    void *scratch;
    char *text;
    size_t text_len, text_cap;
} gen_state;

static void gen_free(gen_state *g) {
    ds_kv_free(g->kv);
    ds_workspace_free(g->ws);
    ds_model_free(g->model);
    free(g->prompt_ids);
    free(g->out_ids);
    free(g->logits);
    free(g->probs);
    free(g->scratch);
    free(g->text);
}

static int append_text(gen_state *g, const char *s, int n) {
    if (g->text_len + (size_t)n + 1 > g->text_cap) {
        size_t cap = (g->text_cap ? g->text_cap * 2 : 1024) + (size_t)n;
        char *t = realloc(g->text, cap);
        if (!t) return 0;
        g->text = t;
        g->text_cap = cap;
    }
    memcpy(g->text + g->text_len, s, (size_t)n);
    g->text_len += (size_t)n;
    g->text[g->text_len] = 0;
    return 1;
}

static void print_json(const gen_args *a, const gen_state *g, int n_prompt, int n_gen, double t_prompt, double t_gen) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "text", g->text ? g->text : "");
    cJSON *pi = cJSON_AddArrayToObject(o, "prompt_ids");
    for (int i = 0; i < n_prompt; i++) cJSON_AddItemToArray(pi, cJSON_CreateNumber(g->prompt_ids[i]));
    cJSON *ti = cJSON_AddArrayToObject(o, "tokens");
    for (int i = 0; i < n_gen; i++) cJSON_AddItemToArray(ti, cJSON_CreateNumber(g->out_ids[i]));
    cJSON_AddNumberToObject(o, "prompt_tokens", n_prompt);
    cJSON_AddNumberToObject(o, "generated_tokens", n_gen);
    cJSON_AddNumberToObject(o, "prompt_tok_per_s", t_prompt > 0 ? n_prompt / t_prompt : 0);
    cJSON_AddNumberToObject(o, "gen_tok_per_s", t_gen > 0 ? n_gen / t_gen : 0);
    char *s = cJSON_PrintUnformatted(o);
    if (s) puts(s);
    free(s);
    cJSON_Delete(o);
    (void)a;
}

int cmd_generate(int argc, char **argv) {
    gen_args a;
    int rc = parse_args(argc, argv, &a);
    if (rc) return rc;
    const char *path = cli_model_path(a.model);
    if (!path) return 1;
    gen_state g = {0};
    ds_model_params mp = {.n_threads = (int)a.threads};
    ds_status st = ds_model_load(path, &mp, &g.model);
    if (st) return cli_fail(st);
    const ds_model_info *info = ds_model_get_info(g.model);
    const ds_tokenizer *tok = ds_model_tokenizer(g.model);
    if (!tok) {
        gen_free(&g);
        fprintf(stderr, "dspark: %s has no tokenizer dspark supports, so it cannot take a text prompt\n", path);
        return 1;
    }
    const size_t plen = strlen(a.prompt);
    int n_prompt = 0;
    if ((st = ds_tokenize(tok, a.prompt, plen, 1, NULL, 0, &n_prompt))) {
        fprintf(stderr, "dspark: prompt: %s\n", ds_last_error());
        gen_free(&g);
        return 1;
    }
    g.prompt_ids = malloc(sizeof(int32_t) * (size_t)(n_prompt > 0 ? n_prompt : 1));
    g.out_ids = malloc(sizeof(int32_t) * (size_t)(a.n_predict > 0 ? a.n_predict : 1));
    g.logits = malloc(sizeof(float) * (size_t)info->vocab_size);
    g.probs = malloc(sizeof(float) * (size_t)info->vocab_size);
    g.scratch = malloc(ds_sampler_scratch_size(info->vocab_size));
    if (!g.prompt_ids || !g.out_ids || !g.logits || !g.probs || !g.scratch) {
        gen_free(&g);
        fprintf(stderr, "dspark: out of memory\n");
        return 1;
    }
    if ((st = ds_tokenize(tok, a.prompt, plen, 1, g.prompt_ids, n_prompt, &n_prompt))) goto fail;
    if (n_prompt + a.n_predict > info->max_ctx) {
        rc = cli_usage_error("prompt (%d tokens) + %ld new tokens exceed the model's context of %d", n_prompt,
                             a.n_predict, info->max_ctx);
        gen_free(&g); // info points into the model: report first
        return rc;
    }
    if ((st = ds_kv_init(g.model, n_prompt + (int)a.n_predict, &g.kv)) || (st = ds_workspace_init(g.model, &g.ws)))
        goto fail;

    cli_catch_interrupt();
    ds_rng rng = ds_rng_init((uint64_t)a.seed, 0);
    ds_detok dt;
    ds_detok_init(&dt, tok, 0); // a continuation keeps its leading space
    char piece[256];
    // Prefill: the whole prompt in one forward, logits of the last row only.
    double t0 = cli_now();
    ds_forward_seq fs = {.kv = g.kv, .tokens = g.prompt_ids, .n_tokens = n_prompt, .n_logits = 1, .logits = g.logits};
    if ((st = ds_model_forward(g.model, g.ws, &fs, 1))) goto fail;
    const double t_prompt = cli_now() - t0;
    t0 = cli_now();
    int n_gen = 0;
    while (n_gen < a.n_predict && !cli_interrupted) {
        if ((st = ds_probs_process(&a.sp, g.logits, info->vocab_size, g.probs, g.scratch))) goto fail;
        const int32_t next = a.sp.temperature == 0 ? ds_argmax(g.probs, info->vocab_size)
                                                   : ds_sample_probs(g.probs, info->vocab_size, &rng);
        if (next == info->eos_id) break;
        g.out_ids[n_gen++] = next;
        char *buf = piece;
        int n = ds_detok_push(&dt, next, piece, sizeof piece);
        if (n < 0 && (buf = malloc((size_t)-n))) n = ds_detok_push(&dt, next, buf, -n); // an unusually long piece
        if (!buf) goto oom;
        if (n > 0) {
            if (!append_text(&g, buf, n)) goto oom;
            if (!a.json) {
                fwrite(buf, 1, (size_t)n, stdout);
                fflush(stdout);
            }
        }
        if (buf != piece) free(buf);
        if (n_gen == a.n_predict) break; // the last token needs no forward pass
        ds_forward_seq step = {.kv = g.kv, .tokens = &next, .n_tokens = 1, .n_logits = 1, .logits = g.logits};
        if ((st = ds_model_forward(g.model, g.ws, &step, 1))) goto fail;
    }
    const double t_gen = cli_now() - t0;
    const int n = ds_detok_flush(&dt, piece, sizeof piece);
    if (n > 0 && !append_text(&g, piece, n)) goto oom;
    if (a.json) {
        print_json(&a, &g, n_prompt, n_gen, t_prompt, t_gen);
    } else {
        if (n > 0) fwrite(piece, 1, (size_t)n, stdout);
        putchar('\n');
    }
    fprintf(stderr, "dspark: prompt %d tokens (%.1f tok/s), generated %d tokens (%.1f tok/s)%s\n", n_prompt,
            t_prompt > 0 ? n_prompt / t_prompt : 0.0, n_gen, t_gen > 0 ? n_gen / t_gen : 0.0,
            cli_interrupted ? ", interrupted" : "");
    gen_free(&g);
    return cli_interrupted ? 130 : 0;
oom:
    gen_free(&g);
    fprintf(stderr, "dspark: out of memory\n");
    return 1;
fail:
    rc = cli_fail(st);
    gen_free(&g);
    return rc;
}
