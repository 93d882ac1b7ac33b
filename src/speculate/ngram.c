#include "speculate/ngram.h"

#include <string.h>

int ds_ngram_propose(const int32_t *hist, int len, int n_max, int k, int32_t *out) {
    for (int n = n_max < len - 1 ? n_max : len - 1; n >= 1; n--) {
        const int32_t *key = hist + len - n;
        // latest start j whose match ends before the key itself (so something follows it)
        for (int j = len - n - 1; j >= 0; j--) {
            if (memcmp(hist + j, key, sizeof(int32_t) * (size_t)n) != 0) continue;
            int m = len - (j + n);
            if (m > k) m = k;
            memcpy(out, hist + j + n, sizeof(int32_t) * (size_t)m);
            return m;
        }
    }
    return 0;
}
