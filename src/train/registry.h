// The drafter registry: what `train --register` and `quantize --register` wrote, under the identity
// of the target each drafter was made for (config.json's "target_id", ds_model_target_id), so that
// generate, eval, calibrate and serve can pick a drafter for the loaded target by itself.
//
// The directory: $DSPARK_REGISTRY when set, else $XDG_DATA_HOME/dspark/drafters, else
// $HOME/.local/share/dspark/drafters (created on the first registration). One JSON file per
// registered drafter directory, named by a hash of its absolute path (registering it again replaces
// the entry), written atomically:
//   {"target_id": "llama:735c4ef8608a1084", "path": "/abs/drafter", "source": "train",
//    "tau": 3.61, "temp": 0, "step": 2400, "time": 1764590000}
// tau / temp / step: the drafter's recorded held-out τ (absent when none was measured).
// A drafter is only ever picked for the target whose identity it was registered under, and only
// while its directory's config.json still records that identity.
#ifndef DS_TRAIN_REGISTRY_H
#define DS_TRAIN_REGISTRY_H

#include <stddef.h>

#include "dspark.h"

typedef struct {
    char target_id[128];
    char path[4096];   // absolute drafter directory
    char source[16];   // "train", "quantize"
    int has_tau;
    double tau, temp;  // held-out τ and the temperature it was measured at
    int step;          // training step of the measurement (0: unknown)
    double time;       // registration time (seconds since the epoch)
    int present;       // (listing) the directory still holds a drafter recorded for target_id
} ds_registry_entry;

// The registry directory into out (cap bytes).
ds_status ds_registry_dir(char *out, size_t cap);
// Register drafter directory `dir` (its config.json must record a target_id). The held-out score
// is `tau` / `temp` / `step` when has_tau, else read from dir/heldout.json when present (what
// train --keep-best writes), else none. *out (may be NULL) gets the entry written.
ds_status ds_registry_add(const char *dir, const char *source, int has_tau, double tau, double temp, int step,
                          ds_registry_entry *out);
// Every entry (for target_id only, when not NULL), best first: by recorded τ (none last), then the
// newest. *out is malloc'ed (free it); unreadable entry files are skipped.
ds_status ds_registry_list(const char *target_id, ds_registry_entry **out, int *n);
// The best present entry for target_id into *out; *found 0 when there is none.
ds_status ds_registry_best(const char *target_id, ds_registry_entry *out, int *found);

#endif
