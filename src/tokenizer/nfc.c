// NFC as UAX #15 defines it: full canonical decomposition (Hangul algorithmically), canonical
// ordering of combining marks (a stable sort by combining class), then canonical composition
// (primary composites only, a mark blocked by an earlier mark of the same or higher class).
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "tokenizer/nfc.h"
#include "tokenizer/utf8.h"

#include "tokenizer/nfc_data.h"

enum { S_BASE = 0xAC00, L_BASE = 0x1100, V_BASE = 0x1161, T_BASE = 0x11A7, L_COUNT = 19, V_COUNT = 21, T_COUNT = 28 };
enum { N_COUNT = V_COUNT * T_COUNT, S_COUNT = L_COUNT * N_COUNT };

static int ccc(uint32_t cp) {
    if (cp < 0x300) return 0;
    size_t lo = 0, hi = sizeof k_ccc / sizeof k_ccc[0];
    while (lo < hi) {
        size_t m = (lo + hi) / 2;
        if (k_ccc[m][0] == cp) return (int)k_ccc[m][1];
        if (k_ccc[m][0] < cp) lo = m + 1;
        else hi = m;
    }
    return 0;
}

static const uint32_t *decomposition(uint32_t cp, int *n) {
    size_t lo = 0, hi = sizeof k_dec / sizeof k_dec[0];
    while (lo < hi) {
        size_t m = (lo + hi) / 2;
        if (k_dec[m][0] == cp) {
            *n = (int)k_dec[m][2];
            return k_dec_pool + k_dec[m][1];
        }
        if (k_dec[m][0] < cp) lo = m + 1;
        else hi = m;
    }
    return NULL;
}

static int is_second(uint32_t cp) {
    if ((cp >= V_BASE && cp < V_BASE + V_COUNT) || (cp > T_BASE && cp < T_BASE + T_COUNT)) return 1; // Hangul jamo
    size_t lo = 0, hi = sizeof k_second / sizeof k_second[0];
    while (lo < hi) {
        size_t m = (lo + hi) / 2;
        if (k_second[m] == cp) return 1;
        if (k_second[m] < cp) lo = m + 1;
        else hi = m;
    }
    return 0;
}

// A conservative NFC_Quick_Check: a text whose every character is a starter that neither
// decomposes nor can be the second of a composition is unchanged by NFC (decomposition is the
// identity, there is nothing to reorder and nothing to compose). Anything else takes the full path.
int ds_nfc_quick_check(const char *s, size_t n) {
    for (size_t i = 0; i < n;) {
        const uint8_t *u = (const uint8_t *)s + i;
        if (u[0] < 0xCC) { // below U+0300
            i++;
            continue;
        }
        int l = ds_utf8_seq_len(u[0]);
        if (l < 2 || (size_t)l > n - i) return 0;
        uint32_t c = l == 2 ? (uint32_t)(u[0] & 31) << 6 | (u[1] & 63)
                   : l == 3 ? (uint32_t)(u[0] & 15) << 12 | (uint32_t)(u[1] & 63) << 6 | (u[2] & 63)
                            : (uint32_t)(u[0] & 7) << 18 | (uint32_t)(u[1] & 63) << 12 | (uint32_t)(u[2] & 63) << 6 | (u[3] & 63);
        i += (size_t)l;
        if (c >= 0x4E00 && c <= 0x9FFF) continue; // CJK unified ideographs: none decompose or combine
        int dn;
        if (ccc(c) != 0 || is_second(c) || (c >= S_BASE && c < S_BASE + S_COUNT ? 0 : decomposition(c, &dn) != NULL)) return 0;
    }
    return 1;
}

static uint32_t compose(uint32_t a, uint32_t b) {
    if (a >= L_BASE && a < L_BASE + L_COUNT && b >= V_BASE && b < V_BASE + V_COUNT)
        return S_BASE + ((a - L_BASE) * V_COUNT + (b - V_BASE)) * T_COUNT;
    if (a >= S_BASE && a < S_BASE + S_COUNT && (a - S_BASE) % T_COUNT == 0 && b > T_BASE && b < T_BASE + T_COUNT)
        return a + (b - T_BASE);
    size_t lo = 0, hi = sizeof k_comp / sizeof k_comp[0];
    while (lo < hi) {
        size_t m = (lo + hi) / 2;
        if (k_comp[m][0] == a && k_comp[m][1] == b) return k_comp[m][2];
        if (k_comp[m][0] < a || (k_comp[m][0] == a && k_comp[m][1] < b)) lo = m + 1;
        else hi = m;
    }
    return 0;
}

