// tokenizer.json BPE on small hand-written tokenizers whose results are worked out by hand in the
// comments: merge order by rank (not by position), ties to the left, stale queued pairs, byte-level
// ids and their raw bytes, byte fallback and fuse_unk, ignore_merges, added tokens (leftmost-
// longest, special vs not), the post-processor and the no-double-BOS rule, NFC, Split behaviours,
// streaming decode of byte-fallback characters, and hostile files.
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
#include "tokenizer/nfc.h"

static int setup(void **state) { return tmpdir_create("test_bpe"); }
static int teardown(void **state) { return tmpdir_remove(); }

// Write `json` as tokenizer.json (and `cfg` as tokenizer_config.json when not NULL) in a fresh
// folder and load it.
static ds_status load(const char *json, const char *cfg, ds_tokenizer **t) {
    char dir[600], p[700];
    tmpdir_path(dir, sizeof dir, "tok", "");
    mkdir(dir, 0777);
    snprintf(p, sizeof p, "%s/tokenizer.json", dir);
    FILE *f = fopen(p, "w");
    fputs(json, f);
    fclose(f);
    if (cfg) {
        snprintf(p, sizeof p, "%s/tokenizer_config.json", dir);
        f = fopen(p, "w");
        fputs(cfg, f);
        fclose(f);
    }
    ds_status st = ds_tokenizer_load(dir, t);
    // tmpdir_remove only removes plain files of the top folder: clean ours now.
    snprintf(p, sizeof p, "%s/tokenizer.json", dir), unlink(p);
    snprintf(p, sizeof p, "%s/tokenizer_config.json", dir), unlink(p);
    rmdir(dir);
    return st;
}

static int enc(const ds_tokenizer *t, const char *s, unsigned flags, int32_t *ids) {
    int n = -1;
    assert_int_equal(ds_tokenize_ex(t, s, strlen(s), flags, ids, 64, &n), DS_OK);
    return n;
}

#define ASSERT_IDS(got_n, got, ...)                                                                \
    do {                                                                                           \
        const int32_t want_[] = {__VA_ARGS__};                                                     \
        assert_int_equal(got_n, (int)(sizeof want_ / sizeof want_[0]));                            \
        for (int k_ = 0; k_ < got_n; k_++) assert_int_equal(got[k_], want_[k_]);                   \
    } while (0)

// Byte-level BPE (GPT-2 style, no regex: the whole text is one word). Vocabulary:
//   0 a, 1 b, 2 c, 3 Ġ (space), 4 ab, 5 bc, 6 abc, 7 aa, 8 Ġa, 9 Ċ (newline), 10 <|end|> (special)
// Merges by rank: "b c" (0) before "a b" (1), then "a bc" (2), "a a" (3), "Ġ a" (4).
static const char *k_bytelevel =
    "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 1, \"c\": 2, \"\xC4\xA0\": 3, \"ab\": 4, \"bc\": 5,"
    " \"abc\": 6, \"aa\": 7, \"\xC4\xA0" "a\": 8, \"\xC4\x8A\": 9}, \"merges\": [\"b c\", \"a b\", \"a bc\", \"a a\", \"\xC4\xA0 a\"]},"
    " \"pre_tokenizer\": {\"type\": \"ByteLevel\", \"add_prefix_space\": false, \"use_regex\": false},"
    " \"decoder\": {\"type\": \"ByteLevel\"},"
    " \"added_tokens\": [{\"id\": 10, \"content\": \"<|end|>\", \"special\": true}]}";

