// Sequential Temperature Scaling and its measures (see calibrate.h).
#include "sched/calibrate.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"

double ds_calib_sigmoid(double x) {
    if (x >= 0) return 1.0 / (1.0 + exp(-x));
    const double e = exp(x);
    return e / (1.0 + e);
}

double ds_calib_logit(double c) {
    if (!(c >= 1e-7)) c = 1e-7; // NaN too
    if (c > 1 - 1e-7) c = 1 - 1e-7;
    return log(c) - log(1 - c);
}

static int slots_of(const ds_calib_data *d, int r) { return d->n_slots ? d->n_slots[r] : d->K; }

ds_status ds_calib_check(const ds_calib_data *d) {
    if (d->K < 1 || d->K > DS_CALIB_MAX_POS)
        return ds_fail(DS_ERR_INVALID, "calibration: %d positions (1..%d)", d->K, DS_CALIB_MAX_POS);
    if (d->n < 0) return ds_fail(DS_ERR_INVALID, "calibration: negative round count");
    if (d->n > 0 && (!d->z || !d->accepted))
        return ds_fail(DS_ERR_INVALID, "calibration: missing logits or acceptances");
    for (int r = 0; r < d->n; r++) {
        const int m = slots_of(d, r);
        if (m < 0 || m > d->K)
            return ds_fail(DS_ERR_INVALID, "calibration: round %d verified %d slots (0..%d)", r, m, d->K);
        if (d->accepted[r] < 0 || d->accepted[r] > m)
            return ds_fail(DS_ERR_INVALID, "calibration: round %d accepted %d of %d slots", r, d->accepted[r], m);
        for (int k = 0; k < m; k++)
            if (!isfinite(d->z[(size_t)r * d->K + k]))
                return ds_fail(DS_ERR_INVALID, "calibration: round %d has a non-finite logit at slot %d", r, k + 1);
    }
    return DS_OK;
}

int ds_calib_cumulative(const ds_calib_data *d, const double *temps, int k, double *conf, unsigned char *label) {
    int n = 0;
    for (int r = 0; r < d->n; r++) {
        if (slots_of(d, r) < k) continue; // position k not observed in this round
        const double *z = d->z + (size_t)r * d->K;
        double a = 1;
        for (int i = 0; i < k; i++) a *= ds_calib_sigmoid(temps ? z[i] / temps[i] : z[i]);
        conf[n] = a;
        label[n++] = d->accepted[r] >= k;
    }
    return n;
}

static int bin_of(double c, int bins) {
    int b = (int)(c * bins);
    return b < 0 ? 0 : b >= bins ? bins - 1 : b;
}

void ds_calib_reliability(const double *conf, const unsigned char *label, int n, int bins, ds_calib_bin *out) {
    for (int b = 0; b < bins; b++) out[b] = (ds_calib_bin){0, 0, 0};
    for (int i = 0; i < n; i++) {
        ds_calib_bin *o = &out[bin_of(conf[i], bins)];
        o->count++;
        o->conf += conf[i];
        o->acc += label[i];
    }
    for (int b = 0; b < bins; b++)
        if (out[b].count) {
            out[b].conf /= out[b].count;
            out[b].acc /= out[b].count;
        }
}

// Σ_b |Σ_{i∈b} (label_i − conf_i)| / n: the same as the count-weighted mean of |acc_b − conf_b|.
double ds_calib_ece(const double *conf, const unsigned char *label, int n, int bins) {
    if (n <= 0 || bins < 1 || bins > 256) return NAN;
    double diff[256] = {0};
    for (int i = 0; i < n; i++) diff[bin_of(conf[i], bins)] += (double)label[i] - conf[i];
    double s = 0;
    for (int b = 0; b < bins; b++) s += fabs(diff[b]);
    return s / n;
}

typedef struct {
    double s;
    unsigned char y;
} scored;

static int cmp_scored(const void *a, const void *b) {
    const double x = ((const scored *)a)->s, y = ((const scored *)b)->s;
    return x < y ? -1 : x > y;
}

