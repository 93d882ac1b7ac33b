// Training data files (src/train/data.h): the writer's bytes equal an independent encoding of the
// documented layout; round trips, append and the held-out split; every truncation, every flipped
// byte, ids outside the vocabulary, n_prompt > n_tokens and absurd counts fail with a message
// naming the file; a failed or aborted write leaves nothing behind. Also prompt files.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "bytebuf.h"
#include "tmpdir.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gen/prompts.h"
#include "train/data.h"

// ---------------------------------------------------------------------------------------------
// Temporary files

static int setup_all(void **state) {
    (void)state;
    return tmpdir_create("test_data");
}

static int teardown_all(void **state) {
    (void)state;
    return tmpdir_remove();
}

static void tmp_path(char *out, size_t cap, const char *what) { tmpdir_path(out, cap, what, ".dat"); }

// Entries of g_tmp_base whose name contains ".tmp." (left-over temporary files).
static int count_tmp_files(void) {
    int n = 0;
    DIR *d = opendir(g_tmp_base);
    struct dirent *de;
    while (d && (de = readdir(d))) n += strstr(de->d_name, ".tmp.") != NULL;
    if (d) closedir(d);
    return n;
}

static void write_bytes(const char *path, const void *p, size_t n) {
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    if (n) assert_int_equal(fwrite(p, 1, n, f), n);
    assert_int_equal(fclose(f), 0);
}

static uint8_t *read_all(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    long sz = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *p = malloc((size_t)sz + 1);
    assert_non_null(p);
    assert_int_equal(fread(p, 1, (size_t)sz, f), (size_t)sz);
    fclose(f);
    *n = (size_t)sz;
    return p;
}

// ---------------------------------------------------------------------------------------------
// An independent encoder of the documented layout (byte by byte, little-endian; buf, b_bytes,
// b_u32, b_u64 from bytebuf.h)

static uint64_t ref_fnv(const uint8_t *p, size_t n) {
    uint64_t h = 14695981039346656037ull;
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 1099511628211ull;
    return h;
}
static void b_header(buf *b, uint32_t version, uint32_t flags, uint64_t vocab, uint64_t n_seq) {
    b_bytes(b, "DSPKDATA", 8);
    b_u32(b, version);
    b_u32(b, flags);
    b_u64(b, vocab);
    b_u64(b, n_seq);
}
static void b_seq(buf *b, uint32_t n_tokens, uint32_t n_prompt, const uint32_t *ids) {
    b_u32(b, n_tokens);
    b_u32(b, n_prompt);
    for (uint32_t i = 0; i < n_tokens; i++) b_u32(b, ids[i]);
}
static void b_trailer(buf *b) { b_u64(b, ref_fnv(b->p, b->n)); }

// The three sequences most tests use (vocabulary 100).
static const int32_t S0[] = {1, 5, 9, 42, 99};
static const int32_t S1[] = {1, 7};
static const int32_t S2[] = {3};
static const int32_t *SEQS[] = {S0, S1, S2};
static const int SEQ_N[] = {5, 2, 1};
static const int SEQ_NP[] = {2, 2, 0};

static buf ref_file(void) {
    buf b = {0};
    b_header(&b, 1, 0, 100, 3);
    for (int s = 0; s < 3; s++) b_seq(&b, (uint32_t)SEQ_N[s], (uint32_t)SEQ_NP[s], (const uint32_t *)SEQS[s]);
    b_trailer(&b);
    return b;
}

static void write_three(const char *path) {
    ds_data_writer *w;
    assert_int_equal(ds_data_writer_open(path, 100, 0, &w), DS_OK);
    for (int s = 0; s < 3; s++) assert_int_equal(ds_data_writer_add(w, SEQS[s], SEQ_N[s], SEQ_NP[s]), DS_OK);
    assert_int_equal(ds_data_writer_count(w), 3);
    assert_int_equal(ds_data_writer_commit(w), DS_OK);
}

static void check_seq(const ds_data *d, size_t i, const int32_t *want, int n, int np) {
    const int32_t *t;
    int gn, gnp;
    assert_int_equal(ds_data_get(d, i, &t, &gn, &gnp), DS_OK);
    assert_int_equal(gn, n);
    assert_int_equal(gnp, np);
    assert_memory_equal(t, want, sizeof(int32_t) * (size_t)n);
}

