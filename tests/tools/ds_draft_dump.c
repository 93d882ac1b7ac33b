// Test tool: run our drafter on given tap rows and dump every drafted block for the PyTorch
// reference (tests/reference/test_drafter_parity.py).
//   ds_draft_dump TARGET DRAFTER --taps-in FILE --chunks 5,3 --anchors 17,42 --out FILE
// For each i: append the next chunks[i] tap rows to the draft context, then draft a full block
// (greedy) after anchors[i]. Output (little-endian): int32 n_drafts, block, vocab; per draft:
// int32 tokens[block], f32 logits[block][vocab], f32 conf[block].
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dspark.h"
#include "tool_util.h"

static int die(const char *what) {
    fprintf(stderr, "ds_draft_dump: %s: %s\n", what, ds_last_error());
    return 1;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: ds_draft_dump TARGET DRAFTER --taps-in FILE --chunks N,.. --anchors A,.. --out FILE\n");
        return 2;
    }
    int chunks[256], anchors[256], n_chunks = 0, n_anchors = 0;
    const char *taps_in = NULL, *out = NULL;
    for (int i = 3; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--taps-in")) taps_in = argv[i + 1];
        else if (!strcmp(argv[i], "--chunks")) n_chunks = parse_list(argv[i + 1], chunks, 256);
        else if (!strcmp(argv[i], "--anchors")) n_anchors = parse_list(argv[i + 1], anchors, 256);
        else if (!strcmp(argv[i], "--out")) out = argv[i + 1];
        else {
            fprintf(stderr, "ds_draft_dump: unknown option %s\n", argv[i]);
            return 2;
        }
    }
    ds_model *m;
    ds_drafter *d;
    if (ds_model_load(argv[1], NULL, &m)) return die("target");
    if (ds_drafter_load(argv[2], m, &d)) return die("drafter");
    if (!taps_in || !out || n_chunks <= 0 || n_chunks != n_anchors) {
        fprintf(stderr, "ds_draft_dump: need --taps-in, --out and as many --chunks as --anchors\n");
        return 2;
    }
    const ds_drafter_info *in = ds_drafter_get_info(d);
    const size_t row = (size_t)in->n_taps * in->hidden;
    int total = 0;
    for (int i = 0; i < n_chunks; i++) total += chunks[i];
    float *taps = malloc(sizeof(float) * row * (size_t)(total ? total : 1));
    FILE *f = fopen(taps_in, "rb");
    if (!f || fread(taps, sizeof(float) * row, (size_t)total, f) != (size_t)total) {
        fprintf(stderr, "ds_draft_dump: %s: cannot read %d tap rows of %zu floats\n", taps_in, total, row);
        return 1;
    }
    fclose(f);
    const int B = in->block_size, V = in->vocab;
    ds_draft_state *s;
    if (ds_draft_state_init(d, total + 1, &s)) return die("state");
    FILE *o = fopen(out, "wb");
    if (!o) return die("output");
    int32_t hdr[3] = {n_chunks, B, V};
    fwrite(hdr, 4, 3, o);
    int32_t *tok = malloc(sizeof(int32_t) * B);
    float *logits = malloc(sizeof(float) * (size_t)B * V), *conf = malloc(sizeof(float) * B);
    ds_sampler_params sp = ds_sampler_default();
    ds_rng rng = ds_rng_init(0, 0);
    int done = 0;
    for (int i = 0; i < n_chunks; i++) {
        if (ds_drafter_append(d, s, taps + row * done, chunks[i])) return die("append");
        done += chunks[i];
        if (ds_drafter_draft(d, s, anchors[i], B, &sp, &rng, tok, logits, conf)) return die("draft");
        fwrite(tok, 4, (size_t)B, o);
        fwrite(logits, 4, (size_t)B * V, o);
        fwrite(conf, 4, (size_t)B, o);
    }
    fclose(o);
    ds_draft_state_free(s);
    ds_drafter_free(d);
    ds_model_free(m);
    free(taps), free(tok), free(logits), free(conf);
    return 0;
}
