// Encoding with a tokenizer.json BPE tokenizer, as Hugging Face tokenizers does it:
//
//  1. Added tokens are split out of the raw text first, leftmost-longest (special ones only when
//     DS_TOK_PARSE_SPECIAL is set; non-special ones always, as HF does).
//  2. Each remaining segment is normalized (NFC; a literal Replace such as Gemma's " " -> "▁").
//  3. Pre-tokenized into words by the split stages (PCRE2 regexes with UTF + UCP, compiled once
//     at load, JIT when available), each applied to every piece of the previous stage.
//  4. Each word becomes symbols: byte-level: one per byte (its GPT-2 character's id); otherwise one
//     per character, or byte-fallback "<0xHH>" ids (else unk, fused when fuse_unk) for characters
//     missing from the vocabulary. With ignore_merges a word that is itself a piece is one token;
//     with newline_runs (GGUF gemma4) so is a word made only of newlines.
//  5. Merges: every adjacent pair with a merge rule goes into a min-heap keyed by (rank, position);
//     the best is popped, skipped when stale (either side changed since it was queued), applied
//     (a doubly linked list), and the pairs with both new neighbours are queued: O(n log n) per
//     word, every look-up through a hash map (pair -> rank, merged id).
//  6. The post-processor's special tokens are added when DS_TOK_ADD_SPECIAL is set.
// Work buffers live in one session per call and grow geometrically; nothing is allocated per
// token.
#define _GNU_SOURCE // memmem
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "tokenizer/hf_internal.h"
#include "tokenizer/nfc.h"
#include "tokenizer/utf8.h"

typedef struct {
    int32_t rank, pos, new_id;
} merge_ent;

typedef struct {
    size_t off, len;
} range;

typedef struct {
    const ds_tokenizer *t;
    const ds_hf *h;
    int32_t *out;
    size_t cap, count;
    char *nbuf, *nbuf2, *mbuf; // normalized segment (two for chained normalizers), mapped word
    size_t ncap, ncap2, mcap;
    range *r1, *r2;            // word ranges (current and next stage)
    size_t r1n, r1cap, r2n, r2cap;
    int32_t *sid, *prev, *next; // symbols of the word being merged
    size_t scap;
    merge_ent *heap;
    size_t hn, hcap;
    pcre2_match_data *md;
} session;

static int grow(void **p, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap) return 1;
    size_t nc = *cap ? *cap : 64;
    while (nc < need) nc *= 2;
    void *np = realloc(*p, nc * elem);
    if (!np) return 0;
    *p = np;
    *cap = nc;
    return 1;
}

static void emit(session *s, int32_t id) {
    if (s->count < s->cap) s->out[s->count] = id;
    s->count++;
}

static int32_t merge_find(const ds_hf *h, int32_t a, int32_t b, int32_t *new_id) {
    uint64_t key = (uint64_t)(uint32_t)a << 32 | (uint32_t)b;
    uint64_t x = key;
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    x ^= x >> 33;
    for (size_t i = (size_t)x & h->mmask;; i = (i + 1) & h->mmask) {
        if (h->mkey[i] == UINT64_MAX) return -1;
        if (h->mkey[i] == key) {
            *new_id = h->mnew[i];
            return h->mrank[i];
        }
    }
}

static int before(const merge_ent *x, const merge_ent *y) {
    return x->rank < y->rank || (x->rank == y->rank && x->pos < y->pos);
}

static int heap_push(session *s, merge_ent e) {
    if (!grow((void **)&s->heap, &s->hcap, s->hn + 1, sizeof *s->heap)) return 0;
    size_t i = s->hn++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!before(&e, &s->heap[p])) break;
        s->heap[i] = s->heap[p];
        i = p;
    }
    s->heap[i] = e;
    return 1;
}

static merge_ent heap_pop(session *s) {
    merge_ent top = s->heap[0], last = s->heap[--s->hn];
    size_t n = s->hn, i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && before(&s->heap[c + 1], &s->heap[c])) c++;
        if (!before(&s->heap[c], &last)) break;
        s->heap[i] = s->heap[c];
        i = c;
    }
    if (n > 0) s->heap[i] = last;
    return top;
}

