// Routed experts of a mixture-of-experts layer: routing, per-expert batched products, weighted sum.
#ifndef DS_MODEL_MOE_H
#define DS_MODEL_MOE_H

#include "model/model.h"

// The experts' scratch of a forward workspace (grown with the batch; steady state never allocates).
typedef struct ds_moe_ws ds_moe_ws;

// Make room for `rows` rows of model m (allocating *ws on first use).
ds_status ds_moe_ws_reserve(ds_moe_ws **ws, const ds_model *m, int rows);
void ds_moe_ws_free(ds_moe_ws *ws);

// out (R, dim) = Σ_j w_rj · expert_{e_rj}(x[r]) over each row's top_k experts e_r0.. (rank order),
// routed from route[r] (R, dim): Qwen softmax(router · route) then top k (renormalized when
// norm_topk); Gemma 4 the same on RMSNorm(route) ⊙ router_scale · dim^-0.5, always renormalized,
// times expert_scale. Every expert any row routes to is read once: its rows are gathered and go
// through one multi-row product per matrix. A row's result does not depend on the other rows.
// out may be route or x (both are read before out is written). `scratch`: the workspace's matmul
// scratch (sized for the expert matrices).
void ds_moe_forward(const ds_model *m, const ds_moe *moe, ds_moe_ws *ws, const float *route, const float *x, float *out,
                    int R, float *scratch, int gemm_min_rows); // (the forward's kernel choice, ds_matmul_ex)

// Routing statistics since the last ds_moe_ws_reset_stats: MoE layer passes run, the distinct
// experts they read (summed over passes) and the rows they routed (summed over passes).
typedef struct {
    long passes, distinct, rows;
} ds_moe_stats;
void ds_moe_ws_stats(const ds_moe_ws *ws, ds_moe_stats *out);
void ds_moe_ws_reset_stats(ds_moe_ws *ws);

// Windows of consecutive rows (the routing history the cost model reads, see ds_cost_table): the
// decayed mean distinct experts per MoE layer of the last w rows fed (w = 1..n) into out[w - 1];
// returns how many it filled.
#define DS_MOE_WINDOW 16
int ds_moe_ws_windows(const ds_moe_ws *ws, float *out, int n);
// Distinct values among the last w of `n` rows of k expert ids each, stored in a ring of
// DS_MOE_WINDOW rows (`ring`, row i at ring[(i % DS_MOE_WINDOW) * k]); `mark` (n_experts ints, all
// different from `stamp`) is scratch.
int ds_moe_window_distinct(const int *ring, long n, int k, int w, int *mark, int stamp);

#endif
