// MLX affine quantization: file sizes, quantized GEMV bandwidth, and decode speed.
//
//   bench_quant [--rows 4096 --cols 4096] [--repeats R] [--threads T] [--ggq [--ggq-types q4_k,q5_k]]
//               [--dim 1024 --layers 8 --ffn 2816 --heads 16 --kv-heads 4 --vocab 32000] [--no-decode]
//
// Prints JSON lines, every ratio against a baseline measured in the same run:
//  - "bandwidth": read bandwidth (best of 5 over 512 MiB), the bound for memory-bound kernels;
//  - "gemv": y = W x for one row (decode) per weight type F32, BF16, Q8/Q4 x groups 32/64: time,
//    effective GB/s (weight bytes incl. scales/biases / time), fraction of the bandwidth bound and
//    (the *_int8 kinds: the integer path drafters take)
//    speed-up over BF16 (types f32, bf16, GGUF q8_0, affine q8/q4 in groups of 32/64); matrices are cycled through ~1 GiB of copies so they come from DRAM;
//  - "ggq": GGUF block types (Q4_K on Qwen3-8B shapes; Q4_0, Q5_K, Q6_K, Q8_0 on 4096²): decode (n = 1) and
//    verify (n = 8) GB/s on the integer kernels and the fraction of the bound, and the floor the
//    core's multiply peak ("vnni_peak", measured first) puts under them; "ggq_crossover": those
//    kernels against sgemm over dequantized tiles (--ggq: this section only);
//  - "multirow": n = 1..64 input rows, our kernel (f32 inputs), the integer kernel (inputs rounded
//    to int8, as drafters run) and dequantized tiles + sgemm (the crossover);
//  - "file_size": a synthetic realistic-shape Llama target (bf16, build/bench-models/quant-*),
//    quantized with dspark's quantizer to 8 and 4 bits: bytes and ratio to bf16 (and to f32);
//  - "decode": greedy decode tokens/s of that target at f32, bf16, 8-bit and 4-bit (group 64).
#include <dirent.h>
#include <immintrin.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/threads.h"
#include "bench_util.h"
#include "dspark.h"
#include "kernels/half.h"
#include "kernels/matmul.h"
#include "kernels/affine.h"
#include "kernels/ggml_quants.h"
#include "kernels/qmatmul.h"
#include "dspark_jobs.h"

// ---- GEMV ---------------------------------------------------------------------------------------

typedef struct {
    ds_weight w;
    void *a, *b, *c;
} bench_w;

static void make_weight(bench_w *bw, int rows, int cols, ds_dtype t, int bits, int gs) {
    memset(bw, 0, sizeof *bw);
    const size_t n = (size_t)rows * cols;
    if (t == DS_Q8_0) { // GGUF blocks of 32 int8 and an f16 scale
        ds_block_q8_0 *blk = bw->a = malloc(n / 32 * sizeof(ds_block_q8_0));
        for (size_t b = 0; b < n / 32; b++) {
            blk[b].d = ds_f32_to_f16(0.05f / 127);
            for (int j = 0; j < 32; j++) blk[b].qs[j] = (int8_t)(bench_frand() * 127);
        }
        ds_weight w = {t, rows, cols, bw->a};
        bw->w = w;
        return;
    }
    if (!bits) {
        bw->a = malloc(n * (t == DS_F32 ? 4 : 2));
        for (size_t i = 0; i < n; i++) {
            const float v = bench_frand() * 0.05f;
            if (t == DS_F32) ((float *)bw->a)[i] = v;
            else ((uint16_t *)bw->a)[i] = ds_f32_to_bf16(v);
        }
        ds_weight w = {t, rows, cols, bw->a};
        bw->w = w;
        return;
    }
    const int G = cols / gs, P = cols * bits / 32;
    float *row = malloc(sizeof(float) * cols), *s = malloc(sizeof(float) * G), *b = malloc(sizeof(float) * G);
    bw->a = malloc((size_t)rows * P * 4);
    bw->b = malloc((size_t)rows * G * 2);
    bw->c = malloc((size_t)rows * G * 2);
    for (int r = 0; r < rows; r++) {
        for (int j = 0; j < cols; j++) row[j] = bench_frand() * 0.05f;
        ds_affine_quantize_row(row, cols, bits, gs, (uint32_t *)bw->a + (size_t)r * P, s, b);
        for (int g = 0; g < G; g++) {
            ((uint16_t *)bw->b)[(size_t)r * G + g] = ds_f32_to_bf16(s[g]);
            ((uint16_t *)bw->c)[(size_t)r * G + g] = ds_f32_to_bf16(b[g]);
        }
    }
    free(row);
    free(s);
    free(b);
    ds_weight w = {bits == 4 ? DS_AFFINE4 : DS_AFFINE8, rows, cols, bw->a, gs, DS_BF16, bw->b, bw->c};
    bw->w = w;
}

