// dspark calibrate: fit Sequential Temperature Scaling (docs/formats/deepspec-checkpoint.md
// §8) for a drafter's confidence head on held-out prompts, and write calibration.json.
//
// The prompts are decoded with the drafter's raw (uncalibrated) confidences and fixed full-block
// verification, so every round verifies all K slots and its accepted prefix length a is observed.
// Each round gives z_k = logit(c_k) for its slots and the labels 1{a ≥ k}. A round near the end of a
// token budget drafts (and verifies) fewer than K slots: it contributes only those positions; the
// positions it never drafted are missing data, not rejections. The job is ds_calibrate_run
// (include/dspark_jobs.h, src/jobs/calibrate.c); this file parses its options, prints the table and
// draws the reliability diagrams with gnuplot.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"

typedef struct {
    const char *model, *drafter, *prompts, *out, *plot;
    long max_tokens, threads, seed;
    float temps[DS_CALIBRATE_MAX_PASSES];
    int n_temps;
} cal_args;

// --temp T[,T]
static int set_temps(void *field, const char *v) {
    cal_args *a = field;
    const int n = cli_parse_temps("--temp", v, a->temps, DS_CALIBRATE_MAX_PASSES);
    if (n < 0) return 2;
    a->n_temps = n;
    return 0;
}

#define A cal_args
static const cli_opt cal_opts[] = {
    CLI_OPT_MODEL(A, model, .help = "the target (default: stories260K)"),
    CLI_OPT_DRAFTER(A, drafter, .help = "a DeepSpec drafter with a confidence head (default: the best registered\n"
                                        "for the target, see dspark drafters)"),
    CLI_OPT_STR("--prompts", "FILE", A, prompts, "held-out prompts, one per line (plain text or {\"prompt\": ...})"),
    {.names = "--temp", .arg = "T[,T]", .type = CLI_CALL, .off = 0, .call = set_temps, .flags = CLI_LIST,
     .expects = "one 0 and one temperature above 0, or one of them",
     .help = "decoding temperatures (default 0,1): a fit for greedy sequences and one for\n"
             "sampled ones, each on its own pass; calibrate at the temperature you serve at"},
    {.names = "--max-tokens", .arg = "L", .type = CLI_LONG, .off = CLI_AT_LONG(A, max_tokens), .lo = 1, .hi = 1 << 24,
     .expects = "a positive count", .help = "tokens generated per prompt (default 128)"},
    CLI_OPT_STR("-o|--out", "FILE", A, out, "where to write the calibration (default: DRAFTER/calibration.json)"),
    CLI_OPT_STR("--plot", "FILE.png", A, plot, "draw reliability diagrams (positions 1..3) with gnuplot"),
    CLI_OPT_SEED(A, seed, LONG, .help = "prompt i uses seed S + i (default 0)"),
    CLI_OPT_THREADS(A, threads, .help = "threads (default: all cores)"),
    CLI_OPT_TEXT("Decodes every prompt with full-block verification and the raw confidences, then fits one\n"
                 "temperature per position (T_k on the grid 2^(i/10), i = -30..30) minimizing the 20-bin ECE of\n"
                 "the prefix survival prod_{i<=k} c_i against the realized acceptance of slots 1..k; once per\n"
                 "--temp (a drafter accepts far less when sampling, so sampled sequences get their own fit)."),
    {0},
};
#undef A

const cli_command cli_calibrate_cmd = {.name = "calibrate",
    .summary = "fit the drafter's confidence calibration (STS) on held-out prompts",
    .usage = "usage: dspark calibrate [-m TARGET] -d DRAFTER --prompts FILE [options]", .col = 23, .opts = cal_opts};

static int parse_args(int argc, char **argv, cal_args *a) {
    memset(a, 0, sizeof *a);
    a->max_tokens = 128;
    a->temps[0] = 0, a->temps[1] = 1, a->n_temps = 2;
    const int rc = cli_parse(&cli_calibrate_cmd, argc, argv, a);
    if (rc) return rc;
    if (!a->prompts) return cli_usage_error("calibrate needs held-out prompts (--prompts FILE)");
    if (a->n_temps == 2 && (a->temps[0] > 0) == (a->temps[1] > 0))
        return cli_usage_error("--temp expects one 0 (greedy sequences) and one temperature above 0 (sampled ones), "
                               "got %g,%g", a->temps[0], a->temps[1]);
    return 0;
}

