// GGUF reader: files written by a tiny in-test writer (v3 and v2, metadata of every type, tensors of
// every supported type, custom alignment) read back exactly; hostile and broken files (every
// truncation, absurd counts and lengths, bad tensor infos, bad layouts) fail with a message naming
// the file and the problem, and never crash or leak under ASan.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "bytebuf.h"
#include "tmpdir.h"

#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io/gguf.h"

// ---------------------------------------------------------------------------------------------
// Temporary files

static int setup_all(void **state) {
    (void)state;
    return tmpdir_create("test_gguf");
}

static int teardown_all(void **state) {
    (void)state;
    return tmpdir_remove();
}

static void tmp_path(char *out, size_t cap, const char *what) { tmpdir_path(out, cap, what, ".gguf"); }

static void write_bytes(const char *path, const void *p, size_t n) {
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    if (n) assert_int_equal(fwrite(p, 1, n, f), n);
    assert_int_equal(fclose(f), 0);
}

// ---------------------------------------------------------------------------------------------
// A byte-buffer GGUF writer (buf, b_bytes, b_u32, b_u64, b_free from bytebuf.h)

static void b_u8(buf *b, uint8_t v) { b_bytes(b, &v, 1); }
static void b_u16(buf *b, uint16_t v) { b_bytes(b, &v, 2); }
static void b_f32(buf *b, float v) { b_bytes(b, &v, 4); }
static void b_f64(buf *b, double v) { b_bytes(b, &v, 8); }
static void b_str(buf *b, const char *s) {
    b_u64(b, strlen(s));
    b_bytes(b, s, strlen(s));
}
static void b_zeros(buf *b, size_t n) {
    for (size_t i = 0; i < n; i++) b_u8(b, 0);
}
static void b_pad(buf *b, size_t align) {
    while (b->n % align) b_u8(b, 0);
}
static void b_header(buf *b, uint32_t version, uint64_t n_tensors, uint64_t n_kv) {
    b_bytes(b, "GGUF", 4);
    b_u32(b, version);
    b_u64(b, n_tensors);
    b_u64(b, n_kv);
}
// Key and type of a metadata entry (the value follows).
static void b_kv(buf *b, const char *key, uint32_t type) {
    b_str(b, key);
    b_u32(b, type);
}
static void b_arr_head(buf *b, uint32_t elem_type, uint64_t n) {
    b_u32(b, elem_type);
    b_u64(b, n);
}
static void b_tensor(buf *b, const char *name, uint32_t n_dims, const uint64_t *ne, uint32_t type, uint64_t offset) {
    b_str(b, name);
    b_u32(b, n_dims);
    for (uint32_t d = 0; d < n_dims; d++) b_u64(b, ne[d]);
    b_u32(b, type);
    b_u64(b, offset);
}

// Write `b` to a fresh file, open it and expect failure with status `want` (or any failure when
// want is DS_OK), and a message naming the file and containing `word`.
static void expect_fail_buf(const buf *b, ds_status want, const char *word) {
    char path[1024];
    tmp_path(path, sizeof path, "bad");
    write_bytes(path, b->p, b->n);
    ds_gguf g;
    ds_clear_error();
    ds_status st = ds_gguf_open(&g, path);
    const char *msg = ds_last_error();
    if (st == DS_OK || (want != DS_OK && st != want) || !strstr(msg, path) || (word && !strstr(msg, word)))
        print_error("file %s: status %d (want %d), message '%s' (want '%s')\n", path, (int)st, (int)want, msg,
                    word ? word : "");
    assert_int_not_equal(st, DS_OK);
    if (want != DS_OK) assert_int_equal(st, want);
    assert_non_null(strstr(msg, path));
    if (word) assert_non_null(strstr(msg, word));
    // A failed open leaves nothing behind.
    assert_null(g.kv);
    assert_null(g.tensors);
    assert_null(g.map.data);
    unlink(path);
}

// ---------------------------------------------------------------------------------------------
// The rich valid file: metadata of every type, four tensors (F32, F16, BF16, Q8_0) at 64-byte alignment.

#define N_KV 25
#define ALIGN 64

typedef struct {
    const char *name;
    uint32_t n_dims;
    uint64_t ne[4];
    uint32_t type;
    uint64_t offset;
    size_t nbytes;
} tdesc;

static const tdesc k_tensors[] = {
    {"blk.0.w_f32", 2, {3, 2}, DS_F32, 0, 24},
    {"blk.0.w_f16", 1, {5}, DS_F16, 64, 10},
    {"a.w_bf16", 4, {2, 1, 1, 2}, DS_BF16, 128, 8},
    {"z.w_q8", 2, {32, 2}, DS_Q8_0, 192, 68},
};
#define N_T (sizeof k_tensors / sizeof k_tensors[0])

typedef struct {
    size_t version_at, n_kv_at, data_offset;
} layout;

