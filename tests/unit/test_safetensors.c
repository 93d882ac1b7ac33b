// Safetensors reader/writer: round trips (single file, sharded directory) and hostile files that
// must fail with a telling message (and never crash under ASan).
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io/safetensors.h"

// ---------------------------------------------------------------------------------------------
// Temporary files

static char g_base[512]; // this run's private folder under $DSPARK_TMP (or /tmp)
static int g_counter;

static int setup_all(void **state) {
    const char *tmp = getenv("DSPARK_TMP");
    if (!tmp || !tmp[0]) tmp = "/tmp";
    snprintf(g_base, sizeof g_base, "%s/test_safetensors.%ld", tmp, (long)getpid());
    return mkdir(g_base, 0777) == 0 ? 0 : -1;
}

// Remove a file or a directory tree (our own temporary folder only).
static void remove_tree(const char *path) {
    struct stat sb;
    if (lstat(path, &sb) != 0) return;
    if (S_ISDIR(sb.st_mode)) {
        DIR *d = opendir(path);
        struct dirent *de;
        while (d && (de = readdir(d))) {
            if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0) continue;
            char sub[1024];
            snprintf(sub, sizeof sub, "%s/%s", path, de->d_name);
            remove_tree(sub);
        }
        if (d) closedir(d);
        rmdir(path);
    } else {
        unlink(path);
    }
}

static int teardown_all(void **state) {
    remove_tree(g_base);
    return 0;
}

// A fresh unique path inside the run folder.
static void tmp_path(char *out, size_t cap, const char *what) {
    snprintf(out, cap, "%s/%s.%d", g_base, what, g_counter++);
}

static void write_bytes(const char *path, const void *p, size_t n) {
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    if (n) assert_int_equal(fwrite(p, 1, n, f), n);
    assert_int_equal(fclose(f), 0);
}

// A safetensors file with header `json` (length header_len, or strlen(json) when ~0) followed by
// `data_len` bytes of data.
static void write_st_len(const char *path, uint64_t header_len, const char *json, size_t data_len) {
    size_t jn = strlen(json);
    size_t total = 8 + jn + data_len;
    uint8_t *buf = calloc(1, total);
    assert_non_null(buf);
    for (int i = 0; i < 8; i++) buf[i] = (uint8_t)(header_len >> (8 * i));
    memcpy(buf + 8, json, jn);
    for (size_t i = 0; i < data_len; i++) buf[8 + jn + i] = (uint8_t)i;
    write_bytes(path, buf, total);
    free(buf);
}

static void write_st(const char *path, const char *json, size_t data_len) {
    write_st_len(path, strlen(json), json, data_len);
}

static int exists(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0;
}

// Opening `path` must fail with `code` and a message containing `word`.
static void expect_fail(const char *path, ds_status code, const char *word) {
    ds_safetensors *st = (ds_safetensors *)0x1;
    ds_clear_error();
    ds_status s = ds_st_open(path, &st);
    if (s != code || !strstr(ds_last_error(), word))
        fail_msg("open %s: got %s, \"%s\"; want %s with \"%s\"", path, ds_status_name(s), ds_last_error(),
                 ds_status_name(code), word);
    assert_null(st);
    assert_null(strchr(ds_last_error(), '\n')); // one line
}

// A hostile single file with header `json` and `data_len` data bytes.
static void expect_json_fails(const char *json, size_t data_len, ds_status code, const char *word) {
    char path[600];
    tmp_path(path, sizeof path, "hostile.safetensors");
    write_st(path, json, data_len);
    expect_fail(path, code, word);
}

// ---------------------------------------------------------------------------------------------
// Round trips

static void check_tensor(const ds_safetensors *st, const char *name, ds_dtype dt, int n_dims, const int64_t *shape,
                         const void *data, size_t nbytes) {
    const ds_st_tensor *t = ds_st_find(st, name);
    if (!t) fail_msg("tensor %s not found", name);
    assert_string_equal(t->name, name);
    assert_int_equal(t->dtype, dt);
    assert_int_equal(t->n_dims, n_dims);
    for (int i = 0; i < n_dims; i++) assert_int_equal(t->shape[i], shape[i]);
    assert_int_equal(t->nbytes, nbytes);
    if (nbytes) assert_memory_equal(t->data, data, nbytes);
    // Written by us: every tensor is aligned to its element size.
    assert_int_equal((uintptr_t)t->data % ds_dtype_size(dt), 0);
}

static uint64_t file_header_len(const char *path) {
    uint8_t b[8];
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    assert_int_equal(fread(b, 1, 8, f), 8);
    fclose(f);
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--) n = n << 8 | b[i];
    return n;
}

static void test_dtype_size(void **state) {
    assert_int_equal(ds_dtype_size(DS_F32), 4);
    assert_int_equal(ds_dtype_size(DS_F16), 2);
    assert_int_equal(ds_dtype_size(DS_BF16), 2);
    assert_int_equal(ds_dtype_size(DS_U32), 4);
    assert_int_equal(ds_dtype_size(DS_I32), 4);
    assert_int_equal(ds_dtype_size(DS_Q8_0), 0);
}

