// Confidence-scheduled verification (src/sched/schedule.c, docs/formats/deepspec-checkpoint.md §8, Algorithm 1):
// hand-worked cases of ds_schedule_auto (flat and steep cost tables, the early stop, two requests
// interleaved by a_{r,j}, prefixes, requests without drafts), an independent reference
// implementation on random cases, and the DSpark paper's counterexample (same §8) as a statistical
// test: with the early stop the first emitted token is exactly target-distributed; the
// retrospective search (no early stop) emits (0.85, 0.15) instead of (0.7, 0.3). The MoE cost
// model: expected distinct experts from decoding windows, the step-time correction, observations
// brought back to the profile's routing, and the window counter.
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "dspark.h"
#include "model/moe.h"
#include "sched/schedule.h"
#include "speculate/verify.h"

// ---- cost tables ------------------------------------------------------------------------------

// SPS(B) = 1 for B = 1..bmax: B costs nothing, so every admission with a > 0 improves Θ = τ·SPS.
static ds_cost_table flat_table(int bmax) {
    ds_cost_table t;
    memset(&t, 0, sizeof t);
    t.bmax = bmax;
    for (int b = 1; b <= bmax; b++) t.sps[b] = 1.0;
    return t;
}

// SPS(B) = 1/B (step time proportional to tokens): Θ = τ/B, and admitting a <= 1 never improves
// (R + a)/(R + 1) over R/R.
static ds_cost_table steep_table(int bmax) {
    ds_cost_table t;
    memset(&t, 0, sizeof t);
    t.bmax = bmax;
    for (int b = 1; b <= bmax; b++) t.sps[b] = 1.0 / b;
    return t;
}

// From step times: sps[B] = 1 / step[B - 1].
static ds_cost_table table_from_steps(const double *step, int n) {
    ds_cost_table t;
    memset(&t, 0, sizeof t);
    t.bmax = n;
    for (int b = 1; b <= n; b++) t.sps[b] = 1.0 / step[b - 1];
    return t;
}

static void run_auto(const float *const *conf, const int *K, int R, const ds_cost_table *t, int *ell) {
    // Once with internal scratch and once with caller scratch, same answer. The caller's scratch
    // has 16 bytes per candidate, as the engine allocates (schedule.h says 8, but a candidate
    // {float a; int r, j;} takes 12).
    int total = 0;
    for (int r = 0; r < R; r++) total += K[r];
    void *scratch = malloc(16 * (size_t)(total > 0 ? total : 1));
    int *ell2 = malloc(sizeof(int) * (size_t)(R > 0 ? R : 1));
    assert_non_null(scratch);
    assert_non_null(ell2);
    ds_schedule_auto(conf, K, R, t, ell, NULL);
    ds_schedule_auto(conf, K, R, t, ell2, scratch);
    for (int r = 0; r < R; r++) assert_int_equal(ell[r], ell2[r]);
    free(scratch);
    free(ell2);
}

// ---- hand-worked cases ---------------------------------------------------------------------------

static void test_flat_table_admits_every_positive(void **state) {
    (void)state;
    const ds_cost_table t = flat_table(32);
    const float c0[3] = {0.9f, 0.5f, 0.2f}, c1[4] = {0.6f, 0.6f, 0.6f, 0.6f}, c2[3] = {0.9f, 0.0f, 0.5f},
                c3[2] = {0.01f, 0.01f};
    const float *conf[4] = {c0, c1, c2, c3};
    const int K[4] = {3, 4, 3, 2};
    int ell[4];
    run_auto(conf, K, 4, &t, ell);
    assert_int_equal(ell[0], 3);
    assert_int_equal(ell[1], 4);
    // a = (0.9, 0, 0): the zero does not improve Θ; the search stops there (it is sorted last).
    assert_int_equal(ell[2], 1);
    assert_int_equal(ell[3], 2); // a = 1e-4: tiny but positive
}

static void test_steep_table_admits_nothing(void **state) {
    (void)state;
    const ds_cost_table t = steep_table(64);
    const float c0[7] = {0.99f, 0.99f, 0.99f, 0.99f, 0.99f, 0.99f, 0.99f}, c1[7] = {1, 1, 1, 1, 1, 1, 1};
    const float *conf[2] = {c0, c1};
    const int K[2] = {7, 7};
    int ell[2] = {-1, -1};
    run_auto(conf, K, 2, &t, ell);
    assert_int_equal(ell[0], 0);
    assert_int_equal(ell[1], 0); // a = 1 leaves Θ equal: not an improvement
    // The same with one request.
    run_auto(conf, K, 1, &t, ell);
    assert_int_equal(ell[0], 0);
}

