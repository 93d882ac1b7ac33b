// dspark/train.h: the training data file, the loss weights, MPI and the drafter registry (src/train).
// Part of the public API (include/dspark_jobs.h includes it); it includes only the headers of the
// layers below its own (docs/architecture.md), so a layer that includes it cannot name a function
// of a layer above it.
#ifndef DSPARK_TRAIN_H
#define DSPARK_TRAIN_H

#include <stddef.h>
#include <stdint.h>

#include "dspark/base.h"

#ifdef __cplusplus
extern "C" {
#endif

// ---------------------------------------------------------------------------------------------
// Drafter training data (src/train/data.c; the format is documented in src/train/data.h): reading.

typedef struct ds_data ds_data;

// Map and validate `path` completely. Errors are one line naming the file.
ds_status ds_data_open(const char *path, ds_data **out);
void ds_data_close(ds_data *d);
size_t ds_data_count(const ds_data *d);
uint64_t ds_data_vocab(const ds_data *d);
size_t ds_data_total_tokens(const ds_data *d);
// Sequence i: its ids (pointing into the mapping; valid until ds_data_close), its length and how
// many leading tokens are prompt (loss mask 0). An out-of-range i is DS_ERR_INVALID.
ds_status ds_data_get(const ds_data *d, size_t i, const int32_t **tokens, int *n_tokens, int *n_prompt);
// The k most frequent token ids among the response tokens (those after each sequence's prompt) of
// the data, most frequent first (ties: the lower id first), into ids (k); *covered gets how many
// response tokens they account for and *total how many there are. k larger than the vocabulary
// is clamped (*n_out = the ids written).
ds_status ds_data_top_tokens(const ds_data *d, int k, int32_t *ids, int *n_out, size_t *covered, size_t *total);

// ---------------------------------------------------------------------------------------------
// Training loss (src/train/step.c; the loop is the train job, dspark_jobs.h).

typedef struct {
    float ce, l1, conf; // multipliers (0.1, 0.9, 1.0)
    float decay;        // per-slot weight w_k = exp(-k / decay) (4)
    float kl;           // multiplier of KL(t ‖ p_d) = Σ_v t_v log(t_v / p_d,v), the target's distribution
                        // as a soft label (0)
} ds_loss_weights;

// ---------------------------------------------------------------------------------------------
// MPI (single-process fallbacks when built without it): ds_mpi_init once before anything else in a
// program that may run under mpirun (train, datagen), ds_mpi_finalize at the end.
void ds_mpi_init(int *argc, char ***argv);
int ds_mpi_rank(void);
int ds_mpi_size(void);
void ds_mpi_finalize(void);

// ---------------------------------------------------------------------------------------------
// The drafter registry (src/train/registry.c): what `train --register` and `quantize --register`
// wrote, under the identity of the target each drafter was made for (config.json's "target_id",
// ds_model_target_id), so that a front end can pick a drafter for the loaded target by itself.
// The directory: $DSPARK_REGISTRY when set, else $XDG_DATA_HOME/dspark/drafters, else
// $HOME/.local/share/dspark/drafters. One JSON file per registered drafter directory, written
// atomically. A drafter is only ever picked for the target whose identity it was registered under,
// and only while its directory's config.json still records that identity.

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

#ifdef __cplusplus
}
#endif

#endif
