// SentencePiece-style tokenizer: encoding (merge order, ties, stale pairs, byte fallback,
// user-defined pieces, errors) on a small synthetic vocabulary whose results are worked out by
// hand in the comments, and the streaming detokenizer (UTF-8 completion, U+FFFD, flush, leading
// space, small buffers).
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "dspark.h"
#include "tokenizer/tok_internal.h"
#include "tokenizer/tokenizer.h"

// ---------------------------------------------------------------------------------------------
// The synthetic vocabulary.

#define U "\xE2\x96\x81" // U+2581, SentencePiece's space
#define BYTE(b) (3 + (b)) // id of <0xHH>

enum {
    T_UNK = 0,
    T_BOS = 1,
    T_EOS = 2,
    T_SP = 259, // "▁"
    T_A,        // "a"
    T_B,        // "b"
    T_C,        // "c"
    T_D,        // "d"
    T_AB,       // "ab"   -10
    T_BC,       // "bc"   -6
    T_SPA,      // "▁a"   -8
    T_SPB,      // "▁b"   -9
    T_XY,       // "xy"   -7
    T_YX,       // "yx"   -7 (tie with xy)
    T_X,        // "x"
    T_Y,        // "y"
    T_LT0,      // "<0"   -3
    T_X4,       // "x4"   -3
    T_LT0X4,    // "<0x4" -3
    T_1GT,      // "1>"   -3
    T_UD,       // "<ud>" USER_DEFINED
    T_SPAB,     // "▁ab"  -12
    T_AA,       // "aa"   -11
    T_AAAA,     // "aaaa" -13
    T_UNUSED,   // "zz"   UNUSED
    N_VOCAB
};

typedef struct {
    const char *pieces[N_VOCAB];
    float scores[N_VOCAB];
    int32_t types[N_VOCAB];
    char bytes[256][7];
} vocab;

static void add(vocab *v, int id, const char *text, float score, int type) {
    v->pieces[id] = text;
    v->scores[id] = score;
    v->types[id] = type;
}

static void make_vocab(vocab *v) {
    memset(v, 0, sizeof *v);
    add(v, T_UNK, "<unk>", 0, DS_TOKTYPE_UNKNOWN);
    add(v, T_BOS, "<s>", 0, DS_TOKTYPE_CONTROL);
    add(v, T_EOS, "</s>", 0, DS_TOKTYPE_CONTROL);
    for (int b = 0; b < 256; b++) {
        snprintf(v->bytes[b], sizeof v->bytes[b], "<0x%02X>", b);
        add(v, BYTE(b), v->bytes[b], 0, DS_TOKTYPE_BYTE);
    }
    add(v, T_SP, U, -1, DS_TOKTYPE_NORMAL);
    add(v, T_A, "a", -2, DS_TOKTYPE_NORMAL);
    add(v, T_B, "b", -3, DS_TOKTYPE_NORMAL);
    add(v, T_C, "c", -4, DS_TOKTYPE_NORMAL);
    add(v, T_D, "d", -5, DS_TOKTYPE_NORMAL);
    add(v, T_AB, "ab", -10, DS_TOKTYPE_NORMAL);
    add(v, T_BC, "bc", -6, DS_TOKTYPE_NORMAL);
    add(v, T_SPA, U "a", -8, DS_TOKTYPE_NORMAL);
    add(v, T_SPB, U "b", -9, DS_TOKTYPE_NORMAL);
    add(v, T_XY, "xy", -7, DS_TOKTYPE_NORMAL);
    add(v, T_YX, "yx", -7, DS_TOKTYPE_NORMAL);
    add(v, T_X, "x", -2, DS_TOKTYPE_NORMAL);
    add(v, T_Y, "y", -2, DS_TOKTYPE_NORMAL);
    add(v, T_LT0, "<0", -3, DS_TOKTYPE_NORMAL);
    add(v, T_X4, "x4", -3, DS_TOKTYPE_NORMAL);
    add(v, T_LT0X4, "<0x4", -3, DS_TOKTYPE_NORMAL);
    add(v, T_1GT, "1>", -3, DS_TOKTYPE_NORMAL);
    add(v, T_UD, "<ud>", 0, DS_TOKTYPE_USER_DEFINED);
    add(v, T_SPAB, U "ab", -12, DS_TOKTYPE_NORMAL);
    add(v, T_AA, "aa", -11, DS_TOKTYPE_NORMAL);
    add(v, T_AAAA, "aaaa", -13, DS_TOKTYPE_NORMAL);
    add(v, T_UNUSED, "zz", -20, DS_TOKTYPE_UNUSED);
}