static void test_merge_order(void **state) {
    ds_tokenizer *t;
    int32_t ids[64];
    assert_int_equal(load(k_bytelevel, NULL, &t), DS_OK);
    // "abc": the pairs are (a,b) rank 1 and (b,c) rank 0: b+c first, then a+bc -> abc.
    // (Merging left to right instead would give ab, c.)
    int n = enc(t, "abc", DS_TOK_PARSE_SPECIAL, ids);
    ASSERT_IDS(n, ids, 6);
    // "aaa": (a,a) at 0 and 1 tie on rank: the left one merges, leaving aa, a.
    n = enc(t, "aaa", DS_TOK_PARSE_SPECIAL, ids);
    ASSERT_IDS(n, ids, 7, 0);
    // "aaaa" -> aa, aa: after the first merge the queued (a@1, a@2) pair is stale.
    n = enc(t, "aaaa", DS_TOK_PARSE_SPECIAL, ids);
    ASSERT_IDS(n, ids, 7, 7);
    // " ab\n": Ġ a b Ċ -> (a,b) rank 1 beats (Ġ,a) rank 4 -> Ġ ab Ċ.
    n = enc(t, " ab\n", DS_TOK_PARSE_SPECIAL, ids);
    ASSERT_IDS(n, ids, 3, 4, 9);
    // Special token in the text, parsed or not.
    n = enc(t, "a<|end|>a", DS_TOK_PARSE_SPECIAL, ids);
    ASSERT_IDS(n, ids, 0, 10, 0);
    // A byte without a piece (here 'x') has no unk to fall back on: it is dropped, as HF does.
    n = enc(t, "axa", DS_TOK_PARSE_SPECIAL, ids);
    ASSERT_IDS(n, ids, 7);
    // Raw bytes of byte-level pieces: Ġ -> ' ', Ċ -> '\n', the special token -> nothing.
    char b[16];
    assert_int_equal(ds_token_bytes(t, 3, b, sizeof b), 1);
    assert_int_equal(b[0], ' ');
    assert_int_equal(ds_token_bytes(t, 9, b, sizeof b), 1);
    assert_int_equal(b[0], '\n');
    assert_int_equal(ds_token_bytes(t, 8, b, sizeof b), 2);
    assert_memory_equal(b, " a", 2);
    assert_int_equal(ds_token_bytes(t, 10, b, sizeof b), 0);
    char *s;
    const int32_t seq[] = {8, 10, 9};
    assert_int_equal(ds_detokenize(t, seq, 3, 0, &s, NULL), DS_OK);
    assert_string_equal(s, " a<|end|>\n");
    free(s);
    assert_int_equal(ds_detokenize(t, seq, 3, 1, &s, NULL), DS_OK);
    assert_string_equal(s, " a\n");
    free(s);
    assert_string_equal(ds_chat_format_name(t), "plain");
    assert_int_equal(ds_chat_eot(t), -1);
    ds_tokenizer_free(t);
}

// The regex split stage and ignore_merges (Llama 3), and a post-processor with a BOS.
static void test_split_and_ignore_merges(void **state) {
    char json[4096];
    // Words: GPT-2 regex pieces. "abc" is in the vocabulary, but the merges would never build it
    // from a b c (only "a b" exists): with ignore_merges it is one token, without it ab, c.
    const char *fmt =
        "{\"model\": {\"type\": \"BPE\", \"ignore_merges\": %s, \"vocab\": {\"a\": 0, \"b\": 1, \"c\": 2, \"\xC4\xA0\": 3,"
        " \"ab\": 4, \"abc\": 5, \"<s>\": 6}, \"merges\": [\"a b\"]},"
        " \"pre_tokenizer\": {\"type\": \"ByteLevel\", \"add_prefix_space\": false, \"use_regex\": true},"
        " \"post_processor\": {\"type\": \"TemplateProcessing\", \"single\": [{\"SpecialToken\": {\"id\": \"<s>\"}},"
        " {\"Sequence\": {\"id\": \"A\"}}], \"special_tokens\": {\"<s>\": {\"ids\": [6]}}},"
        " \"added_tokens\": [{\"id\": 6, \"content\": \"<s>\", \"special\": true}]}";
    ds_tokenizer *t;
    int32_t ids[64];
    snprintf(json, sizeof json, fmt, "true");
    assert_int_equal(load(json, "{\"bos_token\": \"<s>\"}", &t), DS_OK);
    // Words "abc" and " abc" (the GPT-2 regex). "abc" is a piece: one token. "Ġabc" is not:
    // Ġ a b c -> Ġ ab c.
    int n = enc(t, "abc abc", DS_TOK_ADD_SPECIAL | DS_TOK_PARSE_SPECIAL, ids);
    ASSERT_IDS(n, ids, 6, 5, 3, 4, 2);
    ds_tokenizer_free(t);
    // Without ignore_merges "abc" is built by the merges: ab c.
    snprintf(json, sizeof json, fmt, "false");
    assert_int_equal(load(json, NULL, &t), DS_OK);
    n = enc(t, "abc abc", DS_TOK_ADD_SPECIAL | DS_TOK_PARSE_SPECIAL, ids);
    ASSERT_IDS(n, ids, 6, 4, 2, 3, 4, 2);
    n = enc(t, "abc abc", DS_TOK_PARSE_SPECIAL, ids);
    ASSERT_IDS(n, ids, 4, 2, 3, 4, 2);
    ds_tokenizer_free(t);
}

