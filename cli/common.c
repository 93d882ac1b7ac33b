#include <errno.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"

volatile int cli_interrupted = 0;

int cli_fail(ds_status st) {
    fprintf(stderr, "dspark: %s\n", ds_last_error());
    return st == DS_ERR_INTERRUPTED ? 130 : 1;
}

int cli_usage_error(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fputs("dspark: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    return 2;
}

static int file_exists(const char *p) { return access(p, R_OK) == 0; }

const char *cli_model_path(const char *given) {
    if (given) return given;
    static char buf[PATH_MAX];
    const char *rel = "shared/models/stories260K/stories260K.gguf";
    const char *env = getenv("DSPARK_MODEL");
    if (env && *env) return env;
    snprintf(buf, sizeof buf, "../%s", rel);
    if (file_exists(buf)) return buf;
    // Next to the source tree of the executable: <repo>/build/bin/dspark -> <repo>/../shared/...
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n > 0) {
        exe[n] = 0;
        for (int up = 0; up < 4; up++) {
            char *s = strrchr(exe, '/');
            if (!s) break;
            *s = 0;
            snprintf(buf, sizeof buf, "%s/../%s", exe, rel);
            if (file_exists(buf)) return buf;
        }
    }
    fprintf(stderr,
            "dspark: no model given (-m) and the default ../shared/models/stories260K/stories260K.gguf was not found.\n"
            "        Download stories260K.gguf from ggml-org's tinyllamas conversion on Hugging Face\n"
            "        (ggml-org/models, tinyllamas/stories260K.gguf) and pass it with -m, or set DSPARK_MODEL.\n");
    return NULL;
}

int cli_parse_int(const char *s, long lo, long hi, long *out) {
    if (!s || !*s) return 0;
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || *end || v < lo || v > hi) return 0;
    *out = v;
    return 1;
}

int cli_parse_float(const char *s, double lo, double hi, double *out) {
    if (!s || !*s) return 0;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || *end || !isfinite(v) || v < lo || v > hi) return 0;
    *out = v;
    return 1;
}

int cli_parse_temps(const char *opt, const char *v, float *out, int max) {
    int n = 0;
    for (const char *s = v;;) {
        char num[64];
        double f;
        const size_t len = strcspn(s, ",");
        if (len == 0 || len >= sizeof num || n == max)
            return cli_usage_error("%s expects up to %d comma-separated temperatures, got '%s'", opt, max, v), -1;
        memcpy(num, s, len);
        num[len] = 0;
        if (!cli_parse_float(num, 0, 100, &f)) return cli_usage_error("%s expects temperatures in [0, 100], got '%s'", opt, v), -1;
        out[n++] = (float)f;
        if (!s[len]) return n;
        s += len + 1;
    }
}

double cli_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void on_sigint(int sig) {
    (void)sig;
    if (cli_interrupted) _exit(130); // second Ctrl-C: leave now
    cli_interrupted = 1;
}

void cli_catch_interrupt(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigint;
    sigaction(SIGINT, &sa, NULL);
}

int cli_gen_interrupted(void *ctx) { return cli_interrupted; }

void cli_gen_show(void *ctx, long i, const ds_gen *g) {
    size_t *shown = ctx;
    const ds_text_out *tx = ds_gen_text(g);
    const size_t safe = ds_text_out_safe(tx);
    if (safe > *shown) fwrite(ds_text_out_text(tx, NULL) + *shown, 1, safe - *shown, stdout);
    fflush(stdout);
    *shown = safe;
}

const char *const cli_spec_names[] = {"none", "dspark", "ngram", NULL};
const int cli_spec_kinds[] = {DS_SPEC_NONE, DS_SPEC_DSPARK, DS_SPEC_NGRAM};
const char *const cli_schedule_names[] = {"fixed", "threshold", "auto", NULL};
const int cli_schedule_kinds[] = {DS_SCHEDULE_FIXED, DS_SCHEDULE_THRESHOLD, DS_SCHEDULE_AUTO};
const char *const cli_verify_names[] = {"coupled", "residual", NULL};
const int cli_verify_kinds[] = {DS_VERIFY_COUPLED, DS_VERIFY_RESIDUAL};

const char *const cli_markov_head_names[] = {"vanilla", "gated", "rnn", NULL};

