// Draft vocabularies (ds_drafter_set_vocab): the drafter proposes only tokens of the set, and over
// the set it computes exactly what the full drafter computes (same logits bit for bit, the Markov
// head included); every other logit is -inf, so sampled drafts never leave the set and q is 0
// outside it; verification with such a q is still exact (a chi-square test). Also: row selection of
// every weight type, the batched path, bad sets, and draft_vocab.json.
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "draft/drafter.h"
#include "dspark.h"
#include "kernels/half.h"
#include "kernels/matmul.h"
#include "kernels/affine.h"
#include "speculate/verify.h"
#include "stories.h"

enum { V = 512 };
static ds_model *g_m;
static ds_drafter *g_d;
static float *g_w2; // a random Markov W2 (a fresh drafter's is 0), so the Markov path is exercised

static float frand(uint64_t *s) {
    *s = *s * 6364136223846793005ULL + 1442695040888963407ULL;
    return (float)((*s >> 40) * (1.0 / (1 << 24))) * 2.0f - 1.0f;
}

static int setup(void **state) {
    (void)state;
    if (stories_load_with_drafter("draft_vocab", 2, 5, &g_m, &g_d)) return -1;
    const int r = g_d->r;
    g_w2 = malloc(sizeof(float) * (size_t)V * r);
    uint64_t s = 7;
    for (int i = 0; i < V * r; i++) g_w2[i] = frand(&s);
    g_d->markov_w2 = (ds_weight){DS_F32, V, r, g_w2};
    return 0;
}

static int teardown(void **state) {
    (void)state;
    ds_drafter_free(g_d);
    ds_model_free(g_m);
    free(g_w2);
    return 0;
}

// A draft context of n rows from a real target forward.
static ds_draft_state *context(int n) {
    ds_draft_state *s = stories_draft_context(g_m, g_d, n, 0);
    assert_non_null(s);
    return s;
}

static int in_set(const int32_t *ids, int n, int32_t t) {
    for (int i = 0; i < n; i++)
        if (ids[i] == t) return 1;
    return 0;
}

// Greedy: with a set holding every token the full walk drafts (so both walks see the same previous
// tokens), the logits over the set are the full drafter's bit for bit, -inf elsewhere, and the
// drafts are the same. With the full walk's first draft left out, the first draft is the argmax of
// the full logits over the set.
static void test_greedy_matches_full_over_the_set(void **state) {
    (void)state;
    const int B = g_d->info.block_size;
    ds_draft_state *s = context(9);
    ds_sampler_params sp = ds_sampler_default();
    sp.temperature = 0;
    ds_rng rng = ds_rng_init(1, 0);
    int32_t full_tok[64], tok[64];
    float *full = malloc(sizeof(float) * (size_t)B * V), *sub = malloc(sizeof(float) * (size_t)B * V);
    float cf[64], cs[64];
    assert_int_equal(ds_drafter_draft(g_d, s, 403, B, &sp, &rng, full_tok, full, cf), DS_OK);
    int32_t ids[160];
    int n = 0;
    for (int k = 0; k < B; k++)
        if (!in_set(ids, n, full_tok[k])) ids[n++] = full_tok[k];
    for (int32_t t = 3; n < 150; t = (t + 7) % V)
        if (!in_set(ids, n, t)) ids[n++] = t;
    assert_int_equal(ds_drafter_set_vocab(g_d, ids, n), DS_OK); // unsorted on purpose
    assert_int_equal(ds_drafter_vocab_size(g_d), n);
    assert_int_equal(ds_drafter_draft(g_d, s, 403, B, &sp, &rng, tok, sub, cs), DS_OK);
    assert_memory_equal(tok, full_tok, sizeof(int32_t) * (size_t)B);
    for (int k = 0; k < B; k++) {
        assert_true(cs[k] == cf[k]);
        for (int t = 0; t < V; t++) {
            const float a = sub[(size_t)k * V + t], b = full[(size_t)k * V + t];
            if (in_set(ids, n, t)) assert_true(a == b);
            else assert_true(isinf(a) && a < 0);
        }
    }
    // Without the first draft: slot 0 (whose previous token is the anchor for both) is the argmax of
    // the full slot-0 logits over the set.
    int32_t best = -1;
    for (int i = 1; i < n; i++)
        if (best < 0 || full[ids[i]] > full[best] || (full[ids[i]] == full[best] && ids[i] < best)) best = ids[i];
    assert_int_equal(ds_drafter_set_vocab(g_d, ids + 1, n - 1), DS_OK);
    assert_int_equal(ds_drafter_draft(g_d, s, 403, 1, &sp, &rng, tok, sub, cs), DS_OK);
    assert_int_equal(tok[0], best);
    assert_int_equal(ds_drafter_set_vocab(g_d, NULL, 0), DS_OK); // back to the full vocabulary
    assert_int_equal(ds_drafter_vocab_size(g_d), V);
    assert_int_equal(ds_drafter_draft(g_d, s, 403, B, &sp, &rng, tok, sub, cs), DS_OK);
    assert_memory_equal(sub, full, sizeof(float) * (size_t)B * V);
    ds_draft_state_free(s);
    free(full);
    free(sub);
}

