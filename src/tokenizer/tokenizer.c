// The tokenizer object both kinds share (tok_internal.h): vocabulary look-up and its index,
// per-token bytes, the accessors, free; and its construction from SentencePiece arrays (GGUF,
// ds_tokenizer_init_spm; tokenizer.json files are read by hf_load.c). Encoding: encode.c (the
// public entry points), spm.c and hf_encode.c; streaming decoding: detok.c.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "tokenizer/tok_internal.h"
#include "tokenizer/tokenizer.h"

static uint64_t hash_bytes(const char *s, size_t n) {
    uint64_t h = 0xcbf29ce484222325ull; // FNV-1a, then a murmur3 finalizer to spread the low bits
    for (size_t i = 0; i < n; i++) {
        h ^= (uint8_t)s[i];
        h *= 0x100000001b3ull;
    }
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
    h *= 0xc4ceb9fe1a85ec53ull;
    h ^= h >> 33;
    return h;
}

static const char *piece_ptr(const ds_tokenizer *t, int32_t id, size_t *n) {
    *n = t->off[id + 1] - t->off[id];
    return t->pool + t->off[id];
}

int32_t ds_tok_lookup(const ds_tokenizer *t, const char *s, size_t n) {
    if (n == 0 || n > t->max_piece_len) return -1;
    uint64_t h = hash_bytes(s, n);
    for (size_t i = (size_t)h & t->mask;; i = (i + 1) & t->mask) {
        int32_t id = t->slots[i];
        if (id < 0) return -1;
        if (t->slot_hash[i] != (uint32_t)h) continue;
        size_t pn;
        const char *p = piece_ptr(t, id, &pn);
        if (pn == n && memcmp(p, s, n) == 0) return id;
    }
}

const char *ds_tok_decoded(const ds_tokenizer *t, int32_t id, size_t *n) {
    if (!t || id < 0 || id >= t->n_vocab) {
        *n = 0;
        return "";
    }
    *n = t->dec_off[id + 1] - t->dec_off[id];
    return t->dec + t->dec_off[id];
}

// "<0xHH>" (either case of hex digit) -> HH, else -1.
static int parse_byte_piece(const char *s, size_t n) {
    if (n != 6 || s[0] != '<' || s[1] != '0' || s[2] != 'x' || s[5] != '>') return -1;
    int v = 0;
    for (int k = 3; k < 5; k++) {
        char c = s[k];
        int d = c >= '0' && c <= '9' ? c - '0'
              : c >= 'A' && c <= 'F' ? c - 'A' + 10
              : c >= 'a' && c <= 'f' ? c - 'a' + 10
                                     : -1;
        if (d < 0) return -1;
        v = v * 16 + d;
    }
    return v;
}

// A piece quoted for an error message: printable ASCII as is, anything else as \xHH, at most ~40
// input bytes.
static const char *quote(const char *s, size_t n, char *buf, size_t cap) {
    size_t o = 0;
    for (size_t i = 0; i < n && o + 8 < cap; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c >= 0x20 && c < 0x7f && c != '"' && c != '\\') buf[o++] = (char)c;
        else o += (size_t)snprintf(buf + o, cap - o, "\\x%02X", c);
        if (i == 39 && n > 40) {
            o += (size_t)snprintf(buf + o, cap - o, "...");
            break;
        }
    }
    buf[o] = '\0';
    return buf;
}

static int is_underline(const char *s, size_t left) {
    return left >= 3 && (uint8_t)s[0] == 0xE2 && (uint8_t)s[1] == 0x96 && (uint8_t)s[2] == 0x81;
}

