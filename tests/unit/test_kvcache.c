// src/model/kvcache.h: the transposed K/V cache the target and the drafter share. A row put at column
// j is read back at column j of every (head, dim) line; growing keeps the first len columns of
// every line exactly (and nothing else is promised); the capacity doubles from 256 and stops at the
// limit; a layer without lines (KV-shared) holds nothing.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "model/kvcache.h"

// The value of line i, column j of layer l (K; V is its negation): distinct for every cell.
static float cell(int l, int i, int j) { return (float)(l * 100000 + i * 1000 + j) + 0.25f; }

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

static void check_rows(const ds_kvcache *c, int head_dim) {
    for (int l = 0; l < c->n_layers; l++) {
        if (!c->lines[l]) {
            assert_null(c->k[l]);
            assert_null(c->v[l]);
            continue;
        }
        for (int h = 0; h < c->lines[l] / head_dim; h++) {
            const float *K = ds_kvcache_k(c, l, h, head_dim), *V = ds_kvcache_v(c, l, h, head_dim);
            for (int d = 0; d < head_dim; d++)
                for (int j = 0; j < c->len; j++) {
                    const int i = h * head_dim + d;
                    assert_true(K[(size_t)d * c->cap + j] == cell(l, i, j));
                    assert_true(V[(size_t)d * c->cap + j] == -cell(l, i, j));
                }
        }
    }
}

static void test_grow_keeps_columns(void **state) {
    (void)state;
    const int lines[3] = {2 * 4, 0, 3 * 4}; // head_dim 4: 2 kv heads, a shared layer, 3 kv heads
    ds_kvcache c;
    assert_int_equal(ds_kvcache_init(&c, 3, lines, 1000), DS_OK);
    assert_int_equal(c.cap, 0);
    assert_int_equal(ds_kvcache_reserve(&c, 10), DS_OK);
    assert_int_equal(c.cap, 256);
    put_rows(&c, 0, 200);
    check_rows(&c, 4);
    assert_int_equal(ds_kvcache_reserve(&c, 300), DS_OK); // 256 -> 512, the 200 columns re-laid
    assert_int_equal(c.cap, 512);
    check_rows(&c, 4);
    put_rows(&c, 200, 512);
    assert_int_equal(ds_kvcache_reserve(&c, 513), DS_OK); // would be 1024: stops at the limit
    assert_int_equal(c.cap, 1000);
    check_rows(&c, 4);
    assert_int_equal(ds_kvcache_reserve(&c, 700), DS_OK); // room already: nothing moves
    assert_int_equal(c.cap, 1000);
    c.len = 100; // a truncation: the first columns stay
    put_rows(&c, 100, 1000);
    check_rows(&c, 4);
    ds_kvcache_free(&c);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_grow_keeps_columns),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
