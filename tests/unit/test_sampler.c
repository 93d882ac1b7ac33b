// The processed distribution (temperature -> top-k -> top-p/min-p -> renormalize), greedy, the
// counter-based random stream, and sampling frequencies.
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "dspark.h"

static void probs_of(const float *p_in, int n, float *logits) {
    for (int i = 0; i < n; i++) logits[i] = logf(p_in[i]);
}

static void test_greedy_ties_lowest(void **state) {
    (void)state;
    float logits[5] = {1, 3, 2, 3, -1}, probs[5];
    ds_sampler_params p = ds_sampler_default();
    assert_int_equal(ds_probs_process(&p, logits, 5, probs, NULL), DS_OK);
    assert_true(probs[1] == 1.0f);
    assert_true(probs[0] == 0 && probs[2] == 0 && probs[3] == 0 && probs[4] == 0);
    assert_int_equal(ds_argmax(logits, 5), 1);
}

static void test_temperature_softmax(void **state) {
    (void)state;
    float logits[3] = {0, 1, 2}, probs[3];
    ds_sampler_params p = ds_sampler_default();
    p.temperature = 2.0f;
    assert_int_equal(ds_probs_process(&p, logits, 3, probs, NULL), DS_OK);
    double z = exp(0) + exp(0.5) + exp(1.0);
    assert_float_equal(probs[0], exp(0) / z, 1e-6);
    assert_float_equal(probs[1], exp(0.5) / z, 1e-6);
    assert_float_equal(probs[2], exp(1.0) / z, 1e-6);
}

static void test_top_k_exact_count_with_ties(void **state) {
    (void)state;
    // Three-way tie for second place: top-k 2 keeps id 0 and the lowest tied id (1).
    float logits[5] = {5, 2, 2, 2, 0}, probs[5];
    ds_sampler_params p = ds_sampler_default();
    p.temperature = 1.0f;
    p.top_k = 2;
    assert_int_equal(ds_probs_process(&p, logits, 5, probs, NULL), DS_OK);
    double z = exp(5) + exp(2);
    assert_float_equal(probs[0], exp(5) / z, 1e-6);
    assert_float_equal(probs[1], exp(2) / z, 1e-6);
    assert_true(probs[2] == 0 && probs[3] == 0 && probs[4] == 0);
}

static void test_top_p(void **state) {
    (void)state;
    const float pin[4] = {0.15f, 0.5f, 0.05f, 0.3f};
    float logits[4], probs[4];
    probs_of(pin, 4, logits);
    ds_sampler_params p = ds_sampler_default();
    p.temperature = 1.0f;
    p.top_p = 0.75f; // 0.5 + 0.3 reaches 0.75: keep ids 1 and 3
    assert_int_equal(ds_probs_process(&p, logits, 4, probs, NULL), DS_OK);
    assert_float_equal(probs[1], 0.625, 1e-6);
    assert_float_equal(probs[3], 0.375, 1e-6);
    assert_true(probs[0] == 0 && probs[2] == 0);
    p.top_p = 0.85f; // needs the third token as well
    assert_int_equal(ds_probs_process(&p, logits, 4, probs, NULL), DS_OK);
    assert_float_equal(probs[0], 0.15 / 0.95, 1e-6);
    assert_true(probs[2] == 0);
}

static void test_min_p_and_combination(void **state) {
    (void)state;
    const float pin[4] = {0.15f, 0.5f, 0.05f, 0.3f};
    float logits[4], probs[4];
    probs_of(pin, 4, logits);
    ds_sampler_params p = ds_sampler_default();
    p.temperature = 1.0f;
    p.min_p = 0.25f; // threshold 0.125: keeps 0.5, 0.3, 0.15
    assert_int_equal(ds_probs_process(&p, logits, 4, probs, NULL), DS_OK);
    assert_float_equal(probs[0], 0.15 / 0.95, 1e-6);
    assert_true(probs[2] == 0);
    // top-k 3 then min-p 0.5 (threshold 0.5 * 0.5/0.95 of the renormalized top-3): keeps 1 and 3
    p.top_k = 3;
    p.min_p = 0.5f;
    assert_int_equal(ds_probs_process(&p, logits, 4, probs, NULL), DS_OK);
    assert_float_equal(probs[1], 0.625, 1e-6);
    assert_float_equal(probs[3], 0.375, 1e-6);
    assert_true(probs[0] == 0 && probs[2] == 0);
}

