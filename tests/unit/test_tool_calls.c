// Tool-call parsers on fixed strings (Hermes/Qwen, Llama 3, Mistral): calls and content, several
// calls, malformed JSON staying content, the streaming hold-back at every split of a reply; and
// the chat-template object's errors (syntax errors, features left out, bad JSON) as one line
// naming the template and line.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "dspark.h"

static void parse(ds_tool_syntax s, const char *text, const char *want_content, const char *want_calls) {
    char *content, *calls;
    int n;
    assert_int_equal(ds_tool_calls_parse(s, text, strlen(text), &content, &calls, &n), DS_OK);
    assert_string_equal(content, want_content);
    if (want_calls) {
        assert_non_null(calls);
        assert_string_equal(calls, want_calls);
        assert_true(n > 0);
    } else {
        assert_null(calls);
        assert_int_equal(n, 0);
    }
    free(content);
    free(calls);
}

static void test_hermes(void **state) {
    (void)state;
    parse(DS_TOOLS_HERMES, "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>",
          "Let me check.", "[{\"name\":\"get_weather\",\"arguments\":\"{\\\"city\\\":\\\"Paris\\\"}\"}]");
    // two calls, arguments given as a JSON string
    parse(DS_TOOLS_HERMES,
          "<tool_call>\n{\"name\": \"a\", \"arguments\": {}}\n</tool_call>\n<tool_call>\n{\"name\": \"b\", \"arguments\": \"{\\\"x\\\": 1}\"}\n</tool_call>",
          "", "[{\"name\":\"a\",\"arguments\":\"{}\"},{\"name\":\"b\",\"arguments\":\"{\\\"x\\\": 1}\"}]");
    // malformed JSON, a missing name, non-object arguments: all stay content
    parse(DS_TOOLS_HERMES, "x <tool_call>\n{\"name\": \"a\", \"arguments\": {\n</tool_call> y", "x <tool_call>\n{\"name\": \"a\", \"arguments\": {\n</tool_call> y", NULL);
    parse(DS_TOOLS_HERMES, "<tool_call>{\"arguments\": {}}</tool_call>", "<tool_call>{\"arguments\": {}}</tool_call>", NULL);
    parse(DS_TOOLS_HERMES, "<tool_call>{\"name\": \"a\", \"arguments\": 3}</tool_call>", "<tool_call>{\"name\": \"a\", \"arguments\": 3}</tool_call>", NULL);
    parse(DS_TOOLS_HERMES, "plain answer", "plain answer", NULL);
    // an unterminated call whose JSON is complete (the model stopped at its end of turn)
    parse(DS_TOOLS_HERMES, "<tool_call>\n{\"name\": \"a\", \"arguments\": {\"k\": [1, 2]}}", "", "[{\"name\":\"a\",\"arguments\":\"{\\\"k\\\":[1,2]}\"}]");
}

static void test_llama3_mistral(void **state) {
    (void)state;
    parse(DS_TOOLS_LLAMA3, " {\"name\": \"add\", \"parameters\": {\"a\": 2, \"b\": 3}}", "", "[{\"name\":\"add\",\"arguments\":\"{\\\"a\\\":2,\\\"b\\\":3}\"}]");
    parse(DS_TOOLS_LLAMA3, "<|python_tag|>{\"name\": \"f\", \"parameters\": {}}; {\"name\": \"g\", \"parameters\": {}}", "",
          "[{\"name\":\"f\",\"arguments\":\"{}\"},{\"name\":\"g\",\"arguments\":\"{}\"}]");
    parse(DS_TOOLS_LLAMA3, "{\"not\": \"a call\"}", "{\"not\": \"a call\"}", NULL);
    parse(DS_TOOLS_LLAMA3, "{\"name\": \"f\", \"parameters\": {} trailing", "{\"name\": \"f\", \"parameters\": {} trailing", NULL);
    parse(DS_TOOLS_LLAMA3, "The answer is 4.", "The answer is 4.", NULL);
    parse(DS_TOOLS_MISTRAL, "[TOOL_CALLS] [{\"name\": \"f\", \"arguments\": {\"q\": \"x\"}}]", "", "[{\"name\":\"f\",\"arguments\":\"{\\\"q\\\":\\\"x\\\"}\"}]");
    parse(DS_TOOLS_MISTRAL, " [{\"name\": \"f\", \"arguments\": {}}, {\"name\": \"g\", \"arguments\": {}}]", "",
          "[{\"name\":\"f\",\"arguments\":\"{}\"},{\"name\":\"g\",\"arguments\":\"{}\"}]");
    parse(DS_TOOLS_MISTRAL, "[TOOL_CALLS]f[ARGS]{\"q\": 1}", "", "[{\"name\":\"f\",\"arguments\":\"{\\\"q\\\":1}\"}]");
    parse(DS_TOOLS_MISTRAL, "[TOOL_CALLS] [{\"name\": \"f\"", "[TOOL_CALLS] [{\"name\": \"f\"", NULL);
    parse(DS_TOOLS_NONE, "<tool_call>{\"name\": \"a\"}</tool_call>", "<tool_call>{\"name\": \"a\"}</tool_call>", NULL);
    assert_string_equal(ds_tool_syntax_name(DS_TOOLS_HERMES), "hermes");
}

