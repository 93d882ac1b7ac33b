// y = x · Wᵀ for f32 activations and F32/F16/BF16/Q8_0 weights. See matmul.h.
#include "base/threads.h"
#include "kernels/matmul.h"

#include <cblas.h>
#include <immintrin.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/ggml_quants.h"
#include "kernels/half.h"
#include "kernels/matmul_bf16dp.h"
#include "kernels/qmatmul.h"
#include "kernels/simd.h"
#include "kernels/affine.h"

// Columns per partial sum of the multi-row kernels (matmul_isa.inc). It fixes the summation order,
// so it is a constant, never a function of the batch. When the kernel goes segment by segment, 8
// input rows of one segment (16 KiB of f32) stay in L1 while the weights stream (512 and 1024
// measured the same on 5632 x 2048 BF16 at 8 rows).
#define DS_SEG 512
// Software prefetch distance in elements (4 KiB of 16-bit weights, 8 KiB of f32), measured with
// bench_decode: 512 gave 88% of the BF16 bound, 1024 93%, 2048 98%.
#define DS_PREFETCH_ELEMS 2048
// Weights prefetched into L2 (else L1): ds_cpu_prefetch_l2(), set once by isa_get.
static int g_pf_l2;
// Input rows up to this size are read from L1 whole while the weights stream row by row (longest
// streams); bigger inputs go segment by segment.
#define DS_X_L1_BYTES 32768
// The BF16 input packed for the f32-FMA kernel (packall_bf16): the row stride for `whole` columns,
// one cache line more where the rows would be a multiple of 1 KiB apart (8 rows at such a stride
// share L1's sets, where the weight lines streaming through evict them), and the room n such rows
// take (64-byte alignment included).
static inline int ds_pack_stride(int whole) { return whole % 256 == 0 ? whole + 16 : whole; }
static inline size_t ds_pack_room(int n, int cols) { return (size_t)n * ((size_t)cols + 16) + 16; }

// ---- AVX-512 ---------------------------------------------------------------------------------
#define ISA avx512
#define ISA_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,fma,f16c")))
#define VLEN 16
#define VEC __m512
#define VZERO _mm512_setzero_ps()
#define VFMA(a, b, c) _mm512_fmadd_ps(a, b, c)
#define VSUM(v) _mm512_reduce_add_ps(v)
#define VLOAD_F32(p) _mm512_loadu_ps(p)
#define VPAIR_F32(p, w0, w1) (w0 = _mm512_loadu_ps(p), w1 = _mm512_loadu_ps((p) + 16))
#define VPAIR_BF16(p, w0, w1)                                                                    \
    do {                                                                                         \
        const __m512i v_ = _mm512_loadu_si512((const void *)(p));                                \
        w0 = _mm512_castsi512_ps(_mm512_slli_epi32(v_, 16));                                     \
        w1 = _mm512_castsi512_ps(_mm512_and_si512(v_, _mm512_set1_epi32((int)0xffff0000u)));     \
    } while (0)
#define VPAIR_F16(p, w0, w1)                                                                     \
    (w0 = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(p))),                             \
     w1 = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)((p) + 16))))
#include "kernels/matmul_isa.inc"
#include "kernels/isa_undef.inc"

// ---- AVX2 + FMA + F16C -----------------------------------------------------------------------
#define ISA avx2
#define ISA_TARGET __attribute__((target("avx2,fma,f16c")))
#define VLEN 8
#define VEC __m256
#define VZERO _mm256_setzero_ps()
#define VFMA(a, b, c) _mm256_fmadd_ps(a, b, c)
#define VSUM(v) ds_hsum256(v)
#define VLOAD_F32(p) _mm256_loadu_ps(p)
#define VPAIR_F32(p, w0, w1) (w0 = _mm256_loadu_ps(p), w1 = _mm256_loadu_ps((p) + 8))
#define VPAIR_BF16(p, w0, w1)                                                                    \
    do {                                                                                         \
        const __m256i v_ = _mm256_loadu_si256((const __m256i *)(p));                             \
        w0 = _mm256_castsi256_ps(_mm256_slli_epi32(v_, 16));                                     \
        w1 = _mm256_castsi256_ps(_mm256_and_si256(v_, _mm256_set1_epi32((int)0xffff0000u)));     \
    } while (0)
