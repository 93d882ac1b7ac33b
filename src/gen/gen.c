// One generation request over an engine (include/dspark.h ds_gen): the prompt tokenized once, in
// one place (ids as given, text with BOS, a conversation rendered with the assistant's turn
// opened), its text output set up with the request's stops and, for a chat request, the format's
// end of turn, then the tokens of every round moved from the engine into that output. And the
// runner, the one loop of rounds over an engine: n requests through it, up to R at a time, with
// per-request timings (or requests a front end began itself, ds_gen_run_begun).
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/status.h"
#include "dspark/gen.h"

#define TAKE_CHUNK 256

struct ds_gen {
    int32_t *prompt;     // (n_prompt)
    int n_prompt;
    int max_new;         // the request's budget
    ds_sampler_params sp;
    ds_logit_bias *bias; // (sp.n_logit_bias) a copy: sp.logit_bias points here
    uint64_t seed;
    int logprobs, top_logprobs;
    int no_prompt_cache, prompt_logprobs;
    ds_text_out *tx;
    ds_engine *e;
    int seq;             // in e, -1 when not in it
    int cut;             // ended early (a failed update, ds_gen_end): the output was finished there
    int engine_done;     // the engine finished the sequence
    ds_finish_reason engine_reason;
    ds_seq_stats stats;  // a copy, kept when it leaves the engine
    double t_begin, t_first, t_done;
    int n_new;           // tokens the last update took
    int32_t take[TAKE_CHUNK];
    char *grammar;       // a copy of the request's GBNF, or NULL
    int32_t ends[DS_SEQ_MAX_STOP_IDS]; // with a grammar: the ids that end the output (stop ids, end of turn),
    int n_ends;                        // which the grammar allows exactly when it is complete
};

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static ds_status tokenize(const ds_tokenizer *tok, const char *text, ds_gen *g) {
    const size_t len = strlen(text);
    int n = 0;
    ds_status st = ds_tokenize(tok, text, len, 1, NULL, 0, &n);
    if (st) return st;
    if (!(g->prompt = ds_malloc(sizeof(int32_t) * (size_t)(n > 0 ? n : 1)))) return DS_ERR_NOMEM;
    if ((st = ds_tokenize(tok, text, len, 1, g->prompt, n, &n))) return st;
    g->n_prompt = n;
    return DS_OK;
}

static ds_status gen_setup(const ds_tokenizer *tok, const ds_gen_request *r, ds_gen *g) {
    const int kinds = (r->ids != NULL) + (r->text != NULL) + (r->msgs != NULL);
    if (kinds != 1) return ds_fail(DS_ERR_INVALID, "generation request: give exactly one of ids, text and messages");
    if (!tok && (!r->ids || r->chat)) return ds_fail(DS_ERR_INVALID, "generation request: no tokenizer");
    ds_status st;
    if (r->ids) {
        if (!(g->prompt = ds_malloc(sizeof(int32_t) * (size_t)(r->n_ids > 0 ? r->n_ids : 1)))) return DS_ERR_NOMEM;
        if (r->n_ids > 0) memcpy(g->prompt, r->ids, sizeof(int32_t) * (size_t)r->n_ids);
        g->n_prompt = r->n_ids;
    } else if (r->text) {
        if ((st = tokenize(tok, r->text, g))) return st;
    } else {
        char *text = NULL;
        if ((st = ds_chat_render(tok, r->msgs, r->n_msgs, 1, &text))) return st;
        st = tokenize(tok, text, g);
        free(text);
        if (st) return st;
    }
    g->max_new = r->max_new;
    if ((st = ds_gen_set_sampling(g, &r->sp, r->seed))) return st;
    g->logprobs = r->logprobs;
    g->top_logprobs = r->top_logprobs;
    g->no_prompt_cache = r->no_prompt_cache;
    g->prompt_logprobs = r->prompt_logprobs;
    if ((st = ds_text_out_init(tok, &g->tx))) return st;
    for (int i = 0; i < r->n_stops; i++)
        if ((st = ds_text_out_add_stop(g->tx, r->stops[i]))) return st;
    for (int i = 0; i < r->n_stop_ids; i++)
        if ((st = ds_text_out_add_stop_id(g->tx, r->stop_ids[i]))) return st;
    if ((r->chat || r->msgs) && (st = ds_text_out_add_stop_id(g->tx, ds_chat_eot(tok)))) return st; // the end of the turn
    if (r->grammar) {
        if (!(g->grammar = ds_malloc(strlen(r->grammar) + 1))) return DS_ERR_NOMEM;
        strcpy(g->grammar, r->grammar);
        if ((r->chat || r->msgs) && ds_chat_eot(tok) >= 0) g->ends[g->n_ends++] = ds_chat_eot(tok);
        for (int i = 0; i < r->n_stop_ids && g->n_ends < DS_SEQ_MAX_STOP_IDS; i++) g->ends[g->n_ends++] = r->stop_ids[i];
    }
    return DS_OK;
}

