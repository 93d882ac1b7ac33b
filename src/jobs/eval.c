// The eval job (include/dspark_jobs.h): the prompt set through the runner twice, with the
// requested drafting and with plain decoding, at the same concurrency and seeds; the totals of both
// and the losslessness check.
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "dspark_jobs.h"
#include "gen/prompts.h"

ds_eval_params ds_eval_default(void) {
    return (ds_eval_params){.max_tokens = 128, .concurrency = 1, .sp = ds_sampler_default()};
}

int ds_eval_compare(const ds_eval_tokens *a, const ds_eval_tokens *b, int *n_diff, int *first, int *at) {
    int n_done = 0;
    *n_diff = 0;
    *first = *at = -1;
    for (int i = 0; i < a->n && i < b->n; i++) {
        if (!a->done[i] || !b->done[i]) continue;
        n_done++;
        const int na = a->n_tokens[i], nb = b->n_tokens[i];
        const int32_t *ta = a->tokens + (size_t)i * a->max_tokens, *tb = b->tokens + (size_t)i * b->max_tokens;
        int k = 0;
        while (k < na && k < nb && ta[k] == tb[k]) k++;
        if (k == na && k == nb) continue;
        if (!(*n_diff)++) {
            *first = i;
            *at = k;
        }
    }
    return n_done;
}

// One run's outputs: (n, L) tokens, counts, completion flags; totals when counted.
typedef struct {
    int L;
    int32_t *out;
    int *n_out, *done;
    ds_eval_totals *t;
    volatile int *interrupted;
} ev_run;

static void add_stats(ds_eval_totals *t, const ds_seq_stats *s, int n, double seconds) {
    t->rounds += s->rounds;
    t->generated += n;
    t->drafted += s->drafted;
    t->accepted += s->accepted;
    t->tree_rounds += s->tree_rounds;
    t->branch_accepted += s->branch_accepted;
    for (int k = 0; k < 64; k++) {
        t->tried_by_pos[k] += s->tried_by_pos[k];
        t->accepted_by_pos[k] += s->accepted_by_pos[k];
    }
    t->draft_s += s->draft_s;
    t->requests++;
    t->request_rate += seconds > 0 ? n / seconds : 0;
}

static ds_status on_done(void *ctx, long i, const ds_gen *g) {
    ev_run *r = ctx;
    const ds_text_out *tx = ds_gen_text(g);
    const int n = ds_text_out_tokens(tx);
    for (int k = 0; k < n; k++) r->out[(size_t)i * r->L + k] = ds_text_out_token_id(tx, k);
    r->n_out[i] = n;
    r->done[i] = 1;
    if (r->t) add_stats(r->t, ds_gen_stats(g), n, ds_gen_seconds(g));
    return DS_OK;
}

static int stop_asked(const volatile int *flag) { return flag && *flag; }
static int interrupted(void *ctx) { return stop_asked(((ev_run *)ctx)->interrupted); }

// Prompts 0..n-1 through e, up to R at a time (ds_gen_run: a prompt joins as soon as a running one
// finishes). Prompt i uses seed seed0 + i; its tokens go to r->out + i·L. DS_ERR_INTERRUPTED when
// stopped.
static ds_status run_set(ds_engine *e, const ds_tokenizer *tok, const ds_gen_prompts *pt, int n, int R,
                         const ds_sampler_params *sp, uint64_t seed0, ev_run *r) {
    ds_gen_request *req = ds_calloc((size_t)n, sizeof *req);
    if (!req) return DS_ERR_NOMEM;
    for (int i = 0; i < n; i++) {
        req[i] = (ds_gen_request){.ids = pt->ids[i], .n_ids = pt->len[i], .max_new = r->L, .sp = *sp,
                                  .seed = seed0 + (uint64_t)i};
        r->n_out[i] = r->done[i] = 0;
    }
    const ds_gen_run_params p = {.max_active = R, .on_done = on_done, .interrupted = interrupted, .ctx = r};
    const ds_status st = ds_gen_run(e, tok, req, n, &p, r->t ? &r->t->step_s : NULL);
    free(req);
    return st;
}

// Everything the job holds.
typedef struct {
    ds_engine *spec, *base;
    ds_prompt_set *prompts;
    ds_gen_prompts pt;            // the prompts tokenized
    int32_t *out_spec, *out_base; // (prompts->n, max_tokens) generated tokens
    int *n_spec, *n_base;         // (prompts->n) how many
    int *done_spec, *done_base;   // (prompts->n) completed
} ev_state;

static void ev_free(ev_state *g) {
    ds_engine_free(g->spec);
    ds_engine_free(g->base);
    ds_gen_prompts_free(&g->pt);
    ds_prompts_free(g->prompts);
    free(g->out_spec);
    free(g->out_base);
    free(g->n_spec);
    free(g->n_base);
    free(g->done_spec);
    free(g->done_base);
}

