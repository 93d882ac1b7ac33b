// The target runtime on stories260K: rollback (truncate) restores the exact state, chunked and
// batched forwards agree with single ones, taps are consistent with the final hidden state, and bad
// arguments are rejected with a message.
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "dspark.h"
#include "stories.h"

static ds_model *g_model;
static int V, D;

static int setup(void **state) {
    (void)state;
    if (stories_load(&g_model)) return -1;
    V = ds_model_get_info(g_model)->vocab_size;
    D = ds_model_get_info(g_model)->dim;
    return 0;
}

static int teardown(void **state) {
    (void)state;
    ds_model_free(g_model);
    return 0;
}

// Feed `n` tokens to kv (a cache of m) and return the logits of every row in out (n, V).
static void feed_model(ds_model *m, ds_kv *kv, ds_workspace *ws, const int32_t *t, int n, float *out) {
    ds_forward_seq s = {.kv = kv, .tokens = t, .n_tokens = n, .n_logits = n, .logits = out};
    assert_int_equal(ds_model_forward(m, ws, &s, 1), DS_OK);
}
static void feed(ds_kv *kv, ds_workspace *ws, const int32_t *t, int n, float *out) {
    feed_model(g_model, kv, ws, t, n, out);
}

static double max_diff(const float *a, const float *b, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; i++) m = fmax(m, fabs((double)a[i] - b[i]));
    return m;
}

static void test_rollback_is_exact(void **state) {
    (void)state;
    const int32_t A[] = {1, 403, 407, 261, 378}, B[] = {66, 12, 300, 301, 302, 7}, C[] = {284, 370, 9};
    ds_kv *kv1, *kv2;
    ds_workspace *ws;
    assert_int_equal(ds_kv_init(g_model, 64, &kv1), DS_OK);
    assert_int_equal(ds_kv_init(g_model, 64, &kv2), DS_OK);
    assert_int_equal(ds_workspace_init(g_model, &ws), DS_OK);
    float *lA = malloc(sizeof(float) * 16 * V), *lB = malloc(sizeof(float) * 16 * V);
    float *l1 = malloc(sizeof(float) * 16 * V), *l2 = malloc(sizeof(float) * 16 * V);
    // A + B, roll back to |A|, then C ...
    feed(kv1, ws, A, 5, lA);
    feed(kv1, ws, B, 6, lB);
    assert_int_equal(ds_kv_len(kv1), 11);
    assert_int_equal(ds_kv_truncate(kv1, 5), DS_OK);
    assert_int_equal(ds_kv_len(kv1), 5);
    feed(kv1, ws, C, 3, l1);
    // ... equals A then C, bit for bit.
    feed(kv2, ws, A, 5, lA);
    feed(kv2, ws, C, 3, l2);
    assert_memory_equal(l1, l2, sizeof(float) * 3 * V);
    // Rolling back to 0 and replaying gives the first result again.
    assert_int_equal(ds_kv_truncate(kv2, 0), DS_OK);
    feed(kv2, ws, A, 5, l2);
    assert_memory_equal(lA, l2, sizeof(float) * 5 * V);
    // Truncating forward is an error with a message.
    assert_int_equal(ds_kv_truncate(kv2, 6), DS_ERR_INVALID);
    assert_non_null(strstr(ds_last_error(), "truncate"));
    ds_kv_free(kv1);
    ds_kv_free(kv2);
    ds_workspace_free(ws);
    free(lA), free(lB), free(l1), free(l2);
}

