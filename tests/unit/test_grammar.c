// The grammar engine (src/sample/grammar*.c): GBNF parsing (errors with line:column, left
// recursion refused by name), the matcher on fixed grammars and strings (accept / reject /
// complete), UTF-8 split across tokens, and token masks on stories260K's vocabulary against a
// brute-force reference (each token's bytes fed to a fresh copy of the state).
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "dspark.h"
#include "sample/grammar.h"
#include "stories.h"

static ds_model *g_model;
static ds_grammar_vocab *g_voc;

static int setup(void **st) {
    (void)st;
    if (stories_load(&g_model)) return -1;
    const ds_tokenizer *t = ds_model_tokenizer(g_model);
    return ds_grammar_vocab_init(t, ds_model_get_info(g_model)->vocab_size, &g_voc) ? -1 : 0;
}

static int teardown(void **st) {
    (void)st;
    ds_grammar_vocab_free(g_voc);
    ds_model_free(g_model);
    return 0;
}

// 1: s is in the language, 0: not, 2: a proper prefix of something in it.
static int match(const char *gbnf, const char *s) {
    ds_grammar *g;
    if (ds_grammar_parse(gbnf, &g)) fail_msg("parse %s: %s", gbnf, ds_last_error());
    ds_grammar_matcher *m;
    const int32_t eos = 2;
    assert_int_equal(ds_grammar_matcher_init(g, g_voc, &eos, 1, &m), DS_OK);
    ds_grammar_state st = ds_grammar_start(m);
    const int ok = ds_grammar_accept_text(m, &st, s, strlen(s));
    const int r = ok <= 0 ? 0 : ds_grammar_complete(m, &st) ? 1 : 2;
    ds_grammar_matcher_free(m);
    ds_grammar_free(g);
    return r;
}

static void test_match(void **st) {
    (void)st;
    const char *ab = "root ::= \"a\" b* \"c\"\nb ::= \"b\"";
    assert_int_equal(match(ab, "ac"), 1);
    assert_int_equal(match(ab, "abbbc"), 1);
    assert_int_equal(match(ab, "abb"), 2);
    assert_int_equal(match(ab, "abxc"), 0);
    assert_int_equal(match(ab, "acc"), 0);
    const char *cls = "root ::= [a-z0-9_]+ [^\"\\\\]? ";
    assert_int_equal(match(cls, "ab_9"), 1);
    assert_int_equal(match(cls, "ab_9X"), 1);
    assert_int_equal(match(cls, "ab_9\""), 0);
    assert_int_equal(match(cls, "ab_9\\"), 0);
    assert_int_equal(match(cls, ""), 2);
    const char *rep = "root ::= \"x\"{2,4} (\"y\" | \"z\"){3} \"w\"{2,}";
    assert_int_equal(match(rep, "xxyzyww"), 1);
    assert_int_equal(match(rep, "xxxxzzzwww"), 1);
    assert_int_equal(match(rep, "xxxxxzzzww"), 0);
    assert_int_equal(match(rep, "xyzyww"), 0);
    assert_int_equal(match(rep, "xxyzyw"), 2);
    const char *opt = "root ::= \"a\"? \"b\"{0,2} \"c\"{1}";
    assert_int_equal(match(opt, "c"), 1);
    assert_int_equal(match(opt, "abbc"), 1);
    assert_int_equal(match(opt, "abbbc"), 0);
    // escapes, any character, multi-line rules, comments, alternation on continuation lines
    const char *esc = "# comment\nroot ::= \"\\n\\t\\\\\\\"\" \"\\x41\\u00e9\" . # trailing\n"
                      "  item\nitem ::=\n  \"1\"\n  | \"2\" # two\n  | (\n \"3\"\n )\n";
    assert_int_equal(match(esc, "\n\t\\\"A\xc3\xa9\xe4\xb8\xad" "2"), 1);
    assert_int_equal(match(esc, "\n\t\\\"A\xc3\xa9z3"), 1);
    assert_int_equal(match(esc, "\n\t\\\"Ae z3"), 0);
    // a lead byte whose code points the grammar cannot hold; overlong forms; surrogates
    assert_int_equal(match("root ::= [ -~]*", "a\xe0"), 0);
    assert_int_equal(match("root ::= [ -~]*", "a\xc2"), 0);
    assert_int_equal(match("root ::= .*", "\xe0\x80"), 0);
    assert_int_equal(match("root ::= .*", "\xc0\x80"), 0);
    assert_int_equal(match("root ::= .*", "\xed\xa0"), 0);
    assert_int_equal(match("root ::= .*", "\xf4\x90"), 0);
    assert_int_equal(match("root ::= .*", "\xe4\xb8"), 2);
    // recursion (nested parentheses), a right-recursive list
    const char *par = "root ::= p\np ::= \"(\" p* \")\"";
    assert_int_equal(match(par, "(()(()))"), 1);
    assert_int_equal(match(par, "(()(())"), 2);
    assert_int_equal(match(par, "(()))"), 0);
}