static ds_status check_lossless(const ev_state *g, const ds_eval_params *o, ds_spec_kind kind, int greedy,
                                ds_eval_result *r) {
    const int P = g->prompts->n, L = o->max_tokens;
    const ds_eval_tokens s = {P, L, g->out_spec, g->n_spec, g->done_spec}, b = {P, L, g->out_base, g->n_base, g->done_base};
    int n_diff, first, at;
    r->n_done = ds_eval_compare(&s, &b, &n_diff, &first, &at);
    r->checked = greedy && r->n_done > 0;
    if (!greedy || !n_diff) return DS_OK;
    r->checked = 0;
    const int ns = g->n_spec[first], nb = g->n_base[first];
    const int32_t *ts = g->out_spec + (size_t)first * L, *tb = g->out_base + (size_t)first * L;
    const char *name = ds_spec_kind_name(kind);
    return ds_fail(DS_ERR_MISMATCH,
                   "eval: NOT LOSSLESS: %d of %d prompts decoded with --spec %s differ from plain decoding; first: "
                   "%s:%d differs at generated token %d (%s: %d, plain: %d; %d vs %d tokens)",
                   n_diff, r->n_done, name, o->prompts, g->prompts->line[first], at, name, at < ns ? ts[at] : -1,
                   at < nb ? tb[at] : -1, ns, nb);
}

ds_status ds_eval_run(const ds_model *m, const ds_drafter *drafter, const ds_spec_params *spec,
                      const ds_eval_params *o, ds_eval_result *r) {
    memset(r, 0, sizeof *r);
    if (!o->prompts || o->max_tokens < 1 || o->concurrency < 1)
        return ds_fail(DS_ERR_INVALID, "eval needs a prompt file, max_tokens >= 1 and concurrency >= 1");
    const ds_tokenizer *tok = ds_model_tokenizer(m); // (none: ds_gen_prompts_tokenize says so)
    ev_state g = {0};
    ds_status st;
    if ((st = ds_prompts_load(o->prompts, &g.prompts))) return st;
    const ds_spec_params none = {.kind = DS_SPEC_NONE};
    if ((st = ds_engine_init(m, drafter, spec, &g.spec)) || (st = ds_engine_init(m, NULL, &none, &g.base))) goto done;
    const int L = o->max_tokens, P = g.prompts->n, R = o->concurrency;
    r->n_prompts = P;
    g.out_spec = ds_malloc(sizeof(int32_t) * (size_t)L * P);
    g.out_base = ds_malloc(sizeof(int32_t) * (size_t)L * P);
    g.n_spec = ds_calloc((size_t)P, sizeof(int));
    g.n_base = ds_calloc((size_t)P, sizeof(int));
    g.done_spec = ds_calloc((size_t)P, sizeof(int));
    g.done_base = ds_calloc((size_t)P, sizeof(int));
    if (!g.out_spec || !g.out_base || !g.n_spec || !g.n_base || !g.done_spec || !g.done_base) {
        st = ds_fail(DS_ERR_NOMEM, "out of memory");
        goto done;
    }
    if ((st = ds_gen_prompts_tokenize(m, g.prompts, L, &g.pt))) goto done; // (naming the file and line)

    // Greedy, and coupled sampling (the target's own draws at every position), decode exactly the
    // baseline's tokens with any drafter; the residual rule only matches it in distribution.
    const int greedy = o->sp.temperature == 0 || o->sp.verify == DS_VERIFY_COUPLED;
    ev_run warm = {L < 8 ? L : 8, g.out_base, g.n_base, g.done_base, NULL, o->interrupted};
    ev_run rs = {L, g.out_spec, g.n_spec, g.done_spec, &r->spec, o->interrupted};
    ev_run rb = {L, g.out_base, g.n_base, g.done_base, &r->base, o->interrupted};
    // Warm-up (page faults, caches), not counted: the first prompt, 8 tokens, plain decoding.
    if ((st = run_set(g.base, tok, &g.pt, 1, 1, &o->sp, o->seed, &warm)) && st != DS_ERR_INTERRUPTED) goto done;
    // The whole set with the requested drafting, then the baseline at the same concurrency.
    if (!stop_asked(o->interrupted) && (st = run_set(g.spec, tok, &g.pt, P, R, &o->sp, o->seed, &rs)) &&
        st != DS_ERR_INTERRUPTED)
        goto done;
    memset(g.done_base, 0, sizeof(int) * (size_t)P);
    if (!stop_asked(o->interrupted) && (st = run_set(g.base, tok, &g.pt, P, R, &o->sp, o->seed, &rb)) &&
        st != DS_ERR_INTERRUPTED)
        goto done;
    r->interrupted = stop_asked(o->interrupted);
    st = check_lossless(&g, o, spec->kind, greedy, r);
done:
    ev_free(&g);
    return st;
}
