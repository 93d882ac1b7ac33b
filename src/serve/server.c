// The server: libmicrohttpd handlers (one epoll thread for every connection, handlers never block)
// and the one engine thread that owns the ds_engine. They share, under s->mu: the bounded queue of
// admitted requests, each request's output (detokenized text, how much of it may be sent, finish
// reason) and the metrics. A connection that waits for the engine is suspended
// (MHD_suspend_connection, under mu) and the engine thread resumes it (under mu) when there is
// something to send: the request is done, or a stream has new text.
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <cjson/cJSON.h>
#include <errno.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <omp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>

#include "base/status.h"
#include "serve/server.h"
#include "tokenizer/utf8.h"

// Idle seconds allowed once a request's headers are in (body upload, waiting for the response).
#define DS_REQUEST_TIMEOUT_S 120

typedef enum { RQ_QUEUED, RQ_RUNNING, RQ_DONE } rq_state;
enum { PH_START, PH_TEXT, PH_END }; // streaming phases

// One choice of a request: its own sequence in the engine (prompt p·n + i of the request's choices).
typedef struct {
    int prompt;            // which of the request's prompts
    ds_gen *g;             // its generation request (src/gen): prompt p·n + i, seed the request's + i
                           // (choice 0 of every prompt has the request's seed); its text (cut at a
                           // stop string or the end of turn) and how much may be sent; in the engine
                           // while ds_gen_seq >= 0 (engine thread only)
    const char *finish;    // "stop" / "length" once finished normally (under mu)
    size_t sent;           // streaming: bytes of text sent (HTTP side)
    int ended;             // streaming: its finish chunk was sent (HTTP side)
    // logprobs (under mu): per output token its log-probability, then top_logprobs alternatives
    float *lp;             // (cap_lp, 1 + top)
    int32_t *lp_ids;       // (cap_lp, top)
    int n_lp, cap_lp;
    int lp_sent;           // streaming: tokens whose logprobs were sent
    // echo with logprobs (under mu): the prompt tokens', as lp / lp_ids (token 0 has none)
    float *plp;            // (n_prompt, 1 + top)
    int32_t *plp_ids;      // (n_prompt, top)
    int plp_ready;         // copied out of the engine (once its prompt is prefilled)
    // tools offered (r->oa.tool_syntax): the finished text parsed once for tool calls (under mu)
    int tc_parsed, tc_n;
    char *tc_content, *tc_calls; // the content around the calls, the calls' JSON array
    int tc_sent;           // streaming: the tool-call deltas were sent
} srv_choice;

typedef struct srv_req {
    struct srv_req *next;  // queue link
    ds_oa_request oa;
    int refs;              // 2 while both the HTTP side and the engine side hold it
    rq_state state;
    int cancelled;         // the client left (or the server is stopping): drop at the next round
    char id[48];
    long long created;     // unix seconds
    double t_arrive, t_first, t_done;
    // Output, written by the engine thread under mu.
    srv_choice *ch;        // (n_ch) prompts × n choices
    int n_ch;
    int failed;            // it failed (engine error, shutdown): error says why
    char error[256];
    int error_status;      // HTTP status for a non-streamed failure
    char fail_msg[256];    // a choice failed on its own (its grammar): the request's 400 (under mu)
    // The connection waiting for it (under mu): suspended while it waits for the engine, which
    // resumes it (conn_wake) and, meanwhile, peeks at fd to notice a client that left.
    struct MHD_Connection *conn;
    int suspended;
    int fd;
    // HTTP side only (streaming).
    struct ds_server *srv;
    int phase;
    char *out;             // (out_cap) formatted events not yet handed to libmicrohttpd
    size_t out_len, out_off, out_cap;
} srv_req;

struct ds_server {
    ds_serve_params p;
    char model_name[256];
    struct MHD_Daemon *d;
    int port;
    ds_engine *e;
    const ds_tokenizer *tok;
    pthread_t engine_thread;
    int engine_started;
    pthread_mutex_t mu;
    pthread_cond_t work_cv;  // the engine thread waits here for work
    srv_req *q_head, *q_tail;
    int q_len;
    srv_req **active;        // (max_concurrency) requests in the engine
    int n_active;
    int n_seqs;              // their choices: engine sequences (at most max_concurrency, or one request's)
    int draining, stopping, drained;
    int n_inflight;        // HTTP requests begun and not yet completed (their responses may still be sending)
    ds_metrics mt;
    uint64_t next_id, seed_base;
    // Engine thread only.
    int32_t *take_buf;       // (256)
    ds_metrics round_acc;    // rounds observed during a step, merged into mt under mu afterwards
};

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void req_release(ds_server *s, srv_req *r) { // under mu
    (void)s;
    if (--r->refs > 0) return;
    ds_oa_request_free(&r->oa);
    for (int i = 0; i < r->n_ch; i++) {
        ds_gen_free(r->ch[i].g);
        free(r->ch[i].lp);
        free(r->ch[i].lp_ids);
        free(r->ch[i].plp);
        free(r->ch[i].plp_ids);
        free(r->ch[i].tc_content);
        free(r->ch[i].tc_calls);
    }
    free(r->ch);
    free(r->out);
    free(r);
}