static void build_rich(buf *b, uint32_t version, layout *lo) {
    memset(b, 0, sizeof *b);
    b_bytes(b, "GGUF", 4);
    if (lo) lo->version_at = b->n;
    b_u32(b, version);
    b_u64(b, N_T);
    if (lo) lo->n_kv_at = b->n;
    b_u64(b, N_KV);
    // Nested arrays first: the entries after them only parse if they were skipped exactly.
    b_kv(b, "t.nested", DS_GGUF_ARRAY); // [[1, -2] (i16), ["x"] (string), [[7] (u8)] (array)]
    b_arr_head(b, DS_GGUF_ARRAY, 3);
    b_arr_head(b, DS_GGUF_I16, 2);
    b_u16(b, 1);
    b_u16(b, (uint16_t)-2);
    b_arr_head(b, DS_GGUF_STRING, 1);
    b_str(b, "x");
    b_arr_head(b, DS_GGUF_ARRAY, 1);
    b_arr_head(b, DS_GGUF_U8, 1);
    b_u8(b, 7);
    b_kv(b, "t.u8", DS_GGUF_U8), b_u8(b, 200);
    b_kv(b, "t.i8", DS_GGUF_I8), b_u8(b, (uint8_t)-100);
    b_kv(b, "t.u16", DS_GGUF_U16), b_u16(b, 60000);
    b_kv(b, "t.i16", DS_GGUF_I16), b_u16(b, (uint16_t)-30000);
    b_kv(b, "t.u32", DS_GGUF_U32), b_u32(b, 4000000000u);
    b_kv(b, "t.i32", DS_GGUF_I32), b_u32(b, (uint32_t)-2000000000);
    b_kv(b, "t.u64", DS_GGUF_U64), b_u64(b, UINT64_MAX);
    b_kv(b, "t.u64s", DS_GGUF_U64), b_u64(b, (uint64_t)1 << 40);
    b_kv(b, "t.i64", DS_GGUF_I64), b_u64(b, (uint64_t)INT64_MIN);
    b_kv(b, "t.f32", DS_GGUF_F32), b_f32(b, 1.5f);
    b_kv(b, "t.f64", DS_GGUF_F64), b_f64(b, -2.25e100);
    b_kv(b, "t.bool", DS_GGUF_BOOL), b_u8(b, 1);
    b_kv(b, "t.bool0", DS_GGUF_BOOL), b_u8(b, 0);
    b_kv(b, "general.alignment", DS_GGUF_U32), b_u32(b, ALIGN);
    b_kv(b, "t.str", DS_GGUF_STRING), b_str(b, "hello gguf");
    b_kv(b, "t.empty", DS_GGUF_STRING), b_str(b, "");
    b_kv(b, "t.arr_u32", DS_GGUF_ARRAY);
    b_arr_head(b, DS_GGUF_U32, 4);
    b_u32(b, 1), b_u32(b, 2), b_u32(b, 3), b_u32(b, 0xFFFFFFFFu);
    b_kv(b, "t.arr_str", DS_GGUF_ARRAY);
    b_arr_head(b, DS_GGUF_STRING, 4);
    b_str(b, "a"), b_str(b, "bc"), b_str(b, ""), b_str(b, "d\xc3\xa9" "f");
    b_kv(b, "t.arr_f32", DS_GGUF_ARRAY);
    b_arr_head(b, DS_GGUF_F32, 2);
    b_f32(b, 0.5f), b_f32(b, -1.0f);
    b_kv(b, "t.arr_f64", DS_GGUF_ARRAY);
    b_arr_head(b, DS_GGUF_F64, 1);
    b_f64(b, 1e-300);
    b_kv(b, "t.arr_i8", DS_GGUF_ARRAY);
    b_arr_head(b, DS_GGUF_I8, 2);
    b_u8(b, 0xFF), b_u8(b, 127);
    b_kv(b, "t.arr_i64", DS_GGUF_ARRAY);
    b_arr_head(b, DS_GGUF_I64, 1);
    b_u64(b, (uint64_t)-5);
    b_kv(b, "t.arr_empty", DS_GGUF_ARRAY);
    b_arr_head(b, DS_GGUF_U8, 0);
    b_kv(b, "t.last", DS_GGUF_U32), b_u32(b, 77);
    for (size_t i = 0; i < N_T; i++)
        b_tensor(b, k_tensors[i].name, k_tensors[i].n_dims, k_tensors[i].ne, k_tensors[i].type, k_tensors[i].offset);
    b_pad(b, ALIGN);
    if (lo) lo->data_offset = b->n;
    // Data: tensor i's bytes are (i * 37 + k) & 0xff; the F32 tensor holds 0, 1, ..., 5; the gaps
    // between tensors are 0xEE. The last tensor ends the file.
    const size_t data0 = b->n;
    const size_t total = k_tensors[N_T - 1].offset + k_tensors[N_T - 1].nbytes;
    for (size_t k = 0; k < total; k++) b_u8(b, 0xEE);
    for (size_t i = 0; i < N_T; i++)
        for (size_t k = 0; k < k_tensors[i].nbytes; k++)
            b->p[data0 + k_tensors[i].offset + k] = (uint8_t)(i * 37 + k);
    for (int k = 0; k < 6; k++) {
        float v = (float)k;
        memcpy(b->p + data0 + k * 4, &v, 4);
    }
}

