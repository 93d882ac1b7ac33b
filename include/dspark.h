// dspark: lossless speculative decoding with DSpark drafters, in C.
//
// Public API. All handles are opaque. Every function that can fail returns a ds_status and leaves
// a one-line message (naming the file and the problem) that ds_last_error() returns; library code
// never prints.
//
// Central objects (see docs/architecture.md):
//   ds_model      a loaded target: mapped weights, config, tokenizer. Immutable after load and
//                 shareable across threads and sequences.
//   ds_kv         one sequence's target KV cache (mutable; append rows, truncate to roll back).
//   ds_workspace  scratch buffers for forward passes, sized once and reused (no per-token malloc).
//   ds_tokenizer  owned by the model; encode text, decode tokens as a valid UTF-8 stream.
#ifndef DSPARK_H
#define DSPARK_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

// ---------------------------------------------------------------------------------------------
// Errors

typedef enum {
    DS_OK = 0,
    DS_ERR_IO,          // cannot open / read / write a file
    DS_ERR_FORMAT,      // a file is malformed (truncated, bad magic, offsets out of range, ...)
    DS_ERR_UNSUPPORTED, // well-formed but not something we implement (tensor type, architecture)
    DS_ERR_INVALID,     // a bad argument (wrong shape, out-of-range value, invalid UTF-8, ...)
    DS_ERR_NOMEM,       // allocation failed
    DS_ERR_MISMATCH,    // two inputs that must agree do not (drafter vs target, ...)
    DS_ERR_INTERRUPTED, // the user pressed Ctrl-C
} ds_status;

const char *ds_last_error(void);
void ds_clear_error(void);
const char *ds_status_name(ds_status st);

// ---------------------------------------------------------------------------------------------
// Tensor element types (values match GGUF's ggml_type where one exists).

typedef enum {
    DS_F32 = 0,
    DS_F16 = 1,
    DS_Q4_0 = 2, // GGUF block types (kernels/ggml_quants.h): 32 elements per block
    DS_Q4_1 = 3,
    DS_Q5_0 = 6,
    DS_Q5_1 = 7,
    DS_Q8_0 = 8,
    DS_Q2_K = 10, // K-quants: 256 elements per super-block
    DS_Q3_K = 11,
    DS_Q4_K = 12,
    DS_Q5_K = 13,
    DS_Q6_K = 14,
    DS_IQ4_NL = 20, // 32 elements, non-linear 4-bit values
    DS_IQ4_XS = 23, // 256 elements, non-linear 4-bit values
    DS_BF16 = 30,
    DS_U32 = 1000, // safetensors only
    DS_I32 = 1001, // safetensors only
    DS_AFFINE4 = 1004, // MLX affine 4-bit: packed U32 words + per-group scales/biases (in memory only)
    DS_AFFINE8 = 1008, // MLX affine 8-bit (docs: docs/formats/mlx-affine.md)
} ds_dtype;

const char *ds_dtype_name(ds_dtype t);

// ---------------------------------------------------------------------------------------------
// Models

typedef struct ds_model ds_model;
typedef struct ds_kv ds_kv;
typedef struct ds_workspace ds_workspace;
typedef struct ds_tokenizer ds_tokenizer;

// How the two halves of each rotated pair are laid out inside a head.
typedef enum {
    DS_ROPE_INTERLEAVED = 0, // pairs (2i, 2i+1): GGUF `llama` tensors (llama.cpp's permuted Q/K)
    DS_ROPE_HALVES = 1,      // pairs (i, i + d/2): Hugging Face checkpoints
} ds_rope_layout;

