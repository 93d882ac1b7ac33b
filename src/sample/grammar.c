// The grammar matcher and token masks (see grammar.h for the objects).
//
// Advancing a stack set by a code point: every stack whose top class holds it continues at the
// next element, and each continuation is expanded until its top is a class again (a rule
// reference opens each of the rule's alternatives, with "the rest of this alternative" pushed
// unless that rest is empty: the tail position, so x* loops keep stacks flat; an alternative's end
// pops). An empty stack is node 0, "complete". Results are memoized per (set, code point).
//
// A mask is a walk over the vocabulary's trie in preorder, carrying the state after each prefix
// (per depth); a dead prefix skips its subtree. Bytes of a code point cut by the end of a token
// are kept in the state (cp, need): the token is allowed when some top class holds a code point
// with that prefix. Masks are cached (LRU, DS_MASK_CACHE entries) by state: JSON grammars come
// back to the same states all the time.
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "sample/grammar.h"

#define DS_MASK_CACHE 1024 // masks kept per matcher (allocated as used: V / 8 bytes each)
#define DS_TOKEN_MAX 1024 // longer tokens are never allowed
// Most (element, continuation) items one closure may visit: an ambiguous grammar (b* b* with b
// recursive, say) can double its parse stacks with every character; past this the matcher stops
// with one "too ambiguous" error instead of running for minutes (the JSON-schema grammars and the
// tests' GBNF stay below 100).
#define DS_GRAMMAR_MAX_ITEMS 4096

// ---- vocabulary ----------------------------------------------------------------------------------

struct ds_grammar_vocab {
    int V;
    uint8_t *bytes;   // all tokens' bytes
    int32_t *off;     // (V + 1) token i's bytes are bytes[off[i] .. off[i+1])
    // The trie in preorder: node i holds byte tb[i] at depth td[i] (1 = first byte); its subtree
    // ends before tskip[i]; tokens sorted[tt[i] .. tt[i] + tn[i]) end at it.
    int n_nodes, max_depth;
    uint8_t *tb;
    uint16_t *td;
    int32_t *tskip, *tt;
    uint16_t *tn;
    int32_t *sorted;  // (n_sorted) token ids in byte order
    int n_sorted;
};

static const ds_grammar_vocab *g_sort_vocab; // qsort has no context
static int cmp_tok(const void *a, const void *b) {
    const ds_grammar_vocab *v = g_sort_vocab;
    const int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    const int lx = v->off[x + 1] - v->off[x], ly = v->off[y + 1] - v->off[y];
    const int c = memcmp(v->bytes + v->off[x], v->bytes + v->off[y], (size_t)(lx < ly ? lx : ly));
    return c ? c : lx != ly ? lx - ly : x - y;
}

void ds_grammar_vocab_free(ds_grammar_vocab *v) {
    if (!v) return;
    free(v->bytes);
    free(v->off);
    free(v->tb);
    free(v->td);
    free(v->tskip);
    free(v->tt);
    free(v->tn);
    free(v->sorted);
    free(v);
}

int ds_grammar_vocab_size(const ds_grammar_vocab *v) { return v->V; }