#define VPAIR_F16(p, w0, w1)                                                                     \
    (w0 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(p))),                                \
     w1 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((p) + 8))))
#include "kernels/matmul_isa.inc"
#include "kernels/isa_undef.inc"

// ---- Scalar fallback (one "vector" = one float) ----------------------------------------------
#define ISA scalar
#define ISA_TARGET
#define VLEN 1
#define VEC float
#define VZERO 0.0f
#define VFMA(a, b, c) ((a) * (b) + (c))
#define VSUM(v) (v)
#define VLOAD_F32(p) (*(p))
#define VPAIR_F32(p, w0, w1) (w0 = (p)[0], w1 = (p)[1])
#define VPAIR_BF16(p, w0, w1) (w0 = ds_bf16_to_f32((p)[0]), w1 = ds_bf16_to_f32((p)[1]))
#define VPAIR_F16(p, w0, w1) (w0 = ds_f16_to_f32((p)[0]), w1 = ds_f16_to_f32((p)[1]))
#include "kernels/matmul_isa.inc"

// ---- Dispatch ------------------------------------------------------------------------------------
typedef void (*rows_fn)(float *, int, const float *, int, const void *, int, int, int, const float *);
typedef const float *(*pack_fn)(float *, const float *, int, int);
typedef void (*qrows_fn)(float *, int, const float *, int, const ds_weight *, int, int);
typedef struct {
    const char *name;
    rows_fn f32, bf16, f16;
    qrows_fn affine; // MLX affine 4/8-bit (kernels/qmatmul.c)
    qrows_fn q8_0;   // GGUF Q8_0 (kernels/qmatmul.c)
    pack_fn pack;    // the BF16 kernel's input layout (matmul_isa.inc packall_bf16)
} isa_table;

#define ISA_ENTRY(name)                                                                                      \
    {                                                                                                        \
#name, (rows_fn)rows_f32_##name, (rows_fn)rows_bf16_##name, (rows_fn)rows_f16_##name, ds_qrows_##name,  \
            ds_q80rows_##name, packall_bf16_##name                                                                              \
    }
static const isa_table g_isas[] = {ISA_ENTRY(avx512), ISA_ENTRY(avx2), ISA_ENTRY(scalar)};
// "avx512bf16": the avx512 entry with BF16 weights on VDPBF16PS (kernels/matmul_bf16dp.h: the input
// rounded to bf16 once per product), filled in by isa_get; the first choice where the CPU has it.
// Only BF16 weights with round_inputs take that kernel (bf16_isa); the others stay on avx512's.
static isa_table g_isa_bf16dp;
static const isa_table *const g_isa_order[] = {&g_isa_bf16dp, &g_isas[0], &g_isas[1], &g_isas[2]};
#define N_ISA_ORDER (sizeof g_isa_order / sizeof g_isa_order[0])
static const isa_table *g_isa;

static int isa_supported(const isa_table *t) {
    __builtin_cpu_init();
    if (t == &g_isa_bf16dp) return ds_bf16dp_supported();
    if (t == &g_isas[0])
        return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
               __builtin_cpu_supports("avx512vl");
    if (t == &g_isas[1])
        return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && ds_cpu_has_f16c();
    return 1;
}

static const isa_table *isa_get(void) {
    if (!g_isa) {
        openblas_set_num_threads(1); // one thread pool: OpenMP splits the work, sgemm runs per thread
        g_pf_l2 = ds_cpu_prefetch_l2();
        g_isa_bf16dp = g_isas[0];
        g_isa_bf16dp.name = "avx512bf16";
        g_isa_bf16dp.bf16 = ds_bf16dp_rows;
        g_isa_bf16dp.pack = ds_bf16dp_pack;
        for (size_t i = 0; i < N_ISA_ORDER; i++)
            if (isa_supported(g_isa_order[i])) {
                g_isa = g_isa_order[i];
                break;
            }
    }
    return g_isa;
}

const char *ds_matmul_isa(void) { return isa_get()->name; }