// Suspend r's connection until the engine has something for it (called from r's own libmicrohttpd
// callback, under mu: a wake can never come before its suspend).
static void conn_sleep(srv_req *r) {
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(r->conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    r->fd = ci ? ci->connect_fd : -1;
    r->suspended = 1;
    MHD_suspend_connection(r->conn);
}

// Resume r's connection if it is suspended (any thread, under mu): exactly one resume per suspend.
static void conn_wake(srv_req *r) {
    if (!r->suspended) return;
    r->suspended = 0;
    MHD_resume_connection(r->conn);
}

// Whether the client has closed its end of a suspended connection (libmicrohttpd does not look
// at a suspended connection's socket).
static int peer_gone(int fd) {
    if (fd < 0) return 0;
    char b;
    const ssize_t r = recv(fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
    return r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

static int stream_ready(srv_req *r);

// ---------------------------------------------------------------------------------------------
// Engine thread

static void on_round(void *ctx, int id, int n_drafted, const float *conf, int ell, int accepted) {
    ds_metrics_round(&((ds_server *)ctx)->round_acc, ell, accepted);
}

static void merge_rounds(ds_server *s) { // under mu
    ds_metrics *a = &s->round_acc, *m = &s->mt;
    m->rounds += a->rounds;
    m->drafted += a->drafted;
    m->accepted += a->accepted;
    m->drafts += a->drafts;
    for (int k = 0; k < DS_METRICS_POS; k++) {
        m->tried_by_pos[k] += a->tried_by_pos[k];
        m->accepted_by_pos[k] += a->accepted_by_pos[k];
    }
    for (int k = 0; k <= DS_METRICS_POS; k++) m->ell_count[k] += a->ell_count[k];
    memset(a, 0, sizeof *a);
}

// The request leaves the engine side: record it and wake its HTTP side. Under mu.
static void req_done(ds_server *s, srv_req *r, const char *error, int status) {
    ds_metrics *m = &s->mt;
    r->state = RQ_DONE;
    r->t_done = now_s();
    for (int i = 0; i < r->n_ch; i++) {
        srv_choice *c = &r->ch[i];
        ds_gen_end(c->g); // all of it may be sent now
        if (!c->finish) c->finish = "length";
        if (!r->oa.no_prompt_cache && m->cache_cap) {
            m->cache_queries += (uint64_t)r->oa.n_prompt[c->prompt];
            m->cache_hits += (uint64_t)ds_gen_stats(c->g)->cached_tokens;
        }
        if (r->cancelled || error) continue;
        if (!strcmp(c->finish, "stop")) m->finished_stop++;
        else m->finished_length++;
        m->completion_tokens += (uint64_t)ds_text_out_tokens(ds_gen_text(c->g));
    }
    if (error) {
        r->failed = 1;
        r->error_status = status;
        snprintf(r->error, sizeof r->error, "%s", error);
    }
    if (r->cancelled) m->finished_cancelled++;
    else if (error) m->finished_error++;
    if (r->t_first > 0) {
        m->ttft_sum += r->t_first - r->t_arrive;
        m->ttft_n++;
    }
    if (!error && !r->cancelled) {
        m->latency_sum += r->t_done - r->t_arrive;
        m->latency_n++;
    }
    conn_wake(r);
    req_release(s, r);
}

// Hand the tokens committed in the last round to r's text output (detokenized, cut at a stop string
// or the chat format's end of turn, the tail that could begin a stop string held back). Returns 1
// when r is finished. Under mu.
// Copy the logprobs of c's new output tokens out of the engine (before the sequence leaves it).
static int take_logprobs(ds_server *s, srv_req *r, srv_choice *c) {
    const int want = ds_text_out_tokens(ds_gen_text(c->g)), top = r->oa.top_logprobs;
    if (want > c->cap_lp) {
        const int cap = want > 2 * c->cap_lp ? want + 16 : 2 * c->cap_lp;
        float *lp = realloc(c->lp, sizeof(float) * (size_t)cap * (size_t)(1 + top));
        if (lp) c->lp = lp;
        int32_t *ids = lp ? realloc(c->lp_ids, sizeof(int32_t) * (size_t)cap * (size_t)(top ? top : 1)) : NULL;
        if (!ids) return 0;
        c->lp_ids = ids;
        c->cap_lp = cap;
    }
    for (; c->n_lp < want; c->n_lp++) {
        float *lp = c->lp + (size_t)c->n_lp * (1 + top);
        int32_t *ids = c->lp_ids + (size_t)c->n_lp * top;
        const int got = ds_engine_logprobs(s->e, ds_gen_seq(c->g), c->n_lp, lp, ids, lp + 1);
        for (int j = got < 0 ? 0 : got; j < top; j++) { // fewer tokens possible than asked for
            ids[j] = -1;
            lp[1 + j] = 0;
        }
        if (got < 0) lp[0] = 0;
    }
    return 1;
}

// echo with logprobs: copy the prompt tokens' out of the engine once its prompt is prefilled.
// Returns 0 when out of memory.
static int take_prompt_logprobs(ds_server *s, srv_req *r, srv_choice *c) {
    const int n = r->oa.n_prompt[c->prompt], top = r->oa.top_logprobs, seq = ds_gen_seq(c->g);
    float lp0;
    int32_t ids0[20];
    float lps0[20];
    if (n > 1 && ds_engine_prompt_logprobs(s->e, seq, n - 1, &lp0, ids0, lps0) < 0) return 1; // not yet
    c->plp = malloc(sizeof(float) * (size_t)n * (size_t)(1 + top));
    c->plp_ids = malloc(sizeof(int32_t) * (size_t)n * (size_t)(top ? top : 1));
    if (!c->plp || !c->plp_ids) return 0;
    for (int i = 0; i < n; i++) {
        float *lp = c->plp + (size_t)i * (1 + top);
        int32_t *ids = c->plp_ids + (size_t)i * top;
        const int got = i ? ds_engine_prompt_logprobs(s->e, seq, i, lp, ids, lp + 1) : -1;
        for (int j = got < 0 ? 0 : got; j < top; j++) {
            ids[j] = -1;
            lp[1 + j] = 0;
        }
        if (got < 0) lp[0] = 0;
    }
    c->plp_ready = 1;
    return 1;
}

static int deliver_choice(ds_server *s, srv_req *r, srv_choice *c) {
    if (ds_gen_seq(c->g) < 0) return 1;
    if (r->oa.echo && r->oa.logprobs && !c->plp_ready && !take_prompt_logprobs(s, r, c)) ds_gen_end(c->g);
    int n_new;
    const int oom = ds_gen_update(c->g, &n_new) != DS_OK; // out of memory: it ended there
    if (n_new > 0 && r->t_first == 0) r->t_first = now_s();
    if (!oom && n_new > 0 && r->oa.logprobs && !take_logprobs(s, r, c)) ds_gen_end(c->g);
    const ds_finish_reason why = ds_gen_finish_reason(c->g);
    if (why == DS_FINISH_ERROR && !r->fail_msg[0]) // the engine failed it alone (its grammar): the request fails
        snprintf(r->fail_msg, sizeof r->fail_msg, "%s", ds_engine_seq_error(s->e, ds_gen_seq(c->g)));
    if (ds_gen_done(c->g) && !c->finish) c->finish = why == DS_FINISH_STOP ? "stop" : "length";
    if (c->finish) { // it leaves the engine
        ds_gen_leave(c->g);
        s->n_seqs--;
    }
    return c->finish != NULL;
}

// Every choice of r; returns 1 when all are finished. Under mu.
static int deliver(ds_server *s, srv_req *r) {
    int done = 1;
    for (int i = 0; i < r->n_ch; i++) done &= deliver_choice(s, r, &r->ch[i]);
    if (r->oa.stream && stream_ready(r)) conn_wake(r); // (a non-streamed one: once done)
    return done;
}

static void drop_active(ds_server *s, int i) { // under mu
    srv_req *r = s->active[i];
    for (int k = 0; k < r->n_ch; k++)
        if (ds_gen_seq(r->ch[k].g) >= 0) {
            ds_gen_leave(r->ch[k].g);
            s->n_seqs--;
        }
    s->active[i] = s->active[--s->n_active];
}

// Clients gone while their connection is suspended (checked every 50 ms): an active request is
// dropped at the next round, a queued one leaves the queue now. Under mu.
static void check_peers(ds_server *s) {
    for (int i = 0; i < s->n_active; i++) {
        srv_req *r = s->active[i];
        if (r->suspended && !r->cancelled && peer_gone(r->fd)) r->cancelled = 1;
    }
    for (srv_req **pp = &s->q_head, *prev = NULL; *pp;) {
        srv_req *r = *pp;
        if (!r->cancelled && !(r->suspended && peer_gone(r->fd))) {
            prev = r;
            pp = &r->next;
            continue;
        }
        r->cancelled = 1;
        *pp = r->next;
        if (s->q_tail == r) s->q_tail = prev;
        s->q_len--;
        req_done(s, r, s->stopping ? "the server is shutting down" : NULL, 503);
    }
}

static void *engine_main(void *arg) {
    ds_server *s = arg;
    const int maxc = s->p.max_concurrency;
    // Our thread pool sizes every parallel loop from ds_threads(). OpenBLAS's OpenMP build sizes
    // its own team from the calling thread's omp_get_max_threads(), which on a new pthread is all
    // cores: set to 1 here, an sgemm this thread calls outside the pool runs single-threaded (the
    // main thread gets it from openblas_set_num_threads). Without it a one-thread engine nested
    // OpenBLAS's own team (and deadlocked in the clang build, whose libomp then serialized that team).
    omp_set_num_threads(1);
    double t_peers = 0;
    pthread_mutex_lock(&s->mu);
    for (;;) {
        const double t = now_s();
        if (t - t_peers >= 0.05) {
            check_peers(s);
            t_peers = t;
        }
        for (int i = s->n_active - 1; i >= 0; i--) {
            srv_req *r = s->active[i];
            if (!r->cancelled) continue;
            drop_active(s, i);
            req_done(s, r, s->stopping ? "the server is shutting down" : NULL, 503);
        }
        // Admit in order while the choices fit (a request with more choices than max_concurrency
        // runs alone).
        while (s->n_active < maxc && s->q_head && (!s->n_seqs || s->n_seqs + s->q_head->n_ch <= maxc)) {
            srv_req *r = s->q_head;
            if (!(s->q_head = r->next)) s->q_tail = NULL;
            s->q_len--;
            if (r->cancelled) {
                req_done(s, r, s->stopping ? "the server is shutting down" : NULL, 503);
                continue;
            }
            r->state = RQ_RUNNING;
            s->active[s->n_active++] = r;
            pthread_mutex_unlock(&s->mu);
            ds_status st = DS_OK;
            for (int k = 0; k < r->n_ch && !st; k++)
                if (!(st = ds_gen_begin(r->ch[k].g, s->e, r->oa.max_tokens))) s->n_seqs++; // (only the engine thread changes n_seqs)
            pthread_mutex_lock(&s->mu);
            if (st) {
                drop_active(s, s->n_active - 1);
                req_done(s, r, ds_last_error(), 500);
                continue;
            }
            s->mt.prompt_tokens += (uint64_t)r->oa.prompt_tokens;
            s->mt.constrained += r->oa.grammar != NULL;
            if (r->oa.sp.temperature > 0) s->mt.sampled[r->oa.sp.verify == DS_VERIFY_RESIDUAL]++;
        }
        s->mt.queue_depth = s->q_len;
        s->mt.active = s->n_active;
        if (!s->n_active) {
            if (s->stopping && !s->q_head) break;
            pthread_cond_wait(&s->work_cv, &s->mu);
            continue;
        }
        pthread_mutex_unlock(&s->mu);
        const ds_status st = ds_engine_step(s->e);
        if (s->p.step_delay_ms > 0) {
            struct timespec ts = {s->p.step_delay_ms / 1000, (s->p.step_delay_ms % 1000) * 1000000L};
            nanosleep(&ts, NULL);
        }
        pthread_mutex_lock(&s->mu);
        s->mt.steps++;
        merge_rounds(s);
        ds_prompt_cache_stats pc;
        ds_engine_prompt_cache(s->e, &pc);
        s->mt.cache_bytes = pc.bytes;
        s->mt.cache_entries = pc.entries;
        for (int i = s->n_active - 1; i >= 0; i--) {
            srv_req *r = s->active[i];
            if (st) { // the engine failed this round: every request in it fails
                char msg[512];
                snprintf(msg, sizeof msg, "engine: %s", ds_last_error());
                drop_active(s, i);
                req_done(s, r, msg, 500);
            } else if (deliver(s, r)) {
                char msg[256];
                snprintf(msg, sizeof msg, "%s", r->fail_msg);
                drop_active(s, i);
                req_done(s, r, msg[0] ? msg : NULL, 400);
            }
        }
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

// ---------------------------------------------------------------------------------------------
// HTTP

typedef struct {
    char *body;
    size_t n, cap;
    int too_big;
    srv_req *req; // a non-streamed completion this connection waits for (its HTTP side's reference)
} conn_ctx;

static void count_status(ds_server *s, unsigned status) {
    pthread_mutex_lock(&s->mu);
    if (status / 100 >= 1 && status / 100 <= 5) s->mt.http_by_code[status / 100]++;
    pthread_mutex_unlock(&s->mu);
}

// Headers every response carries: CORS when --cors gave an origin.
static void common_headers(const ds_server *s, struct MHD_Response *resp) {
    if (!s->p.cors_origin) return;
    MHD_add_response_header(resp, "Access-Control-Allow-Origin", s->p.cors_origin);
    if (strcmp(s->p.cors_origin, "*")) MHD_add_response_header(resp, "Vary", "Origin");
}

static enum MHD_Result respond(ds_server *s, struct MHD_Connection *c, unsigned status, char *body,
                               const char *type) {
    if (!body) return MHD_NO;
    struct MHD_Response *resp = MHD_create_response_from_buffer(strlen(body), body, MHD_RESPMEM_MUST_FREE);
    if (!resp) {
        free(body);
        return MHD_NO;
    }
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, type);
    common_headers(s, resp);
    if (status == 401) MHD_add_response_header(resp, "WWW-Authenticate", "Bearer");
    const enum MHD_Result ret = MHD_queue_response(c, status, resp);
    MHD_destroy_response(resp);
    count_status(s, status);
    return ret;
}

static char *json_take(cJSON *o) {
    char *t = o ? cJSON_PrintUnformatted(o) : NULL;
    cJSON_Delete(o);
    return t;
}

static enum MHD_Result respond_json(ds_server *s, struct MHD_Connection *c, unsigned status, cJSON *o) {
    return respond(s, c, status, json_take(o), "application/json");
}

static const char *err_type(int status) { return status < 500 ? "invalid_request_error" : "server_error"; }

static cJSON *error_body(const char *msg, const char *type, const char *param, const char *code) {
    cJSON *o = cJSON_CreateObject(), *e = cJSON_AddObjectToObject(o, "error");
    cJSON_AddStringToObject(e, "message", msg);
    cJSON_AddStringToObject(e, "type", type);
    if (param) cJSON_AddStringToObject(e, "param", param);
    else cJSON_AddNullToObject(e, "param");
    if (code) cJSON_AddStringToObject(e, "code", code);
    else cJSON_AddNullToObject(e, "code");
    return o;
}

static enum MHD_Result respond_error(ds_server *s, struct MHD_Connection *c, unsigned status, const char *msg,
                                     const char *param) {
    const char *type = status == 503 ? "server_error" : status >= 500 ? "server_error" : "invalid_request_error";
    const char *code = status == 503 ? "overloaded" : status == 404 ? "not_found" : status == 413 ? "request_too_large"
                       : status == 401 ? "invalid_api_key" : NULL;
    return respond_json(s, c, status, error_body(msg, type, param, code));
}

static void cancel(ds_server *s, srv_req *r) { // under mu
    if (r->state == RQ_DONE) return;
    r->cancelled = 1;
    pthread_cond_signal(&s->work_cv);
}

static cJSON *usage_json(const srv_req *r) {
    int completion = 0;
    for (int i = 0; i < r->n_ch; i++) completion += ds_text_out_tokens(ds_gen_text(r->ch[i].g));
    cJSON *u = cJSON_CreateObject();
    cJSON_AddNumberToObject(u, "prompt_tokens", r->oa.prompt_tokens);
    cJSON_AddNumberToObject(u, "completion_tokens", completion);
    cJSON_AddNumberToObject(u, "total_tokens", r->oa.prompt_tokens + completion);
    int cached = 0; // what each prompt's first choice took from the prompt cache
    for (int i = 0; i < r->n_ch; i += r->oa.n) cached += ds_gen_stats(r->ch[i].g)->cached_tokens;
    cJSON *d = cJSON_AddObjectToObject(u, "prompt_tokens_details");
    if (d) cJSON_AddNumberToObject(d, "cached_tokens", cached);
    return u;
}

// The envelope shared by responses and stream chunks.
static cJSON *envelope(const ds_server *s, const srv_req *r, int chunk) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "id", r->id);
    cJSON_AddStringToObject(o, "object", r->oa.chat ? (chunk ? "chat.completion.chunk" : "chat.completion") : "text_completion");
    cJSON_AddNumberToObject(o, "created", (double)r->created);
    cJSON_AddStringToObject(o, "model", s->model_name);
    return o;
}

// A token's text for logprobs: its raw bytes, invalid UTF-8 replaced by U+FFFD (into buf, NUL-ended).
static const char *token_text(const ds_server *s, int32_t id, char *buf, size_t cap, uint8_t *raw, int *n_raw) {
    char tmp[256];
    int n = ds_token_bytes(s->tok, id, tmp, sizeof tmp);
    if (n > (int)sizeof tmp) n = sizeof tmp;
    memcpy(raw, tmp, (size_t)n);
    *n_raw = n;
    size_t w = 0;
    for (int i = 0; i < n && w + 4 < cap;) {
        const int L = ds_utf8_seq_len((uint8_t)tmp[i]);
        size_t bad;
        if (L > 0 && i + L <= n && ds_utf8_valid((const uint8_t *)tmp + i, (size_t)L, &bad)) {
            memcpy(buf + w, tmp + i, (size_t)L);
            w += (size_t)L;
            i += L;
        } else {
            memcpy(buf + w, "\xef\xbf\xbd", 3);
            w += 3;
            i++;
        }
    }
    buf[w] = 0;
    return buf;
}

// Logprobs of c's output tokens [from, to): OpenAI's completions shape (tokens, token_logprobs,
// top_logprobs, text_offset, offsets after `echo` bytes) or chat's (content: token, logprob, bytes,
// top_logprobs). with_prompt (echo): the prompt's tokens first, the first with null log-probability
// and alternatives; a prompt token the sampling parameters filter out (top-k, top-p, min-p: -inf)
// gets OpenAI's -9999.
static cJSON *logprobs_json(const ds_server *s, const srv_req *r, const srv_choice *c, int from, int to, size_t echo,
                            int with_prompt) {
    const int top = r->oa.top_logprobs;
    char buf[1024];
    uint8_t raw[256];
    int n_raw;
    cJSON *o = cJSON_CreateObject();
    if (r->oa.chat) {
        cJSON *content = cJSON_AddArrayToObject(o, "content");
        for (int i = from; i < to && i < c->n_lp; i++) {
            const int32_t tok = ds_text_out_token_id(ds_gen_text(c->g), i);
            const float *lp = c->lp + (size_t)i * (1 + top);
            cJSON *t = cJSON_CreateObject(), *tops;
            cJSON_AddStringToObject(t, "token", token_text(s, tok, buf, sizeof buf, raw, &n_raw));
            cJSON_AddNumberToObject(t, "logprob", lp[0]);
            cJSON *bytes = cJSON_AddArrayToObject(t, "bytes");
            for (int k = 0; k < n_raw; k++) cJSON_AddItemToArray(bytes, cJSON_CreateNumber(raw[k]));
            tops = cJSON_AddArrayToObject(t, "top_logprobs");
            for (int j = 0; j < top && c->lp_ids[(size_t)i * top + j] >= 0; j++) {
                cJSON *a = cJSON_CreateObject();
                cJSON_AddStringToObject(a, "token", token_text(s, c->lp_ids[(size_t)i * top + j], buf, sizeof buf, raw, &n_raw));
                cJSON_AddNumberToObject(a, "logprob", lp[1 + j]);
                cJSON *ab = cJSON_AddArrayToObject(a, "bytes");
                for (int k = 0; k < n_raw; k++) cJSON_AddItemToArray(ab, cJSON_CreateNumber(raw[k]));
                cJSON_AddItemToArray(tops, a);
            }
            cJSON_AddItemToArray(content, t);
        }
        return o;
    }
    cJSON *toks = cJSON_AddArrayToObject(o, "tokens"), *lps = cJSON_AddArrayToObject(o, "token_logprobs");
    cJSON *tops = cJSON_AddArrayToObject(o, "top_logprobs"), *offs = cJSON_AddArrayToObject(o, "text_offset");
    if (with_prompt && c->plp_ready) { // echo: the prompt's tokens first (the first has no log-probability)
        const int32_t *ids = r->oa.prompts[c->prompt];
        ds_detok d;
        ds_detok_init(&d, s->tok, 1); // offsets into the echoed text (as decoding the prompt gives it)
        size_t off = 0;
        for (int i = 0; i < r->oa.n_prompt[c->prompt]; i++) {
            const float *lp = c->plp + (size_t)i * (1 + top);
            cJSON_AddItemToArray(toks, cJSON_CreateString(token_text(s, ids[i], buf, sizeof buf, raw, &n_raw)));
            cJSON_AddItemToArray(lps, i ? cJSON_CreateNumber(lp[0] < -9999 ? -9999 : lp[0]) : cJSON_CreateNull());
            cJSON *t = i ? cJSON_CreateObject() : cJSON_CreateNull();
            for (int j = 0; i && j < top && c->plp_ids[(size_t)i * top + j] >= 0; j++)
                cJSON_AddNumberToObject(t, token_text(s, c->plp_ids[(size_t)i * top + j], buf, sizeof buf, raw, &n_raw), lp[1 + j]);
            cJSON_AddItemToArray(tops, t);
            cJSON_AddItemToArray(offs, cJSON_CreateNumber((double)(off < echo ? off : echo)));
            const int w = ds_detok_push(&d, ids[i], buf, sizeof buf);
            off += w > 0 ? (size_t)w : 0;
        }
    }
    for (int i = from; i < to && i < c->n_lp; i++) {
        const float *lp = c->lp + (size_t)i * (1 + top);
        cJSON_AddItemToArray(toks, cJSON_CreateString(token_text(s, ds_text_out_token_id(ds_gen_text(c->g), i), buf, sizeof buf, raw, &n_raw)));
        cJSON_AddItemToArray(lps, cJSON_CreateNumber(lp[0]));
        cJSON *t = cJSON_CreateObject();
        for (int j = 0; j < top && c->lp_ids[(size_t)i * top + j] >= 0; j++)
            cJSON_AddNumberToObject(t, token_text(s, c->lp_ids[(size_t)i * top + j], buf, sizeof buf, raw, &n_raw), lp[1 + j]);
        cJSON_AddItemToArray(tops, t);
        cJSON_AddItemToArray(offs, cJSON_CreateNumber((double)(echo + (i ? ds_text_out_token_end(ds_gen_text(c->g), i - 1) : 0))));
    }
    return o;
}

// Tools offered: parse c's finished text for calls once (under mu). Returns the number of calls.
static int tool_calls(const srv_req *r, srv_choice *c) {
    if (r->oa.tool_syntax == DS_TOOLS_NONE || !c->finish) return 0;
    if (!c->tc_parsed) {
        size_t len;
        const char *text = ds_text_out_text(ds_gen_text(c->g), &len);
        c->tc_parsed = 1;
        if (ds_tool_calls_parse(r->oa.tool_syntax, text, len, &c->tc_content, &c->tc_calls, &c->tc_n)) c->tc_n = 0;
        if (c->tc_n > 1 && !r->oa.parallel_tool_calls) c->tc_n = 1; // parallel_tool_calls: false
    }
    return c->tc_n;
}

// The text of c that may be streamed as content: the text output's safe part, less what could
// still be (the start of) a tool call; once it has finished with calls, nothing more.
static size_t choice_safe(const srv_req *r, srv_choice *c) {
    size_t safe = ds_text_out_safe(ds_gen_text(c->g));
    if (r->oa.tool_syntax == DS_TOOLS_NONE) return safe;
    if (c->finish) return tool_calls(r, c) ? c->sent : safe;
    return ds_tool_calls_safe(r->oa.tool_syntax, ds_text_out_text(ds_gen_text(c->g), NULL), safe);
}

// OpenAI tool_calls of c: [{index?, id, type, function: {name, arguments}}].
static cJSON *tool_calls_json(const srv_req *r, const srv_choice *c, int idx, int with_index) {
    cJSON *parsed = cJSON_Parse(c->tc_calls), *arr = cJSON_CreateArray();
    int k = 0;
    for (const cJSON *t = parsed ? parsed->child : NULL; t && k < c->tc_n; t = t->next, k++) {
        cJSON *x = cJSON_CreateObject(), *f = cJSON_CreateObject();
        char id[96];
        snprintf(id, sizeof id, "call_%s_%d_%d", r->id, idx, k);
        if (with_index) cJSON_AddNumberToObject(x, "index", k);
        cJSON_AddStringToObject(x, "id", id);
        cJSON_AddStringToObject(x, "type", "function");
        cJSON_AddItemToObject(x, "function", f);
        cJSON_AddStringToObject(f, "name", cJSON_GetObjectItemCaseSensitive(t, "name")->valuestring);
        cJSON_AddStringToObject(f, "arguments", cJSON_GetObjectItemCaseSensitive(t, "arguments")->valuestring);
        cJSON_AddItemToArray(arr, x);
    }
    cJSON_Delete(parsed);
    return arr;
}

// Choice `index`: text (len bytes; NULL = none, as in a chat stream's last chunk), the logprobs of
// output tokens [lp_from, lp_to) of c when asked for, and the finish reason.
static cJSON *choice(const ds_server *s, const srv_req *r, const srv_choice *ch, int index, const char *text, size_t len,
                     int chunk, const char *finish, int role, int lp_from, int lp_to) {
    cJSON *c = cJSON_CreateObject();
    cJSON_AddNumberToObject(c, "index", index);
    char *t = NULL;
    if (text && (t = malloc(len + 1))) {
        memcpy(t, text, len);
        t[len] = 0;
    }
    const size_t echo = r->oa.echo ? strlen(r->oa.prompt_text[ch->prompt]) : 0;
    // (role: the choice's first or only message: chat's role, completions' echoed prompt)
    cJSON *lp = r->oa.logprobs ? logprobs_json(s, r, ch, lp_from, lp_to, echo, role && r->oa.echo) : NULL;
    if (!r->oa.chat) {
        cJSON_AddStringToObject(c, "text", t ? t : "");
        if (lp) cJSON_AddItemToObject(c, "logprobs", lp);
        else cJSON_AddNullToObject(c, "logprobs");
    } else {
        cJSON *m = cJSON_AddObjectToObject(c, chunk ? "delta" : "message");
        if (role) cJSON_AddStringToObject(m, "role", "assistant");
        if (t || !chunk) cJSON_AddStringToObject(m, "content", t ? t : "");
        if (lp) cJSON_AddItemToObject(c, "logprobs", lp);
        else if (!chunk) cJSON_AddNullToObject(c, "logprobs");
    }
    free(t);
    if (finish) cJSON_AddStringToObject(c, "finish_reason", finish);
    else cJSON_AddNullToObject(c, "finish_reason");
    return c;
}

static cJSON *completion_json(const ds_server *s, const srv_req *r) {
    cJSON *o = envelope(s, r, 0), *cs = cJSON_AddArrayToObject(o, "choices");
    for (int i = 0; i < r->n_ch; i++) {
        const srv_choice *c = &r->ch[i];
        size_t len;
        const char *text = ds_text_out_text(ds_gen_text(c->g), &len);
        char *full = NULL; // echo: the prompt's text first
        if (r->oa.echo) {
            const char *pt = r->oa.prompt_text[c->prompt];
            const size_t pl = strlen(pt);
            if ((full = malloc(pl + len + 1))) {
                memcpy(full, pt, pl);
                memcpy(full + pl, text, len + 1);
                text = full;
                len += pl;
            }
        }
        if (r->oa.chat && tool_calls(r, (srv_choice *)c)) { // content (or null) and the calls
            cJSON *ch = choice(s, r, c, i, c->tc_content, strlen(c->tc_content), 0, "tool_calls", 1, 0, c->n_lp);
            cJSON *msg = cJSON_GetObjectItemCaseSensitive(ch, "message");
            if (!c->tc_content[0]) cJSON_ReplaceItemInObjectCaseSensitive(msg, "content", cJSON_CreateNull());
            cJSON_AddItemToObject(msg, "tool_calls", tool_calls_json(r, c, i, 0));
            cJSON_AddItemToArray(cs, ch);
        } else {
            cJSON_AddItemToArray(cs, choice(s, r, c, i, text, len, 0, c->finish, 1, 0, c->n_lp));
        }
        free(full);
    }
    cJSON_AddItemToObject(o, "usage", usage_json(r));
    return o;
}

static int out_put(srv_req *r, const char *a, const char *b, const char *c) {
    const size_t la = strlen(a), lb = b ? strlen(b) : 0, lc = c ? strlen(c) : 0;
    if (r->out_len + la + lb + lc > r->out_cap) {
        const size_t cap = 2 * r->out_cap + la + lb + lc + 256;
        char *o = realloc(r->out, cap);
        if (!o) return 0;
        r->out = o;
        r->out_cap = cap;
    }
    memcpy(r->out + r->out_len, a, la);
    if (b) memcpy(r->out + r->out_len + la, b, lb);
    if (c) memcpy(r->out + r->out_len + la + lb, c, lc);
    r->out_len += la + lb + lc;
    return 1;
}

static int out_event(srv_req *r, cJSON *o) {
    char *t = json_take(o);
    const int ok = t && out_put(r, "data: ", t, "\n\n");
    free(t);
    return ok;
}

// Whether choice c has something to stream now: text, or its finish chunk. Under mu.
static int choice_pending(const srv_req *r, srv_choice *c) {
    return !c->ended && (choice_safe(r, c) > c->sent || c->finish);
}

static int stream_pending(srv_req *r) {
    for (int i = 0; i < r->n_ch; i++)
        if (choice_pending(r, &r->ch[i])) return 1;
    return 0;
}

// Format the next events of a stream into r->out (under mu). Returns 0 on out of memory.
static int stream_next(ds_server *s, srv_req *r) {
    cJSON *o;
    if (r->phase == PH_START) { // chat streams open with the assistant role, for every choice
        r->phase = PH_TEXT;
        for (int i = 0; i < r->n_ch && (r->oa.chat || r->oa.echo); i++) { // (echo: the prompt's text first)
            o = envelope(s, r, 1);
            const char *pt = r->oa.echo ? r->oa.prompt_text[r->ch[i].prompt] : "";
            cJSON_AddItemToArray(cJSON_AddArrayToObject(o, "choices"), choice(s, r, &r->ch[i], i, pt, strlen(pt), 1, NULL, 1, 0, 0));
            if (!out_event(r, o)) return 0;
        }
        return 1;
    }
    if (r->state == RQ_DONE && r->failed) {
        r->phase = PH_END;
        if (!out_event(r, error_body(r->error, err_type(r->error_status), NULL, NULL))) return 0;
        return out_put(r, "data: [DONE]\n\n", NULL, NULL);
    }
    for (int i = 0; i < r->n_ch; i++) {
        srv_choice *c = &r->ch[i];
        if (!choice_pending(r, c)) continue;
        const size_t safe = choice_safe(r, c);
        if (safe > c->sent) { // the text, with the logprobs of the tokens it completes
            int lp_to = c->lp_sent;
            while (lp_to < c->n_lp && ds_text_out_token_end(ds_gen_text(c->g), lp_to) <= safe) lp_to++;
            o = envelope(s, r, 1);
            cJSON_AddItemToArray(cJSON_AddArrayToObject(o, "choices"),
                                 choice(s, r, c, i, ds_text_out_text(ds_gen_text(c->g), NULL) + c->sent, safe - c->sent, 1, NULL, 0,
                                        c->lp_sent, lp_to));
            c->sent = safe;
            c->lp_sent = lp_to;
            if (!out_event(r, o)) return 0;
        }
        if (c->finish && choice_safe(r, c) == c->sent) {
            const int calls = r->oa.chat ? tool_calls(r, c) : 0;
            if (calls && !c->tc_sent) { // the calls: one delta each with index, id, type, name, then its arguments
                c->tc_sent = 1;
                cJSON *all = tool_calls_json(r, c, i, 1);
                for (cJSON *t = all->child; t; t = t->next) {
                    cJSON *fn = cJSON_GetObjectItemCaseSensitive(t, "function");
                    char *args = strdup(cJSON_GetObjectItemCaseSensitive(fn, "arguments")->valuestring);
                    cJSON_ReplaceItemInObjectCaseSensitive(fn, "arguments", cJSON_CreateString(""));
                    for (int part = 0; part < 2 && args; part++) {
                        o = envelope(s, r, 1);
                        cJSON *ch = choice(s, r, c, i, NULL, 0, 1, NULL, 0, 0, 0), *d = cJSON_GetObjectItemCaseSensitive(ch, "delta");
                        cJSON *tc = cJSON_AddArrayToObject(d, "tool_calls"), *x;
                        if (part == 0) x = cJSON_Duplicate(t, 1);
                        else {
                            x = cJSON_CreateObject();
                            cJSON_AddNumberToObject(x, "index", cJSON_GetObjectItemCaseSensitive(t, "index")->valuedouble);
                            cJSON_AddStringToObject(cJSON_AddObjectToObject(x, "function"), "arguments", args);
                        }
                        cJSON_AddItemToArray(tc, x);
                        cJSON_AddItemToArray(cJSON_AddArrayToObject(o, "choices"), ch);
                        if (!out_event(r, o)) {
                            free(args);
                            cJSON_Delete(all);
                            return 0;
                        }
                    }
                    free(args);
                }
                cJSON_Delete(all);
            }
            c->ended = 1;
            o = envelope(s, r, 1);
            cJSON_AddItemToArray(cJSON_AddArrayToObject(o, "choices"),
                                 choice(s, r, c, i, r->oa.chat ? NULL : "", 0, 1, calls ? "tool_calls" : c->finish, 0, c->lp_sent, c->n_lp));
            c->lp_sent = c->n_lp;
            if (!out_event(r, o)) return 0;
        }
    }
    if (r->state != RQ_DONE || stream_pending(r)) return 1;
    r->phase = PH_END;
    if (r->oa.include_usage) {
        o = envelope(s, r, 1);
        cJSON_AddArrayToObject(o, "choices");
        cJSON_AddItemToObject(o, "usage", usage_json(r));
        if (!out_event(r, o)) return 0;
    }
    return out_put(r, "data: [DONE]\n\n", NULL, NULL);
}

// The stream's first events (echo with logprobs: the prompt's text with its tokens' logprobs) can go.
static int prompt_logprobs_ready(const srv_req *r) {
    for (int i = 0; r->oa.echo && r->oa.logprobs && i < r->n_ch; i++)
        if (!r->ch[i].plp_ready) return 0;
    return 1;
}

// Whether a stream has events to format now (under mu; the engine thread asks too, to wake it).
static int stream_ready(srv_req *r) {
    return r->state == RQ_DONE || (r->phase == PH_START ? prompt_logprobs_ready(r) : stream_pending(r));
}

// libmicrohttpd asks for the next bytes of the stream; never blocks: with nothing to send yet it
// suspends the connection and returns 0 (the engine thread resumes it when there is).
static ssize_t stream_reader(void *cls, uint64_t pos, char *buf, size_t max) {
    srv_req *r = cls;
    ds_server *s = r->srv;
    (void)pos;
    for (;;) {
        if (r->out_off < r->out_len) {
            const size_t n = r->out_len - r->out_off < max ? r->out_len - r->out_off : max;
            memcpy(buf, r->out + r->out_off, n);
            r->out_off += n;
            return (ssize_t)n;
        }
        r->out_len = r->out_off = 0;
        if (r->phase == PH_END) return MHD_CONTENT_READER_END_OF_STREAM;
        pthread_mutex_lock(&s->mu);
        if (!stream_ready(r)) {
            conn_sleep(r);
            pthread_mutex_unlock(&s->mu);
            return 0;
        }
        const int ok = stream_next(s, r);
        pthread_mutex_unlock(&s->mu);
        if (!ok) return MHD_CONTENT_READER_END_WITH_ERROR;
    }
}

static void stream_free(void *cls) {
    srv_req *r = cls;
    ds_server *s = r->srv;
    pthread_mutex_lock(&s->mu);
    r->suspended = 0; // (its connection is being closed: nothing to resume)
    cancel(s, r);     // a client gone mid-stream frees its slot
    req_release(s, r);
    pthread_mutex_unlock(&s->mu);
}

// A non-streamed completion: answer once the engine is done with it, else suspend until it is
// (called again when resumed). The HTTP side's reference is cx->req until then.
static enum MHD_Result completion_answer(ds_server *s, struct MHD_Connection *c, conn_ctx *cx) {
    srv_req *r = cx->req;
    pthread_mutex_lock(&s->mu);
    if (r->state != RQ_DONE) {
        conn_sleep(r);
        pthread_mutex_unlock(&s->mu);
        return MHD_YES;
    }
    cx->req = NULL;
    if (r->cancelled && !r->failed) { // its client left while it waited: nobody to answer, close
        req_release(s, r);
        pthread_mutex_unlock(&s->mu);
        return MHD_NO;
    }
    cJSON *o = r->failed ? error_body(r->error, err_type(r->error_status), NULL, NULL) : completion_json(s, r);
    const unsigned status = r->failed ? (unsigned)r->error_status : 200;
    req_release(s, r);
    pthread_mutex_unlock(&s->mu);
    return respond_json(s, c, status, o);
}

static enum MHD_Result handle_completion(ds_server *s, struct MHD_Connection *c, conn_ctx *cx, int chat) {
    srv_req *r = calloc(1, sizeof *r);
    if (!r) return respond_error(s, c, 500, "out of memory", NULL);
    const char *param = NULL;
    const ds_status st = ds_oa_parse(cx->body ? cx->body : "", cx->n, chat, s->p.model, &r->oa, &param);
    if (st) {
        free(r);
        pthread_mutex_lock(&s->mu);
        s->mt.requests_bad++;
        pthread_mutex_unlock(&s->mu);
        return respond_error(s, c, st == DS_ERR_NOMEM ? 500 : 400, ds_last_error(), param);
    }
    // Choice i of prompt p (index p·n + i): its own sequence, text output and seed (set below).
    r->n_ch = r->oa.n_prompts * r->oa.n;
    ds_status tst = (r->ch = calloc((size_t)r->n_ch, sizeof *r->ch)) ? DS_OK : DS_ERR_NOMEM;
    for (int k = 0; k < r->n_ch && !tst; k++) { // (a chat request ends at the format's end of turn)
        const int p = r->ch[k].prompt = k / r->oa.n;
        const ds_gen_request req = {.ids = r->oa.prompts[p], .n_ids = r->oa.n_prompt[p], .chat = r->oa.chat,
                                    .max_new = r->oa.max_tokens, .sp = r->oa.sp, .stops = (const char *const *)r->oa.stops,
                                    .n_stops = r->oa.n_stops, .logprobs = r->oa.logprobs,
                                    .top_logprobs = r->oa.top_logprobs, .no_prompt_cache = r->oa.no_prompt_cache,
                                    .prompt_logprobs = r->oa.echo && r->oa.logprobs, .grammar = r->oa.grammar};
        tst = ds_gen_init(s->tok, &req, &r->ch[k].g);
    }
    if (tst) {
        for (int k = 0; r->ch && k < r->n_ch; k++) ds_gen_free(r->ch[k].g);
        free(r->ch);
        ds_oa_request_free(&r->oa);
        free(r);
        return respond_error(s, c, 500, "out of memory", NULL);
    }
    r->refs = 2;
    r->srv = s;
    r->conn = c;
    r->created = (long long)time(NULL);
    r->t_arrive = now_s();
    pthread_mutex_lock(&s->mu);
    const char *refuse = s->draining                                                      ? "the server is shutting down"
                         : s->q_len + s->n_active >= s->p.max_concurrency + s->p.queue_max ? "the server is busy: the queue is full, retry later"
                                                                                           : NULL;
    if (refuse) {
        s->mt.requests_rejected_full += !s->draining;
        r->refs = 1;
        req_release(s, r);
        pthread_mutex_unlock(&s->mu);
        return respond_error(s, c, 503, refuse, NULL);
    }
    const uint64_t n = ++s->next_id;
    snprintf(r->id, sizeof r->id, "%s-%llu", chat ? "chatcmpl" : "cmpl", (unsigned long long)n);
    if (!r->oa.has_seed) r->oa.seed = s->seed_base + n * 0x9E3779B97F4A7C15ull;
    // A seeded request keeps the rule that makes its text the seed's (coupled by default); one
    // without a seed has no text to reproduce, so it takes the rule with the higher acceptance.
    if (!r->oa.has_verify) r->oa.sp.verify = r->oa.has_seed || s->p.verify_unseeded ? s->p.verify : DS_VERIFY_RESIDUAL;
    for (int k = 0; k < r->n_ch; k++) // (the logit bias was copied at init: this cannot fail)
        ds_gen_set_sampling(r->ch[k].g, &r->oa.sp, r->oa.seed + (uint64_t)(k % r->oa.n));
    if (s->q_tail) s->q_tail->next = r;
    else s->q_head = r;
    s->q_tail = r;
    s->q_len++;
    s->mt.requests_ok++;
    s->mt.queue_depth = s->q_len;
    pthread_cond_signal(&s->work_cv);
    if (r->oa.stream) {
        pthread_mutex_unlock(&s->mu);
        struct MHD_Response *resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, stream_reader, r, stream_free);
        if (!resp) {
            stream_free(r);
            return MHD_NO;
        }
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream");
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
        common_headers(s, resp);
        const enum MHD_Result ret = MHD_queue_response(c, 200, resp);
        MHD_destroy_response(resp);
        count_status(s, 200);
        return ret;
    }
    pthread_mutex_unlock(&s->mu);
    cx->req = r;
    return completion_answer(s, c, cx);
}

// Two Content-Length headers that disagree (a request-smuggling shape): libmicrohttpd reads the
// first; such a request is refused instead.
typedef struct {
    const char *first;
    int conflict;
} length_headers;

static enum MHD_Result check_length_header(void *cls, enum MHD_ValueKind kind, const char *key, const char *value) {
    length_headers *h = cls;
    (void)kind;
    if (!key || strcasecmp(key, MHD_HTTP_HEADER_CONTENT_LENGTH)) return MHD_YES;
    if (!h->first) h->first = value ? value : "";
    else if (strcmp(h->first, value ? value : "")) h->conflict = 1;
    return MHD_YES;
}

// POST /tokenize (llama-server's shape): {"tokens": [ids]} or, with_pieces, [{"id", "piece"}].
static enum MHD_Result handle_tokenize(ds_server *s, struct MHD_Connection *c, const conn_ctx *cx) {
    char *text;
    int add_special, with_pieces;
    const char *param;
    ds_status st = ds_oa_parse_tokenize(cx->body ? cx->body : "", cx->n, &text, &add_special, &with_pieces, &param);
    int n = 0;
    int32_t *ids = NULL;
    const unsigned flags = DS_TOK_PARSE_SPECIAL | (add_special ? DS_TOK_ADD_SPECIAL : 0);
    if (!st && !(st = ds_tokenize_ex(s->tok, text, strlen(text), flags, NULL, 0, &n)) &&
        !(ids = malloc(sizeof(int32_t) * (size_t)(n > 0 ? n : 1))))
        st = ds_fail(DS_ERR_NOMEM, "out of memory");
    if (!st) st = ds_tokenize_ex(s->tok, text, strlen(text), flags, ids, n, &n);
    free(text);
    if (st) {
        free(ids);
        return respond_error(s, c, st == DS_ERR_NOMEM ? 500 : 400, ds_last_error(), param ? param : "content");
    }
    cJSON *o = cJSON_CreateObject(), *arr = cJSON_AddArrayToObject(o, "tokens");
    for (int i = 0; i < n; i++) {
        if (!with_pieces) {
            cJSON_AddItemToArray(arr, cJSON_CreateNumber(ids[i]));
            continue;
        }
        char piece[1024];
        uint8_t raw[256];
        int n_raw;
        cJSON *t = cJSON_CreateObject();
        cJSON_AddNumberToObject(t, "id", ids[i]);
        cJSON_AddStringToObject(t, "piece", token_text(s, ids[i], piece, sizeof piece, raw, &n_raw));
        cJSON_AddItemToArray(arr, t);
    }
    free(ids);
    return respond_json(s, c, 200, o);
}

// POST /apply-template (llama-server's): {"prompt": the conversation rendered by the chat template}.
static enum MHD_Result handle_apply_template(ds_server *s, struct MHD_Connection *c, const conn_ctx *cx) {
    char *text;
    const char *param;
    ds_status st = ds_oa_parse_apply_template(cx->body ? cx->body : "", cx->n, s->p.model, &text, &param);
    if (st) return respond_error(s, c, st == DS_ERR_NOMEM ? 500 : 400, ds_last_error(), param ? param : "messages");
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "prompt", text);
    free(text);
    return respond_json(s, c, 200, o);
}

