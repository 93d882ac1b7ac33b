// Training data files (layout in data.h), the held-out split and prompt files.
#include "train/data.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "io/atomic.h"
#include "io/mapfile.h"
#include "tokenizer/utf8.h"

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

// ---------------------------------------------------------------------------------------------
// Prompt files

void ds_prompts_free(ds_prompt_set *p) {
    if (!p) return;
    for (int i = 0; i < p->n; i++) free(p->text[i]);
    free(p->text);
    free(p->line);
    free(p->chat);
    free(p->path);
    free(p);
}

static ds_status prompts_push(ds_prompt_set *p, int *cap, char *text, int line) {
    if (!text) return ds_fail(DS_ERR_NOMEM, "out of memory reading %s", p->path);
    if (p->n == *cap) {
        if (*cap > INT_MAX / 2) {
            free(text);
            return ds_fail(DS_ERR_INVALID, "%s: too many prompts", p->path);
        }
        const int nc = *cap ? 2 * *cap : 64;
        char **nt = realloc(p->text, sizeof *nt * (size_t)nc);
        if (nt) p->text = nt;
        int *nl = nt ? realloc(p->line, sizeof *nl * (size_t)nc) : NULL;
        if (nl) p->line = nl;
        unsigned char *nch = nl ? realloc(p->chat, (size_t)nc) : NULL;
        if (nch) p->chat = nch;
        if (!nt || !nl || !nch) {
            free(text);
            return ds_fail(DS_ERR_NOMEM, "out of memory reading %s", p->path);
        }
        *cap = nc;
    }
    p->text[p->n] = text;
    p->chat[p->n] = 0;
    p->line[p->n++] = line;
    return DS_OK;
}

static char *dup_n(const char *s, size_t n) {
    char *t = malloc(n + 1);
    if (t) {
        memcpy(t, s, n);
        t[n] = 0;
    }
    return t;
}

// A string field that must be valid UTF-8 (NULL when absent or not a string).
static const char *utf8_field(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsString(v) && v->valuestring ? v->valuestring : NULL;
}

