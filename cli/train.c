// dspark train: train a DSpark (or DFlash) drafter for a frozen target on datagen output.
#include <cjson/cJSON.h>
#include <fcntl.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli.h"

extern char **environ;

typedef struct {
    ds_train_params o;
    const char *model, *plot;
    int reg, threads; // --register, -t
} train_args;

// --seed S: the data order, the anchors and a fresh drafter's initialization.
static int set_seed(void *field, const char *v) {
    ds_train_params *o = field;
    long n;
    if (!cli_parse_int(v, 0, 0x7fffffffffffffffL, &n)) return cli_usage_error("--seed expects a non-negative integer");
    o->seed = (uint64_t)n;
    o->shape.seed = (uint64_t)n;
    return 0;
}

// --eval-temp T[,T..]
static int set_eval_temps(void *field, const char *v) {
    ds_train_params *o = field;
    const int n = cli_parse_temps("--eval-temp", v, o->eval_temps, DS_TRAIN_MAX_EVAL_TEMPS);
    if (n < 0) return 2;
    o->n_eval_temps = n;
    return 0;
}

#define A train_args
#define STEPS(N, f, H) CLI_OPT_INT(N, "N", A, o.f, 1, 100000000, H)
#define WEIGHT(N, f, H) CLI_OPT_FLOAT(N, "W", A, o.lw.f, 0, 1e6, H)
static const cli_opt train_opts[] = {
    {.names = "-m|--model", .arg = "TARGET", .type = CLI_STRING, .off = CLI_AT_STR(A, model), .flags = CLI_HELP_ELSEWHERE,
     .help = "the frozen target (default: stories260K)"},
    {.names = "--data", .arg = "DATA", .type = CLI_STRING, .off = CLI_AT_STR(A, o.data), .flags = CLI_HELP_ELSEWHERE,
     .help = "the training data (dspark datagen)"},
    {.names = "--init", .arg = "DIR", .type = CLI_STRING, .off = CLI_AT_STR(A, o.init), .flags = CLI_HELP_ELSEWHERE,
     .help = "the drafter to start from (default: a fresh one of the shape options)"},
    {.names = "-o|--out", .arg = "OUT", .type = CLI_STRING, .off = CLI_AT_STR(A, o.out), .flags = CLI_HELP_ELSEWHERE,
     .help = "the run's directory: the drafter, checkpoints, metrics.jsonl"},
    STEPS("--steps", steps, "optimizer steps (default 3200)"),
    CLI_OPT_INT("--batch", "SEQS", A, o.batch, 1, 1000000, "sequences per step, over all MPI ranks (default 8)"),
    CLI_OPT_INT("--anchors", "A", A, o.anchors, 1, 1000000, "anchor blocks sampled per sequence (default 64)"),
    CLI_OPT_FLOAT("--lr", "LR", A, o.lr, 1e-9, 10,
                  "peak learning rate (default 6e-3); --warmup F fraction of steps (0.04)\n"
                  "(the defaults are measured on stories260K, docs/results.md; DeepSpec uses\n"
                  "--anchors 512 --lr 6e-4 for targets of billions of parameters)"),
    CLI_OPT_FLOAT("--warmup", "F", A, o.warmup, 0, 1, NULL),
    CLI_OPT_FLOAT("--clip", "C", A, o.clip, 0, 1e9, "gradient-norm clip (default 1.0; 0 = off)"),
    CLI_OPT_FLOAT("--decay", "D", A, o.lw.decay, 1e-3, 1e6, "per-slot loss weight exp(-k/D) (default 4)"),
    {.names = "--ce", .arg = "W", .type = CLI_FLOAT, .off = CLI_AT_FLOAT(A, o.lw.ce), .lo = 0, .hi = 1e6,
     .show = "--ce W --l1 W --conf W", .help = "  loss weights (default 0.1, 0.9, 1.0)"},
    WEIGHT("--l1", l1, NULL),
    WEIGHT("--conf", conf, NULL),
    WEIGHT("--kl", kl, "weight of KL(target || drafter), the target's distribution as a soft label (default 0)"),
    {.names = "--seed", .arg = "S", .type = CLI_CALL, .off = offsetof(A, o), .call = set_seed,
     .expects = "a non-negative integer", .help = "data order, anchors and fresh init (default 0)"},
    STEPS("--save-every", save_every, "checkpoint period (default steps/10); also at the end and on Ctrl-C"),
    STEPS("--keep", keep, "complete checkpoints kept in OUT/checkpoints (default 2; older ones are\n"
                          "removed once a newer one is current)"),
    CLI_OPT_FLAG("--resume", A, o.resume, "continue the run in OUT from its newest complete checkpoint, exactly"),
    STEPS("--stop-after", stop_after, "save and stop after N steps of this run (resume later)"),
    CLI_OPT_STR("--plot", "FILE.png", A, plot, "draw the loss curve (and held-out tau) with gnuplot at the end"),
    CLI_OPT_STR("--eval-prompts", "FILE", A, o.eval_prompts,
                "  held-out prompts: decode them with the current weights (full blocks)\n"
                "and record tau and acceptance by position in metrics.jsonl"),
    STEPS("--eval-every", eval_every, "steps between held-out evaluations (default: --save-every); also at the end"),
    {.names = "--eval-temp", .arg = "T[,T..]", .type = CLI_CALL, .off = offsetof(A, o), .call = set_eval_temps,
     .flags = CLI_LIST, .expects = "up to 4 temperatures in [0, 100]",
     .help = "  temperatures evaluated (default 0; up to 4; the first ranks --keep-best)"},
    CLI_OPT_INT("--eval-max-tokens", "L", A, o.eval_max_tokens, 1, 1 << 24,
                "  tokens per held-out prompt (default 128)  --eval-seed S (default 0)"),
    {.names = "--eval-seed", .arg = "S", .type = CLI_U64, .off = CLI_AT_U64(A, o.eval_seed), .lo = 0, .hi = CLI_SEED_MAX,
     .expects = "a non-negative integer", .err = "--eval-seed expects a non-negative integer"},
    CLI_OPT_FLAG("--keep-best", A, o.keep_best, "keep the drafter of the best held-out tau in OUT/best (with heldout.json)"),
    CLI_OPT_INT("--patience", "N", A, o.patience, 1, 1000000, "stop when held-out tau has not improved in N evaluations"),
    CLI_OPT_FLAG("--register", A, reg, "record the drafter (OUT/best with --keep-best, else OUT) and its held-out tau\n"
                                       "in the drafter registry ($DSPARK_REGISTRY; see dspark drafters --help)"),
    {.names = "-t", .arg = "THREADS", .type = CLI_INT, .off = CLI_AT_INT(A, threads), .lo = 1, .hi = 1024, .help = ""},
    CLI_OPT_TEXT("  shape options for a fresh drafter (no --init): --layers 5 --block 7 --markov-rank R\n"
                 "                   --markov-head vanilla|gated|rnn --taps L1,L2,.. --no-confidence"),
    CLI_OPT_LAYERS(A, o.shape, .flags = CLI_HELP_ELSEWHERE, .help = "draft layers (default 5)"),
    CLI_OPT_BLOCK(A, o.shape, .flags = CLI_HELP_ELSEWHERE, .help = "slots per block (default 7)"),
    CLI_OPT_MARKOV_RANK(A, o.shape, .flags = CLI_HELP_ELSEWHERE, .help = "Markov head rank; 0 = DFlash"),
    CLI_OPT_MARKOV_HEAD(A, o.shape, .flags = CLI_HELP_ELSEWHERE, .help = "the Markov head"),
    {.names = "--taps", .arg = "L1,L2,..", .type = CLI_CALL, .off = offsetof(A, o.shape), .call = cli_set_taps,
     .flags = CLI_LIST | CLI_HELP_ELSEWHERE, .expects = "layer ids", .help = "target layers to tap"},
    CLI_OPT_NO_CONFIDENCE(A, o.shape, .flags = CLI_HELP_ELSEWHERE, .help = "no confidence head"),
    CLI_OPT_TEXT("  --markov-rank 0 --ce 1 --l1 0 --conf 0 trains the DFlash baseline.\n"
                 "  Data-parallel: mpirun -np N dspark train ... (rank 0 writes checkpoints and logs)."),
    {0},
};
#undef STEPS
#undef WEIGHT
#undef A

