// BF16 products on the f32-FMA path ("avx512") against VDPBF16PS ("avx512bf16"), interleaved in
// one run: y (n, rows) = x (n, cols) · Wᵀ for n = 1 and 8 on Qwen3-0.6B's and Qwen3-4B's layer
// shapes, one thread, weights cycled over copies worth ~1 GiB so every product streams them from
// memory. Times are thread CPU time (the machine is shared: preemption by other processes does not
// count; their use of memory bandwidth still does), medians of the rounds with min and max.
//
//   bench_bf16dp [--rounds R] [--offset BYTES] [--rows N] [--copies C]
//
// --offset places every copy of the weights BYTES (even, 0-62) past a 64-byte boundary, as a
// tensor sits in a mapped file (safetensors: wherever the header ends; default 24, what
// safetensors files written with 8-byte header padding commonly give).
//
// --copies C cycles over C copies of the weights instead (1: the same weights every product, hot in
// the caches as far as they fit: the loop's compute ceiling, memory aside).
//
// --rows sets the batch measured against one row (default 8, at most 16: R = 4 requests verifying
// 3 drafted tokens each is 16 rows).
//
// Prints per (shape, isa): 1-row time, N-row time, their ratio, and the 1-row weight stream rate
// (GB/s) next to the read bandwidth measured in the same run (bench_read_bandwidth, wall clock).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_util.h"
#include "dspark.h"
#include "kernels/half.h"
#include "kernels/matmul.h"

static double cpu_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void stats(double *v, int n, double out[3]) {
    qsort(v, (size_t)n, sizeof *v, bench_cmp_double);
    out[0] = v[n / 2], out[1] = v[0], out[2] = v[n - 1];
}

int main(int argc, char **argv) {
    bench_openblas_reexec(argv);
    int rounds = 9, offset = 24, nrows = 8, ncopies = 0;
    const char *isas[2] = {"avx512", "avx512bf16"};
    for (int i = 1; i < argc; i += 2) {
        if (i + 1 >= argc) {
            fprintf(stderr, "bench_bf16dp: %s needs a value\n", argv[i]);
            return 2;
        }
        if (!strcmp(argv[i], "--rounds")) rounds = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--offset")) {
            offset = atoi(argv[i + 1]);
            if (offset < 0 || offset > 62 || offset % 2) {
                fprintf(stderr, "bench_bf16dp: --offset must be even, 0-62\n");
                return 2;
            }
        }
        else if (!strcmp(argv[i], "--rows")) {
            nrows = atoi(argv[i + 1]);
            if (nrows < 2 || nrows > 16) {
                fprintf(stderr, "bench_bf16dp: --rows must be 2-16\n");
                return 2;
            }
        }
        else if (!strcmp(argv[i], "--copies")) {
            ncopies = atoi(argv[i + 1]);
            if (ncopies < 1 || ncopies > 4096) {
                fprintf(stderr, "bench_bf16dp: --copies must be 1-4096\n");
                return 2;
            }
        }
        else {
            fprintf(stderr, "bench_bf16dp: unknown option %s\n", argv[i]);
            return 2;
        }
    }
    for (int k = 0; k < 2; k++)
        if (!ds_matmul_force_isa(isas[k])) {
            fprintf(stderr, "bench_bf16dp: isa %s not available here\n", isas[k]);
            return 1;
        }
    ds_set_threads(1);
    ds_matmul_set_gemm_min_rows(1 << 30);
    const double bw = bench_read_bandwidth(1);
    // (rows, cols): Qwen3-0.6B gate/up and down, Qwen3-4B gate/up and down.
    const int shapes[4][2] = {{3072, 1024}, {1024, 3072}, {9728, 2560}, {2560, 9728}};
    const char *names[4] = {"0.6b ffn up 3072x1024", "0.6b ffn down 1024x3072", "4b ffn up 9728x2560",
                            "4b ffn down 2560x9728"};
    for (int s = 0; s < 4; s++) {
        const int rows = shapes[s][0], cols = shapes[s][1];
        const size_t elems = (size_t)rows * cols;
        const int copies = ncopies ? ncopies : (int)(((size_t)1 << 30) / (elems * 2)) + 1;
        // (elems·2 is a multiple of 64 for every shape: each copy sits at the same offset)
        uint16_t *base = aligned_alloc(64, (elems * 2 * (size_t)copies + 127) / 64 * 64);
        if (!base) {
            fprintf(stderr, "bench_bf16dp: %d copies of %s (%.1f GB) do not fit in memory\n", copies, names[s],
                    (double)elems * 2 * copies / 1e9);
            return 1;
        }
        uint16_t *d = base + offset / 2;
        for (size_t i = 0; i < elems * (size_t)copies; i++)
            d[i] = ds_f32_to_bf16((float)((i * 2654435761u) % 2001) / 1000.0f - 1.0f);
        float *x = malloc(sizeof(float) * 16 * cols), *y = malloc(sizeof(float) * 16 * rows);
        for (int i = 0; i < 16 * cols; i++) x[i] = (float)((i * 7919) % 1000) / 1000.0f - 0.5f;
        ds_weight w0 = {DS_BF16, rows, cols, d};
        float *scratch = malloc(sizeof(float) * ds_matmul_scratch_floats(&w0));
        double *t1 = malloc(sizeof(double) * 2 * rounds), *t8 = malloc(sizeof(double) * 2 * rounds);
        int c = 0;
        for (int r = 0; r < rounds; r++)
            for (int k = 0; k < 2; k++) {
                ds_matmul_force_isa(isas[k]);
                for (int n = 1; n <= nrows; n += nrows - 1) {
                    // 8 products per measurement, each on the next copy
                    const double t0 = cpu_now();
                    for (int q = 0; q < 8; q++, c = (c + 1) % copies) {
                        ds_weight w = {DS_BF16, rows, cols, d + elems * (size_t)c};
                        w.round_inputs = 1; // the opt-in; the avx512 path ignores it
                        ds_matmul(y, x, &w, n, scratch);
                    }
                    (n == 1 ? t1 : t8)[k * rounds + r] = (cpu_now() - t0) / 8;
                }
            }
        for (int k = 0; k < 2; k++) {
            double ratio[64], a[3], b[3], q[3];
            for (int r = 0; r < rounds && r < 64; r++) ratio[r] = t8[k * rounds + r] / t1[k * rounds + r];
            stats(ratio, rounds < 64 ? rounds : 64, q);
            stats(t1 + k * rounds, rounds, a);
            stats(t8 + k * rounds, rounds, b);
            printf("{\"bench\": \"bf16dp\", \"shape\": \"%s\", \"isa\": \"%s\", \"rounds\": %d, \"ms_1\": [%.3f, %.3f, %.3f], "
                   "\"ms_n\": [%.3f, %.3f, %.3f], \"ratio_n_over_1\": [%.3f, %.3f, %.3f], \"gb_per_s_1\": %.2f, "
                   "\"read_gb_per_s\": %.2f, \"offset\": %d, \"n\": %d, \"copies\": %d}\n",
                   names[s], isas[k], rounds, a[0] * 1e3, a[1] * 1e3, a[2] * 1e3, b[0] * 1e3, b[1] * 1e3, b[2] * 1e3, q[0],
                   q[1], q[2], (double)elems * 2 / a[0] / 1e9, bw / 1e9, offset, nrows, copies);
        }
        fflush(stdout);
        free(base);
        free(x);
        free(y);
        free(scratch);
        free(t1);
        free(t8);
    }
    return 0;
}