// A conversation line (j has "messages", "conversations" or "instruction") as the normalized turns
// (a JSON array of {"role", "content"}, trailing assistant turns dropped) in *out.
static ds_status chat_turns(const cJSON *j, const char *path, int line, char **out) {
    *out = NULL;
    cJSON *turns = cJSON_CreateArray();
    if (!turns) return ds_fail(DS_ERR_NOMEM, "out of memory");
    const cJSON *msgs = cJSON_GetObjectItemCaseSensitive(j, "messages");
    const char *field = "messages", *rk = "role", *ck = "content";
    if (!msgs) {
        msgs = cJSON_GetObjectItemCaseSensitive(j, "conversations");
        field = "conversations", rk = "from", ck = "value";
    }
    ds_status st = DS_OK;
    size_t bad;
    if (msgs) {
        if (!cJSON_IsArray(msgs) || cJSON_GetArraySize(msgs) == 0)
            st = ds_fail(DS_ERR_FORMAT, "%s:%d: \"%s\" must be a non-empty array of turns", path, line, field);
        int k = 0;
        for (const cJSON *m = msgs->child; m && !st; m = m->next, k++) {
            const char *role = cJSON_IsObject(m) ? utf8_field(m, rk) : NULL, *content = cJSON_IsObject(m) ? utf8_field(m, ck) : NULL;
            const char *r = !role ? NULL
                            : !strcmp(role, "system")                                   ? "system"
                            : !strcmp(role, "user") || !strcmp(role, "human")          ? "user"
                            : !strcmp(role, "assistant") || !strcmp(role, "gpt")       ? "assistant"
                                                                                        : NULL;
            if (!cJSON_IsObject(m)) st = ds_fail(DS_ERR_FORMAT, "%s:%d: %s[%d] is not an object", path, line, field, k);
            else if (!role)
                st = ds_fail(DS_ERR_FORMAT, "%s:%d: %s[%d] has no \"%s\" string", path, line, field, k, rk);
            else if (!r)
                st = ds_fail(DS_ERR_FORMAT, "%s:%d: %s[%d]: \"%s\" is '%.40s'; expected system, user or assistant%s", path,
                             line, field, k, rk, role, rk[0] == 'f' ? " (or human, gpt)" : "");
            else if (!content)
                st = ds_fail(DS_ERR_FORMAT, "%s:%d: %s[%d] has no \"%s\" string (content parts arrays are not read)", path,
                             line, field, k, ck);
            else if (!ds_utf8_valid((const uint8_t *)content, strlen(content), &bad))
                st = ds_fail(DS_ERR_FORMAT, "%s:%d: %s[%d]: the \"%s\" string is not valid UTF-8", path, line, field, k, ck);
            else {
                cJSON *t = cJSON_CreateObject();
                cJSON_AddStringToObject(t, "role", r);
                cJSON_AddStringToObject(t, "content", content);
                cJSON_AddItemToArray(turns, t);
            }
        }
    } else {
        const char *ins = utf8_field(j, "instruction"), *in = utf8_field(j, "input");
        if (!ins) st = ds_fail(DS_ERR_FORMAT, "%s:%d: \"instruction\" must be a string", path, line);
        else if (cJSON_GetObjectItemCaseSensitive(j, "input") && !in)
            st = ds_fail(DS_ERR_FORMAT, "%s:%d: \"input\" must be a string", path, line);
        else if (!ds_utf8_valid((const uint8_t *)ins, strlen(ins), &bad) ||
                 (in && !ds_utf8_valid((const uint8_t *)in, strlen(in), &bad)))
            st = ds_fail(DS_ERR_FORMAT, "%s:%d: the instruction is not valid UTF-8", path, line);
        else {
            const size_t len = strlen(ins) + (in ? strlen(in) : 0) + 3;
            char *u = malloc(len);
            if (!u) st = ds_fail(DS_ERR_NOMEM, "out of memory");
            else {
                snprintf(u, len, in && *in ? "%s\n\n%s" : "%s", ins, in ? in : "");
                cJSON *t = cJSON_CreateObject();
                cJSON_AddStringToObject(t, "role", "user");
                cJSON_AddStringToObject(t, "content", u);
                cJSON_AddItemToArray(turns, t);
                free(u);
            }
        }
    }
    // The reference answer(s) at the end go: the target writes its own.
    int n = cJSON_GetArraySize(turns);
    while (!st && n > 0 && !strcmp(cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(turns, n - 1), "role")->valuestring, "assistant"))
        cJSON_DeleteItemFromArray(turns, --n);
    if (!st && (n == 0 || strcmp(cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(turns, n - 1), "role")->valuestring, "user")))
        st = ds_fail(DS_ERR_FORMAT, "%s:%d: the conversation has no user turn for the target to answer", path, line);
    if (!st && !(*out = cJSON_PrintUnformatted(turns))) st = ds_fail(DS_ERR_NOMEM, "out of memory");
    cJSON_Delete(turns);
    return st;
}

ds_status ds_prompt_text(const ds_prompt_set *p, int i, const ds_tokenizer *t, char **out) {
    *out = NULL;
    if (!p->chat[i]) {
        *out = strdup(p->text[i]);
        return *out ? DS_OK : ds_fail(DS_ERR_NOMEM, "out of memory");
    }
    cJSON *turns = cJSON_Parse(p->text[i]);
    const int n = cJSON_GetArraySize(turns);
    ds_chat_message *m = calloc((size_t)(n > 0 ? n : 1), sizeof *m);
    if (!turns || !m) {
        cJSON_Delete(turns);
        free(m);
        return ds_fail(DS_ERR_NOMEM, "out of memory");
    }
    int k = 0;
    for (const cJSON *e = turns->child; e; e = e->next, k++) {
        m[k].role = cJSON_GetObjectItemCaseSensitive(e, "role")->valuestring;
        m[k].content = cJSON_GetObjectItemCaseSensitive(e, "content")->valuestring;
    }
    ds_status st = ds_chat_render(t, m, n, 1, out);
    free(m);
    cJSON_Delete(turns);
    return st ? ds_fail_prefix(st, "%s:%d", p->path, p->line[i]) : DS_OK;
}

