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
//    take over); ds_gen_end ends a request early with DS_FINISH_LENGTH;
//  - the runner's other sources and stops: requests made as they join, of ids without a tokenizer;
//    an error from on_done, an interruption, requests the caller began (ds_gen_run_begun).
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

static void on_update(void *ctx, long i, const ds_gen *g) {
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

static void on_update_count(void *ctx, long i, const ds_gen *g) {
    run_check *c = ctx;
    const int a = ds_engine_active(c->e);
    if (a > c->max_active_seen) c->max_active_seen = a;
}

static ds_status on_done(void *ctx, long i, const ds_gen *g) {
    run_check *c = ctx;
    const ds_text_out *tx = ds_gen_text(g);
    c->got[i].n = ds_text_out_tokens(tx);
    for (int k = 0; k < c->got[i].n; k++) c->got[i].tokens[k] = ds_text_out_token_id(tx, k);
    c->done++;
    assert_true(ds_gen_seconds(g) >= ds_gen_first_token_s(g));
    assert_true(ds_gen_first_token_s(g) >= 0);
    return DS_OK;
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

static ds_status on_done_lp(void *ctx, long i, const ds_gen *g) {
    lp_check *c = ctx;
    const int n = ds_text_out_tokens(ds_gen_text(g));
    c->n[i] = n;
    for (int t = 0; t < n && t < 16; t++) assert_int_equal(ds_engine_logprobs(c->e, ds_gen_seq(g), t, &c->lp[i][t], NULL, NULL), 0);
    return DS_OK;
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

// Requests made as they join (`request`), of ids without a tokenizer (the output is the ids alone):
// the same tokens as the text requests run alone; every round seen once (on_round), and the new
// tokens of each update (ds_gen_new_tokens) add up to the output.
typedef struct {
    int32_t *ids[4];
    int n_ids[4];
    int rounds, updates, done;
    long new_tokens;
    result got[4];
} source_check;

static void make_request(void *ctx, long i, ds_gen_request *r) {
    const source_check *c = ctx;
    *r = (ds_gen_request){.ids = c->ids[i], .n_ids = c->n_ids[i], .max_new = 8 + 4 * (int)i, .sp = ds_sampler_default()};
}

static void count_update(void *ctx, long i, const ds_gen *g) {
    source_check *c = ctx;
    c->updates++;
    c->new_tokens += ds_gen_new_tokens(g);
}

static ds_status keep_ids(void *ctx, long i, const ds_gen *g) {
    source_check *c = ctx;
    const ds_text_out *tx = ds_gen_text(g);
    c->got[i].n = ds_text_out_tokens(tx);
    for (int k = 0; k < c->got[i].n; k++) c->got[i].tokens[k] = ds_text_out_token_id(tx, k);
    assert_string_equal(ds_text_out_text(tx, NULL), "");
    c->done++;
    return DS_OK;
}

static void count_round(void *ctx) { ((source_check *)ctx)->rounds++; }

static void test_runner_request_source(void **state) {
    (void)state;
    const char *prompts[4] = {"Once upon a time", "The cat", "Lily wanted", "Tom"};
    source_check c = {0};
    ds_gen *gs[4];
    for (int i = 0; i < 4; i++) { // (the ids a text request gets)
        const ds_gen_request r = story(prompts[i], 1);
        assert_int_equal(ds_gen_init(ds_model_tokenizer(stories), &r, &gs[i]), DS_OK);
        const int32_t *ids = ds_gen_prompt(gs[i], &c.n_ids[i]);
        c.ids[i] = malloc(sizeof(int32_t) * (size_t)c.n_ids[i]);
        memcpy(c.ids[i], ids, sizeof(int32_t) * (size_t)c.n_ids[i]);
        ds_gen_free(gs[i]);
    }
    const ds_gen_request text = story("Once upon a time", 4);
    assert_int_equal(ds_gen_init(NULL, &text, &gs[0]), DS_ERR_INVALID); // text needs the tokenizer
    const ds_spec_params none = {.kind = DS_SPEC_NONE};
    ds_engine *e;
    assert_int_equal(ds_engine_init(stories, NULL, &none, &e), DS_OK);
    const ds_gen_run_params p = {.max_active = 2, .request = make_request, .on_update = count_update, .on_done = keep_ids,
                                 .on_round = count_round, .ctx = &c};
    assert_int_equal(ds_gen_run(e, NULL, NULL, 4, &p, NULL), DS_OK);
    assert_int_equal(c.done, 4);
    long total = 0;
    for (int i = 0; i < 4; i++) {
        result alone;
        run_alone(stories, &(ds_gen_request){.text = prompts[i], .max_new = 8 + 4 * i, .sp = ds_sampler_default()}, &alone);
        assert_int_equal(c.got[i].n, alone.n);
        assert_memory_equal(c.got[i].tokens, alone.tokens, sizeof(int32_t) * (size_t)alone.n);
        total += alone.n;
        free(c.ids[i]);
    }
    assert_int_equal(c.new_tokens, total);
    assert_true(c.rounds >= 8 + 4 * 3 && c.updates > c.rounds); // (two at a time most rounds)
    ds_engine_free(e);
}

// An error from on_done stops the run and is returned; an interruption stops it before any request
// joins; requests the caller began run to their end and stay in the engine, or stay as the last
// round left them when interrupted.
typedef struct {
    int polls, stop_after, done;
} stop_check;

static int stop_when(void *ctx) {
    stop_check *c = ctx;
    return c->polls++ >= c->stop_after;
}

static ds_status fail_done(void *ctx, long i, const ds_gen *g) {
    ((stop_check *)ctx)->done++;
    return DS_ERR_IO;
}

static ds_status count_done(void *ctx, long i, const ds_gen *g) {
    ((stop_check *)ctx)->done++;
    return DS_OK;
}

static void test_runner_stops(void **state) {
    (void)state;
    const ds_spec_params none = {.kind = DS_SPEC_NONE};
    ds_engine *e;
    assert_int_equal(ds_engine_init(stories, NULL, &none, &e), DS_OK);
    const ds_tokenizer *tok = ds_model_tokenizer(stories);
    ds_gen_request r[3] = {story("Once upon a time", 4), story("The cat", 4), story("Tom", 4)};
    stop_check c = {.stop_after = 1000};
    const ds_gen_run_params failing = {.on_done = fail_done, .interrupted = stop_when, .ctx = &c};
    assert_int_equal(ds_gen_run(e, tok, r, 3, &failing, NULL), DS_ERR_IO);
    assert_int_equal(c.done, 1);
    assert_int_equal(ds_engine_active(e), 0);
    c = (stop_check){.stop_after = 0};
    const ds_gen_run_params stopped = {.max_active = 3, .on_done = count_done, .interrupted = stop_when, .ctx = &c};
    assert_int_equal(ds_gen_run(e, tok, r, 3, &stopped, NULL), DS_ERR_INTERRUPTED);
    assert_int_equal(c.polls, 1);
    assert_int_equal(ds_engine_active(e), 0);

    // Begun by the caller: interrupted after 3 rounds, then run to the end.
    result alone;
    run_alone(stories, &r[0], &alone);
    ds_gen *g[2];
    for (int i = 0; i < 2; i++) assert_int_equal(ds_gen_start(e, tok, &r[i], &g[i]), DS_OK);
    c = (stop_check){.stop_after = 3};
    assert_int_equal(ds_gen_run_begun(e, g, 2, &stopped, NULL), DS_ERR_INTERRUPTED);
    assert_false(ds_gen_done(g[0]));
    assert_int_equal(ds_engine_active(e), 2);
    ds_gen_free(g[1]);
    c = (stop_check){.stop_after = 1000};
    assert_int_equal(ds_gen_run_begun(e, g, 1, &stopped, NULL), DS_OK);
    assert_int_equal(c.done, 1);
    assert_true(ds_gen_done(g[0]) && ds_gen_seq(g[0]) >= 0); // done, still in the engine
    assert_int_equal(ds_text_out_tokens(ds_gen_text(g[0])), alone.n);
    for (int k = 0; k < alone.n; k++) assert_int_equal(ds_text_out_token_id(ds_gen_text(g[0]), k), alone.tokens[k]);
    ds_gen_leave(g[0]);
    assert_int_equal(ds_gen_run_begun(e, g, 1, &stopped, NULL), DS_OK); // (done: nothing to run)
    ds_gen_free(g[0]);
    ds_engine_free(e);
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
        cmocka_unit_test(test_runner_admission), cmocka_unit_test(test_runner_request_source),
        cmocka_unit_test(test_runner_stops),
        cmocka_unit_test(test_runner_batch_invariant), cmocka_unit_test(test_end_early), cmocka_unit_test(test_bad_request),
    };
    return cmocka_run_group_tests(chat, NULL, NULL) | cmocka_run_group_tests(tests, setup, teardown);
}
