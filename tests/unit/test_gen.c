// ds_gen, the generation layer every front end goes through (src/gen/gen.c):
//  - a chat request (messages, or ids with chat set: how the server builds /v1/chat/completions
//    requests) ends at the chat format's end-of-turn token, which is not part of the output; a
//    completion request with the same prompt generates that token as text (a random Llama with a
//    Qwen3-style tokenizer, tests/fuzz/fixtures/target; logit_bias forces the token);
//  - stop strings cut the text before the earliest match and the text shown while streaming (what
//    is safe) is always a prefix of the final text; stop ids end it before the id (stories260K,
//    greedy, against the same request without stops);
//  - the runner admits at most R requests at a time and each request's tokens equal its tokens run
//    alone, bitwise in its log-probabilities too (batch invariance, past the point where sgemm would
//    take over); ds_gen_end ends a request early with DS_FINISH_LENGTH.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "dspark.h"
#include "stories.h"

#define N_NEW 32

// One request run alone to the end; its tokens (up to cap), text and finish reason.
typedef struct {
    int32_t tokens[256];
    int n;
    char text[4096];
    ds_finish_reason reason;
} result;

static void run_alone(const ds_model *m, const ds_gen_request *r, result *out) {
    const ds_spec_params none = {.kind = DS_SPEC_NONE};
    ds_engine *e;
    assert_int_equal(ds_engine_init(m, NULL, &none, &e), DS_OK);
    ds_gen *g;
    assert_int_equal(ds_gen_start(e, ds_model_tokenizer(m), r, &g), DS_OK);
    while (!ds_gen_done(g)) {
        assert_int_equal(ds_engine_step(e), DS_OK);
        assert_int_equal(ds_gen_update(g, NULL), DS_OK);
    }
    const ds_text_out *tx = ds_gen_text(g);
    out->n = ds_text_out_tokens(tx);
    assert_true(out->n <= 256);
    for (int i = 0; i < out->n; i++) out->tokens[i] = ds_text_out_token_id(tx, i);
    size_t len;
    const char *t = ds_text_out_text(tx, &len);
    assert_true(len < sizeof out->text);
    memcpy(out->text, t, len + 1);
    out->reason = ds_gen_finish_reason(g);
    ds_gen_free(g);
    ds_engine_free(e);
}

static void test_chat_ends_at_end_of_turn(void **state) {
    (void)state;
    char path[4096];
    const char *src = getenv("DSPARK_SRC");
    snprintf(path, sizeof path, "%s/tests/fuzz/fixtures/target", src ? src : ".");
    const ds_model_params mp = {.n_threads = 1};
    ds_model *m;
    assert_int_equal(ds_model_load(path, &mp, &m), DS_OK);
    const ds_tokenizer *tok = ds_model_tokenizer(m);
    const int eot = ds_chat_eot(tok);
    assert_string_equal(ds_chat_format_name(tok), "chatml");
    assert_true(eot >= 0);
    assert_false(ds_model_is_stop(m, eot)); // so only the chat request's own stop can end it there

    const ds_logit_bias force = {eot, 100};
    ds_sampler_params sp = ds_sampler_default();
    sp.logit_bias = &force;
    sp.n_logit_bias = 1;
    const ds_chat_message msg = {"user", "Hi"};
    result chat, ids_chat, completion;
    run_alone(m, &(ds_gen_request){.msgs = &msg, .n_msgs = 1, .max_new = 6, .sp = sp}, &chat);
    assert_int_equal(chat.n, 0);
    assert_string_equal(chat.text, "");
    assert_int_equal(chat.reason, DS_FINISH_STOP);

    // The server's way: the rendered conversation's ids, marked as chat.
    char *text;
    assert_int_equal(ds_chat_render(tok, &msg, 1, 1, &text), DS_OK);
    int32_t ids[256];
    int n;
    assert_int_equal(ds_tokenize(tok, text, strlen(text), 1, ids, 256, &n), DS_OK);
    free(text);
    run_alone(m, &(ds_gen_request){.ids = ids, .n_ids = n, .chat = 1, .max_new = 6, .sp = sp}, &ids_chat);
    assert_int_equal(ids_chat.n, 0);
    assert_int_equal(ids_chat.reason, DS_FINISH_STOP);

    // A completion of the same ids: the token is ordinary output, generated up to the budget.
    run_alone(m, &(ds_gen_request){.ids = ids, .n_ids = n, .max_new = 6, .sp = sp}, &completion);
    assert_int_equal(completion.n, 6);
    for (int i = 0; i < 6; i++) assert_int_equal(completion.tokens[i], eot);
    assert_int_equal(completion.reason, DS_FINISH_LENGTH);
    ds_model_free(m);
}

static ds_model *stories;

static int setup(void **state) { return stories_load(&stories); }
static int teardown(void **state) {
    ds_model_free(stories);
    return 0;
}

static ds_gen_request story(const char *prompt, int max_new) {
    return (ds_gen_request){.text = prompt, .max_new = max_new, .sp = ds_sampler_default()};
}

