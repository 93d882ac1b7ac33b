// dspark datagen: the frozen target writes drafter training data (ds_datagen_run in include/dspark_jobs.h, the job;
// src/train/data.h, the file). `mpirun -np N dspark datagen ...` splits the sequences over ranks and
// writes the same bytes.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"

typedef struct {
    const char *model, *prompts, *out, *holdout_out;
    int unconditional, append;
    long count, max_tokens, seed, concurrency, threads;
    double holdout, plain;
    ds_sampler_params sp;
} dg_args;

#define A dg_args
static const cli_opt dg_opts[] = {
    CLI_OPT_MODEL(A, model, .help = "the target (default: stories260K)"),
    CLI_OPT_STR("--prompts", "FILE", A, prompts,
                "one prompt per line: plain text, or a JSON object: {\"prompt\": \"...\"},\n"
                "{\"messages\": [{\"role\", \"content\"}, ...]} or ShareGPT's {\"conversations\":\n"
                "[{\"from\", \"value\"}, ...]} (rendered with the target's chat format; trailing\n"
                "assistant turns dropped), or {\"instruction\", \"input\"}"),
    CLI_OPT_FLAG("--unconditional", A, unconditional, "start every sequence from BOS alone"),
    {.names = "-n|--count", .arg = "N", .type = CLI_LONG, .off = CLI_AT_LONG(A, count), .lo = 1, .hi = 1L << 40,
     .expects = "a positive count", .help = "sequences to write (prompts are used in turn, cycling)"},
    {.names = "--max-tokens", .arg = "L", .type = CLI_LONG, .off = CLI_AT_LONG(A, max_tokens), .lo = 1, .hi = 1 << 24,
     .expects = "a positive count", .help = "most tokens generated per sequence (it also stops at EOS, which is kept)"},
    CLI_OPT_STR("-o|--out", "DATA", A, out, "the data file (written atomically)"),
    CLI_OPT_FLAG("--append", A, append, "add to DATA (and the held-out file) instead of replacing it;\n"
                                        "use another --seed than before, or the same sequences come again"),
    {.names = "--holdout", .arg = "F", .type = CLI_DOUBLE, .off = CLI_AT_DOUBLE(A, holdout), .lo = 0, .hi = 1,
     .expects = "a fraction in [0, 1]", .help = "route a fraction F of the sequences (by a hash of seed and index) ..."},
    CLI_OPT_STR("--holdout-out", "FILE", A, holdout_out, "... to this file instead"),
    CLI_OPT_TEMP(A, sp, .help = "temperature (default 0.7; 0 = greedy)"),
    CLI_OPT_TOP_K(A, sp, .help = "(default 20; 0 = off)"),
    CLI_OPT_TOP_P(A, sp, .help = "(default 0.8; 1 = off)"),
    CLI_OPT_MIN_P(A, sp, .help = "(default 0 = off)"),
    CLI_OPT_PENALTIES(A, sp, .flags = CLI_UNDOCUMENTED),
    CLI_OPT_LOGIT_BIAS(A, sp, .flags = CLI_REPEATABLE | CLI_UNDOCUMENTED),
    CLI_OPT_VERIFY(A, sp.verify, .flags = CLI_UNDOCUMENTED),
    {.names = "--plain", .arg = "F", .type = CLI_DOUBLE, .off = CLI_AT_DOUBLE(A, plain), .lo = 0, .hi = 1,
     .expects = "a fraction in [0, 1]", .help = "sample a fraction F of the sequences (evenly spread) from the target's\n"
                                                "own distribution instead: temperature 1, no filter (default 0.5)"},
    CLI_OPT_SEED(A, seed, LONG, .help = "sequence i is sampled with seed S + i (default 0): the same file whatever R"),
    CLI_OPT_LONG("--concurrency", "R", A, concurrency, 1, 4096, "sequences decoded together (default 8)"),
    CLI_OPT_THREADS(A, threads, .help = "threads (default: all cores)"),
    CLI_OPT_TEXT("Ctrl-C stops and keeps the sequences completed so far.\n"
                 "mpirun -np N dspark datagen ...: rank r generates sequences r, r + N, ...; rank 0 writes the\n"
                 "same file as one process would (use -t 1 per rank on one machine)."),
    {0},
};
#undef A

const cli_command cli_datagen_cmd = {.name = "datagen",
    .summary = "write drafter training data with the target (dspark datagen --help)",
    .usage = "usage: dspark datagen [-m TARGET] (--prompts FILE | --unconditional) -n COUNT --max-tokens L -o DATA [options]",
    .col = 23, .opts = dg_opts};

