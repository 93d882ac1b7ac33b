// dspark chat: an interactive conversation with a model. Each line read from stdin is a user
// message; the whole conversation is rendered in the tokenizer's chat format (ds_chat_render),
// and the reply streams to stdout until the format's end-of-turn token, EOS or -n tokens. Works
// on piped stdin (one reply per line, then exit at end of input); "/exit" also ends it.
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"

typedef struct {
    const char *model, *drafter, *system;
    long n_predict, threads, seed;
    ds_sampler_params sp;
    ds_spec_params spec;
    ds_cost_table costs;
    unsigned given;
    int stats;
} chat_args;

#define A chat_args
static const cli_opt chat_opts[] = {
    CLI_OPT_MODEL(A, model, .help = ".gguf file or Hugging Face directory (default: stories260K)"),
    CLI_OPT_STR("--system", "TEXT", A, system, "a system message at the start of the conversation"),
    {.names = "-n|--n-predict", .arg = "N", .type = CLI_LONG, .off = CLI_AT_LONG(A, n_predict), .lo = 1, .hi = 1 << 24,
     .expects = "a positive count", .help = "most tokens per reply (default 256)"},
    CLI_OPT_TEMP(A, sp, .show = "--temp T, --top-k K, --top-p P, --min-p M, --seed S", .help = "  sampling (default greedy)"),
    CLI_OPT_TOP_K(A, sp, .help = NULL),
    CLI_OPT_TOP_P(A, sp, .help = NULL),
    CLI_OPT_MIN_P(A, sp, .help = NULL),
    CLI_OPT_SEED(A, seed, LONG, .help = NULL),
    CLI_OPT_PENALTIES(A, sp, .flags = CLI_UNDOCUMENTED),
    CLI_OPT_LOGIT_BIAS(A, sp, .flags = CLI_REPEATABLE | CLI_UNDOCUMENTED),
    CLI_OPT_VERIFY(A, sp.verify, .show = "--verify coupled|residual", .help = " how sampled drafts are verified (default coupled)"),
    CLI_OPT_THREADS(A, threads, .help = "threads (default: all cores)"),
    CLI_OPT_DRAFTER(A, drafter, .help = "a DeepSpec drafter paired with the model"),
    CLI_OPT_SPEC(A, spec, .show = "--spec KIND, --draft-max K, --conf-threshold C, --schedule S, --costs FILE, --ngram N, --tree N, --tree-depth D",
                 .help = "\nspeculative decoding, as for dspark generate"),
    CLI_OPT_DRAFT_MAX(A, spec, .help = NULL),
    CLI_OPT_CONF_THRESHOLD(A, spec, .help = NULL),
    CLI_OPT_SCHEDULE(A, spec, .help = NULL),
    CLI_OPT_COSTS(A, costs, .help = NULL),
    CLI_OPT_NGRAM(A, spec, .help = NULL),
    CLI_OPT_TREE(A, spec, .help = NULL),
    CLI_OPT_TREE_DEPTH(A, spec, .help = NULL),
    CLI_OPT_CACHE_MB(A, spec, .help = "prompt cache in MiB: each turn reuses the conversation so far, in whole\n"
                                      "chunks of 256 tokens, output unchanged (default 1024; 0 = off)"),
    CLI_OPT_FLAG("--stats", A, stats, "print speculation statistics to stderr after each reply"),
    CLI_OPT_TEXT("The format comes from the tokenizer (chatml, gemma, llama3; plain \"role: content\" lines\n"
                 "for models without a chat template). Type /exit or end the input to quit."),
    {0},
};
#undef A

const cli_command cli_chat_cmd = {.name = "chat", .summary = "interactive chat with a model (reads lines from stdin)",
    .usage = "usage: dspark chat [-m MODEL] [--system TEXT] [-n N] [options]   (one user message per line)", .col = 21,
    .opts = chat_opts, .given_off = offsetof(chat_args, given)};

static int parse_args(int argc, char **argv, chat_args *a) {
    memset(a, 0, sizeof *a);
    a->n_predict = 256;
    a->sp = ds_sampler_default();
    a->spec.prompt_cache_bytes = (size_t)1024 << 20;
    const int rc = cli_parse(&cli_chat_cmd, argc, argv, a);
    if (rc) return rc;
    return cli_spec_finish(&a->spec, &a->costs, a->given, a->drafter);
}

typedef struct {
    ds_chat_message *msgs;
    int n, cap;
} conversation;

static int conv_add(conversation *c, const char *role, const char *content) {
    if (c->n == c->cap) {
        int nc = c->cap ? 2 * c->cap : 16;
        ds_chat_message *nm = realloc(c->msgs, (size_t)nc * sizeof *nm);
        if (!nm) return 0;
        c->msgs = nm, c->cap = nc;
    }
    char *s = strdup(content);
    if (!s) return 0;
    c->msgs[c->n++] = (ds_chat_message){role, s};
    return 1;
}

static void conv_free(conversation *c) {
    for (int i = 0; i < c->n; i++) free((char *)c->msgs[i].content);
    free(c->msgs);
}

