// dspark/tokenizer.h: tokenizers, streaming detokenization, chat formats and templates, tool calls (src/tokenizer).
// Part of the public API (include/dspark.h composes these headers); it includes only the
// headers of the layers below its own (docs/architecture.md), so a layer that includes it
// cannot name a function of a layer above it.
#ifndef DSPARK_TOKENIZER_H
#define DSPARK_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include "dspark/base.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ds_tokenizer ds_tokenizer;

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
typedef enum { DS_TOOLS_NONE = 0, DS_TOOLS_HERMES, DS_TOOLS_LLAMA3, DS_TOOLS_MISTRAL, DS_TOOLS_GEMMA4 } ds_tool_syntax;
ds_tool_syntax ds_chat_template_tool_syntax(const ds_chat_template *t); // DS_TOOLS_NONE for NULL
const char *ds_tool_syntax_name(ds_tool_syntax s); // "none", "hermes", "llama3", "mistral"
// Split a complete output into its content (the text outside tool calls, malloc'ed) and its calls
// (*calls_json: a malloc'ed JSON array of {"name": ..., "arguments": "<JSON text>"}; NULL when
// none). A call whose JSON is malformed stays content. Fails only on out of memory.
ds_status ds_tool_calls_parse(ds_tool_syntax s, const char *text, size_t n, char **content, char **calls_json, int *n_calls);
// Streaming: how many leading bytes of the output so far are content for sure (not the start, or
// a possible start, of a tool call).
size_t ds_tool_calls_safe(ds_tool_syntax s, const char *text, size_t n);

#ifdef __cplusplus
}
#endif

#endif
