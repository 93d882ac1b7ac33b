// The cost table of Algorithm 1: verification steps per second SPS(B) of the target on this
// machine, at B new tokens in one batched forward spread over concurrent sequences (as the engine
// would batch them) with realistic context, median of repeats. Stored as JSON per model and threads.
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/status.h"
#include "io/json.h"
#include "sched/schedule.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_d(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

#define ROWS_PER_SEQ 8 // a drafted block plus its anchor

ds_status ds_profile_costs(const ds_model *m, int bmax, int ctx, int repeats, int quick, ds_cost_table *out) {
    if (bmax < 1 || bmax > 512 || ctx < 1 || repeats < 1)
        return ds_fail(DS_ERR_INVALID, "profile needs 1 <= bmax <= 512, ctx >= 1, repeats >= 1");
    const ds_model_info *in = ds_model_get_info(m);
    if (ctx + ROWS_PER_SEQ > in->max_ctx) ctx = in->max_ctx - ROWS_PER_SEQ;
    const int n_seq = (bmax + ROWS_PER_SEQ - 1) / ROWS_PER_SEQ;
    ds_kv **kv = calloc((size_t)n_seq, sizeof *kv);
    ds_forward_seq *f = calloc((size_t)n_seq, sizeof *f);
    int32_t *tok = malloc(sizeof(int32_t) * (size_t)(ctx > ROWS_PER_SEQ ? ctx : ROWS_PER_SEQ));
    float *logits = malloc(sizeof(float) * (size_t)in->vocab_size * ROWS_PER_SEQ * n_seq);
    double *t = malloc(sizeof(double) * (size_t)repeats);
    ds_workspace *ws = NULL;
    ds_status st = (!kv || !f || !tok || !logits || !t) ? ds_fail(DS_ERR_NOMEM, "out of memory") : DS_OK;
    for (int i = 0; !st && i < ctx; i++) tok[i] = (int32_t)((i * 7919 + 13) % in->vocab_size);
    if (!st) st = ds_workspace_init(m, &ws);
    // Context of every sequence, prefilled once.
    for (int s = 0; !st && s < n_seq; s++) {
        if ((st = ds_kv_init(m, ctx + ROWS_PER_SEQ, &kv[s]))) break;
        ds_forward_seq p = {.kv = kv[s], .tokens = tok, .n_tokens = ctx};
        st = ds_model_forward(m, ws, &p, 1);
    }
    memset(out, 0, sizeof *out);
    out->bmax = bmax;
    out->moe_layers = in->moe_layers;
    out->n_experts = in->n_experts;
    int last = 0;
    for (int B = 1; !st && B <= bmax; B++) {
        // Quick mode measures where the cost curve bends: powers of two, and both sides of every
        // multiple of 8 (the multi-row kernel reads the weights once per 8 rows, so the cost of a
        // forward steps up at 9, 17, 25, ...: interpolating across a step would hide it).
        const int measured = !quick || (B & (B - 1)) == 0 || B == bmax || B % 8 == 0 || B % 8 == 1;
        if (!measured) continue;
        // B rows over ceil(B / 8) sequences, logits for every row (verification needs them all).
        const int ns = (B + ROWS_PER_SEQ - 1) / ROWS_PER_SEQ;
        for (int r = 0; !st && r < repeats + 1; r++) {
            int left = B;
            for (int s = 0; s < ns; s++) {
                const int rows = left < ROWS_PER_SEQ ? left : ROWS_PER_SEQ;
                left -= rows;
                f[s] = (ds_forward_seq){.kv = kv[s], .tokens = tok, .n_tokens = rows, .n_logits = rows,
                                        .logits = logits + (size_t)s * ROWS_PER_SEQ * in->vocab_size,
                                        .batch_invariant = 1}; // priced on the kernels decoding runs on
            }
            const double t0 = now_s();
            st = ds_model_forward(m, ws, f, ns);
            if (r > 0) t[r - 1] = now_s() - t0; // the first run warms up
            if (!st) out->prof_experts[B] = (float)ds_workspace_last_experts(ws); // (the same every repeat)
            for (int s = 0; s < ns; s++) ds_kv_truncate(kv[s], ctx);
        }
        if (st) break;
        qsort(t, (size_t)repeats, sizeof *t, cmp_d);
        out->sps[B] = 1.0 / t[repeats / 2];
        // Quick mode: fill the gap since the last measured point by interpolating step time.
        for (int b = last + 1; last && b < B; b++) {
            const double w = (double)(b - last) / (B - last);
            out->sps[b] = 1.0 / ((1 - w) / out->sps[last] + w / out->sps[B]);
            out->prof_experts[b] = (float)((1 - w) * out->prof_experts[last] + w * out->prof_experts[B]);
        }
        last = B;
    }
    // One expert pass of one layer: its share of a decode step's bytes (decoding is memory-bound).
    if (!st && in->moe_layers && in->weight_bytes)
        out->expert_s = (double)in->expert_bytes / (double)in->weight_bytes / out->sps[1];
    for (int s = 0; kv && s < n_seq; s++) ds_kv_free(kv[s]);
    ds_workspace_free(ws);
    free(kv), free(f), free(tok), free(logits), free(t);
    return st;
}