// One line s[0..n) (no newline, no trailing \r): appends a prompt, skips blanks, or fails.
static ds_status prompts_line(ds_prompt_set *p, int *cap, const char *s, size_t n, int line, int allow_chat) {
    const char *path = p->path;
    size_t b = 0;
    while (b < n && (s[b] == ' ' || s[b] == '\t')) b++;
    if (b == n) return DS_OK; // blank
    if (memchr(s, 0, n)) return ds_fail(DS_ERR_FORMAT, "%s:%d: contains a NUL byte", path, line);
    size_t bad;
    if (!ds_utf8_valid((const uint8_t *)s, n, &bad))
        return ds_fail(DS_ERR_FORMAT, "%s:%d: invalid UTF-8 at column %zu", path, line, bad + 1);
    if (s[b] != '{') return prompts_push(p, cap, dup_n(s, n), line);
    const char *end = NULL;
    cJSON *j = cJSON_ParseWithLengthOpts(s + b, n - b, &end, 0);
    if (j && end) {
        size_t rest = (size_t)(end - s);
        while (rest < n && (s[rest] == ' ' || s[rest] == '\t')) rest++;
        if (rest != n) {
            cJSON_Delete(j);
            return ds_fail(DS_ERR_FORMAT, "%s:%d: unexpected text after the JSON object", path, line);
        }
    }
    if (!j || !cJSON_IsObject(j)) {
        cJSON_Delete(j);
        return ds_fail(DS_ERR_FORMAT, "%s:%d: a line starting with '{' must be a JSON object (bad JSON)", path, line);
    }
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, "prompt");
    const int conv = !v && (cJSON_GetObjectItemCaseSensitive(j, "messages") ||
                            cJSON_GetObjectItemCaseSensitive(j, "conversations") ||
                            cJSON_GetObjectItemCaseSensitive(j, "instruction"));
    if (conv && !allow_chat) {
        cJSON_Delete(j);
        return ds_fail(DS_ERR_FORMAT,
                       "%s:%d: a chat conversation: only datagen and train --eval-prompts render them; give a "
                       "\"prompt\" string here",
                       path, line);
    }
    if (conv) {
        char *turns;
        ds_status st = chat_turns(j, path, line, &turns);
        cJSON_Delete(j);
        if (!st && !(st = prompts_push(p, cap, turns, line))) p->chat[p->n - 1] = 1;
        return st;
    }
    if (!cJSON_IsString(v) || !v->valuestring) {
        cJSON_Delete(j);
        return ds_fail(DS_ERR_FORMAT,
                       "%s:%d: the JSON object has no \"prompt\" string%s", path, line,
                       allow_chat ? " (nor \"messages\", \"conversations\" or \"instruction\")" : "");
    }
    const size_t len = strlen(v->valuestring);
    if (!ds_utf8_valid((const uint8_t *)v->valuestring, len, &bad)) {
        cJSON_Delete(j);
        return ds_fail(DS_ERR_FORMAT, "%s:%d: the \"prompt\" string is not valid UTF-8 (a lone surrogate escape?)", path,
                       line);
    }
    ds_status st = prompts_push(p, cap, dup_n(v->valuestring, len), line);
    cJSON_Delete(j);
    return st;
}

static ds_status prompts_load(const char *path, int allow_chat, ds_prompt_set **out) {
    *out = NULL;
    ds_prompt_set *p = ds_calloc(1, sizeof *p);
    if (!p) return DS_ERR_NOMEM;
    p->path = strdup(path);
    ds_mapfile mf;
    ds_status st = p->path ? ds_mapfile_open(&mf, path) : ds_fail(DS_ERR_NOMEM, "out of memory");
    if (st) {
        ds_prompts_free(p);
        return st;
    }
    const char *s = (const char *)mf.data;
    int cap = 0, line = 0;
    for (size_t pos = 0; pos < mf.size && !st;) {
        if (line == INT_MAX) {
            st = ds_fail(DS_ERR_INVALID, "%s: too many lines", path);
            break;
        }
        line++;
        const char *nl = memchr(s + pos, '\n', mf.size - pos);
        size_t e = nl ? (size_t)(nl - s) : mf.size, len = e - pos;
        if (len && s[pos + len - 1] == '\r') len--;
        st = prompts_line(p, &cap, s + pos, len, line, allow_chat);
        pos = e + 1;
    }
    ds_mapfile_close(&mf);
    if (!st && p->n == 0) st = ds_fail(DS_ERR_FORMAT, "%s: no prompts (every line is blank)", path);
    if (st) {
        ds_prompts_free(p);
        return st;
    }
    *out = p;
    return DS_OK;
}

ds_status ds_prompts_load(const char *path, ds_prompt_set **out) { return prompts_load(path, 0, out); }

ds_status ds_prompts_load_chat(const char *path, ds_prompt_set **out) { return prompts_load(path, 1, out); }