typedef struct {
    vocab v;
    ds_tokenizer *tp; // add_space_prefix = 1
    ds_tokenizer *tn; // add_space_prefix = 0
} fixture;

static int setup(void **state) {
    fixture *f = calloc(1, sizeof *f);
    make_vocab(&f->v);
    assert_int_equal(ds_tokenizer_init_spm(N_VOCAB, f->v.pieces, NULL, f->v.scores, f->v.types, T_BOS,
                                           T_EOS, T_UNK, 1, &f->tp),
                     DS_OK);
    assert_int_equal(ds_tokenizer_init_spm(N_VOCAB, f->v.pieces, NULL, f->v.scores, f->v.types, T_BOS,
                                           T_EOS, T_UNK, 0, &f->tn),
                     DS_OK);
    *state = f;
    return 0;
}

static int teardown(void **state) {
    fixture *f = *state;
    ds_tokenizer_free(f->tp);
    ds_tokenizer_free(f->tn);
    free(f);
    return 0;
}

// Encode `text` and compare with the expected ids (terminated by -1).
static void check_enc(const ds_tokenizer *t, const char *text, int add_bos, ...) {
    int32_t want[64], got[64];
    int n_want = 0;
    va_list ap;
    va_start(ap, add_bos);
    for (int id; (id = va_arg(ap, int)) != -1;) want[n_want++] = id;
    va_end(ap);
    int n = -1;
    ds_status st = ds_tokenize(t, text, strlen(text), add_bos, got, 64, &n);
    if (st != DS_OK) fail_msg("\"%s\": %s", text, ds_last_error());
    int same = n == n_want;
    for (int i = 0; same && i < n; i++) same = got[i] == want[i];
    if (!same) {
        char msg[1024];
        int o = snprintf(msg, sizeof msg, "\"%s\": got", text);
        for (int i = 0; i < n && i < 64; i++) o += snprintf(msg + o, sizeof msg - (size_t)o, " %d", got[i]);
        o += snprintf(msg + o, sizeof msg - (size_t)o, ", want");
        for (int i = 0; i < n_want; i++) o += snprintf(msg + o, sizeof msg - (size_t)o, " %d", want[i]);
        fail_msg("%s", msg);
    }
}

// ---------------------------------------------------------------------------------------------
// Encoding

static void test_empty(void **state) {
    fixture *f = *state;
    check_enc(f->tp, "", 1, T_BOS, -1); // no space prefix for empty text (llama.cpp: "" -> [BOS])
    check_enc(f->tp, "", 0, -1);
    check_enc(f->tn, "", 1, T_BOS, -1);
    int n = -1;
    assert_int_equal(ds_tokenize(f->tp, NULL, 0, 0, NULL, 0, &n), DS_OK);
    assert_int_equal(n, 0);
}