ds_status ds_gen_set_sampling(ds_gen *g, const ds_sampler_params *sp, uint64_t seed) {
    if (g->seq >= 0) return ds_fail(DS_ERR_INVALID, "generation request: already running");
    const int n = sp->n_logit_bias > 0 ? sp->n_logit_bias : 0;
    if (n != (g->bias ? g->sp.n_logit_bias : 0)) { // (the same count again reuses the copy: cannot fail)
        free(g->bias);
        g->bias = NULL;
        if (n && !(g->bias = ds_malloc(sizeof *g->bias * (size_t)n))) return DS_ERR_NOMEM;
    }
    if (n) memcpy(g->bias, sp->logit_bias, sizeof *g->bias * (size_t)n); // the caller's array need not outlive it
    g->sp = *sp;
    g->sp.logit_bias = n ? g->bias : NULL;
    g->seed = seed;
    return DS_OK;
}

ds_status ds_gen_init(const ds_tokenizer *tok, const ds_gen_request *r, ds_gen **out) {
    *out = NULL;
    ds_gen *g = ds_calloc(1, sizeof *g);
    if (!g) return DS_ERR_NOMEM;
    g->seq = -1;
    g->t_first = g->t_done = -1;
    const ds_status st = gen_setup(tok, r, g);
    if (st) {
        ds_gen_free(g);
        return st;
    }
    *out = g;
    return DS_OK;
}

ds_status ds_gen_begin(ds_gen *g, ds_engine *e, int max_new) {
    if (g->seq >= 0) return ds_fail(DS_ERR_INVALID, "generation request: already running");
    const ds_seq_params sp = {.prompt = g->prompt, .n_prompt = g->n_prompt, .max_new = max_new, .sp = &g->sp, .seed = g->seed,
                              .batch_invariant = 1, .no_prompt_cache = g->no_prompt_cache, .grammar = g->grammar,
                              .stop_ids = g->ends, .n_stop_ids = g->n_ends};
    ds_status st = ds_engine_add(e, &sp, &g->seq);
    if (st) {
        g->seq = -1;
        return st;
    }
    g->e = e;
    if ((g->logprobs && (st = ds_engine_set_logprobs(e, g->seq, g->top_logprobs))) ||
        (g->prompt_logprobs && (st = ds_engine_set_prompt_logprobs(e, g->seq, g->top_logprobs)))) {
        ds_gen_leave(g);
        return st;
    }
    g->t_begin = now_s();
    return DS_OK;
}

ds_status ds_gen_start(ds_engine *e, const ds_tokenizer *tok, const ds_gen_request *r, ds_gen **out) {
    ds_status st = ds_gen_init(tok, r, out);
    if (!st && (st = ds_gen_begin(*out, e, r->max_new))) {
        ds_gen_free(*out);
        *out = NULL;
    }
    return st;
}

