// Where sgemm starts to beat our multi-row kernel: y (n, 5632) = x (n, 2048) · Wᵀ for F32 and BF16
// weights far larger than the caches (as in decode/verification of a realistic model), n = 1..16,
// 24, 32, 48, 64, 128, 256 (a drafter's block forward runs 8 rows per sequence: 32 for 4 requests; a prefill, hundreds). BF16 runs
// twice: on the f32-FMA kernel, and with its inputs rounded to bf16 ("BF16r": VDPBF16PS where the CPU
// has it, kernels/matmul_bf16dp.h).
// Prints one JSON object per (type, n) with both times and the ratio kernel/sgemm (> 1: sgemm wins).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench_util.h"
#include "dspark.h"
#include "kernels/half.h"
#include "kernels/matmul.h"

// Median seconds per product over `reps`, cycling through `copies` weight matrices so that every
// product streams its weights from memory.
static double time_matmul(ds_weight *ws, int copies, const float *x, float *y, int n, float *scratch, int reps) {
    double t[64];
    for (int r = 0; r < reps; r++) {
        const double t0 = bench_now();
        ds_matmul(y, x, &ws[r % copies], n, scratch);
        t[r] = bench_now() - t0;
    }
    for (int i = 1; i < reps; i++) // insertion sort for the median
        for (int j = i; j > 0 && t[j] < t[j - 1]; j--) {
            double s = t[j];
            t[j] = t[j - 1];
            t[j - 1] = s;
        }
    return t[reps / 2];
}

int main(int argc, char **argv) {
    bench_openblas_reexec(argv);
    const int threads = argc > 1 ? atoi(argv[1]) : 1;
    ds_set_threads(threads);
    const int rows = 5632, cols = 2048, copies = 8, reps = 15;
    const ds_dtype types[3] = {DS_F32, DS_BF16, DS_BF16};
    const int ns[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 24, 32, 48, 64, 128, 256};
    float *x = malloc(sizeof(float) * 256 * cols), *y = malloc(sizeof(float) * 256 * rows);
    for (int i = 0; i < 256 * cols; i++) x[i] = (float)(((unsigned)i * 7919u) % 1000u) / 1000.0f - 0.5f;
    for (int ti = 0; ti < 3; ti++) {
        ds_weight w[8];
        for (int c = 0; c < copies; c++) {
            const size_t n = (size_t)rows * cols;
            void *d = malloc(n * (types[ti] == DS_F32 ? 4 : 2));
            for (size_t i = 0; i < n; i++) {
                const float v = (float)((i * 2654435761u) % 2001) / 1000.0f - 1.0f;
                if (types[ti] == DS_F32) ((float *)d)[i] = v;
                else ((uint16_t *)d)[i] = ds_f32_to_bf16(v);
            }
            w[c] = (ds_weight){types[ti], rows, cols, d};
            w[c].round_inputs = ti == 2;
        }
        float *scratch = malloc(sizeof(float) * ds_matmul_scratch_floats(&w[0]) * (size_t)threads + 16);
        for (size_t ni = 0; ni < sizeof ns / sizeof *ns; ni++) {
            const int n = ns[ni];
            ds_matmul_set_gemm_min_rows(1 << 30);
            const double tk = time_matmul(w, copies, x, y, n, scratch, reps);
            ds_matmul_set_gemm_min_rows(1);
            const double tg = time_matmul(w, copies, x, y, n, scratch, reps);
            ds_matmul_set_gemm_min_rows(0);
            printf("{\"bench\": \"matmul\", \"type\": \"%s\", \"threads\": %d, \"n\": %d, \"kernel_ms\": %.3f, "
                   "\"sgemm_ms\": %.3f, \"kernel_over_sgemm\": %.2f}\n",
                   ti == 2 ? "BF16r" : ds_dtype_name(types[ti]), threads, n, tk * 1e3, tg * 1e3, tk / tg);
            fflush(stdout);
        }
        for (int c = 0; c < copies; c++) free((void *)w[c].data);
        free(scratch);
    }
    free(x);
    free(y);
    return 0;
}