static void test_merge_order_and_stale(void **state) {
    fixture *f = *state;
    check_enc(f->tn, "ab", 0, T_AB, -1);
    // a b c: bc (-6) beats ab (-10); then the queued (a, b) is stale (b grew to "bc"), and "abc"
    // is not a piece: a | bc. Without the staleness check a and bc would be merged into a
    // non-piece and come out as three byte tokens.
    check_enc(f->tn, "abc", 0, T_A, T_BC, -1);
    check_enc(f->tn, "bcd", 0, T_BC, T_D, -1);
    // ▁ a b: ▁a (-8) beats ab (-10), then (▁a, b) = "▁ab" (-12) merges; (a, b) is stale.
    check_enc(f->tp, "ab", 0, T_SPAB, -1);
    // ▁ a b c: bc first, then ▁a; "abc", "▁abc" are not pieces.
    check_enc(f->tp, "abc", 1, T_BOS, T_SPA, T_BC, -1);
    // aaaaa: five aa pairs tie at -11: leftmost first -> aa aa a, then aa+aa = aaaa (-13).
    check_enc(f->tn, "aaaaa", 0, T_AAAA, T_A, -1);
    check_enc(f->tn, "aaaaaa", 0, T_AAAA, T_AA, -1);
}

static void test_tie_leftmost(void **state) {
    fixture *f = *state;
    // xy and yx both score -7: the leftmost pair wins, whatever the ids.
    check_enc(f->tn, "xyx", 0, T_XY, T_X, -1);
    check_enc(f->tn, "yxy", 0, T_YX, T_Y, -1);
    check_enc(f->tn, "xyxy", 0, T_XY, T_XY, -1);
}

static void test_spaces(void **state) {
    fixture *f = *state;
    check_enc(f->tp, "a", 0, T_SPA, -1);
    check_enc(f->tn, "a", 0, T_A, -1);
    // "▁a▁▁b": ▁a, then the lone ▁ (no "▁▁" piece), then ▁b.
    check_enc(f->tp, "a  b", 0, T_SPA, T_SP, T_SPB, -1);
    check_enc(f->tp, " ", 0, T_SP, T_SP, -1);
    check_enc(f->tp, "a ", 0, T_SPA, T_SP, -1);
    check_enc(f->tn, " a", 0, T_SPA, -1);
    check_enc(f->tn, "a b", 0, T_A, T_SPB, -1);
}

static void test_byte_fallback(void **state) {
    fixture *f = *state;
    check_enc(f->tn, "z", 0, BYTE(0x7A), -1);
    check_enc(f->tp, "\xC3\xA9", 0, T_SP, BYTE(0xC3), BYTE(0xA9), -1);        // é
    check_enc(f->tn, "a\xC3\xA9" "b", 0, T_A, BYTE(0xC3), BYTE(0xA9), T_B, -1);
    check_enc(f->tn, "\xE2\x82\xAC", 0, BYTE(0xE2), BYTE(0x82), BYTE(0xAC), -1); // €
    check_enc(f->tn, "\xF0\x9F\x98\x80", 0, BYTE(0xF0), BYTE(0x9F), BYTE(0x98), BYTE(0x80), -1); // 😀
    check_enc(f->tn, "\n\t", 0, BYTE(0x0A), BYTE(0x09), -1);
    // A NUL byte is ordinary text.
    int32_t out[4];
    int n;
    assert_int_equal(ds_tokenize(f->tn, "a\0b", 3, 0, out, 4, &n), DS_OK);
    assert_int_equal(n, 3);
    assert_int_equal(out[1], BYTE(0));
}

// Decision: like llama.cpp, the text -> id map holds every piece, so a byte piece can be the
// result of merges when the vocabulary has every intermediate piece, while a control piece in the
// text is just text.
static void test_all_pieces_in_map(void **state) {
    fixture *f = *state;
    // < 0 x 4 1 >: "<0", "x4", then "<0x4" (tie with "1>" at -3, leftmost first), "1>", and last
    // "<0x4" + "1>" = "<0x41>", the byte piece for 'A'.
    check_enc(f->tn, "<0x41>", 0, BYTE(0x41), -1);
    check_enc(f->tn, "<s>", 0, BYTE('<'), BYTE('s'), BYTE('>'), -1);
    // UNUSED pieces are looked up like any other.
    check_enc(f->tn, "zz", 0, T_UNUSED, -1);
}

