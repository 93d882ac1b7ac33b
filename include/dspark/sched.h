// dspark/sched.h: scheduling kinds, the cost table and its measurements (src/sched).
// Part of the public API (include/dspark.h composes these headers); it includes only the
// headers of the layers below its own (docs/architecture.md), so a layer that includes it
// cannot name a function of a layer above it.
#ifndef DSPARK_SCHED_H
#define DSPARK_SCHED_H

#include <stddef.h>
#include <stdint.h>

#include "dspark/draft.h"

#ifdef __cplusplus
extern "C" {
#endif

// ---------------------------------------------------------------------------------------------
// Calibration sizes (src/sched/calibrate.c; the calibrate job reports in them).

#define DS_CALIB_BINS 20    // ECE bins
#define DS_CALIB_MAX_POS 64 // positions (slots per block) at most

// Sequential Temperature Scaling fit (src/sched/calibrate.c) and reliability bins.
typedef struct {
    int K;
    double temps[DS_CALIB_MAX_POS];       // T_k (1 where nothing was observed)
    int n[DS_CALIB_MAX_POS];              // rounds that observed position k
    int n_pos[DS_CALIB_MAX_POS];          // ... of which 1{a >= k}
    double conf_before[DS_CALIB_MAX_POS]; // mean A_k with every T = 1
    double conf_after[DS_CALIB_MAX_POS];  // mean A_k with the fitted temperatures
    double ece_before[DS_CALIB_MAX_POS], ece_after[DS_CALIB_MAX_POS]; // NaN when n = 0
    double auc_before[DS_CALIB_MAX_POS], auc_after[DS_CALIB_MAX_POS]; // NaN when one class is empty
} ds_sts_result;

// One bin of a reliability diagram.
typedef struct {
    int count;
    double conf; // mean confidence in the bin (0 when empty)
    double acc;  // mean label in the bin (0 when empty)
} ds_calib_bin;

// ---------------------------------------------------------------------------------------------
// Scheduling

// How many drafted tokens each request verifies per round.
typedef enum {
    DS_SCHEDULE_FIXED = 0, // all drafted slots (up to draft_max)
    DS_SCHEDULE_THRESHOLD, // slots before the first with confidence < conf_threshold (DeepSpec's static rule)
    DS_SCHEDULE_AUTO,      // Algorithm 1 over calibrated confidences and the cost table, with the early stop
} ds_schedule_kind;

// The target's verification steps per second at B tokens in one batched forward (B = 1..bmax),
// measured on this machine (ds_profile_costs); sps[0] is unused. Past bmax, SPS(B) is taken as
// bmax·SPS(bmax)/B.
// Mixture-of-experts targets (moe_layers > 0) verify at a cost that depends on how many distinct
// experts the batch routes to (each is read once): sps[B] is the rate at the profile's routing,
// prof_experts[B] distinct experts per MoE layer pass there, expert_s the seconds one expert pass
// costs, and obs_experts[w] the distinct experts of w consecutive decoded rows (routing statistics
// gathered while decoding); ds_cost_sps corrects sps[B] by the difference (see schedule.h).
#define DS_COST_WINDOWS 16
typedef struct {
    int bmax;
    double sps[513];
    int moe_layers, n_experts;
    double expert_s;
    float prof_experts[513];
    float obs_experts[DS_COST_WINDOWS + 1]; // [w], w = 1..DS_COST_WINDOWS; 0 = unknown
    // Seconds a round spends besides its verification forward (its drafting), which the schedule
    // prices with it: Θ = τ / (round_s + 1/SPS(B)). 0 gives Algorithm 1's Θ = τ·SPS(B) ordering;
    // the engine sets it every round from its drafting gate's D(R) (past rounds only).
    double round_s;
} ds_cost_table;

// Measure SPS(B) for B = 1..bmax: each forward carries B new rows spread over ceil(B/8) sequences
// with `ctx` rows of context each (median of `repeats`). `quick` measures B = 1, 2, 4, ... only and
// interpolates between them.
ds_status ds_profile_costs(const ds_model *m, int bmax, int ctx, int repeats, int quick, ds_cost_table *out);
// Median seconds of one batched drafting round of R sequences as the engine runs it: each appends one
// context row (after `ctx` rows) and then ONE ds_drafter_draft_batch drafts K slots for all of them.
ds_status ds_drafter_profile_round(const ds_drafter *d, int R, int K, int ctx, int repeats, double *seconds);
ds_status ds_cost_table_save(const ds_cost_table *t, const char *model_name, int threads, const char *path);
ds_status ds_cost_table_load(const char *path, ds_cost_table *out);

#ifdef __cplusplus
}
#endif

#endif
