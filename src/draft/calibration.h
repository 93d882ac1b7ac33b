// calibration.json, the drafter's confidence calibration next to its weights: the one module that
// writes it (dspark calibrate) and reads it (ds_drafter_load).
//   {"method": "sts", "temperatures": [T_1, ...], "acceptance": [A_1, ...] (the calibration run's
//    realized prefix acceptance per slot, null where a position was not observed: the scheduler's
//    prior), and what judges the fit and records the run: "ece_before", "ece_after", "auc",
//    "auc_before", "n" (per position), "rounds", "temp", "prompts", "max_tokens", "seed"}
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

// Write it to `path` atomically.
ds_status ds_calibration_save(const ds_calibration *c, const char *path);

// Read what a drafter uses from `path`: up to block_size temperatures (*n_temps) and the
// acceptance prior (*n_accept, up to its first null; it must not increase with the position) and
// the sampling temperature it was realized at (*accept_temp, "temp"; 0 when absent; may be NULL).
// *found = 0 (and DS_OK) when there is no file. Errors name the file and the problem.
ds_status ds_calibration_read(const char *path, int block_size, float *temps, int *n_temps, float *accept,
                              int *n_accept, float *accept_temp, int *found);

#endif