static void test_user_defined(void **state) {
    fixture *f = *state;
    // Split out before merging; the text after it gets the space prefix again (llama.cpp).
    check_enc(f->tp, "a<ud>b", 1, T_BOS, T_SPA, T_UD, T_SPB, -1);
    check_enc(f->tn, "a<ud>b", 0, T_A, T_UD, T_B, -1);
    check_enc(f->tp, "<ud>", 0, T_UD, -1);
    check_enc(f->tp, "<ud><ud>a", 0, T_UD, T_UD, T_SPA, -1);
    check_enc(f->tp, "x <ud>", 0, T_SP, T_X, T_SP, T_UD, -1);
}

static void test_invalid_utf8(void **state) {
    fixture *f = *state;
    static const struct {
        const char *s;
        size_t off;
    } bad[] = {
        {"ab\xC3", 2},             // truncated
        {"ab\x80", 2},             // lone continuation
        {"\xC0\xAF", 0},           // overlong
        {"x\xE0\x80\x80", 1},      // overlong, 3 bytes
        {"xy\xED\xA0\x80", 2},     // surrogate
        {"\xF4\x90\x80\x80", 0},   // above U+10FFFF
        {"\xF5\x80\x80\x80", 0},   // never a lead byte
        {"a\xC3\xA9\xE2\x82", 3},  // valid é, then truncated €
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int32_t out[16];
        int n = 99;
        ds_clear_error();
        assert_int_equal(ds_tokenize(f->tp, bad[i].s, strlen(bad[i].s), 1, out, 16, &n), DS_ERR_INVALID);
        assert_int_equal(n, 0);
        char want[64];
        snprintf(want, sizeof want, "byte offset %zu", bad[i].off);
        if (!strstr(ds_last_error(), want)) fail_msg("case %zu: message \"%s\" lacks \"%s\"", i, ds_last_error(), want);
    }
}

static void test_small_cap(void **state) {
    fixture *f = *state;
    int32_t out[4] = {-7, -7, -7, -7};
    int n = 0;
    assert_int_equal(ds_tokenize(f->tp, "abc", 3, 1, out, 2, &n), DS_OK);
    assert_int_equal(n, 3);
    assert_int_equal(out[0], T_BOS);
    assert_int_equal(out[1], T_SPA);
    assert_int_equal(out[2], -7); // untouched
    n = 0;
    assert_int_equal(ds_tokenize(f->tp, "abc", 3, 1, NULL, 0, &n), DS_OK);
    assert_int_equal(n, 3);
    assert_int_equal(ds_tokenize(f->tp, "abc", 3, 1, NULL, 2, &n), DS_ERR_INVALID);
    assert_int_equal(ds_tokenize(f->tp, "abc", 3, 1, out, -1, &n), DS_ERR_INVALID);
}

static void test_accessors(void **state) {
    fixture *f = *state;
    assert_int_equal(ds_tokenizer_vocab_size(f->tp), N_VOCAB);
    assert_int_equal(ds_tokenizer_bos(f->tp), T_BOS);
    assert_int_equal(ds_tokenizer_eos(f->tp), T_EOS);
    char buf[16];
    assert_int_equal(ds_token_bytes(f->tp, T_BOS, buf, 16), 0);
    assert_int_equal(ds_token_bytes(f->tp, T_UNK, buf, 16), 0); // as llama.cpp without `special`
    assert_int_equal(ds_token_bytes(f->tp, T_UNUSED, buf, 16), 0);
    assert_int_equal(ds_token_bytes(f->tp, BYTE(0x41), buf, 16), 1);
    assert_int_equal(buf[0], 'A');
    assert_int_equal(ds_token_bytes(f->tp, BYTE(0xFF), buf, 16), 1);
    assert_int_equal((uint8_t)buf[0], 0xFF);
    assert_int_equal(ds_token_bytes(f->tp, T_SPA, buf, 16), 2);
    assert_memory_equal(buf, " a", 2);
    assert_int_equal(ds_token_bytes(f->tp, T_UD, buf, 16), 4);
    assert_memory_equal(buf, "<ud>", 4);
    memset(buf, '#', sizeof buf);
    assert_int_equal(ds_token_bytes(f->tp, T_SPAB, buf, 2), 3); // full length, 2 bytes written
    assert_memory_equal(buf, " a#", 3);
    assert_int_equal(ds_token_bytes(f->tp, -1, buf, 16), 0);
    assert_int_equal(ds_token_bytes(f->tp, N_VOCAB, buf, 16), 0);
}