typedef struct {
    const char *arch;     // "llama", "qwen3", ...
    const char *name;     // model name from metadata, or the file name
    int n_layers;
    int dim;              // hidden size
    int ffn_dim;          // intermediate size
    int n_heads;          // query heads
    int n_kv_heads;       // key/value heads (GQA when < n_heads)
    int head_dim;
    int vocab_size;
    int max_ctx;          // context length the model was configured for
    float norm_eps;       // RMSNorm epsilon
    float rope_theta;
    ds_rope_layout rope_layout;
    ds_dtype weight_type; // dominant weight type (of the matrices)
    size_t weight_bytes;  // bytes of all weights that one decoded token reads
    int bos_id, eos_id;   // -1 when unknown
    int unk_id;           // the tokenizer's unknown-token id (never produced by encoding), or -1
    // Mixture of experts (all 0 for dense targets): layers with routed experts, experts per layer,
    // experts each row routes to, and the bytes of one expert (its three matrices). weight_bytes
    // counts top_k_experts of them per MoE layer.
    int moe_layers, n_experts, top_k_experts;
    size_t expert_bytes;
} ds_model_info;

typedef struct {
    int n_threads;   // shorthand: ds_model_load calls ds_set_threads(n_threads) (0 = all cores); pass
                     // NULL params to keep the process's count as it is
    int int8_inputs; // 1: products with quantized weights (MLX affine, GGUF Q8_0) round their inputs to
                     // int8 per group and run on integer dot products (llama.cpp's numerics for Q8_0;
                     // 1.4-3x faster at verification sizes); 0 (default): f32 inputs (MLX's numerics).
                     // Drafters always take the integer path (their numbers only steer proposals).
    int bf16_inputs; // 1: few-row products with BF16 weights round their inputs to bf16 and run on
                     // VDPBF16PS where the CPU has AVX512-BF16 (llama.cpp's numerics for BF16; verifying
                     // 8 rows 1.4-2x cheaper); 0 (default): f32 inputs, one f32 FMA per weight.
} ds_model_params;

// Load a target model: `path` is a .gguf file or a Hugging Face directory (config.json +
// model.safetensors or sharded model-*.safetensors with model.safetensors.index.json).
ds_status ds_model_load(const char *path, const ds_model_params *params, ds_model **out);
void ds_model_free(ds_model *m);
const ds_model_info *ds_model_get_info(const ds_model *m);
// The model's tokenizer, or NULL when the checkpoint has none we support.
const ds_tokenizer *ds_model_tokenizer(const ds_model *m);
// Whether generating `id` ends a sequence: the EOS id, and any further stop ids the checkpoint
// declares (Hugging Face generation_config.json "eos_token_id" may list several).
int ds_model_is_stop(const ds_model *m, int32_t id);
// The thread count has one owner: the library's thread pool (src/base/threads.c), process-wide.
// ds_set_threads sets the number of threads used by forward passes and training (OpenBLAS runs
// single-threaded inside them), whichever thread runs them (the server's engine thread included);
// 0 = all cores. No object or job carries a count of its own: front ends call this once. On a busy
// machine the pool falls back to the calling thread by itself when threads lose time.
void ds_set_threads(int n_threads);
// The threads the next parallel region uses: the ds_set_threads value (at most the cores this
// process may run on), or all of them.
int ds_threads(void);
// OpenBLAS picks its kernels from the CPU model at load time and falls back to generic SSE3
// ("Prescott") kernels on CPUs newer than it knows (Debian 12's 0.3.21 on Sapphire/Emerald Rapids:
// 4x slower sgemm). Returns the OPENBLAS_CORETYPE value that matches this CPU's instruction sets
// ("SkylakeX", "Haswell") when OpenBLAS chose a weaker one, else NULL. Programs set it in the
// environment and re-execute themselves (it is read only at load).
const char *ds_openblas_core_hint(void);

