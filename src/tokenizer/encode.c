// Encoding, the public entry points of both tokenizer kinds: ds_tokenize and ds_tokenize_ex check
// their arguments (valid UTF-8, the size limit) and hand the text to the kind's encoder: SentencePiece
// (spm.c) or tokenizer.json BPE (hf_encode.c).
#include <stdint.h>

#include "base/status.h"
#include "tokenizer/tok_internal.h"
#include "tokenizer/utf8.h"

_Thread_local size_t ds_tok_ops;

size_t ds_tok_last_op_count(void) { return ds_tok_ops; }

// Texts longer than this (256 MiB) are refused: the escaped text (up to 3 bytes per input byte)
// and the token count (at most 6 per input byte, plus BOS) must fit in 32 bits.
#define MAX_TEXT_BYTES ((size_t)1 << 28)

// Argument checks shared by both tokenizer kinds.
static ds_status check_args(const ds_tokenizer *t, const char *text, size_t len, int32_t *out, int cap, int *n_out) {
    ds_tok_ops = 0;
    if (!n_out) return ds_fail(DS_ERR_INVALID, "tokenize: NULL n_out");
    *n_out = 0;
    if (!t) return ds_fail(DS_ERR_INVALID, "tokenize: NULL tokenizer");
    if (!text && len > 0) return ds_fail(DS_ERR_INVALID, "tokenize: NULL text of length %zu", len);
    if (cap < 0 || (cap > 0 && !out)) return ds_fail(DS_ERR_INVALID, "tokenize: bad output buffer (cap %d)", cap);
    if (len > MAX_TEXT_BYTES) return ds_fail(DS_ERR_INVALID, "tokenize: text too long (%zu bytes)", len);
    size_t bad;
    if (!ds_utf8_valid((const uint8_t *)text, len, &bad))
        return ds_fail(DS_ERR_INVALID, "tokenize: invalid UTF-8 at byte offset %zu", bad);
    return DS_OK;
}

ds_status ds_tokenize(const ds_tokenizer *t, const char *text, size_t len, int add_bos, int32_t *out,
                      int cap, int *n_out) {
    ds_status st = check_args(t, text, len, out, cap, n_out);
    if (st) return st;
    if (t->kind == DS_TOK_HF)
        return ds_hf_tokenize(t, text, len, add_bos ? DS_TOK_ADD_SPECIAL | DS_TOK_PARSE_SPECIAL | DS_TOK_NO_DOUBLE_BOS
                                                    : DS_TOK_PARSE_SPECIAL, out, cap, n_out);
    return ds_spm_tokenize(t, text, len, add_bos, out, cap, n_out);
}

ds_status ds_tokenize_ex(const ds_tokenizer *t, const char *text, size_t len, unsigned flags, int32_t *out,
                         int cap, int *n_out) {
    ds_status st = check_args(t, text, len, out, cap, n_out);
    if (st) return st;
    if (t->kind == DS_TOK_HF) return ds_hf_tokenize(t, text, len, flags & (DS_TOK_ADD_SPECIAL | DS_TOK_PARSE_SPECIAL), out, cap, n_out);
    return ds_spm_tokenize(t, text, len, (flags & DS_TOK_ADD_SPECIAL) && t->bos >= 0, out, cap, n_out);
}