static void test_chunked_and_batched_agree(void **state) {
    (void)state;
    int32_t t[20];
    for (int i = 0; i < 20; i++) t[i] = (int32_t)((i * 37 + 11) % V);
    t[0] = 1;
    ds_kv *a, *b, *c;
    ds_workspace *ws;
    assert_int_equal(ds_kv_init(g_model, 64, &a), DS_OK);
    assert_int_equal(ds_kv_init(g_model, 64, &b), DS_OK);
    assert_int_equal(ds_kv_init(g_model, 64, &c), DS_OK);
    assert_int_equal(ds_workspace_init(g_model, &ws), DS_OK);
    float *whole = malloc(sizeof(float) * 20 * V), *parts = malloc(sizeof(float) * 20 * V);
    feed(a, ws, t, 20, whole);
    feed(b, ws, t, 9, parts);
    for (int i = 9; i < 20; i++) feed(b, ws, t + i, 1, parts + (size_t)i * V);
    assert_true(max_diff(whole, parts, (size_t)20 * V) < 1e-4);

    // Two sequences in one ragged batch (one prefilling, one decoding) equal each run alone.
    ds_kv_truncate(a, 12);
    ds_kv *k2;
    assert_int_equal(ds_kv_init(g_model, 64, &k2), DS_OK);
    float *la = malloc(sizeof(float) * 8 * V), *lc = malloc(sizeof(float) * 8 * V);
    float *ra = malloc(sizeof(float) * 8 * V), *rc = malloc(sizeof(float) * 8 * V);
    ds_forward_seq both[2] = {
        {.kv = a, .tokens = t + 12, .n_tokens = 1, .n_logits = 1, .logits = la},
        {.kv = c, .tokens = t, .n_tokens = 7, .n_logits = 3, .logits = lc},
    };
    assert_int_equal(ds_model_forward(g_model, ws, both, 2), DS_OK);
    assert_int_equal(ds_kv_len(a), 13);
    assert_int_equal(ds_kv_len(c), 7);
    ds_kv_truncate(a, 12);
    ds_forward_seq one = {.kv = a, .tokens = t + 12, .n_tokens = 1, .n_logits = 1, .logits = ra};
    assert_int_equal(ds_model_forward(g_model, ws, &one, 1), DS_OK);
    ds_forward_seq two = {.kv = k2, .tokens = t, .n_tokens = 7, .n_logits = 3, .logits = rc};
    assert_int_equal(ds_model_forward(g_model, ws, &two, 1), DS_OK);
    assert_true(max_diff(la, ra, (size_t)V) < 1e-5);
    assert_true(max_diff(lc, rc, (size_t)3 * V) < 1e-5);
    // And they match the whole-sequence logits of the same positions.
    assert_true(max_diff(la, whole + (size_t)12 * V, (size_t)V) < 1e-4);
    assert_true(max_diff(lc, whole + (size_t)4 * V, (size_t)3 * V) < 1e-4);
    ds_kv_free(a), ds_kv_free(b), ds_kv_free(c), ds_kv_free(k2);
    ds_workspace_free(ws);
    free(whole), free(parts), free(la), free(lc), free(ra), free(rc);
}

static void test_taps_consistent(void **state) {
    (void)state;
    const ds_model_info *in = ds_model_get_info(g_model);
    const int32_t t[4] = {1, 403, 407, 261};
    const int taps[3] = {in->n_layers - 1, -1, 0};
    float *tapv = malloc(sizeof(float) * 4 * 3 * D), *hidden = malloc(sizeof(float) * 4 * D);
    float *logits = malloc(sizeof(float) * 4 * V);
    ds_kv *kv;
    ds_workspace *ws;
    assert_int_equal(ds_kv_init(g_model, 16, &kv), DS_OK);
    assert_int_equal(ds_workspace_init(g_model, &ws), DS_OK);
    ds_forward_seq s = {.kv = kv, .tokens = t, .n_tokens = 4, .n_logits = 4, .logits = logits, .tap_layers = taps,
                        .n_taps = 3, .taps = tapv, .hidden = hidden};
    assert_int_equal(ds_model_forward(g_model, ws, &s, 1), DS_OK);
    for (int r = 0; r < 4; r++) {
        // RMSNorm of the last layer's residual is proportional to the final normed hidden state
        // (elementwise, up to the norm weight): check the ratio hidden / (x / rms) is row-independent.
        const float *last = tapv + (size_t)r * 3 * D;
        double ss = 0;
        for (int j = 0; j < D; j++) ss += (double)last[j] * last[j];
        const double inv = 1.0 / sqrt(ss / D + in->norm_eps);
        const float *first = tapv + (size_t)0 * 3 * D;
        double ss0 = 0;
        for (int j = 0; j < D; j++) ss0 += (double)first[j] * first[j];
        const double inv0 = 1.0 / sqrt(ss0 / D + in->norm_eps);
        for (int j = 0; j < D; j++) {
            const double w_r = hidden[(size_t)r * D + j] / (last[j] * inv);
            const double w_0 = hidden[j] / (first[j] * inv0);
            if (fabs(last[j]) > 1e-3 && fabs(first[j]) > 1e-3) assert_true(fabs(w_r - w_0) < 1e-3 * (1 + fabs(w_0)));
        }
        // The embedding tap (-1) is the token's embedding row: rows with the same token agree.
    }
    ds_kv_free(kv);
    ds_workspace_free(ws);
    free(tapv), free(hidden), free(logits);
}