static void test_init_errors(void **state) {
    (void)state;
    vocab v;
    make_vocab(&v);
    ds_tokenizer *t = (ds_tokenizer *)1;
    // Duplicate piece.
    v.pieces[T_D] = "c";
    assert_int_equal(ds_tokenizer_init_spm(N_VOCAB, v.pieces, NULL, v.scores, v.types, 1, 2, 0, 1, &t),
                     DS_ERR_INVALID);
    assert_null(t);
    assert_non_null(strstr(ds_last_error(), "both \"c\""));
    make_vocab(&v);
    // A byte piece that is not <0xHH>.
    v.types[T_A] = DS_TOKTYPE_BYTE;
    assert_int_equal(ds_tokenizer_init_spm(N_VOCAB, v.pieces, NULL, v.scores, v.types, 1, 2, 0, 1, &t),
                     DS_ERR_INVALID);
    make_vocab(&v);
    v.types[T_A] = 9;
    assert_int_equal(ds_tokenizer_init_spm(N_VOCAB, v.pieces, NULL, v.scores, v.types, 1, 2, 0, 1, &t),
                     DS_ERR_INVALID);
    make_vocab(&v);
    assert_int_equal(ds_tokenizer_init_spm(N_VOCAB, v.pieces, NULL, v.scores, v.types, N_VOCAB, 2, 0, 1, &t),
                     DS_ERR_INVALID);
    assert_int_equal(ds_tokenizer_init_spm(0, v.pieces, NULL, v.scores, v.types, -1, -1, -1, 1, &t),
                     DS_ERR_INVALID);
    ds_tokenizer_free(NULL);
}

// Without types: BOS/EOS are control, unk unknown, <0xHH> bytes, everything else normal (so "<ud>"
// is ordinary text). Explicit piece lengths and NULL scores are accepted too.
static void test_no_types(void **state) {
    (void)state;
    vocab v;
    make_vocab(&v);
    size_t lens[N_VOCAB];
    for (int i = 0; i < N_VOCAB; i++) lens[i] = strlen(v.pieces[i]);
    ds_tokenizer *t = NULL;
    assert_int_equal(ds_tokenizer_init_spm(N_VOCAB, v.pieces, lens, v.scores, NULL, T_BOS, T_EOS, T_UNK, 1, &t),
                     DS_OK);
    check_enc(t, "ab", 1, T_BOS, T_SPAB, -1);
    check_enc(t, "<ud>", 0, T_SP, BYTE('<'), BYTE('u'), T_D, BYTE('>'), -1);
    char buf[8];
    assert_int_equal(ds_token_bytes(t, T_BOS, buf, 8), 0);
    assert_int_equal(ds_token_bytes(t, T_UNK, buf, 8), 0);
    assert_int_equal(ds_token_bytes(t, BYTE('A'), buf, 8), 1);
    assert_int_equal(buf[0], 'A');
    ds_tokenizer_free(t);

    // No scores: every pair ties, so merges go left to right.
    assert_int_equal(ds_tokenizer_init_spm(N_VOCAB, v.pieces, NULL, NULL, v.types, T_BOS, T_EOS, T_UNK, 0, &t),
                     DS_OK);
    check_enc(t, "abc", 0, T_AB, T_C, -1);
    ds_tokenizer_free(t);
}

