// The engine's round structure on stories260K: chunked prefill (a long prompt joining does not stall
// the sequences already decoding, and the results equal decoding each sequence alone), finish
// reasons, and speculation with a drafter through the same path (greedy: token-identical).
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
#include "model/model.h"
#include "speculate/engine_hooks.h"

static ds_model *g_m;
static ds_drafter *g_d;

static int setup(void **state) {
    (void)state;
    return stories_load_with_drafter("engine", 1, 3, &g_m, &g_d);
}

static int teardown(void **state) {
    (void)state;
    ds_drafter_free(g_d);
    ds_model_free(g_m);
    return 0;
}

// A deterministic prompt of n tokens: BOS then ids drawn from the ordinary vocabulary.
static void prompt_of(int32_t *p, int n, int seed) {
    p[0] = ds_model_get_info(g_m)->bos_id;
    for (int i = 1; i < n; i++) p[i] = (int32_t)(3 + (i * 131 + seed * 17) % 500);
}

// Steps e until sequence id finishes, its tokens appended to out (n already there, room for cap):
// the total.
static int run_out(ds_engine *e, int id, int32_t *out, int n, int cap) {
    while (!ds_engine_finished(e, id)) {
        assert_int_equal(ds_engine_step(e), DS_OK);
        n += ds_engine_take(e, id, out + n, cap - n);
    }
    return n;
}

// Greedy output and stats of one sequence through an engine of spec kind `kind` (the drafter for
// DS_SPEC_DSPARK, a fixed schedule).
static int decode_with(ds_spec_kind kind, const int32_t *prompt, int n_prompt, int max_new, int32_t *out,
                       ds_seq_stats *stats) {
    ds_spec_params sp = {.kind = kind, .schedule = DS_SCHEDULE_FIXED};
    ds_engine *e;
    assert_int_equal(ds_engine_init(g_m, kind == DS_SPEC_DSPARK ? g_d : NULL, &sp, &e), DS_OK);
    const ds_sampler_params smp = ds_sampler_default();
    int id;
    assert_int_equal(ds_engine_add(e, &(ds_seq_params){.prompt = prompt, .n_prompt = n_prompt, .max_new = max_new,
            .sp = &smp, .seed = 1}, &id), DS_OK);
    const int n = run_out(e, id, out, 0, max_new);
    *stats = *ds_engine_stats(e, id);
    ds_engine_free(e);
    return n;
}

// Greedy output of one sequence decoded alone (no speculation).
static int alone(const int32_t *prompt, int n_prompt, int max_new, int32_t *out) {
    ds_seq_stats stats;
    return decode_with(DS_SPEC_NONE, prompt, n_prompt, max_new, out, &stats);
}

// A 400-token prompt joins while a short one decodes: the short one still commits a token every
// round (its prompt is prefilled 256 rows per round alongside), and both outputs equal decoding
// each alone.
static void test_chunked_prefill(void **state) {
    (void)state;
    int32_t pa[8], pb[400], out_a[64], out_b[64], ref_a[64], ref_b[64];
    prompt_of(pa, 8, 1);
    prompt_of(pb, 400, 2);
    const int na_ref = alone(pa, 8, 40, ref_a), nb_ref = alone(pb, 400, 20, ref_b);
    ds_spec_params sp = {.kind = DS_SPEC_NONE};
    ds_engine *e;
    assert_int_equal(ds_engine_init(g_m, NULL, &sp, &e), DS_OK);
    const ds_sampler_params smp = ds_sampler_default();
    int a, b, na = 0, nb = 0;
    assert_int_equal(ds_engine_add(e, &(ds_seq_params){.prompt = pa, .n_prompt = 8, .max_new = 40, .sp = &smp,
            .seed = 1}, &a), DS_OK);
    assert_int_equal(ds_engine_step(e), DS_OK); // a's prefill (7 rows), then its first token
    na += ds_engine_take(e, a, out_a + na, 64 - na);
    assert_int_equal(na, 1);
    assert_int_equal(ds_engine_add(e, &(ds_seq_params){.prompt = pb, .n_prompt = 400, .max_new = 20, .sp = &smp,
            .seed = 1}, &b), DS_OK);
    // b's 399 prompt rows: 256 in the first round, 143 and its first token in the second; a
    // commits a token in both.
    for (int round = 0; round < 2; round++) {
        assert_int_equal(ds_engine_step(e), DS_OK);
        na += ds_engine_take(e, a, out_a + na, 64 - na);
        assert_int_equal(na, 2 + round); // a did not wait
        nb += ds_engine_take(e, b, out_b + nb, 64 - nb);
        assert_int_equal(nb, round); // b needed two rounds of prefill
    }
    while (ds_engine_active(e)) {
        assert_int_equal(ds_engine_step(e), DS_OK);
        na += ds_engine_take(e, a, out_a + na, 64 - na);
        nb += ds_engine_take(e, b, out_b + nb, 64 - nb);
    }
    assert_int_equal(na, na_ref);
    assert_int_equal(nb, nb_ref);
    assert_memory_equal(out_a, ref_a, sizeof(int32_t) * (size_t)na);
    assert_memory_equal(out_b, ref_b, sizeof(int32_t) * (size_t)nb);
    ds_engine_free(e);
}

