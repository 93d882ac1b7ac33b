// Chat formats: a tokenizer renders through its real chat_template (tests/fixtures/templates:
// Qwen2.5, Qwen3, Gemma 3, Llama 3, Llama 3.1) exactly as the expected strings, written out by
// hand from those templates, say; its format name and end of turn come from the template's
// markers; a template that does not parse falls back to the plain transcript; the rendered text
// tokenizes with BOS exactly once.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "dspark.h"
#include "tmpdir.h"

static int setup(void **state) { return tmpdir_create("test_chat"); }
static int teardown(void **state) { return tmpdir_remove(); }

// A fixture template (tests/fixtures/templates/NAME) as a JSON string body (escaped), malloc'ed.
static char *fixture(const char *name) {
    char path[4096];
    const char *src = getenv("DSPARK_SRC");
    snprintf(path, sizeof path, "%s/tests/fixtures/templates/%s", src ? src : ".", name);
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    char *o = malloc(1 << 20);
    size_t w = 0;
    for (int c; (c = fgetc(f)) != EOF && w < (1 << 20) - 8;) {
        if (c == '"' || c == '\\') o[w++] = '\\', o[w++] = (char)c;
        else if (c == '\n') o[w++] = '\\', o[w++] = 'n';
        else if (c == '\t') o[w++] = '\\', o[w++] = 't';
        else o[w++] = (char)c;
    }
    o[w] = 0;
    fclose(f);
    return o;
}

// A tokenizer whose added tokens are `specials` (ids 10, 11, ...) over a one-letter vocabulary,
// with tokenizer_config.json {"bos_token": bos, "chat_template": tmpl} (tmpl: a fixture's name
// when it ends in .jinja, else the template text itself).
static ds_tokenizer *make(const char *const *specials, int n, const char *bos, const char *tmpl_arg) {
    char *own = strstr(tmpl_arg, ".jinja") ? fixture(tmpl_arg) : NULL;
    const char *tmpl = own ? own : tmpl_arg;
    char dir[600], p[700];
    tmpdir_path(dir, sizeof dir, "tok", "");
    mkdir(dir, 0777);
    snprintf(p, sizeof p, "%s/tokenizer.json", dir);
    FILE *f = fopen(p, "w");
    fprintf(f, "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []}, \"added_tokens\": [");
    for (int i = 0; i < n; i++) fprintf(f, "%s{\"id\": %d, \"content\": \"%s\", \"special\": true}", i ? ", " : "", 10 + i, specials[i]);
    fprintf(f, "]");
    if (bos)
        fprintf(f, ", \"post_processor\": {\"type\": \"TemplateProcessing\", \"single\": [{\"SpecialToken\": {\"id\": \"%s\"}},"
                   " {\"Sequence\": {\"id\": \"A\"}}], \"special_tokens\": {\"%s\": {\"ids\": [10]}}}", bos, bos);
    fprintf(f, "}");
    fclose(f);
    char cfgp[700];
    snprintf(cfgp, sizeof cfgp, "%s/tokenizer_config.json", dir);
    f = fopen(cfgp, "w");
    fprintf(f, "{\"bos_token\": %s%s%s, \"chat_template\": \"%s\"}", bos ? "\"" : "", bos ? bos : "null", bos ? "\"" : "", tmpl);
    fclose(f);
    ds_tokenizer *t = NULL;
    assert_int_equal(ds_tokenizer_load(dir, &t), DS_OK);
    unlink(p), unlink(cfgp), rmdir(dir);
    free(own);
    return t;
}

static void expect(const ds_tokenizer *t, const ds_chat_message *m, int n, int gen, const char *want) {
    char *s = NULL;
    assert_int_equal(ds_chat_render(t, m, n, gen, &s), DS_OK);
    assert_string_equal(s, want);
    free(s);
}

static const ds_chat_message k_conv[] = {
    {"system", "You are terse."},
    {"user", "  Hi  "},
    {"assistant", "Hello."},
    {"user", "2+2?"},
};

static void test_chatml_qwen3(void **state) {
    const char *sp[] = {"<|im_start|>", "<|im_end|>", "<think>", "</think>"};
    ds_tokenizer *t = make(sp, 4, NULL, "Qwen-Qwen3-0.6B.jinja");
    assert_string_equal(ds_chat_format_name(t), "chatml");
    assert_int_equal(ds_chat_eot(t), 11);
    expect(t, k_conv, 4, 1,
           "<|im_start|>system\nYou are terse.<|im_end|>\n<|im_start|>user\n  Hi  <|im_end|>\n"
           "<|im_start|>assistant\nHello.<|im_end|>\n<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\n");
    // An earlier assistant turn loses its thinking; a final one (after the last user message)
    // is wrapped in an empty think block.
    const ds_chat_message m[] = {
        {"user", "q1"}, {"assistant", "<think>\nhmm\n</think>\n\nA1"}, {"user", "q2"}, {"assistant", "A2"}};
    expect(t, m, 4, 0,
           "<|im_start|>user\nq1<|im_end|>\n<|im_start|>assistant\nA1<|im_end|>\n<|im_start|>user\nq2<|im_end|>\n"
           "<|im_start|>assistant\n<think>\n\n</think>\n\nA2<|im_end|>\n");
    ds_tokenizer_free(t);
}

