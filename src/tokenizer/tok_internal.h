// The tokenizer object, shared by the files of src/tokenizer/ (not part of any public API).
#ifndef DS_TOKENIZER_TOK_INTERNAL_H
#define DS_TOKENIZER_TOK_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "tokenizer/tokenizer.h"

struct ds_tokenizer {
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

// The id whose piece is exactly s[0..n), or -1.
int32_t ds_tok_lookup(const ds_tokenizer *t, const char *s, size_t n);

// The bytes token `id` decodes to (see ds_token_bytes); *n = 0 for an out-of-range id.
const char *ds_tok_decoded(const ds_tokenizer *t, int32_t id, size_t *n);

// Complexity guard for tests: the number of vocabulary look-ups plus priority-queue pushes and
// pops done by the calling thread's last ds_tokenize call.
size_t ds_tok_last_op_count(void);

#endif