// The same with a drafter: the drafter's context is fed from the chunked prefill's tap rows, and
// greedy speculative output equals plain decoding.
static void test_chunked_prefill_with_drafter(void **state) {
    (void)state;
    int32_t pb[300], out[64], ref[64];
    prompt_of(pb, 300, 5);
    const int n_ref = alone(pb, 300, 30, ref);
    ds_spec_params sp = {.kind = DS_SPEC_DSPARK, .schedule = DS_SCHEDULE_FIXED};
    ds_engine *e;
    assert_int_equal(ds_engine_init(g_m, g_d, &sp, &e), DS_OK);
    const ds_sampler_params smp = ds_sampler_default();
    int id;
    assert_int_equal(ds_engine_add(e, &(ds_seq_params){.prompt = pb, .n_prompt = 300, .max_new = 30, .sp = &smp,
            .seed = 1}, &id), DS_OK);
    const int n = run_out(e, id, out, 0, 64);
    assert_int_equal(n, n_ref);
    assert_memory_equal(out, ref, sizeof(int32_t) * (size_t)n);
    assert_true(ds_engine_stats(e, id)->drafted > 0);
    ds_engine_free(e);
}

// Plain decoding: a short prompt's rows go with its first round (one forward gives the first
// token: the prefill computed all n_prompt rows, and one step gave a token); a prompt whose rest
// would reach sgemm (stories260K is F32) keeps its chunk and the one-row step. Either way the tokens
// are those of speculative decoding, which never rides (its drafter needs the prompt's taps first).
// The first round that drafts (the observer's first call with drafted slots): its confidences.
typedef struct {
    int n_drafted;
    float conf[64];
} first_draft;

static void on_round(void *ctx, int id, int n_drafted, const float *conf, int ell, int accepted) {
    (void)id, (void)ell, (void)accepted;
    first_draft *f = ctx;
    if (f->n_drafted || n_drafted <= 0 || !conf) return;
    f->n_drafted = n_drafted < 64 ? n_drafted : 64;
    memcpy(f->conf, conf, sizeof(float) * (size_t)f->n_drafted);
}

