// src/serve/request.c on stories260K: a body whose strings hold \u0000 (prompt, stop, chat content)
// is refused instead of silently cut at the NUL; trailing data after the JSON object is refused;
// an escaped backslash before "u0000" is ordinary text; token ids are range-checked.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>

#include "serve/server.h"
#include "stories.h"

static ds_model *g_model;

static int setup(void **state) {
    (void)state;
    return stories_load(&g_model);
}

static int teardown(void **state) {
    (void)state;
    ds_model_free(g_model);
    return 0;
}

static void expect_bad(const char *body, int chat, const char *what) {
    ds_oa_request r;
    const char *param = NULL;
    assert_int_equal(ds_oa_parse(body, strlen(body), chat, g_model, &r, &param), DS_ERR_INVALID);
    if (!strstr(ds_last_error(), what)) fail_msg("%s: '%s' lacks '%s'", body, ds_last_error(), what);
    assert_null(strchr(ds_last_error(), '\n'));
}

static void expect_ok(const char *body, size_t n, int chat) {
    ds_oa_request r;
    const char *param = NULL;
    if (ds_oa_parse(body, n, chat, g_model, &r, &param) != DS_OK) fail_msg("%s: %s", body, ds_last_error());
    assert_true(r.n_prompts >= 1 && r.n_prompt[0] > 1);
    ds_oa_request_free(&r);
}

static void test_nul_refused(void **state) {
    (void)state;
    expect_bad("{\"prompt\": \"Once\\u0000 upon\"}", 0, "NUL character");
    expect_bad("{\"prompt\": \"Once upon\", \"stop\": [\"a\\u0000b\"]}", 0, "NUL character");
    expect_bad("{\"messages\": [{\"role\": \"user\", \"content\": \"hi\\u0000there\"}]}", 1, "NUL character");
    const char *fine = "{\"prompt\": \"Once \\\\u0000 upon\"}"; // an escaped backslash: text
    expect_ok(fine, strlen(fine), 0);
}

static void test_trailing_data_refused(void **state) {
    (void)state;
    expect_bad("{\"prompt\": \"Once upon\"} {\"prompt\": \"x\"}", 0, "trailing data");
    expect_bad("{\"prompt\": \"Once upon\"}garbage", 0, "trailing data");
    const char nul_after[] = "{\"prompt\": \"Once upon\"}\0";
    ds_oa_request r;
    const char *param;
    assert_int_equal(ds_oa_parse(nul_after, sizeof nul_after - 1, 0, g_model, &r, &param), DS_ERR_INVALID);
    const char *ws = "{\"prompt\": \"Once upon\"} \r\n\t";
    expect_ok(ws, strlen(ws), 0);
}

static void test_token_ids(void **state) {
    (void)state;
    expect_bad("{\"prompt\": [1, 1e300]}", 0, "token ids must be integers");
    expect_bad("{\"prompt\": [1, 22147483647]}", 0, "token ids must be integers");
    expect_bad("{\"prompt\": [1, 512]}", 0, "token ids must be integers");
    expect_bad("{\"prompt\": [1, 2.5]}", 0, "token ids must be integers");
    const char *ok = "{\"prompt\": [1, 511]}";
    expect_ok(ok, strlen(ok), 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_nul_refused),
        cmocka_unit_test(test_trailing_data_refused),
        cmocka_unit_test(test_token_ids),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