int ds_matmul_force_isa(const char *isa) {
    isa_get(); // one-time setup (OpenBLAS threads) even when a path is forced before any product
    for (size_t i = 0; i < N_ISA_ORDER; i++)
        if (strcmp(g_isa_order[i]->name, isa) == 0 && isa_supported(g_isa_order[i])) {
            g_isa = g_isa_order[i];
            return 1;
        }
    return 0;
}

size_t ds_weight_bytes(const ds_weight *w) {
    size_t n = (size_t)w->rows * (size_t)w->cols;
    switch (w->type) {
    case DS_F32: return n * 4;
    case DS_F16:
    case DS_BF16: return n * 2;
    case DS_Q8_0: return n / 32 * sizeof(ds_block_q8_0);
    case DS_AFFINE4:
    case DS_AFFINE8: // packed words + scales + biases
        return n * (size_t)ds_weight_bits(w) / 8 +
               2 * (n / (size_t)w->group_size) * (w->scale_type == DS_F32 ? 4 : 2);
    default: // the other GGUF block types: whole blocks per row
        return ds_ggml_block_elems(w->type) ? (size_t)w->rows * ds_ggml_row_bytes(w->type, w->cols) : 0;
    }
}

size_t ds_weight_data_bytes(const ds_weight *w) {
    if (ds_weight_bits(w)) return (size_t)w->rows * (size_t)w->cols * (size_t)ds_weight_bits(w) / 8;
    return ds_weight_bytes(w);
}

int ds_weight_select_rows(const ds_weight *w, const int32_t *ids, int n, ds_weight *out, void *bufs[3]) {
    const size_t rows = (size_t)(w->rows > 0 ? w->rows : 1);
    // Bytes per row of the data and (affine) of the scales and of the biases.
    const size_t dbytes = (ds_weight_bits(w) ? ds_weight_data_bytes(w) : ds_weight_bytes(w)) / rows;
    const size_t sbytes = ds_weight_bits(w) ? (size_t)(w->cols / w->group_size) * (w->scale_type == DS_F32 ? 4 : 2) : 0;
    const void *src[3] = {w->data, w->scales, w->biases};
    const size_t rb[3] = {dbytes, sbytes, sbytes};
    bufs[0] = bufs[1] = bufs[2] = NULL;
    for (int k = 0; k < 3; k++) {
        if (!rb[k]) continue;
        if (!(bufs[k] = malloc(rb[k] * (size_t)(n > 0 ? n : 1)))) {
            for (int j = 0; j < k; j++) free(bufs[j]);
            bufs[0] = bufs[1] = bufs[2] = NULL;
            return -1;
        }
        for (int i = 0; i < n; i++)
            memcpy((char *)bufs[k] + (size_t)i * rb[k], (const char *)src[k] + (size_t)ids[i] * rb[k], rb[k]);
    }
    *out = *w;
    out->rows = n;
    out->data = bufs[0];
    if (sbytes) {
        out->scales = bufs[1];
        out->biases = bufs[2];
    }
    return 0;
}

// The integer affine kernel that goes with an ISA entry (kernels/qmatmul_i8.c): VNNI where the CPU
// has it, else the AVX2 or scalar one; `name` picks the input layout (ds_qirows_ch).
typedef void (*qirows_fn)(float *, int, const ds_qx *, int, const ds_weight *, int, int);
typedef struct {
    const char *name;
    qirows_fn rows;
} qi_kernel;
static const qi_kernel g_qi[] = {{"vnni", ds_qirows_vnni}, {"avx2", ds_qirows_avx2}, {"scalar", ds_qirows_scalar}};

static const qi_kernel *qi_get(const isa_table *t) {
    if ((t == &g_isas[0] || t == &g_isa_bf16dp) && __builtin_cpu_supports("avx512vnni")) return &g_qi[0];
    return t == &g_isas[2] ? &g_qi[2] : &g_qi[1];
}

// The table whose BF16 kernel and pack serve w: VDPBF16PS only for a weight that opted in.
static const isa_table *bf16_isa(const isa_table *t, const ds_weight *w) {
    return t == &g_isa_bf16dp && !w->round_inputs ? &g_isas[0] : t;
}