// gnuplot single-quoted string: '' stands for one quote.
static void gp_quoted(FILE *f, const char *s) {
    fputc('\'', f);
    for (; *s; s++) {
        if (*s == '\'') fputc('\'', f);
        fputc(*s, f);
    }
    fputc('\'', f);
}

// Reliability diagrams of the prefix survival at positions 1..min(3, K), before and after STS
// (the job computed the bins).
static void plot(const char *png, const ds_calibrate_result *res) {
    if (system("command -v gnuplot >/dev/null 2>&1") != 0) {
        fprintf(stderr, "dspark: gnuplot is not installed: --plot %s skipped\n", png);
        return;
    }
    const char *tmpdir = getenv("TMPDIR");
    char dat[4096];
    snprintf(dat, sizeof dat, "%s/dspark-calib-XXXXXX", tmpdir && *tmpdir ? tmpdir : "/tmp");
    const int fd = mkstemp(dat);
    FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
    if (!f) {
        fprintf(stderr, "dspark: could not write the plot data for %s\n", png);
        if (fd >= 0) {
            close(fd);
            unlink(dat);
        }
        return;
    }
    const int P = res->pass[0].n_plot, NP = res->n_passes;
    // Blocks (gnuplot "index"): 2(p·P + k - 1) = pass p before, + 1 = after; rows: mean conf, accuracy, count.
    for (int p = 0; p < NP; p++)
        for (int k = 1; k <= P; k++)
            for (int pass = 0; pass < 2; pass++) {
                const ds_calib_bin *b = res->pass[p].reliability[k - 1][pass];
                int rows = 0;
                for (int i = 0; i < DS_CALIB_BINS; i++)
                    if (b[i].count) {
                        fprintf(f, "%.6f %.6f %d\n", b[i].conf, b[i].acc, b[i].count);
                        rows++;
                    }
                if (!rows) fprintf(f, "NaN NaN 0\n"); // keep the block numbering
                fprintf(f, "\n\n");
            }
    fclose(f);
    FILE *gp = popen("gnuplot", "w");
    int ok = 0;
    if (gp) {
        fprintf(gp, "set terminal png size %d,%d\nset output ", 520 * P + 40, 440 * NP + 20);
        gp_quoted(gp, png);
        fprintf(gp, "\nset multiplot layout %d,%d title 'Reliability of the prefix survival (20 bins): before and after STS'\n",
                NP, P);
        fprintf(gp, "set xrange [0:1]\nset yrange [0:1]\nset size square\nset key top left\n"
                    "set xlabel 'mean predicted prefix survival'\nset ylabel 'realized acceptance of slots 1..k'\n");
        for (int p = 0; p < NP; p++)
            for (int k = 1; k <= P; k++) {
                const ds_sts_result *r = &res->pass[p].fit;
                const int blk = 2 * (p * P + k - 1);
                fprintf(gp, "set title 'temp %g, k = %d (n = %d, T = %.3f; ECE %.3f -> %.3f)'\n", res->pass[p].temp, k,
                        r->n[k - 1], r->temps[k - 1], r->ece_before[k - 1], r->ece_after[k - 1]);
                fprintf(gp, "plot x with lines dt 2 lc rgb 'gray' title 'perfect', ");
                gp_quoted(gp, dat);
                fprintf(gp, " index %d using 1:2 with linespoints pt 7 lc rgb 'red' title 'before', ", blk);
                gp_quoted(gp, dat);
                fprintf(gp, " index %d using 1:2 with linespoints pt 5 lc rgb 'blue' title 'after'\n", blk + 1);
            }
        fprintf(gp, "unset multiplot\n");
        ok = pclose(gp) == 0;
    }
    unlink(dat);
    if (ok) fprintf(stderr, "dspark: reliability diagram written to %s\n", png);
    else fprintf(stderr, "dspark: gnuplot could not draw %s\n", png);
}

static void fmt(char *buf, size_t cap, double x, const char *f) {
    if (isfinite(x)) snprintf(buf, cap, f, x);
    else snprintf(buf, cap, "-");
}

