// The sampler: one "processed distribution" for everything (drafting, verification, tests), and a
// counter-based random stream.
//
// Processing order (the contract speculative verification relies on: the same function turns both
// the target's and the drafter's logits into p and q):
//   0. logit bias and the presence / frequency penalties over the token history (OpenAI's)
//   1. temperature: z = logits / T  (T <= 0: one-hot at the argmax, lowest id on ties)
//   2. top-k: keep the k largest z (ties broken by lower id, so exactly k survive)
//   3. softmax over the survivors
//   4. top-p: keep the smallest prefix, in (prob desc, id asc) order, whose mass reaches top_p;
//      min-p: keep tokens with prob >= min_p * max prob. Both are computed on step 3's distribution
//      and a token must pass both.
//   5. renormalize.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "dspark/sample.h"

ds_sampler_params ds_sampler_default(void) {
    ds_sampler_params p = {.temperature = 0.0f, .top_k = 0, .top_p = 1.0f, .min_p = 0.0f};
    return p;
}

// ---- random stream -------------------------------------------------------------------------------

// splitmix64's finalizer: a bijective 64-bit mixer with full avalanche.
static uint64_t mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

ds_rng ds_rng_init(uint64_t seed, uint64_t stream) {
    ds_rng r = {seed, stream, 0};
    return r;
}

// Draw i of stream (seed, stream) = mix(mix(seed ^ mix(stream)) + i·φ): a pure function of the
// triple, so a draw never depends on threads or on what else was drawn elsewhere.
static uint64_t stream_key(uint64_t seed, uint64_t stream) { return mix64(seed ^ mix64(stream + 0x632be59bd9b4e019ULL)); }
static double draw_at(uint64_t key, uint64_t i) {
    return (double)(mix64(key + (i + 1) * 0x9e3779b97f4a7c15ULL) >> 11) * 0x1.0p-53;
}

double ds_rng_uniform(ds_rng *r) { return draw_at(stream_key(r->seed, r->stream), r->counter++); }

// ---- processing ----------------------------------------------------------------------------------

int32_t ds_argmax(const float *x, int n) {
    int32_t best = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return best;
}

size_t ds_sampler_scratch_size(int n) { return (size_t)(n > 0 ? n : 1) * (sizeof(int32_t) + sizeof(float)); }

// Order: larger value first, then lower id.
static inline int before(const float *v, int32_t a, int32_t b) { return v[a] > v[b] || (v[a] == v[b] && a < b); }

// Partially order idx[0..n) so that its first k entries are the k first in `before` order.
static void select_top(int32_t *idx, int n, int k, const float *v) {
    int lo = 0, hi = n - 1;
    while (lo < hi) {
        const int32_t pivot = idx[lo + (hi - lo) / 2];
        int i = lo, j = hi;
        while (i <= j) {
            while (before(v, idx[i], pivot)) i++;
            while (before(v, pivot, idx[j])) j--;
            if (i <= j) {
                int32_t t = idx[i];
                idx[i++] = idx[j];
                idx[j--] = t;
            }
        }
        if (k - 1 <= j) hi = j;
        else if (k - 1 >= i) lo = i;
        else break;
    }
}

static _Thread_local const float *g_sort_vals; // qsort has no context argument
static int cmp_before(const void *a, const void *b) {
    const int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return before(g_sort_vals, x, y) ? -1 : before(g_sort_vals, y, x) ? 1 : 0;
}

static void sort_by_value(int32_t *idx, int n, const float *v) {
    // Insertion sort for short lists; qsort otherwise.
    if (n <= 32) {
        for (int i = 1; i < n; i++) {
            int32_t t = idx[i];
            int j = i - 1;
            while (j >= 0 && before(v, t, idx[j])) {
                idx[j + 1] = idx[j];
                j--;
            }
            idx[j + 1] = t;
        }
        return;
    }
    g_sort_vals = v;
    qsort(idx, (size_t)n, sizeof *idx, cmp_before);
}

int ds_sampler_adjusts(const ds_sampler_params *p) {
    return p->presence_penalty != 0 || p->frequency_penalty != 0 || (p->logit_bias && p->n_logit_bias > 0);
}

// Step 0 on z (a copy of the logits): bias, then the penalties over hist + drafts. cnt (n) is
// scratch whose entries are only touched at history tokens.
static void adjust(const ds_sampler_params *p, float *z, int n, const int32_t *hist, int n_hist, const int32_t *drafts,
                   int n_drafts, int32_t *cnt) {
    for (int i = 0; i < p->n_logit_bias && p->logit_bias; i++)
        if (p->logit_bias[i].id >= 0 && p->logit_bias[i].id < n) z[p->logit_bias[i].id] += p->logit_bias[i].bias;
    if (p->presence_penalty == 0 && p->frequency_penalty == 0) return;
    for (int pass = 0; pass < 3; pass++) // zero the counts, count, apply (once per distinct token)
        for (int j = 0; j < n_hist + n_drafts; j++) {
            const int32_t t = j < n_hist ? hist[j] : drafts[j - n_hist];
            if (t < 0 || t >= n) continue;
            if (pass == 0) cnt[t] = 0;
            else if (pass == 1) cnt[t]++;
            else if (cnt[t] > 0) {
                z[t] -= p->frequency_penalty * (float)cnt[t] + p->presence_penalty;
                cnt[t] = 0;
            }
        }
}