// The DSpark paper's counterexample: a_1 = 0.8, a_2 = 0.72, SPS(1, 2, 3) = (1.0, 0.5, 0.45).
// Θ: ℓ=0 -> 1.0; ℓ=1 -> 1.8·0.5 = 0.9 (a drop); ℓ=2 -> 2.52·0.45 = 1.134 (better than 1.0).
// The early stop ends at the drop (ℓ = 0); the retrospective search finds ℓ = 2.
static void test_early_stop_at_first_non_improvement(void **state) {
    (void)state;
    const double steps[3] = {1.0, 2.0, 1.0 / 0.45};
    const ds_cost_table t = table_from_steps(steps, 3);
    const float c[2] = {0.8f, 0.9f};
    const float *conf[1] = {c};
    const int K[1] = {2};
    int ell[1] = {-1};
    run_auto(conf, K, 1, &t, ell);
    assert_int_equal(ell[0], 0);
    ds_schedule_retrospective(conf, K, 1, &t, ell, NULL);
    assert_int_equal(ell[0], 2);
    // With c_2 = 0 (the first draft was token 1) both stop at 0.
    const float z[2] = {0.8f, 0.0f};
    conf[0] = z;
    run_auto(conf, K, 1, &t, ell);
    assert_int_equal(ell[0], 0);
    ds_schedule_retrospective(conf, K, 1, &t, ell, NULL);
    assert_int_equal(ell[0], 0);
    // Equality is not an improvement either: c_1 = 1 and SPS(2) = 0.5 make Θ(ℓ=1) = 2·0.5 = 1.0 =
    // Θ(ℓ=0) exactly, so the search stops although SPS(3) = 1 would give Θ(ℓ=2) = 2.9.
    const double eq[3] = {1.0, 2.0, 1.0};
    const ds_cost_table te = table_from_steps(eq, 3);
    const float one[2] = {1.0f, 0.9f};
    conf[0] = one;
    run_auto(conf, K, 1, &te, ell);
    assert_int_equal(ell[0], 0);
    ds_schedule_retrospective(conf, K, 1, &te, ell, NULL);
    assert_int_equal(ell[0], 2);
}

// Two requests, candidates admitted by a_{r,j} across requests, not request by request:
//   r0: c = (0.9, 0.5, 0.5) -> a = 0.9, 0.45, 0.225
//   r1: c = (0.8, 0.8, 0.8) -> a = 0.8, 0.64, 0.512
// Order: 0.9 (r0), 0.8 (r1), 0.64 (r1), 0.512 (r1), 0.45 (r0), 0.225 (r0).
// Step time t(B) = 1 + 0.1 (B − 2) for B = 2..6, then 1.6: Θ = 2, 2.636, 3.083, 3.338, 3.466,
// then 5.302/1.6 = 3.314 (a drop: stop). Four admissions: ℓ = (1, 3).
static void test_two_requests_interleaved(void **state) {
    (void)state;
    const double steps[8] = {1.0, 1.0, 1.1, 1.2, 1.3, 1.4, 1.6, 1.6};
    const ds_cost_table t = table_from_steps(steps, 8);
    const float c0[3] = {0.9f, 0.5f, 0.5f}, c1[3] = {0.8f, 0.8f, 0.8f};
    const float *conf[2] = {c0, c1};
    const int K[2] = {3, 3};
    int ell[2];
    run_auto(conf, K, 2, &t, ell);
    assert_int_equal(ell[0], 1);
    assert_int_equal(ell[1], 3);
    // Swapping the requests swaps the answer.
    const float *sw[2] = {c1, c0};
    run_auto(sw, K, 2, &t, ell);
    assert_int_equal(ell[0], 3);
    assert_int_equal(ell[1], 1);
    // One step cheaper at B = 7 (t = 1.5: Θ = 3.535 > 3.466) admits the fifth, r0's second slot;
    // t(8) = 1.62 then drops (5.527/1.62 = 3.412).
    const double steps2[8] = {1.0, 1.0, 1.1, 1.2, 1.3, 1.4, 1.5, 1.62};
    const ds_cost_table t2 = table_from_steps(steps2, 8);
    run_auto(conf, K, 2, &t2, ell);
    assert_int_equal(ell[0], 2);
    assert_int_equal(ell[1], 3);
}