// Median seconds of one n = 1 product, cycling through `copies` identical matrices (distinct
// memory) so the weights come from DRAM, not from the (large) last-level cache.
static double gemv_seconds(const ds_weight *w, int repeats, int copies, const bench_w *src) {
    float *x = malloc(sizeof(float) * w->cols), *y = malloc(sizeof(float) * w->rows);
    for (int j = 0; j < w->cols; j++) x[j] = bench_frand();
    ds_weight *ws = malloc(sizeof(ds_weight) * copies);
    void **bufs = calloc((size_t)copies * 3, sizeof(void *));
    const size_t packed = ds_weight_data_bytes(w);
    const size_t sb = ds_weight_bits(w) ? (size_t)w->rows * (w->cols / w->group_size) * 2 : 0;
    for (int c = 0; c < copies; c++) {
        ws[c] = *w;
        ws[c].data = bufs[3 * c] = malloc(packed);
        memcpy(bufs[3 * c], src->a, packed);
        if (sb) {
            ws[c].scales = bufs[3 * c + 1] = malloc(sb);
            ws[c].biases = bufs[3 * c + 2] = malloc(sb);
            memcpy(bufs[3 * c + 1], src->b, sb);
            memcpy(bufs[3 * c + 2], src->c, sb);
        }
    }
    double *t = malloc(sizeof(double) * repeats);
    for (int c = 0; c < copies; c++) ds_matmul(y, x, &ws[c], 1, NULL); // touch every page once
    for (int r = 0; r < repeats; r++) {
        const double t0 = bench_now();
        for (int c = 0; c < copies; c++) ds_matmul(y, x, &ws[c], 1, NULL);
        t[r] = (bench_now() - t0) / copies;
    }
    qsort(t, (size_t)repeats, sizeof *t, bench_cmp_double);
    const double med = t[repeats / 2];
    for (int c = 0; c < copies * 3; c++) free(bufs[c]);
    free(bufs);
    free(ws);
    free(x);
    free(y);
    free(t);
    return med;
}

// ---- GGUF block types (kernels/ggml_qdot.c) ------------------------------------------------------

// A (rows, cols) matrix of GGUF type t: random quant bytes, realistic finite f16 scales.
static void *ggq_make(ds_dtype t, int rows, int cols) {
    const size_t bb = ds_ggml_block_bytes(t), nb = (size_t)rows * (size_t)(cols / ds_ggml_block_elems(t));
    uint8_t *p = malloc(nb * bb);
    for (size_t i = 0; i < nb * bb; i++) p[i] = (uint8_t)(bench_frand() * 128 + 128);
    const int od = t == DS_Q2_K ? 80 : t == DS_Q3_K ? 108 : t == DS_Q6_K ? 208 : 0;
    const int om = t == DS_Q2_K ? 82 : (t == DS_Q4_1 || t == DS_Q5_1 || t == DS_Q4_K || t == DS_Q5_K) ? 2 : -1;
    for (size_t b = 0; b < nb; b++) {
        const uint16_t d = ds_f32_to_f16(0.002f * bench_frand()), m = ds_f32_to_f16(0.002f * bench_frand());
        memcpy(p + b * bb + od, &d, 2);
        if (om >= 0) memcpy(p + b * bb + om, &m, 2);
    }
    return p;
}

