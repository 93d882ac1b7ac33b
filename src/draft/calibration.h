// calibration.json, the drafter's confidence calibration next to its weights: the one module that
// writes it (dspark calibrate) and reads it (ds_drafter_load).
//   {"method": "sts", "temperatures": [T_1, ...], "acceptance": [A_1, ...] (the calibration run's
//    realized prefix acceptance per slot, null where a position was not observed: the scheduler's
//    prior), and what judges the fit and records the run: "ece_before", "ece_after", "auc",
//    "auc_before", "n" (per position), "rounds", "temp", "prompts", "max_tokens", "seed",
//    optionally "sampled": {the same per-class keys, "temp" > 0} when the top level is at temp 0}
// The top level is one class of rounds: greedy (its "temp" 0) or sampled (> 0). "sampled" is the
// other class's own fit: a drafter accepts far less at temperature 1 than at 0, so confidences
// calibrated on greedy rounds overstate a sampled round's survival. A class without its own fit
// uses the top level's temperatures and has no acceptance prior.
#ifndef DS_DRAFT_CALIBRATION_H
#define DS_DRAFT_CALIBRATION_H

#include "dspark/draft.h"

#define DS_CALIBRATION_MAX 64

typedef struct {
    int K; // positions (slots per block)
    // Per position (K); NaN where not observed (null in the file).
    double temps[DS_CALIBRATION_MAX], acceptance[DS_CALIBRATION_MAX];
    double ece_before[DS_CALIBRATION_MAX], ece_after[DS_CALIBRATION_MAX];
    double auc_before[DS_CALIBRATION_MAX], auc_after[DS_CALIBRATION_MAX];
    double n[DS_CALIBRATION_MAX];
    // The run.
    int rounds;
    double temp;
    const char *prompts;
    long max_tokens, seed;
} ds_calibration;

// Write c (the top level) and, when sampled is not NULL, the sampled class's fit ("sampled": c at
// temp 0, sampled at a temp > 0, the same K) to `path` atomically.
ds_status ds_calibration_save(const ds_calibration *c, const ds_calibration *sampled, const char *path);

// What a drafter uses of one class of rounds.
enum { DS_CALIB_GREEDY, DS_CALIB_SAMPLED, DS_CALIB_CLASSES };
typedef struct {
    float temps[DS_CALIBRATION_MAX]; // STS temperatures (n_temps, at most block_size)
    int n_temps;
    float accept[DS_CALIBRATION_MAX]; // the acceptance prior (n_accept, up to its first null; it must not
    int n_accept;                     // increase with the position); 0 = none for this class
} ds_calibration_class;

// Read `path` into cls[DS_CALIB_GREEDY] and cls[DS_CALIB_SAMPLED] (see the top of this file).
// *found = 0 (and DS_OK) when there is no file. Errors name the file and the problem.
ds_status ds_calibration_read(const char *path, int block_size, ds_calibration_class cls[DS_CALIB_CLASSES],
                              int *found);

#endif
