// dspark datagen: the frozen target writes drafter training data (src/train/data.h): R sequences
// at a time through the engine (plain decoding), each from a prompt (or BOS alone) with its own
// seed, written in generation order so the file does not depend on R.
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "train/data.h"

typedef struct {
    const char *model, *prompts, *out, *holdout_out;
    int unconditional, append;
    long count, max_tokens, seed, concurrency, threads;
    double holdout;
    ds_sampler_params sp;
} dg_args;

static void dg_usage(FILE *f) {
    fprintf(f,
            "usage: dspark datagen [-m TARGET] (--prompts FILE | --unconditional) -n COUNT --max-tokens L -o DATA [options]\n"
            "  -m, --model PATH     the target (default: stories260K)\n"
            "  --prompts FILE       one prompt per line: plain text, or a JSON object with a \"prompt\" string\n"
            "  --unconditional      start every sequence from BOS alone\n"
            "  -n, --count N        sequences to write (prompts are used in turn, cycling)\n"
            "  --max-tokens L       most tokens generated per sequence (it also stops at EOS, which is kept)\n"
            "  -o, --out DATA       the data file (written atomically)\n"
            "  --append             add to DATA (and the held-out file) instead of replacing it;\n"
            "                       use another --seed than before, or the same sequences come again\n"
            "  --holdout F          route a fraction F of the sequences (by a hash of seed and index) ...\n"
            "  --holdout-out FILE   ... to this file instead\n"
            "  --temp T             temperature (default 0.7; 0 = greedy)\n"
            "  --top-k K            (default 20; 0 = off)\n"
            "  --top-p P            (default 0.8; 1 = off)\n"
            "  --min-p M            (default 0 = off)\n"
            "  --seed S             sequence i is sampled with seed S + i (default 0): the same file whatever R\n"
            "  --concurrency R      sequences decoded together (default 8)\n"
            "  -t, --threads N      threads (default: all cores)\n"
            "Ctrl-C stops and keeps the sequences completed so far.\n");
}

static int parse_args(int argc, char **argv, dg_args *a) {
    memset(a, 0, sizeof *a);
    a->sp = ds_sampler_default();
    a->sp.temperature = 0.7f;
    a->sp.top_k = 20;
    a->sp.top_p = 0.8f;
    a->sp.min_p = 0;
    a->concurrency = 8;
    a->holdout = -1;
    a->count = -1;
    a->max_tokens = -1;
    for (int i = 1; i < argc; i++) {
        const char *o = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(o, "-h") || !strcmp(o, "--help")) {
            dg_usage(stdout);
            exit(0);
        } else if (!strcmp(o, "--unconditional")) {
            a->unconditional = 1;
            continue;
        } else if (!strcmp(o, "--append")) {
            a->append = 1;
            continue;
        }
        if (!v) return cli_missing_value(o, "datagen", dg_usage);
        i++;
        int r = cli_sampling_option(o, v, &a->sp);
        if (!r) r = cli_run_option(o, v, &a->model, NULL, &a->threads, &a->seed);
        if (r < 0) return -r;
        if (r) continue;
        if (!strcmp(o, "--prompts")) a->prompts = v;
        else if (!strcmp(o, "-o") || !strcmp(o, "--out")) a->out = v;
        else if (!strcmp(o, "--holdout-out")) a->holdout_out = v;
        else if (!strcmp(o, "-n") || !strcmp(o, "--count")) {
            if (!cli_parse_int(v, 1, 1L << 40, &a->count)) return cli_usage_error("-n expects a positive count, got '%s'", v);
        } else if (!strcmp(o, "--max-tokens")) {
            if (!cli_parse_int(v, 1, 1 << 24, &a->max_tokens))
                return cli_usage_error("--max-tokens expects a positive count, got '%s'", v);
        } else if (!strcmp(o, "--concurrency")) {
            if (!cli_parse_int(v, 1, 4096, &a->concurrency)) return cli_usage_error("--concurrency expects 1..4096, got '%s'", v);
        } else if (!strcmp(o, "--holdout")) {
            if (!cli_parse_float(v, 0, 1, &a->holdout)) return cli_usage_error("--holdout expects a fraction in [0, 1], got '%s'", v);
        } else {
            return cli_usage_error("unknown option '%s' (see dspark datagen --help)", o);
        }
    }
    if (!a->prompts == !a->unconditional) return cli_usage_error("datagen needs exactly one of --prompts FILE and --unconditional");
    if (a->count < 0) return cli_usage_error("datagen needs the number of sequences (-n COUNT)");
    if (a->max_tokens < 0) return cli_usage_error("datagen needs a length limit (--max-tokens L)");
    if (!a->out) return cli_usage_error("datagen needs an output file (-o DATA)");
    if ((a->holdout >= 0) != (a->holdout_out != NULL))
        return cli_usage_error("--holdout FRACTION and --holdout-out FILE go together");
    if (a->holdout_out && !strcmp(a->holdout_out, a->out)) return cli_usage_error("--holdout-out must differ from -o");
    return 0;
}