// Median seconds of one n-row product, cycling through copies of the matrix (~512 MiB) so the
// weights come from DRAM.
// *cpu (when not NULL): the median thread CPU seconds of the same (one thread: the product runs on
// the calling thread), which a loaded machine's time slicing does not inflate.
static double ggq_seconds_cpu(ds_dtype t, int rows, int cols, int n, int repeats, float *scratch, int min_rows,
                              double *cpu);
static double ggq_seconds(ds_dtype t, int rows, int cols, int n, int repeats, float *scratch, int min_rows) {
    return ggq_seconds_cpu(t, rows, cols, n, repeats, scratch, min_rows, NULL);
}
static double thread_cpu_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
static double ggq_seconds_cpu(ds_dtype t, int rows, int cols, int n, int repeats, float *scratch, int min_rows,
                              double *cpu) {
    const size_t bytes = (size_t)rows * ds_ggml_row_bytes(t, cols);
    int copies = (int)(((size_t)1 << 29) / bytes) + 1;
    copies = copies > 64 ? 64 : copies;
    void *src = ggq_make(t, rows, cols);
    ds_weight *ws = calloc((size_t)copies, sizeof *ws);
    for (int c = 0; c < copies; c++) {
        void *d = malloc(bytes);
        memcpy(d, src, bytes);
        ws[c].type = t, ws[c].rows = rows, ws[c].cols = cols, ws[c].data = d;
    }
    float *x = malloc(sizeof(float) * (size_t)n * cols), *y = malloc(sizeof(float) * (size_t)n * rows);
    for (size_t j = 0; j < (size_t)n * cols; j++) x[j] = bench_frand();
    double *tm = malloc(sizeof(double) * (size_t)repeats), *tc = malloc(sizeof(double) * (size_t)repeats);
    for (int c = 0; c < copies; c++) ds_matmul_ex(y, x, &ws[c], n, scratch, min_rows);
    for (int r = 0; r < repeats; r++) {
        const double t0 = bench_now(), c0 = thread_cpu_now();
        for (int c = 0; c < copies; c++) ds_matmul_ex(y, x, &ws[c], n, scratch, min_rows);
        tm[r] = (bench_now() - t0) / copies;
        tc[r] = (thread_cpu_now() - c0) / copies;
    }
    qsort(tm, (size_t)repeats, sizeof *tm, bench_cmp_double);
    qsort(tc, (size_t)repeats, sizeof *tc, bench_cmp_double);
    const double med = tm[repeats / 2];
    if (cpu) *cpu = tc[repeats / 2];
    free(tc);
    for (int c = 0; c < copies; c++) free((void *)ws[c].data);
    free(ws), free(src), free(x), free(y), free(tm);
    return med;
}

// The core's integer multiply peak: 512-bit VPDPBUSD per second on one core (12 independent
// accumulators in registers; 0 without AVX512-VNNI). Each does 64 byte products, so an n-row
// product of a rows x cols matrix cannot take less than rows·cols·n / (64·rate) per core with any
// int8 kernel (PMADDUBSW + VPDPWSSD pairs, what the K-quant kernels use, do the same products per
// second on the AMD kind): "mul_floor_us" in the ggq lines.
__attribute__((target("avx2,avx512f,avx512bw,avx512vl,avx512vnni"))) static double vnni_rate_run(void) {
    const __m512i u = _mm512_set1_epi8(3), v = _mm512_set1_epi8(5);
    __m512i a0 = _mm512_set1_epi32(0), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0, a8 = a0,
            a9 = a0, a10 = a0, a11 = a0;
    const long iters = 20000000;
    const double t0 = bench_now();
    for (long it = 0; it < iters; it++) {
#define DP(x) x = _mm512_dpbusd_epi32(x, u, v)
        DP(a0), DP(a1), DP(a2), DP(a3), DP(a4), DP(a5), DP(a6), DP(a7), DP(a8), DP(a9), DP(a10), DP(a11);
#undef DP
        __asm__ volatile("" : "+v"(a0), "+v"(a1), "+v"(a2), "+v"(a3), "+v"(a4), "+v"(a5), "+v"(a6), "+v"(a7), "+v"(a8),
                         "+v"(a9), "+v"(a10), "+v"(a11)); // all in registers, none folded away
    }
    const double dt = bench_now() - t0;
    const __m512i sum = _mm512_add_epi32(_mm512_add_epi32(_mm512_add_epi32(a0, a1), _mm512_add_epi32(a2, a3)),
                                         _mm512_add_epi32(_mm512_add_epi32(a4, a5), _mm512_add_epi32(a6, a7)));
    const __m512i all = _mm512_add_epi32(sum, _mm512_add_epi32(_mm512_add_epi32(a8, a9), _mm512_add_epi32(a10, a11)));
    const int keep = _mm512_reduce_add_epi32(_mm512_and_si512(all, _mm512_set1_epi32(0xFF))); // small: no int overflow
    return keep == 42 ? 0 : 12.0 * (double)iters / dt;
}
static double vnni_rate(void) {
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("avx512vnni")) return 0;
    double best = 0;
    for (int r = 0; r < 3; r++) {
        const double x = vnni_rate_run();
        if (x > best) best = x;
    }
    return best;
}