static void test_roundtrip_file(void **state) {
    float f32[6] = {1, -2, 3.5f, 0, 1e-3f, 7};
    uint16_t f16[5] = {0x3c00, 0xbc00, 0x0000, 0x7bff, 0x0001}; // odd count: tests layout alignment
    uint16_t bf16[24];
    for (int i = 0; i < 24; i++) bf16[i] = (uint16_t)(0x3f80 + i);
    uint32_t u32[4] = {0, 1, 0xffffffffu, 123456789};
    int32_t i32 = -42;
    int64_t s_f32[2] = {2, 3}, s_f16[1] = {5}, s_bf16[3] = {2, 3, 4}, s_u32[2] = {4, 1}, s_empty[2] = {0, 4};

    ds_st_writer *w = ds_st_writer_new();
    assert_non_null(w);
    assert_int_equal(ds_st_writer_add(w, "b.f16", DS_F16, 1, s_f16, f16), DS_OK);
    assert_int_equal(ds_st_writer_add(w, "a.f32", DS_F32, 2, s_f32, f32), DS_OK);
    assert_int_equal(ds_st_writer_add(w, "c.bf16 \"quoted\"\\", DS_BF16, 3, s_bf16, bf16), DS_OK);
    assert_int_equal(ds_st_writer_add(w, "d.u32", DS_U32, 2, s_u32, u32), DS_OK);
    assert_int_equal(ds_st_writer_add(w, "e.scalar", DS_I32, 0, NULL, &i32), DS_OK);
    assert_int_equal(ds_st_writer_add(w, "f.empty", DS_F32, 2, s_empty, NULL), DS_OK);
    assert_int_equal(ds_st_writer_set_metadata(w, "format", "pt"), DS_OK);
    assert_int_equal(ds_st_writer_set_metadata(w, "note", "first"), DS_OK);
    assert_int_equal(ds_st_writer_set_metadata(w, "note", "line\nbreak \"q\" ü"), DS_OK); // replaces
    char path[600];
    tmp_path(path, sizeof path, "rt.safetensors");
    assert_int_equal(ds_st_writer_write_file(w, path), DS_OK);
    ds_st_writer_free(w);
    assert_int_equal((8 + file_header_len(path)) % 64, 0); // data starts on a 64-byte line

    ds_safetensors *st = NULL;
    if (ds_st_open(path, &st) != DS_OK) fail_msg("%s", ds_last_error());
    assert_int_equal(ds_st_count(st), 6);
    for (int i = 1; i < ds_st_count(st); i++) // held sorted by name
        assert_true(strcmp(ds_st_at(st, i - 1)->name, ds_st_at(st, i)->name) < 0);
    assert_null(ds_st_at(st, 6));
    assert_null(ds_st_at(st, -1));
    check_tensor(st, "a.f32", DS_F32, 2, s_f32, f32, sizeof f32);
    check_tensor(st, "b.f16", DS_F16, 1, s_f16, f16, sizeof f16);
    check_tensor(st, "c.bf16 \"quoted\"\\", DS_BF16, 3, s_bf16, bf16, sizeof bf16);
    check_tensor(st, "d.u32", DS_U32, 2, s_u32, u32, sizeof u32);
    check_tensor(st, "e.scalar", DS_I32, 0, NULL, &i32, 4);
    check_tensor(st, "f.empty", DS_F32, 2, s_empty, NULL, 0);
    assert_null(ds_st_find(st, "missing"));
    assert_string_equal(ds_st_metadata(st, "format"), "pt");
    assert_string_equal(ds_st_metadata(st, "note"), "line\nbreak \"q\" ü");
    assert_null(ds_st_metadata(st, "absent"));
    assert_int_equal(ds_st_metadata_count(st), 2);
    const char *v = NULL;
    assert_string_equal(ds_st_metadata_at(st, 0, &v), "format");
    assert_string_equal(v, "pt");
    ds_st_close(st);
    unlink(path);
}

// A header written by another tool: unpadded, extra whitespace, no metadata, a scalar.
static void test_foreign_header(void **state) {
    char path[600];
    tmp_path(path, sizeof path, "foreign.safetensors");
    write_st(path, " {\"x\" : {\"shape\": [], \"data_offsets\": [4, 8], \"dtype\": \"F32\"},\n"
                   " \"y\": {\"dtype\": \"U32\", \"shape\": [1], \"data_offsets\": [0, 4]}}\n  ", 8);
    ds_safetensors *st = NULL;
    if (ds_st_open(path, &st) != DS_OK) fail_msg("%s", ds_last_error());
    assert_int_equal(ds_st_count(st), 2);
    const ds_st_tensor *x = ds_st_find(st, "x");
    assert_non_null(x);
    assert_int_equal(x->n_dims, 0);
    assert_int_equal(x->nbytes, 4);
    assert_int_equal(((const uint8_t *)x->data)[0], 4); // data bytes are 0, 1, 2, ...
    assert_int_equal(ds_st_metadata_count(st), 0);
    ds_st_close(st);
}