// Opening `path` fails with `code` and a message naming the file and containing `want`.
static void expect_open_error(const char *path, ds_status code, const char *want) {
    ds_data *d = NULL;
    ds_status st = ds_data_open(path, &d);
    if (st == DS_OK) fail_msg("%s opened although it should fail (%s)", path, want);
    assert_null(d);
    if (code != DS_OK) assert_int_equal(st, code);
    const char *msg = ds_last_error();
    if (!strstr(msg, path)) fail_msg("message does not name the file: %s", msg);
    if (want && !strstr(msg, want)) fail_msg("message lacks '%s': %s", want, msg);
    if (strchr(msg, '\n')) fail_msg("message is more than one line: %s", msg);
}

// ---------------------------------------------------------------------------------------------
// Tests

static void test_fnv_vectors(void **state) {
    (void)state;
    assert_true(ds_fnv1a64(DS_FNV1A64_INIT, "", 0) == 0xcbf29ce484222325ull);
    assert_true(ds_fnv1a64(DS_FNV1A64_INIT, "a", 1) == 0xaf63dc4c8601ec8cull);
    assert_true(ds_fnv1a64(DS_FNV1A64_INIT, "foobar", 6) == 0x85944171f73967e8ull);
    // Incremental = one shot.
    assert_true(ds_fnv1a64(ds_fnv1a64(DS_FNV1A64_INIT, "foo", 3), "bar", 3) == 0x85944171f73967e8ull);
}

static void test_round_trip_and_layout(void **state) {
    (void)state;
    char path[600];
    tmp_path(path, sizeof path, "rt");
    write_three(path);
    assert_int_equal(count_tmp_files(), 0);
    // Byte for byte the documented layout.
    size_t n;
    uint8_t *got = read_all(path, &n);
    buf want = ref_file();
    assert_int_equal(n, want.n);
    assert_memory_equal(got, want.p, n);
    free(got);
    free(want.p);
    ds_data *d;
    assert_int_equal(ds_data_open(path, &d), DS_OK);
    assert_int_equal(ds_data_count(d), 3);
    assert_int_equal(ds_data_vocab(d), 100);
    assert_int_equal(ds_data_total_tokens(d), 8);
    for (int s = 0; s < 3; s++) check_seq(d, (size_t)s, SEQS[s], SEQ_N[s], SEQ_NP[s]);
    const int32_t *t;
    int a, b;
    assert_int_equal(ds_data_get(d, 3, &t, &a, &b), DS_ERR_INVALID);
    ds_data_close(d);
    // An empty file (no sequences) is valid too.
    tmp_path(path, sizeof path, "empty");
    ds_data_writer *w;
    assert_int_equal(ds_data_writer_open(path, 7, 0, &w), DS_OK);
    assert_int_equal(ds_data_writer_commit(w), DS_OK);
    assert_int_equal(ds_data_open(path, &d), DS_OK);
    assert_int_equal(ds_data_count(d), 0);
    ds_data_close(d);
}