// "ggq" lines: decode (n = 1) and verify (n = 8) GB/s of GGUF block types on Qwen3-8B-shaped
// matrices (4096 x 4096 attention, 12288 x 4096 gate/up, 4096 x 12288 down) against the read
// bandwidth bound `bw`; "ggq_crossover": the integer kernel against sgemm over dequantized tiles.
static void ggq_bench(double bw, int nt, int repeats, const char *only) {
    const ds_dtype types[] = {DS_Q4_K, DS_Q4_0, DS_Q5_K, DS_Q6_K, DS_Q8_0};
    const char *names[] = {"q4_k", "q4_0", "q5_k", "q6_k", "q8_0"};
    const int shapes[3][2] = {{4096, 4096}, {12288, 4096}, {4096, 12288}};
    float *scratch = NULL;
    const double rate = vnni_rate();
    printf("{\"bench\": \"vnni_peak\", \"vpdpbusd_512_per_s\": %.3g, \"byte_products_per_s\": %.3g}\n", rate, 64 * rate);
    for (size_t k = 0; k < sizeof types / sizeof *types; k++)
        for (int sh = 0; sh < 3; sh++) {
            const int rows = shapes[sh][0], cols = shapes[sh][1];
            if (k && sh) continue; // the other types: one shape, for comparison
            if (only && !strstr(only, names[k])) continue;
            const size_t bytes = (size_t)rows * ds_ggml_row_bytes(types[k], cols);
            double c1, c8;
            // the scratch a model's forward passes (per thread: ds_matmul_scratch_floats)
            const ds_weight shape = {.type = types[k], .rows = rows, .cols = cols};
            float *sc = malloc(sizeof(float) * ds_matmul_scratch_floats(&shape) * (size_t)ds_threads());
            const double t1 = ggq_seconds_cpu(types[k], rows, cols, 1, repeats, sc, INT_MAX, &c1);
            const double t8 = ggq_seconds_cpu(types[k], rows, cols, 8, repeats, sc, INT_MAX, &c8);
            free(sc);
            // The least either product can take: the weights' read time, or the multiplies at the peak
            // (nt cores); their ratio is the verify / decode no int8 kernel can beat here.
            const double tb = (double)bytes / bw, mul1 = rate > 0 ? (double)rows * cols / (64 * rate) / nt : 0;
            const double least1 = mul1 > tb ? mul1 : tb, least8 = 8 * mul1 > tb ? 8 * mul1 : tb;
            for (int v = 0; v < 2; v++) {
                const double t = v ? t8 : t1, gbs = (double)bytes / t;
                printf("{\"bench\": \"ggq\", \"weights\": \"%s\", \"rows\": %d, \"cols\": %d, \"n\": %d, \"threads\": %d, "
                       "\"isa\": \"%s\", \"bytes\": %zu, \"us\": %.1f, \"gb_per_s\": %.2f, \"fraction_of_bound\": %.3f, "
                       "\"verify_over_decode\": %.2f, \"cpu_us\": %.1f, \"cpu_fraction_of_bound\": %.3f, "
                       "\"mul_floor_us\": %.1f, \"verify_over_decode_floor\": %.2f}\n",
                       names[k], rows, cols, v ? 8 : 1, nt, ds_matmul_isa(), bytes, t * 1e6, gbs / 1e9, gbs / bw,
                       v ? t8 / t1 : 1.0, (v ? c8 : c1) * 1e6, (double)bytes / (v ? c8 : c1) / bw,
                       (v ? 8 * mul1 : mul1) * 1e6, v ? least8 / least1 : 1.0);
                fflush(stdout);
            }
        }
    if (only) return; // --ggq-types: those types' lines only
    // The crossover (DS_GGQ_GEMM_ROWS in kernels/matmul.c): Q4_K 4096 x 4096.
    ds_weight w = {DS_Q4_K, 4096, 4096, NULL};
    scratch = malloc(sizeof(float) * ds_matmul_scratch_floats(&w) * (size_t)nt);
    const int ns[] = {8, 16, 24, 32, 48, 64};
    for (size_t i = 0; i < sizeof ns / sizeof *ns; i++) {
        const double ti = ggq_seconds(DS_Q4_K, 4096, 4096, ns[i], repeats, scratch, INT_MAX);
        const double tg = ggq_seconds(DS_Q4_K, 4096, 4096, ns[i], repeats, scratch, 1);
        printf("{\"bench\": \"ggq_crossover\", \"weights\": \"q4_k\", \"n\": %d, \"threads\": %d, \"int8_kernel_us\": %.1f, "
               "\"sgemm_us\": %.1f, \"kernel_over_sgemm\": %.2f}\n",
               ns[i], nt, ti * 1e6, tg * 1e6, ti / tg);
        fflush(stdout);
    }
    free(scratch);
}