static int queue_pair(session *s, int32_t l) {
    if (l < 0 || s->next[l] < 0) return 1;
    int32_t nid;
    int32_t rank = merge_find(s->h, s->sid[l], s->sid[s->next[l]], &nid);
    if (rank < 0) return 1;
    return heap_push(s, (merge_ent){rank, l, nid});
}

// BPE over one pre-tokenized word w[0..n).
static ds_status encode_word(session *s, const char *w, size_t n) {
    const ds_hf *h = s->h;
    const ds_tokenizer *t = s->t;
    if (h->newline_runs && n > 0 && n <= t->max_piece_len) {
        size_t k = 0;
        while (k < n && w[k] == '\n') k++;
        int32_t id = k == n ? ds_tok_lookup(t, w, n) : -1;
        if (id >= 0) {
            emit(s, id);
            return DS_OK;
        }
    }
    if (h->ignore_merges) {
        int32_t id;
        if (h->byte_level) {
            if (!grow((void **)&s->mbuf, &s->mcap, 2 * n, 1)) return ds_fail(DS_ERR_NOMEM, "tokenize: out of memory");
            size_t m = 0;
            for (size_t i = 0; i < n; i++) { // every byte's character is 1 or 2 bytes of UTF-8
                uint8_t c = (uint8_t)w[i];
                if (h->byte_sym[c] < 0) {
                    m = 0;
                    break;
                }
                size_t pl = t->off[h->byte_sym[c] + 1] - t->off[h->byte_sym[c]];
                memcpy(s->mbuf + m, t->pool + t->off[h->byte_sym[c]], pl);
                m += pl;
            }
            id = m ? ds_tok_lookup(t, s->mbuf, m) : -1;
        } else {
            id = ds_tok_lookup(t, w, n);
        }
        if (id >= 0) {
            emit(s, id);
            return DS_OK;
        }
    }
    if (n > s->scap) {
        size_t c = s->scap, c2 = s->scap, c3 = s->scap;
        if (!grow((void **)&s->sid, &c, n, sizeof *s->sid) || !grow((void **)&s->prev, &c2, n, sizeof *s->prev) ||
            !grow((void **)&s->next, &c3, n, sizeof *s->next))
            return ds_fail(DS_ERR_NOMEM, "tokenize: out of memory");
        s->scap = c;
    }
    int32_t ns = 0;
    for (size_t i = 0; i < n;) {
        if (h->byte_level) {
            int32_t id = h->byte_sym[(uint8_t)w[i++]];
            if (id < 0) id = t->unk;
            if (id < 0 || (h->fuse_unk && id == t->unk && ns > 0 && s->sid[ns - 1] == t->unk)) continue;
            s->sid[ns++] = id;
            continue;
        }
        size_t l = (size_t)ds_utf8_seq_len((uint8_t)w[i]);
        if (l == 0 || l > n - i) l = 1;
        int32_t id = ds_tok_lookup(t, w + i, l);
        if (id >= 0) {
            s->sid[ns++] = id;
        } else {
            int all = h->byte_fallback;
            for (size_t k = 0; k < l && all; k++) all = h->byte_tok[(uint8_t)w[i + k]] >= 0;
            if (all) {
                for (size_t k = 0; k < l; k++) s->sid[ns++] = h->byte_tok[(uint8_t)w[i + k]];
            } else if (t->unk >= 0 && !(h->fuse_unk && ns > 0 && s->sid[ns - 1] == t->unk)) {
                s->sid[ns++] = t->unk;
            }
        }
        i += l;
    }
    for (int32_t i = 0; i < ns; i++) {
        s->prev[i] = i - 1;
        s->next[i] = i + 1 < ns ? i + 1 : -1;
    }
    s->hn = 0;
    for (int32_t i = 0; i + 1 < ns; i++)
        if (!queue_pair(s, i)) return ds_fail(DS_ERR_NOMEM, "tokenize: out of memory");
    while (s->hn > 0) {
        merge_ent e = heap_pop(s);
        int32_t l = e.pos, r = s->next[l];
        if (s->sid[l] < 0 || r < 0) continue;
        int32_t nid = -1;
        if (merge_find(h, s->sid[l], s->sid[r], &nid) != e.rank || nid != e.new_id) continue; // stale
        s->sid[l] = nid;
        s->sid[r] = -1;
        s->next[l] = s->next[r];
        if (s->next[r] >= 0) s->prev[s->next[r]] = l;
        if (!queue_pair(s, s->prev[l]) || !queue_pair(s, l)) return ds_fail(DS_ERR_NOMEM, "tokenize: out of memory");
    }
    for (int32_t i = ns > 0 ? 0 : -1; i >= 0; i = s->next[i]) emit(s, s->sid[i]);
    return DS_OK;
}