static void test_bad_arguments(void **state) {
    (void)state;
    ds_kv *kv;
    ds_workspace *ws;
    float logits[512];
    assert_int_equal(ds_kv_init(g_model, 4, &kv), DS_OK);
    assert_int_equal(ds_workspace_init(g_model, &ws), DS_OK);
    const int32_t bad[1] = {V};
    ds_forward_seq s = {.kv = kv, .tokens = bad, .n_tokens = 1, .n_logits = 1, .logits = logits};
    assert_int_equal(ds_model_forward(g_model, ws, &s, 1), DS_ERR_INVALID);
    assert_non_null(strstr(ds_last_error(), "outside the vocabulary"));
    assert_int_equal(ds_kv_len(kv), 0);
    const int32_t five[5] = {1, 2, 3, 4, 5};
    s.tokens = five;
    s.n_tokens = 5;
    assert_int_equal(ds_model_forward(g_model, ws, &s, 1), DS_ERR_INVALID);
    assert_non_null(strstr(ds_last_error(), "exceeds"));
    const int tap_bad[1] = {99};
    float tv[64 * 5];
    s.n_tokens = 1;
    s.tap_layers = tap_bad;
    s.n_taps = 1;
    s.taps = tv;
    assert_int_equal(ds_model_forward(g_model, ws, &s, 1), DS_ERR_INVALID);
    assert_non_null(strstr(ds_last_error(), "tap layer"));
    ds_forward_seq dup[2] = {{.kv = kv, .tokens = five, .n_tokens = 1}, {.kv = kv, .tokens = five, .n_tokens = 1}};
    assert_int_equal(ds_model_forward(g_model, ws, dup, 2), DS_ERR_INVALID);
    ds_kv_free(kv);
    ds_workspace_free(ws);
}

static void test_missing_file_message(void **state) {
    (void)state;
    ds_model *m = NULL;
    assert_int_equal(ds_model_load("/nonexistent/model.gguf", NULL, &m), DS_ERR_IO);
    assert_null(m);
    assert_non_null(strstr(ds_last_error(), "/nonexistent/model.gguf"));
}

// Rss (KiB) of each mapping of a file whose name ends with `name`, by start address (up to cap).
static int file_mappings(const char *name, unsigned long *start, long *rss_kb, int cap) {
    FILE *f = fopen("/proc/self/smaps", "r");
    char line[4608];
    int n = 0, in = 0;
    while (f && fgets(line, sizeof line, f)) {
        unsigned long a, b;
        char perms[8];
        if (sscanf(line, "%lx-%lx %7s", &a, &b, perms) == 3) { // a mapping's header line
            const size_t len = strlen(line), nl = strlen(name);
            in = len > nl + 1 && !strncmp(line + len - 1 - nl, name, nl) && n < cap;
            if (in) start[n] = a, rss_kb[n++] = 0;
        } else if (in && !strncmp(line, "Rss:", 4)) {
            rss_kb[n - 1] = atol(line + 4);
        }
    }
    if (f) fclose(f);
    return n;
}