// xp: BF16, the input packed by the ISA's pack (or NULL: the kernel packs segment by segment);
// qx: affine, the input rounded for the ISA's integer kernel.
static void rows_dispatch(float *y, int ldy, const float *x, int nb, const ds_weight *w, int r0, int r1,
                          const float *xp, const ds_qx *qx) {
    const isa_table *t = isa_get();
    switch (w->type) {
    case DS_F32: t->f32(y, ldy, x, nb, w->data, w->cols, r0, r1, NULL); break;
    case DS_BF16: bf16_isa(t, w)->bf16(y, ldy, x, nb, w->data, w->cols, r0, r1, xp); break;
    case DS_F16: t->f16(y, ldy, x, nb, w->data, w->cols, r0, r1, NULL); break;
    case DS_Q8_0:
        if (qx) qi_get(t)->rows(y, ldy, qx, nb, w, r0, r1);
        else t->q8_0(y, ldy, x, nb, w, r0, r1);
        break;
    case DS_AFFINE4:
    case DS_AFFINE8:
        if (qx) qi_get(t)->rows(y, ldy, qx, nb, w, r0, r1);
        else t->affine(y, ldy, x, nb, w, r0, r1);
        break;
    default: // the other GGUF block types: integer kernels only (ds_matmul_ex always rounds their input)
        if (qx) qi_get(t)->rows(y, ldy, qx, nb, w, r0, r1);
        break;
    }
}

void ds_weight_rows_f32(const ds_weight *w, int first, int n, float *out) {
    for (int i = 0; i < n; i++) ds_weight_row_f32(w, first + i, out + (size_t)i * w->cols);
}

void ds_weight_row_f32(const ds_weight *w, int r, float *out) {
    const size_t c = (size_t)w->cols, off = (size_t)r * c;
    switch (w->type) {
    case DS_F32: memcpy(out, (const float *)w->data + off, c * 4); break;
    case DS_BF16:
        for (size_t j = 0; j < c; j++) out[j] = ds_bf16_to_f32(((const uint16_t *)w->data)[off + j]);
        break;
    case DS_F16:
        for (size_t j = 0; j < c; j++) out[j] = ds_f16_to_f32(((const uint16_t *)w->data)[off + j]);
        break;
    case DS_Q8_0: {
        const ds_block_q8_0 *b = (const ds_block_q8_0 *)w->data + off / 32;
        for (size_t j = 0; j < c; j++) out[j] = ds_f16_to_f32(b[j / 32].d) * (float)b[j / 32].qs[j % 32];
        break;
    }
    case DS_AFFINE4:
    case DS_AFFINE8: { // the quantized embedding gather: one packed row, dequantized
        const size_t srow = c / (size_t)w->group_size, ssz = w->scale_type == DS_F32 ? 4 : 2;
        ds_affine_dequantize_row((const uint32_t *)w->data + (size_t)r * (c * (size_t)ds_weight_bits(w) / 32),
                                 (const char *)w->scales + (size_t)r * srow * ssz,
                                 (const char *)w->biases + (size_t)r * srow * ssz, w->scale_type, w->cols,
                                 ds_weight_bits(w), w->group_size, out);
        break;
    }
    default:
        if (ds_ggml_block_elems(w->type)) // GGUF block types: one row of blocks, dequantized (bit-exact ggml)
            ds_ggml_dequantize_row(w->type, (const char *)w->data + (size_t)r * ds_ggml_row_bytes(w->type, w->cols),
                                   w->cols, out);
        else memset(out, 0, c * 4);
    }
}

// Rows of W widened per sgemm tile: ~1 MiB of f32, so a tile stays in L2 while sgemm streams x.
static int gemm_tile_rows(const ds_weight *w) {
    int t = (int)((1u << 18) / (unsigned)(w->cols > 0 ? w->cols : 1));
    if (t < 16) t = 16;
    return t < w->rows ? t : w->rows;
}

// Input rows the BF16 kernel path packs once per product (it runs below 24 rows by default).
#define DS_PACK_ROWS 24

// Per thread: a widened sgemm tile, or (BF16) at least DS_PACK_ROWS packed input rows, 64-byte
// aligned.
size_t ds_matmul_scratch_floats(const ds_weight *w) {
    if (w->type == DS_F32) return 0;
    const size_t tile = (size_t)gemm_tile_rows(w) * (size_t)w->cols, pack = ds_pack_room(DS_PACK_ROWS, w->cols);
    return w->type == DS_BF16 && pack > tile ? pack : tile;
}

