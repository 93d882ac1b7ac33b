// Tokenizer load time and encode/decode throughput.
//
//   bench_tokenizer TOKENIZER [--kib N] [--repeats R]
//
// TOKENIZER: tokenizer.json, a directory holding one, or a GGUF file. The text is a mixed corpus
// (English prose, code, CJK, emoji, numbers, whitespace runs) repeated to N KiB (default 256).
// Prints one JSON object: load_ms, encode MB/s and tokens/s, streaming-decode MB/s (ds_detok, one
// id at a time), each the median of R runs (default 5), and the baseline measured in the same run:
// a UTF-8 validation pass over the same text (ds_tokenize's own first step), so
// encode_vs_utf8_scan says how many times slower than reading the text once encoding is.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_util.h"
#include "dspark.h"
#include "tokenizer/utf8.h"

static const char k_chunk[] =
    "The quick brown fox jumps over the lazy dog; it wasn't the first time, and it won't be the last. "
    "def main(argv):\n    for i in range(1234567):\n        total += i * 2  # accumulate\n    return total\n\n"
    "日本語のテキストと中文文本，还有한국어. Emoji: 🙂🚀👨‍👩‍👧 and café naïve résumé.\n"
    "Numbers 3.14159, 2,718,281 and 2024-11-29;      lots   of\t\twhitespace\r\n";

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: bench_tokenizer TOKENIZER [--kib N] [--repeats R]\n");
        return 2;
    }
    long kib = 256, reps = 5;
    for (int i = 2; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--kib")) kib = atol(argv[i + 1]);
        else if (!strcmp(argv[i], "--repeats")) reps = atol(argv[i + 1]);
    }
    if (kib < 1 || reps < 1) return 2;
    double t0 = bench_now();
    ds_tokenizer *t;
    if (ds_tokenizer_load(argv[1], &t)) {
        fprintf(stderr, "bench_tokenizer: %s\n", ds_last_error());
        return 1;
    }
    const double load_ms = (bench_now() - t0) * 1e3;
    size_t len = 0, cap = (size_t)kib * 1024 + sizeof k_chunk;
    char *text = malloc(cap);
    while (len + sizeof k_chunk - 1 <= (size_t)kib * 1024) memcpy(text + len, k_chunk, sizeof k_chunk - 1), len += sizeof k_chunk - 1;
    int n = 0;
    ds_tokenize_ex(t, text, len, DS_TOK_PARSE_SPECIAL, NULL, 0, &n);
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)n);
    char *out = malloc(4 * len + 64);
    double *te = malloc(sizeof(double) * (size_t)reps), *td = malloc(sizeof(double) * (size_t)reps),
           *tu = malloc(sizeof(double) * (size_t)reps);
    volatile int sink = 0;
    for (long r = 0; r < reps; r++) {
        double a = bench_now();
        sink += ds_utf8_valid((const uint8_t *)text, len, NULL);
        double b = bench_now();
        ds_tokenize_ex(t, text, len, DS_TOK_PARSE_SPECIAL, ids, n, &n);
        double c = bench_now();
        ds_detok d;
        ds_detok_init(&d, t, 0);
        size_t o = 0;
        for (int i = 0; i < n; i++) {
            int m = ds_detok_push(&d, ids[i], out + o, 64);
            o += (size_t)(m > 0 ? m : 0);
        }
        double e = bench_now();
        tu[r] = b - a, te[r] = c - b, td[r] = e - c;
    }
    qsort(tu, (size_t)reps, sizeof *tu, bench_cmp_double);
    qsort(te, (size_t)reps, sizeof *te, bench_cmp_double);
    qsort(td, (size_t)reps, sizeof *td, bench_cmp_double);
    const double u = tu[reps / 2], e = te[reps / 2], d = td[reps / 2];
    printf("{\"tokenizer\": \"%s\", \"text_bytes\": %zu, \"tokens\": %d, \"load_ms\": %.1f, \"encode_mb_s\": %.2f, "
           "\"encode_tok_s\": %.0f, \"decode_mb_s\": %.2f, \"utf8_scan_mb_s\": %.1f, \"encode_vs_utf8_scan\": %.1f}\n",
           argv[1], len, n, load_ms, len / e / 1e6, n / e, len / d / 1e6, len / u / 1e6, e / u);
    free(text), free(ids), free(out), free(te), free(td), free(tu);
    ds_tokenizer_free(t);
    return sink < 0;
}
