// dspark serve: the OpenAI-compatible HTTP server (src/serve/). Runs until SIGINT or SIGTERM, then
// drains: new requests get 503, running ones finish (up to --drain-timeout seconds), exit 0.
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"

typedef struct {
    const char *model, *drafter;
    long threads, port, maxc, queue, max_body, max_conn, per_client, header_timeout;
    double drain;
    int schedule; // a ds_schedule_kind, or SCHEDULE_NONE
    ds_spec_params spec;
    ds_cost_table costs;
    unsigned given; // CLI_SPEC_GIVEN | CLI_SCHEDULE_GIVEN | CLI_COSTS_GIVEN | VERIFY_GIVEN
    ds_serve_params sp;
} serve_args;

enum { SCHEDULE_NONE = -1 }; // --schedule none: no speculation
enum { VERIFY_GIVEN = 8 };    // (beside CLI_SPEC_GIVEN, ... in `given`)
static const char *const schedule_names[] = {"auto", "fixed", "threshold", "none", NULL};
static const int schedule_kinds[] = {DS_SCHEDULE_AUTO, DS_SCHEDULE_FIXED, DS_SCHEDULE_THRESHOLD, SCHEDULE_NONE};

static int set_api_key(void *field, const char *v) {
    if (!*v) return cli_usage_error("--api-key must not be empty");
    *(const char **)field = v;
    return 0;
}

static int set_cors(void *field, const char *v) {
    if (!*v || strpbrk(v, "\r\n")) return cli_usage_error("--cors expects an origin (or *), got '%s'", v);
    *(const char **)field = v;
    return 0;
}

