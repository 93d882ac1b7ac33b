// The prompt cache: the target's KV rows (and the drafter's tap rows) of prompts seen before, so a
// new prompt that starts the same way skips prefilling its cached prefix (vLLM's prefix caching,
// llama-server's cache_prompt). Bounded in bytes, least recently used entries evicted first.
//
// Lossless by construction: an entry holds only whole prefill chunks (rows [0, n) with n a multiple
// of the engine's chunk, computed by the same chunk forwards a fresh prefill runs), and a hit is
// cut to whole chunks too, so the rows a cached request starts from are bit for bit the rows it
// would have computed, and the rest of its prefill runs the same chunks as without the cache.
#ifndef DS_SPECULATE_PROMPT_CACHE_H
#define DS_SPECULATE_PROMPT_CACHE_H

#include <stddef.h>
#include <stdint.h>

#include "dspark/speculate.h"

typedef struct ds_prompt_cache ds_prompt_cache;

// A cache of at most cap_bytes whose entries hold kv_bytes bytes of target KV (ds_kv_row_bytes) and
// tap_floats floats of drafter taps per row (0 without a drafter).
// floats of drafter taps per row (0 without a drafter).
ds_status ds_prompt_cache_init(size_t cap_bytes, size_t kv_bytes, size_t tap_floats, ds_prompt_cache **out);
void ds_prompt_cache_free(ds_prompt_cache *c);

// The longest cached prefix of toks[0..n), cut to whole multiples of `align` rows: returns its
// rows (0: none) and the entry's data: KV as ds_kv_save laid it out for *stride rows, taps
// (*stride, tap_floats). The pointers stay valid until the next insert.
int ds_prompt_cache_lookup(ds_prompt_cache *c, const int32_t *toks, int n, int align, const void **kv,
                           const float **taps, int *stride);

// Keep rows [0, n) of a sequence: toks (n), its KV cache (at least n rows) and its taps (n rows;
// NULL without a drafter). An entry that is a prefix of it is replaced; when an entry already
// covers it, that entry is only marked used. Too big for the cache: nothing is kept (DS_OK).
ds_status ds_prompt_cache_insert(ds_prompt_cache *c, const int32_t *toks, int n, const ds_kv *kv, const float *taps);

// Its contents (ds_prompt_cache_stats: include/dspark.h).
void ds_prompt_cache_get_stats(const ds_prompt_cache *c, ds_prompt_cache_stats *out);

#endif