static size_t dir_bytes(const char *dir) {
    DIR *d = opendir(dir);
    size_t total = 0;
    struct dirent *e;
    char p[4400];
    while (d && (e = readdir(d))) {
        const size_t n = strlen(e->d_name);
        if (n < 12 || strcmp(e->d_name + n - 12, ".safetensors")) continue;
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        struct stat sb;
        if (stat(p, &sb) == 0) total += (size_t)sb.st_size;
    }
    if (d) closedir(d);
    return total;
}

// Median greedy decode tokens/s of the model in `dir` (bench_decode_tps); its weight bytes to *wbytes.
static double decode_tps(const char *dir, int n, int repeats, size_t *wbytes) {
    ds_model *m;
    if (ds_model_load(dir, NULL, &m)) {
        fprintf(stderr, "bench: %s\n", ds_last_error());
        return 0;
    }
    *wbytes = ds_model_get_info(m)->weight_bytes;
    const double tps = bench_decode_tps(m, n, repeats);
    ds_model_free(m);
    return tps;
}

int main(int argc, char **argv) {
    bench_openblas_reexec(argv);
    int rows = 4096, cols = 4096, repeats = 9, threads = 0, decode = 1, n = 16, ggq_only = 0;
    const char *only = NULL;
    bench_shape s = {1024, 8, 2816, 16, 4, 32000, DS_F32, 0, 0, "1e-5"};
    for (int i = 1; i < argc; i++) {
        const char *o = argv[i], *v = i + 1 < argc ? argv[i + 1] : "0";
        if (!strcmp(o, "--no-decode")) {
            decode = 0;
            continue;
        }
        if (!strcmp(o, "--ggq")) { // only the GGUF block types' section
            ggq_only = 1;
            continue;
        }
        i++;
        if (!strcmp(o, "--ggq-types")) { // with --ggq: only these types (e.g. q4_k,q6_k), no crossover
            only = v;
            continue;
        }
        if (bench_shape_option(o, v, &s)) continue;
        if (!strcmp(o, "--rows")) rows = atoi(v);
        else if (!strcmp(o, "--cols")) cols = atoi(v);
        else if (!strcmp(o, "--repeats")) repeats = atoi(v);
        else if (!strcmp(o, "--threads")) threads = atoi(v);
        else if (!strcmp(o, "-n")) n = atoi(v);
        else {
            fprintf(stderr, "bench_quant: unknown option %s\n", o);
            return 2;
        }
    }
    if (rows < 1 || cols < 64 || cols % 64 || repeats < 1 || s.dim % 64 || s.ffn % 64) {
        fprintf(stderr, "bench_quant: cols, dim and ffn must be multiples of 64\n");
        return 2;
    }
    ds_set_threads(threads);
    const int nt = ds_threads(); // the thread count ds_matmul uses (scratch is per thread)
    const double bw = bench_read_bandwidth(nt);
    printf("{\"bench\": \"bandwidth\", \"threads\": %d, \"read_gb_per_s\": %.2f}\n", nt, bw / 1e9);
    fflush(stdout);
    ggq_bench(bw, nt, repeats, only);
    if (ggq_only) return 0;

    // GEMV per type; BF16 is the baseline of the speed-ups.
    struct {
        const char *name;
        ds_dtype t;
        int bits, gs, round; // round: the integer path (inputs rounded to int8, as drafters run)
    } kinds[] = {{"f32", DS_F32, 0, 0, 0},        {"bf16", DS_BF16, 0, 0, 0},      {"q8_0", DS_Q8_0, 0, 0, 0},
                 {"q8_g32", 0, 8, 32, 0},          {"q8_g64", 0, 8, 64, 0},          {"q4_g32", 0, 4, 32, 0},
                 {"q4_g64", 0, 4, 64, 0},          {"q8_g64_int8", 0, 8, 64, 1},     {"q4_g32_int8", 0, 4, 32, 1},
                 {"q4_g64_int8", 0, 4, 64, 1},     {"q8_0_int8", DS_Q8_0, 0, 0, 1}};
    double t_bf16 = 0;
    for (size_t k = 0; k < sizeof kinds / sizeof *kinds; k++) {
        bench_w w;
        make_weight(&w, rows, cols, kinds[k].t, kinds[k].bits, kinds[k].gs);
        w.w.round_inputs = kinds[k].round;
        const size_t bytes = ds_weight_bytes(&w.w);
        int copies = (int)(((size_t)1 << 30) / bytes) + 1; // about 1 GiB of weights per pass
        copies = copies > 256 ? 256 : copies;
        const double t = gemv_seconds(&w.w, repeats, copies, &w);
        if (kinds[k].t == DS_BF16 && !kinds[k].bits) t_bf16 = t;
        const double gbs = (double)ds_weight_bytes(&w.w) / t;
        printf("{\"bench\": \"gemv\", \"weights\": \"%s\", \"rows\": %d, \"cols\": %d, \"threads\": %d, \"isa\": \"%s\", "
               "\"bytes\": %zu, \"us\": %.1f, \"gb_per_s\": %.2f, \"fraction_of_bound\": %.3f, \"speedup_vs_bf16\": %.2f}\n",
               kinds[k].name, rows, cols, nt, ds_matmul_isa(), ds_weight_bytes(&w.w), t * 1e6, gbs / 1e9, gbs / bw,
               t_bf16 > 0 ? t_bf16 / t : 0.0);
        fflush(stdout);
        free(w.a);
        free(w.b);
        free(w.c);
    }
    // Several input rows (verification / drafting / prefill): our kernel with f32 inputs, the integer
    // kernel (inputs rounded to int8) and dequantized tiles + sgemm, to place the crossover.
    for (int bits = 8; bits >= 4; bits -= 4) {
        bench_w w;
        make_weight(&w, rows, cols, 0, bits, 64);
        const int ns[] = {1, 4, 7, 8, 16, 32, 64};
        float *x = malloc(sizeof(float) * (size_t)cols * 64), *y = malloc(sizeof(float) * (size_t)rows * 64);
        float *scratch = malloc(sizeof(float) * ds_matmul_scratch_floats(&w.w) * (size_t)nt);
        for (size_t i = 0; i < (size_t)cols * 64; i++) x[i] = bench_frand();
        for (size_t k = 0; k < sizeof ns / sizeof *ns; k++) {
            double t[3];
            for (int path = 0; path < 3; path++) { // kernel, sgemm, integer kernel
                ds_matmul_set_gemm_min_rows(path == 1 ? 1 : 1000000);
                w.w.round_inputs = path == 2;
                double best = 1e30;
                for (int r = 0; r < repeats; r++) {
                    const double t0 = bench_now();
                    ds_matmul(y, x, &w.w, ns[k], scratch);
                    const double dt = bench_now() - t0;
                    best = dt < best ? dt : best;
                }
                t[path] = best;
            }
            ds_matmul_set_gemm_min_rows(0);
            printf("{\"bench\": \"multirow\", \"weights\": \"q%d_g64\", \"n\": %d, \"kernel_us\": %.1f, \"sgemm_us\": %.1f, "
                   "\"int8_kernel_us\": %.1f, \"kernel_over_sgemm\": %.2f, \"kernel_over_int8\": %.2f}\n",
                   bits, ns[k], t[0] * 1e6, t[1] * 1e6, t[2] * 1e6, t[0] / t[1], t[0] / t[2]);
            fflush(stdout);
        }
        free(x);
        free(y);
        free(scratch);
        free(w.a);
        free(w.b);
        free(w.c);
    }
    if (!decode) return 0;

    // A synthetic target at f32 and bf16; 8- and 4-bit quantized from the bf16 one.
    char base[4096], f32d[4200], bf16d[4200], q8d[4200], q4d[4200];
    snprintf(base, sizeof base, "build/bench-models/quant-d%d-l%d-f%d-v%d", s.dim, s.layers, s.ffn, s.vocab);
    mkdir("build", 0755);
    mkdir("build/bench-models", 0755);
    snprintf(f32d, sizeof f32d, "%s-f32", base);
    snprintf(bf16d, sizeof bf16d, "%s-bf16", base);
    snprintf(q8d, sizeof q8d, "%s-q8g64", base);
    snprintf(q4d, sizeof q4d, "%s-q4g64", base);
    bench_shape s16 = s;
    s16.dtype = DS_BF16;
    if (bench_make_synthetic(f32d, &s) || bench_make_synthetic(bf16d, &s16)) return 1;
    const char *qd[2] = {q8d, q4d};
    for (int b = 0; b < 2; b++) {
        struct stat sb;
        if (stat(qd[b], &sb) == 0) continue;
        ds_quantize_params p = ds_quantize_default();
        p.bits = b ? 4 : 8;
        p.group_size = 64;
        p.target = 1;
        fprintf(stderr, "bench: quantizing %s to %d bits\n", bf16d, p.bits);
        if (ds_quantize_run(bf16d, qd[b], &p, NULL)) {
            fprintf(stderr, "bench: %s\n", ds_last_error());
            return 1;
        }
    }
    const size_t b32 = dir_bytes(f32d), b16 = dir_bytes(bf16d);
    for (int b = 0; b < 2; b++) {
        const size_t bq = dir_bytes(qd[b]);
        printf("{\"bench\": \"file_size\", \"bits\": %d, \"group_size\": 64, \"bytes\": %zu, \"bf16_bytes\": %zu, "
               "\"ratio_vs_bf16\": %.4f, \"ratio_vs_f32\": %.4f}\n",
               b ? 4 : 8, bq, b16, (double)bq / (double)b16, (double)bq / (double)b32);
    }
    const char *dirs[4] = {f32d, bf16d, q8d, q4d}, *names[4] = {"f32", "bf16", "q8_g64", "q4_g64"};
    double tps_bf16 = 0;
    for (int k = 0; k < 4; k++) {
        size_t wb = 0;
        const double tps = decode_tps(dirs[k], n, repeats < 5 ? repeats : 5, &wb);
        if (k == 1) tps_bf16 = tps;
        const double bound = bw / (double)wb;
        printf("{\"bench\": \"decode\", \"weights\": \"%s\", \"dim\": %d, \"layers\": %d, \"threads\": %d, "
               "\"weight_bytes\": %zu, \"tok_per_s\": %.2f, \"bound_tok_per_s\": %.2f, \"fraction_of_bound\": %.3f, "
               "\"speedup_vs_bf16\": %.2f}\n",
               names[k], s.dim, s.layers, nt, wb, tps, bound, tps / bound, tps_bf16 > 0 ? tps / tps_bf16 : 0.0);
        fflush(stdout);
    }
    return 0;
}