int cli_set_taps(void *field, const char *v) {
    ds_drafter_init_params *p = field;
    static int taps[64];
    p->n_taps = 0;
    for (const char *s = v; *s;) {
        char *end;
        long id = strtol(s, &end, 10);
        if (end == s || (*end && *end != ',') || p->n_taps == 64 || id < -1 || id > 4096)
            return cli_usage_error("--taps expects comma-separated layer ids, got '%s'", v);
        taps[p->n_taps++] = (int)id;
        s = *end ? end + 1 : end;
    }
    p->tap_layers = taps;
    return 0;
}

int cli_set_logit_bias(void *field, const char *v) { // ID:BIAS, repeatable (one command per process)
    ds_sampler_params *sp = field;
    static ds_logit_bias bias[256];
    char *end;
    double f;
    const long id = strtol(v, &end, 10);
    if (end == v || *end != ':' || id < 0 || id > INT32_MAX || !cli_parse_float(end + 1, -100, 100, &f))
        return cli_usage_error("--logit-bias expects TOKEN_ID:BIAS with BIAS in -100..100, got '%s'", v);
    if (sp->n_logit_bias == 256) return cli_usage_error("--logit-bias: at most 256 tokens");
    bias[sp->n_logit_bias++] = (ds_logit_bias){(int32_t)id, (float)f};
    sp->logit_bias = bias;
    return 0;
}

int cli_set_cache_mb(void *field, const char *v) {
    long k;
    if (!cli_parse_int(v, 0, 1 << 20, &k)) return cli_usage_error("--cache-mb expects 0..1048576, got '%s'", v);
    *(size_t *)field = (size_t)k << 20;
    return 0;
}

int cli_set_costs(void *field, const char *v) {
    ds_status st = ds_cost_table_load(v, field);
    return st ? cli_fail(st) : 0;
}

int cli_spec_finish(ds_spec_params *spec, ds_cost_table *costs, unsigned given, const char *drafter) {
    if (given & CLI_COSTS_GIVEN) spec->costs = costs;
    if (!(given & CLI_SPEC_GIVEN)) spec->kind = drafter ? DS_SPEC_DSPARK : DS_SPEC_NONE;
    if (!(given & CLI_SCHEDULE_GIVEN) && spec->conf_threshold > 0) spec->schedule = DS_SCHEDULE_THRESHOLD;
    // (--spec dspark without -d: cli_pick_drafter takes the best registered drafter for the target)
    if (spec->kind != DS_SPEC_DSPARK && drafter) return cli_usage_error("-d is only used with --spec dspark");
    return 0;
}

const char *cli_spec_name(ds_spec_kind k) { return ds_spec_kind_name(k); }

int cli_check_writable(const char *file) {
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", file);
    char *slash = strrchr(dir, '/');
    if (!slash) snprintf(dir, sizeof dir, ".");
    else if (slash == dir) dir[1] = 0;
    else *slash = 0;
    if (access(dir, W_OK | X_OK) != 0) {
        fprintf(stderr, "dspark: cannot write %s: %s: %s\n", file, dir, strerror(errno));
        return 0;
    }
    if (ds_atomic_check(file) != DS_OK) { // a FIFO, device, directory, ... stands there
        fprintf(stderr, "dspark: %s\n", ds_last_error());
        return 0;
    }
    return 1;
}

// An input-rounding switch: unset or empty -1, "0" 0, "1" 1; else -2 after printing why.
static int env_switch(const char *name) {
    const char *v = getenv(name);
    if (!v || !v[0]) return -1;
    if (!strcmp(v, "0") || !strcmp(v, "1")) return v[0] - '0';
    fprintf(stderr, "dspark: %s must be 0 or 1, not '%s'\n", name, v);
    return -2;
}

int cli_model_params(long threads, ds_model_params *out) {
    // DSPARK_INT8_INPUTS=1: MLX affine targets' products on int8-rounded inputs too; =0: GGUF Q8_0 and
    // MLX affine products on f32 inputs; unset: the default (ds_model_params.int8_inputs = 0).
    // DSPARK_BF16_INPUTS=1: BF16 targets' few-row products on bf16-rounded inputs (VDPBF16PS).
    // DSPARK_KV_F16=1: KV caches of halves (ds_model_params.kv_f16).
    const int i8 = env_switch("DSPARK_INT8_INPUTS"), b16 = env_switch("DSPARK_BF16_INPUTS");
    const int kv16 = env_switch("DSPARK_KV_F16");
    if (i8 == -2 || b16 == -2 || kv16 == -2) return 1;
    *out = (ds_model_params){.n_threads = (int)threads, .int8_inputs = i8 == 1 ? 1 : i8 == 0 ? -1 : 0,
                             .bf16_inputs = b16 == 1, .kv_f16 = kv16 == 1};
    return 0;
}