// KV cache of one sequence. Grows as rows are appended (amortized doubling) up to max_ctx.
ds_status ds_kv_init(const ds_model *m, int max_ctx, ds_kv **out);
void ds_kv_free(ds_kv *kv);
int ds_kv_len(const ds_kv *kv);
// Roll back to an earlier length: afterwards the state is exactly as if the rows past `len` had
// never been fed.
ds_status ds_kv_truncate(ds_kv *kv, int len);
// A copy of a cache's first rows (the engine's prompt cache keeps them): floats per row, the copy
// of rows [0, n) out (n <= ds_kv_len) and into an empty cache of the same model, which then holds
// exactly those rows (`src` holds `stride` >= n rows as ds_kv_save wrote them; its first n are taken).
size_t ds_kv_row_floats(const ds_kv *kv);
ds_status ds_kv_save(const ds_kv *kv, int n, float *dst);
ds_status ds_kv_load(ds_kv *kv, const float *src, int stride, int n);

ds_status ds_workspace_init(const ds_model *m, ds_workspace **out);
void ds_workspace_free(ds_workspace *ws);
// MoE targets: the mean number of distinct experts a window of w consecutive rows (w = 1..n, as fed
// to forwards through this workspace) routes to, per MoE layer, from decayed routing statistics;
// out[w - 1], 0 where nothing is known yet. Returns how many windows it filled (0 for dense targets).
int ds_workspace_expert_windows(const ds_workspace *ws, float *out, int n);
// MoE targets: distinct experts per MoE layer pass in the last forward (mean over its MoE layers; 0 dense).
double ds_workspace_last_experts(const ds_workspace *ws);

// The new rows of one sequence in a forward pass. Rows are appended to `kv` at positions
// kv_len .. kv_len + n_tokens - 1 and attend causally to everything before them.
typedef struct {
    ds_kv *kv;
    const int32_t *tokens; // (n_tokens)
    int n_tokens;
    // Logits of the last `n_logits` rows (0 = none; n_tokens = every row).
    int n_logits;
    float *logits;         // (n_logits, vocab_size)
    // Hidden-state taps: for each id in tap_layers (in order; -1 = embedding output, L = residual
    // stream after decoder layer L, before the final norm), every new row. Concatenated per row,
    // the layout drafters consume.
    const int *tap_layers; // (n_taps)
    int n_taps;
    float *taps;           // (n_tokens, n_taps * dim), or NULL
    float *hidden;         // (n_tokens, dim) final normed hidden state, or NULL
    // This sequence's rows must not depend on what else is in the batch: every product of this
    // forward then runs on the multi-row kernel (whose result for a row is a function of that row
    // alone) instead of sgemm for large batches. Costs nothing on memory-bound decoding.
    int batch_invariant;
} ds_forward_seq;

// One forward pass over a ragged batch of sequences (prefill, single-token decode and multi-token
// verification are all this call). Matrix products run over the rows of all sequences at once.
ds_status ds_model_forward(const ds_model *m, ds_workspace *ws, ds_forward_seq *seqs, int n_seqs);

// ---------------------------------------------------------------------------------------------
// Tokenizer

// Encode UTF-8 text. `add_bos` prepends BOS. Writes up to `cap` ids to `out` and the total count
// to *n_out (if *n_out > cap, call again with a larger buffer). Invalid UTF-8 is an error.
ds_status ds_tokenize(const ds_tokenizer *t, const char *text, size_t len, int add_bos, int32_t *out,
                      int cap, int *n_out);
// Flags of ds_tokenize_ex. ADD_SPECIAL: add the special tokens the tokenizer's own configuration
// adds (tokenizer.json post-processor, e.g. Gemma's <bos>; BOS for GGUF SentencePiece).
// PARSE_SPECIAL: special tokens written in the text (e.g. "<|im_start|>") become their ids
// (tokenizer.json only; GGUF SentencePiece never parses them, as llama.cpp with parse_special off).
// ds_tokenize(add_bos) is ds_tokenize_ex(ADD_SPECIAL | PARSE_SPECIAL, or PARSE_SPECIAL), except
// that it never adds a BOS in front of text that already starts with the BOS text.
enum { DS_TOK_ADD_SPECIAL = 1, DS_TOK_PARSE_SPECIAL = 2 };
ds_status ds_tokenize_ex(const ds_tokenizer *t, const char *text, size_t len, unsigned flags, int32_t *out,
                         int cap, int *n_out);