// Requests without drafted slots (K = 0) keep ℓ = 0 but still count in B (each verifies its anchor).
static void test_requests_without_drafts(void **state) {
    (void)state;
    const float c1[3] = {0.9f, 0.9f, 0.9f};
    const float *conf[3] = {NULL, c1, NULL};
    const int K[3] = {0, 3, 0};
    int ell[3] = {-1, -1, -1};
    const ds_cost_table flat = flat_table(16);
    run_auto(conf, K, 3, &flat, ell);
    assert_int_equal(ell[0], 0);
    assert_int_equal(ell[1], 3);
    assert_int_equal(ell[2], 0);
    // B starts at 3, not 1: step time 1 up to B = 4, then 2. With B counted from 3, the first
    // admission (B = 4, Θ = 3.9) improves on 3.0 and the second (B = 5: 4.71/2) does not: ℓ = 1.
    // Counting from B = 1 would have admitted all three.
    const double steps[8] = {1, 1, 1, 1, 2, 2, 2, 2};
    const ds_cost_table t = table_from_steps(steps, 8);
    run_auto(conf, K, 3, &t, ell);
    assert_int_equal(ell[0], 0);
    assert_int_equal(ell[1], 1);
    assert_int_equal(ell[2], 0);
    // Nobody drafted: everything 0, no candidates at all.
    const int K0[3] = {0, 0, 0};
    ell[0] = ell[1] = ell[2] = -1;
    run_auto(conf, K0, 3, &t, ell);
    assert_int_equal(ell[0] + ell[1] + ell[2], 0);
    ds_schedule_retrospective(conf, K0, 3, &t, ell, NULL);
    assert_int_equal(ell[0] + ell[1] + ell[2], 0);
}

// ---- an independent reference on random cases ----------------------------------------------------

static uint64_t xs = 0x243f6a8885a308d3ULL;
static double urand(void) {
    xs ^= xs << 13;
    xs ^= xs >> 7;
    xs ^= xs << 17;
    return (double)(xs >> 11) * (1.0 / 9007199254740992.0);
}

// Algorithm 1 written out directly: repeatedly pick the not-yet-admitted (r, j) with the largest
// a_{r,j} (ties: lower r, then lower j), admit it if Θ strictly improves, else stop. Checks along
// the way that every admitted slot extends its request's prefix.
static void reference_auto(const float *const *conf, const int *K, int R, const ds_cost_table *t, int *ell) {
    enum { MAXR = 16, MAXK = 8 };
    float a[MAXR][MAXK];
    int taken[MAXR][MAXK];
    memset(taken, 0, sizeof taken);
    for (int r = 0; r < R; r++) {
        float p = 1.0f;
        for (int j = 0; j < K[r]; j++) a[r][j] = p *= conf[r][j];
        ell[r] = 0;
    }
    int B = R;
    double tau = R, best = tau * ds_cost_sps(t, B);
    for (;;) {
        int br = -1, bj = -1;
        for (int r = 0; r < R; r++)
            for (int j = 0; j < K[r]; j++)
                if (!taken[r][j] && (br < 0 || a[r][j] > a[br][bj])) br = r, bj = j;
        if (br < 0) break;
        const double theta = (tau + a[br][bj]) * ds_cost_sps(t, B + 1);
        if (!(theta > best)) break;
        assert_int_equal(bj, ell[br]); // the admitted slot is the next one of its request
        taken[br][bj] = 1;
        ell[br] = bj + 1;
        tau += a[br][bj];
        B++;
        best = theta;
    }
}

