// dspark/speculate.h: the speculative decoding engine (src/speculate).
// Part of the public API (include/dspark.h composes these headers); it includes only the
// headers of the layers below its own (docs/architecture.md), so a layer that includes it
// cannot name a function of a layer above it.
#ifndef DSPARK_SPECULATE_H
#define DSPARK_SPECULATE_H

#include <stddef.h>
#include <stdint.h>

#include "dspark/sched.h"

#ifdef __cplusplus
extern "C" {
#endif

// ---------------------------------------------------------------------------------------------
// Speculative decoding engine: rounds over a set of sequences (single-request generation is the
// engine with one sequence). Each round: draft per sequence, ONE target forward over every
// sequence's verification rows, verify (greedy: exact match; sampled: ds_verify_rule, coupled by
// default, or min(1, p/q) with residual resampling; then a bonus token), commit, roll the target
// KV cache back, feed taps to the drafter.

typedef enum {
    DS_SPEC_NONE = 0, // plain autoregressive decoding (every round verifies zero drafts)
    DS_SPEC_DSPARK,   // a DeepSpec drafter (DSpark or DFlash)
    DS_SPEC_NGRAM,    // prompt lookup: what followed the latest earlier occurrence of the last n tokens
} ds_spec_kind;
const char *ds_spec_kind_name(ds_spec_kind k); // "none", "dspark", "ngram" (as --spec spells them)

typedef struct {
    ds_spec_kind kind;
    int draft_max;        // most drafted tokens verified per round (0 = the block size; 7 for ngram)
    float conf_threshold; // DS_SCHEDULE_THRESHOLD: verify slots before the first with c_k < threshold
    int ngram_n;          // ngram match length (0 = 3); shorter matches are tried when it fails
    ds_schedule_kind schedule;   // (ngram and drafters without a confidence head always verify all slots)
    const ds_cost_table *costs;  // DS_SCHEDULE_AUTO: the cost table; NULL = profile quickly at init
    size_t prompt_cache_bytes;   // the prompt cache (reuse the KV of prompts seen before): its size in
                                 // bytes, least recently used entries evicted first; 0 = off
    int tree_branches;   // DS_SPEC_DSPARK: token trees: at most this many side branches per round, at
                         // the verified slots whose drafted token is least likely the target's (the
                         // drafter's best other token there, continued by its walk); 0 = chains. Under
                         // DS_SCHEDULE_AUTO the cost table admits the rows that pay. Not with a grammar.
    int tree_depth;      // slots a branch continues after its first token (0 = 2)
} ds_spec_params;

typedef struct {
    int rounds;              // verification rounds
    int generated;           // tokens committed (EOS excluded)
    int drafted;             // drafted tokens sent to verification
    int accepted;            // of which accepted (a token tree's: the rows of its accepted path)
    int tree_rounds;         // rounds that verified a token tree
    int branch_accepted;     // ... whose accepted path left the drafted chain
    double tau;              // mean tokens committed per round (accepted + 1)
    int tried_by_pos[64];    // rounds in which slot k was verified with slots < k accepted
    int accepted_by_pos[64]; // ... and slot k was accepted
    double draft_s;          // time spent drafting (including context projection)
    double verify_s;         // time in target forwards and verification
    double prefill_s;        // time in prefill forwards (plain decoding: the one that gave the first token too)
    int prefill_rows;        // prompt rows they computed: the prompt less the cached rows, less its last
                             // row unless the first token came out of the prefill (plain decoding)
    int cached_tokens;       // prompt rows taken from the prompt cache instead of prefilled
} ds_seq_stats;

typedef struct ds_engine ds_engine;

// `drafter` is required for DS_SPEC_DSPARK and ignored otherwise.
ds_status ds_engine_init(const ds_model *m, const ds_drafter *drafter, const ds_spec_params *sp, ds_engine **out);
void ds_engine_free(ds_engine *e);
// One sequence's parameters (read by ds_engine_add, which copies what it keeps).
#define DS_SEQ_MAX_STOP_IDS 8
typedef struct {
    const int32_t *prompt;       // (n_prompt) token ids, BOS first where the model wants one
    int n_prompt;
    int max_new;                 // token budget
    const ds_sampler_params *sp; // NULL = ds_sampler_default() (greedy)
    uint64_t seed;
    const int32_t *stop_ids;     // (n_stop_ids, at most DS_SEQ_MAX_STOP_IDS) ids that end this
    int n_stop_ids;              // sequence (not included), besides the model's (ds_model_is_stop)
    int batch_invariant;         // its decoding rounds run every product on the multi-row kernel
                                 // (ds_forward_seq.batch_invariant): its tokens never depend on what
                                 // runs alongside it (prefill chunks are the same rows whatever runs
                                 // and keep the fastest kernels)
    int no_prompt_cache;         // neither reuse nor keep prompt rows in the engine's prompt cache
    const char *grammar;         // GBNF text the output must match (compiled by ds_engine_add
                                 // against the model's tokenizer); NULL = unconstrained
} ds_seq_params;

// Start a sequence. Rounds prefill all its prompt tokens but the last (in chunks of 256, at most
// one chunk's worth per round, before the round's drafting and verification, so a long prompt
// never stalls the running sequences for long); the last becomes its first round's anchor (so
// every generated token goes through verification). Stops after max_new tokens or at a stop id
// (not included). Returns its id in *id.
ds_status ds_engine_add(ds_engine *e, const ds_seq_params *p, int *id);
// One round for every unfinished sequence.
ds_status ds_engine_step(ds_engine *e);
// Sequences still generating.
int ds_engine_active(const ds_engine *e);
int ds_engine_finished(const ds_engine *e, int id);
// Copy tokens committed since the last call (up to cap); returns how many.
int ds_engine_take(ds_engine *e, int id, int32_t *out, int cap);
const ds_seq_stats *ds_engine_stats(const ds_engine *e, int id);
// Why a sequence ended: DS_FINISH_NONE while it runs, DS_FINISH_STOP at a stop id (given in
// *stop_token when non-NULL; -1 otherwise), DS_FINISH_LENGTH at its token budget, DS_FINISH_ERROR
// when it failed on its own (its grammar too ambiguous to follow, or out of memory in it: the
// other sequences go on; ds_engine_seq_error says why).
typedef enum { DS_FINISH_NONE = 0, DS_FINISH_STOP, DS_FINISH_LENGTH, DS_FINISH_ERROR } ds_finish_reason;
ds_finish_reason ds_engine_finish_reason(const ds_engine *e, int id, int32_t *stop_token);
// The one-line error of a sequence that finished with DS_FINISH_ERROR ("" otherwise).
const char *ds_engine_seq_error(const ds_engine *e, int id);
// Log-probabilities of a sequence's generated tokens (call after ds_engine_add, before its first
// step), with `top` (0..20) most likely alternatives each: from the target's processed distribution
// at each position (the one the token was drawn from; at temperature 0 the same at temperature 1),
// never the drafter's.
ds_status ds_engine_set_logprobs(ds_engine *e, int id, int top);
// Generated token i's (0-based) log-probability in *logprob and its alternatives, best first (ties:
// lower id), in top_ids / top_lps (room for `top`); returns how many, or -1 (not recorded).
int ds_engine_logprobs(const ds_engine *e, int id, int i, float *logprob, int32_t *top_ids, float *top_lps);
// Log-probabilities of the prompt's tokens (vLLM's prompt_logprobs, the completions API's echo with
// logprobs): call after ds_engine_add, before its first step. Prompt token i (1..n_prompt-1) gets
// the log-probability the target's processed distribution (at temperature 1 when greedy, no
// history) gives it after tokens 0..i-1, with `top` (0..20) alternatives. Such a sequence computes
// logits for every prompt row and never starts from the prompt cache; its output is unchanged.
ds_status ds_engine_set_prompt_logprobs(ds_engine *e, int id, int top);
// Prompt token i's as ds_engine_logprobs; -1 until its row is prefilled (or not recorded, or i = 0).
int ds_engine_prompt_logprobs(const ds_engine *e, int id, int i, float *logprob, int32_t *top_ids, float *top_lps);
// Drop a sequence (finished or not) and free its state.
ds_status ds_engine_remove(ds_engine *e, int id);
// Called after every verified round of every sequence: its drafted slots' confidences (NULL without
// a confidence head), how many were verified (ell) and how many accepted. Calibration uses it.
typedef void (*ds_round_observer)(void *ctx, int id, int n_drafted, const float *conf, int ell, int accepted);
void ds_engine_set_observer(ds_engine *e, ds_round_observer fn, void *ctx);
// The prompt cache (ds_spec_params.prompt_cache_bytes): a new sequence's prompt starts from the
// longest cached prefix, in whole prefill chunks of 256 rows (its target KV rows and drafter tap
// rows copied in), and a sequence that prefilled whole chunks keeps them for later ones. The rows
// reused are bit for bit the ones its own prefill would compute (the same chunk forwards), so the
// output is the same with and without the cache. Returns 0 (and zeros) when the cache is off.
typedef struct {
    size_t bytes, cap_bytes; // held, allowed
    int entries;
    long lookups, hits;      // sequences that looked, and found whole chunks
    long rows_reused;        // prompt rows not prefilled thanks to it
} ds_prompt_cache_stats;
int ds_engine_prompt_cache(const ds_engine *e, ds_prompt_cache_stats *out);
// The cost table the engine schedules with (profiled at init for DS_SCHEDULE_AUTO without one).
const ds_cost_table *ds_engine_costs(const ds_engine *e);

#ifdef __cplusplus
}
#endif

#endif
