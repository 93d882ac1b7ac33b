// Held-out evaluation (heldout.h): the engine with the drafter at full blocks, one prompt at a time
// through the runner (ds_gen_run), the totals of their statistics.
#include "jobs/heldout.h"

#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "gen/prompts.h"

struct ds_heldout {
    ds_gen_prompts p; // the prompts tokenized
};

void ds_heldout_free(ds_heldout *h) {
    if (!h) return;
    ds_gen_prompts_free(&h->p);
    free(h);
}

int ds_heldout_count(const ds_heldout *h) { return h->p.n; }

ds_status ds_heldout_load(const char *path, const ds_model *target, int max_tokens, ds_heldout **out) {
    *out = NULL;
    ds_prompt_set *ps;
    ds_status st = ds_prompts_load_chat(path, &ps);
    if (st) return st;
    ds_heldout *h = calloc(1, sizeof *h);
    st = h ? ds_gen_prompts_tokenize(target, ps, max_tokens, &h->p) : ds_fail(DS_ERR_NOMEM, "out of memory");
    ds_prompts_free(ps);
    if (st) {
        ds_heldout_free(h);
        return st;
    }
    *out = h;
    return DS_OK;
}

// The totals over the decoded prompts (ds_gen_run_params.on_done).
typedef struct {
    ds_heldout_result *r;                                    // rounds, accepted, generated
    long tried[DS_HELDOUT_MAX_POS], acc[DS_HELDOUT_MAX_POS]; // by draft position
} ho_totals;

static ds_status add_prompt(void *ctx, long i, const ds_gen *g) {
    ho_totals *t = ctx;
    const ds_seq_stats *s = ds_gen_stats(g);
    t->r->rounds += s->rounds;
    t->r->accepted += s->accepted;
    t->r->generated += s->generated;
    for (int k = 0; k < DS_HELDOUT_MAX_POS; k++) {
        t->tried[k] += s->tried_by_pos[k];
        t->acc[k] += s->accepted_by_pos[k];
    }
    return DS_OK;
}

ds_status ds_heldout_eval(const ds_heldout *h, const ds_model *target, const ds_drafter *drafter, float temp,
                          uint64_t seed, int max_tokens, ds_heldout_result *r) {
    memset(r, 0, sizeof *r);
    const ds_spec_params sp = {.kind = DS_SPEC_DSPARK}; // fixed schedule, draft_max = the block size
    ds_sampler_params smp = ds_sampler_default();
    smp.temperature = temp;
    ds_gen_request *req = ds_calloc((size_t)(h->p.n > 0 ? h->p.n : 1), sizeof *req);
    if (!req) return DS_ERR_NOMEM;
    for (int i = 0; i < h->p.n; i++)
        req[i] = (ds_gen_request){.ids = h->p.ids[i], .n_ids = h->p.len[i], .max_new = max_tokens, .sp = smp,
                                  .seed = seed + (uint64_t)i};
    ds_engine *e;
    ds_status st = ds_engine_init(target, drafter, &sp, &e); // (NULL when it fails)
    ho_totals t = {.r = r};
    const ds_gen_run_params run = {.max_active = 1, .on_done = add_prompt, .ctx = &t};
    if (!st) st = ds_gen_run(e, NULL, req, h->p.n, &run, NULL); // (no tokenizer: the statistics need no text)
    ds_engine_free(e);
    free(req);
    if (st) return st;
    r->tau = r->rounds ? (double)(r->accepted + r->rounds) / (double)r->rounds : 0;
    while (r->n_pos < DS_HELDOUT_MAX_POS && t.tried[r->n_pos]) {
        r->accept[r->n_pos] = (double)t.acc[r->n_pos] / (double)t.tried[r->n_pos];
        r->n_pos++;
    }
    return DS_OK;
}