static void test_matches_reference_and_prefixes(void **state) {
    (void)state;
    enum { CASES = 3000 };
    float conf[16][8];
    const float *cp[16];
    int K[16], ell[16], ref[16];
    for (int c = 0; c < CASES; c++) {
        const int R = 1 + (int)(urand() * 16);
        for (int r = 0; r < R; r++) {
            K[r] = (int)(urand() * 8); // 0..7
            for (int j = 0; j < K[r]; j++) {
                const double u = urand();
                // Some exact 1s and 0s (ties between a request's own slots, dead prefixes).
                conf[r][j] = u < 0.1 ? 1.0f : u < 0.15 ? 0.0f : (float)urand();
            }
            cp[r] = conf[r];
        }
        // A decode-like table: flat-ish up to a knee, then throughput-bound; random knee and slope.
        ds_cost_table t;
        memset(&t, 0, sizeof t);
        t.bmax = 128;
        const double knee = 1 + urand() * 40, slope = 0.002 + urand() * 0.05;
        for (int b = 1; b <= t.bmax; b++) t.sps[b] = 1.0 / (1.0 + slope * b + (b > knee ? (b - knee) / knee : 0));
        run_auto(cp, K, R, &t, ell);
        reference_auto(cp, K, R, &t, ref);
        for (int r = 0; r < R; r++) {
            assert_int_equal(ell[r], ref[r]);
            assert_true(ell[r] >= 0 && ell[r] <= K[r]);
        }
        // Prefix consistency with the order: every admitted a is >= every a left out (ties aside).
        float lo = 2, hi = -1;
        for (int r = 0; r < R; r++) {
            float a = 1;
            for (int j = 0; j < K[r]; j++) {
                a *= conf[r][j];
                if (j < ell[r]) lo = a < lo ? a : lo;
                else hi = a > hi ? a : hi;
            }
        }
        assert_true(lo >= hi);
        // The retrospective search never ends with a lower Θ than the early stop.
        int ret[16];
        ds_schedule_retrospective(cp, K, R, &t, ret, NULL);
        double ta = R, tr = R;
        int ba = R, br = R;
        for (int r = 0; r < R; r++) {
            float a = 1;
            for (int j = 0; j < K[r]; j++) {
                a *= conf[r][j];
                if (j < ell[r]) ta += a, ba++;
                if (j < ret[r]) tr += a, br++;
            }
            assert_true(ret[r] >= ell[r]);
        }
        assert_true(tr * ds_cost_sps(&t, br) >= ta * ds_cost_sps(&t, ba) * (1 - 1e-12));
        // Drafting no deeper than the retrospective search's bound (what the engine drafts under
        // greedy and coupled decoding) leaves its answer unchanged.
        const int cap = ds_schedule_max_admissions_retrospective(&t, R, 7);
        int Kc[16], retc[16];
        for (int r = 0; r < R; r++) Kc[r] = K[r] < cap ? K[r] : cap;
        ds_schedule_retrospective(cp, Kc, R, &t, retc, NULL);
        for (int r = 0; r < R; r++) assert_int_equal(retc[r], ret[r]);
    }
}

// The retrospective search's depth bound: the largest k with (R + k)·SPS(R + k) > R·SPS(R).
// Step times 1, 2.0, 2.1, 2.2, 2.3, 2.4, 2.5, 5.0 (B = 1..8; past 8 the table keeps B·SPS(B) = 1.6).
// R = 1: (1 + k)/t(1 + k) = 1 (not above 1), 1.43, 1.82, 2.17, 2.5, 2.8, 1.6, then 1.6 for k = 1..: up
// to the cap. The early stop's bound (ds_schedule_max_admissions) is 0 there: t(2) = 2·t(1), so no
// first admission can improve Θ. R = 4 (4/2.2 = 1.82): 5/2.3, 6/2.4, 7/2.5 = 2.17, 2.5, 2.8, then
// 1.6: 3, as the early stop's.
static void test_max_admissions_retrospective(void **state) {
    (void)state;
    const double steps[8] = {1.0, 2.0, 2.1, 2.2, 2.3, 2.4, 2.5, 5.0};
    const ds_cost_table t = table_from_steps(steps, 8);
    assert_int_equal(ds_schedule_max_admissions_retrospective(&t, 1, 7), 7);
    assert_int_equal(ds_schedule_max_admissions_retrospective(&t, 1, 3), 3);
    assert_int_equal(ds_schedule_max_admissions(&t, 1, 7), 0);
    assert_int_equal(ds_schedule_max_admissions_retrospective(&t, 4, 7), 3);
    assert_int_equal(ds_schedule_max_admissions(&t, 4, 7), 3);
    const ds_cost_table st = steep_table(16);
    assert_int_equal(ds_schedule_max_admissions_retrospective(&st, 1, 7), 0); // (1 + k)·1/(1 + k) = 1: never above
}

// ---- the counterexample as a statistical test --------------------------------------------------------

// V = 2; target p = (0.7, 0.3) at every position; draft q = (0.5, 0.5); R = 1, γ = 2;
// c_1 = 0.8, c_2 = 0.9 if d_0 = 0 else 0; SPS(1, 2, 3) = (1.0, 0.5, 0.45) (or another table).
// One round: draft d_0, d_1 ~ q, schedule, verify the first ℓ at temperature 1. Emits the accepted
// drafts then `next`. Returns how many tokens were emitted (written to out, up to 3).
typedef void (*sched_fn)(const float *const *, const int *, int, const ds_cost_table *, int *, void *);