// A grammar that matches the same text in exponentially many ways (the fuzzer's finding: it ran
// for minutes) stops with one "too ambiguous" error within a few characters, not a hang.
static void test_ambiguous(void **st) {
    (void)st;
    ds_grammar *g;
    assert_int_equal(ds_grammar_parse("root ::= \"a\" b* b* \"c\"\nb ::= root | \"a\" | \"aa\"", &g), DS_OK);
    ds_grammar_matcher *m;
    const int32_t eos = 2;
    assert_int_equal(ds_grammar_matcher_init(g, g_voc, &eos, 1, &m), DS_OK);
    ds_grammar_state s = ds_grammar_start(m);
    int failed_at = -1;
    for (int i = 0; i < 64 && failed_at < 0; i++) {
        const int r = ds_grammar_accept_text(m, &s, "a", 1);
        if (r > 0 && ds_grammar_mask(m, &s)) continue;
        failed_at = i;
        assert_int_equal(ds_grammar_matcher_fail(m), DS_ERR_INVALID);
        assert_non_null(strstr(ds_last_error(), "grammar too ambiguous"));
    }
    assert_true(failed_at >= 0 && failed_at < 32);
    ds_grammar_matcher_free(m);
    ds_grammar_free(g);
}

static void expect_error(const char *gbnf, const char *needle) {
    ds_grammar *g = NULL;
    assert_int_not_equal(ds_grammar_parse(gbnf, &g), DS_OK);
    assert_null(g);
    if (!strstr(ds_last_error(), needle)) fail_msg("'%s': error '%s' lacks '%s'", gbnf, ds_last_error(), needle);
    assert_null(strchr(ds_last_error(), '\n'));
}

static void test_errors(void **st) {
    (void)st;
    expect_error("root ::= \"a", "grammar 1:10: unterminated string literal");
    expect_error("root ::= [a-", "1:10: unterminated character class");
    expect_error("root ::= a", "1:10: undefined rule 'a'");
    expect_error("item ::= \"a\"", "no rule named 'root'");
    expect_error("root ::= \"a\"\n\nroot ::= \"b\"", "3:1: rule defined twice: 'root'");
    expect_error("root ::= expr\nexpr ::= expr \"+\" \"1\" | \"1\"", "rule 'expr' is left-recursive");
    expect_error("root ::= x\nx ::= \"a\"? root", "left-recursive");
    expect_error("root ::= (\"a\" | \"\")* \"b\"", "rule 'root-2' is left-recursive"); // a nullable loop body
    expect_error("root ::= \"a\" (\"b\"", "1:14: unclosed '('");
    expect_error("root ::= * \"a\"", "1:10: repetition operator without anything to repeat");
    expect_error("root ::= \"a\"{3,1}", "n < m");
    expect_error("root ::= \"\\q\"", "1:11: unknown escape 'q'");
    expect_error("root \"a\"", "1:6: expected '::=' after the rule name");
    expect_error("root ::= \"a\" )", "1:14: expected a rule name, found ')'");
    expect_error("root ::= \"a\" @", "1:14: unexpected character '@'");
}

// Mask of state s against the reference: token t allowed iff its bytes are accepted from s.
static void check_mask(ds_grammar_matcher *m, const ds_grammar_state *s, const ds_tokenizer *t, int V) {
    const uint32_t *mask = ds_grammar_mask(m, s);
    assert_non_null(mask);
    uint32_t *copy = malloc(sizeof(uint32_t) * (size_t)((V + 31) / 32));
    memcpy(copy, mask, sizeof(uint32_t) * (size_t)((V + 31) / 32));
    int any = 0;
    for (int i = 0; i < V; i++) {
        char buf[256];
        const int n = ds_token_bytes(t, i, buf, sizeof buf);
        int want = 0;
        if (ds_grammar_is_end(m, i)) want = -1;
        else if (n > 0) {
            ds_grammar_state c = *s;
            want = ds_grammar_accept_text(m, &c, buf, (size_t)n) == 1;
        }
        const int got = (copy[i >> 5] >> (i & 31)) & 1;
        if (want >= 0 && got != want) fail_msg("token %d (%.*s): mask %d, reference %d", i, n, buf, got, want);
        any |= want > 0;
    }
    for (int i = 0; i < V; i++)
        if (ds_grammar_is_end(m, i))
            assert_int_equal((copy[i >> 5] >> (i & 31)) & 1, ds_grammar_complete(m, s) || !any);
    free(copy);
}

