// Test tool: run our forward pass on given token ids and dump logits, taps and final hidden states
// for the Python references to compare (tests/reference/). Also tokenizes text.
//   ds_ref_dump MODEL --tokens 1,2,3 [--taps -1,0,2] [--chunks 2,1] [--junk 7,8] --out FILE
//   --junk: after every chunk but the last, feed these ids too (with logits and taps), then roll
//   them back with ds_kv_truncate: the dump must equal a run without them.
//   ds_ref_dump MODEL --tokenize TEXT
//   ds_ref_dump MODEL --last-of SEQS --out FILE   SEQS: one comma-separated id list per line; FILE:
//   int32 n_seqs, vocab, then f32 logits[n_seqs][vocab] of each sequence's last position (each
//   sequence alone, from an empty cache)
// Dump layout (little-endian): int32 n_rows, vocab, dim, n_taps; f32 logits[n_rows][vocab];
// f32 taps[n_rows][n_taps * dim]; f32 hidden[n_rows][dim].
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dspark.h"
#include "tool_util.h"

static int die(const char *what) {
    fprintf(stderr, "ds_ref_dump: %s: %s\n", what, ds_last_error());
    return 1;
}

// --last-of: the last position's logits of each line's ids, every sequence from an empty cache.
static int last_logits(ds_model *m, const char *seqs_path, const char *out) {
    const int V = ds_model_get_info(m)->vocab_size;
    FILE *in = fopen(seqs_path, "r"), *f = out ? fopen(out, "wb") : NULL;
    static char line[1 << 16];
    static int ids[1 << 13];
    float *logits = malloc(sizeof(float) * (size_t)V);
    ds_kv *kv;
    ds_workspace *ws;
    if (!in || !f || !logits) return die("open --last-of / --out");
    if (ds_kv_init(m, 1 << 13, &kv) || ds_workspace_init(m, &ws)) return die("init");
    int32_t hdr[2] = {0, V};
    fwrite(hdr, 4, 2, f);
    while (fgets(line, sizeof line, in)) {
        line[strcspn(line, "\r\n")] = 0;
        const int n = parse_list(line, ids, 1 << 13);
        if (n <= 0) continue;
        ds_kv_truncate(kv, 0);
        ds_forward_seq s = {.kv = kv, .tokens = ids, .n_tokens = n, .n_logits = 1, .logits = logits};
        if (ds_model_forward(m, ws, &s, 1)) return die("forward");
        fwrite(logits, 4, (size_t)V, f);
        hdr[0]++;
    }
    fseek(f, 0, SEEK_SET);
    fwrite(hdr, 4, 1, f);
    fclose(f);
    fclose(in);
    free(logits);
    ds_kv_free(kv);
    ds_workspace_free(ws);
    ds_model_free(m);
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: ds_ref_dump MODEL (--tokens IDS [--taps L] [--chunks N] [--junk IDS] [--kv-f16 1] --out FILE | "
                        "--tokenize TEXT)\n");
        return 2;
    }
    static int tokens[1 << 16], taps[64], chunks[1 << 16], junk[256];
    int n_tok = 0, n_taps = 0, n_chunks = 0, n_junk = 0;
    const char *out = NULL, *text = NULL, *last_of = NULL;
    ds_model_params mp = {0};
    for (int i = 2; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--tokens")) n_tok = parse_list(argv[i + 1], tokens, 1 << 16);
        else if (!strcmp(argv[i], "--taps")) n_taps = parse_list(argv[i + 1], taps, 64);
        else if (!strcmp(argv[i], "--chunks")) n_chunks = parse_list(argv[i + 1], chunks, 1 << 16);
        else if (!strcmp(argv[i], "--junk")) n_junk = parse_list(argv[i + 1], junk, 256);
        else if (!strcmp(argv[i], "--out")) out = argv[i + 1];
        else if (!strcmp(argv[i], "--tokenize")) text = argv[i + 1];
        else if (!strcmp(argv[i], "--last-of")) last_of = argv[i + 1];
        else if (!strcmp(argv[i], "--kv-f16")) mp.kv_f16 = atoi(argv[i + 1]);
        else {
            fprintf(stderr, "ds_ref_dump: unknown option %s\n", argv[i]);
            return 2;
        }
    }
    ds_model *m;
    if (ds_model_load(argv[1], &mp, &m)) return die("load");
    const ds_model_info *in = ds_model_get_info(m);
    if (text) {
        const ds_tokenizer *t = ds_model_tokenizer(m);
        int n = 0;
        if (!t) return die("no tokenizer");
        if (ds_tokenize(t, text, strlen(text), 1, tokens, 1 << 16, &n)) return die("tokenize");
        for (int i = 0; i < n; i++) printf(i ? ",%d" : "%d", tokens[i]);
        printf("\n");
        ds_model_free(m);
        return 0;
    }
    if (last_of) return last_logits(m, last_of, out);
    if (n_tok <= 0 || n_taps < 0 || n_chunks < 0 || n_junk < 0 || !out) {
        fprintf(stderr, "ds_ref_dump: bad --tokens/--taps/--chunks or missing --out\n");
        return 2;
    }
    if (n_chunks == 0) chunks[n_chunks++] = n_tok;
    const int V = in->vocab_size, D = in->dim;
    float *logits = malloc(sizeof(float) * (size_t)n_tok * V);
    float *tapv = malloc(sizeof(float) * (size_t)n_tok * (n_taps ? n_taps : 1) * D);
    float *hidden = malloc(sizeof(float) * (size_t)n_tok * D);
    ds_kv *kv;
    ds_workspace *ws;
    float *junk_out = malloc(sizeof(float) * (size_t)(n_junk ? n_junk : 1) * (V + (n_taps + 1) * D));
    if (ds_kv_init(m, n_tok + n_junk, &kv) || ds_workspace_init(m, &ws)) return die("init");
    int done = 0;
    for (int c = 0; c < n_chunks; c++) {
        if (chunks[c] <= 0 || done + chunks[c] > n_tok) {
            fprintf(stderr, "ds_ref_dump: chunks do not add up to the token count\n");
            return 2;
        }
        ds_forward_seq s = {.kv = kv, .tokens = tokens + done, .n_tokens = chunks[c], .n_logits = chunks[c],
                            .logits = logits + (size_t)done * V, .tap_layers = taps, .n_taps = n_taps,
                            .taps = n_taps ? tapv + (size_t)done * n_taps * D : NULL,
                            .hidden = hidden + (size_t)done * D};
        if (ds_model_forward(m, ws, &s, 1)) return die("forward");
        done += chunks[c];
        if (n_junk && c + 1 < n_chunks) { // rows that are fed and then rolled back
            float *jl = junk_out, *jt = jl + (size_t)n_junk * V, *jh = jt + (size_t)n_junk * n_taps * D;
            ds_forward_seq j = {.kv = kv, .tokens = junk, .n_tokens = n_junk, .n_logits = n_junk, .logits = jl,
                                .tap_layers = taps, .n_taps = n_taps, .taps = n_taps ? jt : NULL, .hidden = jh};
            if (ds_model_forward(m, ws, &j, 1)) return die("forward (junk)");
            if (ds_kv_truncate(kv, done)) return die("truncate");
        }
    }
    if (done != n_tok) {
        fprintf(stderr, "ds_ref_dump: chunks do not add up to the token count\n");
        return 2;
    }
    FILE *f = fopen(out, "wb");
    if (!f) return die("open output");
    int32_t hdr[4] = {n_tok, V, D, n_taps};
    fwrite(hdr, 4, 4, f);
    fwrite(logits, 4, (size_t)n_tok * V, f);
    fwrite(tapv, 4, (size_t)n_tok * n_taps * D, f);
    fwrite(hidden, 4, (size_t)n_tok * D, f);
    fclose(f);
    ds_kv_free(kv);
    ds_workspace_free(ws);
    ds_model_free(m);
    free(logits);
    free(tapv);
    free(hidden);
    free(junk_out);
    return 0;
}