static void check_rich(uint32_t version, int extra_tail) {
    buf b;
    layout lo;
    build_rich(&b, version, &lo);
    if (extra_tail) b_zeros(&b, 5); // trailing bytes after the data are allowed
    char path[1024];
    tmp_path(path, sizeof path, "rich");
    write_bytes(path, b.p, b.n);

    ds_gguf g;
    ds_status st = ds_gguf_open(&g, path);
    if (st) print_error("%s\n", ds_last_error());
    assert_int_equal(st, DS_OK);
    assert_int_equal(g.version, version);
    assert_int_equal(g.n_kv, N_KV);
    assert_int_equal(g.n_tensors, N_T);
    assert_int_equal(g.alignment, ALIGN);
    assert_int_equal(g.data_offset, lo.data_offset);
    assert_int_equal(g.data_offset % ALIGN, 0);
    assert_int_equal(g.map.size, b.n);

    // Integers through the getters.
    int64_t i = 0;
    assert_int_equal(ds_gguf_get_int(&g, "t.u8", &i), DS_OK), assert_int_equal(i, 200);
    assert_int_equal(ds_gguf_get_int(&g, "t.i8", &i), DS_OK), assert_int_equal(i, -100);
    assert_int_equal(ds_gguf_get_int(&g, "t.u16", &i), DS_OK), assert_int_equal(i, 60000);
    assert_int_equal(ds_gguf_get_int(&g, "t.i16", &i), DS_OK), assert_int_equal(i, -30000);
    assert_int_equal(ds_gguf_get_int(&g, "t.u32", &i), DS_OK), assert_true(i == 4000000000LL);
    assert_int_equal(ds_gguf_get_int(&g, "t.i32", &i), DS_OK), assert_true(i == -2000000000LL);
    assert_int_equal(ds_gguf_get_int(&g, "t.u64s", &i), DS_OK), assert_true(i == (int64_t)1 << 40);
    assert_int_equal(ds_gguf_get_int(&g, "t.i64", &i), DS_OK), assert_true(i == INT64_MIN);
    assert_int_equal(ds_gguf_get_int(&g, "general.alignment", &i), DS_OK), assert_int_equal(i, ALIGN);
    assert_int_equal(ds_gguf_get_int(&g, "t.last", &i), DS_OK), assert_int_equal(i, 77);
    // u64 above INT64_MAX does not fit.
    assert_int_equal(ds_gguf_get_int(&g, "t.u64", &i), DS_ERR_FORMAT);
    assert_non_null(strstr(ds_last_error(), "t.u64"));
    assert_non_null(strstr(ds_last_error(), "out of range"));
    const ds_gguf_kv *kv = ds_gguf_find_kv(&g, "t.u64");
    assert_non_null(kv);
    assert_int_equal(kv->type, DS_GGUF_U64);
    assert_true(kv->v.u == UINT64_MAX);
    // Raw kv types.
    assert_int_equal(ds_gguf_find_kv(&g, "t.i8")->type, DS_GGUF_I8);
    assert_int_equal(ds_gguf_find_kv(&g, "t.f64")->type, DS_GGUF_F64);

    // Floats: f32 and f64, and integers widen.
    double f = 0;
    assert_int_equal(ds_gguf_get_float(&g, "t.f32", &f), DS_OK), assert_true(f == 1.5);
    assert_int_equal(ds_gguf_get_float(&g, "t.f64", &f), DS_OK), assert_true(f == -2.25e100);
    assert_int_equal(ds_gguf_get_float(&g, "t.i16", &f), DS_OK), assert_true(f == -30000.0);
    assert_int_equal(ds_gguf_get_float(&g, "t.u64", &f), DS_OK), assert_true(f == (double)UINT64_MAX);
    assert_int_equal(ds_gguf_get_float_or(&g, "t.nope", 3.25, &f), DS_OK), assert_true(f == 3.25);
    assert_int_equal(ds_gguf_get_float_or(&g, "t.f32", 3.25, &f), DS_OK), assert_true(f == 1.5);

    // Bools.
    int bv = -1;
    assert_int_equal(ds_gguf_get_bool(&g, "t.bool", &bv), DS_OK), assert_int_equal(bv, 1);
    assert_int_equal(ds_gguf_get_bool(&g, "t.bool0", &bv), DS_OK), assert_int_equal(bv, 0);
    assert_int_equal(ds_gguf_get_bool_or(&g, "t.nope", 1, &bv), DS_OK), assert_int_equal(bv, 1);
    assert_int_equal(ds_gguf_get_bool_or(&g, "t.bool0", 1, &bv), DS_OK), assert_int_equal(bv, 0);

    // Strings (copied NUL-terminated, truncated to the buffer).
    char s[64];
    assert_int_equal(ds_gguf_get_str(&g, "t.str", s, sizeof s), DS_OK), assert_string_equal(s, "hello gguf");
    assert_int_equal(ds_gguf_get_str(&g, "t.str", s, 4), DS_OK), assert_string_equal(s, "hel");
    assert_int_equal(ds_gguf_get_str(&g, "t.str", s, 1), DS_OK), assert_string_equal(s, "");
    assert_int_equal(ds_gguf_get_str(&g, "t.empty", s, sizeof s), DS_OK), assert_string_equal(s, "");
    kv = ds_gguf_find_kv(&g, "t.str");
    assert_int_equal(kv->v.s.len, 10);
    assert_memory_equal(kv->v.s.ptr, "hello gguf", 10);

    // Defaults for absent keys; errors for present keys of another type and for missing keys.
    assert_int_equal(ds_gguf_get_int_or(&g, "t.nope", -7, &i), DS_OK), assert_int_equal(i, -7);
    assert_int_equal(ds_gguf_get_int_or(&g, "t.u8", -7, &i), DS_OK), assert_int_equal(i, 200);
    struct {
        ds_status st;
        const char *key, *word;
    } errs[] = {
        {ds_gguf_get_int(&g, "t.str", &i), "t.str", "not an integer"},
        {ds_gguf_get_int(&g, "t.f32", &i), "t.f32", "not an integer"},
        {ds_gguf_get_int(&g, "t.bool", &i), "t.bool", "not an integer"},
        {ds_gguf_get_int_or(&g, "t.arr_u32", 0, &i), "t.arr_u32", "not an integer"},
        {ds_gguf_get_float(&g, "t.str", &f), "t.str", "not a number"},
        {ds_gguf_get_float_or(&g, "t.bool", 0, &f), "t.bool", "not a number"},
        {ds_gguf_get_bool(&g, "t.u8", &bv), "t.u8", "not a bool"},
        {ds_gguf_get_bool_or(&g, "t.str", 0, &bv), "t.str", "not a bool"},
        {ds_gguf_get_str(&g, "t.u32", s, sizeof s), "t.u32", "not a string"},
        {ds_gguf_get_str(&g, "t.arr_str", s, sizeof s), "t.arr_str", "not a string"},
        {ds_gguf_get_int(&g, "t.missing1", &i), "t.missing1", "missing"},
        {ds_gguf_get_float(&g, "t.missing2", &f), "t.missing2", "missing"},
        {ds_gguf_get_bool(&g, "t.missing3", &bv), "t.missing3", "missing"},
        {ds_gguf_get_str(&g, "t.missing4", s, sizeof s), "t.missing4", "missing"},
    };
    for (size_t k = 0; k < sizeof errs / sizeof errs[0]; k++) {
        // Each call above overwrote the message: re-run it to check its own.
        assert_int_equal(errs[k].st, DS_ERR_FORMAT);
    }
    assert_int_equal(ds_gguf_get_int(&g, "t.str", &i), DS_ERR_FORMAT);
    assert_non_null(strstr(ds_last_error(), path)), assert_non_null(strstr(ds_last_error(), "'t.str' is not an integer"));
    assert_int_equal(ds_gguf_get_float(&g, "t.str", &f), DS_ERR_FORMAT);
    assert_non_null(strstr(ds_last_error(), path)), assert_non_null(strstr(ds_last_error(), "'t.str' is not a number"));
    assert_int_equal(ds_gguf_get_bool(&g, "t.u8", &bv), DS_ERR_FORMAT);
    assert_non_null(strstr(ds_last_error(), path)), assert_non_null(strstr(ds_last_error(), "'t.u8' is not a bool"));
    assert_int_equal(ds_gguf_get_str(&g, "t.u32", s, sizeof s), DS_ERR_FORMAT);
    assert_non_null(strstr(ds_last_error(), path)), assert_non_null(strstr(ds_last_error(), "'t.u32' is not a string"));
    assert_int_equal(ds_gguf_get_int(&g, "t.missing1", &i), DS_ERR_FORMAT);
    assert_non_null(strstr(ds_last_error(), path)), assert_non_null(strstr(ds_last_error(), "missing metadata 't.missing1'"));
    assert_int_equal(ds_gguf_get_str(&g, "t.missing4", s, sizeof s), DS_ERR_FORMAT);
    assert_non_null(strstr(ds_last_error(), path)), assert_non_null(strstr(ds_last_error(), "missing metadata 't.missing4'"));
    assert_null(ds_gguf_find_kv(&g, "t"));
    assert_null(ds_gguf_find_kv(&g, "t.u8x"));

    // Arrays of numbers.
    kv = ds_gguf_find_kv(&g, "t.arr_u32");
    assert_non_null(kv);
    assert_int_equal(kv->type, DS_GGUF_ARRAY);
    assert_int_equal(kv->arr_type, DS_GGUF_U32);
    assert_int_equal(kv->arr_n, 4);
    assert_null(kv->arr_strs);
    assert_true(ds_gguf_arr_i64(kv, 0) == 1 && ds_gguf_arr_i64(kv, 1) == 2 && ds_gguf_arr_i64(kv, 2) == 3);
    assert_true(ds_gguf_arr_i64(kv, 3) == 0xFFFFFFFFLL);
    assert_true(ds_gguf_arr_f64(kv, 3) == 4294967295.0);
    kv = ds_gguf_find_kv(&g, "t.arr_f32");
    assert_int_equal(kv->arr_type, DS_GGUF_F32);
    assert_int_equal(kv->arr_n, 2);
    assert_true(ds_gguf_arr_f64(kv, 0) == 0.5 && ds_gguf_arr_f64(kv, 1) == -1.0);
    assert_true(ds_gguf_arr_i64(kv, 1) == -1);
    kv = ds_gguf_find_kv(&g, "t.arr_f64");
    assert_true(ds_gguf_arr_f64(kv, 0) == 1e-300);
    kv = ds_gguf_find_kv(&g, "t.arr_i8");
    assert_int_equal(kv->arr_n, 2);
    assert_true(ds_gguf_arr_i64(kv, 0) == -1 && ds_gguf_arr_i64(kv, 1) == 127);
    assert_true(ds_gguf_arr_f64(kv, 0) == -1.0);
    kv = ds_gguf_find_kv(&g, "t.arr_i64");
    assert_true(ds_gguf_arr_i64(kv, 0) == -5);
    kv = ds_gguf_find_kv(&g, "t.arr_empty");
    assert_int_equal(kv->arr_type, DS_GGUF_U8);
    assert_int_equal(kv->arr_n, 0);

    // Arrays of strings.
    kv = ds_gguf_find_kv(&g, "t.arr_str");
    assert_int_equal(kv->arr_type, DS_GGUF_STRING);
    assert_int_equal(kv->arr_n, 4);
    assert_non_null(kv->arr_strs);
    const char *want_s[] = {"a", "bc", "", ("d\xc3\xa9" "f")};
    for (int k = 0; k < 4; k++) {
        assert_int_equal(kv->arr_strs[k].len, strlen(want_s[k]));
        assert_memory_equal(kv->arr_strs[k].ptr, want_s[k], strlen(want_s[k]));
        // Pointers lie inside the mapping.
        assert_true((const uint8_t *)kv->arr_strs[k].ptr >= g.map.data &&
                    (const uint8_t *)kv->arr_strs[k].ptr + kv->arr_strs[k].len <= g.map.data + g.map.size);
    }

    // Nested arrays: raw element bytes at arr_data.
    kv = ds_gguf_find_kv(&g, "t.nested");
    assert_non_null(kv);
    assert_int_equal(kv->type, DS_GGUF_ARRAY);
    assert_int_equal(kv->arr_type, DS_GGUF_ARRAY);
    assert_int_equal(kv->arr_n, 3);
    assert_null(kv->arr_strs);
    {
        buf e = {0};
        b_arr_head(&e, DS_GGUF_I16, 2), b_u16(&e, 1), b_u16(&e, (uint16_t)-2);
        b_arr_head(&e, DS_GGUF_STRING, 1), b_str(&e, "x");
        b_arr_head(&e, DS_GGUF_ARRAY, 1), b_arr_head(&e, DS_GGUF_U8, 1), b_u8(&e, 7);
        assert_memory_equal(kv->arr_data, e.p, e.n);
        b_free(&e);
    }

    // Tensors: infos, lookup, data pointers.
    for (size_t k = 0; k < N_T; k++) {
        const tdesc *d = &k_tensors[k];
        const ds_gguf_tensor *t = ds_gguf_find_tensor(&g, d->name);
        assert_non_null(t);
        assert_string_equal(t->name, d->name);
        assert_int_equal(t->type, d->type);
        assert_int_equal(t->n_dims, d->n_dims);
        for (int dd = 0; dd < 4; dd++) assert_int_equal(t->ne[dd], dd < (int)d->n_dims ? (int64_t)d->ne[dd] : 1);
        assert_int_equal(t->offset, d->offset);
        assert_int_equal(t->nbytes, d->nbytes);
        assert_ptr_equal(t->data, g.map.data + lo.data_offset + d->offset);
        const uint8_t *p = t->data;
        if (d->type == DS_F32) {
            for (int e = 0; e < 6; e++) {
                float v;
                memcpy(&v, p + 4 * e, 4);
                assert_true(v == (float)e);
            }
        } else {
            for (size_t e = 0; e < d->nbytes; e++) assert_int_equal(p[e], (uint8_t)(k * 37 + e));
        }
    }
    assert_null(ds_gguf_find_tensor(&g, "blk.0.w"));
    assert_null(ds_gguf_find_tensor(&g, ""));
    assert_null(ds_gguf_find_tensor(&g, "zz"));
    assert_string_equal(ds_ggml_type_name(DS_Q8_0), "Q8_0");
    assert_string_equal(ds_ggml_type_name(DS_BF16), "BF16");
    assert_string_equal(ds_ggml_type_name(12), "Q4_K");
    assert_string_equal(ds_ggml_type_name(16), "IQ2_XXS");
    assert_string_equal(ds_ggml_type_name(31), "Q4_0_4_4");
    assert_string_equal(ds_ggml_type_name(34), "TQ1_0");
    assert_string_equal(ds_ggml_type_name(39), "MXFP4");
    assert_string_equal(ds_ggml_type_name(43), "unknown");
    assert_string_equal(ds_ggml_type_name(0xFFFFFFFFu), "unknown");

    ds_gguf_close(&g);
    assert_null(g.kv);
    assert_null(g.tensors);
    ds_gguf_close(&g); // closing twice is harmless
    b_free(&b);
    unlink(path);
}

