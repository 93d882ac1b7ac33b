// Verification of one drafted block against the target (docs/formats/deepspec-checkpoint.md §5): the one place
// where the acceptance rule lives.
#ifndef DS_SPECULATE_VERIFY_H
#define DS_SPECULATE_VERIFY_H

#include "dspark/speculate.h"

typedef struct {
    float *p;      // (V) scratch: processed target distribution
    float *q;      // (V) scratch: processed draft distribution
    void *sscratch; // ds_sampler_scratch_size(V)
} ds_verify_scratch;

// Verify drafts d[0..ell) given the target logits of rows 0..ell (ell+1 rows of V) and the raw
// draft logits (ell rows; NULL = deterministic proposals, q one-hot at d_k, as for ngram).
//   greedy (temperature 0): accept d_k iff it is the target's argmax; next = argmax of row a.
//   sampled, DS_VERIFY_COUPLED: x_k = ds_sample_coupled(p_k, rng, pos + k), the target's own draw
//   at the position of row k (d_0 sits at `pos`); accept d_k iff d_k == x_k; next = x_a at the
//   first mismatch, or the bonus x_ell. The committed tokens are the target's draws whatever was
//   drafted (q is not needed: the drafter drew d_k with the same noise on q_k).
//   sampled, DS_VERIFY_RESIDUAL: accept d_k with probability min(1, p_k(d_k)/q_k(d_k)); at the
//   first rejection draw next from normalize(max(p_a − q_a, 0)) (from p_a if that mass vanishes);
//   if all are accepted, draw the bonus token next from p_ell (draws from rng in order).
// p and q come from the same ds_probs_process_hist: row k's history is hist (n_hist tokens generated
// before the row's anchor, the anchor included when it was generated) then d_0..d_{k-1}, so logit
// bias and penalties shape p and q alike. Returns the number accepted; *next is the token that
// follows them.
ds_status ds_verify(const ds_sampler_params *sp, int V, int ell, const int32_t *d, const float *p_logits,
                    const float *q_logits, const int32_t *hist, int n_hist, ds_rng *rng, int64_t pos,
                    ds_verify_scratch *sc, int *accepted, int32_t *next);

// Most rows of a verified tree or chain (the anchor's included).
#define DS_VERIFY_MAX_ROWS 65

// The same over a token tree: row 0 is the anchor's, rows 1..n-1 hold drafted tokens tok[i] whose
// parent row is par[i] (< i; 0 for the first slot's candidates); row i of p_logits is the target's
// distribution after row i's path. From the root, at each row: greedy and coupled take the target's
// own token (argmax, or ds_sample_coupled at pos + depth) and descend to the child that drafted it;
// the residual rule tries the children in row order on what the ones before left: the first, when
// drawn from the drafter's distribution in q_logits row q_row[c] (>= 0), with min(1, p/q) and p ←
// max(p − q, 0), a deterministic proposal (q_row -1) with probability p(t) / mass and p(t) ← 0 (the
// recursive rejection sampling of deterministic candidates: each output token keeps probability
// p(t)); none accepted: next is drawn from what is left. Rows of the accepted path (the root
// excluded) go to path (n), their number to *accepted. A chain (par[i] = i − 1) is ds_verify.
ds_status ds_verify_tree(const ds_sampler_params *sp, int V, int n, const int32_t *tok, const int32_t *par,
                         const int *q_row, const float *p_logits, const float *q_logits, const int32_t *hist,
                         int n_hist, ds_rng *rng, int64_t pos, ds_verify_scratch *sc, int *path, int *accepted,
                         int32_t *next);

#endif