// Split behaviours on a literal: Isolated, MergedWithPrevious, MergedWithNext, Removed. Vocabulary
// a, b, "-", "a-", "-b" with merges "a -" and "- b" (ranks 0, 1): a merge never crosses words, so
// the words decide the ids.
static void test_split_behaviours(void **state) {
    const char *fmt =
        "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 1, \"-\": 2, \"a-\": 3, \"-b\": 4},"
        " \"merges\": [\"a -\", \"- b\"]}, \"pre_tokenizer\": {\"type\": \"Split\", \"pattern\": {\"String\": \"-\"},"
        " \"behavior\": \"%s\"}}";
    struct {
        const char *behavior;
        int n;
        int32_t ids[4];
    } cases[] = {
        {"Isolated", 3, {0, 2, 1}},           // a | - | b
        {"MergedWithPrevious", 2, {3, 1}},    // a- | b
        {"MergedWithNext", 2, {0, 4}},        // a | -b
        {"Removed", 2, {0, 1}},               // a | b
    };
    for (int c = 0; c < 4; c++) {
        char json[1024];
        snprintf(json, sizeof json, fmt, cases[c].behavior);
        ds_tokenizer *t;
        int32_t ids[64];
        assert_int_equal(load(json, NULL, &t), DS_OK);
        int n = enc(t, "a-b", 0, ids);
        assert_int_equal(n, cases[c].n);
        for (int k = 0; k < n; k++) assert_int_equal(ids[k], cases[c].ids[k]);
        ds_tokenizer_free(t);
    }
    // Without any pre-tokenizer "a-b" is one word: a+- (rank 0) first -> a-, b.
    ds_tokenizer *t;
    int32_t ids[64];
    assert_int_equal(load("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 1, \"-\": 2, \"a-\": 3, \"-b\": 4},"
                          " \"merges\": [\"a -\", \"- b\"]}}", NULL, &t), DS_OK);
    int n = enc(t, "a-b", 0, ids);
    ASSERT_IDS(n, ids, 3, 1);
    ds_tokenizer_free(t);
}

static void test_bos_rules(void **state) {
    const char *json =
        "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"<s>\": 1}, \"merges\": []},"
        " \"post_processor\": {\"type\": \"TemplateProcessing\", \"single\": [{\"SpecialToken\": {\"id\": \"<s>\"}},"
        " {\"Sequence\": {\"id\": \"A\"}}], \"special_tokens\": {\"<s>\": {\"ids\": [1]}}},"
        " \"added_tokens\": [{\"id\": 1, \"content\": \"<s>\", \"special\": true}]}";
    ds_tokenizer *t;
    int32_t ids[64];
    int n;
    assert_int_equal(load(json, "{\"bos_token\": {\"content\": \"<s>\"}}", &t), DS_OK);
    assert_int_equal(ds_tokenizer_bos(t), 1);
    // ds_tokenize_ex does what the configuration says, even before a literal <s> (as HF).
    n = enc(t, "<s>a", DS_TOK_ADD_SPECIAL | DS_TOK_PARSE_SPECIAL, ids);
    ASSERT_IDS(n, ids, 1, 1, 0);
    // Without PARSE_SPECIAL the special token is plain text: < s > are not pieces and there is no
    // unk or byte fallback, so only "a" remains.
    n = enc(t, "<s>a", 0, ids);
    ASSERT_IDS(n, ids, 0);
    // ds_tokenize(add_bos = 1) never doubles it (a rendered chat template starts with BOS)...
    assert_int_equal(ds_tokenize(t, "<s>a", 4, 1, ids, 64, &n), DS_OK);
    ASSERT_IDS(n, ids, 1, 0);
    // ... and adds it otherwise.
    assert_int_equal(ds_tokenize(t, "a", 1, 1, ids, 64, &n), DS_OK);
    ASSERT_IDS(n, ids, 1, 0);
    assert_int_equal(ds_tokenize(t, "a", 1, 0, ids, 64, &n), DS_OK);
    ASSERT_IDS(n, ids, 0);
    // Invalid UTF-8 is an error, and the count query works with a NULL buffer.
    assert_int_equal(ds_tokenize(t, "a\xff", 2, 1, ids, 64, &n), DS_ERR_INVALID);
    assert_non_null(strstr(ds_last_error(), "invalid UTF-8"));
    assert_int_equal(ds_tokenize_ex(t, "aaa", 3, DS_TOK_ADD_SPECIAL, NULL, 0, &n), DS_OK);
    assert_int_equal(n, 4);
    ds_tokenizer_free(t);
}