ds_status ds_probs_process(const ds_sampler_params *p, const float *logits, int n, float *probs, void *scratch) {
    return ds_probs_process_hist(p, logits, n, NULL, 0, NULL, 0, probs, scratch);
}

ds_status ds_probs_process_hist(const ds_sampler_params *p, const float *logits, int n, const int32_t *hist,
                                int n_hist, const int32_t *drafts, int n_drafts, float *probs, void *scratch) {
    if (n <= 0) return ds_fail(DS_ERR_INVALID, "empty distribution");
    if (!(p->temperature >= 0) || p->top_k < 0 || !(p->top_p > 0 && p->top_p <= 1) || !(p->min_p >= 0 && p->min_p <= 1) ||
        !isfinite(p->presence_penalty) || !isfinite(p->frequency_penalty))
        return ds_fail(DS_ERR_INVALID, "invalid sampling parameters (temperature %g, top-k %d, top-p %g, min-p %g)",
                       p->temperature, p->top_k, p->top_p, p->min_p);
    const int adj = ds_sampler_adjusts(p);
    if (p->temperature == 0 && !adj) {
        memset(probs, 0, (size_t)n * sizeof *probs);
        probs[ds_argmax(logits, n)] = 1.0f;
        return DS_OK;
    }
    int32_t *idx = scratch ? scratch : malloc(ds_sampler_scratch_size(n));
    if (!idx) return ds_fail(DS_ERR_NOMEM, "out of memory");
    if (adj) { // 0. bias and penalties (into probs, the value array from here on)
        memcpy(probs, logits, (size_t)n * sizeof *probs);
        adjust(p, probs, n, hist, n_hist, drafts, n_drafts, idx);
        logits = probs;
    }
    if (p->temperature == 0) {
        const int32_t best = ds_argmax(probs, n);
        memset(probs, 0, (size_t)n * sizeof *probs);
        probs[best] = 1.0f;
        if (!scratch) free(idx);
        return DS_OK;
    }
    // 1. temperature (into probs, used as the value array from here on)
    const float invT = 1.0f / p->temperature;
    for (int i = 0; i < n; i++) probs[i] = logits[i] * invT;
    for (int i = 0; i < n; i++) idx[i] = i;
    // 2. top-k
    int kept = n;
    if (p->top_k > 0 && p->top_k < n) {
        select_top(idx, n, p->top_k, probs);
        kept = p->top_k;
    }
    // 3. softmax over the survivors
    float mx = -INFINITY;
    for (int i = 0; i < kept; i++) mx = probs[idx[i]] > mx ? probs[idx[i]] : mx;
    double sum = 0;
    for (int i = 0; i < kept; i++) sum += (probs[idx[i]] = expf(probs[idx[i]] - mx));
    for (int i = 0; i < kept; i++) probs[idx[i]] = (float)(probs[idx[i]] / sum);
    // 4. top-p and min-p
    int cut = kept;
    if (p->top_p < 1.0f) {
        sort_by_value(idx, kept, probs);
        double cum = 0;
        for (int i = 0; i < kept; i++) {
            cum += probs[idx[i]];
            if (cum >= p->top_p) {
                cut = i + 1;
                break;
            }
        }
    }
    if (p->min_p > 0) {
        float pmax = 0;
        for (int i = 0; i < kept; i++) pmax = probs[idx[i]] > pmax ? probs[idx[i]] : pmax;
        const float thr = p->min_p * pmax;
        int w = 0;
        for (int i = 0; i < cut; i++)
            if (probs[idx[i]] >= thr) idx[w++] = idx[i];
        cut = w;
    }
    // 5. renormalize the kept set idx[0..cut); zero everything else.
    float *vals = (float *)(idx + n); // (cut) kept probabilities
    double mass = 0;
    for (int i = 0; i < cut; i++) mass += (vals[i] = probs[idx[i]]);
    memset(probs, 0, (size_t)n * sizeof *probs);
    for (int i = 0; i < cut; i++) probs[idx[i]] = (float)(vals[i] / mass);
    if (!scratch) free(idx);
    return DS_OK;
}

int32_t ds_sample_coupled(const float *probs, int n, const ds_rng *rng, int64_t pos) {
    const uint64_t key = stream_key(rng->seed, DS_RNG_POSITION | (uint64_t)pos);
    int32_t best = -1;
    double best_v = 0;
    for (int i = 0; i < n; i++) {
        if (probs[i] <= 0) continue; // u_i is draw i of the position's stream whatever is skipped
        const double v = -log1p(-draw_at(key, (uint64_t)i)) / probs[i]; // E_i / p_i, E_i ~ Exp(1)
        if (best < 0 || v < best_v) {
            best = i;
            best_v = v;
        }
    }
    return best >= 0 ? best : 0;
}

int32_t ds_sample_probs(const float *probs, int n, ds_rng *rng) {
    const double u = ds_rng_uniform(rng);
    double cum = 0, total = 0;
    for (int i = 0; i < n; i++) total += probs[i];
    const double target = u * total;
    int32_t last = -1;
    for (int i = 0; i < n; i++) {
        if (probs[i] <= 0) continue;
        cum += probs[i];
        last = i;
        if (target < cum) return i;
    }
    return last >= 0 ? last : 0;
}
