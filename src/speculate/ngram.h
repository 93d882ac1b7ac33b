// Prompt-lookup drafting (n-gram): no model, just the sequence so far.
#ifndef DS_SPECULATE_NGRAM_H
#define DS_SPECULATE_NGRAM_H

#include <stdint.h>

// Propose up to k tokens: find the latest earlier occurrence of the last n tokens of hist (n from
// n_max down to 1) and return what followed it. Returns the number proposed (0 when nothing
// matches).
int ds_ngram_propose(const int32_t *hist, int len, int n_max, int k, int32_t *out);

#endif