// POST /detokenize: {"content": text} (special tokens as their text, as llama-server).
static enum MHD_Result handle_detokenize(ds_server *s, struct MHD_Connection *c, const conn_ctx *cx) {
    int32_t *ids;
    int n;
    const char *param;
    ds_status st = ds_oa_parse_detokenize(cx->body ? cx->body : "", cx->n, s->p.model, &ids, &n, &param);
    char *text = NULL;
    if (!st) st = ds_detokenize(s->tok, ids, n, 0, &text, NULL);
    free(ids);
    if (st) return respond_error(s, c, st == DS_ERR_NOMEM ? 500 : 400, ds_last_error(), param ? param : "tokens");
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "content", text);
    free(text);
    return respond_json(s, c, 200, o);
}

static cJSON *model_json(const ds_server *s) {
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "id", s->model_name);
    cJSON_AddStringToObject(m, "object", "model");
    cJSON_AddNumberToObject(m, "created", 0);
    cJSON_AddStringToObject(m, "owned_by", "dspark");
    return m;
}

// --api-key: "Authorization: Bearer KEY" (compared in time independent of where it differs).
static int authorized(const ds_server *s, struct MHD_Connection *c) {
    if (!s->p.api_key) return 1;
    const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
    if (!h || strncasecmp(h, "Bearer ", 7)) return 0;
    h += 7;
    while (*h == ' ') h++;
    const size_t n = strlen(h), k = strlen(s->p.api_key);
    unsigned char diff = n != k;
    for (size_t i = 0; i < n && i < k; i++) diff |= (unsigned char)(h[i] ^ s->p.api_key[i]);
    return !diff;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                  const char *version, const char *upload, size_t *upload_size, void **con_cls) {
    ds_server *s = cls;
    conn_ctx *cx = *con_cls;
    if (!cx) {
        if (!(cx = calloc(1, sizeof *cx))) return MHD_NO;
        *con_cls = cx;
        // The headers are in: the short header timeout gives way to the request timeout (a body
        // still arriving, a response waiting for generation) until the request completes.
        MHD_set_connection_option(c, MHD_CONNECTION_OPTION_TIMEOUT, (unsigned)DS_REQUEST_TIMEOUT_S);
        pthread_mutex_lock(&s->mu);
        s->n_inflight++;
        pthread_mutex_unlock(&s->mu);
        return MHD_YES;
    }
    if (*upload_size) { // collect the body, up to the limit (the rest is read and dropped)
        const size_t n = *upload_size;
        *upload_size = 0;
        if (cx->too_big || cx->n + n > s->p.max_body) {
            cx->too_big = 1;
            free(cx->body);
            cx->body = NULL;
            cx->n = cx->cap = 0;
            return MHD_YES;
        }
        if (cx->n + n + 1 > cx->cap) {
            const size_t cap = 2 * cx->cap + n + 1 < s->p.max_body + 1 ? 2 * cx->cap + n + 1 : s->p.max_body + 1;
            char *b = realloc(cx->body, cap);
            if (!b) return MHD_NO;
            cx->body = b;
            cx->cap = cap;
        }
        memcpy(cx->body + cx->n, upload, n);
        cx->n += n;
        cx->body[cx->n] = 0;
        return MHD_YES;
    }
    if (cx->req) return completion_answer(s, c, cx); // resumed: the engine is done with it
    const int get = !strcmp(method, MHD_HTTP_METHOD_GET), post = !strcmp(method, MHD_HTTP_METHOD_POST);
    if (!strcmp(method, MHD_HTTP_METHOD_OPTIONS) && s->p.cors_origin) { // a browser's CORS preflight
        struct MHD_Response *resp = MHD_create_response_from_buffer(0, "", MHD_RESPMEM_PERSISTENT);
        if (!resp) return MHD_NO;
        common_headers(s, resp);
        MHD_add_response_header(resp, "Access-Control-Allow-Methods", "GET, POST, OPTIONS");
        MHD_add_response_header(resp, "Access-Control-Allow-Headers", "Authorization, Content-Type");
        MHD_add_response_header(resp, "Access-Control-Max-Age", "86400");
        const enum MHD_Result ret = MHD_queue_response(c, 204, resp);
        MHD_destroy_response(resp);
        count_status(s, 204);
        return ret;
    }
    if (strcmp(url, "/health") && !authorized(s, c))
        return respond_error(s, c, 401, "invalid or missing API key (send Authorization: Bearer KEY)", NULL);
    const int compl = !strcmp(url, "/v1/completions"), chat = !strcmp(url, "/v1/chat/completions");
    const int tokz = !strcmp(url, "/tokenize"), detokz = !strcmp(url, "/detokenize"), apply = !strcmp(url, "/apply-template");
    if (tokz || detokz || apply) {
        if (!post) return respond_error(s, c, 405, "use POST for this endpoint", NULL);
        if (cx->too_big) return respond_error(s, c, 413, "the request body exceeds the limit", NULL);
        return tokz ? handle_tokenize(s, c, cx) : detokz ? handle_detokenize(s, c, cx) : handle_apply_template(s, c, cx);
    }
    if (!strncmp(url, "/v1/models/", 11)) {
        if (!get) return respond_error(s, c, 405, "use GET for this endpoint", NULL);
        if (strcmp(url + 11, s->model_name)) {
            char msg[400];
            snprintf(msg, sizeof msg, "the model '%.200s' does not exist (this server has '%.180s')", url + 11, s->model_name);
            return respond_json(s, c, 404, error_body(msg, "invalid_request_error", "model", "model_not_found"));
        }
        return respond_json(s, c, 200, model_json(s));
    }
    if (compl || chat) {
        if (!post) return respond_error(s, c, 405, "use POST for this endpoint", NULL);
        length_headers lh = {0};
        MHD_get_connection_values(c, MHD_HEADER_KIND, check_length_header, &lh);
        if (lh.conflict) {
            pthread_mutex_lock(&s->mu);
            s->mt.requests_bad++;
            pthread_mutex_unlock(&s->mu);
            return respond_error(s, c, 400, "conflicting Content-Length headers", NULL);
        }
        if (cx->too_big) {
            pthread_mutex_lock(&s->mu);
            s->mt.requests_bad++;
            pthread_mutex_unlock(&s->mu);
            char msg[128];
            snprintf(msg, sizeof msg, "the request body exceeds the limit of %zu bytes", s->p.max_body);
            return respond_error(s, c, 413, msg, NULL);
        }
        return handle_completion(s, c, cx, chat);
    }
    if (!strcmp(url, "/health")) {
        if (!get) return respond_error(s, c, 405, "use GET for this endpoint", NULL);
        pthread_mutex_lock(&s->mu);
        const int draining = s->draining;
        pthread_mutex_unlock(&s->mu);
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "status", draining ? "shutting down" : "ok");
        return respond_json(s, c, draining ? 503 : 200, o);
    }
    if (!strcmp(url, "/v1/models")) {
        if (!get) return respond_error(s, c, 405, "use GET for this endpoint", NULL);
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "object", "list");
        cJSON_AddItemToArray(cJSON_AddArrayToObject(o, "data"), model_json(s));
        return respond_json(s, c, 200, o);
    }
    if (!strcmp(url, "/metrics")) {
        if (!get) return respond_error(s, c, 405, "use GET for this endpoint", NULL);
        pthread_mutex_lock(&s->mu);
        s->mt.queue_depth = s->q_len;
        s->mt.active = s->n_active;
        const ds_metrics snap = s->mt;
        pthread_mutex_unlock(&s->mu);
        return respond(s, c, 200, ds_metrics_render(&snap, s->model_name), "text/plain; version=0.0.4; charset=utf-8");
    }
    return respond_error(s, c, 404, "no such endpoint", NULL);
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe) {
    conn_ctx *cx = *con_cls;
    if (!cx) return;
    ds_server *s = cls;
    if (cx->req) { // closed before its answer was sent (the client left, or the server stops)
        pthread_mutex_lock(&s->mu);
        cx->req->suspended = 0;
        cancel(s, cx->req);
        req_release(s, cx->req);
        pthread_mutex_unlock(&s->mu);
    }
    free(cx->body);
    free(cx);
    *con_cls = NULL;
    // Waiting for the next request on a kept-alive connection is idle time again.
    MHD_set_connection_option(c, MHD_CONNECTION_OPTION_TIMEOUT, (unsigned)s->p.header_timeout_s);
    pthread_mutex_lock(&s->mu);
    s->n_inflight--;
    pthread_mutex_unlock(&s->mu);
}