// Below this many rows, the hand-written kernel (weights read once per 8 input rows) beats sgemm
// (measured with bench/bench_matmul on 2048 x 5632: F32 crosses over at n = 10-12). BF16 weights on
// the AVX-512 kernels never go to sgemm, which must widen them first: on Zen 5 (2 threads) the
// kernel took 0.41-0.74 of sgemm's time at every n from 1 to 256 against OpenBLAS's SkylakeX
// kernels, 0.21-0.44 with inputs rounded to bf16 (VDPBF16PS); a drafter's block of 4 sequences (32
// rows) drafted in 19 ms instead of 50. Elsewhere BF16 keeps 24 (not measured since). 0 = these defaults.
static int g_gemm_min_rows = 0;

void ds_matmul_set_gemm_min_rows(int n) { g_gemm_min_rows = n > 0 ? n : 0; }
int ds_matmul_gemm_min_rows_setting(void) { return g_gemm_min_rows; }

// GGUF block types other than Q8_0 (kernels/ggml_qdot.c) always take the integer kernels, prefill
// included (8 input rows per pass over the weights): a 512-token prefill of an inflated stories260K
// (hidden 2048, 24 layers) ran at 94 tok/s on them against 36 tok/s on sgemm over dequantized tiles
// for Q4_K_M, 51 against 39 for Q4_0 (bench_decode --prefill 512, 1 thread; 153 against 69 with 2
// threads for Q4_K_M), and bench_quant --ggq's crossover had them at 0.32-0.74 of sgemm's time from 8
// to 64 rows. (ds_matmul_ex's min_rows, or the test hook, can still send a product to sgemm.)
#define DS_GGQ_GEMM_ROWS INT_MAX

static int gemm_min_rows(ds_dtype t, int min_rows) {
    if (min_rows > 0) return min_rows;
    if (g_gemm_min_rows) return g_gemm_min_rows;
    // Affine: dequantizing tiles costs more than widening BF16 and our kernel is compute-bound, so the
    // crossover (bench_quant "multirow", 2048² and 4096², 2 busy threads) is later: 32-64 rows.
    if (t == DS_AFFINE8) return 48;
    if (t == DS_AFFINE4) return 64;
    if (ds_ggml_is_kquant_family(t)) return DS_GGQ_GEMM_ROWS;
    if (t == DS_BF16) {
        const isa_table *isa = isa_get();
        return isa == &g_isas[0] || isa == &g_isa_bf16dp ? INT_MAX : 24;
    }
    return t == DS_F32 ? 10 : 24;
}
// Below this many multiply-adds a product runs on the calling thread in one call (a parallel loop
// costs more).
#define DS_PARALLEL_MIN_MACS (1 << 18)
// Multiply-adds per item of the parallel loop (kernel / sgemm): small enough that a preempted thread
// holds up little, large enough that claiming an item costs nothing next to it.
#define DS_ITEM_MACS (1 << 18)
// ... and, for the kernels, at least this many bytes of weights: each item is one weight stream, and
// the prefetchers ramp up at every item's start (Q4_K's 1 << 18 MACs of one row are only ~150 KB:
// 2-thread Q4_K_M decoding went 72 -> 75-85 tok/s with items of ~512 KB, bench_decode).
#define DS_ITEM_BYTES (1 << 19)
#define DS_GEMM_ITEM_MACS (1 << 20)

// Rows [r0, r1) of the output through OpenBLAS (single-threaded: the pool owns the threads).
static void gemm_slice(float *y, const float *x, const ds_weight *w, int n, int r0, int r1, float *scratch) {
    const int rows = w->rows, cols = w->cols;
    if (w->type == DS_F32) {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, r1 - r0, cols, 1.0f, x, cols,
                    (const float *)w->data + (size_t)r0 * cols, cols, 0.0f, y + r0, rows);
        return;
    }
    const int tile = gemm_tile_rows(w);
    for (int t0 = r0; t0 < r1; t0 += tile) {
        const int nr = r1 - t0 < tile ? r1 - t0 : tile;
        ds_weight_rows_f32(w, t0, nr, scratch);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, nr, cols, 1.0f, x, cols, scratch, cols, 0.0f,
                    y + t0, rows);
    }
}