static void test_mask(void **st) {
    (void)st;
    const ds_tokenizer *t = ds_model_tokenizer(g_model);
    const int V = ds_grammar_vocab_size(g_voc);
    const int32_t eos = ds_tokenizer_eos(t);
    const char *gr[] = {"root ::= \"Once upon\" [ a-z]* \".\"", "root ::= [^a]* \"!\" | \"x\"{2,5}",
                        "root ::= (\"\\u4e2d\" | [\\u00e0-\\u00ff])+ \"end\""};
    const char *walk[] = {"Once upon a tim", "bcd!", "\xe4\xb8\xad\xc3\xa9"};
    for (int k = 0; k < 3; k++) {
        ds_grammar *g;
        assert_int_equal(ds_grammar_parse(gr[k], &g), DS_OK);
        ds_grammar_matcher *m;
        assert_int_equal(ds_grammar_matcher_init(g, g_voc, &eos, 1, &m), DS_OK);
        ds_grammar_state s = ds_grammar_start(m);
        check_mask(m, &s, t, V);
        for (const char *p = walk[k]; *p; p++) { // byte by byte: partial UTF-8 states too
            assert_int_equal(ds_grammar_accept_text(m, &s, p, 1), 1);
            check_mask(m, &s, t, V);
        }
        ds_grammar_matcher_free(m);
        ds_grammar_free(g);
    }
}

// UTF-8 split across tokens: a 3-byte character as byte-fallback tokens one at a time.
static void test_split_utf8(void **st) {
    (void)st;
    const ds_tokenizer *t = ds_model_tokenizer(g_model);
    ds_grammar *g;
    assert_int_equal(ds_grammar_parse("root ::= \"\\u4e2d\" \"a\"", &g), DS_OK);
    ds_grammar_matcher *m;
    const int32_t eos = ds_tokenizer_eos(t);
    assert_int_equal(ds_grammar_matcher_init(g, g_voc, &eos, 1, &m), DS_OK);
    ds_grammar_state s = ds_grammar_start(m);
    const unsigned char want[3] = {0xe4, 0xb8, 0xad};
    for (int k = 0; k < 3; k++) {
        int32_t tok = -1;
        for (int i = 0; i < ds_grammar_vocab_size(g_voc) && tok < 0; i++) {
            char b[8];
            if (ds_token_bytes(t, i, b, sizeof b) == 1 && (unsigned char)b[0] == want[k]) tok = i;
        }
        assert_true(tok >= 0);
        ds_grammar_state wrong = s;
        assert_int_equal(ds_grammar_accept(m, &s, tok), 1);
        assert_int_equal(ds_grammar_accept(m, &wrong, eos), 0);
        assert_false(ds_grammar_complete(m, &s));
    }
    assert_int_equal(ds_grammar_accept_text(m, &s, "a", 1), 1);
    assert_true(ds_grammar_complete(m, &s));
    assert_int_equal(ds_grammar_accept(m, &s, eos), 1);
    ds_grammar_matcher_free(m);
    ds_grammar_free(g);
}

// The JSON Schema converter: strings in and out of the language of the grammar it writes.
static int schema_match(const char *schema, const char *s) {
    char *gbnf = NULL;
    const char *kw = NULL;
    if (ds_json_schema_to_gbnf(schema, strlen(schema), &gbnf, &kw)) fail_msg("%s: %s", schema, ds_last_error());
    const int r = match(gbnf, s);
    free(gbnf);
    return r;
}