// Gemma-style: Replace " " -> "▁" normalizer, byte fallback for missing characters, Replace +
// ByteFallback decoder; fuse_unk without byte fallback.
static void test_byte_fallback(void **state) {
    char json[4096];
    snprintf(json, sizeof json,
             "{\"normalizer\": {\"type\": \"Replace\", \"pattern\": {\"String\": \" \"}, \"content\": \"\xE2\x96\x81\"},"
             " \"pre_tokenizer\": {\"type\": \"Split\", \"pattern\": {\"String\": \" \"}, \"behavior\": \"MergedWithPrevious\"},"
             " \"decoder\": {\"type\": \"Sequence\", \"decoders\": [{\"type\": \"Replace\", \"pattern\": {\"String\": \"\xE2\x96\x81\"},"
             " \"content\": \" \"}, {\"type\": \"ByteFallback\"}, {\"type\": \"Fuse\"}]},"
             " \"model\": {\"type\": \"BPE\", \"byte_fallback\": true, \"fuse_unk\": true, \"unk_token\": \"<unk>\","
             " \"vocab\": {\"<unk>\": 0, \"<0xF0>\": 1, \"<0x9F>\": 2, \"<0x99>\": 3, \"<0x82>\": 4, \"\xE2\x96\x81\": 5,"
             " \"h\": 6, \"i\": 7, \"hi\": 8, \"\xE2\x96\x81hi\": 9}, \"merges\": [[\"h\", \"i\"], [\"\xE2\x96\x81\", \"hi\"]]}}");
    ds_tokenizer *t;
    int32_t ids[64];
    assert_int_equal(load(json, NULL, &t), DS_OK);
    // "hi hi🙂": h i ▁ h i + four byte tokens; merges: hi, hi, then ▁+hi.
    int n = enc(t, "hi hi\xF0\x9F\x99\x82", DS_TOK_PARSE_SPECIAL, ids);
    ASSERT_IDS(n, ids, 8, 9, 1, 2, 3, 4);
    // 'x' and 'y' have neither a piece nor a byte token: one fused <unk>.
    n = enc(t, "hxyi", DS_TOK_PARSE_SPECIAL, ids);
    ASSERT_IDS(n, ids, 6, 0, 7);
    // Streaming the emoji's byte tokens: nothing until the character is complete, then all 4 bytes.
    ds_detok d;
    char out[64];
    ds_detok_init(&d, t, 1); // no Strip decoder: the request to strip a leading space is ignored
    assert_int_equal(ds_detok_push(&d, 9, out, sizeof out), 3);
    assert_memory_equal(out, " hi", 3);
    assert_int_equal(ds_detok_push(&d, 1, out, sizeof out), 0);
    assert_int_equal(ds_detok_push(&d, 2, out, sizeof out), 0);
    assert_int_equal(ds_detok_push(&d, 3, out, sizeof out), 0);
    assert_int_equal(ds_detok_push(&d, 4, out, sizeof out), 4);
    assert_memory_equal(out, "\xF0\x9F\x99\x82", 4);
    // A truncated character at the end is one U+FFFD.
    assert_int_equal(ds_detok_push(&d, 1, out, sizeof out), 0);
    assert_int_equal(ds_detok_flush(&d, out, sizeof out), 3);
    assert_memory_equal(out, "\xEF\xBF\xBD", 3);
    ds_tokenizer_free(t);
}