// No tensors at all (metadata only, then nothing): valid both ways.
static void test_roundtrip_empty(void **state) {
    ds_st_writer *w = ds_st_writer_new();
    assert_non_null(w);
    char path[600];
    tmp_path(path, sizeof path, "empty_rt.safetensors");
    for (int pass = 0; pass < 2; pass++) {
        if (pass) assert_int_equal(ds_st_writer_set_metadata(w, "k", "v"), DS_OK);
        assert_int_equal(ds_st_writer_write_file(w, path), DS_OK);
        ds_safetensors *st = NULL;
        if (ds_st_open(path, &st) != DS_OK) fail_msg("%s", ds_last_error());
        assert_int_equal(ds_st_count(st), 0);
        assert_null(ds_st_find(st, "x"));
        assert_null(ds_st_at(st, 0));
        assert_int_equal(ds_st_metadata_count(st), pass);
        if (pass) assert_string_equal(ds_st_metadata(st, "k"), "v");
        ds_st_close(st);
    }
    ds_st_writer_free(w);
    unlink(path);
}

#define N_SHARD_TENSORS 7

static void test_roundtrip_sharded(void **state) {
    // 7 tensors of 64 bytes, shards of at most 192 bytes -> 3 shards (3 + 3 + 1).
    float data[N_SHARD_TENSORS][16];
    char names[N_SHARD_TENSORS][32];
    int64_t shape[2] = {4, 4};
    ds_st_writer *w = ds_st_writer_new();
    assert_non_null(w);
    for (int t = 0; t < N_SHARD_TENSORS; t++) {
        for (int i = 0; i < 16; i++) data[t][i] = (float)(t * 100 + i);
        snprintf(names[t], sizeof names[t], "model.layers.%d.weight", N_SHARD_TENSORS - 1 - t);
        assert_int_equal(ds_st_writer_add(w, names[t], DS_F32, 2, shape, data[t]), DS_OK);
    }
    assert_int_equal(ds_st_writer_set_metadata(w, "format", "pt"), DS_OK);
    char dir[600], p[700];
    tmp_path(dir, sizeof dir, "sharded");
    // A stale single file must not shadow the new shards.
    assert_int_equal(mkdir(dir, 0777), 0);
    snprintf(p, sizeof p, "%s/model.safetensors", dir);
    write_bytes(p, "stale", 5);
    if (ds_st_writer_write_dir(w, dir, 192) != DS_OK) fail_msg("%s", ds_last_error());
    assert_false(exists(p));
    for (int k = 1; k <= 3; k++) {
        snprintf(p, sizeof p, "%s/model-%05d-of-00003.safetensors", dir, k);
        assert_true(exists(p));
    }
    snprintf(p, sizeof p, "%s/model-00004-of-00004.safetensors", dir);
    assert_false(exists(p));
    snprintf(p, sizeof p, "%s/model.safetensors.index.json", dir);
    assert_true(exists(p));

    // Reopen the directory, and the index directly.
    for (int pass = 0; pass < 2; pass++) {
        ds_safetensors *st = NULL;
        if (ds_st_open(pass ? p : dir, &st) != DS_OK) fail_msg("%s", ds_last_error());
        assert_int_equal(ds_st_count(st), N_SHARD_TENSORS);
        for (int t = 0; t < N_SHARD_TENSORS; t++) check_tensor(st, names[t], DS_F32, 2, shape, data[t], 64);
        assert_string_equal(ds_st_metadata(st, "total_size"), "448");
        assert_string_equal(ds_st_metadata(st, "format"), "pt");
        ds_st_close(st);
    }

    // Rewriting with no limit gives model.safetensors alone and removes the index.
    assert_int_equal(ds_st_writer_write_dir(w, dir, 0), DS_OK);
    assert_false(exists(p));
    ds_safetensors *st = NULL;
    if (ds_st_open(dir, &st) != DS_OK) fail_msg("%s", ds_last_error());
    assert_int_equal(ds_st_count(st), N_SHARD_TENSORS);
    assert_null(ds_st_metadata(st, "total_size"));
    ds_st_close(st);
    ds_st_writer_free(w);
    remove_tree(dir);
}

// --- Streamed tensors (ds_st_writer_add_stream + ds_st_writer_stream_dir)

static char *slurp(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)len + 1);
    *n = fread(b, 1, (size_t)len, f);
    fclose(f);
    return b;
}

// Every file of a's directory listing exists in b with the same bytes, and b has no others.
static void assert_same_dir(const char *a, const char *b) {
    int na = 0, nb = 0;
    DIR *d = opendir(a);
    struct dirent *e;
    assert_non_null(d);
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        char pa[900], pb[900];
        snprintf(pa, sizeof pa, "%s/%s", a, e->d_name);
        snprintf(pb, sizeof pb, "%s/%s", b, e->d_name);
        size_t la = 0, lb = 0;
        char *x = slurp(pa, &la), *y = slurp(pb, &lb);
        if (!y) fail_msg("%s: missing", pb);
        if (la != lb || memcmp(x, y, la)) fail_msg("%s differs from %s", pb, pa);
        free(x), free(y);
        na++;
    }
    closedir(d);
    d = opendir(b);
    while ((e = readdir(d))) nb += e->d_name[0] != '.';
    closedir(d);
    assert_int_equal(na, nb);
}

#define N_STREAM 6
typedef struct {
    const void *data[N_STREAM];
    size_t bytes[N_STREAM];
    int id[N_STREAM], streamed[N_STREAM];
    int short_by; // leave the last streamed tensor this many bytes short
    int extra;    // put one byte too many into the first streamed tensor
} stream_src;

