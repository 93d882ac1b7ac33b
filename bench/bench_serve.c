// bench_serve: a bounded load test of `dspark serve` on loopback. For each schedule (default: none,
// then auto, in the same run) it starts a server on a free port, runs N client threads that each send
// M streamed greedy completions one after another, and prints one JSON line: throughput
// (requests/s, generated tokens/s), p50/p99 latency and time to first token, failures, and the
// server's tau. A last line gives the ratios auto/none. Exit status 1 when any request failed.
//
//   bench_serve [--bin build/bin/dspark] [-m MODEL] [-d DRAFTER] [--clients 8] [--requests 4]
//               [--max-tokens 64] [--max-concurrency N] [-t THREADS] [--schedules none,auto]
//               [--url HOST:PORT  (an already running server; one run)]
// Without -d a fresh drafter is written with `dspark init-drafter` to a temporary folder.
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <limits.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench_util.h"

static const char *PROMPTS[] = {"Once upon a time", "The cat sat", "Lily and Tom went to the park",
                                "One day, a little bird", "Tim had a big red ball", "The sun was",
                                "There was a dog named Max", "Sue wanted to play"};
enum { N_PROMPTS = sizeof PROMPTS / sizeof *PROMPTS };

typedef struct {
    char host[64];
    int port, requests, max_tokens, client;
    double *latency, *ttft; // (requests) seconds; < 0 = failed
    long tokens;
    int failures;
} client_job;