static void test_valid_v3(void **state) { check_rich(3, 0); }
static void test_valid_v2(void **state) { check_rich(2, 0); }
static void test_valid_trailing_bytes(void **state) { check_rich(3, 1); }

// Default alignment (32), no metadata, a file without tensors, and a file with metadata only.
static void test_valid_minimal(void **state) {
    buf b = {0};
    char path[1024];
    ds_gguf g;
    // No tensors, no metadata: just the header.
    b_header(&b, 3, 0, 0);
    tmp_path(path, sizeof path, "empty");
    write_bytes(path, b.p, b.n);
    assert_int_equal(ds_gguf_open(&g, path), DS_OK);
    assert_int_equal(g.n_kv, 0);
    assert_int_equal(g.n_tensors, 0);
    assert_int_equal(g.alignment, 32);
    assert_null(ds_gguf_find_tensor(&g, "x"));
    assert_null(ds_gguf_find_kv(&g, "x"));
    ds_gguf_close(&g);
    b_free(&b);

    // One F32 tensor at the default alignment, 4 floats.
    b_header(&b, 3, 1, 0);
    uint64_t ne[1] = {4};
    b_tensor(&b, "x", 1, ne, DS_F32, 0);
    b_pad(&b, 32);
    size_t d0 = b.n;
    for (int k = 0; k < 4; k++) b_f32(&b, (float)k + 0.25f);
    tmp_path(path, sizeof path, "one");
    write_bytes(path, b.p, b.n);
    assert_int_equal(ds_gguf_open(&g, path), DS_OK);
    assert_int_equal(g.alignment, 32);
    assert_int_equal(g.data_offset, d0);
    const ds_gguf_tensor *t = ds_gguf_find_tensor(&g, "x");
    assert_non_null(t);
    assert_int_equal(t->nbytes, 16);
    float v[4];
    memcpy(v, t->data, 16);
    for (int k = 0; k < 4; k++) assert_true(v[k] == (float)k + 0.25f);
    ds_gguf_close(&g);
    b_free(&b);
}

// ---------------------------------------------------------------------------------------------
// Broken headers

static void test_empty_file(void **state) {
    buf b = {0};
    b_u8(&b, 0);
    b.n = 0;
    expect_fail_buf(&b, DS_ERR_FORMAT, "magic");
    b_free(&b);
}

static void test_bad_magic(void **state) {
    buf b = {0};
    b_bytes(&b, "GGUX", 4);
    b_u32(&b, 3), b_u64(&b, 0), b_u64(&b, 0);
    expect_fail_buf(&b, DS_ERR_FORMAT, "magic");
    b_free(&b);
    // A few bytes that are not even a magic.
    b_bytes(&b, "GG", 2);
    expect_fail_buf(&b, DS_ERR_FORMAT, "magic");
    b_free(&b);
}

static void test_bad_version(void **state) {
    const uint32_t versions[] = {0, 1, 4, 0xFFFFFFFFu};
    for (size_t k = 0; k < sizeof versions / sizeof versions[0]; k++) {
        buf b = {0};
        b_header(&b, versions[k], 0, 0);
        b_zeros(&b, 64);
        expect_fail_buf(&b, DS_ERR_UNSUPPORTED, "version");
        b_free(&b);
    }
}

// A metadata key may appear only once (llama.cpp rejects such files too); the check must not be
// quadratic, so it runs on a sorted copy.
static void test_duplicate_key(void **state) {
    buf b = {0};
    b_header(&b, 3, 0, 3);
    b_kv(&b, "general.name", 8), b_str(&b, "a");
    b_kv(&b, "x.y", 4), b_u32(&b, 1);
    b_kv(&b, "general.name", 8), b_str(&b, "b");
    expect_fail_buf(&b, DS_ERR_FORMAT, "appears twice");
    b_free(&b);
}