ds_status ds_calib_auc(const double *score, const unsigned char *label, int n, double *auc) {
    *auc = NAN;
    long npos = 0;
    for (int i = 0; i < n; i++) npos += label[i] != 0;
    const long nneg = n - npos;
    if (n <= 0 || !npos || !nneg) return DS_OK;
    scored *v = malloc(sizeof *v * (size_t)n);
    if (!v) return ds_fail(DS_ERR_NOMEM, "out of memory");
    for (int i = 0; i < n; i++) v[i] = (scored){score[i], label[i] != 0};
    qsort(v, (size_t)n, sizeof *v, cmp_scored);
    double rank_sum = 0; // of the positives, ranks 1-based, ties averaged
    for (int i = 0; i < n;) {
        int j = i;
        long pos = 0;
        while (j < n && v[j].s == v[i].s) pos += v[j++].y;
        rank_sum += pos * (0.5 * (double)(i + 1 + j)); // ranks i+1 .. j, mean (i+1+j)/2
        i = j;
    }
    free(v);
    *auc = (rank_sum - 0.5 * (double)npos * (double)(npos + 1)) / ((double)npos * (double)nneg);
    return DS_OK;
}

// Grid exponents ordered by |2^(i/10) − 1|: scanning in this order and keeping only strict
// improvements gives ties to the temperature closest to 1.
static void grid_order(int *ord) {
    int n = 0;
    for (int i = DS_CALIB_GRID_LO; i <= DS_CALIB_GRID_HI; i++) ord[n++] = i;
    for (int a = 1; a < n; a++) // insertion sort: 61 entries
        for (int b = a; b > 0; b--) {
            const double x = fabs(pow(2, ord[b] / 10.0) - 1), y = fabs(pow(2, ord[b - 1] / 10.0) - 1);
            if (x >= y) break;
            const int t = ord[b];
            ord[b] = ord[b - 1];
            ord[b - 1] = t;
        }
}

ds_status ds_sts_fit(const ds_calib_data *d, ds_sts_result *out) {
    memset(out, 0, sizeof *out);
    ds_status st = ds_calib_check(d);
    if (st) return st;
    const int K = d->K, N = d->n;
    out->K = K;
    for (int k = 0; k < K; k++) out->temps[k] = 1;
    const size_t cap = N ? (size_t)N : 1;
    double *prev = malloc(sizeof(double) * cap); // Π_{i<k} ĉ_i of each round observing k (fixed T)
    double *zk = malloc(sizeof(double) * cap);   // its z_k
    double *conf = malloc(sizeof(double) * cap);
    unsigned char *lab = malloc(cap);
    if (!prev || !zk || !conf || !lab) {
        st = ds_fail(DS_ERR_NOMEM, "out of memory");
        goto done;
    }
    enum { G = DS_CALIB_GRID_HI - DS_CALIB_GRID_LO + 1 };
    int ord[G];
    grid_order(ord);
    for (int k = 1; k <= K; k++) {
        // The rounds observing position k, their fixed prefix product and z_k.
        int n = 0, npos = 0;
        for (int r = 0; r < N; r++) {
            if (slots_of(d, r) < k) continue;
            const double *z = d->z + (size_t)r * K;
            double a = 1;
            for (int i = 0; i < k - 1; i++) a *= ds_calib_sigmoid(z[i] / out->temps[i]);
            prev[n] = a;
            zk[n] = z[k - 1];
            lab[n] = d->accepted[r] >= k;
            npos += lab[n++];
        }
        out->n[k - 1] = n;
        out->n_pos[k - 1] = npos;
        if (n) {
            double best = INFINITY;
            int best_i = 0;
            for (int g = 0; g < G; g++) {
                const double T = pow(2, ord[g] / 10.0);
                for (int j = 0; j < n; j++) conf[j] = prev[j] * ds_calib_sigmoid(zk[j] / T);
                const double e = ds_calib_ece(conf, lab, n, DS_CALIB_BINS);
                if (e < best - 1e-12) {
                    best = e;
                    best_i = ord[g];
                }
            }
            out->temps[k - 1] = pow(2, best_i / 10.0);
        }
    }
    // Before (all T = 1) and after, per position.
    for (int k = 1; k <= K; k++) {
        for (int pass = 0; pass < 2; pass++) {
            const int n = ds_calib_cumulative(d, pass ? out->temps : NULL, k, conf, lab);
            double mean = 0, auc;
            for (int j = 0; j < n; j++) mean += conf[j];
            mean = n ? mean / n : NAN;
            if ((st = ds_calib_auc(conf, lab, n, &auc))) goto done;
            const double ece = ds_calib_ece(conf, lab, n, DS_CALIB_BINS);
            if (pass) {
                out->conf_after[k - 1] = mean;
                out->ece_after[k - 1] = ece;
                out->auc_after[k - 1] = auc;
            } else {
                out->conf_before[k - 1] = mean;
                out->ece_before[k - 1] = ece;
                out->auc_before[k - 1] = auc;
            }
        }
    }
done:
    free(prev);
    free(zk);
    free(conf);
    free(lab);
    return st;
}