static void test_json_schema(void **st) {
    (void)st;
    const char *obj = "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"},\"b\":{\"type\":\"string\","
                      "\"maxLength\":2},\"c\":{\"type\":[\"boolean\",\"null\"]}},\"required\":[\"b\"]}";
    assert_int_equal(schema_match(obj, "{\"b\":\"\"}"), 1);
    assert_int_equal(schema_match(obj, "{\"a\":-12,\"b\":\"xy\",\"c\":null}"), 1);
    assert_int_equal(schema_match(obj, "{\"a\":0,\"b\":\"x\"}"), 1);
    assert_int_equal(schema_match(obj, "{\"b\":\"x\",\"c\":true}"), 1);
    assert_int_equal(schema_match(obj, "{\"a\":1}"), 0);                 // b is required
    assert_int_equal(schema_match(obj, "{\"b\":\"xyz\"}"), 0);           // maxLength
    assert_int_equal(schema_match(obj, "{\"b\":\"x\",\"a\":1}"), 0);     // the order given
    assert_int_equal(schema_match(obj, "{\"a\":01,\"b\":\"x\"}"), 0);    // no leading zero
    assert_int_equal(schema_match(obj, "{ \"b\":\"x\"}"), 0);            // no whitespace
    assert_int_equal(schema_match(obj, "{\"b\":\"x\",\"d\":1}"), 0);     // no additional properties
    const char *arr = "{\"type\":\"array\",\"items\":{\"enum\":[\"x\",1.5,null]},\"minItems\":1,\"maxItems\":2}";
    assert_int_equal(schema_match(arr, "[\"x\"]"), 1);
    assert_int_equal(schema_match(arr, "[null,1.5]"), 1);
    assert_int_equal(schema_match(arr, "[]"), 0);
    assert_int_equal(schema_match(arr, "[1.5,1.5,1.5]"), 0);
    const char *rec = "{\"$defs\":{\"t\":{\"type\":\"object\",\"properties\":{\"k\":{\"anyOf\":[{\"$ref\":\"#/$defs/t\"},"
                      "{\"type\":\"string\",\"format\":\"date\"}]}},\"required\":[\"k\"]}},\"$ref\":\"#/$defs/t\"}";
    assert_int_equal(schema_match(rec, "{\"k\":{\"k\":\"2024-02-28\"}}"), 1);
    assert_int_equal(schema_match(rec, "{\"k\":{\"k\":\"2024-02-30\"}}"), 0);
    assert_int_equal(schema_match("{\"type\":\"object\"}", "{\"any\":[1,{\"x\":\"\\u00e9\"}],\"b\":true}"), 1);
    // bounded integers and numbers: only values inside the bounds (ranges of <= 512 listed, wider
    // ones as the decimal lengths inside them: zod's int() bounds give up to 15 digits either side)
    const char *small = "{\"type\":\"integer\",\"minimum\":3,\"exclusiveMaximum\":7}";
    for (int v = -2; v < 10; v++) {
        char t[8];
        snprintf(t, sizeof t, "%d", v);
        assert_int_equal(schema_match(small, t), v >= 3 && v < 7);
    }
    const char *safe = "{\"type\":\"integer\",\"minimum\":-9007199254740991,\"maximum\":9007199254740991}";
    assert_int_equal(schema_match(safe, "999999999999999"), 1);
    assert_int_equal(schema_match(safe, "-999999999999999"), 1);
    assert_int_equal(schema_match(safe, "0"), 1);
    assert_int_equal(schema_match(safe, "9999999999999999"), 0); // > 2^53
    assert_int_equal(schema_match(safe, "1.5"), 0);
    const char *pos = "{\"type\":\"number\",\"exclusiveMinimum\":0,\"maximum\":100000}";
    assert_int_equal(schema_match(pos, "1"), 1);
    assert_int_equal(schema_match(pos, "99999"), 1);
    assert_int_equal(schema_match(pos, "0"), 0);
    assert_int_equal(schema_match(pos, "-1"), 0);
    assert_int_equal(schema_match(pos, "100001"), 0);
    const char *neg = "{\"type\":\"integer\",\"maximum\":-5}";
    assert_int_equal(schema_match(neg, "-5"), 1);
    assert_int_equal(schema_match(neg, "-123456"), 1);
    assert_int_not_equal(schema_match(neg, "-4"), 1); // (a prefix of -40 ...)
    assert_int_equal(schema_match(neg, "5"), 0);
    char *none = NULL;
    assert_int_equal(ds_json_schema_to_gbnf("{\"type\":\"integer\",\"minimum\":5,\"maximum\":4}", 42, &none, NULL), DS_ERR_INVALID);
    // refused keywords are named; other problems are plain errors
    const char *refused[][2] = {{"{\"type\":\"string\",\"pattern\":\"a\"}", "pattern"},
                                {"{\"type\":\"integer\",\"multipleOf\":3}", "multipleOf"},
                                {"{\"type\":\"string\",\"format\":\"email\"}", "format"},
                                {"{\"allOf\":[{}]}", "allOf"}};
    for (int i = 0; i < 4; i++) {
        char *g = NULL;
        const char *kw = NULL;
        assert_int_equal(ds_json_schema_to_gbnf(refused[i][0], strlen(refused[i][0]), &g, &kw), DS_ERR_UNSUPPORTED);
        assert_non_null(kw);
        assert_string_equal(kw, refused[i][1]);
        assert_non_null(strstr(ds_last_error(), refused[i][1]));
    }
    char *g = NULL;
    const char *kw = "x";
    assert_int_equal(ds_json_schema_to_gbnf("{\"$ref\":\"#/$defs/none\"}", 21, &g, &kw), DS_ERR_INVALID);
    assert_null(kw);
    assert_int_equal(ds_json_schema_to_gbnf("{nope", 5, &g, &kw), DS_ERR_INVALID);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_match),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_ambiguous),
        cmocka_unit_test(test_mask),
        cmocka_unit_test(test_split_utf8),
        cmocka_unit_test(test_json_schema),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