ds_status ds_gen_update(ds_gen *g, int *n_new) {
    g->n_new = 0;
    if (n_new) *n_new = 0;
    if (g->seq < 0 || ds_gen_done(g)) return DS_OK;
    const int fin = ds_engine_finished(g->e, g->seq);
    ds_status st = DS_OK;
    int n;
    while (!ds_text_out_end(g->tx) && (n = ds_engine_take(g->e, g->seq, g->take, TAKE_CHUNK)) > 0) {
        if (g->t_first < 0) g->t_first = now_s() - g->t_begin;
        g->n_new += n;
        if ((st = ds_text_out_push(g->tx, g->take, n, NULL))) {
            g->cut = 1;
            ds_text_out_finish(g->tx);
        }
    }
    g->stats = *ds_engine_stats(g->e, g->seq);
    if (fin) {
        g->engine_done = 1;
        g->engine_reason = ds_engine_finish_reason(g->e, g->seq, NULL);
        if (!ds_text_out_end(g->tx) && (st = ds_text_out_finish(g->tx))) g->cut = 1;
        if (g->engine_reason == DS_FINISH_ERROR) st = ds_fail(DS_ERR_INVALID, "%s", ds_engine_seq_error(g->e, g->seq));
    }
    if (ds_gen_done(g)) g->t_done = now_s() - g->t_begin;
    if (n_new) *n_new = g->n_new;
    return st;
}

int ds_gen_done(const ds_gen *g) { return ds_text_out_end(g->tx) != DS_TEXT_RUNNING; }

ds_finish_reason ds_gen_finish_reason(const ds_gen *g) {
    const ds_text_end end = ds_text_out_end(g->tx);
    if (end == DS_TEXT_RUNNING) return DS_FINISH_NONE;
    if (end != DS_TEXT_ENDED) return DS_FINISH_STOP;
    if (g->engine_done && g->engine_reason == DS_FINISH_ERROR) return DS_FINISH_ERROR;
    return !g->cut && g->engine_done && g->engine_reason == DS_FINISH_STOP ? DS_FINISH_STOP : DS_FINISH_LENGTH;
}

ds_status ds_gen_end(ds_gen *g) {
    if (ds_gen_done(g)) return DS_OK;
    if (g->t_done < 0 && g->seq >= 0) g->t_done = now_s() - g->t_begin;
    g->cut = 1; // (the reason: the budget's)
    return ds_text_out_finish(g->tx);
}

void ds_gen_leave(ds_gen *g) {
    if (g->seq < 0) return;
    ds_engine_remove(g->e, g->seq);
    g->seq = -1;
}

void ds_gen_free(ds_gen *g) {
    if (!g) return;
    ds_gen_leave(g);
    ds_text_out_free(g->tx);
    free(g->prompt);
    free(g->bias);
    free(g->grammar);
    free(g);
}

const int32_t *ds_gen_prompt(const ds_gen *g, int *n) {
    *n = g->n_prompt;
    return g->prompt;
}
const ds_text_out *ds_gen_text(const ds_gen *g) { return g->tx; }
int ds_gen_seq(const ds_gen *g) { return g->seq; }
const ds_seq_stats *ds_gen_stats(const ds_gen *g) { return &g->stats; }
int ds_gen_new_tokens(const ds_gen *g) { return g->n_new; }
double ds_gen_first_token_s(const ds_gen *g) { return g->t_first; }
double ds_gen_seconds(const ds_gen *g) { return g->t_done; }

// ---------------------------------------------------------------------------------------------
// The runner

// The runner's state.
typedef struct {
    ds_engine *e;               // every request runs in it
    const ds_gen_run_params *p; // the callbacks
    double *step_s;             // adds up the wall time of every ds_engine_step (NULL: not kept)
    ds_gen **slot;              // (R) the requests in the engine (NULL: a free slot)
    long *which;                // (R) slot k holds request which[k]
    int R;                      // slots
    int active;                 // slots in use
    long next;                  // the next request to join
    int owned;                  // the runner set the requests up and frees each once done (ds_gen_run)
} gen_runner;

// Request i into free slot k (ds_gen_run).
static ds_status run_join(gen_runner *r, const ds_tokenizer *tok, const ds_gen_request *reqs, long i, int k) {
    ds_gen_request q = {0};
    if (!reqs) r->p->request(r->p->ctx, i, &q);
    const ds_status st = ds_gen_start(r->e, tok, reqs ? &reqs[i] : &q, &r->slot[k]);
    if (st) return st;
    r->which[k] = i;
    r->active++;
    return DS_OK;
}