// Every proper prefix of a valid file fails cleanly (the most valuable test of the bounds checks).
static void test_truncated_every_offset(void **state) {
    buf b;
    layout lo;
    build_rich(&b, 3, &lo);
    char path[1024];
    for (size_t len = 0; len < b.n; len++) {
        tmp_path(path, sizeof path, "prefix");
        write_bytes(path, b.p, len);
        ds_gguf g;
        ds_clear_error();
        ds_status st = ds_gguf_open(&g, path);
        const char *msg = ds_last_error();
        int telling = strstr(msg, "truncated") || strstr(msg, "past the end") || strstr(msg, "magic") ||
                      strstr(msg, "impossible");
        if (st != DS_ERR_FORMAT || !strstr(msg, path) || !telling)
            print_error("prefix of %zu of %zu bytes: status %d, message '%s'\n", len, b.n, (int)st, msg);
        assert_int_equal(st, DS_ERR_FORMAT);
        assert_non_null(strstr(msg, path));
        assert_true(telling);
        // A "truncated" message names a byte position inside the prefix.
        const char *at = strstr(msg, " at byte ");
        if (at) assert_true(strtoull(at + 9, NULL, 10) <= len);
        assert_null(g.kv);
        assert_null(g.tensors);
        unlink(path);
    }
    b_free(&b);
}

// The position in a "truncated" message is where the cut read began (an offset in the file).
static void test_truncated_position(void **state) {
    buf b;
    layout lo;
    build_rich(&b, 3, &lo);
    char word[128];
    buf p = {0};
    b_bytes(&p, b.p, lo.version_at + 2); // cut inside the version
    snprintf(word, sizeof word, "reading version at byte %zu", lo.version_at);
    expect_fail_buf(&p, DS_ERR_FORMAT, word);
    b_free(&p);
    b_bytes(&p, b.p, lo.n_kv_at + 7); // cut inside the metadata count
    snprintf(word, sizeof word, "reading metadata count at byte %zu", lo.n_kv_at);
    expect_fail_buf(&p, DS_ERR_FORMAT, word);
    b_free(&p);
    b_free(&b);
}

static void test_huge_counts(void **state) {
    buf b = {0};
    b_header(&b, 3, 0, (uint64_t)1 << 63); // n_kv = 2^63
    b_zeros(&b, 256);
    expect_fail_buf(&b, DS_ERR_FORMAT, "metadata count");
    b_free(&b);
    b_header(&b, 3, (uint64_t)1 << 60, 0); // n_tensors = 2^60
    b_zeros(&b, 256);
    expect_fail_buf(&b, DS_ERR_FORMAT, "tensor count");
    b_free(&b);
    b_header(&b, 3, UINT64_MAX, UINT64_MAX);
    expect_fail_buf(&b, DS_ERR_FORMAT, "count");
    b_free(&b);
    // Just over what the file could hold (20 bytes left: at most one 13-byte entry).
    b_header(&b, 3, 0, 2);
    b_kv(&b, "k", DS_GGUF_U8), b_u8(&b, 1);
    b_zeros(&b, 6);
    expect_fail_buf(&b, DS_ERR_FORMAT, "metadata count");
    b_free(&b);
}

// ---------------------------------------------------------------------------------------------
// Broken metadata

static void test_huge_strings(void **state) {
    buf b = {0};
    // Key of length 2^62.
    b_header(&b, 3, 0, 1);
    b_u64(&b, (uint64_t)1 << 62);
    b_zeros(&b, 64);
    expect_fail_buf(&b, DS_ERR_FORMAT, "past the end");
    b_free(&b);
    // String value of length 2^62 (the message names the key).
    b_header(&b, 3, 0, 1);
    b_kv(&b, "my.string", DS_GGUF_STRING);
    b_u64(&b, (uint64_t)1 << 62);
    b_zeros(&b, 64);
    expect_fail_buf(&b, DS_ERR_FORMAT, "my.string");
    b_free(&b);
    // String value one byte longer than what is left.
    b_header(&b, 3, 0, 1);
    b_kv(&b, "my.string", DS_GGUF_STRING);
    b_u64(&b, 11);
    b_bytes(&b, "0123456789", 10);
    expect_fail_buf(&b, DS_ERR_FORMAT, "past the end");
    b_free(&b);
    // Length UINT64_MAX.
    b_header(&b, 3, 0, 1);
    b_kv(&b, "my.string", DS_GGUF_STRING);
    b_u64(&b, UINT64_MAX);
    b_zeros(&b, 8);
    expect_fail_buf(&b, DS_ERR_FORMAT, "past the end");
    b_free(&b);
}

static void test_huge_arrays(void **state) {
    buf b = {0};
    // 2^61 u64 elements (2^61 * 8 wraps to 0 in 64 bits).
    b_header(&b, 3, 0, 1);
    b_kv(&b, "my.array", DS_GGUF_ARRAY);
    b_arr_head(&b, DS_GGUF_U64, (uint64_t)1 << 61);
    b_zeros(&b, 64);
    expect_fail_buf(&b, DS_ERR_FORMAT, "my.array");
    b_free(&b);
    // 2^63 + 1 u16 elements, UINT64_MAX u8 elements.
    b_header(&b, 3, 0, 2);
    b_kv(&b, "ok", DS_GGUF_U8), b_u8(&b, 1);
    b_kv(&b, "my.array", DS_GGUF_ARRAY);
    b_arr_head(&b, DS_GGUF_U16, ((uint64_t)1 << 63) + 1);
    b_zeros(&b, 64);
    expect_fail_buf(&b, DS_ERR_FORMAT, "past the end");
    b_free(&b);
    b_header(&b, 3, 0, 1);
    b_kv(&b, "my.array", DS_GGUF_ARRAY);
    b_arr_head(&b, DS_GGUF_U8, UINT64_MAX);
    b_zeros(&b, 64);
    expect_fail_buf(&b, DS_ERR_FORMAT, "past the end");
    b_free(&b);
    // One element more than the file holds.
    b_header(&b, 3, 0, 1);
    b_kv(&b, "my.array", DS_GGUF_ARRAY);
    b_arr_head(&b, DS_GGUF_U32, 5);
    b_zeros(&b, 16);
    expect_fail_buf(&b, DS_ERR_FORMAT, "past the end");
    b_free(&b);
    // Strings: a count of 2^62 (the index must not be allocated), UINT64_MAX.
    const uint64_t counts[] = {(uint64_t)1 << 62, UINT64_MAX, (uint64_t)1 << 61};
    for (size_t k = 0; k < 3; k++) {
        b_header(&b, 3, 0, 1);
        b_kv(&b, "my.strings", DS_GGUF_ARRAY);
        b_arr_head(&b, DS_GGUF_STRING, counts[k]);
        b_zeros(&b, 64);
        expect_fail_buf(&b, DS_ERR_FORMAT, "my.strings");
        b_free(&b);
    }
    // A count the file size allows (all 8-byte lengths) whose strings do not fit: the index is
    // allocated, then freed on the error path (ASan checks the leak).
    b_header(&b, 3, 0, 1);
    b_kv(&b, "my.strings", DS_GGUF_ARRAY);
    b_arr_head(&b, DS_GGUF_STRING, 8);
    b_str(&b, "abc");
    b_u64(&b, 1000); // a length past the end
    b_zeros(&b, 48);
    expect_fail_buf(&b, DS_ERR_FORMAT, "past the end");
    b_free(&b);
    // Strings inside a nested array with a huge count.
    b_header(&b, 3, 0, 1);
    b_kv(&b, "my.nested", DS_GGUF_ARRAY);
    b_arr_head(&b, DS_GGUF_ARRAY, 1);
    b_arr_head(&b, DS_GGUF_STRING, (uint64_t)1 << 62);
    b_zeros(&b, 64);
    expect_fail_buf(&b, DS_ERR_FORMAT, "truncated");
    b_free(&b);
    // An array of arrays with a huge count (each inner array empty).
    b_header(&b, 3, 0, 1);
    b_kv(&b, "my.nested", DS_GGUF_ARRAY);
    b_arr_head(&b, DS_GGUF_ARRAY, (uint64_t)1 << 62);
    for (int k = 0; k < 10; k++) b_arr_head(&b, DS_GGUF_U8, 0);
    expect_fail_buf(&b, DS_ERR_FORMAT, "truncated");
    b_free(&b);
    // An inner numeric array too long for the file.
    b_header(&b, 3, 0, 1);
    b_kv(&b, "my.nested", DS_GGUF_ARRAY);
    b_arr_head(&b, DS_GGUF_ARRAY, 1);
    b_arr_head(&b, DS_GGUF_U64, (uint64_t)1 << 61);
    b_zeros(&b, 64);
    expect_fail_buf(&b, DS_ERR_FORMAT, "my.nested");
    b_free(&b);
}