static void test_append_and_replace(void **state) {
    (void)state;
    char path[600];
    tmp_path(path, sizeof path, "app");
    write_three(path);
    ds_data_writer *w;
    const int32_t more[] = {4, 4, 4};
    assert_int_equal(ds_data_writer_open(path, 100, 1, &w), DS_OK);
    assert_int_equal(ds_data_writer_count(w), 3);
    assert_int_equal(ds_data_writer_add(w, more, 3, 1), DS_OK);
    assert_int_equal(ds_data_writer_add(w, S0, 5, 5), DS_OK);
    assert_int_equal(ds_data_writer_commit(w), DS_OK);
    ds_data *d;
    assert_int_equal(ds_data_open(path, &d), DS_OK);
    assert_int_equal(ds_data_count(d), 5);
    for (int s = 0; s < 3; s++) check_seq(d, (size_t)s, SEQS[s], SEQ_N[s], SEQ_NP[s]);
    check_seq(d, 3, more, 3, 1);
    check_seq(d, 4, S0, 5, 5);
    ds_data_close(d);

    // Another vocabulary: refused, the file untouched.
    size_t n0, n1;
    uint8_t *before = read_all(path, &n0);
    assert_int_equal(ds_data_writer_open(path, 101, 1, &w), DS_ERR_MISMATCH);
    assert_non_null(strstr(ds_last_error(), path));
    uint8_t *after = read_all(path, &n1);
    assert_int_equal(n0, n1);
    assert_memory_equal(before, after, n0);
    free(after);
    // Aborting an append leaves the file as it was, and no temporary file.
    assert_int_equal(ds_data_writer_open(path, 100, 1, &w), DS_OK);
    assert_int_equal(ds_data_writer_add(w, more, 3, 0), DS_OK);
    ds_data_writer_abort(w);
    after = read_all(path, &n1);
    assert_int_equal(n0, n1);
    assert_memory_equal(before, after, n0);
    free(after);
    free(before);
    assert_int_equal(count_tmp_files(), 0);

    // Appending to a corrupt file is refused (and names it).
    char bad[600];
    tmp_path(bad, sizeof bad, "badapp");
    write_bytes(bad, "DSPKDATA", 8);
    assert_int_equal(ds_data_writer_open(bad, 100, 1, &w), DS_ERR_FORMAT);
    assert_non_null(strstr(ds_last_error(), "cannot append"));
    assert_non_null(strstr(ds_last_error(), bad));

    // Append to a missing file starts it.
    tmp_path(path, sizeof path, "appnew");
    assert_int_equal(ds_data_writer_open(path, 100, 1, &w), DS_OK);
    assert_int_equal(ds_data_writer_count(w), 0);
    assert_int_equal(ds_data_writer_add(w, more, 3, 1), DS_OK);
    assert_int_equal(ds_data_writer_commit(w), DS_OK);
    assert_int_equal(ds_data_open(path, &d), DS_OK);
    assert_int_equal(ds_data_count(d), 1);
    ds_data_close(d);
    // Without append, the file is replaced.
    assert_int_equal(ds_data_writer_open(path, 100, 0, &w), DS_OK);
    assert_int_equal(ds_data_writer_add(w, S2, 1, 1), DS_OK);
    assert_int_equal(ds_data_writer_add(w, S1, 2, 0), DS_OK);
    assert_int_equal(ds_data_writer_commit(w), DS_OK);
    assert_int_equal(ds_data_open(path, &d), DS_OK);
    assert_int_equal(ds_data_count(d), 2);
    check_seq(d, 0, S2, 1, 1);
    check_seq(d, 1, S1, 2, 0);
    ds_data_close(d);
    assert_int_equal(count_tmp_files(), 0);
}

static void test_writer_rejects_bad_sequences(void **state) {
    (void)state;
    char path[600];
    tmp_path(path, sizeof path, "wbad");
    ds_data_writer *w;
    assert_int_equal(ds_data_writer_open(path, 0, 0, &w), DS_ERR_INVALID);
    assert_int_equal(ds_data_writer_open(path, 1ull << 32, 0, &w), DS_ERR_INVALID);
    assert_int_equal(ds_data_writer_open(path, 10, 0, &w), DS_OK);
    const int32_t ok[] = {0, 9}, big[] = {1, 10}, neg[] = {-1, 2};
    assert_int_equal(ds_data_writer_add(w, big, 2, 1), DS_ERR_INVALID);
    assert_non_null(strstr(ds_last_error(), "outside the vocabulary"));
    assert_int_equal(ds_data_writer_add(w, neg, 2, 1), DS_ERR_INVALID);
    assert_int_equal(ds_data_writer_add(w, ok, 2, 3), DS_ERR_INVALID);
    assert_int_equal(ds_data_writer_add(w, ok, 2, -1), DS_ERR_INVALID);
    assert_int_equal(ds_data_writer_add(w, ok, 0, 0), DS_ERR_INVALID);
    assert_int_equal(ds_data_writer_add(w, ok, 2, 2), DS_OK); // rejected ones were not written
    assert_int_equal(ds_data_writer_commit(w), DS_OK);
    ds_data *d;
    assert_int_equal(ds_data_open(path, &d), DS_OK);
    assert_int_equal(ds_data_count(d), 1);
    check_seq(d, 0, ok, 2, 2);
    ds_data_close(d);
}

