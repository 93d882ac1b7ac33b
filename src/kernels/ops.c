#include "kernels/ops.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"

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

// Lane l of a 16-column block accumulates column 16·i + l of every block i in order; the 16 lanes
// are then added by a fixed pairwise tree. So a reduction depends only on the columns' values and
// their index within the span, never on where they are stored (ds_attend2's two pieces).
static inline float lanes_sum(float acc[DS_ATTEND_LANES]) {
    for (int w = DS_ATTEND_LANES / 2; w; w >>= 1)
        for (int l = 0; l < w; l++) acc[l] += acc[l + w];
    return acc[0];
}

// acc (16) += s[j] · v[j] per lane over n columns (n a multiple of 16).
static inline void lanes_dot(float acc[DS_ATTEND_LANES], const float *s, const float *v, int n) {
    for (int j = 0; j < n; j += DS_ATTEND_LANES)
        for (int l = 0; l < DS_ATTEND_LANES; l++) acc[l] += s[j + l] * v[j + l];
}

DS_MULTIVERSION
void ds_attend2(float *out, const float *q, const float *K, const float *V, int n1, int stride, const float *K2,
                const float *V2, int n2, int stride2, int head_dim, float scale, float *scores) {
    const int n = n1 + n2;
    float *s2 = scores + n1;
    // scores = scale · Σ_d q[d] K[d][:]   (axpys along positions: each column on its own)
    for (int j = 0; j < n; j++) scores[j] = 0;
    for (int d = 0; d < head_dim; d++) {
        const float a = q[d] * scale;
        ds_axpy(scores, a, K + (size_t)d * stride, n1);
        if (n2) ds_axpy(s2, a, K2 + (size_t)d * stride2, n2);
    }
    // softmax
    float mx = -INFINITY;
    for (int j = 0; j < n; j++) mx = scores[j] > mx ? scores[j] : mx;
#pragma omp simd
    for (int j = 0; j < n; j++) scores[j] = ds_expf(scores[j] - mx);
    const int nb = n / DS_ATTEND_LANES * DS_ATTEND_LANES, tail = n - nb;
    float acc[DS_ATTEND_LANES] = {0};
    for (int j = 0; j < nb; j += DS_ATTEND_LANES)
        for (int l = 0; l < DS_ATTEND_LANES; l++) acc[l] += scores[j + l];
    for (int l = 0; l < tail; l++) acc[l] += scores[nb + l];
    const float inv = 1.0f / lanes_sum(acc);
    // out[d] = (scores · V[d][:]) / sum, the blocks of the first piece, then the second's, then the
    // last partial block (in whichever piece it lies)
    const int nb1 = n2 ? n1 : nb, nb2 = nb - nb1;
    for (int d = 0; d < head_dim; d++) {
        const float *v1 = V + (size_t)d * stride, *v2 = n2 ? V2 + (size_t)d * stride2 : NULL;
        for (int l = 0; l < DS_ATTEND_LANES; l++) acc[l] = 0;
        lanes_dot(acc, scores, v1, nb1);
        if (nb2) lanes_dot(acc, s2, v2, nb2);
        const float *vt = n2 ? v2 + nb2 : v1 + nb1;
        for (int l = 0; l < tail; l++) acc[l] += scores[nb + l] * vt[l];
        out[d] = lanes_sum(acc) * inv;
    }
}

void ds_attend(float *out, const float *q, const float *K, const float *V, int n_ctx, int stride, int head_dim,
               float scale, float *scores) {
    ds_attend2(out, q, K, V, n_ctx, stride, NULL, NULL, 0, 0, head_dim, scale, scores);
}

float *ds_transposed_regrow(float *old, size_t lines, int old_cap, int len, int new_cap) {
    float *p = ds_malloc_huge(lines * (size_t)new_cap * sizeof(float)); // (streamed by every decode step)
    if (!p) return NULL;
    for (size_t i = 0; old && i < lines; i++)
        memcpy(p + i * (size_t)new_cap, old + i * (size_t)old_cap, (size_t)len * sizeof(float));
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
