// The drafting gate of --schedule auto: it drafts while its estimates are young, stops drafting
// when past rounds show drafting cannot pay, keeps drafting when it pays, and re-explores (with
// back-off) so that a change is noticed.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <string.h>
#include <cmocka.h>

#include "sched/schedule.h"

// SPS(B) = 1 / (base + per_token·B): a step costs base seconds plus per_token per row.
static void table(ds_cost_table *t, double base, double per_token) {
    memset(t, 0, sizeof *t);
    t->bmax = 128;
    for (int b = 1; b <= 128; b++) t->sps[b] = 1.0 / (base + per_token * b);
}

static void test_stops_when_drafting_costs_too_much(void **state) {
    (void)state;
    ds_cost_table t;
    table(&t, 0.0, 1e-3); // compute-bound: every verified row costs a full step
    ds_draft_gate g = {0};
    for (int i = 0; i < 4; i++) { // exploration: drafts, sees 40% acceptance, drafting as dear as a step
        assert_int_equal(ds_gate_depth(&g, &t, 1, 7), 7);
        ds_gate_observe_draft(&g, 1e-3);
        ds_gate_observe_round(&g, 7, i % 2);
    }
    // Even with every draft accepted, 8 tokens would cost a step per row plus drafting: hopeless,
    // so it never drafts (nor explores) again at this R.
    int drafted = 0;
    for (int i = 0; i < 1000; i++) drafted += ds_gate_depth(&g, &t, 1, 7) > 0;
    assert_int_equal(drafted, 0);
}

static void test_backs_off_when_it_could_pay_but_does_not(void **state) {
    (void)state;
    ds_cost_table t;
    table(&t, 10e-3, 1e-5); // memory-bound: perfect acceptance would pay
    ds_draft_gate g = {0};
    for (int i = 0; i < 4; i++) { // exploration: dear drafting and nothing accepted
        assert_int_equal(ds_gate_depth(&g, &t, 1, 7), 7);
        ds_gate_observe_draft(&g, 8e-3);
        ds_gate_observe_round(&g, 7, 0);
    }
    int drafted = 0;
    for (int i = 0; i < 1000; i++) drafted += ds_gate_depth(&g, &t, 1, 7) > 0;
    assert_true(drafted >= 1 && drafted <= 5); // re-explorations backing off: 64, 128, 256, 512
}

static void test_keeps_drafting_when_it_pays(void **state) {
    (void)state;
    ds_cost_table t;
    table(&t, 10e-3, 1e-5); // memory-bound: a step costs 10 ms, extra rows almost nothing
    ds_draft_gate g = {0};
    for (int i = 0; i < 50; i++) {
        assert_int_equal(ds_gate_depth(&g, &t, 4, 7), 7);
        ds_gate_observe_draft(&g, 1e-3);  // drafting: 10% of a step
        ds_gate_observe_round(&g, 7, 3); // ~3 accepted per round
    }
}

static void test_no_depth_no_drafting(void **state) {
    (void)state;
    ds_cost_table t;
    table(&t, 10e-3, 1e-5);
    ds_draft_gate g = {0};
    assert_int_equal(ds_gate_depth(&g, &t, 4, 0), 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_stops_when_drafting_costs_too_much),
        cmocka_unit_test(test_keeps_drafting_when_it_pays),
        cmocka_unit_test(test_backs_off_when_it_could_pay_but_does_not),
        cmocka_unit_test(test_no_depth_no_drafting),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