// ---------------------------------------------------------------------------------------------
// Life cycle

// Open files besides the connections: the listening socket, epoll, the resume channel, stdio,
// model files.
#define DS_FD_RESERVE 64
#define DS_DEFAULT_CONNECTIONS 4096

// Raise the soft open-file limit to the hard one; default max_connections to what it allows (up to
// 4096), and refuse an explicit one it does not.
static ds_status fit_open_files(ds_serve_params *p) {
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl)) rl.rlim_cur = rl.rlim_max = 1024;
    if (rl.rlim_cur < rl.rlim_max) {
        struct rlimit up = {rl.rlim_max, rl.rlim_max};
        if (!setrlimit(RLIMIT_NOFILE, &up)) rl = up; // (else the soft limit stays as it was)
    }
    const unsigned long long lim = (unsigned long long)rl.rlim_cur;
    if (p->max_connections < 1) {
        p->max_connections = DS_DEFAULT_CONNECTIONS;
        if (lim < (unsigned long long)DS_DEFAULT_CONNECTIONS + DS_FD_RESERVE)
            p->max_connections = lim > DS_FD_RESERVE + 16 ? (int)(lim - DS_FD_RESERVE) : 16;
    }
    if ((unsigned long long)p->max_connections + DS_FD_RESERVE > lim)
        return ds_fail(DS_ERR_INVALID, "serve: %d connections need %d open files, the limit is %llu (raise ulimit -n, or lower --max-connections)",
                       p->max_connections, p->max_connections + DS_FD_RESERVE, lim);
    return DS_OK;
}

