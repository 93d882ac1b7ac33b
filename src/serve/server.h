// dspark serve: an OpenAI-compatible HTTP server (libmicrohttpd) over the batched engine.
//
// Threads: libmicrohttpd runs one epoll thread for every connection (its handlers never block: a
// connection waiting for tokens is suspended); ONE engine thread owns the ds_engine (it is not
// thread-safe) and loops: admit queued requests (up to max_concurrency active), one ds_engine_step
// for all of them, hand newly committed tokens to each request (detokenized, stop strings applied),
// resume the connections that have something to send, finish or drop cancelled ones. Handlers and
// the engine thread meet in a bounded queue and per-request text buffers under one mutex; the
// engine thread sleeps on a condition variable when there is nothing to do.
#ifndef DS_SERVE_SERVER_H
#define DS_SERVE_SERVER_H

#include <stddef.h>
#include <stdint.h>

#include "dspark_jobs.h"

struct cJSON;

// ---------------------------------------------------------------------------------------------
// OpenAI requests (src/serve/request.c): parsing and validation, independent of HTTP.

#define DS_OA_MAX_STOPS 4
#define DS_OA_MAX_CHOICES 64 // prompts × n per request

typedef struct {
    int chat;                // /v1/chat/completions (messages) vs /v1/completions (prompt)
    int stream;              // server-sent events
    int include_usage;       // stream_options.include_usage: a last chunk with the usage counts
    int n_prompts;           // prompts in the request (a completions batch; chat: 1)
    int32_t **prompts;       // (n_prompts) token ids each, BOS first for text prompts
    int *n_prompt;           // (n_prompts) their lengths
    int prompt_tokens;       // the sum of n_prompt
    int n;                   // choices per prompt (choice i of prompt p has index p·n + i)
    int max_tokens;
    ds_sampler_params sp;
    uint64_t seed;
    int has_seed;
    int has_verify;          // "verify" was given ("coupled" / "residual"), else the server's default
    int logprobs;            // log-probabilities of the generated tokens (completions: logprobs >= 0; chat: true)
    int top_logprobs;        // ... with this many most likely alternatives (0..20)
    int echo;                // completions: the prompt's text before the completion
    char **prompt_text;      // (n_prompts) echo: each prompt's text
    ds_logit_bias *bias;     // (sp.n_logit_bias) logit_bias; sp.logit_bias points here
    char *stops[DS_OA_MAX_STOPS]; // non-empty UTF-8 strings
    int n_stops;
    int no_prompt_cache;     // "cache_prompt": false (llama-server's field): bypass the prompt cache
    char *grammar;           // GBNF the output must match (grammar, json_schema, response_format), or NULL;
                             // ds_gen_request.grammar (anything that constrains a request sets it here)
    // chat: tools offered to the model (tool_choice "auto"): its output is parsed for calls in
    // the template's syntax (DS_TOOLS_NONE: none offered, or a template without a known syntax)
    ds_tool_syntax tool_syntax;
    int parallel_tool_calls; // 0: at most one call is returned
} ds_oa_request;

// Parse and validate a JSON body. On a bad request returns DS_ERR_INVALID with a message meant for
// the client and the offending field name in *param (or NULL); unknown fields are ignored, fields we
// know but do not implement (tools, response_format json, suffix, ...) are a 400 naming them.
ds_status ds_oa_parse(const char *body, size_t n, int chat, const ds_model *m, ds_oa_request *out,
                      const char **param);
void ds_oa_request_free(ds_oa_request *r);

// llama-server's POST /apply-template body {messages, tools?, chat_template_kwargs?,
// add_generation_prompt? (true)} -> the rendered prompt (*text malloc'ed). Errors as ds_oa_parse.
ds_status ds_oa_parse_apply_template(const char *body, size_t n, const ds_model *m, char **text, const char **param);

// llama-server's POST /tokenize body {"content": string, "add_special": bool (false), "with_pieces":
// bool (false)} and POST /detokenize body {"tokens": [ids]} (ids checked against the vocabulary;
// *ids malloc'ed). Errors as ds_oa_parse.
ds_status ds_oa_parse_tokenize(const char *body, size_t n, char **content, int *add_special, int *with_pieces,
                               const char **param);
ds_status ds_oa_parse_detokenize(const char *body, size_t n, const ds_model *m, int32_t **ids, int *n_ids,
                                 const char **param);

// ---------------------------------------------------------------------------------------------
// Metrics (src/serve/metrics.c): Prometheus text format.

#define DS_METRICS_POS 64

typedef struct {
    uint64_t http_by_code[6];        // responses by class: 1xx .. 5xx (index 1..5)
    uint64_t requests_ok;            // completions answered (stream or not)
    uint64_t requests_rejected_full; // 503: queue full
    uint64_t requests_bad;           // 400/413
    uint64_t finished_stop, finished_length, finished_cancelled, finished_error;
    uint64_t prompt_tokens, completion_tokens;
    uint64_t rounds, drafted, accepted; // verification rounds over all requests, drafts verified, accepted
    uint64_t drafts;                    // rounds that verified at least one draft (vLLM's num_drafts)
    uint64_t constrained;               // admitted requests with a grammar (grammar, json_schema,
                                        // response_format, a forced tool call)
    uint64_t sampled[2];                // admitted sampled requests (temperature > 0) by verify rule
                                        // (ds_verify_rule: coupled, residual)
    uint64_t cache_queries, cache_hits; // prompt tokens looked up in the prompt cache, and found there
    size_t cache_bytes, cache_cap;      // the prompt cache now
    int cache_entries;
    uint64_t tried_by_pos[DS_METRICS_POS], accepted_by_pos[DS_METRICS_POS];
    uint64_t ell_count[DS_METRICS_POS + 1]; // rounds that verified ℓ = 0..64 drafts
    uint64_t steps;                   // engine steps
    double ttft_sum, latency_sum;     // seconds, over finished requests
    uint64_t ttft_n, latency_n;
    int queue_depth, active, max_concurrency, queue_max;
} ds_metrics;

// One verified round: ell drafts verified, `accepted` of them accepted.
void ds_metrics_round(ds_metrics *mt, int ell, int accepted);
// Render every metric (prefix dspark_) into a malloc'ed string.
char *ds_metrics_render(const ds_metrics *mt, const char *model_name);

// The server itself (ds_serve_params, ds_server_start / port / drain / free, src/serve/server.c) is
// public: include/dspark_jobs.h.

#endif