ds_status ds_nfc(const char *s, size_t n, char **buf, size_t *cap, size_t *out_n) {
    // Code points: at most 4 per input byte after decomposition (the longest full decomposition
    // is 4 code points and takes at least 2 bytes; Hangul: 3 code points from 3 bytes).
    uint32_t *cp = malloc((2 * n + 4) * sizeof *cp);
    size_t ncp = 0;
    if (!cp) return ds_fail(DS_ERR_NOMEM, "tokenize: out of memory");
    for (size_t i = 0; i < n;) {
        const uint8_t *u = (const uint8_t *)s + i;
        int l = ds_utf8_seq_len(u[0]);
        uint32_t c = l == 1 ? u[0]
                   : l == 2 ? (uint32_t)(u[0] & 31) << 6 | (u[1] & 63)
                   : l == 3 ? (uint32_t)(u[0] & 15) << 12 | (uint32_t)(u[1] & 63) << 6 | (u[2] & 63)
                            : (uint32_t)(u[0] & 7) << 18 | (uint32_t)(u[1] & 63) << 12 | (uint32_t)(u[2] & 63) << 6 | (u[3] & 63);
        i += (size_t)(l ? l : 1);
        int dn;
        const uint32_t *d;
        if (c >= S_BASE && c < S_BASE + S_COUNT) {
            uint32_t si = c - S_BASE;
            cp[ncp++] = L_BASE + si / N_COUNT;
            cp[ncp++] = V_BASE + (si % N_COUNT) / T_COUNT;
            if (si % T_COUNT) cp[ncp++] = T_BASE + si % T_COUNT;
        } else if (c >= 0xC0 && (d = decomposition(c, &dn))) {
            for (int k = 0; k < dn; k++) cp[ncp++] = d[k];
        } else {
            cp[ncp++] = c;
        }
    }
    // Canonical ordering: insertion sort inside each run of non-starters (stable).
    for (size_t i = 1; i < ncp; i++) {
        int c = ccc(cp[i]);
        if (c == 0) continue;
        for (size_t j = i; j > 0 && ccc(cp[j - 1]) > c; j--) {
            uint32_t x = cp[j];
            cp[j] = cp[j - 1];
            cp[j - 1] = x;
        }
    }
    // Composition.
    size_t o = 0;
    if (ncp > 0) {
        size_t starter = 0;
        int have_starter = ccc(cp[0]) == 0, last = have_starter ? 0 : 256;
        o = 1;
        for (size_t i = 1; i < ncp; i++) {
            uint32_t c = cp[i];
            int cc = ccc(c);
            uint32_t comp = have_starter ? compose(cp[starter], c) : 0;
            if (comp && (last < cc || last == 0)) {
                cp[starter] = comp;
                continue;
            }
            if (cc == 0) {
                starter = o;
                have_starter = 1;
            }
            last = cc;
            cp[o++] = c;
        }
    }
    size_t need = 4 * o + 1;
    if (need > *cap) {
        char *nb = realloc(*buf, need);
        if (!nb) return free(cp), ds_fail(DS_ERR_NOMEM, "tokenize: out of memory");
        *buf = nb;
        *cap = need;
    }
    size_t m = 0;
    for (size_t i = 0; i < o; i++) {
        uint32_t c = cp[i];
        char *b = *buf + m;
        if (c < 0x80) b[0] = (char)c, m += 1;
        else if (c < 0x800) b[0] = (char)(0xC0 | c >> 6), b[1] = (char)(0x80 | (c & 63)), m += 2;
        else if (c < 0x10000)
            b[0] = (char)(0xE0 | c >> 12), b[1] = (char)(0x80 | (c >> 6 & 63)), b[2] = (char)(0x80 | (c & 63)), m += 3;
        else
            b[0] = (char)(0xF0 | c >> 18), b[1] = (char)(0x80 | (c >> 12 & 63)), b[2] = (char)(0x80 | (c >> 6 & 63)),
            b[3] = (char)(0x80 | (c & 63)), m += 4;
    }
    free(cp);
    *out_n = m;
    return DS_OK;
}