typedef struct {
    float p_logits[3 * 2], q_logits[2 * 2];
    float p[2], q[2];
    void *sscratch;
    ds_verify_scratch vs;
    ds_sampler_params sp;
} cx_ctx;

static void cx_init(cx_ctx *c) {
    for (int k = 0; k < 3; k++) {
        c->p_logits[2 * k] = logf(0.7f);
        c->p_logits[2 * k + 1] = logf(0.3f);
    }
    for (int i = 0; i < 4; i++) c->q_logits[i] = logf(0.5f);
    c->sscratch = malloc(ds_sampler_scratch_size(2));
    assert_non_null(c->sscratch);
    c->vs = (ds_verify_scratch){.p = c->p, .q = c->q, .sscratch = c->sscratch};
    c->sp = ds_sampler_default();
    c->sp.temperature = 1.0f;
    c->sp.verify = DS_VERIFY_RESIDUAL; // drafts drawn from q's own stream, as that rule takes them
}

static int cx_round(cx_ctx *c, sched_fn schedule, const ds_cost_table *t, ds_rng *rng, int32_t *out) {
    const float qd[2] = {0.5f, 0.5f};
    int32_t d[2];
    d[0] = ds_sample_probs(qd, 2, rng);
    d[1] = ds_sample_probs(qd, 2, rng);
    const float conf[2] = {0.8f, d[0] == 0 ? 0.9f : 0.0f};
    const float *cp[1] = {conf};
    const int K[1] = {2};
    int ell[1];
    schedule(cp, K, 1, t, ell, NULL);
    int a;
    int32_t next;
    assert_int_equal(ds_verify(&c->sp, 2, ell[0], d, c->p_logits, c->q_logits, NULL, 0, rng, 0, &c->vs, &a, &next), DS_OK);
    assert_true(a >= 0 && a <= ell[0]);
    for (int k = 0; k < a; k++) out[k] = d[k];
    out[a] = next;
    return a + 1;
}

// P̂(first emitted token = 0) over n independent rounds.
static double cx_first_zero(sched_fn schedule, const ds_cost_table *t, int n, uint64_t seed) {
    cx_ctx c;
    cx_init(&c);
    ds_rng rng = ds_rng_init(seed, 0);
    long zeros = 0;
    for (int i = 0; i < n; i++) {
        int32_t out[3];
        cx_round(&c, schedule, t, &rng, out);
        zeros += out[0] == 0;
    }
    free(c.sscratch);
    return (double)zeros / n;
}

static const double cx_steps[3] = {1.0, 2.0, 1.0 / 0.45}; // SPS(1, 2, 3) = (1.0, 0.5, 0.45)
enum { CX_N = 200000 };

static void test_counterexample_auto_is_exact(void **state) {
    (void)state;
    const ds_cost_table t = table_from_steps(cx_steps, 3);
    const double p = cx_first_zero(ds_schedule_auto, &t, CX_N, 12345);
    const double se = sqrt(0.7 * 0.3 / CX_N);
    print_message("auto: P(first = 0) = %.5f (exact 0.7, 6 SE = %.5f)\n", p, 6 * se);
    if (fabs(p - 0.7) >= 6 * se) fail_msg("auto: P(first = 0) = %.5f, expected 0.7 +- %.5f", p, 6 * se);
}

// The retrospective search lets d_0 decide its own verification (through c_2): when d_0 = 0
// (prob. 0.5) it verifies ℓ = 2 and accepts d_0 surely (p/q = 1.4); when d_0 = 1 it verifies
// nothing and samples from p. P(first = 0) = 0.5 + 0.5·0.7 = 0.85. This test asserting the bias
// documents that the losslessness test above CAN fail: it is not vacuous.
static void test_counterexample_retrospective_is_biased(void **state) {
    (void)state;
    const ds_cost_table t = table_from_steps(cx_steps, 3);
    const double p = cx_first_zero(ds_schedule_retrospective, &t, CX_N, 12345);
    print_message("retrospective: P(first = 0) = %.5f (biased: 0.85)\n", p);
    if (!(fabs(p - 0.85) < 0.01)) fail_msg("retrospective: P(first = 0) = %.5f, expected about 0.85", p);
    if (!(fabs(p - 0.7) > 0.1)) fail_msg("retrospective: P(first = 0) = %.5f is not biased away from 0.7", p);
}

