// The jobs of include/dspark_jobs.h that moved out of cli/, on stories260K and a fresh drafter:
//  - eval's losslessness check (ds_eval_compare) counts the prompts completed in both runs and
//    flags a corrupted token, a shorter run and nothing else; ds_eval_run decodes the same tokens
//    with ngram and DSpark drafting as plain decoding (the check applied and held), and does not
//    apply it under the residual rule;
//  - ds_calibrate_run makes one pass per temperature (0 and 1 by default), reports every prompt of
//    each through its progress callback (and the dropped calibration once), its reliability bins
//    count every observed round, and the file it writes holds each pass's fitted temperatures and
//    prior for its class; a drafter loaded with such a file scales a greedy sequence's confidences
//    by the greedy fit and a sampled one's by the sampled fit (calibration.json's own checks:
//    test_calibrate);
//  - ds_profile_run writes a cost table ds_cost_table_load reads back (to cJSON's 15 digits), with the drafter's
//    round cost, at the process's thread count (which loading a model with NULL params keeps).
#include <cjson/cJSON.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "draft/calibration.h"
#include "draft/drafter.h"
#include "dspark.h"
#include "dspark_jobs.h"
#include "stories.h"
#include "tmpdir.h"

static ds_model *g_m;
static ds_drafter *g_d;
static char g_prompts[1024];

static int setup(void **state) {
    (void)state;
    if (tmpdir_create("test_jobs")) return -1;
    tmpdir_path(g_prompts, sizeof g_prompts, "prompts", ".txt");
    FILE *f = fopen(g_prompts, "w");
    if (!f) return -1;
    fputs("Once upon a time\n{\"prompt\": \"Lily and Ben went to the park\"}\nThe cat\n\nTom had a red ball\n", f);
    fclose(f);
    return stories_load_with_drafter("jobs", 1, 5, &g_m, &g_d);
}

static int teardown(void **state) {
    (void)state;
    ds_drafter_free(g_d);
    ds_model_free(g_m);
    return tmpdir_remove();
}

// ---- eval ----------------------------------------------------------------------------------

static void test_compare_flags_a_corrupted_run(void **state) {
    (void)state;
    enum { N = 4, L = 6 };
    int32_t a[N * L], b[N * L];
    for (int i = 0; i < N * L; i++) a[i] = b[i] = 100 + i;
    int na[N] = {6, 6, 3, 6}, nb[N] = {6, 6, 3, 6}, da[N] = {1, 1, 1, 1}, db[N] = {1, 1, 1, 1};
    const ds_eval_tokens ta = {N, L, a, na, da}, tb = {N, L, b, nb, db};
    int n_diff, first, at;
    assert_int_equal(ds_eval_compare(&ta, &tb, &n_diff, &first, &at), N);
    assert_int_equal(n_diff, 0);
    assert_int_equal(first, -1);
    assert_int_equal(at, -1);

    b[2 * L + 1] = 7; // prompt 2, generated token 1
    assert_int_equal(ds_eval_compare(&ta, &tb, &n_diff, &first, &at), N);
    assert_int_equal(n_diff, 1);
    assert_int_equal(first, 2);
    assert_int_equal(at, 1);

    nb[1] = 4; // prompt 1 ends early: it differs where the shorter run stops
    assert_int_equal(ds_eval_compare(&ta, &tb, &n_diff, &first, &at), N);
    assert_int_equal(n_diff, 2);
    assert_int_equal(first, 1);
    assert_int_equal(at, 4);

    db[1] = 0; // a prompt one run did not complete is not compared
    da[2] = 0;
    assert_int_equal(ds_eval_compare(&ta, &tb, &n_diff, &first, &at), N - 2);
    assert_int_equal(n_diff, 0);
}

static void eval_with(ds_spec_kind kind, const ds_drafter *d, ds_eval_result *r, const ds_eval_params *o) {
    ds_spec_params spec = {.kind = kind};
    if (kind == DS_SPEC_DSPARK) spec.draft_max = ds_drafter_get_info(d)->block_size;
    assert_int_equal(ds_eval_run(g_m, d, &spec, o, r), DS_OK);
}

