// src/model/kvcache.h: the transposed K/V cache the target and the drafter share, of floats or of
// halves. A row put at column j is read back at column j of every (head, dim) line (a half cache
// reads back each value rounded to the nearest half, ties to even); growing keeps the first len
// columns of every line exactly (and nothing else is promised); the capacity doubles from 256 and
// stops at the limit; a layer without lines (KV-shared) holds nothing; a saved copy loads back into
// an empty cache exactly; moving tree columns keeps the chosen ones.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>

#include "kernels/half.h"
#include "model/kvcache.h"

// The value of line i, column j of layer l (K; V is its negation): a hash, most values not halves.
static float cell(int l, int i, int j) {
    const uint32_t h = (uint32_t)l * 73856093u ^ (uint32_t)i * 19349663u ^ (uint32_t)j * 83492791u;
    return (float)(h % 200001u) / 3.0f - 33333.0f;
}

// What the cache reads back for x.
static float stored(const ds_kvcache *c, float x) { return c->f16 ? ds_f16_to_f32(ds_f32_to_f16(x)) : x; }

// Element j of a line.
static float at(const ds_kvcache *c, const void *line, size_t j) {
    return c->f16 ? ds_f16_to_f32(((const uint16_t *)line)[j]) : ((const float *)line)[j];
}

static void put_rows(ds_kvcache *c, int from, int to) {
    for (int j = from; j < to; j++)
        for (int l = 0; l < c->n_layers; l++) {
            if (!c->lines[l]) continue;
            float k[64], v[64];
            for (int i = 0; i < c->lines[l]; i++) k[i] = cell(l, i, j), v[i] = -cell(l, i, j);
            ds_kvcache_put(c, l, j, k, v);
        }
    c->len = to;
}

// Columns [0, len) hold the rows put at columns col(j) (NULL: j).
static void check_rows(const ds_kvcache *c, int head_dim, const int *col) {
    for (int l = 0; l < c->n_layers; l++) {
        if (!c->lines[l]) {
            assert_null(c->k[l]);
            assert_null(c->v[l]);
            continue;
        }
        for (int h = 0; h < c->lines[l] / head_dim; h++) {
            const void *K = ds_kvcache_k(c, l, h, head_dim), *V = ds_kvcache_v(c, l, h, head_dim);
            for (int d = 0; d < head_dim; d++)
                for (int j = 0; j < c->len; j++) {
                    const int i = h * head_dim + d, src = col ? col[j] : j;
                    assert_true(at(c, K, (size_t)d * c->cap + j) == stored(c, cell(l, i, src)));
                    assert_true(at(c, V, (size_t)d * c->cap + j) == stored(c, -cell(l, i, src)));
                }
        }
    }
}

static void grow_keeps_columns(int f16) {
    const int lines[3] = {2 * 4, 0, 3 * 4}; // head_dim 4: 2 kv heads, a shared layer, 3 kv heads
    ds_kvcache c;
    assert_int_equal(ds_kvcache_init(&c, 3, lines, 1000, f16), DS_OK);
    assert_int_equal(c.cap, 0);
    assert_int_equal(ds_kvcache_reserve(&c, 10), DS_OK);
    assert_int_equal(c.cap, 256);
    put_rows(&c, 0, 200);
    check_rows(&c, 4, NULL);
    assert_int_equal(ds_kvcache_reserve(&c, 300), DS_OK); // 256 -> 512, the 200 columns re-laid
    assert_int_equal(c.cap, 512);
    check_rows(&c, 4, NULL);
    put_rows(&c, 200, 512);
    assert_int_equal(ds_kvcache_reserve(&c, 513), DS_OK); // would be 1024: stops at the limit
    assert_int_equal(c.cap, 1000);
    check_rows(&c, 4, NULL);
    assert_int_equal(ds_kvcache_reserve(&c, 700), DS_OK); // room already: nothing moves
    assert_int_equal(c.cap, 1000);
    c.len = 100; // a truncation: the first columns stay
    put_rows(&c, 100, 1000);
    check_rows(&c, 4, NULL);
    ds_kvcache_free(&c);
}

static void test_grow_keeps_columns(void **state) {
    (void)state;
    grow_keeps_columns(0);
    grow_keeps_columns(1);
}

// Save 300 rows, load them into an empty cache (from a copy of 300 rows, taking 290), move tree rows.
static void save_load_move(int f16) {
    const int lines[2] = {2 * 4, 4};
    ds_kvcache a, b;
    assert_int_equal(ds_kvcache_init(&a, 2, lines, 1000, f16), DS_OK);
    assert_int_equal(ds_kvcache_init(&b, 2, lines, 1000, f16), DS_OK);
    assert_int_equal(ds_kvcache_row_bytes(&a), (size_t)(2 * 12) * (f16 ? 2 : 4));
    assert_int_equal(ds_kvcache_reserve(&a, 300), DS_OK);
    put_rows(&a, 0, 300);
    void *copy = malloc(300 * ds_kvcache_row_bytes(&a));
    ds_kvcache_save(&a, 300, copy);
    assert_int_equal(ds_kvcache_load(&b, copy, 300, 290), DS_OK);
    assert_int_equal(b.len, 290);
    check_rows(&b, 4, NULL);
    // A tree fed at column 280: keep its rows 1, 4, 5 (columns 281, 284, 285) at 280, 281, 282.
    const int src[3] = {281, 284, 285};
    ds_kvcache_move(&b, 280, src, 3);
    b.len = 283;
    int col[283];
    for (int j = 0; j < 283; j++) col[j] = j < 280 ? j : src[j - 280];
    check_rows(&b, 4, col);
    free(copy);
    ds_kvcache_free(&a);
    ds_kvcache_free(&b);
}

static void test_save_load_move(void **state) {
    (void)state;
    save_load_move(0);
    save_load_move(1);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_grow_keeps_columns),
        cmocka_unit_test(test_save_load_move),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