// A tokenizer on its own: a tokenizer.json file, a directory holding tokenizer.json (and
// tokenizer_config.json), or a GGUF file. Free with ds_tokenizer_free.
ds_status ds_tokenizer_load(const char *path, ds_tokenizer **out);
void ds_tokenizer_free(ds_tokenizer *t);
// Whole-sequence decode as Hugging Face's decode(ids): special tokens as their text unless
// skip_special, then clean_up_tokenization_spaces when tokenizer_config.json asks for it; invalid
// UTF-8 becomes U+FFFD. *out is malloc'ed and NUL-terminated; *n_out (optional) its length.
ds_status ds_detokenize(const ds_tokenizer *t, const int32_t *ids, int n, int skip_special, char **out, size_t *n_out);
int ds_tokenizer_vocab_size(const ds_tokenizer *t);
int ds_tokenizer_bos(const ds_tokenizer *t);
int ds_tokenizer_eos(const ds_tokenizer *t);
// The raw bytes a token stands for (byte-fallback tokens give their byte, "▁" becomes a space,
// byte-level BPE pieces give the bytes they encode; control/special, unknown and unused tokens give
// nothing). Returns the full length but writes at most
// `cap` bytes; an out-of-range id gives 0.
int ds_token_bytes(const ds_tokenizer *t, int32_t id, char *buf, int cap);

// Streaming detokenizer: push ids, receive only complete, valid UTF-8 (never half a character;
// invalid byte sequences become U+FFFD).
typedef struct {
    const ds_tokenizer *tok;
    unsigned char pending[8]; // bytes of an incomplete UTF-8 character
    int n_pending;
    int at_start;             // strip the leading space of the first piece (SentencePiece)
} ds_detok;

void ds_detok_init(ds_detok *d, const ds_tokenizer *t, int strip_leading_space);
// Append the text of `id` to out; returns bytes written, or -(bytes needed) when they do not fit in
// `cap` (then nothing is consumed: call again with a larger buffer). 64 bytes fit every piece of up
// to 61 bytes. The leading space is stripped from the first non-empty piece when asked (GGUF
// SentencePiece; a tokenizer.json tokenizer only when its decoder has a Strip step).
int ds_detok_push(ds_detok *d, int32_t id, char *out, int cap);
// Flush an incomplete character at the end of the stream as U+FFFD: returns 3, 0, or -3 if cap < 3.
int ds_detok_flush(ds_detok *d, char *out, int cap);

// Chat: render a conversation as the prompt text the model was trained on. The format comes from
// the tokenizer (built-in ChatML for Qwen, Gemma turns, Llama 3 headers, chosen from
// tokenizer_config.json); tokenizers without one use a plain "role: content" transcript.
typedef struct {
    const char *role;    // "system", "user", "assistant"
    const char *content; // UTF-8
} ds_chat_message;

// `add_generation_prompt` ends the text with the opening of an assistant turn. *out is allocated
// with malloc (the caller frees it). Invalid UTF-8 or an unknown role is an error.
ds_status ds_chat_render(const ds_tokenizer *t, const ds_chat_message *msgs, int n, int add_generation_prompt,
                         char **out);
// The name of the tokenizer's chat format ("chatml", "gemma", "llama3", "plain").
const char *ds_chat_format_name(const ds_tokenizer *t);
// The chat format's end-of-turn token (<|im_end|>, <end_of_turn>, <|eot_id|>), or -1 (plain).
// For a model with a chat template: that of the format its markers show (as above), else the first
// of the known end-of-turn tokens (<|im_end|>,
// <end_of_turn>, <|eot_id|>, <|end|>, <|END_OF_TURN_TOKEN|>, <|eom_id|>) that the template
// writes and the vocabulary holds, else the eos_token when the template writes it, else -1.
int ds_chat_eot(const ds_tokenizer *t);

