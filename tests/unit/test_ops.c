// src/kernels/ops.h: ds_expf is bit-identical to the Cephes formula it implements (written out here
// with the textbook integer scale, which is defined for every finite input) over a dense sweep of
// finite inputs, within 2e-7 of exp() in double, and NaN / ±inf give NaN / ~0 / exp(88) without
// undefined behaviour (the sanitizer build runs this); ds_all_finite finds any NaN or inf.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <string.h>

#include "kernels/ops.h"

// The reference: the same polynomial with 2^n as ((int)n + 127) << 23, valid for finite x.
static float expf_reference(float x) {
    x = x < -87.0f ? -87.0f : (x > 88.0f ? 88.0f : x);
    const float n = rintf(x * 1.44269504088896341f);
    const float r = x - n * 0.693359375f + n * 2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    const float e = p * r * r + r + 1.0f;
    const int32_t k = (int32_t)n + 127; // 1..254 for finite x after the clamp
    union { int32_t i; float f; } scale = {.i = k * (1 << 23)};
    return e * scale.f;
}

static uint32_t bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

// Every float in [-100, 100] at a stride of 257 ulps (about 8.7 million inputs, both signs), plus the
// edges of the clamp: the same bits as the reference.
static void test_expf_bit_identical(void **state) {
    (void)state;
    const float edges[] = {-87.0f, nextafterf(-87.0f, 0), nextafterf(-87.0f, -100), 88.0f, nextafterf(88.0f, 0),
                           nextafterf(88.0f, 100), 0.0f, -0.0f, 1e-30f, -1e-30f, 0.5f * 0.693359375f, -0.34657359f};
    for (size_t i = 0; i < sizeof edges / sizeof *edges; i++) assert_int_equal(bits(ds_expf(edges[i])), bits(expf_reference(edges[i])));
    long checked = 0;
    for (int sign = 0; sign < 2; sign++)
        for (uint32_t u = 0;; u += 257) {
            float x;
            memcpy(&x, &u, 4);
            if (!(x <= 100.0f)) break;
            if (sign) x = -x;
            if (bits(ds_expf(x)) != bits(expf_reference(x))) fail_msg("ds_expf(%a) differs from the reference", (double)x);
            checked++;
        }
    assert_true(checked > 8000000);
}

static void test_expf_accuracy(void **state) {
    (void)state;
    for (float x = -80.0f; x <= 88.0f; x += 0.0137f) {
        const double want = exp((double)x), got = ds_expf(x);
        assert_true(fabs(got - want) <= 2e-7 * want);
    }
}

// The inputs that were undefined behaviour (NaN converted to int, a negative value shifted left).
static void test_expf_non_finite(void **state) {
    (void)state;
    volatile float nan_ = NAN, inf = INFINITY;
    assert_true(isnan(ds_expf(nan_)));
    assert_true(isnan(ds_expf(-nan_)));
    const float lo = ds_expf(-inf), hi = ds_expf(inf);
    assert_true(lo >= 0.0f && lo < 1e-37f);
    assert_int_equal(bits(hi), bits(ds_expf(88.0f)));
    // In a vectorized loop too (softmax), with masked -inf scores.
    float x[37];
    for (int i = 0; i < 37; i++) x[i] = i % 5 == 0 ? -INFINITY : (float)i / 10;
    ds_softmax(x, 37);
    double s = 0;
    for (int i = 0; i < 37; i++) {
        assert_true(isfinite(x[i]) && x[i] >= 0);
        if (i % 5 == 0) assert_true(x[i] < 1e-30f);
        s += x[i];
    }
    assert_true(fabs(s - 1) < 1e-5);
    x[3] = NAN;
    ds_softmax(x, 37);
    assert_false(ds_all_finite(x, 37)); // NaN propagates: the forward's logits check sees it
}

static void test_all_finite(void **state) {
    (void)state;
    float x[100];
    for (int i = 0; i < 100; i++) x[i] = (float)(i - 50) * 1e30f;
    assert_true(ds_all_finite(x, 100));
    assert_true(ds_all_finite(x, 0));
    const float bad[] = {NAN, INFINITY, -INFINITY};
    for (int k = 0; k < 3; k++)
        for (int at = 0; at < 100; at += 33) {
            const float keep = x[at];
            x[at] = bad[k];
            assert_false(ds_all_finite(x, 100));
            x[at] = keep;
        }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_expf_bit_identical),
        cmocka_unit_test(test_expf_accuracy),
        cmocka_unit_test(test_expf_non_finite),
        cmocka_unit_test(test_all_finite),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