// Without byte pieces, bytes fall back to unk.
static void test_no_byte_pieces(void **state) {
    (void)state;
    const char *pieces[] = {"<unk>", "<s>", "</s>", "a"};
    ds_tokenizer *t = NULL;
    assert_int_equal(ds_tokenizer_init_spm(4, pieces, NULL, NULL, NULL, 1, 2, 0, 0, &t), DS_OK);
    check_enc(t, "a\xC3\xA9", 1, 1, 3, 0, 0, -1);
    ds_tokenizer_free(t);
    assert_int_equal(ds_tokenizer_init_spm(4, pieces, NULL, NULL, NULL, 1, 2, -1, 0, &t), DS_OK);
    int32_t out[8];
    int n;
    assert_int_equal(ds_tokenize(t, "b", 1, 0, out, 8, &n), DS_ERR_INVALID);
    ds_tokenizer_free(t);
}

// A megabyte of text: must finish (the brief's complexity guard) with a linear number of
// look-ups and queue operations.
static void test_long_input(void **state) {
    fixture *f = *state;
    static const char unit[] = "abc xyx a  b \xC3\xA9\xF0\x9F\x98\x80 <ud>aaaaaaa yxy\n";
    size_t ul = sizeof unit - 1, len = 1 << 20;
    char *text = malloc(len);
    size_t o = 0;
    while (o + ul <= len) {
        memcpy(text + o, unit, ul);
        o += ul;
    }
    len = o;
    int n = 0;
    assert_int_equal(ds_tokenize(f->tp, text, len, 1, NULL, 0, &n), DS_OK);
    int32_t *out = malloc((size_t)n * sizeof *out);
    int n2 = 0;
    assert_int_equal(ds_tokenize(f->tp, text, len, 1, out, n, &n2), DS_OK);
    assert_int_equal(n, n2);
    size_t ops = ds_tok_last_op_count();
    if (ops > 8 * len) fail_msg("%zu operations for %zu bytes", ops, len);
    free(out);

    // Round trip through the detokenizer (without the space prefix, which a user-defined piece
    // would bring back after itself).
    assert_int_equal(ds_tokenize(f->tn, text, len, 0, NULL, 0, &n), DS_OK);
    out = malloc((size_t)n * sizeof *out);
    assert_int_equal(ds_tokenize(f->tn, text, len, 0, out, n, &n2), DS_OK);
    assert_int_equal(n, n2);
    char *back = malloc(len + 64);
    size_t bo = 0;
    ds_detok d;
    ds_detok_init(&d, f->tn, 0);
    for (int i = 0; i < n; i++) {
        int w = ds_detok_push(&d, out[i], back + bo, 64);
        assert_true(w >= 0);
        bo += (size_t)w;
        assert_true(bo <= len);
    }
    assert_int_equal(ds_detok_flush(&d, back + bo, 64), 0);
    assert_int_equal(bo, len);
    assert_memory_equal(back, text, len);
    free(back);
    free(out);

    // One long run of a single letter: every pair is a candidate.
    memset(text, 'a', len);
    assert_int_equal(ds_tokenize(f->tn, text, len, 0, NULL, 0, &n), DS_OK);
    assert_int_equal(n, (int)(len / 4 + (len % 4 >= 2) + len % 2));
    ops = ds_tok_last_op_count();
    if (ops > 8 * len) fail_msg("%zu operations for %zu bytes of 'a'", ops, len);
    free(text);
}

// ---------------------------------------------------------------------------------------------
// Detokenizer

static const char FFFD[] = "\xEF\xBF\xBD";

static void expect_push(ds_detok *d, int32_t id, const char *want, int want_len) {
    char out[64];
    int n = ds_detok_push(d, id, out, sizeof out);
    if (n != want_len) fail_msg("token %d: %d bytes, want %d", id, n, want_len);
    assert_memory_equal(out, want, (size_t)want_len);
}

