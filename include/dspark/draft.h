// dspark/draft.h: DeepSpec drafters: loading, drafting, initialization (src/draft).
// Part of the public API (include/dspark.h composes these headers); it includes only the
// headers of the layers below its own (docs/architecture.md), so a layer that includes it
// cannot name a function of a layer above it.
#ifndef DSPARK_DRAFT_H
#define DSPARK_DRAFT_H

#include <stddef.h>
#include <stdint.h>

#include "dspark/model.h"
#include "dspark/sample.h"

#ifdef __cplusplus
extern "C" {
#endif

// ---------------------------------------------------------------------------------------------
// Drafters (DeepSpec format: DSpark, and DFlash = markov_rank 0); docs/formats/deepspec-checkpoint.md
// is the contract, docs/architecture.md how they fit in.

typedef struct ds_drafter ds_drafter;
typedef struct ds_draft_state ds_draft_state;

typedef struct {
    const char *arch;        // "Qwen3DSparkModel" or "Gemma4DSparkModel"
    int n_layers;            // draft layers
    int block_size;          // slots per block = maximum draft tokens per round
    int markov_rank;         // 0 = DFlash (no Markov head)
    const char *markov_head; // "vanilla", "gated", "rnn", or "" when rank is 0
    int has_confidence, confidence_with_markov;
    int n_taps;
    const int *tap_layers;   // (n_taps) target layers whose residual rows feed the drafter
    int mask_token_id;
    int hidden, vocab;
    const char *target_id;   // the target identity recorded in config.json, or ""
} ds_drafter_info;

// Load a DeepSpec directory and pair it with `target`: every tensor name and shape is checked,
// and hidden size, vocabulary, num_target_layers, tap ids and the mask token must fit the target.
ds_status ds_drafter_load(const char *dir, const ds_model *target, ds_drafter **out);
void ds_drafter_free(ds_drafter *d);
const ds_drafter_info *ds_drafter_get_info(const ds_drafter *d);
// A warning from loading (the recorded target_id differs from this target's), or NULL.
const char *ds_drafter_warning(const ds_drafter *d);
// Confidence calibration (Sequential Temperature Scaling): ĉ_k = σ(z_k / T_k), with temperatures
// per class of sequence: greedy (temperature 0) and sampled (above 0; `sampled` = 1 below). Loaded
// from calibration.json in the drafter's directory when present (a class the file does not fit
// separately uses the file's one fit); set (both classes; n = 0 clears) for calibrating.
ds_status ds_drafter_set_calibration(ds_drafter *d, const float *temps, int n);
int ds_drafter_calibration(const ds_drafter *d, int sampled, const float **temps); // returns n (0 = none)
// The calibration run's realized prefix acceptance per slot for the class (the fraction of rounds
// that accepted slots 1..k), the scheduler's prior; returns how many positions (0 = none recorded
// for that class).
int ds_drafter_acceptance_prior(const ds_drafter *d, int sampled, const float **accept);
// Draft vocabulary: restrict what the drafter can propose to n token ids (e.g. the target's most
// frequent tokens), so that its LM head and Markov head cost n/vocab of the full product. Every
// other token gets logit -inf (draft probability 0), so decoding stays lossless; only acceptance
// can change. ids need not be sorted (duplicates are an error); n = 0 restores the full
// vocabulary. Loaded from draft_vocab.json ({"token_ids": [...]}) in the drafter's directory when
// present. Set it before drafting (states and batches adapt on their next round).
ds_status ds_drafter_set_vocab(ds_drafter *d, const int32_t *ids, int n);
// The number of ids the drafter can propose (the vocabulary size when unrestricted).
int ds_drafter_vocab_size(const ds_drafter *d);
// Write draft_vocab.json into the drafter directory `dir` (atomically): the given ids.
ds_status ds_drafter_save_vocab(const char *dir, const int32_t *ids, int n);
// The identity of a target as drafters record it: "<name>:<16 hex digits>", a hash of the
// architecture and a fixed sample of every tensor's bytes (fast on any model size).
void ds_model_target_id(const ds_model *m, char *out, size_t cap);

// One sequence's draft context: per draft layer, K and V of the projected target tap rows of every
// committed position (a KV prefix). Blocks are drafted after it and dropped again.
ds_status ds_draft_state_init(const ds_drafter *d, int max_ctx, ds_draft_state **out);
void ds_draft_state_free(ds_draft_state *s);
int ds_draft_state_len(const ds_draft_state *s);
ds_status ds_draft_state_truncate(ds_draft_state *s, int len);
// The sequence's generated tokens so far: the history that logit bias and penalties count when a
// block is drafted (slot k's also holds the block's drafts before it). Valid until the next draft.
void ds_draft_state_set_history(ds_draft_state *s, const int32_t *hist, int n);
// Append n committed positions from their tap rows (n, n_taps * hidden), as ds_model_forward
// writes them with the drafter's tap_layers.
ds_status ds_drafter_append(const ds_drafter *d, ds_draft_state *s, const float *taps, int n);
// Draft n_slots (<= block_size) tokens after `anchor` (the last committed token, at position
// ds_draft_state_len): the block forward, then the Markov walk (greedy at temperature 0, else
// sampled from the processed distribution with `rng`: slot k is position len + 1 + k, drawn with
// ds_sample_coupled there under DS_VERIFY_COUPLED, from rng's stream in order under RESIDUAL).
// Writes tokens (n_slots), the raw per-slot logits (n_slots, vocab) that verification turns into q,
// and confidences (n_slots; NaN without a confidence head).
ds_status ds_drafter_draft(const ds_drafter *d, ds_draft_state *s, int32_t anchor, int n_slots,
                           const ds_sampler_params *sp, ds_rng *rng, int32_t *tokens, float *logits, float *conf);

// Draft for R sequences at once: the block forwards of all of them share every matrix product (one
// pass over the drafter's weights, lm_head included); the Markov walk runs per sequence with its own
// parameters and random stream. Equivalent to R calls of ds_drafter_draft (up to float rounding).
typedef struct ds_draft_batch ds_draft_batch;
ds_status ds_draft_batch_init(const ds_drafter *d, ds_draft_batch **out);
void ds_draft_batch_free(ds_draft_batch *b);
// One sequence of a drafting batch: what ds_drafter_draft takes for it.
typedef struct {
    ds_draft_state *state;
    int32_t anchor;              // the last committed token
    int n_slots;                 // 1..block_size
    const ds_sampler_params *sp;
    ds_rng *rng;
    int32_t *tokens;             // (n_slots) drafted tokens
    float *logits;               // (n_slots, vocab) raw per-slot logits
    float *conf;                 // (n_slots) confidences, or NULL
    // Optional constraint (a grammar): called for slot k after its logits are final and before it
    // is drawn, with the tokens drafted before it; it may set logits to -inf (the mask, the same
    // the verifier applies to the target's row k). Returns 1 to draft the slot, 0 to stop drafting
    // there, < 0 on failure (its message set).
    int (*constrain)(void *ctx, int k, const int32_t *tokens, float *logits);
    void *constrain_ctx;
    int *n_drafted;              // out (optional): slots drafted (n_slots unless constrain stopped)
} ds_draft_seq;
ds_status ds_drafter_draft_batch(const ds_drafter *d, ds_draft_batch *b, const ds_draft_seq *seqs, int R);
// A side branch of a token tree, after ds_drafter_draft_batch: sequence j of that batch (seqs[j] in
// q) with slot k taking token t instead of the drafted one, then m more slots (k + 1 + m <= n_slots)
// drawn after t as the walk draws them (greedy, or sampled with q's parameters and random stream: a
// coupled draw at slot i is keyed by its position, as the chain's). The block forward is reused: a
// branch costs only its Markov head. Writes tokens (m), their Markov-corrected logits (m, vocab)
// and confidences (m; NaN without a confidence head).
ds_status ds_drafter_draft_branch(const ds_drafter *d, const ds_draft_batch *b, int j, const ds_draft_seq *q, int k,
                                  int32_t t, int m, int32_t *tokens, float *logits, float *conf);


typedef struct {
    int n_layers;        // draft layers (0 = 5)
    int block_size;      // slots per block (0 = 7)
    int markov_rank;     // 0 = DFlash; < 0 = the default (256, capped at the hidden size)
    const char *markov_head; // "vanilla" (default), "gated", "rnn"
    int n_taps;          // 0 = spread min(5, layers - 1) taps evenly over layers 1 .. L-2
    const int *tap_layers;
    int confidence;      // 1 = with a confidence head (c = 0.5 at init)
    uint64_t seed;
    ds_dtype dtype;      // DS_F32 (default) or DS_BF16
    const char *style;   // "qwen3" or "gemma4" layers; NULL = by the target (Gemma 3/4: gemma4, else qwen3)
} ds_drafter_init_params;

ds_drafter_init_params ds_drafter_init_default(void);
// Write a freshly initialized drafter for `target` to `dir` in the DeepSpec format (Qwen3DSparkModel
// layers, or Gemma4DSparkModel on the target's global attention geometry): normal(0, 0.02) weights, norms 1, Markov W2 = 0 (a pure parallel drafter at first),
// confidence head 0 (c = 0.5), embed_tokens and lm_head copied from the target. Same seed, same
// bytes. `dir` must not exist; it appears complete or not at all.
ds_status ds_drafter_init_write(const ds_model *target, const ds_drafter_init_params *p, const char *dir);

#ifdef __cplusplus
}
#endif

#endif