#define A serve_args
static const cli_opt serve_opts[] = {
    CLI_OPT_MODEL(A, model, .help = ".gguf file or Hugging Face directory (default: stories260K)"),
    CLI_OPT_DRAFTER(A, drafter, .help = "a DeepSpec drafter paired with the model"),
    CLI_OPT_STR("--host", "ADDR", A, sp.host, "IPv4 address to listen on (default 127.0.0.1: this machine only)"),
    CLI_OPT_LONG("--port", "N", A, port, 0, 65535, "port (default 8080; 0 = any free port, printed on stderr)"),
    CLI_OPT_LONG("--max-concurrency", "R", A, maxc, 1, 1024, "requests decoded together in one batch (default 8)"),
    CLI_OPT_LONG("--queue", "N", A, queue, 0, 1 << 20, "requests that may wait for a slot; more get 503 (default 64)"),
    {.names = "--max-body", .arg = "BYTES", .type = CLI_LONG, .off = CLI_AT_LONG(A, max_body), .lo = 64, .hi = 1L << 30,
     .expects = "64..2^30 bytes", .help = "request body limit; larger bodies get 413 (default 1048576)"},
    CLI_OPT_LONG("--max-connections", "N", A, max_conn, 1, 16384,
                 "open connections at once (default 4096, fewer if the open-file limit\nis lower; an idle one costs a socket, no thread)"),
    CLI_OPT_LONG("--max-per-client", "N", A, per_client, 1, 16384,
                 "open connections from one IP address (default: a quarter of them)"),
    {.names = "--header-timeout", .arg = "S", .type = CLI_LONG, .off = CLI_AT_LONG(A, header_timeout), .lo = 1,
     .hi = 3600, .expects = "1..3600 seconds",
     .help = "close a connection idle this long before its request is in (default 10)"},
    {.names = "--schedule", .arg = "S", .type = CLI_ENUM, .off = CLI_AT_INT(A, schedule), .choices = schedule_names,
     .values = schedule_kinds, .mark = CLI_SCHEDULE_GIVEN,
     .help = "auto | fixed | threshold | none (none = no speculation;\ndefault: auto with -d, else none)"},
    CLI_OPT_SPEC(A, spec, .help = "none | dspark | ngram (default: dspark with -d, else none)"),
    CLI_OPT_DRAFT_MAX(A, spec, .show = "--draft-max K, --conf-threshold C, --costs FILE, --ngram N, --tree N, --tree-depth D",
                      .help = "  as for dspark generate"),
    CLI_OPT_CONF_THRESHOLD(A, spec, .help = NULL),
    CLI_OPT_COSTS(A, costs, .help = NULL),
    CLI_OPT_NGRAM(A, spec, .help = NULL),
    CLI_OPT_TREE(A, spec, .help = NULL),
    CLI_OPT_TREE_DEPTH(A, spec, .help = NULL),
    CLI_OPT_VERIFY(A, sp.verify, .mark = VERIFY_GIVEN,
                   .help = "coupled | residual: how sampled drafts are verified when a request\n"
                           "does not say (\"verify\"). Default: coupled for a seeded request (it\n"
                           "gives the text of generate --seed --spec none whatever the drafter and\n"
                           "load), residual for one without a seed (nothing to reproduce; accepts more)"),
    CLI_OPT_CACHE_MB(A, spec, .help = "prompt cache in MiB: a prompt that starts like an earlier one skips\n"
                                      "prefilling its whole 256-token chunks, output unchanged (default 1024;\n"
                                      "0 = off; a request's \"cache_prompt\": false opts out)"),
    CLI_OPT_STR("--name", "NAME", A, sp.model_name, "the model id reported by /v1/models (default: the model's name)"),
    {.names = "--api-key", .arg = "KEY", .type = CLI_CALL, .off = CLI_AT_STR(A, sp.api_key), .call = set_api_key,
     .expects = "a non-empty key",
     .help = "require \"Authorization: Bearer KEY\" on every endpoint but /health (401)\n"
             "(default: $DSPARK_API_KEY when set)"},
    {.names = "--cors", .arg = "ORIGIN", .type = CLI_CALL, .off = CLI_AT_STR(A, sp.cors_origin), .call = set_cors,
     .expects = "an origin (or *)",
     .help = "allow browser clients from ORIGIN (or *): CORS headers, OPTIONS preflights"},
    {.names = "--drain-timeout", .arg = "S", .type = CLI_DOUBLE, .off = CLI_AT_DOUBLE(A, drain), .lo = 0, .hi = 86400,
     .expects = "seconds", .help = "seconds to let running requests finish on SIGINT/SIGTERM (default 30)"},
    CLI_OPT_THREADS(A, threads, .help = "threads (default: all cores)"),
    {.names = "--step-delay-ms", .arg = "MS", .type = CLI_INT, .off = CLI_AT_INT(A, sp.step_delay_ms), .lo = 0,
     .hi = 10000, .flags = CLI_UNDOCUMENTED}, // testing: a slow target
    CLI_OPT_TEXT("Endpoints: POST /v1/completions, POST /v1/chat/completions, GET /v1/models[/ID], GET /health,\n"
                 "GET /metrics (Prometheus), POST /tokenize, POST /detokenize (llama-server's shapes)."),
    {0},
};
#undef A

const cli_command cli_serve_cmd = {.name = "serve", .summary = "an OpenAI-compatible HTTP server (dspark serve --help)",
    .usage = "usage: dspark serve [-m MODEL] [-d DRAFTER] [options]", .col = 25, .opts = serve_opts,
    .given_off = offsetof(serve_args, given)};

// A second SIGINT/SIGTERM while draining: leave at once.
static void *second_signal(void *arg) {
    int sig;
    sigwait((sigset_t *)arg, &sig);
    fprintf(stderr, "dspark: second signal: exiting without draining\n");
    _exit(130);
}

