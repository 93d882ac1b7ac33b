#include "kernels/ops.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "kernels/half.h"
#include "kernels/simd.h"

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

__attribute__((target("avx,f16c"))) static void f32_to_f16_f16c(uint16_t *dst, const float *src, int n) {
    int i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(void *)(dst + i), _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
    for (; i < n; i++) dst[i] = (uint16_t)_cvtss_sh(src[i], _MM_FROUND_TO_NEAREST_INT);
}

void ds_f32_to_f16_n(uint16_t *dst, const float *src, int n) {
    static _Atomic int f16c = -1; // (a property of the CPU, asked once)
    int v = atomic_load_explicit(&f16c, memory_order_relaxed);
    if (v < 0) atomic_store_explicit(&f16c, v = ds_cpu_has_f16c(), memory_order_relaxed);
    if (v) f32_to_f16_f16c(dst, src, n);
    else
        for (int i = 0; i < n; i++) dst[i] = ds_f32_to_f16(src[i]);
}

void *ds_transposed_regrow(void *old, size_t lines, int old_cap, int len, int new_cap, size_t elt) {
    char *p = ds_malloc_huge(lines * (size_t)new_cap * elt); // (streamed by every decode step)
    if (!p) return NULL;
    for (size_t i = 0; old && i < lines; i++)
        memcpy(p + i * (size_t)new_cap * elt, (const char *)old + i * (size_t)old_cap * elt, (size_t)len * elt);
    free(old);
    return p;
}

// ---- shared by the target, the drafter and the trainer ------------------------------------------

void ds_rmsnorm_rows(float *out, const float *x, const float *w, int rows, int n, float eps) {
    for (int i = 0; i < rows; i++) ds_rmsnorm(out + (size_t)i * n, x + (size_t)i * n, w, n, eps);
}

void ds_rmsnorm_fwd(float *y, float *inv, const float *x, const float *w, int rows, int n, float eps) {
    for (int i = 0; i < rows; i++) {
        const float *xi = x + (size_t)i * n;
        double ss = 0;
        for (int j = 0; j < n; j++) ss += (double)xi[j] * xi[j];
        const float s = 1.0f / sqrtf((float)(ss / n) + eps);
        inv[i] = s;
        float *yi = y + (size_t)i * n;
        for (int j = 0; j < n; j++) yi[j] = xi[j] * s * (w ? w[j] : 1.0f);
    }
}

void ds_rmsnorm_bwd(float *dx, float *dw, const float *dy, const float *x, const float *w, const float *inv,
                    int rows, int n) {
    for (int i = 0; i < rows; i++) {
        const float *xi = x + (size_t)i * n, *gi = dy + (size_t)i * n;
        const float s = inv[i];
        double gx = 0;
        for (int j = 0; j < n; j++) gx += (double)gi[j] * (w ? w[j] : 1.0f) * xi[j];
        const float c = (float)(gx / n) * s * s * s;
        float *di = dx + (size_t)i * n;
        for (int j = 0; j < n; j++) {
            di[j] += s * gi[j] * (w ? w[j] : 1.0f) - c * xi[j];
            if (dw) dw[j] += gi[j] * xi[j] * s;
        }
    }
}

void ds_rope_at(float *x, int n_heads, int head_dim, const float *inv_freq, int pos, int inverse,
                ds_rope_layout layout, float *cos_, float *sin_) {
    const int half = head_dim / 2;
    ds_rope_angles(cos_, sin_, inv_freq, half, pos);
    if (inverse)
        for (int i = 0; i < half; i++) sin_[i] = -sin_[i];
    ds_rope(x, n_heads, head_dim, cos_, sin_, layout);
}

void ds_add_rows(float *y, const float *b, int rows, int n) {
    if (b)
        for (int i = 0; i < rows; i++) ds_add(y + (size_t)i * n, b, n);
}

void ds_scale(float *x, float s, size_t n) {
    for (size_t i = 0; i < n; i++) x[i] *= s;
}

void ds_softcap(float *x, size_t n, float c) {
    for (size_t i = 0; i < n; i++) x[i] = c * tanhf(x[i] / c);
}

void ds_geglu_tanhf(float *a, const float *b, int n) {
    for (int i = 0; i < n; i++) a[i] = ds_gelu_tanh(a[i], NULL) * b[i];
}
