// Drafting several sequences in one batch equals drafting each alone: same tokens, logits and
// confidences up to float rounding, for sequences at different context lengths and slot counts.
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "dspark.h"
#include "stories.h"

static ds_model *g_m;
static ds_drafter *g_d;

static int setup(void **state) {
    (void)state;
    return stories_load_with_drafter("draft_batch", 2, 7, &g_m, &g_d);
}

static int teardown(void **state) {
    (void)state;
    ds_drafter_free(g_d);
    ds_model_free(g_m);
    return 0;
}

// Context for sequence r: tap rows of a real target forward over n tokens.
static ds_draft_state *context(int n, int seed) {
    ds_draft_state *s = stories_draft_context(g_m, g_d, n, seed);
    assert_non_null(s);
    return s;
}

static void test_batch_equals_single(void **state) {
    (void)state;
    enum { R = 3 };
    const int B = ds_drafter_get_info(g_d)->block_size, V = 512;
    const int ctx[R] = {5, 17, 1}, slots[R] = {B, 3, 1};
    const int32_t anchors[R] = {403, 58, 1};
    ds_draft_state *single[R], *batch[R];
    for (int r = 0; r < R; r++) {
        single[r] = context(ctx[r], r);
        batch[r] = context(ctx[r], r);
    }
    ds_sampler_params sp = ds_sampler_default();
    sp.temperature = 0.8f; // sampled walks: the batch must draw from each sequence's own stream
    const ds_sampler_params *spp[R] = {&sp, &sp, &sp};
    ds_rng rs[R], rb[R];
    ds_rng *rbp[R];
    int32_t ts[R][64], tb[R][64];
    float *ls[R], *lb[R], cs[R][64], cb[R][64];
    int32_t *tbp[R];
    float *lbp[R], *cbp[R];
    for (int r = 0; r < R; r++) {
        rs[r] = rb[r] = ds_rng_init(99, (uint64_t)r);
        rbp[r] = &rb[r];
        ls[r] = malloc(sizeof(float) * (size_t)B * V);
        lb[r] = malloc(sizeof(float) * (size_t)B * V);
        tbp[r] = tb[r];
        lbp[r] = lb[r];
        cbp[r] = cb[r];
        assert_int_equal(ds_drafter_draft(g_d, single[r], anchors[r], slots[r], &sp, &rs[r], ts[r], ls[r], cs[r]),
                         DS_OK);
    }
    ds_draft_batch *bt;
    assert_int_equal(ds_draft_batch_init(g_d, &bt), DS_OK);
    ds_draft_seq q[R];
    for (int r = 0; r < R; r++)
        q[r] = (ds_draft_seq){.state = batch[r], .anchor = anchors[r], .n_slots = slots[r], .sp = spp[r], .rng = rbp[r],
                              .tokens = tbp[r], .logits = lbp[r], .conf = cbp[r]};
    assert_int_equal(ds_drafter_draft_batch(g_d, bt, q, R), DS_OK);
    for (int r = 0; r < R; r++) {
        assert_memory_equal(ts[r], tb[r], sizeof(int32_t) * (size_t)slots[r]);
        double m = 0;
        for (size_t i = 0; i < (size_t)slots[r] * V; i++) m = fmax(m, fabs((double)ls[r][i] - lb[r][i]));
        assert_true(m < 1e-4);
        for (int k = 0; k < slots[r]; k++) assert_true(fabsf(cs[r][k] - cb[r][k]) < 1e-6);
        assert_int_equal(ds_draft_state_len(batch[r]), ctx[r]); // block rows are not kept
        free(ls[r]);
        free(lb[r]);
        ds_draft_state_free(single[r]);
        ds_draft_state_free(batch[r]);
    }
    ds_draft_batch_free(bt);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_batch_equals_single)};
    return cmocka_run_group_tests(tests, setup, teardown);
}