// ---------------------------------------------------------------------------------------------
// Chat templates: the model's own Jinja chat_template (tokenizer_config.json, or GGUF
// tokenizer.chat_template), rendered as transformers' apply_chat_template renders it (jinja2's
// sandboxed environment, trim_blocks, lstrip_blocks, loopcontrols, tojson as json.dumps with
// ensure_ascii=False, raise_exception, strftime_now). Whenever a tokenizer has a template that
// parses, ds_chat_render and ds_chat_render_json render through it; the built-in formats above are
// the fallback for tokenizers without one (or whose template needs a feature left out).

typedef struct ds_chat_template ds_chat_template;
// The template source (UTF-8) with the bos_token / eos_token strings it is rendered with (NULL:
// not defined). `name` prefixes error messages ("NAME:LINE: problem"): a syntax error is
// DS_ERR_FORMAT, a feature the interpreter leaves out DS_ERR_UNSUPPORTED (naming it).
ds_status ds_chat_template_init(const char *src, const char *bos_token, const char *eos_token, const char *name,
                                ds_chat_template **out);
void ds_chat_template_free(ds_chat_template *t);
// Render OpenAI-style messages (a JSON array of {role, content (string or text parts), name,
// tool_calls, tool_call_id, reasoning_content, ...}, passed to the template as they are, as
// transformers does), `tools_json` (a JSON array, or NULL: tools is none), `kwargs_json` (a JSON
// object of further template variables, e.g. {"enable_thinking": false}, or NULL). *out is
// malloc'ed. Bad JSON, raise_exception and template errors are DS_ERR_INVALID.
ds_status ds_chat_template_render(const ds_chat_template *t, const char *messages_json, const char *tools_json,
                                  const char *kwargs_json, int add_generation_prompt, char **out);
// The tokenizer's template (with_tools: the "tool_use" one of a named-template list when there is
// one), or NULL when it has none.
const ds_chat_template *ds_chat_template_of(const ds_tokenizer *t, int with_tools);
// The same as ds_chat_template_render with the tokenizer's template (tool_use when tools are
// given); a tokenizer without one renders the messages' role/content in its built-in format.
ds_status ds_chat_render_json(const ds_tokenizer *t, const char *messages_json, const char *tools_json,
                              const char *kwargs_json, int add_generation_prompt, char **out);

// Tool calls in a model's output, in the syntax its template teaches it (chosen from the template
// text): Hermes / Qwen "<tool_call>\n{json}\n</tool_call>" (any number), Llama 3.x JSON
// {"name", "parameters"} (optionally after <|python_tag|>), Mistral "[TOOL_CALLS] [{...}]".
typedef enum { DS_TOOLS_NONE = 0, DS_TOOLS_HERMES, DS_TOOLS_LLAMA3, DS_TOOLS_MISTRAL } ds_tool_syntax;
ds_tool_syntax ds_chat_template_tool_syntax(const ds_chat_template *t); // DS_TOOLS_NONE for NULL
const char *ds_tool_syntax_name(ds_tool_syntax s); // "none", "hermes", "llama3", "mistral"
// Split a complete output into its content (the text outside tool calls, malloc'ed) and its calls
// (*calls_json: a malloc'ed JSON array of {"name": ..., "arguments": "<JSON text>"}; NULL when
// none). A call whose JSON is malformed stays content. Fails only on out of memory.
ds_status ds_tool_calls_parse(ds_tool_syntax s, const char *text, size_t n, char **content, char **calls_json, int *n_calls);
// Streaming: how many leading bytes of the output so far are content for sure (not the start, or
// a possible start, of a tool call).
size_t ds_tool_calls_safe(ds_tool_syntax s, const char *text, size_t n);

// ---------------------------------------------------------------------------------------------
// Text output of one request: committed tokens -> the text a front end shows (generate, chat and
// the server all use it). Streaming detokenization, stop ids (a chat format's end-of-turn token:
// it ends the output and is not part of it), stop strings (the text is cut before the earliest
// match, which may span tokens) and the streaming hold-back (a tail that could begin a stop string
// is not safe to show until later tokens decide).