// Streamed tensors supplied last first, in pieces of 7 bytes, interleaved two at a time.
static ds_status fill_pieces(void *ctx, ds_st_sink *sink) {
    stream_src *c = ctx;
    size_t at[N_STREAM] = {0};
    int left = 1;
    while (left) {
        left = 0;
        for (int t = N_STREAM - 1; t >= 0; t--) {
            if (!c->streamed[t]) continue;
            size_t want = c->bytes[t] - (t == 0 ? (size_t)c->short_by : 0);
            if (at[t] >= want) continue;
            size_t k = want - at[t] < 7 ? want - at[t] : 7;
            ds_status s = ds_st_sink_put(sink, c->id[t], (const char *)c->data[t] + at[t], k);
            if (s) return s;
            at[t] += k;
            left = 1;
        }
    }
    for (int t = 0; t < N_STREAM && c->extra; t++)
        if (c->streamed[t]) return ds_st_sink_put(sink, c->id[t], c->data[t], 1);
    return DS_OK;
}

static void test_stream_dir(void **state) {
    // Mixed element sizes (the layout puts 4-byte tensors first), a scalar and an empty tensor.
    static float a[12], d[5];
    static uint16_t b[9], c[6];
    static uint32_t u[8];
    float z[1] = {0};
    for (int i = 0; i < 12; i++) a[i] = (float)i * 0.5f;
    for (int i = 0; i < 9; i++) b[i] = (uint16_t)(0x3f80 + i);
    for (int i = 0; i < 6; i++) c[i] = (uint16_t)(0x4000 + 3 * i);
    for (int i = 0; i < 8; i++) u[i] = 0x01020304u * (uint32_t)(i + 1);
    for (int i = 0; i < 5; i++) d[i] = -(float)i;
    const char *names[N_STREAM] = {"m.a.weight", "m.a.scales", "m.a.biases", "m.u", "m.d", "m.empty"};
    const ds_dtype dt[N_STREAM] = {DS_F32, DS_BF16, DS_BF16, DS_U32, DS_F32, DS_F32};
    const int64_t shapes[N_STREAM][2] = {{3, 4}, {9, 1}, {2, 3}, {2, 4}, {5, 1}, {0, 4}};
    const void *data[N_STREAM] = {a, b, c, u, d, z};
    const size_t bytes[N_STREAM] = {48, 18, 12, 32, 20, 0};
    for (int limit = 0; limit <= 64; limit += 64) { // one file; then shards of <= 64 bytes
        for (int mask = 1; mask < (1 << N_STREAM); mask += 21) { // which tensors are streamed
            ds_st_writer *w1 = ds_st_writer_new(), *w2 = ds_st_writer_new();
            stream_src src = {{0}};
            for (int t = 0; t < N_STREAM; t++) {
                assert_int_equal(ds_st_writer_add(w1, names[t], dt[t], 2, shapes[t], data[t]), DS_OK);
                src.data[t] = data[t];
                src.bytes[t] = bytes[t];
                src.streamed[t] = (mask >> t) & 1;
                if (src.streamed[t])
                    assert_int_equal(ds_st_writer_add_stream(w2, names[t], dt[t], 2, shapes[t], &src.id[t]), DS_OK);
                else
                    assert_int_equal(ds_st_writer_add(w2, names[t], dt[t], 2, shapes[t], data[t]), DS_OK);
            }
            assert_int_equal(ds_st_writer_set_metadata(w1, "format", "mlx"), DS_OK);
            assert_int_equal(ds_st_writer_set_metadata(w2, "format", "mlx"), DS_OK);
            char d1[600], d2[600];
            tmp_path(d1, sizeof d1, "plain");
            tmp_path(d2, sizeof d2, "streamed");
            if (ds_st_writer_write_dir(w1, d1, (size_t)limit) != DS_OK) fail_msg("%s", ds_last_error());
            if (ds_st_writer_stream_dir(w2, d2, (size_t)limit, fill_pieces, &src) != DS_OK)
                fail_msg("%s", ds_last_error());
            assert_same_dir(d1, d2); // the same files, byte for byte
            // A streamed writer is written only by stream_dir.
            if (mask & 1) {
                char d3[600];
                tmp_path(d3, sizeof d3, "refused");
                assert_int_equal(ds_st_writer_write_dir(w2, d3, 0), DS_ERR_INVALID);
                assert_non_null(strstr(ds_last_error(), "streamed"));
                assert_false(exists(d3));
                // A tensor left short, or given a byte too many: an error, and nothing is left.
                for (int k = 0; k < 2; k++) {
                    src.short_by = k ? 0 : 5;
                    src.extra = k;
                    tmp_path(d3, sizeof d3, "bad");
                    assert_int_equal(ds_st_writer_stream_dir(w2, d3, (size_t)limit, fill_pieces, &src), DS_ERR_INVALID);
                    assert_non_null(strstr(ds_last_error(), "m.a.weight"));
                    assert_false(exists(d3));
                }
            }
            ds_st_writer_free(w1);
            ds_st_writer_free(w2);
            remove_tree(d1);
            remove_tree(d2);
        }
    }
}