static void print_table(const cal_args *a, int n_prompts, const ds_calibrate_pass *p) {
    const ds_sts_result *r = &p->fit;
    printf("calibrate: %d prompts, %d rounds, temp %g (%s sequences), block %d, up to %ld tokens each\n", n_prompts,
           p->rounds, p->temp, p->temp > 0 ? "sampled" : "greedy", r->K, a->max_tokens);
    printf("prefix survival A_k = prod_{i<=k} c_i vs realized acceptance of slots 1..k (ECE: 20 bins)\n");
    printf("%3s %7s %7s %9s %9s %9s %9s %9s %9s %8s\n", "k", "n", "accept", "A before", "A after", "ECE bef", "ECE aft",
           "AUC bef", "AUC aft", "T_k");
    for (int k = 0; k < r->K; k++) {
        char c[8][32];
        fmt(c[0], 32, r->n[k] ? (double)r->n_pos[k] / r->n[k] : NAN, "%.4f");
        fmt(c[1], 32, r->conf_before[k], "%.4f");
        fmt(c[2], 32, r->conf_after[k], "%.4f");
        fmt(c[3], 32, r->ece_before[k], "%.4f");
        fmt(c[4], 32, r->ece_after[k], "%.4f");
        fmt(c[5], 32, r->auc_before[k], "%.4f");
        fmt(c[6], 32, r->auc_after[k], "%.4f");
        printf("%3d %7d %7s %9s %9s %9s %9s %9s %9s %8.4f\n", k + 1, r->n[k], c[0], c[1], c[2], c[3], c[4], c[5], c[6],
               r->temps[k]);
    }
}

// The job's events: the note that a loaded calibration is not what gets measured, and a progress
// line per prompt (redrawn in place on a terminal, one line per pass otherwise).
typedef struct {
    const char *drafter;
    int tty, open; // open: a "\r" line is on the terminal
} cal_view;

static void show_progress(void *ctx, const ds_calibrate_event *ev) {
    cal_view *v = ctx;
    if (ev->kind == DS_CALIBRATE_EV_RAW) {
        fprintf(stderr, "dspark: note: ignoring %s/calibration.json while measuring (the raw confidences are fitted)\n",
                v->drafter);
        return;
    }
    if (!v->tty && ev->done < ev->total) return;
    fprintf(stderr, "%scalibrate: temp %g: %d/%d prompts, %d rounds%s", v->tty ? "\r\033[K" : "", ev->temp, ev->done,
            ev->total, ev->rounds, v->tty && ev->done < ev->total ? "" : "\n");
    v->open = v->tty && ev->done < ev->total;
}

int cmd_calibrate(int argc, char **argv) {
    cal_args a;
    int rc = parse_args(argc, argv, &a);
    if (rc) return rc == CLI_HELP ? 0 : rc;
    ds_model *m = NULL;
    ds_drafter *d = NULL;
    char out_path[4096];
    if (!(m = cli_load_text_model(a.model, a.threads)) || cli_pick_drafter(&a.drafter, DS_SPEC_DSPARK, m)) {
        ds_model_free(m);
        return 1;
    }
    if (a.out) snprintf(out_path, sizeof out_path, "%s", a.out);
    else snprintf(out_path, sizeof out_path, "%s/calibration.json", a.drafter);
    if (!cli_check_writable(out_path) || !(d = cli_load_drafter(a.drafter, m))) {
        ds_model_free(m);
        return 1;
    }
    if (!ds_drafter_get_info(d)->has_confidence) {
        fprintf(stderr,
                "dspark: %s has no confidence head (enable_confidence_head is false): there is nothing to calibrate\n",
                a.drafter);
        ds_drafter_free(d);
        ds_model_free(m);
        return 1;
    }
    ds_calibrate_params o = ds_calibrate_default();
    o.prompts = a.prompts;
    o.out = out_path;
    for (int i = 0; i < a.n_temps; i++) o.temps[i] = a.temps[i];
    o.n_temps = a.n_temps;
    o.max_tokens = (int)a.max_tokens;
    o.seed = (uint64_t)a.seed;
    o.interrupted = &cli_interrupted;
    cal_view view = {.drafter = a.drafter, .tty = isatty(2)};
    o.progress = show_progress;
    o.progress_ctx = &view;
    cli_catch_interrupt();
    ds_calibrate_result r;
    const ds_status st = ds_calibrate_run(m, d, &o, &r);
    if (view.open) fputc('\n', stderr);
    ds_drafter_free(d);
    ds_model_free(m);
    if (st == DS_ERR_INTERRUPTED) {
        fprintf(stderr, "dspark: interrupted: nothing written\n");
        return 130;
    }
    if (st) return cli_fail(st);
    for (int p = 0; p < r.n_passes; p++) print_table(&a, r.n_prompts, &r.pass[p]);
    printf("calibration written to %s\n", out_path);
    fflush(stdout);
    if (a.plot) plot(a.plot, &r);
    return 0;
}