static void test_detok_utf8(void **state) {
    fixture *f = *state;
    ds_detok d;
    ds_detok_init(&d, f->tp, 0);
    // 😀 as four byte tokens: nothing until complete.
    expect_push(&d, BYTE(0xF0), "", 0);
    expect_push(&d, BYTE(0x9F), "", 0);
    expect_push(&d, BYTE(0x98), "", 0);
    expect_push(&d, BYTE(0x80), "\xF0\x9F\x98\x80", 4);
    // é split, with a normal piece after it.
    expect_push(&d, BYTE(0xC3), "", 0);
    expect_push(&d, BYTE(0xA9), "\xC3\xA9", 2);
    expect_push(&d, T_SPA, " a", 2);
    // Invalid sequences.
    expect_push(&d, BYTE(0xFF), FFFD, 3);                        // never valid
    expect_push(&d, BYTE(0x80), FFFD, 3);                        // lone continuation
    expect_push(&d, BYTE(0xC0), FFFD, 3);                        // overlong lead
    expect_push(&d, BYTE(0xC3), "", 0);
    expect_push(&d, BYTE(0x41), "\xEF\xBF\xBD" "A", 4);          // interrupted: U+FFFD, then A
    expect_push(&d, BYTE(0xE0), "", 0);
    expect_push(&d, BYTE(0x80), "\xEF\xBF\xBD\xEF\xBF\xBD", 6);  // E0 80: overlong, two U+FFFD
    expect_push(&d, BYTE(0xED), "", 0);
    expect_push(&d, BYTE(0xA0), "\xEF\xBF\xBD\xEF\xBF\xBD", 6);  // surrogate
    expect_push(&d, BYTE(0x80), FFFD, 3);
    expect_push(&d, BYTE(0xF4), "", 0);
    expect_push(&d, BYTE(0x90), "\xEF\xBF\xBD\xEF\xBF\xBD", 6);  // above U+10FFFF
    expect_push(&d, BYTE(0xE2), "", 0);
    expect_push(&d, BYTE(0x82), "", 0);
    expect_push(&d, T_SPB, "\xEF\xBF\xBD b", 5);                 // E2 82 then ' ': one U+FFFD
    // Control tokens give nothing and do not disturb a pending character.
    expect_push(&d, BYTE(0xC3), "", 0);
    expect_push(&d, T_EOS, "", 0);
    expect_push(&d, BYTE(0xA9), "\xC3\xA9", 2);
    expect_push(&d, 12345, "", 0); // out of range: nothing
    assert_int_equal(d.n_pending, 0);
}

static void test_detok_flush(void **state) {
    fixture *f = *state;
    ds_detok d;
    char out[8];
    ds_detok_init(&d, f->tp, 0);
    assert_int_equal(ds_detok_flush(&d, out, 8), 0);
    expect_push(&d, BYTE(0xE2), "", 0);
    expect_push(&d, BYTE(0x82), "", 0);
    assert_int_equal(ds_detok_flush(&d, out, 2), -3); // too small: nothing lost
    assert_int_equal(ds_detok_flush(&d, out, 8), 3);
    assert_memory_equal(out, FFFD, 3);
    assert_int_equal(ds_detok_flush(&d, out, 8), 0);
    expect_push(&d, T_A, "a", 1);
}

static void test_detok_leading_space(void **state) {
    fixture *f = *state;
    ds_detok d;
    ds_detok_init(&d, f->tp, 1);
    expect_push(&d, T_BOS, "", 0); // empty pieces keep us at the start
    expect_push(&d, T_SPA, "a", 1);
    expect_push(&d, T_SPB, " b", 2); // only the first piece
    expect_push(&d, T_SPA, " a", 2);

    ds_detok_init(&d, f->tp, 1);
    expect_push(&d, T_SP, "", 0); // "▁" alone: its space is the one dropped
    expect_push(&d, T_SPA, " a", 2);

    ds_detok_init(&d, f->tp, 1);
    expect_push(&d, T_A, "a", 1); // no space to drop; the start is over anyway
    expect_push(&d, T_SPB, " b", 2);

    ds_detok_init(&d, f->tp, 0);
    expect_push(&d, T_SPA, " a", 2);
}

