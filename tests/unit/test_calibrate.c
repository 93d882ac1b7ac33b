// Sequential Temperature Scaling (src/sched/calibrate.c): recovery of known temperatures on
// synthetic rounds, ECE and ROC-AUC on hand-computed examples, rank preservation, missing positions,
// degenerate data and invalid input.
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "draft/calibration.h"
#include "sched/calibrate.h"
#include "tmpdir.h"

// splitmix64 and Box-Muller: a self-contained deterministic stream.
static uint64_t sm_state;
static uint64_t sm_next(void) {
    uint64_t z = (sm_state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}
static double uniform(void) { return ((sm_next() >> 11) + 0.5) * (1.0 / 9007199254740992.0); }
static double normal(void) { return sqrt(-2 * log(uniform())) * cos(6.283185307179586 * uniform()); }

// Rounds where slot k (given slots < k accepted) is accepted with probability σ(z_k / T*_k), so the
// true prefix acceptance is Π_{i≤k} σ(z_i / T*_i): the calibrated product is exactly what STS seeks.
typedef struct {
    int K, n;
    double *z;
    int *acc;
} synth;

static synth make_synth(int K, int n, const double *tstar, double mu, double sd, uint64_t seed) {
    synth s = {K, n, malloc(sizeof(double) * (size_t)K * n), malloc(sizeof(int) * (size_t)n)};
    assert_non_null(s.z);
    assert_non_null(s.acc);
    sm_state = seed;
    for (int r = 0; r < n; r++) {
        int a = 0, alive = 1;
        for (int k = 0; k < K; k++) {
            const double z = mu + sd * normal();
            s.z[(size_t)r * K + k] = z;
            const double u = uniform();
            if (alive && u < ds_calib_sigmoid(z / tstar[k])) a++;
            else alive = 0;
        }
        s.acc[r] = a;
    }
    return s;
}

static void free_synth(synth *s) {
    free(s->z);
    free(s->acc);
}

static void test_sts_recovers_known_temperatures(void **state) {
    (void)state;
    const double tstar[3] = {2.0, 0.5, 1.0};
    synth s = make_synth(3, 200000, tstar, 1.5, 3.0, 7);
    ds_calib_data d = {.K = 3, .n = s.n, .z = s.z, .accepted = s.acc};
    ds_sts_result res;
    assert_int_equal(ds_sts_fit(&d, &res), DS_OK);
    for (int k = 0; k < 3; k++) {
        const double steps = fabs(log2(res.temps[k] / tstar[k])) * 10; // grid steps away from T*
        print_message("k=%d n=%d T=%.4f (T*=%.2f) ECE %.4f -> %.4f AUC %.4f -> %.4f\n", k + 1, res.n[k], res.temps[k],
                      tstar[k], res.ece_before[k], res.ece_after[k], res.auc_before[k], res.auc_after[k]);
        assert_true(steps <= 1 + 1e-9);
        assert_true(res.ece_after[k] < res.ece_before[k]);
        assert_true(res.ece_after[k] < 0.01);
        assert_true(res.auc_after[k] > 0.6);
    }
    assert_int_equal(res.n[0], 200000);
    assert_int_equal(res.n[2], 200000); // every round verified every slot
    // Temperature scaling preserves ranking: position 1's AUC is unchanged (the cumulative product
    // at k ≥ 2 mixes positions with different temperatures, so only k = 1 is invariant in general).
    assert_true(fabs(res.auc_after[0] - res.auc_before[0]) < 1e-12);
    free_synth(&s);
}

static void test_auc_rank_preserving(void **state) {
    (void)state;
    const int n = 5000;
    const double tstar[1] = {1.0};
    synth s = make_synth(1, n, tstar, 0.0, 2.0, 11);
    double *c = malloc(sizeof(double) * n);
    unsigned char *y = malloc((size_t)n);
    for (int i = 0; i < n; i++) y[i] = s.acc[i] >= 1;
    double base;
    assert_int_equal(ds_calib_auc(s.z, y, n, &base), DS_OK);
    assert_true(base > 0.6 && base < 1);
    // (Down to T = 1/4: below it σ(z/T) rounds to exactly 1 in double for the largest z here, which
    // would create ties that are an artefact of floating point, not of the scaling.)
    for (int i = -20; i <= DS_CALIB_GRID_HI; i += 5) {
        const double T = pow(2, i / 10.0);
        for (int j = 0; j < n; j++) c[j] = ds_calib_sigmoid(s.z[j] / T);
        double auc;
        assert_int_equal(ds_calib_auc(c, y, n, &auc), DS_OK);
        assert_true(fabs(auc - base) < 1e-12);
    }
    free(c);
    free(y);
    free_synth(&s);
}

static void test_ece_hand(void **state) {
    (void)state;
    // Four bins with one sample each: (0.1 + 0.85 + 0.1 + 0.05) / 4.
    const double c1[4] = {0.1, 0.15, 0.9, 0.95};
    const unsigned char y1[4] = {0, 1, 1, 1};
    assert_float_equal(ds_calib_ece(c1, y1, 4, 20), 0.275, 1e-12);
    // One bin [0.5, 0.55): accuracy 1/3, mean confidence 0.52.
    const double c2[3] = {0.51, 0.52, 0.53};
    const unsigned char y2[3] = {1, 0, 0};
    assert_float_equal(ds_calib_ece(c2, y2, 3, 20), 0.52 - 1.0 / 3, 1e-12);
    // Two bins, count-weighted: bin [0.5,0.55) holds 3 (acc 1/3, conf 0.52), bin [0.95,1] holds 1.0 (label 1).
    const double c3[4] = {0.51, 0.52, 0.53, 1.0};
    const unsigned char y3[4] = {1, 0, 0, 1};
    assert_float_equal(ds_calib_ece(c3, y3, 4, 20), 0.75 * (0.52 - 1.0 / 3) + 0.25 * 0, 1e-12);
    // 0 and 1 exactly fall into the first and last bins.
    ds_calib_bin b[20];
    const double c4[2] = {0.0, 1.0};
    const unsigned char y4[2] = {0, 1};
    ds_calib_reliability(c4, y4, 2, 20, b);
    assert_int_equal(b[0].count, 1);
    assert_int_equal(b[19].count, 1);
    assert_float_equal(b[19].acc, 1, 0);
    assert_float_equal(ds_calib_ece(c4, y4, 2, 20), 0, 0);
    ds_calib_reliability(c3, y3, 4, 20, b);
    assert_int_equal(b[10].count, 3);
    assert_float_equal(b[10].conf, 0.52, 1e-12);
    assert_float_equal(b[10].acc, 1.0 / 3, 1e-12);
    assert_true(isnan(ds_calib_ece(c1, y1, 0, 20)));
    assert_true(isnan(ds_calib_ece(c1, y1, 4, 0)));
}

static void test_auc_hand(void **state) {
    (void)state;
    double auc;
    const double s1[4] = {0.1, 0.4, 0.35, 0.8};
    const unsigned char y1[4] = {0, 0, 1, 1};
    assert_int_equal(ds_calib_auc(s1, y1, 4, &auc), DS_OK);
    assert_float_equal(auc, 0.75, 1e-12);
    // Ties count one half: pairs (0.5 vs 0.2) 1, (0.5 vs 0.5) 0.5, (0.9 vs 0.2) 1, (0.9 vs 0.5) 1.
    const double s2[4] = {0.2, 0.5, 0.5, 0.9};
    const unsigned char y2[4] = {0, 1, 0, 1};
    assert_int_equal(ds_calib_auc(s2, y2, 4, &auc), DS_OK);
    assert_float_equal(auc, 3.5 / 4, 1e-12);
    const double s3[2] = {0.5, 0.5};
    const unsigned char y3[2] = {1, 0};
    assert_int_equal(ds_calib_auc(s3, y3, 2, &auc), DS_OK);
    assert_float_equal(auc, 0.5, 1e-12);
    // Perfectly wrong ranking.
    const unsigned char y4[4] = {1, 1, 0, 0};
    const double s4[4] = {0.1, 0.2, 0.3, 0.4};
    assert_int_equal(ds_calib_auc(s4, y4, 4, &auc), DS_OK);
    assert_float_equal(auc, 0, 1e-12);
    // One class only, or nothing: undefined.
    const unsigned char y5[2] = {1, 1};
    assert_int_equal(ds_calib_auc(s3, y5, 2, &auc), DS_OK);
    assert_true(isnan(auc));
    assert_int_equal(ds_calib_auc(s3, y5, 0, &auc), DS_OK);
    assert_true(isnan(auc));
}

// Rounds that verified fewer slots (end of a budget) observe only those positions: missing, not
// rejected.
static void test_missing_positions(void **state) {
    (void)state;
    const double z[3 * 3] = {0, 0, 0, /**/ 1, 2, 3, /**/ -1, -2, -3};
    const int slots[3] = {1, 3, 2}, acc[3] = {1, 2, 0};
    ds_calib_data d = {.K = 3, .n = 3, .z = z, .n_slots = slots, .accepted = acc};
    double c[3];
    unsigned char y[3];
    assert_int_equal(ds_calib_cumulative(&d, NULL, 1, c, y), 3);
    assert_int_equal(ds_calib_cumulative(&d, NULL, 2, c, y), 2);
    assert_float_equal(c[0], ds_calib_sigmoid(1) * ds_calib_sigmoid(2), 1e-15);
    assert_float_equal(c[1], ds_calib_sigmoid(-1) * ds_calib_sigmoid(-2), 1e-15);
    assert_int_equal(y[0], 1);
    assert_int_equal(y[1], 0);
    const double T[3] = {2, 0.5, 4};
    assert_int_equal(ds_calib_cumulative(&d, T, 3, c, y), 1);
    assert_float_equal(c[0], ds_calib_sigmoid(0.5) * ds_calib_sigmoid(4) * ds_calib_sigmoid(0.75), 1e-15);
    assert_int_equal(y[0], 0);
    ds_sts_result r;
    assert_int_equal(ds_sts_fit(&d, &r), DS_OK);
    assert_int_equal(r.n[0], 3);
    assert_int_equal(r.n[1], 2);
    assert_int_equal(r.n[2], 1);
    assert_int_equal(r.n_pos[0], 2);
    assert_int_equal(r.n_pos[1], 1);
    assert_int_equal(r.n_pos[2], 0);
}

// An untrained head (c = 0.5, z = 0): every temperature gives the same ECE, so T = 1 (ties go to
// the temperature closest to 1), and ECE = |0.5^k − acceptance| before and after.
static void test_constant_confidence_ties_to_one(void **state) {
    (void)state;
    enum { N = 1000, K = 4 };
    double *z = calloc(N * K, sizeof(double));
    int acc[N];
    for (int r = 0; r < N; r++) acc[r] = r % 10 == 0 ? 2 : r % 3 == 0; // 10% reach 2, others 0 or 1
    ds_calib_data d = {.K = K, .n = N, .z = z, .accepted = acc};
    ds_sts_result res;
    assert_int_equal(ds_sts_fit(&d, &res), DS_OK);
    for (int k = 0; k < K; k++) {
        assert_float_equal(res.temps[k], 1.0, 0);
        int pos = 0;
        for (int r = 0; r < N; r++) pos += acc[r] >= k + 1;
        const double want = fabs(pow(0.5, k + 1) - (double)pos / N);
        assert_float_equal(res.ece_before[k], want, 1e-12);
        assert_float_equal(res.ece_after[k], want, 1e-12);
    }
    assert_true(isnan(res.auc_before[2])); // nobody reached 3
    free(z);
}

// Every round rejected at slot 1: labels are all 0 at every position. The fit still picks grid
// temperatures (here the smallest, pushing negative logits towards 0), AUC is undefined.
static void test_all_rejected(void **state) {
    (void)state;
    enum { N = 500, K = 3 };
    double z[N * K];
    int acc[N];
    sm_state = 5;
    for (int i = 0; i < N * K; i++) z[i] = -0.5 - uniform();
    for (int r = 0; r < N; r++) acc[r] = 0;
    ds_calib_data d = {.K = K, .n = N, .z = z, .accepted = acc};
    ds_sts_result res;
    assert_int_equal(ds_sts_fit(&d, &res), DS_OK);
    assert_float_equal(res.temps[0], 0.125, 1e-12);
    for (int k = 0; k < K; k++) {
        assert_int_equal(res.n[k], N);
        assert_int_equal(res.n_pos[k], 0);
        assert_true(res.temps[k] >= 0.125 && res.temps[k] <= 8);
        assert_true(isnan(res.auc_before[k]) && isnan(res.auc_after[k]));
        assert_true(res.ece_after[k] <= res.ece_before[k]);
    }
}

static void test_no_rounds(void **state) {
    (void)state;
    ds_calib_data d = {.K = 7, .n = 0};
    ds_sts_result res;
    assert_int_equal(ds_sts_fit(&d, &res), DS_OK);
    assert_int_equal(res.K, 7);
    for (int k = 0; k < 7; k++) {
        assert_float_equal(res.temps[k], 1, 0);
        assert_int_equal(res.n[k], 0);
        assert_true(isnan(res.ece_before[k]) && isnan(res.ece_after[k]) && isnan(res.auc_after[k]));
    }
    // A position no round reached keeps T = 1.
    const double z[2] = {3, 3};
    const int slots[1] = {1}, acc[1] = {1};
    ds_calib_data d2 = {.K = 2, .n = 1, .z = z, .n_slots = slots, .accepted = acc};
    assert_int_equal(ds_sts_fit(&d2, &res), DS_OK);
    assert_int_equal(res.n[1], 0);
    assert_float_equal(res.temps[1], 1, 0);
}

static void test_invalid(void **state) {
    (void)state;
    ds_sts_result res;
    double z[2] = {0, 0};
    int acc[1] = {3}, slots[1] = {2};
    ds_calib_data d = {.K = 2, .n = 1, .z = z, .accepted = acc};
    assert_int_equal(ds_sts_fit(&d, &res), DS_ERR_INVALID); // accepted > slots
    acc[0] = 1;
    d.n_slots = slots;
    slots[0] = 3;
    assert_int_equal(ds_sts_fit(&d, &res), DS_ERR_INVALID); // slots > K
    slots[0] = 2;
    z[1] = NAN;
    assert_int_equal(ds_sts_fit(&d, &res), DS_ERR_INVALID);
    slots[0] = 1; // the NaN is past the verified slots: not read
    assert_int_equal(ds_sts_fit(&d, &res), DS_OK);
    d.K = 0;
    assert_int_equal(ds_sts_fit(&d, &res), DS_ERR_INVALID);
    d.K = 65;
    assert_int_equal(ds_sts_fit(&d, &res), DS_ERR_INVALID);
    assert_float_equal(ds_calib_logit(0.5), 0, 0);
    assert_float_equal(ds_calib_logit(0), log(1e-7) - log(1 - 1e-7), 1e-12);
    assert_float_equal(ds_calib_logit(1), log(1 - 1e-7) - log(1e-7), 1e-9);
}

// calibration.json through its one module: what is saved is what a drafter reads back, per class
// of sequence (the temperatures, the acceptance prior up to its first unobserved position); a file
// of one calibration serves both classes with its temperatures and gives its prior to the class of
// its "temp" only; a "sampled" fit is the sampled class's own; no file is no calibration; a prior
// that grows with the position, a "temp" that is no temperature, or a "sampled" that is not the
// sampled class are refused naming the file.
static void fill_class(ds_calibration *c, const double *t, const double *a) {
    for (int k = 0; k < c->K; k++) {
        c->temps[k] = t[k];
        c->acceptance[k] = a[k];
        c->ece_before[k] = c->ece_after[k] = c->auc_before[k] = c->auc_after[k] = NAN;
        c->n[k] = 9 - k;
    }
}

static void write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static void test_calibration_file(void **state) {
    (void)state;
    assert_int_equal(tmpdir_create("test_calibration_file"), 0);
    char path[1024];
    tmpdir_path(path, sizeof path, "calibration", ".json");
    ds_calibration_class cls[DS_CALIB_CLASSES];
    int found;
    assert_int_equal(ds_calibration_read(path, 7, cls, &found), DS_OK);
    assert_int_equal(found, 0);
    ds_calibration c = {.K = 4, .rounds = 9, .temp = 0.75, .prompts = "p.txt", .max_tokens = 16, .seed = 3};
    const double t[4] = {0.5, 1.25, 2.0, 1.0}, a[4] = {0.75, 0.5, NAN, NAN};
    fill_class(&c, t, a);
    // One calibration at a sampling temperature: its temperatures for both, its prior for sampled only.
    assert_int_equal(ds_calibration_save(&c, NULL, path), DS_OK);
    assert_int_equal(ds_calibration_read(path, 7, cls, &found), DS_OK);
    assert_int_equal(found, 1);
    for (int i = 0; i < DS_CALIB_CLASSES; i++) {
        assert_int_equal(cls[i].n_temps, 4);
        for (int k = 0; k < 4; k++) assert_true(cls[i].temps[k] == (float)t[k]);
    }
    assert_int_equal(cls[DS_CALIB_GREEDY].n_accept, 0);
    assert_int_equal(cls[DS_CALIB_SAMPLED].n_accept, 2);
    assert_true(cls[DS_CALIB_SAMPLED].accept[0] == 0.75f && cls[DS_CALIB_SAMPLED].accept[1] == 0.5f);
    // Both classes, each its own.
    ds_calibration g = c, sm = c;
    g.temp = 0, sm.temp = 1;
    const double t2[4] = {2.0, 0.5, 0.25, 4.0}, a2[4] = {0.5, 0.25, 0.125, NAN};
    fill_class(&sm, t2, a2);
    assert_int_equal(ds_calibration_save(&g, &sm, path), DS_OK);
    assert_int_equal(ds_calibration_read(path, 7, cls, &found), DS_OK);
    assert_int_equal(cls[DS_CALIB_GREEDY].n_accept, 2);
    assert_true(cls[DS_CALIB_GREEDY].accept[1] == 0.5f && cls[DS_CALIB_GREEDY].temps[0] == 0.5f);
    assert_int_equal(cls[DS_CALIB_SAMPLED].n_temps, 4);
    for (int k = 0; k < 4; k++) assert_true(cls[DS_CALIB_SAMPLED].temps[k] == (float)t2[k]);
    assert_int_equal(cls[DS_CALIB_SAMPLED].n_accept, 3);
    assert_true(cls[DS_CALIB_SAMPLED].accept[2] == 0.125f);
    // A sampled class next to a top level that is not greedy, or at temperature 0, is refused.
    assert_int_equal(ds_calibration_save(&c, &sm, path), DS_ERR_INVALID);
    write_text(path, "{\"method\": \"sts\", \"temperatures\": [1], \"temp\": 0.5, \"sampled\": {\"temperatures\": [2], \"temp\": 1}}");
    assert_int_equal(ds_calibration_read(path, 7, cls, &found), DS_ERR_FORMAT);
    assert_non_null(strstr(ds_last_error(), path));
    assert_non_null(strstr(ds_last_error(), "top level must be temp 0"));
    write_text(path, "{\"method\": \"sts\", \"temperatures\": [1], \"sampled\": {\"temperatures\": [2]}}");
    assert_int_equal(ds_calibration_read(path, 7, cls, &found), DS_ERR_FORMAT);
    assert_non_null(strstr(ds_last_error(), "\"sampled\": \"temp\" must be above 0"));
    write_text(path, "{\"method\": \"sts\", \"temperatures\": [1], \"sampled\": [2]}");
    assert_int_equal(ds_calibration_read(path, 7, cls, &found), DS_ERR_FORMAT);
    write_text(path, "{\"method\": \"sts\", \"temperatures\": [1], \"sampled\": {\"temperatures\": [-2], \"temp\": 1}}");
    assert_int_equal(ds_calibration_read(path, 7, cls, &found), DS_ERR_FORMAT);
    assert_non_null(strstr(ds_last_error(), "\"sampled\": temperatures must be positive"));
    // The checks of one class.
    assert_int_equal(ds_calibration_save(&c, NULL, path), DS_OK);
    assert_int_equal(ds_calibration_read(path, 3, cls, &found), DS_ERR_FORMAT); // longer than the block
    c.acceptance[1] = 0.8; // the prefix acceptance would grow
    assert_int_equal(ds_calibration_save(&c, NULL, path), DS_OK);
    assert_int_equal(ds_calibration_read(path, 7, cls, &found), DS_ERR_FORMAT);
    assert_non_null(strstr(ds_last_error(), path));
    assert_non_null(strstr(ds_last_error(), "must not increase"));
    c.acceptance[1] = 0.5;
    c.temp = -1; // not a temperature
    assert_int_equal(ds_calibration_save(&c, NULL, path), DS_OK);
    assert_int_equal(ds_calibration_read(path, 7, cls, &found), DS_ERR_FORMAT);
    assert_non_null(strstr(ds_last_error(), "\"temp\""));
    tmpdir_remove();
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sts_recovers_known_temperatures),
        cmocka_unit_test(test_auc_rank_preserving),
        cmocka_unit_test(test_ece_hand),
        cmocka_unit_test(test_auc_hand),
        cmocka_unit_test(test_missing_positions),
        cmocka_unit_test(test_constant_confidence_ties_to_one),
        cmocka_unit_test(test_all_rejected),
        cmocka_unit_test(test_no_rounds),
        cmocka_unit_test(test_invalid),
        cmocka_unit_test(test_calibration_file),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