typedef struct ds_text_out ds_text_out;
typedef enum {
    DS_TEXT_RUNNING = 0,
    DS_TEXT_STOP_ID,     // a stop id was pushed
    DS_TEXT_STOP_STRING, // the text reached a stop string
    DS_TEXT_ENDED,       // ds_text_out_finish: generation ended for another reason (EOS, budget)
} ds_text_end;

ds_status ds_text_out_init(const ds_tokenizer *t, ds_text_out **out);
void ds_text_out_free(ds_text_out *o);
ds_status ds_text_out_add_stop_id(ds_text_out *o, int32_t id); // id < 0 is ignored (no end-of-turn token)
ds_status ds_text_out_add_stop(ds_text_out *o, const char *s); // a non-empty UTF-8 string
// Push committed tokens; stops consuming at the end (*used, optional: how many were taken,
// the stop id included).
ds_status ds_text_out_push(ds_text_out *o, const int32_t *ids, int n, int *used);
// Generation ended: flush an incomplete character (as U+FFFD); everything becomes safe.
ds_status ds_text_out_finish(ds_text_out *o);
const char *ds_text_out_text(const ds_text_out *o, size_t *len); // NUL-terminated
size_t ds_text_out_safe(const ds_text_out *o); // text[0..safe) may be shown now
int ds_text_out_tokens(const ds_text_out *o);  // tokens in the output (a stop id is not counted)
ds_text_end ds_text_out_end(const ds_text_out *o);
// The text length once token i (0-based) was pushed (capped at the cut of a stop string).
size_t ds_text_out_token_end(const ds_text_out *o, int i);
int32_t ds_text_out_token_id(const ds_text_out *o, int i); // token i of the output, or -1

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
// Confidence calibration (Sequential Temperature Scaling): ĉ_k = σ(z_k / T_k). Loaded from
// calibration.json in the drafter's directory when present; set (n = 0 clears) for calibrating.
ds_status ds_drafter_set_calibration(ds_drafter *d, const float *temps, int n);
int ds_drafter_calibration(const ds_drafter *d, const float **temps); // returns n (0 = none)
// The calibration run's realized prefix acceptance per slot (the fraction of rounds that accepted
// slots 1..k), the scheduler's prior; returns how many positions (0 = none recorded).
int ds_drafter_acceptance_prior(const ds_drafter *d, const float **accept);
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

// How many drafted tokens each request verifies per round.
typedef enum {
    DS_SCHEDULE_FIXED = 0, // all drafted slots (up to draft_max)
    DS_SCHEDULE_THRESHOLD, // slots before the first with confidence < conf_threshold (DeepSpec's static rule)
    DS_SCHEDULE_AUTO,      // Algorithm 1 over calibrated confidences and the cost table, with the early stop
} ds_schedule_kind;

// The target's verification steps per second at B tokens in one batched forward (B = 1..bmax),
// measured on this machine (ds_profile_costs); sps[0] is unused. Past bmax, SPS(B) is taken as
// bmax·SPS(bmax)/B.
// Mixture-of-experts targets (moe_layers > 0) verify at a cost that depends on how many distinct
// experts the batch routes to (each is read once): sps[B] is the rate at the profile's routing,
// prof_experts[B] distinct experts per MoE layer pass there, expert_s the seconds one expert pass
// costs, and obs_experts[w] the distinct experts of w consecutive decoded rows (routing statistics
// gathered while decoding); ds_cost_sps corrects sps[B] by the difference (see schedule.h).
#define DS_COST_WINDOWS 16
typedef struct {
    int bmax;
    double sps[513];
    int moe_layers, n_experts;
    double expert_s;
    float prof_experts[513];
    float obs_experts[DS_COST_WINDOWS + 1]; // [w], w = 1..DS_COST_WINDOWS; 0 = unknown
} ds_cost_table;

