// Hugging Face tokenizer.json data (BPE model), shared by hf_load.c and hf_encode.c.
#ifndef DS_TOKENIZER_HF_INTERNAL_H
#define DS_TOKENIZER_HF_INTERNAL_H

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stddef.h>
#include <stdint.h>

#include "tokenizer/tok_internal.h"

enum { DS_SPLIT_ISOLATED = 0, DS_SPLIT_MERGED_PREV, DS_SPLIT_MERGED_NEXT, DS_SPLIT_REMOVED };

// One pre-tokenizer split stage: a regex (PCRE2, UTF + UCP) or a literal string.
typedef struct {
    pcre2_code *re;  // NULL for a literal
    char *lit;       // the literal (when re is NULL)
    size_t lit_n;
    int behavior;    // DS_SPLIT_*
} ds_hf_split;

#define DS_HF_MAX_SPLITS 4

struct ds_hf {
    // Normalizer: NFC and/or one literal Replace (applied in file order: nfc first if both).
    int nfc;
    char *rep_from, *rep_to;
    size_t rep_from_n, rep_to_n;

    // Pre-tokenizer: split stages applied in order, then (byte_level) bytes -> GPT-2 characters.
    ds_hf_split splits[DS_HF_MAX_SPLITS];
    int n_splits;
    int byte_level;           // ByteLevel pre-tokenizer present
    int byte_level_prefix;    // ByteLevel add_prefix_space

    // BPE model. Merges: (left id, right id) -> (rank, merged id), open addressing.
    uint64_t *mkey;           // (mmask + 1) left << 32 | right; UINT64_MAX = empty
    int32_t *mrank, *mnew;    // (mmask + 1)
    size_t mmask;
    int byte_fallback, fuse_unk, ignore_merges;
    int newline_runs;         // a word made only of "\n" that is a piece is one token (llama.cpp's
                              // gemma4 rule; set by load.c, not by tokenizer.json)
    int32_t byte_sym[256];    // byte_level: id of the GPT-2 character of each byte (-1 if none)
    int32_t byte_tok[256];    // byte_fallback: id of "<0xHH>" (-1 if none)

    // Added tokens, matched leftmost-longest on the raw text before anything else.
    int32_t *added;           // (n_added) ids
    uint8_t *added_special;   // (n_vocab) 1 = special added token, 2 = non-special added token
    int n_added;
    uint8_t first_byte[256];  // 1 when some added token starts with this byte
    size_t *added_lens;       // (n_added_lens) distinct content lengths, longest first
    int n_added_lens;

    // Post-processor: special tokens around a single sequence.
    int32_t prefix[8], suffix[8];
    int n_prefix, n_suffix;

    // Decoder: leading spaces the decoder strips (Strip decoder), clean-up of spaces (config).
    int strip_start;
    int cleanup;
    int32_t eot;              // end-of-turn id of the chat format, -1 if none
};

#endif
