// GGUF reader (versions 2 and 3): header, metadata of every value type (arrays included), tensor
// infos, alignment. The file is memory-mapped; every count, offset and size is validated (overflow
// included) before use, and an unsupported tensor type is an error naming it.
#ifndef DS_IO_GGUF_H
#define DS_IO_GGUF_H

#include <stddef.h>
#include <stdint.h>

#include "dspark/io.h"
#include "io/mapfile.h"

typedef enum {
    DS_GGUF_U8 = 0, DS_GGUF_I8 = 1, DS_GGUF_U16 = 2, DS_GGUF_I16 = 3, DS_GGUF_U32 = 4, DS_GGUF_I32 = 5,
    DS_GGUF_F32 = 6, DS_GGUF_BOOL = 7, DS_GGUF_STRING = 8, DS_GGUF_ARRAY = 9, DS_GGUF_U64 = 10,
    DS_GGUF_I64 = 11, DS_GGUF_F64 = 12,
} ds_gguf_type;

typedef struct {
    const char *ptr; // into the mapping, NOT NUL-terminated
    uint64_t len;
} ds_gguf_str;

typedef struct {
    char *key;           // NUL-terminated copy
    ds_gguf_type type;
    union {
        uint64_t u;      // unsigned integers and bool
        int64_t i;       // signed integers
        double f;        // floats
        ds_gguf_str s;
    } v;
    // Arrays: element type and count; fixed-size elements at `arr_data` (possibly unaligned: read
    // with memcpy or the accessors below); string elements indexed in `arr_strs`.
    ds_gguf_type arr_type;
    uint64_t arr_n;
    const uint8_t *arr_data;
    ds_gguf_str *arr_strs; // (arr_n) for string arrays, else NULL
} ds_gguf_kv;

typedef struct {
    char *name;       // NUL-terminated copy
    ds_dtype type;
    int n_dims;
    int64_t ne[4];    // ggml order: ne[0] is the innermost (contiguous) dimension
    uint64_t offset;  // relative to the data section
    size_t nbytes;
    const void *data; // into the mapping
} ds_gguf_tensor;

typedef struct {
    ds_mapfile map;
    uint32_t version;
    uint64_t n_kv;
    ds_gguf_kv *kv;           // (n_kv)
    uint64_t n_tensors;
    ds_gguf_tensor *tensors;  // (n_tensors)
    uint64_t alignment;
    size_t data_offset;       // start of the tensor data section in the file
} ds_gguf;

ds_status ds_gguf_open(ds_gguf *g, const char *path);
void ds_gguf_close(ds_gguf *g);

const ds_gguf_kv *ds_gguf_find_kv(const ds_gguf *g, const char *key);
const ds_gguf_tensor *ds_gguf_find_tensor(const ds_gguf *g, const char *name);

// Typed metadata getters: DS_OK and *out set, or an error naming the key when absent or of another
// type. Integer getters accept any integer type whose value fits.
ds_status ds_gguf_get_int(const ds_gguf *g, const char *key, int64_t *out);
ds_status ds_gguf_get_float(const ds_gguf *g, const char *key, double *out);
ds_status ds_gguf_get_bool(const ds_gguf *g, const char *key, int *out);
// Like the above, but absent keys give `def` (a present key of the wrong type is still an error).
ds_status ds_gguf_get_int_or(const ds_gguf *g, const char *key, int64_t def, int64_t *out);
ds_status ds_gguf_get_float_or(const ds_gguf *g, const char *key, double def, double *out);
ds_status ds_gguf_get_bool_or(const ds_gguf *g, const char *key, int def, int *out);
// Copy a string value into buf (NUL-terminated, truncated to cap - 1).
ds_status ds_gguf_get_str(const ds_gguf *g, const char *key, char *buf, size_t cap);

// Element i of a numeric array as double / int64.
double ds_gguf_arr_f64(const ds_gguf_kv *kv, uint64_t i);
int64_t ds_gguf_arr_i64(const ds_gguf_kv *kv, uint64_t i);

// Bytes of one scalar metadata value of type t (0 for strings and arrays).
size_t ds_gguf_scalar_size(ds_gguf_type t);

// Name of a ggml tensor type id ("Q4_K", ...), for error messages.
const char *ds_ggml_type_name(uint32_t type);

// Write a GGUF v3 file with no tensors holding g's metadata keys selected by `keep` (a NULL-ended
// list: an entry ending in '.' selects every key with that prefix, any other entry one exact key),
// values unchanged. (dspark quantize carries a GGUF's tokenizer this way.)
ds_status ds_gguf_write_metadata(const ds_gguf *g, const char *const *keep, const char *path);

// ---- writing (io/gguf_write.c) ---------------------------------------------------------------------
// A GGUF v3 file, alignment 32: add metadata (in file order) and declare every tensor (name, ggml
// type, dims in ggml order, byte size), then open (writes the header atomically into a temporary
// file), stream each tensor's bytes in declaration order with ds_gguf_writer_data (any chunking),
// and commit (fsync + rename). Free without commit discards everything. The open refuses what
// io/atomic.h refuses and an existing file that is not a GGUF with general.quantized_by = "dspark".
typedef struct ds_gguf_writer ds_gguf_writer;
ds_status ds_gguf_writer_init(ds_gguf_writer **w);
void ds_gguf_writer_free(ds_gguf_writer *w);
void ds_gguf_writer_str(ds_gguf_writer *w, const char *key, const char *s, size_t n);
void ds_gguf_writer_u32(ds_gguf_writer *w, const char *key, uint32_t v);
void ds_gguf_writer_i32(ds_gguf_writer *w, const char *key, int32_t v);
void ds_gguf_writer_f32(ds_gguf_writer *w, const char *key, float v);
void ds_gguf_writer_bool(ds_gguf_writer *w, const char *key, int v);
// An array of n fixed-size elements (elem_size bytes each, little-endian) / of n strings (len NULL:
// NUL-terminated).
void ds_gguf_writer_arr(ds_gguf_writer *w, const char *key, ds_gguf_type elem, uint64_t n, const void *data,
                        size_t elem_size);
void ds_gguf_writer_arr_str(ds_gguf_writer *w, const char *key, uint64_t n, const char *const *s, const size_t *len);
// A key/value pair of a file being read, unchanged.
void ds_gguf_writer_copy(ds_gguf_writer *w, const ds_gguf_kv *kv);
ds_status ds_gguf_writer_tensor(ds_gguf_writer *w, const char *name, ds_dtype type, int n_dims, const int64_t *ne,
                                uint64_t nbytes);
// Whether `path` may be written (before a long job starts).
ds_status ds_gguf_writer_check(const char *path);
ds_status ds_gguf_writer_open(ds_gguf_writer *w, const char *path);
ds_status ds_gguf_writer_data(ds_gguf_writer *w, const void *p, size_t n);
ds_status ds_gguf_writer_commit(ds_gguf_writer *w);
// Flush what was written and return the temporary file's path (to reload it before commit), or NULL.
const char *ds_gguf_writer_flush(ds_gguf_writer *w);

#endif