int cmd_serve(int argc, char **argv) {
    serve_args a = {.port = 8080, .maxc = 8, .queue = 64, .max_body = 1 << 20, .max_conn = 0, .header_timeout = 10,
                    .drain = 30, .schedule = DS_SCHEDULE_AUTO,
                    .spec = {.schedule = DS_SCHEDULE_AUTO, .prompt_cache_bytes = (size_t)1024 << 20},
                    .sp = ds_serve_default()};
    int rc = cli_parse(&cli_serve_cmd, argc, argv, &a);
    if (rc) return rc == CLI_HELP ? 0 : rc;
    const char *drafter = a.drafter;
    ds_spec_params spec = a.spec;
    unsigned given = a.given;
    ds_serve_params sp = a.sp;
    sp.verify_unseeded = (given & VERIFY_GIVEN) != 0; // the operator's rule, also for unseeded requests
    const int no_spec = a.schedule == SCHEDULE_NONE;
    if (!no_spec) spec.schedule = (ds_schedule_kind)a.schedule;
    if (no_spec) { // --schedule none: plain decoding, whatever else was given
        if ((given & CLI_SPEC_GIVEN) && spec.kind != DS_SPEC_NONE)
            return cli_usage_error("--schedule none means no speculation; it contradicts --spec");
        spec.kind = DS_SPEC_NONE;
        given |= CLI_SPEC_GIVEN;
        drafter = NULL;
    }
    rc = cli_spec_finish(&spec, &a.costs, given, drafter);
    if (rc) return rc;
    const char *env_key = getenv("DSPARK_API_KEY"); // (keeps the key out of the process list)
    if (!sp.api_key && env_key && *env_key) sp.api_key = env_key;

    // SIGINT/SIGTERM are taken by sigwait below: blocked here, before any thread exists, so every
    // thread inherits the mask. A client hanging up must not kill the server.
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    signal(SIGPIPE, SIG_IGN);

    ds_model *m = cli_load_text_model(a.model, a.threads);
    if (!m) return 1;
    ds_drafter *d = NULL;
    if (cli_pick_drafter(&drafter, spec.kind, m) || (drafter && !(d = cli_load_drafter(drafter, m)))) {
        ds_model_free(m);
        return 1;
    }
    sp.model = m;
    sp.drafter = d;
    sp.spec = spec;
    sp.port = (int)a.port;
    sp.max_concurrency = (int)a.maxc;
    sp.queue_max = (int)a.queue;
    sp.max_body = (size_t)a.max_body;
    sp.max_connections = (int)a.max_conn;
    sp.max_per_client = (int)a.per_client;
    sp.header_timeout_s = (int)a.header_timeout;
    ds_server *srv;
    ds_status st = ds_server_start(&sp, &srv);
    if (st) {
        rc = cli_fail(st);
        ds_drafter_free(d);
        ds_model_free(m);
        return rc;
    }
    const char *sched = spec.kind != DS_SPEC_DSPARK                ? "-"
                        : spec.schedule == DS_SCHEDULE_AUTO      ? "auto"
                        : spec.schedule == DS_SCHEDULE_THRESHOLD ? "threshold"
                                                                 : "fixed";
    fprintf(stderr, "dspark: serving %s on http://%s:%d (spec %s, schedule %s, max concurrency %ld, queue %ld)\n",
            ds_model_get_info(m)->name, sp.host, ds_server_port(srv), cli_spec_name(spec.kind), sched, a.maxc, a.queue);
    int sig = 0;
    sigwait(&sigs, &sig);
    fprintf(stderr, "dspark: %s: draining (up to %g s; signal again to exit now)\n", sig == SIGTERM ? "SIGTERM" : "SIGINT", a.drain);
    pthread_t watcher;
    if (pthread_create(&watcher, NULL, second_signal, &sigs) == 0) pthread_detach(watcher);
    const int cut = ds_server_drain(srv, a.drain);
    if (cut) fprintf(stderr, "dspark: %d requests cut off at shutdown\n", cut);
    ds_server_free(srv);
    ds_drafter_free(d);
    ds_model_free(m);
    fprintf(stderr, "dspark: server stopped\n");
    return 0;
}
