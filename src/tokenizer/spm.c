// SentencePiece-style encoding, token-for-token as llama.cpp's SPM tokenizer (llm_tokenizer_spm
// plus the LLAMA_VOCAB_TYPE_SPM branch of llama_vocab::tokenize, with parse_special = false):
//
//  1. USER_DEFINED pieces are split out of the text first, longest first, each occurrence becoming
//     that token (llama.cpp does this even when it does not parse special tokens; CONTROL and
//     UNKNOWN pieces are left in the text).
//  2. Each remaining text fragment gets a " " prefix when add_space_prefix is set and it is the
//     first fragment or follows a user-defined token (llama.cpp's is_prev_special), then every " "
//     becomes U+2581.
//  3. The fragment is split into UTF-8 characters, the initial symbols (a doubly linked list).
//     Every adjacent pair whose concatenation is a piece goes into a max-priority queue keyed by
//     that piece's score, ties to the leftmost pair. The best pair is popped and merged (the right
//     symbol into the left one), and the new pairs with both neighbours are queued. A popped pair
//     is stale when either side has been merged since it was queued: symbols only grow, so that is
//     exactly "one side is empty or the two lengths no longer add up to the queued length".
//  4. Each final symbol whose text is a piece becomes that id; any other symbol becomes one
//     byte-fallback token per byte ("<0xHH>", else the one-byte piece, else unk).
//
// The text -> id map used for the pairs and for step 4 holds every piece whatever its type, as
// llama.cpp's token_to_id does: a CONTROL piece such as "<s>" or a byte piece such as "<0x41>"
// can therefore come out of ordinary text, but only when the vocabulary also has pieces for every
// intermediate pair ("<0", "x4", ...); ordinary vocabularies (stories260K included) do not, so this
// is about fidelity rather than a practical difference. UNUSED pieces are in the map too
// (llama.cpp: "Do we need to support is_unused?").
//
// llama.cpp's resegment() also consults a rev_merge table for symbols whose text is not a piece.
// For valid UTF-8 such a symbol is always a single character that was never merged (a merge only
// happens when the merged text is a piece, and stale pairs are skipped), and rev_merge only holds
// texts of two or more characters, so that branch never applies and is not reproduced here.
//
// Cost: O(n log n) in the text length n for the merges (pairs longer than the longest piece are
// never looked up, and each merge queues at most two pairs), plus O(n) per USER_DEFINED piece for
// the split (a memmem per piece, as llama.cpp; none in stories260K).
#define _GNU_SOURCE // memmem
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "tokenizer/tok_internal.h"
#include "tokenizer/utf8.h"

typedef struct {
    float score;
    int32_t left, right;
    uint32_t size; // byte length of the pair when it was queued
} bigram;

// x pops before y: higher score, then the leftmost pair (llama.cpp's llm_bigram_spm::comparator).
static int before(const bigram *x, const bigram *y) {
    return x->score > y->score || (x->score == y->score && x->left < y->left);
}

typedef struct {
    const ds_tokenizer *t;
    int32_t *out;
    size_t cap, count;
    const char *txt;     // the escaped fragment being encoded
    uint32_t *start, *len;
    int32_t *prev, *next;
    bigram *heap;
    size_t heap_n, heap_cap;
} session;

static void emit(session *s, int32_t id) {
    if (s->count < s->cap) s->out[s->count] = id;
    s->count++;
}

static ds_status heap_push(session *s, bigram b) {
    if (s->heap_n == s->heap_cap) {
        size_t nc = s->heap_cap ? 2 * s->heap_cap : 64;
        bigram *nh = realloc(s->heap, nc * sizeof *nh);
        if (!nh) return ds_fail(DS_ERR_NOMEM, "tokenize: out of memory");
        s->heap = nh;
        s->heap_cap = nc;
    }
    ds_tok_ops++;
    size_t i = s->heap_n++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!before(&b, &s->heap[p])) break;
        s->heap[i] = s->heap[p];
        i = p;
    }
    s->heap[i] = b;
    return DS_OK;
}