static void test_detok_small_cap(void **state) {
    fixture *f = *state;
    ds_detok d;
    char out[8];
    ds_detok_init(&d, f->tp, 0);
    assert_int_equal(ds_detok_push(&d, T_SPAB, out, 2), -3); // needs 3; nothing consumed
    assert_int_equal(ds_detok_push(&d, T_SPAB, NULL, 0), -3);
    assert_int_equal(ds_detok_push(&d, T_SPAB, out, 3), 3);
    assert_memory_equal(out, " ab", 3);
    expect_push(&d, BYTE(0xF0), "", 0);
    expect_push(&d, BYTE(0x9F), "", 0);
    expect_push(&d, BYTE(0x98), "", 0);
    memset(out, '#', sizeof out);
    assert_int_equal(ds_detok_push(&d, BYTE(0x80), out, 3), -4);
    assert_int_equal((uint8_t)out[0], '#');
    assert_int_equal(d.n_pending, 3);
    assert_int_equal(ds_detok_push(&d, BYTE(0x80), out, 4), 4);
    assert_memory_equal(out, "\xF0\x9F\x98\x80", 4);
    // The start state is not consumed by a refused push either.
    ds_detok_init(&d, f->tp, 1);
    assert_int_equal(ds_detok_push(&d, T_SPAB, out, 1), -2);
    assert_int_equal(ds_detok_push(&d, T_SPAB, out, 8), 2);
    assert_memory_equal(out, "ab", 2);
}

// Encode, then decode with the leading space stripped: the original text comes back.
static void test_round_trip(void **state) {
    fixture *f = *state;
    static const char *texts[] = {"abc", "  leading and trailing  ", "h\xC3\xA9llo w\xC3\xB6rld \xF0\x9F\x98\x80!",
                                  "a<ud>b <ud>", "xyx\nyxy\t<0x4", "<s></s><unk>"};
    for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++) {
        const char *s = texts[i];
        int32_t ids[256];
        int n;
        assert_int_equal(ds_tokenize(f->tp, s, strlen(s), 1, ids, 256, &n), DS_OK);
        char out[512];
        size_t o = 0;
        ds_detok d;
        ds_detok_init(&d, f->tp, 1);
        for (int k = 0; k < n; k++) {
            int w = ds_detok_push(&d, ids[k], out + o, 64);
            assert_true(w >= 0);
            o += (size_t)w;
        }
        o += (size_t)ds_detok_flush(&d, out + o, 64);
        out[o] = '\0';
        // A user-defined piece is not preceded by the prefix space, but the text after it gets one
        // back (llama.cpp's is_prev_special), which the decoder does not remove.
        if (strstr(s, "<ud>")) continue;
        assert_string_equal(out, s);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_empty),
        cmocka_unit_test(test_merge_order_and_stale),
        cmocka_unit_test(test_tie_leftmost),
        cmocka_unit_test(test_spaces),
        cmocka_unit_test(test_byte_fallback),
        cmocka_unit_test(test_all_pieces_in_map),
        cmocka_unit_test(test_user_defined),
        cmocka_unit_test(test_invalid_utf8),
        cmocka_unit_test(test_small_cap),
        cmocka_unit_test(test_accessors),
        cmocka_unit_test(test_init_errors),
        cmocka_unit_test(test_no_types),
        cmocka_unit_test(test_no_byte_pieces),
        cmocka_unit_test(test_long_input),
        cmocka_unit_test(test_detok_utf8),
        cmocka_unit_test(test_detok_flush),
        cmocka_unit_test(test_detok_leading_space),
        cmocka_unit_test(test_detok_small_cap),
        cmocka_unit_test(test_round_trip),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