ds_status ds_grammar_vocab_init(const ds_tokenizer *t, int V, ds_grammar_vocab **out) {
    *out = NULL;
    ds_grammar_vocab *v = ds_calloc(1, sizeof *v);
    char *buf = malloc(DS_TOKEN_MAX);
    if (!v || !buf) goto nomem;
    v->V = V;
    v->off = malloc(sizeof(int32_t) * ((size_t)V + 1));
    size_t total = 0, cap = (size_t)V * 8 + 64;
    v->bytes = malloc(cap);
    if (!v->off || !v->bytes) goto nomem;
    for (int i = 0; i < V; i++) {
        v->off[i] = (int32_t)total;
        int n = ds_token_bytes(t, i, buf, DS_TOKEN_MAX);
        if (n > DS_TOKEN_MAX || n < 0) n = 0;
        if (total + (size_t)n > cap) {
            cap = 2 * cap + (size_t)n;
            uint8_t *p = realloc(v->bytes, cap);
            if (!p) goto nomem;
            v->bytes = p;
        }
        memcpy(v->bytes + total, buf, (size_t)n);
        total += (size_t)n;
    }
    v->off[V] = (int32_t)total;
    v->sorted = malloc(sizeof(int32_t) * ((size_t)V + 1));
    if (!v->sorted) goto nomem;
    for (int i = 0; i < V; i++)
        if (v->off[i + 1] > v->off[i]) v->sorted[v->n_sorted++] = i;
    g_sort_vocab = v;
    qsort(v->sorted, (size_t)v->n_sorted, sizeof(int32_t), cmp_tok);
    // Nodes: at most one per byte.
    v->tb = malloc(total + 1);
    v->td = malloc(sizeof(uint16_t) * (total + 1));
    v->tskip = malloc(sizeof(int32_t) * (total + 1));
    v->tt = malloc(sizeof(int32_t) * (total + 1));
    v->tn = calloc(total + 1, sizeof(uint16_t));
    int32_t *open = malloc(sizeof(int32_t) * (DS_TOKEN_MAX + 1)); // open[d]: the node at depth d on the path
    if (!v->tb || !v->td || !v->tskip || !v->tt || !v->tn || !open) {
        free(open);
        goto nomem;
    }
    int depth = 0; // nodes open on the current path
    const uint8_t *prev = NULL;
    int prev_len = 0;
    for (int j = 0; j < v->n_sorted; j++) {
        const int32_t id = v->sorted[j];
        const uint8_t *s = v->bytes + v->off[id];
        const int len = v->off[id + 1] - v->off[id];
        int lcp = 0;
        while (prev && lcp < len && lcp < prev_len && lcp < depth && s[lcp] == prev[lcp]) lcp++;
        for (int d = depth; d > lcp; d--) v->tskip[open[d]] = v->n_nodes; // close the path below lcp
        depth = lcp;
        for (int d = lcp; d < len; d++) {
            const int n = v->n_nodes++;
            v->tb[n] = s[d];
            v->td[n] = (uint16_t)(d + 1);
            v->tt[n] = j;
            v->tn[n] = 0;
            open[++depth] = n;
        }
        const int end = open[depth];
        if (!v->tn[end]) v->tt[end] = j;
        if (v->tn[end] < UINT16_MAX) v->tn[end]++;
        if (len > v->max_depth) v->max_depth = len;
        prev = s;
        prev_len = len;
    }
    for (int d = depth; d > 0; d--) v->tskip[open[d]] = v->n_nodes;
    free(open);
    free(buf);
    *out = v;
    return DS_OK;
nomem:
    free(buf);
    ds_grammar_vocab_free(v);
    return ds_fail(DS_ERR_NOMEM, "out of memory building the grammar's vocabulary trie");
}

// ---- hash map u64 -> i32 (open addressing; keys are never 0) -------------------------------------

typedef struct {
    uint64_t *k;
    int32_t *v;
    size_t cap, n; // cap a power of two
} hmap;

