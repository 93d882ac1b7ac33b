#include "sched/schedule.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

double ds_cost_experts(const ds_cost_table *t, int B) {
    if (!t->moe_layers || t->n_experts < 1 || B < 1) return 0;
    const int ns = (B + 7) / 8, w = (B + ns - 1) / ns;
    const double d1 = w <= DS_COST_WINDOWS ? t->obs_experts[w] : 0, E = t->n_experts;
    if (!(d1 > 0)) return 0;
    return E * (1.0 - pow(1.0 - (d1 < E ? d1 : E) / E, ns));
}

// Seconds to add to the profiled step time at B for the routing expected now (0 when unknown).
static double expert_correction(const ds_cost_table *t, int B) {
    if (!t->moe_layers || B > t->bmax || !(t->prof_experts[B] > 0) || !(t->expert_s > 0)) return 0;
    const double d = ds_cost_experts(t, B);
    return d > 0 ? t->moe_layers * t->expert_s * (d - t->prof_experts[B]) : 0;
}

double ds_cost_sps(const ds_cost_table *t, int B) {
    if (B < 1) B = 1;
    if (B > t->bmax) return ds_cost_sps(t, t->bmax) * t->bmax / B;
    const double step = 1.0 / t->sps[B], c = expert_correction(t, B);
    return 1.0 / (step + c > 0.25 * step ? step + c : 0.25 * step); // (never below a quarter of the profile)
}

void ds_cost_observe(ds_cost_table *t, int B, double seconds) {
    if (B < 1 || B > t->bmax || !(seconds > 0 && seconds < INFINITY) || !(t->sps[B] > 0)) return; // (inf would zero the entry)
    seconds -= expert_correction(t, B);
    if (!(seconds > 0)) return;
    // One observation moves the step time by a factor in [0.9, 1.2] at most: a forward the OS
    // preempted (another process's time slice: 100x a small model's step) must not rewrite the
    // table at once, or the gate, seeing plain decoding as slow, drafts every round and never
    // observes a plain step again to correct it. A lasting change still takes only a few rounds.
    const double step = 1.0 / t->sps[B];
    if (seconds > 2 * step) seconds = 2 * step;
    if (seconds < 0.5 * step) seconds = 0.5 * step;
    t->sps[B] = 1.0 / (0.8 * step + 0.2 * seconds);
    // A forward of more rows never takes less time than one of fewer: keep SPS non-increasing in B
    // (a running max down from B, a running min up from it), so what one B's rounds show reaches
    // the Bs no round runs.
    for (int b = B - 1; b >= 1; b--)
        if (t->sps[b] < t->sps[b + 1]) t->sps[b] = t->sps[b + 1];
    for (int b = B + 1; b <= t->bmax; b++)
        if (t->sps[b] > t->sps[b - 1]) t->sps[b] = t->sps[b - 1];
}

// Rounds per second at B verified rows, the round's drafting included (round_s; 0: SPS(B) itself).
static double round_rate(const ds_cost_table *t, int B) {
    const double sps = ds_cost_sps(t, B);
    return t->round_s > 0 ? 1.0 / (t->round_s + 1.0 / sps) : sps;
}

typedef struct {
    float a;  // prefix survival a_{r,j}
    int r, j; // request, slot (0-based: admitting it sets ℓ_r = j + 1)
} cand;

static int cmp_cand(const void *x, const void *y) {
    const cand *a = x, *b = y;
    if (a->a != b->a) return a->a > b->a ? -1 : 1;
    if (a->r != b->r) return a->r - b->r; // ties: lower request, then earlier slot (keeps prefixes)
    return a->j - b->j;
}

// Candidates sorted by decreasing a_{r,j}; returns their count.
static int candidates(const float *const *conf, const int *K, int R, cand *c) {
    int n = 0;
    for (int r = 0; r < R; r++) {
        float a = 1.0f;
        for (int j = 0; j < K[r]; j++) {
            a *= conf[r][j];
            c[n++] = (cand){a, r, j};
        }
    }
    qsort(c, (size_t)n, sizeof *c, cmp_cand);
    return n;
}

