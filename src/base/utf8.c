#include "base/utf8.h"

#include <stdio.h>
#include <string.h>

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

// The length of the valid character at s[0..n), or 0 when the bytes there do not start one.
static size_t valid_char(const uint8_t *s, size_t n) {
    const int len = ds_utf8_seq_len(s[0]);
    if (len == 0 || (size_t)len > n) return 0;
    for (int k = 1; k < len; k++) {
        uint8_t lo, hi;
        ds_utf8_cont_range(s[0], k, &lo, &hi);
        if (s[k] < lo || s[k] > hi) return 0;
    }
    return (size_t)len;
}

size_t ds_text_escape(char *dst, size_t cap, const char *src, size_t n) {
    if (!cap) return 0;
    const uint8_t *s = (const uint8_t *)src;
    size_t o = 0;
    for (size_t i = 0; i < n;) {
        char esc[5];
        const char *piece;
        size_t len, take;
        const uint8_t c = s[i];
        if (c >= 0x20 && c < 0x7f) {
            piece = (const char *)s + i, len = take = 1;
        } else if (c >= 0x80 && (take = valid_char(s + i, n - i))) {
            piece = (const char *)s + i, len = take;
        } else {
            if (c == '\n') memcpy(esc, "\\n", 3);
            else if (c == '\r') memcpy(esc, "\\r", 3);
            else if (c == '\t') memcpy(esc, "\\t", 3);
            else snprintf(esc, sizeof esc, "\\x%02X", c);
            piece = esc, len = strlen(esc), take = 1;
        }
        if (o + len + 1 > cap) break;
        memcpy(dst + o, piece, len);
        o += len;
        i += take;
    }
    dst[o] = 0;
    return o;
}