// Gemma 4: calls in its own value syntax (strings in <|"|> quotes, bare and quoted keys, nesting,
// numbers, booleans, null), text around them, malformed calls staying content.
static void test_gemma4(void **state) {
    (void)state;
#define Q "<|\"|>"
    parse(DS_TOOLS_GEMMA4, "Checking.<|tool_call>call:get_weather{location:" Q "Paris, FR" Q "}<tool_call|>", "Checking.",
          "[{\"name\":\"get_weather\",\"arguments\":\"{\\\"location\\\":\\\"Paris, FR\\\"}\"}]");
    // every kind of value, whitespace where the grammar allows it, a string holding the syntax's own
    // characters and a JSON quote, a quoted key
    parse(DS_TOOLS_GEMMA4,
          "<|tool_call>call:f{a: 1, b:-2.5e3,c:true,d:false,e:null,f:[1, " Q "x}:" Q ", {g:[]}],h:{}," Q "q k" Q ":" Q "say \"hi\"" Q " }<tool_call|>",
          "", "[{\"name\":\"f\",\"arguments\":\"{\\\"a\\\":1,\\\"b\\\":-2500,\\\"c\\\":true,\\\"d\\\":false,"
              "\\\"e\\\":null,\\\"f\\\":[1,\\\"x}:\\\",{\\\"g\\\":[]}],\\\"h\\\":{},"
              "\\\"q k\\\":\\\"say \\\\\\\"hi\\\\\\\"\\\"}\"}]");
    // two calls, no arguments
    parse(DS_TOOLS_GEMMA4, "<|tool_call>call:a{}<tool_call|><|tool_call>call:b{n:3}<tool_call|>", "",
          "[{\"name\":\"a\",\"arguments\":\"{}\"},{\"name\":\"b\",\"arguments\":\"{\\\"n\\\":3}\"}]");
    // malformed: an unterminated string, a missing brace, trailing text, no name, a bad number: content
    const char *bad[] = {"<|tool_call>call:f{a:" Q "x}<tool_call|>", "<|tool_call>call:f{a:1<tool_call|>",
                         "<|tool_call>call:f{a:1} and more<tool_call|>", "<|tool_call>call:{a:1}<tool_call|>",
                         "<|tool_call>call:f{a:1.}<tool_call|>", "<|tool_call>f{a:1}<tool_call|>"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) parse(DS_TOOLS_GEMMA4, bad[i], bad[i], NULL);
    // well-formed nesting past the limit (64) is refused, not recursed into; within it, parsed
    char deep[400] = "<|tool_call>call:f{a:";
    for (int i = 0; i < 100; i++) strcat(deep, "[");
    strcat(deep, "1");
    for (int i = 0; i < 100; i++) strcat(deep, "]");
    strcat(deep, "}<tool_call|>");
    parse(DS_TOOLS_GEMMA4, deep, deep, NULL);
    parse(DS_TOOLS_GEMMA4, "<|tool_call>call:f{a:[[[1]]]}<tool_call|>", "",
          "[{\"name\":\"f\",\"arguments\":\"{\\\"a\\\":[[[1]]]}\"}]");
    assert_string_equal(ds_tool_syntax_name(DS_TOOLS_GEMMA4), "gemma4");
    assert_int_equal(ds_tool_calls_safe(DS_TOOLS_GEMMA4, "Sure.<|tool", 11), 5);
    assert_int_equal(ds_tool_calls_safe(DS_TOOLS_GEMMA4, "{\"a\": 1}", 8), 8); // JSON is no call here
#undef Q
}

// The safe prefix never reaches into a call, at every split of the text, and grows monotonically.
static void test_streaming(void **state) {
    (void)state;
    const char *h = "Sure.<tool_call>\n{\"name\": \"a\", \"arguments\": {}}\n</tool_call>";
    size_t prev = 0;
    for (size_t k = 0; k <= strlen(h); k++) {
        size_t s = ds_tool_calls_safe(DS_TOOLS_HERMES, h, k);
        assert_true(s <= 5);
        assert_true(s >= prev);
        prev = s;
    }
    assert_int_equal(ds_tool_calls_safe(DS_TOOLS_HERMES, "Sure.<tool", 10), 5); // a possible start is held
    assert_int_equal(ds_tool_calls_safe(DS_TOOLS_HERMES, "a < b", 5), 5);
    assert_int_equal(ds_tool_calls_safe(DS_TOOLS_HERMES, "a <", 3), 2);
    assert_int_equal(ds_tool_calls_safe(DS_TOOLS_LLAMA3, "  {\"name\"", 9), 0);
    assert_int_equal(ds_tool_calls_safe(DS_TOOLS_LLAMA3, "  ", 2), 0);
    assert_int_equal(ds_tool_calls_safe(DS_TOOLS_LLAMA3, "Hello", 5), 5);
    assert_int_equal(ds_tool_calls_safe(DS_TOOLS_MISTRAL, "[{", 2), 0);
    assert_int_equal(ds_tool_calls_safe(DS_TOOLS_MISTRAL, "ok [TOOL_CALLS] [", 17), 3);
    assert_int_equal(ds_tool_calls_safe(DS_TOOLS_NONE, "<tool_call>", 11), 11);
}

