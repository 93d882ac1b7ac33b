// dspark serve: the OpenAI-compatible HTTP server (src/serve/). Runs until SIGINT or SIGTERM, then
// drains: new requests get 503, running ones finish (up to --drain-timeout seconds), exit 0.
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"

static void serve_usage(FILE *f) {
    fprintf(f,
            "usage: dspark serve [-m MODEL] [-d DRAFTER] [options]\n"
            "  -m, --model PATH       .gguf file or Hugging Face directory (default: stories260K)\n"
            "  -d, --drafter DIR      a DeepSpec drafter paired with the model\n"
            "  --host ADDR            IPv4 address to listen on (default 127.0.0.1: this machine only)\n"
            "  --port N               port (default 8080; 0 = any free port, printed on stderr)\n"
            "  --max-concurrency R    requests decoded together in one batch (default 8)\n"
            "  --queue N              requests that may wait for a slot; more get 503 (default 64)\n"
            "  --max-body BYTES       request body limit; larger bodies get 413 (default 1048576)\n"
            "  --max-connections N    open connections at once (default 4096, fewer if the open-file limit\n"
            "                         is lower; an idle one costs a socket, no thread)\n"
            "  --max-per-client N     open connections from one IP address (default: a quarter of them)\n"
            "  --header-timeout S     close a connection idle this long before its request is in (default 10)\n"
            "  --schedule S           auto | fixed | threshold | none (none = no speculation;\n"
            "                         default: auto with -d, else none)\n"
            "  --spec KIND            none | dspark | ngram (default: dspark with -d, else none)\n"
            "  --draft-max K, --conf-threshold C, --costs FILE, --ngram N   as for dspark generate\n"
            "  --verify RULE          coupled | residual: how sampled drafts are verified when a request\n"
            "                         does not say (\"verify\"); coupled (default): a seeded request gives\n"
            "                         the text of generate --seed --spec none whatever the drafter and load\n"
            "  --cache-mb N           prompt cache in MiB: a prompt that starts like an earlier one skips\n"
            "                         prefilling its whole 256-token chunks, output unchanged (default 1024;\n"
            "                         0 = off; a request's \"cache_prompt\": false opts out)\n"
            "  --name NAME            the model id reported by /v1/models (default: the model's name)\n"
            "  --api-key KEY          require \"Authorization: Bearer KEY\" on every endpoint but /health (401)\n"
            "                         (default: $DSPARK_API_KEY when set)\n"
            "  --cors ORIGIN          allow browser clients from ORIGIN (or *): CORS headers, OPTIONS preflights\n"
            "  --drain-timeout S      seconds to let running requests finish on SIGINT/SIGTERM (default 30)\n"
            "  -t, --threads N        threads (default: all cores)\n"
            "Endpoints: POST /v1/completions, POST /v1/chat/completions, GET /v1/models[/ID], GET /health,\n"
            "GET /metrics (Prometheus), POST /tokenize, POST /detokenize (llama-server's shapes).\n");
}

// A second SIGINT/SIGTERM while draining: leave at once.
static void *second_signal(void *arg) {
    int sig;
    sigwait((sigset_t *)arg, &sig);
    fprintf(stderr, "dspark: second signal: exiting without draining\n");
    _exit(130);
}

