// Elementwise and row-wise kernels of the transformer forward pass (f32).
#ifndef DS_KERNELS_OPS_H
#define DS_KERNELS_OPS_H

#include "dspark.h"

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

// y (n) += x (n)
void ds_add(float *y, const float *x, int n);

// dot(a, b) over n (vectorized)
float ds_dot(const float *a, const float *b, int n);
// y (n) += alpha * x (n)
void ds_axpy(float *y, float alpha, const float *x, int n);

#endif
