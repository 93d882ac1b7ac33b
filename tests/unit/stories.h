// Unit-test helper: stories260K (from $DSPARK_SHARED, or ../shared) on one thread, and a fresh
// drafter paired with it.
#ifndef DS_TESTS_STORIES_H
#define DS_TESTS_STORIES_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "dspark.h"

// Loads stories260K into *m; 0 on success, -1 after printing why (cmocka setup convention).
static inline int stories_load(ds_model **m) {
    char path[4096];
    const char *shared = getenv("DSPARK_SHARED");
    snprintf(path, sizeof path, "%s/models/stories260K/stories260K.gguf", shared ? shared : "../shared");
    ds_model_params mp = {.n_threads = 1};
    if (ds_model_load(path, &mp, m) != DS_OK) {
        fprintf(stderr, "cannot load %s: %s\n", path, ds_last_error());
        return -1;
    }
    return 0;
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

#endif