static void schedule(const float *const *conf, const int *K, int R, const ds_cost_table *t, int *ell, void *scratch,
                     int early_stop) {
    int total = 0;
    for (int r = 0; r < R; r++) total += K[r];
    cand *c = scratch ? scratch : malloc(sizeof(cand) * (size_t)(total ? total : 1));
    const int n = candidates(conf, K, R, c);
    for (int r = 0; r < R; r++) ell[r] = 0;
    int B = R;
    double tau = R;
    double best = tau * round_rate(t, B);
    int best_k = 0; // admissions in the best prefix (retrospective)
    for (int k = 0; k < n; k++) {
        // a_{r,j} is non-increasing in j, so sorted order admits each request's slots in order; a
        // tie across a request's own slots is broken by j, so ℓ_r stays a prefix.
        const double theta = (tau + c[k].a) * round_rate(t, B + 1);
        if (early_stop && theta <= best) break; // the first non-improvement ends the search
        tau += c[k].a;
        B += 1;
        if (early_stop) {
            ell[c[k].r] = c[k].j + 1;
            best = theta;
        } else if (theta > best) {
            best = theta;
            best_k = k + 1;
        }
    }
    if (!early_stop)
        for (int k = 0; k < best_k; k++) ell[c[k].r] = c[k].j + 1 > ell[c[k].r] ? c[k].j + 1 : ell[c[k].r];
    if (!scratch) free(c);
}

void ds_schedule_auto(const float *const *conf, const int *K, int R, const ds_cost_table *t, int *ell,
                      void *scratch) {
    schedule(conf, K, R, t, ell, scratch, 1);
}

void ds_schedule_retrospective(const float *const *conf, const int *K, int R, const ds_cost_table *t, int *ell,
                               void *scratch) {
    schedule(conf, K, R, t, ell, scratch, 0);
}

size_t ds_schedule_scratch_size(int n_candidates) { return sizeof(cand) * (size_t)(n_candidates > 0 ? n_candidates : 1); }

int ds_schedule_max_admissions(const ds_cost_table *t, int R, int cap) {
    int k = 0;
    while (k < cap && round_rate(t, R + k) / round_rate(t, R + k + 1) - 1.0 < 1.0 / R) k++;
    return k;
}

int ds_schedule_max_admissions_retrospective(const ds_cost_table *t, int R, int cap) {
    const double none = R * round_rate(t, R);
    int best = 0;
    for (int k = 1; k <= cap; k++)
        if ((R + k) * round_rate(t, R + k) > none) best = k;
    return best;
}

void ds_gate_init(ds_draft_gate *g, double cost_a, double cost_b, const float *const prior[DS_GATE_CLASSES],
                  const int n_prior[DS_GATE_CLASSES]) {
    memset(g, 0, sizeof *g);
    for (int c = 0; c < DS_GATE_CLASSES; c++) g->explore_every[c] = 64;
    if (cost_a >= 0 && cost_b >= 0 && cost_a + cost_b > 0) g->cost_a = cost_a, g->cost_b = cost_b;
    // Prefix survival A_k as counts: slot k is tried when slots < k were accepted (A_{k-1}) and
    // accepted when slots ≤ k were (A_k); 32 rounds' worth, so a few dozen real rounds outweigh it.
    for (int c = 0; c < DS_GATE_CLASSES; c++) {
        double prev = 1;
        for (int k = 0; prior && prior[c] && k < n_prior[c] && k < 64; k++) {
            double a = prior[c][k];
            if (!(a >= 0)) break; // NaN: not observed in calibration
            if (a > prev) a = prev;
            g->tried[c][k] = 32 * prev;
            g->acc[c][k] = 32 * a;
            prev = a;
        }
    }
}

double ds_gate_round_cost(const ds_draft_gate *g, int R) {
    const double obs = g->round_s[R < DS_GATE_MAX_R ? R : DS_GATE_MAX_R];
    if (obs > 0) return obs;
    if (g->cost_a + g->cost_b > 0) return g->cost_a + g->cost_b * R;
    return -1;
}

