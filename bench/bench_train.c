// Training throughput: anchor blocks (and sequence tokens) per second for a fresh drafter on
// stories260K data, at each thread count, and the scaling against one thread in the same run.
//   bench_train MODEL DATA [--threads 1,2] [--steps N] [--layers L]
// Prints one JSON object per thread count.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench_util.h"
#include "kernels/matmul.h"
#include "train/mpi.h"

int main(int argc, char **argv) {
    bench_openblas_reexec(argv);
    if (argc < 3) {
        fprintf(stderr, "usage: bench_train MODEL DATA [--threads 1,2] [--steps N] [--layers L]\n");
        return 2;
    }
    const char *threads = "1,2";
    int steps = 20, layers = 5;
    for (int i = 3; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--threads")) threads = argv[i + 1];
        else if (!strcmp(argv[i], "--steps")) steps = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--layers")) layers = atoi(argv[i + 1]);
    }
    double base = 0;
    for (const char *p = threads; p && *p;) {
        const int t = atoi(p);
        double blocks = 0;
        const double bps = bench_train_blocks_per_s(argv[1], argv[2], t, steps, layers, &blocks);
        if (!bps) return 1;
        if (!base) base = bps;
        printf("{\"bench\": \"train\", \"threads\": %d, \"drafter_layers\": %d, \"steps\": %d, \"blocks\": %.0f, "
               "\"blocks_per_s\": %.1f, \"scaling_vs_first\": %.2f}\n",
               t, layers, steps, blocks, bps, bps / base);
        fflush(stdout);
        p = strchr(p, ',');
        if (p) p++;
    }
    return 0;
}