// Sampled: every draft is in the set and the processed draft distribution is 0 outside it; the
// batched path drafts what the single one does.
static void test_sampled_stays_in_the_set(void **state) {
    (void)state;
    const int B = g_d->info.block_size;
    int32_t ids[64];
    for (int i = 0; i < 64; i++) ids[i] = (int32_t)(i * 5 + 2);
    assert_int_equal(ds_drafter_set_vocab(g_d, ids, 64), DS_OK);
    ds_sampler_params sp = ds_sampler_default();
    sp.temperature = 1.0f;
    sp.top_k = 100; // more than the set: -inf entries survive top-k and must still get probability 0
    ds_draft_state *a = context(6), *b = context(6);
    float *la = malloc(sizeof(float) * (size_t)B * V), *lb = malloc(sizeof(float) * (size_t)B * V);
    float *probs = malloc(sizeof(float) * V), ca[64], cb[64];
    void *scratch = malloc(ds_sampler_scratch_size(V));
    ds_draft_batch *bt;
    assert_int_equal(ds_draft_batch_init(g_d, &bt), DS_OK);
    for (int round = 0; round < 20; round++) {
        int32_t ta[64], tb[64];
        ds_rng ra = ds_rng_init(5, (uint64_t)round), rb = ra;
        const int32_t anchor = (int32_t)(round * 23 % V);
        assert_int_equal(ds_drafter_draft(g_d, a, anchor, B, &sp, &ra, ta, la, ca), DS_OK);
        const ds_draft_seq q = {.state = b, .anchor = anchor, .n_slots = B, .sp = &sp, .rng = &rb, .tokens = tb,
                                .logits = lb, .conf = cb};
        assert_int_equal(ds_drafter_draft_batch(g_d, bt, &q, 1), DS_OK);
        assert_memory_equal(ta, tb, sizeof(int32_t) * (size_t)B);
        for (int k = 0; k < B; k++) {
            assert_true(in_set(ids, 64, ta[k]));
            assert_int_equal(ds_probs_process(&sp, la + (size_t)k * V, V, probs, scratch), DS_OK);
            double sum = 0;
            for (int t = 0; t < V; t++) {
                if (!in_set(ids, 64, t)) assert_true(probs[t] == 0.0f);
                sum += probs[t];
            }
            assert_true(fabs(sum - 1.0) < 1e-4);
        }
    }
    ds_draft_batch_free(bt);
    ds_draft_state_free(a);
    ds_draft_state_free(b);
    free(la);
    free(lb);
    free(probs);
    free(scratch);
    assert_int_equal(ds_drafter_set_vocab(g_d, NULL, 0), DS_OK);
}

static void test_bad_sets(void **state) {
    (void)state;
    const int32_t dup[3] = {4, 9, 4}, out[2] = {1, V}, neg[1] = {-1};
    assert_int_equal(ds_drafter_set_vocab(g_d, dup, 3), DS_ERR_INVALID);
    assert_non_null(strstr(ds_last_error(), "twice"));
    assert_int_equal(ds_drafter_set_vocab(g_d, out, 2), DS_ERR_INVALID);
    assert_int_equal(ds_drafter_set_vocab(g_d, neg, 1), DS_ERR_INVALID);
    assert_int_equal(ds_drafter_set_vocab(g_d, dup, V + 1), DS_ERR_INVALID);
    assert_int_equal(ds_drafter_vocab_size(g_d), V); // unchanged by the failures
}