static void test_write_dir_fits_one_file(void **state) {
    float x[4] = {1, 2, 3, 4};
    int64_t shape[1] = {4};
    ds_st_writer *w = ds_st_writer_new();
    assert_int_equal(ds_st_writer_add(w, "x", DS_F32, 1, shape, x), DS_OK);
    char dir[600], p[700];
    tmp_path(dir, sizeof dir, "single"); // does not exist yet: created
    assert_int_equal(ds_st_writer_write_dir(w, dir, 1 << 20), DS_OK);
    snprintf(p, sizeof p, "%s/model.safetensors", dir);
    assert_true(exists(p));
    snprintf(p, sizeof p, "%s/model.safetensors.index.json", dir);
    assert_false(exists(p));
    ds_safetensors *st = NULL;
    assert_int_equal(ds_st_open(dir, &st), DS_OK);
    check_tensor(st, "x", DS_F32, 1, shape, x, sizeof x);
    ds_st_close(st);
    ds_st_writer_free(w);
    remove_tree(dir);
}

// ---------------------------------------------------------------------------------------------
// Writer argument checks

static void test_writer_rejects(void **state) {
    float x[4] = {0};
    int64_t ok[1] = {4}, neg[1] = {-1}, huge[3] = {1ll << 32, 1ll << 32, 16}, nine[9] = {1, 1, 1, 1, 1, 1, 1, 1, 1};
    ds_st_writer *w = ds_st_writer_new();
    assert_int_equal(ds_st_writer_add(w, "x", DS_F32, 1, ok, x), DS_OK);
    assert_int_equal(ds_st_writer_add(w, "x", DS_F32, 1, ok, x), DS_ERR_INVALID);
    assert_non_null(strstr(ds_last_error(), "duplicate"));
    assert_int_equal(ds_st_writer_add(w, "n", DS_F32, 1, neg, x), DS_ERR_INVALID);
    assert_int_equal(ds_st_writer_add(w, "h", DS_F32, 3, huge, x), DS_ERR_INVALID);
    assert_non_null(strstr(ds_last_error(), "overflow"));
    assert_int_equal(ds_st_writer_add(w, "d", DS_F32, 9, nine, x), DS_ERR_INVALID);
    assert_int_equal(ds_st_writer_add(w, "q", DS_Q8_0, 1, ok, x), DS_ERR_INVALID);
    assert_int_equal(ds_st_writer_add(w, "", DS_F32, 1, ok, x), DS_ERR_INVALID);
    assert_int_equal(ds_st_writer_add(w, "__metadata__", DS_F32, 1, ok, x), DS_ERR_INVALID);
    assert_int_equal(ds_st_writer_add(w, "nodata", DS_F32, 1, ok, NULL), DS_ERR_INVALID);
    // Many names: the duplicate check keeps working as the table grows.
    char name[32];
    for (int i = 0; i < 3000; i++) {
        snprintf(name, sizeof name, "t%d", i);
        assert_int_equal(ds_st_writer_add(w, name, DS_F32, 1, ok, x), DS_OK);
    }
    assert_int_equal(ds_st_writer_add(w, "t1234", DS_F32, 1, ok, x), DS_ERR_INVALID);
    ds_st_writer_free(w);
}

static void test_write_missing_dir(void **state) {
    float x[1] = {1};
    int64_t shape[1] = {1};
    ds_st_writer *w = ds_st_writer_new();
    assert_int_equal(ds_st_writer_add(w, "x", DS_F32, 1, shape, x), DS_OK);
    char missing[600], p[800];
    tmp_path(missing, sizeof missing, "nodir");
    snprintf(p, sizeof p, "%s/x.safetensors", missing);
    assert_int_equal(ds_st_writer_write_file(w, p), DS_ERR_IO);
    assert_non_null(strstr(ds_last_error(), missing));
    assert_false(exists(missing));
    snprintf(p, sizeof p, "%s/sub", missing);
    assert_int_equal(ds_st_writer_write_dir(w, p, 0), DS_ERR_IO);
    assert_int_equal(ds_st_writer_write_dir(w, p, 1), DS_ERR_IO);
    assert_false(exists(missing));
    // Nothing left in the run folder but earlier tests' files: no *.tmp.* debris.
    DIR *d = opendir(g_base);
    struct dirent *de;
    while ((de = readdir(d))) assert_null(strstr(de->d_name, ".tmp."));
    closedir(d);
    ds_st_writer_free(w);
}

// ---------------------------------------------------------------------------------------------
// Hostile single files

static void test_empty_file(void **state) {
    char path[600];
    tmp_path(path, sizeof path, "empty.safetensors");
    write_bytes(path, "", 0);
    expect_fail(path, DS_ERR_FORMAT, "too short");
}

static void test_four_byte_file(void **state) {
    char path[600];
    tmp_path(path, sizeof path, "four.safetensors");
    write_bytes(path, "\x10\0\0\0", 4);
    expect_fail(path, DS_ERR_FORMAT, "too short");
}

static void test_header_past_end(void **state) {
    char path[600];
    tmp_path(path, sizeof path, "past.safetensors");
    write_st_len(path, 100, "{}", 0);
    expect_fail(path, DS_ERR_FORMAT, "past the end");
}

