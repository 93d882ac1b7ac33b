// Server metrics in the Prometheus text exposition format (version 0.0.4). Every name starts with
// dspark_; counters end in _total.
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "serve/server.h"

void ds_metrics_round(ds_metrics *mt, int ell, int accepted) {
    mt->rounds++;
    mt->drafts += ell > 0;
    mt->drafted += (uint64_t)ell;
    mt->accepted += (uint64_t)accepted;
    mt->ell_count[ell < DS_METRICS_POS ? ell : DS_METRICS_POS]++;
    for (int k = 0; k < ell && k <= accepted && k < DS_METRICS_POS; k++) {
        mt->tried_by_pos[k]++;
        if (k < accepted) mt->accepted_by_pos[k]++;
    }
}

typedef struct {
    char *s;
    size_t n, cap;
    int oom;
} sbuf;

__attribute__((format(printf, 2, 3))) static void put(sbuf *b, const char *fmt, ...) {
    if (b->oom) return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        const int w = vsnprintf(b->s + b->n, b->cap - b->n, fmt, ap);
        va_end(ap);
        if (w >= 0 && (size_t)w < b->cap - b->n) {
            b->n += (size_t)w;
            return;
        }
        const size_t cap = 2 * b->cap + (size_t)(w > 0 ? w : 0) + 64;
        char *s = realloc(b->s, cap);
        if (!s) {
            b->oom = 1;
            return;
        }
        b->s = s;
        b->cap = cap;
    }
}

static void head(sbuf *b, const char *name, const char *type, const char *help) {
    put(b, "# HELP dspark_%s %s\n# TYPE dspark_%s %s\n", name, help, name, type);
}

static void counter(sbuf *b, const char *name, const char *help, uint64_t v) {
    head(b, name, "counter", help);
    put(b, "dspark_%s %llu\n", name, (unsigned long long)v);
}

static void gauge(sbuf *b, const char *name, const char *help, double v) {
    head(b, name, "gauge", help);
    put(b, "dspark_%s %.17g\n", name, v);
}

