// Elementwise and row-wise kernels of the transformer forward pass (f32).
#ifndef DS_KERNELS_OPS_H
#define DS_KERNELS_OPS_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "dspark/kernels.h"

// out (n) = x / sqrt(mean(x²) + eps) * w   (Llama RMSNorm; w may be NULL for a weightless norm)
void ds_rmsnorm(float *out, const float *x, const float *w, int n, float eps);

// Rotate one row of `n_heads` heads of size head_dim in place, with cos/sin (head_dim/2) of the
// row's position. Pairs are (2i, 2i+1) for DS_ROPE_INTERLEAVED and (i, i + head_dim/2) for
// DS_ROPE_HALVES; pair i uses angle pos * inv_freq[i].
void ds_rope(float *x, int n_heads, int head_dim, const float *cos_, const float *sin_, ds_rope_layout layout);
// cos_/sin_ (head_dim/2) for position `pos`.
void ds_rope_angles(float *cos_, float *sin_, const float *inv_freq, int half, int pos);

// In place: x = softmax(x) over n values (max-subtracted).
void ds_softmax(float *x, int n);

// a (n) = silu(a) * b  (SwiGLU's gate)
void ds_swiglu(float *a, const float *b, int n);
// a (n) = gelu_tanh(a) * b  (GeGLU's gate, tanh-approximate GELU)
void ds_geglu(float *a, const float *b, int n);

// y (n) += x (n)
void ds_add(float *y, const float *x, int n);

// Build one function for several instruction sets, picked at load time (GCC function
// multi-versioning), so plain loops vectorize for AVX-512 / AVX2 without -march=native.
// Clang 14's target_clones is broken across translation units (a caller in another file links
// against a missing symbol, or, with the attribute on the declaration too, calls a wrong body), so
// a clang build gets the baseline loops; GCC stays the default (and the measured) compiler.
#if defined(__clang__)
#define DS_MULTIVERSION
#else
#define DS_MULTIVERSION __attribute__((target_clones("avx512f", "arch=haswell", "default")))
#endif

// exp(x) for x <= 88, vectorizable: 2^n · p(r) with n = round(x / ln 2), r = x - n ln 2 (Cody-Waite
// split), p a degree-6 minimax polynomial (Cephes expf); relative error < 2e-7. Inputs below -87
// (and -inf) give ~1e-38 instead of denormals, inputs above 88 (and +inf) exp(88); NaN gives NaN.
// The scale 2^n is built without converting a float to an integer (undefined for NaN): n + 127 is
// added to 1.5·2^23, where a float's low mantissa bits hold the integer exactly, and shifted into
// the exponent field as unsigned. Selects, not branches: the loops that call it vectorize.
static inline float ds_expf(float x) {
    x = x < -87.0f ? -87.0f : (x > 88.0f ? 88.0f : x); // NaN stays NaN
    const float n = __builtin_rintf(x * 1.44269504088896341f);
    const float r = x - n * 0.693359375f + n * 2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    const float e = p * r * r + r + 1.0f;
    // bits(12582912 + k) = 0x4B400000 + k for 0 <= k < 2^22; shifted left by 23 only k remains.
    union { float f; uint32_t i; } biased = {.f = n + (12582912.0f + 127.0f)}, scale;
    scale.i = biased.i << 23;
    return e * scale.f;
}

// Whether all n values are finite (no NaN, no ±inf): one vectorizable pass (x·0 is NaN exactly for
// non-finite x).
static inline int ds_all_finite(const float *x, size_t n) {
    float z = 0.0f;
#pragma omp simd reduction(+ : z)
    for (size_t i = 0; i < n; i++) z += x[i] * 0.0f;
    return z == 0.0f;
}

// dot(a, b) over n
static inline float ds_dot(const float *a, const float *b, int n) {
    float s = 0;
#pragma omp simd reduction(+ : s)
    for (int i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}

// y (n) += alpha * x (n)
static inline void ds_axpy(float *y, float alpha, const float *x, int n) {
#pragma omp simd
    for (int i = 0; i < n; i++) y[i] += alpha * x[i];
}

// Grow a transposed cache buffer of `lines` lines (one per (head, dim)) of elt-byte elements from
// old_cap to new_cap columns, keeping the first `len` columns of each line. Frees `old`; NULL when
// out of memory (then `old` is untouched).
void *ds_transposed_regrow(void *old, size_t lines, int old_cap, int len, int new_cap, size_t elt);

// dst[i] = the half nearest src[i], ties to even: ds_f32_to_f16 (kernels/half.h), on F16C where the
// CPU has it (the same bits but for a NaN's payload: a NaN stays a NaN).
void ds_f32_to_f16_n(uint16_t *dst, const float *src, int n);

// ---- shared by the target, the drafter and the trainer (one copy of each small step) ------------

// out (rows, n) = RMSNorm of each row of x (rows, n), as ds_rmsnorm; out may be x.
void ds_rmsnorm_rows(float *out, const float *x, const float *w, int rows, int n, float eps);

// Training's RMSNorm: y (rows, n) = x · inv · w (w NULL: weightless) with inv (rows) = 1/sqrt(mean(x²)
// + eps) kept for the backward pass; the sum of squares is accumulated in double.
void ds_rmsnorm_fwd(float *y, float *inv, const float *x, const float *w, int rows, int n, float eps);
// Its backward: with g = dy ⊙ w, dx += inv·g − x·inv³·(g·x)/n; dw (if not NULL) += dy ⊙ x·inv.
void ds_rmsnorm_bwd(float *dx, float *dw, const float *dy, const float *x, const float *w, const float *inv,
                    int rows, int n);

// RoPE of `n_heads` heads of one row at position `pos` (angles pos · inv_freq, head_dim / 2 of them);
// inverse = 1 rotates back (the backward pass of a rotation). cos_, sin_: head_dim / 2 floats of scratch.
void ds_rope_at(float *x, int n_heads, int head_dim, const float *inv_freq, int pos, int inverse,
                ds_rope_layout layout, float *cos_, float *sin_);

// y (rows, n) += b (n) on every row; nothing when b is NULL (an absent bias).
void ds_add_rows(float *y, const float *b, int rows, int n);

// x (n) *= s
void ds_scale(float *x, float s, size_t n);

// x (n) = c · tanh(x / c)   (Gemma's logit softcap; c > 0)
void ds_softcap(float *x, size_t n, float c);

// a (n) = gelu_tanh(a) · b with libm's tanhf (the drafter and trainer; ds_geglu is the target's
// vectorized form, whose tanh is 1 - 2/(1 + e^2u) and differs in the last bits).
void ds_geglu_tanhf(float *a, const float *b, int n);

// 1 / (1 + e^-x)
static inline float ds_sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

// gelu_tanh(x) = 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))) with libm's tanhf; *dy, when dy is not
// NULL, gets its derivative.
static inline float ds_gelu_tanh(float x, float *dy) {
    const float c = 0.7978845608028654f, t = tanhf(c * (x + 0.044715f * x * x * x));
    if (dy) *dy = 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * c * (1.0f + 3.0f * 0.044715f * x * x);
    return 0.5f * x * (1.0f + t);
}

#endif
