// Unit-test helper: stories260K (from $DSPARK_SHARED, or ../shared) on one thread, a fresh drafter
// paired with it, and draft contexts from real target taps.
#ifndef DS_TESTS_STORIES_H
#define DS_TESTS_STORIES_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "dspark.h"

// Loads stories260K into *m with the given parameters; 0 on success, -1 after printing why.
static inline int stories_load_with(ds_model **m, const ds_model_params *mp) {
    char path[4096];
    const char *shared = getenv("DSPARK_SHARED");
    snprintf(path, sizeof path, "%s/models/stories260K/stories260K.gguf", shared ? shared : "../shared");
    if (ds_model_load(path, mp, m) != DS_OK) {
        fprintf(stderr, "cannot load %s: %s\n", path, ds_last_error());
        return -1;
    }
    return 0;
}

// Loads stories260K into *m on one thread; 0 on success, -1 after printing why (cmocka setup convention).
static inline int stories_load(ds_model **m) {
    const ds_model_params mp = {.n_threads = 1};
    return stories_load_with(m, &mp);
}

// Loads stories260K and a freshly initialized drafter of n_layers layers (markov rank 16, `seed`),
// written to "<$DSPARK_TMP or /tmp>/<tag>_<pid>" and removed once loaded; 0 or -1.
static inline int stories_load_with_drafter(const char *tag, int n_layers, uint64_t seed, ds_model **m,
                                            ds_drafter **d) {
    char dir[4096];
    const char *tmp = getenv("DSPARK_TMP");
    snprintf(dir, sizeof dir, "%s/%s_%ld", tmp ? tmp : "/tmp", tag, (long)getpid());
    if (stories_load(m)) return -1;
    ds_drafter_init_params p = ds_drafter_init_default();
    p.n_layers = n_layers;
    p.markov_rank = 16;
    p.seed = seed;
    if (ds_drafter_init_write(*m, &p, dir) || ds_drafter_load(dir, *m, d)) {
        fprintf(stderr, "%s\n", ds_last_error());
        return -1;
    }
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    return system(cmd) == 0 ? 0 : -1;
}

// A draft context of n (<= 64) rows for d: the tap rows of a real forward of m over the tokens
// (i * 37 + seed * 11 + 1) % 512, appended to a fresh draft state of 128 rows; NULL on failure.
static inline ds_draft_state *stories_draft_context(ds_model *m, const ds_drafter *d, int n, int seed) {
    const ds_drafter_info *di = ds_drafter_get_info(d);
    int32_t tok[64];
    for (int i = 0; i < n && i < 64; i++) tok[i] = (int32_t)((i * 37 + seed * 11 + 1) % 512);
    float *taps = malloc(sizeof(float) * (size_t)n * di->n_taps * di->hidden);
    ds_kv *kv = NULL;
    ds_workspace *ws = NULL;
    ds_draft_state *s = NULL;
    ds_forward_seq f = {.tokens = tok, .n_tokens = n, .tap_layers = di->tap_layers, .n_taps = di->n_taps, .taps = taps};
    int ok = n <= 64 && taps && !ds_kv_init(m, 64, &kv) && !ds_workspace_init(m, &ws);
    f.kv = kv;
    ok = ok && !ds_model_forward(m, ws, &f, 1) && !ds_draft_state_init(d, 128, &s) && !ds_drafter_append(d, s, taps, n);
    if (!ok) {
        ds_draft_state_free(s);
        s = NULL;
    }
    ds_kv_free(kv);
    ds_workspace_free(ws);
    free(taps);
    return s;
}

#endif
