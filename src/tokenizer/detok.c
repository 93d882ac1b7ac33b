// Streaming detokenizer: token bytes in, only complete and valid UTF-8 out.
//
// Bytes of an unfinished character wait in d->pending (always a valid prefix of a character, so at
// most 3 bytes). A byte that cannot continue it ends it: the pending bytes (a maximal subpart)
// become one U+FFFD and the byte is read again as the start of a new character. A byte that cannot
// start a character (80..BF, C0, C1, F5..FF) is one U+FFFD. This is the W3C/WHATWG "maximal
// subpart" practice, so the output is what a conforming decoder makes of the concatenated bytes.
//
// Output size: a push writes at most 3 * (n_pending + token bytes) bytes, where n_pending <= 3;
// a flush at most 3. When that does not fit in `cap`, the call writes nothing, changes nothing and
// returns minus the number of bytes it needs, so the caller can retry with a larger buffer. For
// well-formed pieces the output is no longer than the piece plus 3 bytes, so cap >= 64 suffices
// for every piece of up to 61 bytes that is valid UTF-8 (all of stories260K's, 512 pieces).
#include <string.h>

#include "tokenizer/hf_internal.h"
#include "tokenizer/utf8.h"

static const char k_fffd[3] = {(char)0xEF, (char)0xBF, (char)0xBD};

typedef struct {
    char *out; // NULL: count only
    size_t n;
} sink;

static void put(sink *s, const void *p, size_t n) {
    if (s->out) memcpy(s->out + s->n, p, n);
    s->n += n;
}

static void feed_byte(ds_detok *d, uint8_t c, sink *s) {
    if (d->n_pending > 0) {
        uint8_t lead = d->pending[0], lo, hi;
        ds_utf8_cont_range(lead, d->n_pending, &lo, &hi);
        if (c >= lo && c <= hi) {
            d->pending[d->n_pending++] = c;
            if (d->n_pending == ds_utf8_seq_len(lead)) {
                put(s, d->pending, (size_t)d->n_pending);
                d->n_pending = 0;
            }
            return;
        }
        put(s, k_fffd, 3); // the maximal subpart so far; `c` starts afresh
        d->n_pending = 0;
    }
    int len = ds_utf8_seq_len(c);
    if (len == 0) {
        put(s, k_fffd, 3);
    } else if (len == 1) {
        put(s, &c, 1);
    } else {
        d->pending[0] = c;
        d->n_pending = 1;
    }
}

static void feed(ds_detok *d, const char *p, size_t n, sink *s) {
    for (size_t i = 0; i < n; i++) {
        uint8_t c = (uint8_t)p[i];
        if (c < 0x80 && d->n_pending == 0) { // ASCII fast path
            put(s, &c, 1);
            continue;
        }
        feed_byte(d, c, s);
    }
}

void ds_detok_init(ds_detok *d, const ds_tokenizer *t, int strip_leading_space) {
    if (!d) return;
    memset(d, 0, sizeof *d);
    d->tok = t;
    // Tokenizer.json decoders strip a leading space only with a Strip decoder (SentencePiece
    // conversions with a prefix space); byte-level and Gemma's decoders keep it.
    d->at_start = strip_leading_space != 0 && t && (t->kind == DS_TOK_SPM || (t->hf && t->hf->strip_start > 0));
}

int ds_detok_push(ds_detok *d, int32_t id, char *out, int cap) {
    if (!d || !d->tok) return 0;
    size_t n;
    const char *p = ds_tok_decoded(d->tok, id, &n);
    int at_start = d->at_start;
    if (at_start && n > 0) {
        // SentencePiece decoding: the first non-empty piece loses one leading space (the one the
        // encoder's add_space_prefix put there). Empty pieces (BOS, control) keep us at the start.
        if (p[0] == ' ') {
            p++;
            n--;
        }
        at_start = 0;
    }
    ds_detok dry = *d;
    sink count = {NULL, 0};
    feed(&dry, p, n, &count);
    if (count.n > (size_t)(cap < 0 ? 0 : cap) || (count.n > 0 && !out))
        return count.n > 0x7fffffff ? -0x7fffffff : -(int)count.n;
    sink s = {out, 0};
    feed(d, p, n, &s);
    d->at_start = at_start;
    return (int)s.n;
}

int ds_detok_flush(ds_detok *d, char *out, int cap) {
    if (!d || d->n_pending == 0) return 0;
    if (cap < 3 || !out) return -3;
    memcpy(out, k_fffd, 3);
    d->n_pending = 0;
    return 3;
}