// A sequence in flight (one engine slot) or completed and waiting for its turn in the file.
typedef struct {
    long index;      // position in the generation order; -1 = free slot
    int id;          // engine sequence id
    int32_t *toks;   // (n_prompt + max_tokens + 1)
    int n, n_prompt;
} dg_seq;

typedef struct {
    ds_model *model;
    ds_engine *engine;
    ds_prompt_set *prompts;
    int32_t **ptoks;   // (n_sources) tokenized prompts, BOS first
    int *pn;
    int n_sources;
    ds_data_writer *w, *wh;
    dg_seq *slots;     // (R)
    dg_seq *done;      // completed, not yet written (unordered)
    int n_done, cap_done;
} dg_state;

static void dg_free(dg_state *g, int n_slots) {
    ds_data_writer_abort(g->w);
    ds_data_writer_abort(g->wh);
    ds_engine_free(g->engine);
    ds_model_free(g->model);
    for (int i = 0; i < g->n_sources; i++) free(g->ptoks[i]);
    free(g->ptoks);
    free(g->pn);
    ds_prompts_free(g->prompts);
    for (int i = 0; g->slots && i < n_slots; i++) free(g->slots[i].toks);
    free(g->slots);
    for (int i = 0; i < g->n_done; i++) free(g->done[i].toks);
    free(g->done);
}

static ds_status write_seq(dg_state *g, const dg_args *a, const dg_seq *s, long *n_main, long *n_hold) {
    const int hold = g->wh && ds_data_is_holdout((uint64_t)s->index, (uint64_t)a->seed, a->holdout);
    (*(hold ? n_hold : n_main))++;
    return ds_data_writer_add(hold ? g->wh : g->w, s->toks, s->n, s->n_prompt);
}

static int cmp_index(const void *x, const void *y) {
    const long a = ((const dg_seq *)x)->index, b = ((const dg_seq *)y)->index;
    return (a > b) - (a < b);
}

static void fmt_time(char *buf, size_t cap, double s) {
    if (!(s >= 0) || s > 1e8) {
        snprintf(buf, cap, "?");
        return;
    }
    const long t = (long)(s + 0.5);
    if (t >= 3600) snprintf(buf, cap, "%ld:%02ld:%02ld", t / 3600, t / 60 % 60, t % 60);
    else snprintf(buf, cap, "%ld:%02ld", t / 60, t % 60);
}