ds_serve_params ds_serve_default(void) {
    return (ds_serve_params){.host = "127.0.0.1", .max_concurrency = 8, .queue_max = 64, .max_body = (size_t)1 << 20,
                             .header_timeout_s = 10, .verify = DS_VERIFY_COUPLED};
}

ds_status ds_server_start(const ds_serve_params *p, ds_server **out) {
    *out = NULL;
    ds_server *s = ds_calloc(1, sizeof *s);
    if (!s) return DS_ERR_NOMEM;
    s->p = *p;
    if (!s->p.host) s->p.host = "127.0.0.1";
    if (s->p.max_concurrency < 1) s->p.max_concurrency = 8;
    if (s->p.queue_max < 0) s->p.queue_max = 0;
    if (!s->p.max_body) s->p.max_body = 1 << 20;
    if (s->p.header_timeout_s < 1) s->p.header_timeout_s = 10;
    snprintf(s->model_name, sizeof s->model_name, "%s", p->model_name ? p->model_name : ds_model_get_info(p->model)->name);
    s->tok = ds_model_tokenizer(p->model);
    s->mt.max_concurrency = s->p.max_concurrency;
    s->mt.queue_max = s->p.queue_max;
    s->mt.cache_cap = s->p.spec.prompt_cache_bytes;
    s->seed_base = (uint64_t)time(NULL) * 0x2545F4914F6CDD1Dull;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->work_cv, NULL);
    ds_status st = DS_OK;
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)s->p.port)};
    const char *host = !strcmp(s->p.host, "localhost") ? "127.0.0.1" : s->p.host;
    if (!s->tok) st = ds_fail(DS_ERR_INVALID, "serve: the model has no tokenizer");
    else if (s->p.port < 0 || s->p.port > 65535) st = ds_fail(DS_ERR_INVALID, "serve: port %d outside 0..65535", s->p.port);
    else if (inet_pton(AF_INET, host, &sa.sin_addr) != 1)
        st = ds_fail(DS_ERR_INVALID, "serve: host '%s' is not an IPv4 address", s->p.host);
    if (!st) st = fit_open_files(&s->p);
    if (!st && s->p.max_per_client < 1) s->p.max_per_client = s->p.max_connections >= 4 ? s->p.max_connections / 4 : 1;
    if (!st && s->p.max_per_client > s->p.max_connections) s->p.max_per_client = s->p.max_connections;
    if (st) goto fail;
    s->active = calloc((size_t)s->p.max_concurrency, sizeof *s->active);
    s->take_buf = malloc(sizeof(int32_t) * 256);
    if (!s->active || !s->take_buf) {
        st = ds_fail(DS_ERR_NOMEM, "out of memory");
        goto fail;
    }
    if ((st = ds_engine_init(p->model, p->drafter, &p->spec, &s->e))) goto fail;
    ds_engine_set_observer(s->e, on_round, s);
    if (pthread_create(&s->engine_thread, NULL, engine_main, s)) {
        st = ds_fail(DS_ERR_NOMEM, "serve: cannot start the engine thread");
        goto fail;
    }
    s->engine_started = 1;
    // One epoll thread for every connection (an idle one costs a socket and a little memory, no
    // thread); suspend / resume (with its inter-thread channel) for the ones that wait for tokens.
    s->d = MHD_start_daemon(MHD_USE_EPOLL_INTERNAL_THREAD | MHD_ALLOW_SUSPEND_RESUME, (uint16_t)s->p.port, NULL, NULL,
                            on_request, s, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&sa, MHD_OPTION_CONNECTION_LIMIT,
                            (unsigned)s->p.max_connections, MHD_OPTION_PER_IP_CONNECTION_LIMIT,
                            (unsigned)s->p.max_per_client, MHD_OPTION_CONNECTION_TIMEOUT,
                            (unsigned)s->p.header_timeout_s, MHD_OPTION_NOTIFY_COMPLETED, on_completed, s,
                            MHD_OPTION_END);
    if (!s->d) {
        st = ds_fail(DS_ERR_IO, "serve: cannot listen on %s:%d (in use, or not an address of this machine)", s->p.host, s->p.port);
        goto fail;
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(s->d, MHD_DAEMON_INFO_LISTEN_FD);
    struct sockaddr_in bound;
    socklen_t bl = sizeof bound;
    s->port = s->p.port;
    if (di && getsockname(di->listen_fd, (struct sockaddr *)&bound, &bl) == 0) s->port = ntohs(bound.sin_port);
    *out = s;
    return DS_OK;
fail:
    ds_server_free(s);
    return st;
}