const cli_command cli_train_cmd = {.name = "train",
    .summary = "train a DSpark/DFlash drafter for a frozen target (dspark train --help)",
    .usage = "usage: dspark train [-m TARGET] --data DATA (--init DIR | shape options) -o OUT [options]", .col = 19,
    .opts = train_opts};

// ---- progress: one line rewritten in place on a terminal (twice a second), a line every 10 s in a
// log; held-out evaluations always get their own line.

typedef struct {
    int tty, open;         // open: a \r line is on the terminal
    double t_print;
    double last_tau[DS_TRAIN_MAX_EVAL_TEMPS], last_temp; // the last evaluation's
    int n_tau, last_step;
    double best_tau;
    int best_step;
} progress;

static void show_progress(void *ctx, const ds_train_event *ev) {
    progress *p = ctx;
    if (ev->kind == DS_TRAIN_EV_MESSAGE) {
        if (p->open) fputc('\n', stderr);
        p->open = 0;
        fprintf(stderr, "dspark: %s\n", ev->message);
        return;
    }
    if (ev->kind == DS_TRAIN_EV_EVAL) {
        p->n_tau = ev->n_eval;
        p->last_temp = ev->eval_temps[0];
        p->last_step = ev->step;
        p->best_tau = ev->best_tau;
        p->best_step = ev->best_step;
        if (p->open) fputc('\n', stderr);
        p->open = 0;
        fprintf(stderr, "step %d/%d  held-out", ev->step, ev->steps);
        for (int k = 0; k < ev->n_eval; k++) {
            p->last_tau[k] = ev->eval[k].tau;
            fprintf(stderr, "  T=%g tau %.3f (", (double)ev->eval_temps[k], ev->eval[k].tau);
            for (int q = 0; q < ev->eval[k].n_pos; q++) fprintf(stderr, "%s%.2f", q ? " " : "", ev->eval[k].accept[q]);
            fputc(')', stderr);
        }
        fprintf(stderr, "%s  best %.3f @ %d\n", ev->is_best ? " *" : "", ev->best_tau, ev->best_step);
        return;
    }
    const double t = ev->elapsed_s;
    if (!(t - p->t_print > (p->tty ? 0.5 : 10.0) || ev->step == ev->steps)) return;
    p->t_print = t;
    fprintf(stderr, "%sstep %d/%d  loss %.4f  ce %.3f  l1 %.3f  conf %.3f  ptau %.3f", p->tty ? "\r" : "", ev->step,
            ev->steps, ev->loss, ev->ce, ev->l1, ev->conf, ev->ptau);
    for (int k = 0; k < p->n_tau; k++) fprintf(stderr, "%s%.3f", k ? "/" : "  held-out tau ", p->last_tau[k]);
    fprintf(stderr, "  %.0f tok/s  %.1f blocks/s  %.2f steps/s  ETA %dm%02ds   %s", ev->tok_per_s, ev->blocks_per_s,
            t > 0 ? (ev->step - ev->first_step) / t : 0.0, (int)ev->eta_s / 60, (int)ev->eta_s % 60, p->tty ? "" : "\n");
    p->open = p->tty;
}