// While the auto schedule's gate drafts nothing, a speculative sequence's prompt rides with its
// first round too, its rows' taps queued for the drafter. When drafting resumes, its first drafts'
// confidences equal bit for bit those of the same sequence prefilled apart (prompt log-probabilities
// turn riding off), and its tokens equal plain decoding's.
static void test_ride_speculative(void **state) {
    (void)state;
    assert_true(ds_drafter_get_info(g_d)->has_confidence); // (the auto schedule needs it)
    int32_t p[6], ref[16], out[16];
    prompt_of(p, 6, 5);
    const int n_ref = alone(p, 6, 16, ref);
    ds_cost_table costs = {.bmax = 64};
    for (int b = 1; b <= 64; b++) costs.sps[b] = 1.0 / (1e-3 + 1e-5 * b);
    first_draft fd[2] = {{0}};
    for (int plp = 0; plp < 2; plp++) {
        ds_spec_params sp = {.kind = DS_SPEC_DSPARK, .schedule = DS_SCHEDULE_AUTO, .costs = &costs};
        ds_engine *e;
        assert_int_equal(ds_engine_init(g_m, g_d, &sp, &e), DS_OK);
        ds_engine_set_observer(e, on_round, &fd[plp]);
        ds_engine_force_gate(e, 0);
        assert_int_equal(ds_engine_step(e), DS_OK); // (no sequence yet: a round that drafted nothing)
        const ds_sampler_params smp = ds_sampler_default();
        int id, n = 0;
        assert_int_equal(ds_engine_add(e, &(ds_seq_params){.prompt = p, .n_prompt = 6, .max_new = 16, .sp = &smp,
                .seed = 1}, &id), DS_OK);
        if (plp) assert_int_equal(ds_engine_set_prompt_logprobs(e, id, 0), DS_OK);
        assert_int_equal(ds_engine_step(e), DS_OK);
        n += ds_engine_take(e, id, out, 16);
        assert_int_equal(n, 1); // the first token, from the riding round or the one after the chunk
        assert_int_equal(ds_engine_stats(e, id)->prefill_rows, plp ? 5 : 6);
        ds_engine_force_gate(e, 4);
        n = run_out(e, id, out, n, 16);
        assert_int_equal(n, n_ref);
        assert_memory_equal(out, ref, sizeof(int32_t) * (size_t)n);
        assert_true(ds_engine_stats(e, id)->drafted > 0);
        ds_engine_free(e);
    }
    assert_true(fd[0].n_drafted > 0);
    assert_int_equal(fd[0].n_drafted, fd[1].n_drafted);
    assert_memory_equal(fd[0].conf, fd[1].conf, sizeof(float) * (size_t)fd[0].n_drafted);
}

static void test_ride(void **state) {
    (void)state;
    const int gemm_rows = ds_model_gemm_rows(g_m);
    assert_true(gemm_rows > 2 && gemm_rows < 40); // (F32: sgemm from 10 rows)
    const int lens[] = {1, 6, gemm_rows - 1, gemm_rows, 40};
    for (size_t i = 0; i < sizeof lens / sizeof *lens; i++) {
        const int np = lens[i], rides = np > 1 && np < gemm_rows; // (a lone BOS has no rest to carry)
        int32_t p[40], out[24], ref[24];
        prompt_of(p, np, 11);
        ds_seq_stats st, st_ref;
        const int n = decode_with(DS_SPEC_NONE, p, np, 24, out, &st);
        const int n_ref = decode_with(DS_SPEC_DSPARK, p, np, 24, ref, &st_ref);
        assert_int_equal(st.prefill_rows, rides ? np : np - 1);
        assert_int_equal(st.rounds, 24); // (the riding round counts: it committed a token)
        assert_int_equal(st_ref.prefill_rows, np - 1);
        assert_true(st_ref.drafted > 0);
        assert_int_equal(n, n_ref);
        assert_memory_equal(out, ref, sizeof(int32_t) * (size_t)n);
        assert_int_equal(decode_with(DS_SPEC_NONE, p, np, 1, out, &st), 1); // finished by the riding round
        assert_int_equal(out[0], ref[0]);
    }
    // A rest that rides after a whole chunk: the prompt cache keeps the chunk when the ride ends, and
    // the same prompt again starts from it, to the same tokens.
    {
        int32_t p[260], out[2][16];
        prompt_of(p, 260, 4);
        ds_spec_params sp = {.kind = DS_SPEC_NONE, .prompt_cache_bytes = (size_t)64 << 20};
        ds_engine *e;
        assert_int_equal(ds_engine_init(g_m, NULL, &sp, &e), DS_OK);
        const ds_sampler_params smp = ds_sampler_default();
        for (int k = 0; k < 2; k++) {
            int id;
            assert_int_equal(ds_engine_add(e, &(ds_seq_params){.prompt = p, .n_prompt = 260, .max_new = 16, .sp = &smp,
                    .seed = 1}, &id), DS_OK);
            const int n = run_out(e, id, out[k], 0, 16);
            assert_int_equal(n, 16);
            const ds_seq_stats *st = ds_engine_stats(e, id);
            assert_int_equal(st->cached_tokens, k ? 256 : 0);
            assert_int_equal(st->prefill_rows, k ? 4 : 260); // (the rest, 3 rows and the anchor, rode)
            assert_int_equal(ds_engine_remove(e, id), DS_OK);
        }
        assert_memory_equal(out[0], out[1], sizeof out[0]);
        ds_engine_free(e);
    }
    // One step of a plain engine: the short prompt's first token, without waiting a round.
    int32_t p[6], tok;
    prompt_of(p, 6, 3);
    ds_spec_params sp = {.kind = DS_SPEC_NONE};
    ds_engine *e;
    assert_int_equal(ds_engine_init(g_m, NULL, &sp, &e), DS_OK);
    const ds_sampler_params smp = ds_sampler_default();
    int id;
    assert_int_equal(ds_engine_add(e, &(ds_seq_params){.prompt = p, .n_prompt = 6, .max_new = 4, .sp = &smp, .seed = 1},
                                   &id), DS_OK);
    assert_int_equal(ds_engine_step(e), DS_OK);
    assert_int_equal(ds_engine_take(e, id, &tok, 1), 1);
    ds_engine_free(e);
}