// ds_model_load enters the matrices a decode step reads into the page tables (ds_model_params
// .no_populate off): the file's new mapping is resident for at least the weight bytes right after
// the load, before any forward (a fresh process's first forward then takes no page faults).
static void test_populated_at_load(void **state) {
    (void)state;
    unsigned long before[16], after[16];
    long rss_before[16], rss_after[16];
    const int nb = file_mappings("stories260K.gguf", before, rss_before, 16);
    ds_model *m = NULL;
    assert_int_equal(stories_load_with(&m, &(ds_model_params){.n_threads = 1}), 0);
    const int na = file_mappings("stories260K.gguf", after, rss_after, 16);
    assert_int_equal(na, nb + 1);
    long rss = -1;
    for (int i = 0; i < na; i++) {
        int old = 0;
        for (int j = 0; j < nb; j++) old |= after[i] == before[j];
        if (!old) rss = rss_after[i];
    }
    assert_true(rss * 1024 >= (long)ds_model_get_info(m)->weight_bytes);
    ds_model_free(m);
}

// ds_forward_seq.batch_invariant: with one sequence of a 16-row batch asking for it (past the
// sgemm crossover of every weight type but the 16-bit ones), every row's logits are bitwise those
// of the row run alone (the multi-row kernel's result for a row is a function of that row).
static void test_batch_invariant(void **state) {
    (void)state;
    enum { N = 24 };
    ds_kv *kv[N];
    ds_workspace *ws;
    int32_t tok[N];
    float *batch = malloc(sizeof(float) * (size_t)N * V), *alone = malloc(sizeof(float) * (size_t)V);
    assert_non_null(batch);
    assert_non_null(alone);
    assert_int_equal(ds_workspace_init(g_model, &ws), DS_OK);
    ds_forward_seq f[N];
    for (int i = 0; i < N; i++) {
        assert_int_equal(ds_kv_init(g_model, 8, &kv[i]), DS_OK);
        tok[i] = (int32_t)(1 + 17 * i);
        f[i] = (ds_forward_seq){.kv = kv[i], .tokens = &tok[i], .n_tokens = 1, .n_logits = 1,
                                .logits = batch + (size_t)i * V, .batch_invariant = i == 0};
    }
    assert_int_equal(ds_model_forward(g_model, ws, f, N), DS_OK);
    for (int i = 0; i < N; i++) {
        assert_int_equal(ds_kv_truncate(kv[i], 0), DS_OK);
        ds_forward_seq one = {.kv = kv[i], .tokens = &tok[i], .n_tokens = 1, .n_logits = 1, .logits = alone};
        assert_int_equal(ds_model_forward(g_model, ws, &one, 1), DS_OK);
        assert_memory_equal(alone, batch + (size_t)i * V, sizeof(float) * (size_t)V);
        ds_kv_free(kv[i]);
    }
    ds_workspace_free(ws);
    free(batch);
    free(alone);
}

