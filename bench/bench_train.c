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
#include "train/trainer.h"

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
        char out[64];
        snprintf(out, sizeof out, "/tmp/dspark_bench_train.%d.%d", (int)getpid(), t);
        ds_train_opts o = ds_train_defaults();
        o.target = argv[1];
        o.data = argv[2];
        o.out = out;
        o.steps = steps;
        o.batch = 8;
        o.anchors = 64;
        o.threads = t;
        o.quiet = 1;
        o.shape.n_layers = layers;
        const double t0 = bench_now();
        if (ds_train_run(&o)) {
            fprintf(stderr, "bench_train: %s\n", ds_last_error());
            return 1;
        }
        const double dt = bench_now() - t0;
        // Blocks trained: read back from the metrics log.
        char path[128], line[512];
        snprintf(path, sizeof path, "%s/metrics.jsonl", out);
        FILE *f = fopen(path, "r");
        double blocks = 0;
        while (f && fgets(line, sizeof line, f)) {
            const char *b = strstr(line, "\"blocks\":");
            if (b) blocks += atof(b + 9);
        }
        if (f) fclose(f);
        const double bps = blocks / dt;
        if (!base) base = bps;
        printf("{\"bench\": \"train\", \"threads\": %d, \"drafter_layers\": %d, \"steps\": %d, \"blocks\": %.0f, "
               "\"blocks_per_s\": %.1f, \"scaling_vs_first\": %.2f}\n",
               t, layers, steps, blocks, bps, bps / base);
        fflush(stdout);
        char cmd[160];
        snprintf(cmd, sizeof cmd, "rm -rf %s", out);
        if (system(cmd) != 0) fprintf(stderr, "bench_train: could not remove %s\n", out);
        p = strchr(p, ',');
        if (p) p++;
    }
    return 0;
}
