#include "kernels/ops.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

DS_MULTIVERSION
void ds_rmsnorm(float *out, const float *x, const float *w, int n, float eps) {
    float ss = 0;
#pragma omp simd reduction(+ : ss)
    for (int i = 0; i < n; i++) ss += x[i] * x[i];
    const float inv = 1.0f / sqrtf(ss / (float)n + eps);
    if (w) {
#pragma omp simd
        for (int i = 0; i < n; i++) out[i] = x[i] * inv * w[i];
    } else {
#pragma omp simd
        for (int i = 0; i < n; i++) out[i] = x[i] * inv;
    }
}

void ds_rope_angles(float *cos_, float *sin_, const float *inv_freq, int half, int pos) {
    for (int i = 0; i < half; i++) {
        const float a = (float)pos * inv_freq[i];
        cos_[i] = cosf(a);
        sin_[i] = sinf(a);
    }
}

void ds_rope(float *x, int n_heads, int head_dim, const float *cos_, const float *sin_, ds_rope_layout layout) {
    const int half = head_dim / 2;
    for (int h = 0; h < n_heads; h++) {
        float *v = x + (size_t)h * head_dim;
        if (layout == DS_ROPE_INTERLEAVED) {
            for (int i = 0; i < half; i++) {
                const float a = v[2 * i], b = v[2 * i + 1];
                v[2 * i] = a * cos_[i] - b * sin_[i];
                v[2 * i + 1] = a * sin_[i] + b * cos_[i];
            }
        } else {
#pragma omp simd
            for (int i = 0; i < half; i++) {
                const float a = v[i], b = v[i + half];
                v[i] = a * cos_[i] - b * sin_[i];
                v[i + half] = a * sin_[i] + b * cos_[i];
            }
        }
    }
}

DS_MULTIVERSION
void ds_softmax(float *x, int n) {
    float mx = x[0];
    for (int i = 1; i < n; i++) mx = x[i] > mx ? x[i] : mx;
    float sum = 0;
#pragma omp simd reduction(+ : sum)
    for (int i = 0; i < n; i++) {
        x[i] = ds_expf(x[i] - mx);
        sum += x[i];
    }
    const float inv = 1.0f / sum;
#pragma omp simd
    for (int i = 0; i < n; i++) x[i] *= inv;
}

// tanh(u) = 1 - 2 / (1 + e^2u), vectorizable.
DS_MULTIVERSION
void ds_geglu(float *a, const float *b, int n) {
#pragma omp simd
    for (int i = 0; i < n; i++) {
        const float x = a[i], u = 0.7978845608028654f * (x + 0.044715f * x * x * x);
        const float t = 1.0f - 2.0f / (1.0f + ds_expf(2.0f * u));
        a[i] = 0.5f * x * (1.0f + t) * b[i];
    }
}

DS_MULTIVERSION
void ds_swiglu(float *a, const float *b, int n) {
#pragma omp simd
    for (int i = 0; i < n; i++) a[i] = a[i] / (1.0f + ds_expf(-a[i])) * b[i];
}

DS_MULTIVERSION
void ds_add(float *y, const float *x, int n) {
#pragma omp simd
    for (int i = 0; i < n; i++) y[i] += x[i];
}

DS_MULTIVERSION
void ds_attend(float *out, const float *q, const float *K, const float *V, int n_ctx, int stride, int head_dim,
               float scale, float *scores) {
    // scores = scale · Σ_d q[d] K[d][:]   (axpys along positions)
    for (int j = 0; j < n_ctx; j++) scores[j] = 0;
    for (int d = 0; d < head_dim; d++) ds_axpy(scores, q[d] * scale, K + (size_t)d * stride, n_ctx);
    // softmax
    float mx = -INFINITY;
    for (int j = 0; j < n_ctx; j++) mx = scores[j] > mx ? scores[j] : mx;
    float sum = 0;
#pragma omp simd reduction(+ : sum)
    for (int j = 0; j < n_ctx; j++) {
        scores[j] = ds_expf(scores[j] - mx);
        sum += scores[j];
    }
    // out[d] = (scores · V[d][:]) / sum
    const float inv = 1.0f / sum;
    for (int d = 0; d < head_dim; d++) out[d] = ds_dot(scores, V + (size_t)d * stride, n_ctx) * inv;
}

float *ds_transposed_regrow(float *old, size_t lines, int old_cap, int len, int new_cap) {
    float *p = malloc(lines * (size_t)new_cap * sizeof(float));
    if (!p) return NULL;
    for (size_t i = 0; old && i < lines; i++)
        memcpy(p + i * (size_t)new_cap, old + i * (size_t)old_cap, (size_t)len * sizeof(float));
    free(old);
    return p;
}