static int add_range(range **a, size_t *n, size_t *cap, size_t off, size_t len) {
    if (len == 0) return 1;
    if (!grow((void **)a, cap, *n + 1, sizeof **a)) return 0;
    (*a)[(*n)++] = (range){off, len};
    return 1;
}

// Split text[r.off .. r.off + r.len) by stage `sp`, appending the pieces to s->r2.
static ds_status split_range(session *s, const ds_hf_split *sp, const char *text, range r) {
    const char *sub = text + r.off;
    size_t pos = 0, piece = 0; // piece: start of the pending piece (MergedWithNext carries a match)
    for (;;) {
        size_t ms, me;
        if (sp->re) {
            int rc = pcre2_match(sp->re, (PCRE2_SPTR)sub, r.len, pos, PCRE2_NO_UTF_CHECK, s->md, NULL);
            if (rc == PCRE2_ERROR_NOMATCH) break;
            if (rc < 0) return ds_fail(DS_ERR_INVALID, "tokenize: pre-tokenizer regex failed (PCRE2 error %d)", rc);
            PCRE2_SIZE *ov = pcre2_get_ovector_pointer(s->md);
            ms = ov[0], me = ov[1];
            if (me == ms) { // empty match: move on by one character
                if (ms >= r.len) break;
                size_t l = (size_t)ds_utf8_seq_len((uint8_t)sub[ms]);
                pos = ms + (l ? l : 1);
                continue;
            }
        } else {
            const char *hit = pos < r.len ? memmem(sub + pos, r.len - pos, sp->lit, sp->lit_n) : NULL;
            if (!hit) break;
            ms = (size_t)(hit - sub), me = ms + sp->lit_n;
        }
        int ok = 1;
        switch (sp->behavior) {
        case DS_SPLIT_ISOLATED:
            ok = add_range(&s->r2, &s->r2n, &s->r2cap, r.off + piece, ms - piece) &&
                 add_range(&s->r2, &s->r2n, &s->r2cap, r.off + ms, me - ms);
            piece = me;
            break;
        case DS_SPLIT_MERGED_PREV:
            ok = add_range(&s->r2, &s->r2n, &s->r2cap, r.off + piece, me - piece);
            piece = me;
            break;
        case DS_SPLIT_MERGED_NEXT:
            ok = add_range(&s->r2, &s->r2n, &s->r2cap, r.off + piece, ms - piece);
            piece = ms;
            break;
        default: // Removed
            ok = add_range(&s->r2, &s->r2n, &s->r2cap, r.off + piece, ms - piece);
            piece = me;
            break;
        }
        if (!ok) return ds_fail(DS_ERR_NOMEM, "tokenize: out of memory");
        pos = me;
    }
    if (!add_range(&s->r2, &s->r2n, &s->r2cap, r.off + piece, r.len - piece))
        return ds_fail(DS_ERR_NOMEM, "tokenize: out of memory");
    return DS_OK;
}