static void test_deep_nesting(void **state) {
    buf b = {0};
    b_header(&b, 3, 0, 1);
    b_kv(&b, "my.deep", DS_GGUF_ARRAY);
    for (int d = 0; d < 100; d++) b_arr_head(&b, DS_GGUF_ARRAY, 1);
    b_arr_head(&b, DS_GGUF_U8, 0);
    expect_fail_buf(&b, DS_ERR_FORMAT, "deeply");
    b_free(&b);
    // 100 deep with nothing after: truncated or too deep, either way a clean failure.
    b_header(&b, 3, 0, 1);
    b_kv(&b, "my.deep", DS_GGUF_ARRAY);
    for (int d = 0; d < 100000; d++) b_arr_head(&b, DS_GGUF_ARRAY, 1);
    expect_fail_buf(&b, DS_ERR_FORMAT, "deeply");
    b_free(&b);
    // A few levels are fine.
    b_header(&b, 3, 0, 2);
    b_kv(&b, "my.deep", DS_GGUF_ARRAY);
    for (int d = 0; d < 4; d++) b_arr_head(&b, DS_GGUF_ARRAY, 1);
    b_arr_head(&b, DS_GGUF_U8, 2), b_u8(&b, 1), b_u8(&b, 2);
    b_kv(&b, "after", DS_GGUF_U32), b_u32(&b, 5);
    char path[1024];
    tmp_path(path, sizeof path, "deep_ok");
    write_bytes(path, b.p, b.n);
    ds_gguf g;
    assert_int_equal(ds_gguf_open(&g, path), DS_OK);
    int64_t v = 0;
    assert_int_equal(ds_gguf_get_int(&g, "after", &v), DS_OK);
    assert_int_equal(v, 5);
    ds_gguf_close(&g);
    b_free(&b);
}

static void test_unknown_types(void **state) {
    buf b = {0};
    b_header(&b, 3, 0, 1);
    b_kv(&b, "my.odd", 99);
    b_zeros(&b, 16);
    expect_fail_buf(&b, DS_ERR_FORMAT, "unknown type 99");
    b_free(&b);
    b_header(&b, 3, 0, 2);
    b_kv(&b, "ok", DS_GGUF_U8), b_u8(&b, 1);
    b_kv(&b, "my.odd", 13);
    b_zeros(&b, 16);
    expect_fail_buf(&b, DS_ERR_FORMAT, "my.odd");
    b_free(&b);
    // Unknown array element type, at the top level and nested.
    b_header(&b, 3, 0, 1);
    b_kv(&b, "my.odd", DS_GGUF_ARRAY);
    b_arr_head(&b, 99, 1);
    b_zeros(&b, 16);
    expect_fail_buf(&b, DS_ERR_FORMAT, "unknown array element type 99");
    b_free(&b);
    b_header(&b, 3, 0, 1);
    b_kv(&b, "my.odd", DS_GGUF_ARRAY);
    b_arr_head(&b, DS_GGUF_ARRAY, 1);
    b_arr_head(&b, 0xFFFFFFFFu, 1);
    b_zeros(&b, 16);
    expect_fail_buf(&b, DS_ERR_FORMAT, "unknown array element type");
    b_free(&b);
}

static void test_bad_alignment(void **state) {
    const uint32_t bad[] = {3, 0, 48, 0xFFFFFFFFu};
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        buf b = {0};
        b_header(&b, 3, 1, 1);
        b_kv(&b, "general.alignment", DS_GGUF_U32), b_u32(&b, bad[k]);
        uint64_t ne[1] = {8};
        b_tensor(&b, "x", 1, ne, DS_F32, 0);
        b_pad(&b, 32);
        b_zeros(&b, 256);
        expect_fail_buf(&b, DS_ERR_FORMAT, "alignment");
        b_free(&b);
    }
    // The wrong type (u64, string).
    buf b = {0};
    b_header(&b, 3, 0, 1);
    b_kv(&b, "general.alignment", DS_GGUF_U64), b_u64(&b, 32);
    expect_fail_buf(&b, DS_ERR_FORMAT, "alignment");
    b_free(&b);
    b_header(&b, 3, 0, 1);
    b_kv(&b, "general.alignment", DS_GGUF_STRING), b_str(&b, "32");
    expect_fail_buf(&b, DS_ERR_FORMAT, "alignment");
    b_free(&b);
    // A power of two so large the padded data section starts past the end.
    b_header(&b, 3, 1, 1);
    b_kv(&b, "general.alignment", DS_GGUF_U32), b_u32(&b, 1u << 31);
    uint64_t ne[1] = {8};
    b_tensor(&b, "x", 1, ne, DS_F32, 0);
    b_zeros(&b, 256);
    expect_fail_buf(&b, DS_ERR_FORMAT, "truncated");
    b_free(&b);
}

// ---------------------------------------------------------------------------------------------
// Broken tensor infos and layouts

// A v3 file with the given tensor infos (default alignment) and `data_len` bytes of data.
static void build_tensors(buf *b, int n, const tdesc *t, size_t data_len) {
    memset(b, 0, sizeof *b);
    b_header(b, 3, (uint64_t)n, 1);
    b_kv(b, "general.name", DS_GGUF_STRING), b_str(b, "t");
    for (int k = 0; k < n; k++) b_tensor(b, t[k].name, t[k].n_dims, t[k].ne, t[k].type, t[k].offset);
    b_pad(b, 32);
    for (size_t k = 0; k < data_len; k++) b_u8(b, (uint8_t)k);
}

static void expect_tensors_fail(int n, const tdesc *t, size_t data_len, ds_status want, const char *word) {
    buf b;
    build_tensors(&b, n, t, data_len);
    expect_fail_buf(&b, want, word);
    b_free(&b);
}