cJSON *ds_cost_table_json(const ds_cost_table *t, const char *model_name, int threads) {
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "model", model_name);
    cJSON_AddNumberToObject(j, "threads", threads);
    cJSON_AddStringToObject(j, "unit", "verification steps per second at B tokens per forward");
    cJSON *a = cJSON_AddArrayToObject(j, "sps");
    for (int b = 1; b <= t->bmax; b++) cJSON_AddItemToArray(a, cJSON_CreateNumber(t->sps[b]));
    if (t->moe_layers) { // the routing the table was measured at (see ds_cost_table)
        cJSON_AddNumberToObject(j, "moe_layers", t->moe_layers);
        cJSON_AddNumberToObject(j, "n_experts", t->n_experts);
        cJSON_AddNumberToObject(j, "expert_s", t->expert_s);
        cJSON *e = cJSON_AddArrayToObject(j, "experts");
        for (int b = 1; b <= t->bmax; b++) cJSON_AddItemToArray(e, cJSON_CreateNumber(t->prof_experts[b]));
    }
    return j;
}

ds_status ds_cost_table_save(const ds_cost_table *t, const char *model_name, int threads, const char *path) {
    cJSON *j = ds_cost_table_json(t, model_name, threads);
    ds_status st = j ? ds_json_save(j, path) : ds_fail(DS_ERR_NOMEM, "out of memory");
    cJSON_Delete(j);
    return st;
}

ds_status ds_cost_table_load(const char *path, ds_cost_table *out) {
    cJSON *j;
    ds_status st = ds_json_load(path, 1 << 20, &j);
    if (st) return st;
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(j, "sps"), *e;
    memset(out, 0, sizeof *out);
    if (!cJSON_IsArray(a) || cJSON_GetArraySize(a) < 1 || cJSON_GetArraySize(a) > 512) {
        cJSON_Delete(j);
        return ds_fail(DS_ERR_FORMAT, "%s: \"sps\" must be a list of 1..512 numbers", path);
    }
    cJSON_ArrayForEach(e, a) {
        if (!cJSON_IsNumber(e) || !(e->valuedouble > 0) || !isfinite(e->valuedouble)) {
            cJSON_Delete(j);
            return ds_fail(DS_ERR_FORMAT, "%s: SPS values must be positive numbers", path);
        }
        out->sps[++out->bmax] = e->valuedouble;
    }
    const cJSON *ex = cJSON_GetObjectItemCaseSensitive(j, "experts");
    if (ex) { // an MoE target's profile
        double ml = 0, ne = 0;
        ds_status s2;
        if ((s2 = ds_json_num(j, path, "moe_layers", -1, &ml)) || (s2 = ds_json_num(j, path, "n_experts", -1, &ne)) ||
            (s2 = ds_json_num(j, path, "expert_s", -1, &out->expert_s))) {
            cJSON_Delete(j);
            return s2;
        }
        if (!cJSON_IsArray(ex) || cJSON_GetArraySize(ex) != out->bmax || !(ml >= 1 && ml <= 4096) ||
            !(ne >= 1 && ne <= 4096) || !(out->expert_s > 0) || !isfinite(out->expert_s)) {
            cJSON_Delete(j);
            return ds_fail(DS_ERR_FORMAT, "%s: \"experts\" must list one count per \"sps\" entry, with positive "
                           "moe_layers, n_experts and expert_s", path);
        }
        out->moe_layers = (int)ml, out->n_experts = (int)ne;
        int b = 0;
        cJSON_ArrayForEach(e, ex) {
            if (!cJSON_IsNumber(e) || e->valuedouble < 0 || e->valuedouble > ne) {
                cJSON_Delete(j);
                return ds_fail(DS_ERR_FORMAT, "%s: \"experts\" values must be between 0 and n_experts", path);
            }
            out->prof_experts[++b] = (float)e->valuedouble;
        }
    }
    cJSON_Delete(j);
    return DS_OK;
}