// Streaming through the runner: every update's safe text must be a prefix of the final text.
typedef struct {
    char final[4096];
    int violations, updates;
} stream_check;

static void on_update(void *ctx, int i, const ds_gen *g) {
    stream_check *c = ctx;
    const ds_text_out *tx = ds_gen_text(g);
    const size_t safe = ds_text_out_safe(tx);
    c->updates++;
    if (safe > strlen(c->final) || memcmp(ds_text_out_text(tx, NULL), c->final, safe)) c->violations++;
}

static void test_stop_string_and_holdback(void **state) {
    (void)state;
    result ref, cut;
    ds_gen_request r = story("Once upon a time", N_NEW);
    run_alone(stories, &r, &ref);
    assert_int_equal(ref.n, N_NEW); // (no EOS this early: the stop below is what ends it)
    // A stop string spanning a token boundary in the middle of the reference text.
    const size_t at = strlen(ref.text) / 2;
    char stop[8];
    memcpy(stop, ref.text + at, 5);
    stop[5] = 0;
    const char *stops[] = {stop};
    r.stops = stops;
    r.n_stops = 1;
    run_alone(stories, &r, &cut);
    const char *first = strstr(ref.text, stop);
    assert_non_null(first);
    assert_int_equal(strlen(cut.text), (size_t)(first - ref.text));
    assert_memory_equal(cut.text, ref.text, strlen(cut.text));
    assert_int_equal(cut.reason, DS_FINISH_STOP);
    assert_true(cut.n < N_NEW); // it ended the generation, not only the text

    // Streamed: what is shown is never taken back.
    stream_check c = {0};
    memcpy(c.final, cut.text, strlen(cut.text) + 1);
    const ds_spec_params none = {.kind = DS_SPEC_NONE};
    ds_engine *e;
    assert_int_equal(ds_engine_init(stories, NULL, &none, &e), DS_OK);
    const ds_gen_run_params p = {.max_active = 1, .on_update = on_update, .ctx = &c};
    assert_int_equal(ds_gen_run(e, ds_model_tokenizer(stories), &r, 1, &p, NULL), DS_OK);
    assert_int_equal(c.violations, 0);
    assert_true(c.updates > 1);
    ds_engine_free(e);
}

static void test_stop_id(void **state) {
    (void)state;
    result ref, cut;
    ds_gen_request r = story("Once upon a time", N_NEW);
    run_alone(stories, &r, &ref);
    const int32_t stop = ref.tokens[5];
    int first = 0;
    while (ref.tokens[first] != stop) first++;
    r.stop_ids = &stop;
    r.n_stop_ids = 1;
    run_alone(stories, &r, &cut);
    assert_int_equal(cut.n, first);
    assert_memory_equal(cut.tokens, ref.tokens, sizeof(int32_t) * (size_t)first);
    assert_int_equal(cut.reason, DS_FINISH_STOP);
}

typedef struct {
    ds_engine *e;
    int max_active_seen, done;
    result got[5];
} run_check;

static void on_update_count(void *ctx, int i, const ds_gen *g) {
    run_check *c = ctx;
    const int a = ds_engine_active(c->e);
    if (a > c->max_active_seen) c->max_active_seen = a;
}

static void on_done(void *ctx, int i, const ds_gen *g) {
    run_check *c = ctx;
    const ds_text_out *tx = ds_gen_text(g);
    c->got[i].n = ds_text_out_tokens(tx);
    for (int k = 0; k < c->got[i].n; k++) c->got[i].tokens[k] = ds_text_out_token_id(tx, k);
    c->done++;
    assert_true(ds_gen_seconds(g) >= ds_gen_first_token_s(g));
    assert_true(ds_gen_first_token_s(g) >= 0);
}

static void test_runner_admission(void **state) {
    (void)state;
    const char *prompts[5] = {"Once upon a time", "The cat", "Lily wanted", "One day, a", "Tom"};
    ds_gen_request r[5];
    for (int i = 0; i < 5; i++) r[i] = story(prompts[i], 8 + 4 * i);
    const ds_spec_params none = {.kind = DS_SPEC_NONE};
    run_check c = {0};
    assert_int_equal(ds_engine_init(stories, NULL, &none, &c.e), DS_OK);
    const ds_gen_run_params p = {.max_active = 2, .on_update = on_update_count, .on_done = on_done, .ctx = &c};
    double step_s = 0;
    assert_int_equal(ds_gen_run(c.e, ds_model_tokenizer(stories), r, 5, &p, &step_s), DS_OK);
    assert_int_equal(c.done, 5);
    assert_int_equal(c.max_active_seen, 2);
    assert_int_equal(ds_engine_active(c.e), 0);
    assert_true(step_s > 0);
    for (int i = 0; i < 5; i++) {
        result alone;
        run_alone(stories, &r[i], &alone);
        assert_int_equal(c.got[i].n, alone.n);
        assert_memory_equal(c.got[i].tokens, alone.tokens, sizeof(int32_t) * (size_t)alone.n);
    }
    ds_engine_free(c.e);
}