static void test_eval_is_lossless(void **state) {
    (void)state;
    ds_eval_params o = ds_eval_default();
    assert_int_equal(o.max_tokens, 128);
    assert_int_equal(o.concurrency, 1);
    o.prompts = g_prompts;
    o.max_tokens = 24;
    o.concurrency = 2;
    ds_eval_result r;
    eval_with(DS_SPEC_NGRAM, NULL, &r, &o);
    assert_int_equal(r.n_prompts, 4);
    assert_int_equal(r.n_done, 4);
    assert_true(r.checked);
    assert_false(r.interrupted);
    assert_int_equal(r.spec.requests, 4);
    assert_int_equal(r.base.requests, 4);
    assert_int_equal(r.spec.generated, r.base.generated); // (the tokens themselves: the check)
    assert_int_equal(r.base.drafted, 0);
    assert_int_equal(r.base.rounds, r.base.generated); // plain decoding: one token a round
    assert_true(r.spec.rounds <= r.spec.generated);

    eval_with(DS_SPEC_DSPARK, g_d, &r, &o);
    assert_true(r.checked);
    assert_true(r.spec.drafted > 0);
    assert_true(r.spec.accepted <= r.spec.drafted);
    long accepted = 0; // slot k counts as accepted only after every slot before it
    for (int k = 0; k < 64; k++) {
        accepted += r.spec.accepted_by_pos[k];
        assert_true(r.spec.accepted_by_pos[k] <= r.spec.tried_by_pos[k]);
        if (k) assert_true(r.spec.tried_by_pos[k] <= r.spec.accepted_by_pos[k - 1]);
    }
    assert_int_equal(accepted, r.spec.accepted);

    // Sampling under the residual rule matches plain decoding in distribution only: not checked.
    o.sp.temperature = 1;
    o.sp.verify = DS_VERIFY_RESIDUAL;
    eval_with(DS_SPEC_DSPARK, g_d, &r, &o);
    assert_false(r.checked);
    assert_int_equal(r.n_done, 4);
}

static void test_eval_names_a_bad_prompt_file(void **state) {
    (void)state;
    char path[1024];
    tmpdir_path(path, sizeof path, "missing", ".txt");
    ds_eval_params o = ds_eval_default();
    o.prompts = path;
    const ds_spec_params none = {.kind = DS_SPEC_NONE};
    ds_eval_result r;
    assert_int_not_equal(ds_eval_run(g_m, NULL, &none, &o, &r), DS_OK);
    assert_non_null(strstr(ds_last_error(), path));
}

// ---- calibration ---------------------------------------------------------------------------

typedef struct {
    int raw, prompts, last_done, last_total, last_rounds, ordered, pass;
    float temps[2];
} cal_seen;

static void on_event(void *ctx, const ds_calibrate_event *ev) {
    cal_seen *s = ctx;
    if (ev->kind == DS_CALIBRATE_EV_RAW) {
        s->raw++;
        return;
    }
    s->prompts++;
    if (ev->pass != s->pass) { // the next pass starts over
        if (ev->pass != s->pass + 1 || s->last_done != s->last_total) s->ordered = 0;
        s->pass = ev->pass;
        s->last_done = s->last_rounds = 0;
    }
    if (ev->pass < 2) s->temps[ev->pass] = ev->temp;
    if (ev->done != s->last_done + 1 || ev->rounds < s->last_rounds) s->ordered = 0;
    s->last_done = ev->done;
    s->last_total = ev->total;
    s->last_rounds = ev->rounds;
}