static void test_tensor_dims(void **state) {
    // n_dims 0 and 5 (5 dims: the shape values are there so only the count is wrong).
    tdesc t0 = {"w", 0, {0}, DS_F32, 0, 0};
    expect_tensors_fail(1, &t0, 256, DS_ERR_FORMAT, "dimensions");
    buf b = {0};
    b_header(&b, 3, 1, 0);
    uint64_t ne5[5] = {1, 1, 1, 1, 1};
    b_tensor(&b, "w", 5, ne5, DS_F32, 0);
    b_pad(&b, 32);
    b_zeros(&b, 64);
    expect_fail_buf(&b, DS_ERR_FORMAT, "dimensions");
    b_free(&b);
    b_header(&b, 3, 1, 0);
    b_str(&b, "w"), b_u32(&b, 0xFFFFFFFFu); // n_dims 2^32 - 1
    b_zeros(&b, 64);
    expect_fail_buf(&b, DS_ERR_FORMAT, "dimensions");
    b_free(&b);
    // A dimension of 0, in any position.
    tdesc tz = {"w", 2, {4, 0}, DS_F32, 0, 0};
    expect_tensors_fail(1, &tz, 256, DS_ERR_FORMAT, "dimension 1 of size 0");
    tdesc tz0 = {"w", 1, {0}, DS_F32, 0, 0};
    expect_tensors_fail(1, &tz0, 256, DS_ERR_FORMAT, "dimension 0 of size 0");
    // A dimension above INT64_MAX.
    tdesc tneg = {"w", 1, {(uint64_t)1 << 63}, DS_F32, 0, 0};
    expect_tensors_fail(1, &tneg, 256, DS_ERR_FORMAT, "'w'");
    // Products that overflow: the element count (2^40 x 2^40), the byte size (2^62 F32 elements).
    tdesc tov = {"w", 2, {(uint64_t)1 << 40, (uint64_t)1 << 40}, DS_F32, 0, 0};
    expect_tensors_fail(1, &tov, 256, DS_ERR_FORMAT, "overflows");
    tdesc tov4 = {"w", 4, {1u << 16, 1u << 16, 1u << 16, 1u << 16}, DS_F16, 0, 0};
    expect_tensors_fail(1, &tov4, 256, DS_ERR_FORMAT, "overflows");
    tdesc tovb = {"w", 2, {(uint64_t)1 << 31, (uint64_t)1 << 31}, DS_F32, 0, 0};
    expect_tensors_fail(1, &tovb, 256, DS_ERR_FORMAT, "overflows");
    // Fits in 64 bits but not in the file.
    tdesc tbig = {"w", 2, {(uint64_t)1 << 20, (uint64_t)1 << 20}, DS_BF16, 0, 0};
    expect_tensors_fail(1, &tbig, 256, DS_ERR_FORMAT, "past the end");
    // Q8_0 rows must be whole blocks.
    tdesc tq = {"w", 2, {48, 2}, DS_Q8_0, 0, 0};
    expect_tensors_fail(1, &tq, 256, DS_ERR_FORMAT, "multiple of 32");
    // So must the other block types' rows (32 or 256 elements). (Their bytes per element are at most
    // 34/32, so a byte size cannot overflow where the element count did not: a huge one is past the end.)
    tdesc tk = {"w", 2, {128, 2}, DS_Q4_K, 0, 0};
    expect_tensors_fail(1, &tk, 4096, DS_ERR_FORMAT, "multiple of 256");
    expect_tensors_fail(1, &tk, 4096, DS_ERR_FORMAT, "Q4_K tensor 'w'");
    tdesc t40 = {"w", 1, {48}, DS_Q4_0, 0, 0};
    expect_tensors_fail(1, &t40, 4096, DS_ERR_FORMAT, "multiple of 32");
    tdesc tkov = {"w", 2, {(uint64_t)1 << 56, 1u << 7}, DS_Q6_K, 0, 0};
    expect_tensors_fail(1, &tkov, 4096, DS_ERR_FORMAT, "past the end");
    // A block tensor one byte short of its size (2 blocks of Q5_K = 352 bytes in a 351-byte section).
    tdesc tshort = {"w", 1, {512}, DS_Q5_K, 0, 0};
    expect_tensors_fail(1, &tshort, 351, DS_ERR_FORMAT, "past the end");
}

static void test_unsupported_type(void **state) {
    // Every ggml type that is not read is refused by name, naming the tensor.
    tdesc t = {"blk.0.attn_q.weight", 2, {256, 4}, 16 /* IQ2_XXS */, 0, 0};
    expect_tensors_fail(1, &t, 4096, DS_ERR_UNSUPPORTED, "IQ2_XXS");
    expect_tensors_fail(1, &t, 4096, DS_ERR_UNSUPPORTED, "blk.0.attn_q.weight");
    t.type = 34;
    expect_tensors_fail(1, &t, 4096, DS_ERR_UNSUPPORTED, "TQ1_0");
    t.type = 39;
    expect_tensors_fail(1, &t, 4096, DS_ERR_UNSUPPORTED, "MXFP4");
    t.type = 15;
    expect_tensors_fail(1, &t, 4096, DS_ERR_UNSUPPORTED, "Q8_K");
    t.type = 9;
    expect_tensors_fail(1, &t, 4096, DS_ERR_UNSUPPORTED, "Q8_1");
    t.type = 28; // F64
    expect_tensors_fail(1, &t, 4096, DS_ERR_UNSUPPORTED, "F64");
    t.type = 1000; // dspark's own U32 is not a GGUF type
    expect_tensors_fail(1, &t, 4096, DS_ERR_UNSUPPORTED, "unknown");
    t.type = 0xFFFFFFFFu;
    expect_tensors_fail(1, &t, 4096, DS_ERR_UNSUPPORTED, "unknown");
}

static void test_tensor_layout(void **state) {
    // Offset past the end, and at the end, and huge (offset + size must not wrap).
    tdesc a = {"w", 1, {8}, DS_F32, 64, 32};
    expect_tensors_fail(1, &a, 64, DS_ERR_FORMAT, "past the end");
    a.offset = 32;
    expect_tensors_fail(1, &a, 63, DS_ERR_FORMAT, "past the end"); // one byte short
    a.offset = (uint64_t)1 << 63;
    expect_tensors_fail(1, &a, 64, DS_ERR_FORMAT, "past the end");
    a.offset = UINT64_MAX - 31;
    expect_tensors_fail(1, &a, 64, DS_ERR_FORMAT, "past the end");
    // No data section at all.
    a.offset = 0;
    {
        buf b = {0};
        b_header(&b, 3, 1, 0);
        b_tensor(&b, "w", 1, a.ne, DS_F32, 0);
        expect_fail_buf(&b, DS_ERR_FORMAT, "truncated");
        b_free(&b);
    }
    // Offset not aligned.
    a.offset = 4;
    expect_tensors_fail(1, &a, 256, DS_ERR_FORMAT, "not aligned");
    // Two overlapping tensors (and one overlapping another that starts at the same offset).
    tdesc two[2] = {{"a", 1, {16}, DS_F32, 0, 64}, {"b", 1, {8}, DS_F32, 32, 32}};
    expect_tensors_fail(2, two, 256, DS_ERR_FORMAT, "overlap");
    two[1].offset = 0;
    expect_tensors_fail(2, two, 256, DS_ERR_FORMAT, "overlap");
    // Listed in reverse order of offset: the overlap is still found.
    tdesc rev[3] = {{"c", 1, {8}, DS_F32, 96, 32}, {"b", 1, {16}, DS_F32, 32, 64}, {"a", 1, {8}, DS_F32, 0, 32}};
    rev[0].offset = 64; // overlaps b (32..96)
    expect_tensors_fail(3, rev, 256, DS_ERR_FORMAT, "overlap");
    // Adjacent tensors are fine.
    rev[0].offset = 96;
    {
        buf b;
        build_tensors(&b, 3, rev, 128);
        char path[1024];
        tmp_path(path, sizeof path, "adjacent");
        write_bytes(path, b.p, b.n);
        ds_gguf g;
        assert_int_equal(ds_gguf_open(&g, path), DS_OK);
        assert_int_equal(g.n_tensors, 3);
        assert_int_equal(ds_gguf_find_tensor(&g, "c")->offset, 96);
        assert_ptr_equal(ds_gguf_find_tensor(&g, "a")->data, g.map.data + g.data_offset);
        ds_gguf_close(&g);
        b_free(&b);
    }
    // Duplicate tensor names.
    tdesc dup[3] = {{"x", 1, {8}, DS_F32, 0, 32}, {"y", 1, {8}, DS_F32, 32, 32}, {"x", 1, {8}, DS_F32, 64, 32}};
    expect_tensors_fail(3, dup, 256, DS_ERR_FORMAT, "appears twice");
    // Truncated tensor info (name then nothing).
    {
        buf b = {0};
        b_header(&b, 3, 1, 0);
        b_str(&b, "w"), b_u32(&b, 1), b_u64(&b, 8), b_u32(&b, DS_F32);
        b_zeros(&b, 7); // 32 bytes after the header (passes the count bound), cut in the offset
        expect_fail_buf(&b, DS_ERR_FORMAT, "reading tensor offset");
        b_free(&b);
    }
}

