// ds_data_dump FILE [--tokens]: validate a dspark data file and print
//   count N vocab V tokens T
//   <i> <n_tokens> <n_prompt> [id id ...]
// one line per sequence (ids only with --tokens). Exit 1 with the reader's error on a bad file.
#include <stdio.h>
#include <string.h>

#include "train/data.h"

int main(int argc, char **argv) {
    if (argc < 2 || argc > 3 || (argc == 3 && strcmp(argv[2], "--tokens"))) {
        fprintf(stderr, "usage: ds_data_dump FILE [--tokens]\n");
        return 2;
    }
    const int with_tokens = argc == 3;
    ds_data *d;
    if (ds_data_open(argv[1], &d)) {
        fprintf(stderr, "ds_data_dump: %s\n", ds_last_error());
        return 1;
    }
    printf("count %zu vocab %llu tokens %zu\n", ds_data_count(d), (unsigned long long)ds_data_vocab(d),
           ds_data_total_tokens(d));
    for (size_t i = 0; i < ds_data_count(d); i++) {
        const int32_t *t;
        int n, np;
        ds_data_get(d, i, &t, &n, &np);
        printf("%zu %d %d", i, n, np);
        for (int k = 0; with_tokens && k < n; k++) printf(" %d", t[k]);
        printf("\n");
    }
    ds_data_close(d);
    return 0;
}
