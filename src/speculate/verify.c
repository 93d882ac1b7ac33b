#include "speculate/verify.h"

#include "base/status.h"

// Residual distribution max(p − q, 0), normalized; returns its mass before normalization.
static double residual(float *p, const float *q, int V) {
    double z = 0;
    for (int i = 0; i < V; i++) {
        const float r = p[i] - q[i];
        p[i] = r > 0 ? r : 0;
        z += p[i];
    }
    return z;
}

ds_status ds_verify(const ds_sampler_params *sp, int V, int ell, const int32_t *d, const float *p_logits,
                    const float *q_logits, const int32_t *hist, int n_hist, ds_rng *rng, int64_t pos,
                    ds_verify_scratch *sc, int *accepted, int32_t *next) {
    ds_status st;
    // Row k's processed distribution: its history is the generated tokens and the drafts before it.
#define P_ROW(k, out) ds_probs_process_hist(sp, p_logits + (size_t)(k) * V, V, hist, n_hist, d, (k), (out), sc->sscratch)
    if (sp->temperature == 0) {
        int a = 0;
        if (!ds_sampler_adjusts(sp)) {
            while (a < ell && d[a] == ds_argmax(p_logits + (size_t)a * V, V)) a++;
            *accepted = a;
            *next = ds_argmax(p_logits + (size_t)a * V, V);
            return DS_OK;
        }
        for (;; a++) { // bias / penalties: the argmax of the adjusted logits
            if ((st = P_ROW(a, sc->p))) return st;
            const int32_t x = ds_argmax(sc->p, V);
            if (a < ell && d[a] == x) continue;
            *accepted = a;
            *next = x;
            return DS_OK;
        }
    }
    if (sp->verify == DS_VERIFY_COUPLED) { // every row's token is the target's own draw at its position
        for (int k = 0; k <= ell; k++) {
            if ((st = P_ROW(k, sc->p))) return st;
            const int32_t x = ds_sample_coupled(sc->p, V, rng, pos + k);
            if (k < ell && d[k] == x) continue;
            *accepted = k;
            *next = x;
            return DS_OK;
        }
    }
    for (int k = 0; k < ell; k++) {
        if ((st = P_ROW(k, sc->p))) return st;
        float qd = 1.0f; // deterministic proposal: q is one-hot at d_k
        if (q_logits) {
            if ((st = ds_probs_process_hist(sp, q_logits + (size_t)k * V, V, hist, n_hist, d, k, sc->q, sc->sscratch)))
                return st;
            qd = sc->q[d[k]];
        }
        const float pd = sc->p[d[k]];
        // accept with probability min(1, p/q): u < p/q  <=>  u·q < p  (q > 0: d_k was drawn from q)
        if (ds_rng_uniform(rng) * qd < pd) continue;
        *accepted = k;
        if (q_logits) {
            if (residual(sc->p, sc->q, V) <= 1e-12) P_ROW(k, sc->p); // p <= q everywhere: numerically p == q
        } else {
            sc->p[d[k]] = 0; // max(p − onehot(d), 0)
            double z = 0;
            for (int i = 0; i < V; i++) z += sc->p[i];
            if (z <= 1e-12) P_ROW(k, sc->p);
        }
        *next = ds_sample_probs(sc->p, V, rng); // ds_sample_probs normalizes by the total mass
        return DS_OK;
    }
    *accepted = ell;
    if ((st = P_ROW(ell, sc->p))) return st;
    *next = ds_sample_probs(sc->p, V, rng);
    return DS_OK;
#undef P_ROW
}
