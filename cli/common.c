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
