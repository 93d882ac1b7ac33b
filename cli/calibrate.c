// dspark calibrate: fit Sequential Temperature Scaling (dspark-method.md, "Confidence head and
// calibration") for a drafter's confidence head on held-out prompts, and write calibration.json.
//
// The prompts are decoded with the drafter's raw (uncalibrated) confidences and fixed full-block
// verification, so every round verifies all K slots and its accepted prefix length a is observed.
// Each round gives z_k = logit(c_k) for its slots and the labels 1{a ≥ k}. A round near the end of a
// token budget drafts (and verifies) fewer than K slots: it contributes only those positions; the
// positions it never drafted are missing data, not rejections.
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "draft/calibration.h"
#include "gen/prompts.h"
#include "sched/calibrate.h"
#include "train/data.h"

typedef struct {
    const char *model, *drafter, *prompts, *out, *plot;
    long max_tokens, threads, seed;
    double temp;
} cal_args;

static void cal_usage(FILE *f) {
    fprintf(f,
            "usage: dspark calibrate [-m TARGET] -d DRAFTER --prompts FILE [options]\n"
            "  -m, --model PATH     the target (default: stories260K)\n"
            "  -d, --drafter DIR    a DeepSpec drafter with a confidence head (default: the best registered\n"
            "                       for the target, see dspark drafters)\n"
            "  --prompts FILE       held-out prompts, one per line (plain text or {\"prompt\": ...})\n"
            "  --temp T             decoding temperature (default 0); calibrate for the one you serve at\n"
            "  --max-tokens L       tokens generated per prompt (default 128)\n"
            "  -o, --out FILE       where to write the calibration (default: DRAFTER/calibration.json)\n"
            "  --plot FILE.png      draw reliability diagrams (positions 1..3) with gnuplot\n"
            "  --seed S             prompt i uses seed S + i (default 0)\n"
            "  -t, --threads N      threads (default: all cores)\n"
            "Decodes every prompt with full-block verification and the raw confidences, then fits one\n"
            "temperature per position (T_k on the grid 2^(i/10), i = -30..30) minimizing the 20-bin ECE of\n"
            "the prefix survival prod_{i<=k} c_i against the realized acceptance of slots 1..k.\n");
}

static int parse_args(int argc, char **argv, cal_args *a) {
    memset(a, 0, sizeof *a);
    a->max_tokens = 128;
    for (int i = 1; i < argc; i++) {
        const char *o = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(o, "-h") || !strcmp(o, "--help")) {
            cal_usage(stdout);
            exit(0);
        }
        if (!v) return cli_missing_value(o, "calibrate", cal_usage);
        i++;
        const int r = cli_run_option(o, v, &a->model, &a->drafter, &a->threads, &a->seed);
        if (r < 0) return -r;
        if (r) continue;
        if (!strcmp(o, "--prompts")) a->prompts = v;
        else if (!strcmp(o, "-o") || !strcmp(o, "--out")) a->out = v;
        else if (!strcmp(o, "--plot")) a->plot = v;
        else if (!strcmp(o, "--max-tokens")) {
            if (!cli_parse_int(v, 1, 1 << 24, &a->max_tokens))
                return cli_usage_error("--max-tokens expects a positive count, got '%s'", v);
        } else if (!strcmp(o, "--temp")) {
            if (!cli_parse_float(v, 0, 100, &a->temp)) return cli_usage_error("--temp expects 0..100, got '%s'", v);
        } else {
            return cli_usage_error("unknown option '%s' (see dspark calibrate --help)", o);
        }
    }
    if (!a->prompts) return cli_usage_error("calibrate needs held-out prompts (--prompts FILE)");
    return 0;
}

// The rounds the observer collects.
typedef struct {
    int K;
    int n, cap;
    double *z;     // (cap, K)
    int *n_slots;  // (cap)
    int *accepted; // (cap)
    int oom;
} rounds;

static void observe(void *ctx, int id, int n_drafted, const float *conf, int ell, int accepted) {
    (void)id;
    rounds *R = ctx;
    // Fixed full-block verification: ell == n_drafted. Only the verified slots are observed.
    const int m = ell < n_drafted ? ell : n_drafted;
    if (!conf || m <= 0 || R->oom) return;
    if (R->n == R->cap) {
        const int cap = R->cap ? 2 * R->cap : 1024;
        double *z = realloc(R->z, sizeof(double) * (size_t)cap * R->K);
        if (z) R->z = z;
        int *s = z ? realloc(R->n_slots, sizeof(int) * (size_t)cap) : NULL;
        if (s) R->n_slots = s;
        int *a = s ? realloc(R->accepted, sizeof(int) * (size_t)cap) : NULL;
        if (a) R->accepted = a;
        if (!a) {
            R->oom = 1;
            return;
        }
        R->cap = cap;
    }
    double *z = R->z + (size_t)R->n * R->K;
    for (int k = 0; k < R->K; k++) z[k] = k < m ? ds_calib_logit((double)conf[k]) : 0;
    R->n_slots[R->n] = m;
    R->accepted[R->n] = accepted < m ? accepted : m;
    R->n++;
}