static int connect_to(const char *host, int port) {
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    if (inet_pton(AF_INET, host, &sa.sin_addr) != 1) return -1;
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return -1;
    struct timeval tv = {120, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    if (connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

// One HTTP/1.0 exchange (the server closes after the response, no chunked framing). Returns the
// response (malloc'ed, NUL-terminated) or NULL; *t_first is when the first "data: {" arrived.
static char *http_exchange(const char *host, int port, const char *req, double *t_first) {
    const int fd = connect_to(host, port);
    if (fd < 0) return NULL;
    for (size_t off = 0, n = strlen(req); off < n;) {
        const ssize_t w = send(fd, req + off, n - off, MSG_NOSIGNAL);
        if (w <= 0) {
            close(fd);
            return NULL;
        }
        off += (size_t)w;
    }
    size_t len = 0, cap = 1 << 14;
    char *buf = malloc(cap);
    if (t_first) *t_first = 0;
    for (;;) {
        if (len + 4097 > cap) {
            char *b = realloc(buf, cap *= 2);
            if (!b) break;
            buf = b;
        }
        const ssize_t r = recv(fd, buf + len, 4096, 0);
        if (r <= 0) break;
        len += (size_t)r;
        buf[len] = 0;
        if (t_first && *t_first == 0 && strstr(buf, "data: {")) *t_first = bench_now();
    }
    close(fd);
    buf[len] = 0;
    return buf;
}

static void *client_main(void *arg) {
    client_job *j = arg;
    char body[512], req[1024];
    for (int i = 0; i < j->requests; i++) {
        const char *p = PROMPTS[(j->client * 3 + i) % N_PROMPTS];
        snprintf(body, sizeof body,
                 "{\"prompt\":\"%s\",\"max_tokens\":%d,\"temperature\":0,\"stream\":true,"
                 "\"stream_options\":{\"include_usage\":true}}",
                 p, j->max_tokens);
        snprintf(req, sizeof req,
                 "POST /v1/completions HTTP/1.0\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n\r\n%s",
                 j->host, strlen(body), body);
        double t_first;
        const double t0 = bench_now();
        char *resp = http_exchange(j->host, j->port, req, &t_first);
        const double t1 = bench_now();
        const char *u = resp ? strstr(resp, "\"completion_tokens\":") : NULL;
        if (!resp || strncmp(resp, "HTTP/1.", 7) || strncmp(resp + 9, "200", 3) || !strstr(resp, "data: [DONE]") || !u || !t_first) {
            j->failures++;
            j->latency[i] = j->ttft[i] = -1;
        } else {
            j->tokens += atol(u + strlen("\"completion_tokens\":"));
            j->latency[i] = t1 - t0;
            j->ttft[i] = t_first - t0;
        }
        free(resp);
    }
    return NULL;
}

static double pct(const double *sorted, int n, double q) {
    if (n <= 0) return 0;
    int i = (int)(q * (n - 1) + 0.5);
    return sorted[i < n ? i : n - 1];
}

// The value of one metric line ("name value") from /metrics, or -1.
static double metric(const char *host, int port, const char *name) {
    char req[256];
    snprintf(req, sizeof req, "GET /metrics HTTP/1.0\r\nHost: %s\r\n\r\n", host);
    char *r = http_exchange(host, port, req, NULL);
    double v = -1;
    char key[128];
    snprintf(key, sizeof key, "\n%s ", name);
    const char *p = r ? strstr(r, key) : NULL;
    if (p) v = atof(p + strlen(key));
    free(r);
    return v;
}

typedef struct {
    double req_s, tok_s, lat50, lat99, ttft50, ttft99;
    int failures;
} result;

static result run_load(const char *label, const char *host, int port, int clients, int requests, int max_tokens) {
    // One warm-up request (first-touch allocations, page faults), not counted.
    client_job warm = {.port = port, .requests = 1, .max_tokens = 8};
    double wl, wt;
    snprintf(warm.host, sizeof warm.host, "%s", host);
    warm.latency = &wl;
    warm.ttft = &wt;
    client_main(&warm);
    client_job *jobs = calloc((size_t)clients, sizeof *jobs);
    pthread_t *th = calloc((size_t)clients, sizeof *th);
    const int total = clients * requests;
    double *lat = calloc((size_t)total, sizeof *lat), *ttft = calloc((size_t)total, sizeof *ttft);
    const double t0 = bench_now();
    for (int c = 0; c < clients; c++) {
        jobs[c] = (client_job){.port = port, .requests = requests, .max_tokens = max_tokens, .client = c,
                               .latency = lat + (size_t)c * requests, .ttft = ttft + (size_t)c * requests};
        snprintf(jobs[c].host, sizeof jobs[c].host, "%s", host);
        pthread_create(&th[c], NULL, client_main, &jobs[c]);
    }
    long tokens = 0;
    int failures = 0;
    for (int c = 0; c < clients; c++) {
        pthread_join(th[c], NULL);
        tokens += jobs[c].tokens;
        failures += jobs[c].failures;
    }
    const double wall = bench_now() - t0;
    int n = 0;
    for (int i = 0; i < total; i++)
        if (lat[i] >= 0) {
            lat[n] = lat[i];
            ttft[n++] = ttft[i];
        }
    qsort(lat, (size_t)n, sizeof *lat, bench_cmp_double);
    qsort(ttft, (size_t)n, sizeof *ttft, bench_cmp_double);
    result r = {.req_s = n / wall, .tok_s = tokens / wall, .lat50 = pct(lat, n, 0.5), .lat99 = pct(lat, n, 0.99),
                .ttft50 = pct(ttft, n, 0.5), .ttft99 = pct(ttft, n, 0.99), .failures = failures};
    const double tau = metric(host, port, "dspark_tau");
    printf("{\"bench\":\"serve\",\"schedule\":\"%s\",\"clients\":%d,\"requests\":%d,\"max_tokens\":%d,\"failures\":%d,"
           "\"wall_s\":%.3f,\"req_per_s\":%.2f,\"tok_per_s\":%.1f,\"latency_p50_ms\":%.2f,\"latency_p99_ms\":%.2f,"
           "\"ttft_p50_ms\":%.2f,\"ttft_p99_ms\":%.2f,\"tau\":%.3f}\n",
           label, clients, total, max_tokens, failures, wall, r.req_s, r.tok_s, r.lat50 * 1e3, r.lat99 * 1e3,
           r.ttft50 * 1e3, r.ttft99 * 1e3, tau);
    fflush(stdout);
    free(jobs);
    free(th);
    free(lat);
    free(ttft);
    return r;
}

// Start `dspark serve` with its stderr on a pipe; returns its pid and the port it printed, or -1.
static pid_t start_server(char *const argv[], int *port) {
    int pfd[2];
    if (pipe(pfd)) return -1;
    const pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        dup2(pfd[1], 2);
        close(pfd[0]);
        close(pfd[1]);
        execv(argv[0], argv);
        _exit(127);
    }
    close(pfd[1]);
    FILE *f = fdopen(pfd[0], "r");
    char line[1024];
    *port = 0;
    while (fgets(line, sizeof line, f)) {
        const char *p = strstr(line, "on http://");
        if (p && (p = strchr(p + strlen("on http://"), ':'))) {
            *port = atoi(p + 1);
            break;
        }
        fputs(line, stderr);
    }
    // The server writes a few more lines at shutdown: let a thread-free drain happen at exit by
    // leaving the pipe open (its buffer is far larger than what it prints).
    if (!*port) {
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        return -1;
    }
    return pid;
}

static int usage(void) {
    fprintf(stderr, "usage: bench_serve [--bin DSPARK] [-m MODEL] [-d DRAFTER] [--clients N] [--requests M]\n"
                    "                   [--max-tokens T] [--max-concurrency R] [-t THREADS] [--schedules none,auto]\n"
                    "                   [--url HOST:PORT]\n");
    return 2;
}

int main(int argc, char **argv) {
    char bin[PATH_MAX] = "";
    const char *model = NULL, *drafter = NULL, *url = NULL, *threads = "1";
    char schedules[128] = "none,auto";
    int clients = 8, requests = 4, max_tokens = 64, maxc = 0;
    for (int i = 1; i < argc; i++) {
        const char *o = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v) return usage();
        i++;
        if (!strcmp(o, "--bin")) snprintf(bin, sizeof bin, "%s", v);
        else if (!strcmp(o, "-m")) model = v;
        else if (!strcmp(o, "-d")) drafter = v;
        else if (!strcmp(o, "--url")) url = v;
        else if (!strcmp(o, "-t")) threads = v;
        else if (!strcmp(o, "--schedules")) snprintf(schedules, sizeof schedules, "%s", v);
        else if (!strcmp(o, "--clients")) clients = atoi(v);
        else if (!strcmp(o, "--requests")) requests = atoi(v);
        else if (!strcmp(o, "--max-tokens")) max_tokens = atoi(v);
        else if (!strcmp(o, "--max-concurrency")) maxc = atoi(v);
        else return usage();
    }
    if (clients < 1 || clients > 1024 || requests < 1 || max_tokens < 1) return usage();
    signal(SIGPIPE, SIG_IGN);
    if (url) { // an already running server
        char host[64];
        int port = 0;
        if (sscanf(url, "%63[^:]:%d", host, &port) != 2) return usage();
        return run_load("external", host, port, clients, requests, max_tokens).failures ? 1 : 0;
    }
    if (!bin[0]) { // next to this executable
        ssize_t n = readlink("/proc/self/exe", bin, sizeof bin - 16);
        if (n <= 0) return usage();
        bin[n] = 0;
        char *s = strrchr(bin, '/');
        strcpy(s ? s + 1 : bin, "dspark");
    }
    char tmpdir[] = "/tmp/bench_serve.XXXXXX", dpath[PATH_MAX] = "";
    int made = 0;
    if (!drafter && strstr(schedules, "auto")) {
        if (!mkdtemp(tmpdir)) return 1;
        snprintf(dpath, sizeof dpath, "%s/drafter", tmpdir);
        char cmd[3 * PATH_MAX];
        snprintf(cmd, sizeof cmd, "'%s' init-drafter %s%s%s -o '%s' --seed 1 >/dev/null 2>&1", bin, model ? "-m '" : "",
                 model ? model : "", model ? "'" : "", dpath);
        if (system(cmd) != 0) {
            fprintf(stderr, "bench_serve: %s failed\n", cmd);
            return 1;
        }
        drafter = dpath;
        made = 1;
    }
    char maxc_s[16];
    snprintf(maxc_s, sizeof maxc_s, "%d", maxc ? maxc : clients);
    result res[8];
    char names[8][32];
    int nres = 0, failures = 0;
    for (char *save = NULL, *s = strtok_r(schedules, ",", &save); s && nres < 8; s = strtok_r(NULL, ",", &save)) {
        const char *av[24];
        int n = 0;
        av[n++] = bin;
        av[n++] = "serve";
        if (model) av[n++] = "-m", av[n++] = model;
        if (strcmp(s, "none")) av[n++] = "-d", av[n++] = drafter;
        av[n++] = "--schedule", av[n++] = s;
        av[n++] = "--port", av[n++] = "0";
        av[n++] = "--max-concurrency", av[n++] = maxc_s;
        av[n++] = "--queue", av[n++] = "1024";
        av[n++] = "-t", av[n++] = threads;
        av[n] = NULL;
        int port;
        const pid_t pid = start_server((char *const *)av, &port);
        if (pid < 0) {
            fprintf(stderr, "bench_serve: the server (%s) did not start\n", s);
            failures++;
            continue;
        }
        snprintf(names[nres], sizeof names[nres], "%s", s);
        res[nres] = run_load(s, "127.0.0.1", port, clients, requests, max_tokens);
        failures += res[nres++].failures;
        kill(pid, SIGTERM);
        int status = 0;
        waitpid(pid, &status, 0);
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
            fprintf(stderr, "bench_serve: the server (%s) did not exit cleanly (status %d)\n", s, status);
            failures++;
        }
    }
    for (int i = 1; i < nres; i++)
        printf("{\"bench\":\"serve_ratio\",\"of\":\"%s/%s\",\"tok_per_s\":%.3f,\"req_per_s\":%.3f,\"latency_p50\":%.3f,"
               "\"ttft_p50\":%.3f}\n",
               names[i], names[0], res[i].tok_s / res[0].tok_s, res[i].req_s / res[0].req_s, res[i].lat50 / res[0].lat50,
               res[i].ttft50 / res[0].ttft50);
    if (made) {
        char cmd[PATH_MAX + 32];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
        if (system(cmd) != 0) fprintf(stderr, "bench_serve: could not remove %s\n", tmpdir);
    }
    return failures ? 1 : 0;
}