// Under the coupled rule the committed tokens are the target's own draws (ds_sample_coupled at each
// position), whatever was verified: the engine may then search past drops (schedule.h). On the
// counterexample, drafts drawn with the same noise on q, rounds until three tokens are out: with the
// retrospective search, the tokens equal the ones plain decoding draws (ℓ = 0 every round) for every
// seed, while drafts are really verified and accepted. Under the residual rule the same search is
// biased (above): this is what the engine's choice between the two rests on.
static void test_counterexample_coupled_retrospective_is_exact(void **state) {
    (void)state;
    cx_ctx c;
    cx_init(&c);
    c.sp.verify = DS_VERIFY_COUPLED;
    const ds_cost_table t = table_from_steps(cx_steps, 3);
    const float pd[2] = {0.7f, 0.3f}, qd[2] = {0.5f, 0.5f};
    long verified = 0, accepted = 0, differ_from_draft = 0;
    for (uint64_t seed = 0; seed < 20000; seed++) {
        const ds_rng rng = ds_rng_init(seed, 0);
        int32_t plain[3], out[5];
        for (int k = 0; k < 3; k++) plain[k] = ds_sample_coupled(pd, 2, &rng, k);
        int have = 0;
        while (have < 3) {
            int32_t d[2];
            for (int k = 0; k < 2; k++) d[k] = ds_sample_coupled(qd, 2, &rng, have + k);
            const float conf[2] = {0.8f, d[0] == 0 ? 0.9f : 0.0f};
            const float *cp[1] = {conf};
            const int K[1] = {2};
            int ell[1], a;
            int32_t next;
            ds_schedule_retrospective(cp, K, 1, &t, ell, NULL);
            ds_rng r = rng;
            assert_int_equal(ds_verify(&c.sp, 2, ell[0], d, c.p_logits, c.q_logits, NULL, 0, &r, have, &c.vs, &a, &next),
                             DS_OK);
            verified += ell[0], accepted += a;
            for (int k = 0; k < a; k++) out[have++] = d[k];
            out[have++] = next;
        }
        for (int k = 0; k < 3; k++) {
            differ_from_draft += out[k] != plain[k];
            if (out[k] != plain[k])
                fail_msg("seed %llu: token %d is %d, plain decoding draws %d", (unsigned long long)seed, k, out[k], plain[k]);
        }
    }
    print_message("coupled + retrospective: %ld slots verified, %ld accepted, all tokens as plain decoding\n", verified,
                  accepted);
    assert_int_equal(differ_from_draft, 0);
    assert_true(verified > 10000 && accepted > 5000); // the search really verified drafts, past drops too
    free(c.sscratch);
}

// The joint of the first two emitted tokens (rounds continue until two are out) against the exact
// (0.7, 0.3)⊗(0.7, 0.3); chi-square with 3 degrees of freedom.
static double cx_joint_chi2(sched_fn schedule, const ds_cost_table *t, int n, uint64_t seed, long *rounds_with_drafts) {
    cx_ctx c;
    cx_init(&c);
    ds_rng rng = ds_rng_init(seed, 0);
    long count[4] = {0};
    *rounds_with_drafts = 0;
    for (int i = 0; i < n; i++) {
        int32_t first2[2], out[3];
        int have = 0;
        while (have < 2) {
            const int e = cx_round(&c, schedule, t, &rng, out);
            *rounds_with_drafts += e > 1;
            for (int k = 0; k < e && have < 2; k++) first2[have++] = out[k];
        }
        count[2 * first2[0] + first2[1]]++;
    }
    free(c.sscratch);
    const double pr[4] = {0.49, 0.21, 0.21, 0.09};
    double chi2 = 0;
    for (int k = 0; k < 4; k++) {
        const double e = pr[k] * n;
        chi2 += (count[k] - e) * (count[k] - e) / e;
    }
    return chi2;
}

static void test_counterexample_joint_chi_square(void **state) {
    (void)state;
    // chi-square(3) exceeds 30 with probability about 1.4e-6.
    const double crit = 30.0;
    long multi;
    const ds_cost_table t = table_from_steps(cx_steps, 3);
    double chi2 = cx_joint_chi2(ds_schedule_auto, &t, CX_N, 777, &multi);
    print_message("joint chi-square (df 3): auto %.2f", chi2);
    if (chi2 > crit) fail_msg("auto (counterexample table): chi-square %.2f > %.1f", chi2, crit);
    // A flat table makes auto verify drafts, with ℓ depending on d_0 through c_2 (ℓ = 2 after a 0,
    // ℓ = 1 after a 1): still exact, because d_0's own admission never depended on d_0.
    const ds_cost_table flat = flat_table(8);
    chi2 = cx_joint_chi2(ds_schedule_auto, &flat, CX_N, 778, &multi);
    print_message(", auto on a flat table %.2f", chi2);
    assert_true(multi > CX_N / 2); // drafts were really accepted
    if (chi2 > crit) fail_msg("auto (flat table): chi-square %.2f > %.1f", chi2, crit);
    // The retrospective search on the counterexample table fails the same test by far.
    chi2 = cx_joint_chi2(ds_schedule_retrospective, &t, CX_N, 779, &multi);
    print_message(", retrospective %.1f\n", chi2);
    if (!(chi2 > 100 * crit)) fail_msg("retrospective: chi-square %.2f is not far above %.1f", chi2, crit);
}

