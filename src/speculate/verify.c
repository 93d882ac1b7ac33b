#include "speculate/verify.h"

#include "base/status.h"

// Residual distribution max(p − q, 0), unnormalized; returns its mass.
static double residual(float *p, const float *q, int V) {
    double z = 0;
    for (int i = 0; i < V; i++) {
        const float r = p[i] - q[i];
        p[i] = r > 0 ? r : 0;
        z += p[i];
    }
    return z;
}

ds_status ds_verify_tree(const ds_sampler_params *sp, int V, int n, const int32_t *tok, const int32_t *par,
                         const int *q_row, const float *p_logits, const float *q_logits, const int32_t *hist,
                         int n_hist, ds_rng *rng, int64_t pos, ds_verify_scratch *sc, int *path, int *accepted,
                         int32_t *next) {
    ds_status st;
    int32_t d[DS_VERIFY_MAX_ROWS]; // the accepted tokens so far: the history of the next row
    if (n < 1 || n > DS_VERIFY_MAX_ROWS) return ds_fail(DS_ERR_INVALID, "a tree of %d rows (1..%d)", n, DS_VERIFY_MAX_ROWS);
    const int plain_greedy = sp->temperature == 0 && !ds_sampler_adjusts(sp);
    for (int cur = 0, k = 0;; k++) { // row `cur` at depth k: its distribution decides among its children
        const float *pl = p_logits + (size_t)cur * V;
        int32_t x = -1; // the target's own token here (greedy and coupled)
        if (plain_greedy) {
            x = ds_argmax(pl, V);
        } else {
            if ((st = ds_probs_process_hist(sp, pl, V, hist, n_hist, d, k, sc->p, sc->sscratch))) return st;
            if (sp->temperature == 0) x = ds_argmax(sc->p, V);
            else if (sp->verify == DS_VERIFY_COUPLED) x = ds_sample_coupled(sc->p, V, rng, pos + k);
        }
        int child = -1;
        if (x >= 0) { // a child that drafted the target's own token, if any
            for (int c = cur + 1; c < n && child < 0; c++)
                if (par[c] == cur && tok[c] == x) child = c;
        } else { // residual: each child in row order, on what the ones before it left
            double z = 1; // the mass of sc->p (a processed distribution sums to 1)
            for (int c = cur + 1, first = 1; c < n && child < 0; c++) {
                if (par[c] != cur) continue;
                if (first && q_row[c] >= 0) { // drawn from q: accept with probability min(1, p/q)
                    if ((st = ds_probs_process_hist(sp, q_logits + (size_t)q_row[c] * V, V, hist, n_hist, d, k, sc->q,
                                                    sc->sscratch)))
                        return st;
                    // u < p/q  <=>  u·q < p  (q > 0: the token was drawn from q)
                    if (ds_rng_uniform(rng) * sc->q[tok[c]] < sc->p[tok[c]]) child = c;
                    else z = residual(sc->p, sc->q, V);
                } else { // proposed deterministically (q one-hot): accept with probability p(t) / z
                    if (q_row[c] >= 0) return ds_fail(DS_ERR_INVALID, "internal: tree row %d drawn from q after a sibling", c);
                    const float pt = sc->p[tok[c]];
                    if (ds_rng_uniform(rng) * z < pt) child = c;
                    else {
                        sc->p[tok[c]] = 0; // max(p − onehot(t), 0)
                        z -= pt;
                    }
                }
                first = 0;
                if (child < 0 && z <= 1e-12) { // p <= q everywhere: numerically p == q; draw from p
                    if ((st = ds_probs_process_hist(sp, pl, V, hist, n_hist, d, k, sc->p, sc->sscratch))) return st;
                    z = 1;
                }
            }
            if (child < 0) x = ds_sample_probs(sc->p, V, rng); // ds_sample_probs normalizes by the total mass
        }
        if (child < 0) {
            *accepted = k;
            *next = x;
            return DS_OK;
        }
        path[k] = child;
        d[k] = tok[child];
        cur = child;
    }
}

ds_status ds_verify(const ds_sampler_params *sp, int V, int ell, const int32_t *d, const float *p_logits,
                    const float *q_logits, const int32_t *hist, int n_hist, ds_rng *rng, int64_t pos,
                    ds_verify_scratch *sc, int *accepted, int32_t *next) {
    if (ell < 0 || ell + 1 > DS_VERIFY_MAX_ROWS) return ds_fail(DS_ERR_INVALID, "%d drafts to verify", ell);
    int32_t tok[DS_VERIFY_MAX_ROWS], par[DS_VERIFY_MAX_ROWS];
    int q_row[DS_VERIFY_MAX_ROWS], path[DS_VERIFY_MAX_ROWS];
    tok[0] = -1; // (the anchor's row: never compared)
    for (int i = 1; i <= ell; i++) {
        tok[i] = d[i - 1];
        par[i] = i - 1;
        q_row[i] = q_logits ? i - 1 : -1;
    }
    par[0] = -1;
    q_row[0] = -1;
    return ds_verify_tree(sp, V, ell + 1, tok, par, q_row, p_logits, q_logits, hist, n_hist, rng, pos, sc, path,
                          accepted, next);
}
