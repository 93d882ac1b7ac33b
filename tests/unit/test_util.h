// Shared by the unit tests: a deterministic random stream, float <-> bit-pattern views, and a
// malloc that fails the test. Define TEST_RNG_SEED before including to pick the stream's seed.
#ifndef DS_TESTS_TEST_UTIL_H
#define DS_TESTS_TEST_UTIL_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#ifndef TEST_RNG_SEED
#define TEST_RNG_SEED 0x9E3779B97F4A7C15ull
#endif

// xorshift64: the same numbers on every machine.
static uint64_t g_rng = TEST_RNG_SEED;
static uint64_t rnd_u64(void) {
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return g_rng;
}
// Uniform in [-1, 1).
static float rnd_unit(void) { return (float)((double)(rnd_u64() >> 11) / 9007199254740992.0 * 2.0 - 1.0); }

static float bits_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static uint32_t f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static void *xmalloc(size_t n) {
    void *p = malloc(n ? n : 1);
    assert_non_null(p);
    return p;
}

#endif
