// A prompt file tokenized for generation (see prompts.h).
#include "gen/prompts.h"

#include <stdlib.h>
#include <string.h>

#include "base/status.h"

void ds_gen_prompts_free(ds_gen_prompts *p) {
    for (int i = 0; p->ids && i < p->n; i++) free(p->ids[i]);
    free(p->ids);
    free(p->len);
    memset(p, 0, sizeof *p);
}

ds_status ds_gen_prompts_tokenize(const ds_model *m, const ds_prompt_set *ps, int max_new, ds_gen_prompts *out) {
    memset(out, 0, sizeof *out);
    const ds_tokenizer *tok = ds_model_tokenizer(m);
    const int max_ctx = ds_model_get_info(m)->max_ctx;
    if (!(out->ids = ds_calloc((size_t)ps->n, sizeof *out->ids)) || !(out->len = ds_calloc((size_t)ps->n, sizeof *out->len))) {
        ds_gen_prompts_free(out);
        return DS_ERR_NOMEM;
    }
    out->n = ps->n;
    for (int i = 0; i < ps->n; i++) {
        ds_gen *g; // tokenized exactly as a text request is
        ds_status st = ds_gen_init(tok, &(ds_gen_request){.text = ps->text[i]}, &g);
        if (st) {
            ds_gen_prompts_free(out);
            return ds_fail_prefix(st, "%s:%d", ps->path, ps->line[i]);
        }
        int n;
        const int32_t *ids = ds_gen_prompt(g, &n);
        if ((out->ids[i] = ds_malloc(sizeof(int32_t) * (size_t)(n > 0 ? n : 1))))
            memcpy(out->ids[i], ids, sizeof(int32_t) * (size_t)n);
        ds_gen_free(g);
        if (!out->ids[i]) {
            ds_gen_prompts_free(out);
            return DS_ERR_NOMEM;
        }
        out->len[i] = n;
        if (n < 1 || (long)n + max_new > max_ctx) {
            ds_gen_prompts_free(out);
            return ds_fail(DS_ERR_INVALID, "%s:%d: prompt (%d tokens) + %d new tokens %s the model's context of %d",
                           ps->path, ps->line[i], n, max_new, n < 1 ? "(no BOS?) do not fit" : "exceed", max_ctx);
        }
    }
    return DS_OK;
}
