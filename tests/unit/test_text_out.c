// ds_text_out: the text a request shows, from its committed tokens, on the stories260K tokenizer:
// it equals ds_detok's stream, stop ids end it (not shown, not counted), stop strings cut it at the
// earliest match even across tokens, the hold-back never shows what a stop string may still take
// back, and a character split over byte tokens is never shown by halves.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "dspark.h"

static ds_tokenizer *tok;
static const ds_tokenizer *T(void) { return tok; }

static int setup(void **state) {
    const char *shared = getenv("DSPARK_SHARED");
    char path[1024];
    snprintf(path, sizeof path, "%s/models/stories260K/stories260K.gguf", shared ? shared : "../shared");
    if (ds_tokenizer_load(path, &tok)) {
        print_error("%s\n", ds_last_error());
        return 1;
    }
    return 0;
}
static int teardown(void **state) {
    ds_tokenizer_free(tok);
    return 0;
}

static int encode(const char *text, int32_t *ids, int cap) {
    int n = 0;
    assert_int_equal(ds_tokenize(T(), text, strlen(text), 0, ids, cap, &n), DS_OK);
    assert_true(n <= cap);
    return n;
}

// The reference: every piece through a bare ds_detok.
static void detok_all(const int32_t *ids, int n, char *out, size_t cap) {
    ds_detok d;
    ds_detok_init(&d, T(), 0);
    size_t len = 0;
    for (int i = 0; i < n; i++) {
        const int w = ds_detok_push(&d, ids[i], out + len, (int)(cap - len));
        assert_true(w >= 0);
        len += (size_t)w;
    }
    len += (size_t)ds_detok_flush(&d, out + len, (int)(cap - len));
    out[len] = 0;
}

static void test_plain_text(void **state) {
    int32_t ids[64];
    const int n = encode("Once upon a time, there was a dog.", ids, 64);
    char want[512];
    detok_all(ids, n, want, sizeof want);
    ds_text_out *o;
    assert_int_equal(ds_text_out_init(T(), &o), DS_OK);
    for (int i = 0; i < n; i++) {
        int used = -1;
        assert_int_equal(ds_text_out_push(o, ids + i, 1, &used), DS_OK);
        assert_int_equal(used, 1);
        assert_int_equal(ds_text_out_safe(o), ds_text_out_token_end(o, i)); // no stops: all of it
    }
    assert_int_equal(ds_text_out_end(o), DS_TEXT_RUNNING);
    assert_int_equal(ds_text_out_finish(o), DS_OK);
    assert_int_equal(ds_text_out_end(o), DS_TEXT_ENDED);
    assert_string_equal(ds_text_out_text(o, NULL), want);
    assert_int_equal(ds_text_out_tokens(o), n);
    ds_text_out_free(o);
}

static void test_stop_id(void **state) {
    int32_t ids[64];
    int n = encode("The cat sat down", ids, 60);
    const int k = n / 2;
    int32_t with[64];
    memcpy(with, ids, sizeof(int32_t) * k);
    with[k] = 2; // the stop id (stories260K's EOS, as an end-of-turn token would be)
    memcpy(with + k + 1, ids + k, sizeof(int32_t) * (n - k));
    char want[256];
    detok_all(ids, k, want, sizeof want);
    ds_text_out *o;
    assert_int_equal(ds_text_out_init(T(), &o), DS_OK);
    assert_int_equal(ds_text_out_add_stop_id(o, -1), DS_OK); // "no end-of-turn token": ignored
    assert_int_equal(ds_text_out_add_stop_id(o, 2), DS_OK);
    int used;
    assert_int_equal(ds_text_out_push(o, with, n + 1, &used), DS_OK);
    assert_int_equal(used, k + 1); // the stop id is taken, nothing after it
    assert_int_equal(ds_text_out_end(o), DS_TEXT_STOP_ID);
    assert_string_equal(ds_text_out_text(o, NULL), want);
    assert_int_equal(ds_text_out_tokens(o), k);
    assert_int_equal(ds_text_out_safe(o), strlen(want));
    assert_int_equal(ds_text_out_push(o, ids, n, &used), DS_OK); // ended: takes nothing more
    assert_int_equal(used, 0);
    ds_text_out_free(o);
}

