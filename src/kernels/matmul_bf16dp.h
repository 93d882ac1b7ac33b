// BF16 weights on VDPBF16PS (AVX512-BF16): the multi-row kernel of y = x · Wᵀ with the input
// rounded to bf16 once per product, two bf16 products per f32 lane and instruction. matmul.c
// registers it as the ISA "avx512bf16": the "avx512" entry with this BF16 kernel and pack (the
// other weight types unchanged). Internal to kernels/ (tests reach it through ds_matmul_force_isa).
//
// Numerics (what tests/unit/test_bf16dp.c emulates bit for bit):
//   - the input: every element rounded to bf16 once per product (ds_bf16dp_pack, VCVTNE2PS2BF16):
//     round to nearest even; f32 denormals become zeros of their sign; ±inf stays ±inf; a finite
//     value that rounds past the largest bf16 becomes ±inf; NaN stays NaN (the top 16 bits, quiet
//     bit set), so a NaN input still gives NaN outputs as on the f32-FMA path;
//   - per output element, for each segment of DS_BF16DP_SEG columns (the last one shorter, its
//     last 32-column block zero-padded): 16 f32 lanes start at +0, and each 32-column block does,
//     per lane i with the column pair (2i, 2i+1) of the block,
//         acc = acc + x[2i+1]·w[2i+1]   then   acc = acc + x[2i]·w[2i]
//     (VDPBF16PS: each step one fused multiply-add rounded to nearest even, bf16 denormal inputs
//     and a denormal accumulator read as zero, a denormal result flushed to zero, MXCSR ignored);
//   - the segment's sum: s8[i] = acc[i] + acc[i+8], s4[i] = s8[i] + s8[i+4], s2[i] = s4[i] +
//     s4[i+2], s = s2[0] + s2[1] (IEEE f32 additions), added to the running sum in segment order.
// The order is fixed by `cols` alone (batch invariance: a row's result never depends on the other
// rows, the thread split or whether a scratch was given).
#ifndef DS_KERNELS_MATMUL_BF16DP_H
#define DS_KERNELS_MATMUL_BF16DP_H

// Columns per partial sum (a multiple of 32). It fixes the summation order: a constant.
#define DS_BF16DP_SEG 1024

// Whether the CPU has AVX512-BF16 (CPUID.(7,1):EAX bit 5) besides AVX512F/BW/VL with the OS's
// support of their registers.
int ds_bf16dp_supported(void);

// n input rows (n, cols) rounded to bf16 into buf, at its first 64-byte boundary: row k at
// k·stride uint16 elements, stride = cols rounded up to a multiple of 32 (the padding zero), plus
// one unused block where that is a multiple of 512 (rows a multiple of 1 KiB apart share L1's
// sets: 8-row products of 2048 columns ran 18-23% faster apart where the weights shared them).
// Needs n·cols + 16 floats of room (what matmul.c's BF16 pack gets), so returns NULL below 16
// columns (the kernel then rounds segment by segment itself, to the same numbers). The return value
// is the bf16 rows, typed as the ISA table's packed input.
const float *ds_bf16dp_pack(float *buf, const float *x, int n, int cols);

// y[k·ldy + r] = x_k · W_r for r in [r0, r1), k in [0, nb): W (rows, cols) bf16; xp: x packed by
// ds_bf16dp_pack, or NULL (then x (nb, cols) is rounded segment by segment on the stack).
void ds_bf16dp_rows(float *y, int ldy, const float *x, int nb, const void *W, int cols, int r0, int r1,
                    const float *xp);

// Test hook: the streaming tuning of a 48 KiB L1 (0), of a smaller one (1), or the core's own (-1,
// the default). Tunings change the loop order only, never a result.
void ds_bf16dp_set_tuning(int which);

#endif