ds_status ds_drafter_profile_round(const ds_drafter *d, int R, int K, int ctx, int repeats, double *seconds) {
    const ds_drafter_info *di = ds_drafter_get_info(d);
    if (R < 1 || R > 1024 || K < 1 || K > di->block_size || ctx < 1 || ctx > 1 << 16 || repeats < 1 || repeats > 1000)
        return ds_fail(DS_ERR_INVALID, "drafter profile needs 1 <= R <= 1024, 1 <= K <= block size, ctx >= 1, repeats >= 1");
    const int tap_w = di->n_taps * di->hidden;
    ds_draft_batch *b = NULL;
    ds_draft_seq *q = calloc((size_t)R, sizeof *q); // one descriptor per sequence
    ds_rng *rng = malloc(sizeof *rng * R);
    int32_t *tok = malloc(sizeof(int32_t) * (size_t)R * K);
    float *logits = malloc(sizeof(float) * (size_t)R * K * di->vocab), *conf = malloc(sizeof(float) * (size_t)R * K);
    float *taps = calloc((size_t)ctx, sizeof(float) * (size_t)tap_w); // zeros: the cost depends on shapes only
    double *t = malloc(sizeof(double) * (size_t)repeats);
    const ds_sampler_params greedy = ds_sampler_default();
    ds_status st = (!q || !rng || !tok || !logits || !conf || !taps || !t) ? ds_fail(DS_ERR_NOMEM, "out of memory")
                                                                          : ds_draft_batch_init(d, &b);
    for (int r = 0; !st && r < R; r++) {
        q[r] = (ds_draft_seq){.anchor = (int32_t)((r * 7919 + 13) % di->vocab), .n_slots = K, .sp = &greedy,
                              .rng = &rng[r], .tokens = tok + (size_t)r * K, .logits = logits + (size_t)r * K * di->vocab,
                              .conf = conf + (size_t)r * K};
        if ((st = ds_draft_state_init(d, ctx + K + 2, &q[r].state))) break;
        if ((st = ds_drafter_append(d, q[r].state, taps, ctx - 1))) break;
    }
    for (int rep = 0; !st && rep <= repeats; rep++) { // the first run warms up
        const double t0 = now_s();
        for (int r = 0; !st && r < R; r++) {
            rng[r] = ds_rng_init(1, (uint64_t)r);
            if (!(st = ds_draft_state_truncate(q[r].state, ctx - 1))) st = ds_drafter_append(d, q[r].state, taps, 1);
        }
        if (!st) st = ds_drafter_draft_batch(d, b, q, R);
        if (rep) t[rep - 1] = now_s() - t0;
    }
    if (!st) {
        qsort(t, (size_t)repeats, sizeof *t, cmp_d);
        *seconds = t[repeats / 2];
    }
    for (int r = 0; q && r < R; r++) ds_draft_state_free(q[r].state);
    ds_draft_batch_free(b);
    free(q), free(rng), free(tok), free(logits), free(conf), free(taps), free(t);
    return st;
}