// A token tree (ds_forward_seq.parent) computes every row bit for bit as the chain of its path: three
// branches (one crossing 16-column lane blocks) after prompts of several lengths; after ds_kv_keep of
// a path the cache continues exactly as the chain's does; with a cache of floats (g_model) and of
// halves (kv_f16: the tree's gathered columns are halves too).
static void token_tree(ds_model *m) {
    enum { N = 23, NP = 40 };
    // rows 0..11: a chain from the root; 12..19: a branch from row 3; 20..22: a branch from row 0
    int32_t par[N], tok[N], prompt[NP];
    for (int i = 0; i < N; i++) {
        par[i] = i == 0 ? -1 : i == 12 ? 3 : i == 20 ? 0 : i - 1;
        tok[i] = (int32_t)(3 + (37 * i + 11) % (V - 3));
    }
    for (int i = 0; i < NP; i++) prompt[i] = i ? (int32_t)(5 + (29 * i) % (V - 5)) : 1;
    const int leaves[] = {11, 19, 22}, lens[] = {5, 16, 17, 30, 33};
    float *lt = malloc(sizeof(float) * N * V), *lc = malloc(sizeof(float) * N * V);
    float *ht = malloc(sizeof(float) * N * D), *hc = malloc(sizeof(float) * N * D);
    ds_workspace *ws;
    assert_int_equal(ds_workspace_init(m, &ws), DS_OK);
    for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++)
        for (size_t e = 0; e < 3; e++) {
            const int np = lens[li];
            ds_kv *kt, *kc;
            assert_int_equal(ds_kv_init(m, 128, &kt), DS_OK);
            assert_int_equal(ds_kv_init(m, 128, &kc), DS_OK);
            float *junk = malloc(sizeof(float) * NP * V);
            feed_model(m, kt, ws, prompt, np, junk);
            feed_model(m, kc, ws, prompt, np, junk);
            free(junk);
            ds_forward_seq ft = {.kv = kt, .tokens = tok, .n_tokens = N, .n_logits = N, .logits = lt, .hidden = ht,
                                 .batch_invariant = 1, .parent = par};
            assert_int_equal(ds_model_forward(m, ws, &ft, 1), DS_OK);
            int path[N], n = 0; // the leaf's path, root first
            for (int r = leaves[e]; r >= 0; r = par[r]) path[n++] = r;
            for (int i = 0; i < n / 2; i++) {
                const int t = path[i];
                path[i] = path[n - 1 - i];
                path[n - 1 - i] = t;
            }
            int32_t ctok[N];
            for (int i = 0; i < n; i++) ctok[i] = tok[path[i]];
            ds_forward_seq fc = {.kv = kc, .tokens = ctok, .n_tokens = n, .n_logits = n, .logits = lc, .hidden = hc,
                                 .batch_invariant = 1};
            assert_int_equal(ds_model_forward(m, ws, &fc, 1), DS_OK);
            for (int i = 0; i < n; i++) {
                assert_memory_equal(lc + (size_t)i * V, lt + (size_t)path[i] * V, sizeof(float) * V);
                assert_memory_equal(hc + (size_t)i * D, ht + (size_t)path[i] * D, sizeof(float) * D);
            }
            // Keep the path; one more token continues both caches alike.
            assert_int_equal(ds_kv_keep(kt, np, path, n), DS_OK);
            assert_int_equal(ds_kv_len(kt), np + n);
            const int32_t next = 42;
            feed_model(m, kt, ws, &next, 1, lt);
            feed_model(m, kc, ws, &next, 1, lc);
            assert_memory_equal(lc, lt, sizeof(float) * V);
            ds_kv_free(kt);
            ds_kv_free(kc);
        }
    // Refused: a parent that is not an earlier row, a path that is not increasing.
    ds_kv *kv;
    assert_int_equal(ds_kv_init(m, 128, &kv), DS_OK);
    int32_t bad[3] = {-1, 0, 2};
    ds_forward_seq fb = {.kv = kv, .tokens = tok, .n_tokens = 3, .n_logits = 3, .logits = lt, .parent = bad};
    assert_int_equal(ds_model_forward(m, ws, &fb, 1), DS_ERR_INVALID);
    assert_non_null(strstr(ds_last_error(), "parent"));
    bad[2] = 0;
    assert_int_equal(ds_model_forward(m, ws, &fb, 1), DS_OK);
    const int rows[] = {0, 2, 1};
    assert_int_equal(ds_kv_keep(kv, 0, rows, 3), DS_ERR_INVALID);
    ds_kv_free(kv);
    ds_workspace_free(ws);
    free(lt), free(lc), free(ht), free(hc);
}

static void test_token_tree(void **state) {
    (void)state;
    token_tree(g_model);
    ds_model *h;
    const ds_model_params mp = {.n_threads = 1, .kv_f16 = 1};
    assert_int_equal(stories_load_with(&h, &mp), 0);
    token_tree(h);
    ds_model_free(h);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rollback_is_exact), cmocka_unit_test(test_chunked_and_batched_agree),
        cmocka_unit_test(test_taps_consistent), cmocka_unit_test(test_bad_arguments),
        cmocka_unit_test(test_missing_file_message), cmocka_unit_test(test_batch_invariant),
        cmocka_unit_test(test_token_tree),
        cmocka_unit_test(test_populated_at_load),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