// NFC: hand-checked compositions and orderings (UAX #15 examples).
static void test_nfc(void **state) {
    struct {
        const char *in, *out;
    } cases[] = {
        {"e\xCC\x81", "\xC3\xA9"},                          // e + acute -> é
        {"\xC3\xA9", "\xC3\xA9"},                           // already composed
        {"a\xCC\xA3\xCC\x87", "\xE1\xBA\xA1\xCC\x87"},      // a + dot below + dot above -> ạ + dot above
        {"a\xCC\x87\xCC\xA3", "\xE1\xBA\xA1\xCC\x87"},      // same after canonical reordering
        {"\xE1\x84\x80\xE1\x85\xA1\xE1\x86\xA8", "\xEA\xB0\x81"}, // Hangul L V T -> 각
        {"\xE2\x84\xAB", "\xC3\x85"},                       // ANGSTROM SIGN -> Å (singleton)
        {"\xE0\xA5\x98", "\xE0\xA4\x95\xE0\xA4\xBC"},       // U+0958 is excluded from composition
        {"\xCC\x81" "a", "\xCC\x81" "a"},                   // a leading mark has no starter
        {"abc", "abc"},
    };
    char *buf = NULL;
    size_t cap = 0, n;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        assert_int_equal(ds_nfc(cases[i].in, strlen(cases[i].in), &buf, &cap, &n), DS_OK);
        assert_int_equal(n, strlen(cases[i].out));
        assert_memory_equal(buf, cases[i].out, n);
    }
    free(buf);
    assert_true(ds_nfc_quick_check("plain ASCII and caf\xC3\xA9", 20));
    assert_false(ds_nfc_quick_check("e\xCC\x81", 3));
}

static void test_hostile(void **state) {
    ds_tokenizer *t = NULL;
    const char *bad[] = {
        "",                                                            // empty file
        "[1, 2, 3]",                                                   // not an object
        "{\"model\": {\"type\": \"BPE\"}}",                              // no vocab
        "{\"model\": {\"type\": \"BPE\", \"vocab\": {}, \"merges\": []}}", // empty vocabulary
        "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": \"x\"}, \"merges\": []}}",
        "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0.5}, \"merges\": []}}",
        "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": [[\"a\"]]}}",
        "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": [7]}}",
        "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []}, \"added_tokens\": [{\"id\": -1, \"content\": \"x\"}]}",
        "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []}, \"pre_tokenizer\": {\"type\": \"Split\", \"pattern\": {\"Regex\": \"(\"}, \"behavior\": \"Isolated\"}}",
        "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []}, \"pre_tokenizer\": {\"type\": \"Split\", \"pattern\": {\"Regex\": \"a\"}, \"behavior\": \"Contiguous\"}}",
        "{\"model\": {\"type\": \"BPE\", \"dropout\": 0.1, \"vocab\": {\"a\": 0}, \"merges\": []}}",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ds_status st = load(bad[i], NULL, &t);
        assert_int_not_equal(st, DS_OK);
        assert_null(t);
        assert_non_null(strstr(ds_last_error(), "tokenizer"));
    }
    assert_int_not_equal(ds_tokenizer_load("/nonexistent/tokenizer.json", &t), DS_OK);
    assert_non_null(strstr(ds_last_error(), "/nonexistent"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_merge_order),
        cmocka_unit_test(test_split_and_ignore_merges),
        cmocka_unit_test(test_split_behaviours),
        cmocka_unit_test(test_bos_rules),
        cmocka_unit_test(test_byte_fallback),
        cmocka_unit_test(test_nfc),
        cmocka_unit_test(test_hostile),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
