// The rounding rule of the integer products (kernels/qmatmul.h), written from its contract
// independently of ds_qx_pack: per group of gs, d = amax/127, r = round-half-even(x·(127/amax)) in
// f32; xhat = d·r is what the reference products multiply the dequantized weights with.
#ifndef DS_TEST_ROUND_REF_H
#define DS_TEST_ROUND_REF_H

#include <math.h>
#include <stddef.h>

static inline void round_input_ref(const float *x, int cols, int gs, float *xhat) {
    for (int g = 0; g < cols / gs; g++) {
        const float *xg = x + (size_t)g * gs;
        float amax = 0;
        for (int j = 0; j < gs; j++) amax = fabsf(xg[j]) > amax ? fabsf(xg[j]) : amax;
        const float d = amax / 127.0f, id = amax > 0 ? 127.0f / amax : 0.0f;
        for (int j = 0; j < gs; j++) {
            const float t = xg[j] * id;
            float r = floorf(t);
            const float frac = t - r;
            if (frac > 0.5f || (frac == 0.5f && fmodf(r, 2.0f) != 0.0f)) r += 1.0f; // half to even
            xhat[(size_t)g * gs + j] = d * r;
        }
    }
}

#endif