// One round: the engine steps once, then every request in it takes its tokens and the callbacks see
// it; one that is done leaves its slot (freed when the runner owns it).
static ds_status run_round(gen_runner *r) {
    const ds_gen_run_params *p = r->p;
    const double t0 = now_s();
    ds_status st = ds_engine_step(r->e);
    if (st) return st;
    if (r->step_s) *r->step_s += now_s() - t0;
    for (int k = 0; k < r->R; k++) {
        ds_gen *g = r->slot[k];
        if (!g) continue;
        if ((st = ds_gen_update(g, NULL))) return st;
        if (p->on_update) p->on_update(p->ctx, r->which[k], g);
        if (!ds_gen_done(g)) continue;
        st = p->on_done ? p->on_done(p->ctx, r->which[k], g) : DS_OK;
        if (r->owned) ds_gen_free(g);
        r->slot[k] = NULL;
        r->active--;
        if (st) return st;
    }
    if (p->on_round) p->on_round(p->ctx);
    return DS_OK;
}

// Rounds until requests 0..n-1 are done, each joining a free slot in order from reqs (or
// p->request) unless it is in already (r->next).
static ds_status run_rounds(gen_runner *r, const ds_tokenizer *tok, const ds_gen_request *reqs, long n) {
    const ds_gen_run_params *p = r->p;
    ds_status st = DS_OK;
    while (!st) {
        const int stop = p->interrupted && p->interrupted(p->ctx);
        for (int k = 0; k < r->R && r->next < n && !stop && !st; k++)
            if (!r->slot[k]) st = run_join(r, tok, reqs, r->next++, k);
        if (st || (!r->active && r->next == n)) break;
        st = stop ? DS_ERR_INTERRUPTED : run_round(r); // (interrupted: no message, the caller stops and reports)
    }
    return st;
}

ds_status ds_gen_run(ds_engine *e, const ds_tokenizer *tok, const ds_gen_request *reqs, long n,
                     const ds_gen_run_params *p, double *step_s) {
    const ds_gen_run_params none = {0};
    if (!p) p = &none;
    if (!reqs && !p->request && n > 0) return ds_fail(DS_ERR_INVALID, "generation runner: no requests");
    gen_runner r = {.e = e, .p = p, .step_s = step_s, .R = p->max_active > 0 ? p->max_active : 1, .owned = 1};
    r.slot = ds_calloc((size_t)r.R, sizeof *r.slot);
    r.which = ds_calloc((size_t)r.R, sizeof *r.which);
    const ds_status st = r.slot && r.which ? run_rounds(&r, tok, reqs, n) : DS_ERR_NOMEM;
    for (int k = 0; r.slot && k < r.R; k++) ds_gen_free(r.slot[k]);
    free(r.slot);
    free(r.which);
    return st;
}

ds_status ds_gen_run_begun(ds_engine *e, ds_gen *const *gens, int n, const ds_gen_run_params *p, double *step_s) {
    const ds_gen_run_params none = {0};
    if (!p) p = &none;
    gen_runner r = {.e = e, .p = p, .step_s = step_s, .R = n > 0 ? n : 1, .next = n};
    r.slot = ds_calloc((size_t)r.R, sizeof *r.slot);
    r.which = ds_calloc((size_t)r.R, sizeof *r.which);
    ds_status st = r.slot && r.which ? DS_OK : DS_ERR_NOMEM;
    for (int k = 0; !st && k < n; k++) {
        if (ds_gen_done(gens[k])) continue;
        if (gens[k]->seq < 0 || gens[k]->e != e) {
            st = ds_fail(DS_ERR_INVALID, "generation request: not begun in this engine");
            break;
        }
        r.slot[k] = gens[k];
        r.which[k] = k;
        r.active++;
    }
    if (!st) st = run_rounds(&r, NULL, NULL, n);
    free(r.slot);
    free(r.which);
    return st;
}
