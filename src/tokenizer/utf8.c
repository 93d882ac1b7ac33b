#include "tokenizer/utf8.h"

int ds_utf8_seq_len(uint8_t lead) {
    if (lead < 0x80) return 1;
    if (lead < 0xC2) return 0; // continuation byte, or C0/C1 (always overlong)
    if (lead < 0xE0) return 2;
    if (lead < 0xF0) return 3;
    if (lead < 0xF5) return 4;
    return 0;
}

void ds_utf8_cont_range(uint8_t lead, int pos, uint8_t *lo, uint8_t *hi) {
    *lo = 0x80;
    *hi = 0xBF;
    if (pos != 1) return;
    switch (lead) {
    case 0xE0: *lo = 0xA0; break; // overlong below U+0800
    case 0xED: *hi = 0x9F; break; // surrogates U+D800..DFFF
    case 0xF0: *lo = 0x90; break; // overlong below U+10000
    case 0xF4: *hi = 0x8F; break; // above U+10FFFF
    default: break;
    }
}

int ds_utf8_valid(const uint8_t *s, size_t n, size_t *bad_off) {
    size_t i = 0;
    while (i < n) {
        uint8_t c = s[i];
        if (c < 0x80) { // fast path for ASCII
            i++;
            continue;
        }
        int len = ds_utf8_seq_len(c);
        if (len == 0 || (size_t)len > n - i) goto bad;
        for (int k = 1; k < len; k++) {
            uint8_t lo, hi;
            ds_utf8_cont_range(c, k, &lo, &hi);
            if (s[i + k] < lo || s[i + k] > hi) goto bad;
        }
        i += (size_t)len;
        continue;
    bad:
        if (bad_off) *bad_off = i;
        return 0;
    }
    return 1;
}