// LENGTH at the budget; STOP with the stop id that ended it (stories260K's greedy stories never
// reach EOS, so a token it does produce is made a stop id of the sequence, ds_seq_params.stop_ids;
// a sequence without it, in the same engine, runs to its budget).
static void test_finish_reasons(void **state) {
    (void)state;
    int32_t p[6], ref[16], stop = 0;
    prompt_of(p, 6, 9);
    assert_int_equal(alone(p, 6, 16, ref), 16);
    const int32_t stop_id = ref[5];
    int first = 0; // where it first appears
    while (ref[first] != ref[5]) first++;
    ds_spec_params sp = {.kind = DS_SPEC_NONE};
    ds_engine *e;
    assert_int_equal(ds_engine_init(g_m, NULL, &sp, &e), DS_OK);
    const ds_sampler_params smp = ds_sampler_default();
    int s1, s2, s3;
    ds_seq_params q = {.prompt = p, .n_prompt = 6, .max_new = 3, .sp = &smp, .seed = 1, .stop_ids = &stop_id, .n_stop_ids = 1};
    assert_int_equal(ds_engine_add(e, &q, &s1), DS_OK);
    q.max_new = 16;
    assert_int_equal(ds_engine_add(e, &q, &s2), DS_OK);
    q.n_stop_ids = 0;
    assert_int_equal(ds_engine_add(e, &q, &s3), DS_OK);
    assert_int_equal(ds_engine_finish_reason(e, s1, &stop), DS_FINISH_NONE);
    assert_int_equal(stop, -1);
    while (ds_engine_active(e)) assert_int_equal(ds_engine_step(e), DS_OK);
    assert_int_equal(ds_engine_finish_reason(e, s1, NULL), first < 3 ? DS_FINISH_STOP : DS_FINISH_LENGTH);
    assert_int_equal(ds_engine_finish_reason(e, s2, &stop), DS_FINISH_STOP);
    assert_int_equal(stop, ref[5]);
    assert_int_equal(ds_engine_stats(e, s2)->generated, first); // the stop id itself is not output
    assert_int_equal(ds_engine_finish_reason(e, s3, NULL), DS_FINISH_LENGTH);
    assert_int_equal(ds_engine_stats(e, s3)->generated, 16);
    q.n_stop_ids = DS_SEQ_MAX_STOP_IDS + 1;
    assert_int_equal(ds_engine_add(e, &q, &s3), DS_ERR_INVALID);    assert_int_equal(ds_engine_finish_reason(e, 99, &stop), DS_FINISH_NONE); // no such sequence
    ds_engine_free(e);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_chunked_prefill),
        cmocka_unit_test(test_chunked_prefill_with_drafter),
        cmocka_unit_test(test_ride),
        cmocka_unit_test(test_ride_speculative),
        cmocka_unit_test(test_finish_reasons),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
