// Safetensors: read (memory-mapped, validated) and write (atomic, optionally sharded).
//
// File format (https://github.com/huggingface/safetensors):
//   u64 N (little-endian) | N bytes of JSON header | data buffer
//   header = {"__metadata__": {str: str}, "<name>": {"dtype": "F32", "shape": [..],
//             "data_offsets": [begin, end]}, ...}
//   offsets are relative to the start of the data buffer (byte 8 + N); end - begin must equal
//   product(shape) * dtype size; tensors must not overlap.
//
// Hugging Face directories: `model.safetensors`, or shards `model-00001-of-0000K.safetensors` plus
// `model.safetensors.index.json` = {"metadata": {...}, "weight_map": {"<tensor>": "<shard file>"}}.
#ifndef DS_IO_SAFETENSORS_H
#define DS_IO_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "dspark/io.h"

#define DS_ST_MAX_DIMS 8
#define DS_ST_MAX_HEADER ((uint64_t)100 * 1000 * 1000) // reject headers above 100 MB

// Bytes per element of a plain (non-block) type: 4 for F32/U32/I32, 2 for F16/BF16; 0 for block
// types (Q8_0) and unknown values.
size_t ds_dtype_size(ds_dtype t);

// ---------------------------------------------------------------------------------------------
// Reader

typedef struct {
    const char *name;
    ds_dtype dtype;               // F32, F16, BF16, U32 or I32 (other dtypes are rejected at open)
    int n_dims;                   // 0 (scalar) .. DS_ST_MAX_DIMS
    int64_t shape[DS_ST_MAX_DIMS];// outermost first (row-major, as in PyTorch)
    const void *data;             // (nbytes) points into the read-only mapping; never copied
    size_t nbytes;                // = product(shape) * ds_dtype_size(dtype)
} ds_st_tensor;

typedef struct ds_safetensors ds_safetensors;

// Open a .safetensors file, or a directory holding model.safetensors (preferred) or
// model.safetensors.index.json with its shards. Every header is validated before anything is
// returned. Tensor data stays valid until ds_st_close. Note: `data` is aligned to the element
// size in files written by ds_st_writer and by safetensors >= 0.3; older files may not be.
ds_status ds_st_open(const char *path, ds_safetensors **out);
void ds_st_close(ds_safetensors *st);

// Tensors are held sorted by name: ds_st_at(st, 0 .. count-1) iterates in strcmp order.
int ds_st_count(const ds_safetensors *st);
const ds_st_tensor *ds_st_at(const ds_safetensors *st, int i); // NULL if i is out of range
const ds_st_tensor *ds_st_find(const ds_safetensors *st, const char *name); // NULL if absent

// A metadata value, or NULL. Single file: its "__metadata__". Sharded directory: the index's
// "metadata" (numbers rendered as decimal text, e.g. "total_size"), then each shard's
// "__metadata__" for keys not already present.
const char *ds_st_metadata(const ds_safetensors *st, const char *key);
int ds_st_metadata_count(const ds_safetensors *st);
// The i-th metadata entry (in key order); returns its key and sets *value, or NULL if out of range.
const char *ds_st_metadata_at(const ds_safetensors *st, int i, const char **value);

// ---------------------------------------------------------------------------------------------
// Writer
//
// Collect tensors (the caller keeps each `data` alive until written) and metadata, then write a
// file or a directory. Header keys are sorted by name; data offsets are contiguous, laid out by
// element size (largest first) then name so every tensor is aligned to its element size; the
// header is padded with spaces so the data buffer starts at a multiple of 8 bytes.

typedef struct ds_st_writer ds_st_writer;

ds_st_writer *ds_st_writer_new(void); // NULL (with ds_last_error set) when out of memory
void ds_st_writer_free(ds_st_writer *w);

// Add a tensor: copies `name` and `shape`, keeps the `data` pointer (product(shape) * dtype size
// bytes; may be NULL only when that is 0). Rejects empty, duplicate and "__metadata__" names,
// unsupported dtypes, n_dims outside 0..8, negative dims and byte sizes that overflow.
ds_status ds_st_writer_add(ds_st_writer *w, const char *name, ds_dtype dtype, int n_dims,
                           const int64_t *shape, const void *data);
// Set (or replace) a "__metadata__" string.
ds_status ds_st_writer_set_metadata(ds_st_writer *w, const char *key, const char *value);

// Write one file atomically (temporary file + rename): on failure nothing is left at `path`.
ds_status ds_st_writer_write_file(const ds_st_writer *w, const char *path);

// Write a Hugging Face directory (created if missing; its parent must exist). When the data fits
// in max_shard_bytes (0 = no limit) writes `model.safetensors`; otherwise shards of at most
// max_shard_bytes of data each (a larger tensor gets a shard of its own), in name order,
// `model-0000i-of-0000K.safetensors`, then `model.safetensors.index.json` with "metadata":
// {"total_size": N} and the "weight_map". Every file is written atomically, the index last. A
// stale model.safetensors (when writing shards) or index (when writing one file) is removed so
// that ds_st_open reads what was just written. Metadata goes into every file's "__metadata__".
ds_status ds_st_writer_write_dir(const ds_st_writer *w, const char *dir, size_t max_shard_bytes);

// Streaming: tensors declared by name, dtype and shape only (*id names one for ds_st_sink_put) whose
// bytes are supplied while ds_st_writer_stream_dir runs, so a writer never holds them all. A
// writer with streamed tensors is written only by ds_st_writer_stream_dir.
ds_status ds_st_writer_add_stream(ds_st_writer *w, const char *name, ds_dtype dtype, int n_dims,
                                  const int64_t *shape, int *id);
typedef struct ds_st_sink ds_st_sink;
// Append n bytes to streamed tensor `id` (in order; more than its size is an error).
ds_status ds_st_sink_put(ds_st_sink *sink, int id, const void *data, size_t n);
typedef ds_status (*ds_st_fill)(void *ctx, ds_st_sink *sink);
// ds_st_writer_write_dir for a writer with streamed tensors (same files, layout and index): every
// file is opened as a temporary with its header and the tensors that have data, then
// fill(ctx, sink) supplies the streamed tensors' bytes, in any order across tensors; a tensor left
// short is an error. Then the files are renamed into place and the index written. On failure
// (fill's included) nothing is left of what it wrote.
ds_status ds_st_writer_stream_dir(const ds_st_writer *w, const char *dir, size_t max_shard_bytes, ds_st_fill fill,
                                  void *ctx);

#endif