// One item of ds_matmul's parallel loop: output rows [item·chunk, (item+1)·chunk).
typedef struct {
    float *y;
    const float *x;
    const ds_weight *w;
    float *scratch;
    const float *xp;  // BF16 kernel: the packed input, or NULL
    const ds_qx *qx;  // affine kernel: the rounded input
    int n, gemm, chunk;
} matmul_job;

static void matmul_item(void *ctx, int item, int worker) {
    const matmul_job *j = ctx;
    const int rows = j->w->rows, r0 = item * j->chunk, r1 = r0 + j->chunk < rows ? r0 + j->chunk : rows;
    float *mine = j->scratch ? j->scratch + (size_t)worker * ds_matmul_scratch_floats(j->w) : NULL; // F32: none
    if (j->gemm) gemm_slice(j->y, j->x, j->w, j->n, r0, r1, mine);
    else rows_dispatch(j->y, rows, j->x, j->n, j->w, r0, r1, j->xp, j->qx);
}

void ds_matmul(float *y, const float *x, const ds_weight *w, int n, float *scratch) {
    ds_matmul_ex(y, x, w, n, scratch, 0);
}

// One product with its kernel choice made: inline below DS_PARALLEL_MIN_MACS, else the pool over
// items of output rows.
static void matmul_run(float *y, const float *x, const ds_weight *w, int n, float *scratch, int gemm, const float *xp,
                       const ds_qx *qx) {
    const int rows = w->rows;
    const size_t macs = (size_t)rows * (size_t)w->cols * (size_t)n;
    if (macs < DS_PARALLEL_MIN_MACS && !gemm) {
        rows_dispatch(y, rows, x, n, w, 0, rows, xp, qx);
        return;
    }
    // Items of whole 16-row groups (threads never share a cache line of y), sized from the shape
    // alone: the same items, computed by the same code, whatever the thread count. An sgemm item is
    // at most one widened tile; a small sgemm is one item (still through the pool, which keeps
    // OpenBLAS single-threaded on whatever thread calls).
    const size_t row_macs = (size_t)w->cols * (size_t)n, target = gemm ? DS_GEMM_ITEM_MACS : DS_ITEM_MACS;
    size_t chunk = ((target + row_macs - 1) / row_macs + 15) & ~(size_t)15;
    if (!gemm) {
        const size_t row_bytes = ds_weight_bytes(w) / (size_t)rows + 1;
        const size_t by_bytes = ((DS_ITEM_BYTES + row_bytes - 1) / row_bytes + 15) & ~(size_t)15;
        if (by_bytes > chunk) chunk = by_bytes;
    }
    if (gemm && chunk > ((size_t)gemm_tile_rows(w) & ~(size_t)15)) chunk = (size_t)gemm_tile_rows(w) & ~(size_t)15;
    if (chunk < 16) chunk = 16;
    if (chunk > (size_t)rows || macs < DS_PARALLEL_MIN_MACS) chunk = (size_t)rows;
    matmul_job j = {y, x, w, scratch, xp, qx, n, gemm, (int)chunk};
    ds_parallel_for((int)(((size_t)rows + chunk - 1) / chunk), matmul_item, &j);
}

