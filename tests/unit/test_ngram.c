// Prompt-lookup drafting (src/speculate/ngram.c) against a brute-force reference written from its
// contract: for n = min(n_max, len - 1) down to 1, the latest start j < len - n whose n tokens equal
// the last n tokens of the history; the proposal is what follows that occurrence (at most k tokens,
// possibly running into the key itself); nothing when no length matches.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "speculate/ngram.h"

static int reference(const int32_t *h, int len, int n_max, int k, int32_t *out) {
    for (int n = n_max; n >= 1; n--) {
        if (n > len - 1) continue;
        int best = -1;
        for (int j = 0; j + n < len; j++) { // every earlier occurrence; keep the latest
            int eq = 1;
            for (int i = 0; i < n && eq; i++) eq = h[j + i] == h[len - n + i];
            if (eq) best = j;
        }
        if (best < 0) continue;
        int m = 0;
        for (int p = best + n; p < len && m < k; p++) out[m++] = h[p];
        return m;
    }
    return 0;
}

static void test_examples(void **state) {
    (void)state;
    int32_t out[8];
    const int32_t a[] = {1, 2, 3, 4, 1, 2}; // "1 2" occurred at 0: propose 3 4 1 2 (capped at k)
    assert_int_equal(ds_ngram_propose(a, 6, 3, 3, out), 3);
    assert_int_equal(out[0], 3);
    assert_int_equal(out[1], 4);
    assert_int_equal(out[2], 1);
    const int32_t b[] = {5, 6, 7}; // nothing repeats
    assert_int_equal(ds_ngram_propose(b, 3, 3, 4, out), 0);
    const int32_t c[] = {9, 9, 9, 9}; // the match overlaps the key: it may propose the key's own tokens
    assert_int_equal(ds_ngram_propose(c, 4, 3, 4, out), 1);
    assert_int_equal(out[0], 9);
    const int32_t d[] = {1, 2, 8, 1, 2, 9, 2}; // no "1 2"-suffix: "2" matched latest at 4, then 9, 2
    assert_int_equal(ds_ngram_propose(d, 7, 3, 4, out), 2);
    assert_int_equal(out[0], 9);
    assert_int_equal(out[1], 2);
    assert_int_equal(ds_ngram_propose(d, 1, 3, 4, out), 0); // one token: no earlier occurrence possible
}

static void test_random_against_reference(void **state) {
    (void)state;
    uint64_t x = 0x9E3779B97F4A7C15ull;
    for (int trial = 0; trial < 20000; trial++) {
        int32_t h[40], got[16], want[16];
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        const int len = 1 + (int)((x >> 33) % 40), alphabet = 2 + (int)((x >> 20) % 4);
        const int n_max = 1 + (int)((x >> 10) % 5), k = 1 + (int)((x >> 5) % 16);
        for (int i = 0; i < len; i++) {
            x = x * 6364136223846793005ull + 1442695040888963407ull;
            h[i] = (int32_t)((x >> 40) % (uint64_t)alphabet);
        }
        const int ng = ds_ngram_propose(h, len, n_max, k, got), nw = reference(h, len, n_max, k, want);
        assert_int_equal(ng, nw);
        assert_memory_equal(got, want, sizeof(int32_t) * (size_t)nw);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_examples), cmocka_unit_test(test_random_against_reference)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