static void test_invalid_params(void **state) {
    (void)state;
    float logits[2] = {0, 0}, probs[2];
    ds_sampler_params p = ds_sampler_default();
    p.temperature = -1;
    assert_int_equal(ds_probs_process(&p, logits, 2, probs, NULL), DS_ERR_INVALID);
    p = ds_sampler_default();
    p.top_p = 0;
    assert_int_equal(ds_probs_process(&p, logits, 2, probs, NULL), DS_ERR_INVALID);
    p.top_p = NAN;
    assert_int_equal(ds_probs_process(&p, logits, 2, probs, NULL), DS_ERR_INVALID);
}

static void test_rng_is_counter_based(void **state) {
    (void)state;
    ds_rng a = ds_rng_init(42, 7), b = ds_rng_init(42, 7), c = ds_rng_init(42, 8), d = ds_rng_init(43, 7);
    int same_c = 0, same_d = 0;
    double sum = 0;
    for (int i = 0; i < 100000; i++) {
        double x = ds_rng_uniform(&a);
        assert_true(x >= 0 && x < 1);
        assert_true(x == ds_rng_uniform(&b));
        same_c += x == ds_rng_uniform(&c);
        same_d += x == ds_rng_uniform(&d);
        sum += x;
    }
    assert_int_equal(same_c, 0);
    assert_int_equal(same_d, 0);
    assert_float_equal(sum / 100000, 0.5, 0.005); // 5 sigma ~ 0.0046
    // Jumping the counter reproduces a later draw: draws are a pure function of (seed, stream, i).
    ds_rng e = ds_rng_init(42, 7);
    ds_rng f = ds_rng_init(42, 7);
    for (int i = 0; i < 10; i++) ds_rng_uniform(&e);
    f.counter = 10;
    assert_true(ds_rng_uniform(&e) == ds_rng_uniform(&f));
}

static void test_sample_frequencies(void **state) {
    (void)state;
    const float probs[5] = {0.1f, 0.0f, 0.4f, 0.2f, 0.3f};
    int count[5] = {0};
    ds_rng r = ds_rng_init(1, 0);
    const int N = 200000;
    for (int i = 0; i < N; i++) count[ds_sample_probs(probs, 5, &r)]++;
    assert_int_equal(count[1], 0);
    double chi2 = 0;
    for (int i = 0; i < 5; i++)
        if (probs[i] > 0) chi2 += pow(count[i] - N * probs[i], 2) / (N * probs[i]);
    assert_true(chi2 < 16.27); // chi-square, 3 degrees of freedom, p = 0.001
}

// The coupled draw: distributed as p over positions (and over seeds), a pure function of (probs,
// seed, position) that leaves the stream alone, and a coupling of two distributions that agrees
// with probability between (1 - TV) / (1 + TV) (Gumbel-max's guarantee) and 1 - TV (any coupling).
static void test_sample_coupled(void **state) {
    (void)state;
    const float p[4] = {0.5f, 0.3f, 0.2f, 0.0f}, q[4] = {0.3f, 0.3f, 0.2f, 0.2f}; // TV(p, q) = 0.2
    ds_rng r = ds_rng_init(7, 0);
    r.counter = 5;
    assert_int_equal(ds_sample_coupled(p, 4, &r, 11), ds_sample_coupled(p, 4, &r, 11));
    assert_int_equal(r.counter, 5);
    const int N = 200000;
    int count[4] = {0}, count_seeds[4] = {0}, agree = 0;
    for (int t = 0; t < N; t++) {
        const int32_t x = ds_sample_coupled(p, 4, &r, t);
        count[x]++;
        agree += x == ds_sample_coupled(q, 4, &r, t);
        ds_rng other = ds_rng_init((uint64_t)t * 7919 + 1, 0);
        count_seeds[ds_sample_coupled(p, 4, &other, 3)]++;
    }
    assert_int_equal(count[3], 0);
    assert_int_equal(count_seeds[3], 0);
    double chi2 = 0, chi2_seeds = 0;
    for (int i = 0; i < 3; i++) {
        chi2 += pow(count[i] - N * p[i], 2) / (N * p[i]);
        chi2_seeds += pow(count_seeds[i] - N * p[i], 2) / (N * p[i]);
    }
    assert_true(chi2 < 13.82);       // chi-square, 2 degrees of freedom, p = 0.001
    assert_true(chi2_seeds < 13.82);
    const double rate = (double)agree / N; // standard error ~0.001
    assert_true(rate > 0.8 / 1.2 - 0.005);
    assert_true(rate < 0.8 + 0.005);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_greedy_ties_lowest),   cmocka_unit_test(test_temperature_softmax),
        cmocka_unit_test(test_top_k_exact_count_with_ties), cmocka_unit_test(test_top_p),
        cmocka_unit_test(test_min_p_and_combination), cmocka_unit_test(test_invalid_params),
        cmocka_unit_test(test_rng_is_counter_based), cmocka_unit_test(test_sample_frequencies),
        cmocka_unit_test(test_sample_coupled),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