static void test_calibrate_reports_and_writes(void **state) {
    (void)state;
    char out[1024];
    tmpdir_path(out, sizeof out, "calibrated", ".json");
    ds_calibrate_params o = ds_calibrate_default();
    assert_int_equal(o.max_tokens, 128);
    assert_int_equal(o.n_temps, 2);
    assert_true(o.temps[0] == 0 && o.temps[1] == 1);
    o.prompts = g_prompts;
    o.out = out;
    o.max_tokens = 16;
    cal_seen seen = {.ordered = 1};
    o.progress = on_event;
    o.progress_ctx = &seen;
    const float set[2] = {2, 3};
    assert_int_equal(ds_drafter_set_calibration(g_d, set, 2), DS_OK); // dropped by the run, once
    ds_calibrate_result r;
    assert_int_equal(ds_calibrate_run(g_m, g_d, &o, &r), DS_OK);
    const float *now;
    assert_int_equal(ds_drafter_calibration(g_d, 0, &now), 0);
    assert_int_equal(ds_drafter_calibration(g_d, 1, &now), 0);
    assert_int_equal(seen.raw, 1);
    assert_int_equal(seen.prompts, 8); // 4 prompts, twice
    assert_true(seen.ordered);
    assert_int_equal(seen.pass, 1);
    assert_true(seen.temps[0] == 0 && seen.temps[1] == 1);
    assert_int_equal(seen.last_total, 4);
    assert_int_equal(r.n_prompts, 4);
    assert_int_equal(r.n_passes, 2);
    assert_int_equal(seen.last_rounds, r.pass[1].rounds);

    const int K = ds_drafter_get_info(g_d)->block_size;
    for (int p = 0; p < 2; p++) {
        const ds_calibrate_pass *ps = &r.pass[p];
        assert_true(ps->temp == o.temps[p]);
        assert_true(ps->rounds > 0);
        assert_int_equal(ps->fit.K, K);
        assert_int_equal(ps->fit.n[0], ps->rounds); // every round verified its first slot
        assert_int_equal(ps->n_plot, K < 3 ? K : 3);
        for (int k = 0; k < ps->n_plot; k++)
            for (int pass = 0; pass < 2; pass++) {
                int count = 0;
                for (int b = 0; b < DS_CALIB_BINS; b++) count += ps->reliability[k][pass][b].count;
                assert_int_equal(count, ps->fit.n[k]);
            }
    }

    ds_calibration_class cls[DS_CALIB_CLASSES];
    int found;
    assert_int_equal(ds_calibration_read(out, K, cls, &found), DS_OK);
    assert_int_equal(found, 1);
    for (int c = 0; c < DS_CALIB_CLASSES; c++) { // greedy: pass 0 (temp 0), sampled: pass 1
        assert_int_equal(cls[c].n_temps, K);
        for (int k = 0; k < K; k++) assert_float_equal(cls[c].temps[k], (float)r.pass[c].fit.temps[k], 0);
        assert_int_equal(cls[c].n_accept, K);
        assert_float_equal(cls[c].accept[0], (double)r.pass[c].fit.n_pos[0] / r.pass[c].fit.n[0], 1e-6);
    }

    // A second run has nothing to drop; one temperature gives one pass.
    seen = (cal_seen){.ordered = 1};
    o.temps[0] = 1, o.n_temps = 1;
    assert_int_equal(ds_calibrate_run(g_m, g_d, &o, &r), DS_OK);
    assert_int_equal(seen.raw, 0);
    assert_int_equal(seen.prompts, 4);
    assert_int_equal(r.n_passes, 1);
    // Two temperatures of one class: refused before anything runs.
    o.temps[1] = 0.5, o.n_temps = 2;
    seen = (cal_seen){.ordered = 1};
    assert_int_equal(ds_calibrate_run(g_m, g_d, &o, &r), DS_ERR_INVALID);
    assert_non_null(strstr(ds_last_error(), "one must be 0"));
    assert_int_equal(seen.prompts, 0);
}

// A drafter loaded with a calibration of both classes: slot 1's confidence σ(z / T_1) takes the
// greedy fit's T_1 at temperature 0 and the sampled fit's at temperature 1. (A fresh drafter's
// confidence head is zero, so its bias is set to make z = 1.)
static void test_each_class_its_own_calibration(void **state) {
    (void)state;
    char dir[1024], path[1100];
    tmpdir_path(dir, sizeof dir, "two_class_drafter", "");
    ds_drafter_init_params p = ds_drafter_init_default();
    p.n_layers = 1, p.markov_rank = 16, p.seed = 9;
    assert_int_equal(ds_drafter_init_write(g_m, &p, dir), DS_OK);
    const int K = p.block_size ? p.block_size : 7;
    ds_calibration g = {.K = K, .rounds = 8, .temp = 0}, sm = g;
    sm.temp = 1;
    for (int k = 0; k < K; k++) {
        g.temps[k] = 2.0, sm.temps[k] = 0.5;
        g.acceptance[k] = 0.8 - 0.1 * k, sm.acceptance[k] = 0.4 - 0.05 * k;
        g.ece_before[k] = g.ece_after[k] = g.auc_before[k] = g.auc_after[k] = g.n[k] = NAN;
        sm.ece_before[k] = sm.ece_after[k] = sm.auc_before[k] = sm.auc_after[k] = sm.n[k] = NAN;
    }
    snprintf(path, sizeof path, "%s/calibration.json", dir);
    assert_int_equal(ds_calibration_save(&g, &sm, path), DS_OK);
    ds_drafter *d;
    assert_int_equal(ds_drafter_load(dir, g_m, &d), DS_OK);
    const float *v;
    assert_int_equal(ds_drafter_calibration(d, 0, &v), K);
    assert_true(v[0] == 2.0f);
    assert_int_equal(ds_drafter_calibration(d, 1, &v), K);
    assert_true(v[0] == 0.5f);
    assert_int_equal(ds_drafter_acceptance_prior(d, 0, &v), K);
    assert_true(fabsf(v[1] - 0.7f) < 1e-6f);
    assert_int_equal(ds_drafter_acceptance_prior(d, 1, &v), K);
    assert_true(fabsf(v[1] - 0.35f) < 1e-6f);
    d->conf_b = 1.0f; // (the internal struct: draft/drafter.h)
    ds_draft_state *s = stories_draft_context(g_m, d, 16, 1);
    assert_non_null(s);
    const int V = ds_model_get_info(g_m)->vocab_size;
    float *logits = malloc(sizeof(float) * (size_t)K * V), conf[64];
    int32_t tok[64];
    for (int sampled = 0; sampled < 2; sampled++) {
        ds_sampler_params sp = ds_sampler_default();
        sp.temperature = sampled ? 1.0f : 0.0f;
        ds_rng rng = ds_rng_init(1, 0);
        assert_int_equal(ds_drafter_draft(d, s, 5, K, &sp, &rng, tok, logits, conf), DS_OK);
        const double want = 1 / (1 + exp(-1.0 / (sampled ? 0.5 : 2.0)));
        assert_float_equal(conf[0], want, 1e-6);
    }
    free(logits);
    ds_draft_state_free(s);
    ds_drafter_free(d);
}

