// Replays a corpus through a fuzz target without libFuzzer (so `make test` needs no clang): each
// argument is a file or a folder of files (read in name order, not recursively), fed one at a time
// to LLVMFuzzerTestOneInput. Built against the normal and the ASan + UBSan library, so a fixed
// crash, leak or undefined behaviour whose reproducer sits in the corpus stays fixed.
// DS_FUZZ_VERBOSE=1 prints the last error after each input (to see that the seeds load).
#define _GNU_SOURCE
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fuzz.h"

int LLVMFuzzerInitialize(int *argc, char ***argv) __attribute__((weak));

static int replay_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "replay: cannot open %s\n", path);
        return 1;
    }
    size_t cap = 1 << 16, n = 0;
    uint8_t *buf = malloc(cap);
    for (size_t r; buf && (r = fread(buf + n, 1, cap - n, f)) > 0;) {
        n += r;
        if (n == cap) buf = realloc(buf, cap *= 2);
    }
    fclose(f);
    if (!buf) {
        fprintf(stderr, "replay: out of memory reading %s\n", path);
        return 1;
    }
    // An exact-size copy, so that reading past the input is a heap overflow, as under libFuzzer.
    uint8_t *in = malloc(n ? n : 1);
    memcpy(in, buf, n);
    free(buf);
    fprintf(stderr, "replay: %s (%zu bytes)\n", path, n);
    ds_clear_error();
    LLVMFuzzerTestOneInput(in, n);
    const char *verbose = getenv("DS_FUZZ_VERBOSE"); // say what the loaders said last (seed checks)
    if (verbose && verbose[0] == '1') fprintf(stderr, "replay:   last error: %s\n", ds_last_error());
    free(in);
    return 0;
}

static int by_name(const struct dirent **a, const struct dirent **b) { return strcmp((*a)->d_name, (*b)->d_name); }

int main(int argc, char **argv) {
    if (LLVMFuzzerInitialize) LLVMFuzzerInitialize(&argc, &argv);
    int fails = 0, files = 0;
    for (int i = 1; i < argc; i++) {
        struct stat sb;
        if (stat(argv[i], &sb) != 0) {
            fprintf(stderr, "replay: %s: no such file or folder\n", argv[i]);
            fails++;
            continue;
        }
        if (!S_ISDIR(sb.st_mode)) {
            fails += replay_file(argv[i]);
            files++;
            continue;
        }
        struct dirent **ents;
        const int n = scandir(argv[i], &ents, NULL, by_name);
        for (int k = 0; k < n; k++) {
            char p[4096];
            snprintf(p, sizeof p, "%s/%s", argv[i], ents[k]->d_name);
            if (stat(p, &sb) == 0 && S_ISREG(sb.st_mode)) {
                fails += replay_file(p);
                files++;
            }
            free(ents[k]);
        }
        if (n >= 0) free(ents);
    }
    fuzz_clear();
    rmdir(fuzz_dir());
    printf("replay: %d inputs, %d unreadable\n", files, fails);
    return fails || files == 0;
}
