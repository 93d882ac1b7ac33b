// Confidence-scheduled verification (the DSpark paper's Algorithm 1,
// docs/formats/deepspec-checkpoint.md §8): how many drafted tokens each request verifies this round.
#ifndef DS_SCHED_SCHEDULE_H
#define DS_SCHED_SCHEDULE_H

#include <stddef.h>

#include "dspark/sched.h"

// SPS(B), extrapolated past bmax as bmax·SPS(bmax)/B (throughput-bound: tokens/s stays constant).
// MoE targets: the step time 1/sps[B] was measured at the profile's routing (prof_experts[B]
// distinct experts per MoE layer pass); with routing statistics from decoding it becomes
//   1/SPS(B) = 1/sps[B] + moe_layers · expert_s · (D(B) − prof_experts[B]),
// D(B) = ds_cost_experts(t, B) the distinct experts expected in a verification batch of B rows.
double ds_cost_sps(const ds_cost_table *t, int B);
// Expected distinct experts per MoE layer pass for B rows spread as the profile spreads them
// (ns = ceil(B / 8) sequences of w = ceil(B / ns) consecutive rows): with D1(w) = obs_experts[w]
// (w consecutive decoded rows) and E experts, D(B) = E·(1 − (1 − D1(w)/E)^ns) (the sequences route
// independently). 0 when unknown (no statistics yet, or a dense target).
double ds_cost_experts(const ds_cost_table *t, int B);
// The cost table as the JSON object ds_cost_table_save writes (NULL when out of memory): the
// profile job (jobs/profile.c) adds its drafter fields to it before saving.
struct cJSON *ds_cost_table_json(const ds_cost_table *t, const char *model_name, int threads);
// A forward of B rows took `seconds`: move SPS(B) towards it (an average of step times, 1/5 weight
// for the new one, the observation first clipped to [0.5, 2] times the current step so that one
// preempted forward cannot rewrite the table), then keep SPS non-increasing in B (entries below B
// raised to it, above lowered to it). The engine refines its start-up profile with every round it runs, so the
// scheduler follows the machine as it is now (other load, longer contexts, a profile that missed a
// step of the cost curve). Past rounds only: the output distribution is untouched.
// (MoE: the observation is brought back to the profile's routing with the same correction first, so
// sps[B] stays at prof_experts[B] and the correction is applied once, when read.)
void ds_cost_observe(ds_cost_table *t, int B, double seconds);

// Algorithm 1 with the early stop. R requests; request r has K[r] drafted slots with calibrated
// confidences conf[r][0..K[r]) (conditional acceptance of slot j given slots < j were accepted).
// a_{r,j} = Π_{i≤j} c_{r,i}; B = Σ_r (1 + ℓ_r); τ = Σ_r (1 + Σ_{j<ℓ_r} a_{r,j}). Starting from all
// ℓ_r = 0, candidates (r, j) are admitted in order of decreasing a_{r,j} while Θ = τ·SPS(B)
// (with t->round_s > 0: Θ = τ / (round_s + 1/SPS(B)), the round's drafting priced too) improves,
// stopping at the FIRST non-improvement (required for losslessness: c_{j+1} depends on the
// sampled x_j, so looking past a drop would let x_j influence its own admission). Writes ℓ_r to
// ell[r]. `scratch` holds ds_schedule_scratch_size(Σ K[r]) bytes (or NULL to allocate).
void ds_schedule_auto(const float *const *conf, const int *K, int R, const ds_cost_table *t, int *ell,
                      void *scratch);

size_t ds_schedule_scratch_size(int n_candidates);

// The most slots Algorithm 1 could admit in total this round for R requests, whatever the
// confidences: an admission at batch B needs a/τ > ρ(B)/ρ(B+1) − 1 with a ≤ 1 and τ ≥ R, so
// admissions stop by the first B ≥ R where ρ(B)/ρ(B+1) − 1 ≥ 1/R (ρ(B) = SPS(B), or
// 1 / (round_s + 1/SPS(B)) with t->round_s > 0: the same rate the schedule uses). Depends only on R
// and the table (never on this round's drafts), so drafting no deeper than this keeps the
// schedule — and the output — exactly as if the full block had been drafted, while saving the
// drafting Algorithm 1 would throw away (on a compute-bound target it is often 0: no drafting at all).
int ds_schedule_max_admissions(const ds_cost_table *t, int R, int cap);
// The same bound for ds_schedule_retrospective: a prefix of k admissions can be its argmax only if
// (R + k)·ρ(R + k), its Θ with every slot accepted, beats R·ρ(R), the Θ of admitting nothing;
// the largest such k up to cap.
int ds_schedule_max_admissions_retrospective(const ds_cost_table *t, int R, int cap);

