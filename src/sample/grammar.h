// Grammar-constrained decoding: GBNF (llama-server's dialect) compiled to a pushdown automaton over
// Unicode code points, and token masks over a tokenizer's vocabulary.
//
//   ds_grammar          the compiled grammar (grammar_parse.c): rules as flat element arrays.
//   ds_grammar_vocab    per tokenizer: every token's bytes, and a trie over them in preorder.
//   ds_grammar_matcher  per sequence (grammar.c): interned stacks and stack sets, the memo of
//                       transitions (set, code point) -> set, and an LRU of token masks keyed by
//                       the state. Not thread-safe; one per sequence.
//   ds_grammar_state    a value: copying it is a snapshot, so rollback is dropping a copy.
//
// A stack is a persistent list of element positions (its top a character class); stacks and sets
// of stacks are hash-consed, so one integer names a set and equal sets have equal ids. A state is
// (set, the code point bytes seen so far when a token ended inside a UTF-8 sequence, ended).
#ifndef DS_SAMPLE_GRAMMAR_H
#define DS_SAMPLE_GRAMMAR_H

#include <stdint.h>
#include <stdlib.h>

#include "dspark/sample.h"

// A growable array of int32 (the grammar's rule bodies, the matcher's stacks and sets): push
// returns -1 when out of memory (the array is then unchanged).
typedef struct {
    int32_t *v;
    int n, cap;
} ds_i32vec;

static inline int ds_i32vec_push(ds_i32vec *a, int32_t x) {
    if (a->n == a->cap) {
        const int cap = a->cap ? 2 * a->cap : 64;
        int32_t *p = (int32_t *)realloc(a->v, sizeof *p * (size_t)cap);
        if (!p) return -1;
        a->v = p;
        a->cap = cap;
    }
    a->v[a->n++] = x;
    return 0;
}

// ---- compiled grammar (grammar_parse.c) ----------------------------------------------------------

enum { DS_GEL_END = 0, DS_GEL_CHARS = 1, DS_GEL_RULE = 2 }; // element kind = el & 3, argument el >> 2

struct ds_grammar {
    int32_t *el;       // (n_el) elements; every alternative ends with DS_GEL_END
    int n_el, cap_el;
    int32_t *alt;      // (n_alt) start position of each alternative in el
    int n_alt, cap_alt;
    int *rule_alt, *rule_nalt; // (n_rules) a rule's first alternative in alt, and their count
    char **rule_name;  // (n_rules)
    int n_rules, cap_rules;
    uint32_t *rng;     // (2 · n_rng) character-class ranges lo, hi (inclusive)
    int n_rng, cap_rng;
    int *cs_off, *cs_n; // (n_cs) a class's first range and count
    uint8_t *cs_neg;   // (n_cs)
    uint32_t *cs_ascii; // (n_cs, 4) the class over code points 0..127 as a bitmap
    int n_cs, cap_cs;
    int root;          // the rule named root
};

// Whether class c holds code point cp.
int ds_grammar_class_has(const ds_grammar *g, int c, uint32_t cp);

// ---- vocabulary ----------------------------------------------------------------------------------

typedef struct ds_grammar_vocab ds_grammar_vocab;
// Token bytes of ids 0..V-1 (ids the tokenizer lacks, and control / special tokens, have none and
// are never allowed by a grammar).
ds_status ds_grammar_vocab_init(const ds_tokenizer *t, int V, ds_grammar_vocab **out);
void ds_grammar_vocab_free(ds_grammar_vocab *v);
int ds_grammar_vocab_size(const ds_grammar_vocab *v);

// ---- matcher -------------------------------------------------------------------------------------

typedef struct {
    int32_t set;    // interned stack set (0 = dead)
    uint32_t cp;    // bits of a code point begun by the last token (need > 0)
    uint8_t need;   // continuation bytes still expected
    uint8_t ended;  // an end token was accepted: only end tokens remain
    uint8_t len;    // the UTF-8 length of that code point (need > 0)
} ds_grammar_state;

typedef struct ds_grammar_matcher ds_grammar_matcher;
// end_ids: the tokens that end the output (EOS, end of turn, the sequence's stop ids), allowed
// exactly when the grammar is complete, or when nothing else is allowed. `g` and `v` must outlive it.
ds_status ds_grammar_matcher_init(const ds_grammar *g, const ds_grammar_vocab *v, const int32_t *end_ids, int n_end,
                                  ds_grammar_matcher **out);
void ds_grammar_matcher_free(ds_grammar_matcher *m);
// After a call on m failed (NULL or -1): record why as the one-line error and return its code,
// DS_ERR_NOMEM, or DS_ERR_INVALID when the grammar is too ambiguous to follow (more parse stacks
// than the matcher keeps; see grammar.c). The failing calls below have recorded it already.
ds_status ds_grammar_matcher_fail(const ds_grammar_matcher *m);
ds_grammar_state ds_grammar_start(const ds_grammar_matcher *m);
// The allowed tokens in state s: a bitmask of V bits ((V + 31) / 32 words, bit i of word i / 32),
// valid until the next call on m. NULL: out of memory (with a message).
const uint32_t *ds_grammar_mask(ds_grammar_matcher *m, const ds_grammar_state *s);
// Advance s over token tok: returns 1 (s updated), 0 when tok is not allowed (s unchanged), or
// -1 when out of memory.
int ds_grammar_accept(ds_grammar_matcher *m, ds_grammar_state *s, int32_t tok);
// Advance s over UTF-8 text: 1 accepted (s updated), 0 rejected, -1 out of memory.
int ds_grammar_accept_text(ds_grammar_matcher *m, ds_grammar_state *s, const char *text, size_t n);
// The grammar can end here (a complete root, no partial character).
int ds_grammar_complete(const ds_grammar_matcher *m, const ds_grammar_state *s);
int ds_grammar_is_end(const ds_grammar_matcher *m, int32_t tok);
// Counters: masks computed, masks served from the cache.
void ds_grammar_matcher_counts(const ds_grammar_matcher *m, long *computed, long *cached);

// Logits of tokens outside the mask become -inf (n entries).
void ds_logits_mask(float *logits, const uint32_t *mask, int n);
// Whether some token allowed by the mask has a finite logit.
int ds_logits_mask_any(const float *logits, const uint32_t *mask, int n);

#endif