// draft_vocab.json in a drafter directory is loaded with it; a bad one fails the load, naming it.
static void test_vocab_file(void **state) {
    (void)state;
    char dir[4096], path[4200];
    const char *tmp = getenv("DSPARK_TMP");
    snprintf(dir, sizeof dir, "%s/draft_vocab_file_%ld", tmp ? tmp : "/tmp", (long)getpid());
    ds_drafter_init_params p = ds_drafter_init_default();
    p.n_layers = 1;
    p.markov_rank = 8;
    assert_int_equal(ds_drafter_init_write(g_m, &p, dir), DS_OK);
    const int32_t ids[4] = {10, 3, 7, 500};
    assert_int_equal(ds_drafter_save_vocab(dir, ids, 4), DS_OK);
    ds_drafter *d;
    assert_int_equal(ds_drafter_load(dir, g_m, &d), DS_OK);
    assert_int_equal(ds_drafter_vocab_size(d), 4);
    ds_drafter_free(d);
    const int32_t bad[2] = {3, 3};
    assert_int_equal(ds_drafter_save_vocab(dir, bad, 2), DS_OK);
    assert_int_not_equal(ds_drafter_load(dir, g_m, &d), DS_OK);
    assert_non_null(strstr(ds_last_error(), "draft_vocab.json"));
    snprintf(path, sizeof path, "%s/draft_vocab.json", dir);
    FILE *f = fopen(path, "w");
    fputs("{\"token_ids\": [1, 2.5]}\n", f);
    fclose(f);
    assert_int_not_equal(ds_drafter_load(dir, g_m, &d), DS_OK);
    assert_non_null(strstr(ds_last_error(), "integers"));
    char cmd[4300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);
}

// ds_weight_select_rows: the product over the selected rows equals the full product's columns bit
// for bit (the kernels' arithmetic per output row depends on that row and the input only), for
// F32, BF16, F16 and affine 8/4-bit weights.
static void test_select_rows(void **state) {
    (void)state;
    enum { ROWS = 96, COLS = 256, N = 5, K = 9 };
    uint64_t s = 11;
    float *f = malloc(sizeof(float) * ROWS * COLS), *x = malloc(sizeof(float) * N * COLS);
    for (int i = 0; i < ROWS * COLS; i++) f[i] = frand(&s);
    for (int i = 0; i < N * COLS; i++) x[i] = frand(&s);
    uint16_t *h = malloc(2 * ROWS * COLS), *b16 = malloc(2 * ROWS * COLS);
    for (int i = 0; i < ROWS * COLS; i++) {
        h[i] = ds_f32_to_f16(f[i]);
        b16[i] = ds_f32_to_bf16(f[i]);
    }
    uint32_t *pk[2];
    float *sc[2], *bi[2];
    for (int q = 0; q < 2; q++) {
        const int bits = q ? 4 : 8, G = COLS / 32;
        pk[q] = malloc((size_t)ROWS * COLS * bits / 8);
        sc[q] = malloc(sizeof(float) * ROWS * G);
        bi[q] = malloc(sizeof(float) * ROWS * G);
        for (int r = 0; r < ROWS; r++)
            ds_affine_quantize_row(f + (size_t)r * COLS, COLS, bits, 32, pk[q] + (size_t)r * COLS * bits / 32,
                                   sc[q] + (size_t)r * G, bi[q] + (size_t)r * G);
    }
    const ds_weight ws[5] = {{DS_F32, ROWS, COLS, f},
                             {DS_BF16, ROWS, COLS, b16},
                             {DS_F16, ROWS, COLS, h},
                             {DS_AFFINE8, ROWS, COLS, pk[0], 32, DS_F32, sc[0], bi[0]},
                             {DS_AFFINE4, ROWS, COLS, pk[1], 32, DS_F32, sc[1], bi[1]}};
    const int32_t ids[K] = {95, 0, 17, 18, 3, 64, 50, 1, 77};
    float *yf = malloc(sizeof(float) * N * ROWS), *ys = malloc(sizeof(float) * N * K);
    float *scratch = malloc(sizeof(float) * 8 * (COLS * 8 + 16) * 64);
    for (int t = 0; t < 5; t++) {
        ds_weight sel;
        void *bufs[3];
        assert_int_equal(ds_weight_select_rows(&ws[t], ids, K, &sel, bufs), 0);
        assert_int_equal(sel.rows, K);
        ds_matmul(yf, x, &ws[t], N, scratch);
        ds_matmul(ys, x, &sel, N, scratch);
        for (int i = 0; i < N; i++)
            for (int j = 0; j < K; j++) assert_true(ys[(size_t)i * K + j] == yf[(size_t)i * ROWS + ids[j]]);
        float row[COLS], want[COLS];
        ds_weight_row_f32(&sel, 2, row);
        ds_weight_row_f32(&ws[t], ids[2], want);
        assert_memory_equal(row, want, sizeof row);
        for (int k = 0; k < 3; k++) free(bufs[k]);
    }
    for (int q = 0; q < 2; q++) {
        free(pk[q]);
        free(sc[q]);
        free(bi[q]);
    }
    free(f);
    free(x);
    free(h);
    free(b16);
    free(yf);
    free(ys);
    free(scratch);
}

