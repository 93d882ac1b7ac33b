// src/kernels/attend.h: ds_attend_many gives each query the bits it gets alone, whatever queries share
// the call (same or different span starts and ends, 1..16 queries, head sizes that are and are not
// multiples of 4), equal to ds_attend2 over the same span; both agree with softmax attention in double
// precision, on every instruction set the CPU has (AVX-512 and AVX2 bit for bit alike); and
// ds_attend2 over a span in two pieces (a token tree's gathered ancestors) equals the
// same span held in one piece. Over a cache of halves (f16) every kernel gives, bit for bit, what it
// gives over a float cache holding the same values.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/attend.h"
#include "kernels/half.h"

static uint64_t rng = 88172645463325252ull;
static float frand(void) { // uniform in [-1, 1)
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (float)((rng >> 40) / (double)(1 << 24)) * 2.0f - 1.0f;
}
static int irand(int n) { return (int)((frand() + 1.0f) * 0.5f * (float)n) % n; }

enum { CAP = 320, MAXN = 300 };

// Softmax attention in double precision over columns [s, e) of one head.
static void attend_double(double *out, const float *q, const float *K, const float *V, int s, int e, int hd,
                          float scale) {
    double sc[CAP], mx = -INFINITY, sum = 0;
    for (int j = s; j < e; j++) {
        double a = 0;
        for (int d = 0; d < hd; d++) a += (double)q[d] * K[(size_t)d * CAP + j];
        sc[j] = a * scale;
        mx = sc[j] > mx ? sc[j] : mx;
    }
    for (int j = s; j < e; j++) sum += sc[j] = exp(sc[j] - mx);
    for (int d = 0; d < hd; d++) {
        double o = 0;
        for (int j = s; j < e; j++) o += sc[j] * V[(size_t)d * CAP + j];
        out[d] = o / sum;
    }
}

// A random call of nq queries over one head of size hd: spans sharing starts in runs (a row's heads,
// a sequence's rows), ends consecutive or random, some 1 column long; every query's output against
// itself alone and ds_attend2, bit for bit, and against double precision. f16: the cache holds halves
// (Kh, Vh), and the call equals, bit for bit, the same call over floats holding their values.
static void check_call(int hd, int nq, int f16) {
    float *K = malloc(sizeof(float) * hd * CAP), *V = malloc(sizeof(float) * hd * CAP);
    uint16_t *Kh = malloc(sizeof(uint16_t) * hd * CAP), *Vh = malloc(sizeof(uint16_t) * hd * CAP);
    float *q = malloc(sizeof(float) * hd * DS_ATTEND_MAX_Q), *o = malloc(sizeof(float) * hd * DS_ATTEND_MAX_Q);
    float *alone = malloc(sizeof(float) * hd), *two = malloc(sizeof(float) * hd);
    float *sc = malloc(sizeof(float) * DS_ATTEND_MAX_Q * MAXN);
    double *ref = malloc(sizeof(double) * hd);
    for (int i = 0; i < hd * CAP; i++) {
        K[i] = 3 * frand(), V[i] = frand();
        Kh[i] = ds_f32_to_f16(K[i]), Vh[i] = ds_f32_to_f16(V[i]);
        if (f16) K[i] = ds_f16_to_f32(Kh[i]), V[i] = ds_f16_to_f32(Vh[i]);
    }
    const void *Kc = f16 ? (const void *)Kh : K, *Vc = f16 ? (const void *)Vh : V;
    const size_t e = f16 ? 2 : 4;
    for (int i = 0; i < hd * nq; i++) q[i] = 2 * frand();
    float *out[DS_ATTEND_MAX_Q];
    const float *qs[DS_ATTEND_MAX_Q];
    int start[DS_ATTEND_MAX_Q], end[DS_ATTEND_MAX_Q];
    const int mode = irand(3), base = 1 + irand(MAXN - 20);
    for (int i = 0; i < nq; i++) {
        out[i] = o + (size_t)i * hd;
        qs[i] = q + (size_t)i * hd;
        if (mode == 0) { // a verification: rows at consecutive positions, 2 heads each
            end[i] = base + i / 2 + 1;
            start[i] = 0;
        } else if (mode == 1) { // a sliding window of 37 columns over the same rows
            end[i] = base + i / 2 + 1;
            start[i] = end[i] > 37 ? end[i] - 37 : 0;
        } else { // anything: starts shared in runs of 1-5, random ends
            start[i] = i && irand(4) ? start[i - 1] : irand(MAXN / 2);
            end[i] = start[i] + 1 + irand(i % 3 ? MAXN - start[i] : 3);
        }
    }
    const float scale = 1.0f / sqrtf((float)hd);
    ds_attend_many(nq, out, qs, start, end, Kc, Vc, f16, CAP, hd, scale, sc, MAXN);
    for (int i = 0; i < nq; i++) {
        ds_attend_many(1, &alone, &qs[i], &start[i], &end[i], Kc, Vc, f16, CAP, hd, scale, sc, MAXN);
        assert_memory_equal(out[i], alone, sizeof(float) * hd);
        ds_attend2(two, qs[i], (const char *)Kc + start[i] * e, (const char *)Vc + start[i] * e, end[i] - start[i], CAP,
                   NULL, NULL, 0, 0, f16, hd, scale, sc);
        assert_memory_equal(out[i], two, sizeof(float) * hd);
        if (f16) { // the same query over floats holding the halves' values
            ds_attend_many(1, &alone, &qs[i], &start[i], &end[i], K, V, 0, CAP, hd, scale, sc, MAXN);
            assert_memory_equal(out[i], alone, sizeof(float) * hd);
        }
        attend_double(ref, qs[i], K, V, start[i], end[i], hd, scale);
        for (int d = 0; d < hd; d++) assert_true(fabs(out[i][d] - ref[d]) <= 2e-6 + 2e-6 * fabs(ref[d]));
    }
    free(K), free(V), free(Kh), free(Vh), free(q), free(o), free(alone), free(two), free(sc), free(ref);
}