int cmd_datagen(int argc, char **argv) {
    dg_args a;
    int rc = parse_args(argc, argv, &a);
    if (rc) return rc;
    dg_state g = {0};
    const int R = (int)(a.concurrency < a.count ? a.concurrency : a.count);
    ds_status st;
    if (a.prompts && (st = ds_prompts_load(a.prompts, &g.prompts))) return cli_fail(st);
    const char *path = cli_model_path(a.model);
    if (!path) {
        dg_free(&g, 0);
        return 1;
    }
    ds_model_params mp = {.n_threads = (int)a.threads};
    if ((st = ds_model_load(path, &mp, &g.model))) goto fail;
    const ds_model_info *info = ds_model_get_info(g.model);
    const ds_tokenizer *tok = ds_model_tokenizer(g.model);

    // The sources: tokenized prompts (with BOS), or BOS alone.
    g.n_sources = g.prompts ? g.prompts->n : 1;
    g.ptoks = calloc((size_t)g.n_sources, sizeof *g.ptoks);
    g.pn = calloc((size_t)g.n_sources, sizeof *g.pn);
    if (!g.ptoks || !g.pn) goto oom;
    if (!g.prompts) {
        if (info->bos_id < 0) {
            fprintf(stderr, "dspark: %s has no BOS token, so --unconditional has nothing to start from\n", path);
            dg_free(&g, 0);
            return 1;
        }
        if (!(g.ptoks[0] = malloc(sizeof(int32_t)))) goto oom;
        g.ptoks[0][0] = info->bos_id;
        g.pn[0] = 1;
    } else if (!tok) {
        fprintf(stderr, "dspark: %s has no tokenizer dspark supports, so it cannot take text prompts\n", path);
        dg_free(&g, 0);
        return 1;
    }
    for (int i = 0; g.prompts && i < g.n_sources; i++) {
        const char *text = g.prompts->text[i];
        int n = 0;
        if ((st = ds_tokenize(tok, text, strlen(text), 1, NULL, 0, &n))) goto fail_line;
        if (!(g.ptoks[i] = malloc(sizeof(int32_t) * (size_t)(n > 0 ? n : 1)))) goto oom;
        if ((st = ds_tokenize(tok, text, strlen(text), 1, g.ptoks[i], n, &n))) goto fail_line;
        g.pn[i] = n;
        if (n < 1) {
            fprintf(stderr, "dspark: %s:%d: the prompt encodes to no tokens (the model has no BOS)\n", a.prompts,
                    g.prompts->line[i]);
            dg_free(&g, 0);
            return 1;
        }
        if ((long)n + a.max_tokens > info->max_ctx) {
            fprintf(stderr, "dspark: %s:%d: prompt (%d tokens) + %ld new tokens exceed the model's context of %d\n",
                    a.prompts, g.prompts->line[i], n, a.max_tokens, info->max_ctx);
            dg_free(&g, 0);
            return 1;
        }
        continue;
    fail_line:
        fprintf(stderr, "dspark: %s:%d: %s\n", a.prompts, g.prompts->line[i], ds_last_error());
        dg_free(&g, 0);
        return 1;
    }
    if (!g.prompts && 1 + a.max_tokens > info->max_ctx) {
        rc = cli_usage_error("--max-tokens %ld exceeds the model's context of %d", a.max_tokens, info->max_ctx);
        dg_free(&g, 0);
        return rc;
    }

    // From here on Ctrl-C stops cleanly (the temporary files are removed or committed).
    cli_catch_interrupt();
    // Writers first: a bad output path fails before any generation.
    if ((st = ds_data_writer_open(a.out, (uint64_t)info->vocab_size, a.append, &g.w))) goto fail;
    if (a.holdout_out && (st = ds_data_writer_open(a.holdout_out, (uint64_t)info->vocab_size, a.append, &g.wh))) goto fail;
    const long existing = (long)ds_data_writer_count(g.w);
    const ds_spec_params none = {.kind = DS_SPEC_NONE};
    if ((st = ds_engine_init(g.model, NULL, &none, &g.engine))) goto fail;
    if (!(g.slots = calloc((size_t)R, sizeof *g.slots))) goto oom;
    int max_pn = 0;
    for (int i = 0; i < g.n_sources; i++) max_pn = g.pn[i] > max_pn ? g.pn[i] : max_pn;
    const size_t seq_cap = (size_t)max_pn + (size_t)a.max_tokens + 1;
    for (int r = 0; r < R; r++) {
        g.slots[r].index = -1;
        if (!(g.slots[r].toks = malloc(sizeof(int32_t) * seq_cap))) goto oom;
    }

    // Reproducible whatever R: decoding rounds run every product through the multi-row kernel, whose
    // result for a row never depends on the other rows (sgemm's summation order changes with the
    // batch size, and at R >= 10 sampled tokens near a tie would differ). Measured on a 2048 x 16
    // model with R = 16 and 32, no slower than sgemm on this memory-bound decoding. Prefill (one
    // sequence, the same rows whatever R) keeps sgemm.
    const int tty = isatty(2);
    const double t0 = cli_now();
    double last_report = t0;
    long next = 0, written = 0, n_main = 0, n_hold = 0, completed = 0;
    long long gen_tokens = 0;
    for (;;) {
        // Fill free slots in index order.
        for (int r = 0; r < R && next < a.count && !cli_interrupted; r++) {
            dg_seq *s = &g.slots[r];
            if (s->index >= 0) continue;
            const int src = (int)(next % g.n_sources);
            const ds_seq_params sq = {.prompt = g.ptoks[src], .n_prompt = g.pn[src], .max_new = (int)a.max_tokens, .sp = &a.sp,
                                      .seed = (uint64_t)a.seed + (uint64_t)next, .batch_invariant = 1};
            if ((st = ds_engine_add(g.engine, &sq, &s->id)))
                goto fail;
            memcpy(s->toks, g.ptoks[src], sizeof(int32_t) * (size_t)g.pn[src]);
            s->n = s->n_prompt = g.pn[src];
            s->index = next++;
        }
        if (cli_interrupted || !ds_engine_active(g.engine)) break;
        if ((st = ds_engine_step(g.engine))) goto fail;
        for (int r = 0; r < R; r++) {
            dg_seq *s = &g.slots[r];
            if (s->index < 0) continue;
            const int got = ds_engine_take(g.engine, s->id, s->toks + s->n, (int)(seq_cap - (size_t)s->n));
            s->n += got;
            gen_tokens += got;
            if (!ds_engine_finished(g.engine, s->id)) continue;
            int32_t stop_tok;
            if (ds_engine_finish_reason(g.engine, s->id, &stop_tok) == DS_FINISH_STOP)
                s->toks[s->n++] = stop_tok; // the stop id it produced (EOS, <|im_end|>, ...)
            ds_engine_remove(g.engine, s->id);
            completed++;
            // Hand the buffer over to the completed list; the slot gets a fresh one.
            if (g.n_done == g.cap_done) {
                const int nc = g.cap_done ? 2 * g.cap_done : 16;
                dg_seq *nd = realloc(g.done, sizeof *nd * (size_t)nc);
                if (!nd) goto oom;
                g.done = nd;
                g.cap_done = nc;
            }
            g.done[g.n_done++] = *s;
            s->index = -1;
            if (!(s->toks = malloc(sizeof(int32_t) * seq_cap))) goto oom;
        }
        // Write the completed sequences that are next in order.
        for (int found = 1; found;) {
            found = 0;
            for (int j = 0; j < g.n_done; j++)
                if (g.done[j].index == written) {
                    if ((st = write_seq(&g, &a, &g.done[j], &n_main, &n_hold))) goto fail;
                    free(g.done[j].toks);
                    g.done[j] = g.done[--g.n_done];
                    written++;
                    found = 1;
                    break;
                }
        }
        const double now = cli_now();
        if (now - last_report >= (tty ? 0.25 : 2.0)) {
            last_report = now;
            const double el = now - t0, rate = completed > 0 ? el / (double)completed : 0;
            char eta[32];
            fmt_time(eta, sizeof eta, completed > 0 ? rate * (double)(a.count - completed) : -1);
            fprintf(stderr, "%sdspark: datagen %ld/%ld sequences, %.0f tok/s, ETA %s%s", tty ? "\r\033[K" : "", completed,
                    a.count, el > 0 ? (double)gen_tokens / el : 0.0, eta, tty ? "" : "\n");
        }
    }
    if (tty) fputs("\r\033[K", stderr);
    // Interrupted: keep every completed sequence (in index order), drop the ones in flight.
    if (g.n_done) {
        qsort(g.done, (size_t)g.n_done, sizeof *g.done, cmp_index);
        for (int j = 0; j < g.n_done; j++)
            if ((st = write_seq(&g, &a, &g.done[j], &n_main, &n_hold))) goto fail;
    }
    if (cli_interrupted && completed == 0) { // leave any existing file as it was
        fprintf(stderr, "dspark: interrupted before any sequence was complete: nothing written\n");
        dg_free(&g, R);
        return 130;
    }
    if (cli_interrupted)
        fprintf(stderr, "dspark: interrupted: committing the %ld sequences completed so far (of %ld)\n", completed,
                a.count);
    if (g.wh) {
        st = ds_data_writer_commit(g.wh);
        g.wh = NULL;
        if (st) goto fail;
    }
    st = ds_data_writer_commit(g.w);
    g.w = NULL;
    if (st) goto fail;
    const double el = cli_now() - t0;
    fprintf(stderr, "dspark: wrote %ld sequences to %s (%ld in the file)", n_main, a.out, existing + n_main);
    if (a.holdout_out) fprintf(stderr, ", %ld held out to %s", n_hold, a.holdout_out);
    fprintf(stderr, "; %lld tokens generated in %.1f s (%.0f tok/s)\n", gen_tokens, el,
            el > 0 ? (double)gen_tokens / el : 0.0);
    dg_free(&g, R);
    return cli_interrupted ? 130 : 0;
oom:
    dg_free(&g, R);
    fprintf(stderr, "dspark: out of memory\n");
    return 1;
fail:
    rc = cli_fail(st);
    dg_free(&g, R);
    return rc;
}
