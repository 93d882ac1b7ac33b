// dspark/sample.h: the processed distribution, sampling, the counter-based rng, grammars (src/sample).
// Part of the public API (include/dspark.h composes these headers); it includes only the
// headers of the layers below its own (docs/architecture.md), so a layer that includes it
// cannot name a function of a layer above it.
#ifndef DSPARK_SAMPLE_H
#define DSPARK_SAMPLE_H

#include <stddef.h>
#include <stdint.h>

#include "dspark/tokenizer.h"

#ifdef __cplusplus
extern "C" {
#endif

// ---------------------------------------------------------------------------------------------
// Sampling

// How sampled tokens are drawn and drafts verified (greedy decoding is the same under both):
//   COUPLED:  the token at position t is the target's own draw from p_t with noise keyed by
//             (seed, t) (ds_sample_coupled); the drafter proposes with the same noise on q_t, and a
//             draft is accepted iff it equals the target's draw. The output is a function of (seed,
//             target, prompt, sampling parameters) alone: the same with any drafter, schedule, batch
//             or thread count, and the text of plain decoding with that seed.
//   RESIDUAL: the standard rule: accept d_k with probability min(1, p/q), resample from
//             normalize(max(p - q, 0)) at the first rejection, draws taken in order from one stream
//             (which draws a token consumes depends on how many drafts were verified).
// Both sample exactly from the target's processed distribution.
typedef enum {
    DS_VERIFY_COUPLED = 0, // the default
    DS_VERIFY_RESIDUAL,
} ds_verify_rule;

typedef struct {
    int32_t id;
    float bias; // added to the logit (OpenAI's logit_bias: -100 bans, +100 forces)
} ds_logit_bias;

typedef struct {
    float temperature; // 0 = greedy (argmax, lowest id on ties)
    int top_k;         // 0 = off
    float top_p;       // 1 = off
    float min_p;       // 0 = off
    ds_verify_rule verify; // how tokens are drawn and drafts verified (DS_VERIFY_COUPLED)
    // Before everything else, on the logits (OpenAI's definitions, over the tokens generated so far:
    // the history ds_probs_process_hist is given): z_i += bias_i - frequency_penalty * count_i
    // - presence_penalty * [count_i > 0]. 0 / NULL = off.
    float presence_penalty, frequency_penalty;
    const ds_logit_bias *logit_bias; // (n_logit_bias), must outlive every use of these parameters
    int n_logit_bias;
} ds_sampler_params;

ds_sampler_params ds_sampler_default(void);

// A counter-based random stream: draw i of a stream is a pure function of (seed, stream id, i), so
// results never depend on thread count or on which code draws. Drafting and verification share one.
typedef struct {
    uint64_t seed;
    uint64_t stream;
    uint64_t counter;
} ds_rng;

ds_rng ds_rng_init(uint64_t seed, uint64_t stream);
double ds_rng_uniform(ds_rng *r); // in [0, 1)

// The processed distribution (the one function drafting and verification both use):
// temperature -> top-k -> top-p and min-p -> renormalize. Writes probabilities over the whole
// vocabulary to `probs` (zeros for filtered tokens). At temperature 0 it is one-hot at the argmax.
// `scratch` must hold ds_sampler_scratch_size(n) bytes, or be NULL to allocate per call.
size_t ds_sampler_scratch_size(int n);
ds_status ds_probs_process(const ds_sampler_params *p, const float *logits, int n, float *probs, void *scratch);
// The same with the token history the penalties count: the tokens generated so far (hist), then
// n_drafts drafted tokens after them (a draft slot's history includes the drafts before it). At
// temperature 0 the one-hot sits at the argmax of the adjusted logits.
ds_status ds_probs_process_hist(const ds_sampler_params *p, const float *logits, int n, const int32_t *hist,
                                int n_hist, const int32_t *drafts, int n_drafts, float *probs, void *scratch);
// Whether p adjusts logits by history or bias (then greedy decoding must go through the processing).
int ds_sampler_adjusts(const ds_sampler_params *p);
// Draw from a probability vector (sums to 1 up to rounding).
int32_t ds_sample_probs(const float *probs, int n, ds_rng *rng);
// The coupled draw at sequence position `pos`: argmin over tokens with probs[i] > 0 of
// E_i / probs[i], E_i = -log(1 - u_i) exponential noise with u_i draw i of the stream
// (rng->seed, DS_RNG_POSITION | pos) (the exponential race, equivalent to Gumbel-max: token i wins
// with probability probs[i]). A pure function of (probs, seed, pos): rng's own stream and counter
// are neither used nor advanced.
#define DS_RNG_POSITION (1ull << 63)
int32_t ds_sample_coupled(const float *probs, int n, const ds_rng *rng, int64_t pos);
int32_t ds_argmax(const float *x, int n);

// Grammars (src/sample/grammar*.c, json_schema.c): GBNF in llama-server's dialect (rules
// `name ::= ...`, the root rule `root`, "literals" with escapes, [classes] and [^negated], `.`,
// ( ), |, * + ? {m} {m,} {m,n}, # comments). A sequence with a grammar (ds_seq_params.grammar)
// samples from the processed distribution of logits masked to the tokens the grammar allows
// (-inf elsewhere, before step 0), in drafting and verification alike; its end tokens are allowed
// exactly when the grammar is complete (or when nothing else is). ds_grammar_parse checks and
// compiles the text (an error is one line, "grammar L:C: problem", left recursion named).
typedef struct ds_grammar ds_grammar;
ds_status ds_grammar_parse(const char *gbnf, ds_grammar **out);
void ds_grammar_free(ds_grammar *g);
// JSON Schema (a subset: docs/architecture.md) to GBNF. *gbnf is malloc'ed. A keyword outside the
// subset fails with DS_ERR_UNSUPPORTED and *bad_keyword (static storage) naming it; other problems
// (not JSON, a bad $ref, ...) fail with DS_ERR_INVALID and *bad_keyword NULL. schema_json NULL or
// "{}"-like `{"type":"object"}` gives any JSON object (response_format json_object).
ds_status ds_json_schema_to_gbnf(const char *schema_json, size_t len, char **gbnf, const char **bad_keyword);
// Any JSON object (response_format {"type": "json_object"}): GBNF text in static storage.
const char *ds_json_object_gbnf(void);

#ifdef __cplusplus
}
#endif

#endif