// ---- profile -------------------------------------------------------------------------------

static void test_profile_writes_what_it_measured(void **state) {
    (void)state;
    ds_set_threads(1);
    ds_model *m;
    char path[4096];
    const char *shared = getenv("DSPARK_SHARED");
    snprintf(path, sizeof path, "%s/models/stories260K/stories260K.gguf", shared ? shared : "../shared");
    assert_int_equal(ds_model_load(path, NULL, &m), DS_OK); // NULL params: the count stays the pool's
    assert_int_equal(ds_threads(), 1);
    ds_model_free(m);

    char out[1024];
    tmpdir_path(out, sizeof out, "costs", ".json");
    ds_profile_params o = ds_profile_default();
    assert_int_equal(o.bmax, 64);
    assert_int_equal(o.ctx, 256);
    assert_int_equal(o.repeats, 5);
    o.bmax = 4;
    o.ctx = 16;
    o.repeats = 1;
    o.out = out;
    o.drafter_name = "the-drafter";
    ds_profile_result r;
    assert_int_equal(ds_profile_run(g_m, g_d, &o, &r), DS_OK);
    assert_int_equal(r.threads, 1);
    assert_int_equal(r.costs.bmax, 4);
    assert_int_equal(r.draft_block, ds_drafter_get_info(g_d)->block_size);
    assert_int_equal(r.draft_ctx, 16);
    assert_true(r.draft_s > 0);
    ds_cost_table t;
    assert_int_equal(ds_cost_table_load(out, &t), DS_OK);
    assert_int_equal(t.bmax, 4);
    // (cJSON prints 15 significant digits when they read back within an epsilon of the value)
    for (int b = 1; b <= 4; b++) assert_true(fabs(t.sps[b] - r.costs.sps[b]) <= 1e-14 * r.costs.sps[b]);

    FILE *f = fopen(out, "r");
    assert_non_null(f);
    char buf[1 << 14];
    const size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    cJSON *j = cJSON_Parse(buf);
    assert_non_null(j);
    assert_true(fabs(cJSON_GetObjectItem(j, "draft_round_s")->valuedouble - r.draft_s) <= 1e-14 * r.draft_s);
    assert_int_equal(cJSON_GetObjectItem(j, "draft_block")->valueint, r.draft_block);
    assert_string_equal(cJSON_GetObjectItem(j, "drafter")->valuestring, "the-drafter");
    assert_int_equal(cJSON_GetObjectItem(j, "threads")->valueint, 1);
    cJSON_Delete(j);

    // Without a drafter the file has no drafter fields.
    assert_int_equal(ds_profile_run(g_m, NULL, &o, &r), DS_OK);
    f = fopen(out, "r");
    assert_non_null(f);
    const size_t n2 = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n2] = 0;
    assert_null(strstr(buf, "draft_round_s"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_compare_flags_a_corrupted_run),
        cmocka_unit_test(test_eval_is_lossless),
        cmocka_unit_test(test_eval_names_a_bad_prompt_file),
        cmocka_unit_test(test_calibrate_reports_and_writes),
        cmocka_unit_test(test_each_class_its_own_calibration),
        cmocka_unit_test(test_profile_writes_what_it_measured),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