// A stop string spanning several tokens cuts the text before it; until it is complete the text
// that could begin it is held back, and text that turns out not to be one is released.
static void test_stop_string_and_holdback(void **state) {
    int32_t ids[64];
    const int n = encode("the big red ball and the big dog", ids, 64);
    char full[256];
    detok_all(ids, n, full, sizeof full);
    const char *cut = strstr(full, "the big dog");
    assert_non_null(cut);
    ds_text_out *o;
    assert_int_equal(ds_text_out_init(T(), &o), DS_OK);
    assert_int_equal(ds_text_out_add_stop(o, "big dog"), DS_OK);
    assert_int_equal(ds_text_out_add_stop(o, ""), DS_ERR_INVALID);
    int i = 0;
    for (; i < n && ds_text_out_end(o) == DS_TEXT_RUNNING; i++) {
        assert_int_equal(ds_text_out_push(o, ids + i, 1, NULL), DS_OK);
        size_t len;
        const char *t = ds_text_out_text(o, &len);
        const size_t safe = ds_text_out_safe(o);
        assert_true(safe <= len);
        assert_memory_equal(t, full, len); // always a prefix of the full text
        if (ds_text_out_end(o) == DS_TEXT_RUNNING) {
            // held back exactly: the longest proper prefix of "big dog" that the text ends with
            size_t hold = 0;
            for (size_t k = 1; k < 7 && k <= len; k++)
                if (!memcmp(t + len - k, "big dog", k)) hold = k;
            assert_int_equal(len - safe, hold);
        }
    }
    assert_int_equal(ds_text_out_end(o), DS_TEXT_STOP_STRING);
    assert_int_equal(i, n); // "dog" is the last token
    size_t len;
    const char *t = ds_text_out_text(o, &len);
    const size_t want = (size_t)(cut - full) + strlen("the ");
    assert_int_equal(len, want);
    assert_memory_equal(t, full, want);
    assert_int_equal(ds_text_out_safe(o), want);
    assert_int_equal(ds_text_out_tokens(o), n); // the token that completed the stop was generated
    assert_int_equal(ds_text_out_finish(o), DS_OK);
    assert_int_equal(ds_text_out_end(o), DS_TEXT_STOP_STRING);
    assert_int_equal(strlen(ds_text_out_text(o, NULL)), want);
    ds_text_out_free(o);
}

// A character made of byte tokens (<0xE4><0xB8><0xAD> = "中") is never shown by halves, and one left
// incomplete at the end becomes U+FFFD.
static void test_utf8_bytes(void **state) {
    int32_t ids[16];
    const int n = encode("a\xe4\xb8\xad", ids, 16);
    assert_true(n >= 4); // "a" + three byte tokens (the stories vocabulary has no "中")
    ds_text_out *o;
    assert_int_equal(ds_text_out_init(T(), &o), DS_OK);
    for (int i = 0; i < n - 1; i++) assert_int_equal(ds_text_out_push(o, ids + i, 1, NULL), DS_OK);
    size_t len;
    const char *t = ds_text_out_text(o, &len);
    assert_int_equal(len, strlen(t));
    assert_null(strchr(t, '\xe4')); // the incomplete character is not there yet
    assert_int_equal(ds_text_out_finish(o), DS_OK); // ... and becomes U+FFFD
    t = ds_text_out_text(o, &len);
    assert_non_null(strstr(t, "\xef\xbf\xbd"));
    ds_text_out_free(o);
    assert_int_equal(ds_text_out_init(T(), &o), DS_OK);
    assert_int_equal(ds_text_out_push(o, ids, n, NULL), DS_OK);
    assert_int_equal(ds_text_out_finish(o), DS_OK);
    assert_non_null(strstr(ds_text_out_text(o, NULL), "\xe4\xb8\xad"));
    ds_text_out_free(o);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_plain_text),
        cmocka_unit_test(test_stop_id),
        cmocka_unit_test(test_stop_string_and_holdback),
        cmocka_unit_test(test_utf8_bytes),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