// ---- --plot: metrics.jsonl -> loss.dat (+ heldout.dat) -> gnuplot, run without a shell ------------

// `s` as a gnuplot single-quoted string body (a quote is doubled) into out.
static void gp_quote(const char *s, char *out, size_t cap) {
    size_t n = 0;
    for (; *s && n + 3 < cap; s++) {
        if (*s == '\'') out[n++] = '\'';
        out[n++] = *s;
    }
    out[n] = 0;
}

static void draw_plot(const char *out, const char *png) {
    char path[4200], loss_dat[4200], tau_dat[4200];
    snprintf(path, sizeof path, "%s/metrics.jsonl", out);
    snprintf(loss_dat, sizeof loss_dat, "%s/loss.dat", out);
    snprintf(tau_dat, sizeof tau_dat, "%s/heldout.dat", out);
    // The two data files are built in memory and written atomically (ds_atomic_write_text).
    FILE *in = fopen(path, "r");
    char *loss_text = NULL, *tau_text = NULL;
    size_t loss_len = 0, tau_len = 0;
    FILE *lf = NULL, *tf = NULL;
    if (!in || ds_atomic_check(loss_dat) || !(lf = open_memstream(&loss_text, &loss_len))) {
        if (in) fclose(in);
        fprintf(stderr, "dspark: could not draw %s: cannot read %s or write %s\n", png, path, loss_dat);
        return;
    }
    if (ds_atomic_check(tau_dat) || !(tf = open_memstream(&tau_text, &tau_len))) {
        fclose(in);
        fclose(lf);
        free(loss_text);
        fprintf(stderr, "dspark: could not draw %s: cannot write %s\n", png, tau_dat);
        return;
    }
    static char line[1 << 16];
    int n_temps = 0;
    float temps[DS_TRAIN_MAX_EVAL_TEMPS];
    while (fgets(line, sizeof line, in)) {
        cJSON *j = cJSON_Parse(line);
        const cJSON *step = cJSON_GetObjectItemCaseSensitive(j, "step"), *loss = cJSON_GetObjectItemCaseSensitive(j, "loss"),
                    *ho = cJSON_GetObjectItemCaseSensitive(j, "heldout");
        if (cJSON_IsNumber(step) && cJSON_IsNumber(loss)) fprintf(lf, "%d %g\n", step->valueint, loss->valuedouble);
        if (cJSON_IsNumber(step) && cJSON_IsArray(ho) && cJSON_GetArraySize(ho) > 0) {
            fprintf(tf, "%d", step->valueint);
            int k = 0;
            for (const cJSON *e = ho->child; e && k < DS_TRAIN_MAX_EVAL_TEMPS; e = e->next, k++) {
                const cJSON *tau = cJSON_GetObjectItemCaseSensitive(e, "tau"), *tt = cJSON_GetObjectItemCaseSensitive(e, "temp");
                fprintf(tf, " %g", cJSON_IsNumber(tau) ? tau->valuedouble : 0.0);
                temps[k] = cJSON_IsNumber(tt) ? (float)tt->valuedouble : 0;
            }
            if (k > n_temps) n_temps = k;
            fputc('\n', tf);
        }
        cJSON_Delete(j);
    }
    fclose(in);
    fclose(lf);
    fclose(tf);
    const int bad = ds_atomic_write_text(loss_dat, loss_text ? loss_text : "") ||
                    ds_atomic_write_text(tau_dat, tau_text ? tau_text : "");
    free(loss_text);
    free(tau_text);
    if (bad) {
        fprintf(stderr, "dspark: could not draw %s: %s\n", png, ds_last_error());
        return;
    }
    static char script[20000];
    char q_png[8500], q_loss[8500], q_tau[8500];
    gp_quote(png, q_png, sizeof q_png);
    gp_quote(loss_dat, q_loss, sizeof q_loss);
    gp_quote(tau_dat, q_tau, sizeof q_tau);
    int len = snprintf(script, sizeof script,
                       "set terminal png size 900,500; set output '%s'; set xlabel 'step'; set ylabel 'loss'; "
                       "%splot '%s' using 1:2 with lines title 'training loss'",
                       q_png, n_temps ? "set y2label 'held-out tau'; set y2tics; set ytics nomirror; " : "", q_loss);
    for (int k = 0; k < n_temps && len < (int)sizeof script; k++)
        len += snprintf(script + len, sizeof script - (size_t)len,
                        ", '%s' using 1:%d axes x1y2 with linespoints title 'held-out tau, T = %g'", q_tau, k + 2,
                        (double)temps[k]);
    char *argv[] = {"gnuplot", "-e", script, NULL};
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
    pid_t pid;
    const int rc = posix_spawnp(&pid, "gnuplot", &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    int status = 0;
    if (rc != 0) fprintf(stderr, "dspark: could not draw %s: gnuplot is not installed (%s)\n", png, strerror(rc));
    else if (waitpid(pid, &status, 0) < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
        fprintf(stderr, "dspark: could not draw %s: gnuplot failed (exit status %d)\n", png,
                WIFEXITED(status) ? WEXITSTATUS(status) : -1);
}

int cmd_train(int argc, char **argv) {
    ds_mpi_init(&argc, &argv);
    train_args a = {.o = ds_train_default()};
    const int prc = cli_parse(&cli_train_cmd, argc, argv, &a);
    if (prc == CLI_HELP) ds_mpi_finalize();
    if (prc) return prc == CLI_HELP ? 0 : prc;
    ds_train_params o = a.o;
    const char *model = a.model, *plot = a.plot;
    const int reg = a.reg, threads = a.threads;
    if (!o.data) return cli_usage_error("train needs --data DATA (make it with dspark datagen)");
    if (!o.out) return cli_usage_error("train needs an output directory (-o OUT)");
    if (!(o.target = cli_model_path(model))) return 1;
    if ((o.keep_best || o.patience || o.eval_every) && !o.eval_prompts)
        return cli_usage_error("--keep-best, --patience and --eval-every need held-out prompts (--eval-prompts FILE)");
    if (plot && !cli_check_writable(plot)) return 1; // before the training, not after
    cli_catch_interrupt();
    o.interrupted = &cli_interrupted;
    progress pr = {.tty = isatty(2)};
    o.progress = show_progress;
    o.progress_ctx = &pr;
    ds_set_threads(threads); // the process's one thread count (0 = all cores)
    ds_status st = ds_train_run(&o);
    const int rank = ds_mpi_rank();
    ds_mpi_finalize();
    if (pr.open) fputc('\n', stderr);
    if (st && rank == 0) return cli_fail(st);
    if (st) return 1;
    if (rank == 0 && plot) draw_plot(o.out, plot);
    if (rank == 0) {
        fprintf(stderr, "dspark: drafter written to %s", o.out);
        if (o.keep_best && pr.best_step > 0)
            fprintf(stderr, "; best held-out tau %.3f (step %d) in %s/best", pr.best_tau, pr.best_step, o.out);
        fputc('\n', stderr);
    }
    if (rank == 0 && reg) {
        char dir[4200];
        snprintf(dir, sizeof dir, o.keep_best && pr.best_step > 0 ? "%s/best" : "%s", o.out);
        if (o.keep_best && pr.best_step > 0) return cli_register_drafter(dir, "train", 0, 0, 0, 0); // its heldout.json
        return cli_register_drafter(dir, "train", pr.n_tau > 0, pr.last_tau[0], pr.n_tau > 0 ? pr.last_temp : 0, pr.last_step);
    }
    return 0;
}
