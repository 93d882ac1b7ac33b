// Confidence calibration by Sequential Temperature Scaling (docs/formats/deepspec-checkpoint.md
// §8), and the measures that judge it: expected calibration error and ROC-AUC.
//
// Data: verification rounds of a drafter with a confidence head, each with the raw per-slot
// confidence logits z_1..z_m (m = the slots the round verified, at most K) and the accepted prefix
// length a (0..m). For position k (1-based) the quantity scheduling needs is the prefix survival
// A_k = Π_{i≤k} ĉ_i with ĉ_i = σ(z_i / T_i); its realized label is 1{a ≥ k} (slot k and every slot
// before it accepted). A round that verified only m < K slots (the end of a token budget) observes
// positions 1..m only: positions past m are missing, not rejections.
//
// STS: for k = 1..K in order, T_k is picked from the grid 2^(i/10), i = -30..30, to minimize the ECE
// (20 equal-width bins) of A_k against 1{a ≥ k} over the rounds that observed position k, with
// T_1..T_{k-1} fixed at their chosen values. Ties (ECE within 1e-12) go to the temperature closest
// to 1 (|T − 1|, so 2^(-i/10) before 2^(i/10)); a position no round observed keeps T = 1.
//
// Everything here is a pure function of its inputs (no I/O, no global state).
#ifndef DS_SCHED_CALIBRATE_H
#define DS_SCHED_CALIBRATE_H

#include "dspark/sched.h"

// DS_CALIB_BINS (ECE bins) and DS_CALIB_MAX_POS (positions at most): include/dspark_jobs.h.
#define DS_CALIB_GRID_LO -30 // grid exponents: T = 2^(i/10), i = LO..HI
#define DS_CALIB_GRID_HI 30

typedef struct {
    int K;               // positions, 1..DS_CALIB_MAX_POS
    int n;               // rounds (0 is allowed: nothing is observed)
    const double *z;     // (n, K) raw confidence logits, row r = round r; only the first n_slots[r] are read
    const int *n_slots;  // (n) slots round r verified, 0..K; NULL = K in every round
    const int *accepted; // (n) accepted prefix length of round r, 0..n_slots[r]
} ds_calib_data;

// ds_sts_result (the fit and its measures per position): include/dspark_jobs.h.

// Check the data (shapes, 0 ≤ a ≤ n_slots ≤ K, finite logits): DS_ERR_INVALID naming the first problem.
ds_status ds_calib_check(const ds_calib_data *d);

// Fit STS and measure every position before (all T = 1) and after. Allocates scratch (DS_ERR_NOMEM).
ds_status ds_sts_fit(const ds_calib_data *d, ds_sts_result *out);

// The prefix survivals A_k = Π_{i≤k} σ(z_i / T_i) (k is 1-based; temps NULL = all 1) and labels
// 1{a ≥ k} of the rounds that observed position k, in round order. conf and label hold d->n
// entries; returns how many were written.
int ds_calib_cumulative(const ds_calib_data *d, const double *temps, int k, double *conf, unsigned char *label);

// Expected calibration error over `bins` (1..256) equal-width bins of [0, 1] (bin b holds
// [b/bins, (b+1)/bins), the last one is closed): Σ_b (n_b / n) |mean label_b − mean conf_b|. NaN
// when n = 0 or bins is out of range.
double ds_calib_ece(const double *conf, const unsigned char *label, int n, int bins);

// One bin of a reliability diagram: ds_calib_bin, include/dspark_jobs.h.
void ds_calib_reliability(const double *conf, const unsigned char *label, int n, int bins, ds_calib_bin *out);

// ROC-AUC by ranks (Mann-Whitney U; tied scores get their average rank): the probability that a
// random positive scores above a random negative, ties counting one half. NaN in *auc when there
// is no positive or no negative. Allocates scratch (DS_ERR_NOMEM).
ds_status ds_calib_auc(const double *score, const unsigned char *label, int n, double *auc);

// σ(x) in double, and the logit of a confidence clamped to [1e-7, 1 − 1e-7].
double ds_calib_sigmoid(double x);
double ds_calib_logit(double c);

#endif