// Measure SPS(B) for B = 1..bmax: each forward carries B new rows spread over ceil(B/8) sequences
// with `ctx` rows of context each (median of `repeats`). `quick` measures B = 1, 2, 4, ... only and
// interpolates between them.
ds_status ds_profile_costs(const ds_model *m, int bmax, int ctx, int repeats, int quick, ds_cost_table *out);
// Median seconds of one batched drafting round of R sequences as the engine runs it: each appends one
// context row (after `ctx` rows) and then ONE ds_drafter_draft_batch drafts K slots for all of them.
ds_status ds_drafter_profile_round(const ds_drafter *d, int R, int K, int ctx, int repeats, double *seconds);
ds_status ds_cost_table_save(const ds_cost_table *t, const char *model_name, int threads, const char *path);
ds_status ds_cost_table_load(const char *path, ds_cost_table *out);

typedef struct {
    ds_spec_kind kind;
    int draft_max;        // most drafted tokens verified per round (0 = the block size; 7 for ngram)
    float conf_threshold; // DS_SCHEDULE_THRESHOLD: verify slots before the first with c_k < threshold
    int ngram_n;          // ngram match length (0 = 3); shorter matches are tried when it fails
    ds_schedule_kind schedule;   // (ngram and drafters without a confidence head always verify all slots)
    const ds_cost_table *costs;  // DS_SCHEDULE_AUTO: the cost table; NULL = profile quickly at init
    size_t prompt_cache_bytes;   // the prompt cache (reuse the KV of prompts seen before): its size in
                                 // bytes, least recently used entries evicted first; 0 = off
} ds_spec_params;