static void test_missing_directory(void **state) {
    (void)state;
    char path[600];
    snprintf(path, sizeof path, "%s/no-such-dir/x.dat", g_tmp_base);
    ds_data_writer *w = NULL;
    assert_int_not_equal(ds_data_writer_open(path, 100, 0, &w), DS_OK);
    assert_null(w);
    assert_non_null(strstr(ds_last_error(), "no-such-dir"));
    assert_int_not_equal(ds_data_writer_open(path, 100, 1, &w), DS_OK);
    struct stat sb;
    char dir[600];
    snprintf(dir, sizeof dir, "%s/no-such-dir", g_tmp_base);
    assert_int_not_equal(stat(dir, &sb), 0);
    assert_int_equal(count_tmp_files(), 0);
    expect_open_error(path, DS_ERR_IO, "cannot open");
}

static void test_every_truncation(void **state) {
    (void)state;
    buf b = ref_file();
    char path[600];
    tmp_path(path, sizeof path, "trunc");
    for (size_t len = 0; len < b.n; len++) {
        write_bytes(path, b.p, len);
        expect_open_error(path, DS_ERR_FORMAT, len >= 8 ? "truncated" : NULL);
    }
    // The whole file, and the whole file plus a byte.
    write_bytes(path, b.p, b.n);
    ds_data *d;
    assert_int_equal(ds_data_open(path, &d), DS_OK);
    ds_data_close(d);
    b_bytes(&b, "x", 1);
    write_bytes(path, b.p, b.n);
    expect_open_error(path, DS_ERR_FORMAT, NULL);
    free(b.p);
}

static void test_every_flipped_byte(void **state) {
    (void)state;
    buf b = ref_file();
    char path[600];
    tmp_path(path, sizeof path, "flip");
    const uint8_t masks[] = {0x01, 0x80, 0xff};
    for (size_t i = 0; i < b.n; i++)
        for (int m = 0; m < 3; m++) {
            b.p[i] ^= masks[m];
            write_bytes(path, b.p, b.n);
            // Ids, n_prompt and the trailer are covered by the checksum alone.
            const int in_ids = i >= 32 && i < b.n - 8 && !((i >= 32 && i < 36) || (i >= 60 && i < 64) || (i >= 76 && i < 80));
            expect_open_error(path, DS_OK, in_ids || i >= b.n - 8 ? "checksum" : NULL);
            b.p[i] ^= masks[m];
        }
    free(b.p);
}

// A file with a correct checksum but bad contents.
static void write_raw(const char *path, buf *b) {
    b_trailer(b);
    write_bytes(path, b->p, b->n);
    free(b->p);
    memset(b, 0, sizeof *b);
}