int cmd_serve(int argc, char **argv) {
    const char *model = NULL, *drafter = NULL;
    long threads = 0, port = 8080, maxc = 8, queue = 64, max_body = 1 << 20, max_conn = 0, per_client = 0,
         header_timeout = 10;
    double drain = 30;
    ds_spec_params spec = {.schedule = DS_SCHEDULE_AUTO, .prompt_cache_bytes = (size_t)1024 << 20};
    ds_cost_table costs;
    unsigned given = 0;
    int no_spec = 0;
    ds_serve_params sp = {.host = "127.0.0.1"};
    for (int i = 1; i < argc; i++) {
        const char *o = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(o, "-h") || !strcmp(o, "--help")) {
            serve_usage(stdout);
            return 0;
        }
        if (!v) return cli_missing_value(o, "serve", serve_usage);
        i++;
        if (!strcmp(o, "--schedule") && !strcmp(v, "none")) {
            no_spec = 1;
            continue;
        }
        if (!strcmp(o, "--schedule") && strcmp(v, "auto") && strcmp(v, "fixed") && strcmp(v, "threshold"))
            return cli_usage_error("--schedule expects auto, fixed, threshold or none, got '%s'", v);
        int r = cli_spec_option(o, v, &spec, &costs, &given);
        if (!r) r = cli_run_option(o, v, &model, &drafter, &threads, NULL);
        if (r < 0) return -r;
        if (r) continue;
        if (!strcmp(o, "--verify")) {
            ds_sampler_params tmp = ds_sampler_default();
            if ((r = cli_sampling_option(o, v, &tmp)) < 0) return -r;
            sp.verify = tmp.verify;
        } else if (!strcmp(o, "--host")) sp.host = v;
        else if (!strcmp(o, "--api-key")) {
            if (!*v) return cli_usage_error("--api-key must not be empty");
            sp.api_key = v;
        } else if (!strcmp(o, "--cors")) {
            if (!*v || strpbrk(v, "\r\n")) return cli_usage_error("--cors expects an origin (or *), got '%s'", v);
            sp.cors_origin = v;
        }
        else if (!strcmp(o, "--name")) sp.model_name = v;
        else if (!strcmp(o, "--port")) {
            if (!cli_parse_int(v, 0, 65535, &port)) return cli_usage_error("--port expects 0..65535, got '%s'", v);
        } else if (!strcmp(o, "--max-concurrency")) {
            if (!cli_parse_int(v, 1, 1024, &maxc)) return cli_usage_error("--max-concurrency expects 1..1024, got '%s'", v);
        } else if (!strcmp(o, "--queue")) {
            if (!cli_parse_int(v, 0, 1 << 20, &queue)) return cli_usage_error("--queue expects 0..1048576, got '%s'", v);
        } else if (!strcmp(o, "--max-body")) {
            if (!cli_parse_int(v, 64, 1L << 30, &max_body)) return cli_usage_error("--max-body expects 64..2^30 bytes, got '%s'", v);
        } else if (!strcmp(o, "--max-connections")) {
            if (!cli_parse_int(v, 1, 16384, &max_conn)) return cli_usage_error("--max-connections expects 1..16384, got '%s'", v);
        } else if (!strcmp(o, "--max-per-client")) {
            if (!cli_parse_int(v, 1, 16384, &per_client)) return cli_usage_error("--max-per-client expects 1..16384, got '%s'", v);
        } else if (!strcmp(o, "--header-timeout")) {
            if (!cli_parse_int(v, 1, 3600, &header_timeout))
                return cli_usage_error("--header-timeout expects 1..3600 seconds, got '%s'", v);
        } else if (!strcmp(o, "--step-delay-ms")) { // testing: a slow target (undocumented)
            long ms;
            if (!cli_parse_int(v, 0, 10000, &ms)) return cli_usage_error("--step-delay-ms expects 0..10000, got '%s'", v);
            sp.step_delay_ms = (int)ms;
        } else if (!strcmp(o, "--drain-timeout")) {
            if (!cli_parse_float(v, 0, 86400, &drain)) return cli_usage_error("--drain-timeout expects seconds, got '%s'", v);
        } else {
            return cli_usage_error("unknown option '%s' (see dspark serve --help)", o);
        }
    }
    if (no_spec) { // --schedule none: plain decoding, whatever else was given
        if ((given & CLI_SPEC_GIVEN) && spec.kind != DS_SPEC_NONE)
            return cli_usage_error("--schedule none means no speculation; it contradicts --spec");
        spec.kind = DS_SPEC_NONE;
        given |= CLI_SPEC_GIVEN;
        drafter = NULL;
    }
    int rc = cli_spec_finish(&spec, given, drafter);
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

    ds_model *m = cli_load_text_model(model, threads);
    if (!m) return 1;
    ds_drafter *d = NULL;
    if (cli_pick_drafter(&drafter, spec.kind, m) || (drafter && !(d = cli_load_drafter(drafter, m)))) {
        ds_model_free(m);
        return 1;
    }
    sp.model = m;
    sp.drafter = d;
    sp.spec = spec;
    sp.port = (int)port;
    sp.max_concurrency = (int)maxc;
    sp.queue_max = (int)queue;
    sp.max_body = (size_t)max_body;
    sp.max_connections = (int)max_conn;
    sp.max_per_client = (int)per_client;
    sp.header_timeout_s = (int)header_timeout;
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
            ds_model_get_info(m)->name, sp.host, ds_server_port(srv), cli_spec_name(spec.kind), sched, maxc, queue);
    int sig = 0;
    sigwait(&sigs, &sig);
    fprintf(stderr, "dspark: %s: draining (up to %g s; signal again to exit now)\n", sig == SIGTERM ? "SIGTERM" : "SIGINT", drain);
    pthread_t watcher;
    if (pthread_create(&watcher, NULL, second_signal, &sigs) == 0) pthread_detach(watcher);
    const int cut = ds_server_drain(srv, drain);
    if (cut) fprintf(stderr, "dspark: %d requests cut off at shutdown\n", cut);
    ds_server_free(srv);
    ds_drafter_free(d);
    ds_model_free(m);
    fprintf(stderr, "dspark: server stopped\n");
    return 0;
}