// Normalize, pre-tokenize and encode one segment of raw text (no added tokens inside).
static ds_status encode_segment(session *s, const char *text, size_t n) {
    const ds_hf *h = s->h;
    ds_status st;
    if (h->nfc && !ds_nfc_quick_check(text, n)) {
        size_t m;
        if ((st = ds_nfc(text, n, &s->nbuf2, &s->ncap2, &m))) return st;
        text = s->nbuf2, n = m;
    }
    if (h->rep_from || h->byte_level_prefix) {
        // Worst case: every byte replaced by rep_to, plus a prefix space.
        size_t need = n * (h->rep_to_n > 1 ? h->rep_to_n : 1) + 2;
        if (!grow((void **)&s->nbuf, &s->ncap, need, 1)) return ds_fail(DS_ERR_NOMEM, "tokenize: out of memory");
        size_t m = 0;
        if (h->byte_level_prefix && (n == 0 || text[0] != ' ')) s->nbuf[m++] = ' ';
        for (size_t i = 0; i < n;) {
            if (h->rep_from && n - i >= h->rep_from_n && memcmp(text + i, h->rep_from, h->rep_from_n) == 0) {
                memcpy(s->nbuf + m, h->rep_to, h->rep_to_n);
                m += h->rep_to_n, i += h->rep_from_n;
            } else {
                s->nbuf[m++] = text[i++];
            }
        }
        text = s->nbuf, n = m;
    }
    s->r1n = 0;
    if (!add_range(&s->r1, &s->r1n, &s->r1cap, 0, n)) return ds_fail(DS_ERR_NOMEM, "tokenize: out of memory");
    for (int k = 0; k < h->n_splits; k++) {
        s->r2n = 0;
        for (size_t i = 0; i < s->r1n; i++)
            if ((st = split_range(s, &h->splits[k], text, s->r1[i]))) return st;
        range *tr = s->r1;
        size_t tc = s->r1cap;
        s->r1 = s->r2, s->r1cap = s->r2cap, s->r1n = s->r2n;
        s->r2 = tr, s->r2cap = tc;
    }
    for (size_t i = 0; i < s->r1n; i++)
        if ((st = encode_word(s, text + s->r1[i].off, s->r1[i].len))) return st;
    return DS_OK;
}

// The added token starting at text[i] (leftmost-longest), or -1.
static int32_t added_at(const session *s, const char *text, size_t n, size_t i, int parse_special, size_t *len) {
    const ds_hf *h = s->h;
    if (!h->first_byte[(uint8_t)text[i]]) return -1;
    for (int k = 0; k < h->n_added_lens; k++) {
        size_t l = h->added_lens[k];
        if (l > n - i) continue;
        int32_t id = ds_tok_lookup(s->t, text + i, l);
        if (id >= 0 && h->added_special[id] && (parse_special || h->added_special[id] == 2)) {
            *len = l;
            return id;
        }
    }
    return -1;
}

ds_status ds_hf_tokenize(const ds_tokenizer *t, const char *text, size_t len, unsigned flags, int32_t *out,
                         int cap, int *n_out) {
    const ds_hf *h = t->hf;
    session s = {.t = t, .h = h, .out = out, .cap = (size_t)cap};
    ds_status st = DS_OK;
    const int parse_special = (flags & DS_TOK_PARSE_SPECIAL) != 0;
    int add_special = (flags & DS_TOK_ADD_SPECIAL) != 0;
    if (add_special && (flags & DS_TOK_NO_DOUBLE_BOS) && h->n_prefix > 0 && t->bos >= 0 && h->prefix[0] == t->bos) {
        size_t bl = t->off[t->bos + 1] - t->off[t->bos];
        if (parse_special && bl > 0 && len >= bl && memcmp(text, t->pool + t->off[t->bos], bl) == 0) add_special = 0;
    }
    if (add_special)
        for (int i = 0; i < h->n_prefix; i++) emit(&s, h->prefix[i]);
    for (int k = 0; k < h->n_splits; k++)
        if (h->splits[k].re) {
            if (!(s.md = pcre2_match_data_create(4, NULL))) return ds_fail(DS_ERR_NOMEM, "tokenize: out of memory");
            break;
        }
    size_t seg = 0;
    for (size_t i = 0; i < len;) {
        size_t al;
        int32_t id = h->n_added ? added_at(&s, text, len, i, parse_special, &al) : -1;
        if (id < 0) {
            i++;
            continue;
        }
        if (i > seg && (st = encode_segment(&s, text + seg, i - seg))) goto done;
        emit(&s, id);
        i += al;
        seg = i;
    }
    if (len > seg && (st = encode_segment(&s, text + seg, len - seg))) goto done;
    if (add_special)
        for (int i = 0; i < h->n_suffix; i++) emit(&s, h->suffix[i]);
    if (s.count > 0x7fffffff) st = ds_fail(DS_ERR_INVALID, "tokenize: too many tokens");
done:
    pcre2_match_data_free(s.md);
    free(s.nbuf);
    free(s.nbuf2);
    free(s.mbuf);
    free(s.r1);
    free(s.r2);
    free(s.sid);
    free(s.prev);
    free(s.next);
    free(s.heap);
    if (st == DS_OK) *n_out = (int)s.count;
    return st;
}