// The drafting gate of DS_SCHEDULE_AUTO. Algorithm 1's Θ = τ·SPS(B) prices verification only; when
// drafting itself costs about a decode step (small targets, CPUs), a round that drafts can lose to
// one that does not, whatever it admits. The gate prices drafting too. From PAST information only
// (so the output distribution is untouched) it estimates the best expected throughput of drafting
// k slots for R requests,
//   R·(1 + Σ_{j<k} Π_{i≤j} acc_i) / (D(R) + 1/SPS(R(1 + k))),
// where D(R) is the seconds of one batched drafting round of R sequences, and drafts only when that
// beats R·SPS(R) without drafting. Acceptance is kept apart for greedy rounds (every sequence at
// temperature 0) and sampled ones: a drafter accepts far less at temperature 1 than at 0, and one
// estimate for both let a temperature-0 calibration keep sampled requests drafting at a loss. Its
// inputs start from priors, so it need not spend rounds finding out what it already knows:
//   D(R): the round cost measured at start-up (cost_a + cost_b·R, ds_drafter_profile_round), then
//         an average of observed rounds at each R;
//   acc:  the realized acceptance of the drafter's calibration runs (calibration.json
//         "acceptance", one per class it calibrated: greedy, sampled), as 32 rounds' worth of counts,
//         then decayed counts of verified rounds of each class.
// The estimate is a model, and what rounds realize overrules it: once about 7 drafted rounds of a
// class at this R have been seen, their tokens per second (drafting included) decide against plain
// rounds' realized rate at this R (or R·SPS(R) before 7 of those were seen; at temperature 1 a
// round's acceptance is too noisy to decide on fewer). At R = 4 on the inflated
// pair, with plain 4-row steps about as cheap as 1-row ones, the model said drafting gained 5-10%
// while drafted rounds realized 15% less than plain ones: errors of a few per cent in the table
// are the whole margin there, and measuring both sides the same way removes them.
// Without a prior for a class it explores: it drafts until it has seen about 8 rounds of it (one
// round at temperature 1 says little: slot 1 is accepted about half the time). It re-explores
// after `explore_every` skipped rounds of the class (64, doubling up to 4096 while drafting keeps
// losing) so its estimates follow the workload — unless drafting could not pay even with every
// drafted token accepted (at the drafting cost and this R): then it never drafts.
#define DS_GATE_MAX_R 64
#define DS_GATE_MIN_TRIED 6.5 // decayed count of slot-1 trials before a class's estimate decides (8 rounds)
#define DS_GATE_MIN_REALIZED 5.2 // decayed count of rounds of a kind at an R before their realized rate decides (7)
enum { DS_GATE_GREEDY, DS_GATE_SAMPLED, DS_GATE_CLASSES };
typedef struct {
    double cost_a, cost_b;              // prior round cost D(R) = cost_a + cost_b·R seconds (both 0 = none)
    double round_s[DS_GATE_MAX_R + 1];  // observed D(R), averaged (index min(R, 64)); 0 = not observed
    double acc[DS_GATE_CLASSES][64];    // per class: decayed counts of slot j accepted ...
    double tried[DS_GATE_CLASSES][64];  // ... and verified with the slots before it accepted
    int skipped[DS_GATE_CLASSES], explore_every[DS_GATE_CLASSES];
    // What rounds realized, per kind (0: plain, 1: drafted), class and R (index min(R, 64)): decayed
    // sums of the tokens they committed and of their seconds (drafting, the forward, the commit),
    // and a decayed count of them.
    double real_tok[2][DS_GATE_CLASSES][DS_GATE_MAX_R + 1], real_s[2][DS_GATE_CLASSES][DS_GATE_MAX_R + 1];
    double real_n[2][DS_GATE_CLASSES][DS_GATE_MAX_R + 1];
} ds_draft_gate;

// A gate with optional priors: cost_a, cost_b as above (0, 0 = unknown); per class c
// (DS_GATE_GREEDY, DS_GATE_SAMPLED), prior[c][k] = the fraction of its calibration rounds that
// accepted slots 0..k (prefix survival), n_prior[c] of them (0 = unknown; prior[c] may then be NULL).
void ds_gate_init(ds_draft_gate *g, double cost_a, double cost_b, const float *const prior[DS_GATE_CLASSES],
                  const int n_prior[DS_GATE_CLASSES]);
// How deep to draft this round for R requests: `cap` (explore, or drafting pays) or 0. `sampled`:
// some sequence of the round samples (temperature > 0), so the sampled class's estimate decides.
int ds_gate_depth(ds_draft_gate *g, const ds_cost_table *t, int R, int cap, int sampled);
// D(R) as the gate sees it (observed at this R, else the prior), or -1 when unknown.
double ds_gate_round_cost(const ds_draft_gate *g, int R);
// One drafting round of R sequences took `seconds` in all.
void ds_gate_observe_draft(ds_draft_gate *g, int R, double seconds);
// A round of R sequences (`sampled` as for ds_gate_depth; `drafted`: it drafted) committed `tokens`
// in `seconds`, from its drafting (if any) to its commit.
void ds_gate_observe_realized(ds_draft_gate *g, int R, int sampled, int drafted, int tokens, double seconds);
// One verified round of a sequence: ell slots verified, `accepted` of them accepted; `sampled`: the
// sequence samples (temperature > 0); `drafted`: the sequence drafted this round. A drafted round
// whose schedule verified nothing (ell = 0) counts as slot 1 tried and not accepted: the drafting
// was paid for and yielded no token, which is what the gate weighs against its cost.
void ds_gate_observe_round(ds_draft_gate *g, int ell, int accepted, int sampled, int drafted);

// The retrospective variant that searches past drops: the argmax of Θ over every admission prefix
// (ties keep the shorter). Under the residual rule it is NOT lossless (the statistical test shows
// why the early stop is needed there). Where the committed tokens are the target's own choices
// whatever was verified (greedy decoding; the coupled rule, which commits the target's own draws),
// no admission can change the output. The engine uses this search for rounds whose every sequence
// decodes greedily: it never ends below the early stop's Θ, and it does not give up on a block whose
// first slot is doubtful but whose later slots would pay for it (a cost curve that rises steeply from
// B = 1 and then flattens, as quantized targets' do). Sampled rounds keep the early stop (engine.c).
void ds_schedule_retrospective(const float *const *conf, const int *K, int R, const ds_cost_table *t, int *ell,
                               void *scratch);

#endif