static const char *const isas[] = {"avx512", "avx2", "scalar"};

static void test_many_is_each_alone(void **state) {
    (void)state;
    const int hds[] = {8, 6, 64, 128, 256};
    for (int i = 0; i < 3; i++) {
        if (!ds_attend_force_isa(isas[i])) {
            printf("skipped on %s: this CPU lacks it\n", isas[i]);
            continue;
        }
        for (int h = 0; h < 5; h++)
            for (int nq = 1; nq <= DS_ATTEND_MAX_Q; nq++)
                for (int rep = 0; rep < 4; rep++) check_call(hds[h], nq, rep & 1);
    }
}

// AVX-512 and AVX2 fuse the same multiply-adds in the same order: the same bits. The scalar kernels
// round each product, so they differ, within rounding.
static void test_isas_agree(void **state) {
    (void)state;
    if (!ds_attend_force_isa("avx512") || !ds_attend_force_isa("avx2")) {
        printf("skipped: this CPU lacks AVX-512 or AVX2\n");
        return;
    }
    enum { HD = 128, NQ = 16 };
    float *K = malloc(sizeof(float) * HD * CAP), *V = malloc(sizeof(float) * HD * CAP), q[HD * NQ];
    float o[3][HD * NQ], *sc = malloc(sizeof(float) * NQ * CAP);
    for (int i = 0; i < HD * CAP; i++) K[i] = 3 * frand(), V[i] = frand();
    for (int i = 0; i < HD * NQ; i++) q[i] = 2 * frand();
    float *out[NQ];
    const float *qs[NQ];
    int start[NQ], end[NQ];
    for (int i = 0; i < 3; i++) {
        assert_true(ds_attend_force_isa(isas[i]));
        for (int j = 0; j < NQ; j++) out[j] = o[i] + j * HD, qs[j] = q + j * HD, start[j] = 0, end[j] = 250 + j / 2;
        ds_attend_many(NQ, out, qs, start, end, K, V, 0, CAP, HD, 0.09f, sc, CAP);
    }
    assert_memory_equal(o[0], o[1], sizeof o[0]);
    for (int i = 0; i < HD * NQ; i++) assert_true(fabsf(o[2][i] - o[0][i]) <= 1e-6f + 1e-6f * fabsf(o[0][i]));
    free(K), free(V), free(sc);
}

// A span of n columns whose last n2 sit elsewhere (gathered, another stride): the same bits as one
// piece, for every split at a multiple of 16 lanes, over floats and over halves.
static void test_two_pieces_are_one(void **state) {
    (void)state;
    enum { HD = 64 };
    float *K = malloc(sizeof(float) * HD * CAP), *V = malloc(sizeof(float) * HD * CAP), q[HD], one[HD], two[HD];
    float *K2 = malloc(sizeof(float) * HD * 40), *V2 = malloc(sizeof(float) * HD * 40), sc[CAP];
    uint16_t *Kh = malloc(sizeof(uint16_t) * HD * CAP), *Vh = malloc(sizeof(uint16_t) * HD * CAP);
    uint16_t *K2h = malloc(sizeof(uint16_t) * HD * 40), *V2h = malloc(sizeof(uint16_t) * HD * 40);
    for (int i = 0; i < HD * CAP; i++) K[i] = 3 * frand(), V[i] = frand(), Kh[i] = ds_f32_to_f16(K[i]), Vh[i] = ds_f32_to_f16(V[i]);
    for (int d = 0; d < HD; d++) q[d] = 2 * frand();
    for (int i = 0; i < 3; i++)
    for (int f16 = 0; f16 < 2; f16++)
    for (int n = 1; n <= 200 && ds_attend_force_isa(isas[i]); n += 7)
        for (int n1 = 0; n1 < n; n1 += DS_ATTEND_LANES) {
            const int n2 = n - n1 > 40 ? 0 : n - n1;
            if (!n2) continue;
            for (int d = 0; d < HD; d++)
                for (int j = 0; j < n2; j++) {
                    K2[d * 40 + j] = K[d * CAP + n1 + j], V2[d * 40 + j] = V[d * CAP + n1 + j];
                    K2h[d * 40 + j] = Kh[d * CAP + n1 + j], V2h[d * 40 + j] = Vh[d * CAP + n1 + j];
                }
            const int s = 0, e = n;
            float *po = one;
            const float *pq = q;
            if (f16) {
                ds_attend_many(1, &po, &pq, &s, &e, Kh, Vh, 1, CAP, HD, 0.125f, sc, CAP);
                ds_attend2(two, q, Kh, Vh, n1, CAP, K2h, V2h, n2, 40, 1, HD, 0.125f, sc);
            } else {
                ds_attend_many(1, &po, &pq, &s, &e, K, V, 0, CAP, HD, 0.125f, sc, CAP);
                ds_attend2(two, q, K, V, n1, CAP, K2, V2, n2, 40, 0, HD, 0.125f, sc);
            }
            assert_memory_equal(one, two, sizeof one);
        }
    free(K), free(V), free(K2), free(V2), free(Kh), free(Vh), free(K2h), free(V2h);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_many_is_each_alone),
        cmocka_unit_test(test_two_pieces_are_one),
        cmocka_unit_test(test_isas_agree),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