typedef struct {
    ds_model *model;
    ds_drafter *drafter;
    ds_engine *engine;
    ds_prompt_set *prompts;
    ds_gen_prompts pt;  // the prompts tokenized
    ds_gen_request *req; // (pt.n)
    rounds R;
} cal_state;

static int interrupted(void *ctx) { return cli_interrupted; }

static void cal_free(cal_state *g) {
    ds_engine_free(g->engine);
    ds_drafter_free(g->drafter);
    ds_model_free(g->model);
    ds_prompts_free(g->prompts);
    ds_gen_prompts_free(&g->pt);
    free(g->req);
    free(g->R.z);
    free(g->R.n_slots);
    free(g->R.accepted);
}

// The calibration file's content (draft/calibration.h writes it).
static void calibration_of(const cal_args *a, const ds_sts_result *r, int n_rounds, ds_calibration *c) {
    memset(c, 0, sizeof *c);
    c->K = r->K;
    for (int k = 0; k < r->K; k++) {
        c->temps[k] = r->temps[k];
        c->ece_before[k] = r->ece_before[k];
        c->ece_after[k] = r->ece_after[k];
        c->auc_after[k] = r->auc_after[k];
        c->auc_before[k] = r->auc_before[k];
        c->n[k] = r->n[k];
        c->acceptance[k] = r->n[k] ? (double)r->n_pos[k] / r->n[k] : NAN;
    }
    c->rounds = n_rounds;
    c->temp = a->temp;
    c->prompts = a->prompts;
    c->max_tokens = a->max_tokens;
    c->seed = a->seed;
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

// Reliability diagrams of the prefix survival at positions 1..min(3, K), before and after STS.
static void plot(const char *png, const ds_calib_data *d, const ds_sts_result *r) {
    if (system("command -v gnuplot >/dev/null 2>&1") != 0) {
        fprintf(stderr, "dspark: gnuplot is not installed: --plot %s skipped\n", png);
        return;
    }
    const char *tmpdir = getenv("TMPDIR");
    char dat[4096];
    snprintf(dat, sizeof dat, "%s/dspark-calib-XXXXXX", tmpdir && *tmpdir ? tmpdir : "/tmp");
    const int fd = mkstemp(dat);
    FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
    double *conf = malloc(sizeof(double) * (size_t)(d->n ? d->n : 1));
    unsigned char *lab = malloc((size_t)(d->n ? d->n : 1));
    if (!f || !conf || !lab) {
        fprintf(stderr, "dspark: could not write the plot data for %s\n", png);
        if (f) fclose(f);
        else if (fd >= 0) close(fd);
        if (fd >= 0) unlink(dat);
        free(conf);
        free(lab);
        return;
    }
    const int P = r->K < 3 ? r->K : 3;
    // Blocks (gnuplot "index"): 2k = before, 2k + 1 = after; rows: mean conf, accuracy, count.
    for (int k = 1; k <= P; k++)
        for (int pass = 0; pass < 2; pass++) {
            ds_calib_bin b[DS_CALIB_BINS];
            const int n = ds_calib_cumulative(d, pass ? r->temps : NULL, k, conf, lab);
            ds_calib_reliability(conf, lab, n, DS_CALIB_BINS, b);
            int rows = 0;
            for (int i = 0; i < DS_CALIB_BINS; i++)
                if (b[i].count) {
                    fprintf(f, "%.6f %.6f %d\n", b[i].conf, b[i].acc, b[i].count);
                    rows++;
                }
            if (!rows) fprintf(f, "NaN NaN 0\n"); // keep the block numbering
            fprintf(f, "\n\n");
        }
    free(conf);
    free(lab);
    fclose(f);
    FILE *gp = popen("gnuplot", "w");
    int ok = 0;
    if (gp) {
        fprintf(gp, "set terminal png size %d,460\nset output ", 420 * P + 40);
        gp_quoted(gp, png);
        fprintf(gp, "\nset multiplot layout 1,%d title 'Reliability of the prefix survival (20 bins): before and after STS'\n",
                P);
        fprintf(gp, "set xrange [0:1]\nset yrange [0:1]\nset size square\nset key top left\n"
                    "set xlabel 'mean predicted prefix survival'\nset ylabel 'realized acceptance of slots 1..k'\n");
        for (int k = 1; k <= P; k++) {
            fprintf(gp, "set title 'k = %d (n = %d, T = %.3f; ECE %.3f -> %.3f)'\n", k, r->n[k - 1], r->temps[k - 1],
                    r->ece_before[k - 1], r->ece_after[k - 1]);
            fprintf(gp, "plot x with lines dt 2 lc rgb 'gray' title 'perfect', ");
            gp_quoted(gp, dat);
            fprintf(gp, " index %d using 1:2 with linespoints pt 7 lc rgb 'red' title 'before', ", 2 * (k - 1));
            gp_quoted(gp, dat);
            fprintf(gp, " index %d using 1:2 with linespoints pt 5 lc rgb 'blue' title 'after'\n", 2 * (k - 1) + 1);
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

static void print_table(const cal_args *a, int n_prompts, int n_rounds, const ds_sts_result *r) {
    printf("calibrate: %d prompts, %d rounds, temp %g, block %d, up to %ld tokens each\n", n_prompts, n_rounds, a->temp,
           r->K, a->max_tokens);
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

int cmd_calibrate(int argc, char **argv) {
    cal_args a;
    int rc = parse_args(argc, argv, &a);
    if (rc) return rc;
    cal_state g = {0};
    ds_status st;
    char out_path[4096];
    if ((st = ds_prompts_load(a.prompts, &g.prompts))) return cli_fail(st);
    if (!(g.model = cli_load_text_model(a.model, a.threads)) || cli_pick_drafter(&a.drafter, DS_SPEC_DSPARK, g.model)) {
        cal_free(&g);
        return 1;
    }
    if (a.out) snprintf(out_path, sizeof out_path, "%s", a.out);
    else snprintf(out_path, sizeof out_path, "%s/calibration.json", a.drafter);
    if (!cli_check_writable(out_path) || !(g.drafter = cli_load_drafter(a.drafter, g.model))) {
        cal_free(&g);
        return 1;
    }
    const ds_tokenizer *tok = ds_model_tokenizer(g.model);
    const ds_drafter_info *di = ds_drafter_get_info(g.drafter);
    if (!di->has_confidence) {
        fprintf(stderr,
                "dspark: %s has no confidence head (enable_confidence_head is false): there is nothing to calibrate\n",
                a.drafter);
        cal_free(&g);
        return 1;
    }
    // Measure the raw head: any calibration loaded with the drafter is dropped for this run.
    const float *old;
    if (ds_drafter_calibration(g.drafter, &old) > 0)
        fprintf(stderr, "dspark: note: ignoring %s/calibration.json while measuring (the raw confidences are fitted)\n",
                a.drafter);
    const float none[1] = {1};
    if ((st = ds_drafter_set_calibration(g.drafter, none, 0))) goto fail;
    const ds_spec_params spec = {.kind = DS_SPEC_DSPARK, .draft_max = di->block_size, .schedule = DS_SCHEDULE_FIXED};
    if ((st = ds_engine_init(g.model, g.drafter, &spec, &g.engine))) goto fail;
    g.R.K = di->block_size;
    ds_engine_set_observer(g.engine, observe, &g.R);
    const int L = (int)a.max_tokens;
    ds_sampler_params sp = ds_sampler_default();
    sp.temperature = (float)a.temp;

    if ((st = ds_gen_prompts_tokenize(g.model, g.prompts, L, &g.pt))) goto fail; // (naming the file and line)
    // Every prompt in turn through the drafter's engine (one at a time); the observer sees the rounds.
    g.req = calloc((size_t)g.pt.n, sizeof *g.req);
    if (!g.req) goto oom;
    for (int i = 0; i < g.pt.n; i++)
        g.req[i] = (ds_gen_request){.ids = g.pt.ids[i], .n_ids = g.pt.len[i], .max_new = L, .sp = sp,
                                    .seed = (uint64_t)a.seed + (uint64_t)i};
    cli_catch_interrupt();
    const ds_gen_run_params run = {.max_active = 1, .interrupted = interrupted};
    if ((st = ds_gen_run(g.engine, tok, g.req, g.pt.n, &run, NULL)) == DS_ERR_INTERRUPTED) {
        fprintf(stderr, "dspark: interrupted: nothing written\n");
        cal_free(&g);
        return 130;
    }
    if (st) goto fail;
    if (g.R.oom) goto oom;

    const ds_calib_data d = {.K = g.R.K, .n = g.R.n, .z = g.R.z, .n_slots = g.R.n_slots, .accepted = g.R.accepted};
    ds_sts_result res;
    if ((st = ds_sts_fit(&d, &res))) goto fail;
    if (!d.n) {
        fprintf(stderr, "dspark: no round drafted anything (is --max-tokens at least 2?): nothing to calibrate\n");
        cal_free(&g);
        return 1;
    }
    print_table(&a, g.prompts->n, d.n, &res);
    ds_calibration cal;
    calibration_of(&a, &res, d.n, &cal);
    if ((st = ds_calibration_save(&cal, out_path))) goto fail; // atomically
    printf("calibration written to %s\n", out_path);
    fflush(stdout);
    if (a.plot) plot(a.plot, &d, &res);
    cal_free(&g);
    return 0;
oom:
    cal_free(&g);
    fprintf(stderr, "dspark: out of memory\n");
    return 1;
fail:
    rc = cli_fail(st);
    cal_free(&g);
    return rc;
}