// Affine and Q8_0 weights through the integer kernel: the input rounded once per product (qmatmul.h) into
// the scratch (which the kernel path does not otherwise use), as many rows at a time as it holds;
// without a scratch, a stack buffer (or, for very long rows, a heap one).
static void matmul_affine(float *y, const float *x, const ds_weight *w, int n, float *scratch) {
    const int cols = w->cols, gs = ds_ggml_block_elems(w->type) ? ds_ggml_block_elems(w->type) : w->group_size;
    const char *qi = qi_get(isa_get())->name;
    _Alignas(64) unsigned char stack[1 << 16];
    void *buf = stack, *heap = NULL;
    size_t room = sizeof stack;
    if (scratch) {
        buf = scratch;
        room = ds_matmul_scratch_floats(w) * sizeof(float);
    }
    // The layout for several rows at a time; one whose block of 8 rows does not fit falls back to
    // the one-row layout (whose kernels take any number of rows, to the same bits).
    int ch = ds_qirows_ch(qi, w, n);
    if (ch == DS_QX_R8 && ds_qx_bytes(8, cols, gs, ch) > room) ch = ds_qirows_ch(qi, w, 1);
    int per = 0;
    while (per < n && ds_qx_bytes(per + 1, cols, gs, ch) <= room) per++;
    if (per >= 8) per &= ~7;
    if (per == 0) {
        per = 1;
        ch = ds_qirows_ch(qi, w, 1); // (never DS_QX_R8)
        buf = heap = malloc(ds_qx_bytes(1, cols, gs, ch));
        if (!buf) { // out of memory for one row's rounding: a NaN output says so rather than garbage
            for (size_t i = 0; i < (size_t)n * (size_t)w->rows; i++) y[i] = NAN;
            return;
        }
    }
    for (int i = 0; i < n;) {
        int m = n - i < per ? n - i : per;
        // DS_QX_R8 computes blocks of 8 rows: a remainder too short for it to pay goes to the one-row
        // layout's kernel (ds_qirows_ch decides from the row count), in a pass of its own
        const int tail = m % 8, split = ch == DS_QX_R8 && m > 8 && tail && ds_qirows_ch(qi, w, tail) != DS_QX_R8;
        if (split) m -= tail;
        const ds_qx qx = ds_qx_pack(buf, x + (size_t)i * cols, m, cols, gs, ch == DS_QX_R8 ? ds_qirows_ch(qi, w, m) : ch);
        matmul_run(y + (size_t)i * w->rows, x + (size_t)i * cols, w, m, NULL, 0, NULL, &qx);
        i += m;
    }
    free(heap);
}

int ds_matmul_gemm_rows(const ds_weight *w) {
    isa_get();
    return w->type == DS_Q8_0 ? INT_MAX : gemm_min_rows(w->type, 0);
}

void ds_matmul_ex(float *y, const float *x, const ds_weight *w, int n, float *scratch, int min_rows) {
    isa_get(); // one-time setup before the sgemm path and outside any parallel region
    const int gemm = n >= gemm_min_rows(w->type, min_rows) && w->type != DS_Q8_0;
    // (GGUF block types beside Q8_0 have no f32-input kernel: always the integer one.)
    if (!gemm && (((w->type == DS_AFFINE4 || w->type == DS_AFFINE8 || w->type == DS_Q8_0) && w->round_inputs) ||
                  ds_ggml_is_kquant_family(w->type))) {
        matmul_affine(y, x, w, n, scratch);
        return;
    }
    // BF16 through our kernel: the input packed once for all items (matmul_isa.inc), into the
    // scratch (which the kernel path does not otherwise use); without room, the kernel packs per
    // segment itself, to the same numbers.
    const float *xp = NULL;
    if (!gemm && w->type == DS_BF16 && scratch && ds_pack_room(n, w->cols) <= ds_matmul_scratch_floats(w))
        xp = bf16_isa(isa_get(), w)->pack(scratch, x, n, w->cols);
    matmul_run(y, x, w, n, scratch, gemm, xp, NULL);
}

const char *ds_openblas_core_hint(void) {
    const char *core = openblas_get_corename();
    if (!core) return NULL;
    __builtin_cpu_init();
    static const char *avx512_cores[] = {"skylakex", "cooperlake", "sapphirerapids"};
    static const char *avx2_cores[] = {"haswell", "zen", "skylakex", "cooperlake", "sapphirerapids"};
    char lower[64];
    size_t i = 0;
    for (; core[i] && i + 1 < sizeof lower; i++) lower[i] = (char)(core[i] | 0x20);
    lower[i] = 0;
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
        __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512cd")) {
        for (size_t k = 0; k < sizeof avx512_cores / sizeof *avx512_cores; k++)
            if (strstr(lower, avx512_cores[k])) return NULL;
        return "SkylakeX";
    }
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
        for (size_t k = 0; k < sizeof avx2_cores / sizeof *avx2_cores; k++)
            if (strstr(lower, avx2_cores[k])) return NULL;
        return "Haswell";
    }
    return NULL;
}