// Lossless with a draft vocabulary, sampled: draft logits of -inf outside a set (q = 0 where the
// target has mass) still give exactly the target's distribution for the first emitted token
// (min(1, p/q) acceptance, the residual max(p - q, 0) carries the tokens outside the set), top-k
// wider than the set included. Chi-square over 200000 rounds.
static void test_verify_exact_with_zero_q(void **state) {
    (void)state;
    enum { W = 5, N = 200000 };
    const float p[W] = {0.1f, 0.25f, 0.05f, 0.4f, 0.2f};
    float p_logits[2 * W], q_logits[W], pp[W], qq[W];
    for (int i = 0; i < W; i++) p_logits[i] = p_logits[W + i] = logf(p[i]);
    const float q_set[W] = {0.6f, 0.0f, 0.4f, 0.0f, 0.0f}; // the draft vocabulary is {0, 2}
    for (int i = 0; i < W; i++) q_logits[i] = q_set[i] > 0 ? logf(q_set[i]) : -INFINITY;
    void *scratch = malloc(ds_sampler_scratch_size(W));
    ds_verify_scratch vs = {.p = pp, .q = qq, .sscratch = scratch};
    ds_sampler_params sp = ds_sampler_default();
    sp.temperature = 1.0f;
    sp.top_k = 4; // keeps a -inf entry next to the set, drops p's smallest token (2) from both
    sp.verify = DS_VERIFY_RESIDUAL; // the rule in which q enters the acceptance (coupled never reads q)
    const float want[W] = {0.1f / 0.95f, 0.25f / 0.95f, 0.0f, 0.4f / 0.95f, 0.2f / 0.95f};
    ds_rng rng = ds_rng_init(77, 0);
    long count[W] = {0};
    float q_proc[W];
    assert_int_equal(ds_probs_process(&sp, q_logits, W, q_proc, scratch), DS_OK);
    for (int n = 0; n < N; n++) {
        const int32_t d = ds_sample_probs(q_proc, W, &rng);
        assert_true(q_set[d] > 0); // drafts come from the set
        int a;
        int32_t next;
        assert_int_equal(ds_verify(&sp, W, 1, &d, p_logits, q_logits, NULL, 0, &rng, 0, &vs, &a, &next), DS_OK);
        count[a ? d : next]++;
    }
    double chi2 = 0;
    for (int i = 0; i < W; i++) {
        if (want[i] == 0) {
            assert_int_equal(count[i], 0);
            continue;
        }
        chi2 += pow((double)count[i] - N * want[i], 2) / (N * want[i]);
    }
    assert_true(chi2 < 16.27); // 3 degrees of freedom, p = 0.001
    free(scratch);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_greedy_matches_full_over_the_set), cmocka_unit_test(test_sampled_stays_in_the_set),
        cmocka_unit_test(test_bad_sets), cmocka_unit_test(test_vocab_file), cmocka_unit_test(test_select_rows),
        cmocka_unit_test(test_verify_exact_with_zero_q)};
    return cmocka_run_group_tests(tests, setup, teardown);
}