// ---- mixture-of-experts cost model --------------------------------------------------------------

// 2 MoE layers of 8 experts; SPS 100 at every B (10 ms steps), profiled with 6 distinct experts per
// layer at B = 4 and 8 at B = 12; one expert pass costs 1 ms.
static ds_cost_table moe_table(void) {
    ds_cost_table t = flat_table(16);
    for (int b = 1; b <= 16; b++) t.sps[b] = 100.0;
    t.moe_layers = 2, t.n_experts = 8, t.expert_s = 0.001;
    t.prof_experts[4] = 6, t.prof_experts[12] = 8;
    return t;
}

static void test_moe_expected_experts(void **state) {
    (void)state;
    ds_cost_table t = moe_table();
    assert_true(ds_cost_experts(&t, 4) == 0); // nothing observed yet
    t.obs_experts[4] = 5, t.obs_experts[6] = 4;
    assert_float_equal(ds_cost_experts(&t, 4), 5.0, 1e-12);              // one sequence, window of 4
    assert_float_equal(ds_cost_experts(&t, 12), 8.0 * (1 - 0.5 * 0.5), 1e-9); // two sequences of 6 rows
    t.moe_layers = 0;
    assert_true(ds_cost_experts(&t, 4) == 0); // dense target
}

// ds_cost_observe on a dense target: the step time 1/SPS(B) moves 1/5 of the way to each observed
// forward (an average of step times, not of rates; the observation clipped to [0.5, 2] steps first),
// only at B = 1..bmax with a profiled entry, and nonsense observations (0, negative, NaN, infinite)
// change nothing.
static void test_cost_observe_dense(void **state) {
    (void)state;
    ds_cost_table t = {.bmax = 4};
    for (int B = 1; B <= 4; B++) t.sps[B] = 100.0 / B;
    double step = 0.01; // 1 / sps[1]
    const double obs[] = {0.02, 0.02, 0.005, 0.011, 0.5}; // (0.005 and 0.5: clipped)
    for (int i = 0; i < 5; i++) {
        ds_cost_observe(&t, 1, obs[i]);
        const double o = obs[i] > 2 * step ? 2 * step : obs[i] < 0.5 * step ? 0.5 * step : obs[i];
        step = 0.8 * step + 0.2 * o;
        assert_float_equal(1.0 / t.sps[1], step, 1e-12);
    }
    const ds_cost_table before = t;
    ds_cost_observe(&t, 0, 0.01);
    ds_cost_observe(&t, 5, 0.01);        // past bmax: extrapolated, not stored
    ds_cost_observe(&t, 2, 0.0);
    ds_cost_observe(&t, 2, -1.0);
    ds_cost_observe(&t, 2, 0.0 / 0.0);
    ds_cost_observe(&t, 2, 1.0 / 0.0);
    assert_memory_equal(&t, &before, sizeof t);
    t.sps[3] = 0; // never profiled
    ds_cost_observe(&t, 3, 0.01);
    assert_true(t.sps[3] == 0);
    assert_float_equal(ds_cost_sps(&t, 2), 50.0, 1e-9); // the other entries are untouched
}

static void test_moe_sps_correction(void **state) {
    (void)state;
    ds_cost_table t = moe_table();
    assert_float_equal(ds_cost_sps(&t, 4), 100.0, 1e-9); // no routing statistics: the profile as measured
    t.obs_experts[4] = 5;                                // decoding routes 4 rows to 5 experts, not 6
    assert_float_equal(ds_cost_sps(&t, 4), 1.0 / (0.010 - 2 * 0.001), 1e-6);
    t.obs_experts[4] = 8;                                // ... or to 8: verification costs more
    assert_float_equal(ds_cost_sps(&t, 4), 1.0 / (0.010 + 2 * 0.002), 1e-6);
    assert_float_equal(ds_cost_sps(&t, 3), 100.0, 1e-9); // no profiled count at B = 3: unchanged
    // An observation that agrees with the model leaves the profiled entry where it was.
    ds_cost_observe(&t, 4, 0.014);
    assert_float_equal(t.sps[4], 100.0, 1e-9);
    ds_cost_observe(&t, 4, 0.024); // 10 ms slower than predicted: the profiled step moves by 1/5 of it
    assert_float_equal(1.0 / t.sps[4], 0.010 + 0.2 * 0.010, 1e-9);
}

