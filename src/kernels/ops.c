#include "kernels/ops.h"

#include <math.h>

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

void ds_softmax(float *x, int n) {
    float mx = x[0];
    for (int i = 1; i < n; i++) mx = x[i] > mx ? x[i] : mx;
    float sum = 0;
    for (int i = 0; i < n; i++) {
        x[i] = expf(x[i] - mx);
        sum += x[i];
    }
    const float inv = 1.0f / sum;
#pragma omp simd
    for (int i = 0; i < n; i++) x[i] *= inv;
}

void ds_swiglu(float *a, const float *b, int n) {
#pragma omp simd
    for (int i = 0; i < n; i++) a[i] = a[i] / (1.0f + expf(-a[i])) * b[i];
}

void ds_add(float *y, const float *x, int n) {
#pragma omp simd
    for (int i = 0; i < n; i++) y[i] += x[i];
}

float ds_dot(const float *a, const float *b, int n) {
    float s = 0;
#pragma omp simd reduction(+ : s)
    for (int i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}

void ds_axpy(float *y, float alpha, const float *x, int n) {
#pragma omp simd
    for (int i = 0; i < n; i++) y[i] += alpha * x[i];
}
