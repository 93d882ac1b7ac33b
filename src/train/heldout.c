// Held-out evaluation (heldout.h): the engine with the drafter at full blocks, one prompt at a time.
#include "train/heldout.h"

#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "train/data.h"

struct ds_heldout {
    int n;
    int32_t **toks; // (n) tokenized prompts
    int *len;       // (n)
};

void ds_heldout_free(ds_heldout *h) {
    if (!h) return;
    for (int i = 0; h->toks && i < h->n; i++) free(h->toks[i]);
    free(h->toks);
    free(h->len);
    free(h);
}

int ds_heldout_count(const ds_heldout *h) { return h->n; }

ds_status ds_heldout_load(const char *path, const ds_model *target, int max_tokens, ds_heldout **out) {
    *out = NULL;
    const ds_tokenizer *tok = ds_model_tokenizer(target);
    if (!tok) return ds_fail(DS_ERR_INVALID, "%s: the target has no tokenizer dspark supports, so it cannot take text prompts", path);
    ds_prompt_set *ps;
    ds_status st = ds_prompts_load_chat(path, &ps);
    if (st) return st;
    ds_heldout *h = calloc(1, sizeof *h);
    if (h) {
        h->toks = calloc((size_t)ps->n, sizeof *h->toks);
        h->len = calloc((size_t)ps->n, sizeof *h->len);
    }
    if (!h || !h->toks || !h->len) st = ds_fail(DS_ERR_NOMEM, "out of memory");
    const int max_ctx = ds_model_get_info(target)->max_ctx;
    for (int i = 0; !st && i < ps->n; i++, h->n++) {
        char *text = NULL;
        int n = 0;
        if ((st = ds_prompt_text(ps, i, tok, &text))) break;
        if (!(st = ds_tokenize(tok, text, strlen(text), 1, NULL, 0, &n))) {
            if (!(h->toks[i] = malloc(sizeof(int32_t) * (size_t)(n > 0 ? n : 1)))) st = ds_fail(DS_ERR_NOMEM, "out of memory");
            else st = ds_tokenize(tok, text, strlen(text), 1, h->toks[i], n, &n);
        }
        free(text);
        if (st) st = ds_fail_prefix(st, "%s:%d", path, ps->line[i]);
        else if (n < 1 || (long)n + max_tokens > max_ctx)
            st = ds_fail(DS_ERR_INVALID, "%s:%d: prompt (%d tokens) + %d new tokens %s the model's context of %d", path,
                         ps->line[i], n, max_tokens, n < 1 ? "(no BOS?) do not fit" : "exceed", max_ctx);
        if (h) h->len[i] = n;
    }
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
    for (int i = 0; !st && i < h->n; i++) {
        int id;
        const ds_seq_params q = {.prompt = h->toks[i], .n_prompt = h->len[i], .max_new = max_tokens, .sp = &smp,
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