static void test_moe_window_distinct(void **state) {
    (void)state;
    int ring[DS_MOE_WINDOW * 2], mark[8] = {0};
    const int rows[20][2] = {{0, 1}, {1, 2}, {2, 3}, {3, 0}, {4, 5}, {5, 6}, {6, 7}, {7, 4}, {0, 1}, {1, 2},
                             {2, 3}, {3, 0}, {4, 5}, {5, 6}, {6, 7}, {7, 4}, {0, 1}, {0, 1}, {0, 1}, {0, 1}};
    for (int i = 0; i < 20; i++) memcpy(ring + (i % DS_MOE_WINDOW) * 2, rows[i], sizeof rows[i]);
    int stamp = 0;
    assert_int_equal(ds_moe_window_distinct(ring, 20, 2, 1, mark, ++stamp), 2);
    assert_int_equal(ds_moe_window_distinct(ring, 20, 2, 4, mark, ++stamp), 2);  // four rows of {0, 1}
    assert_int_equal(ds_moe_window_distinct(ring, 20, 2, 6, mark, ++stamp), 5);  // + {6, 7}, {7, 4}
    assert_int_equal(ds_moe_window_distinct(ring, 20, 2, 16, mark, ++stamp), 8); // the ring's oldest row is 4
    assert_int_equal(ds_moe_window_distinct(ring, 8, 2, 3, mark, ++stamp), 4);   // rows 5..7: {5,6,7,4}
}

// A round's drafting priced with its verification (ds_cost_table.round_s): R = 1, t(1) = 1 s,
// t(2) = 2.5 s, slot 1 survives with a = 0.9. Verification alone: Θ(ℓ = 0) = 1 against
// Θ(ℓ = 1) = 1.9 / 2.5 = 0.76, so nothing is admitted (and the early stop's bound is 0: 2.5 / 1 − 1
// ≥ 1/R). With 2 s of drafting already in every round: 1 / 3 = 0.33 against 1.9 / 4.5 = 0.42, so
// slot 1 is admitted, by both searches, and the bound lets it be drafted ((2 + 2.5) / (2 + 1) − 1 =
// 0.5 < 1).
static void test_round_cost_lengthens_the_schedule(void **state) {
    const double steps[2] = {1.0, 2.5};
    ds_cost_table t = table_from_steps(steps, 2);
    const float c[1] = {0.9f};
    const float *conf[1] = {c};
    const int K[1] = {1};
    int ell[1];
    for (int with_round = 0; with_round < 2; with_round++) {
        t.round_s = with_round ? 2.0 : 0.0;
        run_auto(conf, K, 1, &t, ell);
        assert_int_equal(ell[0], with_round);
        ds_schedule_retrospective(conf, K, 1, &t, ell, NULL);
        assert_int_equal(ell[0], with_round);
        assert_int_equal(ds_schedule_max_admissions(&t, 1, 1), with_round);
        assert_int_equal(ds_schedule_max_admissions_retrospective(&t, 1, 1), with_round);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_flat_table_admits_every_positive),
        cmocka_unit_test(test_steep_table_admits_nothing),
        cmocka_unit_test(test_early_stop_at_first_non_improvement),
        cmocka_unit_test(test_two_requests_interleaved),
        cmocka_unit_test(test_requests_without_drafts),
        cmocka_unit_test(test_matches_reference_and_prefixes),
        cmocka_unit_test(test_counterexample_auto_is_exact),
        cmocka_unit_test(test_counterexample_retrospective_is_biased),
        cmocka_unit_test(test_counterexample_coupled_retrospective_is_exact),
        cmocka_unit_test(test_max_admissions_retrospective),
        cmocka_unit_test(test_counterexample_joint_chi_square),
        cmocka_unit_test(test_moe_expected_experts),
        cmocka_unit_test(test_moe_sps_correction),
        cmocka_unit_test(test_cost_observe_dense),
        cmocka_unit_test(test_moe_window_distinct),
        cmocka_unit_test(test_round_cost_lengthens_the_schedule),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
