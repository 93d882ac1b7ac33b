// The training loop: data, online target forwards, anchor sampling, AdamW with warmup + cosine,
// gradient clipping, checkpoints (periodic, final, on interrupt) and exact resumption, optionally
// data-parallel over MPI ranks.
#ifndef DS_TRAIN_TRAINER_H
#define DS_TRAIN_TRAINER_H

#include "train/heldout.h"
#include "train/train.h"

// What the loop reports (through ds_train_opts.progress; the library never prints).
typedef enum {
    DS_TRAIN_EV_STEP = 0, // after every optimizer step
    DS_TRAIN_EV_EVAL,     // after a held-out evaluation (its step's STEP event comes first)
    DS_TRAIN_EV_MESSAGE,  // one line for the user (no newline)
} ds_train_event_kind;

#define DS_TRAIN_MAX_EVAL_TEMPS 4

typedef struct {
    ds_train_event_kind kind;
    int step, steps;                  // optimizer steps done, of the run's total
    int first_step;                   // the step this run started at (resume)
    // STEP: weight-normalized losses, probabilistic τ of the training blocks, schedule, speed
    double loss, ce, l1, conf, ptau, lr, grad_norm;
    double elapsed_s, tok_per_s, blocks_per_s, eta_s;
    // EVAL: one result per evaluation temperature; best_tau / best_step: the best held-out τ (at
    // the first temperature) so far and its step (0: none yet); is_best: this evaluation is it
    int n_eval;
    const float *eval_temps;          // (n_eval)
    const ds_heldout_result *eval;    // (n_eval)
    double best_tau;
    int best_step, is_best;
    const char *message;              // MESSAGE
} ds_train_event;

typedef void (*ds_train_progress_fn)(void *ctx, const ds_train_event *ev);

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
    volatile int *interrupted; // set asynchronously (Ctrl-C): save and stop after the current step
    int stop_after;       // save and return after this many steps of this run (0 = run to the end)
    // Held-out evaluation (heldout.h) every eval_every steps and at the last step: τ and acceptance
    // by position in metrics.jsonl ("heldout") and in an EVAL event, at each of eval_temps.
    const char *eval_prompts; // prompt file, or NULL (no evaluation)
    int eval_every;           // steps between evaluations (0 = save_every)
    float eval_temps[DS_TRAIN_MAX_EVAL_TEMPS];
    int n_eval_temps;         // (0 = one, at temperature 0)
    int eval_max_tokens;      // tokens generated per prompt (128, as dspark eval)
    uint64_t eval_seed;       // prompt i is decoded with seed eval_seed + i (0, as dspark eval)
    int keep_best;            // OUT/best: the drafter of the best held-out τ at eval_temps[0]
    int patience;             // stop after this many evaluations without a better τ (0 = never)
    ds_train_progress_fn progress; // NULL = silent
    void *progress_ctx;
} ds_train_opts;

ds_train_opts ds_train_defaults(void);

// Run training. With MPI (mpirun -np N), every rank calls this; rank 0 writes checkpoints and logs.
// Returns DS_ERR_INTERRUPTED after saving when interrupted.
//
// OUT's layout: checkpoint/ (model.safetensors, config.json, optimizer.safetensors,
// trainer_state.json) is replaced as one directory at every save (ds_atomic_dir_replace), so a kill
// at any moment leaves the previous checkpoint or the new one, never a mix; model.safetensors,
// config.json, optimizer.safetensors and trainer_state.json at OUT's top are symbolic links into it,
// so OUT itself is the drafter directory. best/ (keep_best) is the drafter of the best held-out τ
// with heldout.json (step, temperature, τ, acceptance by position), replaced the same way. init/ is
// the fresh drafter a run without --init started from; metrics.jsonl one JSON line per step.
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
// Every rank's n bytes, concatenated in rank order, into a malloc'ed *out at rank 0 (*total bytes;
// other ranks get NULL and 0). Returns -1 when out of memory (or more than 2 GiB from one rank).
int ds_mpi_gather_root(const void *buf, size_t n, void **out, size_t *total);

#endif
