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

static void usage(FILE *f) {
    fprintf(f,
            "usage: dspark train [-m TARGET] --data DATA (--init DIR | shape options) -o OUT [options]\n"
            "  --steps N        optimizer steps (default 3200)\n"
            "  --batch SEQS     sequences per step, over all MPI ranks (default 8)\n"
            "  --anchors A      anchor blocks sampled per sequence (default 64)\n"
            "  --lr LR          peak learning rate (default 6e-3); --warmup F fraction of steps (0.04)\n"
            "                   (the defaults are measured on stories260K, docs/results.md; DeepSpec uses\n"
            "                   --anchors 512 --lr 6e-4 for targets of billions of parameters)\n"
            "  --clip C         gradient-norm clip (default 1.0; 0 = off)\n"
            "  --decay D        per-slot loss weight exp(-k/D) (default 4)\n"
            "  --ce W --l1 W --conf W   loss weights (default 0.1, 0.9, 1.0)\n"
            "  --kl W           weight of KL(target || drafter), the target's distribution as a soft label (default 0)\n"
            "  --seed S         data order, anchors and fresh init (default 0)\n"
            "  --save-every N   checkpoint period (default steps/10); also at the end and on Ctrl-C\n"
            "  --keep N         complete checkpoints kept in OUT/checkpoints (default 2; older ones are\n"
            "                   removed once a newer one is current)\n"
            "  --resume         continue the run in OUT from its newest complete checkpoint, exactly\n"
            "  --stop-after N   save and stop after N steps of this run (resume later)\n"
            "  --plot FILE.png  draw the loss curve (and held-out tau) with gnuplot at the end\n"
            "  --eval-prompts FILE   held-out prompts: decode them with the current weights (full blocks)\n"
            "                   and record tau and acceptance by position in metrics.jsonl\n"
            "  --eval-every N   steps between held-out evaluations (default: --save-every); also at the end\n"
            "  --eval-temp T[,T..]   temperatures evaluated (default 0; up to 4; the first ranks --keep-best)\n"
            "  --eval-max-tokens L   tokens per held-out prompt (default 128)  --eval-seed S (default 0)\n"
            "  --keep-best      keep the drafter of the best held-out tau in OUT/best (with heldout.json)\n"
            "  --patience N     stop when held-out tau has not improved in N evaluations\n"
            "  --register       record the drafter (OUT/best with --keep-best, else OUT) and its held-out tau\n"
            "                   in the drafter registry ($DSPARK_REGISTRY; see dspark drafters --help)\n"
            "  -t THREADS\n"
            "  shape options for a fresh drafter (no --init): --layers 5 --block 7 --markov-rank R\n"
            "                   --markov-head vanilla|gated|rnn --taps L1,L2,.. --no-confidence\n"
            "  --markov-rank 0 --ce 1 --l1 0 --conf 0 trains the DFlash baseline.\n"
            "  Data-parallel: mpirun -np N dspark train ... (rank 0 writes checkpoints and logs).\n");
}

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
    ds_train_opts o = ds_train_defaults();
    const char *model = NULL, *plot = NULL;
    int reg = 0, threads = 0;
    static int taps[64];
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        long n;
        double f;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            ds_mpi_finalize();
            return 0;
        }
        if (!strcmp(a, "--resume")) {
            o.resume = 1;
            continue;
        }
        if (!strcmp(a, "--register")) {
            reg = 1;
            continue;
        }
        if (!strcmp(a, "--keep-best")) {
            o.keep_best = 1;
            continue;
        }
        if (!strcmp(a, "--no-confidence")) {
            o.shape.confidence = 0;
            continue;
        }
        if (!v) return cli_missing_value(a, "train", usage);
        i++;
#define INT(flag, lo, hi, dst)                                                                 \
    else if (!strcmp(a, flag)) {                                                               \
        if (!cli_parse_int(v, lo, hi, &n)) return cli_usage_error(flag " expects %ld..%ld, got '%s'", (long)(lo), (long)(hi), v); \
        dst = (int)n;                                                                          \
    }