static void test_chatml_qwen25(void **state) {
    const char *sp[] = {"<|im_start|>", "<|im_end|>"};
    ds_tokenizer *t = make(sp, 2, NULL, "Qwen-Qwen2.5-7B-Instruct.jinja");
    const ds_chat_message m[] = {{"user", "Hi"}};
    expect(t, m, 1, 1,
           "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n"
           "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
    expect(t, k_conv, 1, 0, "<|im_start|>system\nYou are terse.<|im_end|>\n");
    ds_tokenizer_free(t);
}

static void test_gemma(void **state) {
    const char *sp[] = {"<bos>", "<start_of_turn>", "<end_of_turn>"};
    ds_tokenizer *t = make(sp, 3, "<bos>", "lenml-gemma3.jinja");
    assert_string_equal(ds_chat_format_name(t), "gemma");
    assert_int_equal(ds_chat_eot(t), 12);
    // The system message is folded into the first user turn (untrimmed, then a blank line);
    // contents are trimmed; the assistant is "model".
    const char *want = "<bos><start_of_turn>user\nYou are terse.\n\nHi<end_of_turn>\n<start_of_turn>model\nHello.<end_of_turn>\n"
                       "<start_of_turn>user\n2+2?<end_of_turn>\n<start_of_turn>model\n";
    expect(t, k_conv, 4, 1, want);
    // Tokenized with ds_tokenize(add_bos = 1): BOS once, then the turn markers.
    int32_t ids[256];
    int n;
    assert_int_equal(ds_tokenize(t, want, strlen(want), 1, ids, 256, &n), DS_OK);
    assert_int_equal(ids[0], 10);
    assert_int_equal(ids[1], 11);
    for (int i = 1; i < n; i++) assert_int_not_equal(ids[i], 10);
    // Roles must alternate.
    const ds_chat_message bad[] = {{"user", "a"}, {"user", "b"}};
    char *s = NULL;
    assert_int_equal(ds_chat_render(t, bad, 2, 1, &s), DS_ERR_INVALID);
    assert_null(s);
    assert_non_null(strstr(ds_last_error(), "alternate"));
    ds_tokenizer_free(t);
}

static void test_llama3(void **state) {
    const char *sp[] = {"<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"};
    ds_tokenizer *t = make(sp, 4, "<|begin_of_text|>", "lenml-llama3.jinja");
    assert_string_equal(ds_chat_format_name(t), "llama3");
    assert_int_equal(ds_chat_eot(t), 13);
    expect(t, k_conv, 4, 1,
           "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nYou are terse.<|eot_id|>"
           "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\nHello.<|eot_id|>"
           "<|start_header_id|>user<|end_header_id|>\n\n2+2?<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n");
    ds_tokenizer_free(t);
}

static void test_llama31(void **state) {
    const char *sp[] = {"<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"};
    ds_tokenizer *t = make(sp, 4, "<|begin_of_text|>", "meta-llama-Llama-3.1-8B-Instruct.jinja");
    assert_string_equal(ds_chat_format_name(t), "llama3");
    expect(t, k_conv, 4, 1,
           "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\n"
           "Today Date: 26 Jul 2024\n\nYou are terse.<|eot_id|>"
           "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\nHello.<|eot_id|>"
           "<|start_header_id|>user<|end_header_id|>\n\n2+2?<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n");
    // Without a system message the system turn is still there, empty after the date.
    expect(t, k_conv + 3, 1, 0,
           "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\n"
           "Today Date: 26 Jul 2024\n\n<|eot_id|><|start_header_id|>user<|end_header_id|>\n\n2+2?<|eot_id|>");
    ds_tokenizer_free(t);
}

static void test_plain_and_errors(void **state) {
    const char *sp[] = {"<x>"};
    ds_tokenizer *t = make(sp, 1, NULL, "{% if no known markers here");
    assert_string_equal(ds_chat_format_name(t), "plain");
    assert_int_equal(ds_chat_eot(t), -1);
    expect(t, k_conv, 2, 1, "system: You are terse.\nuser:   Hi  \nassistant:");
    expect(NULL, k_conv, 1, 0, "system: You are terse.\n");
    char *s = NULL;
    const ds_chat_message role[] = {{"tool", "x"}};
    assert_int_equal(ds_chat_render(t, role, 1, 1, &s), DS_ERR_INVALID);
    assert_non_null(strstr(ds_last_error(), "unknown role"));
    const ds_chat_message utf[] = {{"user", "bad \xff"}};
    assert_int_equal(ds_chat_render(t, utf, 1, 1, &s), DS_ERR_INVALID);
    assert_non_null(strstr(ds_last_error(), "UTF-8"));
    assert_null(s);
    ds_tokenizer_free(t);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_chatml_qwen3),
        cmocka_unit_test(test_chatml_qwen25),
        cmocka_unit_test(test_gemma),
        cmocka_unit_test(test_llama3),
        cmocka_unit_test(test_llama31),
        cmocka_unit_test(test_plain_and_errors),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
