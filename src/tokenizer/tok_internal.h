// The tokenizer object, shared by the files of src/tokenizer/ (not part of any public API).
#ifndef DS_TOKENIZER_TOK_INTERNAL_H
#define DS_TOKENIZER_TOK_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "tokenizer/tokenizer.h"

enum { DS_TOK_SPM = 0, DS_TOK_HF = 1 };

typedef struct ds_hf ds_hf; // tokenizer.json data (hf_load.c)

struct ds_tokenizer {
    int kind;             // DS_TOK_SPM (GGUF SentencePiece) or DS_TOK_HF (tokenizer.json BPE)
    ds_hf *hf;            // kind == DS_TOK_HF: normalizer, pre-tokenizer, merges, added tokens
    int chat_format;      // DS_CHAT_* (chat.c), from tokenizer_config.json's chat_template
    ds_chat_template *tmpl;       // the chat template, NULL when none (or it does not parse)
    ds_chat_template *tmpl_tools; // a "tool_use" template of a named list, else NULL
    int32_t tmpl_eot;             // with tmpl: its end-of-turn id (ds_chat_setup), -1 if none
    unsigned chat_flags;  // DS_CHAT_QWEN3_THINK | ...: template variants (chat.c)
    int n_vocab;
    int bos, eos, unk;    // -1 when absent
    int add_space_prefix;

    // Piece i is pool[off[i] .. off[i+1]) (raw, with U+2581 for spaces).
    char *pool;
    size_t *off;          // (n_vocab + 1)
    float *scores;        // (n_vocab)
    uint8_t *types;       // (n_vocab) resolved DS_TOKTYPE_* (0 = undefined)
    size_t max_piece_len; // longest piece in bytes: bigrams longer than this cannot be pieces

    // What each token decodes to (ds_token_bytes): dec[dec_off[i] .. dec_off[i+1]).
    char *dec;
    size_t *dec_off;      // (n_vocab + 1)

    // Text -> id over every non-empty piece, whatever its type (open addressing, linear probing).
    int32_t *slots;       // (mask + 1), -1 = empty
    uint32_t *slot_hash;  // (mask + 1) low 32 bits of each occupant's hash
    size_t mask;

    int32_t byte_tok[256]; // byte-fallback id of each byte, -1 when neither it nor unk exists

    // USER_DEFINED ids, longest text first (ties: lower id first): split out of the text before
    // the SentencePiece merges, as llama.cpp does even when it does not parse special tokens.
    int32_t *user_defined;
    int n_user_defined;
};

// Builds slots/slot_hash/mask from pool/off (every non-empty piece); fails on duplicates.
ds_status ds_tok_build_index(ds_tokenizer *t);

// Internal ds_tokenize_ex flag (ds_tokenize's add_bos): do not add BOS when the text already
// starts with the BOS token's text (a rendered chat template), so it is never doubled.
#define DS_TOK_NO_DOUBLE_BOS (1u << 8)

// HF kind (hf_load.c / hf_encode.c).
void ds_hf_free(ds_hf *h);
ds_status ds_hf_tokenize(const ds_tokenizer *t, const char *text, size_t len, unsigned flags, int32_t *out,
                         int cap, int *n_out);
// The text of an added/special token for full decodes that keep special tokens (NULL if `id` is not one).
const char *ds_hf_special_text(const ds_tokenizer *t, int32_t id, size_t *n);
// Post-processing clean-up of decoded text (tokenizer_config.json clean_up_tokenization_spaces).
int ds_hf_cleanup_spaces(const ds_tokenizer *t);

// Chat formats (chat.c).
enum { DS_CHAT_PLAIN = 0, DS_CHAT_CHATML, DS_CHAT_GEMMA, DS_CHAT_LLAMA3 };
// The format a chat_template implements (recognized by its markers); DS_CHAT_PLAIN when unknown.
int ds_chat_detect(const char *chat_template);
enum { DS_CHAT_QWEN3_THINK = 1, DS_CHAT_QWEN25_SYSTEM = 2, DS_CHAT_LLAMA31_SYSTEM = 4, DS_CHAT_DATE_NOW = 8 };
unsigned ds_chat_variant(const char *chat_template);
// Set up t->tmpl / t->tmpl_tools and the end-of-turn id from tokenizer_config.json's
// chat_template (a string, or a list of {name, template}) and the bos/eos token strings.
// A template that does not parse leaves the built-in format in charge. chat_template.c.
struct cJSON;
int32_t ds_chat_setup(ds_tokenizer *t, const struct cJSON *chat_template, const char *bos, const char *eos);

// The id whose piece is exactly s[0..n), or -1.
int32_t ds_tok_lookup(const ds_tokenizer *t, const char *s, size_t n);

// The bytes token `id` decodes to (see ds_token_bytes); *n = 0 for an out-of-range id.
const char *ds_tok_decoded(const ds_tokenizer *t, int32_t id, size_t *n);

// Complexity guard for tests: the number of vocabulary look-ups plus priority-queue pushes and
// pops done by the calling thread's last ds_tokenize call (encode.c resets it, spm.c counts).
size_t ds_tok_last_op_count(void);
extern _Thread_local size_t ds_tok_ops;

// SentencePiece encoding of valid UTF-8 of at most 2^28 bytes (spm.c; the arguments are checked by
// ds_tokenize / ds_tokenize_ex in encode.c, the public entry points of both kinds).
ds_status ds_spm_tokenize(const ds_tokenizer *t, const char *text, size_t len, int add_bos, int32_t *out, int cap,
                          int *n_out);

#endif
