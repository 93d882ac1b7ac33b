// Training data files (layout in data.h) and the held-out split.
#include "train/data.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "io/atomic.h"
#include "io/mapfile.h"

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the data file is little-endian and read in place: a big-endian port must convert ids"
#endif

uint64_t ds_fnv1a64(uint64_t h, const void *p, size_t n) {
    const uint8_t *b = p;
    for (size_t i = 0; i < n; i++) {
        h ^= b[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

static uint32_t rd32(const uint8_t *p) {
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

static uint64_t rd64(const uint8_t *p) {
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}

// ---------------------------------------------------------------------------------------------
// Reading

struct ds_data {
    ds_mapfile mf;
    uint64_t vocab;
    size_t n;
    size_t *off; // (n) byte offset of each record
    size_t total_tokens;
};

void ds_data_close(ds_data *d) {
    if (!d) return;
    ds_mapfile_close(&d->mf);
    free(d->off);
    free(d);
}

size_t ds_data_count(const ds_data *d) { return d->n; }
uint64_t ds_data_vocab(const ds_data *d) { return d->vocab; }
size_t ds_data_total_tokens(const ds_data *d) { return d->total_tokens; }

static ds_status validate(ds_data *d, const char *path) {
    const uint8_t *p = d->mf.data;
    const size_t size = d->mf.size;
    const size_t min = DS_DATA_HEADER_BYTES + DS_DATA_TRAILER_BYTES;
    if (size >= 8 && memcmp(p, DS_DATA_MAGIC, 8) != 0)
        return ds_fail(DS_ERR_FORMAT, "%s: not a dspark data file (bad magic)", path);
    if (size < min)
        return ds_fail(DS_ERR_FORMAT, "%s: truncated (%zu bytes; a data file has at least %zu)", path, size, min);
    const uint32_t version = rd32(p + 8), flags = rd32(p + 12);
    if (version != DS_DATA_VERSION)
        return ds_fail(DS_ERR_UNSUPPORTED, "%s: data format version %u (this build reads version %u)", path, version,
                       DS_DATA_VERSION);
    if (flags != 0) return ds_fail(DS_ERR_UNSUPPORTED, "%s: unknown flags 0x%x in the header", path, flags);
    d->vocab = rd64(p + 16);
    if (d->vocab == 0 || d->vocab > DS_DATA_MAX_VOCAB)
        return ds_fail(DS_ERR_FORMAT, "%s: vocabulary size %llu outside 1..%u", path, (unsigned long long)d->vocab,
                       DS_DATA_MAX_VOCAB);
    const uint64_t n_seq = rd64(p + 24);
    const size_t end = size - DS_DATA_TRAILER_BYTES; // records end here
    if (n_seq > (end - DS_DATA_HEADER_BYTES) / 8)    // every record takes at least 8 bytes
        return ds_fail(DS_ERR_FORMAT, "%s: %llu sequences cannot fit in %zu bytes (truncated or corrupted)", path,
                       (unsigned long long)n_seq, size);
    d->n = (size_t)n_seq;
    d->off = ds_malloc(sizeof(size_t) * (d->n ? d->n : 1));
    if (!d->off) return DS_ERR_NOMEM;
    // 1. The records must tile [header, trailer) exactly.
    size_t pos = DS_DATA_HEADER_BYTES;
    for (size_t i = 0; i < d->n; i++) {
        if (end - pos < 8 || (end - pos - 8) / 4 < rd32(p + pos))
            return ds_fail(DS_ERR_FORMAT, "%s: truncated: sequence %zu of %zu runs past the end of the file", path, i,
                           d->n);
        d->off[i] = pos;
        pos += 8 + 4 * (size_t)rd32(p + pos);
    }
    if (pos != end)
        return ds_fail(DS_ERR_FORMAT, "%s: %zu unexpected bytes after the last of %zu sequences (corrupted)", path,
                       end - pos, d->n);
    // 2. The checksum covers everything else.
    const uint64_t want = rd64(p + end), got = ds_fnv1a64(DS_FNV1A64_INIT, p, end);
    if (want != got)
        return ds_fail(DS_ERR_FORMAT, "%s: checksum mismatch (stored %016llx, computed %016llx): the file is corrupted",
                       path, (unsigned long long)want, (unsigned long long)got);
    // 3. The contents.
    d->total_tokens = 0;
    for (size_t i = 0; i < d->n; i++) {
        const uint8_t *r = p + d->off[i];
        const uint32_t nt = rd32(r), np = rd32(r + 4);
        if (nt == 0) return ds_fail(DS_ERR_FORMAT, "%s: sequence %zu is empty", path, i);
        if (np > nt) return ds_fail(DS_ERR_FORMAT, "%s: sequence %zu: n_prompt %u > n_tokens %u", path, i, np, nt);
        const uint32_t *ids = (const uint32_t *)(const void *)(r + 8);
        for (uint32_t k = 0; k < nt; k++)
            if (ids[k] >= d->vocab)
                return ds_fail(DS_ERR_FORMAT, "%s: sequence %zu, token %u: id %u is outside the vocabulary (size %llu)",
                               path, i, k, ids[k], (unsigned long long)d->vocab);
        d->total_tokens += nt;
    }
    return DS_OK;
}

ds_status ds_data_open(const char *path, ds_data **out) {
    *out = NULL;
    ds_data *d = ds_calloc(1, sizeof *d);
    if (!d) return DS_ERR_NOMEM;
    ds_status st = ds_mapfile_open(&d->mf, path);
    if (!st) st = validate(d, path);
    if (st) {
        ds_data_close(d);
        return st;
    }
    *out = d;
    return DS_OK;
}

ds_status ds_data_get(const ds_data *d, size_t i, const int32_t **tokens, int *n_tokens, int *n_prompt) {
    if (i >= d->n) return ds_fail(DS_ERR_INVALID, "%s: no sequence %zu (the file has %zu)", d->mf.path, i, d->n);
    const uint8_t *r = d->mf.data + d->off[i];
    *n_tokens = (int)rd32(r); // validated: n_tokens * 4 fits in the file, ids < 2^31
    *n_prompt = (int)rd32(r + 4);
    *tokens = (const int32_t *)(const void *)(r + 8);
    return DS_OK;
}

typedef struct {
    size_t count;
    int32_t id;
} token_count;

static int by_count(const void *a, const void *b) { // most frequent first; ties: the lower id
    const token_count *x = a, *y = b;
    if (x->count != y->count) return x->count > y->count ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

ds_status ds_data_top_tokens(const ds_data *d, int k, int32_t *ids, int *n_out, size_t *covered, size_t *total) {
    if (k < 1) return ds_fail(DS_ERR_INVALID, "%s: asked for %d most frequent tokens", d->mf.path, k);
    const size_t V = (size_t)d->vocab;
    token_count *c = malloc(sizeof *c * V);
    if (!c) return ds_fail(DS_ERR_NOMEM, "out of memory counting tokens");
    for (size_t v = 0; v < V; v++) c[v] = (token_count){0, (int32_t)v};
    *total = 0;
    for (size_t i = 0; i < d->n; i++) {
        const int32_t *t;
        int n, np;
        ds_data_get(d, i, &t, &n, &np);
        for (int j = np; j < n; j++) c[t[j]].count++; // ids < vocab: validated at open
        *total += (size_t)(n - np);
    }
    qsort(c, V, sizeof *c, by_count);
    const int m = (size_t)k < V ? k : (int)V;
    *covered = 0;
    for (int i = 0; i < m; i++) {
        ids[i] = c[i].id;
        *covered += c[i].count;
    }
    *n_out = m;
    free(c);
    return DS_OK;
}

// ---------------------------------------------------------------------------------------------
// Writing

struct ds_data_writer {
    ds_atomic_file af;
    uint64_t vocab;
    size_t n;
    int failed; // a write failed: only abort is possible
};

static ds_status write_failed(ds_data_writer *w) {
    w->failed = 1;
    return ds_fail(DS_ERR_IO, "%s: write failed: %s", w->af.name, strerror(errno));
}

static void put_header(uint8_t *h, uint64_t vocab, uint64_t n) {
    const uint32_t version = DS_DATA_VERSION, flags = 0;
    memcpy(h, DS_DATA_MAGIC, 8);
    memcpy(h + 8, &version, 4);
    memcpy(h + 12, &flags, 4);
    memcpy(h + 16, &vocab, 8);
    memcpy(h + 24, &n, 8);
}

ds_status ds_data_writer_open(const char *path, uint64_t vocab_size, int append, ds_data_writer **out) {
    *out = NULL;
    if (vocab_size == 0 || vocab_size > DS_DATA_MAX_VOCAB)
        return ds_fail(DS_ERR_INVALID, "%s: vocabulary size %llu outside 1..%u", path, (unsigned long long)vocab_size,
                       DS_DATA_MAX_VOCAB);
    ds_data *old = NULL;
    if (append) {
        FILE *probe = fopen(path, "rb");
        if (probe) {
            fclose(probe);
            ds_status st = ds_data_open(path, &old);
            if (st) return ds_fail_prefix(st, "cannot append");
            if (old->vocab != vocab_size) {
                st = ds_fail(DS_ERR_MISMATCH, "%s: cannot append: the file's vocabulary size is %llu, this model's %llu",
                             path, (unsigned long long)old->vocab, (unsigned long long)vocab_size);
                ds_data_close(old);
                return st;
            }
        } else if (errno != ENOENT) {
            return ds_fail(DS_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
        }
    }
    ds_data_writer *w = ds_calloc(1, sizeof *w);
    if (!w) {
        ds_data_close(old);
        return DS_ERR_NOMEM;
    }
    w->vocab = vocab_size;
    ds_status st = ds_atomic_open(&w->af, path);
    if (st) {
        ds_data_close(old);
        free(w);
        return st;
    }
    uint8_t h[DS_DATA_HEADER_BYTES];
    put_header(h, vocab_size, 0); // the count is written at commit
    if (fwrite(h, 1, sizeof h, w->af.f) != sizeof h) st = write_failed(w);
    if (!st && old) {
        const size_t nb = old->mf.size - DS_DATA_HEADER_BYTES - DS_DATA_TRAILER_BYTES;
        if (nb && fwrite(old->mf.data + DS_DATA_HEADER_BYTES, 1, nb, w->af.f) != nb) st = write_failed(w);
        w->n = old->n;
    }
    ds_data_close(old);
    if (st) {
        ds_data_writer_abort(w);
        return st;
    }
    *out = w;
    return DS_OK;
}

ds_status ds_data_writer_add(ds_data_writer *w, const int32_t *tokens, int n_tokens, int n_prompt) {
    if (w->failed) return ds_fail(DS_ERR_IO, "%s: an earlier write failed", w->af.name);
    if (n_tokens < 1) return ds_fail(DS_ERR_INVALID, "%s: a sequence needs at least one token", w->af.path);
    if (n_prompt < 0 || n_prompt > n_tokens)
        return ds_fail(DS_ERR_INVALID, "%s: n_prompt %d outside 0..%d", w->af.path, n_prompt, n_tokens);
    for (int i = 0; i < n_tokens; i++)
        if (tokens[i] < 0 || (uint64_t)tokens[i] >= w->vocab)
            return ds_fail(DS_ERR_INVALID, "%s: token %d: id %d outside the vocabulary (size %llu)", w->af.path, i,
                           tokens[i], (unsigned long long)w->vocab);
    const uint32_t rec[2] = {(uint32_t)n_tokens, (uint32_t)n_prompt};
    if (fwrite(rec, 4, 2, w->af.f) != 2 || fwrite(tokens, 4, (size_t)n_tokens, w->af.f) != (size_t)n_tokens)
        return write_failed(w);
    w->n++;
    return DS_OK;
}

size_t ds_data_writer_count(const ds_data_writer *w) { return w->n; }

void ds_data_writer_abort(ds_data_writer *w) {
    if (!w) return;
    ds_atomic_abort(&w->af);
    free(w);
}

ds_status ds_data_writer_commit(ds_data_writer *w) {
    if (w->failed) {
        ds_status st = ds_fail(DS_ERR_IO, "%s: not committed: an earlier write failed", w->af.path);
        ds_data_writer_abort(w);
        return st;
    }
    // Final header, then the checksum of everything, read back from the temporary file.
    uint8_t h[DS_DATA_HEADER_BYTES];
    put_header(h, w->vocab, w->n);
    ds_status st = DS_OK;
    if (fflush(w->af.f) != 0 || fseek(w->af.f, 0, SEEK_SET) != 0 || fwrite(h, 1, sizeof h, w->af.f) != sizeof h ||
        fflush(w->af.f) != 0)
        st = write_failed(w);
    uint64_t sum = DS_FNV1A64_INIT;
    if (!st) {
        FILE *r = fopen(w->af.tmp_path, "rb");
        if (!r) {
            st = ds_fail(DS_ERR_IO, "%s: cannot read back: %s", w->af.tmp_path, strerror(errno));
        } else {
            const size_t cap = 1 << 20;
            uint8_t *buf = ds_malloc(cap);
            size_t got;
            if (!buf) st = DS_ERR_NOMEM;
            while (buf && (got = fread(buf, 1, cap, r)) > 0) sum = ds_fnv1a64(sum, buf, got);
            if (!st && ferror(r)) st = ds_fail(DS_ERR_IO, "%s: read back failed", w->af.tmp_path);
            free(buf);
            fclose(r);
        }
    }
    if (!st && (fseek(w->af.f, 0, SEEK_END) != 0 || fwrite(&sum, 8, 1, w->af.f) != 1)) st = write_failed(w);
    if (st) {
        ds_data_writer_abort(w);
        return st;
    }
    st = ds_atomic_commit(&w->af);
    free(w);
    return st;
}

// ---------------------------------------------------------------------------------------------
// Held-out split

static uint64_t mix64(uint64_t z) { // splitmix64's finalizer
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

int ds_data_is_holdout(uint64_t index, uint64_t seed, double fraction) {
    if (!(fraction > 0)) return 0;
    if (fraction >= 1) return 1;
    const uint64_t h = mix64(mix64(seed + 0x9e3779b97f4a7c15ull) ^ (index * 0xd1b54a32d192ed03ull + 1));
    return (double)(h >> 11) * 0x1.0p-53 < fraction;
}
