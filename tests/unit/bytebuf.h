// Unit-test helper: a growable byte buffer for writing test files byte by byte, with explicit
// little-endian integers (independent of the code under test). Include after <cmocka.h>.
#ifndef DS_TESTS_BYTEBUF_H
#define DS_TESTS_BYTEBUF_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    uint8_t *p;
    size_t n, cap;
} buf;

static inline void b_bytes(buf *b, const void *p, size_t n) {
    if (b->n + n > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n) cap *= 2;
        b->p = realloc(b->p, cap);
        assert_non_null(b->p);
        b->cap = cap;
    }
    if (n) memcpy(b->p + b->n, p, n);
    b->n += n;
}

static inline void b_free(buf *b) {
    free(b->p);
    memset(b, 0, sizeof *b);
}

static inline void b_u32(buf *b, uint32_t v) {
    uint8_t x[4] = {(uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16), (uint8_t)(v >> 24)};
    b_bytes(b, x, 4);
}

static inline void b_u64(buf *b, uint64_t v) {
    b_u32(b, (uint32_t)v);
    b_u32(b, (uint32_t)(v >> 32));
}

#endif