static inline uint64_t mix(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static int hmap_get(const hmap *h, uint64_t key, int32_t *val) {
    if (!h->cap) return 0;
    for (size_t i = mix(key) & (h->cap - 1);; i = (i + 1) & (h->cap - 1)) {
        if (!h->k[i]) return 0;
        if (h->k[i] == key) {
            *val = h->v[i];
            return 1;
        }
    }
}

static int hmap_put(hmap *h, uint64_t key, int32_t val) {
    if (2 * (h->n + 1) > h->cap) {
        const size_t cap = h->cap ? 2 * h->cap : 1024;
        uint64_t *k = calloc(cap, sizeof *k);
        int32_t *v = malloc(cap * sizeof *v);
        if (!k || !v) {
            free(k);
            free(v);
            return -1;
        }
        for (size_t i = 0; i < h->cap; i++) {
            if (!h->k[i]) continue;
            size_t j = mix(h->k[i]) & (cap - 1);
            while (k[j]) j = (j + 1) & (cap - 1);
            k[j] = h->k[i];
            v[j] = h->v[i];
        }
        free(h->k);
        free(h->v);
        h->k = k;
        h->v = v;
        h->cap = cap;
    }
    size_t i = mix(key) & (h->cap - 1);
    while (h->k[i] && h->k[i] != key) i = (i + 1) & (h->cap - 1);
    if (!h->k[i]) h->n++;
    h->k[i] = key;
    h->v[i] = val;
    return 0;
}

static void hmap_free(hmap *h) {
    free(h->k);
    free(h->v);
}

// ---- matcher -------------------------------------------------------------------------------------

struct ds_grammar_matcher {
    const ds_grammar *g;
    const ds_grammar_vocab *voc;
    int V, W;           // vocabulary, mask words
    int32_t *end_ids;   // (n_end)
    int n_end;
    uint32_t *end_mask; // (W)
    // Stack nodes: (pos, parent); node 0 is the empty stack.
    ds_i32vec npos, npar;
    hmap nodes;         // (pos, parent) -> node
    // Stack sets: sorted node ids set_data[set_off[s] .. + set_len[s]); set 0 is empty (dead).
    ds_i32vec set_data, set_off, set_len;
    hmap sets;          // hash -> first set with it (probing on in set_next for collisions)
    ds_i32vec set_next;       // (sets) next set with the same hash, or -1
    hmap trans;         // (set, code point or partial key) -> set, or compat flag
    int32_t **ascii;    // (cap_ascii sets) per set, its transitions on code points 0..127 (-2 unknown), or
                        // NULL; entry 128: the set after any code point >= 128 when its top classes
                        // do not tell those apart (-3 unknown, -2 they do)
    int cap_ascii;
    int32_t start_set;
    ds_i32vec work, tmp, vis; // scratch of advance: vis lists the (pos, parent) items of one closure
    uint64_t *vis_key;  // (DS_VIS_CAP) those items, hashed (0 = free), emptied after each closure
    ds_status err;      // why the last operation failed: DS_ERR_NOMEM, or DS_ERR_INVALID (too ambiguous)
    // DFS scratch per depth (max_depth + 1)
    int32_t *ds_set;
    uint32_t *ds_cp;
    uint8_t *ds_need, *ds_len;
    // Mask cache.
    uint64_t cache_key[DS_MASK_CACHE];
    uint64_t cache_use[DS_MASK_CACHE];
    uint32_t *cache;    // (cap_cache, W)
    int n_cache, cap_cache;
    uint64_t clock;
    long computed, hits;
};

static int32_t intern_node(ds_grammar_matcher *m, int32_t pos, int32_t par) {
    const uint64_t key = ((uint64_t)(uint32_t)pos << 32 | (uint32_t)par) + 1;
    int32_t id;
    if (hmap_get(&m->nodes, key, &id)) return id;
    id = m->npos.n;
    if (ds_i32vec_push(&m->npos, pos) || ds_i32vec_push(&m->npar, par) || hmap_put(&m->nodes, key, id)) return -1;
    return id;
}

static uint64_t hash_ids(const int32_t *v, int n) {
    uint64_t h = 0x9e3779b97f4a7c15ULL ^ (uint64_t)n;
    for (int i = 0; i < n; i++) h = mix(h ^ (uint32_t)v[i]) + 0x632be59bd9b4e019ULL;
    return h | 1;
}

// The set of ids v[0..n) (sorted, distinct): its id, interned.
static int32_t intern_set(ds_grammar_matcher *m, const int32_t *v, int n) {
    if (!n) return 0;
    const uint64_t h = hash_ids(v, n);
    int32_t s;
    if (hmap_get(&m->sets, h, &s)) {
        for (; s >= 0; s = m->set_next.v[s])
            if (m->set_len.v[s] == n && !memcmp(m->set_data.v + m->set_off.v[s], v, sizeof(int32_t) * (size_t)n))
                return s;
        hmap_get(&m->sets, h, &s);
    } else {
        s = -1;
    }
    const int32_t id = m->set_off.n;
    if (ds_i32vec_push(&m->set_off, m->set_data.n) || ds_i32vec_push(&m->set_len, n) || ds_i32vec_push(&m->set_next, s)) return -1;
    for (int i = 0; i < n; i++)
        if (ds_i32vec_push(&m->set_data, v[i])) return -1;
    if (hmap_put(&m->sets, h, id)) return -1;
    return id;
}

static int cmp_i32(const void *a, const void *b) {
    const int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return x < y ? -1 : x > y;
}

#define DS_VIS_CAP (4 * DS_GRAMMAR_MAX_ITEMS) // a power of two, at most a quarter full

// Whether item (pos, par) was visited in this closure; marks it visited. -1: out of memory.
static int visit_seen(ds_grammar_matcher *m, int32_t pos, int32_t par) {
    const uint64_t key = ((uint64_t)(uint32_t)pos << 32 | (uint32_t)par) + 1;
    size_t i = mix(key) & (DS_VIS_CAP - 1);
    for (; m->vis_key[i]; i = (i + 1) & (DS_VIS_CAP - 1))
        if (m->vis_key[i] == key) return 1;
    m->vis_key[i] = key;
    return ds_i32vec_push(&m->vis, (int32_t)i) ? -1 : 0;
}

static int32_t close_items(ds_grammar_matcher *m);

// Expand the work items (pos, parent pairs on m->work) into tops on m->tmp; then intern. -1 on
// failure, m->err saying why.
static int32_t close_set(ds_grammar_matcher *m) {
    m->err = DS_ERR_NOMEM;
    m->vis.n = 0;
    const int32_t s = close_items(m);
    for (int i = 0; i < m->vis.n; i++) m->vis_key[m->vis.v[i]] = 0; // (all removed together: no tombstones)
    m->vis.n = 0;
    if (s < 0) {
        m->work.n = 0;
        m->tmp.n = 0;
    }
    return s;
}

static int32_t close_items(ds_grammar_matcher *m) {
    const ds_grammar *g = m->g;
    while (m->work.n) {
        const int32_t par = m->work.v[--m->work.n], pos = m->work.v[--m->work.n];
        const int seen = visit_seen(m, pos, par);
        if (seen < 0) return -1;
        if (seen) continue;
        if (m->vis.n > DS_GRAMMAR_MAX_ITEMS) {
            m->err = DS_ERR_INVALID;
            return -1;
        }
        const int32_t e = g->el[pos];
        switch (e & 3) {
        case DS_GEL_CHARS: {
            const int32_t id = intern_node(m, pos, par);
            if (id < 0 || ds_i32vec_push(&m->tmp, id)) return -1;
            break;
        }
        case DS_GEL_END:
            if (!par) {
                if (ds_i32vec_push(&m->tmp, 0)) return -1;
            } else if (ds_i32vec_push(&m->work, m->npos.v[par]) || ds_i32vec_push(&m->work, m->npar.v[par])) {
                return -1;
            }
            break;
        default: {
            const int r = e >> 2;
            const int32_t cont = (g->el[pos + 1] & 3) == DS_GEL_END ? par : intern_node(m, pos + 1, par);
            if (cont < 0) return -1;
            for (int a = g->rule_nalt[r] - 1; a >= 0; a--)
                if (ds_i32vec_push(&m->work, g->alt[g->rule_alt[r] + a]) || ds_i32vec_push(&m->work, cont)) return -1;
        }
        }
    }
    qsort(m->tmp.v, (size_t)m->tmp.n, sizeof(int32_t), cmp_i32);
    int w = 0;
    for (int i = 0; i < m->tmp.n; i++)
        if (!w || m->tmp.v[w - 1] != m->tmp.v[i]) m->tmp.v[w++] = m->tmp.v[i];
    const int32_t s = intern_set(m, m->tmp.v, w);
    m->tmp.n = 0;
    return s;
}

static int32_t advance(ds_grammar_matcher *m, int32_t set, uint32_t cp);

// How class c sees the code points 0x80..0x10FFFF: 0 none of them, 1 all, 2 some.
static int class_upper(const ds_grammar *g, int c) {
    const uint32_t *r = g->rng + 2 * (size_t)g->cs_off[c];
    int any = 0, all = 0;
    for (int i = 0; i < g->cs_n[c]; i++) {
        if (r[2 * i + 1] >= 0x80) any = 1;
        if (r[2 * i] <= 0x80 && r[2 * i + 1] >= 0x10FFFF) all = 1;
    }
    const int v = all ? 1 : any ? 2 : 0;
    return v == 2 ? 2 : v ^ g->cs_neg[c];
}

// The set after any code point >= 128 if set's top classes treat them all alike, else -2 (-1: out
// of memory). Memoized in the set's table (entry 128).
static int32_t upper_uniform(ds_grammar_matcher *m, int32_t set) {
    int32_t *tab = m->ascii[set];
    if (tab[128] != -3) return tab[128];
    const int32_t *ids = m->set_data.v + m->set_off.v[set];
    int uniform = 1;
    for (int i = 0; i < m->set_len.v[set] && uniform; i++)
        if (ids[i]) uniform = class_upper(m->g, m->g->el[m->npos.v[ids[i]]] >> 2) != 2;
    int32_t r = -2;
    if (uniform) {
        tab[128] = -2; // (advance below must not take the shortcut)
        if ((r = advance(m, set, 0xA0)) < 0) return -1;
    }
    m->ascii[set][128] = r;
    return r;
}

// The set after code point cp (0 = dead; -1 = out of memory), memoized (ASCII in a table per set:
// the mask walk's most common step; other code points in one entry when the set cannot tell them
// apart, else in the hash map).
static int32_t advance(ds_grammar_matcher *m, int32_t set, uint32_t cp) {
    if (!set) return 0;
    int32_t *tab = NULL;
    if (set < m->cap_ascii && m->ascii[set] && cp >= 128 && m->ascii[set][128] >= 0 && cp != 0xA0)
        return m->ascii[set][128];
    if (cp < 128) {
        if (set >= m->cap_ascii) {
            int cap = m->cap_ascii ? m->cap_ascii : 256;
            while (cap <= set) cap *= 2;
            int32_t **a = realloc(m->ascii, sizeof *a * (size_t)cap);
            if (!a) return -1;
            memset(a + m->cap_ascii, 0, sizeof *a * (size_t)(cap - m->cap_ascii));
            m->ascii = a;
            m->cap_ascii = cap;
        }
        if (!m->ascii[set]) {
            if (!(m->ascii[set] = malloc(sizeof(int32_t) * 129))) return -1;
            for (int i = 0; i < 128; i++) m->ascii[set][i] = -2;
            m->ascii[set][128] = -3;
        }
        tab = m->ascii[set];
        if (tab[cp] != -2) return tab[cp];
    }
    const uint64_t key = ((uint64_t)(uint32_t)set << 32 | cp) + 1;
    int32_t r;
    if (!tab && hmap_get(&m->trans, key, &r)) return r;
    const int32_t *ids = m->set_data.v + m->set_off.v[set];
    const int n = m->set_len.v[set];
    m->work.n = 0;
    for (int i = 0; i < n; i++) {
        const int32_t id = ids[i];
        if (!id) continue;
        const int32_t pos = m->npos.v[id];
        if (!ds_grammar_class_has(m->g, m->g->el[pos] >> 2, cp)) continue;
        if (ds_i32vec_push(&m->work, pos + 1) || ds_i32vec_push(&m->work, m->npar.v[id])) return -1;
    }
    r = m->work.n ? close_set(m) : 0;
    if (r < 0) return -1;
    if (tab) m->ascii[set][cp] = r; // (m->ascii may have moved: close_set interns sets, not tables)
    else if (hmap_put(&m->trans, key, r)) return -1;
    return r;
}

// Whether class c holds some code point in [lo, hi].
static int class_meets(const ds_grammar *g, int c, uint32_t lo, uint32_t hi) {
    const uint32_t *r = g->rng + 2 * (size_t)g->cs_off[c];
    const int n = g->cs_n[c];
    if (!g->cs_neg[c]) {
        for (int i = 0; i < n; i++)
            if (r[2 * i] <= hi && r[2 * i + 1] >= lo) return 1;
        return 0;
    }
    for (uint32_t cur = lo;;) { // negated: is [lo, hi] covered by the ranges?
        int moved = 0;
        for (int i = 0; i < n; i++)
            if (r[2 * i] <= cur && r[2 * i + 1] >= cur) {
                if (r[2 * i + 1] >= hi) return 0;
                cur = r[2 * i + 1] + 1;
                moved = 1;
            }
        if (!moved) return 1;
    }
}

static const uint32_t k_min_cp[5] = {0, 0, 0x80, 0x800, 0x10000}; // smallest code point per UTF-8 length

// Can set continue with a code point of UTF-8 length len whose leading bits are cp, `need` bytes
// to come? (Overlong forms, surrogates and code points above U+10FFFF are never completed.)
static int partial_ok(ds_grammar_matcher *m, int32_t set, uint32_t cp, int need, int len) {
    const uint64_t key = ((uint64_t)(uint32_t)set << 32 | 0x80000000u | (uint32_t)len << 27 | (uint32_t)need << 24 | cp) + 1;
    int32_t r;
    if (hmap_get(&m->trans, key, &r)) return r;
    uint32_t lo = cp << (6 * need), hi = lo | ((1u << (6 * need)) - 1);
    if (lo < k_min_cp[len]) lo = k_min_cp[len];
    if (hi > 0x10FFFF) hi = 0x10FFFF;
    if (lo <= hi && !(lo >= 0xD800 && hi <= 0xDFFF) && set < m->cap_ascii && m->ascii[set]) {
        const int32_t u = upper_uniform(m, set); // every code point >= 128 alike: no need to look closer
        if (u == -1) return -1;
        if (u >= 0) return u > 0;
    }
    // the range without the surrogates D800..DFFF: [lo, hi] as up to two pieces
    uint32_t pl[2] = {lo, 0xE000}, ph[2] = {hi, hi};
    int np = lo <= hi;
    if (np && lo <= 0xDFFF && hi >= 0xD800) {
        ph[0] = 0xD7FF;
        np = 2;
        if (lo >= 0xD800) pl[0] = 1, ph[0] = 0; // (empty)
        if (hi <= 0xDFFF) pl[1] = 1, ph[1] = 0;
    }
    r = 0;
    const int32_t *ids = m->set_data.v + m->set_off.v[set];
    for (int i = 0; i < m->set_len.v[set] && !r; i++)
        for (int j = 0; j < np && !r; j++)
            if (ids[i] && pl[j] <= ph[j]) r = class_meets(m->g, m->g->el[m->npos.v[ids[i]]] >> 2, pl[j], ph[j]);
    if (hmap_put(&m->trans, key, r)) return -1;
    return r;
}

// One byte: 1 alive (state updated), 0 dead, -1 out of memory.
static int step(ds_grammar_matcher *m, int32_t *set, uint32_t *cp, uint8_t *need, uint8_t *len, uint8_t b) {
    if (!*need) {
        if (b < 0x80) {
            const int32_t s = advance(m, *set, b);
            if (s <= 0) return s;
            *set = s;
            return 1;
        }
        if (b >= 0xC2 && b <= 0xDF) *need = 1, *cp = b & 0x1F;
        else if (b >= 0xE0 && b <= 0xEF) *need = 2, *cp = b & 0x0F;
        else if (b >= 0xF0 && b <= 0xF4) *need = 3, *cp = b & 0x07;
        else return 0;
        *len = (uint8_t)(*need + 1);
        return partial_ok(m, *set, *cp, *need, *len);
    }
    if ((b & 0xC0) != 0x80) return 0;
    *cp = *cp << 6 | (b & 0x3F);
    if (--*need) return partial_ok(m, *set, *cp, *need, *len);
    if (*cp > 0x10FFFF || *cp < k_min_cp[*len] || (*cp >= 0xD800 && *cp <= 0xDFFF)) return 0;
    const int32_t s = advance(m, *set, *cp);
    if (s <= 0) return s;
    *set = s;
    *cp = 0;
    return 1;
}

void ds_grammar_matcher_free(ds_grammar_matcher *m) {
    if (!m) return;
    free(m->end_ids);
    free(m->end_mask);
    free(m->npos.v);
    free(m->npar.v);
    hmap_free(&m->nodes);
    free(m->set_data.v);
    free(m->set_off.v);
    free(m->set_len.v);
    free(m->set_next.v);
    hmap_free(&m->sets);
    hmap_free(&m->trans);
    for (int i = 0; i < m->cap_ascii; i++) free(m->ascii[i]);
    free(m->ascii);
    free(m->work.v);
    free(m->tmp.v);
    free(m->vis.v);
    free(m->vis_key);
    free(m->ds_set);
    free(m->ds_cp);
    free(m->ds_need);
    free(m->ds_len);
    free(m->cache);
    free(m);
}

ds_status ds_grammar_matcher_init(const ds_grammar *g, const ds_grammar_vocab *v, const int32_t *end_ids, int n_end,
                                  ds_grammar_matcher **out) {
    *out = NULL;
    ds_grammar_matcher *m = ds_calloc(1, sizeof *m);
    if (!m) return DS_ERR_NOMEM;
    m->g = g;
    m->voc = v;
    m->V = v->V;
    m->W = (v->V + 31) / 32;
    m->end_ids = malloc(sizeof(int32_t) * (size_t)(n_end > 0 ? n_end : 1));
    m->end_mask = calloc((size_t)m->W, sizeof(uint32_t));
    m->cap_cache = 16;
    m->cache = malloc(sizeof(uint32_t) * (size_t)m->W * (size_t)m->cap_cache);
    const size_t D = (size_t)v->max_depth + 2;
    m->ds_set = malloc(sizeof(int32_t) * D);
    m->ds_cp = malloc(sizeof(uint32_t) * D);
    m->ds_need = malloc(D);
    m->ds_len = malloc(D);
    m->vis_key = calloc(DS_VIS_CAP, sizeof(uint64_t));
    int bad = !m->vis_key || !m->end_ids || !m->end_mask || !m->cache || !m->ds_set || !m->ds_cp || !m->ds_need || !m->ds_len;
    for (int i = 0; i < n_end && !bad; i++)
        if (end_ids[i] >= 0 && end_ids[i] < m->V) {
            m->end_ids[m->n_end++] = end_ids[i];
            m->end_mask[end_ids[i] >> 5] |= 1u << (end_ids[i] & 31);
        }
    // node 0 (the empty stack) and set 0 (dead)
    bad = bad || ds_i32vec_push(&m->npos, -1) || ds_i32vec_push(&m->npar, 0) || ds_i32vec_push(&m->set_off, 0) ||
          ds_i32vec_push(&m->set_len, 0) || ds_i32vec_push(&m->set_next, -1);
    if (!bad) {
        m->work.n = 0;
        for (int a = g->rule_nalt[g->root] - 1; a >= 0 && !bad; a--)
            bad = ds_i32vec_push(&m->work, g->alt[g->rule_alt[g->root] + a]) || ds_i32vec_push(&m->work, 0);
        m->start_set = bad ? -1 : close_set(m);
        bad = m->start_set < 0;
    }
    if (bad) {
        const ds_status st = m->start_set < 0 && m->err == DS_ERR_INVALID ? ds_grammar_matcher_fail(m)
                                                                          : ds_fail(DS_ERR_NOMEM, "out of memory for a grammar matcher");
        ds_grammar_matcher_free(m);
        return st;
    }
    *out = m;
    return DS_OK;
}

ds_status ds_grammar_matcher_fail(const ds_grammar_matcher *m) {
    if (m->err == DS_ERR_INVALID)
        return ds_fail(DS_ERR_INVALID,
                       "grammar too ambiguous: more than %d parse stacks after one character (a repetition of a "
                       "recursive rule that can match the same text in many ways, e.g. b* b*)",
                       DS_GRAMMAR_MAX_ITEMS);
    return ds_fail(DS_ERR_NOMEM, "out of memory in a grammar matcher");
}

ds_grammar_state ds_grammar_start(const ds_grammar_matcher *m) {
    ds_grammar_state s = {.set = m->start_set};
    return s;
}

int ds_grammar_complete(const ds_grammar_matcher *m, const ds_grammar_state *s) {
    return !s->ended && !s->need && s->set > 0 && m->set_len.v[s->set] > 0 &&
           m->set_data.v[m->set_off.v[s->set]] == 0; // sorted: node 0 first
}

int ds_grammar_is_end(const ds_grammar_matcher *m, int32_t tok) {
    return tok >= 0 && tok < m->V && (m->end_mask[tok >> 5] >> (tok & 31)) & 1;
}

void ds_grammar_matcher_counts(const ds_grammar_matcher *m, long *computed, long *cached) {
    *computed = m->computed;
    *cached = m->hits;
}

// The mask of s into out (W words).
static int compute_mask(ds_grammar_matcher *m, const ds_grammar_state *s, uint32_t *out) {
    const ds_grammar_vocab *v = m->voc;
    memset(out, 0, sizeof(uint32_t) * (size_t)m->W);
    if (!s->ended && s->set > 0) {
        m->ds_set[0] = s->set;
        m->ds_cp[0] = s->cp;
        m->ds_need[0] = s->need;
        m->ds_len[0] = s->len;
        for (int i = 0; i < v->n_nodes;) {
            const int d = v->td[i];
            int32_t set = m->ds_set[d - 1];
            uint32_t cp = m->ds_cp[d - 1];
            uint8_t need = m->ds_need[d - 1], len = m->ds_len[d - 1];
            const int r = step(m, &set, &cp, &need, &len, v->tb[i]);
            if (r < 0) return -1;
            if (!r) {
                i = v->tskip[i];
                continue;
            }
            m->ds_set[d] = set;
            m->ds_cp[d] = cp;
            m->ds_need[d] = need;
            m->ds_len[d] = len;
            for (int j = 0; j < v->tn[i]; j++) {
                const int32_t t = v->sorted[v->tt[i] + j];
                out[t >> 5] |= 1u << (t & 31);
            }
            i++;
        }
    }
    int any = 0;
    for (int w = 0; w < m->W; w++) {
        out[w] &= ~m->end_mask[w];
        any |= out[w] != 0;
    }
    if (!any || ds_grammar_complete(m, s)) // complete, or a dead end: the output may only end
        for (int w = 0; w < m->W; w++) out[w] |= m->end_mask[w];
    return 0;
}

const uint32_t *ds_grammar_mask(ds_grammar_matcher *m, const ds_grammar_state *s) {
    const uint64_t key =
        s->ended ? ~0ULL : ((uint64_t)(uint32_t)s->set << 32 | (uint32_t)s->len << 27 | (uint32_t)s->need << 24 | s->cp);
    m->clock++;
    int slot = -1;
    for (int i = 0; i < m->n_cache; i++)
        if (m->cache_key[i] == key) {
            m->cache_use[i] = m->clock;
            m->hits++;
            return m->cache + (size_t)i * m->W;
        }
    if (m->n_cache == m->cap_cache && m->cap_cache < DS_MASK_CACHE) { // grow (a pointer handed out earlier is stale by now)
        const int cap = 2 * m->cap_cache < DS_MASK_CACHE ? 2 * m->cap_cache : DS_MASK_CACHE;
        uint32_t *c = realloc(m->cache, sizeof(uint32_t) * (size_t)m->W * (size_t)cap);
        if (c) {
            m->cache = c;
            m->cap_cache = cap;
        }
    }
    if (m->n_cache < m->cap_cache) {
        slot = m->n_cache++;
    } else {
        slot = 0;
        for (int i = 1; i < m->n_cache; i++)
            if (m->cache_use[i] < m->cache_use[slot]) slot = i;
    }
    uint32_t *mask = m->cache + (size_t)slot * m->W;
    m->cache_key[slot] = ~0ULL - 1; // invalid while computing
    m->err = DS_ERR_NOMEM;
    if (compute_mask(m, s, mask)) {
        ds_grammar_matcher_fail(m);
        return NULL;
    }
    m->cache_key[slot] = key;
    m->cache_use[slot] = m->clock;
    m->computed++;
    return mask;
}

int ds_grammar_accept_text(ds_grammar_matcher *m, ds_grammar_state *s, const char *text, size_t n) {
    if (s->ended) return 0;
    m->err = DS_ERR_NOMEM;
    ds_grammar_state t = *s;
    for (size_t i = 0; i < n; i++) {
        const int r = step(m, &t.set, &t.cp, &t.need, &t.len, (uint8_t)text[i]);
        if (r <= 0) return r;
    }
    *s = t;
    return 1;
}

int ds_grammar_accept(ds_grammar_matcher *m, ds_grammar_state *s, int32_t tok) {
    if (tok < 0 || tok >= m->V) return 0;
    const uint32_t *mask = ds_grammar_mask(m, s);
    if (!mask) return -1;
    if (!((mask[tok >> 5] >> (tok & 31)) & 1)) return 0;
    if (ds_grammar_is_end(m, tok)) {
        s->ended = 1;
        return 1;
    }
    const ds_grammar_vocab *v = m->voc;
    const int r = ds_grammar_accept_text(m, s, (const char *)v->bytes + v->off[tok], (size_t)(v->off[tok + 1] - v->off[tok]));
    if (r < 0) {
        ds_grammar_matcher_fail(m);
        return -1;
    }
    return 1; // (allowed by the mask: its bytes are accepted)
}

void ds_logits_mask(float *logits, const uint32_t *mask, int n) {
    for (int w = 0; w * 32 < n; w++) {
        const uint32_t b = mask[w];
        if (b == 0xFFFFFFFFu) continue;
        const int hi = n - w * 32 < 32 ? n - w * 32 : 32;
        for (int i = 0; i < hi; i++)
            if (!((b >> i) & 1)) logits[w * 32 + i] = -__builtin_inff();
    }
}

int ds_logits_mask_any(const float *logits, const uint32_t *mask, int n) {
    for (int w = 0; w * 32 < n; w++) {
        uint32_t b = mask[w];
        while (b) {
            const int i = __builtin_ctz(b);
            b &= b - 1;
            if (w * 32 + i < n && logits[w * 32 + i] > -__builtin_inff()) return 1;
        }
    }
    return 0;
}
