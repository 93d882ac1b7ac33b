// The training loop: data, online target forwards, anchor sampling, AdamW with warmup + cosine,
// gradient clipping, checkpoints (periodic, final, on interrupt) and exact resumption, optionally
// data-parallel over MPI ranks.
#ifndef DS_TRAIN_TRAINER_H
#define DS_TRAIN_TRAINER_H

#include "train/train.h"

typedef struct {
    const char *target;   // target model path
    const char *data;     // training data file (dspark datagen)
    const char *init;     // drafter to start from (NULL: a fresh one from `shape` is written to OUT/init)
    const char *out;      // output directory (checkpoint + optimizer state + metrics.jsonl)
    ds_drafter_init_params shape; // when init is NULL
    int steps;            // optimizer steps
    int batch;            // sequences per step (global, over all ranks)
    int anchors;          // anchor blocks per sequence (at most)
    float lr, warmup;     // peak learning rate; warmup as a fraction of steps
    float clip;           // global gradient-norm clip (0 = off)
    float weight_decay;   // AdamW decoupled weight decay (0)
    ds_loss_weights lw;
    uint64_t seed;
    int resume;           // continue from OUT's checkpoint
    int save_every;       // checkpoint period in steps (0 = steps / 10)
    int threads;
    const char *plot;     // loss-curve PNG path (gnuplot), or NULL
    volatile int *interrupted; // set asynchronously (Ctrl-C): save and stop after the current step
    int quiet;            // no progress lines
    int stop_after;       // save and return after this many steps of this run (0 = run to the end)
} ds_train_opts;

ds_train_opts ds_train_defaults(void);

// Run training. With MPI (mpirun -np N), every rank calls this; rank 0 writes checkpoints and logs.
// Returns DS_ERR_INTERRUPTED after saving when interrupted.
ds_status ds_train_run(const ds_train_opts *o);

// MPI helpers (single-process fallbacks when built without MPI). ds_mpi_init is called once by the
// train command before anything else.
void ds_mpi_init(int *argc, char ***argv);
int ds_mpi_rank(void);
int ds_mpi_size(void);
void ds_mpi_finalize(void);
// Element-wise sums over all ranks, in place (a barrier when n is 0).
void ds_mpi_allreduce_sum(double *buf, size_t n);
void ds_mpi_allreduce_sum_f(float *buf, size_t n);

#endif
