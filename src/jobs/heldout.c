// Held-out evaluation (heldout.h): the engine with the drafter at full blocks, one prompt at a time.
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

ds_status ds_heldout_eval(const ds_heldout *h, const ds_model *target, const ds_drafter *drafter, float temp,
                          uint64_t seed, int max_tokens, ds_heldout_result *r) {
    memset(r, 0, sizeof *r);
    const ds_spec_params sp = {.kind = DS_SPEC_DSPARK}; // fixed schedule, draft_max = the block size
    ds_sampler_params smp = ds_sampler_default();
    smp.temperature = temp;
    ds_engine *e;
    ds_status st = ds_engine_init(target, drafter, &sp, &e);
    if (st) return st;
    long tried[DS_HELDOUT_MAX_POS] = {0}, acc[DS_HELDOUT_MAX_POS] = {0};
    int32_t *sink = malloc(sizeof(int32_t) * (size_t)(max_tokens > 0 ? max_tokens : 1));
    if (!sink) st = ds_fail(DS_ERR_NOMEM, "out of memory");
    for (int i = 0; !st && i < h->p.n; i++) {
        int id;
        const ds_seq_params q = {.prompt = h->p.ids[i], .n_prompt = h->p.len[i], .max_new = max_tokens, .sp = &smp,
                                 .seed = seed + (uint64_t)i, .batch_invariant = 1};
        if ((st = ds_engine_add(e, &q, &id))) break;
        while (!st && !ds_engine_finished(e, id)) {
            st = ds_engine_step(e);
            ds_engine_take(e, id, sink, max_tokens);
        }
        if (!st) {
            const ds_seq_stats *s = ds_engine_stats(e, id);
            r->rounds += s->rounds;
            r->accepted += s->accepted;
            r->generated += s->generated;
            for (int k = 0; k < DS_HELDOUT_MAX_POS; k++) {
                tried[k] += s->tried_by_pos[k];
                acc[k] += s->accepted_by_pos[k];
            }
        }
        ds_engine_remove(e, id);
    }
    free(sink);
    ds_engine_free(e);
    if (st) return st;
    r->tau = r->rounds ? (double)(r->accepted + r->rounds) / (double)r->rounds : 0;
    while (r->n_pos < DS_HELDOUT_MAX_POS && tried[r->n_pos]) {
        r->accept[r->n_pos] = (double)acc[r->n_pos] / (double)tried[r->n_pos];
        r->n_pos++;
    }
    return DS_OK;
}