static void expect_init_error(const char *src, ds_status code, const char *needle) {
    ds_chat_template *t = (ds_chat_template *)1;
    assert_int_equal(ds_chat_template_init(src, NULL, NULL, "t.jinja", &t), code);
    assert_null(t);
    const char *e = ds_last_error();
    assert_non_null(strstr(e, needle));
    assert_null(strchr(e, '\n'));
    assert_int_equal(strncmp(e, "t.jinja:", 8), 0);
}

static void test_template_errors(void **state) {
    (void)state;
    expect_init_error("{% if x %}a", DS_ERR_FORMAT, "not closed");
    expect_init_error("a\n{{ x | nosuchfilter }}", DS_ERR_UNSUPPORTED, "t.jinja:2: no filter named 'nosuchfilter'");
    expect_init_error("{% include 'x' %}", DS_ERR_UNSUPPORTED, "'include' tag is not supported");
    expect_init_error("{% for x in y recursive %}{% endfor %}", DS_ERR_UNSUPPORTED, "recursive");
    expect_init_error("{{ 'abc }}", DS_ERR_FORMAT, "unterminated string");
    expect_init_error("{% break %}", DS_ERR_FORMAT, "outside a for loop");
    ds_chat_template *t;
    assert_int_equal(ds_chat_template_init("{% for m in messages %}{{ m.role }}:{{ m.content }}|{% endfor %}{{ x.y }}", "<s>", NULL, "t.jinja", &t), DS_OK);
    char *out = NULL;
    // x is undefined: x.y fails as in jinja2, naming the line
    assert_int_equal(ds_chat_template_render(t, "[{\"role\": \"user\", \"content\": \"hi\"}]", NULL, NULL, 1, &out), DS_ERR_INVALID);
    assert_non_null(strstr(ds_last_error(), "t.jinja:1: 'x' is undefined"));
    assert_null(out);
    assert_int_equal(ds_chat_template_render(t, "[{\"role\": ", NULL, NULL, 1, &out), DS_ERR_INVALID);
    assert_non_null(strstr(ds_last_error(), "messages is not valid JSON"));
    assert_int_equal(ds_chat_template_render(t, "[]", "{}", NULL, 1, &out), DS_ERR_INVALID);
    assert_int_equal(ds_chat_template_render(t, "[]", NULL, "[1]", 1, &out), DS_ERR_INVALID);
    // kwargs define x: it renders
    assert_int_equal(ds_chat_template_render(t, "[{\"role\": \"user\", \"content\": \"hi\"}]", NULL, "{\"x\": {\"y\": 5}}", 1, &out), DS_OK);
    assert_string_equal(out, "user:hi|5");
    free(out);
    ds_chat_template_free(t);
    // raise_exception's message; a runaway loop is stopped
    assert_int_equal(ds_chat_template_init("{{ raise_exception('no system role') }}", NULL, NULL, "t.jinja", &t), DS_OK);
    assert_int_equal(ds_chat_template_render(t, "[]", NULL, NULL, 1, &out), DS_ERR_INVALID);
    assert_non_null(strstr(ds_last_error(), "no system role"));
    ds_chat_template_free(t);
    assert_int_equal(ds_chat_template_init("{% macro f(n) %}{{ f(n) }}{% endmacro %}{{ f(1) }}", NULL, NULL, "t.jinja", &t), DS_OK);
    assert_int_equal(ds_chat_template_render(t, "[]", NULL, NULL, 1, &out), DS_ERR_INVALID);
    assert_non_null(strstr(ds_last_error(), "nested too deeply"));
    ds_chat_template_free(t);
    // syntax detection
    assert_int_equal(ds_chat_template_init("{{ '<tool_call>' }}", NULL, NULL, "t.jinja", &t), DS_OK);
    assert_int_equal(ds_chat_template_tool_syntax(t), DS_TOOLS_HERMES);
    ds_chat_template_free(t);
    assert_int_equal(ds_chat_template_init("{{ '<|tool_call>call:' + name }}", NULL, NULL, "t.jinja", &t), DS_OK);
    assert_int_equal(ds_chat_template_tool_syntax(t), DS_TOOLS_GEMMA4);
    ds_chat_template_free(t);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hermes),
        cmocka_unit_test(test_llama3_mistral),
        cmocka_unit_test(test_gemma4),
        cmocka_unit_test(test_streaming),
        cmocka_unit_test(test_template_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
