// dspark/gen.h: generation: text output, requests, the runner (src/gen).
// Part of the public API (include/dspark.h composes these headers); it includes only the
// headers of the layers below its own (docs/architecture.md), so a layer that includes it
// cannot name a function of a layer above it.
#ifndef DSPARK_GEN_H
#define DSPARK_GEN_H

#include <stddef.h>
#include <stdint.h>

#include "dspark/speculate.h"

#ifdef __cplusplus
extern "C" {
#endif

// ---------------------------------------------------------------------------------------------
// Text output of one request: committed tokens -> the text a front end shows (generate, chat and
// the server all use it). Streaming detokenization, stop ids (a chat format's end-of-turn token:
// it ends the output and is not part of it), stop strings (the text is cut before the earliest
// match, which may span tokens) and the streaming hold-back (a tail that could begin a stop string
// is not safe to show until later tokens decide).

typedef struct ds_text_out ds_text_out;
typedef enum {
    DS_TEXT_RUNNING = 0,
    DS_TEXT_STOP_ID,     // a stop id was pushed
    DS_TEXT_STOP_STRING, // the text reached a stop string
    DS_TEXT_ENDED,       // ds_text_out_finish: generation ended for another reason (EOS, budget)
} ds_text_end;

// t NULL: the token ids alone (stop ids end it; the text stays empty, so no stop string matches).
ds_status ds_text_out_init(const ds_tokenizer *t, ds_text_out **out);
void ds_text_out_free(ds_text_out *o);
ds_status ds_text_out_add_stop_id(ds_text_out *o, int32_t id); // id < 0 is ignored (no end-of-turn token)
ds_status ds_text_out_add_stop(ds_text_out *o, const char *s); // a non-empty UTF-8 string
// Push committed tokens; stops consuming at the end (*used, optional: how many were taken,
// the stop id included).
ds_status ds_text_out_push(ds_text_out *o, const int32_t *ids, int n, int *used);
// Generation ended: flush an incomplete character (as U+FFFD); everything becomes safe.
ds_status ds_text_out_finish(ds_text_out *o);
const char *ds_text_out_text(const ds_text_out *o, size_t *len); // NUL-terminated
size_t ds_text_out_safe(const ds_text_out *o); // text[0..safe) may be shown now
int ds_text_out_tokens(const ds_text_out *o);  // tokens in the output (a stop id is not counted)
ds_text_end ds_text_out_end(const ds_text_out *o);
// The text length once token i (0-based) was pushed (capped at the cut of a stop string).
size_t ds_text_out_token_end(const ds_text_out *o, int i);
int32_t ds_text_out_token_id(const ds_text_out *o, int i); // token i of the output, or -1

// ---------------------------------------------------------------------------------------------
// Generation (src/gen/): one request from prompt to text over an engine, the layer every front end
// (generate, chat, eval, the server) goes through. A request's prompt is token ids, text (encoded
// with BOS) or a chat conversation (rendered with the assistant's turn opened); a chat request ends
// at the chat format's end-of-turn token (not part of the output), whoever runs it.

typedef struct {
    const int32_t *ids;           // (n_ids) the prompt as token ids, used as they are, or
    int n_ids;
    const char *text;             // the prompt as UTF-8 text (encoded with BOS), or
    const ds_chat_message *msgs;  // (n_msgs) a conversation (ds_chat_render, generation prompt on)
    int n_msgs;
    int chat;                     // the prompt is a chat conversation (implied by msgs; set it for ids
                                  // or text the caller rendered): the reply ends at ds_chat_eot
    int max_new;                  // token budget
    ds_sampler_params sp;
    uint64_t seed;
    const int32_t *stop_ids;      // (n_stop_ids) further ids that end the output (not part of it)
    int n_stop_ids;
    const char *const *stops;     // (n_stops) stop strings: the text is cut before the earliest match
    int n_stops;
    int logprobs, top_logprobs;   // record log-probabilities (ds_engine_set_logprobs) with top_logprobs
                                  // (0..20) alternatives each
    int no_prompt_cache;          // do not use the engine's prompt cache (ds_seq_params)
    int prompt_logprobs;          // also record the prompt tokens' (ds_engine_set_prompt_logprobs, with
                                  // top_logprobs alternatives)
    const char *grammar;          // GBNF text the output must match (ds_seq_params.grammar, copied;
                                  // the end of turn and stop_ids are its end tokens); NULL = unconstrained
} ds_gen_request;

typedef struct ds_gen ds_gen;

// The request's prompt tokenized and its text output set up (stop ids, stop strings, the end of
// turn); nothing runs yet. `tok` is the target's tokenizer; a request of ids (not chat) may go
// without one (NULL): its output is then the ids alone (ds_text_out_init).
ds_status ds_gen_init(const ds_tokenizer *tok, const ds_gen_request *r, ds_gen **out);
// Join `e` with up to max_new new tokens (the request's budget, or less: a caller that fits the
// context). The engine must outlive the request's time in it.
ds_status ds_gen_begin(ds_gen *g, ds_engine *e, int max_new);
// Before ds_gen_begin: replace the request's sampling parameters and seed (a server settles them
// when it queues the request, after setting it up). sp->logit_bias is copied.
ds_status ds_gen_set_sampling(ds_gen *g, const ds_sampler_params *sp, uint64_t seed);
// ds_gen_init, then ds_gen_begin with the request's budget.
ds_status ds_gen_start(ds_engine *e, const ds_tokenizer *tok, const ds_gen_request *r, ds_gen **out);
// After a round (ds_engine_step): move the tokens the engine committed into the text output.
// *n_new (optional) gets how many were taken (ds_gen_new_tokens keeps it). On failure (out of
// memory) the output is finished; when the engine failed the sequence on its own (DS_FINISH_ERROR)
// this returns its error once.
// Once the request is done it stays in the engine until ds_gen_leave / ds_gen_free.
ds_status ds_gen_update(ds_gen *g, int *n_new);
// The request is done: its text output ended (stop id, stop string, end of turn) or the engine
// finished it (EOS, budget).
int ds_gen_done(const ds_gen *g);
// Why it ended: DS_FINISH_STOP (a stop id or string, the end of turn, EOS), DS_FINISH_LENGTH (the
// budget, or a failed update), DS_FINISH_ERROR (the engine failed it: ds_gen_update's error),
// DS_FINISH_NONE while it runs.
ds_finish_reason ds_gen_finish_reason(const ds_gen *g);
// End the request here unless it is done (interrupted, or a front end's own limit): its text output
// is finished (an incomplete character flushed) and its reason is DS_FINISH_LENGTH.
ds_status ds_gen_end(ds_gen *g);
// Leave the engine (idempotent; ds_gen_free does it). Statistics and timings stay readable.
void ds_gen_leave(ds_gen *g);
void ds_gen_free(ds_gen *g);
const int32_t *ds_gen_prompt(const ds_gen *g, int *n);
const ds_text_out *ds_gen_text(const ds_gen *g);
// The request's sequence in its engine (-1 before ds_gen_begin and after ds_gen_leave).
int ds_gen_seq(const ds_gen *g);
// Its engine statistics (as ds_engine_stats; kept when it leaves).
const ds_seq_stats *ds_gen_stats(const ds_gen *g);
// How many tokens the last ds_gen_update took from the engine (the round's new tokens).
int ds_gen_new_tokens(const ds_gen *g);
// Seconds from ds_gen_begin to the first token taken (-1 before) and to the update that found it
// done (-1 before).
double ds_gen_first_token_s(const ds_gen *g);
double ds_gen_seconds(const ds_gen *g);

// Run n requests through one engine, up to max_active at a time (a request joins as soon as a
// running one finishes, in order): reqs[0..n), or, with reqs NULL, what `request` fills in for each
// as it joins (a long run need not hold them all at once). Callbacks (each optional but `request`)
// see a request after every round it took part in (on_update: streaming) and once it is done,
// before it leaves the engine (on_done: logprobs are still readable; an error it returns stops the
// run and is returned), and the run after every round (on_round: progress). `interrupted` is polled
// before every round: non-zero stops the run (no request joins any more) with DS_ERR_INTERRUPTED,
// without a message, unless every request was done. *step_s (optional) adds up the wall time of
// every ds_engine_step.
typedef struct {
    int max_active;                                           // 0 = 1
    void (*request)(void *ctx, long i, ds_gen_request *r);    // with reqs NULL: request i, read as it
                                                              // joins (ds_gen_init copies what it keeps)
    void (*on_update)(void *ctx, long i, const ds_gen *g);    // request i after a round
    ds_status (*on_done)(void *ctx, long i, const ds_gen *g); // request i is done: DS_OK, or an error
                                                              // that stops the run
    void (*on_round)(void *ctx);                              // after every round (and its callbacks)
    int (*interrupted)(void *ctx);                            // non-zero: stop
    void *ctx;                                                // passed to each callback
} ds_gen_run_params;
ds_status ds_gen_run(ds_engine *e, const ds_tokenizer *tok, const ds_gen_request *reqs, long n,
                     const ds_gen_run_params *p, double *step_s);
// The same rounds for n requests the caller set up and began in e (ds_gen_begin: a budget of its
// own), until each is done, with ds_gen_run's callbacks (i: the index in gens; max_active and
// request unused). The requests stay the caller's and in the engine (their logprobs readable):
// after an interruption each is as the last round left it (ds_gen_end ends it there).
ds_status ds_gen_run_begun(ds_engine *e, ds_gen *const *gens, int n, const ds_gen_run_params *p, double *step_s);

#ifdef __cplusplus
}
#endif

#endif