// The bytes a token decodes to, as llama.cpp's token_to_piece(special = false) renders them:
// NORMAL: the piece with U+2581 -> ' '; USER_DEFINED: the piece verbatim; BYTE: its byte;
// CONTROL, UNKNOWN, UNUSED, undefined: nothing. Writes to `out` when not NULL; returns the length.
static size_t decode_piece(const char *p, size_t n, int type, char *out) {
    switch (type) {
    case DS_TOKTYPE_NORMAL: {
        size_t o = 0;
        for (size_t i = 0; i < n;) {
            if (is_underline(p + i, n - i)) {
                if (out) out[o] = ' ';
                o++;
                i += 3;
            } else {
                if (out) out[o] = p[i];
                o++;
                i++;
            }
        }
        return o;
    }
    case DS_TOKTYPE_USER_DEFINED:
        if (out) memcpy(out, p, n);
        return n;
    case DS_TOKTYPE_BYTE:
        if (out) out[0] = (char)parse_byte_piece(p, n);
        return 1;
    default: return 0;
    }
}

ds_status ds_tok_build_index(ds_tokenizer *t) {
    char q[256];
    size_t cap = 16;
    while (cap < 2 * (size_t)t->n_vocab) cap *= 2;
    t->mask = cap - 1;
    t->slots = ds_malloc(cap * sizeof *t->slots);
    t->slot_hash = ds_malloc(cap * sizeof *t->slot_hash);
    if (!t->slots || !t->slot_hash) return ds_fail(DS_ERR_NOMEM, "tokenizer: out of memory");
    memset(t->slots, 0xff, cap * sizeof *t->slots);
    for (int i = 0; i < t->n_vocab; i++) {
        size_t n;
        const char *p = piece_ptr(t, i, &n);
        if (n == 0) continue;
        uint64_t h = hash_bytes(p, n);
        size_t s = (size_t)h & t->mask;
        for (; t->slots[s] >= 0; s = (s + 1) & t->mask) {
            size_t on;
            const char *op = piece_ptr(t, t->slots[s], &on);
            if (t->slot_hash[s] == (uint32_t)h && on == n && memcmp(op, p, n) == 0)
                return ds_fail(DS_ERR_INVALID, "tokenizer: pieces %d and %d are both \"%s\"", t->slots[s], i,
                               quote(p, n, q, sizeof q));
        }
        t->slots[s] = i;
        t->slot_hash[s] = (uint32_t)h;
    }
    return DS_OK;
}

typedef struct {
    size_t len;
    int32_t id;
} len_id;