// Every byte of a small valid file replaced by a few values: open either succeeds or fails with a
// message naming the file; never a crash, an ASan report or a leak.
static void test_byte_mutations(void **state) {
    buf b = {0};
    b_header(&b, 3, 2, 3);
    b_kv(&b, "general.alignment", DS_GGUF_U32), b_u32(&b, 32);
    b_kv(&b, "s", DS_GGUF_ARRAY), b_arr_head(&b, DS_GGUF_STRING, 2), b_str(&b, "ab"), b_str(&b, "c");
    b_kv(&b, "n", DS_GGUF_ARRAY), b_arr_head(&b, DS_GGUF_ARRAY, 1), b_arr_head(&b, DS_GGUF_U16, 1), b_u16(&b, 9);
    uint64_t ne[2] = {32, 2};
    b_tensor(&b, "q", 2, ne, DS_Q8_0, 0);
    b_tensor(&b, "f", 1, ne, DS_F16, 96);
    b_pad(&b, 32);
    b_zeros(&b, 96 + 64);
    const uint8_t vals[] = {0x00, 0x01, 0x7F, 0x80, 0xFF};
    char path[1024];
    tmp_path(path, sizeof path, "mut");
    int n_ok = 0, n_fail = 0;
    for (size_t pos = 0; pos < b.n; pos++) {
        const uint8_t orig = b.p[pos];
        for (size_t k = 0; k < sizeof vals; k++) {
            b.p[pos] = vals[k];
            write_bytes(path, b.p, b.n);
            ds_gguf g;
            ds_status st = ds_gguf_open(&g, path);
            if (st == DS_OK) {
                n_ok++;
                for (uint64_t t = 0; t < g.n_tensors; t++) {
                    // Every accepted tensor lies inside the file.
                    const uint8_t *p = g.tensors[t].data;
                    assert_true(p >= g.map.data + g.data_offset && p + g.tensors[t].nbytes <= g.map.data + g.map.size);
                }
                ds_gguf_close(&g);
            } else {
                n_fail++;
                if (!strstr(ds_last_error(), path)) print_error("pos %zu val %u: '%s'\n", pos, vals[k], ds_last_error());
                assert_non_null(strstr(ds_last_error(), path));
            }
        }
        b.p[pos] = orig;
    }
    assert_true(n_ok > 0 && n_fail > 0);
    unlink(path);
    b_free(&b);
}

static void test_missing_file(void **state) {
    char path[1024];
    tmp_path(path, sizeof path, "nonexistent");
    ds_gguf g;
    assert_int_equal(ds_gguf_open(&g, path), DS_ERR_IO);
    assert_non_null(strstr(ds_last_error(), path));
    assert_null(g.kv);
    // A directory is not a GGUF file.
    assert_int_equal(ds_gguf_open(&g, g_tmp_base), DS_ERR_IO);
    assert_non_null(strstr(ds_last_error(), g_tmp_base));
}

// An empty file maps to a non-NULL pointer with size 0 (found by fuzz_gguf: readers did pointer
// arithmetic on the NULL of an empty mapping, which GCC's sanitizer does not report; clang's does).
static void test_empty_mapping(void **state) {
    char path[1024];
    tmp_path(path, sizeof path, "zero");
    write_bytes(path, "", 0);
    ds_mapfile m;
    assert_int_equal(ds_mapfile_open(&m, path), DS_OK);
    assert_non_null(m.data);
    assert_int_equal(m.size, 0);
    ds_mapfile_close(&m);
}

// A float array read as integers (token_type written as F32, found by fuzz_gguf): truncated and
// saturated, never an out-of-range conversion (undefined behaviour; the sanitizer build checks).
static void test_float_array_as_int(void **state) {
    const float f[] = {1e30f, -1e30f, NAN, -3.7f, 2.5f};
    const double d[] = {1e300, -9.3e18, NAN};
    ds_gguf_kv kv = {.type = DS_GGUF_ARRAY, .arr_type = DS_GGUF_F32, .arr_n = 5, .arr_data = (const uint8_t *)f};
    assert_true(ds_gguf_arr_i64(&kv, 0) == INT64_MAX);
    assert_true(ds_gguf_arr_i64(&kv, 1) == INT64_MIN);
    assert_true(ds_gguf_arr_i64(&kv, 2) == 0);
    assert_true(ds_gguf_arr_i64(&kv, 3) == -3);
    assert_true(ds_gguf_arr_i64(&kv, 4) == 2);
    kv.arr_type = DS_GGUF_F64;
    kv.arr_n = 3;
    kv.arr_data = (const uint8_t *)d;
    assert_true(ds_gguf_arr_i64(&kv, 0) == INT64_MAX);
    assert_true(ds_gguf_arr_i64(&kv, 1) == INT64_MIN);
    assert_true(ds_gguf_arr_i64(&kv, 2) == 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_float_array_as_int),
        cmocka_unit_test(test_empty_mapping),
        cmocka_unit_test(test_valid_v3),
        cmocka_unit_test(test_valid_v2),
        cmocka_unit_test(test_valid_trailing_bytes),
        cmocka_unit_test(test_valid_minimal),
        cmocka_unit_test(test_empty_file),
        cmocka_unit_test(test_bad_magic),
        cmocka_unit_test(test_bad_version),
        cmocka_unit_test(test_truncated_every_offset),
        cmocka_unit_test(test_truncated_position),
        cmocka_unit_test(test_huge_counts),
        cmocka_unit_test(test_huge_strings),
        cmocka_unit_test(test_huge_arrays),
        cmocka_unit_test(test_deep_nesting),
        cmocka_unit_test(test_unknown_types),
        cmocka_unit_test(test_bad_alignment),
        cmocka_unit_test(test_tensor_dims),
        cmocka_unit_test(test_unsupported_type),
        cmocka_unit_test(test_tensor_layout),
        cmocka_unit_test(test_byte_mutations),
        cmocka_unit_test(test_missing_file),
        cmocka_unit_test(test_duplicate_key),
    };
    return cmocka_run_group_tests(tests, setup_all, teardown_all);
}