// Every request of the generation layer asks for batch invariance: 12 requests decoding together
// (12 rows per round: past the F32 kernel's 9 rows, where sgemm would take over) get bitwise the
// log-probabilities each gets alone (1 row per round). Without the flag, the rounds of 12 rows
// went to sgemm and the last bits differed.
typedef struct {
    ds_engine *e;
    float lp[12][16];
    int n[12];
} lp_check;

static void on_done_lp(void *ctx, int i, const ds_gen *g) {
    lp_check *c = ctx;
    const int n = ds_text_out_tokens(ds_gen_text(g));
    c->n[i] = n;
    for (int t = 0; t < n && t < 16; t++) assert_int_equal(ds_engine_logprobs(c->e, ds_gen_seq(g), t, &c->lp[i][t], NULL, NULL), 0);
}

static void test_runner_batch_invariant(void **state) {
    (void)state;
    const char *prompts[12] = {"Once upon a time", "The cat", "Lily wanted", "One day, a", "Tom", "The sun",
                               "A little bird", "Sam and Max", "In the park", "The dog", "Mom said", "Anna"};
    ds_gen_request r[12];
    for (int i = 0; i < 12; i++) {
        r[i] = story(prompts[i], 16);
        r[i].logprobs = 1;
    }
    const ds_spec_params none = {.kind = DS_SPEC_NONE};
    lp_check together = {0}, alone = {0};
    assert_int_equal(ds_engine_init(stories, NULL, &none, &together.e), DS_OK);
    const ds_gen_run_params p12 = {.max_active = 12, .on_done = on_done_lp, .ctx = &together};
    assert_int_equal(ds_gen_run(together.e, ds_model_tokenizer(stories), r, 12, &p12, NULL), DS_OK);
    assert_int_equal(ds_engine_init(stories, NULL, &none, &alone.e), DS_OK);
    const ds_gen_run_params p1 = {.max_active = 1, .on_done = on_done_lp, .ctx = &alone};
    assert_int_equal(ds_gen_run(alone.e, ds_model_tokenizer(stories), r, 12, &p1, NULL), DS_OK);
    for (int i = 0; i < 12; i++) {
        assert_int_equal(together.n[i], alone.n[i]);
        assert_true(alone.n[i] > 4);
        assert_memory_equal(together.lp[i], alone.lp[i], sizeof(float) * (size_t)(alone.n[i] < 16 ? alone.n[i] : 16));
    }
    ds_engine_free(together.e);
    ds_engine_free(alone.e);
}

static void test_end_early(void **state) {
    (void)state;
    const ds_spec_params none = {.kind = DS_SPEC_NONE};
    ds_engine *e;
    assert_int_equal(ds_engine_init(stories, NULL, &none, &e), DS_OK);
    ds_gen_request r = story("Once upon a time", N_NEW);
    ds_gen *g;
    assert_int_equal(ds_gen_start(e, ds_model_tokenizer(stories), &r, &g), DS_OK);
    assert_int_equal(ds_gen_finish_reason(g), DS_FINISH_NONE);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(ds_engine_step(e), DS_OK);
        assert_int_equal(ds_gen_update(g, NULL), DS_OK);
    }
    assert_false(ds_gen_done(g));
    assert_int_equal(ds_gen_end(g), DS_OK);
    assert_true(ds_gen_done(g));
    assert_int_equal(ds_gen_finish_reason(g), DS_FINISH_LENGTH);
    assert_int_equal(ds_text_out_safe(ds_gen_text(g)), strlen(ds_text_out_text(ds_gen_text(g), NULL)));
    ds_gen_leave(g);
    assert_int_equal(ds_gen_seq(g), -1);
    assert_int_equal(ds_engine_active(e), 0);
    ds_gen_free(g);
    ds_engine_free(e);
}

static void test_bad_request(void **state) {
    (void)state;
    ds_gen *g = (ds_gen *)1;
    const int32_t ids[1] = {1};
    const ds_gen_request both = {.ids = ids, .n_ids = 1, .text = "x"};
    assert_int_equal(ds_gen_init(ds_model_tokenizer(stories), &both, &g), DS_ERR_INVALID);
    assert_null(g);
    assert_non_null(strstr(ds_last_error(), "exactly one of ids, text and messages"));
    const ds_gen_request none = {0};
    assert_int_equal(ds_gen_init(ds_model_tokenizer(stories), &none, &g), DS_ERR_INVALID);
}

int main(void) {
    const struct CMUnitTest chat[] = {cmocka_unit_test(test_chat_ends_at_end_of_turn)};
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_stop_string_and_holdback), cmocka_unit_test(test_stop_id),
        cmocka_unit_test(test_runner_admission),
        cmocka_unit_test(test_runner_batch_invariant), cmocka_unit_test(test_end_early), cmocka_unit_test(test_bad_request),
    };
    return cmocka_run_group_tests(chat, NULL, NULL) | cmocka_run_group_tests(tests, setup, teardown);
}