typedef struct {
    int rounds;              // verification rounds
    int generated;           // tokens committed (EOS excluded)
    int drafted;             // drafted tokens sent to verification
    int accepted;            // of which accepted
    double tau;              // mean tokens committed per round (accepted + 1)
    int tried_by_pos[64];    // rounds in which slot k was verified with slots < k accepted
    int accepted_by_pos[64]; // ... and slot k was accepted
    double draft_s;          // time spent drafting (including context projection)
    double verify_s;         // time in target forwards and verification
    double prefill_s;
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

// ---------------------------------------------------------------------------------------------
// Generation (src/gen/): one request from prompt to text over an engine, the layer every front end
// (generate, chat, eval, the server) goes through. A request's prompt is token ids, text (encoded
// with BOS) or a chat conversation (rendered with the assistant's turn opened); a chat request ends
// at the chat format's end-of-turn token (not part of the output), whoever runs it.

typedef struct {
    const int32_t *ids;           // (n_ids) the prompt as token ids, used as they are, or
    int n_ids;
    const char *text;             // the prompt as UTF-8 text (encoded with BOS), or
    const ds_chat_message *msgs;  // (n_msgs) a conversation (ds_chat_render, generation prompt on)
    int n_msgs;
    int chat;                     // the prompt is a chat conversation (implied by msgs; set it for ids
                                  // or text the caller rendered): the reply ends at ds_chat_eot
    int max_new;                  // token budget
    ds_sampler_params sp;
    uint64_t seed;
    const int32_t *stop_ids;      // (n_stop_ids) further ids that end the output (not part of it)
    int n_stop_ids;
    const char *const *stops;     // (n_stops) stop strings: the text is cut before the earliest match
    int n_stops;
    int logprobs, top_logprobs;   // record log-probabilities (ds_engine_set_logprobs) with top_logprobs
                                  // (0..20) alternatives each
    int no_prompt_cache;          // do not use the engine's prompt cache (ds_seq_params)
    int prompt_logprobs;          // also record the prompt tokens' (ds_engine_set_prompt_logprobs, with
                                  // top_logprobs alternatives)
    const char *grammar;          // GBNF text the output must match (ds_seq_params.grammar, copied;
                                  // the end of turn and stop_ids are its end tokens); NULL = unconstrained
} ds_gen_request;

typedef struct ds_gen ds_gen;

// The request's prompt tokenized and its text output set up (stop ids, stop strings, the end of
// turn); nothing runs yet. `tok` is the target's tokenizer.
ds_status ds_gen_init(const ds_tokenizer *tok, const ds_gen_request *r, ds_gen **out);
// Join `e` with up to max_new new tokens (the request's budget, or less: a caller that fits the
// context). The engine must outlive the request's time in it.
ds_status ds_gen_begin(ds_gen *g, ds_engine *e, int max_new);
// Before ds_gen_begin: replace the request's sampling parameters and seed (a server settles them
// when it queues the request, after setting it up). sp->logit_bias is copied.
ds_status ds_gen_set_sampling(ds_gen *g, const ds_sampler_params *sp, uint64_t seed);
// ds_gen_init, then ds_gen_begin with the request's budget.
ds_status ds_gen_start(ds_engine *e, const ds_tokenizer *tok, const ds_gen_request *r, ds_gen **out);
// After a round (ds_engine_step): move the tokens the engine committed into the text output.
// *n_new (optional) gets how many were taken. On failure (out of memory) the output is finished;
// when the engine failed the sequence on its own (DS_FINISH_ERROR) this returns its error once.
// Once the request is done it stays in the engine until ds_gen_leave / ds_gen_free.
ds_status ds_gen_update(ds_gen *g, int *n_new);
// The request is done: its text output ended (stop id, stop string, end of turn) or the engine
// finished it (EOS, budget).
int ds_gen_done(const ds_gen *g);
// Why it ended: DS_FINISH_STOP (a stop id or string, the end of turn, EOS), DS_FINISH_LENGTH (the
// budget, or a failed update), DS_FINISH_ERROR (the engine failed it: ds_gen_update's error),
// DS_FINISH_NONE while it runs.
ds_finish_reason ds_gen_finish_reason(const ds_gen *g);
// End the request here unless it is done (interrupted, or a front end's own limit): its text output
// is finished (an incomplete character flushed) and its reason is DS_FINISH_LENGTH.
ds_status ds_gen_end(ds_gen *g);
// Leave the engine (idempotent; ds_gen_free does it). Statistics and timings stay readable.
void ds_gen_leave(ds_gen *g);
void ds_gen_free(ds_gen *g);
const int32_t *ds_gen_prompt(const ds_gen *g, int *n);
const ds_text_out *ds_gen_text(const ds_gen *g);
// The request's sequence in its engine (-1 before ds_gen_begin and after ds_gen_leave).
int ds_gen_seq(const ds_gen *g);
// Its engine statistics (as ds_engine_stats; kept when it leaves).
const ds_seq_stats *ds_gen_stats(const ds_gen *g);
// Seconds from ds_gen_begin to the first token taken (-1 before) and to the update that found it
// done (-1 before).
double ds_gen_first_token_s(const ds_gen *g);
double ds_gen_seconds(const ds_gen *g);

// Run n requests through one engine, up to max_active at a time (a request joins as soon as a
// running one finishes, in order). Callbacks (each optional) see a request after every round
// (on_update: streaming) and once it is done, before it leaves the engine (on_done: logprobs are
// still readable); `interrupted` is polled before every round (non-zero: stop, DS_ERR_INTERRUPTED
// without a message). *step_s (optional) adds up the wall time of every ds_engine_step.
typedef struct {
    int max_active;                                  // 0 = 1
    void (*on_update)(void *ctx, int i, const ds_gen *g);
    void (*on_done)(void *ctx, int i, const ds_gen *g);
    int (*interrupted)(void *ctx);
    void *ctx;
} ds_gen_run_params;
ds_status ds_gen_run(ds_engine *e, const ds_tokenizer *tok, const ds_gen_request *reqs, int n,
                     const ds_gen_run_params *p, double *step_s);

#ifdef __cplusplus
}
#endif

#endif