static void test_header_2_63(void **state) {
    char path[600];
    tmp_path(path, sizeof path, "huge.safetensors");
    write_st_len(path, 1ull << 63, "{}", 0);
    expect_fail(path, DS_ERR_FORMAT, "header length 9223372036854775808");
}

static void test_header_too_large(void **state) {
    // Longer than 100 MB but within the file: rejected as absurd (sparse file, no real bytes).
    char path[600];
    tmp_path(path, sizeof path, "absurd.safetensors");
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    uint64_t n = DS_ST_MAX_HEADER + 1;
    uint8_t b[8];
    for (int i = 0; i < 8; i++) b[i] = (uint8_t)(n >> (8 * i));
    assert_int_equal(fwrite(b, 1, 8, f), 8);
    assert_int_equal(fclose(f), 0);
    assert_int_equal(truncate(path, (off_t)(8 + n)), 0);
    expect_fail(path, DS_ERR_FORMAT, "too large");
    unlink(path);
}

static void test_invalid_json(void **state) { expect_json_fails("{\"a\": {\"dtype\": ", 0, DS_ERR_FORMAT, "invalid JSON"); }

static void test_trailing_garbage(void **state) { expect_json_fails("{} x", 0, DS_ERR_FORMAT, "trailing"); }

static void test_embedded_nul(void **state) {
    char path[600];
    tmp_path(path, sizeof path, "nul.safetensors");
    write_st_len(path, 5, "{}", 3); // header "{}" + three NUL-ish data bytes (0, 1, 2)
    expect_fail(path, DS_ERR_FORMAT, "invalid JSON");
}

static void test_deep_nesting(void **state) {
    size_t n = 200000;
    char *json = malloc(n + 1);
    assert_non_null(json);
    memset(json, '[', n);
    json[n] = '\0';
    expect_json_fails(json, 0, DS_ERR_FORMAT, "invalid JSON");
    free(json);
}

static void test_json_array(void **state) { expect_json_fails("[1, 2]", 0, DS_ERR_FORMAT, "not a JSON object"); }

static void test_entry_not_object(void **state) { expect_json_fails("{\"x\": 3}", 0, DS_ERR_FORMAT, "not an object"); }

static void test_unknown_dtype(void **state) {
    expect_json_fails("{\"x\": {\"dtype\": \"F64\", \"shape\": [1], \"data_offsets\": [0, 8]}}", 8, DS_ERR_UNSUPPORTED,
                      "unsupported dtype 'F64' for tensor 'x'");
}

static void test_missing_dtype(void **state) {
    expect_json_fails("{\"x\": {\"shape\": [1], \"data_offsets\": [0, 4]}}", 4, DS_ERR_FORMAT, "dtype");
}

static void test_negative_dim(void **state) {
    expect_json_fails("{\"x\": {\"dtype\": \"F32\", \"shape\": [2, -1], \"data_offsets\": [0, 8]}}", 8, DS_ERR_FORMAT,
                      "non-negative");
}

static void test_fractional_dim(void **state) {
    expect_json_fails("{\"x\": {\"dtype\": \"F32\", \"shape\": [1.5], \"data_offsets\": [0, 4]}}", 4, DS_ERR_FORMAT,
                      "non-negative integers");
}

static void test_too_many_dims(void **state) {
    expect_json_fails("{\"x\": {\"dtype\": \"F32\", \"shape\": [1,1,1,1,1,1,1,1,1], \"data_offsets\": [0, 4]}}", 4,
                      DS_ERR_FORMAT, "9 dims");
}

static void test_shape_overflow(void **state) {
    expect_json_fails("{\"x\": {\"dtype\": \"F32\", \"shape\": [4294967296, 4294967296, 16], \"data_offsets\": [0, 4]}}", 4,
                      DS_ERR_FORMAT, "overflow");
}

static void test_size_mismatch(void **state) {
    expect_json_fails("{\"x\": {\"dtype\": \"F32\", \"shape\": [2, 3], \"data_offsets\": [0, 20]}}", 24, DS_ERR_FORMAT,
                      "mismatch");
}

static void test_offsets_past_end(void **state) {
    expect_json_fails("{\"x\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [4, 12]}}", 8, DS_ERR_FORMAT,
                      "data_offsets [4, 12] out of range (data is 8 bytes)");
}

static void test_offsets_huge(void **state) {
    expect_json_fails("{\"x\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [1e300, 4]}}", 8, DS_ERR_FORMAT,
                      "data_offsets");
}

static void test_end_before_begin(void **state) {
    expect_json_fails("{\"x\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [10, 4]}}", 16, DS_ERR_FORMAT,
                      "end before begin");
}

static void test_overlap(void **state) {
    expect_json_fails("{\"a\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 8]},"
                      " \"b\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [4, 12]}}",
                      16, DS_ERR_FORMAT, "overlap");
}

static void test_duplicate_name(void **state) {
    expect_json_fails("{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]},"
                      " \"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [4, 8]}}",
                      8, DS_ERR_FORMAT, "duplicate tensor name 'a'");
}

