// Training data for drafters: token sequences the frozen target wrote (dspark datagen), in one
// versioned binary file that is written atomically, can be appended to, and is read through a
// validating memory map. Also: prompt files (datagen and eval read the same formats) and the
// deterministic held-out split.
//
// File layout (version 1; every integer little-endian):
//
//   offset  size  field
//   0       8     magic "DSPKDATA"
//   8       4     u32 version = 1
//   12      4     u32 flags = 0 (no flag is defined in version 1; readers reject any set bit)
//   16      8     u64 vocab_size: every id is < vocab_size (1 .. 2^31 - 1)
//   24      8     u64 n_sequences
//   32            n_sequences records, back to back:
//                   u32 n_tokens (>= 1)
//                   u32 n_prompt (<= n_tokens)
//                   u32 ids[n_tokens]
//   end - 8 8     u64 checksum: FNV-1a 64 (offset basis 0xcbf29ce484222325, prime 0x100000001b3)
//                 of every byte before it
//
// The loss mask is not stored: it is 0 on the first n_prompt tokens (the prompt, BOS included) and
// 1 on the rest (what the target generated), so n_prompt says it in 4 bytes per sequence where a
// bitmap would take n_tokens / 8, and it cannot be inconsistent with the sequence. A future
// format needing arbitrary masks (multi-turn chat) would set a flag bit and add a bitmap.
//
// Every record starts 4-byte aligned (32-byte header, records of 8 + 4 n bytes), so readers hand
// out the ids as pointers into the mapping. A sequence that ended because the target produced EOS
// ends with that EOS id (datagen keeps it, so a drafter can learn to propose the end).
//
// Readers check, before anything is used: the size, magic, version, flags and vocabulary; that
// n_sequences is possible for the file's size; that the records tile the file exactly up to the
// trailer (truncation and trailing bytes are named as such); the checksum (any other corruption);
// then every n_prompt <= n_tokens and every id < vocab_size.
#ifndef DS_TRAIN_DATA_H
#define DS_TRAIN_DATA_H

#include <stddef.h>
#include <stdint.h>

#include "dspark/speculate.h"
#include "dspark/train.h"

#define DS_DATA_MAGIC "DSPKDATA"
#define DS_DATA_VERSION 1u
#define DS_DATA_HEADER_BYTES 32u
#define DS_DATA_TRAILER_BYTES 8u
#define DS_DATA_MAX_VOCAB 0x7fffffffu

// FNV-1a 64 over n bytes, continuing from h (start with DS_FNV1A64_INIT).
#define DS_FNV1A64_INIT 0xcbf29ce484222325ull
uint64_t ds_fnv1a64(uint64_t h, const void *p, size_t n);

// ---------------------------------------------------------------------------------------------
// Reading

// ds_data_open / close / count / vocab / total_tokens / get / top_tokens: include/dspark_jobs.h.

// ---------------------------------------------------------------------------------------------
// Writing

typedef struct ds_data_writer ds_data_writer;

// Start writing `path` (through "<path>.tmp.<pid>", renamed into place by commit). With `append`,
// an existing file is validated and its sequences are copied first (its vocab_size must equal
// `vocab_size`: DS_ERR_MISMATCH otherwise); a missing file starts empty. Without it, an existing
// file is replaced at commit.
ds_status ds_data_writer_open(const char *path, uint64_t vocab_size, int append, ds_data_writer **out);
// Add one sequence: n_tokens >= 1 ids, each < vocab_size; the first n_prompt are the prompt.
ds_status ds_data_writer_add(ds_data_writer *w, const int32_t *tokens, int n_tokens, int n_prompt);
// Sequences in the file so far (copied ones included).
size_t ds_data_writer_count(const ds_data_writer *w);
// Write the header and checksum and rename into place. Frees w whatever happens; on failure the
// temporary file is removed and any previous file at `path` is untouched.
ds_status ds_data_writer_commit(ds_data_writer *w);
// Discard everything (removes the temporary file) and free w. NULL is fine.
void ds_data_writer_abort(ds_data_writer *w);

// ---------------------------------------------------------------------------------------------
// Held-out split: sequence `index` (its position in the generation order) belongs to the held-out
// set when a hash of (seed, index) falls below `fraction` (0 = never, 1 = always). Deterministic,
// independent of anything else, so the same run always splits the same way.
int ds_data_is_holdout(uint64_t index, uint64_t seed, double fraction);

#endif
