// Draft vocabulary: the drafter proposes only tokens from a given set (e.g. the target's most
// frequent ones, as FR-Spec does), so its LM head and its Markov head (W2) are products over the
// set's rows only: at the Qwen3-8B shape the LM head is 4/9 of a 7-slot drafting round's work and a
// 32768-token set cuts it to a fifth. The rows are copied once into contiguous weights (the
// kernels read rows in order); forward.c scatters the scores back to their ids and leaves every
// other logit at -inf, so those tokens have draft probability 0. Verification is unchanged and
// exact for any draft distribution, so decoding stays lossless; acceptance is what can change.
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "draft/drafter.h"
#include "io/json.h"

_Static_assert(sizeof(int32_t) == sizeof(int), "cJSON int arrays hold token ids");

void ds_drafter_vocab_free(ds_drafter *d) {
    for (int i = 0; i < 6; i++) free(d->vocab_bufs[i]);
    memset(d->vocab_bufs, 0, sizeof d->vocab_bufs);
    free(d->vocab_ids);
    d->vocab_ids = NULL;
    memset(&d->vocab_head, 0, sizeof d->vocab_head);
    memset(&d->vocab_w2, 0, sizeof d->vocab_w2);
    d->n_vocab = d->V;
}

int ds_drafter_vocab_size(const ds_drafter *d) { return d->n_vocab; }

static int cmp_id(const void *a, const void *b) {
    const int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return x < y ? -1 : x > y;
}

ds_status ds_drafter_set_vocab(ds_drafter *d, const int32_t *ids, int n) {
    if (n < 0 || n > d->V || (n && !ids))
        return ds_fail(DS_ERR_INVALID, "a draft vocabulary of %d ids (the vocabulary has %d)", n, d->V);
    int32_t *sorted = malloc(sizeof(int32_t) * (size_t)(n ? n : 1));
    if (!sorted) return ds_fail(DS_ERR_NOMEM, "out of memory for a draft vocabulary");
    if (n) memcpy(sorted, ids, sizeof(int32_t) * (size_t)n);
    qsort(sorted, (size_t)n, sizeof(int32_t), cmp_id);
    for (int i = 0; i < n; i++)
        if (sorted[i] < 0 || sorted[i] >= d->V || (i && sorted[i] == sorted[i - 1])) {
            const int32_t bad = sorted[i];
            free(sorted);
            return ds_fail(DS_ERR_INVALID, "draft vocabulary: token id %d %s", bad,
                           bad < 0 || bad >= d->V ? "is outside the vocabulary" : "is listed twice");
        }
    ds_drafter_vocab_free(d);
    if (n == 0 || n == d->V) { // the full vocabulary: the original matrices
        free(sorted);
        return DS_OK;
    }
    if (ds_weight_select_rows(&d->lm_head, sorted, n, &d->vocab_head, d->vocab_bufs) ||
        (d->r > 0 && ds_weight_select_rows(&d->markov_w2, sorted, n, &d->vocab_w2, d->vocab_bufs + 3))) {
        free(sorted);
        ds_drafter_vocab_free(d);
        return ds_fail(DS_ERR_NOMEM, "out of memory for a draft vocabulary of %d ids", n);
    }
    d->vocab_ids = sorted;
    d->n_vocab = n;
    return DS_OK;
}

ds_status ds_drafter_load_vocab(ds_drafter *d, const char *dir) {
    char path[4096];
    snprintf(path, sizeof path, "%s/draft_vocab.json", dir);
    FILE *f = fopen(path, "rb");
    if (!f) return DS_OK; // the full vocabulary
    fclose(f);
    cJSON *j;
    ds_status st = ds_json_load(path, 64 << 20, &j);
    if (st) return st;
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(j, "token_ids"), *e;
    const int n = cJSON_IsArray(t) ? cJSON_GetArraySize(t) : -1;
    if (n < 1 || n > d->V) {
        cJSON_Delete(j);
        return ds_fail(DS_ERR_FORMAT, "%s: \"token_ids\" must be a list of 1..%d token ids", path, d->V);
    }
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)n);
    int k = 0;
    if (!ids) {
        cJSON_Delete(j);
        return ds_fail(DS_ERR_NOMEM, "out of memory");
    }
    cJSON_ArrayForEach(e, t) {
        if (!cJSON_IsNumber(e) || e->valuedouble != (double)(int32_t)e->valuedouble) {
            free(ids);
            cJSON_Delete(j);
            return ds_fail(DS_ERR_FORMAT, "%s: token ids must be integers", path);
        }
        ids[k++] = (int32_t)e->valuedouble;
    }
    cJSON_Delete(j);
    st = ds_drafter_set_vocab(d, ids, n);
    free(ids);
    return st ? ds_fail_prefix(st, "%s", path) : DS_OK;
}

ds_status ds_drafter_save_vocab(const char *dir, const int32_t *ids, int n) {
    if (n < 1 || !ids) return ds_fail(DS_ERR_INVALID, "an empty draft vocabulary");
    cJSON *j = cJSON_CreateObject();
    cJSON *a = j ? cJSON_CreateIntArray(ids, n) : NULL;
    if (!a || !cJSON_AddItemToObject(j, "token_ids", a)) {
        cJSON_Delete(j);
        return ds_fail(DS_ERR_NOMEM, "out of memory");
    }
    char path[4096];
    snprintf(path, sizeof path, "%s/draft_vocab.json", dir);
    const ds_status st = ds_json_save(j, path);
    cJSON_Delete(j);
    return st;
}