static bigram heap_pop(session *s) {
    ds_tok_ops++;
    bigram top = s->heap[0];
    bigram last = s->heap[--s->heap_n];
    size_t n = s->heap_n, i = 0;
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

static ds_status try_add_bigram(session *s, int32_t l, int32_t r) {
    if (l < 0 || r < 0) return DS_OK;
    size_t size = (size_t)s->len[l] + s->len[r];
    if (size > s->t->max_piece_len) return DS_OK;
    ds_tok_ops++;
    int32_t id = ds_tok_lookup(s->t, s->txt + s->start[l], size);
    if (id < 0) return DS_OK;
    return heap_push(s, (bigram){s->t->scores[id], l, r, (uint32_t)size});
}

// Encode one escaped fragment txt[0..m) (valid UTF-8, m > 0).
static ds_status encode_fragment(session *s, const char *txt, uint32_t m) {
    ds_status st;
    s->txt = txt;
    int32_t nsym = 0;
    for (uint32_t o = 0; o < m;) {
        uint32_t l = (uint32_t)ds_utf8_seq_len((uint8_t)txt[o]);
        s->start[nsym] = o;
        s->len[nsym] = l;
        s->prev[nsym] = nsym - 1;
        o += l;
        s->next[nsym] = o == m ? -1 : nsym + 1;
        nsym++;
    }
    s->heap_n = 0;
    for (int32_t i = 1; i < nsym; i++)
        if ((st = try_add_bigram(s, i - 1, i)) != DS_OK) return st;

    while (s->heap_n > 0) {
        bigram b = heap_pop(s);
        uint32_t *len = s->len;
        if (len[b.left] == 0 || len[b.right] == 0 || len[b.left] + len[b.right] != b.size) continue;
        len[b.left] += len[b.right];
        len[b.right] = 0;
        s->next[b.left] = s->next[b.right];
        if (s->next[b.right] >= 0) s->prev[s->next[b.right]] = b.left;
        if ((st = try_add_bigram(s, s->prev[b.left], b.left)) != DS_OK) return st;
        if ((st = try_add_bigram(s, b.left, s->next[b.left])) != DS_OK) return st;
    }

    for (int32_t i = 0; i != -1; i = s->next[i]) {
        const char *p = txt + s->start[i];
        ds_tok_ops++;
        int32_t id = ds_tok_lookup(s->t, p, s->len[i]);
        if (id >= 0) {
            emit(s, id);
            continue;
        }
        for (uint32_t k = 0; k < s->len[i]; k++) {
            uint8_t byte = (uint8_t)p[k];
            if (s->t->byte_tok[byte] < 0)
                return ds_fail(DS_ERR_INVALID,
                               "tokenize: byte 0x%02X has no byte-fallback piece and the vocabulary has no "
                               "unknown token",
                               byte);
            emit(s, s->t->byte_tok[byte]);
        }
    }
    return DS_OK;
}

typedef struct {
    size_t off, len; // raw text [off, off + len) when tok < 0
    int32_t tok;
} frag;

typedef struct {
    frag *a;
    size_t n, cap;
} frag_list;

static int frag_add(frag_list *l, size_t off, size_t len, int32_t tok) {
    if (l->n == l->cap) {
        size_t nc = l->cap ? 2 * l->cap : 16;
        frag *na = realloc(l->a, nc * sizeof *na);
        if (!na) return 0;
        l->a = na;
        l->cap = nc;
    }
    l->a[l->n++] = (frag){off, len, tok};
    return 1;
}

// Split the user-defined pieces out of the text, longest first (llama.cpp's tokenizer_st_partition:
// each piece in turn claims its leftmost non-overlapping occurrences in what is still raw text).
static ds_status partition(const ds_tokenizer *t, const char *text, size_t len, frag_list *cur) {
    frag_list nxt = {0};
    if (!frag_add(cur, 0, len, -1)) return ds_fail(DS_ERR_NOMEM, "tokenize: out of memory");
    for (int u = 0; u < t->n_user_defined; u++) {
        int32_t id = t->user_defined[u];
        const char *p = t->pool + t->off[id];
        size_t pn = t->off[id + 1] - t->off[id];
        nxt.n = 0;
        for (size_t f = 0; f < cur->n; f++) {
            frag fr = cur->a[f];
            if (fr.tok >= 0) {
                if (!frag_add(&nxt, fr.off, fr.len, fr.tok)) goto nomem;
                continue;
            }
            size_t pos = fr.off, end = fr.off + fr.len;
            const char *hit;
            while (pos < end && (hit = memmem(text + pos, end - pos, p, pn)) != NULL) {
                size_t h = (size_t)(hit - text);
                if (h > pos && !frag_add(&nxt, pos, h - pos, -1)) goto nomem;
                if (!frag_add(&nxt, 0, 0, id)) goto nomem;
                pos = h + pn;
            }
            if (pos < end && !frag_add(&nxt, pos, end - pos, -1)) goto nomem;
        }
        frag_list tmp = *cur;
        *cur = nxt;
        nxt = tmp;
    }
    free(nxt.a);
    return DS_OK;
nomem:
    free(nxt.a);
    return ds_fail(DS_ERR_NOMEM, "tokenize: out of memory");
}

ds_status ds_spm_tokenize(const ds_tokenizer *t, const char *text, size_t len, int add_bos, int32_t *out, int cap,
                          int *n_out) {
    if (add_bos && t->bos < 0) return ds_fail(DS_ERR_INVALID, "tokenize: add_bos, but the vocabulary has no BOS");

    session s = {.t = t, .out = out, .cap = (size_t)cap};
    if (add_bos) emit(&s, t->bos);
    ds_status st = DS_OK;
    frag_list frags = {0};
    char *buf = NULL;
    if (len == 0) goto done; // llama.cpp: "" -> [BOS] (no space prefix for empty text)

    if ((st = partition(t, text, len, &frags)) != DS_OK) goto done;
    size_t maxf = 0; // longest raw fragment
    for (size_t f = 0; f < frags.n; f++)
        if (frags.a[f].tok < 0 && frags.a[f].len > maxf) maxf = frags.a[f].len;
    if (maxf > 0) {
        size_t nsym = maxf + 1; // +1: the prefix
        buf = malloc(3 * maxf + 3);
        s.start = malloc(nsym * sizeof *s.start);
        s.len = malloc(nsym * sizeof *s.len);
        s.prev = malloc(nsym * sizeof *s.prev);
        s.next = malloc(nsym * sizeof *s.next);
        if (!buf || !s.start || !s.len || !s.prev || !s.next) {
            st = ds_fail(DS_ERR_NOMEM, "tokenize: out of memory for %zu bytes of text", len);
            goto done;
        }
    }
    int prev_special = 1;
    for (size_t f = 0; f < frags.n; f++) {
        frag fr = frags.a[f];
        if (fr.tok >= 0) {
            emit(&s, fr.tok);
            prev_special = 1;
            continue;
        }
        uint32_t m = 0;
        if (t->add_space_prefix && prev_special) {
            memcpy(buf, "\xE2\x96\x81", 3);
            m = 3;
        }
        for (size_t i = 0; i < fr.len; i++) {
            char c = text[fr.off + i];
            if (c == ' ') {
                memcpy(buf + m, "\xE2\x96\x81", 3);
                m += 3;
            } else {
                buf[m++] = c;
            }
        }
        if ((st = encode_fragment(&s, buf, m)) != DS_OK) goto done;
        prev_special = 0;
    }

done:
    free(buf);
    free(s.start);
    free(s.len);
    free(s.prev);
    free(s.next);
    free(s.heap);
    free(frags.a);
    if (st == DS_OK) *n_out = (int)s.count;
    return st;
}