int ds_server_port(const ds_server *s) { return s->port; }

int ds_server_drain(ds_server *s, double timeout_s) {
    if (s->drained) return 0;
    s->drained = 1;
    pthread_mutex_lock(&s->mu);
    s->draining = 1;
    pthread_mutex_unlock(&s->mu);
    const double t_end = now_s() + timeout_s;
    int left;
    for (;;) { // until every request is generated AND its response fully sent (or the timeout)
        pthread_mutex_lock(&s->mu);
        left = s->q_len + s->n_active;
        const int sending = s->n_inflight;
        pthread_mutex_unlock(&s->mu);
        if ((!left && !sending) || now_s() >= t_end) break;
        struct timespec ts = {0, 10 * 1000000L};
        nanosleep(&ts, NULL);
    }
    pthread_mutex_lock(&s->mu);
    s->stopping = 1;
    for (srv_req *r = s->q_head; r; r = r->next) r->cancelled = 1;
    for (int i = 0; i < s->n_active; i++) s->active[i]->cancelled = 1;
    pthread_cond_signal(&s->work_cv);
    pthread_mutex_unlock(&s->mu);
    if (s->engine_started) pthread_join(s->engine_thread, NULL);
    s->engine_started = 0;
    // The requests just cut off have been resumed: let their answers (a 503, a stream's error
    // event) go out before libmicrohttpd closes every connection, for up to 2 s.
    for (const double t_sent = now_s() + 2; s->d && now_s() < t_sent;) {
        pthread_mutex_lock(&s->mu);
        const int sending = s->n_inflight;
        pthread_mutex_unlock(&s->mu);
        if (!sending) break;
        struct timespec ts = {0, 10 * 1000000L};
        nanosleep(&ts, NULL);
    }
    // Every request is done now, so every suspended connection has been resumed (libmicrohttpd
    // requires that before it stops): the ones not answered yet are closed (on_completed and
    // stream_free release their requests).
    if (s->d) MHD_stop_daemon(s->d);
    s->d = NULL;
    return left;
}

void ds_server_free(ds_server *s) {
    if (!s) return;
    if (s->engine_started || s->d) {
        s->drained = 0;
        ds_server_drain(s, 0);
    }
    ds_engine_free(s->e);
    free(s->active);
    free(s->take_buf);
    pthread_cond_destroy(&s->work_cv);
    pthread_mutex_destroy(&s->mu);
    free(s);
}