ds_model *cli_load_text_model(const char *model_arg, long threads) {
    const char *path = cli_model_path(model_arg);
    if (!path) return NULL;
    ds_model *m;
    ds_set_threads((int)threads); // the process's one thread count (0 = all cores)
    ds_model_params mp;
    if (cli_model_params(threads, &mp)) return NULL;
    ds_status st = ds_model_load(path, &mp, &m);
    if (st) {
        cli_fail(st);
        return NULL;
    }
    if (!ds_model_tokenizer(m)) {
        fprintf(stderr, "dspark: %s has no tokenizer dspark supports, so it cannot take text prompts\n", path);
        ds_model_free(m);
        return NULL;
    }
    return m;
}

ds_drafter *cli_load_drafter(const char *dir, const ds_model *m) {
    ds_drafter *d;
    ds_status st = ds_drafter_load(dir, m, &d);
    if (st) {
        cli_fail(st);
        return NULL;
    }
    if (ds_drafter_warning(d)) fprintf(stderr, "dspark: warning: %s\n", ds_drafter_warning(d));
    return d;
}

int cli_pick_drafter(const char **dir, ds_spec_kind kind, const ds_model *m) {
    static char picked[4096];
    if (kind != DS_SPEC_DSPARK || *dir) return 0;
    char id[160], reg[4096];
    ds_model_target_id(m, id, sizeof id);
    ds_registry_entry e;
    int found;
    ds_status st = ds_registry_best(id, &e, &found);
    if (!st) st = ds_registry_dir(reg, sizeof reg);
    if (st) return cli_fail(st);
    if (!found) {
        fprintf(stderr,
                "dspark: --spec dspark needs a drafter: give -d DIR, or register one for this target (%s) with "
                "train --register (registry: %s)\n",
                id, reg);
        return 1;
    }
    snprintf(picked, sizeof picked, "%s", e.path);
    *dir = picked;
    if (e.has_tau)
        fprintf(stderr, "dspark: drafter %s (registered for %s; held-out tau %.3f at T = %g, step %d)\n", e.path, id,
                e.tau, e.temp, e.step);
    else
        fprintf(stderr, "dspark: drafter %s (registered for %s; no held-out tau recorded)\n", e.path, id);
    return 0;
}

int cli_register_drafter(const char *dir, const char *source, int has_tau, double tau, double temp, int step) {
    ds_registry_entry e;
    char reg[4096];
    ds_status st = ds_registry_add(dir, source, has_tau, tau, temp, step, &e);
    if (!st) st = ds_registry_dir(reg, sizeof reg);
    if (st) return cli_fail(st);
    fprintf(stderr, "dspark: registered %s for target %s", e.path, e.target_id);
    if (e.has_tau) fprintf(stderr, " (held-out tau %.3f at T = %g)", e.tau, e.temp);
    fprintf(stderr, " in %s\n", reg);
    return 0;
}

// The whole file, NUL-ended (NULL with a message on stderr).
char *cli_read_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "dspark: %s: %s\n", path, strerror(errno));
        return NULL;
    }
    size_t n = 0, cap = 4096;
    char *b = malloc(cap);
    for (size_t got; b && (got = fread(b + n, 1, cap - n - 1, f)) > 0;) {
        n += got;
        if (n + 1 == cap) {
            char *nb = realloc(b, cap *= 2);
            if (!nb) free(b);
            b = nb;
        }
    }
    const int err = ferror(f);
    fclose(f);
    if (!b || err) {
        free(b);
        fprintf(stderr, "dspark: %s: %s\n", path, b ? "read error" : "out of memory");
        return NULL;
    }
    b[n] = 0;
    if (strlen(b) != n) {
        free(b);
        fprintf(stderr, "dspark: %s: the file holds a NUL byte\n", path);
        return NULL;
    }
    return b;
}