static void test_bad_contents(void **state) {
    (void)state;
    char path[600];
    buf b = {0};
    const uint32_t ids[] = {1, 2, 100};
    // An id equal to the vocabulary size.
    tmp_path(path, sizeof path, "ids");
    b_header(&b, 1, 0, 100, 1);
    b_seq(&b, 3, 1, ids);
    write_raw(path, &b);
    expect_open_error(path, DS_ERR_FORMAT, "outside the vocabulary");
    // ... fine with a larger vocabulary.
    b_header(&b, 1, 0, 101, 1);
    b_seq(&b, 3, 1, ids);
    write_raw(path, &b);
    ds_data *d;
    assert_int_equal(ds_data_open(path, &d), DS_OK);
    ds_data_close(d);
    // n_prompt > n_tokens.
    tmp_path(path, sizeof path, "np");
    b_header(&b, 1, 0, 101, 1);
    b_seq(&b, 3, 4, ids);
    write_raw(path, &b);
    expect_open_error(path, DS_ERR_FORMAT, "n_prompt 4 > n_tokens 3");
    // An empty sequence.
    tmp_path(path, sizeof path, "zero");
    b_header(&b, 1, 0, 101, 2);
    b_seq(&b, 3, 1, ids);
    b_seq(&b, 0, 0, ids);
    write_raw(path, &b);
    expect_open_error(path, DS_ERR_FORMAT, "empty");
    // Version, flags, vocabulary, magic.
    tmp_path(path, sizeof path, "ver");
    b_header(&b, 2, 0, 101, 0);
    write_raw(path, &b);
    expect_open_error(path, DS_ERR_UNSUPPORTED, "version 2");
    b_header(&b, 1, 4, 101, 0);
    write_raw(path, &b);
    expect_open_error(path, DS_ERR_UNSUPPORTED, "flags");
    b_header(&b, 1, 0, 0, 0);
    write_raw(path, &b);
    expect_open_error(path, DS_ERR_FORMAT, "vocabulary size 0");
    b_header(&b, 1, 0, 1ull << 40, 0);
    write_raw(path, &b);
    expect_open_error(path, DS_ERR_FORMAT, "vocabulary size");
    b_bytes(&b, "DSPKDATX", 8);
    for (int i = 0; i < 6; i++) b_u32(&b, 1);
    write_raw(path, &b);
    expect_open_error(path, DS_ERR_FORMAT, "bad magic");
    // Absurd counts: sequences, tokens per sequence.
    tmp_path(path, sizeof path, "absurd");
    const uint64_t counts[] = {1ull << 63, UINT64_MAX, 1ull << 32, 3};
    for (int c = 0; c < 4; c++) {
        b_header(&b, 1, 0, 101, counts[c]);
        b_seq(&b, 3, 1, ids);
        write_raw(path, &b);
        expect_open_error(path, DS_ERR_FORMAT, c < 3 ? "cannot fit" : "truncated");
    }
    const uint32_t huge[] = {0xffffffffu, 0x80000000u, 0x40000000u, 4};
    for (int c = 0; c < 4; c++) {
        b_header(&b, 1, 0, 101, 1);
        b_u32(&b, huge[c]);
        b_u32(&b, 0);
        for (int i = 0; i < 3; i++) b_u32(&b, ids[i]);
        write_raw(path, &b);
        expect_open_error(path, DS_ERR_FORMAT, "truncated");
    }
    // Fewer sequences than the records: trailing bytes.
    b_header(&b, 1, 0, 101, 0);
    b_seq(&b, 3, 1, ids);
    write_raw(path, &b);
    expect_open_error(path, DS_ERR_FORMAT, "unexpected bytes");
    // Not a regular file / missing.
    expect_open_error(g_tmp_base, DS_ERR_IO, NULL);
    tmp_path(path, sizeof path, "missing");
    expect_open_error(path, DS_ERR_IO, "cannot open");
}

static void test_holdout(void **state) {
    (void)state;
    int n_hold = 0, same = 1, differs = 0;
    for (uint64_t i = 0; i < 20000; i++) {
        const int h = ds_data_is_holdout(i, 7, 0.25);
        n_hold += h;
        same &= h == ds_data_is_holdout(i, 7, 0.25);
        differs += h != ds_data_is_holdout(i, 8, 0.25);
        assert_false(ds_data_is_holdout(i, 7, 0));
        assert_true(ds_data_is_holdout(i, 7, 1));
        // Monotone in the fraction: held out at 0.25 implies held out at 0.5.
        if (h) assert_true(ds_data_is_holdout(i, 7, 0.5));
    }
    assert_true(same);
    assert_true(n_hold > 4700 && n_hold < 5300); // 5000 ± 5 sigma
    assert_true(differs > 5000);                 // another seed, another split

    // Writer-side routing: every sequence lands in exactly one file, in order.
    char main_p[600], hold_p[600];
    tmp_path(main_p, sizeof main_p, "main");
    tmp_path(hold_p, sizeof hold_p, "hold");
    ds_data_writer *wm, *wh;
    assert_int_equal(ds_data_writer_open(main_p, 1000, 0, &wm), DS_OK);
    assert_int_equal(ds_data_writer_open(hold_p, 1000, 0, &wh), DS_OK);
    int want_hold = 0;
    for (int i = 0; i < 200; i++) {
        const int32_t t[2] = {1, i};
        const int h = ds_data_is_holdout((uint64_t)i, 3, 0.1);
        want_hold += h;
        assert_int_equal(ds_data_writer_add(h ? wh : wm, t, 2, 1), DS_OK);
    }
    assert_int_equal(ds_data_writer_commit(wh), DS_OK);
    assert_int_equal(ds_data_writer_commit(wm), DS_OK);
    assert_true(want_hold > 5 && want_hold < 40);
    ds_data *dm, *dh;
    assert_int_equal(ds_data_open(main_p, &dm), DS_OK);
    assert_int_equal(ds_data_open(hold_p, &dh), DS_OK);
    assert_int_equal(ds_data_count(dh), want_hold);
    assert_int_equal(ds_data_count(dm) + ds_data_count(dh), 200);
    size_t im = 0, ih = 0;
    for (int i = 0; i < 200; i++) {
        const int h = ds_data_is_holdout((uint64_t)i, 3, 0.1);
        const int32_t t[2] = {1, i};
        check_seq(h ? dh : dm, h ? ih++ : im++, t, 2, 1);
    }
    ds_data_close(dm);
    ds_data_close(dh);
}