int ds_gate_depth(ds_draft_gate *g, const ds_cost_table *t, int R, int cap, int sampled) {
    const int c = sampled ? DS_GATE_SAMPLED : DS_GATE_GREEDY;
    const double *acc = g->acc[c], *tried = g->tried[c];
    if (cap > 64) cap = 64;
    if (!g->explore_every[c]) g->explore_every[c] = 64;
    if (cap <= 0 || R <= 0) return 0;
    const double D = ds_gate_round_cost(g, R);
    if (D < 0) return cap; // no drafting cost yet: draft once to measure it
    double none = R * ds_cost_sps(t, R);
    // If drafting could not pay even with every drafted token accepted, there is nothing to explore.
    double bound = 0;
    for (int k = 1; k <= cap; k++) {
        const double theta = R * (1.0 + k) / (D + 1.0 / ds_cost_sps(t, R * (1 + k)));
        bound = theta > bound ? theta : bound;
    }
    if (bound <= none) return 0;
    if (tried[0] < DS_GATE_MIN_TRIED) return cap; // too few rounds of this class to judge: explore
    if (g->skipped[c] >= g->explore_every[c]) { // explore again, and back off while it keeps losing
        g->skipped[c] = 0;
        if (g->explore_every[c] < 4096) g->explore_every[c] *= 2;
        return cap;
    }
    double best = 0, surv = 1, tau = 1;
    for (int k = 1; k <= cap; k++) {
        surv *= tried[k - 1] > 0 ? acc[k - 1] / tried[k - 1] : 0;
        tau += surv;
        const double theta = R * tau / (D + 1.0 / ds_cost_sps(t, R * (1 + k)));
        best = theta > best ? theta : best;
    }
    // What rounds realized at this R overrules the model, once drafted rounds were seen: their
    // tokens per second against plain rounds' (or R·SPS(R) until enough of those were seen).
    const int ri = R < DS_GATE_MAX_R ? R : DS_GATE_MAX_R;
    if (g->real_n[1][c][ri] >= DS_GATE_MIN_REALIZED) {
        const double plain = g->real_n[0][c][ri] >= DS_GATE_MIN_REALIZED ? g->real_tok[0][c][ri] / g->real_s[0][c][ri] : none;
        best = g->real_tok[1][c][ri] / g->real_s[1][c][ri];
        none = plain;
    }
    if (best > none) {
        g->explore_every[c] = 64;
        return cap;
    }
    g->skipped[c]++;
    return 0;
}

void ds_gate_observe_draft(ds_draft_gate *g, int R, double seconds) {
    if (R <= 0 || !(seconds >= 0)) return;
    double *o = &g->round_s[R < DS_GATE_MAX_R ? R : DS_GATE_MAX_R];
    *o = *o > 0 ? 0.9 * *o + 0.1 * seconds : seconds;
}

void ds_gate_observe_realized(ds_draft_gate *g, int R, int sampled, int drafted, int tokens, double seconds) {
    if (R <= 0 || tokens < 0 || !(seconds > 0)) return;
    const int c = sampled ? DS_GATE_SAMPLED : DS_GATE_GREEDY, ri = R < DS_GATE_MAX_R ? R : DS_GATE_MAX_R;
    const int k = drafted != 0;
    g->real_tok[k][c][ri] = 0.9 * g->real_tok[k][c][ri] + tokens; // a ratio of decayed sums
    g->real_s[k][c][ri] = 0.9 * g->real_s[k][c][ri] + seconds;
    g->real_n[k][c][ri] = 0.9 * g->real_n[k][c][ri] + 1;
}

void ds_gate_observe_round(ds_draft_gate *g, int ell, int accepted, int sampled, int drafted) {
    const int c = sampled ? DS_GATE_SAMPLED : DS_GATE_GREEDY;
    double *acc = g->acc[c], *tried = g->tried[c];
    if (ell <= 0) ell = drafted ? 1 : 0, accepted = 0; // drafted, nothing verified: nothing gained
    for (int k = 0; k < ell && k <= accepted && k < 64; k++) {
        acc[k] = 0.95 * acc[k] + (k < accepted);
        tried[k] = 0.95 * tried[k] + 1;
    }
}