// One line of `f` without its line ending into *buf (grown up to `max` bytes). Returns its length,
// or LINE_EOF at end of input, LINE_ERROR on a read error (errno set), LINE_TOO_LONG past `max`
// bytes (the rest of the line is not read), LINE_NUL when it holds a NUL byte, LINE_NOMEM.
enum { LINE_EOF = -1, LINE_ERROR = -2, LINE_TOO_LONG = -3, LINE_NUL = -4, LINE_NOMEM = -5 };
static long read_line(FILE *f, char **buf, size_t *cap, size_t max) {
    size_t n = 0;
    int c, nul = 0;
    errno = 0;
    while ((c = getc(f)) != EOF && c != '\n') {
        if (n + 2 > *cap) {
            if (n >= max) return LINE_TOO_LONG;
            size_t want = *cap ? *cap * 2 : 256;
            if (want > max + 2) want = max + 2;
            char *b = realloc(*buf, want);
            if (!b) return LINE_NOMEM;
            *buf = b;
            *cap = want;
        }
        nul |= c == 0;
        (*buf)[n++] = (char)c;
    }
    if (c == EOF && ferror(f)) return LINE_ERROR;
    if (c == EOF && n == 0) return LINE_EOF;
    while (n > 0 && (*buf)[n - 1] == '\r') n--;
    if (!*buf && !(*buf = malloc(*cap = 1))) return LINE_NOMEM;
    (*buf)[n] = 0;
    return nul ? LINE_NUL : (long)n;
}

int cmd_chat(int argc, char **argv) {
    chat_args a;
    int rc = parse_args(argc, argv, &a);
    if (rc) return rc == CLI_HELP ? 0 : rc;
    ds_model *m = cli_load_text_model(a.model, a.threads);
    if (!m) return 1;
    ds_drafter *dr = NULL;
    ds_engine *e = NULL;
    conversation conv = {0};
    char *line = NULL;
    ds_gen *g = NULL; // this turn's reply
    size_t line_cap = 0;
    ds_status st = DS_OK;
    const ds_tokenizer *tok = ds_model_tokenizer(m);
    const int interactive = isatty(0);
    if (a.drafter && !(dr = cli_load_drafter(a.drafter, m))) {
        rc = 1;
        goto done;
    }
    if ((st = ds_engine_init(m, dr, &a.spec, &e))) goto fail;
    if (a.system && !conv_add(&conv, "system", a.system)) goto oom;
    fprintf(stderr, "dspark: chat format %s; /exit or end of input to quit\n", ds_chat_format_name(tok));
    cli_catch_interrupt();
    // A line longer than the context could hold at 64 bytes per token is refused (without reading
    // it all: stdin may never end).
    const size_t max_line = (size_t)ds_model_get_info(m)->max_ctx * 64;
    for (int turn = 0, line_no = 1;; turn++, line_no++) {
        if (interactive) fprintf(stderr, "> ");
        const long got = read_line(stdin, &line, &line_cap, max_line);
        if (cli_interrupted || got == LINE_EOF) break;
        if (got < 0) {
            if (got == LINE_ERROR) fprintf(stderr, "dspark: reading standard input: %s\n", strerror(errno));
            else if (got == LINE_NOMEM) fprintf(stderr, "dspark: out of memory reading line %d of standard input\n", line_no);
            else if (got == LINE_NUL) fprintf(stderr, "dspark: line %d of standard input holds a NUL byte\n", line_no);
            else
                fprintf(stderr, "dspark: line %d of standard input is longer than %zu bytes (more than the model's context "
                                "of %d tokens holds)\n", line_no, max_line, ds_model_get_info(m)->max_ctx);
            rc = 1;
            goto done;
        }
        if (!strcmp(line, "/exit")) break;
        if (got == 0) continue;
        if (!conv_add(&conv, "user", line)) goto oom;
        // The reply to the conversation so far; it ends at the format's end-of-turn token (not shown).
        const ds_gen_request req = {.msgs = conv.msgs, .n_msgs = conv.n, .sp = a.sp, .seed = (uint64_t)a.seed + (uint64_t)turn};
        ds_gen_free(g);
        if ((st = ds_gen_init(tok, &req, &g))) goto fail;
        int n;
        ds_gen_prompt(g, &n);
        const int max_ctx = ds_model_get_info(m)->max_ctx;
        if (n + 1 >= max_ctx) {
            fprintf(stderr, "dspark: the conversation (%d tokens) fills the model's context of %d\n", n, max_ctx);
            break;
        }
        const int max_new = (int)a.n_predict < max_ctx - n ? (int)a.n_predict : max_ctx - n;
        if ((st = ds_gen_begin(g, e, max_new))) goto fail;
        size_t shown = 0; // the reply streams as it is generated
        const ds_gen_run_params run = {.on_update = cli_gen_show, .interrupted = cli_gen_interrupted, .ctx = &shown};
        st = ds_gen_run_begun(e, &g, 1, &run, NULL);
        if (st && st != DS_ERR_INTERRUPTED) goto fail;
        if ((st = ds_gen_end(g))) goto fail; // (interrupted: the reply so far)
        cli_gen_show(&shown, 0, g);
        putchar('\n');
        fflush(stdout);
        if (a.stats) {
            const ds_seq_stats *s = ds_gen_stats(g);
            int n_prompt = 0;
            ds_gen_prompt(g, &n_prompt);
            fprintf(stderr, "dspark: %d tokens, %d rounds, tau %.3f, prompt %d tokens (%d cached)\n", s->generated,
                    s->rounds, s->tau, n_prompt, s->cached_tokens);
        }
        ds_gen_leave(g);
        if (!conv_add(&conv, "assistant", ds_text_out_text(ds_gen_text(g), NULL))) goto oom;
    }
    goto done;
oom:
    fprintf(stderr, "dspark: out of memory\n");
    rc = 1;
    goto done;
fail:
    rc = cli_fail(st);
done:
    free(line);
    ds_gen_free(g);
    conv_free(&conv);
    ds_engine_free(e);
    ds_drafter_free(dr);
    ds_model_free(m);
    return rc ? rc : cli_interrupted ? 130 : 0;
}
