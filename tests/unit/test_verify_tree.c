// Token-tree verification (ds_verify_tree) is exact: on a 6-token vocabulary where the drafter's q is
// far from the target's p, a tree whose root has the chain's child (drawn from q) and two
// deterministic alternatives, each with children of its own, commits a first token distributed as p
// and, after a tree token, a second distributed as p given the first (chi-square over 200,000 trials
// per rule, fixed seeds, so it passes deterministically; critical values at p = 1e-6). Greedy and
// coupled verification descend to the child that holds the target's own token.
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "speculate/verify.h"

enum { V = 6, N = 7, TRIALS = 200000 };
// p after the root; p after each first token (row r's logits are p given its path)
static const float P1[V] = {0.2f, -1.0f, 0.5f, 1.4f, 0.9f, -0.3f};
static const float Q1[V] = {2.5f, 1.0f, -1.0f, 0.0f, -2.0f, 0.3f}; // q's mass mostly on 0 and 1
static float P2[V][V], Q2[V][V];

static void softmax(const float *l, float *p) {
    float mx = l[0], z = 0;
    for (int i = 1; i < V; i++) mx = l[i] > mx ? l[i] : mx;
    for (int i = 0; i < V; i++) z += (p[i] = expf(l[i] - mx));
    for (int i = 0; i < V; i++) p[i] /= z;
}

static int32_t draw(const float *l, ds_rng *r) {
    float p[V];
    softmax(l, p);
    double u = ds_rng_uniform(r), c = 0;
    for (int i = 0; i < V; i++)
        if (u < (c += p[i])) return i;
    return V - 1;
}

// Chi-square upper critical value at p = 1e-6 for df degrees of freedom (Wilson-Hilferty).
static double chi2_crit(int df) {
    const double z = 4.753, a = 2.0 / (9.0 * df);
    return df * pow(1 - a + z * sqrt(a), 3);
}

static void check(const double *count, const float *p, double n) {
    double chi = 0;
    int df = -1;
    for (int i = 0; i < V; i++) {
        const double e = p[i] * n;
        if (e < 5) continue;
        chi += (count[i] - e) * (count[i] - e) / e;
        df++;
    }
    assert_true(df > 0);
    if (chi > chi2_crit(df)) fail_msg("chi-square %.1f > %.1f (df %d)", chi, chi2_crit(df), df);
}

// One trial per seed: rows 0 root; 1 the chain's first token (drawn from q), 2 and 3 alternatives
// 3 and 4 (deterministic), 4 row 1's child (drawn from q), 5 row 2's child, 6 row 3's child.
static void run(ds_verify_rule rule) {
    ds_sampler_params sp = ds_sampler_default();
    sp.temperature = 1;
    sp.verify = rule;
    float pl[N * V], ql[N * V], ps[V], tmp[V];
    char scratch[1 << 16];
    assert_true(ds_sampler_scratch_size(V) <= sizeof scratch);
    ds_verify_scratch sc = {.p = ps, .q = tmp, .sscratch = scratch};
    double c1[V] = {0}, c2[V][V] = {{0}}, n2[V] = {0};
    for (long t = 0; t < TRIALS; t++) {
        ds_rng dr = ds_rng_init(1000 + t, 7), vr = ds_rng_init(5000000 + t, 0);
        int32_t tok[N], par[N] = {-1, 0, 0, 0, 1, 2, 3};
        int q_row[N] = {-1, 0, -1, -1, 1, -1, -1};
        tok[0] = -1;
        tok[1] = draw(Q1, &dr);
        tok[2] = tok[1] == 3 ? 2 : 3;
        tok[3] = 4;
        memcpy(ql, Q1, sizeof Q1);
        memcpy(ql + V, Q2[tok[1]], sizeof Q1);
        tok[4] = draw(Q2[tok[1]], &dr); // the chain's second slot, drawn from q given its first
        tok[5] = (int32_t)((tok[2] + 1) % V);
        tok[6] = 0;
        memcpy(pl, P1, sizeof P1);
        for (int r = 1; r < N; r++) memcpy(pl + r * V, P2[tok[r]], sizeof P1); // (rows 4-6: unused depth 2)
        int path[N], a;
        int32_t next;
        assert_int_equal(ds_verify_tree(&sp, V, N, tok, par, q_row, pl, ql, NULL, 0, &vr, 0, &sc, path, &a, &next),
                         DS_OK);
        const int32_t t1 = a ? tok[path[0]] : next;
        c1[t1]++;
        if (a) {
            const int32_t t2 = a >= 2 ? tok[path[1]] : next;
            c2[t1][t2]++;
            n2[t1]++;
        }
    }
    float p1[V];
    softmax(P1, p1);
    check(c1, p1, TRIALS);
    for (int t1 = 0; t1 < V; t1++) {
        if (n2[t1] < 1000) continue;
        float p2[V];
        softmax(P2[t1], p2);
        check(c2[t1], p2, n2[t1]);
    }
}

static void test_residual_exact(void **state) {
    (void)state;
    run(DS_VERIFY_RESIDUAL);
}

static void test_coupled_exact(void **state) {
    (void)state;
    run(DS_VERIFY_COUPLED);
}

// Greedy and coupled: the path is the target's own tokens wherever the tree holds them.
static void test_follows_target(void **state) {
    (void)state;
    ds_sampler_params sp = ds_sampler_default(); // greedy
    float ps[V], tmp[V], pl[N * V];
    char scratch[1 << 16];
    ds_verify_scratch sc = {.p = ps, .q = tmp, .sscratch = scratch};
    // argmax after the root is 3 (row 2, an alternative); after 3 it is 5 (row 5); after that, 1
    const int32_t tok[N] = {-1, 0, 3, 4, 2, 5, 0}, par[N] = {-1, 0, 0, 0, 1, 2, 3};
    const int q_row[N] = {-1, 0, -1, -1, 1, -1, -1};
    for (int r = 0; r < N; r++)
        for (int i = 0; i < V; i++) pl[r * V + i] = (r == 0 && i == 3) || (r == 2 && i == 5) || (r == 5 && i == 1) ? 1 : 0;
    int path[N], a;
    int32_t next;
    ds_rng rng = ds_rng_init(1, 0);
    assert_int_equal(ds_verify_tree(&sp, V, N, tok, par, q_row, pl, NULL, NULL, 0, &rng, 0, &sc, path, &a, &next), DS_OK);
    assert_int_equal(a, 2);
    assert_int_equal(path[0], 2);
    assert_int_equal(path[1], 5);
    assert_int_equal(next, 1);
}

int main(void) {
    for (int a = 0; a < V; a++) // p and q given the first token: shifted, so every branch matters
        for (int i = 0; i < V; i++) {
            P2[a][i] = 0.8f * sinf((float)(a * 7 + i * 3));
            Q2[a][i] = i == (a + 1) % V ? 2.0f : 0.5f * cosf((float)(a + i));
        }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_residual_exact),
        cmocka_unit_test(test_coupled_exact),
        cmocka_unit_test(test_follows_target),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