// Longest first; equal lengths by id (llama.cpp's std::sort leaves their order unspecified; it
// matters only for overlapping user-defined pieces of one length).
static int cmp_len_id(const void *a, const void *b) {
    const len_id *x = a, *y = b;
    if (x->len != y->len) return x->len > y->len ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

void ds_tokenizer_free(ds_tokenizer *t) {
    if (!t) return;
    free(t->pool);
    free(t->off);
    free(t->scores);
    free(t->types);
    free(t->dec);
    free(t->dec_off);
    free(t->slots);
    free(t->slot_hash);
    free(t->user_defined);
    ds_chat_template_free(t->tmpl);
    ds_chat_template_free(t->tmpl_tools);
    ds_hf_free(t->hf);
    free(t);
}

// Piece texts into one pool (off[i]..off[i+1]); a NULL piece is only allowed empty.
static ds_status spm_copy_pieces(ds_tokenizer *t, const char *const *pieces, const size_t *piece_lens) {
    size_t total = 0;
    t->off[0] = 0;
    for (int i = 0; i < t->n_vocab; i++) {
        size_t n = piece_lens ? piece_lens[i] : (pieces[i] ? strlen(pieces[i]) : 0);
        if (!pieces[i] && n > 0) return ds_fail(DS_ERR_INVALID, "tokenizer: piece %d is NULL", i);
        if (!ds_add_ok(total, n, &total)) return ds_fail(DS_ERR_INVALID, "tokenizer: pieces too large");
        t->off[i + 1] = total;
        if (n > t->max_piece_len) t->max_piece_len = n;
    }
    t->pool = ds_malloc(total);
    if (!t->pool) return ds_fail(DS_ERR_NOMEM, "tokenizer: out of memory");
    for (int i = 0; i < t->n_vocab; i++)
        if (t->off[i + 1] > t->off[i]) memcpy(t->pool + t->off[i], pieces[i], t->off[i + 1] - t->off[i]);
    return DS_OK;
}

// Scores (no NaN) and token types: the given ones checked, else derived from the special ids and the
// "<0xHH>" spelling of byte pieces.
static ds_status spm_set_types(ds_tokenizer *t, const float *scores, const int32_t *types) {
    char q[256];
    for (int i = 0; i < t->n_vocab; i++) {
        size_t n;
        const char *p = piece_ptr(t, i, &n);
        t->scores[i] = scores ? scores[i] : 0.0f;
        if (isnan(t->scores[i])) return ds_fail(DS_ERR_INVALID, "tokenizer: piece %d has a NaN score", i);
        int ty;
        if (types) {
            ty = types[i];
            if (ty < 0 || ty > DS_TOKTYPE_BYTE)
                return ds_fail(DS_ERR_INVALID, "tokenizer: piece %d (\"%s\") has unknown token type %d", i,
                               quote(p, n, q, sizeof q), ty);
            if (ty == DS_TOKTYPE_BYTE && parse_byte_piece(p, n) < 0)
                return ds_fail(DS_ERR_INVALID, "tokenizer: byte piece %d is \"%s\", not <0xHH>", i,
                               quote(p, n, q, sizeof q));
        } else if (i == t->unk) {
            ty = DS_TOKTYPE_UNKNOWN;
        } else if (i == t->bos || i == t->eos) {
            ty = DS_TOKTYPE_CONTROL;
        } else {
            ty = parse_byte_piece(p, n) >= 0 ? DS_TOKTYPE_BYTE : DS_TOKTYPE_NORMAL;
        }
        t->types[i] = (uint8_t)ty;
        if (ty == DS_TOKTYPE_USER_DEFINED && n > 0) t->n_user_defined++;
    }
    return DS_OK;
}

// Decoded bytes of every token (dec_off[i]..dec_off[i+1] in dec).
static ds_status spm_decode_pieces(ds_tokenizer *t) {
    size_t dtotal = 0;
    t->dec_off[0] = 0;
    for (int i = 0; i < t->n_vocab; i++) {
        size_t n;
        const char *p = piece_ptr(t, i, &n);
        dtotal += decode_piece(p, n, t->types[i], NULL); // never more than the piece itself
        t->dec_off[i + 1] = dtotal;
    }
    t->dec = ds_malloc(dtotal);
    if (!t->dec) return ds_fail(DS_ERR_NOMEM, "tokenizer: out of memory");
    for (int i = 0; i < t->n_vocab; i++) {
        size_t n;
        const char *p = piece_ptr(t, i, &n);
        decode_piece(p, n, t->types[i], t->dec + t->dec_off[i]);
    }
    return DS_OK;
}

// Byte fallback, as llama.cpp's byte_to_token: the piece "<0xHH>" (upper-case hex), else the
// one-byte piece itself; where llama.cpp would throw we use unk.
static void spm_map_bytes(ds_tokenizer *t) {
    for (int b = 0; b < 256; b++) {
        char name[7];
        snprintf(name, sizeof name, "<0x%02X>", b);
        int32_t id = ds_tok_lookup(t, name, 6);
        if (id < 0) {
            char c = (char)b;
            id = ds_tok_lookup(t, &c, 1);
        }
        t->byte_tok[b] = id >= 0 ? id : t->unk;
    }
}

// The non-empty user-defined pieces, longest first (cmp_len_id), matched before the model splits.
static ds_status spm_order_user_defined(ds_tokenizer *t) {
    if (t->n_user_defined <= 0) return DS_OK;
    len_id *tmp = ds_malloc((size_t)t->n_user_defined * sizeof *tmp);
    t->user_defined = ds_malloc((size_t)t->n_user_defined * sizeof *t->user_defined);
    if (!tmp || !t->user_defined) {
        free(tmp);
        return ds_fail(DS_ERR_NOMEM, "tokenizer: out of memory");
    }
    int k = 0;
    for (int i = 0; i < t->n_vocab; i++) {
        size_t n = t->off[i + 1] - t->off[i];
        if (t->types[i] == DS_TOKTYPE_USER_DEFINED && n > 0) tmp[k++] = (len_id){n, i};
    }
    qsort(tmp, (size_t)k, sizeof *tmp, cmp_len_id);
    for (int i = 0; i < k; i++) t->user_defined[i] = tmp[i].id;
    free(tmp);
    return DS_OK;
}

ds_status ds_tokenizer_init_spm(int n_vocab, const char *const *pieces, const size_t *piece_lens,
                                const float *scores, const int32_t *types, int bos, int eos, int unk,
                                int add_space_prefix, ds_tokenizer **out) {
    if (!out) return ds_fail(DS_ERR_INVALID, "tokenizer: NULL output pointer");
    *out = NULL;
    if (n_vocab <= 0 || !pieces)
        return ds_fail(DS_ERR_INVALID, "tokenizer: empty vocabulary (%d pieces)", n_vocab);
    if (bos < -1 || bos >= n_vocab || eos < -1 || eos >= n_vocab || unk < -1 || unk >= n_vocab)
        return ds_fail(DS_ERR_INVALID, "tokenizer: special id out of range (bos %d, eos %d, unk %d, %d pieces)",
                       bos, eos, unk, n_vocab);

    ds_tokenizer *t = ds_calloc(1, sizeof *t);
    if (!t) return DS_ERR_NOMEM;
    t->n_vocab = n_vocab;
    t->bos = bos;
    t->eos = eos;
    t->unk = unk;
    t->add_space_prefix = add_space_prefix != 0;
    t->off = ds_malloc(((size_t)n_vocab + 1) * sizeof *t->off);
    t->dec_off = ds_malloc(((size_t)n_vocab + 1) * sizeof *t->dec_off);
    t->scores = ds_malloc((size_t)n_vocab * sizeof *t->scores);
    t->types = ds_malloc((size_t)n_vocab);
    ds_status st;
    if (!t->off || !t->dec_off || !t->scores || !t->types) st = ds_fail(DS_ERR_NOMEM, "tokenizer: out of memory");
    // The text -> id map holds every non-empty piece (llama.cpp's token_to_id holds every token, whatever
    // its type; an empty piece can never match a non-empty symbol, so it is left out).
    else if (!(st = spm_copy_pieces(t, pieces, piece_lens)) && !(st = spm_set_types(t, scores, types)) &&
             !(st = ds_tok_build_index(t)) && !(st = spm_decode_pieces(t))) {
        spm_map_bytes(t);
        st = spm_order_user_defined(t);
    }
    if (st) {
        ds_tokenizer_free(t);
        return st;
    }
    *out = t;
    return DS_OK;
}

int ds_tokenizer_vocab_size(const ds_tokenizer *t) { return t ? t->n_vocab : 0; }
int ds_tokenizer_bos(const ds_tokenizer *t) { return t ? t->bos : -1; }
int ds_tokenizer_eos(const ds_tokenizer *t) { return t ? t->eos : -1; }
int ds_tokenizer_unk(const ds_tokenizer *t) { return t ? t->unk : -1; }

int ds_token_bytes(const ds_tokenizer *t, int32_t id, char *buf, int cap) {
    size_t n;
    const char *p = ds_tok_decoded(t, id, &n);
    if (buf && cap > 0) memcpy(buf, p, n < (size_t)cap ? n : (size_t)cap);
    return n > (size_t)0x7fffffff ? 0x7fffffff : (int)n;
}