char *ds_metrics_render(const ds_metrics *mt, const char *model_name) {
    sbuf b = {.s = malloc(4096), .cap = 4096};
    if (!b.s) return NULL;
    b.s[0] = 0;
    head(&b, "info", "gauge", "The model being served.");
    put(&b, "dspark_info{model=\"");
    for (const char *c = model_name; *c; c++) put(&b, "%c", *c == '"' || *c == '\\' || *c == '\n' ? '_' : *c);
    put(&b, "\"} 1\n");
    head(&b, "http_responses_total", "counter", "HTTP responses by status class.");
    for (int c = 1; c <= 5; c++) put(&b, "dspark_http_responses_total{code=\"%dxx\"} %llu\n", c, (unsigned long long)mt->http_by_code[c]);
    counter(&b, "requests_total", "Completion requests accepted into the queue.", mt->requests_ok);
    counter(&b, "requests_rejected_total", "Completion requests refused because the queue was full (503).", mt->requests_rejected_full);
    counter(&b, "requests_invalid_total", "Requests refused as malformed or too large (400, 413).", mt->requests_bad);
    head(&b, "requests_finished_total", "counter", "Completion requests finished, by reason.");
    put(&b, "dspark_requests_finished_total{reason=\"stop\"} %llu\n", (unsigned long long)mt->finished_stop);
    put(&b, "dspark_requests_finished_total{reason=\"length\"} %llu\n", (unsigned long long)mt->finished_length);
    put(&b, "dspark_requests_finished_total{reason=\"cancelled\"} %llu\n", (unsigned long long)mt->finished_cancelled);
    put(&b, "dspark_requests_finished_total{reason=\"error\"} %llu\n", (unsigned long long)mt->finished_error);
    counter(&b, "prompt_tokens_total", "Prompt tokens of admitted requests.", mt->prompt_tokens);
    counter(&b, "completion_tokens_total", "Tokens generated and delivered.", mt->completion_tokens);
    gauge(&b, "queue_depth", "Requests waiting for a decoding slot.", mt->queue_depth);
    gauge(&b, "active_requests", "Requests being decoded.", mt->active);
    gauge(&b, "max_concurrency", "Decoding slots.", mt->max_concurrency);
    gauge(&b, "queue_capacity", "Requests that may wait beyond the slots before new ones get 503.", mt->queue_max);
    counter(&b, "engine_steps_total", "Engine rounds (one batched target forward each).", mt->steps);
    counter(&b, "verify_rounds_total", "Verification rounds summed over requests.", mt->rounds);
    counter(&b, "drafted_tokens_total", "Drafted tokens sent to verification.", mt->drafted);
    counter(&b, "accepted_tokens_total", "Drafted tokens accepted.", mt->accepted);
    gauge(&b, "tau", "Mean tokens committed per verification round (accepted + 1), since start.",
          mt->rounds ? (double)(mt->accepted + mt->rounds) / (double)mt->rounds : 0.0);
    // The same counts under vLLM's names (spec_decode_*, prefix_cache_*), and the mean accepted length.
    counter(&b, "spec_decode_num_drafts_total", "Verification rounds with at least one draft.", mt->drafts);
    counter(&b, "spec_decode_num_draft_tokens_total", "Drafted tokens sent to verification.", mt->drafted);
    counter(&b, "spec_decode_num_accepted_tokens_total", "Drafted tokens accepted.", mt->accepted);
    gauge(&b, "spec_decode_mean_accepted_length", "Tokens committed per round that verified drafts (accepted / drafts + 1).",
          mt->drafts ? 1.0 + (double)mt->accepted / (double)mt->drafts : 0.0);
    counter(&b, "requests_constrained_total", "Admitted requests whose output a grammar constrains.", mt->constrained);
    head(&b, "requests_sampled_total", "counter", "Admitted sampled requests (temperature > 0) by how their drafts are verified.");
    put(&b, "dspark_requests_sampled_total{verify=\"coupled\"} %llu\n", (unsigned long long)mt->sampled[DS_VERIFY_COUPLED]);
    put(&b, "dspark_requests_sampled_total{verify=\"residual\"} %llu\n", (unsigned long long)mt->sampled[DS_VERIFY_RESIDUAL]);
    counter(&b, "prefix_cache_queries_total", "Prompt tokens looked up in the prompt cache.", mt->cache_queries);
    counter(&b, "prefix_cache_hits_total", "Prompt tokens found in the prompt cache (not prefilled).", mt->cache_hits);
    gauge(&b, "prefix_cache_bytes", "Bytes the prompt cache holds.", (double)mt->cache_bytes);
    gauge(&b, "prefix_cache_capacity_bytes", "Bytes the prompt cache may hold (--cache-mb).", (double)mt->cache_cap);
    gauge(&b, "prefix_cache_entries", "Prompt prefixes the prompt cache holds.", mt->cache_entries);
    int last = 0; // positions ever verified
    for (int k = 0; k < DS_METRICS_POS; k++)
        if (mt->tried_by_pos[k]) last = k + 1;
    head(&b, "tried_by_position_total", "counter", "Rounds in which draft position k was verified with every earlier one accepted.");
    for (int k = 0; k < last; k++)
        put(&b, "dspark_tried_by_position_total{position=\"%d\"} %llu\n", k + 1, (unsigned long long)mt->tried_by_pos[k]);
    head(&b, "accepted_by_position_total", "counter", "... and position k was accepted.");
    for (int k = 0; k < last; k++)
        put(&b, "dspark_accepted_by_position_total{position=\"%d\"} %llu\n", k + 1, (unsigned long long)mt->accepted_by_pos[k]);
    head(&b, "spec_decode_num_accepted_tokens_per_pos_total", "counter", "Drafts accepted at position k (vLLM's name).");
    for (int k = 0; k < last; k++)
        put(&b, "dspark_spec_decode_num_accepted_tokens_per_pos_total{position=\"%d\"} %llu\n", k, (unsigned long long)mt->accepted_by_pos[k]);
    head(&b, "acceptance_by_position", "gauge", "accepted_by_position_total / tried_by_position_total.");
    for (int k = 0; k < last; k++)
        put(&b, "dspark_acceptance_by_position{position=\"%d\"} %.6f\n", k + 1,
            (double)mt->accepted_by_pos[k] / (double)mt->tried_by_pos[k]);
    head(&b, "verify_length_total", "counter", "Verification rounds by the number of drafts the scheduler chose to verify (ell).");
    for (int l = 0; l <= DS_METRICS_POS; l++)
        if (mt->ell_count[l] || l == 0)
            put(&b, "dspark_verify_length_total{ell=\"%d\"} %llu\n", l, (unsigned long long)mt->ell_count[l]);
    head(&b, "time_to_first_token_seconds", "summary", "From the request's arrival to its first generated token.");
    put(&b, "dspark_time_to_first_token_seconds_sum %.6f\ndspark_time_to_first_token_seconds_count %llu\n", mt->ttft_sum,
        (unsigned long long)mt->ttft_n);
    head(&b, "request_duration_seconds", "summary", "From the request's arrival to its last token.");
    put(&b, "dspark_request_duration_seconds_sum %.6f\ndspark_request_duration_seconds_count %llu\n", mt->latency_sum,
        (unsigned long long)mt->latency_n);
    if (b.oom) {
        free(b.s);
        return NULL;
    }
    return b.s;
}