// ---------------------------------------------------------------------------------------------
// Prompt files

static void prompts_from(const char *text, size_t n, char *path, size_t cap) {
    tmp_path(path, cap, "prompts");
    write_bytes(path, text, n);
}

static void expect_prompts_error(const char *text, const char *want) {
    char path[600], loc[700];
    prompts_from(text, strlen(text), path, sizeof path);
    ds_prompt_set *p = NULL;
    assert_int_equal(ds_prompts_load(path, &p), DS_ERR_FORMAT);
    assert_null(p);
    snprintf(loc, sizeof loc, "%s%s", path, want);
    if (!strstr(ds_last_error(), loc)) fail_msg("expected '%s' in: %s", loc, ds_last_error());
    assert_null(strchr(ds_last_error(), '\n'));
}

static void test_prompt_files(void **state) {
    (void)state;
    const char text[] = "Once upon a time\n"
                        "{\"prompt\": \"The cat \\u00e9\", \"id\": 3}\r\n"
                        "\n"
                        "   \t\n"
                        "  {\"prompt\": \"\"}  \n"
                        "plain with {braces} and \"quotes\"\n"
                        "caf\xc3\xa9 no newline at end";
    char path[600];
    prompts_from(text, sizeof text - 1, path, sizeof path);
    ds_prompt_set *p;
    assert_int_equal(ds_prompts_load(path, &p), DS_OK);
    assert_int_equal(p->n, 5);
    assert_string_equal(p->text[0], "Once upon a time");
    assert_string_equal(p->text[1], "The cat \xc3\xa9");
    assert_string_equal(p->text[2], "");
    assert_string_equal(p->text[3], "plain with {braces} and \"quotes\"");
    assert_string_equal(p->text[4], "caf\xc3\xa9 no newline at end");
    const int lines[] = {1, 2, 5, 6, 7};
    for (int i = 0; i < 5; i++) assert_int_equal(p->line[i], lines[i]);
    ds_prompts_free(p);

    expect_prompts_error("ok\nfine\n{\"prompt\": \"x\"\n", ":3: ");
    expect_prompts_error("{\"text\": \"x\"}\n", ":1: ");
    expect_prompts_error("ok\n{\"prompt\": 5}\n", ":2: ");
    expect_prompts_error("{\"prompt\": \"x\"} trailing\n", ":1: ");
    expect_prompts_error("[1, 2]\n{[\n", ":2: ");
    expect_prompts_error("ok\nbad \xff byte\n", ":2: invalid UTF-8");
    expect_prompts_error("{\"prompt\": \"\\ud800\"}\n", ":1: ");
    expect_prompts_error("\n\n  \n", ": no prompts");
    expect_prompts_error("", ": no prompts");
    prompts_from("a\0b\n", 4, path, sizeof path);
    assert_int_equal(ds_prompts_load(path, &p), DS_ERR_FORMAT);
    assert_non_null(strstr(ds_last_error(), ":1: contains a NUL"));
    tmp_path(path, sizeof path, "nope");
    assert_int_equal(ds_prompts_load(path, &p), DS_ERR_IO);
    assert_non_null(strstr(ds_last_error(), path));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fnv_vectors),
        cmocka_unit_test(test_round_trip_and_layout),
        cmocka_unit_test(test_append_and_replace),
        cmocka_unit_test(test_writer_rejects_bad_sequences),
        cmocka_unit_test(test_missing_directory),
        cmocka_unit_test(test_every_truncation),
        cmocka_unit_test(test_every_flipped_byte),
        cmocka_unit_test(test_bad_contents),
        cmocka_unit_test(test_holdout),
        cmocka_unit_test(test_prompt_files),
    };
    return cmocka_run_group_tests(tests, setup_all, teardown_all);
}