static int parse_args(int argc, char **argv, dg_args *a) {
    memset(a, 0, sizeof *a);
    a->sp = ds_sampler_default();
    a->sp.temperature = 0.7f;
    a->sp.top_k = 20;
    a->sp.top_p = 0.8f;
    a->sp.min_p = 0;
    a->concurrency = 8;
    a->holdout = -1;
    a->plain = -1;
    a->count = -1;
    a->max_tokens = -1;
    const int rc = cli_parse(&cli_datagen_cmd, argc, argv, a);
    if (rc) return rc;
    if (!a->prompts == !a->unconditional) return cli_usage_error("datagen needs exactly one of --prompts FILE and --unconditional");
    if (a->count < 0) return cli_usage_error("datagen needs the number of sequences (-n COUNT)");
    if (a->max_tokens < 0) return cli_usage_error("datagen needs a length limit (--max-tokens L)");
    if (!a->out) return cli_usage_error("datagen needs an output file (-o DATA)");
    if ((a->holdout >= 0) != (a->holdout_out != NULL))
        return cli_usage_error("--holdout FRACTION and --holdout-out FILE go together");
    if (a->holdout_out && !strcmp(a->holdout_out, a->out)) return cli_usage_error("--holdout-out must differ from -o");
    return 0;
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

typedef struct {
    int tty;
    double last;
} dg_view;

static void show_progress(void *ctx, const ds_datagen_progress *p) {
    dg_view *v = ctx;
    if (p->elapsed_s - v->last < (v->tty ? 0.25 : 2.0)) return;
    v->last = p->elapsed_s;
    char eta[32];
    fmt_time(eta, sizeof eta, p->eta_s);
    fprintf(stderr, "%sdspark: datagen %ld/%ld sequences, %.0f tok/s, ETA %s%s", v->tty ? "\r\033[K" : "", p->completed,
            p->count, p->tok_per_s, eta, v->tty ? "" : "\n");
}

int cmd_datagen(int argc, char **argv) {
    ds_mpi_init(&argc, &argv);
    dg_args a;
    int rc = parse_args(argc, argv, &a);
    if (rc) {
        ds_mpi_finalize();
        return rc == CLI_HELP ? 0 : rc;
    }
    ds_datagen_params o = ds_datagen_default();
    if (!(o.target = cli_model_path(a.model))) {
        ds_mpi_finalize();
        return 1;
    }
    const int rank = ds_mpi_rank();
    ds_set_threads((int)a.threads); // (the process's count: the job carries none)
    o.prompts = a.prompts;
    o.out = a.out;
    o.holdout_out = a.holdout_out;
    o.holdout = a.holdout;
    o.append = a.append;
    o.count = a.count;
    o.max_tokens = (int)a.max_tokens;
    o.seed = (uint64_t)a.seed;
    o.concurrency = (int)a.concurrency;
    o.sp = a.sp;
    if (a.plain >= 0) o.plain = a.plain;
    cli_catch_interrupt(); // Ctrl-C stops cleanly (the temporary files are removed or committed)
    o.interrupted = &cli_interrupted;
    dg_view view = {.tty = isatty(2), .last = -1e9};
    o.progress = show_progress;
    o.progress_ctx = &view;
    ds_datagen_result r;
    ds_status st = ds_datagen_run(&o, &r);
    ds_mpi_finalize();
    if (view.tty && rank == 0) fputs("\r\033[K", stderr);
    if (rank != 0) return st == DS_OK ? 0 : st == DS_ERR_INTERRUPTED ? 130 : 1;
    if (st == DS_ERR_INTERRUPTED) {
        fprintf(stderr, "dspark: %s\n", ds_last_error());
        return 130;
    }
    if (st) return cli_fail(st);
    if (r.interrupted)
        fprintf(stderr, "dspark: interrupted: committing the %ld sequences completed so far (of %ld)\n",
                r.written + r.held_out, a.count);
    fprintf(stderr, "dspark: wrote %ld sequences to %s (%ld in the file)", r.written, a.out, r.in_file);
    if (a.holdout_out) fprintf(stderr, ", %ld held out to %s", r.held_out, a.holdout_out);
    fprintf(stderr, "; %lld tokens generated in %.1f s (%.0f tok/s)\n", r.gen_tokens, r.seconds,
            r.seconds > 0 ? (double)r.gen_tokens / r.seconds : 0.0);
    return r.interrupted ? 130 : 0;
}