static void test_duplicate_field(void **state) {
    expect_json_fails("{\"a\": {\"dtype\": \"F32\", \"dtype\": \"F16\", \"shape\": [1], \"data_offsets\": [0, 4]}}", 4,
                      DS_ERR_FORMAT, "duplicate");
}

static void test_bad_metadata(void **state) {
    expect_json_fails("{\"__metadata__\": {\"k\": 3}}", 0, DS_ERR_FORMAT, "not a string");
    expect_json_fails("{\"__metadata__\": []}", 0, DS_ERR_FORMAT, "__metadata__");
}

static void test_control_chars_in_name(void **state) {
    // The message stays on one line even when the hostile name holds a newline.
    expect_json_fails("{\"a\\nb\": {\"dtype\": \"F64\", \"shape\": [1], \"data_offsets\": [0, 8]}}", 8, DS_ERR_UNSUPPORTED,
                      "'a?b'");
}

static void test_not_found(void **state) {
    char path[700];
    snprintf(path, sizeof path, "%s/does-not-exist.safetensors", g_base);
    expect_fail(path, DS_ERR_IO, "cannot open");
}

static void test_empty_dir(void **state) {
    char dir[600];
    tmp_path(dir, sizeof dir, "emptydir");
    assert_int_equal(mkdir(dir, 0777), 0);
    expect_fail(dir, DS_ERR_IO, "no model.safetensors");
}

// ---------------------------------------------------------------------------------------------
// Hostile sharded directories

static const char *k_shard1 = "{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]}}";
static const char *k_shard2 = "{\"b\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]}}";

// A directory with shards s1/s2 (headers k_shard1 / k_shard2) and the given index.
static void make_sharded(char *dir, size_t cap, const char *index) {
    char p[800];
    tmp_path(dir, cap, "hostiledir");
    assert_int_equal(mkdir(dir, 0777), 0);
    snprintf(p, sizeof p, "%s/s1.safetensors", dir);
    write_st(p, k_shard1, 4);
    snprintf(p, sizeof p, "%s/s2.safetensors", dir);
    write_st(p, k_shard2, 4);
    snprintf(p, sizeof p, "%s/model.safetensors.index.json", dir);
    write_bytes(p, index, strlen(index));
}

static void expect_index_fails(const char *index, ds_status code, const char *word) {
    char dir[600];
    make_sharded(dir, sizeof dir, index);
    expect_fail(dir, code, word);
}

static void test_index_ok(void **state) {
    char dir[600];
    make_sharded(dir, sizeof dir,
                 "{\"metadata\": {\"total_size\": 8, \"who\": \"me\", \"nested\": {\"x\": [1]}},"
                 " \"weight_map\": {\"a\": \"s1.safetensors\", \"b\": \"s2.safetensors\"}}");
    ds_safetensors *st = NULL;
    if (ds_st_open(dir, &st) != DS_OK) fail_msg("%s", ds_last_error());
    assert_int_equal(ds_st_count(st), 2);
    assert_non_null(ds_st_find(st, "a"));
    assert_non_null(ds_st_find(st, "b"));
    assert_string_equal(ds_st_metadata(st, "total_size"), "8");
    assert_string_equal(ds_st_metadata(st, "who"), "me");
    assert_string_equal(ds_st_metadata(st, "nested"), "{\"x\":[1]}");
    ds_st_close(st);
}

static void test_index_missing_shard(void **state) {
    expect_index_fails("{\"weight_map\": {\"a\": \"s1.safetensors\", \"b\": \"gone.safetensors\"}}", DS_ERR_IO,
                       "gone.safetensors: cannot open");
}

static void test_index_dotdot(void **state) {
    expect_index_fails("{\"weight_map\": {\"a\": \"s1.safetensors\", \"b\": \"../x\"}}", DS_ERR_FORMAT,
                       "unsafe shard file name '../x'");
    expect_index_fails("{\"weight_map\": {\"a\": \"/etc/passwd\"}}", DS_ERR_FORMAT, "unsafe");
    expect_index_fails("{\"weight_map\": {\"a\": \"sub/s1.safetensors\"}}", DS_ERR_FORMAT, "unsafe");
    expect_index_fails("{\"weight_map\": {\"a\": \"s1\\nx\"}}", DS_ERR_FORMAT, "unsafe shard file name 's1?x'");
    expect_index_fails("{\"weight_map\": {\"a\": \"\"}}", DS_ERR_FORMAT, "unsafe");
}

static void test_index_entry_not_in_shard(void **state) {
    expect_index_fails("{\"weight_map\": {\"a\": \"s1.safetensors\", \"b\": \"s2.safetensors\", \"c\": \"s2.safetensors\"}}",
                       DS_ERR_FORMAT, "'c' in 's2.safetensors', which has no such tensor");
}

static void test_shard_tensor_not_in_index(void **state) {
    // Only shards the index names are read (other files in the folder are not part of the model);
    // here s2 is named and holds 'b', which the map does not list.
    expect_index_fails("{\"weight_map\": {\"a\": \"s1.safetensors\", \"z\": \"s2.safetensors\"}}", DS_ERR_FORMAT,
                       "tensor 'b' in");
    expect_index_fails("{\"weight_map\": {\"a\": \"s1.safetensors\", \"z\": \"s2.safetensors\"}}", DS_ERR_FORMAT,
                       "is not in the index's weight_map");
}