#define FLT(flag, lo, hi, dst)                                                                 \
    else if (!strcmp(a, flag)) {                                                               \
        if (!cli_parse_float(v, lo, hi, &f)) return cli_usage_error(flag " expects a number in [%g, %g], got '%s'", (double)(lo), (double)(hi), v); \
        dst = (float)f;                                                                        \
    }
        if (!strcmp(a, "-m") || !strcmp(a, "--model")) model = v;
        else if (!strcmp(a, "--data")) o.data = v;
        else if (!strcmp(a, "--init")) o.init = v;
        else if (!strcmp(a, "-o") || !strcmp(a, "--out")) o.out = v;
        else if (!strcmp(a, "--plot")) plot = v;
        else if (!strcmp(a, "--eval-prompts")) o.eval_prompts = v;
        INT("--steps", 1, 100000000, o.steps)
        INT("--batch", 1, 1000000, o.batch)
        INT("--anchors", 1, 1000000, o.anchors)
        INT("--save-every", 1, 100000000, o.save_every)
        INT("--keep", 1, 100000000, o.keep)
        INT("--stop-after", 1, 100000000, o.stop_after)
        INT("-t", 1, 1024, threads)
        INT("--eval-every", 1, 100000000, o.eval_every)
        INT("--eval-max-tokens", 1, 1 << 24, o.eval_max_tokens)
        INT("--patience", 1, 1000000, o.patience)
        INT("--layers", 1, 64, o.shape.n_layers)
        INT("--block", 1, 64, o.shape.block_size)
        INT("--markov-rank", 0, 65536, o.shape.markov_rank)
        FLT("--lr", 1e-9, 10, o.lr)
        FLT("--warmup", 0, 1, o.warmup)
        FLT("--clip", 0, 1e9, o.clip)
        FLT("--decay", 1e-3, 1e6, o.lw.decay)
        FLT("--ce", 0, 1e6, o.lw.ce)
        FLT("--l1", 0, 1e6, o.lw.l1)
        FLT("--conf", 0, 1e6, o.lw.conf)
        FLT("--kl", 0, 1e6, o.lw.kl)
        else if (!strcmp(a, "--seed")) {
            if (!cli_parse_int(v, 0, 0x7fffffffffffffffL, &n)) return cli_usage_error("--seed expects a non-negative integer");
            o.seed = (uint64_t)n;
            o.shape.seed = (uint64_t)n;
        } else if (!strcmp(a, "--eval-seed")) {
            if (!cli_parse_int(v, 0, 0x7fffffffffffffffL, &n)) return cli_usage_error("--eval-seed expects a non-negative integer");
            o.eval_seed = (uint64_t)n;
        } else if (!strcmp(a, "--eval-temp")) {
            o.n_eval_temps = 0;
            for (const char *s = v;;) {
                char num[64];
                const size_t len = strcspn(s, ",");
                if (len == 0 || len >= sizeof num || o.n_eval_temps == DS_TRAIN_MAX_EVAL_TEMPS)
                    return cli_usage_error("--eval-temp expects up to %d comma-separated temperatures, got '%s'",
                                           DS_TRAIN_MAX_EVAL_TEMPS, v);
                memcpy(num, s, len);
                num[len] = 0;
                if (!cli_parse_float(num, 0, 100, &f))
                    return cli_usage_error("--eval-temp expects temperatures in [0, 100], got '%s'", v);
                o.eval_temps[o.n_eval_temps++] = (float)f;
                if (!s[len]) break;
                s += len + 1;
            }
        } else if (!strcmp(a, "--markov-head")) {
            if (strcmp(v, "vanilla") && strcmp(v, "gated") && strcmp(v, "rnn"))
                return cli_usage_error("--markov-head expects vanilla, gated or rnn, got '%s'", v);
            o.shape.markov_head = v;
        } else if (!strcmp(a, "--taps")) {
            o.shape.n_taps = 0;
            for (const char *s = v; *s;) {
                char *end;
                long id = strtol(s, &end, 10);
                if (end == s || (*end && *end != ',') || o.shape.n_taps == 64)
                    return cli_usage_error("--taps expects comma-separated layer ids, got '%s'", v);
                taps[o.shape.n_taps++] = (int)id;
                s = *end ? end + 1 : end;
            }
            o.shape.tap_layers = taps;
        } else {
            return cli_usage_error("unknown option '%s' (see dspark train --help)", a);
        }
#undef INT
#undef FLT
    }
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