static void test_index_wrong_shard(void **state) {
    expect_index_fails("{\"weight_map\": {\"a\": \"s2.safetensors\", \"b\": \"s1.safetensors\"}}", DS_ERR_FORMAT,
                       "weight_map puts it in");
}

static void test_index_malformed(void **state) {
    expect_index_fails("{\"weight_map\": [\"a\"]}", DS_ERR_FORMAT, "weight_map");
    expect_index_fails("{\"metadata\": {}}", DS_ERR_FORMAT, "weight_map");
    expect_index_fails("{\"weight_map\": {}}", DS_ERR_FORMAT, "empty");
    expect_index_fails("{\"weight_map\": {\"a\": 1}}", DS_ERR_FORMAT, "not a file name");
    expect_index_fails("{\"weight_map\": {\"a\": \"s1.safetensors\", \"a\": \"s1.safetensors\"}}", DS_ERR_FORMAT,
                       "duplicate");
    expect_index_fails("[]", DS_ERR_FORMAT, "not a JSON object");
    expect_index_fails("{\"weight_map\": ", DS_ERR_FORMAT, "invalid JSON");
    expect_index_fails("", DS_ERR_FORMAT, "invalid JSON"); // an empty index: no data to copy (memcpy from NULL)
}

static void test_duplicate_across_shards(void **state) {
    char dir[600], p[800];
    tmp_path(dir, sizeof dir, "dupdir");
    assert_int_equal(mkdir(dir, 0777), 0);
    snprintf(p, sizeof p, "%s/s1.safetensors", dir);
    write_st(p, k_shard1, 4);
    snprintf(p, sizeof p, "%s/s2.safetensors", dir);
    write_st(p, k_shard1, 4); // 'a' again
    snprintf(p, sizeof p, "%s/model.safetensors.index.json", dir);
    const char *index = "{\"weight_map\": {\"a\": \"s1.safetensors\", \"b\": \"s2.safetensors\"}}";
    write_bytes(p, index, strlen(index));
    expect_fail(dir, DS_ERR_FORMAT, "duplicate tensor name 'a'");
}

static void test_hostile_shard(void **state) {
    // A shard with a bad header fails with the index and the shard named.
    char dir[600], p[800];
    make_sharded(dir, sizeof dir, "{\"weight_map\": {\"a\": \"s1.safetensors\", \"b\": \"s2.safetensors\"}}");
    snprintf(p, sizeof p, "%s/s2.safetensors", dir);
    write_st_len(p, 1000, "{}", 0);
    expect_fail(dir, DS_ERR_FORMAT, "s2.safetensors: header length 1000 runs past the end");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dtype_size),
        cmocka_unit_test(test_roundtrip_file),
        cmocka_unit_test(test_foreign_header),
        cmocka_unit_test(test_roundtrip_empty),
        cmocka_unit_test(test_roundtrip_sharded),
        cmocka_unit_test(test_write_dir_fits_one_file),
        cmocka_unit_test(test_stream_dir),
        cmocka_unit_test(test_writer_rejects),
        cmocka_unit_test(test_write_missing_dir),
        cmocka_unit_test(test_empty_file),
        cmocka_unit_test(test_four_byte_file),
        cmocka_unit_test(test_header_past_end),
        cmocka_unit_test(test_header_2_63),
        cmocka_unit_test(test_header_too_large),
        cmocka_unit_test(test_invalid_json),
        cmocka_unit_test(test_trailing_garbage),
        cmocka_unit_test(test_embedded_nul),
        cmocka_unit_test(test_deep_nesting),
        cmocka_unit_test(test_json_array),
        cmocka_unit_test(test_entry_not_object),
        cmocka_unit_test(test_unknown_dtype),
        cmocka_unit_test(test_missing_dtype),
        cmocka_unit_test(test_negative_dim),
        cmocka_unit_test(test_fractional_dim),
        cmocka_unit_test(test_too_many_dims),
        cmocka_unit_test(test_shape_overflow),
        cmocka_unit_test(test_size_mismatch),
        cmocka_unit_test(test_offsets_past_end),
        cmocka_unit_test(test_offsets_huge),
        cmocka_unit_test(test_end_before_begin),
        cmocka_unit_test(test_overlap),
        cmocka_unit_test(test_duplicate_name),
        cmocka_unit_test(test_duplicate_field),
        cmocka_unit_test(test_bad_metadata),
        cmocka_unit_test(test_control_chars_in_name),
        cmocka_unit_test(test_not_found),
        cmocka_unit_test(test_empty_dir),
        cmocka_unit_test(test_index_ok),
        cmocka_unit_test(test_index_missing_shard),
        cmocka_unit_test(test_index_dotdot),
        cmocka_unit_test(test_index_entry_not_in_shard),
        cmocka_unit_test(test_shard_tensor_not_in_index),
        cmocka_unit_test(test_index_wrong_shard),
        cmocka_unit_test(test_index_malformed),
        cmocka_unit_test(test_duplicate_across_shards),
        cmocka_unit_test(test_hostile_shard),
    };
    return cmocka_run_group_tests(tests, setup_all, teardown_all);
}
